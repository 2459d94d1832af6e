"""A streaming query copying a topic with ``writeStream.format("loglake")``, run as its own
process (a local Spark driver) so a test can SIGKILL it, and its Python workers, at any point.

Usage (the test starts it with the interpreter that runs pytest, from the repository root)::

    python tests/spark_eos_query.py --bootstrap HOST:PORT --input IN --output OUT
        --checkpoint DIR --delivery exactly-once|at-least-once [--max-offsets 200]
        [--available-now] [--max-seconds 300]

The query reads ``--input`` (``format("loglake")``, earliest, at most ``--max-offsets`` offsets
per micro-batch), keeps ``key`` and ``value`` and writes them to ``--output`` with the given
``deliveryGuarantee``, checkpointing to ``--checkpoint`` (a restart resumes there). Spark runs
``local[2,8]``: two task threads, and a failed task (a killed Python worker) is retried up to
7 times, as on a cluster (plain ``local[n]`` never retries a task). ``--available-now``
processes what the input holds and exits 0; otherwise the query runs until killed or for
``--max-seconds``. It prints ``started <query id>`` once the query runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--input", "--output", "--checkpoint", "--delivery"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-offsets", type=int, default=200)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--max-seconds", type=float, default=300.0)
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from loglake.streaming import register

    spark = (
        SparkSession.builder.master("local[2,8]")
        .appName("loglake-eos-kills")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    writer = (
        spark.readStream.format("loglake").option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.input).option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_offsets)).load()
        .select("key", "value")
        .writeStream.format("loglake").option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.output).option("deliveryGuarantee", args.delivery)
        .option("checkpointLocation", args.checkpoint)
    )
    writer = writer.trigger(availableNow=True) if args.available_now else writer.trigger(
        processingTime="0 seconds")
    query = writer.start()
    print(f"started {query.id}", flush=True)
    try:
        finished = query.awaitTermination(args.max_seconds)
        if query.exception() is not None:
            print(f"query failed: {query.exception()}", file=sys.stderr, flush=True)
            return 2
        if not finished:
            query.stop()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
