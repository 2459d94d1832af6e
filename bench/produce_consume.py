"""Produce/consume throughput of a one-broker loglake dev cluster, with same-box baselines.

Run from the repository root (``./run bench`` does this with the project's virtualenv)::

    python bench/produce_consume.py [--runs 3] [--records 1000000] [--record-size 100]

Each run, in a fresh temporary directory:

1. starts a dev cluster (real ZooKeeper + one ``python -m loglake broker start`` process) and
   creates a topic with one partition;
2. **produce**: confluent-kafka, acks=1, no compression, batching tuned (see ``--linger-ms`` and
   friends); timed from the first ``produce()`` to the end of ``flush()``; every delivery error
   fails the run;
3. **consume**: ``kcat -C -o beginning -c <records> -e`` printing each offset; the lines are
   counted and the last offset checked; timed from starting kcat to its exit;
4. broker CPU seconds (utime + stime from /proc) around each of the two phases;
5. baselines with the same records: Redis Streams (XADD pipelines / XRANGE chunks) on a private
   ``redis-server``, and a plain ``f.write`` loop of RecordBatch v2 bytes in the batch sizes the
   producer actually sent (read back from the broker's segment files after run 1).

Results: the median of the runs per metric, printed as a table on stdout (progress goes to
stderr) and written as JSON to ``bench/results/<UTC timestamp>.json``. With ``--profile`` one
extra run samples the broker with py-spy during each loglake phase and prints the top functions;
that run's throughput is not part of the medians.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import confluent_kafka
from baselines import (
    RedisServer,
    build_batches,
    file_append,
    redis_consume,
    redis_produce,
)
from confluent_kafka.admin import AdminClient, NewTopic
from measure import (
    BenchmarkError,
    PhaseResult,
    PhaseSummary,
    format_table,
    log,
    read_with_kcat,
    run_main,
    write_results,
)
from producing import ADMIN_TIMEOUT_S, timed_produce
from profiling import ProfileSummary, PySpyRecorder, summarise

from loglake.dev.harness import DevCluster
from loglake.segments.batch import iter_batches
from loglake.segments.filenames import LOG_SUFFIX

TOPIC = "bench"
PRODUCE_TARGET = 250_000
"""records/s the produce phase must reach (median)."""
CONSUME_TARGET = 1_000_000
"""records/s the consume phase must reach (median)."""
RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class BenchConfig:
    """What one invocation measures; every field is a command-line option of the same name."""

    runs: int = 3
    records: int = 1_000_000
    record_size: int = 100
    linger_ms: int = 5
    batch_num_messages: int = 10_000
    batch_size: int = 1_000_000
    queue_buffering_max_messages: int = 1_000_000
    redis_pipeline: int = 100
    phase_timeout: float = 600.0
    work_dir: Path | None = None
    keep_data: bool = False
    profile: bool = False
    profile_records: int | None = None
    results_dir: Path = RESULTS_DIR
    kcat_options: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.runs < 1 or self.records < 1 or self.record_size < 1:
            raise ValueError("--runs, --records and --record-size must be at least 1")
        if self.redis_pipeline < 1 or self.phase_timeout <= 0:
            raise ValueError("--redis-pipeline must be >= 1 and --phase-timeout > 0")

    def producer_settings(self, bootstrap_servers: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": bootstrap_servers,
            "acks": "1",
            "compression.type": "none",
            "enable.idempotence": False,
            "linger.ms": self.linger_ms,
            "batch.num.messages": self.batch_num_messages,
            "batch.size": self.batch_size,
            "queue.buffering.max.messages": self.queue_buffering_max_messages,
            "delivery.report.only.error": True,
        }


@dataclass
class RunResult:
    """The phases of one run, by name (see :data:`PHASES`)."""

    phases: dict[str, PhaseResult]
    batch_record_counts: list[int] = field(default_factory=list)


PHASES = {
    "loglake_produce": ("produce", "loglake (confluent-kafka, acks=1)"),
    "redis_produce": ("produce", "Redis Streams XADD, pipelines"),
    "file_append": ("produce", "file append of RecordBatch bytes"),
    "loglake_consume": ("consume", "loglake (kcat)"),
    "redis_consume": ("consume", "Redis Streams XRANGE, chunks"),
}


# -- loglake phases -----------------------------------------------------------------------------


def broker_pid(cluster: DevCluster) -> int:
    for process in cluster.status():
        if process.role == "broker" and process.id == 1 and process.alive:
            return process.pid
    raise BenchmarkError(f"broker 1 of the dev cluster in {cluster.data_dir} is not running")


def create_topic(bootstrap_servers: str) -> None:
    """Create :data:`TOPIC` with one partition and wait until it has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    futures = admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)],
                                  operation_timeout=ADMIN_TIMEOUT_S)
    futures[TOPIC].result(timeout=ADMIN_TIMEOUT_S)
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while True:
        topic = admin.list_topics(TOPIC, timeout=ADMIN_TIMEOUT_S).topics.get(TOPIC)
        if topic is not None and topic.error is None and topic.partitions \
                and topic.partitions[0].leader >= 0:
            return
        if time.monotonic() >= deadline:
            raise BenchmarkError(f"topic {TOPIC} has no leader {ADMIN_TIMEOUT_S:g} s after "
                                 "creation")
        time.sleep(0.1)


