"""The transaction index of one segment: ``<base offset>.txnindex`` (Kafka's ``TransactionIndex``).

One entry per ABORT marker stored in the segment, in marker order; 34 bytes each, big-endian,
no header (Kafka's format, byte for byte)::

    version             i16   0
    producer id         i64
    first offset        i64   the aborted transaction's first offset (may be in an older segment)
    last offset         i64   the ABORT marker's offset (in this segment)
    last stable offset  i64   the partition's LSO right after the marker (Kafka's
                              ``lastStableOffset(completedTxn)``): every later aborted
                              transaction starts at or after it, so a search can stop there

Entries are appended when the marker is appended (broker/partition.py), so ``last offset``
increases through the file and across segments. The file is created at the first entry, or
empty when its segment is sealed (every sealed segment has one: a missing file is damage).

Crash behavior: the index is written with plain ``write`` calls and fsynced with its segment's
flush (segment.py); a crash can lose entries the page cache held or leave a torn last entry.
A torn tail (a length not a multiple of 34) is dropped at load; lost entries are rebuilt when
the partition replays the batches from its producer-state snapshot (every ABORT marker replayed
adds its entry if the index lacks it), and entries whose marker a recovery cut off are
truncated at open. The entries are also kept in memory (:attr:`TransactionIndex.entries`), so
reads never touch the file.

Not thread-safe: one owner (the partition's event-loop thread); :meth:`flush` may run on the
flush worker thread while the owner appends (it only fsyncs an open descriptor).
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from loglake.segments import filenames

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0


@dataclass(frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_entry(entry: AbortedTxn) -> bytes:
    return ENTRY.pack(VERSION, entry.producer_id, entry.first_offset, entry.last_offset,
                      entry.last_stable_offset)


def decode_entries(data: bytes) -> list[AbortedTxn]:
    """Every whole entry of ``data`` (a torn last entry, or one of an unknown version and
    everything after it, is dropped)."""
    entries = []
    for position in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, pid, first, last, lso = ENTRY.unpack_from(data, position)
        if version != VERSION:
            break
        entries.append(AbortedTxn(pid, first, last, lso))
    return entries


class TransactionIndex:
    """The aborted transactions of one segment, in memory and in its ``.txnindex`` file."""

    def __init__(self, path: Path, entries: list[AbortedTxn]) -> None:
        self.path = path
        self.entries = entries
        self._last_offsets = [entry.last_offset for entry in entries]
        self._fd: int | None = None
        self._dirty = False
        self.torn = False  # load() dropped a torn or unreadable tail (PartitionLog checks it)

    @classmethod
    def load(cls, directory: Path, base_offset: int) -> TransactionIndex:
        """The index of the segment at ``base_offset`` (empty if the file does not exist);
        a torn tail is cut from the file too."""
        path = filenames.txn_index_file(directory, base_offset)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls(path, [])
        entries = decode_entries(data)
        index = cls(path, entries)
        if len(entries) * ENTRY_SIZE != len(data):
            index.torn = True
            index._rewrite()
        return index

    def __len__(self) -> int:
        return len(self.entries)

    def contains_marker(self, last_offset: int) -> bool:
        """True if an entry's marker is at ``last_offset``."""
        i = bisect.bisect_left(self._last_offsets, last_offset)
        return i < len(self._last_offsets) and self._last_offsets[i] == last_offset

    def append(self, entry: AbortedTxn) -> None:
        """Add the entry of a marker after every existing one (ValueError otherwise)."""
        if self._last_offsets and entry.last_offset <= self._last_offsets[-1]:
            raise ValueError(
                f"aborted transaction at {entry.last_offset} does not follow the last entry "
                f"({self._last_offsets[-1]}) of {self.path}"
            )
        fd = self._open()
        data = encode_entry(entry)
        size = os.fstat(fd).st_size
        written = 0
        while written < len(data):
            written += os.pwrite(fd, data[written:], size + written)
        self.entries.append(entry)
        self._last_offsets.append(entry.last_offset)
        self._dirty = True

    def collect(self, start_offset: int, end_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [start_offset, end_offset), oldest first, and whether the search
        is complete (an entry's last stable offset reached ``end_offset``: no later entry of
        any segment can overlap)."""
        found = []
        for i in range(bisect.bisect_left(self._last_offsets, start_offset), len(self.entries)):
            entry = self.entries[i]
            if entry.first_offset < end_offset:
                found.append(entry)
            if entry.last_stable_offset >= end_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset`` (log truncation)."""
        keep = bisect.bisect_left(self._last_offsets, offset)
        if keep == len(self.entries):
            return
        del self.entries[keep:]
        del self._last_offsets[keep:]
        if self._fd is not None or self.path.exists():
            fd = self._open()
            os.ftruncate(fd, keep * ENTRY_SIZE)
            self._dirty = True

    def touch(self) -> None:
        """Create the (empty) file if it does not exist: a sealed segment always has one, so a
        missing file is damage (PartitionLog.check_txn_indexes)."""
        if self._fd is None and not self.entries:
            self.path.touch()

    def flush(self) -> None:
        """fsync the file if entries were written or cut since the last flush."""
        fd = self._fd
        if self._dirty and fd is not None:
            self._dirty = False
            os.fsync(fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    def _rewrite(self) -> None:
        """Cut the file to its whole entries (at load, after a torn write)."""
        fd = self._open()
        os.ftruncate(fd, len(self.entries) * ENTRY_SIZE)
        self._dirty = True
