"""Spark data sources over loglake topics: ``format("loglake")`` for read, readStream, write
and writeStream, with the options and row schema of Spark's Kafka source.

>>> from loglake.streaming import register                            # doctest: +SKIP
>>> register(spark)
>>> df = (spark.read.format("loglake").option("zookeeper", "localhost:2181/loglake")
...       .option("subscribe", "orders").load())

Modules: options.py (option parsing), offsets.py (planning against the cluster), ranges.py
(reading one offset range from the tier or the brokers), source.py (readers), sink.py
(writers), schema.py (the row schema), sql_views.py (topics as Spark SQL views), sql_cli.py
(``loglake sql``), typed_read.py / typed_views.py / typed_write.py (schema'd keys and values as
typed columns: docs/SCHEMAS.md "Spark").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

__all__ = ["FILTER_PUSHDOWN_CONF", "register"]


def register(spark: SparkSession) -> None:
    """Register ``format("loglake")`` with ``spark`` (idempotent) and enable filter pushdown
    for Python data sources (:data:`FILTER_PUSHDOWN_CONF`), which the batch reader needs:
    PySpark refuses a reader with ``pushFilters`` while that setting is off."""
    from loglake.streaming.source import LoglakeDataSource

    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    spark.dataSource.register(LoglakeDataSource)
