"""``loglake retention|compact|optimize|vacuum|jobs run``: the clean-up jobs of the tiered tables.

Each takes ``--zookeeper`` (where the brokers published the tier storage and topic configs;
optional, resolved by :mod:`loglake.addresses`: flag, ``$LOGLAKE_ZOOKEEPER``, the profile of
``loglake dev up``),
``--topic`` (default: every topic), ``--dry-run`` (print the plan, change nothing) and
``--storage-option key=value`` (secrets the brokers never publish); each prints one line per
partition. ``compact`` (and ``jobs run`` when a partition is due) starts Spark: ``--master``
(default: the ``spark-submit`` master, else ``local[*]``). Under spark-submit::

    spark-submit --master spark://HOST:7077 loglake/compaction/cli.py compact --zookeeper ZK

``jobs run --every 10m`` runs, every period, retention, compaction (due partitions only),
optimize and vacuum; ``--max-runs`` bounds it (tests, cron-like one-shots).

Every job run is recorded in ZooKeeper (catalog/job_runs.py; ``jobs run`` also records when
each job is due next) and counted in Prometheus metrics (compaction/metrics.py), exported with
``--metrics-textfile PATH`` (node-exporter textfile, rewritten after each run) and
``--pushgateway URL``; ``jobs run`` also serves them on ``--metrics-port`` while it runs.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from loglake import addresses
from loglake.compaction.common import Cluster, Progress
from loglake.compaction.compact import run_compaction
from loglake.compaction.metrics import (
    JobMetrics,
    JobRecorder,
    MetricsExport,
    default_instance,
    serve_metrics,
)
from loglake.compaction.optimize import SMALL_BYTES, TARGET_BYTES, run_optimize
from loglake.compaction.retention import run_retention
from loglake.compaction.vacuum import DEFAULT_GRACE_HOURS, run_vacuum
from loglake.errors import LoglakeError
from loglake.segments.storage import parse_storage_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """``"10m"`` -> 600.0 seconds (units ms, s, m, h, d; a bare number is seconds)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30s, 10m, 1h)")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def common(parser: argparse.ArgumentParser, *, spark: bool = False) -> None:
        addresses.add_zookeeper_option(parser)
        parser.add_argument("--topic", help="one topic (default: every topic)")
        parser.add_argument("--dry-run", action="store_true",
                            help="print what would be done; change nothing")
        parser.add_argument("--storage-option", action="append", default=[],
                            metavar="KEY=VALUE", help="object-store option (e.g. credentials)")
        if spark:
            parser.add_argument("--master", help="Spark master (default: spark-submit's, "
                                "else local[*])")
        parser.add_argument("--metrics-textfile", type=Path, metavar="PATH",
                            help="write the job metrics here after each run (node-exporter "
                            "textfile collector format; one file per command)")
        parser.add_argument("--pushgateway", metavar="URL",
                            help="push the job metrics to this Prometheus Pushgateway after "
                            "each run")

    retention = subparsers.add_parser(
        "retention", help="drop tiered files past retention.ms / retention.bytes")
    common(retention)
    retention.set_defaults(handler=retention_command)

    compact = subparsers.add_parser(
        "compact", help="key compaction of cleanup.policy=compact topics (Spark)")
    common(compact, spark=True)
    compact.set_defaults(handler=compact_command)

    optimize = subparsers.add_parser("optimize", help="bin-pack small tiered files")
    common(optimize)
    optimize.add_argument("--small-bytes", type=int, default=SMALL_BYTES,
                          help=f"files below this size are packed (default {SMALL_BYTES})")
    optimize.add_argument("--target-bytes", type=int, default=TARGET_BYTES,
                          help=f"packed file size (default {TARGET_BYTES})")
    optimize.set_defaults(handler=optimize_command)

    vacuum = subparsers.add_parser("vacuum", help="delete unreferenced files after a grace")
    common(vacuum)
    _grace(vacuum)
    vacuum.set_defaults(handler=vacuum_command)

    jobs = subparsers.add_parser("jobs", help="run the clean-up jobs on a schedule")
    job_commands = jobs.add_subparsers(dest="jobs_command", required=True)
    run = job_commands.add_parser("run", help="retention, compaction, optimize, vacuum")
    common(run, spark=True)
    _grace(run)
    run.add_argument("--every", type=parse_duration, default=600.0, metavar="DURATION",
                     help="period between runs (default 10m)")
    run.add_argument("--max-runs", type=int, default=0,
                     help="stop after this many runs (default: run until interrupted)")
    run.add_argument("--metrics-port", type=_port, metavar="PORT",
                     help="serve /metrics on this port while running (0: any free port)")
    run.add_argument("--metrics-host", default="127.0.0.1",
                     help="address of --metrics-port (default 127.0.0.1)")
    run.set_defaults(handler=jobs_command)


def _grace(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grace-hours", type=int, default=DEFAULT_GRACE_HOURS,
                        help="keep removed files this long for readers of older snapshots "
                        f"(at least the topic's file.delete.delay.ms; default "
                        f"{DEFAULT_GRACE_HOURS})")


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"not a port: {text!r} (0-65535)")
    return int(text)


