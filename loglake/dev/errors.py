"""Errors of the dev tooling (ZooKeeper and broker processes started for development and tests).

They derive from :class:`loglake.errors.LoglakeError` so there is one exception root, but they
never reach the wire: they are for the operator at a terminal or a test author. Each carries a
one-line ``message`` and an optional ``hint`` saying what to do; :meth:`DevError.one_line` is what
the CLI prints.
"""

from __future__ import annotations

from pathlib import Path

from loglake.errors import LoglakeError


class DevError(LoglakeError):
    """Base of the dev-cluster errors."""

    def one_line(self) -> str:
        """The message and hint on a single line (for ``loglake: error: ...``)."""
        text = self.message if self.hint is None else f"{self.message} (hint: {self.hint})"
        return " ".join(text.split("\n"))


class MissingDependencyError(DevError):
    """Java or the ZooKeeper jars are not installed (or not where we were told to look)."""


class StartupError(DevError):
    """A process exited during startup or did not become ready in time.

    ``str()`` of the exception includes the tail of the process's log file so a failing test shows
    why; :meth:`one_line` names the log file and its last line only.
    """

    def __init__(
        self, message: str, *, log_path: Path | None = None, log_tail: str = "",
        hint: str | None = None,
    ) -> None:
        self.log_path = log_path
        self.log_tail = log_tail
        super().__init__(message, hint=hint)
        if log_tail:
            self.args = (f"{self.args[0]}\n--- last lines of {log_path} ---\n{log_tail}",)

    def one_line(self) -> str:
        last = next((line for line in reversed(self.log_tail.splitlines()) if line.strip()), "")
        text = self.message
        if self.log_path is not None:
            text += f"; see {self.log_path}"
        if last:
            text += f" (last log line: {last.strip()})"
        if self.hint is not None:
            text += f" (hint: {self.hint})"
        return " ".join(text.split("\n"))


class ClusterStateError(DevError):
    """The dev cluster is not in the state the operation needs (already running, not started)."""
