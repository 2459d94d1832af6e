"""RecordBatch v2 headers: parse, validate, and patch in place (the produce hot path).

Wire and disk format (big-endian; Kafka's ``DefaultRecordBatch``), 61-byte header::

    offset  size  field
     0      8     baseOffset            i64   patched by the broker (outside the CRC)
     8      4     batchLength           i32   bytes after this field = total size - 12
    12      4     partitionLeaderEpoch  i32   patched by the broker (outside the CRC)
    16      1     magic                 i8    must be 2
    17      4     crc                   u32   CRC-32C of bytes 21..end
    21      2     attributes            i16   bits 0-2 compression, 3 timestamp type
                                               (1 = LogAppendTime), 4 transactional, 5 control,
                                               6 delete horizon set
    23      4     lastOffsetDelta       i32
    27      8     baseTimestamp         i64
    35      8     maxTimestamp          i64
    43      8     producerId            i64
    51      2     producerEpoch         i16
    53      4     baseSequence          i32
    57      4     recordCount           i32
    61      ...   records (possibly compressed; decoded by records.py, never here)

Only headers are read here; no record is decoded. Validation raises the typed errors of
:mod:`loglake.errors`: truncated framing, a too-small ``batchLength`` or a CRC mismatch is
:class:`CorruptRecordError`; a magic other than 2, or (``strict``, i.e. fresh from a producer) a
record count <= 0 or a ``lastOffsetDelta`` that disagrees with it, is :class:`InvalidRecordError`.
Batches that went through compaction may legitimately have gaps, so on-disk scans are not strict.

Pure functions over caller-owned buffers: thread-safe as long as the buffer is not mutated
concurrently. No I/O, so a crash leaves nothing.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from crc32c import crc32c

from loglake.errors import CorruptRecordError, InvalidRecordError

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted in batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # CRC covers from here to the end of the batch
MAX_TIMESTAMP_OFFSET = 35
LEADER_EPOCH_OFFSET = 12
CURRENT_MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_LENGTH_AT_8 = struct.Struct(">8xi")

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The parsed 61-byte header of one batch and where the batch sits.

    ``position`` is the byte offset of the batch in the buffer or file it was read from (for a
    :class:`~loglake.segments.log.PartitionLog` scan: within its segment's ``.log`` file);
    ``size`` is the whole batch including the 12-byte log overhead.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    position: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def end_position(self) -> int:
        return self.position + self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_BIT else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (wraps at 2**31 like Kafka); -1 without a sequence."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


_new_header: Callable[..., BatchHeader] = BatchHeader  # (*HEADER fields, position)


def compute_crc(buf: Buffer, position: int, size: int) -> int:
    """CRC-32C of a batch's attributes..end, as stored in its crc field."""
    return crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET : position + size])


def read_header(
    buf: Buffer,
    offset: int = 0,
    *,
    position: int | None = None,
    verify_crc: bool = True,
    strict: bool = False,
) -> BatchHeader:
    """Parse and validate the batch starting at ``buf[offset]``.

    The whole batch must be inside ``buf``. ``position`` is what the header reports as its
    position (default: ``offset``), for callers scanning a file window by window. ``strict``
    adds the checks Kafka applies to batches fresh from a producer.
    """
    available = len(buf) - offset
    if available < LOG_OVERHEAD:
        raise CorruptRecordError(
            f"truncated record batch at byte {offset}: {available} bytes left, "
            f"a batch needs at least {HEADER_SIZE}"
        )
    (batch_length,) = _LENGTH_AT_8.unpack_from(buf, offset)
    if available > MAGIC_OFFSET and buf[offset + MAGIC_OFFSET] != CURRENT_MAGIC:
        raise InvalidRecordError(
            f"unsupported record batch magic {buf[offset + MAGIC_OFFSET]} at byte {offset}",
            hint="only message format v2 (Kafka 0.11+ clients) is accepted",
        )
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"record batch at byte {offset} declares length {batch_length}, "
            f"below the minimum {MIN_BATCH_LENGTH}"
        )
    size = batch_length + LOG_OVERHEAD
    if size > available:
        raise CorruptRecordError(
            f"truncated record batch at byte {offset}: declares {size} bytes, {available} available"
        )
    fields = HEADER.unpack_from(buf, offset)
    if verify_crc:
        actual = crc32c(memoryview(buf)[offset + ATTRIBUTES_OFFSET : offset + size])
        if actual != fields[4]:
            raise CorruptRecordError(
                f"record batch at byte {offset} (base offset {fields[0]}) failed its CRC check: "
                f"stored {fields[4]:#010x}, computed {actual:#010x}"
            )
    if strict:
        record_count = fields[12]
        if record_count <= 0:
            raise InvalidRecordError(
                f"record batch at byte {offset} has invalid record count {record_count}"
            )
        if fields[6] != record_count - 1:
            raise InvalidRecordError(
                f"record batch at byte {offset}: lastOffsetDelta {fields[6]} is inconsistent "
                f"with record count {record_count}"
            )
    elif fields[6] < 0 or fields[12] < 0:
        raise CorruptRecordError(
            f"record batch at byte {offset} has negative lastOffsetDelta or record count"
        )
    return _new_header(*fields, offset if position is None else position)


