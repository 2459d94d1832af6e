"""Crash safety: SIGKILL the broker while a producer runs with acks=1; after restart every
acknowledged record is consumable and offsets continue without gaps or reuse. Topics and configs
survive the restart because they live in ZooKeeper."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from loglake.dev.harness import DevCluster, wait_until
from tests.admin_util import create_topic


def _read_everything(bootstrap: str, topic: str, timeout: float = 60.0) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-unused",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []

    def at_end() -> bool:
        for msg in consumer.consume(10_000, 1.0):  # batches: up to ~2 M records to read
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return True
                raise AssertionError(msg.error())
            got.append(msg)
        return False

    try:
        wait_until(at_end, timeout, lambda: f"end of {topic}-0 after {len(got)} records",
                   interval=0)
    finally:
        consumer.close()
    return got


def test_sigkill_while_producing_loses_no_acknowledged_record(tmp_path, zookeeper_hosts: str):
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts) as dev:
        create_topic(dev.bootstrap_servers, "crash", config={"segment.bytes": "200000"})
        acked: dict[int, bytes] = {}
        stop = threading.Event()

        def on_delivery(err, msg):
            if err is None:
                acked[msg.offset()] = msg.value()

        def produce_forever():
            producer = Producer({"bootstrap.servers": dev.bootstrap_servers, "acks": "1",
                                 "linger.ms": 2, "enable.idempotence": False,
                                 "message.timeout.ms": 20000})
            i = 0
            deadline = time.monotonic() + 60
            while not stop.is_set() and time.monotonic() < deadline and i < 2_000_000:
                try:
                    producer.produce("crash", value=b"value-%08d" % i, partition=0,
                                     on_delivery=on_delivery)
                    i += 1
                except BufferError:
                    producer.poll(0.01)
                producer.poll(0)
            producer.flush(30)

        thread = threading.Thread(target=produce_forever)
        thread.start()
        wait_until(lambda: len(acked) >= 20_000, 30, "20000 acknowledgements", interval=0.05)
        dev.kill_broker(1)
        time.sleep(1)
        dev.restart_broker(1)
        time.sleep(2)
        stop.set()
        thread.join(90)
        assert not thread.is_alive()
        got = _read_everything(dev.bootstrap_servers, "crash")
        by_offset = {m.offset(): m.value() for m in got}
        assert [m.offset() for m in got] == list(range(len(got)))  # no gaps, no reuse
        missing = [o for o in acked if by_offset.get(o) != acked[o]]
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. offset {missing[0]}"
        # the topic and its config survived the restart (they live in ZooKeeper)
        admin = AdminClient({"bootstrap.servers": dev.bootstrap_servers})
        resource = ConfigResource(ConfigResource.Type.TOPIC, "crash")
        assert admin.describe_configs([resource])[resource].result(10)[
            "segment.bytes"].value == "200000"


def _value(i: int) -> bytes:
    return b"r-%06d-" % i + b"x" * 100


def _produce_batches(bootstrap: str, topic: str, batches: int, per_batch: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                         "batch.num.messages": per_batch})
    for b in range(batches):
        for i in range(per_batch):
            producer.produce(topic, value=_value(b * per_batch + i), partition=0)
        producer.flush(10)


def test_torn_tail_and_lost_indexes_recovered_on_restart(tmp_path, zookeeper_hosts: str):
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts) as dev:
        create_topic(dev.bootstrap_servers, "torn", config={"segment.bytes": "20000"})
        _produce_batches(dev.bootstrap_servers, "torn", batches=40, per_batch=50)
        dev.kill_broker(1)
        partition_dir = dev.data_dir / "broker-1" / "data" / "torn-0"
        logs = sorted(partition_dir.glob("*.log"))
        assert len(logs) > 3, "segment.bytes=20000 should have rolled several segments"
        active = logs[-1]
        size = active.stat().st_size
        with active.open("r+b") as handle:  # tear the last batch in half
            handle.truncate(size - 40)
        for index in [*partition_dir.glob("*.index"), *partition_dir.glob("*.timeindex")][:4]:
            index.unlink()
        middle_index = sorted(partition_dir.glob("*.index"))[0]
        middle_index.write_bytes(b"\xff" * 13)  # not a whole number of entries
        dev.restart_broker(1)
        got = _read_everything(dev.bootstrap_servers, "torn")
        assert [m.offset() for m in got] == list(range(len(got)))
        assert len(got) == 40 * 50 - 50  # only the torn batch is gone
        assert [m.value() for m in got] == [_value(i) for i in range(len(got))]
        _produce_batches(dev.bootstrap_servers, "torn", batches=1, per_batch=10)
        again = _read_everything(dev.bootstrap_servers, "torn")
        assert [m.offset() for m in again] == list(range(len(got) + 10))
        # offsets_for_times works through the rebuilt time indexes
        consumer = Consumer({"bootstrap.servers": dev.bootstrap_servers, "group.id": "x"})
        target = got[1234].timestamp()[1]
        found = consumer.offsets_for_times([TopicPartition("torn", 0, target)], timeout=10)
        consumer.close()
        assert found[0].offset <= 1234 and got[found[0].offset].timestamp()[1] >= target


def test_auto_create_topics_is_a_broker_setting(tmp_path, zookeeper_hosts: str):
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts,
                    broker_overrides={"auto.create.topics.enable": "true",
                                      "num.partitions": "2"}) as dev:
        producer = Producer({"bootstrap.servers": dev.bootstrap_servers})
        producer.produce("created-on-demand", value=b"hello")
        assert producer.flush(20) == 0
        meta = AdminClient({"bootstrap.servers": dev.bootstrap_servers}).list_topics(timeout=10)
        assert len(meta.topics["created-on-demand"].partitions) == 2


def test_auto_create_is_off_by_default(cluster, topic_name):
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "message.timeout.ms": 3000})
    errors = []
    producer.produce(topic_name, value=b"x", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None
    meta = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(timeout=10)
    assert topic_name not in meta.topics
