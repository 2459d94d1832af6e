"""Log validator: what a produced record batch must satisfy before the leader appends it.

Kafka splits these checks over ``ProduceRequest.validateRecords`` (per partition of a Produce
request), ``UnifiedLog.analyzeAndValidateRecords`` and ``LogValidator``; here they are pure
functions over the request's bytes. The batch header (framing, CRC, magic, record count vs
lastOffsetDelta) is checked first by :func:`loglake.segments.batch.parse_batches` (strict):
CORRUPT_MESSAGE for framing/CRC, INVALID_RECORD for the rest.

Rules, in the order they are checked, and the error each maps to:

Request (:func:`check_produce_records`, with the Produce API version; Kafka's KafkaApis and
ProduceRequest.validateRecords):

1. the first batch's magic is not 2: INVALID_RECORD.
2. a transactional batch in a request without a transactional id:
   TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka's KafkaApis answers it (before any log
   check). Kafka fails the whole request with it; here only that partition (the others of the
   request are unaffected, as for every other rule). With a transactional id, transactional
   batches pass here; the producer state decides (epoch, open transaction).
3. zstd on Produce below v7: UNSUPPORTED_COMPRESSION_TYPE.
4. more than one batch for the partition (Produce v3+): INVALID_RECORD.

Batch (:func:`validate_batch`, with the topic config and the clock; UnifiedLog + LogValidator):

5. baseOffset is not 0: INVALID_RECORD.
6. the control bit is set (only the broker writes control batches): INVALID_RECORD.
7. a producer id without a base sequence: INVALID_RECORD.
8. compression codec 5-7: UNSUPPORTED_COMPRESSION_TYPE.
9. the LogAppendTime bit is set (producers must not): INVALID_TIMESTAMP, every record named.
   Kafka accepts it on a CreateTime topic when maxTimestamp is in range and then rewrites the
   batch as CreateTime; this broker stores batches as produced, so it refuses it.
10. the records section does not decompress: CORRUPT_MESSAGE; it decompresses to more than
    ``max.message.bytes * MAX_DECOMPRESSION_RATIO`` bytes: MESSAGE_TOO_LARGE. Output is
    decompressed into a buffer of bounded size (cramjam ``decompress_into``), so a decompression
    bomb never allocates more than that bound. (Kafka bounds only the compressed size; a bound
    of exactly max.message.bytes would refuse ordinary batches, e.g. librdkafka's 1 MB
    uncompressed batches on a topic with a smaller max.message.bytes. The Java producer splits
    a batch answered MESSAGE_TOO_LARGE and retries.)

Record structure: INVALID_RECORD at the first malformed record (as Kafka's DefaultRecord
reader throws InvalidRecordException), with ``record_errors`` naming its index:

11. exactly recordCount records fill the records section exactly;
12. varints are at most 5 bytes and fit 32 bits (length, offsetDelta, key/value/header
    lengths, header count) or 10 bytes and 64 bits (timestampDelta); a record's length is at
    least 6 and inside the section; its fields end exactly where the length says;
13. the offsetDelta of record i is i (inner offsets 0..n-1: consumers compute offsets from it;
    Kafka rewrites non-contiguous compressed batches, this broker keeps the bytes and refuses);
14. key/value lengths are -1 or inside the record; the header count is >= 0 and at most half
    the bytes left in the record (a header takes at least 2); header key length >= 0, header
    value length >= -1, both inside the record;
15. baseTimestamp + timestampDelta fits 64 bits.

Record content: every record is checked, ``record_errors`` lists every offending record and
the error message shows the first three (Kafka's processRecordErrors):

16. a record without a key on a compacted topic (cleanup.policy contains compact):
    INVALID_RECORD "Compacted topic cannot accept message without key".
17. CreateTime topic: a record timestamp (other than -1) outside
    [now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms] (KIP-937,
    falling back to message.timestamp.difference.max.ms): INVALID_TIMESTAMP, which is the
    batch's error as soon as any record has it.

:func:`validate_batch` returns the largest record timestamp, which the log writes into the
batch's maxTimestamp for CreateTime topics (as LogValidator's setMaxTimestamp does).

Two implementations of rules 11-17 give the same answers: a per-record Python loop (the
reference, used for small batches and to name the error) and, for batches of at least
``VECTOR_MIN_RECORDS`` records, a walk over the record lengths plus pyarrow kernels over all
records at once. The vectorised path only ever *accepts*: on any doubt it hands the batch to
the Python loop (on the same decompressed bytes), which then produces the error.

Pure functions over caller-owned buffers: thread-safe, no I/O. They run on the broker's event
loop (PartitionLog.validate) and take about 0.16 µs per record on big batches, 0.5-1 µs per
record below ``VECTOR_MIN_RECORDS`` (BENCHMARKS.md): about 1 ms for a 1 MB batch. Work and
memory are bounded by the decompression limit: intermediate arrays are built
``VECTOR_CHUNK_RECORDS`` records at a time.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass

import cramjam
import pyarrow as pa
import pyarrow.compute as pc

from loglake.config import LONG_MAX, TopicConfig
from loglake.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    LoglakeError,
    MessageTooLargeError,
    RecordError,
    TransactionalIdAuthorizationError,
    UnsupportedCompressionTypeError,
)
from loglake.segments.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_OFFSET,
    CURRENT_MAGIC,
    HEADER_SIZE,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    Buffer,
    batch_size_at,
    compute_crc,
)
from loglake.segments.varints import (
    MIN_RECORD_LENGTH,
    RECORD_STEPS,
    SHORT_VARINT_ARRAY,
    SHORT_VARINTS,
)

MAX_DECOMPRESSION_RATIO = 16
"""A records section may decompress to at most ``max.message.bytes`` times this (rule 10)."""
VECTOR_MIN_RECORDS = 512
"""Batches with at least this many records are checked with pyarrow kernels (measured
crossover with the per-record loop on the produce path; see BENCHMARKS.md)."""
VECTOR_CHUNK_RECORDS = 65536
"""The vectorised path works through a batch this many records at a time (bounds the memory of
its intermediate arrays: a batch decompressed to the limit may hold millions of records)."""
MAX_VECTOR_HEADERS = 32
"""Records with more headers than this are checked by the per-record loop."""
ZSTD_MIN_PRODUCE_VERSION = 7

_GZIP, _SNAPPY, _LZ4, _ZSTD = 1, 2, 3, 4
_CODEC_NAMES = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_ATTRIBUTES = struct.Struct(">h")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_U32_LE = struct.Struct("<I")
_U64_LE = struct.Struct("<Q")
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16
_OUTPUT_FULL = "failed to write whole buffer"  # cramjam's message when the output is too small


@dataclass(frozen=True, slots=True)
class RecordRules:
    """What one topic (config) asks of every record at one moment (``now_ms``)."""

    now_ms: int
    compacted: bool
    create_time: bool
    before_max_ms: int
    after_max_ms: int
    max_decompressed_bytes: int
    partition: str = ""  # for messages

    @classmethod
    def for_topic(cls, config: TopicConfig, now_ms: int, partition: str = "") -> RecordRules:
        return cls(
            now_ms=now_ms,
            compacted="compact" in config.cleanup_policy,
            create_time=config.message_timestamp_type != "LogAppendTime",
            before_max_ms=config.timestamp_before_max_ms,
            after_max_ms=config.timestamp_after_max_ms,
            max_decompressed_bytes=max(config.max_message_bytes, 1) * MAX_DECOMPRESSION_RATIO,
            partition=partition,
        )

    @property
    def low(self) -> int | None:
        """The earliest acceptable CreateTime timestamp (None: no limit)."""
        if not self.create_time or self.before_max_ms >= LONG_MAX:
            return None
        return self.now_ms - self.before_max_ms

    @property
    def high(self) -> int | None:
        """The latest acceptable CreateTime timestamp (None: no limit)."""
        if not self.create_time or self.after_max_ms >= LONG_MAX:
            return None
        return self.now_ms + self.after_max_ms


# ------------------------------------------------------------------------------ request


def check_produce_records(records: Buffer, api_version: int, *,
                          transactional_id: str | None = None) -> None:
    """Rules 1-4 for one partition's ``records`` of a Produce request of ``api_version``
    (carrying ``transactional_id``, None when it has none).

    Looks only at the first batch's header fields and length; a truncated batch is left to
    parse_batches (CORRUPT_MESSAGE)."""
    if len(records) <= ATTRIBUTES_OFFSET + 2:
        return
    if records[MAGIC_OFFSET] != CURRENT_MAGIC:
        raise InvalidRecordError(
            f"Produce requests with version {api_version} are only allowed to contain record "
            f"batches with magic version 2 (got magic {records[MAGIC_OFFSET]})."
        )
    (attributes,) = _ATTRIBUTES.unpack_from(records, ATTRIBUTES_OFFSET)
    if attributes & TRANSACTIONAL_BIT and transactional_id is None:
        raise TransactionalIdAuthorizationError(
            "Transactional record batch in a Produce request without a transactional id.",
            hint="a transactional producer sets transactional.id",
        )
    if api_version < ZSTD_MIN_PRODUCE_VERSION and attributes & COMPRESSION_MASK == _ZSTD:
        raise UnsupportedCompressionTypeError(
            f"Produce requests with version {api_version} are not allowed to use ZStandard "
            "compression.",
            hint="zstd needs Produce v7 or later (Kafka 2.1+ clients)",
        )
    if batch_size_at(records, 0) < len(records):
        raise InvalidRecordError(
            f"Produce requests with version {api_version} are only allowed to contain exactly "
            "one record batch per partition."
        )


# -------------------------------------------------------------------------------- batch


def validate_batches(buf: Buffer, headers: list[BatchHeader], rules: RecordRules) -> list[int]:
    """:func:`validate_batch` for each batch in ``buf``; the max timestamps, in order."""
    return [validate_batch(buf, header, rules) for header in headers]


def validate_batch(buf: Buffer, header: BatchHeader, rules: RecordRules) -> int:
    """Rules 5-17 for the batch ``header`` describes at ``header.position`` in ``buf``.

    Returns the largest record timestamp (NO_TIMESTAMP if none is larger); raises the typed
    error of the first rule broken."""
    where = f" in topic partition {rules.partition}" if rules.partition else ""
    if header.base_offset != 0:
        raise InvalidRecordError(
            f"The baseOffset of the record batch in the append to {rules.partition or 'the log'}"
            f" should be 0, but it is {header.base_offset}"
        )
    if header.attributes & CONTROL_BIT:
        raise InvalidRecordError(f"Clients are not allowed to write control records{where}")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(
            f"Invalid sequence number {header.base_sequence} in record batch with producerId "
            f"{header.producer_id}{where}"
        )
    codec = header.attributes & COMPRESSION_MASK
    if codec > _ZSTD:
        raise UnsupportedCompressionTypeError(
            f"Unknown compression type id {codec} in record batch{where}",
            hint="Kafka's codecs are 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd",
        )
    count = header.record_count
    if header.attributes & TIMESTAMP_TYPE_BIT:
        message = "Producer should not set timestamp type to LogAppendTime."
        raise InvalidTimestampError(
            f"One or more records have been rejected due to invalid timestamp: {message}",
            # every record is named (the count is capped by what the batch can hold)
            record_errors=tuple((i, message) for i in range(
                min(count, header.size // (MIN_RECORD_LENGTH + 1)))),
        )
    start = header.position + HEADER_SIZE
    end = header.position + header.size
    data: Buffer = buf
    if codec:
        data = _decompress(codec, memoryview(buf)[start:end], rules.max_decompressed_bytes, where)
        start, end = 0, len(data)
    if count >= VECTOR_MIN_RECORDS:
        checked = _vector_check(data, start, end, count, header.base_timestamp, rules)
        if checked is not None:
            return checked
    return _python_check(data, start, end, count, header.base_timestamp, rules, where)


def set_max_timestamp(buf: bytearray, position: int, size: int, timestamp: int) -> int:
    """Write ``timestamp`` into the maxTimestamp of the batch at ``buf[position]`` and
    recompute its CRC (LogValidator's setMaxTimestamp for CreateTime); returns the new CRC."""
    _I64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp)
    crc = compute_crc(buf, position, size)
    _U32.pack_into(buf, position + CRC_OFFSET, crc)
    return crc


