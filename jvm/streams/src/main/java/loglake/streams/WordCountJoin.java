package loglake.streams;

import java.time.Duration;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

import loglake.common.Json;

/**
 * The word-count-with-join topology, run unchanged with {@code exactly_once_v2}.
 *
 * <pre>
 *   lines (key line id, value text)
 *     -> flatMapValues(split) -> groupBy(word)      [repartition topic: ...-words-repartition]
 *     -> count                                        [compacted changelog: ...-counts-store-changelog]
 *     -> counts topic (word -> count)
 *   counts JOIN labels table (word -> label)          [labels-store changelog, compacted]
 *     materialized as labeled-store                   [compacted changelog]
 *     -> labeled topic (word -> "label:count")
 *     -> groupBy(label) -> reduce(+, -)               [repartition + compacted changelog]
 *     -> label-totals topic (label -> sum of counts)
 * </pre>
 *
 * <p>The join is materialized: with Kafka Streams 3.9 the re-aggregation (groupBy + reduce with a
 * subtractor) of a NON-materialized KTable-KTable join over-counted the label totals by a few
 * records even without faults, on Apache Kafka as on loglake; over a materialized join it is exact.
 *
 * <p>One stream thread per process; the process prints one JSON line per state change on stdout
 * and runs until it is killed or gets SIGTERM (then it closes, bounded by 30 s).
 */
final class WordCountJoin {
    private WordCountJoin() {
    }

    static Topology build(Topics topics) {
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> lines = builder.stream(
                topics.lines(), Consumed.with(Serdes.String(), Serdes.String()));
        KTable<String, Long> counts = lines
                .flatMapValues(text -> Arrays.asList(text.split(" ")))
                .groupBy((lineId, word) -> word,
                        Grouped.with("words", Serdes.String(), Serdes.String()))
                .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts-store")
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()));
        counts.toStream().to(topics.counts(), Produced.with(Serdes.String(), Serdes.Long()));

        KTable<String, String> labels = builder.table(
                topics.labels(), Consumed.with(Serdes.String(), Serdes.String()),
                Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("labels-store")
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.String()));
        KTable<String, String> labeled = counts.join(labels, (count, label) -> label + ":" + count,
                Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("labeled-store")
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.String()));
        labeled.toStream().to(topics.labeled(), Produced.with(Serdes.String(), Serdes.String()));

        KTable<String, Long> totals = labeled
                .groupBy((word, value) -> KeyValue.pair(value.split(":")[0],
                                Long.parseLong(value.split(":")[1])),
                        Grouped.with("labels", Serdes.String(), Serdes.Long()))
                .reduce(Long::sum, (total, removed) -> total - removed,
                        Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("totals-store")
                                .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()));
        totals.toStream().to(topics.labelTotals(), Produced.with(Serdes.String(), Serdes.Long()));
        return builder.build();
    }

    static Properties config(Args args) {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args.required("application-id"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args.required("bootstrap"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, args.get("standby", "0"));
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, args.get("replication-factor", "3"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, args.required("state-dir"));
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        // a SIGKILLed instance's partitions move after 10 s instead of the default 45 s
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), "10000");
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), "1000");
        return props;
    }

    static int run(Args args) throws InterruptedException {
        Topics topics = new Topics(args.required("prefix"));
        KafkaStreams streams = new KafkaStreams(build(topics), config(args));
        CountDownLatch closed = new CountDownLatch(1);
        streams.setStateListener((newState, oldState) -> {
            Map<String, Object> event = new LinkedHashMap<>();
            event.put("event", "state");
            event.put("state", newState.name());
            event.put("previous", oldState.name());
            System.out.println(Json.write(event));
            System.out.flush();
            if (newState == KafkaStreams.State.NOT_RUNNING || newState == KafkaStreams.State.ERROR) {
                closed.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(error -> {
            Map<String, Object> event = new LinkedHashMap<>();
            event.put("event", "error");
            event.put("error", String.valueOf(error));
            System.out.println(Json.write(event));
            System.out.flush();
            // Kafka Streams' default reaction: shut this client down
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                    .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            closed.countDown();
        }));
        streams.start();
        closed.await();
        streams.close(Duration.ofSeconds(30));
        return 0;
    }
}
