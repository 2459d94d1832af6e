"""One damaged partition never stops a broker (issue: hardening, item 5).

* a replica that cannot be opened at all (here: a segment's ``.log`` replaced by a directory, so
  opening it fails with EISDIR) goes offline: the broker starts, its other partitions serve,
  the offline one answers KAFKA_STORAGE_ERROR and is reported in Metadata's offline replicas;
* a corrupt batch header in a sealed segment (the case that used to raise out of the producer
  state rebuild) cuts that partition's log at the bad batch; the broker and the other
  partitions are unaffected;
* with other replicas, an unopenable replica is moved aside and re-replicated from the leader,
  and rejoins the ISR holding every acknowledged record.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from loglake.dev.harness import DevCluster, wait_until
from loglake.segments.batch import iter_batches
from loglake.segments.filenames import LOG_SUFFIX
from tests.admin_util import create_topic
from tests.clients import consume_messages
from tests.replication_checks import (
    REPLICATION_OVERRIDES,
    broker_logs_on_failure,
    create_replicated_topic,
    describe,
    raw_produce,
    read_replica,
    replica_dir,
    wait_for_full_isr,
)
from tests.wire import WireClient

KAFKA_STORAGE_ERROR = 56


def _produce(bootstrap: str, topic: str, count: int, *, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.num.messages": 50, "message.timeout.ms": 30_000})
    for i in range(start, start + count):
        producer.produce(topic, value=b"%08d" % i, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0


def _consume(bootstrap: str, topic: str, expected: int, timeout: float = 30.0) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{time.time()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        return [msg.value() for msg in consume_messages(
            consumer, expected, timeout=timeout, batch=1, errors="skip",
            what=f"records of {topic}")]
    finally:
        consumer.close()


def _good_and_bad_then_stop(dev: DevCluster) -> None:
    """Topics ``good`` and ``bad`` with 1000 records each in 4000-byte local segments; then
    broker 1 stops (so a test can damage ``bad``'s files)."""
    for name in ("good", "bad"):
        create_topic(dev.bootstrap_servers, name, config={"segment.bytes": "4000",
                                                          "remote.storage.enable": "false"})
        _produce(dev.bootstrap_servers, name, 1000)
    dev.stop_broker(1)


def _segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*" + LOG_SUFFIX))


def test_unopenable_partition_goes_offline_and_the_broker_keeps_serving(
        tmp_path: Path, zookeeper_hosts: str) -> None:
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts) as dev, \
            broker_logs_on_failure(dev, [1]):
        _good_and_bad_then_stop(dev)
        bad_dir = dev.data_dir / "broker-1" / "data" / "bad-0"
        first = _segments(bad_dir)[0]
        first.unlink()
        first.mkdir()  # opening the segment now fails with IsADirectoryError
        dev.start_broker(1)
        _produce(dev.bootstrap_servers, "good", 10, start=1000)
        assert _consume(dev.bootstrap_servers, "good", 1010) == [b"%08d" % i for i in range(1010)]
        with WireClient.connect(dev.bootstrap_servers) as client:
            error, _ = raw_produce(client, "bad", 0, [b"x"], acks=1)
        assert error == KAFKA_STORAGE_ERROR
        view = describe(dev.bootstrap_servers, "bad")[0]
        assert view.leader == -1 and view.error is not None
        assert "cannot be opened and is offline" in dev.broker_log(1)
        first.rmdir()  # the operator repairs (here: the segment is gone), restarts: back online
        dev.restart_broker(1)
        with WireClient.connect(dev.bootstrap_servers) as client:
            error, _ = raw_produce(client, "bad", 0, [b"x"], acks=1)
        assert error == 0


def test_corrupt_batch_header_cuts_one_partition_only(tmp_path: Path, zookeeper_hosts: str) -> None:
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts) as dev, \
            broker_logs_on_failure(dev, [1]):
        _good_and_bad_then_stop(dev)
        segment = _segments(dev.data_dir / "broker-1" / "data" / "bad-0")[1]
        data = bytearray(segment.read_bytes())
        third = list(iter_batches(bytes(data)))[2]
        struct.pack_into(">i", data, third.position + 8, 0x7FFFFFF0)  # absurd batchLength
        segment.write_bytes(data)
        dev.start_broker(1)
        assert _consume(dev.bootstrap_servers, "good", 1000) == [b"%08d" % i for i in range(1000)]
        got = _consume(dev.bootstrap_servers, "bad", third.base_offset, timeout=15)
        assert got == [b"%08d" % i for i in range(third.base_offset)]
        _produce(dev.bootstrap_servers, "bad", 5, start=5000)  # appends continue after the cut
        assert "recovery cut the log at offset" in dev.broker_log(1)


def test_unopenable_follower_replica_is_rereplicated(tmp_path: Path, zookeeper_hosts: str) -> None:
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts,
                    brokers=3, broker_overrides=REPLICATION_OVERRIDES) as dev, \
            broker_logs_on_failure(dev):
        create_replicated_topic(dev.bootstrap_servers, "rr", partitions=1,
                                assignment=[[1, 2, 3]],
                                config={"segment.bytes": "4000",
                                        "remote.storage.enable": "false"})
        _produce(dev.bootstrap_servers, "rr", 2000)
        dev.stop_broker(3)
        directory = replica_dir(dev.data_dir, 3, "rr", 0)
        victim = _segments(directory)[2]
        victim.unlink()
        victim.mkdir()
        _produce(dev.bootstrap_servers, "rr", 500, start=2000)
        dev.start_broker(3)
        wait_for_full_isr(dev.bootstrap_servers, "rr", [0], 3, timeout=90)
        values = wait_until(lambda: len(got := read_replica(directory)) >= 2500 and got, 60,
                            "the re-replicated log to hold 2500 records", interval=0.5)
        assert [values.get(i) for i in range(2500)] == [b"%08d" % i for i in range(2500)]
        moved = list(directory.parent.glob("rr-0.*.damaged"))
        assert len(moved) == 1 and (moved[0] / victim.name).is_dir()  # kept for the operator


def _metadata(port: int, topic: str) -> Any:
    with WireClient("127.0.0.1", port) as client:
        response = client.request(3, 12, {"topics": [{"name": topic}],
                                           "allow_auto_topic_creation": False})
    return response.topics[0].partitions[0]


def test_every_broker_reports_an_offline_replica(tmp_path: Path, zookeeper_hosts: str) -> None:
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts,
                    brokers=2) as dev, broker_logs_on_failure(dev, [1, 2]):
        create_replicated_topic(dev.bootstrap_servers, "solo", partitions=1, assignment=[[2]],
                                min_insync_replicas=1,
                                config={"segment.bytes": "4000",
                                        "remote.storage.enable": "false"})
        _produce(dev.bootstrap_servers, "solo", 500)
        dev.stop_broker(2)
        first = _segments(replica_dir(dev.data_dir, 2, "solo", 0))[0]
        first.unlink()
        first.mkdir()
        dev.start_broker(2)
        seen: Any = wait_until(
            lambda: list((meta := _metadata(dev.broker_port(1), "solo")).offline_replicas)
            == [2] and meta, 30, "replica 2 reported offline", interval=0.3)
        assert seen.leader_id == -1
        first.rmdir()
        dev.restart_broker(2)  # repaired: online again everywhere
        wait_until(lambda: (meta := _metadata(dev.broker_port(1), "solo")).leader_id == 2
                   and not list(meta.offline_replicas), 30,
                   "replica 2 online again and leader", interval=0.3)