def loglake_produce(config: BenchConfig, bootstrap_servers: str, pid: int,
                    payload: bytes) -> PhaseResult:
    """Produce ``config.records`` copies of ``payload``; time first produce .. flush done."""
    return timed_produce(config.producer_settings(bootstrap_servers), TOPIC, payload,
                         config.records, label="loglake produce", pids=[pid],
                         phase_timeout=config.phase_timeout)


def kcat_command(config: BenchConfig, bootstrap_servers: str) -> list[str]:
    binary = shutil.which("kcat")
    if binary is None:
        raise BenchmarkError("kcat not found on PATH (Debian package kcat; ./run setup does)")
    # -c: exit after the last record instead of waiting for the end-of-partition event, which
    # librdkafka raises only on an empty fetch at the high watermark, i.e. after the broker held
    # that fetch for fetch.wait.max.ms (500 ms); -e still ends a short read early (caught below)
    command = [binary, "-C", "-b", bootstrap_servers, "-t", TOPIC, "-p", "0",
               "-o", "beginning", "-c", str(config.records), "-e", "-q", "-f", "%o\n"]
    for option in config.kcat_options:
        command += ["-X", option]
    return command


def kcat_consume(config: BenchConfig, bootstrap_servers: str, pid: int,
                 stderr_path: Path) -> PhaseResult:
    """Read the partition from the beginning to its end with kcat; count and check offsets."""
    return read_with_kcat(kcat_command(config, bootstrap_servers), "loglake consume (kcat)",
                          config.records, config.record_size, config.phase_timeout, pid,
                          stderr_path)


def segment_batch_record_counts(cluster: DevCluster) -> list[int]:
    """Records per batch as the broker stored them (partition 0 of :data:`TOPIC`, broker 1)."""
    partition_dir = cluster.data_dir / "broker-1" / "data" / f"{TOPIC}-0"
    counts: list[int] = []
    for path in sorted(partition_dir.glob(f"*{LOG_SUFFIX}")):
        counts += [header.record_count
                   for header in iter_batches(path.read_bytes(), verify_crc=False)]
    return counts


@contextlib.contextmanager
def maybe_profile(pid: int, output: Path | None) -> Iterator[None]:
    if output is None:
        yield
        return
    with PySpyRecorder(pid, output):
        yield


def run_loglake(config: BenchConfig, run_dir: Path, payload: bytes, *,
                profile_dir: Path | None = None) -> RunResult:
    log(f"  starting a dev cluster in {run_dir / 'cluster'}")
    with DevCluster(run_dir / "cluster", brokers=1) as cluster:
        pid = broker_pid(cluster)
        bootstrap = cluster.bootstrap_servers
        log(f"  broker pid {pid} at {bootstrap}")
        create_topic(bootstrap)
        with maybe_profile(pid, profile_dir and profile_dir / "produce.txt"):
            produced = loglake_produce(config, bootstrap, pid, payload)
        log(f"  loglake produce: {produced.records_per_s:,.0f} rec/s, "
            f"broker CPU {produced.cpu_seconds:.2f} s")
        with maybe_profile(pid, profile_dir and profile_dir / "consume.txt"):
            consumed = kcat_consume(config, bootstrap, pid, run_dir / "kcat.stderr")
        log(f"  loglake consume: {consumed.records_per_s:,.0f} rec/s, "
            f"broker CPU {consumed.cpu_seconds:.2f} s")
        counts = segment_batch_record_counts(cluster)
    return RunResult({"loglake_produce": produced, "loglake_consume": consumed}, counts)


def run_baselines(config: BenchConfig, run_dir: Path, payload: bytes,
                  batches: Sequence[bytes]) -> dict[str, PhaseResult]:
    with RedisServer(run_dir / "redis") as server:
        log(f"  redis-server pid {server.pid} on port {server.port}")
        produced = redis_produce(server, records=config.records, payload=payload,
                                 pipeline_size=config.redis_pipeline,
                                 timeout=config.phase_timeout)
        consumed = redis_consume(server, records=config.records,
                                 record_size=config.record_size, timeout=config.phase_timeout)
    appended = file_append(run_dir / "append.log", batches, records=config.records,
                           payload_size=config.record_size)
    return {"redis_produce": produced, "redis_consume": consumed, "file_append": appended}


