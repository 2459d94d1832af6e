"""Helpers for tiering tests: produce distinctive records, wait for tiering, read the table.

Bounded by time and count; talks only to loopback brokers of a DevCluster; starts no process.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from kazoo.client import KazooClient

from loglake.catalog.zookeeper import ClusterCatalog
from loglake.dev.harness import wait_until
from loglake.segments.storage import Storage
from loglake.segments.tiered_table import TieredTable
from tests.clients import consume_messages

SMALL_SEGMENTS = {"segment.bytes": "40000"}
"""Topic settings that make segments roll (and so tier) after a few hundred records; producers
keep batches below this (``batch.size`` 16000)."""

BASE_TIMESTAMP_MS = (int(time.time()) - 3600) * 1000
"""Record timestamps start an hour ago: inside the default 7-day retention.ms, so only the
retention a test configures deletes anything."""

PRODUCER = {"enable.idempotence": True, "acks": "all", "linger.ms": 5, "batch.size": 16000,
            "message.timeout.ms": 60000}


@dataclass(frozen=True)
class Sent:
    """One acknowledged record: where it went and what it held."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int

    @classmethod
    def of(cls, msg: Message) -> Sent:
        """The record a confluent-kafka consumer returned."""
        return cls(msg.partition(), msg.offset(), msg.key(), msg.value(),
                   tuple(msg.headers() or ()), msg.timestamp()[1])


def record_spec(i: int) -> dict[str, Any]:
    """The ``i``-th test record: null keys, null values (tombstones), headers with null values
    and explicit timestamps all occur."""
    key = None if i % 7 == 3 else b"key-%d" % (i % 50)
    value = None if i % 11 == 5 else b"value-%06d-" % i + bytes(range(i % 64))
    headers = [("n", b"%d" % i)] if i % 3 else [("n", b"%d" % i), ("empty", None)]
    return {"key": key, "value": value, "headers": headers,
            "timestamp": BASE_TIMESTAMP_MS + i * 10}


def produce(bootstrap: str, topic: str, count: int, *, start: int = 0,
            config: dict[str, Any] | None = None, timeout: float = 60.0) -> list[Sent]:
    """Produce records ``start..start+count-1`` (see :func:`record_spec`); return the acked."""
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER, **(config or {})})
    sent: list[Sent] = []
    errors: list[Any] = []

    def reporter(spec: dict[str, Any]) -> Any:
        def report(error: Any, msg: Any) -> None:
            if error is not None:
                errors.append(error)
                return
            # delivery reports do not carry headers: take them from what was sent
            sent.append(Sent(msg.partition(), msg.offset(), spec["key"], spec["value"],
                             tuple(spec["headers"]), spec["timestamp"]))
        return report

    for i in range(start, start + count):
        spec = record_spec(i)
        while True:
            try:
                producer.produce(topic, on_delivery=reporter(spec), **spec)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(timeout)
    assert remaining == 0, f"{remaining} records not delivered within {timeout}s"
    assert not errors, f"delivery errors: {errors[:3]}"
    return sent


def consume(bootstrap: str, topic: str, partitions: Iterable[int], *, expected: int,
            timeout: float = 60.0) -> list[Sent]:
    """Every record of ``partitions`` from offset 0 (until ``expected`` were read)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "fetch.max.bytes": 1_000_000, "max.partition.fetch.bytes": 200_000})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        return [Sent.of(msg) for msg in consume_messages(consumer, expected, timeout=timeout,
                                                         what=f"records of {topic}")]
    finally:
        consumer.close()


def by_place(records: Iterable[Sent]) -> dict[tuple[int, int], Sent]:
    return {(r.partition, r.offset): r for r in records}


def wait_tiered(storage: str | Storage, topic: str, partitions: Iterable[int], *,
                at_least: int, timeout: float = 60.0) -> dict[int, int]:
    """Wait until every partition's tiered end is >= ``at_least``; return the ends."""
    table = TieredTable(storage if isinstance(storage, Storage) else Storage.from_url(storage),
                        topic)
    wanted = list(partitions)

    last: dict[str, object] = {}

    def reached() -> dict[int, int] | None:
        ends = last["ends"] = {p: table.tiered_end(p) for p in wanted}
        if ends and all(e is not None and e >= at_least for e in ends.values()):
            return {p: int(e or 0) for p, e in ends.items()}
        return None

    # an error while reading counts as "not yet": the table may not be created yet
    return wait_until(reached, timeout, lambda: f"{topic}: tiered ends {last.get('ends')} did "
                      f"not reach {at_least}", interval=0.3, ignore=(Exception,))


def wait_local_start(zookeeper_connect: str, topic: str, partitions: Iterable[int], *,
                     above: int = 0, timeout: float = 60.0) -> dict[int, int]:
    """Wait until the leaders report a local log start > ``above`` for every partition (local
    retention deleted tiered segments)."""
    catalog = ClusterCatalog(zookeeper_connect)
    catalog.start()
    try:
        last: dict[str, object] = {}

        def passed() -> dict[int, int] | None:
            status = last["status"] = catalog.tiering_status(topic)
            starts = {p: int(status.get(p, {}).get("local_start") or 0) for p in partitions}
            return starts if all(s > above for s in starts.values()) else None

        return wait_until(passed, timeout, lambda: f"{topic}: local log starts did not pass "
                          f"{above}: {last.get('status')}", interval=0.3)
    finally:
        catalog.stop()


def table_rows(storage: str | Storage, topic: str, partition: int) -> pa.Table:
    """Every row of ``partition`` in the topic's Delta table, in offset order."""
    table = TieredTable(storage if isinstance(storage, Storage) else Storage.from_url(storage),
                        topic)
    batches = list(table.read_rows(partition, 0))
    if not batches:
        return pa.table({"offset": pa.array([], pa.int64())})
    return pa.Table.from_batches(batches).sort_by("offset")


def as_sent(rows: pa.Table, partition: int) -> list[Sent]:
    timestamps = rows.column("timestamp").cast(pa.int64()).to_pylist()
    return [
        Sent(partition, r["offset"], r["key"], r["value"],
             tuple((h["key"], h["value"]) for h in r["headers"] or ()), timestamps[i] // 1000)
        for i, r in enumerate(rows.select(["offset", "key", "value", "headers"]).to_pylist())
    ]


def zk_client(connect: str) -> KazooClient:
    client = KazooClient(hosts=connect)
    client.start(timeout=15)
    return client
