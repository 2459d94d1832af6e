"""Every file and directory name of the hot tier; no other module spells a suffix.

Layout of one partition directory (``<topic>-<partition>``, created by the broker)::

    00000000000000000000.log         RecordBatch v2 bytes, back to back (see batch.py)
    00000000000000000000.index       offset index: (relative offset u32, position u32) big-endian
    00000000000000000000.timeindex   time index: (timestamp i64, relative offset u32) big-endian
    00000000000000000000.txnindex    aborted transactions whose marker is in the segment
                                     (txn_index.py; created at the first ABORT marker)
    00000000000000000042.snapshot    producer state as of offset 42 (producer_snapshot.py;
                                     not tied to a segment: at rolls and at clean close)
    leader-epoch-checkpoint          "0\\n<count>\\n<epoch> <start offset>\\n..." (Kafka's format)
    recovery-point-checkpoint        "0\\n1\\n<offset>\\n": everything below is fsynced and valid
    log-start-offset-checkpoint      "0\\n1\\n<offset>\\n": first offset visible to clients
    high-watermark                   "0\\n1\\n<offset>\\n": the replica's high watermark when it
                                     was last checkpointed (broker/partition.py)
    clean-shutdown                   present only between a clean close() and the next open()

Segment files are named after the segment's base offset, zero-padded to 20 digits so that ``ls``
sorts them numerically (Kafka's ``LogFileUtils``). ``*.tmp`` files are durable writes in
progress and ``*.deleted`` files are segments being removed; both are deleted on open. A
partition directory being deleted is first renamed to ``<name>.<uuid>-delete``.

Pure functions: safe from any thread. A crash leaves nothing here (no I/O).
"""

from __future__ import annotations

import uuid
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
SNAPSHOT_SUFFIX = ".snapshot"
TEMP_SUFFIX = ".tmp"
DELETED_SUFFIX = ".deleted"
DELETED_DIR_SUFFIX = "-delete"

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "high-watermark"
CLEAN_SHUTDOWN_MARKER = "clean-shutdown"

OFFSET_DIGITS = 20


def offset_name(offset: int) -> str:
    """The 20-digit zero-padded file stem for a segment base offset."""
    if offset < 0:
        raise ValueError(f"segment base offset must be >= 0, got {offset}")
    return str(offset).zfill(OFFSET_DIGITS)


def log_file(directory: Path, base_offset: int) -> Path:
    return directory / (offset_name(base_offset) + LOG_SUFFIX)


def index_file(directory: Path, base_offset: int) -> Path:
    return directory / (offset_name(base_offset) + INDEX_SUFFIX)


def time_index_file(directory: Path, base_offset: int) -> Path:
    return directory / (offset_name(base_offset) + TIME_INDEX_SUFFIX)


def txn_index_file(directory: Path, base_offset: int) -> Path:
    return directory / (offset_name(base_offset) + TXN_INDEX_SUFFIX)


def segment_files(directory: Path, base_offset: int) -> tuple[Path, Path, Path, Path]:
    """``.log``, ``.index``, ``.timeindex`` and ``.txnindex`` of one segment (the last two may
    not exist)."""
    return (
        log_file(directory, base_offset),
        index_file(directory, base_offset),
        time_index_file(directory, base_offset),
        txn_index_file(directory, base_offset),
    )


def snapshot_file(directory: Path, offset: int) -> Path:
    """The producer-state snapshot as of ``offset``."""
    return directory / (offset_name(offset) + SNAPSHOT_SUFFIX)


def parse_snapshot_name(name: str) -> int | None:
    """The offset of a producer-state snapshot file name, None for any other name."""
    if name.endswith(SNAPSHOT_SUFFIX):
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if len(stem) == OFFSET_DIGITS and stem.isdigit():
            return int(stem)
    return None


def parse_segment_name(name: str) -> tuple[int, str] | None:
    """``(base offset, suffix)`` for a segment file name, None for any other name."""
    for suffix in SEGMENT_SUFFIXES:
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            if len(stem) == OFFSET_DIGITS and stem.isdigit():
                return int(stem), suffix
    return None


def temp_file(path: Path) -> Path:
    """Where a durable write of ``path`` is staged before the rename."""
    return path.with_name(path.name + TEMP_SUFFIX)


def deleted_file(path: Path) -> Path:
    """The name a segment file gets just before it is unlinked."""
    return path.with_name(path.name + DELETED_SUFFIX)


def is_leftover(name: str) -> bool:
    """Files that an interrupted write or delete left behind; removed on open."""
    return name.endswith((TEMP_SUFFIX, DELETED_SUFFIX))


def deleted_directory(directory: Path) -> Path:
    """The unique name a partition directory is renamed to before it is removed."""
    return directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETED_DIR_SUFFIX}")


def is_deleted_directory(name: str) -> bool:
    """True for partition directories whose deletion was interrupted (remove them)."""
    return name.endswith(DELETED_DIR_SUFFIX)
