"""The settings every SparkSession loglake builds carries: the fetched JVM jars (delta-spark,
Spark's Kafka connector, hadoop-aws; see :mod:`loglake.jvm`) and, when delta-spark is among them,
Delta's SQL extension and catalog on ``spark_catalog``.

Without the jars (a machine without Maven access) the settings are empty and loglake reads its
tables through their Parquet files, as before. Settings only take effect when the JVM starts:
a session that already runs keeps what it started with (:func:`delta_enabled` tells).

Thread safety: pure functions of the environment and the fetched jar set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loglake import jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def spark_configs() -> dict[str, str]:
    """``spark.*`` settings to pass to ``SparkSession.builder.config`` before ``getOrCreate``."""
    jars = jvm.spark_jars()
    if not jars:
        return {}
    configs = {"spark.jars": ",".join(jars)}
    if any(jvm.artifact_of(path.rsplit("/", 1)[-1]) == "delta-spark_2.13" for path in jars):
        configs["spark.sql.extensions"] = DELTA_EXTENSION
        configs["spark.sql.catalog.spark_catalog"] = DELTA_CATALOG
    return configs


def delta_enabled(spark: SparkSession) -> bool:
    """True when ``spark`` was started with delta-spark's extension (so ``format("delta")``,
    ``DESCRIBE HISTORY`` and time travel work in it)."""
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    return DELTA_EXTENSION in extensions.split(",")
