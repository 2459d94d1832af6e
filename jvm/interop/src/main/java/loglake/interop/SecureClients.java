package loglake.interop;

import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

import loglake.common.Json;

/**
 * Entry point: {@code SecureClients MODE --bootstrap HOST:PORT config=FILE topic=T [count=N]
 * [group=G] [pause_ms=P] [timeout_s=S]}.
 *
 * <p>Apache Kafka's Java producer and consumer with the client properties of {@code FILE}
 * (security.protocol, sasl.*, ssl.*: exactly what an operator puts in a client.properties).
 * MODE {@code roundtrip} produces {@code count} records ({@code "v0"}, {@code "v1"}, ...,
 * acks=all, each send awaited) then consumes them with a consumer in group {@code group}
 * (subscribe, from the earliest offset); {@code produce} only produces; {@code consume} only
 * consumes. Prints one JSON object on the last stdout line: {@code {"ok": true, "produced": N,
 * "values": [...]}} or, when the client threw, {@code {"ok": false, "stage": "produce"|"consume",
 * "error": "<exception class simple name>", "cause": "<its cause's simple name>", "message":
 * ...}} (e.g. TopicAuthorizationException, SaslAuthenticationException,
 * SslAuthenticationException). A successful produce also reports the producer's own
 * connection metrics ({@code "producer_metrics"}: connection-creation-total,
 * successful-reauthentication-total, failed-reauthentication-total; KIP-368), and
 * {@code pause_ms} waits that long after each send (so a run can outlast a SASL session).
 * Refusals are results the caller checks, so the exit status is 0
 * for both; 2 for bad arguments. Every wait is bounded by {@code timeout_s} (default 60):
 * max.block.ms, delivery.timeout.ms and the consume loop.
 */
public final class SecureClients {
    private static final List<String> REPORTED = List.of("connection-creation-total",
            "successful-reauthentication-total", "failed-reauthentication-total");

    private SecureClients() {
    }

    public static void main(String[] argv) {
        Options options;
        Properties security;
        try {
            options = Options.parse(argv);
            security = load(options.text("config"));
            options.text("topic");
        } catch (IllegalArgumentException | IOException e) {
            System.err.println("secure-clients: " + e.getMessage());
            System.err.println("usage: SecureClients roundtrip|produce|consume --bootstrap "
                    + "HOST:PORT config=FILE topic=T [count=N] [group=G] [timeout_s=S]");
            System.exit(2);
            return;
        }
        String mode = options.scenario();
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("mode", mode);
        String stage = "produce";
        try {
            if (mode.equals("roundtrip") || mode.equals("produce")) {
                Map<String, Object> metrics = new LinkedHashMap<>();
                result.put("produced", produce(options, security, metrics));
                result.put("producer_metrics", metrics);
            }
            stage = "consume";
            if (mode.equals("roundtrip") || mode.equals("consume")) {
                result.put("values", consume(options, security));
            }
            result.put("ok", true);
        } catch (Exception e) {
            result.putAll(Clients.error(e));
            result.put("stage", stage);
            Throwable cause = unwrap(e).getCause();
            result.put("cause", cause == null ? null : cause.getClass().getSimpleName());
        }
        System.out.println(Json.write(result));
        System.out.flush();
        System.exit(0);
    }

    private static Properties load(String path) throws IOException {
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(path)) {
            props.load(in);
        }
        return props;
    }

    private static Throwable unwrap(Throwable e) {
        Throwable cause = e;
        while ((cause instanceof java.util.concurrent.ExecutionException
                || cause instanceof org.apache.kafka.common.KafkaException
                        && cause.getClass() == org.apache.kafka.common.KafkaException.class)
                && cause.getCause() != null) {
            cause = cause.getCause();
        }
        return cause;
    }

    private static int produce(Options options, Properties security, Map<String, Object> metrics)
            throws Exception {
        Properties props = new Properties();
        props.putAll(security);
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, options.bootstrap());
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        int timeoutMs = (int) options.timeout().toMillis();
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, timeoutMs);
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, Math.min(timeoutMs, 30000));
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, timeoutMs);
        props.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        String topic = options.text("topic");
        int count = options.integer("count", 10);
        int pauseMs = options.integer("pause_ms", 0);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i))
                        .get(timeoutMs, TimeUnit.MILLISECONDS);
                if (pauseMs > 0) {
                    Clients.sleep(pauseMs);
                }
            }
            producer.flush();
            for (Map.Entry<MetricName, ? extends Metric> entry : producer.metrics().entrySet()) {
                MetricName name = entry.getKey();
                if (name.group().equals("producer-metrics") && REPORTED.contains(name.name())) {
                    metrics.put(name.name(), entry.getValue().metricValue());
                }
            }
        }
        return count;
    }

    private static List<String> consume(Options options, Properties security) {
        Properties props = new Properties();
        props.putAll(security);
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, options.bootstrap());
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                StringDeserializer.class.getName());
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.GROUP_ID_CONFIG, options.text("group", "secure-clients"));
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, (int) options.timeout().toMillis());
        int count = options.integer("count", 10);
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(options.text("topic")));
            long deadline = System.nanoTime() + options.timeout().toNanos();
            while (values.size() < count && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    values.add(record.value());
                }
            }
            if (values.size() >= count) {
                consumer.commitSync(options.timeout());
            }
        }
        return values;
    }
}
