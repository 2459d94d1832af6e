"""loglake.dev.process: detached processes identified by pid + start time (real processes)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loglake.dev import process
from loglake.dev.harness import wait_until
from loglake.dev.process import ProcessHandle

SLEEP = shutil.which("sleep") or "/bin/sleep"
SH = shutil.which("sh") or "/bin/sh"


@pytest.fixture
def started() -> Iterator[list[ProcessHandle]]:
    """Handles started by a test; whatever is still alive is killed afterwards."""
    handles: list[ProcessHandle] = []
    yield handles
    process.kill(handles)


def test_spawn_detached_runs_in_own_session_and_logs(tmp_path: Path,
                                                     started: list[ProcessHandle]) -> None:
    log = tmp_path / "logs" / "child.log"
    handle = process.spawn_detached([SH, "-c", "echo out; echo err >&2; exec sleep 30"],
                                    log_path=log)
    started.append(handle)
    assert process.is_alive(handle)
    assert os.getsid(handle.pid) == handle.pid != os.getsid(0)
    assert handle.start_time == process.read_start_time(handle.pid)
    wait_until(lambda: "err" in log.read_text(), 10, "both lines in the log", interval=0.05)
    assert log.read_text().split() == ["out", "err"]
    assert process.log_tail(log, lines=1) == "err"


def test_terminate_stops_the_process_and_reaps_it(tmp_path: Path,
                                                  started: list[ProcessHandle]) -> None:
    handle = process.spawn_detached([SLEEP, "30"], log_path=tmp_path / "x.log")
    started.append(handle)
    process.terminate([handle], grace=5)
    assert not process.is_alive(handle)
    assert process.exit_status(handle.pid) == -signal.SIGTERM
    assert process.read_start_time(handle.pid) is None  # reaped, not a zombie


def test_terminate_reaches_a_paused_process(tmp_path: Path,
                                            started: list[ProcessHandle]) -> None:
    handle = process.spawn_detached([SLEEP, "30"], log_path=tmp_path / "x.log")
    started.append(handle)
    assert process.send_signal(handle, signal.SIGSTOP)
    wait_until(lambda: process.run_state(handle) == "T", 5, "the process stopped (state T)",
               interval=0.02)
    assert process.is_alive(handle)  # stopped counts as alive
    started_at = time.monotonic()
    process.terminate([handle], grace=5)
    assert time.monotonic() - started_at < 4  # SIGTERM took effect, no SIGKILL needed
    assert process.exit_status(handle.pid) == -signal.SIGTERM


def test_terminate_escalates_to_sigkill(tmp_path: Path, started: list[ProcessHandle]) -> None:
    handle = process.spawn_detached([SH, "-c", "trap '' TERM; exec sleep 30"],
                                    log_path=tmp_path / "x.log")
    started.append(handle)
    time.sleep(0.2)  # let the shell install the trap (inherited by exec'd sleep)
    process.terminate([handle], grace=0.5)
    assert process.exit_status(handle.pid) == -signal.SIGKILL


def test_a_reused_pid_is_never_signalled(tmp_path: Path, started: list[ProcessHandle]) -> None:
    handle = process.spawn_detached([SLEEP, "30"], log_path=tmp_path / "x.log")
    started.append(handle)
    impostor = ProcessHandle(handle.pid, handle.start_time + 1)  # same pid, another process
    assert not process.is_alive(impostor)
    assert not process.send_signal(impostor, signal.SIGKILL)
    process.terminate([impostor], grace=0.1)
    process.kill([impostor])
    assert process.is_alive(handle)


_EXIT_STATUS_CHECK = """
import signal, sys
from pathlib import Path
from loglake.dev import process
handle = process.spawn_detached([sys.argv[1], "-c", "exit 3"], log_path=Path(sys.argv[2]))
assert process.wait_gone([handle], 10) == []
assert process.exit_status(handle.pid) == 3, process.exit_status(handle.pid)
assert not process.send_signal(handle, signal.SIGTERM)
"""


def test_exited_child_is_not_alive(tmp_path: Path) -> None:
    # in a fresh interpreter: in the test session, libraries with threads that reap any child
    # (waitpid(-1)) could take the exit status before we do
    done = subprocess.run([sys.executable, "-c", _EXIT_STATUS_CHECK, SH, str(tmp_path / "x.log")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_log_tail_of_missing_file_is_empty(tmp_path: Path) -> None:
    assert process.log_tail(tmp_path / "nope.log") == ""
