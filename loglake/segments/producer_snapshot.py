"""Producer-state snapshot files: ``<20-digit offset>.snapshot`` (Kafka's name).

A snapshot holds the producer state of a partition (broker/producer_state.py) as of ``offset``:
the state after every batch below that offset and none at or above it. Loading the newest
snapshot at or below the log end and replaying the batch headers from its offset rebuilds the
state without a scan of the whole log.

Format (big-endian; loglake's own, shaped after Kafka's v1 snapshot, which keeps only one batch
per producer; this one keeps every retained batch so duplicate detection survives a restart)::

    version                   i16   1
    crc                       u32   CRC-32C of every byte after this field
    producer count            i32
    per producer:
      producer id             i64
      producer epoch          i16
      coordinator epoch       i32   -1 when no marker was seen
      last timestamp          i64   -1 when none
      current txn first offset i64  -1 when no transaction is open
      batch count             i32
      per batch: first sequence i32, last sequence i32, first offset i64, last offset i64

Writes follow the durable protocol of checkpoint.py (temp file, fsync, rename, fsync the
directory), so a crash leaves the previous snapshot or the new one complete, plus perhaps a
``*.tmp`` that the log's open removes. A snapshot that fails its CRC or does not parse reads as
None (disk damage, a manual edit); the caller falls back to an older one or a full replay.
When they are written and deleted (rolls, clean close, truncation, the two newest kept) is
decided by broker/partition.py.

Pure functions over files; one writer per partition directory at a time (the partition's
event-loop thread).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from loglake.segments import checkpoint, filenames

SNAPSHOT_VERSION = 1
_HEAD = struct.Struct(">hIi")
_PRODUCER = struct.Struct(">qhiqqi")
_BATCH = struct.Struct(">iiqq")
_CRC_START = 6  # after version and crc


@dataclass(frozen=True, slots=True)
class SnapshotBatch:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class SnapshotProducer:
    """One producer's state as a snapshot stores it."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_timestamp: int
    current_txn_first_offset: int
    batches: tuple[SnapshotBatch, ...]


def encode(producers: list[SnapshotProducer]) -> bytes:
    """The file content for ``producers``."""
    body = bytearray(struct.pack(">i", len(producers)))
    for producer in producers:
        body += _PRODUCER.pack(producer.producer_id, producer.producer_epoch,
                               producer.coordinator_epoch, producer.last_timestamp,
                               producer.current_txn_first_offset, len(producer.batches))
        for batch in producer.batches:
            body += _BATCH.pack(batch.first_seq, batch.last_seq, batch.first_offset,
                                batch.last_offset)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(bytes(body))) + bytes(body)


def decode(data: bytes) -> list[SnapshotProducer] | None:
    """The producers of a snapshot's content; None when it is damaged (CRC, length, version)."""
    if len(data) < _HEAD.size:
        return None
    version, crc, count = _HEAD.unpack_from(data)
    if version != SNAPSHOT_VERSION or crc32c(data[_CRC_START:]) != crc or count < 0:
        return None
    producers: list[SnapshotProducer] = []
    position = _HEAD.size
    try:
        for _ in range(count):
            pid, epoch, coordinator_epoch, timestamp, txn_first, batch_count = (
                _PRODUCER.unpack_from(data, position))
            position += _PRODUCER.size
            if batch_count < 0:
                return None
            batches = []
            for _ in range(batch_count):
                batches.append(SnapshotBatch(*_BATCH.unpack_from(data, position)))
                position += _BATCH.size
            producers.append(SnapshotProducer(pid, epoch, coordinator_epoch, timestamp,
                                              txn_first, tuple(batches)))
    except struct.error:
        return None
    return producers if position == len(data) else None


def write(directory: Path, offset: int, producers: list[SnapshotProducer]) -> Path:
    """Durably write the snapshot as of ``offset`` (replacing one with the same offset)."""
    path = filenames.snapshot_file(directory, offset)
    checkpoint.write_durably(path, encode(producers))
    return path


def read(path: Path) -> list[SnapshotProducer] | None:
    """The producers of the snapshot at ``path``; None if it is missing or damaged."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return decode(data)


def offsets(directory: Path) -> list[int]:
    """Offsets of the snapshots in ``directory``, oldest first."""
    found = []
    for entry in directory.iterdir():
        offset = filenames.parse_snapshot_name(entry.name)
        if offset is not None:
            found.append(offset)
    return sorted(found)


def load_newest(directory: Path, at_most: int,
                at_least: int = 0) -> tuple[int, list[SnapshotProducer]] | None:
    """``(offset, producers)`` of the newest readable snapshot in [``at_least``, ``at_most``]
    (a snapshot below the first segment's base cannot be replayed from: the batches after it
    are gone); damaged ones on the way are deleted (they would be skipped every time). None if
    there is none."""
    for offset in reversed(offsets(directory)):
        if offset > at_most:
            continue
        if offset < at_least:
            return None
        path = filenames.snapshot_file(directory, offset)
        producers = read(path)
        if producers is not None:
            return offset, producers
        path.unlink(missing_ok=True)
    return None


def delete_below(directory: Path, offset: int) -> None:
    """Delete the snapshots whose offset is < ``offset`` (the first segment's base after
    retention or DeleteRecords: nothing can be replayed from them)."""
    for found in offsets(directory):
        if found < offset:
            filenames.snapshot_file(directory, found).unlink(missing_ok=True)


def delete_above(directory: Path, offset: int) -> None:
    """Delete the snapshots whose offset is > ``offset`` (truncation: they describe batches
    that are gone)."""
    for found in offsets(directory):
        if found > offset:
            filenames.snapshot_file(directory, found).unlink(missing_ok=True)


def retain_newest(directory: Path, keep: int = 2, *, also_at_or_below: int | None = None,
                  all_from_at_or_below: int | None = None) -> None:
    """Delete all but the ``keep`` newest snapshots and, when ``also_at_or_below`` is given,
    the newest one at or below that offset; when ``all_from_at_or_below`` is given, every
    snapshot from the newest one at or below that offset on (all of them if none is)."""
    found = offsets(directory)
    kept = set(found[-keep:]) if keep > 0 else set()
    if also_at_or_below is not None:
        below = [offset for offset in found if offset <= also_at_or_below]
        if below:
            kept.add(below[-1])
    if all_from_at_or_below is not None:
        below = [offset for offset in found if offset <= all_from_at_or_below]
        kept.update(offset for offset in found if not below or offset >= below[-1])
    for offset in found:
        if offset not in kept:
            filenames.snapshot_file(directory, offset).unlink(missing_ok=True)
