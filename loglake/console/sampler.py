"""The console's in-process sampler: time series of consumer-group lag and tier lag, for the
lag-over-time charts (Chart.js) of the groups and tiering pages.

Model: every :data:`DEFAULT_INTERVAL_S` seconds the sampler runs its *probes* (blocking
functions registered by page modules with :meth:`Sampler.add_probe`, e.g. the groups page's
"lag of every group's partitions") in a worker thread, one after the other, and records what
they return as one *tick*: a time (ms since the epoch) and a value per series key. A key is a
tuple of strings and ints naming what was measured, e.g. ``("group", "orders-app", "orders",
0)`` or ``("tier", "orders")``. :class:`SeriesStore` keeps the last ``capacity`` ticks (older
ones drop off), at most :data:`MAX_SERIES` keys per tick (a cluster with more partitions in
groups gets the first ones in key order), so memory stays bounded whatever the cluster does.

A probe that raises loses its values for that tick (logged at debug level; the chart shows a
gap); the others still record. Probes run while the application runs (the lifespan hooks
:func:`start` / :func:`stop`), whether or not a page is open, so a chart opened later already
shows history; each probe bounds its own cost (see the groups and tiering modules).

Thread-safety: :class:`SeriesStore` is touched only on the console's event loop (the ticks
are recorded there after the worker thread returns; handlers read it there), so it needs no
lock. Probes run in Starlette's thread pool, never on the loop.

:func:`chart` turns series into Chart.js's data form (``labels`` and ``datasets``), with
``null`` where a series has no value at a tick; the templates hand it to Chart.js unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.routing import BaseRoute

from loglake.console.context import ConsoleContext

log = logging.getLogger(__name__)

Key = tuple[str | int, ...]
Probe = Callable[[], Mapping[Key, float]]

DEFAULT_INTERVAL_S = 3.0
"""Seconds between ticks (``ctx.extras["sampler.interval_s"]`` overrides, e.g. in tests)."""
DEFAULT_CAPACITY = 400
"""Ticks kept: 20 minutes at the default interval."""
MAX_SERIES = 2000
"""Keys kept per tick."""
MAX_DATASETS = 20
"""Lines of one chart (the series with the largest last values; the page says when more)."""

EXTRAS_KEY = "sampler"


@dataclass(frozen=True)
class Tick:
    """One sampling round: when, and the value of each series."""

    t_ms: int
    values: Mapping[Key, float]


class SeriesStore:
    """The last ``capacity`` ticks (see the module; event-loop only)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self._ticks: deque[Tick] = deque(maxlen=capacity)

    def record(self, t_ms: int, values: Mapping[Key, float]) -> None:
        """Add a tick (keys beyond :data:`MAX_SERIES` in key order are dropped)."""
        kept = dict(sorted(values.items(), key=lambda kv: _sort_key(kv[0]))[:MAX_SERIES])
        self._ticks.append(Tick(t_ms, kept))

    def ticks(self) -> list[Tick]:
        return list(self._ticks)

    def latest(self, key: Key) -> float | None:
        """The newest recorded value of ``key`` (None if no tick has it)."""
        for tick in reversed(self._ticks):
            if key in tick.values:
                return tick.values[key]
        return None

    def latest_tick(self) -> Tick | None:
        return self._ticks[-1] if self._ticks else None

    def __len__(self) -> int:
        return len(self._ticks)


def _sort_key(key: Key) -> tuple[tuple[int, str, int], ...]:
    return tuple((0, "", part) if isinstance(part, int) else (1, str(part), 0) for part in key)


@dataclass
class ChartData:
    """Chart.js's ``data``: one label per tick (ms since the epoch) and one dataset per
    series; ``truncated`` counts the series left out (beyond :data:`MAX_DATASETS`)."""

    labels: list[int]
    datasets: list[dict[str, Any]]
    truncated: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"labels": self.labels, "datasets": self.datasets, "truncated": self.truncated}


