"""deltalake (delta-rs) and delta-spark read every table loglake writes with identical rows.

Real cluster (brokers tier into Delta through deltalake), the clean-up jobs as the CLI runs them
(retention, compaction with Spark, optimize, vacuum), real Spark with the fetched ``spark`` jar
set. After each writer, every column of every row is compared: deltalake's snapshot (pyarrow)
against ``spark.read.format("delta")`` of the same version, and Spark's ``DESCRIBE HISTORY``
against deltalake's history. The s3a test runs a cluster tiering to the loopback S3 server and
reads its table with delta-spark through ``s3a://`` and through the topic's view (a native
Parquet scan, no Python reader).

Needs delta-spark in the shared SparkSession: skips ONLY when the ``spark`` jar set is not
fetched (``python -m loglake.jvm fetch spark``; ``./run test`` fetches it).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from loglake import jvm
from loglake.compaction.common import Cluster
from loglake.compaction.compact import run_compaction
from loglake.compaction.optimize import run_optimize
from loglake.compaction.retention import run_retention
from loglake.compaction.vacuum import run_vacuum
from loglake.dev.harness import DevCluster, wait_until
from loglake.segments.storage import Storage
from loglake.segments.tier_rows import TABLE_SCHEMA
from loglake.segments.tiered_table import TieredTable
from loglake.streaming.session import delta_enabled, spark_uri, use_storage
from loglake.streaming.sql_views import topic_frame
from tests.admin_util import create_topic
from tests.compaction_util import EXPIRING_CONFIG, Spec, old_then_new, produce_specs, quiet
from tests.s3_server import S3Server
from tests.spark_session import SMALL_SEGMENTS, produce_numbered, storage_of
from tests.tiering_util import wait_local_start, wait_tiered

pytestmark = [
    pytest.mark.xdist_group("spark"),
    pytest.mark.skipif(not jvm.available("spark"),
                       reason="delta-spark is not fetched (python -m loglake.jvm fetch spark)"),
]

COLUMNS = [field.name for field in TABLE_SCHEMA]
Row = tuple[Any, ...]


@pytest.fixture(autouse=True)
def _delta_session(spark: SparkSession) -> Iterator[None]:
    assert delta_enabled(spark), "the test SparkSession was started without delta-spark"
    yield


def _plain(value: Any) -> Any:
    """Spark and pyarrow values as comparable Python values (bytes, tuples)."""
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dict):
        return tuple(_plain(v) for v in value.values())
    if isinstance(value, list | tuple):  # pyspark Rows are tuples
        return tuple(_plain(v) for v in value)
    return value


def deltalake_rows(storage: Storage, topic: str, version: int | None = None) -> list[Row]:
    table = TieredTable(storage, topic).table(refresh=True)
    if version is not None:
        table.load_as_version(version)
    data = table.to_pyarrow_dataset(
        filesystem=storage.pyarrow_filesystem(storage.table_uri(topic))).to_table()
    data = data.set_column(data.schema.get_field_index("timestamp"), "timestamp",
                           data.column("timestamp").cast(pa.int64()))
    rows = [tuple(_plain(row[c]) for c in COLUMNS) for row in data.to_pylist()]
    return sorted(rows, key=lambda r: (r[0], r[1]))


def spark_rows(spark: SparkSession, storage: Storage, topic: str,
               version: int | None = None) -> list[Row]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    frame = reader.load(spark_uri(storage, storage.table_uri(topic)))
    selected = [f"unix_micros(`{c}`) AS `{c}`" if c == "timestamp" else f"`{c}`"
                for c in COLUMNS]
    rows = [tuple(_plain(v) for v in row) for row in frame.selectExpr(*selected).collect()]
    return sorted(rows, key=lambda r: (r[0], r[1]))


def assert_same_rows(spark: SparkSession, storage: Storage, topic: str,
                     version: int | None = None) -> list[Row]:
    """Rows of ``version`` (default: the latest, pinned first: tiering keeps appending)."""
    if version is None:
        version = TieredTable(storage, topic).table(refresh=True).version()
    expected = deltalake_rows(storage, topic, version)
    got = spark_rows(spark, storage, topic, version)
    assert len(got) == len(expected), (version, len(got), len(expected))
    assert got == expected, version
    return got


def below(rows: list[Row], earlier: list[Row]) -> list[Row]:
    """``rows`` up to the last offset ``earlier`` holds per partition (what tiering appended
    meanwhile left out)."""
    ends: dict[int, int] = {}
    for row in earlier:
        ends[row[0]] = max(ends.get(row[0], -1), row[1])
    return [row for row in rows if row[1] <= ends.get(row[0], -1)]


def spark_history(spark: SparkSession, storage: Storage, topic: str) -> list[tuple[int, str]]:
    uri = spark_uri(storage, storage.table_uri(topic)).replace("`", "``")
    rows = spark.sql(f"DESCRIBE HISTORY delta.`{uri}`").select("version", "operation").collect()
    return sorted((int(r.version), str(r.operation)) for r in rows)


def assert_same_history(spark: SparkSession, storage: Storage, topic: str) -> None:
    history = TieredTable(storage, topic).table(refresh=True).history()
    expected = sorted((int(h["version"]), str(h.get("operation"))) for h in history)
    latest = expected[-1][0]  # Spark reads after: tiering may have committed more since
    assert [h for h in spark_history(spark, storage, topic) if h[0] <= latest] == expected


KEYS = 200
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "20000", "local.retention.ms": "0",
             "file.delete.delay.ms": "0", "min.cleanable.dirty.ratio": "0.01"}


def test_tier_appends_compaction_optimize_and_vacuum_read_the_same(
        cluster: DevCluster, spark: SparkSession, topic_name: str) -> None:
    bootstrap, zookeeper = cluster.bootstrap_servers, cluster.zookeeper_connect
    create_topic(bootstrap, topic_name, partitions=2, config=COMPACTED)
    specs = [Spec(i % 2, b"key-%d" % (i % KEYS),
                  None if i % 7 == 0 and i > 3000 else b"v-%d" % i) for i in range(5000)]
    acked = produce_specs(bootstrap, topic_name, specs)
    acked += produce_specs(bootstrap, topic_name,
                           [Spec(i % 2, b"filler-%d" % i, b"f" * 60) for i in range(1500)])
    main_end = max(o for _, o, k, _ in acked if not (k or b"").startswith(b"filler")) + 1
    storage = Storage.from_url(cluster.storage_url)
    wait_tiered(storage, topic_name, (0, 1), at_least=main_end, timeout=90)
    wait_local_start(zookeeper, topic_name, (0, 1), above=main_end)

    # tier appends: the latest version and a few earlier ones
    appended = TieredTable(storage, topic_name).table(refresh=True).version()
    tiered = assert_same_rows(spark, storage, topic_name)
    assert len(tiered) >= 2 * main_end - 100
    for version in sorted({1, appended // 2}):
        assert_same_rows(spark, storage, topic_name, version)

    with Cluster(zookeeper) as jobs:
        results = run_compaction(jobs, spark=lambda: spark, topic=topic_name, progress=quiet())
        assert any(r.committed for r in results), results
        compacted = assert_same_rows(spark, storage, topic_name)
        assert len(compacted) < len(tiered)
        assert_same_rows(spark, storage, topic_name, appended)  # the pre-compaction rows

        # fresh small tier files after the compacted ones, for optimize to pack
        table = TieredTable(storage, topic_name)
        ends = [table.tiered_end(p) or 0 for p in (0, 1)]
        produce_specs(bootstrap, topic_name,
                      [Spec(i % 2, b"late-%d" % i, b"l" * 60) for i in range(1500)])
        wait_until(lambda: all((table.tiered_end(p) or 0) >= ends[p] + 400 for p in (0, 1)),
                   90, "late records tiered", interval=0.25)
        grown = assert_same_rows(spark, storage, topic_name)
        assert len(grown) > len(compacted)
        optimized = run_optimize(jobs, topic=topic_name, small_bytes=1 << 20,
                                 target_bytes=1 << 22, progress=quiet())
        assert any(r.committed for r in optimized), optimized
        assert below(assert_same_rows(spark, storage, topic_name), grown) == grown

        [vacuumed] = run_vacuum(jobs, topic=topic_name, grace=0, progress=quiet())
        assert vacuumed.deleted, "compaction and optimize left removed files to vacuum"
        assert below(assert_same_rows(spark, storage, topic_name), grown) == grown
    assert_same_history(spark, storage, topic_name)


def test_retention_reads_the_same(cluster: DevCluster, spark: SparkSession,
                                  topic_name: str) -> None:
    create_topic(cluster.bootstrap_servers, topic_name, config=EXPIRING_CONFIG)
    produce_specs(cluster.bootstrap_servers, topic_name, old_then_new())
    storage = Storage.from_url(cluster.storage_url)
    wait_tiered(storage, topic_name, (0,), at_least=4000)
    before = assert_same_rows(spark, storage, topic_name)
    with Cluster(cluster.zookeeper_connect) as jobs:
        [result] = run_retention(jobs, topic=topic_name, progress=quiet())
    assert result.committed and result.removed[0]
    after = assert_same_rows(spark, storage, topic_name)
    assert 0 < len(after) < len(before)
    assert min(r[1] for r in after) == result.earliest[0]
    assert_same_history(spark, storage, topic_name)


def test_spark_reads_an_s3_table_through_s3a(
        spark: SparkSession, s3_server: S3Server, tmp_path: Path, zookeeper_hosts: str) -> None:
    options = s3_server.options()
    overrides = {"remote.log.storage.url": s3_server.url(f"lake-{uuid.uuid4().hex[:8]}"),
                 **{f"remote.log.storage.option.{k}": v for k, v in options.items()}}
    secrets = {k: v for k, v in options.items() if "secret" in k or "key_id" in k}
    with DevCluster(tmp_path / "cluster", zookeeper=zookeeper_hosts,
                    brokers=1, broker_overrides=overrides) as dev:
        topic = "on-s3.clicks"
        create_topic(dev.bootstrap_servers, topic, 2, SMALL_SEGMENTS)
        produce_numbered(dev.bootstrap_servers, topic, 0, 2000, partitions=2)
        storage = storage_of(dev.zookeeper_connect, secrets)
        assert storage.scheme == "s3"
        table = TieredTable(storage, topic)
        wait_until(lambda: all((table.tiered_end(p) or 0) >= 300 for p in (0, 1)), 60,
                   "both partitions tiered to offset 300", interval=0.25)

        assert use_storage(spark, storage)
        assert spark_uri(storage, storage.table_uri(topic)).startswith("s3a://")
        rows = assert_same_rows(spark, storage, topic)
        assert len(rows) >= 600

        frame = topic_frame(spark, topic, zookeeper=dev.zookeeper_connect,
                            storage_options=secrets)
        plan = frame._jdf.queryExecution().executedPlan().toString()
        assert "FileScan parquet" in plan and "s3a://" in plan, plan
        assert sorted(int(r.v) for r in frame.selectExpr(
            "CAST(value AS STRING) AS v").collect()) == list(range(2000))
