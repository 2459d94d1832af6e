"""Row schema of topics in Spark: exactly Spark's Kafka source schema.

::

    key            binary     null for a null key
    value          binary     null for a tombstone
    topic          string
    partition      int
    offset         bigint
    timestamp      timestamp  (Kafka's milliseconds; microsecond type)
    timestampType  int        0 CreateTime, 1 LogAppendTime (-1 none)
    headers        array<struct<key: string, value: binary>>   only with includeHeaders=true;
                              null when a record has no headers (as Spark's Kafka source)

Every column is nullable, as in Spark's source, so ``format("kafka")`` and ``format("loglake")``
frames union without casts. Arrow batches handed to Spark must match :func:`arrow_schema`
exactly (Spark checks ``Schema.equals``). Constants only: thread-safe.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADERS_TYPE = ArrayType(StructType([
    StructField("key", StringType()), StructField("value", BinaryType()),
]))

_BASE_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]

KAFKA_SCHEMA = StructType(list(_BASE_FIELDS))
"""Spark's Kafka source schema without headers (``includeHeaders=false``)."""

KAFKA_SCHEMA_WITH_HEADERS = StructType([*_BASE_FIELDS, StructField("headers", HEADERS_TYPE)])
"""... and with headers (``includeHeaders=true``)."""

ARROW_HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([
    pa.field("key", pa.string()), pa.field("value", pa.binary()),
])))
ARROW_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")


def spark_schema(include_headers: bool) -> StructType:
    return KAFKA_SCHEMA_WITH_HEADERS if include_headers else KAFKA_SCHEMA


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects from the reader (what ``to_arrow_schema`` gives for
    :func:`spark_schema` with the UTC session time zone)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", ARROW_TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", ARROW_HEADERS_TYPE))
    return pa.schema(fields)