# -- reporting ----------------------------------------------------------------------------------


def _command_line(command: Sequence[str], prefix: str = "") -> str:
    """The first output line of ``command`` starting with ``prefix`` (stdout and stderr)."""
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    for line in (result.stdout + result.stderr).splitlines():
        if line.startswith(prefix):
            return line.strip()
    return "unavailable"


def machine_info() -> dict[str, Any]:
    cpu_model = "unknown"
    memory_kb = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_kb = int(line.split()[1])
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "memory_gib": round(memory_kb / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "librdkafka": confluent_kafka.libversion()[0],
        "confluent_kafka": confluent_kafka.__version__,
        "kcat": _command_line(["kcat", "-V"], "Version"),
        "redis_server": _command_line(["redis-server", "--version"]),
    }


def ratio_rows(summaries: dict[str, PhaseSummary]) -> list[tuple[str, str, float]]:
    pairs = [
        ("loglake_produce", "redis_produce"), ("loglake_produce", "file_append"),
        ("loglake_consume", "redis_consume"), ("loglake_consume", "file_append"),
    ]
    return [(ours, baseline, summaries[ours].records_per_s / summaries[baseline].records_per_s)
            for ours, baseline in pairs]


def report(config: BenchConfig, runs: list[RunResult], profiles: dict[str, ProfileSummary],
           machine: dict[str, Any], started: datetime) -> dict[str, Any]:
    summaries = {name: PhaseSummary.of(name, [run.phases[name] for run in runs])
                 for name in PHASES}
    rows = []
    for name, (kind, system) in PHASES.items():
        summary = summaries[name]
        cpu = summary.cpu_s_per_million
        rows.append([kind, system, f"{summary.records_per_s:,.0f}", f"{summary.mb_per_s:,.1f}",
                     "-" if cpu is None else f"{cpu:.2f}",
                     ", ".join(f"{value:,.0f}" for value in summary.all_records_per_s)])
    print(f"\nloglake produce/consume, {config.records:,} records of {config.record_size} B, "
          f"median of {config.runs} runs ({machine['cpus']} CPUs, {machine['cpu_model']})\n")
    print(format_table(["phase", "system", "records/s", "MB/s", "server CPU s / M records",
                        "each run (records/s)"], rows))
    ratios = ratio_rows(summaries)
    print()
    print(format_table(["ours", "baseline", "ratio (records/s)"],
                       [[ours, baseline, f"{value:.2f}x"] for ours, baseline, value in ratios]))
    targets = {
        "produce": (summaries["loglake_produce"].records_per_s, PRODUCE_TARGET),
        "consume": (summaries["loglake_consume"].records_per_s, CONSUME_TARGET),
    }
    print()
    print(format_table(["target", "needed records/s", "measured", "met"],
                       [[name, f">= {needed:,}", f"{value:,.0f}", "yes" if value >= needed
                         else "NO"] for name, (value, needed) in targets.items()]))
    for phase, profile in profiles.items():
        print(f"\npy-spy --gil, broker during {phase} ({profile.total_samples} samples), "
              "top functions by own samples:\n")
        print(format_table(["function", "file", "% own", "samples"],
                           [[e.function, e.file, f"{e.percent:.1f}", str(e.samples)]
                            for e in profile.own]))
        print("\nby inclusive samples (without the common root frames):\n")
        print(format_table(["function", "file", "% inclusive"],
                           [[e.function, e.file, f"{e.percent:.1f}"]
                            for e in profile.inclusive]))
    counts = runs[0].batch_record_counts
    return {
        "started": started.isoformat(),
        "command": " ".join([sys.executable, *sys.argv]),
        "config": {key: str(value) if isinstance(value, Path) else value
                   for key, value in asdict(config).items()},
        "machine": machine,
        "producer_batches": {
            "batches": len(counts),
            "mean_records": sum(counts) / len(counts) if counts else None,
            "min_records": min(counts, default=None),
            "max_records": max(counts, default=None),
        },
        "medians": {name: asdict(summary) for name, summary in summaries.items()},
        "ratios": {f"{ours}/{baseline}": value for ours, baseline, value in ratios},
        "targets": {name: {"needed": needed, "measured": value, "met": value >= needed}
                    for name, (value, needed) in targets.items()},
        "runs": [{name: result.to_json() for name, result in run.phases.items()}
                 for run in runs],
        "profiles": {phase: asdict(summary) for phase, summary in profiles.items()},
    }


