"""Replication matrix (Kafka's ``replication_test.py``): faults aimed at a partition leader or at
the controller while an idempotent acks=all producer sends unique values.

Invariant checked for every (failure mode, target) pair, on 3 brokers, RF=3,
min.insync.replicas=2: more than 5,000 values acknowledged; every acknowledged value is consumed
exactly once, at the (partition, offset) its acknowledgement named; and after healing, no offset
holds two different values on any replica and every replica holds the committed prefix.

Failure modes (as in Kafka's system test):

* ``clean_shutdown`` -- SIGTERM the target once (controlled shutdown) and leave it down;
* ``hard_shutdown`` -- SIGKILL the target once and leave it down;
* ``clean_bounce`` -- 5 times: SIGTERM the (current) target and start it again;
* ``hard_bounce`` -- 5 times: SIGKILL the target, wait until ZooKeeper expired its session
  (``/brokers/ids/<id>`` gone), start it again.

Between bounces the restarted broker is given a bounded time to rejoin every ISR, so that the
next bounce exercises failover rather than an offline partition.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest

from loglake.dev.harness import DevCluster
from tests.replication_checks import (
    REPLICATION_OVERRIDES,
    ProducerLoop,
    ZooKeeperView,
    assert_no_loss_no_duplicates,
    assert_replicas_converged,
    broker_logs_on_failure,
    create_replicated_topic,
    drain,
    partition_leader,
    wait_for_full_isr,
)

FailureMode = Literal["clean_shutdown", "hard_shutdown", "clean_bounce", "hard_bounce"]
Target = Literal["leader", "controller"]

BROKERS = (1, 2, 3)
PARTITIONS = 3
BOUNCES = 5
MIN_ACKED = 5_000
WARMUP_ACKED = 1_000


def _target_broker(dev: DevCluster, zk: ZooKeeperView, topic: str, target: Target) -> int:
    if target == "controller":
        return zk.wait_controller(timeout=30)
    return partition_leader(dev.bootstrap_servers, topic, 0, timeout=30)


def _rejoin(dev: DevCluster, topic: str, *, timeout: float = 30.0) -> None:
    """Give a restarted broker a bounded time to rejoin all ISRs (not asserted here: the final
    heal check asserts it)."""
    with contextlib.suppress(AssertionError):
        wait_for_full_isr(dev.bootstrap_servers, topic, range(PARTITIONS), 3, timeout=timeout)


def _apply(dev: DevCluster, zk: ZooKeeperView, topic: str, mode: FailureMode,
           target: Target) -> list[int]:
    """Inject the fault; returns the brokers hit, in order."""
    hit: list[int] = []
    rounds = BOUNCES if mode.endswith("bounce") else 1
    for _ in range(rounds):
        broker = _target_broker(dev, zk, topic, target)
        hit.append(broker)
        if mode in ("clean_shutdown", "clean_bounce"):
            dev.stop_broker(broker)
        else:
            dev.kill_broker(broker)
        if mode == "clean_bounce":
            dev.start_broker(broker)
            _rejoin(dev, topic)
        elif mode == "hard_bounce":
            zk.wait_unregistered(broker, timeout=30)
            dev.start_broker(broker)
            _rejoin(dev, topic)
    return hit


def _heal(dev: DevCluster, hit: list[int]) -> None:
    running = {s.id for s in dev.status() if s.role == "broker" and s.alive}
    for broker in sorted(set(hit)):
        if broker not in running:
            dev.start_broker(broker)


CASES = [
    pytest.param("clean_shutdown", "leader"),
    pytest.param("clean_shutdown", "controller"),
    pytest.param("hard_shutdown", "leader"),
    pytest.param("hard_shutdown", "controller"),
    pytest.param("clean_bounce", "leader"),
    pytest.param("clean_bounce", "controller"),
    pytest.param("hard_bounce", "leader", marks=pytest.mark.slow),
    pytest.param("hard_bounce", "controller", marks=pytest.mark.slow),
]


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("mode", "target"), CASES)
def test_replication_matrix(tmp_path: Path, mode: FailureMode, target: Target,
                            zookeeper_hosts: str) -> None:
    """No acknowledged value lost or duplicated, and replicas converge, under ``mode`` aimed at
    ``target`` while the producer runs."""
    topic = f"matrix-{mode}-{target}"
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts,
                    brokers=3, broker_overrides=REPLICATION_OVERRIDES) as dev, \
            broker_logs_on_failure(dev):
        run_case(dev, topic, lambda zk: _apply(dev, zk, topic, mode, target))


def run_case(dev: DevCluster, topic: str, fault: Callable[[ZooKeeperView], list[int]], *,
             min_acked: int = MIN_ACKED, rate: float = 1000.0) -> None:
    """Create the topic, run the producer, inject ``fault`` after a warm-up, keep producing until
    more than ``min_acked`` values were acknowledged and every partition took writes after the
    fault, heal, then check every pass criterion."""
    started = time.monotonic()
    create_replicated_topic(dev.bootstrap_servers, topic, partitions=PARTITIONS)
    with ZooKeeperView(dev.zookeeper_connect) as zk:
        producer = ProducerLoop(dev.bootstrap_servers, topic, partitions=PARTITIONS, rate=rate)
        with producer:
            producer.wait_acked(WARMUP_ACKED, timeout=30)
            hit = fault(zk)
            fault_done = time.monotonic()
            try:
                producer.wait_each_partition_progress(200, timeout=60)
                producer.wait_acked(min_acked + 1, timeout=60)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\nbrokers hit: {hit}") from None
        stats = producer.stats
        assert stats.fatal is None, f"producer fatal error: {stats.fatal}; {producer.summary()}"
        _heal(dev, hit)
        wait_for_full_isr(dev.bootstrap_servers, topic, range(PARTITIONS), 3, timeout=60)
        drained = drain(dev.bootstrap_servers, topic, range(PARTITIONS), timeout=60)
        assert_no_loss_no_duplicates(stats.acked, drained, min_acked=min_acked)
        assert_replicas_converged(dev.data_dir, topic, range(PARTITIONS), BROKERS,
                                  drained=drained, timeout=30)
    print(f"{topic}: brokers hit {hit}; fault took {fault_done - started:.1f}s from start; "
          f"{producer.summary()}; total {time.monotonic() - started:.1f}s")
