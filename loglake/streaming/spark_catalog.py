"""Topics' Delta tables in Spark's session catalog, read through delta-spark.

>>> from loglake.streaming.spark_catalog import register_tables            # doctest: +SKIP
>>> register_tables(spark, zookeeper="localhost:2181/loglake")
{'clicks': 'loglake.clicks', 'orders.v1': 'loglake.orders_v1'}
>>> spark.sql("DESCRIBE HISTORY loglake.clicks").show()
>>> spark.sql("SELECT count(*) FROM loglake.clicks VERSION AS OF 12").show()

Each topic whose table exists (something was tiered) becomes an EXTERNAL table
``<database>.<name>`` (database ``loglake`` by default) at the table's location:
``CREATE TABLE IF NOT EXISTS ... USING delta LOCATION '<uri>'``. Registering writes nothing to
the Delta log (the schema comes from it; no table properties are set, which would be a commit):
commits stay with deltalake, delta-spark reads. Because Spark resolves a Delta table's newest
version whenever a query is planned, the tables never go stale: tiering, retention and
compaction are visible to the next query without registering again.

Names (:func:`table_names`): Spark's catalog accepts only ``[a-z0-9_]`` in table names (and
folds case); Kafka topics also use ``.``, ``-`` and upper case. A topic that is already such a
name keeps it; any other becomes lower case with ``_`` for the other characters, plus
``_<8 hex digits of the topic's SHA-1>`` when that name is taken by another topic.

Registration is idempotent and cheap (one catalog lookup per topic, one Delta log read per new
table); the set is re-synchronised on every call: a table whose location changed is re-created,
and with ``topics=None`` tables of deleted topics (locations under the storage's ``topics/``
directory) are dropped (EXTERNAL: the data stays). See docs/SPARK.md for why the catalog is
filled at session start instead of kept in a persistent metastore.

Needs delta-spark in the session (:func:`loglake.streaming.session.delta_enabled`); without it
:class:`DeltaSparkMissingError` says how to get it. Driver-side only; not thread-safe.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from loglake.errors import LoglakeError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from loglake.segments.storage import Storage

DEFAULT_DATABASE = "loglake"
_VALID = re.compile(r"[a-z0-9_]+")


class DeltaSparkMissingError(LoglakeError):
    """A catalog feature needs delta-spark, and the SparkSession was started without it."""

    code = ErrorCode.invalid_config


def require_delta(spark: SparkSession, what: str) -> None:
    """Raise :class:`DeltaSparkMissingError` unless ``spark`` runs delta-spark."""
    from loglake.streaming.session import delta_enabled

    if not delta_enabled(spark):
        raise DeltaSparkMissingError(
            f"{what} needs delta-spark, and this SparkSession was started without it",
            hint="fetch the jars with 'python -m loglake.jvm fetch spark' (needs Maven) and "
            "build the session with loglake.streaming.session.spark_configs(); "
            "format('loglake') and the SQL views work without it")


def table_names(topics: Iterable[str]) -> dict[str, str]:
    """Catalog table name of each topic (module docstring: names)."""
    ordered = sorted(set(topics))
    wanted = {t: _sanitised(t) for t in ordered}
    exact = {t for t in ordered if _VALID.fullmatch(t)}
    taken = {wanted[t] for t in exact}
    counts: dict[str, int] = {}
    for name in wanted.values():
        counts[name] = counts.get(name, 0) + 1
    result = {}
    for topic, name in wanted.items():
        if topic not in exact and (name in taken or counts[name] > 1):
            name = f"{name}_{hashlib.sha1(topic.encode()).hexdigest()[:8]}"
        result[topic] = name
    return result


def _sanitised(topic: str) -> str:
    return re.sub(r"[^a-z0-9_]", "_", topic.lower())


def register_tables(
    spark: SparkSession,
    *,
    zookeeper: str,
    topics: Sequence[str] | None = None,
    database: str = DEFAULT_DATABASE,
    storage_options: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Register the Delta table of every topic (or of ``topics``) as ``<database>.<name>``;
    return ``{topic: qualified name}`` for the topics that have a table (nothing tiered yet:
    left out). Raises :class:`UnknownTopicError` for a named topic that does not exist,
    :class:`DeltaSparkMissingError` without delta-spark."""
    from loglake.streaming.offsets import ClusterView
    from loglake.streaming.sql_views import select_topics

    require_delta(spark, "registering topics in Spark's catalog")
    if not _VALID.fullmatch(database):
        raise LoglakeError(f"database name {database!r} must be lower case letters, digits "
                           f"and _")
    view = ClusterView.for_cluster(zookeeper=zookeeper, storage_options=storage_options)
    try:
        catalog = view.catalog()
        assert catalog is not None
        existing = catalog.topic_names()
        storage = view.storage()
    finally:
        view.close()
    names = table_names(existing)
    wanted = select_topics(existing, topics)
    if storage is None:
        raise LoglakeError(f"no broker in ZooKeeper at {zookeeper!r} published a tier storage",
                           hint="start the brokers with a tier storage (tier.storage.url)")
    return sync_tables(spark, storage, {t: names[t] for t in wanted}, database=database,
                       drop_others=topics is None)


def sync_tables(spark: SparkSession, storage: Storage, names: Mapping[str, str], *,
                database: str = DEFAULT_DATABASE, drop_others: bool = False) -> dict[str, str]:
    """Register ``names`` (topic -> table name) of ``storage``; with ``drop_others``, drop the
    database's other tables that point into the storage's ``topics/`` directory."""
    from deltalake import DeltaTable

    from loglake.streaming.session import spark_uri, use_storage
    from loglake.streaming.sql_views import quote_identifier

    require_delta(spark, "registering topics in Spark's catalog")
    if not use_storage(spark, storage):
        raise LoglakeError(f"Spark cannot read the tier storage {storage.url!r} natively",
                           hint="put hadoop-aws on the classpath for s3:// (the spark jar set)")
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
    present = {row.tableName: row.isTemporary for row in
               spark.sql(f"SHOW TABLES IN {database}").collect()}
    registered: dict[str, str] = {}
    for topic, name in sorted(names.items()):
        uri = storage.table_uri(topic)
        qualified = f"{database}.{name}"
        if not DeltaTable.is_deltatable(uri, storage_options=storage.delta_options()):
            if name in present and present[name] is False:
                spark.sql(f"DROP TABLE IF EXISTS {qualified}")  # topic re-created: not tiered
            continue
        location = spark_uri(storage, uri)
        if name in present and _normal(_location(spark, qualified)) != _normal(location):
            spark.sql(f"DROP TABLE IF EXISTS {qualified}")
        escaped = location.replace("\\", "\\\\").replace("'", "\\'")
        spark.sql(f"CREATE TABLE IF NOT EXISTS {qualified} USING delta LOCATION '{escaped}'")
        registered[topic] = qualified
    if drop_others:
        root = _normal(spark_uri(storage, storage.table_uri("_"))).rstrip("_")
        keep = set(names.values())
        for name, temporary in present.items():
            if temporary or name in keep:
                continue
            qualified = f"{database}.{quote_identifier(name)}"
            if _normal(_location(spark, qualified)).startswith(root):
                spark.sql(f"DROP TABLE IF EXISTS {qualified}")
    return registered


def _location(spark: SparkSession, qualified: str) -> str:
    """The LOCATION of a catalog table (empty when it has none)."""
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED {qualified}").collect():
        if row.col_name == "Location":
            return str(row.data_type)
    return ""


def _normal(location: str) -> str:
    """Locations compared without the ``file:`` spelling differences."""
    return re.sub(r"^file:/+", "/", location).rstrip("/")
