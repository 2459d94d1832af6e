"""Metrics and run history of the clean-up jobs: every run recorded in ZooKeeper and counted.

A :class:`JobRecorder` wraps each job (``retention``, ``compact``, ``optimize``, ``vacuum``):
before it, :meth:`JobRunStore.record_start` (catalog/job_runs.py); after it, the outcome and
stats (:func:`stats_of`) go to :meth:`JobRunStore.record_end` and to the metrics below.
Recording is best effort: ZooKeeper trouble while recording prints one warning line and never
fails the job; a failing job is recorded as ``failed`` and its exception goes on.

Metrics (one :class:`JobMetrics` registry per job process; label ``cleanup_job`` = the job
name, not ``job``: Prometheus owns ``job`` (the scrape job, and the Pushgateway overwrites a
pushed ``job`` label with its grouping key's), so a ``job`` label would be lost)::

    loglake_job_runs_total{cleanup_job,outcome}      runs ended, outcome success|failed
    loglake_job_duration_seconds{cleanup_job}        histogram of run durations
    loglake_job_rows_rewritten_total{cleanup_job}    rows written again by compact/optimize
    loglake_job_bytes_reclaimed_total{cleanup_job}   table bytes no longer referenced:
                                                     retention's dropped files, compact's and
                                                     optimize's input minus output bytes (never
                                                     below 0). vacuum deletes those files later
                                                     and counts only files (its bytes were
                                                     counted when they left the table)
    loglake_job_files_added_total{cleanup_job}, loglake_job_files_removed_total{cleanup_job}
                                                     files added to / removed from the table
                                                     (vacuum: files deleted from storage)
    loglake_job_last_success_timestamp_seconds{cleanup_job}
                                                     end time of the last successful run
    loglake_job_running{cleanup_job}                 1 while the job runs
    loglake_job_next_run_timestamp_seconds{cleanup_job}
                                                     ``jobs run --every``: next scheduled run

A dry run (``--dry-run``) is recorded in the history (stats ``dry_run: 1``, nothing counted as
rewritten or reclaimed) and counted in ``loglake_job_runs_total``; it does not move
``last_success``. Counters start at 0 in each process: exported through a node-exporter
textfile (``--metrics-textfile``, one file per command: each write replaces the file) or a
Pushgateway (``--pushgateway``, grouping key ``job="loglake-jobs", instance=<command>``), a
later process starts again from 0, which Prometheus reads as a counter reset.

Thread-safety: prometheus_client metrics are thread-safe; a recorder is used by one thread.
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    push_to_gateway,
    start_http_server,
    write_to_textfile,
)

from loglake.catalog.job_runs import JobRunStore
from loglake.compaction.backfill import BackfillResult
from loglake.compaction.compact import CompactionResult
from loglake.compaction.optimize import OptimizeResult
from loglake.compaction.retention import RetentionResult
from loglake.compaction.vacuum import VacuumResult

T = TypeVar("T")
PUSHGATEWAY_JOB = "loglake-jobs"
JOB_LABEL = "cleanup_job"
"""The label naming the job (``job`` belongs to Prometheus: module docstring)."""
DURATION_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, float("inf"))
ERROR_TEXT_LIMIT = 500
"""Characters of a failure's message kept in the run history."""


class JobMetrics:
    """The job metrics of one process, in their own registry (module docstring)."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        job = [JOB_LABEL]
        self.runs = Counter("loglake_job_runs", "Clean-up job runs ended, by outcome",
                            [JOB_LABEL, "outcome"], registry=r)
        self.duration = Histogram("loglake_job_duration_seconds",
                                  "Duration of clean-up job runs", job,
                                  buckets=DURATION_BUCKETS, registry=r)
        self.rows_rewritten = Counter("loglake_job_rows_rewritten",
                                      "Rows written again by clean-up jobs", job, registry=r)
        self.bytes_reclaimed = Counter("loglake_job_bytes_reclaimed",
                                       "Table bytes no longer referenced after clean-up jobs",
                                       job, registry=r)
        self.files_added = Counter("loglake_job_files_added",
                                   "Files added to the tables by clean-up jobs", job, registry=r)
        self.files_removed = Counter("loglake_job_files_removed",
                                     "Files removed by clean-up jobs", job, registry=r)
        self.last_success = Gauge("loglake_job_last_success_timestamp_seconds",
                                  "End time of the last successful run (Unix seconds)", job,
                                  registry=r)
        self.running = Gauge("loglake_job_running", "1 while the clean-up job runs", job,
                             registry=r)
        self.next_run = Gauge("loglake_job_next_run_timestamp_seconds",
                              "When jobs run --every runs the job next (Unix seconds)", job,
                              registry=r)

    def observe(self, job: str, outcome: str, seconds: float, stats: Mapping[str, Any], *,
                ended: float) -> None:
        self.runs.labels(job, outcome).inc()
        self.duration.labels(job).observe(seconds)
        self.rows_rewritten.labels(job).inc(_count(stats, "rows_rewritten"))
        self.bytes_reclaimed.labels(job).inc(_count(stats, "bytes_reclaimed"))
        self.files_added.labels(job).inc(_count(stats, "files_added"))
        self.files_removed.labels(job).inc(_count(stats, "files_removed"))
        if outcome == "success" and not stats.get("dry_run"):
            self.last_success.labels(job).set(ended)


def _count(stats: Mapping[str, Any], key: str) -> int:
    value = stats.get(key, 0)
    return value if isinstance(value, int) and value > 0 else 0


def stats_of(job: str, result: object, *, dry_run: bool = False) -> dict[str, int]:
    """The stats of a job's result (the list a ``run_*`` function returns): rows rewritten,
    bytes reclaimed, files added and removed (module docstring); all 0 for a dry run."""
    stats = {"rows_rewritten": 0, "bytes_reclaimed": 0, "files_added": 0, "files_removed": 0}
    if dry_run:
        return {**stats, "dry_run": 1}
    items: Sequence[object] = result if isinstance(result, list) else []
    topics: set[str] = set()
    for item in items:
        if isinstance(item, RetentionResult) and item.committed:
            files = [f for dropped in item.removed.values() for f in dropped]
            stats["files_removed"] += len(files)
            stats["bytes_reclaimed"] += sum(f.size for f in files)
            topics.add(item.topic)
        elif isinstance(item, CompactionResult) and item.committed:
            stats["rows_rewritten"] += item.rows_out
            stats["files_added"] += item.files_out
            stats["files_removed"] += len(item.plan.files)
            stats["bytes_reclaimed"] += max(
                0, sum(f.size for f in item.plan.files) - item.bytes_out)
            topics.add(item.topic)
        elif isinstance(item, OptimizeResult) and item.committed:
            stats["rows_rewritten"] += item.rows_in
            stats["files_added"] += item.files_out
            stats["files_removed"] += item.files_in
            stats["bytes_reclaimed"] += max(0, item.bytes_in - item.bytes_out)
            topics.add(item.topic)
        elif isinstance(item, BackfillResult) and item.committed:
            stats["rows_rewritten"] += item.rows
            stats["files_added"] += item.files_rewritten
            stats["files_removed"] += item.files_rewritten
            topics.add(item.topic)
        elif isinstance(item, VacuumResult) and item.deleted:
            stats["files_removed"] += len(item.deleted)
            topics.add(item.topic)
    stats["topics_changed"] = len(topics)
    return stats


@dataclass(frozen=True)
class MetricsExport:
    """Where a job command sends its metrics after each run (both optional)."""

    textfile: Path | None = None
    pushgateway: str | None = None
    instance: str = "loglake-jobs"
    """The Pushgateway grouping key's ``instance`` (the command name)."""


