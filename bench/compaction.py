"""Clean-up jobs at scale: key compaction throughput against a pyarrow baseline, retention time.

Run from the repository root with the project's virtualenv::

    python bench/compaction.py [--records 10000000] [--runs 3] [--retention-files 1000]

No broker and no ZooKeeper: both jobs' cores (``compact.compact_topic``, which ``loglake
compact`` runs per topic, and ``retention.retain_topic``, which ``loglake retention`` runs) take
the table, the topic config and the partitions; the CLI only reads those from ZooKeeper.

1. **Compaction throughput.** A topic table of ``--records`` records in ``--partitions`` (2)
   partitions is built directly with ``TieredTable.write_file`` + ``TieredTable.commit`` (one
   Delta commit per file with the tier app transaction, as the brokers' tierer writes it): rows in
   the tier row schema (``tier_rows.FILE_SCHEMA``) made with pyarrow, producer batches of
   ``--batch-records`` (500) records, ``--file-records`` (500,000) records per file, keys drawn
   uniformly from ``--unique-fraction`` (10 %) x records keys (a key lives in one partition, as
   the Kafka partitioner puts it), ``--value-bytes`` (100) distinct text-like values, timestamps
   two hours old (so every file is cleanable). Each run copies that table (not timed) and times
   ``compact_topic`` on the copy: planning from the Delta statistics, one Spark task per
   partition (``local[2]``, started and warmed up once, not timed) that builds the offset map
   and rewrites the survivors, and the replace commits. The baseline, in the same run, is
   "latest per key" in one pyarrow process on the same files: read them (all columns), group by
   key taking the max offset, keep those rows, write Parquet (zstd, as the tier files), per
   partition. Records/s counts input records; the target is >= 1,000,000 records/s. Medians
   over ``--runs``; the order (job, baseline) alternates per run.
2. **Retention wall time.** A table of ``--retention-files`` (1,000) small files of
   ``--retention-file-records`` (100) records over ``--retention-partitions`` (4) partitions,
   every record two days old, one tier commit per file with a Delta checkpoint every 20 versions
   (as the brokers write them). Each run copies it and times ``retain_topic`` with
   ``retention.ms`` = 1 day on a freshly opened table: load the snapshot, plan, one commit
   removing every file. Median over ``--runs``. Building this table takes most of a default
   invocation (~3 of ~4.5 minutes on 2 cores): each tier commit refreshes the Delta snapshot,
   and that refresh gets slower as the table's versions accumulate.

Results: tables on stdout (progress on stderr) and JSON in
``bench/results/compaction-<UTC timestamp>.json``. Every loop is bounded by a count, and the
whole invocation by ``--timeout`` (checked between steps; a step that would start after it fails
the benchmark). Working data lives in a temporary directory (``--work-dir``), removed at the end.

Memory: the baseline holds one partition's rows in memory (~160 B per record: about 0.8 GB per
partition at 10 M records in 2 partitions); a compaction task holds one partition's keys and
offsets plus up to 2 M output rows.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from measure import (
    BenchmarkError,
    Progress,
    format_table,
    log,
    report_targets,
    run_main,
    write_results,
)
from produce_consume import machine_info

from loglake.compaction.common import Progress as JobProgress
from loglake.compaction.compact import compact_topic
from loglake.compaction.retention import retain_topic
from loglake.config import TopicConfig
from loglake.segments.storage import Storage
from loglake.segments.tier_rows import FILE_SCHEMA, TIMESTAMP_TYPE
from loglake.segments.tiered_table import TieredTable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RESULTS_DIR = Path(__file__).resolve().parent / "results"
TARGET_RECORDS_PER_S = 1_000_000
"""Compaction must process at least this many input records per second."""
TOPIC = "bench-compact"
RETENTION_TOPIC = "bench-retention"
CHECKPOINT_EVERY = 20
"""Versions between Delta checkpoints in the retention table (the brokers' interval)."""
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


@dataclass(frozen=True)
class CompactionBenchConfig:
    """What one invocation measures; every field is a command-line option of the same name."""

    records: int = 10_000_000
    partitions: int = 2
    unique_fraction: float = 0.1
    value_bytes: int = 100
    batch_records: int = 500
    file_records: int = 500_000
    runs: int = 3
    retention_files: int = 1000
    retention_partitions: int = 4
    retention_file_records: int = 100
    phases: tuple[str, ...] = ("compaction", "retention")
    master: str = "local[2]"
    timeout: float = 1800.0
    work_dir: Path | None = None
    results_dir: Path = RESULTS_DIR

    def __post_init__(self) -> None:
        if min(self.records, self.partitions, self.batch_records, self.file_records, self.runs,
               self.retention_files, self.retention_partitions,
               self.retention_file_records) < 1:
            raise ValueError("counts (--records, --partitions, --batch-records, "
                             "--file-records, --runs, --retention-*) must be >= 1")
        if self.records < self.partitions:
            raise ValueError("--records must be at least --partitions")
        if not 0 < self.unique_fraction <= 1:
            raise ValueError("--unique-fraction must be in (0, 1]")
        if self.value_bytes < 16:
            raise ValueError("--value-bytes must be at least 16 (values carry the offset)")
        if not set(self.phases) <= {"compaction", "retention"} or not self.phases:
            raise ValueError("--phases must name some of compaction, retention")
        if self.timeout <= 0:
            raise ValueError("--timeout must be > 0")

    @property
    def keys(self) -> int:
        """Distinct keys drawn from (at least one per partition)."""
        return max(self.partitions, round(self.records * self.unique_fraction))

    @property
    def records_per_file(self) -> int:
        """``file_records`` rounded to whole batches."""
        batches = max(1, round(self.file_records / self.batch_records))
        return batches * self.batch_records


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def check(self, what: str) -> None:
        if time.monotonic() > self.end:
            raise BenchmarkError(f"--timeout of {self.seconds:g} s passed before {what}")


# -- building tables -----------------------------------------------------------------------------


def value_bodies(size: int, seed: int = 7) -> pa.Array:
    """4096 text-like bodies of ``size`` - 12 bytes (values are a 12-digit offset + a body:
    compressible like logs, never repeated within a partition)."""
    rng = random.Random(seed)
    words = ["login", "logout", "click", "view", "purchase", "refund", "search", "share"]
    bodies = []
    for _ in range(4096):
        text = (f'|{{"user":"u{rng.randrange(100_000):05d}","event":"{rng.choice(words)}",'
                f'"amount":{rng.randrange(1_000_000)},"note":"'
                + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(size)))
        bodies.append(text[: size - 12])
    return pa.array(bodies, pa.string())


