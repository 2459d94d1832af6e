"""Detached child processes identified by (pid, start time), so we never signal a reused pid.

A process we start is recorded as a :class:`ProcessHandle`: its pid plus its start time, field 22
of ``/proc/<pid>/stat`` (clock ticks since boot, fixed at fork and unchanged by exec). Every
check and every signal first confirms that the pid still names the process with that start time;
a pid that now belongs to another process is treated as "ours is gone". Signals go through a
pidfd where the kernel offers one (Linux >= 5.3), which closes the window between the check and
the signal; elsewhere :func:`os.kill` is used right after the check.

Processes are started in their own session (``setsid``), with stdin from ``/dev/null`` and
stdout+stderr appended to a log file, so they outlive the starting process (the ``loglake dev up``
command exits while the cluster keeps running) and a Ctrl-C in the starting terminal does not
reach them. A zombie (exited, not yet reaped) counts as not alive; when the caller is the parent,
checks reap the child and remember its exit status (:func:`exit_status`).

Linux only (``/proc``). Functions here are safe to call from one thread at a time per handle.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from loglake.dev.errors import DevError, StartupError

POLL_INTERVAL_S = 0.05
"""How often waits re-check process state."""

KILL_WAIT_S = 5.0
"""How long to wait for a process to vanish after SIGKILL before giving up."""

_exit_codes: dict[int, int] = {}
"""Exit codes of children reaped by this process, by pid (a pid is reused only after a reap)."""


@dataclass(frozen=True)
class ProcessHandle:
    """A process we started: pid plus its /proc start time (the pair is unique across reuse)."""

    pid: int
    start_time: int


def read_start_time(pid: int) -> int | None:
    """Start time (field 22 of /proc/<pid>/stat) of ``pid``, or None if there is no such pid."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[19])


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (after the parenthesised command name, which may hold
    spaces and parentheses itself), or None if the process does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return raw[raw.rindex(b")") + 2 :].decode("ascii").split()


def _reap(pid: int) -> None:
    """Reap ``pid`` if it is an exited child of ours (no-op for other processes)."""
    try:
        reaped, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return
    if reaped == pid:
        _exit_codes[pid] = os.waitstatus_to_exitcode(status)


def exit_status(pid: int) -> int | None:
    """Exit code of a child this process reaped (negative: killed by that signal), else None."""
    return _exit_codes.get(pid)


def is_alive(handle: ProcessHandle) -> bool:
    """True while the process of ``handle`` exists and is not a zombie.

    False once it exited (reaping it if it is our child) or when its pid now names another
    process. A stopped (SIGSTOP) process is alive.
    """
    _reap(handle.pid)
    fields = _stat_fields(handle.pid)
    if fields is None or int(fields[19]) != handle.start_time:
        return False
    return fields[0] not in ("Z", "X")


def run_state(handle: ProcessHandle) -> str | None:
    """The /proc state letter (R, S, D, T = stopped, Z, ...) of the process, None if gone."""
    fields = _stat_fields(handle.pid)
    if fields is None or int(fields[19]) != handle.start_time:
        return None
    return fields[0]


def send_signal(handle: ProcessHandle, signum: int) -> bool:
    """Send ``signum`` to the process of ``handle`` only if it is still that process.

    Returns True if the signal was delivered, False if the process is gone (or its pid was
    reused, in which case nothing is signalled).
    """
    pidfd_open = getattr(os, "pidfd_open", None)
    pidfd_send = getattr(signal, "pidfd_send_signal", None)
    if pidfd_open is not None and pidfd_send is not None:
        try:
            fd = pidfd_open(handle.pid)
        except ProcessLookupError:
            return False
        except OSError as exc:  # kernel without pidfd support: fall back below
            if exc.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
                raise
        else:
            try:
                if not is_alive(handle):
                    return False
                pidfd_send(fd, signum)
                return True
            except ProcessLookupError:
                return False
            finally:
                os.close(fd)
    if not is_alive(handle):
        return False
    try:
        os.kill(handle.pid, signum)
    except ProcessLookupError:
        return False
    return True


