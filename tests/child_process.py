"""A long-running child of the test process (a JVM: a Connect worker, a Streams instance) whose
stdout and stderr are appended to one log file.

:class:`LoggedChild` holds the lifecycle the tests drive: start (:meth:`LoggedChild._spawn`),
:meth:`~LoggedChild.alive`, :meth:`~LoggedChild.stop` (SIGTERM: the JVM's shutdown hooks run;
SIGKILL after a grace period), :meth:`~LoggedChild.kill` (SIGKILL: a crash) and
:meth:`~LoggedChild.log_tail`. It signals only the process it started. Not thread-safe: drive it
from the test's thread.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

KILL_WAIT_S = 30.0


class LoggedChild:
    """One child process with its output in ``log_path`` (appended across restarts)."""

    stop_timeout_s = 60.0
    """Default grace period of :meth:`stop` before SIGKILL."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    def _spawn(self, command: Sequence[str]) -> None:
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=log,
                                             stdin=subprocess.DEVNULL)

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def kill(self) -> None:
        """SIGKILL (no shutdown hook runs, as in a crash); return when it is gone."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait(timeout=KILL_WAIT_S)

    def stop(self, *, timeout: float | None = None) -> None:
        """SIGTERM (a clean shutdown); SIGKILL after ``timeout`` seconds (default
        :attr:`stop_timeout_s`)."""
        if self._process is None or self._process.poll() is not None:
            return
        self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(timeout=self.stop_timeout_s if timeout is None else timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
