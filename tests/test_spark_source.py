"""``spark.read`` / ``spark.readStream`` ``.format("loglake")`` (streaming/source.py).

Real cluster (shared ``cluster``; brokers tier into Delta), real Spark (shared ``spark``). The
module's topic holds 2000 records in 2 partitions, the first ~hundreds tiered: value ``i`` sits
at partition ``i % 2``, offset ``i // 2``, with header ``n=i``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from loglake.dev.harness import DevCluster, wait_until
from loglake.streaming.options import parse_options
from loglake.streaming.source import RangePartition, StreamReader
from tests.admin_util import create_topic
from tests.spark_session import SMALL_SEGMENTS, produce_numbered, wait_tiered

TOTAL = 2000


@pytest.fixture(scope="module")
def topic(cluster: DevCluster) -> str:
    name = f"src.{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap_servers, name, 2, SMALL_SEGMENTS)
    produce_numbered(cluster.bootstrap_servers, name, 0, TOTAL, partitions=2, headers=True)
    wait_tiered(cluster.zookeeper_connect, name, {0: 300, 1: 300})
    return name


def _reader(spark: SparkSession, cluster: DevCluster, **options: str) -> DataFrameReader:
    reader = spark.read.format("loglake")
    if "bootstrap" not in options:
        reader = reader.option("zookeeper", cluster.zookeeper_connect)
    for key, value in options.items():
        reader = reader.option("kafka.bootstrap.servers" if key == "bootstrap" else key, value)
    return reader


def _values(frame: DataFrame) -> list[int]:
    return sorted(int(r.v) for r in frame.selectExpr("CAST(value AS STRING) AS v").collect())


def test_zookeeper_and_bootstrap_only_read_the_same(
        spark: SparkSession, cluster: DevCluster, topic: str) -> None:
    via_tier = _reader(spark, cluster, subscribe=topic).load()
    via_brokers = _reader(spark, cluster, subscribe=topic,
                          bootstrap=cluster.bootstrap_servers).load()
    assert via_tier.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                                "timestampType"]
    rows = via_tier.selectExpr("partition", "offset", "CAST(value AS STRING) AS v",
                               "CAST(key AS STRING) AS k", "topic", "timestampType").collect()
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        (i % 2, i // 2) for i in range(TOTAL))
    assert all(int(r.v) == 2 * r.offset + r.partition and r.k == f"k{r.v}" and r.topic == topic
               and r.timestampType == 0 for r in rows)
    assert _values(via_brokers) == list(range(TOTAL))


def test_offsets_assign_and_headers(spark: SparkSession, cluster: DevCluster,
                                    topic: str) -> None:
    ranged = _reader(spark, cluster, subscribe=topic,
                     startingOffsets=json.dumps({topic: {"0": 100, "1": -2}}),
                     endingOffsets=json.dumps({topic: {"0": 250, "1": 10}})).load()
    assert _values(ranged) == sorted([2 * o for o in range(100, 250)]
                                     + [2 * o + 1 for o in range(10)])

    assigned = _reader(spark, cluster, assign=json.dumps({topic: [1]}),
                       includeHeaders="true").load()
    rows = assigned.selectExpr("CAST(value AS STRING) AS v", "headers").collect()
    assert sorted(int(r.v) for r in rows) == list(range(1, TOTAL, 2))
    assert all([(h.key, bytes(h.value)) for h in r.headers] == [("n", r.v.encode())]
               for r in rows)

    split = _reader(spark, cluster, subscribe=topic, minPartitions="7").load()
    assert split.rdd.getNumPartitions() >= 7
    assert split.count() == TOTAL


def test_pattern_and_several_topics(spark: SparkSession, cluster: DevCluster,
                                    topic: str) -> None:
    other = f"{topic}.side"
    create_topic(cluster.bootstrap_servers, other, 1)
    produce_numbered(cluster.bootstrap_servers, other, 0, 5)
    both = _reader(spark, cluster, subscribe=f"{topic},{other}").load()
    counts = {r.topic: r["count"] for r in both.groupBy("topic").count().collect()}
    assert counts == {topic: TOTAL, other: 5}
    pattern = _reader(spark, cluster, subscribePattern=topic.replace(".", r"\.") + ".*").load()
    assert pattern.count() == TOTAL + 5


def test_timestamps(spark: SparkSession, cluster: DevCluster, topic_name: str) -> None:
    name = f"ts.{topic_name}"
    create_topic(cluster.bootstrap_servers, name, 2)
    produce_numbered(cluster.bootstrap_servers, name, 0, 100, partitions=2)
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    produce_numbered(cluster.bootstrap_servers, name, 100, 60, partitions=2)
    after = _reader(spark, cluster, subscribe=name, startingTimestamp=str(middle)).load()
    assert _values(after) == list(range(100, 160))
    by_partition = _reader(spark, cluster, subscribe=name, startingOffsetsByTimestamp=json.dumps(
        {name: {"0": middle, "1": 0}})).load()
    assert _values(by_partition) == sorted(list(range(1, 100, 2)) + list(range(100, 160)))
    before = _reader(spark, cluster, subscribe=name, endingTimestamp=str(middle)).load()
    assert _values(before) == list(range(100))
    future = str(middle + 3_600_000)
    with pytest.raises(Exception, match="no record at or after the timestamp"):
        _reader(spark, cluster, subscribe=name, startingTimestamp=future).load().collect()
    empty = _reader(spark, cluster, subscribe=name, startingTimestamp=future,
                    startingOffsetsByTimestampStrategy="latest").load()
    assert empty.count() == 0


@pytest.mark.parametrize(("options", "message"), [
    ({}, "exactly one of the options 'subscribe', 'subscribePattern', 'assign'"),
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "got subscribe, assign"),
    ({"subscribe": "{t}", "startingOffsets": "{bad"}, "'startingOffsets' is not valid JSON"),
    ({"subscribe": "{t}", "startingOffsets": "latest"}, "cannot be latest"),
    ({"subscribe": "{t}", "startingOffsets": '{"{t}": {"0": 5}}'},
     "must give every partition read; missing {t}-1"),
    ({"subscribe": "{t}", "kafka.group.id": "g"}, "'kafka.group.id' is not supported"),
    ({"subscribe": "{t}", "maxOffsetsPerTrigger": "10"}, "only for streaming queries"),
    ({"subscribe": "{t}", "failOnDataLoss": "maybe"}, "must be true or false"),
    ({"assign": '{"{t}": [7]}'}, "partitions that do not exist: {t}-7"),
    ({"subscribe": "{t}", "startingOffsets": '{"{t}": {"0": 5000, "1": 0}}'},
     "startingOffsets is past endingOffsets in {t}-0 (5000 > 1000)"),
])
def test_bad_options_say_what_is_wrong(spark: SparkSession, cluster: DevCluster, topic: str,
                                       options: dict[str, str], message: str) -> None:
    reader = _reader(spark, cluster, **{k: v.replace("{t}", topic) for k, v in options.items()})
    with pytest.raises(Exception, match=_literal(message.replace("{t}", topic))):
        reader.load().collect()


def test_missing_address_is_an_error(spark: SparkSession) -> None:
    with pytest.raises(Exception, match=_literal("'kafka.bootstrap.servers' or 'zookeeper'")):
        spark.read.format("loglake").option("subscribe", "x").load().collect()


def _literal(text: str) -> str:
    import re

    return re.escape(text)


# -- streaming ----------------------------------------------------------------------------------


def _collecting_sink(batches: dict[int, list[tuple[int, int, int]]]
                     ) -> Callable[[DataFrame, int], None]:
    """foreachBatch function keeping each batch's rows by batch id (a replayed batch replaces
    its first attempt, as an idempotent sink would)."""

    def sink(frame: DataFrame, batch_id: int) -> None:
        rows = frame.selectExpr("partition", "offset", "CAST(value AS STRING) AS v").collect()
        batches[batch_id] = [(r.partition, r.offset, int(r.v)) for r in rows]

    return sink


def test_stream_from_earliest_exactly_once_across_restart(
        spark: SparkSession, cluster: DevCluster, topic_name: str, tmp_path: Path) -> None:
    name = f"stream.{topic_name}"
    create_topic(cluster.bootstrap_servers, name, 2, SMALL_SEGMENTS)
    produce_numbered(cluster.bootstrap_servers, name, 0, 2000, partitions=2)
    wait_tiered(cluster.zookeeper_connect, name, {0: 300, 1: 300})
    total = 4000
    batches: dict[int, list[tuple[int, int, int]]] = {}

    def start() -> Any:
        return (spark.readStream.format("loglake")
                .option("zookeeper", cluster.zookeeper_connect).option("subscribe", name)
                .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "600")
                .load().writeStream.foreachBatch(_collecting_sink(batches))
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(processingTime="200 milliseconds").start())

    def produce_rest() -> None:
        for first in range(2000, total, 250):
            produce_numbered(cluster.bootstrap_servers, name, first, 250, partitions=2)
            time.sleep(0.1)

    producer = threading.Thread(target=produce_rest, daemon=True)
    query = start()
    producer.start()
    try:
        wait_until(lambda: len(batches) >= 3, 60, "three micro-batches", interval=0.2)
    finally:
        query.stop()
    first_run = sum(len(rows) for rows in batches.values())
    assert 0 < first_run < total
    query = start()
    try:
        producer.join(60)
        wait_until(lambda: sum(len(rows) for rows in batches.values()) >= total, 90,
                   f"{total} records", interval=0.2)
        time.sleep(1)  # a duplicate would show up in a later batch
    finally:
        query.stop()
    records = [row for rows in batches.values() for row in rows]
    assert len(records) == total
    assert sorted(v for _, _, v in records) == list(range(total))
    assert all(v == 2 * o + p for p, o, v in records)
    assert max(len(rows) for rows in batches.values()) <= 600 + 1


def test_stream_available_now_respects_max_offsets(
        spark: SparkSession, cluster: DevCluster, topic: str, tmp_path: Path) -> None:
    batches: dict[int, list[tuple[int, int, int]]] = {}
    query = (spark.readStream.format("loglake").option("zookeeper", cluster.zookeeper_connect)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "700").load()
             .writeStream.foreachBatch(_collecting_sink(batches))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    sizes = [len(rows) for _, rows in sorted(batches.items())]
    assert sum(sizes) == TOTAL and max(sizes) <= 701 and len(sizes) >= 3, sizes


def test_stream_reader_read_limits(cluster: DevCluster, topic: str) -> None:
    """latestOffset with max/min limits, called directly on the driver-side reader."""
    options = {"zookeeper": cluster.zookeeper_connect, "subscribe": topic,
               "startingOffsets": "earliest", "minOffsetsPerTrigger": "5000",
               "maxTriggerDelay": "1h"}
    reader = StreamReader(parse_options(options, "stream"))
    try:
        start = reader.initialOffset()
        assert start == {topic: {"0": 0, "1": 0}}
        assert isinstance(reader.getDefaultReadLimit(), ReadMinRows)
        assert reader.latestOffset(start, ReadMinRows(5000)) == start  # too few: wait
        assert reader.latestOffset(start, ReadAllAvailable()) == {
            topic: {"0": TOTAL // 2, "1": TOTAL // 2}}
        assert reader.latestOffset(start, ReadMaxRows(100)) == start  # min from the options
    finally:
        reader.stop()
    delayed = StreamReader(parse_options({**options, "maxTriggerDelay": "0s"}, "stream"))
    try:
        start = delayed.initialOffset()
        assert delayed.latestOffset(start, ReadMinRows(5000)) != start  # delay passed: go
        capped = delayed.latestOffset(start, ReadMaxRows(100))
        assert capped == {topic: {"0": 50, "1": 50}}  # shared by backlog
        pieces = [p for p in delayed.partitions(start, capped) if isinstance(p, RangePartition)]
        assert {(p.piece.partition, p.piece.start, p.piece.end) for p in pieces} == {
            (0, 0, 50), (1, 0, 50)}
        assert all(p.piece.from_tier for p in pieces)  # offsets 0..49 are tiered
    finally:
        delayed.stop()


def test_fail_on_data_loss(spark: SparkSession, tmp_path: Path, zookeeper_hosts: str) -> None:
    """Offsets deleted by retention: an error naming them, or skipped with
    failOnDataLoss=false."""
    from loglake.client.admin import Admin

    overrides = {"log.retention.check.interval.ms": "200"}
    with DevCluster(tmp_path / "cluster", zookeeper=zookeeper_hosts,
                    brokers=1, broker_overrides=overrides) as dev:
        name = "lossy"
        create_topic(dev.bootstrap_servers, name, 1, {
            "remote.storage.enable": "false", "segment.bytes": "6000",
            "retention.bytes": "6000"})
        produce_numbered(dev.bootstrap_servers, name, 0, 1500)
        with Admin(dev.bootstrap_servers) as admin:
            wait_until(lambda: admin.list_offsets(name, "earliest")[0] > 0, 30, "retention",
                       interval=0.2)
            earliest = admin.list_offsets(name, "earliest")[0]
        reader = (spark.read.format("loglake").option("zookeeper", dev.zookeeper_connect)
                  .option("subscribe", name)
                  .option("startingOffsets", json.dumps({name: {"0": 0}})))
        with pytest.raises(Exception, match=f"offsets no longer exist in {name}-0 "
                           r"\(wanted 0, earliest \d+\)"):
            reader.load().collect()
        values = _values(reader.option("failOnDataLoss", "false").load())
        assert values[0] >= earliest and values == list(range(values[0], 1500))
