"""The SDK (loglake.client) against a real broker and ZooKeeper (the session ``cluster``).

Pure helpers (error mapping) are checked without a cluster at the end of the module.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError
from kio.schema.errors import ErrorCode

from loglake.client import (
    Admin,
    BrokerError,
    ClientError,
    Consumer,
    Producer,
    Record,
    RecordMetadata,
)
from loglake.client.errors import from_kafka_error
from loglake.client.model import COMPRESSION_VALUES, normalize_headers
from loglake.errors import LoglakeError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def bootstrap(cluster: Any) -> str:
    return str(cluster.bootstrap_servers)


@pytest.fixture
def admin(bootstrap: str) -> Iterator[Admin]:
    with Admin(bootstrap, timeout=20) as client:
        yield client


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def read_all(bootstrap: str, topic: str, count: int, **assign: Any) -> list[Record]:
    with Consumer(bootstrap) as consumer:
        consumer.assign(topic, **assign)
        return list(consumer.consume(count, timeout=10))


# -- admin -------------------------------------------------------------------------------------


def test_topic_lifecycle(admin: Admin, topic_name: str) -> None:
    admin.create_topic(topic_name, partitions=3, config={"retention.ms": "3600000"})

    topics = admin.list_topics()
    assert topic_name in topics
    info = admin.describe_topic(topic_name)
    assert info == topics[topic_name]
    assert [p.partition for p in info.partitions] == [0, 1, 2]
    assert info.replication_factor == 1
    for partition in info.partitions:
        assert partition.leader >= 0
        assert partition.replicas == (partition.leader,)
        assert partition.isr == (partition.leader,)

    configs = admin.describe_config(topic_name)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == "dynamic_topic_config"
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].is_default

    admin.alter_config(topic_name, set={"cleanup.policy": "compact"}, delete=["retention.ms"])
    configs = admin.describe_config(topic_name)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["cleanup.policy"].source == "dynamic_topic_config"
    assert configs["retention.ms"].is_default

    admin.delete_topic(topic_name)
    assert topic_name not in admin.list_topics()
    with pytest.raises(BrokerError) as caught:
        admin.describe_topic(topic_name)
    assert caught.value.code == ErrorCode.unknown_topic_or_partition


def test_create_existing_topic(admin: Admin, topic_name: str) -> None:
    admin.create_topic(topic_name)
    with pytest.raises(BrokerError) as caught:
        admin.create_topic(topic_name)
    assert caught.value.code == ErrorCode.topic_already_exists
    assert topic_name in str(caught.value)


def test_create_topic_invalid_config(admin: Admin, topic_name: str) -> None:
    with pytest.raises(BrokerError) as caught:
        admin.create_topic(topic_name, config={"retention.ms": "not-a-number"})
    assert caught.value.code == ErrorCode.invalid_config
    assert "retention.ms" in str(caught.value)
    assert isinstance(caught.value, LoglakeError)


def test_alter_config_invalid_value(admin: Admin, topic_name: str) -> None:
    admin.create_topic(topic_name)
    with pytest.raises(BrokerError) as caught:
        admin.alter_config(topic_name, set={"cleanup.policy": "sometimes"})
    assert caught.value.code == ErrorCode.invalid_config


def test_delete_unknown_topic(admin: Admin, topic_name: str) -> None:
    with pytest.raises(BrokerError) as caught:
        admin.delete_topic(topic_name)
    assert caught.value.code == ErrorCode.unknown_topic_or_partition


# -- produce / consume round trips -------------------------------------------------------------

SAMPLES: list[dict[str, Any]] = [
    {"key": b"user-1", "value": b"keyed", "headers": []},
    {"key": None, "value": b"unkeyed", "headers": []},
    {"key": b"user-2", "value": None, "headers": []},  # tombstone
    {"key": None, "value": b"", "headers": []},  # empty, not null
    {
        "key": b"user-3",
        "value": "h\u00e9aders \u2713".encode(),
        "headers": [("trace", b"abc"), ("trace", b"def"), ("empty", b""), ("null", None)],
    },
    {"key": b"\x00\xff", "value": bytes(range(256)) * 40, "headers": [("bin", b"\x00\x01")]},
]


@pytest.mark.parametrize("compression", COMPRESSION_VALUES)
def test_round_trip_each_codec(
    admin: Admin, bootstrap: str, topic_name: str, compression: Any
) -> None:
    admin.create_topic(topic_name, partitions=2)
    base_ts = 1_700_000_000_000
    with Producer(bootstrap, compression=compression, linger_ms=20) as producer:
        deliveries = [
            producer.send(
                topic_name,
                sample["value"],
                key=sample["key"],
                headers=sample["headers"],
                partition=1,
                timestamp_ms=base_ts + i,
            )
            for i, sample in enumerate(SAMPLES)
        ]
        producer.flush()
    reports = [d.result(0) for d in deliveries]
    assert [r.offset for r in reports] == list(range(len(SAMPLES)))
    assert {r.partition for r in reports} == {1}

    records = read_all(bootstrap, topic_name, len(SAMPLES), partitions=[1])
    assert records == [
        Record(
            topic=topic_name,
            partition=1,
            offset=i,
            timestamp_ms=base_ts + i,
            key=sample["key"],
            value=sample["value"],
            headers=list(sample["headers"]),
        )
        for i, sample in enumerate(SAMPLES)
    ]
    with Consumer(bootstrap) as consumer:
        assert consumer.watermarks(topic_name, 0) == (0, 0)
        assert consumer.watermarks(topic_name, 1) == (0, len(SAMPLES))


def test_send_and_wait_str_values_and_callbacks(
    admin: Admin, bootstrap: str, topic_name: str
) -> None:
    admin.create_topic(topic_name)
    seen: list[tuple[RecordMetadata | None, LoglakeError | None]] = []
    with Producer(bootstrap) as producer:
        assert producer.send_and_wait(topic_name, "first", key="k") == (0, 0)
        delivery = producer.send(
            topic_name, "second", headers={"h": "v"},
            on_delivery=lambda meta, err: seen.append((meta, err)),
        )
        metadata = delivery.result(timeout=10)
        assert delivery.done() and delivery.exception() is None
    assert (metadata.topic, metadata.partition, metadata.offset) == (topic_name, 0, 1)
    assert seen == [(metadata, None)]
    [first, second] = read_all(bootstrap, topic_name, 2)
    assert (first.key, first.value) == (b"k", b"first")
    assert (second.key, second.value, second.headers) == (None, b"second", [("h", b"v")])


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks_modes(admin: Admin, bootstrap: str, topic_name: str, acks: Any) -> None:
    admin.create_topic(topic_name)
    with Producer(bootstrap, acks=acks) as producer:
        for i in range(5):
            producer.send(topic_name, f"v{i}".encode())
    records = read_all(bootstrap, topic_name, 5)
    assert [r.value for r in records] == [f"v{i}".encode() for i in range(5)]


def test_keyed_records_keep_partition(admin: Admin, bootstrap: str, topic_name: str) -> None:
    admin.create_topic(topic_name, partitions=4)
    with Producer(bootstrap) as producer:
        placed = {
            key: {producer.send_and_wait(topic_name, b"x", key=key)[0] for _ in range(3)}
            for key in (b"a", b"b", b"c", b"d", b"e")
        }
    assert all(len(partitions) == 1 for partitions in placed.values())


def test_consumer_positions(admin: Admin, bootstrap: str, topic_name: str) -> None:
    admin.create_topic(topic_name)
    base_ts = int(time.time() * 1000) - 60_000
    with Producer(bootstrap) as producer:
        for i in range(10):
            producer.send(topic_name, str(i).encode(), timestamp_ms=base_ts + 1000 * i)
    with Consumer(bootstrap) as consumer:
        assert consumer.partitions_for(topic_name) == [0]
        assert consumer.watermarks(topic_name, 0) == (0, 10)
        assert consumer.offsets_for_times(topic_name, base_ts + 3500) == {0: 4}
        assert consumer.offsets_for_times(topic_name, base_ts + 60_000) == {0: None}

        assert consumer.assign(topic_name, start=7) == [0]
        assert consumer.assignment() == [(topic_name, 0)]
        assert [r.offset for r in consumer.consume(10, timeout=3)] == [7, 8, 9]
        assert consumer.position(topic_name, 0) == 10

        consumer.seek(topic_name, 0, 2)
        assert [r.value for r in consumer.consume(2, timeout=10)] == [b"2", b"3"]
        consumer.seek(topic_name, 0, "earliest")
        first = consumer.poll(10)
        assert first is not None and first.offset == 0

        consumer.assign(topic_name, start="latest")
        assert list(consumer.consume(timeout=1.5)) == []
        with Producer(bootstrap) as producer:
            producer.send(topic_name, b"new")
        assert [r.value for r in consumer.consume(1, timeout=10)] == [b"new"]


def test_consumer_unknown_topic_and_partition(
    admin: Admin, bootstrap: str, topic_name: str
) -> None:
    with Consumer(bootstrap) as consumer:
        with pytest.raises(BrokerError) as caught:
            consumer.assign(topic_name)
        assert caught.value.code == ErrorCode.unknown_topic_or_partition
        admin.create_topic(topic_name, partitions=2)
        with pytest.raises(BrokerError, match="no partition 5"):
            consumer.assign(topic_name, [0, 5])
        with pytest.raises(ValueError):
            consumer.assign(topic_name, start=-3)


# -- unreachable cluster ----------------------------------------------------------------------


def test_admin_unreachable_is_bounded() -> None:
    started = time.monotonic()
    with pytest.raises(ClientError) as caught, Admin(f"127.0.0.1:{unused_port()}", timeout=2) \
            as admin:
        admin.list_topics()
    assert time.monotonic() - started < 10
    assert caught.value.code in (ErrorCode.request_timed_out, ErrorCode.network_exception)
    assert "127.0.0.1" in str(caught.value)


def test_producer_unreachable_delivery_fails() -> None:
    producer = Producer(f"127.0.0.1:{unused_port()}", delivery_timeout_ms=1500)
    started = time.monotonic()
    delivery = producer.send("anything", b"x")
    error = delivery.exception(timeout=15)
    assert time.monotonic() - started < 10
    assert isinstance(error, ClientError)
    assert error.code == ErrorCode.request_timed_out
    with pytest.raises(ClientError):
        producer.partitions_for("anything", timeout=1)


def test_consumer_unreachable_is_bounded() -> None:
    started = time.monotonic()
    with Consumer(f"127.0.0.1:{unused_port()}", request_timeout_s=2) as consumer, \
            pytest.raises(ClientError):
        consumer.assign("anything")
    assert time.monotonic() - started < 10


# -- pure helpers (no cluster) ----------------------------------------------------------------


def test_error_mapping() -> None:
    broker = from_kafka_error(KafkaError(KafkaError.INVALID_CONFIG, "bad value"), "create topic")
    assert isinstance(broker, BrokerError)
    assert broker.code == ErrorCode.invalid_config
    assert not broker.retriable
    assert "create topic: bad value" in str(broker)

    local = from_kafka_error(KafkaError(KafkaError._MSG_TIMED_OUT), "send")
    assert isinstance(local, ClientError)
    assert local.code == ErrorCode.request_timed_out
    assert local.retriable
    assert local.kafka_name == "_MSG_TIMED_OUT"

    unknown = from_kafka_error(KafkaError(KafkaError._FS), "x")
    assert isinstance(unknown, ClientError)
    assert unknown.code == ErrorCode.unknown_server_error


def test_header_normalization_and_argument_checks() -> None:
    assert normalize_headers({"a": "x", "b": None}) == [("a", b"x"), ("b", None)]
    assert normalize_headers([("a", b"1"), ("a", "2")]) == [("a", b"1"), ("a", b"2")]
    with pytest.raises(TypeError):
        normalize_headers([("a", 5)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="idempotence"):
        Producer("127.0.0.1:1", acks="1", idempotence=True)
    with pytest.raises(ValueError, match="compression"):
        Producer("127.0.0.1:1", compression="brotli")  # type: ignore[arg-type]
