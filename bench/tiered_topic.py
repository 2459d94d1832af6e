"""A topic filled through a broker and tiered into its Delta table, for the Spark read benchmarks
(``spark_scan.py``, ``spark_kafka_vs_loglake.py``).

:func:`create_topic` makes it with 16 MiB segments and ``segment.ms`` of 10 s; :func:`produce`
writes ``records`` values of ``VALUE_BYTES`` (a 12-digit sequence number, then random bytes)
round-robin over the partitions (:func:`produce_values`, for values of the caller's), then, once
``segment.ms`` has passed, one marker record per partition: it rolls the active segments, so every
benchmark record gets tiered and the hot tail is just the markers. :func:`wait_tiered` returns
once that is so. Every step is bounded by its ``timeout`` and raises :class:`BenchmarkError` past
it; progress goes to stderr.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from measure import BenchmarkError, Progress, log

from loglake.catalog.zookeeper import ClusterCatalog

SEGMENT_BYTES = 16 * 1024 * 1024
SEGMENT_MS = 10_000  # the marker record after this long rolls the last full segment
VALUE_BYTES = 100


def create_topic(bootstrap: str, topic: str, partitions: int, *,
                 config: Mapping[str, str] | None = None) -> None:
    """Create ``topic`` (replication factor 1) with the segment settings plus ``config``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1,
                   config={"segment.bytes": str(SEGMENT_BYTES), "segment.ms": str(SEGMENT_MS),
                           **(config or {})})
    admin.create_topics([new], operation_timeout=15)[topic].result(timeout=30)


def produce(bootstrap: str, topic: str, records: int, partitions: int, timeout: float) -> None:
    """Produce the benchmark records and then the markers (see the module docstring)."""
    pool = [os.urandom(VALUE_BYTES - 12) for _ in range(4096)]
    produce_values(bootstrap, topic, lambda i: b"%012d" % i + pool[i & 4095], records,
                   partitions, timeout, config={"compression.type": "none"})


def produce_values(bootstrap: str, topic: str, value: Callable[[int], bytes | None],
                   records: int, partitions: int, timeout: float, *,
                   config: Mapping[str, str] | None = None, poll_every: int = 100_000) -> None:
    """Produce ``value(i)`` for each ``i`` below ``records`` round-robin over the partitions
    (producer settings for throughput, plus ``config``), progress every ``poll_every``
    records; then, once ``segment.ms`` has passed, one marker record per partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "1",
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 500_000,
                         **(config or {})})
    progress = Progress("produce", records)
    deadline = time.monotonic() + timeout
    for i in range(records):
        encoded = value(i)
        while True:
            try:
                producer.produce(topic, encoded, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
                if time.monotonic() > deadline:
                    raise BenchmarkError("produce did not finish in time") from None
        if i % poll_every == 0:
            producer.poll(0)
            progress.update(i)
    if producer.flush(max(1.0, deadline - time.monotonic())):
        raise BenchmarkError("produce did not finish in time")
    progress.update(records, force=True)
    time.sleep(SEGMENT_MS / 1000 + 1)
    for partition in range(partitions):
        producer.produce(topic, b"marker", partition=partition)
    if producer.flush(30):
        raise BenchmarkError("the marker records were not delivered")


def wait_tiered(zookeeper: str, topic: str, partitions: int, timeout: float
                ) -> dict[int, dict[str, Any]]:
    """Wait until every record but the markers is tiered; return the tiering status by
    partition (``tiered_end``, ``high_watermark``, ...)."""
    catalog = ClusterCatalog(zookeeper)
    catalog.start()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = catalog.tiering_status(topic)
            if len(status) == partitions and all(  # all but the marker (the active segment)
                    int(s.get("tiered_end") or 0) >= int(s.get("high_watermark") or 0) - 1 > 0
                    for s in status.values()):
                return status
            tiered = sum(int(s.get("tiered_end") or 0) for s in status.values())
            log(f"  tiering: {tiered:,} records in the Delta table")
            time.sleep(2)
        raise BenchmarkError(f"tiering did not catch up within {timeout:.0f} s")
    finally:
        catalog.stop()
