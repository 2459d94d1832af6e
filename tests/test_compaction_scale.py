"""Key compaction at full size: 1,000,000 keyed records (10,000 keys, updates and tombstones)
produced through Kafka into a ``cleanup.policy=compact`` topic whose segments roll every ~1 MB
and are deleted locally once tiered (``local.retention.ms=0``); the compaction job on the Delta
table; then a Spark query over the ``register_topics`` view and a confluent-kafka consumer from
offset 0 both return exactly one record per live key with its last value, at the offset it was
produced at (offsets unchanged), and every filler record after it.

Offsets are known without per-record delivery callbacks: one idempotent producer (acks=all, in
order, no duplicates) writes each partition of a fresh topic, so the n-th record sent to a
partition is at offset n; the high watermarks confirm the counts, and every value names the
record's sequence number. About 40 s on a 2-core box (Spark start included); every wait is
bounded by time, the whole test by 4 minutes."""

from __future__ import annotations

import random
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer

from loglake.compaction.common import Cluster
from loglake.compaction.compact import run_compaction
from loglake.segments.tiered_table import TieredTable, cleaned_end
from tests.admin_util import create_topic
from tests.compaction_util import Record, consume_all, quiet, spark_records, watermarks
from tests.spark_session import wait_tiered
from tests.tiering_util import wait_local_start

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from loglake.dev.harness import DevCluster

RECORDS = 1_000_000
KEYS = 10_000
PARTITIONS = 2
FILLERS = 2_000
"""Unique-key records per partition after the keyed ones: 2 MB, more than a segment, so the
segment holding the last keyed record rolls and tiers (the hot tail holds only fillers)."""
FILLER_BYTES = 1_000
SEGMENT_BYTES = 1_000_000
CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES),
          "local.retention.ms": "0", "delete.retention.ms": "0", "file.delete.delay.ms": "0"}
"""``delete.retention.ms=0``: tombstones go at the first compaction, so a live key is exactly a
key whose last record is not a tombstone."""


def key_of(key_id: int) -> bytes:
    return b"key-%05d" % key_id


def value_of(seq: int, key_id: int) -> bytes | None:
    """Record ``seq``'s value: about 1 in 37 is a tombstone (None)."""
    return None if seq % 37 == 5 else b"v-%07d-%05d" % (seq, key_id)


def filler(partition: int, index: int) -> tuple[bytes, bytes]:
    return (b"filler-%d-%05d" % (partition, index),
            (b"f-%d-%05d-" % (partition, index)).ljust(FILLER_BYTES, b"x"))


@dataclass
class Model:
    """What was sent: record ``seq`` has key ``key_ids[seq]`` and goes to partition
    ``key_ids[seq] % PARTITIONS``; ``order[p][o]`` is the seq at offset ``o`` of ``p``."""

    key_ids: array[int] = field(default_factory=lambda: array("H"))
    order: list[array[int]] = field(default_factory=lambda: [array("l") for _ in range(PARTITIONS)])

    @classmethod
    def generate(cls, seed: int = 20261122) -> Model:
        rng = random.Random(seed)
        model = cls(array("H", (rng.randrange(KEYS) for _ in range(RECORDS))))
        for seq, key_id in enumerate(model.key_ids):
            model.order[key_id % PARTITIONS].append(seq)
        return model

    def keyed_end(self, partition: int) -> int:
        """One past the last keyed offset (fillers start here)."""
        return len(self.order[partition])

    def end(self, partition: int) -> int:
        return self.keyed_end(partition) + FILLERS

    def produced_at(self, partition: int, offset: int) -> tuple[bytes, bytes | None]:
        if offset >= self.keyed_end(partition):
            return filler(partition, offset - self.keyed_end(partition))
        seq = self.order[partition][offset]
        key_id = self.key_ids[seq]
        return key_of(key_id), value_of(seq, key_id)

    def last_values(self) -> dict[bytes, bytes | None]:
        """Every key's last value (None: its last record is a tombstone)."""
        last: dict[int, int] = {}
        for seq, key_id in enumerate(self.key_ids):
            last[key_id] = seq
        return {key_of(k): value_of(seq, k) for k, seq in last.items()}

    def compacted(self) -> set[Record]:
        """Kafka's result once every keyed record is cleaned and tombstones expired: the last
        record of each live key, at its offset, and every filler."""
        latest: dict[tuple[int, int], int] = {}
        for partition in range(PARTITIONS):
            for offset, seq in enumerate(self.order[partition]):
                latest[(partition, self.key_ids[seq])] = offset
        kept: set[Record] = set()
        for (partition, _key_id), offset in latest.items():
            key, value = self.produced_at(partition, offset)
            if value is not None:
                kept.add((partition, offset, key, value))
        for partition in range(PARTITIONS):
            for offset in range(self.keyed_end(partition), self.end(partition)):
                kept.add((partition, offset, *self.produced_at(partition, offset)))
        return kept


