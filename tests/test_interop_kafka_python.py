"""Interop with kafka-python (pure Python client): produce, consume, codecs, offsets, admin."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from loglake.dev.harness import wait_until

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    yield client
    client.close()


def _read_all(bootstrap, topic, partition, count, **kwargs):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10_000, **kwargs)
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    for msg in consumer:
        got.append(msg)
        if len(got) >= count:
            break
    consumer.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_with_codec(cluster, admin, topic_name, codec):
    admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)])
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                             compression_type=codec, linger_ms=5, acks="all")
    records = [
        (b"key", b"value", []),
        (None, b"no key", []),
        (b"dead", None, []),
        (b"h", b"headers", [("a", b"1"), ("b", b"")]),
    ]
    for key, value, headers in records:
        producer.send(topic_name, key=key, value=value, headers=headers, partition=1)
    producer.flush(15)
    producer.close()
    got = _read_all(cluster.bootstrap_servers, topic_name, 1, len(records))
    assert [(m.key, m.value) for m in got] == [(k, v) for k, v, _ in records]
    assert [list(m.headers) for m in got][3] == [("a", b"1"), ("b", b"")]
    assert [m.offset for m in got] == [0, 1, 2, 3]


def test_offsets_for_times_end_offsets(cluster, admin, topic_name):
    admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1)])
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
    base = int(time.time() * 1000) - 50_000
    for i in range(5):
        producer.send(topic_name, value=b"%d" % i, partition=0, timestamp_ms=base + i * 10)
        producer.flush(10)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers)
    tp = TopicPartition(topic_name, 0)
    found = consumer.offsets_for_times({tp: base + 15})
    assert found[tp].offset == 2 and found[tp].timestamp == base + 20
    assert consumer.beginning_offsets([tp])[tp] == 0
    assert consumer.end_offsets([tp])[tp] == 5
    consumer.close()


def test_admin_describe_and_delete(cluster, admin, topic_name):
    admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1,
                                  topic_configs={"cleanup.policy": "compact"})])
    resource = ConfigResource(ConfigResourceType.TOPIC, topic_name)
    modified = admin.describe_configs([resource])["topic"][topic_name]
    assert set(modified) == {"cleanup.policy"}  # only the override is "modified"
    assert modified["cleanup.policy"]["value"] == "compact"
    assert modified["cleanup.policy"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    everything = admin.describe_configs([resource], config_filter="all")["topic"][topic_name]
    assert everything["retention.ms"]["value"] == "604800000"
    assert everything["retention.ms"]["config_source"] == "DEFAULT_CONFIG"
    assert topic_name in admin.list_topics()
    admin.delete_topics([topic_name])
    wait_until(lambda: topic_name not in admin.list_topics(), 10,
               f"{topic_name} gone from the topic list", interval=0.2)
