package loglake.streams;

import java.util.HashMap;
import java.util.Map;

/** {@code --name value} command-line options. */
final class Args {
    private final Map<String, String> values = new HashMap<>();

    Args(String[] argv, int start) {
        for (int i = start; i < argv.length; i++) {
            String name = argv[i];
            if (!name.startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("expected --name value, got " + name);
            }
            values.put(name.substring(2), argv[++i]);
        }
    }

    String required(String name) {
        String value = values.get(name);
        if (value == null) {
            throw new IllegalArgumentException("missing --" + name);
        }
        return value;
    }

    String get(String name, String fallback) {
        return values.getOrDefault(name, fallback);
    }

    long getLong(String name, long fallback) {
        return Long.parseLong(get(name, Long.toString(fallback)));
    }
}
