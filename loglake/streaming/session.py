"""The settings every SparkSession loglake builds carries: the fetched JVM jars (delta-spark,
Spark's Kafka connector, hadoop-aws; see :mod:`loglake.jvm`; on the driver's classpath for a
local master, else shipped with ``spark.jars``) and, when delta-spark is among them,
Delta's SQL extension and catalog on ``spark_catalog``; and the Hadoop settings that let Spark
read the tier storage itself (s3a).

Without the jars (a machine without Maven access) the settings are empty and loglake reads its
tables through their Parquet files, as before. Settings only take effect when the JVM starts:
a session that already runs keeps what it started with (:func:`delta_enabled` tells).

Storage (:func:`use_storage`): local tables are read by Spark as ``file://`` URIs. ``s3://``
tables are read through Hadoop's s3a filesystem when hadoop-aws is on the session's classpath:
URIs become ``s3a://`` (:func:`spark_uri`) and the storage's options (delta-rs names, the same
endpoint/credentials/region the brokers, deltalake, s3fs and pyarrow use) become per-bucket s3a
settings (:func:`s3a_settings`: ``fs.s3a.bucket.<bucket>.*``, so buckets of different storages do
not share credentials): endpoint, path-style access when an endpoint is given (S3-compatible
servers), SSL off for an ``http://`` endpoint, region, static or session credentials (else the
AWS default chain), anonymous access. They are set on the session's SQL conf, which Spark copies
into every Hadoop configuration it builds (Parquet scans and delta-spark's log reads alike), so a
running session picks them up; Hadoop caches one s3a filesystem per bucket, so the first read of a
bucket fixes its settings for the session. Other schemes, and s3 without hadoop-aws, are not read
by Spark (:func:`use_storage` is False): callers keep reading those through pyarrow.

Thread safety: pure functions of the environment and the fetched jar set; :func:`use_storage` sets
session conf entries (idempotent; safe to repeat from any driver thread).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from loglake import jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from loglake.segments.storage import Storage

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
DELTA_SNAPSHOT_PARTITIONS_KEY = "spark.databricks.delta.snapshotPartitions"
DELTA_SNAPSHOT_PARTITIONS = 4
"""Partitions of delta-spark's cached log state (Delta's default: 50). Every scan of a table
lists its files with one task per partition of that state, so with 50 a ``SELECT`` over a
1M-record topic on ``local[2]`` spent 8-25 s in 50 tiny tasks (the Parquet scan itself: ~1.5 s)
and building a snapshot took 6x longer; loglake's tables have one add action per tiered segment
(thousands, not millions), which a few partitions hold easily. Set it after
:func:`spark_configs` to override."""
S3A_ARTIFACT = "hadoop-aws"
CLASSPATH_KEY = "spark.driver.extraClassPath"
_TRUE = frozenset({"1", "true", "yes", "on"})

SparkConfValue = bool | float | int | str | None
"""What ``SparkSession.builder.config(map=...)`` takes as values (loglake only puts strings)."""


def is_local_master(master: str | None) -> bool:
    """True for Spark's in-process masters (``local``, ``local[N]``, ``local[N,F]``,
    ``local[*]``): the driver JVM is the only executor."""
    return master is not None and (master == "local" or master.startswith("local["))


def spark_configs(master: str | None = None) -> dict[str, SparkConfValue]:
    """``spark.*`` settings to pass to ``SparkSession.builder.config`` before ``getOrCreate``.

    With a local ``master`` (:func:`is_local_master`) the jars go on the driver's classpath
    (``spark.driver.extraClassPath``, read when the JVM starts), which is the only executor. With
    any other master (or None: unknown) they go in ``spark.jars``, which Spark ships to every
    executor; it also copies each jar into the session's temporary directory (``userFiles``),
    700 MB per session for the AWS SDK bundle, left behind when the process is killed, which is
    why local sessions do not use it.
    """
    jars = jvm.spark_jars()
    if not jars:
        return {}
    configs: dict[str, SparkConfValue]
    if is_local_master(master):
        configs = {CLASSPATH_KEY: os.pathsep.join(jars)}
    else:
        configs = {"spark.jars": ",".join(jars)}
    if any(jvm.artifact_of(path.rsplit("/", 1)[-1]) == "delta-spark_2.13" for path in jars):
        configs["spark.sql.extensions"] = DELTA_EXTENSION
        configs["spark.sql.catalog.spark_catalog"] = DELTA_CATALOG
        configs[DELTA_SNAPSHOT_PARTITIONS_KEY] = str(DELTA_SNAPSHOT_PARTITIONS)
    return configs


def delta_enabled(spark: SparkSession) -> bool:
    """True when ``spark`` was started with delta-spark's extension (so ``format("delta")``,
    ``DESCRIBE HISTORY`` and time travel work in it)."""
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    return DELTA_EXTENSION in extensions.split(",")


def s3a_available(spark: SparkSession) -> bool:
    """True when ``spark`` was started with hadoop-aws on its classpath (so ``s3a://`` reads),
    through ``spark.jars`` or the driver's extra classpath."""
    shipped = (spark.conf.get("spark.jars", "") or "").split(",")
    classpath = (spark.conf.get(CLASSPATH_KEY, "") or "").split(os.pathsep)
    return any(jvm.artifact_of(os.path.basename(path)) == S3A_ARTIFACT
               for path in shipped + classpath if path)


def spark_uri(storage: Storage, uri: str) -> str:
    """``uri`` (a table or file URI of ``storage``) as Spark's Hadoop layer names it: local
    paths get ``file://``, ``s3://`` (and ``s3n://``) become ``s3a://``; others unchanged."""
    if storage.is_local:
        return "file://" + uri if uri.startswith("/") else uri
    scheme, sep, rest = uri.partition("://")
    if sep and storage.scheme == "s3" and scheme.lower() in ("s3", "s3n"):
        return f"s3a://{rest}"
    return uri


def s3a_settings(storage: Storage) -> dict[str, str]:
    """Hadoop ``fs.s3a.bucket.<bucket>.*`` settings for an ``s3://`` storage (empty for other
    schemes); see the module docstring for what is derived from which option."""
    if storage.scheme != "s3":
        return {}
    bucket = storage.url.split("://", 1)[1].split("/", 1)[0]
    options = storage.options
    prefix = f"fs.s3a.bucket.{bucket}."
    settings: dict[str, str] = {}
    endpoint = options.get("aws_endpoint_url", "").strip()
    if endpoint:
        settings["endpoint"] = endpoint
        virtual = options.get("aws_virtual_hosted_style_request", "").strip().lower() in _TRUE
        settings["path.style.access"] = "false" if virtual else "true"
        settings["connection.ssl.enabled"] = str(
            not endpoint.lower().startswith("http://")).lower()
    region = options.get("aws_region", "").strip()
    if region or endpoint:
        settings["endpoint.region"] = region or "us-east-1"
    key = options.get("aws_access_key_id")
    secret = options.get("aws_secret_access_key")
    token = options.get("aws_session_token")
    if options.get("aws_skip_signature", "").strip().lower() in _TRUE:
        settings["aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider")
    elif key and secret:
        settings["access.key"] = key
        settings["secret.key"] = secret
        if token:
            settings["session.token"] = token
            settings["aws.credentials.provider"] = (
                "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider")
        else:
            settings["aws.credentials.provider"] = (
                "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
    return {prefix + name: value for name, value in settings.items()}


def s3a_configs(storage: Storage) -> dict[str, SparkConfValue]:
    """:func:`s3a_settings` as ``spark.hadoop.*`` settings for ``SparkSession.builder``."""
    return {f"spark.hadoop.{key}": value for key, value in s3a_settings(storage).items()}


def use_storage(spark: SparkSession, storage: Storage) -> bool:
    """Make ``spark`` able to read ``storage``'s tables natively and say whether it can: True
    for local storage, and for ``s3://`` when hadoop-aws is on the session's classpath (the s3a
    settings are then set on the session); False otherwise (read through pyarrow)."""
    if storage.is_local:
        return True
    if storage.scheme != "s3" or not s3a_available(spark):
        return False
    for key, value in s3a_settings(storage).items():
        if spark.conf.get(key, None) != value:
            spark.conf.set(key, value)
    return True
