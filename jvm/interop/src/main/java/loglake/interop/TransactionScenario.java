package loglake.interop;

import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * Consume-transform-produce with {@code sendOffsetsToTransaction}: {@code records} (default
 * 300) values {@code v<i>} are written to {@code input}; a read_committed group member of
 * {@code group} turns each into {@code V<i>} on {@code output} in transactions of at most
 * {@code batch} (default 25) records, aborting every {@code abort_every}-th (default 3) and
 * re-processing it from the positions before it. Reports the transactions, the committed and
 * uncommitted views of {@code output} and the group's committed offsets.
 */
final class TransactionScenario {
    private TransactionScenario() {
    }

    static Map<String, Object> run(Options options) throws Exception {
        String input = options.text("input");
        String output = options.text("output");
        String group = options.text("group");
        int records = options.integer("records", 300);
        int batch = options.integer("batch", 25);
        int abortEvery = options.integer("abort_every", 3);

        try (KafkaProducer<String, String> plain = new KafkaProducer<>(Clients.producer(options))) {
            for (int i = 0; i < records; i++) {
                plain.send(new ProducerRecord<>(input, "k" + (i % 7), "v" + i));
            }
            plain.flush();
        }

        var consumerProps = Clients.consumer(options, group);
        consumerProps.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        consumerProps.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Integer.toString(batch));
        var producerProps = Clients.producer(options);
        producerProps.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "interop-" + group);
        int committedTxns = 0;
        int abortedTxns = 0;
        int processed = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps);
             KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps)) {
            producer.initTransactions();
            consumer.subscribe(List.of(input));
            long deadline = System.nanoTime() + options.timeout().toNanos();
            int transactions = 0;
            while (processed < records && System.nanoTime() < deadline) {
                ConsumerRecords<String, String> polled = consumer.poll(Duration.ofMillis(200));
                if (polled.isEmpty()) {
                    continue;
                }
                Map<TopicPartition, Long> before = new HashMap<>();
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                for (TopicPartition partition : polled.partitions()) {
                    List<ConsumerRecord<String, String>> part = polled.records(partition);
                    before.put(partition, part.get(0).offset());
                    next.put(partition, new OffsetAndMetadata(part.get(part.size() - 1).offset() + 1));
                }
                producer.beginTransaction();
                for (ConsumerRecord<String, String> record : polled) {
                    producer.send(new ProducerRecord<>(output, record.key(),
                            "V" + record.value().substring(1)));
                }
                producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
                transactions++;
                if (abortEvery > 0 && transactions % abortEvery == 0) {
                    producer.abortTransaction();
                    abortedTxns++;
                    before.forEach(consumer::seek);
                } else {
                    producer.commitTransaction();
                    committedTxns++;
                    processed += polled.count();
                }
            }
        }

        List<ConsumerRecord<String, String>> committed = Clients.readAll(options, output,
                "read_committed");
        List<ConsumerRecord<String, String>> uncommitted = Clients.readAll(options, output,
                "read_uncommitted");
        Set<String> values = new HashSet<>();
        int duplicates = 0;
        for (ConsumerRecord<String, String> record : committed) {
            if (!values.add(record.value())) {
                duplicates++;
            }
        }
        int missing = 0;
        for (int i = 0; i < records; i++) {
            if (!values.contains("V" + i)) {
                missing++;
            }
        }
        long groupOffsetSum = 0;
        try (Admin admin = Clients.admin(options)) {
            Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get();
            for (OffsetAndMetadata offset : offsets.values()) {
                groupOffsetSum += offset.offset();
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("records", records);
        out.put("processed", processed);
        out.put("committed_transactions", committedTxns);
        out.put("aborted_transactions", abortedTxns);
        out.put("read_committed_count", committed.size());
        out.put("read_committed_duplicates", duplicates);
        out.put("read_committed_missing", missing);
        out.put("read_uncommitted_count", uncommitted.size());
        out.put("group_offset_sum", groupOffsetSum);
        return out;
    }
}
