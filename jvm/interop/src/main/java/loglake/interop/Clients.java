package loglake.interop;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** Client settings and bounded reads shared by the scenarios (string keys and values). */
final class Clients {
    private Clients() {
    }

    static Properties producer(Options options) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, options.bootstrap());
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        return props;
    }

    static Properties consumer(Options options, String group) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, options.bootstrap());
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                StringDeserializer.class.getName());
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        if (group != null) {
            props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        return props;
    }

    static Admin admin(Options options) {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, options.bootstrap());
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG,
                (int) options.timeout().toMillis());
        return Admin.create(props);
    }

    /**
     * Every record of {@code topic} from the beginning up to the end offsets seen at the start
     * (the last stable offset at read_committed), without a group; bounded by the timeout.
     */
    static List<ConsumerRecord<String, String>> readAll(Options options, String topic,
            String isolation) {
        Properties props = consumer(options, null);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        List<ConsumerRecord<String, String>> records = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic, options.timeout())) {
                partitions.add(new TopicPartition(topic, info.partition()));
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> end = consumer.endOffsets(partitions, options.timeout());
            long deadline = System.nanoTime() + options.timeout().toNanos();
            while (!reached(consumer, end) && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    records.add(record);
                }
            }
            if (!reached(consumer, end)) {
                throw new IllegalStateException("reading " + topic + " did not reach " + end
                        + " within " + options.timeout());
            }
        }
        return records;
    }

    private static boolean reached(KafkaConsumer<String, String> consumer,
            Map<TopicPartition, Long> end) {
        for (Map.Entry<TopicPartition, Long> entry : end.entrySet()) {
            if (consumer.position(entry.getKey()) < entry.getValue()) {
                return false;
            }
        }
        return true;
    }

    /** Wait until {@code condition} holds or the timeout passes; returns whether it held. */
    static boolean waitFor(Duration timeout, BooleanSupplier condition) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (System.nanoTime() < deadline) {
            if (condition.getAsBoolean()) {
                return true;
            }
            sleep(100);
        }
        return condition.getAsBoolean();
    }

    /**
     * Wait until {@code condition} held {@code times} checks in a row (100 ms apart) or the
     * timeout passes. For cluster metadata: the Admin client asks the least loaded broker each
     * time, and a new topic reaches every broker's metadata a little apart.
     */
    static boolean waitForSteady(Duration timeout, int times, BooleanSupplier condition) {
        long deadline = System.nanoTime() + timeout.toNanos();
        int inRow = 0;
        while (System.nanoTime() < deadline) {
            inRow = condition.getAsBoolean() ? inRow + 1 : 0;
            if (inRow >= times) {
                return true;
            }
            sleep(100);
        }
        return false;
    }

    static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", e);
        }
    }

    /** {@code [0, 2]}-style sorted partition numbers of a set of topic partitions. */
    static List<Integer> numbers(Collection<TopicPartition> partitions) {
        List<Integer> out = new ArrayList<>();
        for (TopicPartition partition : partitions) {
            out.add(partition.partition());
        }
        out.sort(null);
        return out;
    }

    static Map<String, Object> error(Throwable e) {
        Throwable cause = e;
        while ((cause instanceof java.util.concurrent.ExecutionException
                || cause instanceof java.util.concurrent.CompletionException)
                && cause.getCause() != null) {
            cause = cause.getCause();
        }
        Map<String, Object> out = new HashMap<>();
        out.put("ok", false);
        out.put("error", cause.getClass().getSimpleName());
        out.put("message", String.valueOf(cause.getMessage()));
        return out;
    }
}
