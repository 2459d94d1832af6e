"""Tables hold committed data; Spark reads committed data (issue 14, item 4), live.

A real broker (the shared ``cluster``: it tiers into the dev cluster's storage) and a
confluent-kafka transactional producer: a compacted topic with small segments and no local
retention gets committed and aborted transactions. Checked, with the producer's delivery
reports as ground truth (offsets of committed and of aborted records):

* the Delta table holds exactly the committed records of the tiered offsets, at their offsets
  (no aborted record, no marker row);
* a read_committed Kafka consumer from offset 0 (served from the table: local segments are
  gone) gets exactly the committed records, and so does a read_uncommitted one for the tiered
  offsets;
* while a transaction is open, ListOffsets(latest, read_committed) and the sources' ``latest``
  are its first offset: the Spark batch read and a streaming query (availableNow) return every
  committed record and none of the open transaction's, without waiting on it; with
  ``kafka.isolation.level=read_uncommitted`` the batch read goes on to the high watermark;
* compaction (Spark) of the table and a Spark SQL view afterwards: the last committed value
  of every key, offsets intact, nothing aborted.

Spark tests are slow on a small box: run this file alone (``-n 0``).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from loglake.client.admin import Admin
from loglake.compaction.common import Cluster
from loglake.compaction.compact import run_compaction
from loglake.dev.harness import DevCluster, wait_until
from loglake.segments.tiered_table import TieredTable
from tests.admin_util import create_topic
from tests.clients import consume_messages
from tests.compaction_util import quiet, spark_records
from tests.spark_session import storage_of
from tests.tiering_util import wait_local_start

TOPIC_CONFIG = {"segment.bytes": "8000", "cleanup.policy": "compact",
                "local.retention.ms": "0", "file.delete.delay.ms": "0",
                "min.cleanable.dirty.ratio": "0.01"}
TRANSACTIONS = 48
PER_TRANSACTION = 25
KEYS = 20

Placed = dict[int, bytes]
"""offset -> value."""


class TxnWriter:
    """A transactional producer that records where each record landed."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap,
                                  "transactional.id": f"tier-{uuid.uuid4().hex[:8]}",
                                  "linger.ms": 5, "transaction.timeout.ms": 60000})
        self.producer.init_transactions(30)
        self.pending: Placed = {}
        self.errors: list[Any] = []

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.errors.append(error)
        else:
            self.pending[message.offset()] = message.value()

    def send(self, key: int, value: bytes) -> None:
        self.producer.produce(self.topic, key=b"key-%d" % key, value=value, partition=0,
                              on_delivery=self._delivered)

    def transaction(self, tag: str, count: int, *, commit: bool) -> Placed:
        self.producer.begin_transaction()
        for i in range(count):
            self.send(i % KEYS, b"%s-%d" % (tag.encode(), i))
        if commit:
            self.producer.commit_transaction(30)
        else:
            self.producer.flush(30)
            self.producer.abort_transaction(30)
        assert not self.errors, self.errors[:3]
        placed, self.pending = self.pending, {}
        assert len(placed) == count
        return placed


def _table_rows(zookeeper: str, topic: str) -> tuple[int, Placed, int]:
    """(tiered end, offset -> value of the table's rows, is_control rows)."""
    table = TieredTable(storage_of(zookeeper), topic)
    end = table.tiered_end(0) or 0
    rows: Placed = {}
    control = 0
    for batch in table.read_rows(0, 0, end, columns=["offset", "value", "is_control"]):
        control += pc.sum(batch.column("is_control").cast("int64")).as_py() or 0
        rows.update(zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist(),
                        strict=True))
    return end, rows, control


def _spark_read(spark: Any, cluster: DevCluster, topic: str, **options: str) -> Placed:
    reader = (spark.read.format("loglake").option("zookeeper", cluster.zookeeper_connect)
              .option("subscribe", topic))
    for key, value in options.items():
        reader = reader.option(key, value)
    rows = reader.load().select("offset", "value").collect()
    placed = {r["offset"]: bytes(r["value"]) for r in rows}
    assert len(placed) == len(rows), "an offset read twice"
    return placed