def make_rows(*, partition: int, partitions: int, start: int, count: int, partition_end: int,
              keys_in_partition: int, batch_records: int, bodies: pa.Array, base_ms: int,
              seed: int) -> pa.Table:
    """``count`` rows (FILE_SCHEMA) of ``partition`` from offset ``start``, in producer batches
    of ``batch_records`` (``start`` is a batch boundary): key ``key-<j * partitions +
    partition>`` for a uniform random ``j`` < ``keys_in_partition``; value = the offset as 12
    digits + one of ``bodies``; 100 records per millisecond from ``base_ms``."""
    offsets = pa.array(range(start, start + count), pa.int64())
    draws = pc.floor(pc.multiply(pc.random(count, initializer=seed), keys_in_partition))
    key_ids = pc.add(pc.multiply(pc.cast(draws, pa.int64()), partitions), partition)
    keys = pc.binary_join_element_wise(
        "key-", pc.utf8_lpad(pc.cast(key_ids, pa.string()), width=10, padding="0"), "")
    values = pc.binary_join_element_wise(
        pc.utf8_lpad(pc.cast(offsets, pa.string()), width=12, padding="0"),
        pc.take(bodies, pc.bit_wise_and(offsets, len(bodies) - 1)), "")
    timestamps = pc.multiply(pc.add(pc.divide(offsets, 100), base_ms), 1000)
    batch_offsets = pc.multiply(pc.divide(offsets, batch_records), batch_records)
    batch_last = pc.min_element_wise(pc.add(batch_offsets, batch_records - 1),
                                     partition_end - 1)
    headers = pa.ListArray.from_arrays(pa.repeat(0, count + 1).cast(pa.int32()),
                                       pa.array([], FILE_SCHEMA.field("headers").type.value_type))
    columns = {
        "offset": offsets,
        "timestamp": timestamps.cast(TIMESTAMP_TYPE),
        "timestamp_type": pa.repeat(0, count).cast(pa.int32()),
        "key": keys.cast(pa.binary()),
        "value": values.cast(pa.binary()),
        "headers": headers,
        "batch_offset": batch_offsets,
        "batch_last_offset": batch_last,
        "attributes": pa.repeat(0, count).cast(pa.int16()),
        "leader_epoch": pa.repeat(0, count).cast(pa.int32()),
        "producer_id": pa.repeat(-1, count).cast(pa.int64()),
        "producer_epoch": pa.repeat(-1, count).cast(pa.int16()),
        "base_sequence": pa.repeat(-1, count).cast(pa.int32()),
        "is_control": pa.repeat(False, count),
    }
    return pa.Table.from_arrays([columns[name] for name in FILE_SCHEMA.names],
                                schema=FILE_SCHEMA)


