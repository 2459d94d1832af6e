"""Interop with librdkafka (confluent-kafka): produce/consume every record shape and codec."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from loglake.dev.harness import wait_until
from tests.admin_util import create_topic
from tests.clients import consume_messages, poll_message

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _consume(bootstrap: str, topic: str, partitions: int, expected: int,
             timeout: float = 30.0) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "interop-unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    try:
        return consume_messages(consumer, expected, timeout=timeout, batch=10000,
                                what=f"records of {topic}")
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS)
def test_record_shapes_round_trip(cluster, topic_name, codec):
    create_topic(cluster.bootstrap_servers, topic_name)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "compression.type": codec, "linger.ms": 5,
                         "enable.idempotence": True})
    sent = [
        (b"k1", b"keyed value", None),
        (None, b"unkeyed value", None),
        (b"tombstone-key", None, None),
        (b"h", b"with headers", [("h1", b"v1"), ("h2", None), ("h1", b"dup")]),
        (b"", b"", None),
        (None, b"x" * 50_000, None),
    ]
    for key, value, headers in sent:
        producer.produce(topic_name, key=key, value=value, headers=headers, partition=0)
    assert producer.flush(15) == 0
    got = _consume(cluster.bootstrap_servers, topic_name, 1, len(sent))
    assert [(m.key(), m.value()) for m in got] == [(k, v) for k, v, _ in sent]
    assert [m.offset() for m in got] == list(range(len(sent)))
    assert got[3].headers() == [("h1", b"v1"), ("h2", None), ("h1", b"dup")]


def test_sizes_up_to_max_message_bytes(cluster, topic_name):
    limit = 200_000
    create_topic(cluster.bootstrap_servers, topic_name, config={"max.message.bytes": str(limit)})
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0,
                         "message.max.bytes": 1_000_000, "batch.size": 1_000_000})
    # a record batch carries ~70 bytes of headers and framing around one value
    sizes = [0, 1, 100, 10_000, limit - 100]
    for size in sizes:
        producer.produce(topic_name, value=b"v" * size, partition=0)
        producer.flush(10)
    errors = []
    producer.produce(topic_name, value=b"v" * (limit + 10), partition=0,
                     on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    got = _consume(cluster.bootstrap_servers, topic_name, 1, len(sizes))
    assert [len(m.value() or b"") for m in got] == sizes


def test_hundred_thousand_records_keep_partition_order(cluster, topic_name):
    partitions = 4
    total = 100_000
    create_topic(cluster.bootstrap_servers, topic_name, partitions=partitions)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 20,
                         "batch.num.messages": 10000, "compression.type": "lz4"})
    for i in range(total):
        while True:
            try:
                producer.produce(topic_name, key=str(i % 97).encode(), value=str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    got = _consume(cluster.bootstrap_servers, topic_name, partitions, total, timeout=120)
    assert len(got) == total
    assert sorted(int(m.value()) for m in got) == list(range(total))
    by_partition: dict[int, list] = {}
    for m in got:
        by_partition.setdefault(m.partition(), []).append(m)
    for msgs in by_partition.values():
        values = [int(m.value()) for m in msgs]
        assert values == sorted(values)  # one producer: per-partition order is send order
        assert [m.offset() for m in msgs] == list(range(len(msgs)))
    # keys pick partitions consistently
    owner: dict[bytes, int] = {}
    for m in got:
        assert owner.setdefault(m.key(), m.partition()) == m.partition()


def test_offsets_for_times_and_seek(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
    base = int(time.time() * 1000) - 100_000
    for i in range(10):
        producer.produce(topic_name, value=str(i).encode(), partition=0, timestamp=base + i * 1000)
        producer.flush(10)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "group.id": "interop-unused", "enable.auto.commit": False})
    try:
        found = consumer.offsets_for_times([TopicPartition(topic_name, 0, base + 4500)],
                                           timeout=10)
        assert found[0].offset == 5
        found = consumer.offsets_for_times([TopicPartition(topic_name, 0, base + 99_000)],
                                           timeout=10)
        assert found[0].offset == -1  # no record that late: end
        low, high = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)
        assert (low, high) == (0, 10)
        consumer.assign([TopicPartition(topic_name, 0, 7)])
        msg = poll_message(consumer, timeout=10, what="a record at offset 7")
        assert msg.offset() == 7 and msg.value() == b"7"
        assert msg.timestamp()[1] == base + 7000
        consumer.seek(TopicPartition(topic_name, 0, 2))
        msg = poll_message(consumer, timeout=10, what="a record after the seek")
        assert msg.offset() == 2
    finally:
        consumer.close()


def test_admin_create_describe_alter_delete(cluster, topic_name):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.create_topics([NewTopic(topic_name, num_partitions=3, replication_factor=1,
                                            config={"retention.ms": "3600000"})])
    futures[topic_name].result(10)
    with pytest.raises(Exception) as exists:
        admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    assert exists.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    meta = admin.list_topics(timeout=10)
    assert len(meta.topics[topic_name].partitions) == 3
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "3600000"
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].is_default
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    admin.incremental_alter_configs([resource])[resource].result(10)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == "604800000"
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("segment.bytes", "-5", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception) as invalid:
        admin.incremental_alter_configs([bad])[bad].result(10)
    assert invalid.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "segment.bytes" in invalid.value.args[0].str()
    admin.delete_topics([topic_name])[topic_name].result(10)
    wait_until(lambda: topic_name not in admin.list_topics(timeout=10).topics, 10,
               f"{topic_name} gone from the metadata", interval=0.2)


def test_create_topic_rejects_invalid_config(cluster, topic_name):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for config in ({"retention.ms": "soon"}, {"cleanup.policy": "shred"},
                   {"no.such.config": "1"}, {"message.timestamp.type": "Wallclock"}):
        future = admin.create_topics([NewTopic(topic_name, 1, 1, config=config)])[topic_name]
        with pytest.raises(Exception) as err:
            future.result(10)
        assert err.value.args[0].code() == KafkaError.INVALID_CONFIG, config
    assert topic_name not in admin.list_topics(timeout=10).topics


def test_log_append_time_topic(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name,
                 config={"message.timestamp.type": "LogAppendTime"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    before = int(time.time() * 1000)
    producer.produce(topic_name, value=b"old", partition=0, timestamp=1_000_000_000_000)
    assert producer.flush(10) == 0
    after = int(time.time() * 1000)
    got = _consume(cluster.bootstrap_servers, topic_name, 1, 1)
    kind, stamp = got[0].timestamp()
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
    assert kind == TIMESTAMP_LOG_APPEND_TIME
    assert before - 1000 <= stamp <= after + 1000


def test_fetch_size_limits(cluster, topic_name):
    """KIP-74: partition_max_bytes and max_bytes bound a fetch, but the first batch always fits."""
    from kio.schema.errors import ErrorCode

    from loglake.segments.records import Record, encode_batch
    from tests.wire import WireClient

    create_topic(cluster.bootstrap_servers, topic_name, partitions=2)
    batch = encode_batch([Record(offset=i, timestamp=1, key=None, value=b"x" * 1000)
                          for i in range(5)])
    with WireClient.connect(cluster.bootstrap_servers) as client:
        for partition in (0, 1):
            for _ in range(3):
                response = client.request(0, 9, {"acks": 1, "timeout": 5000, "topic_data": [
                    {"name": topic_name, "partition_data": [
                        {"index": partition, "records": batch}]}]})
                assert response.responses[0].partition_responses[0].error_code == (
                    ErrorCode.none)

        def fetch(max_bytes: int, partition_max: int):
            response = client.request(1, 12, {
                "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": max_bytes,
                "session_epoch": -1, "topics": [{"topic": topic_name, "partitions": [
                    {"partition": p, "fetch_offset": 0, "partition_max_bytes": partition_max,
                     "current_leader_epoch": -1, "log_start_offset": -1,
                     "last_fetched_epoch": -1} for p in (0, 1)]}]})
            return [len(p.records or b"") for p in response.responses[0].partitions]

        size = len(batch)
        assert fetch(1 << 20, 1 << 20) == [3 * size, 3 * size]
        assert fetch(1 << 20, 2 * size) == [2 * size, 2 * size]
        assert fetch(3 * size, 1 << 20) == [3 * size, 0]
        assert fetch(10, 10) == [size, 0]  # first batch of first partition returned whole
