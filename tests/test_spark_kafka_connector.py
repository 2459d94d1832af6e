"""Spark's own Kafka connector (spark-sql-kafka-0-10 with the Java kafka-clients 3.9) against
loglake brokers, unchanged: ``format("kafka")`` reads and writes, batch and streaming.

Real cluster (shared ``cluster``; brokers tier into Delta, local segments roll every ~8 kB so
part of each topic is read back from the tier), real Spark (shared ``spark``, started with the
``spark`` jar set). Rows read through ``format("kafka")`` are compared with ``format("loglake")``
on the same topic in the same run; rows written through it are read back by a confluent-kafka
consumer. Offsets are fetched the way Spark 4 does by default (the Java AdminClient: ListOffsets,
Metadata) and, in one test, the deprecated way (a KafkaConsumer in a group named after
``groupIdPrefix``).

The module skips only when the ``spark`` jar set is not fetched (``python -m loglake.jvm fetch
spark``; ``./run setup`` and ``./run test`` do it), since the connector lives in it.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from loglake import jvm
from loglake.compaction.common import Cluster
from loglake.compaction.retention import run_retention
from loglake.dev.harness import DevCluster, wait_until
from tests import tiering_util
from tests.admin_util import create_topic
from tests.clients import consume_messages
from tests.compaction_util import Spec, produce_specs, quiet, watermarks
from tests.spark_session import SMALL_SEGMENTS, produce_numbered, wait_tiered

pytestmark = pytest.mark.skipif(
    not jvm.available("spark"),
    reason="Spark's Kafka connector is in the 'spark' jar set, which is not fetched here "
           "(python -m loglake.jvm fetch spark)")

TOTAL = 2000
HOUR_MS = 3_600_000
COLUMNS = ("partition", "offset", "CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v",
           "topic", "timestamp", "timestampType")


@pytest.fixture(scope="module")
def topic(cluster: DevCluster) -> str:
    """2 partitions, value ``i`` at partition ``i % 2``, offset ``i // 2``, header ``n=i``; the
    first hundreds of each partition are tiered."""
    name = f"kconn.{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap_servers, name, 2, SMALL_SEGMENTS)
    produce_numbered(cluster.bootstrap_servers, name, 0, TOTAL, partitions=2, headers=True)
    wait_tiered(cluster.zookeeper_connect, name, {0: 300, 1: 300})
    return name


def _kafka(spark: SparkSession, cluster: DevCluster, **options: str) -> DataFrame:
    reader = spark.read.format("kafka").option("kafka.bootstrap.servers",
                                               cluster.bootstrap_servers)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _loglake(spark: SparkSession, cluster: DevCluster, **options: str) -> DataFrame:
    reader = spark.read.format("loglake").option("zookeeper", cluster.zookeeper_connect)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _rows(frame: DataFrame, *columns: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(row) for row in frame.selectExpr(*(columns or COLUMNS)).collect())


def _values(frame: DataFrame) -> list[int]:
    return sorted(int(r.v) for r in frame.selectExpr("CAST(value AS STRING) AS v").collect())


# -- batch reads --------------------------------------------------------------------------------


def test_batch_read_has_the_same_rows_as_loglake(spark: SparkSession, cluster: DevCluster,
                                                  topic: str) -> None:
    kafka = _kafka(spark, cluster, subscribe=topic, includeHeaders="true")
    loglake = _loglake(spark, cluster, subscribe=topic, includeHeaders="true")
    assert kafka.columns == loglake.columns == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    with_headers = (*COLUMNS, "headers")
    rows = _rows(kafka, *with_headers)
    assert [(r[0], r[1]) for r in rows] == sorted((i % 2, i // 2) for i in range(TOTAL))
    assert all(int(r[3]) == 2 * r[1] + r[0] and r[2] == f"k{r[3]}" for r in rows)
    assert rows == _rows(loglake, *with_headers)


def test_batch_offset_ranges_and_timestamps_match_loglake(
        spark: SparkSession, cluster: DevCluster, topic: str) -> None:
    ranges = {"startingOffsets": json.dumps({topic: {"0": 100, "1": -2}}),
              "endingOffsets": json.dumps({topic: {"0": 250, "1": 10}})}
    ranged = _kafka(spark, cluster, subscribe=topic, **ranges)
    assert _values(ranged) == sorted([2 * o for o in range(100, 250)]
                                     + [2 * o + 1 for o in range(10)])
    assert _rows(ranged) == _rows(_loglake(spark, cluster, subscribe=topic, **ranges))

    assigned = _kafka(spark, cluster, assign=json.dumps({topic: [1]}), minPartitions="5")
    assert assigned.rdd.getNumPartitions() >= 5
    assert _values(assigned) == list(range(1, TOTAL, 2))

    # ListOffsets by timestamp: the timestamp of partition 0's offset 500
    [middle] = _kafka(spark, cluster, subscribe=topic).where("partition = 0 AND offset = 500"
                                                             ).select("timestamp").collect()
    millis = str(int(middle.timestamp.timestamp() * 1000))
    by_time = {"startingTimestamp": millis}
    after = _kafka(spark, cluster, subscribe=topic, **by_time)
    assert after.count() > 0
    assert _rows(after) == _rows(_loglake(spark, cluster, subscribe=topic, **by_time))


def test_deprecated_consumer_offset_fetching_with_a_group_id_prefix(
        spark: SparkSession, cluster: DevCluster, topic: str) -> None:
    """``useDeprecatedOffsetFetching``: the driver fetches offsets with a KafkaConsumer that
    subscribes in a consumer group named after ``groupIdPrefix`` (JoinGroup, SyncGroup,
    OffsetFetch, ListOffsets), as Spark 3.0 did."""
    key = "spark.sql.streaming.kafka.useDeprecatedOffsetFetching"
    spark.conf.set(key, "true")
    try:
        frame = _kafka(spark, cluster, subscribe=topic, groupIdPrefix="kconn-legacy")
        assert _values(frame) == list(range(TOTAL))
    finally:
        spark.conf.unset(key)


# -- streaming reads ----------------------------------------------------------------------------


def _stream(spark: SparkSession, cluster: DevCluster, topic: str, checkpoint: Path,
            output: Path, **options: str) -> Any:
    """An availableNow query from Spark's Kafka source into a Parquet file sink (exactly-once
    through its own log), started."""
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
              .option("subscribe", topic))
    for key, value in options.items():
        reader = reader.option(key, value)
    return (reader.load().selectExpr("partition", "offset", "CAST(value AS STRING) AS v")
            .writeStream.format("parquet").option("path", str(output))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start())


def _finish(query: Any, timeout: float = 120.0) -> list[dict[str, Any]]:
    """Wait for an availableNow query to end; return its progress reports (raise its error)."""
    try:
        if not query.awaitTermination(timeout):
            raise AssertionError(f"the streaming query did not finish in {timeout:.0f} s")
    finally:
        query.stop()
    return [p for p in query.recentProgress if p.get("numInputRows")]


def _written(spark: SparkSession, output: Path) -> list[tuple[int, int, int]]:
    rows = spark.read.parquet(str(output)).collect()
    return sorted((r.partition, r.offset, int(r.v)) for r in rows)


def test_stream_restarts_from_its_checkpoint(spark: SparkSession, cluster: DevCluster,
                                             topic: str, tmp_path: Path) -> None:
    name = f"kstream.{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap_servers, name, 2, SMALL_SEGMENTS)
    produce_numbered(cluster.bootstrap_servers, name, 0, 1200, partitions=2)
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "300"}

    first = _finish(_stream(spark, cluster, name, checkpoint, output, **options))
    assert len(first) == 4 and all(p["numInputRows"] <= 300 for p in first)
    assert sorted(v for _, _, v in _written(spark, output)) == list(range(1200))

    # a partition added meanwhile (CreatePartitions): the restarted query finds it through its
    # AdminClient and reads it from its earliest offset, as Spark does on Kafka
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_partitions([NewPartitions(name, 3)], operation_timeout=20)[name].result(30)
    cluster.wait_topic_ready(name, partitions=3)
    produce_numbered(cluster.bootstrap_servers, name, 1200, 700, partitions=3)
    # startingOffsets only applies to a new query: the restart goes on from the checkpoint
    second = _finish(_stream(spark, cluster, name, checkpoint, output,
                             startingOffsets="latest", maxOffsetsPerTrigger="300"))
    assert sum(p["numInputRows"] for p in second) == 700
    written = _written(spark, output)
    assert sorted(v for _, _, v in written) == list(range(1900))  # each record once
    assert {p for p, _, _ in written} == {0, 1, 2}
    as_int = "CAST(CAST(value AS STRING) AS INT) AS v"
    assert written == _rows(_loglake(spark, cluster, subscribe=name), "partition", "offset", as_int)


def test_stream_from_latest_sees_only_new_records(spark: SparkSession, cluster: DevCluster,
                                                  tmp_path: Path) -> None:
    name = f"klatest.{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap_servers, name, 2)
    produce_numbered(cluster.bootstrap_servers, name, 0, 100, partitions=2)
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    assert _finish(_stream(spark, cluster, name, checkpoint, output,
                           startingOffsets="latest")) == []
    produce_numbered(cluster.bootstrap_servers, name, 100, 50, partitions=2)
    _finish(_stream(spark, cluster, name, checkpoint, output))
    assert sorted(v for _, _, v in _written(spark, output)) == list(range(100, 150))


def _delete_records(cluster: DevCluster, topic: str, offsets: dict[int, int]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.delete_records([TopicPartition(topic, p, o) for p, o in offsets.items()],
                                   operation_timeout=20, request_timeout=30)
    for future in futures.values():
        future.result(timeout=40)


def test_fail_on_data_loss_when_records_expired(spark: SparkSession, cluster: DevCluster,
                                                tmp_path: Path) -> None:
    """Records the query has not read yet are deleted (DeleteRecords: gone from the local log
    and from the table, as retention does): ``failOnDataLoss=true`` stops the query with Spark's
    data-loss error; ``false`` skips to the new log start and reads on."""
    name = f"kloss.{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap_servers, name, 2, SMALL_SEGMENTS)
    produce_numbered(cluster.bootstrap_servers, name, 0, 400, partitions=2)
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    _finish(_stream(spark, cluster, name, checkpoint, output, startingOffsets="earliest"))
    assert len(_written(spark, output)) == 400  # offsets 0..199 of each partition

    produce_numbered(cluster.bootstrap_servers, name, 400, 1200, partitions=2)  # 200..799
    _delete_records(cluster, name, {0: 500, 1: 500})
    assert _values(_kafka(spark, cluster, subscribe=name)) == list(range(1000, 1600))

    with pytest.raises(Exception, match=r"(?i)data (may have been )?lost|failOnDataLoss"):
        _finish(_stream(spark, cluster, name, checkpoint, output, failOnDataLoss="true"))
    assert len(_written(spark, output)) == 400  # nothing of the failed batch was committed

    _finish(_stream(spark, cluster, name, checkpoint, output, failOnDataLoss="false"))
    assert sorted(v for _, _, v in _written(spark, output)) == list(range(400)) + list(
        range(1000, 1600))

    # a batch read asked to start below the log start: the same choice
    below = json.dumps({name: {"0": 100, "1": 100}})
    with pytest.raises(Exception, match=r"(?i)data (may have been )?lost|failOnDataLoss"):
        _kafka(spark, cluster, subscribe=name, startingOffsets=below).collect()
    skipped = _kafka(spark, cluster, subscribe=name, startingOffsets=below,
                     failOnDataLoss="false")
    assert _values(skipped) == list(range(1000, 1600))



def test_fail_on_data_loss_when_retention_expired_records(
        spark: SparkSession, cluster: DevCluster, tmp_path: Path) -> None:
    """Records expire the loglake way: the brokers drop tiered segments at once
    (``local.retention.ms=0``) and the retention job removes the table's files older than
    ``retention.ms``. Spark's connector then reads the survivors from the tier through the
    brokers; a query whose checkpoint points below the new earliest offset fails with
    ``failOnDataLoss=true`` and, with ``false``, goes on from the earliest offset."""
    name = f"kexpire.{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap_servers, name, 1, {
        "segment.bytes": "20000", "local.retention.ms": "0", "retention.ms": str(2 * HOUR_MS),
        "file.delete.delay.ms": "0"})
    old_ms = int(time.time() * 1000) - 3 * HOUR_MS
    produce_specs(cluster.bootstrap_servers, name,
                  [Spec(0, b"k%d" % i, b"%d" % i, old_ms + i) for i in range(100)])
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    _finish(_stream(spark, cluster, name, checkpoint, output, startingOffsets="earliest"))
    assert sorted(v for _, _, v in _written(spark, output)) == list(range(100))

    produce_specs(cluster.bootstrap_servers, name,
                  [Spec(0, b"k%d" % i, b"%d" % i, old_ms + i) for i in range(100, 2000)]
                  + [Spec(0, b"k%d" % i, b"%d" % i) for i in range(2000, 3000)])
    tiering_util.wait_tiered(cluster.storage_url, name, (0,), at_least=1900)
    tiering_util.wait_local_start(cluster.zookeeper_connect, name, (0,), above=1500)
    with Cluster(cluster.zookeeper_connect) as jobs:
        [result] = run_retention(jobs, topic=name, progress=quiet())
    assert result.committed and result.removed[0], "retention removed no file"
    # the earliest offset: the table's first remaining file, or the local log start when the
    # job removed every tiered file (brokers cache it for ~5 s)
    def moved() -> int:
        low = watermarks(cluster.bootstrap_servers, name, 0)[0]
        return low if low > 100 else 0

    earliest = wait_until(moved, 30, f"{name}: earliest offset above 100 after retention",
                          interval=0.5)
    assert earliest <= 2000, "retention removed records younger than retention.ms"

    survivors = _kafka(spark, cluster, subscribe=name)
    assert _values(survivors) == list(range(earliest, 3000))
    assert _rows(survivors) == _rows(_loglake(spark, cluster, subscribe=name))

    with pytest.raises(Exception, match=r"(?i)data (may have been )?lost|failOnDataLoss"):
        _finish(_stream(spark, cluster, name, checkpoint, output, failOnDataLoss="true"))
    _finish(_stream(spark, cluster, name, checkpoint, output, failOnDataLoss="false"))
    assert sorted(v for _, _, v in _written(spark, output)) == list(range(100)) + list(
        range(earliest, 3000))

# -- read_committed -----------------------------------------------------------------------------


def _transactions(bootstrap: str, topic: str, size: int) -> tuple[list[int], list[int]]:
    """Five transactions of ``size`` records over 2 partitions: commit, abort, commit, abort,
    commit (values ``0 .. 5 * size - 1``); then ``size`` non-transactional records. Returns
    (committed, aborted) values."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 4000,
                         "transactional.id": f"kconn-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(30)
    committed: list[int] = []
    aborted: list[int] = []
    for round_, commit in enumerate((True, False, True, False, True)):
        producer.begin_transaction()
        values = list(range(round_ * size, (round_ + 1) * size))
        for i in values:
            producer.produce(topic, str(i).encode(), key=f"k{i}".encode(), partition=i % 2)
            producer.poll(0)
        if commit:
            producer.commit_transaction(30)
            committed.extend(values)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
            aborted.extend(values)
    produce_numbered(bootstrap, topic, 5 * size, size, partitions=2)
    return committed + list(range(5 * size, 6 * size)), aborted


