"""Measuring helpers for the benchmarks: process CPU time, progress lines, phase results.

CPU time comes from ``/proc/<pid>/stat`` (fields 14 ``utime`` and 15 ``stime``, in clock ticks
of ``SC_CLK_TCK``, summed over all threads of the process; children are not included). Reading
it is a single small file read, so it is done right before and right after a timed phase.

Progress lines go to stderr (so stdout carries only the results table); a :class:`Progress`
prints at most one line per ``interval`` seconds. Single-threaded use only.
"""

from __future__ import annotations

import json
import math
import os
import selectors
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MB = 1_000_000
"""MB/s in the tables is 10^6 bytes of record payload (values) per second."""


class BenchmarkError(RuntimeError):
    """A phase failed or broke its bounds (count mismatch, deadline, process exit)."""


def run_main(main: Callable[[], int], *, also: tuple[type[Exception], ...] = ()) -> None:
    """A benchmark script's entry point: exit with ``main()``'s status; a BenchmarkError (or
    one of ``also``) becomes one line on stderr and exit status 1."""
    try:
        sys.exit(main())
    except (BenchmarkError, *also) as error:
        log(f"benchmark failed: {error}")
        sys.exit(1)


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` so far, in seconds. Raises OSError if it is gone."""
    with open(f"/proc/{pid}/stat", "rb") as file:
        stat = file.read()
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    fields = stat[stat.rindex(b")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of the whole line
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    """One progress line on stderr, flushed at once."""
    print(message, file=sys.stderr, flush=True)


class Progress:
    """Rate-limited progress lines for a phase of ``total`` records (``update`` is cheap)."""

    def __init__(self, label: str, total: int, *, interval: float = 1.0) -> None:
        self.label = label
        self.total = total
        self.interval = interval
        self.started = time.perf_counter()
        self._next = self.started + interval
        self._last_done = -1

    def update(self, done: int, *, force: bool = False) -> None:
        now = time.perf_counter()
        if (not force and now < self._next) or done == self._last_done:
            return
        self._next = now + self.interval
        self._last_done = done
        elapsed = max(now - self.started, 1e-9)
        percent = 100.0 * done / self.total if self.total else 100.0
        log(f"  {self.label}: {done:>12,} / {self.total:,} records ({percent:5.1f} %), "
            f"{done / elapsed:>12,.0f} rec/s, {elapsed:6.1f} s")


@dataclass(frozen=True)
class PhaseResult:
    """One timed phase of one run: ``records`` of ``payload_bytes`` in ``seconds``; ``cpu_seconds``
    is the server process's CPU time during the phase (None where there is no server)."""

    records: int
    payload_bytes: int
    seconds: float
    cpu_seconds: float | None = None

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / self.seconds / MB

    @property
    def cpu_s_per_million(self) -> float | None:
        if self.cpu_seconds is None:
            return None
        return self.cpu_seconds / self.records * 1_000_000

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "records_per_s": self.records_per_s, "mb_per_s": self.mb_per_s,
                "cpu_s_per_million": self.cpu_s_per_million}


@dataclass(frozen=True)
class PhaseSummary:
    """Medians of one phase over all runs (``cpu_s_per_million`` None without a server)."""

    name: str
    runs: int
    records_per_s: float
    mb_per_s: float
    cpu_s_per_million: float | None
    all_records_per_s: tuple[float, ...]

    @classmethod
    def of(cls, name: str, results: Sequence[PhaseResult]) -> PhaseSummary:
        if not results:
            raise ValueError(f"no results for phase {name}")
        cpu = [r.cpu_s_per_million for r in results if r.cpu_s_per_million is not None]
        return cls(
            name=name,
            runs=len(results),
            records_per_s=statistics.median(r.records_per_s for r in results),
            mb_per_s=statistics.median(r.mb_per_s for r in results),
            cpu_s_per_million=statistics.median(cpu) if cpu else None,
            all_records_per_s=tuple(r.records_per_s for r in results),
        )


def write_results(directory: Path, name: str, document: dict[str, Any]) -> Path:
    """Write a benchmark's results as ``<directory>/<name>.json`` and say where on stdout."""
    directory.mkdir(parents=True, exist_ok=True)
    output = directory / f"{name}.json"
    output.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nresults written to {output}")
    return output


TARGET_COLUMNS = ("target", "needed", "measured", "met")


def report_targets(document: dict[str, Any], targets: Sequence[Sequence[str]], *,
                   measured: str = "measured") -> None:
    """Print the targets table (rows of TARGET_COLUMNS; ``measured`` heads the third column)
    and keep it in ``document["targets"]``; nothing when there are no rows."""
    if not targets:
        return
    print()
    print(format_table(["target", "needed", measured, "met"], targets))
    document["targets"] = [dict(zip(TARGET_COLUMNS, row, strict=True)) for row in targets]


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table whose columns are padded so it also reads well in a terminal."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    separator = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), separator, *(line(row) for row in rows)])


def total_cpu_seconds(pids: Sequence[int]) -> float:
    """The sum of :func:`cpu_seconds` over ``pids`` (e.g. all brokers of a cluster)."""
    return sum(cpu_seconds(pid) for pid in pids)


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """The nearest-rank ``fraction`` quantile (0 < fraction <= 1) of the ascending ``ordered``:
    the smallest value that at least ``fraction`` of all values are <= to."""
    if not ordered or not 0 < fraction <= 1:
        raise ValueError("percentile needs values and 0 < fraction <= 1")
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


def read_with_kcat(command: Sequence[str], label: str, total: int, record_size: int,
                   phase_timeout: float, pid: int, stderr_path: Path) -> PhaseResult:
    """Run a kcat consumer ``command`` that prints one offset per line (``-f '%o\\n'``) and
    exits at the partition's end; count its lines with progress, bounded by
    ``phase_timeout``, and check it read ``total`` records ending at offset ``total - 1``.
    ``pid``: the broker whose CPU seconds are measured around the read."""
    progress = Progress(label, total)
    lines, tail = 0, b""
    with open(stderr_path, "wb") as stderr, selectors.DefaultSelector() as selector:
        cpu_before = cpu_seconds(pid)
        started = time.perf_counter()
        deadline = started + phase_timeout
        kcat = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr,
                                stdin=subprocess.DEVNULL)
        try:
            assert kcat.stdout is not None
            descriptor = kcat.stdout.fileno()
            selector.register(descriptor, selectors.EVENT_READ)
            while True:
                left = deadline - time.perf_counter()
                if left <= 0:
                    raise BenchmarkError(f"kcat read {lines} records in "
                                         f"{phase_timeout:g} s, expected {total}")
                if not selector.select(min(left, 1.0)):
                    progress.update(lines)
                    continue
                chunk = os.read(descriptor, 1 << 20)
                if not chunk:
                    break
                lines += chunk.count(b"\n")
                tail = (tail + chunk)[-64:]
                progress.update(lines)
            code = kcat.wait(max(deadline - time.perf_counter(), 0.1))
            elapsed = time.perf_counter() - started
            cpu = cpu_seconds(pid) - cpu_before
        finally:
            if kcat.poll() is None:
                kcat.kill()
                kcat.wait()
            if kcat.stdout is not None:
                kcat.stdout.close()
    progress.update(lines, force=True)
    if code != 0:
        raise BenchmarkError(f"kcat exited with {code}: {stderr_path.read_text()[-2000:]}")
    last = tail.rstrip(b"\n").rpartition(b"\n")[2]
    if lines != total or last != str(total - 1).encode():
        raise BenchmarkError(f"kcat read {lines} records ending at offset {last!r}, expected "
                             f"{total} ending at {total - 1}")
    return PhaseResult(total, total * record_size, elapsed, cpu)
