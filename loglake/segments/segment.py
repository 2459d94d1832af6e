"""One log segment: a ``.log`` file of record batches plus its offset and time indexes.

On disk (names from filenames.py): ``<base>.log`` holds RecordBatch v2 batches back to back,
with strictly increasing, non-overlapping offsets starting at or after ``<base>``; the sparse
``.index``/``.timeindex`` (index.py) get one entry per ``index.interval.bytes`` of log, and a
final time index entry when the segment is sealed (rolled or closed), so a sealed segment's
largest timestamp is the last time index entry. ``.txnindex`` (txn_index.py) lists the aborted
transactions whose ABORT marker is in the segment; it is flushed, truncated and deleted with the
segment, and entries whose marker is past the segment's end after recovery are dropped at open.

Writes: :meth:`LogSegment.append` writes the batches with one ``pwrite`` at the end of the file,
then the index entries. Nothing is fsynced unless :meth:`flush` is called. A crash can leave a
torn last batch, garbage after it, or index entries the log lost; :meth:`recover` scans every
batch (framing, magic, CRC, increasing offsets), truncates at the first bad byte and rebuilds
both indexes. :meth:`LogSegment.open` without recovery still sanity-checks the indexes and the
tail (everything after the last offset index entry, CRC included) and falls back to
:meth:`recover` when anything is off.

This class is not thread-safe: one owner (the partition's event-loop thread). :meth:`flush` only
fsyncs and may run on another thread while the owner keeps appending.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from loglake.errors import CorruptRecordError, LoglakeError
from loglake.segments import filenames
from loglake.segments.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    Buffer,
    batch_size_at,
    peek_header,
    read_header,
)
from loglake.segments.index import RELATIVE_OFFSET_MAX, OffsetIndex, TimeIndex
from loglake.segments.records import Record, decode_records
from loglake.segments.txn_index import TransactionIndex

SCAN_CHUNK_BYTES = 64 * 1024
RECOVERY_CHUNK_BYTES = 1024 * 1024


class LogSegment:
    """A segment file and its indexes; see the module docstring for format and crash behavior.

    Attributes kept in memory: ``size`` (bytes in the log), ``next_offset`` (offset after the
    last batch; the base offset when empty), ``max_timestamp`` (-1 when no batch has one) and
    ``offset_of_max_timestamp`` (base offset of the first batch that reached it).
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        fd: int,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        txn_index: TransactionIndex,
        index_interval_bytes: int,
        max_index_bytes: int,
        created_ms: int,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.log_path = filenames.log_file(directory, base_offset)
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index
        self.index_interval_bytes = index_interval_bytes
        self.max_index_bytes = max_index_bytes
        self.created_ms = created_ms
        self.size = os.fstat(fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self._fd: int | None = fd
        self._first_batch_timestamp: int | None = None
        self._bytes_since_index_entry = 0

    # --------------------------------------------------------------------------- lifecycle

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        now_ms: int,
    ) -> LogSegment:
        """A new empty segment; fails if a non-empty ``.log`` with this base already exists."""
        log_path, index_path, time_index_path, txn_path = filenames.segment_files(
            directory, base_offset)
        fd = os.open(log_path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(fd).st_size:
            os.close(fd)
            raise FileExistsError(f"segment {log_path} already exists and is not empty")
        txn_path.unlink(missing_ok=True)  # left by an older segment with this base
        return cls(
            directory,
            base_offset,
            fd=fd,
            offset_index=OffsetIndex.create(index_path, base_offset, max_index_bytes),
            time_index=TimeIndex.create(time_index_path, base_offset, max_index_bytes),
            txn_index=TransactionIndex(txn_path, []),
            index_interval_bytes=index_interval_bytes,
            max_index_bytes=max_index_bytes,
            created_ms=now_ms,
        )

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        now_ms: int,
        recover: bool,
        verify: bool = False,
        on_recovered_batch: Callable[[BatchHeader], None] | None = None,
    ) -> tuple[LogSegment, int]:
        """Open an existing segment; returns it and the number of bytes recovery truncated.

        With ``recover`` every batch is validated and the indexes rebuilt. Otherwise the
        indexes are loaded and checked and the tail after the last index entry is validated
        (with ``verify``: every batch's framing, CRC and offsets, without rebuilding the
        indexes); any problem (missing or corrupt index, torn tail, a bad batch) falls back to
        full recovery, which truncates at the first bad byte.
        ``on_recovered_batch`` sees every valid batch when a full recovery runs.
        """
        log_path, index_path, time_index_path, _ = filenames.segment_files(directory, base_offset)
        fd = os.open(log_path, os.O_RDWR)
        offset_index: OffsetIndex
        time_index: TimeIndex
        needs_recovery = recover
        try:
            offset_index = OffsetIndex.load(index_path, base_offset, max_index_bytes)
            time_index = TimeIndex.load(time_index_path, base_offset, max_index_bytes)
        except (FileNotFoundError, LoglakeError):
            offset_index = OffsetIndex.empty(index_path, base_offset, max_index_bytes)
            time_index = TimeIndex.empty(time_index_path, base_offset, max_index_bytes)
            needs_recovery = True
        segment = cls(
            directory,
            base_offset,
            fd=fd,
            offset_index=offset_index,
            time_index=time_index,
            txn_index=TransactionIndex.load(directory, base_offset),
            index_interval_bytes=index_interval_bytes,
            max_index_bytes=max_index_bytes,
            created_ms=now_ms,
        )
        if not needs_recovery:
            try:
                if verify:
                    segment.verify()
                segment._load_tail_state(verify_crc=True)
            except LoglakeError:
                needs_recovery = True
        truncated = segment.recover(on_recovered_batch) if needs_recovery else 0
        segment.txn_index.truncate_to(segment.next_offset)
        return segment, truncated

    def _load_tail_state(self, *, verify_crc: bool) -> None:
        """Compute next offset and max timestamp from the indexes plus a scan of the tail.

        Raises a LoglakeError if the indexes disagree with the log or the tail is invalid.
        """
        index_offset, position = self.offset_index.last_entry()
        if position > self.size or (len(self.offset_index) and position == self.size):
            raise CorruptRecordError(f"offset index of {self.log_path} points past the log")
        max_timestamp, offset_of_max = self.time_index.last_entry()
        next_offset = self.base_offset
        first = True
        for header in self.scan(position, verify_crc=verify_crc):
            if first and len(self.offset_index) and header.base_offset != index_offset:
                raise CorruptRecordError(
                    f"offset index of {self.log_path} maps offset {index_offset} to a batch "
                    f"at base offset {header.base_offset}"
                )
            if header.base_offset < next_offset:
                raise CorruptRecordError(f"offsets go backwards in {self.log_path}")
            first = False
            next_offset = header.next_offset
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, header.base_offset
        time_offset = self.time_index.last_entry()[1]
        if len(self.time_index) and time_offset >= next_offset:
            raise CorruptRecordError(f"time index of {self.log_path} points past the log")
        self.next_offset = next_offset
        self.max_timestamp = max_timestamp
        self.offset_of_max_timestamp = offset_of_max
        self._bytes_since_index_entry = self.size - position

    def verify(self) -> None:
        """Check every batch (framing, magic, CRC, increasing offsets within the segment's
        range) without touching the indexes; CorruptRecordError at the first bad one."""
        next_offset = self.base_offset
        for header in self.scan(0, verify_crc=True, chunk_size=RECOVERY_CHUNK_BYTES):
            if (header.base_offset < next_offset
                    or header.last_offset - self.base_offset > RELATIVE_OFFSET_MAX):
                raise CorruptRecordError(
                    f"batch at byte {header.position} of {self.log_path} has offsets "
                    f"{header.base_offset}..{header.last_offset}, expected >= {next_offset}"
                )
            next_offset = header.next_offset

    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None) -> int:
        """Validate every batch, truncate at the first invalid one, rebuild both indexes.

        Returns the number of bytes truncated (0 when the whole log was valid).
        """
        self.offset_index.close()
        self.time_index.close()
        self.offset_index = OffsetIndex.empty(
            self.offset_index.path, self.base_offset, self.max_index_bytes
        )
        self.time_index = TimeIndex.empty(
            self.time_index.path, self.base_offset, self.max_index_bytes
        )
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self._first_batch_timestamp = None
        self._bytes_since_index_entry = 0
        valid_end = 0
        try:
            for header in self.scan(0, verify_crc=True, chunk_size=RECOVERY_CHUNK_BYTES):
                if (
                    header.base_offset < self.next_offset
                    or header.last_offset - self.base_offset > RELATIVE_OFFSET_MAX
                ):
                    break
                self._index_batch(header, header.position)
                self.next_offset = header.next_offset
                valid_end = header.end_position
                if on_batch is not None:
                    on_batch(header)
        except LoglakeError:
            pass
        truncated = self.size - valid_end
        if truncated:
            os.ftruncate(self._require_fd(), valid_end)
            self.size = valid_end
        self.offset_index.write_all()
        self.time_index.write_all()
        return truncated

    def seal(self) -> None:
        """The segment stops being active: record the final max timestamp, close index files."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.close()
        self.time_index.close()

    def flush(self) -> None:
        """fsync the log and the index files."""
        if self._fd is not None:
            os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Seal and close every file handle (no fsync: call :meth:`flush` first if needed)."""
        self.seal()
        self.txn_index.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        """Close and remove the files: rename each to ``*.deleted``, then unlink.

        A crash in between leaves ``*.deleted`` files (removed on the next open) or index files
        without a log (also removed on open).
        """
        self.close()
        paths = (self.log_path, self.offset_index.path, self.time_index.path,
                 self.txn_index.path)
        renamed = []
        for path in paths:
            target = filenames.deleted_file(path)
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, target)
                renamed.append(target)
        for path in renamed:
            path.unlink(missing_ok=True)

    def _require_fd(self) -> int:
        if self._fd is None:
            raise ValueError(f"segment {self.log_path} is closed")
        return self._fd

    # ------------------------------------------------------------------------------ writes

    def append(self, data: Buffer, headers: Sequence[BatchHeader]) -> None:
        """Append validated batches at the end of the log.

        ``headers`` describe the batches of ``data`` as they will be stored: final offsets and
        timestamps, positions in this segment's file (the first one equal to :attr:`size`).
        On a write error the log is cut back to its previous size and the error re-raised.
        """
        fd = self._require_fd()
        position = self.size
        if headers[0].position != position:
            raise ValueError(
                f"batch position {headers[0].position} is not the end {position} of {self.log_path}"
            )
        view = memoryview(data)
        try:
            written = 0
            while written < len(view):
                written += os.pwrite(fd, view[written:], position + written)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, position)
            raise
        for header in headers:
            self._index_batch(header, header.position)
        self.size = position + len(view)
        self.next_offset = headers[-1].next_offset

    def _index_batch(self, header: BatchHeader, position: int) -> None:
        if self._first_batch_timestamp is None and position == 0:
            self._first_batch_timestamp = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.base_offset
        if self._bytes_since_index_entry > self.index_interval_bytes:
            self.offset_index.append(header.base_offset, position)
            if self.max_timestamp >= 0:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += header.batch_length + LOG_OVERHEAD

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; returns bytes removed.

        Truncation is at batch granularity: a batch containing ``offset`` is removed whole, so
        ``next_offset`` afterwards may be below ``offset``.
        """
        header = self.translate_offset(offset)
        if header is None:
            return 0
        removed = self.size - header.position
        self.offset_index.truncate_to(header.base_offset)
        self.time_index.truncate_to(header.base_offset)
        os.ftruncate(self._require_fd(), header.position)
        self.size = header.position
        if header.position == 0:
            self._first_batch_timestamp = None
        self._load_tail_state(verify_crc=False)
        self.txn_index.truncate_to(self.next_offset)
        return removed

    # ------------------------------------------------------------------------------- reads

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes of the log from ``position`` (fewer at the end of the file)."""
        size = max(0, min(size, self.size - position))
        if size == 0:
            return b""
        return os.pread(self._require_fd(), size, position)

    def scan(
        self,
        position: int = 0,
        *,
        verify_crc: bool = False,
        chunk_size: int = SCAN_CHUNK_BYTES,
    ) -> Iterator[BatchHeader]:
        """Batch headers from ``position`` (a batch start) to the end of the log.

        Reads the file in chunks. Without ``verify_crc`` only headers are parsed; with it
        each batch is fully read and checked. Raises CorruptRecordError at a torn or invalid
        batch after yielding the valid ones before it.
        """
        fd = self._require_fd()
        end = self.size
        window = b""
        window_start = position
        while position < end:
            offset = position - window_start
            if len(window) - offset < HEADER_SIZE:
                window = os.pread(fd, min(max(chunk_size, HEADER_SIZE), end - position), position)
                window_start, offset = position, 0
            if verify_crc:
                if len(window) - offset >= LOG_OVERHEAD:
                    size = batch_size_at(window, offset)
                    if len(window) - offset < size <= end - position:
                        window = os.pread(fd, max(chunk_size, size), position)
                        window_start, offset = position, 0
                header = read_header(window, offset, position=position, verify_crc=True)
            else:
                header = peek_header(window, offset, position=position)
                if position + header.size > end:
                    raise CorruptRecordError(
                        f"truncated record batch at byte {position} of {self.log_path}"
                    )
            yield header
            position += header.size

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchHeader | None:
        """The first batch at or after ``start_position`` whose last offset >= ``offset``."""
        position = max(start_position, self.offset_index.lookup(offset)[1])
        for header in self.scan(position):
            if header.last_offset >= offset:
                return header
        return None

    def first_batch_timestamp(self) -> int:
        """maxTimestamp of the first batch (-1 if empty): the base of Kafka's segment.ms."""
        if self._first_batch_timestamp is None:
            if self.size == 0:
                return -1
            self._first_batch_timestamp = peek_header(
                os.pread(self._require_fd(), HEADER_SIZE, 0)
            ).max_timestamp
        return self._first_batch_timestamp

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with timestamp >= ``timestamp`` and
        offset >= ``start_offset``; None if this segment has none."""
        if self.max_timestamp < timestamp:
            return None
        index_offset = self.time_index.lookup(timestamp)[1]
        position = self.offset_index.lookup(max(index_offset, start_offset))[1]
        for header in self.scan(position):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            for record in self.decode(header):
                if record.timestamp >= timestamp and record.offset >= start_offset:
                    return record.offset, record.timestamp
        return None

    def decode(self, header: BatchHeader) -> list[Record]:
        """The records of a batch of this segment (read from disk and decompressed)."""
        data = self.read(header.position, header.size)
        return decode_records(data, header, 0)

    @property
    def is_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full