# -------------------------------------------------------------------------- decompression


def _decompress(codec: int, section: memoryview, limit: int, where: str) -> bytearray:
    """The records section decompressed into a buffer of at most ``limit`` bytes."""
    name = _CODEC_NAMES[codec]
    try:
        if codec == _SNAPPY:
            return _snappy(section, limit, where)
        module = {_GZIP: cramjam.gzip, _LZ4: cramjam.lz4, _ZSTD: cramjam.zstd}[codec]
        size = min(max(_size_hint(codec, section) or 4 * len(section), 4096), limit)
        while True:
            out = bytearray(size)
            try:
                written = module.decompress_into(section, out)
            except cramjam.DecompressionError as exc:
                if _OUTPUT_FULL not in str(exc):
                    raise
                if size >= limit:
                    raise _too_large(name, limit, where) from None
                size = min(size * 4, limit)
                continue
            del out[written:]
            return out
    except LoglakeError:
        raise
    except Exception as exc:  # cramjam.DecompressionError and friends
        raise CorruptRecordError(f"cannot decompress {name} record batch{where}: {exc}") from None


def _too_large(name: str, limit: int, where: str) -> MessageTooLargeError:
    return MessageTooLargeError(
        f"{name} record batch{where} decompresses to more than {limit} bytes "
        f"(max.message.bytes x {MAX_DECOMPRESSION_RATIO})",
        hint="send smaller batches or raise max.message.bytes",
    )


