package loglake.interop;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.RangeAssignor;

/**
 * Consumer-group scenarios on {@code topic} with {@code partitions} partitions (default 4) and
 * group {@code group}.
 *
 * <ul>
 * <li>{@code group-rebalance assignor=range|cooperative-sticky}: member a alone, then b joins,
 * then b leaves; the owned partitions and every rebalance callback per phase.</li>
 * <li>{@code static-membership session_ms=N}: members a and b with {@code group.instance.id};
 * b is closed (a static member sends no LeaveGroup) and restarted with the same instance id
 * within the session timeout; reports whether anything was rebalanced.</li>
 * </ul>
 */
final class GroupScenarios {
    private GroupScenarios() {
    }

    static Map<String, Object> rebalance(Options options) throws Exception {
        String topic = options.text("topic");
        String group = options.text("group");
        int partitions = options.integer("partitions", 4);
        String assignor = switch (options.text("assignor", "range")) {
            case "range" -> RangeAssignor.class.getName();
            case "cooperative-sticky" -> CooperativeStickyAssignor.class.getName();
            default -> throw new IllegalArgumentException("assignor: range or cooperative-sticky");
        };
        Map<String, Object> out = new LinkedHashMap<>();
        Member a = new Member(options, "a", group, topic, assignor, null, 10_000).start();
        Member b = null;
        try {
            out.put("a_alone", Clients.waitFor(options.timeout(),
                    () -> a.owned().size() == partitions));
            out.put("phase1", snapshot(a, null));
            Member joined = new Member(options, "b", group, topic, assignor, null, 10_000).start();
            b = joined;
            out.put("shared", Clients.waitFor(options.timeout(),
                    () -> covers(partitions, a, joined)));
            out.put("phase2", snapshot(a, joined));
            joined.close();
            out.put("a_after_leave", Clients.waitFor(options.timeout(),
                    () -> a.owned().size() == partitions));
            out.put("phase3", snapshot(a, null));
        } finally {
            a.close();
            if (b != null) {
                b.close();
            }
        }
        out.put("a", a.report());
        out.put("b", b == null ? null : b.report());
        return out;
    }

    static Map<String, Object> staticMembership(Options options) throws Exception {
        String topic = options.text("topic");
        String group = options.text("group");
        int partitions = options.integer("partitions", 4);
        int sessionMs = options.integer("session_ms", 30_000);
        String assignor = RangeAssignor.class.getName();
        Map<String, Object> out = new LinkedHashMap<>();
        Member a = new Member(options, "a", group, topic, assignor, "instance-a", sessionMs).start();
        Member b = new Member(options, "b", group, topic, assignor, "instance-b", sessionMs).start();
        Member b2 = null;
        try {
            out.put("stable", Clients.waitFor(options.timeout(), () -> covers(partitions, a, b)));
            Set<Integer> bOwned = b.owned();
            int generation = a.generation();
            int aEvents = a.eventCount();
            out.put("before", snapshot(a, b));
            long closedAt = System.nanoTime();
            b.close();
            Member restarted = new Member(options, "b2", group, topic, assignor, "instance-b",
                    sessionMs).start();
            b2 = restarted;
            out.put("rejoined", Clients.waitFor(options.timeout(),
                    () -> !restarted.owned().isEmpty()));
            out.put("restart_ms", (System.nanoTime() - closedAt) / 1_000_000);
            // a quiet window of a few heartbeats: a rebalance would show up as a callback on a
            Clients.sleep(Math.max(3000, sessionMs / 5));
            out.put("after", snapshot(a, restarted));
            out.put("same_partitions", restarted.owned().equals(bOwned));
            out.put("generation_before", generation);
            out.put("generation_after", a.generation());
            out.put("restarted_generation", restarted.generation());
            out.put("a_callbacks_after_restart", a.eventCount() - aEvents);
        } finally {
            a.close();
            if (b2 != null) {
                b2.close();
            }
        }
        out.put("a", a.report());
        out.put("b2", b2 == null ? null : b2.report());
        return out;
    }

    private static boolean covers(int partitions, Member first, Member second) {
        Set<Integer> one = first.owned();
        Set<Integer> two = second.owned();
        if (one.isEmpty() || two.isEmpty()) {
            return false;
        }
        Set<Integer> all = new HashSet<>(one);
        all.addAll(two);
        return all.size() == partitions && one.size() + two.size() == partitions;
    }

    private static Map<String, Object> snapshot(Member first, Member second) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("a", new ArrayList<>(first.owned()));
        out.put("a_generation", first.generation());
        if (second != null) {
            out.put("b", new ArrayList<>(second.owned()));
            out.put("b_generation", second.generation());
        }
        return out;
    }
}
