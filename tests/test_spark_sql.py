"""Topics as Spark SQL tables (streaming/sql_views.py) and ``loglake sql`` (streaming/sql_cli.py).

Real ZooKeeper + broker (the shared ``cluster``; brokers tier into the dev cluster's storage),
real Spark (the shared ``spark``). Topics use 20 kB segments so the brokers tier while the tests
produce; every check is on exact record sets (partition, offset, value).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from loglake.dev.harness import DevCluster, wait_until
from loglake.errors import UnknownTopicError
from loglake.segments.tiered_table import TieredTable
from loglake.streaming import sql_cli
from loglake.streaming.sql_views import quote_identifier, register_topics
from tests.admin_util import create_topic
from tests.s3_server import S3Server
from tests.spark_session import SMALL_SEGMENTS, produce_numbered, storage_of, wait_tiered


@pytest.fixture
def tiered_topic(cluster: DevCluster, topic_name: str) -> tuple[str, int]:
    """A 2-partition topic ``sql.<name>`` with 3000 records, part tiered, part only on the
    brokers (200 produced after the tier reached offset 600 in both partitions)."""
    topic = f"sql.{topic_name}"
    create_topic(cluster.bootstrap_servers, topic, 2, SMALL_SEGMENTS)
    produce_numbered(cluster.bootstrap_servers, topic, 0, 2800, partitions=2)
    wait_tiered(cluster.zookeeper_connect, topic, {0: 600, 1: 600})
    produce_numbered(cluster.bootstrap_servers, topic, 2800, 200, partitions=2)
    return topic, 3000


def _records(spark: SparkSession, topic: str) -> list[tuple[int, int, str]]:
    rows = spark.sql(f"SELECT partition, offset, CAST(value AS STRING) AS v "
                     f"FROM {quote_identifier(topic)}").collect()
    return [(r.partition, r.offset, r.v) for r in rows]


def test_sql_count_and_sum_cover_tier_and_hot_tail(
        spark: SparkSession, cluster: DevCluster, tiered_topic: tuple[str, int]) -> None:
    topic, total = tiered_topic
    assert register_topics(spark, zookeeper=cluster.zookeeper_connect, topics=[topic]) == [topic]
    table = TieredTable(storage_of(cluster.zookeeper_connect), topic)
    tiered = {p: table.tiered_end(p) or 0 for p in (0, 1)}
    assert all(0 < end < total // 2 for end in tiered.values()), tiered  # both sides in play

    row = spark.sql(f"SELECT count(*) AS n, sum(CAST(CAST(value AS STRING) AS BIGINT)) AS s, "
                    f"count(DISTINCT partition, offset) AS d FROM `{topic}`").first()
    assert row is not None
    assert (row.n, row.d, row.s) == (total, total, total * (total - 1) // 2)
    records = _records(spark, topic)
    assert sorted(int(v) for _, _, v in records) == list(range(total))
    for partition in (0, 1):  # offsets are dense 0..n-1 in each partition, value = 2*offset+p
        mine = sorted((o, int(v)) for p, o, v in records if p == partition)
        assert mine == [(o, 2 * o + partition) for o in range(total // 2)]

    plan = spark.sql(f"SELECT * FROM `{topic}`")._jdf.queryExecution().executedPlan().toString()
    assert "FileScan parquet" in plan and "BatchScan loglake" in plan  # native tier + hot tail


def test_filters_are_pushed_to_both_sides(
        spark: SparkSession, cluster: DevCluster, tiered_topic: tuple[str, int]) -> None:
    topic, _ = tiered_topic
    register_topics(spark, zookeeper=cluster.zookeeper_connect, topics=[topic])
    query = (f"SELECT offset, CAST(value AS STRING) AS v FROM `{topic}` "
             f"WHERE partition = 1 AND offset BETWEEN 590 AND 1450 ORDER BY offset")
    rows = spark.sql(query).collect()
    assert [(r.offset, int(r.v)) for r in rows] == [(o, 2 * o + 1) for o in range(590, 1451)]
    plan = spark.sql(query)._jdf.queryExecution().executedPlan().toString()
    assert "PartitionFilters: [isnotnull(partition" in plan  # tier: directories pruned

    first = spark.sql(f"SELECT min(timestamp) AS t FROM `{topic}` WHERE offset = 1400 "
                      f"AND partition = 0").first()
    assert first is not None
    frame = spark.table(quote_identifier(topic))
    later = frame.where(F.col("timestamp") >= F.lit(first.t)).count()
    everything = frame.select("timestamp").collect()
    assert later == sum(1 for r in everything if r.timestamp >= first.t)


def test_python_tier_reader_gives_the_same_rows(
        spark: SparkSession, cluster: DevCluster, tiered_topic: tuple[str, int]) -> None:
    topic, total = tiered_topic
    register_topics(spark, zookeeper=cluster.zookeeper_connect, topics=[topic],
                    tier_read="python", include_headers=False)
    frame = spark.table(quote_identifier(topic))
    assert frame.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                             "timestampType"]
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "FileScan parquet" not in plan
    records = _records(spark, topic)
    assert len(records) == total
    assert sorted(int(v) for _, _, v in records) == list(range(total))


def test_each_record_once_while_tiering_runs(
        spark: SparkSession, cluster: DevCluster, topic_name: str) -> None:
    """Queries racing the producer and the tierer: never a duplicate, never a gap."""
    topic = f"race.{topic_name}"
    create_topic(cluster.bootstrap_servers, topic, 2, SMALL_SEGMENTS)
    produce_numbered(cluster.bootstrap_servers, topic, 0, 1000, partitions=2)
    written = [1000]
    stop = threading.Event()

    def keep_producing() -> None:
        while not stop.is_set() and written[0] < 12_000:
            produce_numbered(cluster.bootstrap_servers, topic, written[0], 500, partitions=2)
            written[0] += 500

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    table = TieredTable(storage_of(cluster.zookeeper_connect), topic)
    checks = 0
    tier_moves = set()
    deadline = time.monotonic() + 25
    try:
        while time.monotonic() < deadline and checks < 6:
            register_topics(spark, zookeeper=cluster.zookeeper_connect, topics=[topic])
            tier_moves.add(tuple(table.tiered_end(p) for p in (0, 1)))
            seen_before = written[0]
            row = spark.sql(
                f"SELECT count(*) AS n, count(DISTINCT partition, offset) AS d, "
                f"count(DISTINCT value) AS v, "
                f"max(CASE WHEN partition = 0 THEN offset END) AS m0, "
                f"max(CASE WHEN partition = 1 THEN offset END) AS m1 FROM `{topic}`").first()
            assert row is not None
            assert row.n == row.d == row.v, row  # no duplicate
            assert row.n == row.m0 + row.m1 + 2, row  # dense offsets: no gap
            assert row.n >= seen_before, row  # everything acknowledged before the query
            checks += 1
    finally:
        stop.set()
        producer.join(60)
    assert checks >= 3
    assert len(tier_moves) >= 2, "the tier did not move while querying"


def test_delta_table_stays_plain_delta(
        spark: SparkSession, cluster: DevCluster, tiered_topic: tuple[str, int]) -> None:
    topic, _ = tiered_topic
    storage = storage_of(cluster.zookeeper_connect)
    table = TieredTable(storage, topic)
    ends = {p: table.tiered_end(p) or 0 for p in (0, 1)}
    delta = DeltaTable(table.uri, storage_options=storage.delta_options())
    rows = delta.to_pyarrow_dataset(filesystem=storage.pyarrow_filesystem(table.uri)).to_table(
        columns=["partition", "offset"])
    for partition, end in ends.items():
        mine = rows.filter(pc.equal(rows.column("partition"), partition))
        assert sorted(mine.column("offset").to_pylist())[: end] == list(range(end))


def test_register_all_topics_and_unknown_topic(
        spark: SparkSession, cluster: DevCluster, tiered_topic: tuple[str, int]) -> None:
    topic, _ = tiered_topic
    names = register_topics(spark, zookeeper=cluster.zookeeper_connect)
    assert topic in names
    assert spark.catalog.tableExists(quote_identifier(topic))
    with pytest.raises(UnknownTopicError, match="no such topic: missing-topic"):
        register_topics(spark, zookeeper=cluster.zookeeper_connect, topics=["missing-topic"])


# -- the CLI ------------------------------------------------------------------------------------


def _sql_args(cluster: DevCluster, query: str, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="loglake")
    sql_cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["sql", query, "--zookeeper", cluster.zookeeper_connect, *extra])


def test_cli_formats(spark: SparkSession, cluster: DevCluster, tiered_topic: tuple[str, int],
                     capsys: pytest.CaptureFixture[str]) -> None:
    topic, total = tiered_topic
    query = (f"SELECT partition, count(*) AS n, CAST(min(key) AS STRING) AS k "
             f"FROM `{topic}` GROUP BY partition ORDER BY partition")
    args = _sql_args(cluster, query)
    assert args.handler(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["partition", "n", "k"]
    assert out[2].split() == ["0", str(total // 2), "k0"]
    assert out[-1] == "(2 rows)"

    args = _sql_args(cluster, f"SELECT key, offset FROM `{topic}` WHERE partition = 1 "
                     f"ORDER BY offset LIMIT 3", "--format", "json")
    assert args.handler(args) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == [{"key": f"k{2 * o + 1}", "offset": o} for o in range(3)]

    args = _sql_args(cluster, f"SELECT offset FROM `{topic}` WHERE partition = 0 "
                     f"ORDER BY offset", "--format", "csv", "--max-rows", "2")
    assert args.handler(args) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["offset", "0", "1"]
    assert "--max-rows" in captured.err


def test_cli_reads_catalog_tables_with_history_and_time_travel(
        spark: SparkSession, cluster: DevCluster, tiered_topic: tuple[str, int],
        capsys: pytest.CaptureFixture[str]) -> None:
    """``loglake sql`` registers the Delta tables a query names (``loglake.<name>``), so
    DESCRIBE HISTORY and VERSION AS OF work from the shell."""
    from loglake.streaming.session import delta_enabled
    from loglake.streaming.spark_catalog import table_names

    if not delta_enabled(spark):
        pytest.skip("delta-spark is not fetched (python -m loglake.jvm fetch spark)")
    topic, _ = tiered_topic
    table = "loglake." + table_names([topic])[topic]
    args = _sql_args(cluster, f"DESCRIBE HISTORY {table}", "--format", "json")
    assert args.handler(args) == 0
    history = sorted((json.loads(line) for line in capsys.readouterr().out.splitlines()),
                     key=lambda h: h["version"])
    assert history and all("loglake tier" in (h["userMetadata"] or "") for h in history[1:])
    first_tier = history[1]["version"]
    storage = storage_of(cluster.zookeeper_connect)
    tiered = TieredTable(storage, topic)
    delta = DeltaTable(tiered.uri, version=first_tier, storage_options=storage.delta_options())
    rows = delta.to_pyarrow_dataset(filesystem=storage.pyarrow_filesystem(tiered.uri)).to_table(
        columns=["is_control"])
    expected = rows.num_rows - sum(rows.column("is_control").to_pylist())
    args = _sql_args(cluster, f"SELECT count(*) AS n FROM {table} VERSION AS OF {first_tier} "
                     f"WHERE NOT is_control", "--format", "json")
    assert args.handler(args) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0]) == {"n": expected}


def test_cli_errors_are_one_line(spark: SparkSession, cluster: DevCluster) -> None:
    args = _sql_args(cluster, "SELECT * FROM no_such_topic_here")
    with pytest.raises(sql_cli.SqlError, match=r"TABLE_OR_VIEW_NOT_FOUND") as info:
        args.handler(args)
    assert "\n" not in str(info.value)


def test_views_over_s3_storage_use_the_python_reader(
        spark: SparkSession, s3_server: S3Server, tmp_path: Path, zookeeper_hosts: str) -> None:
    """Tier on (loopback) S3 read with ``tier_read="python"`` (what views do where Spark has no
    filesystem for the storage): pyarrow through the data source; credentials come as storage
    options (the brokers publish none). Spark's own s3a read: test_delta_spark_tables.py."""
    storage_options = {f"remote.log.storage.option.{k}": v
                       for k, v in s3_server.options().items()}
    overrides = {"remote.log.storage.url": s3_server.url(f"lake-{uuid.uuid4().hex[:8]}"),
                 **storage_options}
    with DevCluster(tmp_path / "cluster", zookeeper=zookeeper_hosts,
                    brokers=1, broker_overrides=overrides) as dev:
        topic = "on-s3.events"
        create_topic(dev.bootstrap_servers, topic, 2, SMALL_SEGMENTS)
        produce_numbered(dev.bootstrap_servers, topic, 0, 2000, partitions=2)
        secrets = {k: v for k, v in s3_server.options().items() if "secret" in k or "key_id" in k}
        table = TieredTable(storage_of(dev.zookeeper_connect, secrets), topic)
        wait_until(lambda: all((table.tiered_end(p) or 0) >= 300 for p in (0, 1)), 60,
                   "both partitions tiered to offset 300", interval=0.25)
        register_topics(spark, zookeeper=dev.zookeeper_connect, topics=[topic],
                        storage_options=secrets, tier_read="python")
        frame = spark.table(quote_identifier(topic))
        plan = frame._jdf.queryExecution().executedPlan().toString()
        assert "FileScan parquet" not in plan
        assert sorted(int(r.v) for r in frame.selectExpr(
            "CAST(value AS STRING) AS v").collect()) == list(range(2000))
