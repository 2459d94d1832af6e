"""Apache Kafka's Java client (kafka-clients 3.9.2) against a loglake cluster, unchanged.

The scenarios are Java programs in ``jvm/interop`` (built once per session by the
``interop_jar`` fixture, tests/java_interop.py); each prints a JSON result that these tests
check. One 3-broker cluster (on the session's ZooKeeper) serves the module: replication matters
for acks=all, min.insync.replicas, leader elections and reassignments. The client scenarios
and the admin scenario also run against Apache Kafka 3.9 (the session's ``kafka_peer``), so
every expectation here is Kafka's own behaviour.

* idempotent producer, acks=all: every acknowledged record read back once, in order per
  partition (also while the partition leader is SIGKILLed: slow);
* transactions: consume-transform-produce with ``sendOffsetsToTransaction``, some transactions
  aborted: read_committed sees each output once, read_uncommitted sees the aborted ones too,
  the group's offsets cover the input;
* consumer groups: eager (range) revokes everything on a rebalance, cooperative-sticky only the
  partitions that move; static membership (``group.instance.id``): a restart within the session
  timeout causes no rebalance;
* AdminClient: every call the issue names, and the calls loglake does not implement answer
  with the error the README's "Kafka API compatibility" section lists.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import pytest

from loglake.dev.harness import DevCluster, wait_until
from loglake.dev.kafka_peer import KafkaPeer
from tests.java_interop import interop_jar, run_scenario, scenario_result, start_scenario

__all__ = ["interop_jar"]  # the fixture, imported for pytest

pytestmark = pytest.mark.timeout(300)

BROKER_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
}


@pytest.fixture(scope="module")
def java_dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
             ) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("java-client")
    with DevCluster(data / "dev", brokers=3, zookeeper=zookeeper_hosts,
                    broker_overrides=BROKER_OVERRIDES) as dev:
        yield dev


class Target(Protocol):
    """What the scenarios need of a cluster: DevCluster (loglake) and KafkaPeer both have it."""

    @property
    def bootstrap_servers(self) -> str: ...

    def create_topic(self, name: str, *, partitions: int = 1, replication_factor: int = 1,
                     configs: Mapping[str, str] | None = None, wait_isr: bool = True,
                     timeout: float = 30.0) -> None: ...


@pytest.fixture(params=["loglake", "kafka"])
def target(request: pytest.FixtureRequest) -> Target:
    """The module's loglake cluster, or the Apache Kafka 3.9 peer: the client scenarios run on
    both, so their expectations are Kafka's own behaviour."""
    peer: Target = request.getfixturevalue(
        "java_dev" if request.param == "loglake" else "kafka_peer")
    return peer


def _topic(target: Target, prefix: str, partitions: int) -> str:
    name = _name(prefix)
    target.create_topic(name, partitions=partitions, replication_factor=3,
                        configs={"min.insync.replicas": "2"})
    return name


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_idempotent_producer_acks_all(target: Target, interop_jar: Path) -> None:
    topic = _topic(target, "java-idem", 3)
    result = run_scenario(interop_jar, "idempotent-producer", target.bootstrap_servers,
                          topic=topic, records=3000)
    assert result["acked"] == 3000, result
    assert result["send_errors"] == []
    assert (result["consumed"], result["missing"], result["duplicates"],
            result["out_of_order"]) == (3000, 0, 0, 0), result


def test_transactions_consume_transform_produce(target: Target, interop_jar: Path) -> None:
    source, sink = _topic(target, "java-txn-in", 2), _topic(target, "java-txn-out", 2)
    group = _name("java-txn-group")
    result = run_scenario(interop_jar, "transactions", target.bootstrap_servers,
                          input=source, output=sink, group=group, records=300, batch=25,
                          abort_every=3)
    assert result["aborted_transactions"] >= 1, result
    assert result["processed"] == 300, result
    assert (result["read_committed_count"], result["read_committed_missing"],
            result["read_committed_duplicates"]) == (300, 0, 0), result
    # the aborted transactions' records are in the log: read_uncommitted sees them
    assert result["read_uncommitted_count"] > 300, result
    assert result["group_offset_sum"] == 300, result


def _revoked(events: list[dict[str, Any]]) -> list[list[int]]:
    return [list(event["partitions"]) for event in events
            if event["event"] == "revoked" and event["partitions"]]


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_group_rebalance(target: Target, interop_jar: Path, assignor: str) -> None:
    topic, group = _topic(target, f"java-{assignor}", 4), _name("java-group")
    result = run_scenario(interop_jar, "group-rebalance", target.bootstrap_servers,
                          topic=topic, group=group, partitions=4, assignor=assignor)
    assert result["a_alone"] and result["shared"] and result["a_after_leave"], result
    assert result["phase1"]["a"] == [0, 1, 2, 3]
    shared = result["phase2"]
    assert sorted(shared["a"] + shared["b"]) == [0, 1, 2, 3], result
    assert shared["a_generation"] > result["phase1"]["a_generation"], result
    assert result["phase3"]["a"] == [0, 1, 2, 3], result
    events = result["a"]["events"]
    # closing a member revokes what it owns; the rebalances are the callbacks before that
    assert events[-1] == {"event": "revoked", "partitions": [0, 1, 2, 3],
                          "generation": events[-1]["generation"]}, events
    revoked = _revoked(events[:-1])
    if assignor == "range":
        # eager: a gives up every partition it owns at each rebalance, then gets its share back
        assert revoked and revoked[0] == [0, 1, 2, 3], result["a"]["events"]
    else:
        # cooperative: a only gives up what moves to b and never its whole assignment
        assert revoked == [shared["b"]], events


