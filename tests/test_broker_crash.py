"""Crash safety: SIGKILL the broker while a producer runs with acks=1; after restart every
acknowledged record is consumable and offsets continue without gaps or reuse. Topics and configs
survive the restart because they live in ZooKeeper."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from loglake.dev.harness import DevCluster
from tests.admin_util import create_topic


def _read_everything(bootstrap: str, topic: str, timeout: float = 60.0) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-unused",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(msg.error())
            got.append(msg)
    finally:
        consumer.close()
    return got


def test_sigkill_while_producing_loses_no_acknowledged_record(tmp_path):
    with DevCluster(tmp_path / "dev") as dev:
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
        deadline = time.monotonic() + 30
        while len(acked) < 20_000 and time.monotonic() < deadline:
            time.sleep(0.05)
        dev.kill_broker(1)
        acked_before_kill = len(acked)
        assert acked_before_kill >= 20_000
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