def _snappy(section: memoryview, limit: int, where: str) -> bytearray:
    """Raw snappy (librdkafka) or xerial-framed blocks (the Java client); the uncompressed
    length of each block is read from its preamble before anything is allocated."""
    if bytes(section[:8]) != _XERIAL_MAGIC:
        size = cramjam.snappy.decompress_raw_len(section)
        if size > limit:
            raise _too_large("snappy", limit, where)
        out = bytearray(size)
        written = cramjam.snappy.decompress_raw_into(section, out)
        del out[written:]
        return out
    blocks: list[tuple[memoryview, int]] = []
    total = 0
    pos = _XERIAL_HEADER_SIZE
    while pos < len(section):
        if pos + 4 > len(section):
            raise CorruptRecordError(f"truncated xerial snappy block length{where}")
        length = int.from_bytes(section[pos : pos + 4], "big")
        pos += 4
        if pos + length > len(section):
            raise CorruptRecordError(f"truncated xerial snappy block{where}")
        block = section[pos : pos + length]
        size = cramjam.snappy.decompress_raw_len(block)
        total += size
        if total > limit:
            raise _too_large("snappy", limit, where)
        blocks.append((block, size))
        pos += length
    out = bytearray(total)
    view = memoryview(out)
    at = 0
    for block, size in blocks:
        at += cramjam.snappy.decompress_raw_into(block, view[at : at + size])
    del view
    del out[at:]
    return out