@pytest.mark.parametrize("from_tier", [False, True], ids=["local-log", "tier"])
def test_read_committed_against_a_transactional_producer(
        spark: SparkSession, cluster: DevCluster, tmp_path: Path, from_tier: bool) -> None:
    """``tier``: the brokers keep no tiered segment (``local.retention.ms=0``), so the
    connector's fetches below the local log start are served from the Delta table."""
    name = f"ktxn.{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap_servers, name, 2,
                 {**SMALL_SEGMENTS, "local.retention.ms": "0"} if from_tier else None)
    committed, aborted = _transactions(cluster.bootstrap_servers, name, 400)
    if from_tier:
        tiering_util.wait_local_start(cluster.zookeeper_connect, name, (0, 1), above=600)

    read_committed = _kafka(spark, cluster, subscribe=name,
                            **{"kafka.isolation.level": "read_committed"})
    assert _values(read_committed) == sorted(committed)
    loglake = _loglake(spark, cluster, subscribe=name,
                       **{"kafka.isolation.level": "read_committed"})
    assert _rows(read_committed) == _rows(loglake)
    everything = _values(_kafka(spark, cluster, subscribe=name))  # Kafka's read_uncommitted
    if from_tier:  # the table holds committed records only (docs: tier + transactions)
        assert set(committed) <= set(everything) <= set(committed + aborted)
    else:
        assert everything == sorted(committed + aborted)

    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    _finish(_stream(spark, cluster, name, checkpoint, output, startingOffsets="earliest",
                    maxOffsetsPerTrigger="700", **{"kafka.isolation.level": "read_committed"}))
    assert sorted(v for _, _, v in _written(spark, output)) == sorted(committed)


