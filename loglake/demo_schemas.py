"""The demo's schemas step: a registered Avro schema, evolution, typed columns in Spark SQL.

On the demo cluster (3 brokers, the dev launcher's schema registry), the topic ``demo.orders``
(recreated every run) gets :data:`V1_RECORDS` orders serialized by the SDK's
:class:`~loglake.client.SchemaProducer` with the Avro schema :data:`ORDER_V1` (registered under
``demo.orders-value``), then :data:`V2_RECORDS` with :data:`ORDER_V2` (adds an optional
``coupon``: a BACKWARD-compatible evolution) and :data:`BAD_RECORDS` plain-JSON records no
schema frames. Once the tierer moved the sealed segments into the topic's Delta table (typed
columns ``value_typed`` / ``value_schema_id`` / ``value_error``, the table schema evolved for
``coupon``), one Spark SQL query groups the topic by a field of the value, over the tier and the
brokers' hot tail alike, with no UDF. The step raises RuntimeError unless the counts per
customer equal what was produced, the v2 records carry their coupon, and exactly the bad records
land in ``value_error`` with their raw bytes kept. Every wait is bounded.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from loglake import demo_jobs
from loglake.client import Admin, Producer, SchemaProducer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TOPIC = "demo.orders"
SUBJECT = f"{TOPIC}-value"
CUSTOMERS = 20
V1_RECORDS = 3_000
V2_RECORDS = 1_000
BAD_RECORDS = 12
SEGMENT_BYTES = 16 * 1024  # small, so most records are tiered during the demo
_FIELDS = [
    {"name": "order_id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": "double"},
]
ORDER_V1 = json.dumps({"type": "record", "name": "Order", "namespace": "demo",
                       "fields": _FIELDS})
ORDER_V2 = json.dumps({"type": "record", "name": "Order", "namespace": "demo", "fields": [
    *_FIELDS, {"name": "coupon", "type": ["null", "string"], "default": None}]})


def run(bootstrap: str, zookeeper: str, registry_url: str, spark: SparkSession, *,
        replicas: int) -> None:
    print(f"==> schemas: Avro orders through the schema registry ({registry_url}), typed "
          f"columns in Delta and Spark SQL")
    with Admin(bootstrap) as admin:
        if TOPIC in admin.list_topics():
            admin.delete_topic(TOPIC)
        demo_jobs.wait_until(lambda: (TOPIC not in admin.list_topics(), "deleting"),
                             what=f"waiting for {TOPIC} to be deleted", timeout=60)
        admin.create_topic(TOPIC, partitions=3, replication_factor=replicas, config={
            "segment.bytes": str(SEGMENT_BYTES), "min.insync.replicas": "2"})
    expected = _produce(bootstrap, registry_url)
    demo_jobs.wait_tiered(zookeeper, (TOPIC,), partitions=3)
    _query(spark, zookeeper, expected)


def _produce(bootstrap: str, registry_url: str) -> dict[str, int]:
    """Produce v1, v2 and bad records; the number of good orders per customer."""
    expected: dict[str, int] = {}
    order = 0
    for schema, count in ((ORDER_V1, V1_RECORDS), (ORDER_V2, V2_RECORDS)):
        with SchemaProducer(bootstrap, registry=registry_url, value_schema=schema,
                            extra={"batch.size": "8192"}) as producer:
            for _ in range(count):
                customer = f"customer-{order % CUSTOMERS:02d}"
                value = {"order_id": order, "customer": customer,
                         "amount": round(10 + order % 97 * 0.5, 2)}
                if schema is ORDER_V2:
                    value["coupon"] = f"SAVE{order % 3}"
                producer.send(TOPIC, value, key=customer.encode())
                expected[customer] = expected.get(customer, 0) + 1
                order += 1
            producer.flush(60)
    with Producer(bootstrap) as plain:  # a producer that skips the registry: no framing
        for i in range(BAD_RECORDS):
            plain.send(TOPIC, json.dumps({"order_id": -i}).encode())
        plain.flush(60)
    print(f"    {TOPIC}: {V1_RECORDS:,} orders with schema v1, {V2_RECORDS:,} with v2 (adds an "
          f"optional coupon), {BAD_RECORDS} unframed records from a producer without the "
          f"registry")
    return expected


def _query(spark: SparkSession, zookeeper: str, expected: dict[str, int]) -> None:
    from loglake.streaming.session import delta_enabled
    from loglake.streaming.sql_views import register_topics

    register_topics(spark, zookeeper=zookeeper, topics=[TOPIC])
    query = (f"SELECT value.customer AS customer, count(*) AS orders, "
             f"round(sum(value.amount), 2) AS amount, count(value.coupon) AS with_coupon "
             f"FROM `{TOPIC}` WHERE value_error IS NULL GROUP BY 1 ORDER BY 1")
    print(f"    {query}")
    rows = spark.sql(query).collect()
    for row in rows[:3]:
        print(f"    {row['customer']}: {row['orders']} orders, {row['amount']} total, "
              f"{row['with_coupon']} with a coupon")
    print(f"    ... {len(rows)} customers")
    errors = spark.sql(f"SELECT value_error, value_bytes FROM `{TOPIC}` "
                       f"WHERE value_error IS NOT NULL").collect()
    print(f"    records in value_error: {len(errors)} "
          f"(e.g. {errors[0]['value_error'] if errors else '-'!r})")
    if delta_enabled(spark):
        tiered = spark.sql(f"SELECT count(*) AS n FROM loglake.{TOPIC.replace('.', '_')} "
                           f"WHERE value_typed IS NOT NULL").collect()[0]["n"]
        print(f"    of them in Delta with typed columns: {tiered:,} "
              f"(catalog table loglake.{TOPIC.replace('.', '_')}, column value_typed)")
    counts = {row["customer"]: row["orders"] for row in rows}
    coupons = sum(row["with_coupon"] for row in rows)
    ok = (counts == expected and coupons == V2_RECORDS and len(errors) == BAD_RECORDS
          and all(e["value_bytes"] for e in errors))
    print(f"==> typed Spark SQL saw every order once, both schema versions and the bad records "
          f"apart: {ok}")
    if not ok:
        raise RuntimeError(
            f"demo check failed: typed view counts {sum(counts.values())} orders "
            f"(expected {sum(expected.values())}), {coupons} coupons (expected {V2_RECORDS}), "
            f"{len(errors)} decode errors (expected {BAD_RECORDS})")

