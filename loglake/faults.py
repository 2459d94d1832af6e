"""Named crash points for fault-injection tests.

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
"""

from __future__ import annotations

import os
import signal

ENV = "LOGLAKE_CRASH_AT"


def crash_point(name: str) -> None:
    """Die here (SIGKILL, no clean-up) if the environment asks for it."""
    wanted = os.environ.get(ENV, "")
    if wanted and name in wanted.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