def tier_file(table: TieredTable, partition: int, rows: pa.Table, expected_end: int | None
              ) -> int:
    """Write and commit ``rows`` as the tierer does (``expected_end``: the tiered end before,
    None for the first file); returns the new tiered end (one past the last offset)."""
    pending = table.write_file(partition, rows)
    if not table.commit(partition, [pending], pending.last_offset, expected_end=expected_end):
        raise BenchmarkError(f"tier commit of {table.topic}-{partition} was refused")
    return pending.last_offset + 1


def build_compaction_table(config: CompactionBenchConfig, lake: Path, records: int,
                           deadline: Deadline, *, quiet: bool = False) -> dict[str, Any]:
    """The compaction topic's table under ``lake`` (module docstring)."""
    table = TieredTable(Storage.from_url(str(lake)), TOPIC)
    table.ensure_created()
    bodies = value_bodies(config.value_bytes)
    base_ms = int(time.time() * 1000) - 2 * HOUR_MS
    per_file = config.records_per_file
    keys = max(config.partitions, round(records * config.unique_fraction))
    progress = Progress(f"building {records:,} records", records, interval=5.0)
    done = files = 0
    for partition in range(config.partitions):
        partition_records = records // config.partitions + (
            1 if partition < records % config.partitions else 0)
        keys_in_partition = max(1, keys // config.partitions)
        end: int | None = None
        for start in range(0, partition_records, per_file):
            deadline.check(f"building file {files + 1} of the compaction table")
            count = min(per_file, partition_records - start)
            rows = make_rows(partition=partition, partitions=config.partitions, start=start,
                             count=count, partition_end=partition_records,
                             keys_in_partition=keys_in_partition,
                             batch_records=config.batch_records, bodies=bodies,
                             base_ms=base_ms, seed=partition * 1_000_003 + start)
            end = tier_file(table, partition, rows, end)
            done += count
            files += 1
            if not quiet:
                progress.update(done)
    if not quiet:
        progress.update(done, force=True)
    table.checkpoint_if_due(CHECKPOINT_EVERY)
    return {"records": done, "files": files, "keys": keys,
            "bytes": sum(p.stat().st_size for p in lake.rglob("*.parquet"))}


def build_retention_table(config: CompactionBenchConfig, lake: Path,
                          deadline: Deadline) -> dict[str, Any]:
    """The retention topic's table: small files, round-robin over the partitions, old."""
    table = TieredTable(Storage.from_url(str(lake)), RETENTION_TOPIC)
    table.ensure_created()
    bodies = value_bodies(config.value_bytes)
    base_ms = int(time.time() * 1000) - 2 * DAY_MS
    n = config.retention_file_records
    ends: dict[int, int | None] = dict.fromkeys(range(config.retention_partitions))
    began = time.perf_counter()
    for index in range(config.retention_files):
        deadline.check(f"building file {index + 1} of the retention table")
        partition = index % config.retention_partitions
        start = ends[partition] or 0
        rows = make_rows(partition=partition, partitions=config.retention_partitions,
                         start=start, count=n, partition_end=start + n, keys_in_partition=n,
                         batch_records=min(config.batch_records, n), bodies=bodies,
                         base_ms=base_ms, seed=index)
        ends[partition] = tier_file(table, partition, rows, ends[partition])
        table.checkpoint_if_due(CHECKPOINT_EVERY)
        if (index + 1) % 250 == 0 or index + 1 == config.retention_files:
            log(f"  retention table: {index + 1:,} / {config.retention_files:,} files "
                f"committed, {time.perf_counter() - began:.1f} s")
    return {"files": config.retention_files, "records": config.retention_files * n,
            "version": table.table(refresh=True).version(),
            "bytes": sum(p.stat().st_size for p in lake.rglob("*.parquet"))}


def copy_lake(source: Path, target: Path) -> Storage:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    return Storage.from_url(str(target))


# -- 1. compaction -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactionRun:
    records: int
    job_s: float
    job_rows_out: int
    job_files_out: int
    baseline_s: float
    baseline_rows_out: int

    @property
    def job_records_per_s(self) -> float:
        return self.records / self.job_s

    @property
    def baseline_records_per_s(self) -> float:
        return self.records / self.baseline_s

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "job_records_per_s": self.job_records_per_s,
                "baseline_records_per_s": self.baseline_records_per_s}