def test_static_membership_restart_without_rebalance(target: Target, interop_jar: Path
                                                     ) -> None:
    """KIP-345: member b (``group.instance.id``) is closed, which sends no LeaveGroup, and
    restarted with the same instance id within the session timeout: it gets its partitions back
    in the same generation and member a sees no rebalance callback."""
    topic, group = _topic(target, "java-static", 4), _name("java-static-group")
    result = run_scenario(interop_jar, "static-membership", target.bootstrap_servers,
                          topic=topic, group=group, partitions=4, session_ms=30000)
    assert result["stable"] and result["rejoined"], result
    assert result["restart_ms"] < 30000, result
    assert result["same_partitions"], result
    assert result["a_callbacks_after_restart"] == 0, result
    assert result["generation_after"] == result["generation_before"], result
    assert result["restarted_generation"] == result["generation_before"], result


def _leader(dev: DevCluster, topic: str) -> int:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient(dev.client_config()).list_topics(topic, timeout=30)
    return int(metadata.topics[topic].partitions[0].leader)


def _high_watermark(dev: DevCluster, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**dev.client_config(), "group.id": "java-client-watermarks"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


@pytest.mark.slow
def test_idempotent_producer_across_leader_kill(java_dev: DevCluster, interop_jar: Path) -> None:
    """The partition leader is SIGKILLed while the Java producer (acks=all, idempotent) sends:
    it retries against the new leader and every record is read back exactly once, in order."""
    topic = _name("java-idem-kill")
    java_dev.create_topic(topic, partitions=1, replication_factor=3)
    leader = _leader(java_dev, topic)
    process = start_scenario(interop_jar, "idempotent-producer", java_dev.bootstrap_servers,
                             topic=topic, records=6000, duration_ms=15000, timeout_s=120)
    try:
        wait_until(lambda: _high_watermark(java_dev, topic) >= 1000, 60,
                   "the Java producer wrote 1,000 records", ignore=(Exception,))
        java_dev.kill_broker(leader)
        result = scenario_result(process, timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
        java_dev.start_broker(leader)
    assert result["acked"] == 6000 and result["send_errors"] == [], result
    assert (result["consumed"], result["missing"], result["duplicates"],
            result["out_of_order"]) == (6000, 0, 0, 0), result



LOGLAKE_ADMIN_VALUES = {
    "create_topics": True,
    "list_topics": True,
    "describe_topics": {"partitions": 3, "replicas": 3, "topic_id_set": True},
    "describe_configs_topic": "3600000",
    "incremental_alter_configs": "7200000 compact,delete",
    "alter_configs": "5400000 delete",  # AlterConfigs replaces the whole override set
    "create_partitions": 5,
    "delete_records": 40,
    "commit_offsets": True,
    "list_consumer_groups": True,
    "describe_consumer_groups": "Empty",
    "list_consumer_group_offsets": 50,
    "alter_consumer_group_offsets": 60,
    "delete_consumer_group_offsets": None,
    "describe_log_dirs": {"1": 5, "2": 5, "3": 5},
    "describe_replica_log_dirs": True,
    "remove_replication_throttles": "",
    "alter_client_quotas": True,
    "describe_client_quotas": {"consumer_byte_rate": 2097152.0, "producer_byte_rate": 1048576.0},
    "remove_client_quotas": 0,
    "alter_user_scram_credentials": True,
    "describe_user_scram_credentials": ["SCRAM_SHA_256:4096"],
    "delete_user_scram_credentials": False,
    "describe_features": [],
    "fence_producers": True,
    "delete_topics": True,
}
"""What the admin scenario's steps return on a 3-broker cluster, loglake and Apache Kafka 3.9
alike (the other steps' values name brokers, ids or timings)."""

EXPECTED_ADMIN_ERRORS = {
    # the group had offsets only (a standalone consumer's commit) and they were deleted just
    # before: Kafka 3.9 answers GROUP_ID_NOT_FOUND too
    "delete_consumer_groups": "GroupIdNotFoundException",
    # no authorizer configured: SECURITY_DISABLED, as Kafka
    "describe_acls": "SecurityDisabledException",
}


def _outcomes(steps: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {name: "ok" if step["ok"] else step["error"] for name, step in steps.items()}


def _check_admin(result: dict[str, Any]) -> None:
    steps: dict[str, dict[str, Any]] = result["steps"]
    failed = {name: step for name, step in steps.items()
              if not step["ok"] and EXPECTED_ADMIN_ERRORS.get(name) != step["error"]}
    assert not failed, failed
    for name, error in EXPECTED_ADMIN_ERRORS.items():
        assert steps[name].get("error") == error, (name, steps[name])
    values = {name: steps[name].get("value") for name in LOGLAKE_ADMIN_VALUES}
    assert values == LOGLAKE_ADMIN_VALUES
    assert steps["describe_cluster"]["value"]["brokers"] == [1, 2, 3]
    offsets = steps["list_offsets"]["value"]
    assert (offsets["earliest"], offsets["latest"]) == (40, 100), offsets
    elected = steps["elect_leaders_preferred"]["value"]
    assert set(elected.values()) == {"ElectionNotNeededException"}, elected
    # the throttled move: the target replica is listed as adding, then becomes the only one
    target = steps["alter_partition_reassignments"]["value"][1]
    assert steps["set_replication_throttles"]["value"] == f"10485760 0:{target}"
    assert steps["list_partition_reassignments"]["value"] in (f"adding [{target}]", "done")
    assert steps["reassignment_completed"]["value"] == target


def test_admin_client(java_dev: DevCluster, interop_jar: Path) -> None:
    """Every AdminClient call the issue names, with Kafka's answers: topics, configs, partitions,
    records, groups and offsets, log dirs, elections, reassignment under replication throttles,
    client quotas, SCRAM users."""
    result = run_scenario(interop_jar, "admin", java_dev.bootstrap_servers,
                          prefix=_name("java-admin"), timeout_s=60, timeout=240)
    _check_admin(result)


def _compatibility_section() -> str:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    start = readme.index("## Kafka API compatibility")
    end = readme.find("\n## ", start + 1)
    return readme[start:end if end > 0 else None]


def test_admin_client_same_as_kafka(java_dev: DevCluster, kafka_peer: KafkaPeer,
                                    interop_jar: Path) -> None:
    """The same admin scenario against Apache Kafka 3.9 (the peer): every step has the same
    outcome and the same values; every call loglake does not serve (the probes) answers with the
    error the README's "Kafka API compatibility" section lists for it."""
    ours = run_scenario(interop_jar, "admin", java_dev.bootstrap_servers,
                        prefix=_name("java-admin"), timeout_s=60, timeout=240)
    theirs = run_scenario(interop_jar, "admin", kafka_peer.bootstrap_servers,
                          prefix=_name("java-admin"), timeout_s=60, timeout=240)
    _check_admin(theirs)  # the expectations are Kafka's own answers
    assert _outcomes(ours["steps"]) == _outcomes(theirs["steps"])
    section = _compatibility_section()
    for name, probe in ours["probes"].items():
        call = name.split(" ")[0]
        if probe["ok"]:
            continue
        row = next((line for line in section.splitlines() if f"`{call}`" in line), None)
        assert row is not None, f"{call} ({probe['error']}) is not in the README's table"
        assert probe["error"] in row, (row, probe)
        kafka_error = theirs["probes"][name].get("error", "ok")
        assert kafka_error in row, (row, theirs["probes"][name])


def test_client_quota_describe_reads_what_another_broker_wrote(java_dev: DevCluster) -> None:
    """AlterClientQuotas through one broker, DescribeClientQuotas right after through another
    (the Java AdminClient picks the least loaded broker for each): the describe sees the write,
    as on Kafka's ZooKeeper-mode brokers, which read ZooKeeper (the admin scenario's quota steps
    went stale before loglake's describe read ZooKeeper instead of the broker's cache)."""
    from kio.schema.errors import ErrorCode

    from tests.wire import WireClient

    user = _name("quota-user")
    ports = [java_dev.broker_port(broker) for broker in (1, 2, 3)]
    stale = []
    for round_ in range(30):
        rate = float(1_000_000 + round_)
        with WireClient("127.0.0.1", ports[round_ % 3]) as wire:
            altered = wire.request(49, 1, {"entries": [{
                "entity": [{"entity_type": "user", "entity_name": user}],
                "ops": [{"key": "producer_byte_rate", "value": rate, "remove": False}]}],
                "validate_only": False})
        assert [e.error_code for e in altered.entries] == [ErrorCode.none], altered
        with WireClient("127.0.0.1", ports[(round_ + 1) % 3]) as wire:
            described = wire.request(48, 1, {"components": [
                {"entity_type": "user", "match_type": 0, "match": user}], "strict": True})
        assert described.error_code == ErrorCode.none, described
        seen = [value.value for entry in described.entries or () for value in entry.values]
        if seen != [rate]:
            stale.append((round_, seen))
    assert stale == []
