"""PartitionLog: the hot-tier log of one partition (Kafka's ``UnifiedLog`` + ``LogLoader``).

On disk: one directory per partition holding segments and checkpoints (names and formats in
filenames.py, segment.py, index.py, epochs.py, checkpoint.py). Segments cover increasing,
non-overlapping offset ranges; the last one is the *active* segment that takes appends.

Invariants:
- ``log_start_offset <= log_end_offset``; offsets below ``log_start_offset`` are invisible.
- ``recovery_point <= log_end_offset``; everything below the recovery point is fsynced and was
  validated, so a restart only re-validates segments that may hold offsets at or above it.
- Appended batches are stored byte for byte as produced, except baseOffset and
  partitionLeaderEpoch (outside the CRC) and, for LogAppendTime topics, the timestamp-type bit and
  maxTimestamp (CRC recomputed).

Crash behavior: after an unclean stop (no ``clean-shutdown`` marker, or an unreadable
recovery-point checkpoint) :meth:`PartitionLog.open` validates every batch from the recovery
point (from the start if the checkpoint is unusable), truncates the log at the first torn or
corrupt batch, deletes the segments after it, rebuilds indexes, and then fsyncs and checkpoints
the result. After a clean stop the indexes are trusted but every batch is still verified
(framing, CRC, offsets: a bit flip or a truncated sealed segment is found at open, at about
2.7 GB/s of page-cached log; Kafka skips this after a clean stop). Any damage beyond a crash's
torn active tail is reported in :attr:`PartitionLog.recovery_damage`, and the log is never left
with a hole: a segment whose offsets do not continue the previous one's is deleted with every
later one, so the log ends at the first bad byte and replication re-fetches the rest.
Aborted transactions live in each segment's ``.txnindex`` (txn_index.py): the partition adds
an entry per ABORT marker (:meth:`PartitionLog.add_aborted_txn`), entries go with their segment
(retention, truncation, deletion) and :meth:`PartitionLog.aborted_transactions` reads the
in-memory copies. :attr:`PartitionLog.first_recovered_offset` tells the partition where
recovery started, so it replays its producer state (and re-adds lost index entries) from at or
below there; :attr:`PartitionLog.before_roll` lets it snapshot that state at every roll.
Segment deletion is a numbered protocol:
(1) the new log start offset is checkpointed durably, (2) the segment's files are renamed to
``*.deleted``, (3) unlinked; leftovers of an interrupted (2)/(3) are removed on open.

Thread-safety: a PartitionLog is owned by the broker's asyncio event-loop thread; every method
must be called from it. The exception is the periodic flush, split in three so its fsyncs run
in a worker thread while the loop keeps appending: :meth:`PartitionLog.prepare_flush` (loop)
picks what is due, :meth:`FlushJob.run` (any thread) fsyncs it holding :attr:`PartitionLog.io_lock`,
:meth:`PartitionLog.complete_flush` (loop) advances the recovery point unless the log was cut
meanwhile. Everything that closes or deletes segment files on the loop (close, delete,
truncation, retention) holds ``io_lock`` too, so a file is never closed under a running fsync;
the loop waits for it only while a flush of the same partition is in progress.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from loglake.config import TopicConfig
from loglake.errors import (
    InvalidRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from loglake.segments import checkpoint, filenames, validation
from loglake.segments.batch import (
    CRC_OFFSET,
    LOG_APPEND_TIME,
    BatchHeader,
    parse_batches,
    patch_base_offset,
    patch_leader_epoch,
    set_log_append_time,
)
from loglake.segments.epochs import LeaderEpochCache
from loglake.segments.index import RELATIVE_OFFSET_MAX
from loglake.segments.segment import RECOVERY_CHUNK_BYTES, LogSegment
from loglake.segments.txn_index import AbortedTxn

CHECKPOINT_INTERVAL_MS = 60_000  # Kafka's log.flush.offset.checkpoint.interval.ms default


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What an append stored: offsets, the append time (-1 for CreateTime), and the batch
    headers as written (positions are byte offsets in the active segment's ``.log``)."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    batches: list[BatchHeader]


@dataclass(slots=True)
class RecoveryDamage:
    """What opening a log found wrong beyond a crash's torn active tail: the log was cut at
    ``truncated_at`` (the first bad byte) and the segments after it, ``dropped_segments`` (base
    offsets), were deleted, so the log stays contiguous. The partition must re-fetch from
    ``truncated_at`` (or lose those records if no other replica has them)."""

    truncated_at: int
    reason: str
    dropped_segments: list[int]


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A snapshot of one segment, for retention and tiering decisions."""

    base_offset: int
    next_offset: int
    size_bytes: int
    max_timestamp: int
    log_path: Path
    active: bool


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _holding_io_lock(method: _Method) -> _Method:
    """Run a PartitionLog method holding its ``io_lock`` (it closes or deletes files)."""

    @functools.wraps(method)
    def locked(self: PartitionLog, *args: Any, **kwargs: Any) -> Any:
        with self.io_lock:
            return method(self, *args, **kwargs)

    return cast(_Method, locked)