def spawn_detached(
    argv: Sequence[str], *, log_path: Path, env: Mapping[str, str] | None = None
) -> ProcessHandle:
    """Start ``argv`` in a new session with stdout+stderr appended to ``log_path``.

    ``argv[0]`` must be an absolute path. Signals the parent ignores or blocks are reset for the
    child. Returns once the process exists (not when it is ready: callers probe readiness).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        pid = os.posix_spawn(
            argv[0],
            list(argv),
            dict(os.environ if env is None else env),
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log_fd, 1),
                (os.POSIX_SPAWN_DUP2, log_fd, 2),
            ],
            setsid=True,
            setsigmask=(),
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM,
                       signal.SIGHUP),
        )
    finally:
        os.close(log_fd)
    start_time = read_start_time(pid)
    if start_time is None:  # cannot happen for our own unreaped child; be explicit anyway
        raise DevError(f"started {argv[0]} as pid {pid} but /proc/{pid}/stat is missing")
    return ProcessHandle(pid, start_time)


def wait_gone(handles: Iterable[ProcessHandle], timeout: float) -> list[ProcessHandle]:
    """Wait up to ``timeout`` seconds for all processes to exit; return those still alive."""
    remaining = list(handles)
    deadline = time.monotonic() + timeout
    while True:
        remaining = [handle for handle in remaining if is_alive(handle)]
        if not remaining or time.monotonic() >= deadline:
            return remaining
        time.sleep(POLL_INTERVAL_S)


def terminate(handles: Iterable[ProcessHandle], *, grace: float) -> None:
    """Stop exactly these processes: SIGTERM, wait up to ``grace`` s, then SIGKILL the rest.

    SIGCONT follows SIGTERM so that a paused (SIGSTOP) process handles it. Returns when every
    process is gone; raises :class:`DevError` if one survives SIGKILL for ``KILL_WAIT_S``
    (for example stuck in uninterruptible I/O). Processes already gone are skipped.
    """
    targets = [handle for handle in handles if send_signal(handle, signal.SIGTERM)]
    for handle in targets:
        send_signal(handle, signal.SIGCONT)
    stragglers = wait_gone(targets, grace)
    kill(stragglers)


def kill(handles: Iterable[ProcessHandle]) -> None:
    """SIGKILL exactly these processes and wait (up to ``KILL_WAIT_S``) until they are gone."""
    targets = [handle for handle in handles if send_signal(handle, signal.SIGKILL)]
    survivors = wait_gone(targets, KILL_WAIT_S)
    if survivors:
        pids = ", ".join(str(handle.pid) for handle in survivors)
        raise DevError(f"processes {pids} did not exit {KILL_WAIT_S:g}s after SIGKILL",
                       hint="check `ps -o pid,stat,wchan -p <pid>` for a stuck process")


def wait_ready(handle: ProcessHandle, ready: Callable[[], bool], *, name: str, log_path: Path,
               timeout: float, not_ready: str, interval: float = 0.1) -> None:
    """Return once ``ready()`` (a readiness probe) is true for the started process ``handle``.

    Raises :class:`StartupError` with the tail of ``log_path`` if the process exits first
    ("``name`` (pid N) exited during startup with exit code C") or ``timeout`` seconds pass
    ("``name`` (pid N) ``not_ready`` within T s"). Stops nothing itself.
    """
    deadline = time.monotonic() + timeout
    while True:
        if not is_alive(handle):
            code = exit_status(handle.pid)
            status = "" if code is None else f" with exit code {code}"
            raise StartupError(f"{name} (pid {handle.pid}) exited during startup{status}",
                               log_path=log_path, log_tail=log_tail(log_path))
        if ready():
            return
        if time.monotonic() >= deadline:
            raise StartupError(f"{name} (pid {handle.pid}) {not_ready} within {timeout:g}s",
                               log_path=log_path, log_tail=log_tail(log_path))
        time.sleep(interval)


def log_tail(path: Path, *, lines: int = 30, max_bytes: int = 65536) -> str:
    """The last ``lines`` lines of a log file (empty if it does not exist)."""
    try:
        with path.open("rb") as file:
            with contextlib.suppress(OSError):
                file.seek(-max_bytes, os.SEEK_END)
            data = file.read()
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])
