package loglake.interop;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;

/** The command line: a scenario name, {@code --bootstrap SERVERS} and {@code key=value} pairs. */
record Options(String scenario, String bootstrap, Map<String, String> values) {

    static Options parse(String[] argv) {
        String bootstrap = null;
        Map<String, String> values = new HashMap<>();
        for (int i = 1; i < argv.length; i++) {
            String arg = argv[i];
            if (arg.equals("--bootstrap")) {
                if (i + 1 >= argv.length) {
                    throw new IllegalArgumentException("--bootstrap needs a value");
                }
                bootstrap = argv[++i];
            } else if (arg.contains("=")) {
                int eq = arg.indexOf('=');
                values.put(arg.substring(0, eq), arg.substring(eq + 1));
            } else {
                throw new IllegalArgumentException("unexpected argument " + arg);
            }
        }
        if (bootstrap == null) {
            throw new IllegalArgumentException("--bootstrap is required");
        }
        return new Options(argv[0], bootstrap, values);
    }

    String text(String key) {
        String value = values.get(key);
        if (value == null) {
            throw new IllegalArgumentException("missing " + key + "=...");
        }
        return value;
    }

    String text(String key, String fallback) {
        return values.getOrDefault(key, fallback);
    }

    int integer(String key, int fallback) {
        String value = values.get(key);
        return value == null ? fallback : Integer.parseInt(value);
    }

    /** The bound on every wait of the scenario ({@code timeout_s}, default 60 s). */
    Duration timeout() {
        return Duration.ofSeconds(integer("timeout_s", 60));
    }
}
