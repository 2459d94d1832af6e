package loglake.interop;

import java.util.LinkedHashMap;
import java.util.Map;

import loglake.common.Json;

/**
 * Entry point: {@code Interop SCENARIO --bootstrap HOST:PORT[,...] [key=value ...]}.
 *
 * <p>Runs one scenario with Apache Kafka's Java client against the cluster and prints its
 * result as one JSON object on the last line of stdout (the client's own logging goes to
 * stderr). Exit status 0 when the scenario ran to its end (its checks are the caller's), 2 for
 * bad arguments, 1 when it failed with an exception (the JSON then holds {@code "error"}).
 * Every wait inside a scenario is bounded by {@code timeout_s} (default 60).
 */
public final class Interop {
    private Interop() {
    }

    public static void main(String[] argv) {
        if (argv.length < 1) {
            usage("no scenario given");
            return;
        }
        Options options;
        try {
            options = Options.parse(argv);
        } catch (IllegalArgumentException e) {
            usage(e.getMessage());
            return;
        }
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("scenario", options.scenario());
        int status = 0;
        try {
            switch (options.scenario()) {
                case "idempotent-producer" -> result.putAll(ProducerScenario.idempotent(options));
                case "transactions" -> result.putAll(TransactionScenario.run(options));
                case "group-rebalance" -> result.putAll(GroupScenarios.rebalance(options));
                case "static-membership" -> result.putAll(GroupScenarios.staticMembership(options));
                case "admin" -> result.putAll(AdminScenario.run(options));
                case "mutation-quota" -> result.putAll(MutationQuotaScenario.run(options));
                default -> {
                    usage("unknown scenario " + options.scenario());
                    return;
                }
            }
        } catch (Exception e) {
            result.put("error", e.getClass().getName() + ": " + e.getMessage());
            e.printStackTrace();
            status = 1;
        }
        System.out.println(Json.write(result));
        System.out.flush();
        System.exit(status);
    }

    private static void usage(String problem) {
        System.err.println("interop: " + problem);
        System.err.println("usage: Interop idempotent-producer|transactions|group-rebalance|"
                + "static-membership|admin --bootstrap HOST:PORT [key=value ...]");
        System.exit(2);
    }
}
