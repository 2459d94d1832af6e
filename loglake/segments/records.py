"""Full decoding and encoding of RecordBatch v2 records, with every Kafka compression codec.

Record format inside a batch (after the 61-byte header of batch.py; the records section is
compressed as a whole when the batch's compression bits are set)::

    length          varint   bytes of this record after the length field
    attributes      int8     unused, 0
    timestampDelta  varlong  record timestamp - batch baseTimestamp
    offsetDelta     varint   record offset - batch baseOffset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headerCount     varint
    headers         (keyLength varint, key utf-8, valueLength varint (-1 null), value) * count

Varints are zig-zag encoded (protobuf style). Codecs (``cramjam``): 1 gzip, 2 snappy (raw
blocks as librdkafka writes, or xerial framing ``\\x82SNAPPY\\x00`` + version + compat +
(u32 length, raw block)* as the Java client writes), 3 lz4 (frame format), 4 zstd. The encoder
writes snappy with xerial framing, like the Java client.

Timestamps: in a LogAppendTime batch every record's timestamp is the batch's maxTimestamp.

Transaction markers (:func:`encode_end_txn_marker`, :func:`decode_end_txn_marker`): a control
batch (attributes transactional|control, base sequence -1, never compressed) with one record,
key = int16 version 0 + int16 type (0 ABORT, 1 COMMIT), value = int16 version 0 + int32
coordinator epoch (Kafka's ``EndTransactionMarker``).

Anything malformed raises :class:`CorruptRecordError` (never IndexError/struct.error);
unsupported codecs raise :class:`InvalidRecordError`. Pure functions, thread-safe, no I/O.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import cramjam

from loglake.errors import CorruptRecordError, InvalidRecordError
from loglake.segments.batch import (
    CONTROL_BIT,
    HEADER,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    Buffer,
    compute_crc,
    read_header,
)

Header = tuple[str, bytes | None]

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_VERSION = 1
_XERIAL_COMPAT = 1
_XERIAL_BLOCK_SIZE = 32 * 1024
_U32 = struct.Struct(">I")


class Compression(enum.IntEnum):
    """Kafka's compression codec ids (batch attributes bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record. ``timestamp`` is in ms; ``timestamp_type`` 0 CreateTime, 1 LogAppend."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)
    timestamp_type: int = 0


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """A batch's header plus its records (``records`` may be empty after compaction)."""

    header: BatchHeader
    records: list[Record]

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def producer_id(self) -> int:
        return self.header.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.header.producer_epoch

    @property
    def base_sequence(self) -> int:
        return self.header.base_sequence

    @property
    def leader_epoch(self) -> int:
        return self.header.partition_leader_epoch

    @property
    def is_control(self) -> bool:
        return self.header.is_control

    @property
    def is_transactional(self) -> bool:
        return self.header.is_transactional

    @property
    def compression(self) -> Compression:
        return Compression(self.header.compression)

    @property
    def timestamp_type(self) -> int:
        return self.header.timestamp_type


# --------------------------------------------------------------------------------- varints


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag varint at ``buf[pos]``: (value, next position). IndexError past the end."""
    byte = buf[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes in record")


def _write_varint(out: bytearray, value: int) -> None:
    """Append ``value`` zig-zag varint encoded (64-bit)."""
    zigzag = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)


# ---------------------------------------------------------------------------- compression


def decompress(codec: int, data: Buffer) -> bytes:
    """Decompress a records section; CorruptRecordError if the codec rejects it."""
    try:
        if codec == Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == Compression.SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec == Compression.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except CorruptRecordError:
        raise
    except Exception as exc:  # cramjam.DecompressionError and friends
        raise CorruptRecordError(
            f"cannot decompress {_codec_name(codec)} record batch: {exc}"
        ) from None
    raise InvalidRecordError(f"unknown compression codec {codec} in record batch")


def compress(codec: int, data: bytes) -> bytes:
    """Compress a records section the way Kafka's Java client does."""
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Compression.SNAPPY:
        return _snappy_xerial_compress(data)
    if codec == Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise InvalidRecordError(f"unknown compression codec {codec}")


def _codec_name(codec: int) -> str:
    try:
        return Compression(codec).name.lower()
    except ValueError:
        return f"codec {codec}"


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    if len(data) < _XERIAL_HEADER.size:
        raise CorruptRecordError("truncated xerial snappy header")
    out = bytearray()
    pos = _XERIAL_HEADER.size
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("truncated xerial snappy block length")
        (length,) = _U32.unpack_from(data, pos)
        pos += 4
        if pos + length > len(data):
            raise CorruptRecordError("truncated xerial snappy block")
        out += cramjam.snappy.decompress_raw(data[pos : pos + length])
        pos += length
    return bytes(out)