@dataclass
class FlushJob:
    """fsyncs planned by :meth:`PartitionLog.prepare_flush`: ``segments`` (those holding
    offsets below ``target`` not yet durable) and the directory if files were created in it.
    :meth:`run` may be called from any thread; it holds the log's ``io_lock``."""

    log: PartitionLog
    target: int
    generation: int
    segments: list[LogSegment]
    directory: bool

    def run(self) -> None:
        with self.log.io_lock:
            live = {id(segment) for segment in self.log._segments}
            for segment in self.segments:
                if id(segment) in live:  # not deleted (retention, truncation) meanwhile
                    segment.flush()
            if self.directory:
                checkpoint.fsync_directory(self.log.directory)


class PartitionLog:
    """The log of one partition; open it with :meth:`PartitionLog.open`."""

    def __init__(
        self,
        directory: Path,
        config: TopicConfig,
        clock: Callable[[], float],
        segments: list[LogSegment],
        log_start_offset: int,
        had_clean_shutdown: bool,
    ) -> None:
        self.directory = directory
        self.config = config
        self._clock = clock
        self._segments = segments
        self._bases = [segment.base_offset for segment in segments]
        self._log_start_offset = log_start_offset
        self._next_offset = segments[-1].next_offset
        self._recovery_point = self._next_offset
        self.had_clean_shutdown = had_clean_shutdown
        self.recovery_damage: RecoveryDamage | None = None  # set by open()
        now_ms = self._now_ms()
        self._last_flush_ms = now_ms
        self._last_checkpoint_ms = now_ms
        self._checkpointed: tuple[int, int] | None = None
        self._pending_roll_flush: int | None = None
        self._directory_dirty = False
        self._closed = False
        self.io_lock = threading.RLock()  # fsyncs in a worker vs. closing files on the loop
        self._generation = 0  # bumped by every cut: a flush planned before it must not count
        self.on_roll: Callable[[], None] | None = None  # told after a segment is sealed
        # told the new segment's base offset before a non-empty active segment is sealed
        # (the partition snapshots its producer state as of that offset)
        self.before_roll: Callable[[int], None] | None = None
        # base offset of the first segment open() had to recover (None: none was)
        self.first_recovered_offset: int | None = None
        self.leader_epoch_cache, self._epoch_cache_valid = LeaderEpochCache.load(
            directory / filenames.LEADER_EPOCH_CHECKPOINT, lambda: self._next_offset
        )

    # ---------------------------------------------------------------------------- loading

    @classmethod
    def open(
        cls,
        directory: Path,
        config: TopicConfig,
        *,
        clock: Callable[[], float] = time.time,
    ) -> PartitionLog:
        """Open (creating if missing) the partition log in ``directory``, recovering as needed.

        Steps: remove leftovers (``*.tmp``, ``*.deleted``, indexes without a log); read the
        checkpoints and the clean-shutdown marker; open every segment, recovering those that
        may hold unflushed data (all of them if the recovery point is unknown) and deleting
        the segments after a truncation; reconcile the log start offset and leader epoch
        cache; fsync what was recovered, write checkpoints, remove the marker.
        """
        directory.mkdir(parents=True, exist_ok=True)
        now_ms = int(clock() * 1000)
        log_bases: list[int] = []
        index_files: list[tuple[int, Path]] = []
        for entry in directory.iterdir():
            if filenames.is_leftover(entry.name):
                entry.unlink(missing_ok=True)
                continue
            parsed = filenames.parse_segment_name(entry.name)
            if parsed is None:
                continue
            base, suffix = parsed
            if suffix == filenames.LOG_SUFFIX:
                log_bases.append(base)
            else:
                index_files.append((base, entry))
        log_bases.sort()
        for base, path in index_files:
            if base not in log_bases:
                path.unlink(missing_ok=True)

        marker = directory / filenames.CLEAN_SHUTDOWN_MARKER
        recovery_checkpoint = checkpoint.read_offset(
            directory / filenames.RECOVERY_POINT_CHECKPOINT
        )
        start_checkpoint = checkpoint.read_offset(directory / filenames.LOG_START_OFFSET_CHECKPOINT)
        clean = marker.exists() and recovery_checkpoint is not None
        recover_from = recovery_checkpoint if recovery_checkpoint is not None else 0

        recovered_epochs: list[tuple[int, int]] = []

        def note_epoch(header: BatchHeader) -> None:
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (not recovered_epochs or recovered_epochs[-1][0] != epoch):
                recovered_epochs.append((epoch, header.base_offset))

        segments: list[LogSegment] = []
        recovered: list[LogSegment] = []
        damage: RecoveryDamage | None = None
        dropping = False
        for i, base in enumerate(log_bases):
            if not dropping and segments and segments[-1].next_offset != base:
                # a truncated, missing or emptied segment: the log would have a hole here, so
                # nothing from here on is kept (replication re-fetches it)
                dropping = True
                cut = segments[-1].next_offset
                reason = f"no segment holds offsets {cut}..{base - 1}"
                if damage is None:
                    damage = RecoveryDamage(cut, reason, [])
                else:
                    damage.reason += f"; {reason}"
            if dropping:
                assert damage is not None
                damage.dropped_segments.append(base)
                for path in filenames.segment_files(directory, base):
                    path.unlink(missing_ok=True)
                continue
            is_last = i == len(log_bases) - 1
            needs_recovery = not clean and (is_last or log_bases[i + 1] > recover_from)
            segment, truncated = LogSegment.open(
                directory,
                base,
                index_interval_bytes=config.index_interval_bytes,
                max_index_bytes=config.segment_index_bytes,
                now_ms=now_ms,
                recover=needs_recovery,
                verify=True,
                on_recovered_batch=note_epoch,
            )
            segments.append(segment)
            if needs_recovery or truncated:
                recovered.append(segment)
            if truncated and not (is_last and needs_recovery):
                # damage, not a crash's torn tail (the next segment, if any, is then dropped)
                damage = RecoveryDamage(segment.next_offset,
                                        f"{truncated} bad bytes cut from the end of "
                                        f"{segment.log_path.name}", [])
        for segment in segments[:-1]:
            segment.seal()

        log_start = start_checkpoint if start_checkpoint is not None else 0
        if segments:
            log_start = max(log_start, segments[0].base_offset)
            if log_start > segments[-1].next_offset:
                for segment in segments:
                    segment.delete()
                segments, recovered = [], []
        if not segments:
            segments.append(
                LogSegment.create(
                    directory,
                    log_start,
                    index_interval_bytes=config.index_interval_bytes,
                    max_index_bytes=config.segment_index_bytes,
                    now_ms=now_ms,
                )
            )

        log = cls(directory, config, clock, segments, log_start, clean)
        log.recovery_damage = damage
        log.first_recovered_offset = recovered[0].base_offset if recovered else None
        log._load_epochs(recovered_epochs)
        for segment in recovered:
            segment.flush()
        checkpoint.fsync_directory(directory)
        log._write_checkpoints(force=True)
        checkpoint.remove_durably(marker)
        return log

    def _load_epochs(self, recovered_epochs: list[tuple[int, int]]) -> None:
        cache = self.leader_epoch_cache
        if not self._epoch_cache_valid:
            cache.rebuild(self._scan_epochs())
        else:
            for epoch, start in recovered_epochs:
                latest = cache.latest_epoch()
                if latest is None or epoch >= latest:
                    cache.assign(epoch, start)
        cache.truncate_from_end(self._next_offset)
        cache.truncate_from_start(self._log_start_offset)

    def _scan_epochs(self) -> list[tuple[int, int]]:
        """``(epoch, first offset)`` changes over every batch (rebuilding a lost cache)."""
        entries: list[tuple[int, int]] = []
        for header in self.batch_headers(self._log_start_offset):
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (not entries or epoch > entries[-1][0]):
                entries.append((epoch, header.base_offset))
        return entries

    # ------------------------------------------------------------------------- properties

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to be assigned."""
        return self._next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def checkpointed_recovery_point(self) -> int:
        """The recovery point as its checkpoint file holds it (where an unclean open starts
        recovering; 0 before the first write)."""
        return self._checkpointed[0] if self._checkpointed is not None else 0

    @property
    def closed(self) -> bool:
        """True after :meth:`close` or :meth:`delete`."""
        return self._closed

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def segments(self) -> list[int]:
        """Base offsets of the segments, oldest first (the last one is active)."""
        return list(self._bases)

    def segment_infos(self) -> list[SegmentInfo]:
        last = len(self._segments) - 1
        return [
            SegmentInfo(
                segment.base_offset,
                segment.next_offset,
                segment.size,
                segment.max_timestamp,
                segment.log_path,
                i == last,
            )
            for i, segment in enumerate(self._segments)
        ]

    @property
    def _active(self) -> LogSegment:
        return self._segments[-1]

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # ----------------------------------------------------------------------------- append

    def validate(self, records: bytes, headers: list[BatchHeader]) -> list[int]:
        """Every check :meth:`append` makes before writing, for batches that passed
        ``parse_batches(records)`` (CRC and framing: CorruptRecordError; magic, count and
        lastOffsetDelta: InvalidRecordError): size against max.message.bytes
        (MessageTooLargeError) and segment.bytes (RecordListTooLargeError), then every record
        (validation.validate_batch: structure, keys on compacted topics, CreateTime timestamps
        against message.timestamp.before/after.max.ms, ...). Returns each batch's largest
        record timestamp. Writes nothing."""
        self._check_open()
        if not headers:
            raise InvalidRecordError("produce request carries no record batch")
        config = self.config
        for header in headers:
            if header.size > config.max_message_bytes:
                raise MessageTooLargeError(
                    f"record batch of {header.size} bytes exceeds max.message.bytes "
                    f"{config.max_message_bytes} of {self.directory.name}",
                    hint="raise max.message.bytes for the topic or send smaller batches",
                )
            if header.size > config.segment_bytes:
                raise RecordListTooLargeError(
                    f"record batch of {header.size} bytes exceeds segment.bytes "
                    f"{config.segment_bytes} of {self.directory.name}",
                    hint="raise segment.bytes for the topic or send smaller batches",
                )
        rules = validation.RecordRules.for_topic(config, self._now_ms(), self.directory.name)
        return validation.validate_batches(records, headers, rules)

    def append(
        self,
        records: bytes,
        *,
        leader_epoch: int = 0,
        headers: list[BatchHeader] | None = None,
        validated: list[int] | None = None,
    ) -> AppendResult:
        """Append a produce request's batches as leader; see the module docstring.

        Nothing is written unless every batch passes :meth:`validate` (run here unless the
        caller passes its result as ``validated``). For CreateTime a batch's maxTimestamp is
        set to its largest record timestamp (CRC recomputed) when the producer wrote another
        value, as Kafka's LogValidator does.
        ``headers`` may pass the result of ``parse_batches(records)`` when the caller already
        ran it (saves a second CRC pass); it must describe exactly these bytes.
        """
        self._check_open()
        if headers is None:
            headers = parse_batches(records, strict=True)
        record_max_timestamps = (
            self.validate(records, headers) if validated is None else validated
        )
        config = self.config
        now_ms = self._now_ms()
        log_append = config.message_timestamp_type == "LogAppendTime"

        buf = bytearray(records)
        base_offset = self._next_offset
        last_offset = base_offset + sum(h.last_offset_delta + 1 for h in headers) - 1
        max_timestamp = now_ms if log_append else max(record_max_timestamps)
        segment = self._maybe_roll(len(buf), max_timestamp, base_offset, last_offset, now_ms)
        position = segment.size
        stored: list[BatchHeader] = []
        offset = base_offset
        for header, record_max_timestamp in zip(headers, record_max_timestamps, strict=True):
            start = header.position
            patch_base_offset(buf, start, offset)
            patch_leader_epoch(buf, start, leader_epoch)
            attributes, timestamp, crc = header.attributes, header.max_timestamp, header.crc
            if log_append:
                attributes = set_log_append_time(buf, start, header.size, now_ms)
                timestamp = now_ms
                crc = int.from_bytes(buf[start + CRC_OFFSET : start + CRC_OFFSET + 4], "big")
            elif record_max_timestamp != timestamp:
                timestamp = record_max_timestamp
                crc = validation.set_max_timestamp(buf, start, header.size, timestamp)
            stored.append(
                BatchHeader(
                    offset,
                    header.batch_length,
                    leader_epoch,
                    header.magic,
                    crc,
                    attributes,
                    header.last_offset_delta,
                    header.base_timestamp,
                    timestamp,
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence,
                    header.record_count,
                    position + start,
                )
            )
            offset += header.last_offset_delta + 1
        segment.append(buf, stored)
        self._next_offset = offset
        if leader_epoch >= 0 and self.leader_epoch_cache.latest_epoch() != leader_epoch:
            self.leader_epoch_cache.assign(leader_epoch, base_offset)
        self._after_append()
        return AppendResult(
            base_offset=base_offset,
            last_offset=offset - 1,
            log_append_time_ms=now_ms if log_append else -1,
            log_start_offset=self._log_start_offset,
            batches=stored,
        )

    def append_as_follower(self, records: bytes) -> AppendResult:
        """Append batches fetched from the leader, keeping their offsets and leader epochs.

        Batches are checked for framing, magic and CRC (not the producer-only checks: compacted
        batches may have offset gaps); the first base offset must be >= log_end_offset and
        offsets must increase (InvalidRecordError otherwise).
        """
        self._check_open()
        headers = parse_batches(records, strict=False)
        expected = self._next_offset
        for header in headers:
            if header.base_offset < expected:
                raise InvalidRecordError(
                    f"replicated batch at offset {header.base_offset} is below the expected "
                    f"next offset {expected} of {self.directory.name}",
                    hint="truncate the follower log to the leader epoch end offset first",
                )
            expected = header.next_offset
        now_ms = self._now_ms()
        max_timestamp = max(h.max_timestamp for h in headers)
        segment = self._maybe_roll(
            len(records), max_timestamp, headers[0].base_offset, headers[-1].last_offset, now_ms
        )
        position = segment.size
        stored = [dataclasses.replace(h, position=position + h.position) for h in headers]
        segment.append(records, stored)
        self._next_offset = headers[-1].next_offset
        for header in headers:
            epoch = header.partition_leader_epoch
            if epoch >= 0 and self.leader_epoch_cache.latest_epoch() != epoch:
                self.leader_epoch_cache.assign(epoch, header.base_offset)
        self._after_append()
        return AppendResult(
            base_offset=headers[0].base_offset,
            last_offset=headers[-1].last_offset,
            log_append_time_ms=-1,
            log_start_offset=self._log_start_offset,
            batches=stored,
        )

    def _maybe_roll(
        self, size: int, max_timestamp: int, first_offset: int, last_offset: int, now_ms: int
    ) -> LogSegment:
        """The segment to append to, rolling first if Kafka would (LogSegment.shouldRoll):
        the data would not fit in segment.bytes; the non-empty segment is older than
        segment.ms by the clock (since its first append, or since it was loaded) or by record
        time (incoming max timestamp minus the first batch's, Kafka's rule); an index is full;
        or relative offsets would overflow."""
        segment = self._active
        config = self.config
        if segment.size == 0:
            if last_offset - segment.base_offset <= RELATIVE_OFFSET_MAX:
                segment.created_ms = now_ms  # segment.ms counts from the first append
                return segment
        elif not (
            segment.size > config.segment_bytes - size
            or now_ms - segment.created_ms > config.segment_ms
            or (
                segment.first_batch_timestamp() >= 0
                and max_timestamp - segment.first_batch_timestamp() > config.segment_ms
            )
            or segment.is_full
            or last_offset - segment.base_offset > RELATIVE_OFFSET_MAX
        ):
            return segment
        return self._roll(first_offset, now_ms)

    @_holding_io_lock
    def _roll(self, base_offset: int, now_ms: int) -> LogSegment:
        old = self._active
        if old.size == 0:
            # an empty active segment is replaced (its base may not fit the new offsets)
            self._segments.pop()
            self._bases.pop()
            old.delete()
        else:
            if self.before_roll is not None:
                self.before_roll(base_offset)
            old.txn_index.touch()
            old.seal()
            self._pending_roll_flush = base_offset
        segment = LogSegment.create(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            now_ms=now_ms,
        )
        self._segments.append(segment)
        self._bases.append(base_offset)
        self._directory_dirty = True
        if self.on_roll is not None and old.size:
            self.on_roll()
        return segment

    def roll(self) -> None:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        self._check_open()
        if self._active.size:
            self._roll(self._next_offset, self._now_ms())

    def _after_append(self) -> None:
        if self._next_offset - self._recovery_point >= self.config.flush_messages:
            self.flush()

    # ------------------------------------------------------------------------------ reads

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> bytes:
        """Whole batches from the one containing ``offset``, at most ``max_bytes`` of them
        (but the first batch whole even if larger when ``min_one_batch``, KIP-74), never a
        batch whose base offset is >= ``max_offset``. Data comes from one segment per call.

        OffsetOutOfRangeError outside [log_start_offset, log_end_offset]; b"" at the end.
        """
        self._check_open()
        if offset < self._log_start_offset or offset > self._next_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.directory.name}: the log holds "
                f"[{self._log_start_offset}, {self._next_offset})"
            )
        if offset == self._next_offset or (max_offset is not None and offset >= max_offset):
            return b""
        first = max(0, bisect.bisect_right(self._bases, offset) - 1)
        for segment in self._segments[first:]:
            header = segment.translate_offset(offset)
            if header is None:
                continue
            if max_offset is not None and header.base_offset >= max_offset:
                return b""
            if header.size > max_bytes:
                return segment.read(header.position, header.size) if min_one_batch else b""
            return self._read_whole_batches(segment, header, max_bytes, max_offset)
        return b""

    @staticmethod
    def _read_whole_batches(
        segment: LogSegment, first: BatchHeader, max_bytes: int, max_offset: int | None
    ) -> bytes:
        """The batches from ``first`` that fit in ``max_bytes`` and start below
        ``max_offset``. The cut is found through the offset index (a scan of at most about
        index.interval.bytes of headers), not by walking every batch."""
        start = first.position
        boundary = segment.size  # a batch boundary: the end of the segment or of max_offset
        if max_offset is not None and max_offset < segment.next_offset:
            stop = segment.translate_offset(max_offset, start)
            if stop is not None:
                boundary = stop.position if stop.base_offset >= max_offset else stop.end_position
        if boundary - start <= max_bytes:
            return segment.read(start, boundary - start)
        limit = start + max_bytes
        cut = max(segment.offset_index.lookup_position(limit)[1], start)
        for header in segment.scan(cut, chunk_size=max(4096, 2 * segment.index_interval_bytes)):
            if header.end_position > limit:
                break
            cut = header.end_position
        return segment.read(start, cut - start)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the earliest record with timestamp >= ``timestamp_ms``
        (at or after the log start offset); None if there is none (ListOffsets)."""
        self._check_open()
        for segment in self._segments:
            if (
                segment.max_timestamp < timestamp_ms
                or segment.next_offset <= self._log_start_offset
            ):
                continue
            found = segment.find_offset_by_timestamp(timestamp_ms, self._log_start_offset)
            if found is not None:
                return found
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the first record with the largest timestamp (ListOffsets
        MAX_TIMESTAMP, KIP-734); None if no record has a timestamp."""
        self._check_open()
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.next_offset <= self._log_start_offset or segment.max_timestamp < 0:
                continue
            if best is None or segment.max_timestamp > best.max_timestamp:
                best = segment
        if best is None:
            return None
        header = best.translate_offset(best.offset_of_max_timestamp)
        if header is None:
            return None
        if header.timestamp_type != LOG_APPEND_TIME:
            for record in best.decode(header):
                if record.timestamp == best.max_timestamp:
                    return record.timestamp, record.offset
        return best.max_timestamp, header.base_offset

    def batch_headers(self, from_offset: int = 0, *,
                      below_log_start: bool = False) -> Iterator[BatchHeader]:
        """Headers of every batch with last offset >= ``from_offset`` (and >= the log start,
        unless ``below_log_start``: then every batch still stored, as a producer-state replay
        needs), oldest first; ``position`` is within the batch's segment file. Do not append
        while iterating."""
        self._check_open()
        if not below_log_start:
            from_offset = max(from_offset, self._log_start_offset)
        for segment in list(self._segments):
            if segment.next_offset <= from_offset:
                continue
            position = segment.offset_index.lookup(from_offset)[1]
            for header in segment.scan(position, chunk_size=RECOVERY_CHUNK_BYTES):
                if header.last_offset >= from_offset:
                    yield header

    def read_batch(self, header: BatchHeader) -> bytes:
        """The bytes of a batch whose header :meth:`batch_headers` yielded."""
        self._check_open()
        segment = self._segments[max(0, bisect.bisect_right(self._bases, header.base_offset) - 1)]
        return segment.read(header.position, header.size)

    # ------------------------------------------------------------ aborted transactions

    def add_aborted_txn(self, entry: AbortedTxn) -> bool:
        """Record an aborted transaction in the transaction index of the segment holding its
        marker (``entry.last_offset``), unless that index has it already (a replay); True if
        it was added. Entries are flushed with their segment."""
        self._check_open()
        segment = self._segments[max(0, bisect.bisect_right(self._bases, entry.last_offset) - 1)]
        index = segment.txn_index
        if index.contains_marker(entry.last_offset) or (
            index.entries and index.entries[-1].last_offset > entry.last_offset
        ):
            return False
        index.append(entry)
        return True

    def check_txn_indexes(self) -> int | None:
        """At open, before the partition replays its producer state: the base offset of the
        first segment whose transaction index is damaged, None if every one is sound. Damaged:
        a sealed segment without its ``.txnindex`` file, a torn or unreadable tail (a length
        not a multiple of 34, an unknown version), or an entry that does not describe an
        ABORT marker of the segment (its last offset is not a control batch of the entry's
        producer there, its first offset not a transactional batch of that producer when still
        stored, or its last stable offset beyond the marker). The index of that segment and of
        every later one is emptied: the partition's replay from a snapshot at or below it (or
        from the first segment) rebuilds them. Kafka trusts these files. Not found: a file cut
        at an entry boundary (or emptied), and a flip that lowers a last stable offset (it only
        lengthens searches)."""
        for i, segment in enumerate(self._segments):
            sealed = i < len(self._segments) - 1
            missing = sealed and not segment.txn_index.path.exists()
            if missing or segment.txn_index.torn or not all(self._sound_entry(segment, entry)
                                  for entry in segment.txn_index.entries):
                for later in self._segments[i:]:
                    later.txn_index.truncate_to(later.base_offset)
                return segment.base_offset
        return None

    def _sound_entry(self, segment: LogSegment, entry: AbortedTxn) -> bool:
        if not (segment.base_offset <= entry.last_offset < segment.next_offset
                and 0 <= entry.first_offset <= entry.last_offset
                and entry.last_stable_offset <= entry.last_offset + 1):
            return False
        marker = segment.translate_offset(entry.last_offset)
        if (marker is None or marker.base_offset != entry.last_offset or not marker.is_control
                or marker.producer_id != entry.producer_id):
            return False
        if entry.first_offset < self._segments[0].base_offset:
            return True  # its first batch was deleted (retention, DeleteRecords)
        first = self._segments[max(0, bisect.bisect_right(self._bases, entry.first_offset) - 1)]
        header = first.translate_offset(entry.first_offset)
        return (header is not None and header.base_offset == entry.first_offset
                and header.is_transactional and not header.is_control
                and header.producer_id == entry.producer_id)

    def ensure_txn_index_files(self) -> None:
        """Create the empty ``.txnindex`` of every sealed segment that has none (logs written
        before sealed segments always had one; after :meth:`check_txn_indexes`)."""
        for segment in self._segments[:-1]:
            segment.txn_index.touch()

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, end_offset), oldest first, from the
        in-memory copies of the segments' transaction indexes (Kafka's
        ``collectAbortedTransactions``)."""
        self._check_open()
        found: list[AbortedTxn] = []
        if end_offset <= start_offset:
            return found
        first = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        for segment in self._segments[first:]:
            entries, complete = segment.txn_index.collect(start_offset, end_offset)
            found.extend(entries)
            if complete:
                break
        return found

    # ---------------------------------------------------------------------- durability

    def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery_point, up_to) (default: the log
        end) and advance the recovery point. Does not write the checkpoint file."""
        target = self._next_offset if up_to is None else min(up_to, self._next_offset)
        start = self._recovery_point
        if target <= start:
            return
        for segment in list(self._segments):
            if segment.next_offset > start and segment.base_offset < target:
                segment.flush()
        if self._directory_dirty:
            self._directory_dirty = False
            checkpoint.fsync_directory(self.directory)
        self._recovery_point = max(self._recovery_point, target)
        self._last_flush_ms = self._now_ms()

    def flush_if_due(self, now_ms: float | None = None) -> None:
        """The periodic flush done inline (tests, tools): :meth:`prepare_flush`, the job,
        :meth:`complete_flush`. The broker runs the job in a worker thread instead."""
        job = self.prepare_flush(now_ms)
        if job is not None:
            job.run()
            self.complete_flush(job)

    def prepare_flush(self, now_ms: float | None = None) -> FlushJob | None:
        """On the loop: what the flush scheduler should fsync now (segments rolled since the
        last flush, everything when ``flush.ms`` is due), or None. Checkpoints are written here
        at most every CHECKPOINT_INTERVAL_MS (small files, on the loop)."""
        self._check_open()
        now = self._now_ms() if now_ms is None else int(now_ms)
        target = self._recovery_point
        if self._pending_roll_flush is not None:
            target, self._pending_roll_flush = self._pending_roll_flush, None
        if (
            self._next_offset > self._recovery_point
            and now - self._last_flush_ms >= self.config.flush_ms
        ):
            target = self._next_offset
        if now - self._last_checkpoint_ms >= CHECKPOINT_INTERVAL_MS:
            self._write_checkpoints()
            self._last_checkpoint_ms = now
        if target <= self._recovery_point:
            return None
        start = self._recovery_point
        segments = [segment for segment in self._segments
                    if segment.next_offset > start and segment.base_offset < target]
        directory = self._directory_dirty
        self._directory_dirty = False
        self._last_flush_ms = now
        return FlushJob(self, target, self._generation, segments, directory)

    def complete_flush(self, job: FlushJob) -> None:
        """On the loop, after :meth:`FlushJob.run` succeeded: advance the recovery point to the
        job's target, unless the log was cut (truncated, restarted) since it was planned."""
        if job.generation == self._generation and not self._closed:
            self._recovery_point = max(self._recovery_point, min(job.target, self._next_offset))

    def write_checkpoints(self) -> None:
        """Durably write the recovery point and log start offset checkpoints (if changed)."""
        self._write_checkpoints()

    def _write_checkpoints(self, *, force: bool = False) -> None:
        state = (self._recovery_point, self._log_start_offset)
        if not force and state == self._checkpointed:
            return
        checkpoint.write_offset(
            self.directory / filenames.RECOVERY_POINT_CHECKPOINT, self._recovery_point
        )
        checkpoint.write_offset(
            self.directory / filenames.LOG_START_OFFSET_CHECKPOINT, self._log_start_offset
        )
        self._checkpointed = state

    def close(self) -> None:
        """Flush, seal every segment, write checkpoints and the clean-shutdown marker."""
        with self.io_lock:
            if self._closed:
                return
            self.flush()
            for segment in self._segments:
                segment.close()
            self._write_checkpoints()
            checkpoint.write_durably(self.directory / filenames.CLEAN_SHUTDOWN_MARKER, b"")
            self._closed = True

    def delete(self) -> None:
        """Close the files and remove the partition directory (renamed first, so a crash
        leaves a ``*-delete`` directory that the broker removes on start)."""
        with self.io_lock:
            for segment in self._segments:
                with contextlib.suppress(OSError):
                    segment.close()
            self._closed = True
        target = filenames.deleted_directory(self.directory)
        os.replace(self.directory, target)
        checkpoint.fsync_directory(target.parent)
        shutil.rmtree(target, ignore_errors=True)

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"partition log {self.directory} is closed")

    # ------------------------------------------------------------------- configuration

    def update_config(self, config: TopicConfig) -> None:
        """Use a new topic config from now on (index interval applies to the active segment,
        index size to new segments)."""
        self.config = config
        self._active.index_interval_bytes = config.index_interval_bytes

    # ------------------------------------------------------------- truncation, retention

    @_holding_io_lock
    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or after ``offset`` (follower truncation). A batch that
        contains ``offset`` is removed whole, so log_end_offset may end up below ``offset``.
        The cut is fsynced and checkpointed before returning."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate {self.directory.name} to negative offset {offset}")
        if offset >= self._next_offset:
            return
        self._generation += 1
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return
        while self._segments[-1].base_offset > offset:
            self._bases.pop()
            self._segments.pop().delete()
        active = self._active
        active.truncate_to(offset)
        active.index_interval_bytes = self.config.index_interval_bytes
        active.flush()  # make the cut durable: removed data must not come back after a crash
        checkpoint.fsync_directory(self.directory)
        self._pending_roll_flush = None
        self._next_offset = active.next_offset
        self._log_start_offset = min(self._log_start_offset, self._next_offset)
        self._recovery_point = min(self._recovery_point, self._next_offset)
        self.leader_epoch_cache.truncate_from_end(self._next_offset)
        self._write_checkpoints()

    @_holding_io_lock
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log empty at ``offset`` (log start = end)."""
        self._check_open()
        self._generation += 1
        for segment in self._segments:
            segment.delete()
        segment = LogSegment.create(
            self.directory,
            offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            now_ms=self._now_ms(),
        )
        self._segments = [segment]
        self._bases = [offset]
        self._next_offset = self._log_start_offset = self._recovery_point = offset
        self._pending_roll_flush = None
        self.leader_epoch_cache.clear()
        checkpoint.fsync_directory(self.directory)
        self._write_checkpoints()

    def set_log_start_offset(self, offset: int) -> None:
        """Move the log start offset forward (DeleteRecords, retention); checkpointed.
        Segments wholly below it are deleted by :meth:`delete_segments_before`."""
        self._check_open()
        if offset > self._next_offset:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset of {self.directory.name} to {offset}: "
                f"beyond the log end offset {self._next_offset}"
            )
        if offset <= self._log_start_offset:
            return
        self._log_start_offset = offset
        self._write_checkpoints()
        self.leader_epoch_cache.truncate_from_start(offset)

    @_holding_io_lock
    def delete_segments_before(self, offset: int) -> int:
        """Delete the oldest segments whose every offset is < ``offset`` (rolling first if the
        active segment qualifies); returns how many were deleted. The log start offset moves
        to the first remaining segment's base (checkpointed before any file is removed)."""
        self._check_open()
        deletable = 0
        while deletable < len(self._segments) - 1 and (
            self._segments[deletable + 1].base_offset <= offset
        ):
            deletable += 1
        if (
            deletable == len(self._segments) - 1
            and self._active.size
            and self._next_offset <= offset
        ):
            self.roll()
            deletable += 1
        if not deletable:
            return 0
        doomed = self._segments[:deletable]
        self._segments = self._segments[deletable:]
        self._bases = self._bases[deletable:]
        new_start = max(self._log_start_offset, self._segments[0].base_offset)
        if new_start != self._log_start_offset:
            self._log_start_offset = new_start
            self._write_checkpoints()
            self.leader_epoch_cache.truncate_from_start(new_start)
        for segment in doomed:
            segment.delete()
        return deletable
