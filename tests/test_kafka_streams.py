"""Kafka Streams runs unchanged on loglake: a word-count-with-join topology with
``processing.guarantee=exactly_once_v2`` (``jvm/streams``, run on kafka-streams 3.9.2) keeps
exact counts across a SIGKILL of a Streams instance and of a broker, and gives the same counts
as on Apache Kafka (the peer of ``tests/kafka_peer_plugin.py``) under the same faults.

The topology has two repartition topics, three compacted changelog topics (the count, the
labels table, the per-label totals), a KTable-KTable join and a KTable re-aggregation with a
subtractor. Two instances (one stream thread each) share the work on 4 input partitions;
``num.standby.replicas`` 0 and 1.

What is checked: the latest committed value of every key of the three output topics equals
what the input says (each line counted once), and every word's committed counts only grow
(a repeated or falling value means input counted twice or state lost: exactly-once broken).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from loglake.dev.harness import DevCluster
from loglake.dev.kafka_peer import KafkaPeer
from tests.streams_util import StreamsInstance, run_command, streams_jar

__all__ = ["streams_jar"]

PARTITIONS = 4
BATCH = 1500
"""Input lines per phase; four phases."""
RUNNING_TIMEOUT_S = 150.0
VERIFY_TIMEOUT_S = 240.0
KILLED_BROKER = 2

RESULTS: dict[tuple[str, int], dict[str, Any]] = {}
"""Verified outputs by (cluster kind, standby replicas), for the side-by-side comparison."""


class Brokers(Protocol):
    """What the scenario needs of a cluster (DevCluster and KafkaPeer both have it)."""

    @property
    def bootstrap_servers(self) -> str: ...

    def create_topic(self, name: str, *, partitions: int = 1, replication_factor: int = 1,
                     configs: dict[str, str] | None = None, wait_isr: bool = True,
                     timeout: float = 30.0) -> None: ...

    def kill_broker(self, broker_id: int) -> None: ...

    def start_broker(self, broker_id: int, *, wait: bool = True) -> None: ...


def word_count_across_kills(brokers: Brokers, jar: Path, work: Path, *, standby: int
                            ) -> dict[str, Any]:
    """Run the topology through four input phases: SIGKILL instance A (and restart it) after
    the second, SIGKILL a broker after the third (restart it after the fourth); return the
    verifier's result for all the input."""
    prefix = f"wc-{uuid.uuid4().hex[:8]}"
    bootstrap = brokers.bootstrap_servers
    for suffix, compacted in (("lines", False), ("labels", True), ("counts", True),
                              ("labeled", True), ("label-totals", True)):
        configs = {"min.insync.replicas": "2"}
        if compacted:
            configs["cleanup.policy"] = "compact"
        brokers.create_topic(f"{prefix}-{suffix}", partitions=PARTITIONS, replication_factor=3,
                             configs=configs, timeout=60)
    produced = run_command(jar, "produce", bootstrap=bootstrap, prefix=prefix, labels="true",
                           timeout=120, **{"from": 0, "to": BATCH})
    assert produced["produced"] > BATCH
    instances = [StreamsInstance(jar, work / name, bootstrap=bootstrap, prefix=prefix,
                                 application_id=f"{prefix}-app", standby=standby)
                 for name in ("a", "b")]
    try:
        for instance in instances:
            instance.start()
        for instance in instances:
            instance.wait_running(timeout=RUNNING_TIMEOUT_S)
        run_command(jar, "produce", bootstrap=bootstrap, prefix=prefix, timeout=120,
                    **{"from": BATCH, "to": 2 * BATCH})
        instances[0].kill()  # mid-processing: its open transaction must be aborted
        instances[0].start()
        run_command(jar, "produce", bootstrap=bootstrap, prefix=prefix, timeout=120,
                    **{"from": 2 * BATCH, "to": 3 * BATCH})
        brokers.kill_broker(KILLED_BROKER)
        run_command(jar, "produce", bootstrap=bootstrap, prefix=prefix, timeout=180,
                    **{"from": 3 * BATCH, "to": 4 * BATCH})
        brokers.start_broker(KILLED_BROKER)
        result = run_command(jar, "verify", bootstrap=bootstrap, prefix=prefix,
                             lines=4 * BATCH, timeout_s=int(VERIFY_TIMEOUT_S),
                             timeout=VERIFY_TIMEOUT_S + 60)
        for instance in instances:
            errors = [event for event in instance.events() if event["event"] == "error"]
            assert not errors, f"Streams instance {instance.work.name} failed: {errors}"
        return result
    finally:
        for instance in instances:
            instance.stop()


def assert_exact(result: dict[str, Any]) -> None:
    mismatched = {word: (result["counts"].get(word), count)
                  for word, count in result["expected_counts"].items()
                  if result["counts"].get(word) != count}
    assert result["match"], (f"outputs differ from the input's counts (caught up: "
                             f"{result['caught_up']}); word: (seen, expected) "
                             f"{dict(list(mismatched.items())[:10])}; label totals "
                             f"{result['label_totals']} vs {result['expected_label_totals']}")
    assert result["regressions"] == 0, (
        f"committed counts repeated or fell (counted twice or state lost): "
        f"{result['regression_examples']}")


@pytest.fixture(scope="module")
def loglake_brokers(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
                    ) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("streams-loglake")
    with DevCluster(data / "dev", brokers=3, zookeeper=zookeeper_hosts,
                    broker_overrides={"group.initial.rebalance.delay.ms": "0"}) as dev:
        yield dev


@pytest.mark.parametrize("standby", [
    0, pytest.param(1, marks=pytest.mark.slow)], ids=["standby-off", "standby-on"])
def test_word_count_exact_across_instance_and_broker_kills(
        loglake_brokers: DevCluster, streams_jar: Path, tmp_path: Path, standby: int) -> None:
    result = word_count_across_kills(loglake_brokers, streams_jar, tmp_path, standby=standby)
    assert_exact(result)
    RESULTS[("loglake", standby)] = result


@pytest.mark.slow
def test_same_counts_on_apache_kafka(streams_jar: Path, tmp_path: Path,
                                     zookeeper_hosts: str) -> None:
    """The same topology, input and faults on the Apache Kafka peer give the same outputs."""
    from tests.kafka_peer_plugin import require_kafka_jars

    require_kafka_jars()
    with KafkaPeer(tmp_path / "kafka", zookeeper=zookeeper_hosts, brokers=3) as peer:
        result = word_count_across_kills(peer, streams_jar, tmp_path / "work", standby=1)
    assert_exact(result)
    ours = RESULTS.get(("loglake", 1)) or RESULTS.get(("loglake", 0))
    if ours is not None:  # the loglake run of this module (both equal the input's counts)
        for output in ("counts", "labeled", "label_totals"):
            assert result[output] == ours[output], f"{output} differ from loglake's"