COMPACT_CONFIG = TopicConfig.from_overrides({"cleanup.policy": "compact"})


def run_job(storage: Storage, partitions: int, spark: SparkSession) -> tuple[float, int, int]:
    """Time ``compact_topic`` on the table in ``storage``: (seconds, rows out, files out)."""
    table = TieredTable(storage, TOPIC)
    started = time.perf_counter()
    results = compact_topic(table, COMPACT_CONFIG, list(range(partitions)),
                            spark=lambda: spark, progress=JobProgress(sys.stderr))
    seconds = time.perf_counter() - started
    if len(results) != partitions or not all(r.committed for r in results):
        raise BenchmarkError(f"compaction did not commit every partition: {results}")
    return (seconds, sum(r.rows_out for r in results), sum(r.files_out for r in results))


def run_baseline(storage: Storage, partitions: int, out: Path) -> tuple[float, int]:
    """Latest per key with pyarrow in this process, per partition: (seconds, rows written)."""
    table = TieredTable(storage, TOPIC)
    fs = storage.pyarrow_filesystem()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    rows_out = 0
    for partition in range(partitions):
        paths = [storage.path_in_fs(f.uri) for f in table.files(partition, refresh=True)]
        rows = pads.dataset(paths, schema=FILE_SCHEMA, format="parquet",
                            filesystem=fs).to_table()
        latest = rows.group_by("key").aggregate([("offset", "max")]).column("offset_max")
        kept = rows.filter(pc.is_in(rows.column("offset"), value_set=latest.combine_chunks()))
        pq.write_table(kept, out / f"partition-{partition}.parquet", compression="zstd")
        rows_out += kept.num_rows
        del rows, kept
    return time.perf_counter() - started, rows_out


def start_spark(master: str) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from loglake.streaming.sql_cli import quiet_session

    return quiet_session(master)


