"""Topics' Delta tables in Spark's catalog through delta-spark (streaming/spark_catalog.py) and
the union views built on them (streaming/sql_views.py).

Real ZooKeeper + broker (the shared ``cluster``; brokers tier), real Spark with delta-spark (the
shared ``spark``), real clean-up jobs (compaction, retention) committing through deltalake.
Skipped only when the ``spark`` jar set (delta-spark) was not fetched: ``./run test`` fetches it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from pyspark.sql import SparkSession

from loglake import jvm
from loglake.compaction.common import Cluster
from loglake.compaction.compact import run_compaction
from loglake.compaction.retention import run_retention
from loglake.dev.harness import DevCluster
from loglake.segments.tiered_table import TieredTable, cleaned_end
from loglake.streaming.offset_versions import tiered_end_at
from loglake.streaming.spark_catalog import (
    DeltaSparkMissingError,
    register_tables,
    require_delta,
    table_names,
)
from loglake.streaming.sql_views import quote_identifier, register_topics
from tests.admin_util import create_topic
from tests.compaction_util import (
    EXPIRING_CONFIG,
    Record,
    Spec,
    compacted_model,
    old_then_new,
    produce_specs,
    quiet,
)
from tests.spark_session import storage_of
from tests.tiering_util import wait_local_start, wait_tiered

needs_delta = pytest.mark.skipif(
    not jvm.available("spark"),
    reason="delta-spark jars not fetched (python -m loglake.jvm fetch spark; ./run test does)")


def test_table_names_fit_sparks_catalog() -> None:
    names = table_names(["clicks", "orders.v1", "Orders-v1", "a_b", "a.b", "x-y", "x.y"])
    assert names["clicks"] == "clicks" and names["a_b"] == "a_b"
    assert names["orders.v1"].startswith("orders_v1_") and names["Orders-v1"].startswith(
        "orders_v1_") and names["orders.v1"] != names["Orders-v1"]  # collision: hashed
    assert names["a.b"].startswith("a_b_") and len(names["a.b"]) == len("a_b_") + 8
    assert table_names(["x-y"]) == {"x-y": "x_y"}  # no collision: plain
    assert len(set(names.values())) == len(names)


def test_catalog_features_say_when_delta_spark_is_missing() -> None:
    class NoDelta:  # a session's conf as a SparkSession started without delta-spark has it
        class conf:
            @staticmethod
            def get(key: str, default: str | None = None) -> str | None:
                return default

    with pytest.raises(DeltaSparkMissingError, match="needs delta-spark") as info:
        require_delta(NoDelta(), "time travel")  # type: ignore[arg-type]
    assert "loglake.jvm fetch spark" in str(info.value)


def _rows(spark: SparkSession, sql: str) -> set[Record]:
    return {(r["partition"], r["offset"], None if r["key"] is None else bytes(r["key"]),
             None if r["value"] is None else bytes(r["value"])) for r in spark.sql(sql).collect()}


def _history(spark: SparkSession, table: str) -> list[Any]:
    return spark.sql(f"DESCRIBE HISTORY {table}").collect()


@needs_delta
def test_history_time_travel_and_view_across_a_compaction(
        spark: SparkSession, cluster: DevCluster, topic_name: str) -> None:
    bootstrap, zookeeper = cluster.bootstrap_servers, cluster.zookeeper_connect
    topic = f"cat.{topic_name}"
    create_topic(bootstrap, topic, 1, {"cleanup.policy": "compact", "segment.bytes": "40000",
                                       "file.delete.delay.ms": "0"})
    acked = produce_specs(bootstrap, topic, [Spec(0, b"key-%d" % (i % 200), b"v-%d" % i)
                                             for i in range(4000)])
    acked += produce_specs(bootstrap, topic, [Spec(0, b"filler-%d" % i, b"f" * 60)
                                              for i in range(1500)])
    wait_tiered(cluster.storage_url, topic, (0,), at_least=4000, timeout=180)

    tables = register_tables(spark, zookeeper=zookeeper, topics=[topic])
    qualified = tables[topic]
    assert qualified.startswith("loglake.cat_") and spark.catalog.tableExists(qualified)
    assert register_tables(spark, zookeeper=zookeeper, topics=[topic]) == tables  # idempotent
    register_topics(spark, zookeeper=zookeeper, topics=[topic])  # the union view, once
    detail = spark.sql(f"DESCRIBE DETAIL {qualified}").first()
    assert detail is not None and detail.format == "delta" and detail.numFiles >= 1
    assert detail.location.rstrip("/").endswith(f"/topics/{topic}")

    table = TieredTable(storage_of(zookeeper), topic)
    before = table.table(refresh=True).version()
    end_before = tiered_end_at(table, 0, before)
    assert end_before is not None and end_before >= 4000
    history = _history(spark, qualified)
    assert any((h.userMetadata or "").startswith("loglake tier partition=0") for h in history)
    uncompacted = {r for r in acked if r[1] < end_before}
    assert _rows(spark, f"SELECT * FROM {qualified} VERSION AS OF {before}") == uncompacted

    with Cluster(zookeeper) as jobs:
        results = run_compaction(jobs, spark=lambda: spark, topic=topic, progress=quiet())
    assert all(r.committed for r in results), results
    table.table(refresh=True)
    cleaned = {0: cleaned_end(table, 0)}
    assert cleaned[0] >= 4000
    history = _history(spark, qualified)  # no re-registration: Spark reads the newest log
    compactions = [h for h in history if h.userMetadata == "loglake compact"]
    assert len(compactions) == 1
    after = compactions[0].version
    assert after > before
    end_after = tiered_end_at(table, 0, after)
    assert end_after is not None
    expected_after = {r for r in compacted_model(acked, cleaned) if r[1] < end_after}
    assert len(expected_after) < len(uncompacted) // 2
    assert _rows(spark, f"SELECT * FROM {qualified} VERSION AS OF {after}") == expected_after
    assert _rows(spark, f"SELECT * FROM {qualified} VERSION AS OF {before}") == uncompacted
    stamp = next(h.timestamp for h in history if h.version == before)
    assert _rows(spark, f"SELECT * FROM {qualified} TIMESTAMP AS OF '{stamp}'") == uncompacted

    # the union view registered before the job: compacted rows, each record once, the tail too
    rows = spark.sql(f"SELECT partition, offset, key, value FROM {quote_identifier(topic)}"
                     ).collect()
    got = [(r["partition"], r["offset"], bytes(r["key"]),
            None if r["value"] is None else bytes(r["value"])) for r in rows]
    assert Counter(got) == Counter(compacted_model(acked, cleaned))


@needs_delta
def test_union_view_follows_retention_without_reregistration(
        spark: SparkSession, cluster: DevCluster, topic_name: str) -> None:
    bootstrap, zookeeper = cluster.bootstrap_servers, cluster.zookeeper_connect
    topic = f"ret.{topic_name}"
    create_topic(bootstrap, topic, 1, EXPIRING_CONFIG)
    acked = produce_specs(bootstrap, topic, old_then_new())
    wait_tiered(cluster.storage_url, topic, (0,), at_least=4000, timeout=180)
    wait_local_start(zookeeper, topic, (0,), above=3500)
    register_topics(spark, zookeeper=zookeeper, topics=[topic])
    view = quote_identifier(topic)
    assert spark.sql(f"SELECT count(*) AS n FROM {view}").first().n == 6000  # type: ignore[union-attr]

    with Cluster(zookeeper) as jobs:
        [result] = run_retention(jobs, topic=topic, progress=quiet())
    assert result.committed
    earliest = result.earliest[0]
    assert earliest is not None and 0 < earliest <= 3000
    rows = _rows(spark, f"SELECT partition, offset, key, value FROM {view}")
    assert rows == {r for r in acked if r[1] >= earliest}
    history = _history(spark, register_tables(spark, zookeeper=zookeeper, topics=[topic])[topic])
    assert any(h.userMetadata == "loglake retention" for h in history)
