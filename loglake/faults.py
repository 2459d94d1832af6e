"""Named crash points and hold points for fault-injection tests.

A process (broker or clean-up job) started with ``LOGLAKE_CRASH_AT=<point>[,<point>...]`` in its
environment SIGKILLs itself the first time it reaches one of those points, so tests can cut a
multi-step protocol (e.g. tiering: Parquet written -> Delta commit -> bookkeeping) at an exact
step. Without the variable every call is a no-op. Points in use: ``tier-after-write``,
``tier-after-commit``, ``txn-after-prepare-commit``, ``txn-after-prepare-abort`` (broker: the
transaction coordinator right after EndTxn's prepare is written, before any marker),
``txn-between-markers`` (broker: the first destination acknowledged an EndTxn's markers);
``<operation>-before-commit`` and ``<operation>-after-commit``
for the jobs' replace commits, operation one of ``compact``, ``optimize``, ``retention``
(compaction/common.py).

Hold points: a process started with ``LOGLAKE_HOLD_AT=<point>=<file>[,<point>=<file>...]`` skips
the work behind ``<point>`` while ``<file>`` exists (checked each time the point is reached, a
``stat``), so a test can hold a step back and release it by deleting the file, without
restarting the process. Without the variable every check is False. Points in use:
``tier-before-write`` (broker: the tierer leaves led partitions untiered this turn, before
reading a segment; tier lag then grows until the file is gone); ``topic-drop`` (broker:
TopicSync keeps a deleted topic's replicas hosted, retrying every second, until the file is
gone: the window in which a slow ZooKeeper watch leaves them on a loaded box).
"""

from __future__ import annotations

import os
import signal

ENV = "LOGLAKE_CRASH_AT"
HOLD_ENV = "LOGLAKE_HOLD_AT"


def crash_point(name: str) -> None:
    """Die here (SIGKILL, no clean-up) if the environment asks for it."""
    wanted = os.environ.get(ENV, "")
    if wanted and name in wanted.split(","):
        os.kill(os.getpid(), signal.SIGKILL)


def held(name: str) -> bool:
    """Whether the hold point ``name`` holds now (its file exists; see the module)."""
    wanted = os.environ.get(HOLD_ENV, "")
    if not wanted:
        return False
    for item in wanted.split(","):
        point, _, path = item.partition("=")
        if point == name and path and os.path.exists(path):
            return True
    return False