def compaction_phase(config: CompactionBenchConfig, work: Path, deadline: Deadline
                     ) -> tuple[list[CompactionRun], dict[str, Any]]:
    log(f"1. compaction: {config.records:,} records in {config.partitions} partitions, "
        f"{config.keys:,} keys, {config.value_bytes} B values, files of "
        f"{config.records_per_file:,} records")
    pristine = work / "compaction-lake"
    built = time.perf_counter()
    setup = build_compaction_table(config, pristine, config.records, deadline)
    setup["build_s"] = time.perf_counter() - built
    log(f"  table: {setup['files']} files, {setup['bytes'] / 1e6:,.0f} MB of Parquet, built in "
        f"{setup['build_s']:.1f} s")
    began = time.perf_counter()
    spark = start_spark(config.master)
    try:
        setup["spark_start_s"] = time.perf_counter() - began
        # warm-up (not timed): starts the Python workers and their imports on a small table
        began = time.perf_counter()
        warm = work / "warm-up-lake"
        build_compaction_table(config, warm, 20 * config.batch_records * config.partitions,
                               deadline, quiet=True)
        run_job(Storage.from_url(str(warm)), config.partitions, spark)
        shutil.rmtree(warm, ignore_errors=True)
        setup["warm_up_s"] = time.perf_counter() - began
        log(f"  Spark {config.master} started in {setup['spark_start_s']:.1f} s, warm-up "
            f"compaction {setup['warm_up_s']:.1f} s")
        runs = []
        for index in range(1, config.runs + 1):
            deadline.check(f"compaction run {index}")
            storage = copy_lake(pristine, work / "run-lake")
            job: tuple[float, int, int] | None = None
            baseline: tuple[float, int] | None = None
            for which in ("job", "baseline") if index % 2 else ("baseline", "job"):
                if which == "job":
                    job = run_job(storage, config.partitions, spark)
                    log(f"  run {index}/{config.runs} job: {job[0]:.2f} s, "
                        f"{setup['records'] / job[0]:,.0f} rec/s, {job[1]:,} rows kept")
                else:
                    baseline = run_baseline(Storage.from_url(str(pristine)), config.partitions,
                                            work / "baseline-out")
                    log(f"  run {index}/{config.runs} baseline: {baseline[0]:.2f} s, "
                        f"{setup['records'] / baseline[0]:,.0f} rec/s, {baseline[1]:,} rows "
                        "kept")
            assert job is not None and baseline is not None
            if job[1] != baseline[1]:
                raise BenchmarkError(f"the job kept {job[1]:,} rows, the baseline "
                                     f"{baseline[1]:,}: they must agree (no null keys, "
                                     "tombstones or markers in this table)")
            runs.append(CompactionRun(setup["records"], job[0], job[1], job[2], baseline[0],
                                      baseline[1]))
            shutil.rmtree(work / "run-lake", ignore_errors=True)
            shutil.rmtree(work / "baseline-out", ignore_errors=True)
    finally:
        spark.stop()
    return runs, setup


# -- 2. retention --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetentionRun:
    seconds: float
    files_removed: int
    records_removed: int


RETENTION_CONFIG = TopicConfig.from_overrides({"cleanup.policy": "delete",
                                               "retention.ms": str(DAY_MS)})


