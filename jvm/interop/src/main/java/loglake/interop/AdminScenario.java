package loglake.interop;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateDelegationTokenOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeReplicaLogDirsResult.ReplicaLogDirInfo;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.RaftVoterEndpoint;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.TopicPartitionReplica;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;

/**
 * The Java {@link Admin} client's calls against a cluster of at least 2 brokers, each a named
 * step (see {@link Steps}), on topics {@code <prefix>-a} (3 partitions, RF 3) and
 * {@code <prefix>-b} (1 partition, RF 1 with min.insync.replicas=1, moved to another broker
 * under replication throttles). Records written for the steps must be acknowledged (else the
 * scenario fails).
 * {@code probes} are the calls of Kafka's KRaft-era or security-only APIs loglake may not
 * serve; their outcome (error class and message) is reported for the compatibility table.
 */
final class AdminScenario {
    private AdminScenario() {
    }

    static Map<String, Object> run(Options options) throws Exception {
        String prefix = options.text("prefix");
        String a = prefix + "-a";
        String b = prefix + "-b";
        String group = prefix + "-group";
        Duration timeout = options.timeout();
        Steps steps = new Steps();
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = Clients.admin(options)) {
            List<Integer> brokers = new ArrayList<>();
            steps.run("describe_cluster", () -> {
                DescribeClusterResult cluster = admin.describeCluster();
                for (Node node : cluster.nodes().get()) {
                    brokers.add(node.id());
                }
                brokers.sort(null);
                Map<String, Object> value = new LinkedHashMap<>();
                value.put("brokers", brokers);
                value.put("controller", cluster.controller().get().id());
                value.put("cluster_id", cluster.clusterId().get());
                return value;
            });
            topics(admin, steps, a, b, timeout);
            configs(admin, steps, a);
            steps.run("create_partitions", () -> {
                admin.createPartitions(Map.of(a, NewPartitions.increaseTo(5))).all().get();
                Clients.waitForSteady(timeout, 10, () -> partitions(admin, a).size() == 5
                        && partitions(admin, a).stream().allMatch(p -> p.leader() != null));
                return partitions(admin, a).size();
            });
            produce(options, a, 0, 100);
            produce(options, b, 0, 200);
            records(admin, steps, new TopicPartition(a, 0));
            groups(options, admin, steps, group, new TopicPartition(a, 0));
            logDirs(admin, steps, a, brokers);
            steps.run("elect_leaders_preferred", () -> {
                Set<TopicPartition> all = Set.of(new TopicPartition(a, 0),
                        new TopicPartition(a, 1), new TopicPartition(a, 2));
                Map<String, Object> value = new TreeMap<>();
                admin.electLeaders(ElectionType.PREFERRED, all).partitions().get().forEach(
                        (partition, failure) -> value.put(partition.toString(),
                                failure.map(e -> e.getClass().getSimpleName()).orElse("elected")));
                return value;
            });
            reassignment(admin, steps, b, brokers, timeout);
            quotas(admin, steps);
            scram(admin, steps);
            steps.run("describe_features", () ->
                    admin.describeFeatures().featureMetadata().get().finalizedFeatures().keySet());
            steps.run("describe_acls", () ->
                    admin.describeAcls(AclBindingFilter.ANY).values().get().size());
            steps.run("list_transactions", () -> admin.listTransactions().all().get().size());
            steps.run("describe_producers", () -> admin.describeProducers(
                    List.of(new TopicPartition(a, 0))).partitionResult(new TopicPartition(a, 0))
                    .get().activeProducers().size());
            steps.run("fence_producers", () -> {
                admin.fenceProducers(List.of(prefix + "-fenced")).all().get();
                return true;
            });
            steps.run("delete_topics", () -> {
                admin.deleteTopics(List.of(b)).all().get();
                return Clients.waitFor(timeout, () -> !names(admin).contains(b));
            });
            out.put("steps", steps.results());
            out.put("probes", probes(admin, a, brokers));
        }
        return out;
    }

    private static void topics(Admin admin, Steps steps, String a, String b, Duration timeout) {
        steps.run("create_topics", () -> {
            admin.createTopics(List.of(
                    new NewTopic(a, 3, (short) 3).configs(Map.of("retention.ms", "3600000")),
                    new NewTopic(b, 1, (short) 1).configs(Map.of("min.insync.replicas", "1"))))
                    .all().get();
            return Clients.waitForSteady(timeout, 10, () -> {
                List<TopicPartitionInfo> one = partitions(admin, a);
                List<TopicPartitionInfo> two = partitions(admin, b);
                return one.size() == 3 && two.size() == 1
                        && one.stream().allMatch(p -> p.leader() != null && p.isr().size() == 3)
                        && two.get(0).leader() != null;
            });
        });
        steps.run("list_topics", () -> names(admin).containsAll(List.of(a, b)));
        steps.run("describe_topics", () -> {
            TopicDescription description = admin.describeTopics(List.of(a)).allTopicNames().get()
                    .get(a);
            Map<String, Object> value = new LinkedHashMap<>();
            value.put("partitions", description.partitions().size());
            value.put("replicas", description.partitions().get(0).replicas().size());
            value.put("topic_id_set", !Uuid.ZERO_UUID.equals(description.topicId()));
            return value;
        });
    }

    @SuppressWarnings("deprecation")
    private static void configs(Admin admin, Steps steps, String a) {
        ConfigResource topic = new ConfigResource(ConfigResource.Type.TOPIC, a);
        steps.run("describe_configs_topic", () -> configValue(admin, topic, "retention.ms"));
        steps.run("describe_configs_broker", () -> admin.describeConfigs(List.of(
                new ConfigResource(ConfigResource.Type.BROKER, "1"))).all().get().values()
                .iterator().next().entries().size());
        steps.run("incremental_alter_configs", () -> {
            admin.incrementalAlterConfigs(Map.of(topic, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"),
                            AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact,delete"),
                            AlterConfigOp.OpType.SET)))).all().get();
            return configValue(admin, topic, "retention.ms") + " "
                    + configValue(admin, topic, "cleanup.policy");
        });
        steps.run("alter_configs", () -> {
            admin.alterConfigs(Map.of(topic, new Config(List.of(
                    new ConfigEntry("retention.ms", "5400000"),
                    new ConfigEntry("cleanup.policy", "delete"))))).all().get();
            return configValue(admin, topic, "retention.ms") + " "
                    + configValue(admin, topic, "cleanup.policy");
        });
    }

    private static void records(Admin admin, Steps steps, TopicPartition partition) {
        steps.run("delete_records", () -> admin.deleteRecords(
                Map.of(partition, RecordsToDelete.beforeOffset(40))).lowWatermarks()
                .get(partition).get().lowWatermark());
        steps.run("list_offsets", () -> {
            Map<String, Object> value = new LinkedHashMap<>();
            value.put("earliest", admin.listOffsets(Map.of(partition, OffsetSpec.earliest()))
                    .partitionResult(partition).get().offset());
            value.put("latest", admin.listOffsets(Map.of(partition, OffsetSpec.latest()))
                    .partitionResult(partition).get().offset());
            value.put("max_timestamp", admin.listOffsets(
                    Map.of(partition, OffsetSpec.maxTimestamp())).partitionResult(partition)
                    .get().offset());
            return value;
        });
    }

    private static void groups(Options options, Admin admin, Steps steps, String group,
            TopicPartition partition) {
        steps.run("commit_offsets", () -> {
            try (KafkaConsumer<String, String> consumer =
                         new KafkaConsumer<>(Clients.consumer(options, group))) {
                consumer.assign(List.of(partition));
                consumer.commitSync(Map.of(partition, new OffsetAndMetadata(50)));
            }
            return true;
        });
        steps.run("list_consumer_groups", () -> {
            List<String> ids = new ArrayList<>();
            for (ConsumerGroupListing listing : admin.listConsumerGroups().all().get()) {
                ids.add(listing.groupId());
            }
            return ids.contains(group);
        });
        steps.run("describe_consumer_groups", () -> admin.describeConsumerGroups(List.of(group))
                .describedGroups().get(group).get().state().toString());
        steps.run("list_consumer_group_offsets", () -> groupOffset(admin, group, partition));
        steps.run("alter_consumer_group_offsets", () -> {
            admin.alterConsumerGroupOffsets(group, Map.of(partition, new OffsetAndMetadata(60)))
                    .all().get();
            return groupOffset(admin, group, partition);
        });
        steps.run("delete_consumer_group_offsets", () -> {
            admin.deleteConsumerGroupOffsets(group, Set.of(partition)).all().get();
            return groupOffset(admin, group, partition);
        });
        steps.run("delete_consumer_groups", () -> {
            admin.deleteConsumerGroups(List.of(group)).all().get();
            List<String> ids = new ArrayList<>();
            for (ConsumerGroupListing listing : admin.listConsumerGroups().all().get()) {
                ids.add(listing.groupId());
            }
            return !ids.contains(group);
        });
    }

    private static void logDirs(Admin admin, Steps steps, String a, List<Integer> brokers) {
        steps.run("describe_log_dirs", () -> {
            Map<String, Object> value = new TreeMap<>();
            Map<Integer, Map<String, LogDirDescription>> all =
                    admin.describeLogDirs(brokers).allDescriptions().get();
            for (Map.Entry<Integer, Map<String, LogDirDescription>> broker : all.entrySet()) {
                int replicas = 0;
                for (LogDirDescription dir : broker.getValue().values()) {
                    for (Map.Entry<TopicPartition, ReplicaInfo> replica
                            : dir.replicaInfos().entrySet()) {
                        if (replica.getKey().topic().equals(a)) {
                            replicas++;
                        }
                    }
                }
                value.put(Integer.toString(broker.getKey()), replicas);
            }
            return value;
        });
        steps.run("describe_replica_log_dirs", () -> {
            TopicPartitionReplica replica = new TopicPartitionReplica(a, 0, brokers.get(0));
            ReplicaLogDirInfo info = admin.describeReplicaLogDirs(List.of(replica)).all().get()
                    .get(replica);
            return info.getCurrentReplicaLogDir() != null;
        });
    }

    private static void reassignment(Admin admin, Steps steps, String b, List<Integer> brokers,
            Duration timeout) {
        TopicPartition partition = new TopicPartition(b, 0);
        int from = partitions(admin, b).get(0).leader().id();
        int to = brokers.stream().filter(id -> id != from).findFirst().orElseThrow();
        ConfigResource topic = new ConfigResource(ConfigResource.Type.TOPIC, b);
        ConfigResource source = new ConfigResource(ConfigResource.Type.BROKER, Integer.toString(from));
        ConfigResource target = new ConfigResource(ConfigResource.Type.BROKER, Integer.toString(to));
        steps.run("set_replication_throttles", () -> {
            admin.incrementalAlterConfigs(Map.of(
                    source, List.of(set("leader.replication.throttled.rate", "10485760")),
                    target, List.of(set("follower.replication.throttled.rate", "10485760")),
                    topic, List.of(set("leader.replication.throttled.replicas", "0:" + from),
                            set("follower.replication.throttled.replicas", "0:" + to))))
                    .all().get();
            // Kafka's brokers apply their dynamic configs from a ZooKeeper notification, the
            // receiving one too: wait (bounded) until the describe shows the new rate
            Clients.waitFor(timeout, () -> "10485760".equals(quietValue(admin, target,
                    "follower.replication.throttled.rate")));
            return configValue(admin, target, "follower.replication.throttled.rate") + " "
                    + configValue(admin, topic, "follower.replication.throttled.replicas");
        });
        steps.run("alter_partition_reassignments", () -> {
            admin.alterPartitionReassignments(Map.of(partition,
                    Optional.of(new NewPartitionReassignment(List.of(to))))).all().get();
            return List.of(from, to);
        });
        steps.run("list_partition_reassignments", () -> {
            Map<TopicPartition, PartitionReassignment> now =
                    admin.listPartitionReassignments().reassignments().get();
            PartitionReassignment mine = now.get(partition);
            return mine == null ? "done" : "adding " + mine.addingReplicas();
        });
        steps.run("reassignment_completed", () -> {
            boolean done = Clients.waitFor(timeout, () -> {
                List<TopicPartitionInfo> info = partitions(admin, b);
                return info.size() == 1 && info.get(0).replicas().size() == 1
                        && info.get(0).replicas().get(0).id() == to
                        && reassignments(admin).isEmpty();
            });
            return done ? partitions(admin, b).get(0).replicas().get(0).id() : -1;
        });
        steps.run("remove_replication_throttles", () -> {
            admin.incrementalAlterConfigs(Map.of(
                    source, List.of(delete("leader.replication.throttled.rate")),
                    target, List.of(delete("follower.replication.throttled.rate")),
                    topic, List.of(delete("leader.replication.throttled.replicas"),
                            delete("follower.replication.throttled.replicas")))).all().get();
            return configValue(admin, topic, "follower.replication.throttled.replicas");
        });
    }

    private static void quotas(Admin admin, Steps steps) {
        ClientQuotaEntity user = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, "alice"));
        ClientQuotaEntity client = new ClientQuotaEntity(
                Map.of(ClientQuotaEntity.CLIENT_ID, "interop-client"));
        steps.run("alter_client_quotas", () -> {
            admin.alterClientQuotas(List.of(
                    new ClientQuotaAlteration(user, List.of(
                            new ClientQuotaAlteration.Op("producer_byte_rate", 1048576.0))),
                    new ClientQuotaAlteration(client, List.of(
                            new ClientQuotaAlteration.Op("consumer_byte_rate", 2097152.0)))))
                    .all().get();
            return true;
        });
        steps.run("describe_client_quotas", () -> {
            Map<String, Object> value = new TreeMap<>();
            describeQuotas(admin, ClientQuotaEntity.USER, "alice").forEach(value::put);
            describeQuotas(admin, ClientQuotaEntity.CLIENT_ID, "interop-client")
                    .forEach(value::put);
            return value;
        });
        steps.run("remove_client_quotas", () -> {
            admin.alterClientQuotas(List.of(
                    new ClientQuotaAlteration(user, List.of(
                            new ClientQuotaAlteration.Op("producer_byte_rate", null))),
                    new ClientQuotaAlteration(client, List.of(
                            new ClientQuotaAlteration.Op("consumer_byte_rate", null)))))
                    .all().get();
            return describeQuotas(admin, ClientQuotaEntity.USER, "alice").size();
        });
    }

    private static Map<String, Double> describeQuotas(Admin admin, String type, String name)
            throws Exception {
        Map<String, Double> value = new TreeMap<>();
        admin.describeClientQuotas(ClientQuotaFilter.containsOnly(List.of(
                ClientQuotaFilterComponent.ofEntity(type, name)))).entities().get()
                .values().forEach(value::putAll);
        return value;
    }

    private static void scram(Admin admin, Steps steps) {
        steps.run("alter_user_scram_credentials", () -> {
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion("alice",
                    new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                    "alice-secret"))).all().get();
            return true;
        });
        steps.run("describe_user_scram_credentials", () -> {
            List<String> value = new ArrayList<>();
            for (ScramCredentialInfo info : admin.describeUserScramCredentials(List.of("alice"))
                    .description("alice").get().credentialInfos()) {
                value.add(info.mechanism() + ":" + info.iterations());
            }
            return value;
        });
        steps.run("delete_user_scram_credentials", () -> {
            admin.alterUserScramCredentials(List.of(new UserScramCredentialDeletion("alice",
                    ScramMechanism.SCRAM_SHA_256))).all().get();
            return admin.describeUserScramCredentials().users().get().contains("alice");
        });
    }

    /** Calls of APIs loglake may not serve: each one's outcome, for the compatibility table. */
    private static Map<String, Object> probes(Admin admin, String a, List<Integer> brokers) {
        Steps probes = new Steps();
        probes.run("describeMetadataQuorum (DescribeQuorum)", () ->
                admin.describeMetadataQuorum().quorumInfo().get().leaderId());
        probes.run("alterReplicaLogDirs (AlterReplicaLogDirs)", () -> {
            TopicPartitionReplica replica = new TopicPartitionReplica(a, 0, brokers.get(0));
            admin.alterReplicaLogDirs(Map.of(replica, "/nonexistent-dir")).all().get();
            return true;
        });
        probes.run("createDelegationToken (CreateDelegationToken)", () ->
                admin.createDelegationToken(new CreateDelegationTokenOptions())
                        .delegationToken().get().tokenInfo().tokenId());
        probes.run("describeDelegationToken (DescribeDelegationToken)", () ->
                admin.describeDelegationToken().delegationTokens().get().size());
        probes.run("updateFeatures (UpdateFeatures)", () -> {
            admin.updateFeatures(Map.of("interop.feature", new FeatureUpdate((short) 1,
                    FeatureUpdate.UpgradeType.UPGRADE)), new UpdateFeaturesOptions()
                    .validateOnly(true)).all().get();
            return true;
        });
        probes.run("unregisterBroker (UnregisterBroker)", () -> {
            admin.unregisterBroker(999).all().get();
            return true;
        });
        probes.run("listClientMetricsResources (ListClientMetricsResources)", () ->
                admin.listClientMetricsResources().all().get().size());
        probes.run("addRaftVoter (AddRaftVoter)", () -> {
            admin.addRaftVoter(999, Uuid.randomUuid(), Set.of(
                    new RaftVoterEndpoint("CONTROLLER", "127.0.0.1", 9))).all().get();
            return true;
        });
        probes.run("removeRaftVoter (RemoveRaftVoter)", () -> {
            admin.removeRaftVoter(999, Uuid.randomUuid()).all().get();
            return true;
        });
        return probes.results();
    }

    private static AlterConfigOp set(String name, String value) {
        return new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET);
    }

    private static AlterConfigOp delete(String name) {
        return new AlterConfigOp(new ConfigEntry(name, null), AlterConfigOp.OpType.DELETE);
    }

    private static String configValue(Admin admin, ConfigResource resource, String name)
            throws Exception {
        ConfigEntry entry = admin.describeConfigs(List.of(resource)).all().get().get(resource)
                .get(name);
        return entry == null ? null : entry.value();
    }

    private static String quietValue(Admin admin, ConfigResource resource, String name) {
        try {
            return configValue(admin, resource, name);
        } catch (Exception e) {
            return null;
        }
    }

    private static Long groupOffset(Admin admin, String group, TopicPartition partition)
            throws Exception {
        OffsetAndMetadata offset = admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get().get(partition);
        return offset == null ? null : offset.offset();
    }

    private static List<TopicPartitionInfo> partitions(Admin admin, String topic) {
        try {
            return admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic)
                    .partitions();
        } catch (Exception e) {
            return List.of();
        }
    }

    private static Set<String> names(Admin admin) {
        try {
            return admin.listTopics().names().get();
        } catch (Exception e) {
            return Set.of();
        }
    }

    private static Collection<PartitionReassignment> reassignments(Admin admin) {
        try {
            return admin.listPartitionReassignments().reassignments().get().values();
        } catch (Exception e) {
            return List.of(new PartitionReassignment(List.of(), List.of(), List.of()));
        }
    }

    private static void produce(Options options, String topic, int partition, int count)
            throws Exception {
        try (KafkaProducer<String, String> producer =
                     new KafkaProducer<>(Clients.producer(options))) {
            List<java.util.concurrent.Future<?>> sent = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, partition, "k" + i, "v" + i)));
            }
            producer.flush();
            for (java.util.concurrent.Future<?> future : sent) {
                future.get();
            }
        }
    }

}
