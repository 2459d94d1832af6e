"""Spark query over a typed column against decoding the binary value in a Python UDF, same table.

    .venv/bin/python bench/typed_query.py [--records 500000] [--partitions 2] [--runs 5]

One 1-broker dev cluster with a schema registry process (``DevCluster(registry=True)``); one
topic whose values are Avro records with ten fields (``user_id`` long in [0, 1000), strings,
doubles, an array, a map, a nullable string, bytes, an enum), produced with confluent-kafka's
``AvroSerializer`` (registering ``<topic>-value``), then one marker record per partition after
``segment.ms`` so every record is tiered (tiered_topic.py) — with typed columns, since the
topic's subject exists.

In one SparkSession (``local[2]``, delta-spark), after one untimed warm-up of each, order
rotated per run, the same question ``user_id, count(*) GROUP BY user_id`` over the topic's
catalog table ``loglake.<topic>``:

* **typed-column**: ``SELECT value_typed.user_id, count(*) ... GROUP BY 1`` (Parquet reads the
  one nested column);
* **typed-view**: ``SELECT value.user_id, count(*) FROM <view> GROUP BY 1`` (the SQL view:
  tier + hot tail, what analysts query);
* **python-udf**: ``decode(value).user_id`` with a plain Python UDF (``fastavro``
  ``schemaless_reader`` after the 5-byte framing) over the table's ``value`` column;
* **arrow-udf**: the same decoding in an ``arrow_udf`` (Spark 4.1+: Arrow batches in and out,
  no pandas).

The four answers must agree. Reported: median seconds and records/s of each and the ratio of
each UDF to typed-column. Progress on stderr; results in
``bench/results/typed-query-<UTC>.json``. Every wait is bounded; the cluster is stopped (only
the processes it started) also on errors.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click_schema import CLICK
from measure import BenchmarkError, log, run_main, write_results
from produce_consume import machine_info
from tiered_topic import create_topic, produce_values, wait_tiered

from loglake.dev.harness import DevCluster
from loglake.streaming.sql_cli import quiet_session

RESULTS_DIR = Path(__file__).resolve().parent / "results"
TOPIC = "typed-query"
USERS = 1000


def click(i: int) -> dict[str, Any]:
    return {"user_id": i % USERS, "url": f"/page/{i % 97}", "count": i % 13,
            "score": i / 7, "ok": i % 2 == 0, "tags": ["a", "b"][: i % 3],
            "attrs": {"k": i}, "ref": None if i % 4 else f"r{i}", "raw": b"\x01\x02",
            "kind": "A" if i % 5 else "B"}


def produce(dev: DevCluster, records: int, partitions: int, timeout: float) -> None:
    """The Avro records through AvroSerializer, then one marker per partition after
    ``segment.ms`` (rolls the last segment: everything but the markers gets tiered)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient({"url": dev.registry_url}),
                                json.dumps(CLICK))
    context = SerializationContext(TOPIC, MessageField.VALUE)
    produce_values(dev.bootstrap_servers, TOPIC, lambda i: serializer(click(i), context),
                   records, partitions, timeout, poll_every=50_000)


def timed(runs: int, work: dict[str, Callable[[], dict[Any, int]]]
          ) -> tuple[dict[str, list[float]], dict[str, dict[Any, int]]]:
    """Each of ``work`` once untimed, then ``runs`` times in rotated order."""
    seconds: dict[str, list[float]] = {name: [] for name in work}
    answers = {name: fn() for name, fn in work.items()}
    names = list(work)
    for run in range(runs):
        for name in names[run % len(names):] + names[:run % len(names)]:
            begin = time.perf_counter()
            answer = work[name]()
            seconds[name].append(time.perf_counter() - begin)
            if answer != answers[name]:
                raise BenchmarkError(f"{name}: the answer changed between runs")
            log(f"  run {run + 1}/{runs} {name}: {seconds[name][-1]:.2f} s")
    return seconds, answers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="loglake-typed-query-") as work, \
            DevCluster(Path(work) / "cluster", brokers=1, registry=True) as dev:
        create_topic(dev.bootstrap_servers, TOPIC, args.partitions)
        log(f"producing {args.records:,} Avro records")
        produce(dev, args.records, args.partitions, args.timeout)
        log("waiting for tiering (typed columns)")
        wait_tiered(dev.zookeeper_connect, TOPIC, args.partitions, args.timeout)
        spark = quiet_session("local[2]")
        try:
            seconds, answers = _queries(spark, dev, args.runs)
        finally:
            spark.stop()
    expected = {u: sum(1 for i in range(args.records) if i % USERS == u) for u in range(USERS)}
    for name, answer in answers.items():
        if {k: v for k, v in answer.items() if k is not None} != expected:
            raise BenchmarkError(f"{name}: wrong answer")
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    rows = {name: {"median_s": medians[name], "records_per_s": args.records / medians[name],
                   "vs_typed_column": medians[name] / medians["typed-column"],
                   "runs_s": seconds[name]} for name in seconds}
    print(f"{'query':<14}{'median s':>10}{'records/s':>14}{'x typed':>9}")
    for name, row in rows.items():
        print(f"{name:<14}{row['median_s']:>10.2f}{row['records_per_s']:>14,.0f}"
              f"{row['vs_typed_column']:>9.2f}")
    path = write_results(RESULTS_DIR, f"typed-query-{started}", {
        "benchmark": "typed_query", "records": args.records, "partitions": args.partitions,
        "runs": args.runs, "machine": machine_info(), "results": rows})
    log(f"results: {path}")
    return 0


def _queries(spark: Any, dev: DevCluster, runs: int
             ) -> tuple[dict[str, list[float]], dict[str, dict[Any, int]]]:
    import io

    import fastavro
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    from loglake.streaming.spark_catalog import register_tables
    from loglake.streaming.sql_views import quote_identifier, register_topics

    table = register_tables(spark, zookeeper=dev.zookeeper_connect, topics=[TOPIC])[TOPIC]
    register_topics(spark, zookeeper=dev.zookeeper_connect, topics=[TOPIC])
    view = quote_identifier(TOPIC)
    parsed = fastavro.parse_schema(CLICK)

    def user_of(value: bytes | None) -> int | None:
        if value is None or len(value) < 5 or value[0] != 0:
            return None
        record: Any = fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed, None)
        return int(record["user_id"])

    python_udf = F.udf(user_of, LongType())

    def arrow_decode(values: pa.Array) -> pa.Array:
        return pa.array([user_of(v) for v in values.to_pylist()], pa.int64())

    # explicit type: the hints are strings here (postponed annotations), Spark cannot read them
    arrow_udf = F.arrow_udf(arrow_decode, LongType(), F.ArrowUDFType.SCALAR)

    def grouped(frame: Any) -> dict[Any, int]:
        return {r[0]: r[1] for r in frame.collect()}

    def sql(query: str) -> Callable[[], dict[Any, int]]:
        return lambda: grouped(spark.sql(query))

    work = {
        "typed-column": sql(f"SELECT value_typed.user_id, count(*) FROM {table} GROUP BY 1"),
        "typed-view": sql(f"SELECT value.user_id, count(*) FROM {view} GROUP BY 1"),
        "python-udf": lambda: grouped(spark.table(table).groupBy(
            python_udf("value").alias("u")).count()),
        "arrow-udf": lambda: grouped(spark.table(table).groupBy(
            arrow_udf("value").alias("u")).count()),
    }
    return timed(runs, work)


if __name__ == "__main__":
    run_main(main)
