"""Helpers for the clean-up job tests: keyed producers, Kafka's compaction rule as a model, and
readers of a topic through Kafka and Spark. Bounded by count and time; loopback only."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from loglake.compaction.common import Cluster, Progress
from loglake.dev.harness import wait_until
from loglake.segments.tiered_table import TieredTable

Record = tuple[int, int, bytes | None, bytes | None]
"""(partition, offset, key, value)"""


@dataclass(frozen=True)
class Spec:
    partition: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None = None


HOUR_MS = 3_600_000
EXPIRING_CONFIG = {"segment.bytes": "40000", "local.retention.ms": "0",
                   "retention.ms": str(2 * HOUR_MS), "file.delete.delay.ms": "0"}
"""Topic config of the retention scenarios: small segments, none kept on the brokers once tiered,
2 h retention (records 3 h old expire), tier files deleted at once."""


def old_then_new(count: int = 3000, *, value: Callable[[int], bytes] | None = None
                 ) -> list[Spec]:
    """``count`` records timestamped 3 h ago (expired under :data:`EXPIRING_CONFIG`), then
    ``count`` current ones, all for partition 0 with keys ``k0`` .. ``k<count-1>`` (offset
    ``o`` holds key ``k<o % count>``). Values ``old-NNNNNN`` / ``new-NNNNNN``, or
    ``value(o)``."""
    now = int(time.time() * 1000)
    old = [Spec(0, b"k%d" % i, b"old-%06d" % i if value is None else value(i),
                now - 3 * HOUR_MS + i) for i in range(count)]
    new = [Spec(0, b"k%d" % i, b"new-%06d" % i if value is None else value(count + i))
           for i in range(count)]
    return old + new


def produce_specs(bootstrap: str, topic: str, specs: Iterable[Spec], *,
                  timeout: float = 60.0) -> list[Record]:
    """Produce ``specs`` with an idempotent acks=all producer; return the acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, "batch.size": 16000})
    acked: list[Record] = []
    errors: list[Any] = []

    def report(error: Any, msg: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            acked.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    for spec in specs:
        kwargs: dict[str, Any] = {"partition": spec.partition, "key": spec.key,
                                  "value": spec.value, "on_delivery": report}
        if spec.timestamp is not None:
            kwargs["timestamp"] = spec.timestamp
        for _ in range(10_000):
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(timeout) == 0, "records not delivered in time"
    assert not errors, errors[:3]
    return acked


def compacted_model(acked: Iterable[Record], cleaned: dict[int, int], *,
                    tombstones_expired: bool = False) -> set[Record]:
    """Kafka's result: below each partition's cleaned end the last record per key (null keys
    all), tombstones dropped when expired; everything at or above it."""
    records = sorted(acked, key=lambda r: (r[0], r[1]))
    latest: dict[tuple[int, bytes], int] = {}
    for partition, offset, key, _value in records:
        if key is not None and offset < cleaned.get(partition, 0):
            latest[(partition, key)] = offset
    kept = set()
    for record in records:
        partition, offset, key, value = record
        below = offset < cleaned.get(partition, 0)
        if not below or key is None or (
                latest[(partition, key)] == offset and not (value is None and tombstones_expired)):
            kept.add(record)
    return kept


def consume_all(bootstrap: str, topic: str, partitions: Iterable[int], *, until: dict[int, int],
                start: int = 0, reset: str = "earliest", timeout: float = 60.0) -> list[Record]:
    """Records from ``start`` until each partition's offset reaches ``until[p] - 1``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time()}",
                         "enable.auto.commit": False, "auto.offset.reset": reset,
                         "enable.partition.eof": False})
    got: list[Record] = []
    done = {p for p in partitions if until.get(p, 0) <= start}
    try:
        consumer.assign([TopicPartition(topic, p, start) for p in partitions])

        def all_done() -> bool:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is not None:
                    assert msg.error().code() == KafkaError._PARTITION_EOF, str(msg.error())
                    continue
                got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
                if msg.offset() >= until[msg.partition()] - 1:
                    done.add(msg.partition())
            return len(done) >= len(until)

        if len(done) < len(until):
            wait_until(all_done, timeout, lambda: f"{topic}: only partitions {sorted(done)} "
                                                  f"reached {until}", interval=0)
    finally:
        consumer.close()
    return got


def spark_records(spark: Any, zookeeper: str, topic: str) -> list[Record]:
    from loglake.streaming.sql_views import quote_identifier, register_topics

    register_topics(spark, zookeeper=zookeeper, topics=[topic])
    rows = spark.sql(f"SELECT partition, offset, key, value FROM {quote_identifier(topic)}"
                     ).collect()
    return [(r["partition"], r["offset"], None if r["key"] is None else bytes(r["key"]),
             None if r["value"] is None else bytes(r["value"])) for r in rows]


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(low), int(high)
    finally:
        consumer.close()


def wait_earliest(bootstrap: str, topic: str, partition: int, expected: int, *,
                  timeout: float = 30.0) -> int:
    """Wait until ListOffsets(earliest) reports ``expected`` (brokers cache ~5 s)."""
    wait_until(lambda: watermarks(bootstrap, topic, partition)[0] == expected, timeout,
               f"{topic}-{partition}: earliest offset {expected}", interval=0.5)
    return expected


def table_version(cluster: Cluster, topic: str) -> int:
    return TieredTable(cluster.storage, topic).table(refresh=True).version()


def job_commits(cluster: Cluster, topic: str, since: int) -> list[dict[str, Any]]:
    """Commits after version ``since`` that are not tier appends (what a job committed)."""
    history = TieredTable(cluster.storage, topic).table(refresh=True).history()
    return [entry for entry in history if int(entry.get("version", -1)) > since
            and entry.get("loglake.operation") != "tier"]


def quiet() -> Progress:
    return Progress(io.StringIO())


class BackgroundProducer:
    """Produces ``Spec``s from a thread until stopped (bounded by ``limit``); keeps the acked."""

    def __init__(self, bootstrap: str, topic: str, make: Any, *, limit: int) -> None:
        self.bootstrap, self.topic, self.make, self.limit = bootstrap, topic, make, limit
        self.acked: list[Record] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(120)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def wait(self, timeout: float) -> None:
        """Let the producer finish its ``limit`` (at most ``timeout`` seconds)."""
        self._thread.join(timeout)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set() and i < self.limit:
            chunk = [self.make(j) for j in range(i, min(i + 500, self.limit))]
            self.acked += produce_specs(self.bootstrap, self.topic, chunk)
            i += len(chunk)
            time.sleep(0.05)
