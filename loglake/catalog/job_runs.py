"""Run history of the clean-up jobs in ZooKeeper: what ran, when, for how long, with what result.

Layout under the cluster chroot (JSON values)::

    /loglake/jobs/runs/<job>/run-<seq>      {"job","topics","started_ms","ended_ms","outcome",
                                             "stats","host","pid"}: one run; ``<seq>`` is
                                             ZooKeeper's 10-digit sequence (a persistent
                                             sequential znode), so names sort by start
    /loglake/jobs/running/<job>-run-<seq>   ephemeral, empty: present while the run's process
                                             (its ZooKeeper session) is alive
    /loglake/jobs/next_due/<job>            {"next_due_ms"}: when ``jobs run --every`` runs the
                                             job next

``<job>`` is a job name (``retention``, ``compact``, ``optimize``, ``vacuum``; lower-case
letters, digits, ``-`` and ``_``). A run id is ``<job>/run-<seq>``.

Lifecycle of a run: :meth:`JobRunStore.record_start` creates the run znode (``outcome``
``"running"``, ``ended_ms`` null) and its ephemeral ``running`` marker, then trims the job's
history to the newest :data:`HISTORY_PER_JOB` runs; :meth:`JobRunStore.record_end` rewrites the
run znode with the outcome (``"success"`` or ``"failed"``), the end time and the stats, then
deletes the marker. A run whose znode still says ``"running"`` but whose marker is gone (the
job process died, or its session expired) is reported as ``"abandoned"``: nothing will ever end
it. ``stats`` is a flat JSON object; the jobs write ``rows_rewritten``, ``bytes_reclaimed``,
``files_added``, ``files_removed`` (integers) and, for a failure, ``error`` (text).

Errors: kazoo's connection errors become ZooKeeperUnavailableError; a malformed run znode
(written by something else) is skipped by readers. Thread-safety: stateless beyond kazoo
(thread-safe); blocking, so call it off any event loop (the console uses a thread pool).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from loglake.catalog.zookeeper import _typed_errors

JOBS_ROOT = "/loglake/jobs"
RUNS = f"{JOBS_ROOT}/runs"
RUNNING = f"{JOBS_ROOT}/running"
NEXT_DUE = f"{JOBS_ROOT}/next_due"
RUN_PREFIX = "run-"
HISTORY_PER_JOB = 50
"""Runs kept per job; older ones are deleted when a new run starts."""

Outcome = Literal["running", "success", "failed", "abandoned"]
_JOB_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_RUN_ID = re.compile(r"([a-z0-9][a-z0-9_-]{0,63})/(run-\d{10})")


@dataclass(frozen=True)
class JobRun:
    """One recorded run (see the module docstring)."""

    job: str
    run_id: str
    topics: tuple[str, ...]
    started_ms: int
    ended_ms: int | None
    outcome: Outcome
    stats: Mapping[str, Any] = field(default_factory=dict)
    host: str = ""
    pid: int = 0

    @property
    def duration_ms(self) -> int | None:
        """Milliseconds from start to end; None while running (or abandoned)."""
        return None if self.ended_ms is None else self.ended_ms - self.started_ms


def check_job_name(job: str) -> str:
    if not _JOB_NAME.fullmatch(job):
        raise ValueError(f"not a job name: {job!r} (lower-case letters, digits, '-', '_')")
    return job


def parse_run_id(run_id: str) -> tuple[str, str]:
    """``"compact/run-0000000003"`` -> (``"compact"``, ``"run-0000000003"``)."""
    match = _RUN_ID.fullmatch(run_id)
    if not match:
        raise ValueError(f"not a run id: {run_id!r} (e.g. compact/run-0000000003)")
    return match.group(1), match.group(2)


class JobRunStore:
    """Record and read job runs and next-due times (module docstring). Blocking."""

    def __init__(self, zk: KazooClient, *, history: int = HISTORY_PER_JOB,
                 clock: Any = time.time) -> None:
        self.zk = zk
        self.history = history
        self._clock = clock

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # ---- writers (the job process)
    def record_start(self, job: str, topics: Sequence[str]) -> str:
        """Record that ``job`` starts now on ``topics`` (empty: every topic); returns the
        run id. Trims the job's history to the newest ``history`` runs."""
        check_job_name(job)
        value = {"job": job, "topics": list(topics), "started_ms": self._now_ms(),
                 "ended_ms": None, "outcome": "running", "stats": {},
                 "host": socket.gethostname(), "pid": os.getpid()}
        with _typed_errors(f"recording the start of job {job}"):
            path = self.zk.create(f"{RUNS}/{job}/{RUN_PREFIX}", _dump(value), sequence=True,
                                  makepath=True)
            node = path.rsplit("/", 1)[1]
            with contextlib.suppress(NodeExistsError):
                self.zk.create(f"{RUNNING}/{job}-{node}", b"", ephemeral=True, makepath=True)
            self._trim(job)
        return f"{job}/{node}"

    def record_end(self, run_id: str, outcome: Literal["success", "failed"],
                   stats: Mapping[str, Any]) -> None:
        """Record the end of run ``run_id`` with its outcome and stats (module docstring).
        A run trimmed from the history meanwhile is not recreated."""
        if outcome not in ("success", "failed"):
            raise ValueError(f"a run ends in success or failed, not {outcome!r}")
        job, node = parse_run_id(run_id)
        path = f"{RUNS}/{job}/{node}"
        with _typed_errors(f"recording the end of job run {run_id}"):
            try:
                raw, _stat = self.zk.get(path)
            except NoNodeError:
                return
            value = _load(raw) or {"job": job, "topics": [], "started_ms": self._now_ms()}
            value.update(ended_ms=self._now_ms(), outcome=outcome, stats=dict(stats))
            with contextlib.suppress(NoNodeError):
                self.zk.set(path, _dump(value))
            with contextlib.suppress(NoNodeError):
                self.zk.delete(f"{RUNNING}/{job}-{node}")

    def set_next_due(self, job: str, ms: int) -> None:
        """``jobs run --every``: ``job`` runs next at ``ms`` (epoch milliseconds)."""
        check_job_name(job)
        data = _dump({"next_due_ms": int(ms)})
        path = f"{NEXT_DUE}/{job}"
        with _typed_errors(f"recording when job {job} is due"):
            try:
                self.zk.set(path, data)
            except NoNodeError:
                try:
                    self.zk.create(path, data, makepath=True)
                except NodeExistsError:
                    self.zk.set(path, data)

    # ---- readers (the console, tests)
    def runs(self, job: str | None = None, limit: int = HISTORY_PER_JOB) -> list[JobRun]:
        """Recorded runs, newest first (by start time), of ``job`` or of every job; at most
        ``limit``. A running run whose process is gone reads as ``"abandoned"``."""
        if job is not None:
            check_job_name(job)
        with _typed_errors("reading the job runs"):
            jobs = [job] if job is not None else self._children(RUNS)
            running = set(self._children(RUNNING))
            found: list[JobRun] = []
            for name in jobs:
                nodes = sorted(self._children(f"{RUNS}/{name}"), reverse=True)[:max(limit, 0)]
                for node in nodes:
                    try:
                        raw, _ = self.zk.get(f"{RUNS}/{name}/{node}")
                    except NoNodeError:
                        continue
                    run = _run_of(name, node, raw, alive=f"{name}-{node}" in running)
                    if run is not None:
                        found.append(run)
        found.sort(key=lambda r: (r.started_ms, r.run_id), reverse=True)
        return found[:max(limit, 0)]

    def next_due(self) -> dict[str, int]:
        """Job name -> epoch milliseconds of its next scheduled run (jobs never scheduled by
        ``jobs run --every`` are absent)."""
        out: dict[str, int] = {}
        with _typed_errors("reading when the jobs are due"):
            for job in self._children(NEXT_DUE):
                try:
                    raw, _ = self.zk.get(f"{NEXT_DUE}/{job}")
                except NoNodeError:
                    continue
                value = _load(raw)
                if value is not None and isinstance(value.get("next_due_ms"), int):
                    out[job] = value["next_due_ms"]
        return out

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self.zk.get_children(path))
        except NoNodeError:
            return []

    def _trim(self, job: str) -> None:
        nodes = sorted(n for n in self._children(f"{RUNS}/{job}") if n.startswith(RUN_PREFIX))
        for node in nodes[:max(0, len(nodes) - self.history)]:
            for path in (f"{RUNS}/{job}/{node}", f"{RUNNING}/{job}-{node}"):
                with contextlib.suppress(NoNodeError):
                    self.zk.delete(path)


def _dump(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _load(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _run_of(job: str, node: str, raw: bytes, *, alive: bool) -> JobRun | None:
    value = _load(raw)
    if value is None or not isinstance(value.get("started_ms"), int):
        return None
    stored = value.get("outcome")
    outcome: Outcome
    if stored == "running":
        outcome = "running" if alive else "abandoned"
    elif stored in ("success", "failed"):
        outcome = "success" if stored == "success" else "failed"
    else:
        return None
    ended = value.get("ended_ms")
    topics = value.get("topics")
    stats = value.get("stats")
    pid = value.get("pid")
    return JobRun(
        job=job, run_id=f"{job}/{node}",
        topics=tuple(str(t) for t in topics) if isinstance(topics, list) else (),
        started_ms=value["started_ms"], ended_ms=ended if isinstance(ended, int) else None,
        outcome=outcome, stats=stats if isinstance(stats, dict) else {},
        host=str(value.get("host", "")), pid=pid if isinstance(pid, int) else 0)