def retention_phase(config: CompactionBenchConfig, work: Path, deadline: Deadline
                    ) -> tuple[list[RetentionRun], dict[str, Any]]:
    log(f"2. retention: {config.retention_files:,} files of {config.retention_file_records} "
        f"records over {config.retention_partitions} partitions")
    pristine = work / "retention-lake"
    built = time.perf_counter()
    setup = build_retention_table(config, pristine, deadline)
    setup["build_s"] = time.perf_counter() - built
    log(f"  table: version {setup['version']}, built in {setup['build_s']:.1f} s")
    runs = []
    for index in range(1, config.runs + 1):
        deadline.check(f"retention run {index}")
        storage = copy_lake(pristine, work / "run-lake")
        started = time.perf_counter()
        table = TieredTable(storage, RETENTION_TOPIC)  # opened inside the timed section
        result = retain_topic(table, RETENTION_CONFIG, list(range(config.retention_partitions)),
                              progress=JobProgress(io.StringIO()))
        seconds = time.perf_counter() - started
        removed = [f for files in result.removed.values() for f in files]
        if not result.committed or len(removed) != config.retention_files:
            raise BenchmarkError(f"retention removed {len(removed)} of "
                                 f"{config.retention_files} files (committed "
                                 f"{result.committed})")
        runs.append(RetentionRun(seconds, len(removed), sum(f.num_records for f in removed)))
        log(f"  run {index}/{config.runs}: {seconds:.2f} s, removed {len(removed)} files")
        shutil.rmtree(work / "run-lake", ignore_errors=True)
    return runs, setup


# -- reporting -----------------------------------------------------------------------------------


@dataclass
class Results:
    compaction: list[CompactionRun] = field(default_factory=list)
    compaction_setup: dict[str, Any] = field(default_factory=dict)
    retention: list[RetentionRun] = field(default_factory=list)
    retention_setup: dict[str, Any] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)