def _snappy_xerial_compress(data: bytes) -> bytes:
    out = bytearray(_XERIAL_HEADER.pack(XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_COMPAT))
    for start in range(0, len(data), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK_SIZE]))
        out += _U32.pack(len(block))
        out += block
    return bytes(out)


# -------------------------------------------------------------------------------- decoding


def decode_batch(buf: Buffer, offset: int = 0, *, verify_crc: bool = True) -> DecodedBatch:
    """Decode the batch at ``buf[offset]`` (header validated as in batch.read_header)."""
    header = read_header(buf, offset, verify_crc=verify_crc)
    return DecodedBatch(header, decode_records(buf, header, offset))


def decode_batches(buf: Buffer, *, verify_crc: bool = True) -> list[DecodedBatch]:
    """Decode every batch in ``buf`` (batches back to back, as in a fetch response)."""
    return list(iter_decoded_batches(buf, verify_crc=verify_crc))


def iter_decoded_batches(buf: Buffer, *, verify_crc: bool = True) -> Iterator[DecodedBatch]:
    offset = 0
    while offset < len(buf):
        decoded = decode_batch(buf, offset, verify_crc=verify_crc)
        yield decoded
        offset += decoded.header.size


def iter_records(buf: Buffer, *, verify_crc: bool = True) -> Iterator[Record]:
    """Every record of every batch in ``buf``."""
    for decoded in iter_decoded_batches(buf, verify_crc=verify_crc):
        yield from decoded.records


def decode_records(buf: Buffer, header: BatchHeader, offset: int | None = None) -> list[Record]:
    """The records of an already-parsed batch; ``offset`` is where it starts in ``buf``
    (default ``header.position``)."""
    start = header.position if offset is None else offset
    section = memoryview(buf)[start + HEADER_SIZE : start + LOG_OVERHEAD + header.batch_length]
    payload = bytes(section) if header.compression == 0 else decompress(header.compression, section)
    log_append = header.attributes & TIMESTAMP_TYPE_BIT
    timestamp_type = LOG_APPEND_TIME if log_append else 0
    try:
        return _parse_records(payload, header, timestamp_type, bool(log_append))
    except (IndexError, ValueError) as exc:
        raise CorruptRecordError(
            f"malformed record in batch at base offset {header.base_offset}: {exc}"
        ) from None


def _parse_records(
    data: bytes, header: BatchHeader, timestamp_type: int, log_append: bool
) -> list[Record]:
    records: list[Record] = []
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    max_timestamp = header.max_timestamp
    pos = 0
    end = len(data)
    for _ in range(header.record_count):
        if pos >= end:
            raise CorruptRecordError(
                f"batch at base offset {base_offset} declares {header.record_count} records "
                f"but holds only {len(records)}"
            )
        length, pos = _read_varint(data, pos)
        record_start = pos
        if length < 6 or pos + length > end:
            raise CorruptRecordError(f"record length {length} out of bounds")
        pos += 1  # attributes
        timestamp_delta, pos = _read_varint(data, pos)
        offset_delta, pos = _read_varint(data, pos)
        key, pos = _read_bytes(data, pos)
        value, pos = _read_bytes(data, pos)
        header_count, pos = _read_varint(data, pos)
        if header_count < 0:
            raise CorruptRecordError(f"negative header count {header_count}")
        headers: list[Header] = []
        for _ in range(header_count):
            key_length, pos = _read_varint(data, pos)
            if key_length < 0 or pos + key_length > end:
                raise CorruptRecordError(f"invalid header key length {key_length}")
            header_key = data[pos : pos + key_length].decode("utf-8", "replace")
            pos += key_length
            header_value, pos = _read_bytes(data, pos)
            headers.append((header_key, header_value))
        if pos != record_start + length:
            raise CorruptRecordError(
                f"record declares {length} bytes but its fields take {pos - record_start}"
            )
        records.append(
            Record(
                base_offset + offset_delta,
                max_timestamp if log_append else base_timestamp + timestamp_delta,
                key,
                value,
                headers,
                timestamp_type,
            )
        )
    if pos != end:
        raise CorruptRecordError(
            f"{end - pos} bytes left after the {header.record_count} declared records "
            f"of batch at base offset {base_offset}"
        )
    return records