# -- writes -------------------------------------------------------------------------------------


def _read_back(bootstrap: str, topic: str, count: int) -> list[tuple[int, str, str]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"kconn-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        messages = consume_messages(consumer, count, timeout=60)
    finally:
        consumer.close()
    return sorted((m.partition() or 0, (m.key() or b"").decode(), (m.value() or b"").decode())
                  for m in messages)


def test_batch_write_is_read_back_by_a_kafka_consumer(spark: SparkSession, cluster: DevCluster,
                                                      topic_name: str) -> None:
    name = f"kwrite.{topic_name}"
    create_topic(cluster.bootstrap_servers, name, 3)
    frame = spark.range(600).select(
        F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
        F.col("id").cast("string").alias("value"),
        (F.col("id") % 3).cast("int").alias("partition"),
        F.array(F.struct(F.lit("n").alias("key"),
                         F.col("id").cast("string").cast("binary").alias("value"))
                ).alias("headers"))
    (frame.write.format("kafka").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
     .option("topic", name).save())
    assert _read_back(cluster.bootstrap_servers, name, 600) == sorted(
        (i % 3, f"k{i}", str(i)) for i in range(600))
    headers = _kafka(spark, cluster, subscribe=name, includeHeaders="true").selectExpr(
        "CAST(value AS STRING) AS v", "headers").collect()
    assert all([(h.key, bytes(h.value).decode()) for h in r.headers] == [("n", r.v)]
               for r in headers)


def test_stream_copy_with_the_kafka_source_and_sink(spark: SparkSession, cluster: DevCluster,
                                                    topic: str, tmp_path: Path) -> None:
    target = f"kcopy.{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap_servers, target, 2)
    query = (spark.readStream.format("kafka")
             .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "500").load()
             .selectExpr("key", "value", "partition")
             .writeStream.format("kafka")
             .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
             .option("topic", target).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert len(_finish(query)) == 4
    assert _read_back(cluster.bootstrap_servers, target, TOTAL) == sorted(
        (i % 2, f"k{i}", str(i)) for i in range(TOTAL))
    # and format("loglake") reads what Spark's Kafka sink wrote
    assert _values(_loglake(spark, cluster, subscribe=target)) == list(range(TOTAL))

