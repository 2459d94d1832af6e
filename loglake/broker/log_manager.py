"""Partition directories under ``log.dirs`` (the directory part of Kafka's ``LogManager``).

Layout: one directory per hosted replica, ``<log dir>/<topic>-<partition>`` (what is inside
belongs to segments/). Two suffixes mark directories that are no longer a replica:

* ``<topic>-<partition>.<ms>.deleted``: being deleted (Kafka's ``-delete`` directories);
* ``<topic>-<partition>.<ms>.damaged``: a replica that could not be opened, kept for the
  operator while an empty replica re-fetches everything from the leader.

Neither parses as ``<topic>-<partition>``, so no later replica ever opens one.

Crash-safe delete (:meth:`LogManager.delete`), numbered steps:

1. rename the directory to ``<name>.<ms>.deleted`` (atomic; on the event loop, so a replica of
   the same partition created right afterwards starts from an empty directory);
2. in a worker thread: fsync the log directory (the rename is durable), then remove the
   renamed directory's contents and the directory itself.

A crash after step 1 leaves a ``.deleted`` directory: :meth:`LogManager.sweep` removes every
such leftover at start-up, before any replica opens. A crash before step 1 leaves the
replica's directory intact, and whoever decided to delete it decides again (a deleted topic is
gone from ZooKeeper; a replica reassigned away is found unassigned at start-up).

Thread-safety: ``partition_dir``, ``create``, ``delete`` and ``move_aside_damaged`` are called
on the event loop; the removal and ``sweep`` run in worker threads (asyncio's default executor,
never the ZooKeeper one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from pathlib import Path

log = logging.getLogger(__name__)

DELETED_SUFFIX = ".deleted"
DAMAGED_SUFFIX = ".damaged"


class LogManager:
    """The partition directories of one broker's log directory (see the module)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir

    def partition_dir(self, topic: str, index: int) -> Path:
        return self.log_dir / f"{topic}-{index}"

    def create(self, topic: str, index: int) -> Path:
        """The replica's directory, created if missing (with the log directory)."""
        directory = self.partition_dir(topic, index)
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def delete(self, topic: str, index: int) -> asyncio.Future[None] | None:
        """Delete the replica's directory crash-safely (steps 1 and 2 of the module docstring).

        Returns the future of step 2 (a worker thread), or None when there is no directory.
        Must be called on the event loop."""
        directory = self.partition_dir(topic, index)
        aside = self._aside(directory, DELETED_SUFFIX)
        try:
            directory.rename(aside)
        except FileNotFoundError:
            return None
        except OSError as exc:  # the contents still go; a crash leaves the directory
            log.warning("could not move %s aside for deletion: %s", directory, exc)
            aside = directory
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(None, self._remove, aside)

    def move_aside_damaged(self, topic: str, index: int) -> Path | None:
        """Rename a replica's directory to ``<name>.<ms>.damaged`` (kept); the new path, or
        None when there is no directory."""
        directory = self.partition_dir(topic, index)
        if not directory.exists():
            return None
        aside = self._aside(directory, DAMAGED_SUFFIX)
        directory.rename(aside)
        return aside

    def sweep(self) -> list[Path]:
        """Remove every ``.deleted`` directory a crash left behind (blocking: run it in a
        worker thread at start-up, before replicas open). Returns what was removed."""
        removed: list[Path] = []
        if not self.log_dir.is_dir():
            return removed
        for entry in sorted(self.log_dir.iterdir()):
            if entry.name.endswith(DELETED_SUFFIX) and entry.is_dir():
                log.info("removing %s, left over from an interrupted deletion", entry.name)
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
        return removed

    @staticmethod
    def _aside(directory: Path, suffix: str) -> Path:
        return directory.with_name(f"{directory.name}.{int(time.time() * 1000)}{suffix}")

    def _remove(self, directory: Path) -> None:
        """Step 2 (worker thread): make the rename durable, then remove the directory."""
        with contextlib.suppress(OSError):
            fd = os.open(self.log_dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        shutil.rmtree(directory, ignore_errors=True)