@pytest.mark.timeout(600)
def test_tables_and_spark_hold_only_committed_transactions(
        spark: Any, cluster: DevCluster, tmp_path: Path) -> None:
    topic = f"txn-tier-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap_servers, topic, 1, TOPIC_CONFIG)
    writer = TxnWriter(cluster.bootstrap_servers, topic)
    committed: Placed = {}
    aborted: Placed = {}
    for n in range(TRANSACTIONS):
        commit = n % 3 != 1
        placed = writer.transaction(f"{'c' if commit else 'a'}{n}", PER_TRANSACTION,
                                    commit=commit)
        (committed if commit else aborted).update(placed)

    # 1. the tier: committed records of the tiered offsets, nothing else
    def tiered_most() -> tuple[int, Placed, int] | None:
        found = _table_rows(cluster.zookeeper_connect, topic)
        return found if found[0] >= max(committed) // 2 else None

    found = wait_until(tiered_most, 120, f"{topic}: half the offsets tiered", interval=0.5)
    assert found is not None
    end, rows, control = found
    assert control == 0, "markers or quarantined rows in the table"
    assert rows == {o: v for o, v in committed.items() if o < end}
    assert not set(rows) & set(aborted)

    # 2. Kafka consumers from offset 0 (the table serves what local retention deleted)
    local_start = wait_local_start(cluster.zookeeper_connect, topic, [0], above=0)[0]
    with Admin(cluster.bootstrap_servers) as admin:
        assert admin.list_offsets(topic, "earliest")[0] == 0
        high = admin.list_offsets(topic, "latest")[0]
        stable = admin.list_offsets(topic, "latest", isolation_level="read_committed")[0]
    assert stable == high  # no open transaction
    assert _consume(cluster, topic, "read_committed", len(committed)) == committed
    uncommitted = _consume(cluster, topic, "read_uncommitted", len(rows))
    # below the local log start the table serves both isolation levels (committed only); above
    # it the local log serves read_uncommitted readers the aborted records too, as Kafka does
    from_table = min(end, local_start)
    assert {o: v for o, v in uncommitted.items() if o < from_table} == {
        o: v for o, v in rows.items() if o < from_table}

    # 3. an open transaction holds read_committed reads at its first offset
    writer.producer.begin_transaction()
    for i in range(5):
        writer.send(i, b"open-%d" % i)
    writer.producer.flush(30)
    open_offsets = sorted(writer.pending)
    with Admin(cluster.bootstrap_servers) as admin:
        assert admin.list_offsets(topic, "latest", isolation_level="read_committed")[0] == (
            open_offsets[0])
        assert admin.list_offsets(topic, "latest")[0] == open_offsets[-1] + 1
    started = time.monotonic()
    assert _spark_read(spark, cluster, topic) == committed
    assert time.monotonic() - started < 60, "the read waited on the open transaction"
    everything = _spark_read(spark, cluster, topic, **{
        "kafka.isolation.level": "read_uncommitted"})
    assert set(open_offsets) <= set(everything)
    assert {o: v for o, v in everything.items() if o in committed} == committed
    assert _stream_available_now(spark, cluster, topic, tmp_path) == committed
    writer.producer.abort_transaction(30)
    aborted.update(writer.pending)
    writer.pending = {}

    # 4. compaction of the table, then a SQL view: the last committed value of every key
    with Cluster(cluster.zookeeper_connect) as jobs:
        results = run_compaction(jobs, spark=lambda: spark, topic=topic, progress=quiet())
    assert any(r.committed for r in results), [r.plan.reason for r in results]
    view = {offset: value for _p, offset, _k, value in
            spark_records(spark, cluster.zookeeper_connect, topic)}
    assert not set(view) & set(aborted)
    assert all(committed[o] == v for o, v in view.items())
    last_by_key: dict[bytes, int] = {}
    keys = {o: b"key-%d" % (int(v.rsplit(b"-", 1)[1]) % KEYS) for o, v in committed.items()}
    for offset in sorted(committed):
        last_by_key[keys[offset]] = offset
    assert set(last_by_key.values()) <= set(view)
    writer.producer.flush(10)


def _stream_available_now(spark: Any, cluster: DevCluster, topic: str,
                          tmp_path: Path) -> Placed:
    """What a streaming query (trigger availableNow, from earliest) reads of ``topic``."""
    rows: list[Any] = []

    def collect(frame: Any, _batch_id: int) -> None:
        rows.extend(frame.select("offset", "value").collect())

    query = (spark.readStream.format("loglake").option("zookeeper", cluster.zookeeper_connect)
             .option("subscribe", topic).option("startingOffsets", "earliest").load()
             .writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    placed = {r["offset"]: bytes(r["value"]) for r in rows}
    assert len(placed) == len(rows), "an offset read twice"
    return placed


def _consume(cluster: DevCluster, topic: str, isolation: str, count: int) -> Placed:
    """At least ``count`` records of partition 0 from offset 0 at ``isolation``."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "group.id": f"t-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                         "isolation.level": isolation, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        messages = consume_messages(consumer, count, timeout=60, what=f"{isolation} records")
    finally:
        consumer.close()
    placed: Placed = {int(m.offset() or 0): bytes(m.value() or b"") for m in messages}
    assert len(placed) == len(messages), "a record delivered twice"
    return placed
