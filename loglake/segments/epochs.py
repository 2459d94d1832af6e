"""Leader epoch cache of a partition (Kafka's ``LeaderEpochFileCache``, KIP-101/KIP-279).

Each entry ``(epoch, start_offset)`` says: the first offset written by the leader of ``epoch``.
Epochs and start offsets both strictly increase. File ``leader-epoch-checkpoint`` (Kafka's
format, written durably after every change, see checkpoint.py)::

    0                      version
    <count>
    <epoch> <start offset>   one line per entry, oldest first

A crash leaves the previous or the new file. A missing or unreadable file yields an empty cache
(:meth:`LeaderEpochCache.load` reports it so the log can rebuild the cache from the
``partitionLeaderEpoch`` of its batches).

Not thread-safe: the partition's event-loop thread owns it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from pathlib import Path

from loglake.segments import checkpoint

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """In-memory list of epoch entries mirrored to the checkpoint file on every change."""

    def __init__(
        self,
        path: Path,
        log_end_offset: Callable[[], int],
        entries: list[tuple[int, int]] | None = None,
    ) -> None:
        self.path = path
        self._log_end_offset = log_end_offset
        self._entries: list[tuple[int, int]] = list(entries or [])

    @classmethod
    def load(cls, path: Path, log_end_offset: Callable[[], int]) -> tuple[LeaderEpochCache, bool]:
        """The cache from ``path`` and whether the file was usable (False: missing/corrupt)."""
        lines = checkpoint.parse_entries(path)
        entries: list[tuple[int, int]] = []
        valid = lines is not None
        for line in lines or []:
            parts = line.split(" ")
            if len(parts) != 2 or not all(part.isdigit() for part in parts):
                valid = False
                break
            epoch, start = int(parts[0]), int(parts[1])
            if entries and (epoch <= entries[-1][0] or start < entries[-1][1]):
                valid = False
                break
            entries.append((epoch, start))
        return cls(path, log_end_offset, entries if valid else []), valid

    @property
    def entries(self) -> list[tuple[int, int]]:
        """A copy of the ``(epoch, start_offset)`` entries, oldest first."""
        return list(self._entries)

    def latest_epoch(self) -> int | None:
        """The newest epoch, None when empty."""
        return self._entries[-1][0] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns True if the cache changed.

        As in Kafka: a repeat of the latest epoch with a start offset that is not smaller is a
        no-op; otherwise entries with an epoch >= ``epoch`` or a start offset >= ``start_offset``
        are removed first (they can only come from a diverged log), then the entry is added.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if self._entries:
            latest_epoch, latest_start = self._entries[-1]
            if latest_epoch == epoch and start_offset >= latest_start:
                return False
        self._entries = [(e, s) for e, s in self._entries if e < epoch and s < start_offset]
        self._entries.append((epoch, start_offset))
        self._write()
        return True

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        """``(epoch, end offset)`` for an OffsetsForLeaderEpoch request (KIP-279).

        The end offset is the start offset of the next higher epoch, or the log end offset for
        the latest epoch. For an epoch we never saw: the largest known epoch below it and the
        start of the next one; ``(-1, -1)`` if it is above every known epoch (or is -1).
        """
        if epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._entries[-1][0] == epoch:
            return epoch, self._log_end_offset()
        epochs = [e for e, _ in self._entries]
        higher = bisect.bisect_right(epochs, epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        higher_start = self._entries[higher][1]
        if higher == 0:
            return epoch, higher_start
        return self._entries[higher - 1][0], higher_start

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        kept = [(e, s) for e, s in self._entries if s < end_offset]
        if kept != self._entries:
            self._entries = kept
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop entries wholly before it and move the
        start of the epoch covering it up to ``start_offset``."""
        below = [entry for entry in self._entries if entry[1] < start_offset]
        if not below:
            return
        kept = [entry for entry in self._entries if entry[1] >= start_offset]
        if not kept or kept[0][1] > start_offset:
            kept.insert(0, (below[-1][0], start_offset))
        if kept != self._entries:
            self._entries = kept
            self._write()

    def clear(self) -> None:
        self._entries = []
        self._write()

    def rebuild(self, entries: list[tuple[int, int]]) -> None:
        """Replace all entries (after rebuilding from batch headers) and checkpoint."""
        self._entries = []
        for epoch, start in entries:
            if not self._entries or epoch > self._entries[-1][0]:
                self._entries.append((epoch, start))
        self._write()

    def _write(self) -> None:
        checkpoint.write_durably(
            self.path,
            checkpoint.format_entries([f"{epoch} {start}" for epoch, start in self._entries]),
        )
