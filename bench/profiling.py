"""Sampling the broker with py-spy during one phase, and summarising the samples.

``py-spy record --format raw`` writes collapsed stacks, one line per distinct stack::

    <thread info>;<frame>;<frame>;...;<innermost frame> <sample count>

where a frame reads ``function (file:line)``. We record with ``--gil``: only the thread holding
the GIL is sampled, so idle threads (the event loop in ``epoll``, kazoo's and the executor's
threads waiting on queues) are left out — py-spy's own idle detection does not catch those — and
percentages are of the samples in which the broker ran Python code. Time spent in system calls
that release the GIL (socket sends, file writes) is therefore not counted. Profiled runs are
slower than unprofiled ones; their throughput is not reported as a result.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from measure import log

PY_SPY_STOP_TIMEOUT_S = 30.0
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


@dataclass(frozen=True)
class ProfileEntry:
    function: str
    file: str
    samples: int
    percent: float


class PySpyRecorder:
    """``py-spy record`` attached to ``pid`` for the ``with`` block; the raw output lands in
    ``output``. Stopped with SIGINT (py-spy then writes its file), SIGKILL after a timeout."""

    def __init__(self, pid: int, output: Path, *, rate: int = 1000) -> None:
        self.pid = pid
        self.output = output
        self.rate = rate
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PySpyRecorder:
        beside_python = Path(sys.executable).with_name("py-spy")  # the venv's, without activation
        binary = str(beside_python) if beside_python.exists() else shutil.which("py-spy")
        if binary is None:
            raise RuntimeError("py-spy not found next to Python or on PATH "
                               "(pip install py-spy into the virtualenv)")
        command = [binary, "record", "--pid", str(self.pid), "--format", "raw",
                   "--rate", str(self.rate), "--gil", "--output", str(self.output)]
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE)
        time.sleep(0.5)  # let it attach before the phase starts
        if self._process.poll() is not None:
            stderr = self._process.stderr.read().decode(errors="replace") \
                if self._process.stderr else ""
            raise RuntimeError(f"py-spy exited at once: {stderr.strip()}")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(PY_SPY_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(PY_SPY_STOP_TIMEOUT_S)
        if not self.output.exists():
            log(f"  py-spy wrote no profile to {self.output}")


def _parse_frame(frame: str) -> tuple[str, str]:
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip(), "?"
    return match["function"], match["file"]


def _stacks(path: Path) -> list[tuple[list[tuple[str, str]], int]]:
    stacks = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [_parse_frame(frame) for frame in stack.split(";")]
        frames = [frame for frame in frames if frame[1] != "?"]  # drop the thread/process label
        if frames:
            stacks.append((frames, int(count)))
    return stacks


@dataclass(frozen=True)
class ProfileSummary:
    """The ``top`` functions by own samples (innermost frame) and by inclusive samples (anywhere
    on the stack, counted once per sample), as a share of ``total_samples``."""

    total_samples: int
    own: list[ProfileEntry]
    inclusive: list[ProfileEntry]


ROOT_SHARE = 0.95
"""Frames on at least this share of all stacks (``<module>``, ``main``, the event loop's
``run_forever``...) are the common root, not a hot spot; the inclusive list leaves them out."""


def summarise(path: Path, *, top: int = 10) -> ProfileSummary:
    """Summarise a raw py-spy profile (see the module docstring for the format)."""
    stacks = _stacks(path)
    total = sum(count for _, count in stacks) or 1
    own: Counter[tuple[str, str]] = Counter()
    inclusive: Counter[tuple[str, str]] = Counter()
    for frames, count in stacks:
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count

    inclusive = Counter({frame: samples for frame, samples in inclusive.items()
                         if samples < ROOT_SHARE * total})

    def entries(counter: Counter[tuple[str, str]]) -> list[ProfileEntry]:
        return [ProfileEntry(function, file, samples, 100.0 * samples / total)
                for (function, file), samples in counter.most_common(top)]

    return ProfileSummary(sum(count for _, count in stacks), entries(own), entries(inclusive))