def _recorder(args: argparse.Namespace, cluster: Cluster, command: str) -> JobRecorder:
    """Run history in the cluster's ZooKeeper, metrics exported as the flags say."""
    export = MetricsExport(textfile=args.metrics_textfile, pushgateway=args.pushgateway,
                           instance=default_instance(command))
    return JobRecorder(JobMetrics(), cluster.catalog.job_runs(), export=export)


def _recorded(args: argparse.Namespace, cluster: Cluster, job: str, fn: Callable[[], T]) -> T:
    recorder = _recorder(args, cluster, job)
    try:
        return recorder.run(job, fn, topic=args.topic, dry_run=args.dry_run)
    finally:
        recorder.export()


def _cluster(args: argparse.Namespace) -> Cluster:
    return Cluster(addresses.zookeeper(args.zookeeper),
                   storage_options=parse_storage_options(args.storage_option))


def spark_factory(master: str | None) -> Callable[[], SparkSession]:
    """A lazy SparkSession (started only when a partition needs compacting)."""
    session: list[SparkSession] = []

    def get() -> SparkSession:
        if not session:
            from pyspark import SparkConf

            from loglake.streaming.sql_cli import quiet_session

            chosen = master or SparkConf().get("spark.master", None) or "local[*]"
            session.append(quiet_session(chosen))
        return session[0]

    return get


def retention_command(args: argparse.Namespace) -> int:
    with _cluster(args) as cluster:
        _recorded(args, cluster, "retention",
                  lambda: run_retention(cluster, topic=args.topic, dry_run=args.dry_run))
    return 0


def compact_command(args: argparse.Namespace) -> int:
    with _cluster(args) as cluster:
        _recorded(args, cluster, "compact", lambda: run_compaction(
            cluster, spark=spark_factory(args.master), topic=args.topic, dry_run=args.dry_run))
    return 0


def optimize_command(args: argparse.Namespace) -> int:
    with _cluster(args) as cluster:
        _recorded(args, cluster, "optimize", lambda: run_optimize(
            cluster, topic=args.topic, dry_run=args.dry_run, small_bytes=args.small_bytes,
            target_bytes=args.target_bytes))
    return 0


def vacuum_command(args: argparse.Namespace) -> int:
    with _cluster(args) as cluster:
        _recorded(args, cluster, "vacuum", lambda: run_vacuum(
            cluster, topic=args.topic, grace=args.grace_hours, dry_run=args.dry_run))
    return 0


JOB_NAMES = ("retention", "compact", "optimize", "vacuum")
"""The jobs of one scheduled run, in order (also their names in the run history)."""


def run_all(cluster: Cluster, *, spark: Callable[[], SparkSession], topic: str | None = None,
            dry_run: bool = False, grace_hours: int = DEFAULT_GRACE_HOURS,
            progress: Progress | None = None, recorder: JobRecorder | None = None) -> None:
    """One scheduled run: retention, compaction of due partitions, optimize, vacuum (a failing
    job is reported and does not stop the others); each job recorded by ``recorder``."""
    progress = progress or Progress()
    jobs: list[tuple[str, Callable[[], object]]] = [
        ("retention", lambda: run_retention(cluster, topic=topic, dry_run=dry_run,
                                            progress=progress)),
        ("compact", lambda: run_compaction(cluster, spark=spark, topic=topic,
                                           dry_run=dry_run, progress=progress)),
        ("optimize", lambda: run_optimize(cluster, topic=topic, dry_run=dry_run,
                                          progress=progress)),
        ("vacuum", lambda: run_vacuum(cluster, topic=topic, grace=grace_hours,
                                      dry_run=dry_run, progress=progress)),
    ]
    for name, job in jobs:
        try:
            if recorder is not None:
                recorder.run(name, job, topic=topic, dry_run=dry_run)
            else:
                job()
        except Exception as exc:  # report, keep the schedule going
            progress.line(f"{name}: failed: {exc}")


def jobs_command(args: argparse.Namespace) -> int:
    spark = spark_factory(args.master)
    runs = 0
    with _cluster(args) as cluster:
        recorder = _recorder(args, cluster, "jobs-run")
        stop_serving: Callable[[], None] | None = None
        if args.metrics_port is not None:
            url, stop_serving = serve_metrics(recorder.metrics, args.metrics_port,
                                              args.metrics_host)
            print(f"jobs: metrics at {url}", flush=True)
        try:
            while True:
                started, started_wall = time.monotonic(), time.time()
                print(f"jobs: run {runs + 1} at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}",
                      flush=True)
                run_all(cluster, spark=spark, topic=args.topic, dry_run=args.dry_run,
                        grace_hours=args.grace_hours, recorder=recorder)
                runs += 1
                last = bool(args.max_runs and runs >= args.max_runs)
                if not last:
                    for job in JOB_NAMES:
                        recorder.next_due(job, started_wall + args.every)
                recorder.export()
                if last:
                    return 0
                time.sleep(max(0.0, args.every - (time.monotonic() - started)))
        finally:
            if stop_serving is not None:
                stop_serving()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``spark-submit loglake/compaction/cli.py <job> ...``."""
    parser = argparse.ArgumentParser(prog="loglake-jobs")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (LoglakeError, OSError, ValueError) as exc:
        print(f"loglake: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
