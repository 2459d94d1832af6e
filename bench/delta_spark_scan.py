"""Spark scan of a 10M-record topic table: delta-spark vs today's Parquet-file path vs
``spark.read.parquet``; and the clean-up jobs' planning read through deltalake vs delta-spark.

    .venv/bin/python bench/delta_spark_scan.py [--records 10000000] [--partitions 2] [--runs 5]
                                               [--dir DIR] [--keep]

The table is built without a broker, with the tierer's own writer (``TieredTable.write_file``,
``TieredTable.commit``, checkpoints as the tierer makes them): per partition, files of
``--file-records`` records (offsets contiguous, batches of 1,000 records, 100-byte unique values,
no key, no headers, no transaction markers) each committed with the partition's app transaction,
as if a broker had tiered one sealed segment per file. Producing 10M records through a broker
and waiting for tiering would take most of an hour on the 2-core box and exercises the broker,
not the scan. ``--keep`` / ``--dir`` keep the table for the next invocation (built again only
when the record count differs).

Reads (one SparkSession, ``local[2]``, after one untimed warm-up of each, order rotated per run),
each ``SELECT count(*), sum(length(value))`` over the whole topic:

* **delta**: ``spark.read.format("delta").load(table)`` (delta-spark: log replay, Delta's file
  index);
* **delta-view**: the same with the filters a view over the table adds (each partition's
  ``offset < tiered end``, ``NOT is_control``);
* **parquet-path**: today's view tier path (``sql_views._tier_frame``: the snapshot's file list
  from deltalake, read by ``spark.read.parquet`` with ``basePath``);
* **baseline**: ``spark.read.parquet`` of the same files.

Planning (item 6 of the issue: could the clean-up jobs plan through delta-spark?): the live files
with their statistics of every partition, fresh (no cached snapshot) each run: deltalake
(``TieredTable.files``: what retention, compaction and optimize use) vs delta-spark
(``DeltaLog.forTable(...).update().allFiles`` collected to the driver, cache cleared first).

Reported: median seconds and rows/s of each read and its ratio to the baseline (target >= 0.9),
median planning seconds. Progress on stderr; results in
``bench/results/delta-spark-scan-<UTC>.json``. Every loop is bounded by its count; the
SparkSession is stopped also on errors.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from measure import Progress, log, write_results
from produce_consume import machine_info

from loglake import jvm
from loglake.segments.storage import Storage
from loglake.segments.tier_rows import FILE_SCHEMA, HEADER_TYPE, TIMESTAMP_TYPE
from loglake.segments.tiered_table import TieredTable
from loglake.streaming.offsets import tier_snapshot
from loglake.streaming.session import delta_enabled, spark_uri
from loglake.streaming.sql_cli import quiet_session

RESULTS_DIR = Path(__file__).resolve().parent / "results"
TOPIC = "scan"
VALUE_BYTES = 100
BATCH_RECORDS = 1000
QUERY = "SELECT count(*) AS n, sum(length(value)) AS b FROM {}"


def _chunk(start: int, end: int, pool: list[bytes], base_ms: int) -> pa.Table:
    """Tier rows (FILE_SCHEMA) for offsets ``[start, end)`` of one partition."""
    count = end - start
    offsets = range(start, end)
    batch_first = [o - (o - start) % BATCH_RECORDS for o in offsets]

    def same(value: int | bool, kind: pa.DataType) -> pa.Array:
        return pa.repeat(pa.scalar(value, kind), count)

    columns = {
        "offset": pa.array(offsets, pa.int64()),
        "timestamp": pa.array([(base_ms + o) * 1000 for o in offsets],
                              pa.int64()).cast(TIMESTAMP_TYPE),
        "timestamp_type": same(0, pa.int32()),
        "key": pa.nulls(count, pa.binary()),
        "value": pa.array([b"%012d" % o + pool[o & 4095] for o in offsets], pa.binary()),
        "headers": pa.ListArray.from_arrays(pa.repeat(pa.scalar(0, pa.int32()), count + 1),
                                            pa.array([], type=HEADER_TYPE.value_type)),
        "batch_offset": pa.array(batch_first, pa.int64()),
        "batch_last_offset": pa.array([min(b + BATCH_RECORDS, end) - 1 for b in batch_first],
                                      pa.int64()),
        "attributes": same(0, pa.int16()),
        "leader_epoch": same(0, pa.int32()),
        "producer_id": same(-1, pa.int64()),
        "producer_epoch": same(-1, pa.int16()),
        "base_sequence": same(-1, pa.int32()),
        "is_control": same(False, pa.bool_()),
    }
    return pa.table(columns, schema=FILE_SCHEMA)


def build_table(storage: Storage, records: int, partitions: int, file_records: int) -> None:
    """``records`` records over ``partitions`` written and committed as the tierer does."""
    table = TieredTable(storage, TOPIC)
    table.ensure_created()
    pool = [os.urandom(VALUE_BYTES - 12) for _ in range(4096)]
    base_ms = int(time.time() * 1000) - records
    progress = Progress("build", records)
    done = 0
    for partition in range(partitions):
        share = records // partitions + (1 if partition < records % partitions else 0)
        end: int | None = None
        for start in range(0, share, file_records):
            stop = min(start + file_records, share)
            pending = table.write_file(partition, _chunk(start, stop, pool, base_ms))
            if not table.commit(partition, [pending], stop - 1, expected_end=end):
                raise RuntimeError(f"commit of {TOPIC}-{partition} [{start}, {stop}) lost")
            table.checkpoint_if_due()
            end = stop
            done += stop - start
            progress.update(done)
    progress.update(done, force=True)


def timed(label: str, runs: int, work: dict[str, Callable[[], int]]) -> dict[str, list[float]]:
    """Run each of ``work`` once untimed, then ``runs`` times in rotated order; seconds each."""
    seconds: dict[str, list[float]] = {name: [] for name in work}
    names = list(work)
    for name in names:
        work[name]()
    for run in range(runs):
        order = names[run % len(names):] + names[:run % len(names)]
        for name in order:
            begin = time.perf_counter()
            work[name]()
            seconds[name].append(time.perf_counter() - begin)
            log(f"  {label} run {run + 1}/{runs} {name}: {seconds[name][-1]:.2f} s")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--file-records", type=int, default=250_000,
                        help="records per tiered file (one sealed segment each)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the table lives (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the table for the next run")
    args = parser.parse_args(argv)
    if not jvm.available("spark"):
        log("delta-spark is not fetched: run python -m loglake.jvm fetch spark")
        return 1
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    root = args.dir or Path(tempfile.mkdtemp(prefix="loglake-delta-scan-"))
    try:
        return _run(args, root, started)
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


def _run(args: argparse.Namespace, root: Path, started: str) -> int:
    storage = Storage.from_url(str(root / f"lake-{args.records}-{args.partitions}"))
    table = TieredTable(storage, TOPIC)
    tiered = sum(table.tiered_end(p) or 0 for p in range(args.partitions)) \
        if table.exists() else 0
    if tiered != args.records:
        if table.exists():
            shutil.rmtree(storage.table_uri(TOPIC))
        log(f"building a {args.records:,}-record table ({args.partitions} partitions, "
            f"{args.file_records:,} records per file) with the tier writer")
        begin = time.perf_counter()
        build_table(storage, args.records, args.partitions, args.file_records)
        log(f"  built in {time.perf_counter() - begin:.1f} s")
    table = TieredTable(storage, TOPIC)
    snapshot = tier_snapshot(table, range(args.partitions))
    assert snapshot is not None
    files = [spark_uri(storage, f.uri) for p in sorted(snapshot.files)
             for f in snapshot.files[p]]
    size = sum(f.size for p in snapshot.files for f in snapshot.files[p])
    log(f"table: version {snapshot.version}, {len(files)} files, {size / 1e9:.2f} GB")
    uri = spark_uri(storage, storage.table_uri(TOPIC))

    spark = quiet_session("local[2]")
    try:
        if not delta_enabled(spark):
            log("this SparkSession runs without delta-spark")
            return 1
        from pyspark.sql import DataFrame
        from pyspark.sql import functions as F

        from loglake.streaming.sql_views import _tier_frame

        def count(frame: DataFrame) -> int:
            frame.createOrReplaceTempView("scanned")
            return int(spark.sql(QUERY.format("scanned")).collect()[0]["n"])

        def delta_view() -> int:
            rows = spark.read.format("delta").load(uri)
            bound = None
            for partition, end in snapshot.ends.items():
                term = (F.col("partition") == partition) & (F.col("offset") < end)
                bound = term if bound is None else bound | term
            assert bound is not None
            return count(rows.where(bound & ~F.col("is_control")))

        reads: dict[str, Callable[[], int]] = {
            "delta": lambda: count(spark.read.format("delta").load(uri)),
            "delta-view": delta_view,
            "parquet-path": lambda: count(_tier_frame(spark, storage, snapshot, False)),
            "baseline": lambda: count(spark.read.parquet(*files)),
        }
        rows = {name: work() for name, work in reads.items()}
        if len(set(rows.values())) != 1 or rows["baseline"] != args.records:
            log(f"row counts differ: {rows}")
            return 1
        log(f"scans ({args.runs} runs each, median):")
        scan_s = timed("scan", args.runs, reads)

        delta_log = spark._jvm.org.apache.spark.sql.delta.DeltaLog  # type: ignore[union-attr]

        def plan_deltalake() -> int:
            fresh = TieredTable(storage, TOPIC)
            return sum(len(fresh.files(p, refresh=True)) for p in range(args.partitions))

        def plan_delta_spark() -> int:
            delta_log.clearCache()
            latest = delta_log.forTable(spark._jsparkSession, uri).unsafeVolatileSnapshot()
            added = DataFrame(latest.allFiles().toDF(), spark)
            return len(added.select("path", "size", "partitionValues", "stats").collect())

        plans: dict[str, Callable[[], int]] = {"deltalake": plan_deltalake,
                                               "delta-spark": plan_delta_spark}
        planned = {name: work() for name, work in plans.items()}
        if len(set(planned.values())) != 1:
            log(f"file counts differ: {planned}")
            return 1
        log(f"planning ({args.runs} runs each, median):")
        plan_s = timed("plan", args.runs, plans)
    finally:
        spark.stop()

    medians = {name: statistics.median(s) for name, s in scan_s.items()}
    rates = {name: args.records / m for name, m in medians.items()}
    ratios = {name: rates[name] / rates["baseline"] for name in rates}
    plan_medians = {name: statistics.median(s) for name, s in plan_s.items()}
    result: dict[str, Any] = {
        "benchmark": "delta-spark-scan", "started": started, "machine": machine_info(),
        "records": args.records, "partitions": args.partitions,
        "file_records": args.file_records, "files": len(files), "table_bytes": size,
        "table_version": snapshot.version, "runs": args.runs,
        "scan_seconds": scan_s, "scan_median_s": medians, "scan_rows_per_s": rates,
        "ratio_to_baseline": ratios,
        "plan_seconds": plan_s, "plan_median_s": plan_medians,
    }
    print(f"{'read':<14} {'median s':>9} {'rows/s':>12} {'vs parquet':>11}")
    for name in reads:
        print(f"{name:<14} {medians[name]:>9.2f} {rates[name]:>12,.0f} {ratios[name]:>10.2f}x")
    print(f"planning (live files + stats of {len(files)} files, median): " + ", ".join(
        f"{name} {seconds:.2f} s" for name, seconds in plan_medians.items()))
    write_results(RESULTS_DIR, f"delta-spark-scan-{started}", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
