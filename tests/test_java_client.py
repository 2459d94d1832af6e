"""Apache Kafka's Java client (kafka-clients 3.9.2) against a loglake cluster, unchanged.

The scenarios are Java programs in ``jvm/interop`` (built once per session by the
``interop_jar`` fixture, tests/java_interop.py); each prints a JSON result that these tests
check. One 3-broker cluster (on the session's ZooKeeper) serves the module: replication matters
for acks=all, min.insync.replicas, leader elections and reassignments.

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
from collections.abc import Iterator
from pathlib import Path

import pytest

from loglake.dev.harness import DevCluster, wait_until
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


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_idempotent_producer_acks_all(java_dev: DevCluster, interop_jar: Path) -> None:
    topic = _name("java-idem")
    java_dev.create_topic(topic, partitions=3, replication_factor=3)
    result = run_scenario(interop_jar, "idempotent-producer", java_dev.bootstrap_servers,
                          topic=topic, records=3000)
    assert result["acked"] == 3000, result
    assert result["send_errors"] == []
    assert (result["consumed"], result["missing"], result["duplicates"],
            result["out_of_order"]) == (3000, 0, 0, 0), result


def test_transactions_consume_transform_produce(java_dev: DevCluster, interop_jar: Path) -> None:
    source, sink, group = _name("java-txn-in"), _name("java-txn-out"), _name("java-txn-group")
    java_dev.create_topic(source, partitions=2, replication_factor=3)
    java_dev.create_topic(sink, partitions=2, replication_factor=3)
    result = run_scenario(interop_jar, "transactions", java_dev.bootstrap_servers,
                          input=source, output=sink, group=group, records=300, batch=25,
                          abort_every=3)
    assert result["aborted_transactions"] >= 1, result
    assert result["processed"] == 300, result
    assert (result["read_committed_count"], result["read_committed_missing"],
            result["read_committed_duplicates"]) == (300, 0, 0), result
    # the aborted transactions' records are in the log: read_uncommitted sees them
    assert result["read_uncommitted_count"] > 300, result
    assert result["group_offset_sum"] == 300, result


def _revoked(events: list[dict[str, object]]) -> list[list[int]]:
    return [list(event["partitions"]) for event in events  # type: ignore[call-overload]
            if event["event"] == "revoked" and event["partitions"]]


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_group_rebalance(java_dev: DevCluster, interop_jar: Path, assignor: str) -> None:
    topic, group = _name(f"java-{assignor}"), _name("java-group")
    java_dev.create_topic(topic, partitions=4, replication_factor=3)
    result = run_scenario(interop_jar, "group-rebalance", java_dev.bootstrap_servers,
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


def test_static_membership_restart_without_rebalance(java_dev: DevCluster, interop_jar: Path
                                                     ) -> None:
    """KIP-345: member b (``group.instance.id``) is closed, which sends no LeaveGroup, and
    restarted with the same instance id within the session timeout: it gets its partitions back
    in the same generation and member a sees no rebalance callback."""
    topic, group = _name("java-static"), _name("java-static-group")
    java_dev.create_topic(topic, partitions=4, replication_factor=3)
    result = run_scenario(interop_jar, "static-membership", java_dev.bootstrap_servers,
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