def _size_hint(codec: int, section: memoryview) -> int | None:
    """The decompressed size of the stream: an upper bound read from the lz4/zstd frame and
    block headers, gzip's ISIZE, or None. Only the size of the first output buffer: a wrong
    guess costs a retry, never more memory than the limit."""
    try:
        if codec == _GZIP and len(section) >= 18:
            return int(_U32_LE.unpack_from(section, len(section) - 4)[0]) or None  # ISIZE
        if codec == _LZ4:
            return _lz4_bound(section)
        if codec == _ZSTD:
            return _zstd_bound(section)
    except (IndexError, struct.error):
        return None
    return None


_LZ4_MAGIC = 0x184D2204
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}


def _lz4_bound(section: memoryview) -> int | None:
    """Sum over the blocks of lz4 frames: a compressed block yields at most the frame's block
    maximum size, an uncompressed one its own size."""
    total, pos, n = 0, 0, len(section)
    while pos < n:
        if _U32_LE.unpack_from(section, pos)[0] != _LZ4_MAGIC:
            return None
        flags, block_descriptor = section[pos + 4], section[pos + 5]
        block_max = _LZ4_BLOCK_MAX.get((block_descriptor >> 4) & 7)
        if block_max is None:
            return None
        pos += 7 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
        block_checksum = 4 if flags & 0x10 else 0
        while True:
            (size,) = _U32_LE.unpack_from(section, pos)
            pos += 4
            if size == 0:
                break
            stored = size & 0x7FFFFFFF
            total += stored if size & 0x80000000 else block_max
            pos += stored + block_checksum
        pos += 4 if flags & 0x04 else 0  # content checksum
    return total or None


_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 << 10