# -- main ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> BenchConfig:
    defaults = BenchConfig()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=defaults.runs,
                        help="runs to take the median of (default: %(default)s)")
    parser.add_argument("--records", type=int, default=defaults.records,
                        help="records per phase (default: %(default)s)")
    parser.add_argument("--record-size", type=int, default=defaults.record_size,
                        help="value bytes per record, null key (default: %(default)s)")
    parser.add_argument("--linger-ms", type=int, default=defaults.linger_ms,
                        help="producer linger.ms (default: %(default)s)")
    parser.add_argument("--batch-num-messages", type=int, default=defaults.batch_num_messages,
                        help="producer batch.num.messages (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size,
                        help="producer batch.size in bytes (default: %(default)s)")
    parser.add_argument("--queue-buffering-max-messages", type=int,
                        default=defaults.queue_buffering_max_messages,
                        help="producer queue.buffering.max.messages (default: %(default)s)")
    parser.add_argument("--redis-pipeline", type=int, default=defaults.redis_pipeline,
                        help="XADDs per Redis pipeline (default: %(default)s)")
    parser.add_argument("--phase-timeout", type=float, default=defaults.phase_timeout,
                        help="seconds any one phase may take (default: %(default)s)")
    parser.add_argument("--kcat-option", action="append", default=[], metavar="KEY=VALUE",
                        help="extra librdkafka setting for kcat (-X), repeatable")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="parent of the temporary directory (default: the system's)")
    parser.add_argument("--keep-data", action="store_true",
                        help="keep the temporary directory (cluster logs, segments)")
    parser.add_argument("--profile", action="store_true",
                        help="one extra run with py-spy sampling the broker (not in medians)")
    parser.add_argument("--profile-records", type=int, default=None,
                        help="records in the profiled run (default: --records)")
    parser.add_argument("--results-dir", type=Path, default=defaults.results_dir,
                        help="where the JSON results go (default: bench/results)")
    args = parser.parse_args(argv)
    return BenchConfig(
        runs=args.runs, records=args.records, record_size=args.record_size,
        linger_ms=args.linger_ms, batch_num_messages=args.batch_num_messages,
        batch_size=args.batch_size,
        queue_buffering_max_messages=args.queue_buffering_max_messages,
        redis_pipeline=args.redis_pipeline, phase_timeout=args.phase_timeout,
        work_dir=args.work_dir, keep_data=args.keep_data, profile=args.profile,
        profile_records=args.profile_records,
        results_dir=args.results_dir, kcat_options=tuple(args.kcat_option))


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    started = datetime.now(UTC)
    machine = machine_info()
    payload = bytes(index % 251 for index in range(config.record_size))
    work = Path(tempfile.mkdtemp(prefix="loglake-bench-", dir=config.work_dir))
    log(f"loglake bench: {config.runs} runs x {config.records:,} records of "
        f"{config.record_size} B; working in {work}")
    runs: list[RunResult] = []
    profiles: dict[str, ProfileSummary] = {}
    batches: list[bytes] | None = None
    try:
        for index in range(1, config.runs + 1):
            log(f"run {index}/{config.runs}")
            run_dir = work / f"run-{index}"
            run = run_loglake(config, run_dir, payload)
            if batches is None:
                counts = run.batch_record_counts
                if sum(counts) != config.records:
                    raise BenchmarkError(f"the broker's segments hold {sum(counts)} records in "
                                         f"{len(counts)} batches, expected {config.records}")
                log(f"  the producer sent {len(counts):,} batches of "
                    f"{sum(counts) / len(counts):,.0f} records on average; encoding the same "
                    "for the file baseline")
                batches = build_batches(counts, payload=payload,
                                        timestamp_ms=int(time.time() * 1000))
            run.phases.update(run_baselines(config, run_dir, payload, batches))
            runs.append(run)
            if not config.keep_data:
                shutil.rmtree(run_dir, ignore_errors=True)
        if config.profile:
            log("profiled run (py-spy attached to the broker; not part of the medians)")
            run_dir = work / "profile"
            profile_dir = config.results_dir / f"profile-{started:%Y%m%dT%H%M%SZ}"
            profile_dir.mkdir(parents=True, exist_ok=True)
            profiled = replace(config, records=config.profile_records or config.records)
            run_loglake(profiled, run_dir, payload, profile_dir=profile_dir)
            for phase in ("produce", "consume"):
                path = profile_dir / f"{phase}.txt"
                if path.exists():
                    profiles[phase] = summarise(path)
            log(f"  raw py-spy profiles in {profile_dir}")
    finally:
        if config.keep_data:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    document = report(config, runs, profiles, machine, started)
    write_results(config.results_dir, f"{started:%Y%m%dT%H%M%SZ}", document)
    return 0


if __name__ == "__main__":
    run_main(main)
