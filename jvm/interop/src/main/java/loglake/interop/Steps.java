package loglake.interop;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.Callable;

/**
 * Runs named steps of a scenario, each independently: a step's value is recorded as
 * {@code {"ok": true, "value": ...}}, its failure as {@code {"ok": false, "error":
 * "<exception class>", "message": ...}} (the cause of an ExecutionException), and the scenario
 * goes on. Not thread-safe: one scenario thread.
 */
final class Steps {
    private final Map<String, Object> results = new LinkedHashMap<>();

    Object run(String name, Callable<Object> body) {
        long started = System.nanoTime();
        Map<String, Object> entry;
        Object value = null;
        try {
            value = body.call();
            entry = new LinkedHashMap<>();
            entry.put("ok", true);
            entry.put("value", value);
        } catch (Exception e) {
            entry = new LinkedHashMap<>(Clients.error(e));
        }
        entry.put("ms", (System.nanoTime() - started) / 1_000_000);
        results.put(name, entry);
        return value;
    }

    Map<String, Object> results() {
        return results;
    }
}
