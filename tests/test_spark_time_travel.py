"""Offsets <-> table versions and reading a topic as of Kafka offsets
(streaming/offset_versions.py, ``format("loglake").option("loglake.asOfOffsets", ...)``).

Real ZooKeeper + broker (the shared ``cluster``; brokers tier), real Spark (the shared
``spark``; the as-of read needs no delta-spark: the data source reads the pinned version's
files), the real retention job. Value ``i`` sits at partition ``i % 2``, offset ``i // 2``.
"""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession

from loglake.compaction.common import Cluster
from loglake.compaction.retention import run_retention
from loglake.dev.harness import DevCluster
from loglake.segments.tiered_table import TieredTable
from loglake.streaming.errors import SourceOptionError
from loglake.streaming.offset_versions import (
    AS_OF_OPTION,
    parse_as_of,
    tiered_end_at,
    version_for_timestamp,
    version_of_offset,
)
from loglake.streaming.options import Subscription, parse_options
from tests.admin_util import create_topic
from tests.compaction_util import EXPIRING_CONFIG, old_then_new, produce_specs, quiet
from tests.spark_session import SMALL_SEGMENTS, produce_numbered, storage_of, wait_tiered
from tests.tiering_util import wait_local_start
from tests.tiering_util import wait_tiered as wait_tiered_at_least


def test_as_of_option_forms_and_errors() -> None:
    one = Subscription("subscribe", ("t",))
    assert parse_as_of('{"0": 12, "1": 0}', one) == {("t", 0): 12, ("t", 1): 0}
    assert parse_as_of('{"u": {"3": 7}}', None) == {("u", 3): 7}
    for bad in ('{"0": -1}', '{"x": 1}', "[1]", "{}", '{"0": 1, "t": {"0": 1}}', "nope"):
        with pytest.raises(SourceOptionError, match="asOfOffsets"):
            parse_as_of(bad, one)
    with pytest.raises(SourceOptionError, match="exactly one subscribed topic"):
        parse_as_of('{"0": 1}', Subscription("subscribe", ("a", "b")))
    base = {"zookeeper": "localhost:2181", "subscribe": "t", AS_OF_OPTION: '{"0": 5}'}
    assert parse_options(base, "batch").as_of_offsets == {("t", 0): 5}
    with pytest.raises(SourceOptionError, match="only for batch"):
        parse_options(base, "stream")
    with pytest.raises(SourceOptionError, match="only for batch"):
        parse_options({**base, "endingOffsets": "latest"}, "batch")


def _read_as_of(spark: SparkSession, zookeeper: str, topic: str, as_of: dict[str, int]
                ) -> list[tuple[int, int, int]]:
    frame = (spark.read.format("loglake").option("zookeeper", zookeeper)
             .option("subscribe", topic).option(AS_OF_OPTION, json.dumps(as_of)).load())
    return sorted((r.partition, r.offset, int(r.v)) for r in frame.selectExpr(
        "partition", "offset", "CAST(value AS STRING) AS v").collect())


def test_offset_to_version_and_read_as_of_offsets(
        spark: SparkSession, cluster: DevCluster, topic_name: str) -> None:
    zookeeper = cluster.zookeeper_connect
    topic = f"asof.{topic_name}"
    create_topic(cluster.bootstrap_servers, topic, 2, SMALL_SEGMENTS)
    produce_numbered(cluster.bootstrap_servers, topic, 0, 3000, partitions=2)
    wait_tiered(zookeeper, topic, {0: 800, 1: 800})
    table = TieredTable(storage_of(zookeeper), topic)
    table.table(refresh=True)

    version = version_of_offset(table, 0, 399)
    assert version is not None
    assert (tiered_end_at(table, 0, version) or 0) > 399
    assert version == 0 or (tiered_end_at(table, 0, version - 1) or 0) <= 399
    assert version_of_offset(table, 0, 10**9) is None  # not tiered (yet)
    [first] = table.read_rows(0, 399, 400, columns=["timestamp"])
    stamp_ms = first.column("timestamp").cast("int64")[0].as_py() // 1000
    found = version_for_timestamp(table, 0, stamp_ms)
    assert found is not None and found[1] <= 399 and found[0] <= version

    # partition 0 from the tier as of the version offset 399 was tiered in; partition 1 past
    # the tiered end: the tier plus the brokers
    rows = _read_as_of(spark, zookeeper, topic, {"0": 400, "1": 1450})
    assert rows == sorted([(0, o, 2 * o) for o in range(400)]
                          + [(1, o, 2 * o + 1) for o in range(1450)])
    assert _read_as_of(spark, zookeeper, topic, {"0": 0, "1": 1}) == [(1, 0, 1)]


def test_read_as_of_offsets_travels_back_past_retention(
        spark: SparkSession, cluster: DevCluster, topic_name: str) -> None:
    """Records below the offsets as the table held them when they were tiered: retention that
    ran afterwards (files removed from the table, not vacuumed) does not change the answer,
    while a read of the current table no longer has them."""
    bootstrap, zookeeper = cluster.bootstrap_servers, cluster.zookeeper_connect
    topic = f"asof-ret.{topic_name}"
    create_topic(bootstrap, topic, 1, EXPIRING_CONFIG)
    produce_specs(bootstrap, topic, old_then_new(value=lambda o: b"%010d" % o))
    wait_tiered_at_least(cluster.storage_url, topic, (0,), at_least=4000, timeout=180)
    wait_local_start(zookeeper, topic, (0,), above=3500)
    with Cluster(zookeeper) as jobs:
        [result] = run_retention(jobs, topic=topic, progress=quiet())
    assert result.committed
    earliest = result.earliest[0]
    assert earliest is not None and 0 < earliest <= 3000

    rows = _read_as_of(spark, zookeeper, topic, {"0": 3500})
    assert rows == [(0, o, o) for o in range(3500)]  # expired records included
    now_rows = (spark.read.format("loglake").option("zookeeper", zookeeper)
                .option("subscribe", topic)
                .option("endingOffsets", json.dumps({topic: {"0": 3500}})).load())
    assert now_rows.count() == 3500 - earliest
