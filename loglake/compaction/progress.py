"""Progress of a Spark job while it runs: a bar of finished tasks, redrawn in place on a
terminal, else a line every ``interval`` seconds (logs, CI).

``SparkProgress`` polls the SparkContext's status tracker from a daemon thread (the tracker is
thread-safe; the driver thread is blocked in ``collect``); it stays silent for jobs shorter
than ``interval``. Use it as a context manager around the action.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pyspark import SparkContext

BAR_WIDTH = 30
_GROUP_KEYS = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


def bar(done: int, total: int, width: int = BAR_WIDTH) -> str:
    """``[#######.......] 3/8`` (``total`` 0: an empty bar)."""
    filled = width * done // total if total else 0
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}"


class SparkProgress:
    """Prints ``<label> [###...] done/total tasks, N s`` while the job group runs."""

    def __init__(self, context: SparkContext, label: str, *, out: TextIO | None = None,
                 interval: float = 2.0) -> None:
        self.context = context
        self.label = label
        self.out = out or sys.stdout
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spark-progress", daemon=True)
        self._started = 0.0
        self._drawn = False
        self._group = f"loglake-{id(self)}"
        self._previous: dict[str, str | None] = {}

    def __enter__(self) -> SparkProgress:
        self._started = time.monotonic()
        self._previous = {key: self.context.getLocalProperty(key) for key in _GROUP_KEYS}
        self.context.setJobGroup(self._group, self.label)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(self.interval + 1)
        for key, value in self._previous.items():  # the thread's earlier job group (or none)
            self.context.setLocalProperty(key, value)  # type: ignore[arg-type]
        if self._drawn and exc_type is None:
            self._draw(final=True)

    def tasks(self) -> tuple[int, int]:
        """(finished, total) tasks of the job group's stages so far."""
        tracker = self.context.statusTracker()
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(self._group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job is not None else []:
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        return done, total

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._draw()

    def _draw(self, *, final: bool = False) -> None:
        done, total = self.tasks()
        if final:
            done = total
        elapsed = time.monotonic() - self._started
        text = f"{self.label} {bar(done, total)} tasks, {elapsed:.0f} s"
        if self.out.isatty():
            self.out.write("\r" + text + ("\n" if final else ""))
        else:
            self.out.write(text + "\n")
        self.out.flush()
        self._drawn = True
