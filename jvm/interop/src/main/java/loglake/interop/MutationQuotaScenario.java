package loglake.interop;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.errors.ThrottlingQuotaExceededException;

/**
 * KIP-599 as a Java AdminClient user sees it, with {@code client_id} under a
 * {@code controller_mutation_rate} quota: {@code strict_count} topics of {@code partitions}
 * partitions created at once with {@code retryOnQuotaViolation(false)} (each topic's outcome:
 * "created" or the exception's simple name, with its throttle time), then {@code retry_count}
 * more with the default options (the client retries throttled topics by itself until its
 * timeout), timed.
 */
final class MutationQuotaScenario {
    private MutationQuotaScenario() {
    }

    static Map<String, Object> run(Options options) throws Exception {
        String prefix = options.text("prefix");
        int partitions = options.integer("partitions", 1);
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, options.bootstrap());
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, options.text("client_id"));
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG,
                (int) options.timeout().toMillis());
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = Admin.create(props)) {
            List<NewTopic> strict = topics(prefix + "-s", options.integer("strict_count", 4),
                    partitions);
            CreateTopicsResult result = admin.createTopics(strict,
                    new CreateTopicsOptions().retryOnQuotaViolation(false));
            Map<String, Object> outcomes = new LinkedHashMap<>();
            List<Integer> throttles = new ArrayList<>();
            for (Map.Entry<String, KafkaFuture<Void>> entry : result.values().entrySet()) {
                try {
                    entry.getValue().get();
                    outcomes.put(entry.getKey(), "created");
                } catch (ExecutionException e) {
                    Throwable cause = e.getCause();
                    outcomes.put(entry.getKey(), cause.getClass().getSimpleName());
                    if (cause instanceof ThrottlingQuotaExceededException throttled) {
                        throttles.add(throttled.throttleTimeMs());
                    }
                }
            }
            out.put("strict", outcomes);
            out.put("throttle_time_ms", throttles);
            List<NewTopic> retried = topics(prefix + "-r", options.integer("retry_count", 3),
                    partitions);
            long started = System.nanoTime();
            String retryOutcome = "created";
            try {
                admin.createTopics(retried).all().get();
            } catch (ExecutionException e) {
                retryOutcome = e.getCause().getClass().getSimpleName();
            }
            out.put("retried", retryOutcome);
            out.put("retried_ms", (System.nanoTime() - started) / 1_000_000);
        }
        return out;
    }

    private static List<NewTopic> topics(String prefix, int count, int partitions) {
        List<NewTopic> topics = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            topics.add(new NewTopic(prefix + "-" + i, partitions, (short) 1));
        }
        return topics;
    }
}