def peek_header(buf: Buffer, offset: int = 0, *, position: int | None = None) -> BatchHeader:
    """Parse only the 61 header bytes at ``buf[offset]`` (the batch body may be absent).

    Checks magic and minimum length but not the CRC: for scans of data already validated.
    """
    if len(buf) - offset < HEADER_SIZE:
        raise CorruptRecordError(
            f"truncated record batch header at byte {offset if position is None else position}"
        )
    fields = HEADER.unpack_from(buf, offset)
    if fields[3] != CURRENT_MAGIC or fields[1] < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"invalid record batch header at byte {offset if position is None else position}: "
            f"magic {fields[3]}, length {fields[1]}"
        )
    return _new_header(*fields, offset if position is None else position)


def iter_batches(
    buf: Buffer, *, verify_crc: bool = True, strict: bool = False
) -> Iterator[BatchHeader]:
    """Headers of the batches laid back to back in ``buf``; every byte must belong to one.

    Raises at the first invalid batch, after yielding the valid ones before it.
    """
    offset = 0
    end = len(buf)
    while offset < end:
        header = read_header(buf, offset, verify_crc=verify_crc, strict=strict)
        yield header
        offset += header.batch_length + LOG_OVERHEAD


def parse_batches(data: Buffer, *, strict: bool = True) -> list[BatchHeader]:
    """Validate a produce request's ``records`` field; strict Kafka client checks by default.

    An empty buffer is an :class:`InvalidRecordError` (a produce must carry a batch).
    """
    if len(data) == 0:
        raise InvalidRecordError("produce request carries no record batch")
    return list(iter_batches(data, verify_crc=True, strict=strict))


def patch_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Overwrite a batch's baseOffset (not covered by the CRC)."""
    _I64.pack_into(buf, position, base_offset)


def patch_leader_epoch(buf: bytearray | memoryview, position: int, leader_epoch: int) -> None:
    """Overwrite a batch's partitionLeaderEpoch (not covered by the CRC)."""
    _I32.pack_into(buf, position + LEADER_EPOCH_OFFSET, leader_epoch)


def set_log_append_time(
    buf: bytearray | memoryview, position: int, size: int, append_time_ms: int
) -> int:
    """Mark a batch as LogAppendTime with ``maxTimestamp = append_time_ms``; recompute the CRC.

    As in Kafka, the records keep their producer timestamps; readers use maxTimestamp for every
    record of a LogAppendTime batch. Returns the new attributes.
    """
    (attributes,) = _I16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    attributes |= TIMESTAMP_TYPE_BIT
    _I16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes)
    _I64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, append_time_ms)
    _U32.pack_into(buf, position + CRC_OFFSET, compute_crc(buf, position, size))
    return attributes


def batch_size_at(buf: Buffer, offset: int) -> int:
    """Total size of the batch at ``buf[offset]`` from its length field (no validation)."""
    return int(_LENGTH_AT_8.unpack_from(buf, offset)[0]) + LOG_OVERHEAD
