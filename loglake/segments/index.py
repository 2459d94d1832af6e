"""Sparse offset and time indexes of one segment (Kafka's ``OffsetIndex`` / ``TimeIndex``).

On-disk formats (big-endian, fixed-size entries, no header, not checksummed)::

    .index      relative offset u32 | file position u32        (8 bytes per entry)
    .timeindex  timestamp i64       | relative offset u32      (12 bytes per entry)

Relative offsets are ``offset - segment base offset``. Offset index entries point at the start
of a batch (its base offset). A time index entry ``(T, o)`` says: the batches before the one
starting at offset ``o`` all have timestamps < T, and T is the largest timestamp up to and
including that batch. Keys strictly increase in both files.

One entry is added per ``index.interval.bytes`` of log (decided by the segment). Files are not
preallocated: each entry is written straight to the file with one ``pwrite`` (so a process crash
loses nothing the OS has), and mirrored in memory for binary search. Entries are only appended or
cut from the end.

A crash can leave a torn last entry, or entries beyond the log (the log write was lost but the
index write was not, after an OS crash). :meth:`OffsetIndex.load` / :meth:`TimeIndex.load` raise
:class:`CorruptIndexError` when the size is not a multiple of the entry size or keys are not
strictly increasing; the segment checks the last entry against its log and rebuilds the index
from the ``.log`` when anything is wrong.

Not thread-safe: owned by one segment, called from the partition's event-loop thread.
"""

from __future__ import annotations

import operator
import os
import struct
from pathlib import Path
from typing import ClassVar, Self

from kio.schema.errors import ErrorCode

from loglake.errors import LoglakeError

RELATIVE_OFFSET_MAX = 2**31 - 1  # Kafka keeps relative offsets within Int.MaxValue


class CorruptIndexError(LoglakeError):
    """An index file is damaged; the segment rebuilds it from its log."""

    code = ErrorCode.kafka_storage_error


