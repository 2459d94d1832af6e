"""Damaged sealed segments on a follower, under clean and hard shutdown (issue: recovery without
holes): after the broker restarts and rejoins the ISR, its log holds every acknowledged record
at its offset, and it serves all of them as leader. Real ZooKeeper, three real brokers,
confluent-kafka; the damage is done to the files while the broker is down.

Damage kinds: ``truncate`` cuts the end of a sealed segment (a lost tail), ``flip`` flips one bit
inside a batch of a sealed segment (CRC mismatch), ``index`` deletes a sealed segment's offset
and time indexes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from loglake.dev.harness import DevCluster, wait_until
from loglake.segments.filenames import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from tests.clients import consume_messages
from tests.replication_checks import (
    REPLICATION_OVERRIDES,
    broker_logs_on_failure,
    create_replicated_topic,
    describe,
    read_replica,
    replica_dir,
    wait_for_full_isr,
)

TOPIC = "damaged"
FIRST, SECOND = 3000, 500
FOLLOWER = 3


def _produce(bootstrap: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5,
                         "batch.num.messages": 50, "message.timeout.ms": 60_000})
    failures: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for i in range(start, start + count):
        producer.produce(TOPIC, value=b"%08d" % i, partition=0, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not failures, failures[:3]


def _damage(directory: Path, kind: str) -> int:
    """Damage the second sealed segment; returns its base offset."""
    logs = sorted(directory.glob("*" + LOG_SUFFIX))
    assert len(logs) >= 4, f"expected several sealed segments, found {len(logs)}"
    victim = logs[1]
    if kind == "truncate":
        size = victim.stat().st_size
        with victim.open("r+b") as handle:
            handle.truncate(size - size // 3)
    elif kind == "flip":
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0x10
        victim.write_bytes(data)
    else:
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            victim.with_suffix(suffix).unlink()
    return int(victim.stem)


def _wait_replica_complete(directory: Path, expected: int, timeout: float = 60.0) -> dict:
    values: dict = {}

    def complete() -> bool:
        nonlocal values
        values = read_replica(directory)
        return len(values) >= expected

    wait_until(complete, timeout,
               lambda: f"{directory} holds {len(values)} of {expected} offsets, missing e.g. "
                       f"{sorted(set(range(expected)) - set(values))[:5]}", interval=0.5)
    return values


def _consume_all(bootstrap: str, expected: int, timeout: float = 60.0) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "check.crcs": True})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    try:
        got = consume_messages(consumer, expected, timeout=timeout, batch=1,
                               what=f"records of {TOPIC}-0")
    finally:
        consumer.close()
    assert [m.offset() for m in got] == list(range(len(got))), "offsets not dense from 0"
    return [m.value() for m in got]


def _wait_leader(bootstrap: str, wanted: int, timeout: float = 60.0) -> None:
    wait_until(lambda: describe(bootstrap, TOPIC)[0].leader == wanted, timeout,
               f"{TOPIC}-0 led by broker {wanted}", interval=0.3, ignore=(KafkaException,))


def _run(tmp_path: Path, damage: str, shutdown: str,
         zookeeper_hosts: str, *, serve_as_leader: bool) -> None:
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts,
                    brokers=3, broker_overrides=REPLICATION_OVERRIDES) as dev, \
            broker_logs_on_failure(dev):
        create_replicated_topic(dev.bootstrap_servers, TOPIC, assignment=[[1, 2, FOLLOWER]],
                                config={"segment.bytes": "5000",
                                        "remote.storage.enable": "false"})
        _produce(dev.bootstrap_servers, 0, FIRST)
        directory = replica_dir(dev.data_dir, FOLLOWER, TOPIC, 0)
        assert _wait_replica_complete(directory, FIRST).keys() >= set(range(FIRST))
        if shutdown == "clean":
            dev.stop_broker(FOLLOWER)
        else:
            dev.kill_broker(FOLLOWER)
        victim = _damage(directory, damage)
        _produce(dev.bootstrap_servers, FIRST, SECOND)  # the ISR is {1, 2} meanwhile
        dev.start_broker(FOLLOWER)
        wait_for_full_isr(dev.bootstrap_servers, TOPIC, [0], 3, timeout=90)
        total = FIRST + SECOND
        values = _wait_replica_complete(directory, total)
        missing = sorted(set(range(total)) - set(values))
        assert not missing, (f"replica {FOLLOWER} rejoined the ISR without offsets "
                             f"{missing[:5]}..{missing[-5:]} ({len(missing)}; damaged segment "
                             f"{victim})")
        assert [values[i] for i in range(total)] == [b"%08d" % i for i in range(total)]
        if damage != "index":  # the damage was found and logged, not silently dropped
            assert "recovery cut" in dev.broker_log(FOLLOWER)
        if serve_as_leader:
            dev.kill_broker(1)
            dev.kill_broker(2)
            _wait_leader(f"127.0.0.1:{dev.broker_port(FOLLOWER)}", FOLLOWER)
            got = _consume_all(f"127.0.0.1:{dev.broker_port(FOLLOWER)}", total)
            assert got == [b"%08d" % i for i in range(total)]


@pytest.mark.parametrize(("damage", "shutdown"), [("flip", "clean"), ("truncate", "kill")])
def test_damaged_follower_refetches_before_it_rejoins(tmp_path: Path, damage: str,
                                                      shutdown: str, zookeeper_hosts: str) -> None:
    _run(tmp_path, damage, shutdown, zookeeper_hosts, serve_as_leader=damage == "flip")


@pytest.mark.slow
@pytest.mark.parametrize(("damage", "shutdown"), [
    ("flip", "kill"), ("truncate", "clean"), ("index", "clean"), ("index", "kill"),
])
def test_damaged_follower_refetches_before_it_rejoins_more(
        tmp_path: Path, damage: str, shutdown: str, zookeeper_hosts: str) -> None:
    _run(tmp_path, damage, shutdown, zookeeper_hosts, serve_as_leader=True)