def produce(bootstrap: str, topic: str, model: Model, *, timeout: float = 90.0) -> None:
    """Every keyed record, then the fillers, with one idempotent acks=all producer; delivery
    reports only for errors."""
    errors: list[Any] = []

    def on_error(error: Any, _msg: Any) -> None:
        if error is not None:
            errors.append(error)

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 20, "batch.size": 256_000,
                         "queue.buffering.max.messages": 1_000_000,
                         "delivery.report.only.error": True, "on_delivery": on_error})
    deadline = time.monotonic() + timeout
    send, poll = producer.produce, producer.poll

    def put(key: bytes, value: bytes | None, partition: int) -> None:
        while True:
            try:
                send(topic, value, key, partition)
                return
            except BufferError:
                poll(0.05)
                assert time.monotonic() < deadline, "producing took too long"

    for seq, key_id in enumerate(model.key_ids):
        put(key_of(key_id), value_of(seq, key_id), key_id % PARTITIONS)
        if seq % 20_000 == 0:
            poll(0)
            assert not errors, errors[:3]
    for partition in range(PARTITIONS):
        for index in range(FILLERS):
            put(*filler(partition, index), partition)
    remaining = producer.flush(max(1.0, deadline - time.monotonic()))
    assert remaining == 0, f"{remaining} records not delivered in {timeout:g} s"
    assert not errors, errors[:3]


def check_result(name: str, rows: list[Record], model: Model, expected: set[Record],
                 live: dict[bytes, bytes]) -> None:
    """``rows`` (from Spark or a consumer) against the model, with readable failures."""
    offsets = Counter((p, o) for p, o, _, _ in rows)
    duplicated = [place for place, n in offsets.items() if n > 1]
    assert not duplicated, f"{name}: offsets returned twice: {duplicated[:5]}"
    moved = [(p, o, k, v) for p, o, k, v in rows if model.produced_at(p, o) != (k, v)]
    assert not moved, f"{name}: records not at the offset they were produced at: {moved[:3]}"
    keyed = {k: v for _, _, k, v in rows if k is not None and k.startswith(b"key-")}
    per_key = Counter(k for _, _, k, _ in rows if k is not None and k.startswith(b"key-"))
    assert all(n == 1 for n in per_key.values()), (
        f"{name}: keys with several records: {[k for k, n in per_key.items() if n > 1][:5]}")
    assert keyed == live, (f"{name}: {len(keyed)} keyed records, {len(live)} live keys; "
                           f"missing {sorted(set(live) - set(keyed))[:5]}, extra "
                           f"{sorted(set(keyed) - set(live))[:5]}, stale "
                           f"{[k for k in keyed if k in live and keyed[k] != live[k]][:5]}")
    assert set(rows) == expected, f"{name}: differs from Kafka's compaction rule"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_compaction_of_a_million_keyed_records(cluster: DevCluster, topic_name: str,
                                               spark: SparkSession) -> None:
    bootstrap, zookeeper = cluster.bootstrap_servers, cluster.zookeeper_connect
    timings: dict[str, float] = {}
    began = time.monotonic()

    def lap(name: str) -> None:
        nonlocal began
        timings[name] = round(time.monotonic() - began, 1)
        began = time.monotonic()

    model = Model.generate()
    last = model.last_values()
    live = {k: v for k, v in last.items() if v is not None}
    assert len(last) == KEYS and KEYS - len(live) >= 100  # some keys end with a tombstone
    create_topic(bootstrap, topic_name, partitions=PARTITIONS, config=CONFIG)
    lap("model")
    produce(bootstrap, topic_name, model)
    for partition in range(PARTITIONS):
        assert watermarks(bootstrap, topic_name, partition) == (0, model.end(partition))
    lap("produce")

    # every keyed record (and a filler after it) tiered, and deleted locally: consumers read
    # offsets below the fillers from the table
    keyed_end = {p: model.keyed_end(p) for p in range(PARTITIONS)}
    wait_tiered(zookeeper, topic_name, {p: end + 1 for p, end in keyed_end.items()},
                timeout=120)
    for partition, end in keyed_end.items():
        wait_local_start(zookeeper, topic_name, [partition], above=end - 1, timeout=60)
    lap("tier")

    with Cluster(zookeeper) as jobs:
        results = run_compaction(jobs, spark=lambda: spark, topic=topic_name, progress=quiet())
        assert len(results) == PARTITIONS and all(r.committed for r in results), results
        table = TieredTable(jobs.storage, topic_name)
        table.table(refresh=True)
        cleaned = {p: cleaned_end(table, p) for p in range(PARTITIONS)}
    assert all(cleaned[p] > keyed_end[p] for p in range(PARTITIONS)), (cleaned, keyed_end)
    assert sum(r.rows_in for r in results) >= RECORDS
    assert sum(r.rows_out for r in results) < len(live) + PARTITIONS * FILLERS
    lap("compact")

    expected = model.compacted()
    assert len({k for _, _, k, _ in expected if k and k.startswith(b"key-")}) == len(live)
    rows = spark_records(spark, zookeeper, topic_name)
    check_result("Spark", rows, model, expected, live)
    lap("spark")

    got = consume_all(bootstrap, topic_name, range(PARTITIONS),
                      until={p: model.end(p) for p in range(PARTITIONS)}, timeout=60)
    check_result("consumer", got, model, expected, live)
    lap("consume")
    print(f"phases (s): {timings}; {len(live)} live keys of {KEYS}; compaction "
          f"{sum(r.rows_in for r in results)} -> {sum(r.rows_out for r in results)} rows")
