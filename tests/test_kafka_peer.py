"""The Apache Kafka peer (loglake/dev/kafka_peer.py): it starts on the shared ZooKeeper under its
own chroot, round-trips records with confluent-kafka, and stops cleanly (only its own pids)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from kazoo.client import KazooClient

from loglake.dev import process
from loglake.dev.kafka_peer import KafkaPeer
from tests.kafka_peer_plugin import require_kafka_jars


def _round_trip(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True})
    for index in range(count):
        producer.produce(topic, key=str(index).encode(), value=f"value-{index}".encode(),
                         partition=index % 3)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen: list[tuple[int, bytes]] = []
    try:
        for _ in range(600):  # bounded: at most about 60 s of polls
            if len(seen) >= count:
                break
            message = consumer.poll(0.1)
            if message is None:
                continue
            assert message.error() is None, message.error()
            seen.append((message.partition(), message.value()))
    finally:
        consumer.close()
    return seen


def test_shared_peer_round_trips(kafka_peer: KafkaPeer, topic_name: str) -> None:
    kafka_peer.create_topic(topic_name, partitions=3, replication_factor=3,
                            configs={"min.insync.replicas": "2"})
    seen = _round_trip(kafka_peer.bootstrap_servers, topic_name, 300)
    assert sorted(value for _, value in seen) == sorted(
        f"value-{index}".encode() for index in range(300))
    assert all(value == f"value-{int(value[6:])}".encode() and partition == int(value[6:]) % 3
               for partition, value in seen)


def test_peer_lives_in_its_chroot_and_stops_cleanly(tmp_path: Path, zookeeper_hosts: str,
                                                     topic_name: str) -> None:
    require_kafka_jars()
    peer = KafkaPeer(tmp_path / "kafka", zookeeper=zookeeper_hosts, brokers=3)
    peer.start()
    try:
        pids = peer.pids()
        assert len(pids) == 3
        zk = KazooClient(hosts=zookeeper_hosts, timeout=10)
        zk.start(timeout=10)
        try:
            ids = sorted(zk.get_children(f"{peer.chroot}/brokers/ids"))
            assert ids == ["1", "2", "3"]
            assert not zk.exists("/brokers/ids")  # nothing outside the chroot
        finally:
            zk.stop()
            zk.close()
        peer.create_topic(topic_name, partitions=3, replication_factor=1)
        assert len(_round_trip(peer.bootstrap_servers, topic_name, 30)) == 30
        handles = [process.ProcessHandle(pid, process.read_start_time(pid) or 0) for pid in pids]
        peer.stop()
        assert peer.pids() == []
        assert not any(process.is_alive(handle) for handle in handles)
        for broker_id in peer.broker_ids:  # SIGTERM -> controlled shutdown, not SIGKILL
            assert "shut down completed" in peer.broker_log(broker_id, lines=200)
    finally:
        peer.kill()


def test_bad_arguments_get_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="without a chroot"):
        KafkaPeer(tmp_path, zookeeper="127.0.0.1:2181/x")
    with pytest.raises(ValueError, match="at least one broker"):
        KafkaPeer(tmp_path, zookeeper="127.0.0.1:2181", brokers=0)