def chart(store: SeriesStore, label_of: Callable[[Key], str | None], *,
          max_datasets: int = MAX_DATASETS) -> ChartData:
    """The series whose key ``label_of`` names (None: not in this chart) as chart data; series
    sharing a label are summed per tick (e.g. a group's total over its partitions)."""
    ticks = store.ticks()
    by_label: dict[str, list[float | None]] = {}
    for index, tick in enumerate(ticks):
        for key, value in tick.values.items():
            label = label_of(key)
            if label is None:
                continue
            line = by_label.setdefault(label, [None] * len(ticks))
            line[index] = value if line[index] is None else (line[index] or 0.0) + value
    ranked = sorted(by_label.items(), key=lambda kv: (-_last(kv[1]), kv[0]))
    kept = sorted(ranked[:max_datasets])
    return ChartData(labels=[t.t_ms for t in ticks],
                     datasets=[{"label": label, "data": data} for label, data in kept],
                     truncated=max(0, len(ranked) - max_datasets))


def _last(values: Iterable[float | None]) -> float:
    for value in reversed(list(values)):
        if value is not None:
            return value
    return 0.0


@dataclass
class Sampler:
    """Runs the probes every ``interval_s`` and records their values in ``store``."""

    interval_s: float = DEFAULT_INTERVAL_S
    store: SeriesStore = field(default_factory=SeriesStore)
    probes: dict[str, Probe] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    """The last error of each probe that failed on its latest run (shown by the pages)."""
    _task: asyncio.Task[None] | None = None
    _wake: asyncio.Event | None = None

    def add_probe(self, name: str, probe: Probe) -> None:
        """Register (or replace) a blocking probe; it runs from the next tick on."""
        self.probes[name] = probe

    def _run_probes(self) -> dict[Key, float]:
        values: dict[Key, float] = {}
        for name, probe in list(self.probes.items()):
            try:
                values.update(probe())
                self.errors.pop(name, None)
            except Exception as exc:  # one failing probe must not stop the others
                self.errors[name] = str(exc) or type(exc).__name__
                log.debug("console sampler: probe %s failed: %s", name, exc)
        return values

    async def tick(self) -> None:
        """One sampling round now (the probes in a worker thread)."""
        t_ms = int(time.time() * 1000)
        values = await run_in_threadpool(self._run_probes)
        self.store.record(t_ms, values)

    async def run(self) -> None:
        """Tick every ``interval_s`` until cancelled (a slow round delays the next one)."""
        self._wake = asyncio.Event()
        while True:
            started = time.monotonic()
            try:
                await self.tick()
            except Exception:  # pragma: no cover - _run_probes catches the probes' errors
                log.exception("console sampler: a tick failed")
            wait = max(0.05, self.interval_s - (time.monotonic() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)
            self._wake.clear()

    def poke(self) -> None:
        """Take the next sample now rather than at the end of the interval (after an offset
        reset, so the chart shows it at once)."""
        if self._wake is not None:
            self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(),
                                                                  name="console-sampler")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def sampler_of(ctx: ConsoleContext) -> Sampler:
    """The sampler of a :class:`~loglake.console.context.ConsoleContext` (created on first
    use; ``ctx.extras["sampler.interval_s"]`` sets its interval)."""
    found = ctx.extras.get(EXTRAS_KEY)
    if found is None:
        interval = float(ctx.extras.get("sampler.interval_s", DEFAULT_INTERVAL_S))
        found = Sampler(interval_s=interval)
        ctx.extras[EXTRAS_KEY] = found
    assert isinstance(found, Sampler)
    return found


async def start(ctx: ConsoleContext) -> None:
    """Lifespan hook: start sampling (after the page modules registered their probes)."""
    sampler_of(ctx).start()


async def stop(ctx: ConsoleContext) -> None:
    await sampler_of(ctx).stop()


ROUTES: list[BaseRoute] = []
"""No pages of its own (listed in the app's modules for its lifespan hooks)."""
