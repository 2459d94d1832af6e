"""Topics as Spark SQL tables: one temporary view per topic, tier + hot tail, each record once.

>>> from loglake.streaming.sql_views import register_topics                   # doctest: +SKIP
>>> register_topics(spark, zookeeper="localhost:2181/loglake")
['clicks', 'orders.v1']
>>> spark.sql("SELECT partition, count(*) FROM `orders.v1` GROUP BY partition").show()

View names are the topic names. Kafka topic names may contain ``.`` and ``-``, which SQL reads as
a qualifier and a minus sign: quote them with backticks (``SELECT * FROM `orders.v1```),
:func:`quote_identifier` does it. Rows have Spark's Kafka source schema (key, value, topic,
partition, offset, timestamp, timestampType and, by default here, headers).

How a view is built (:func:`topic_frame`), from ONE snapshot of the topic's Delta table taken at
registration (version V):

1. tiered rows: Spark reads the snapshot's Parquet files natively
   (``spark.read.parquet(*files)`` with ``basePath`` = the table, so ``partition`` comes from the
   ``partition=<p>`` directories), keeps ``offset < tiered_end(p)`` of V. The table holds
   committed records only (the brokers tier below the last stable offset and never tier
   aborted records or transaction markers); markers in tables tiered before that are
   ``is_control`` rows, dropped. Spark prunes partitions by path and offsets/timestamps by Parquet
   statistics. Used when Spark can read the storage (local files; s3:// through s3a when
   hadoop-aws is on the classpath: session.use_storage); for other schemes the Python data
   source reads those files with pyarrow.
   Quarantined rows (bytes the tierer could not decode, tier_rows.py) are ``is_control`` rows
   too, so the same filter keeps them out of every view: their offsets are a gap.
2. hot tail: ``format("loglake")`` with ``startingOffsets`` = each partition's tiered end of V
   (earliest where nothing is tiered) and ``endingOffsets=latest``; ``latest`` is resolved
   again by every query, so a view keeps showing new records. Views read committed data only
   by default (``isolation_level="read_committed"``, the source's ``kafka.isolation.level``):
   the hot tail ends at the last stable offset and skips aborted records, so a view agrees with
   the table; ``read_uncommitted`` reads the hot tail up to the high watermark, aborted and
   open transactions' records included (the tiered side holds committed records either way).
   Filters on topic / partition / offset prune its ranges (the reader's ``pushFilters``).

Both sides are split at the same tiered end of the same version, so tiering that runs meanwhile
cannot make a record appear twice or not at all (records tiered after V are read by side 2,
from the table or the brokers). Views keep V's file list: re-register after retention or
compaction jobs removed files (the CLI registers per query).

With delta-spark in the session (and Spark able to read the storage) views are built on the
topic's catalog table instead (streaming/spark_catalog.py, ``loglake.<name>``), and never go
stale: the tiered side is that table, whose newest version Spark resolves whenever a query is
planned, below each partition's *split* (the tiered end when the view was registered); the hot
tail is ``format("loglake")`` from the split to ``latest`` with ``failOnDataLoss=false`` (the
offsets below the split are read from the table only; retention may have moved the earliest
offset past the split: the tail starts there then). Each offset is read by exactly one side,
retention and compaction show in the next query with no re-registration, and records tiered
after registration come through the brokers (which serve them from the table); re-registering
moves the split up (faster scans). See docs/SPARK.md.

Topics with a schema subject (a typed key/value side: docs/SCHEMAS.md) get typed views: ``value``
is the decoded value, plus ``value_bytes``, ``value_schema_id``, ``value_error`` (keys likewise);
the hot tail is read with ``valueFormat=registry`` (streaming/typed_read.py) and the tiered side
from the table's ``value_typed`` conformed to the same type (streaming/typed_views.py); without
delta-spark, or when the table has no typed column yet, the data source reads the whole topic
and decodes the tier's raw bytes. ``schema_columns=False`` keeps the binary columns.

The Delta tables themselves are untouched (read-only): deltalake, Spark+Delta or any other Delta
reader still reads them directly.

Driver-side only; not thread-safe (uses one ZooKeeper session and one admin client per call).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import reduce
from typing import TYPE_CHECKING, Literal

from loglake.client.security import from_spark_options
from loglake.errors import UnknownTopicError
from loglake.streaming.offsets import ClusterView, TierSnapshot
from loglake.streaming.options import (
    EARLIEST,
    ISOLATION_OPTION,
    IsolationLevel,
    Subscription,
)
from loglake.streaming.session import spark_uri, use_storage

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession

    from loglake.segments.storage import Storage

TierRead = Literal["auto", "spark", "python"]
"""How views read tiered rows: ``spark`` natively (Parquet), ``python`` through the loglake data
source (pyarrow), ``auto``: ``spark`` where Spark reads the storage (local, or s3 through s3a:
:func:`loglake.streaming.session.use_storage`), else ``python``."""


def quote_identifier(name: str) -> str:
    """``name`` as a SQL identifier: in backticks, inner backticks doubled."""
    return "`" + name.replace("`", "``") + "`"


def register_topics(
    spark: SparkSession,
    *,
    zookeeper: str,
    topics: Sequence[str] | None = None,
    bootstrap_servers: str | None = None,
    include_headers: bool = True,
    tier_read: TierRead = "auto",
    storage_options: Mapping[str, str] | None = None,
    isolation_level: IsolationLevel = "read_committed",
    kafka_options: Mapping[str, str] | None = None,
    schema_columns: bool = True,
) -> list[str]:
    """Create or replace a temporary view per topic (all topics, or ``topics``) named after the
    topic; return the names registered. ``isolation_level``: what the hot tail shows (module
    docstring). Raises :class:`UnknownTopicError` for a named topic
    that does not exist. ``storage_options`` (delta-rs names, e.g. credentials) are added to
    the storage options the brokers published, which never hold secrets. ``kafka_options``:
    Kafka client properties for the brokers (``security.protocol``, ``sasl.jaas.config``,
    ``ssl.truststore.location``, ...; with or without Spark's ``kafka.`` prefix), given to
    every hot-tail read. ``schema_columns``: topics with a key/value schema subject get typed
    columns (module docstring; False: every view has Kafka's binary columns)."""
    from loglake.streaming import register

    register(spark)
    kafka = _kafka_options(kafka_options)
    view = _cluster_view(zookeeper, bootstrap_servers, storage_options, kafka)
    try:
        catalog = view.catalog()
        assert catalog is not None
        names = select_topics(catalog.topic_names(), topics)
        for name in names:
            frame = _topic_frame(spark, view, name, zookeeper=zookeeper,
                                 bootstrap_servers=bootstrap_servers,
                                 include_headers=include_headers, tier_read=tier_read,
                                 isolation_level=isolation_level, kafka_options=kafka,
                                 schema_columns=schema_columns)
            frame.createOrReplaceTempView(quote_identifier(name))
        return names
    finally:
        view.close()


def topic_frame(
    spark: SparkSession,
    topic: str,
    *,
    zookeeper: str,
    bootstrap_servers: str | None = None,
    include_headers: bool = True,
    tier_read: TierRead = "auto",
    storage_options: Mapping[str, str] | None = None,
    isolation_level: IsolationLevel = "read_committed",
    kafka_options: Mapping[str, str] | None = None,
    schema_columns: bool = True,
) -> DataFrame:
    """The DataFrame behind ``topic``'s view (see the module docstring and
    :func:`register_topics` for the options)."""
    from loglake.streaming import register

    register(spark)
    kafka = _kafka_options(kafka_options)
    view = _cluster_view(zookeeper, bootstrap_servers, storage_options, kafka)
    try:
        return _topic_frame(spark, view, topic, zookeeper=zookeeper,
                            bootstrap_servers=bootstrap_servers,
                            include_headers=include_headers, tier_read=tier_read,
                            isolation_level=isolation_level, kafka_options=kafka,
                            schema_columns=schema_columns)
    finally:
        view.close()


def select_topics(existing: Sequence[str], topics: Sequence[str] | None) -> list[str]:
    """``topics`` without repeats, or every ``existing`` topic when None; UnknownTopicError
    naming those that do not exist."""
    names = list(existing if topics is None else dict.fromkeys(topics))
    missing = [t for t in names if t not in existing]
    if missing:
        raise UnknownTopicError(f"no such topic: {', '.join(missing)}",
                                hint="list topics with 'loglake topics list'")
    return names


def _kafka_options(options: Mapping[str, str] | None) -> dict[str, str]:
    """Kafka client properties as Spark options: each key with the ``kafka.`` prefix."""
    return {key if key.lower().startswith("kafka.") else f"kafka.{key}": value
            for key, value in (options or {}).items()}


def _cluster_view(zookeeper: str, bootstrap_servers: str | None,
                  storage_options: Mapping[str, str] | None,
                  kafka_options: Mapping[str, str]) -> ClusterView:
    security = from_spark_options({k[len("kafka."):]: v for k, v in kafka_options.items()})
    return ClusterView.for_cluster(zookeeper=zookeeper, bootstrap_servers=bootstrap_servers,
                                   storage_options=storage_options,
                                   security=security.without_other())


def _topic_frame(spark: SparkSession, view: ClusterView, topic: str, *, zookeeper: str,
                 bootstrap_servers: str | None, include_headers: bool,
                 tier_read: TierRead, isolation_level: IsolationLevel,
                 kafka_options: Mapping[str, str], schema_columns: bool = True) -> DataFrame:
    partitions = [p for _, p in view.topic_partitions(Subscription("subscribe", (topic,)))]
    if not partitions:
        raise UnknownTopicError(f"topic {topic!r} does not exist (no partitions)")
    typed = _typed_sides(view, topic) if schema_columns else []
    storage = view.storage()
    if storage is not None and _delta_reads(spark, storage, tier_read):
        return _delta_union(spark, view, storage, topic, partitions, zookeeper=zookeeper,
                            bootstrap_servers=bootstrap_servers,
                            include_headers=include_headers, isolation_level=isolation_level,
                            kafka_options=kafka_options, typed=typed)
    native = storage is not None and tier_read != "python" and (
        use_storage(spark, storage) or tier_read == "spark")
    snapshot = view.tier_snapshot(topic, partitions) if native else None
    source = _hot_source(spark, view, topic, partitions, zookeeper=zookeeper,
                         bootstrap_servers=bootstrap_servers, include_headers=include_headers,
                         isolation_level=isolation_level, kafka_options=kafka_options,
                         typed=typed)
    if typed or snapshot is None or not any(snapshot.files.get(p) for p in snapshot.ends):
        # typed sides without delta-spark: the data source decodes the tier's raw bytes
        return source.option("startingOffsets", "earliest").load()
    assert storage is not None
    starts = {str(p): snapshot.ends.get(p, EARLIEST) for p in partitions}
    hot = source.option("startingOffsets", json.dumps({topic: starts})).load()
    tier = _tier_frame(spark, storage, snapshot, include_headers)
    return tier.unionByName(hot)


def _delta_reads(spark: SparkSession, storage: Storage, tier_read: TierRead) -> bool:
    """Whether the view reads its tiered rows through delta-spark (the catalog table): when the
    session runs delta-spark and Spark reads the storage (local, s3 through s3a; any with
    ``tier_read="spark"``)."""
    from loglake.streaming.session import delta_enabled, use_storage

    return tier_read != "python" and delta_enabled(spark) and (
        tier_read == "spark" or use_storage(spark, storage))


def _typed_sides(view: ClusterView, topic: str) -> list[str]:
    """The sides of ``topic`` that have a schema subject (streaming/typed_read.py)."""
    from loglake.streaming.typed_read import typed_sides_of

    catalog = view.catalog()
    assert catalog is not None
    return sorted(typed_sides_of(catalog, [topic]).get(topic, {}))


def _hot_source(spark: SparkSession, view: ClusterView, topic: str, partitions: list[int], *,
                zookeeper: str, bootstrap_servers: str | None, include_headers: bool,
                isolation_level: IsolationLevel,
                kafka_options: Mapping[str, str],
                typed: Sequence[str] = ()) -> DataFrameReader:
    """A ``format("loglake")`` reader of ``partitions`` of ``topic`` up to the latest offsets,
    with the view's client and tier options (``typed``: the sides decoded,
    ``<side>Format=registry``); the caller sets ``startingOffsets``."""
    source = (spark.read.format("loglake").option("zookeeper", zookeeper)
              .option("includeHeaders", str(include_headers).lower())
              .option("assign", json.dumps({topic: partitions}))
              .option("endingOffsets", "latest")
              .option(ISOLATION_OPTION, isolation_level))
    if bootstrap_servers:
        source = source.option("kafka.bootstrap.servers", bootstrap_servers)
    for key, value in kafka_options.items():
        source = source.option(key, value)
    for key, value in view.options.storage_options.items():
        source = source.option(f"tier.{key}", value)
    for side in typed:
        source = source.option(f"{side}Format", "registry")
    return source


def _delta_union(spark: SparkSession, view: ClusterView, storage: Storage, topic: str,
                 partitions: list[int], *, zookeeper: str, bootstrap_servers: str | None,
                 include_headers: bool, isolation_level: IsolationLevel,
                 kafka_options: Mapping[str, str], typed: Sequence[str] = ()) -> DataFrame:
    """Tier (the catalog's Delta table, its version resolved by every query) below each
    partition's split, hot tail (the brokers) from it; the split is the tiered end at
    registration (module docstring). ``typed``: sides with typed columns
    (streaming/typed_views.py)."""
    from pyspark.sql import functions as F

    from loglake.streaming.spark_catalog import DEFAULT_DATABASE, sync_tables, table_names

    hot = _hot_source(spark, view, topic, partitions, zookeeper=zookeeper,
                      bootstrap_servers=bootstrap_servers, include_headers=include_headers,
                      isolation_level=isolation_level, kafka_options=kafka_options,
                      typed=typed)
    snapshot = view.tier_snapshot(topic, partitions)
    splits = {p: snapshot.ends.get(p, 0) for p in partitions} if snapshot is not None else {}
    if not any(splits.values()):
        return hot.option("startingOffsets", "earliest").load()
    catalog = view.catalog()
    assert catalog is not None
    name = table_names(catalog.topic_names())[topic]
    qualified = f"{DEFAULT_DATABASE}.{name}"
    if not spark.catalog.tableExists(qualified):  # registered: its location is the topic's
        qualified = sync_tables(spark, storage, {topic: name})[topic]
    starts = {str(p): splits[p] if splits[p] else EARLIEST for p in partitions}
    # offsets below a split may be gone by the time a query runs (retention): start at the
    # brokers' earliest then, as the table does
    tail = (hot.option("startingOffsets", json.dumps({topic: starts}))
            .option("failOnDataLoss", "false").load())
    bounds: list[Column] = [(F.col("partition") == p) & (F.col("offset") < end)
                            for p, end in splits.items() if end]
    rows = spark.table(qualified).where(reduce(lambda a, b: a | b, bounds)
                                        & ~F.col("is_control"))
    if typed:
        from loglake.streaming.typed_views import has_typed_columns, tier_columns

        if not has_typed_columns(rows, list(typed)):  # typed after its last tiering
            return hot.option("startingOffsets", "earliest").load()
        return tier_columns(rows, topic, tail).unionByName(tail)
    return _kafka_columns(rows, topic, include_headers).unionByName(tail)


def _kafka_columns(rows: DataFrame, topic: str, include_headers: bool) -> DataFrame:
    """Tier rows in the Kafka source schema."""
    from pyspark.sql import functions as F

    columns = [
        F.col("key"), F.col("value"), F.lit(topic).alias("topic"),
        F.col("partition").cast("int").alias("partition"), F.col("offset"),
        F.col("timestamp"), F.col("timestamp_type").alias("timestampType"),
    ]
    if include_headers:
        columns.append(F.when(F.size("headers") > 0, F.col("headers")).alias("headers"))
    return rows.select(*columns)


def _spark_uri(storage: Storage, uri: str) -> str:
    """A URI Spark's Hadoop filesystem layer reads (``file://``, ``s3a://``)."""
    return spark_uri(storage, uri)


def _tier_frame(spark: SparkSession, storage: Storage, snapshot: TierSnapshot,
                include_headers: bool) -> DataFrame:
    """Tiered rows of ``snapshot`` read natively by Spark, in the Kafka source schema."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        BinaryType,
        BooleanType,
        IntegerType,
        LongType,
        StructField,
        StructType,
        TimestampType,
    )

    from loglake.streaming.schema import HEADERS_TYPE

    parquet_schema = StructType([
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestamp_type", IntegerType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("headers", HEADERS_TYPE),
        StructField("is_control", BooleanType()),
        StructField("partition", IntegerType()),
    ])
    chosen = [(p, f) for p in sorted(snapshot.ends) for f in snapshot.files.get(p, ())]
    files = [_spark_uri(storage, f.uri) for _, f in chosen]
    rows = (spark.read.schema(parquet_schema)
            .option("basePath", _spark_uri(storage, snapshot.uri))
            .parquet(*files))
    # Files of the snapshot normally hold only offsets below their partition's tiered end and
    # no quarantined rows or (in tables tiered before markers were left out) transaction
    # markers (both is_control); the filters are added only
    # when the file statistics say otherwise (fewer columns decoded: the scan then costs what
    # a plain Parquet read does).
    beyond = sorted({p for p, f in chosen if f.max_offset >= snapshot.ends[p]})
    if beyond:
        bounds: list[Column] = [(F.col("partition") != p) | (F.col("offset") < snapshot.ends[p])
                                for p in beyond]
        rows = rows.where(reduce(lambda a, b: a & b, bounds))
    if any(f.has_control for _, f in chosen):
        rows = rows.where(~F.col("is_control"))
    columns = [
        F.col("key"), F.col("value"), F.lit(snapshot.topic).alias("topic"),
        F.col("partition"), F.col("offset"), F.col("timestamp"),
        F.col("timestamp_type").alias("timestampType"),
    ]
    if include_headers:
        columns.append(F.when(F.size("headers") > 0, F.col("headers")).alias("headers"))
    return rows.select(*columns)