class JobRecorder:
    """Runs jobs, recording each in the run history and the metrics (module docstring)."""

    def __init__(self, metrics: JobMetrics, store: JobRunStore | None, *,
                 export: MetricsExport | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.metrics = metrics
        self.store = store
        self.export_to = export or MetricsExport()
        self._clock = clock

    def run(self, job: str, fn: Callable[[], T], *, topic: str | None = None,
            dry_run: bool = False) -> T:
        """``fn()`` (the job) recorded as one run of ``job`` on ``topic`` (None: every
        topic); its result is returned and its exception raised after recording."""
        run_id = self._best_effort(f"recording the start of {job}", lambda: (
            self.store.record_start(job, [topic] if topic else []) if self.store else None))
        self.metrics.running.labels(job).set(1)
        started = time.monotonic()
        try:
            result = fn()
        except BaseException as exc:
            self._end(job, run_id, "failed", started,
                      {"error": (str(exc) or type(exc).__name__)[:ERROR_TEXT_LIMIT]})
            raise
        self._end(job, run_id, "success", started, stats_of(job, result, dry_run=dry_run))
        return result

    def _end(self, job: str, run_id: str | None, outcome: str, started: float,
             stats: dict[str, Any]) -> None:
        self.metrics.running.labels(job).set(0)
        self.metrics.observe(job, outcome, time.monotonic() - started, stats,
                             ended=self._clock())
        if run_id is not None and self.store is not None:
            store = self.store
            self._best_effort(f"recording the end of {job}", lambda: store.record_end(
                run_id, "success" if outcome == "success" else "failed", stats))

    def next_due(self, job: str, when: float) -> None:
        """``jobs run --every``: ``job`` runs next at ``when`` (Unix seconds)."""
        self.metrics.next_run.labels(job).set(when)
        if self.store is not None:
            store = self.store
            self._best_effort(f"recording when {job} is due",
                              lambda: store.set_next_due(job, int(when * 1000)))

    def export(self) -> None:
        """Write the textfile and push to the Pushgateway, as configured; failures print a
        warning (the job's work is done)."""
        target = self.export_to
        if target.textfile is not None:
            path = target.textfile
            self._best_effort(f"writing the metrics file {path}",
                              lambda: write_to_textfile(str(path), self.metrics.registry))
        if target.pushgateway:
            gateway = target.pushgateway
            self._best_effort(f"pushing metrics to {gateway}", lambda: push_to_gateway(
                gateway, job=PUSHGATEWAY_JOB, registry=self.metrics.registry,
                grouping_key={"instance": target.instance}, timeout=10))

    @staticmethod
    def _best_effort(what: str, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except Exception as exc:
            print(f"warning: {what}: {exc}", file=sys.stderr, flush=True)
            return None


def serve_metrics(metrics: JobMetrics, port: int, host: str = "127.0.0.1"
                  ) -> tuple[str, Callable[[], None]]:
    """Serve ``/metrics`` of ``metrics`` on ``host:port`` (0: any free port) from a daemon
    thread (prometheus_client's ``start_http_server``); returns the URL and a stop function."""
    server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    bound = server.server_port

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{bound}/metrics", stop


def default_instance(command: str) -> str:
    """The Pushgateway ``instance`` of a command: ``<host>-<command>``."""
    return f"{socket.gethostname()}-{command}"
