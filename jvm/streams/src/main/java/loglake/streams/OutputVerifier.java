package loglake.streams;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;

import loglake.common.Json;

/**
 * Reads the topology's three output topics from the beginning with a read_committed consumer
 * until the latest value of every key equals what {@link Corpus} says for {@code --lines N}
 * input lines, or until {@code --timeout-s}; prints what it saw.
 *
 * <p>Also checks the exactly-once invariant of the counts topic: the committed values of one
 * word only ever grow (a value that repeats or falls means input was counted twice or state was
 * lost); each such step is a "regression".
 */
final class OutputVerifier {
    private static final StringDeserializer STRINGS = new StringDeserializer();
    private static final LongDeserializer LONGS = new LongDeserializer();

    private OutputVerifier() {
    }

    static int run(Args args) {
        Topics topics = new Topics(args.required("prefix"));
        long lines = args.getLong("lines", 0);
        long deadline = System.nanoTime() + args.getLong("timeout-s", 120) * 1_000_000_000L;
        Map<String, Long> expectedCounts = Corpus.counts(lines);
        Map<String, String> expectedLabeled = Corpus.labeled(expectedCounts);
        Map<String, Long> expectedTotals = Corpus.labelTotals(expectedCounts);

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.required("bootstrap"));
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        Map<String, Long> counts = new TreeMap<>();
        Map<String, String> labeled = new TreeMap<>();
        Map<String, Long> totals = new TreeMap<>();
        List<String> regressions = new ArrayList<>();
        long records = 0;
        boolean match = false;
        boolean caughtUp = false;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(
                props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (String topic : List.of(topics.counts(), topics.labeled(), topics.labelTotals())) {
                for (PartitionInfo info : consumer.partitionsFor(topic, Duration.ofSeconds(30))) {
                    partitions.add(new TopicPartition(topic, info.partition()));
                }
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            while (System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(500))) {
                    records++;
                    String key = STRINGS.deserialize(record.topic(), record.key());
                    if (record.topic().equals(topics.counts())) {
                        Long value = LONGS.deserialize(record.topic(), record.value());
                        Long previous = counts.put(key, value);
                        if (previous != null && value != null && value <= previous) {
                            regressions.add(key + ": " + previous + " -> " + value);
                        }
                    } else if (record.topic().equals(topics.labeled())) {
                        labeled.put(key, STRINGS.deserialize(record.topic(), record.value()));
                    } else {
                        totals.put(key, LONGS.deserialize(record.topic(), record.value()));
                    }
                }
                caughtUp = caughtUp(consumer, partitions);
                match = caughtUp && counts.equals(expectedCounts) && labeled.equals(expectedLabeled)
                        && totals.equals(expectedTotals);
                if (match) {
                    break;
                }
            }
        }
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("match", match);
        result.put("caught_up", caughtUp);
        result.put("lines", lines);
        result.put("records", records);
        result.put("regressions", regressions.size());
        result.put("regression_examples", regressions.subList(0, Math.min(10, regressions.size())));
        result.put("counts", counts);
        result.put("labeled", labeled);
        result.put("label_totals", totals);
        result.put("expected_counts", expectedCounts);
        result.put("expected_label_totals", expectedTotals);
        System.out.println(Json.write(result));
        return 0;
    }

    private static boolean caughtUp(KafkaConsumer<byte[], byte[]> consumer,
                                    List<TopicPartition> partitions) {
        Map<TopicPartition, Long> ends = new HashMap<>(
                consumer.endOffsets(partitions, Duration.ofSeconds(30)));
        for (TopicPartition partition : partitions) {
            if (consumer.position(partition, Duration.ofSeconds(30)) < ends.get(partition)) {
                return false;
            }
        }
        return true;
    }
}
