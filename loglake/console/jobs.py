"""Clean-up jobs: their recent runs, results and when each is due next.

Routes: ``GET /jobs`` (page) and ``GET /fragments/jobs`` (its tables, polled every 2 s);
``?job=NAME`` shows that job's runs only (a job name: lower-case letters, digits, ``-``,
``_``; anything else is a 400).

Reads the run history the jobs write in ZooKeeper (:mod:`loglake.catalog.job_runs`, through
``ClusterCatalog.job_runs()``): per job the newest runs (job, topics, start, duration,
outcome, rows rewritten, bytes reclaimed, files added/removed, the error of a failed run),
``running`` while the job's process holds its ZooKeeper marker (its elapsed time grows on
every refresh), ``abandoned`` when the process died mid-run; and the next-due time that
``loglake jobs run --every`` records.

With a login (``--basic-auth``) a user sees only the runs whose topics their Metadata lists
(a run naming a topic they may not describe is left out whole: its numbers and error cover
that topic; a run over every topic only when they see every topic); the jobs' names and due
times are shown to everyone.

Threads: :func:`snapshot` blocks (ZooKeeper reads) and runs in a worker thread.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from loglake.catalog.job_runs import JobRun, check_job_name
from loglake.console.context import ConsoleContext, blocking, console, render

MAX_RUNS = 100
"""Runs listed (newest first) across the jobs shown."""


@dataclass(frozen=True)
class JobSummary:
    """One job's line: its latest run, latest success and next due time."""

    job: str
    last: JobRun | None
    last_success_ms: int | None
    running: bool
    next_due_ms: int | None


@dataclass(frozen=True)
class JobsView:
    jobs: list[JobSummary]
    runs: list[JobRun]
    now_ms: int
    job: str | None


def summarize(runs: list[JobRun], next_due: dict[str, int]) -> list[JobSummary]:
    """Per job (every job with a run or a due time), from runs sorted newest first (pure)."""
    names = sorted({r.job for r in runs} | set(next_due))
    out = []
    for name in names:
        own = [r for r in runs if r.job == name]
        success = next((r for r in own if r.outcome == "success"), None)
        out.append(JobSummary(
            job=name, last=own[0] if own else None,
            last_success_ms=None if success is None else success.ended_ms,
            running=any(r.outcome == "running" for r in own),
            next_due_ms=next_due.get(name)))
    return out


def visible_runs(runs: list[JobRun], visible: set[str] | None,
                 all_topics: set[str]) -> list[JobRun]:
    """The runs a user seeing ``visible`` topics (None: everything) may see (pure): those
    whose named topics are all visible; a run over every topic (none named) only when every
    topic of the cluster (``all_topics``) is visible, since its numbers cover them all."""
    if visible is None:
        return runs
    return [r for r in runs
            if (set(r.topics) <= visible if r.topics else all_topics <= visible)]


def snapshot(ctx: ConsoleContext, job: str | None) -> JobsView:
    """The runs and due times (blocking); a logged-in user sees the runs of topics their
    Metadata lists (:func:`visible_runs`)."""
    catalog = ctx.catalog()
    store = catalog.job_runs()
    runs = store.runs(job, limit=MAX_RUNS)
    visible = ctx.visible_topics()
    if visible is not None:
        runs = visible_runs(runs, visible, set(catalog.topic_names()))
    due = store.next_due()
    if job is not None:
        due = {k: v for k, v in due.items() if k == job}
    return JobsView(summarize(runs, due), runs, int(time.time() * 1000), job)


def _job(request: Request) -> str | None:
    raw = request.query_params.get("job")
    if raw is None or raw == "":
        return None
    return check_job_name(raw[:100])


async def page(request: Request) -> Response:
    view = await blocking(snapshot, console(request), _job(request))
    return render(request, "jobs.html", view=view)


async def live(request: Request) -> Response:
    view = await blocking(snapshot, console(request), _job(request))
    return render(request, "jobs_live.html", view=view)


ROUTES: list[BaseRoute] = [
    Route("/jobs", page, methods=["GET"]),
    Route("/fragments/jobs", live, methods=["GET"]),
]
