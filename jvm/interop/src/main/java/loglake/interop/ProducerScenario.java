package loglake.interop;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;

/**
 * The idempotent producer with acks=all: {@code topic}, {@code records} (default 2000) sent
 * over about {@code duration_ms} (default 0: as fast as possible, so a caller can kill a broker
 * while it runs), then read back from the beginning. Reports what was acknowledged, what came
 * back, duplicates and per-partition order (values carry the send index).
 */
final class ProducerScenario {
    private ProducerScenario() {
    }

    static Map<String, Object> idempotent(Options options) throws Exception {
        String topic = options.text("topic");
        int records = options.integer("records", 2000);
        long pauseEveryMs = records == 0 ? 0 : options.integer("duration_ms", 0) / Math.max(1, records / 100);
        var props = Clients.producer(options);
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG,
                Integer.toString((int) options.timeout().toMillis() * 2));
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        int acked = 0;
        List<String> errors = new ArrayList<>();
        Map<String, Long> lastOffset = new HashMap<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < records; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, "k" + (i % 16), "v" + i)));
                if (pauseEveryMs > 0 && i % 100 == 99) {
                    Clients.sleep(pauseEveryMs);
                }
            }
            producer.flush();
            for (Future<RecordMetadata> future : sent) {
                try {
                    RecordMetadata meta = future.get();
                    acked++;
                    lastOffset.merge(Integer.toString(meta.partition()), meta.offset(), Math::max);
                } catch (Exception e) {
                    if (errors.size() < 5) {
                        errors.add(String.valueOf(e.getCause()));
                    }
                }
            }
        }
        List<ConsumerRecord<String, String>> back = Clients.readAll(options, topic,
                "read_committed");
        Set<String> seen = new HashSet<>();
        int duplicates = 0;
        int outOfOrder = 0;
        Map<Integer, Integer> lastIndex = new HashMap<>();
        for (ConsumerRecord<String, String> record : back) {
            if (!seen.add(record.value())) {
                duplicates++;
            }
            int index = Integer.parseInt(record.value().substring(1));
            Integer previous = lastIndex.put(record.partition(), index);
            if (previous != null && previous >= index) {
                outOfOrder++;
            }
        }
        int missing = 0;
        for (int i = 0; i < records; i++) {
            if (!seen.contains("v" + i)) {
                missing++;
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("sent", records);
        out.put("acked", acked);
        out.put("send_errors", errors);
        out.put("last_offsets", lastOffset);
        out.put("consumed", back.size());
        out.put("missing", missing);
        out.put("duplicates", duplicates);
        out.put("out_of_order", outOfOrder);
        return out;
    }
}
