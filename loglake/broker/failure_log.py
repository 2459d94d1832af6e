"""Logging of failures that repeat: once when they start, a count while they last, once when
they stop -- never a traceback per attempt.

A background task that retries (the tierer every half second, local retention every check
interval) would otherwise write a traceback per attempt while, say, the object store is
unreachable: megabytes of identical lines that bury everything else. Rules, per key (what
fails, e.g. ``("tier", "orders-0")``):

* the first failure of a streak: one WARNING line with the error and its traceback;
* while it keeps failing: one WARNING line per ``interval_s`` with the number of failures since
  the last line, the total since the streak began, and the latest error (no traceback);
* the first success after failures: one INFO line with the total.

:meth:`FailureLog.failed` also returns the streak's length, which callers use for back-off and
status reports.

Thread-safety: none; one owner (the broker's event loop). Time comes from the injected clock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

REPEAT_INTERVAL_S = 300.0
"""Default time between two summary lines of a failure that keeps repeating."""


@dataclass
class _Streak:
    started_s: float
    reported_s: float
    failures: int = 1
    unreported: int = 0
    last_error: str = ""


def describe(exc: BaseException) -> str:
    """``<class>: <message>`` of an exception (the class alone when the message is empty)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class FailureLog:
    """Rate-limited logging of repeating failures (see the module docstring)."""

    def __init__(self, logger: logging.Logger, *, interval_s: float = REPEAT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self._streaks: dict[Hashable, _Streak] = {}

    def failed(self, key: Hashable, what: str, exc: BaseException) -> int:
        """Record a failure of ``what`` (e.g. ``"tiering orders-0"``); returns how many times in
        a row it has failed."""
        now = self.clock()
        error = describe(exc)
        streak = self._streaks.get(key)
        if streak is None:
            self._streaks[key] = _Streak(now, now, last_error=error)
            self.logger.warning("%s failed: %s (retrying; while it keeps failing, one line "
                                "every %.0f s)", what, error, self.interval_s, exc_info=exc)
            return 1
        streak.failures += 1
        streak.unreported += 1
        streak.last_error = error
        if now - streak.reported_s >= self.interval_s:
            self.logger.warning(
                "%s still failing: %d more failure(s) in the last %.0f s, %d since %.0f s ago; "
                "latest: %s", what, streak.unreported, now - streak.reported_s,
                streak.failures, now - streak.started_s, error)
            streak.reported_s, streak.unreported = now, 0
        return streak.failures

    def succeeded(self, key: Hashable, what: str) -> None:
        """``what`` worked: end its streak (one line if it had failed)."""
        streak = self._streaks.pop(key, None)
        if streak is not None:
            self.logger.info("%s works again after %d failure(s) over %.0f s", what,
                             streak.failures, self.clock() - streak.started_s)

    def failures(self, key: Hashable) -> int:
        """Failures in a row of ``key`` so far (0: not failing)."""
        streak = self._streaks.get(key)
        return 0 if streak is None else streak.failures

    def last_error(self, key: Hashable) -> str | None:
        streak = self._streaks.get(key)
        return None if streak is None else streak.last_error

    def forget(self, predicate: Callable[[Hashable], bool]) -> None:
        """Drop the streaks whose key matches (e.g. a deleted topic's), without a line."""
        for key in [k for k in self._streaks if predicate(k)]:
            del self._streaks[key]
