package loglake.streams;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

import loglake.common.Json;

/**
 * Writes the topology's input with an idempotent producer (acks=all): the labels table and lines
 * {@code [from, to)} of {@link Corpus}. Every send is acknowledged before the command returns, so
 * after it the input holds each line exactly once.
 */
final class InputProducer {
    private InputProducer() {
    }

    static int run(Args args) {
        Topics topics = new Topics(args.required("prefix"));
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args.required("bootstrap"));
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        long from = args.getLong("from", 0);
        long to = args.getLong("to", 0);
        boolean withLabels = Boolean.parseBoolean(args.get("labels", "false"));
        long sent = 0;
        try (KafkaProducer<String, String> producer =
                     new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            if (withLabels) {
                for (Map.Entry<String, String> label : Corpus.labels().entrySet()) {
                    producer.send(new ProducerRecord<>(topics.labels(), label.getKey(),
                            label.getValue()));
                    sent++;
                }
            }
            for (long i = from; i < to; i++) {
                producer.send(new ProducerRecord<>(topics.lines(), "line-" + i, Corpus.line(i)));
                sent++;
            }
            producer.flush();
        }
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("produced", sent);
        System.out.println(Json.write(result));
        return 0;
    }
}
