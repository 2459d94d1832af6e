"""Spark scan of a tiered topic against ``spark.read.parquet`` of the same rows.

    .venv/bin/python bench/spark_scan.py [--records 10000000] [--partitions 2] [--runs 3]

One 1-broker dev cluster (real ZooKeeper, real broker, tiering to local storage), one topic;
``--records`` records of 100-byte unique values produced through Kafka, then (after
``segment.ms``) one marker record per partition, which rolls the last segment: the broker tiers
every benchmark record and the hot tail is only the markers. Then, in one SparkSession
(``local[2]``), after one untimed warm-up query, alternating per run:

* **view**: the view of ``register_topics`` (native Parquet scan of the Delta snapshot + the hot
  tail from the broker) with ``SELECT count(*), sum(length(value))`` over the whole topic;
* **baseline**: ``spark.read.parquet`` of the snapshot's data files with the same aggregate
  (the tiered rows only).

Reported: median seconds and rows/s of each, and the ratio of rows/s (view / baseline; target
>= 0.9). Progress goes to stderr; results to ``bench/results/spark-scan-<UTC>.json``. Every wait
is bounded by time; the cluster is stopped (only the processes it started) also on errors.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from measure import log, write_results
from produce_consume import machine_info
from tiered_topic import VALUE_BYTES, create_topic, produce, wait_tiered

from loglake.dev.harness import DevCluster
from loglake.segments.storage import Storage
from loglake.segments.tiered_table import TieredTable
from loglake.streaming.sql_cli import quiet_session
from loglake.streaming.sql_views import register_topics

RESULTS_DIR = Path(__file__).resolve().parent / "results"
TOPIC = "scan"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="bound for producing and for tiering, each (seconds)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="loglake-spark-scan-") as work, \
            DevCluster(Path(work) / "cluster", brokers=1) as dev:
        create_topic(dev.bootstrap_servers, TOPIC, args.partitions)
        log(f"producing {args.records:,} records of {VALUE_BYTES} B")
        produce(dev.bootstrap_servers, TOPIC, args.records, args.partitions, args.timeout)
        status = wait_tiered(dev.zookeeper_connect, TOPIC, args.partitions, args.timeout)
        tiered = sum(int(s["tiered_end"]) for s in status.values())
        log(f"tiered {tiered:,} of {args.records:,} records; hot tail "
            f"{args.records - tiered:,}")
        storage = Storage.from_url(dev.storage_url)
        table = TieredTable(storage, TOPIC)
        files = [f.uri for p in range(args.partitions) for f in table.files(p, refresh=True)]
        spark = quiet_session("local[2]")
        try:
            view_s: list[float] = []
            base_s: list[float] = []
            view_rows = base_rows = 0
            register_topics(spark, zookeeper=dev.zookeeper_connect, topics=[TOPIC])
            spark.sql(f"SELECT count(*) FROM {TOPIC}").collect()  # warm-up, not timed
            for run in range(args.runs):
                for which in (("view", "base") if run % 2 == 0 else ("base", "view")):
                    begin = time.perf_counter()
                    if which == "view":
                        row = spark.sql(f"SELECT count(*) AS n, sum(length(value)) AS b "
                                        f"FROM {TOPIC}").collect()[0]
                        view_s.append(time.perf_counter() - begin)
                        view_rows = int(row["n"])
                    else:
                        frame = spark.read.parquet(*files)
                        frame.createOrReplaceTempView("baseline")
                        row = spark.sql("SELECT count(*) AS n, sum(length(value)) AS b "
                                        "FROM baseline").collect()[0]
                        base_s.append(time.perf_counter() - begin)
                        base_rows = int(row["n"])
                    log(f"  run {run + 1}/{args.runs} {which}: "
                        f"{(view_s if which == 'view' else base_s)[-1]:.2f} s")
        finally:
            spark.stop()
    view_median, base_median = statistics.median(view_s), statistics.median(base_s)
    view_rate, base_rate = view_rows / view_median, base_rows / base_median
    result = {
        "benchmark": "spark-scan", "started": started, "machine": machine_info(),
        "records": args.records, "partitions": args.partitions, "runs": args.runs,
        "tiered_records": tiered, "view_rows": view_rows, "baseline_rows": base_rows,
        "view_seconds": view_s, "baseline_seconds": base_s,
        "view_median_s": view_median, "baseline_median_s": base_median,
        "view_rows_per_s": view_rate, "baseline_rows_per_s": base_rate,
        "ratio": view_rate / base_rate,
    }
    print(f"view (tier + hot tail): {view_rows:,} rows in {view_median:.2f} s "
          f"({view_rate:,.0f} rows/s)")
    print(f"spark.read.parquet   : {base_rows:,} rows in {base_median:.2f} s "
          f"({base_rate:,.0f} rows/s)")
    print(f"ratio (rows/s)       : {view_rate / base_rate:.2f} (target >= 0.9)")
    write_results(RESULTS_DIR, f"spark-scan-{started}", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