def _read_bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(data, pos)
    if length == -1:
        return None, pos
    if length < -1 or pos + length > len(data):
        raise CorruptRecordError(f"invalid field length {length} in record")
    return data[pos : pos + length], pos + length


# -------------------------------------------------------------------------------- encoding


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
) -> bytes:
    """One record in the v2 record format (length prefix included)."""
    body = bytearray(b"\x00")  # attributes
    _write_varint(body, timestamp_delta)
    _write_varint(body, offset_delta)
    for blob in (key, value):
        if blob is None:
            _write_varint(body, -1)
        else:
            _write_varint(body, len(blob))
            body += blob
    _write_varint(body, len(headers))
    for header_key, header_value in headers:
        encoded_key = header_key.encode()
        _write_varint(body, len(encoded_key))
        body += encoded_key
        if header_value is None:
            _write_varint(body, -1)
        else:
            _write_varint(body, len(header_value))
            body += header_value
    out = bytearray()
    _write_varint(out, len(body))
    out += body
    return bytes(out)


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int | None = None,
    compression: Compression | int = Compression.NONE,
    timestamp_type: int = 0,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """Build one RecordBatch v2 from records with given offsets and timestamps.

    ``base_offset`` defaults to the first record's offset; offsets may have gaps (compacted
    data) but must not go below the base. ``baseTimestamp`` is the first record's timestamp
    (as the Java client writes) and ``maxTimestamp`` the largest, unless given (a LogAppendTime
    batch carries the append time there). ``last_offset_delta`` defaults to the last record's.
    """
    if not records:
        raise InvalidRecordError("cannot encode an empty record batch")
    base = records[0].offset if base_offset is None else base_offset
    base_timestamp = records[0].timestamp
    body = bytearray()
    for record in records:
        delta = record.offset - base
        if delta < 0:
            raise InvalidRecordError(f"record offset {record.offset} below base offset {base}")
        body += encode_record(
            delta, record.timestamp - base_timestamp, record.key, record.value, record.headers
        )
    payload = compress(int(compression), bytes(body))
    attributes = int(compression) & 0x07
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    size = HEADER_SIZE + len(payload)
    out = bytearray(size)
    HEADER.pack_into(
        out,
        0,
        base,
        size - LOG_OVERHEAD,
        partition_leader_epoch,
        2,
        0,
        attributes,
        records[-1].offset - base if last_offset_delta is None else last_offset_delta,
        base_timestamp,
        max(r.timestamp for r in records) if max_timestamp is None else max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    out[HEADER_SIZE:] = payload
    _U32.pack_into(out, 17, compute_crc(out, 0, size))
    return bytes(out)


# ------------------------------------------------------------------ transaction markers

_CONTROL_KEY = struct.Struct(">hh")  # version 0, type
_END_TXN_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch
CONTROL_ABORT = 0
CONTROL_COMMIT = 1


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """The one control record of a COMMIT/ABORT batch (Kafka's ``EndTransactionMarker``):
    key = int16 version 0 + int16 type (0 ABORT, 1 COMMIT), value = int16 version 0 + int32
    coordinator epoch."""

    commit: bool
    coordinator_epoch: int


def encode_end_txn_marker(
    *, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
    timestamp_ms: int,
) -> bytes:
    """A control RecordBatch v2 (magic 2, attributes transactional|control, base sequence -1,
    base offset 0: the log assigns it) holding one end-transaction marker record."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _END_TXN_VALUE.pack(0, coordinator_epoch)
    return encode_batch(
        [Record(0, timestamp_ms, key, value)], base_offset=0, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=-1, is_transactional=True, is_control=True,
    )


def decode_end_txn_marker(buf: Buffer, header: BatchHeader,
                          offset: int | None = None) -> EndTxnMarker | None:
    """The marker of a control batch (``offset`` as in :func:`decode_records`); None for a
    control batch of another type or with no record. CorruptRecordError if unreadable."""
    for record in decode_records(buf, header, offset):
        if record.key is None or len(record.key) < _CONTROL_KEY.size:
            raise CorruptRecordError(
                f"control record at offset {record.offset} has a short or missing key"
            )
        _version, kind = _CONTROL_KEY.unpack_from(record.key)
        if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
            return None
        epoch = -1
        if record.value is not None and len(record.value) >= _END_TXN_VALUE.size:
            epoch = _END_TXN_VALUE.unpack_from(record.value)[1]
        return EndTxnMarker(kind == CONTROL_COMMIT, epoch)
    return None