class _SparseIndex:
    """Common machinery: a bytearray mirror of the file, binary search, append, truncate."""

    ENTRY: ClassVar[struct.Struct]
    KIND: ClassVar[str]

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int, data: bytes) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.ENTRY.size)
        self._data = bytearray(data)
        self._fd: int | None = None
        self._dirty = False  # written since the last fsync

    @classmethod
    def create(cls, path: Path, base_offset: int, max_index_bytes: int) -> Self:
        """A new empty index; the file is created (truncated if present)."""
        path.write_bytes(b"")
        return cls(path, base_offset, max_index_bytes, b"")

    @classmethod
    def empty(cls, path: Path, base_offset: int, max_index_bytes: int) -> Self:
        """An in-memory empty index whose file is written by the next append (for rebuilds)."""
        return cls(path, base_offset, max_index_bytes, b"")

    @classmethod
    def load(cls, path: Path, base_offset: int, max_index_bytes: int) -> Self:
        """Read and sanity-check an index file (FileNotFoundError if it is missing)."""
        data = path.read_bytes()
        index = cls(path, base_offset, max_index_bytes, data)
        index._check()
        return index

    def _check(self) -> None:
        size = self.ENTRY.size
        if len(self._data) % size:
            raise CorruptIndexError(
                f"{self.KIND} {self.path} has size {len(self._data)}, "
                f"not a multiple of the entry size {size}"
            )
        entries = list(self.ENTRY.iter_unpack(self._data))
        keys = [entry[0] for entry in entries]
        values = [entry[1] for entry in entries]
        if not all(map(operator.lt, keys, keys[1:])) or not all(
            map(operator.le, values, values[1:])
        ):
            raise CorruptIndexError(f"{self.KIND} {self.path} has entries out of order")

    # ----------------------------------------------------------------------------- entries

    def __len__(self) -> int:
        return len(self._data) // self.ENTRY.size

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    @property
    def size_bytes(self) -> int:
        return len(self._data)

    def _entry(self, slot: int) -> tuple[int, int]:
        key, value = self.ENTRY.unpack_from(self._data, slot * self.ENTRY.size)
        return key, value

    def _last(self) -> tuple[int, int] | None:
        count = len(self)
        return self._entry(count - 1) if count else None

    def _floor_slot(self, key: int, field: int = 0) -> int:
        """Slot of the largest entry whose ``field`` (0 key, 1 value) is <= ``key``; -1 if
        none. Searching by value requires values to be non-decreasing (they are)."""
        low, high = 0, len(self) - 1
        found = -1
        while low <= high:
            middle = (low + high) // 2
            if self._entry(middle)[field] <= key:
                found = middle
                low = middle + 1
            else:
                high = middle - 1
        return found

    def _append_raw(self, key: int, value: int) -> None:
        entry = self.ENTRY.pack(key, value)
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(self._fd, entry, len(self._data))
        self._data += entry
        self._dirty = True

    def _truncate_slots(self, slots: int) -> None:
        new_size = slots * self.ENTRY.size
        if new_size >= len(self._data):
            return
        del self._data[new_size:]
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(self._fd, new_size)
        self._dirty = True

    # ------------------------------------------------------------------------------- files

    def write_all(self) -> None:
        """Write the whole in-memory index to its file (after a rebuild)."""
        self.close()
        self.path.write_bytes(bytes(self._data))
        self._dirty = True

    def flush(self) -> None:
        """fsync the index file if it changed since the last flush (even if closed)."""
        if not self._dirty:
            return
        self._dirty = False  # before the fsync: an entry appended meanwhile marks it again
        try:
            if self._fd is not None:
                os.fsync(self._fd)
            else:
                fd = os.open(self.path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except BaseException:
            self._dirty = True
            raise

    def close(self) -> None:
        """Close the file handle; the in-memory entries stay usable for lookups."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class OffsetIndex(_SparseIndex):
    """Maps offsets to file positions of batch starts."""

    ENTRY = struct.Struct(">II")
    KIND = "offset index"

    def append(self, offset: int, position: int) -> None:
        """Add ``(offset, position)``; both must exceed the last entry's."""
        relative = offset - self.base_offset
        last = self._last()
        if last is not None and (relative <= last[0] or position <= last[1]):
            raise ValueError(
                f"offset index entry ({offset}, {position}) not after last entry "
                f"({last[0] + self.base_offset}, {last[1]}) in {self.path}"
            )
        self._append_raw(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the largest entry with offset <= ``offset``, else
        ``(base offset, 0)``: scanning batches from that position finds ``offset``."""
        slot = self._floor_slot(offset - self.base_offset)
        if slot < 0:
            return self.base_offset, 0
        relative, position = self._entry(slot)
        return self.base_offset + relative, position

    def lookup_position(self, position: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry at or before file ``position``, else
        ``(base offset, 0)``: a batch boundary from which to scan towards ``position``."""
        slot = self._floor_slot(position, 1)
        if slot < 0:
            return self.base_offset, 0
        relative, entry_position = self._entry(slot)
        return self.base_offset + relative, entry_position

    def last_entry(self) -> tuple[int, int]:
        """``(offset, position)`` of the last entry, ``(base offset, 0)`` if empty."""
        last = self._last()
        if last is None:
            return self.base_offset, 0
        return self.base_offset + last[0], last[1]

    def truncate_to(self, offset: int) -> None:
        """Drop entries with offset >= ``offset``."""
        self._truncate_slots(self._floor_slot(offset - self.base_offset - 1) + 1)

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or beyond ``position``."""
        count = len(self)
        while count and self._entry(count - 1)[1] >= position:
            count -= 1
        self._truncate_slots(count)


class TimeIndex(_SparseIndex):
    """Maps timestamps to the offset of the batch where that max timestamp was reached."""

    ENTRY = struct.Struct(">qI")
    KIND = "time index"

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add ``(timestamp, offset)`` if the timestamp exceeds the last entry's."""
        last = self._last()
        if last is not None and timestamp <= last[0]:
            return
        relative = offset - self.base_offset
        if last is not None and relative < last[1]:
            raise ValueError(
                f"time index entry offset {offset} before last entry offset "
                f"{last[1] + self.base_offset} in {self.path}"
            )
        self._append_raw(timestamp, relative)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the largest entry with timestamp <= ``timestamp``, else
        ``(-1, base offset)``: no record before that offset has a timestamp >= the target."""
        slot = self._floor_slot(timestamp)
        if slot < 0:
            return -1, self.base_offset
        entry_timestamp, relative = self._entry(slot)
        return entry_timestamp, self.base_offset + relative

    def last_entry(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry, ``(-1, base offset)`` if empty."""
        last = self._last()
        if last is None:
            return -1, self.base_offset
        return last[0], self.base_offset + last[1]

    def truncate_to(self, offset: int) -> None:
        """Drop entries with offset >= ``offset``."""
        relative = offset - self.base_offset
        count = len(self)
        while count and self._entry(count - 1)[1] >= relative:
            count -= 1
        self._truncate_slots(count)