def report(config: CompactionBenchConfig, results: Results, machine: dict[str, Any],
           started: datetime) -> dict[str, Any]:
    document: dict[str, Any] = {
        "benchmark": "compaction",
        "started": started.isoformat(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "config": {key: (None if key == "work_dir" else
                         value.name if isinstance(value, Path) else value)
                   for key, value in asdict(config).items()},
        "machine": machine,
        "load_average": results.load,
    }
    print(f"\nloglake clean-up jobs, median of {config.runs} runs ({machine['cpus']} CPUs, "
          f"{machine['cpu_model']}); command: {document['command']}")
    print(f"load average (1 min) at start / end: {results.load.get('start', '?')} / "
          f"{results.load.get('end', '?')}")
    targets: list[list[str]] = []
    if results.compaction:
        runs = results.compaction
        setup = results.compaction_setup
        job = statistics.median(r.job_records_per_s for r in runs)
        base = statistics.median(r.baseline_records_per_s for r in runs)
        print(f"\n1. key compaction of {setup['records']:,} records ({config.partitions} "
              f"partitions, {setup['files']} files, {setup['keys']:,} keys, "
              f"{config.value_bytes} B values) -> {runs[0].job_rows_out:,} records; Spark "
              f"{config.master}\n")
        print(format_table(
            ["system", "records/s", "median s", "each run (records/s)"],
            [["loglake compact (compact_topic: plan, Spark tasks, commits)", f"{job:,.0f}",
              f"{statistics.median(r.job_s for r in runs):.2f}",
              ", ".join(f"{r.job_records_per_s:,.0f}" for r in runs)],
             ["baseline: pyarrow latest-per-key, one process", f"{base:,.0f}",
              f"{statistics.median(r.baseline_s for r in runs):.2f}",
              ", ".join(f"{r.baseline_records_per_s:,.0f}" for r in runs)]]))
        print(f"\njob / baseline: {job / base:.2f}x")
        targets.append(["compaction, input records/s", f">= {TARGET_RECORDS_PER_S:,}",
                        f"{job:,.0f}", "yes" if job >= TARGET_RECORDS_PER_S else "NO"])
        document["compaction"] = {
            "setup": setup,
            "medians": {"job_records_per_s": job, "baseline_records_per_s": base,
                        "ratio": job / base,
                        "job_s": statistics.median(r.job_s for r in runs),
                        "baseline_s": statistics.median(r.baseline_s for r in runs)},
            "target_records_per_s": TARGET_RECORDS_PER_S,
            "target_met": job >= TARGET_RECORDS_PER_S,
            "runs": [r.to_json() for r in runs]}
    if results.retention:
        runs_r = results.retention
        median = statistics.median(r.seconds for r in runs_r)
        print(f"\n2. retention of {config.retention_files:,} files "
              f"({config.retention_partitions} partitions, table version "
              f"{results.retention_setup['version']}): one commit removing every file\n")
        print(format_table(["job", "median s", "each run (s)"],
                           [["loglake retention (retain_topic: load, plan, commit)",
                             f"{median:.2f}", ", ".join(f"{r.seconds:.2f}" for r in runs_r)]]))
        document["retention"] = {"setup": results.retention_setup, "median_s": median,
                                 "runs": [asdict(r) for r in runs_r]}
    report_targets(document, targets, measured="measured (median)")
    return document


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> CompactionBenchConfig:
    d = CompactionBenchConfig()
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--records", type=int, default=d.records,
                        help="records in the compaction table (default: %(default)s)")
    parser.add_argument("--partitions", type=int, default=d.partitions,
                        help="partitions of the compaction table (default: %(default)s)")
    parser.add_argument("--unique-fraction", type=float, default=d.unique_fraction,
                        help="distinct keys / records (default: %(default)s)")
    parser.add_argument("--value-bytes", type=int, default=d.value_bytes,
                        help="bytes per value (default: %(default)s)")
    parser.add_argument("--batch-records", type=int, default=d.batch_records,
                        help="records per producer batch (default: %(default)s)")
    parser.add_argument("--file-records", type=int, default=d.file_records,
                        help="records per tiered file (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=d.runs,
                        help="runs to take the median of (default: %(default)s)")
    parser.add_argument("--retention-files", type=int, default=d.retention_files,
                        help="files in the retention table (default: %(default)s)")
    parser.add_argument("--retention-partitions", type=int, default=d.retention_partitions,
                        help="partitions of the retention table (default: %(default)s)")
    parser.add_argument("--retention-file-records", type=int,
                        default=d.retention_file_records,
                        help="records per retention file (default: %(default)s)")
    parser.add_argument("--phases", nargs="+", default=list(d.phases),
                        choices=["compaction", "retention"],
                        help="what to measure (default: both)")
    parser.add_argument("--master", default=d.master,
                        help="Spark master of the compaction job (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=d.timeout,
                        help="seconds the whole invocation may take (default: %(default)s)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="parent of the temporary directory (default: the system's)")
    parser.add_argument("--results-dir", type=Path, default=d.results_dir,
                        help="where the JSON results go (default: bench/results)")
    args = parser.parse_args(argv)
    return CompactionBenchConfig(
        records=args.records, partitions=args.partitions, unique_fraction=args.unique_fraction,
        value_bytes=args.value_bytes, batch_records=args.batch_records,
        file_records=args.file_records, runs=args.runs, retention_files=args.retention_files,
        retention_partitions=args.retention_partitions,
        retention_file_records=args.retention_file_records,
        phases=tuple(dict.fromkeys(args.phases)), master=args.master, timeout=args.timeout,
        work_dir=args.work_dir, results_dir=args.results_dir)


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    started = datetime.now(UTC)
    machine = machine_info()
    deadline = Deadline(config.timeout)
    if config.work_dir is not None:
        config.work_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="loglake-bench-compaction-", dir=config.work_dir))
    log(f"loglake compaction bench: phases {list(config.phases)}, {config.runs} runs; working "
        f"in {work}")
    results = Results(load={"start": round(os.getloadavg()[0], 2)})
    began = time.monotonic()
    try:
        if "compaction" in config.phases:
            results.compaction, results.compaction_setup = compaction_phase(config, work,
                                                                            deadline)
        if "retention" in config.phases:
            results.retention, results.retention_setup = retention_phase(config, work,
                                                                         deadline)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results.load["end"] = round(os.getloadavg()[0], 2)
    log(f"done in {time.monotonic() - began:.0f} s")
    document = report(config, results, machine, started)
    write_results(config.results_dir, f"compaction-{started:%Y%m%dT%H%M%SZ}", document)
    return 0


if __name__ == "__main__":
    run_main(main)
