"""Spark read throughput of one topic: Spark's own Kafka connector (``format("kafka")``, through
the brokers) against ``format("loglake")`` (the Delta table's Parquet files + the hot tail).

    .venv/bin/python bench/spark_kafka_vs_loglake.py [--records 2000000] [--partitions 2]
        [--runs 5] [--local-retention-ms -2]

One 1-broker dev cluster (real ZooKeeper, real broker, tiering to local storage), one topic;
``--records`` records of 100-byte unique values (key-less) produced through Kafka with
confluent-kafka (large batches), then, after ``segment.ms``, one marker record per partition
that rolls the last segment, so every benchmark record is tiered. By default the broker keeps
its local segments too (``local.retention.ms=-2``: retention.ms, 7 days), so ``format("kafka")``
reads local segments, as it does on any recent topic; ``--local-retention-ms 0`` makes the
broker drop tiered segments, so the connector's fetches are served from the tier (Parquet ->
record batches in the broker).

In one SparkSession (``local[2]``, the loglake jars), after one untimed warm-up query of each,
alternating the order per run: ``SELECT count(*), sum(length(value)), sum(offset)`` over the
whole topic through each format; the three numbers must agree. Reported: median seconds,
records/s and MB/s (values) of each and the ratio kafka / loglake; the CPU seconds of the broker
(and its tier worker) during the kafka reads. Progress goes to stderr; results to
``bench/results/spark-kafka-vs-loglake-<UTC>.json``. Every wait is bounded by time; the
cluster is stopped (only the processes it started) also on errors.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from measure import MB, BenchmarkError, cpu_seconds, log, run_main, write_results
from produce_consume import machine_info
from tiered_topic import VALUE_BYTES, create_topic, produce, wait_tiered

from loglake.dev.harness import DevCluster
from loglake.streaming import register
from loglake.streaming.sql_cli import quiet_session

RESULTS_DIR = Path(__file__).resolve().parent / "results"
TOPIC = "kafka-vs-loglake"
QUERY = "SELECT count(*) AS n, sum(length(value)) AS b, sum(offset) AS o FROM {view}"


def broker_cpu_seconds(pid: int) -> float:
    """CPU seconds of the broker process and its live children (the tier worker)."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with open(task / "children") as file:
            children += [int(child) for child in file.read().split()]
    total = cpu_seconds(pid)
    for child in children:
        try:
            total += cpu_seconds(child)
        except OSError:  # ended meanwhile
            continue
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--local-retention-ms", type=int, default=-2,
                        help="the topic's local.retention.ms (0: the brokers serve every "
                             "fetch from the tier)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="bound for producing, for tiering and for each query (seconds)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    seconds: dict[str, list[float]] = {"kafka": [], "loglake": []}
    answers: dict[str, tuple[int, int, int]] = {}
    broker_cpu: list[float] = []
    with tempfile.TemporaryDirectory(prefix="loglake-spark-kafka-") as work, \
            DevCluster(Path(work) / "cluster", brokers=1) as dev:
        create_topic(dev.bootstrap_servers, TOPIC, args.partitions,
                     config={"local.retention.ms": str(args.local_retention_ms)})
        log(f"producing {args.records:,} records of {VALUE_BYTES} B "
            f"into {args.partitions} partitions")
        produce(dev.bootstrap_servers, TOPIC, args.records, args.partitions, args.timeout)
        status = wait_tiered(dev.zookeeper_connect, TOPIC, args.partitions, args.timeout)
        tiered = sum(int(s.get("tiered_end") or 0) for s in status.values())
        log(f"tiered {tiered:,} records; local.retention.ms={args.local_retention_ms}")
        broker_pid = next(s.pid for s in dev.status() if s.role == "broker")
        spark = quiet_session("local[2]")
        try:
            register(spark)
            (spark.read.format("kafka").option("kafka.bootstrap.servers", dev.bootstrap_servers)
             .option("subscribe", TOPIC).load().createOrReplaceTempView("via_kafka"))
            (spark.read.format("loglake").option("zookeeper", dev.zookeeper_connect)
             .option("subscribe", TOPIC).load().createOrReplaceTempView("via_loglake"))
            for which in ("kafka", "loglake"):  # warm-up, not timed
                log(f"  warm-up {which}")
                spark.sql(QUERY.format(view=f"via_{which}")).collect()
            for run in range(args.runs):
                for which in (("kafka", "loglake") if run % 2 == 0 else ("loglake", "kafka")):
                    cpu_before = broker_cpu_seconds(broker_pid)
                    begin = time.perf_counter()
                    row = spark.sql(QUERY.format(view=f"via_{which}")).collect()[0]
                    elapsed = time.perf_counter() - begin
                    if which == "kafka":
                        broker_cpu.append(broker_cpu_seconds(broker_pid) - cpu_before)
                    seconds[which].append(elapsed)
                    answers[which] = (int(row["n"]), int(row["b"] or 0), int(row["o"] or 0))
                    log(f"  run {run + 1}/{args.runs} {which}: {elapsed:.2f} s "
                        f"({answers[which][0] / elapsed:,.0f} records/s)")
                    if elapsed > args.timeout:
                        raise BenchmarkError(f"a {which} query took over {args.timeout:.0f} s")
        finally:
            spark.stop()
    if answers["kafka"] != answers["loglake"]:
        raise BenchmarkError(f"the formats disagree: kafka (count, bytes, offset sum) "
                             f"{answers['kafka']} vs loglake {answers['loglake']}")
    records, payload, _ = answers["kafka"]
    medians = {which: statistics.median(values) for which, values in seconds.items()}
    rates = {which: records / median for which, median in medians.items()}
    result: dict[str, Any] = {
        "benchmark": "spark-kafka-vs-loglake", "started": started, "machine": machine_info(),
        "records": args.records, "partitions": args.partitions, "runs": args.runs,
        "local_retention_ms": args.local_retention_ms, "tiered_records": tiered,
        "rows_read": records, "value_bytes_read": payload,
        "seconds": seconds, "median_s": medians, "records_per_s": rates,
        "mb_per_s": {which: payload / median / MB for which, median in medians.items()},
        "broker_cpu_s_during_kafka_reads": broker_cpu,
        "ratio_kafka_over_loglake": rates["kafka"] / rates["loglake"],
    }
    for which in ("kafka", "loglake"):
        print(f"format({which!r}):{' ' * (9 - len(which))}{records:,} rows in "
              f"{medians[which]:.2f} s ({rates[which]:,.0f} records/s, "
              f"{payload / medians[which] / MB:.1f} MB/s)")
    print(f"ratio kafka / loglake (records/s): {rates['kafka'] / rates['loglake']:.2f}; broker "
          f"CPU during a kafka read: {statistics.median(broker_cpu):.1f} s")
    write_results(RESULTS_DIR, f"spark-kafka-vs-loglake-{started}", result)
    return 0


if __name__ == "__main__":
    run_main(main)
