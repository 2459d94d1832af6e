package loglake.interop;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;

/**
 * One group member: a {@link KafkaConsumer} owned by its own thread (the consumer is not
 * thread-safe), polling until {@link #close} and recording every rebalance callback with the
 * generation it saw. Other threads read only the synchronized snapshots.
 */
final class Member implements ConsumerRebalanceListener {
    private final String name;
    private final Properties props;
    private final String topic;
    private final AtomicBoolean running = new AtomicBoolean(true);
    private final List<Map<String, Object>> events = new ArrayList<>();
    private final Set<Integer> owned = new TreeSet<>();
    private final Thread thread;
    private volatile int generation = -1;
    private volatile String memberId = "";
    private volatile Throwable failure;
    private KafkaConsumer<String, String> consumer;

    Member(Options options, String name, String group, String topic, String assignor,
            String instanceId, int sessionTimeoutMs) {
        this.name = name;
        this.topic = topic;
        this.props = Clients.consumer(options, group);
        props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignor);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "interop-" + name);
        props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, Integer.toString(sessionTimeoutMs));
        props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG,
                Integer.toString(Math.max(500, sessionTimeoutMs / 10)));
        if (instanceId != null) {
            props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instanceId);
        }
        this.thread = new Thread(this::loop, "member-" + name);
    }

    Member start() {
        thread.start();
        return this;
    }

    private void loop() {
        try {
            consumer = new KafkaConsumer<>(props);
            consumer.subscribe(List.of(topic), this);
            while (running.get()) {
                consumer.poll(Duration.ofMillis(100));
                generation = consumer.groupMetadata().generationId();
                memberId = consumer.groupMetadata().memberId();
            }
        } catch (Throwable e) {
            failure = e;
        } finally {
            if (consumer != null) {
                consumer.close(Duration.ofSeconds(10));
            }
        }
    }

    private synchronized void record(String kind, Collection<TopicPartition> partitions) {
        Map<String, Object> event = new LinkedHashMap<>();
        event.put("event", kind);
        event.put("partitions", Clients.numbers(partitions));
        generation = consumer.groupMetadata().generationId();
        memberId = consumer.groupMetadata().memberId();
        event.put("generation", generation);
        events.add(event);
        if (kind.equals("assigned")) {
            for (TopicPartition partition : partitions) {
                owned.add(partition.partition());
            }
        } else {
            for (TopicPartition partition : partitions) {
                owned.remove(partition.partition());
            }
        }
    }

    @Override
    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
        record("revoked", partitions);
    }

    @Override
    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
        record("assigned", partitions);
    }

    @Override
    public void onPartitionsLost(Collection<TopicPartition> partitions) {
        record("lost", partitions);
    }

    synchronized Set<Integer> owned() {
        return new TreeSet<>(owned);
    }

    synchronized int eventCount() {
        return events.size();
    }

    synchronized List<Map<String, Object>> events() {
        return new ArrayList<>(events);
    }

    int generation() {
        return generation;
    }

    String memberId() {
        return memberId;
    }

    void close() throws InterruptedException {
        running.set(false);
        thread.join(30_000);
        if (failure != null) {
            throw new IllegalStateException("member " + name + " failed", failure);
        }
    }

    Map<String, Object> report() {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("owned", new ArrayList<>(owned()));
        out.put("generation", generation);
        out.put("events", events());
        return out;
    }
}