def _zstd_bound(section: memoryview) -> int | None:
    """Sum over the blocks of zstd frames: raw and RLE blocks declare their size, a
    compressed block yields at most 128 KiB; skippable frames are skipped."""
    total, pos, n = 0, 0, len(section)
    while pos < n:
        (magic,) = _U32_LE.unpack_from(section, pos)
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            pos += 8 + _U32_LE.unpack_from(section, pos + 4)[0]
            continue
        if magic != _ZSTD_MAGIC:
            return None
        descriptor = section[pos + 4]
        single_segment = (descriptor >> 5) & 1
        pos += 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
        pos += (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
        while True:
            header = section[pos] | section[pos + 1] << 8 | section[pos + 2] << 16
            pos += 3
            kind, size = (header >> 1) & 3, header >> 3
            if kind == 3:
                return None
            total += _ZSTD_BLOCK_MAX if kind == 2 else size
            pos += 1 if kind == 1 else size
            if header & 1:
                break
        pos += 4 if descriptor & 0x04 else 0  # content checksum
    return total or None


# ------------------------------------------------------------------ records: Python loop


class _Malformed(Exception):
    """Record ``index`` breaks a structural rule (becomes InvalidRecordError)."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index
        self.message = message


def _varint(data: Buffer, pos: int, max_bytes: int, index: int) -> tuple[int, int]:
    """The zig-zag varint of at most ``max_bytes`` bytes at ``data[pos]`` whose raw value fits
    ``7 * max_bytes`` rounded down to 32/64 bits: (value, next position)."""
    raw = 0
    shift = 0
    for i in range(max_bytes):
        byte = data[pos + i]
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            if raw >> (32 if max_bytes == 5 else 64):
                raise _Malformed(index, f"varint of record {index} does not fit "
                                        f"{32 if max_bytes == 5 else 64} bits")
            return (raw >> 1) ^ -(raw & 1), pos + i + 1
        shift += 7
    raise _Malformed(index, f"varint longer than {max_bytes} bytes in record {index}")


def _python_check(data: Buffer, pos: int, end: int, count: int, base_timestamp: int,
                  rules: RecordRules, where: str) -> int:
    """Rules 11-17, record by record; returns the max timestamp."""
    errors: list[RecordError] = []
    invalid_timestamp = False
    compacted = rules.compacted
    low, high = rules.low, rules.high
    check_time = low is not None or high is not None
    max_timestamp = NO_TIMESTAMP
    short = SHORT_VARINTS
    index = 0
    try:
        for index in range(count):
            if pos >= end:
                raise _Malformed(index, f"Incorrect declared batch size: {count} records "
                                        f"declared, premature end after {index}")
            b = data[pos]
            if b < 0x80:
                length = short[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                length = short[b + (data[pos + 1] << 7)]
                pos += 2
            else:
                length, pos = _varint(data, pos, 5, index)
            if length < MIN_RECORD_LENGTH or length > end - pos:
                raise _Malformed(index, f"Invalid record size {length} of record {index}: "
                                        f"{end - pos} bytes left in the batch")
            stop = pos + length
            pos += 1  # attributes (unused in v2)
            b = data[pos]
            if b < 0x80:
                delta = short[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                delta = short[b + (data[pos + 1] << 7)]
                pos += 2
            else:
                delta, pos = _varint(data, pos, 10, index)
            b = data[pos]
            if b < 0x80:
                offset_delta = short[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                offset_delta = short[b + (data[pos + 1] << 7)]
                pos += 2
            else:
                offset_delta, pos = _varint(data, pos, 5, index)
            if offset_delta != index:
                raise _Malformed(index, f"Inner record offset delta {offset_delta} does not "
                                        f"match expected offset delta {index}")
            b = data[pos]
            if b < 0x80:
                key_length = short[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                key_length = short[b + (data[pos + 1] << 7)]
                pos += 2
            else:
                key_length, pos = _varint(data, pos, 5, index)
            if key_length < -1 or key_length > stop - pos:
                raise _Malformed(index, f"Invalid key length {key_length} in record {index}")
            if key_length > 0:
                pos += key_length
            b = data[pos]
            if b < 0x80:
                value_length = short[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                value_length = short[b + (data[pos + 1] << 7)]
                pos += 2
            else:
                value_length, pos = _varint(data, pos, 5, index)
            if value_length < -1 or value_length > stop - pos:
                raise _Malformed(index, f"Invalid value length {value_length} in record "
                                        f"{index}")
            if value_length > 0:
                pos += value_length
            b = data[pos]
            if b < 0x80:
                header_count = short[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                header_count = short[b + (data[pos + 1] << 7)]
                pos += 2
            else:
                header_count, pos = _varint(data, pos, 5, index)
            if header_count:
                pos = _python_headers(data, pos, stop, header_count, index)
            if pos != stop:
                raise _Malformed(index, f"Invalid record size: expected to read {length} bytes "
                                        f"in record {index}, but read {pos - stop + length}")
            timestamp = base_timestamp + delta
            if not _INT64_MIN <= timestamp <= _INT64_MAX:
                raise _Malformed(index, f"timestamp of record {index} does not fit 64 bits")
            if timestamp > max_timestamp:
                max_timestamp = timestamp
            if compacted and key_length == -1:
                errors.append((index, "Compacted topic cannot accept message without key"
                                      f"{where}"))
            elif check_time and timestamp != NO_TIMESTAMP and (
                    (low is not None and timestamp < low)
                    or (high is not None and timestamp > high)):
                invalid_timestamp = True
                errors.append((index, f"Timestamp {timestamp} of message with offset {index} "
                                      f"is out of range. The timestamp should be within "
                                      f"[{low}, {high}]"))
        if pos != end:
            raise _Malformed(count - 1, f"Incorrect declared batch size, records still "
                                        f"remaining after the {count} declared")
    except IndexError:
        raise InvalidRecordError(
            f"Found invalid record structure{where}: record {index} runs past the batch",
            record_errors=((index, "Found invalid record structure"),),
        ) from None
    except _Malformed as bad:
        raise InvalidRecordError(f"Found invalid record structure{where}: {bad.message}",
                                 record_errors=((bad.index, bad.message),)) from None
    if errors:
        _raise_record_errors(errors, invalid_timestamp, where)
    return max_timestamp


def _python_headers(data: Buffer, pos: int, stop: int, count: int, index: int) -> int:
    if count < 0 or 2 * count > stop - pos:
        raise _Malformed(index, f"Found invalid number of record headers {count} in record "
                                f"{index}")
    for _ in range(count):
        size, pos = _varint(data, pos, 5, index)
        if size < 0 or size > stop - pos:
            raise _Malformed(index, f"Invalid header key size {size} in record {index}")
        pos += size
        size, pos = _varint(data, pos, 5, index)
        if size < -1 or size > stop - pos:
            raise _Malformed(index, f"Invalid header value size {size} in record {index}")
        if size > 0:
            pos += size
    return pos


def _raise_record_errors(errors: list[RecordError], invalid_timestamp: bool,
                         where: str) -> None:
    """Kafka's processRecordErrors: INVALID_TIMESTAMP if any record has one, else
    INVALID_RECORD; the message shows the first three."""
    if invalid_timestamp:
        raise InvalidTimestampError(
            f"One or more records have been rejected due to invalid timestamp{where}: "
            f"{errors[0][1]}",
            record_errors=tuple(errors),
        )
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    raise InvalidRecordError(
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]",
        record_errors=tuple(errors),
    )


# --------------------------------------------------------------- records: pyarrow kernels


I64 = pa.int64()


def _pair_tables() -> tuple[pa.Array, pa.Array, pa.Array]:
    """For the varint whose first two bytes are ``b, c``, at index ``b | c << 8``: its value
    and size (one byte if b < 0x80, two if c < 0x80, else size 0: longer), and the raw
    (not zig-zag decoded) low bits those bytes carry."""
    values, sizes, raws = [0] * 0x10000, [0] * 0x10000, [0] * 0x10000
    for pair in range(0x10000):
        b, c = pair & 0xFF, pair >> 8
        if b < 0x80:
            values[pair], sizes[pair], raws[pair] = SHORT_VARINTS[b], 1, b
        elif c < 0x80:
            values[pair], sizes[pair] = SHORT_VARINTS[b + (c << 7)], 2
            raws[pair] = (b & 0x7F) | c << 7
        else:
            raws[pair] = (b & 0x7F) | (c & 0x7F) << 7
    return pa.array(values, I64), pa.array(sizes, I64), pa.array(raws, I64)


_PAIR_VALUES, _PAIR_SIZES, _PAIR_RAW = _pair_tables()
_arange_cache: list[pa.Array] = [pa.array([], I64)]


def _arange(count: int) -> pa.Array:
    """0..count-1 as int64 (a slice of a cached array)."""
    cached = _arange_cache[0]
    if len(cached) < count:
        size = max(count, 2 * len(cached), 1024)
        cached = pc.subtract(pc.cumulative_sum(pc.fill_null(pa.nulls(size, I64), 1)), 1)
        _arange_cache[0] = cached
    return cached.slice(0, count)


class _Reject(Exception):
    """The vectorised check cannot accept the batch (the Python loop decides)."""


def _walk(data: Buffer, pos: int, end: int, count: int) -> array[int]:
    """Where each record starts, then ``end``: ``count + 1`` positions found by following the
    length prefixes. _Reject unless exactly ``count`` records of at least the minimum length
    fill ``data[pos:end]`` with one- or two-byte length prefixes (longer records, from 8 KiB,
    are left to the Python loop)."""
    if count > (end - pos) // (MIN_RECORD_LENGTH + 1):
        raise _Reject  # also bounds the allocation below for a lying record count
    starts = array("q", bytes(8 * (count + 1)))
    steps = RECORD_STEPS
    for i in range(count):
        starts[i] = pos
        b = data[pos]
        pos += steps[b] if b < 0x80 else steps[b + (data[pos + 1] << 7)]  # IndexError: long
    if pos != end:
        raise _Reject
    starts[count] = end
    return starts


class _Columns:
    """Vectorised varint reads from one records buffer at many positions at a time."""

    def __init__(self, data: Buffer) -> None:
        self.size = len(data)
        self.bytes = pa.Array.from_buffers(pa.uint8(), self.size, [None, pa.py_buffer(data)])
        self.last = self.size - 1

    def varints(self, positions: pa.Array, max_bytes: int) -> tuple[pa.Array, pa.Array]:
        """(values, next positions) of the varints at ``positions`` (all inside the buffer,
        else IndexError from take); _Reject for a varint longer than two bytes that is
        malformed (longer than ``max_bytes``, or not fitting its width)."""
        first = self.bytes.take(positions)
        if pc.max(first).as_py() < 0x80:
            return SHORT_VARINT_ARRAY.take(first), pc.add(positions, 1)
        after = pc.add(positions, 1)
        try:
            second = self.bytes.take(after)
        except IndexError:  # a varint in the buffer's last byte
            second = self.bytes.take(pc.min_element_wise(after, self.last))
        pair = pc.add(first, pc.multiply(second, 256))  # both bytes, as in _PAIR_*
        sizes = _PAIR_SIZES.take(pair)
        if pc.min(sizes).as_py() == 0:
            return self._three(positions, pair, sizes, max_bytes)
        return _PAIR_VALUES.take(pair), pc.add(positions, sizes)

    def _three(self, positions: pa.Array, pair: pa.Array, sizes: pa.Array,
               max_bytes: int) -> tuple[pa.Array, pa.Array]:
        """Varints of one to three bytes (values below 2**20 in magnitude: offset deltas of
        big batches, timestamp deltas of seconds); longer ones go to :meth:`_long`."""
        third = self.bytes.take(pc.min_element_wise(pc.add(positions, 2), self.last))
        three = pc.equal(sizes, 0)
        if pc.any(pc.and_(three, pc.greater_equal(third, 0x80))).as_py():
            return self._long(positions, max_bytes)
        three_bits = three.cast(I64)
        raw = pc.add(_PAIR_RAW.take(pair),
                     pc.multiply(pc.shift_left(third.cast(I64), 14), three_bits))
        values = pc.bit_wise_xor(pc.shift_right(raw, 1), pc.negate(pc.bit_wise_and(raw, 1)))
        return values, pc.add(positions, pc.add(sizes, pc.multiply(three_bits, 3)))

    def _long(self, positions: pa.Array, max_bytes: int) -> tuple[pa.Array, pa.Array]:
        u64 = pa.uint64()
        byte = self.bytes.take(positions)
        raw = pc.bit_wise_and(byte, 0x7F).cast(u64)
        active = pc.greater_equal(byte, 0x80)
        size = pc.add(active.cast(I64), 1)
        width_bits = 32 if max_bytes == 5 else 64
        for index in range(1, max_bytes):
            byte = self.bytes.take(pc.min_element_wise(pc.add(positions, index), self.last))
            bits = pc.bit_wise_and(byte, 0x7F).cast(u64)
            if index * 7 + 7 > width_bits and pc.any(pc.and_(
                    active, pc.greater_equal(bits, 1 << (width_bits - 7 * index)))).as_py():
                raise _Reject  # does not fit its width
            raw = pc.if_else(active, pc.bit_wise_or(raw, pc.shift_left(bits, 7 * index)), raw)
            active = pc.and_(active, pc.greater_equal(byte, 0x80))
            if not pc.any(active).as_py():
                break
            size = pc.add(size, active.cast(I64))
        else:
            raise _Reject  # longer than max_bytes
        half = pc.shift_right(raw, 1).cast(I64, safe=False)
        sign = pc.bit_wise_and(raw, 1).cast(I64)
        return pc.bit_wise_xor(half, pc.negate(sign)), pc.add(positions, size)

    def skip(self, positions: pa.Array, sizes: pa.Array) -> pa.Array:
        """``positions + max(sizes, 0)`` (a -1 length takes no bytes)."""
        return pc.add(positions, pc.max_element_wise(sizes, 0))


def _vector_check(data: Buffer, pos: int, end: int, count: int, base_timestamp: int,
                  rules: RecordRules) -> int | None:
    """Rules 11-17 over all records at once: the max timestamp if every record passes,
    None when the Python loop must decide."""
    try:
        return _vector_rules(data, pos, end, count, base_timestamp, rules)
    except (_Reject, _Malformed, IndexError, ValueError, pa.ArrowException):
        return None


def _vector_rules(data: Buffer, pos: int, end: int, count: int, base_timestamp: int,
                  rules: RecordRules) -> int:
    bounds = pa.Array.from_buffers(I64, count + 1, [None, pa.py_buffer(_walk(data, pos, end,
                                                                            count))])
    columns = _Columns(data)
    highest = NO_TIMESTAMP
    for first in range(0, count, VECTOR_CHUNK_RECORDS):
        size = min(VECTOR_CHUNK_RECORDS, count - first)
        chunk_max = _vector_chunk(columns, bounds.slice(first, size + 1), first,
                                  base_timestamp, rules)
        highest = max(highest, chunk_max)
    return highest


def _vector_chunk(columns: _Columns, bounds: pa.Array, first: int, base_timestamp: int,
                  rules: RecordRules) -> int:
    """Rules 11-17 for the records ``first, first + 1, ...`` whose starts (and then the
    end of the last) are ``bounds``; the largest timestamp."""
    count = len(bounds) - 1
    starts, record_end = bounds.slice(0, count), bounds.slice(1)
    prefix = columns.bytes.take(starts)  # first length byte: one- or two-byte prefixes only
    body = pc.add(starts, pc.add(pc.greater_equal(prefix, 0x80).cast(I64), 1))
    delta, at = columns.varints(pc.add(body, 1), 10)  # after the attributes byte
    offset_delta, at = columns.varints(at, 5)
    if first:
        offset_delta = pc.subtract(offset_delta, first)
    if not pc.all(pc.equal(offset_delta, _arange(count))).as_py():
        raise _Reject
    key_length, at = columns.varints(at, 5)
    key_range = pc.min_max(key_length).as_py()
    if key_range["min"] < (0 if rules.compacted else -1):
        raise _Reject
    value_length, at = columns.varints(columns.skip(at, key_length), 5)
    if pc.min(value_length).as_py() < -1:
        raise _Reject
    header_count, at = columns.varints(columns.skip(at, value_length), 5)
    header_range = pc.min_max(header_count).as_py()
    if header_range["min"] < 0:
        raise _Reject
    if header_range["max"] == 0:
        if not pc.all(pc.equal(at, record_end)).as_py():
            raise _Reject
    else:
        _vector_headers(columns, header_count, at, record_end, header_range["max"])
    time_range = pc.min_max(delta).as_py()
    lowest = base_timestamp + time_range["min"]
    highest = base_timestamp + time_range["max"]
    if lowest < _INT64_MIN or highest > _INT64_MAX:
        raise _Reject
    low, high = rules.low, rules.high
    if (low is not None and lowest < low) or (high is not None and highest > high):
        raise _Reject  # the loop skips NO_TIMESTAMP records and names the others
    return max(highest, NO_TIMESTAMP)


def _vector_headers(columns: _Columns, counts: pa.Array, first: pa.Array, record_end: pa.Array,
                    most: int) -> None:
    """Rule 14 for the headers: header j of every record that has one is read at once."""
    if most > MAX_VECTOR_HEADERS:
        raise _Reject
    has_headers = pc.not_equal(counts, 0)
    if not pc.all(pc.or_(has_headers, pc.equal(first, record_end))).as_py():
        raise _Reject
    rows = pc.indices_nonzero(has_headers)
    counts, at, stop = counts.take(rows), first.take(rows), record_end.take(rows)
    if pc.any(pc.greater(pc.multiply(counts, 2), pc.subtract(stop, at))).as_py():
        raise _Reject
    index = 0
    while True:
        key_size, at = columns.varints(at, 5)
        if pc.min(key_size).as_py() < 0:
            raise _Reject
        value_size, at = columns.varints(columns.skip(at, key_size), 5)
        if pc.min(value_size).as_py() < -1:
            raise _Reject
        at = columns.skip(at, value_size)
        index += 1
        done = pc.equal(counts, index)
        if pc.any(pc.and_(done, pc.not_equal(at, stop))).as_py():
            raise _Reject
        more = pc.invert(done)
        if not pc.any(more).as_py():
            return
        counts, at, stop = counts.filter(more), at.filter(more), stop.filter(more)
