"""The fast loops behind tier_rows.py: RecordBatch v2 records <-> Arrow arrays.

The record format is the one records.py documents; this module reads and writes exactly the
same bytes, but column-wise and without :class:`~loglake.segments.records.Record` objects:

* decoding: :func:`scan_batches` validates the batch headers as batch.iter_batches does, but
  into plain tuples; :func:`decode_records` then runs one short Python loop per record that
  only follows the record length prefixes (to find where each record starts); every field is
  then decoded for all records at once with Arrow compute kernels: varints (one or two bytes
  via a lookup table, longer ones byte by byte), offsets and timestamps, and keys, values and
  headers (one round per header index) gathered out of the records section buffer.
* encoding (:func:`encode_bodies`) is vectorised the same way: zig-zag, varints (a table lookup
  per 14 bits) and the concatenation of the record fields; the caller slices each batch's
  records section out of the resulting buffer.

:func:`unframed_records` runs only the record-framing half of decoding, batch by batch, and
reports every failing batch (tier_quarantine.py uses it to find all the poison in a segment in
one pass).

Malformed input raises the error a batch-at-a-time decode (batch.iter_batches +
records.decode_records) raises, for the first bad batch in order: CorruptRecordError, or
InvalidRecordError for a wrong magic or codec; never IndexError or an Arrow error. The one
difference: a batch whose offsets or timestamps do not fit 64 bits is CorruptRecordError
(there, pyarrow's OverflowError, and only if such a record was in the requested range).
Pure functions on in-memory data: thread-safe, no I/O.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from crc32c import crc32c

from loglake.errors import CorruptRecordError, InvalidRecordError, LoglakeError
from loglake.segments.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CURRENT_MAGIC,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_BIT,
    read_header,
)
from loglake.segments.records import _read_varint, decompress
from loglake.segments.varints import (
    MIN_RECORD_LENGTH,
    PAST_ANY_END,
    RECORD_STEPS,
    SHORT_VARINT_ARRAY,
)

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
"""Arrow type of the ``headers`` column."""
I64 = pa.int64()
U64 = pa.uint64()

# ------------------------------------------------------------------------------- decoding

MAX_VARINT_BYTES = 10


BatchFields = tuple[int, ...]
"""One batch as scanned by :func:`scan_batches`: the 13 header fields in batch.HEADER order,
then the batch's position in the buffer (plain tuples: no object per batch)."""
BASE_OFFSET, BATCH_LENGTH, LEADER_EPOCH, MAGIC, CRC, ATTRIBUTES, LAST_OFFSET_DELTA = range(7)
BASE_TIMESTAMP, MAX_TIMESTAMP, PRODUCER_ID, PRODUCER_EPOCH, BASE_SEQUENCE = range(7, 12)
RECORD_COUNT, POSITION = 12, 13
_HEADER_NAMES = ("base_offset", "batch_length", "partition_leader_epoch", "magic", "crc",
                 "attributes", "last_offset_delta", "base_timestamp", "max_timestamp",
                 "producer_id", "producer_epoch", "base_sequence", "record_count")


@dataclass(frozen=True, slots=True)
class Scan:
    """What :func:`scan_batches` found: the batches to decode, whether the range cuts one of
    them, and the error of an invalid batch after them (raised once they are decoded)."""

    batches: list[BatchFields]
    partial: bool
    error: LoglakeError | None


def scan_batches(buf: bytes, *, start_offset: int, end_offset: int | None,
                 verify_crc: bool) -> Scan:
    """The batches of ``buf`` that may hold offsets in ``[start_offset, end_offset)``.
    Validates exactly what batch.iter_batches validates, stopping at the first batch past the
    range; the first batch it would reject ends the scan with batch.read_header's error."""
    selected: list[BatchFields] = []
    partial = False
    unpack, crc_of, view = HEADER.unpack_from, crc32c, memoryview(buf)
    offset, end = 0, len(buf)
    while offset < end:
        fields = unpack(buf, offset) if end - offset >= HEADER_SIZE else None
        if (fields is None or fields[MAGIC] != CURRENT_MAGIC
                or fields[BATCH_LENGTH] < MIN_BATCH_LENGTH
                or offset + fields[BATCH_LENGTH] + LOG_OVERHEAD > end
                or fields[LAST_OFFSET_DELTA] < 0 or fields[RECORD_COUNT] < 0
                or (verify_crc and crc_of(view[offset + ATTRIBUTES_OFFSET : offset
                                               + fields[BATCH_LENGTH] + LOG_OVERHEAD])
                    != fields[CRC])):
            try:
                header = read_header(buf, offset, verify_crc=verify_crc)
            except LoglakeError as exc:
                return Scan(selected, partial, exc)
            fields = tuple(getattr(header, name) for name in _HEADER_NAMES)
        base = fields[BASE_OFFSET]
        last = base + fields[LAST_OFFSET_DELTA]
        if last >= start_offset:
            if end_offset is not None and base >= end_offset:
                break
            partial = partial or base < start_offset or (
                end_offset is not None and last >= end_offset)
            selected.append((*fields, offset))
        offset += fields[BATCH_LENGTH] + LOG_OVERHEAD
    return Scan(selected, partial, None)


@dataclass(frozen=True, slots=True)
class DecodedRows:
    """The records of some batches as Arrow arrays, one row per record in batch order."""

    offsets: pa.Array  # int64
    timestamps_ms: pa.Array  # int64 (every record of a LogAppendTime batch: its maxTimestamp)
    keys: pa.Array  # binary
    values: pa.Array  # binary
    headers: pa.Array  # HEADER_TYPE, empty lists for records without headers
    run_ends: list[int]  # rows up to the end of each batch that has records
    batches: list[BatchFields]  # and those batches


def decode_records(buf: bytes, batches: Sequence[BatchFields],
                   error: LoglakeError | None = None) -> DecodedRows:
    """Every record of ``batches`` (from :func:`scan_batches` over ``buf``), or the first
    error in batch order: a malformed record, an undecodable records section, else ``error``
    (what ended the scan after these batches), as a batch-at-a-time decoder would raise."""
    starts = array("q")  # position of each record's length prefix
    compressed = any(b[ATTRIBUTES] & COMPRESSION_MASK for b in batches)
    pieces: list[bytes | memoryview] = []  # records sections, when they must be joined
    shifts: list[int] = []  # section position in the joined buffer - position in its source
    joined_size = 0
    run_ends: list[int] = []
    with_records: list[BatchFields] = []
    view = memoryview(buf)
    failure: LoglakeError | None = None
    for fields in batches:
        count = fields[RECORD_COUNT]
        codec = fields[ATTRIBUTES] & COMPRESSION_MASK
        try:
            data, pos, end = _walk_batch(buf, view, fields, starts)
        except LoglakeError as exc:
            failure = exc
        if failure is not None:  # the batches before this one are decoded (and fail) first
            del starts[run_ends[-1] if run_ends else 0 :]
            break
        if count:
            run_ends.append(len(starts))
            with_records.append(fields)
            if compressed:
                pieces.append(data if codec else view[pos:end])
                shifts.append(joined_size - pos)
                joined_size += end - pos
    blob = b"".join(pieces) if compressed else buf
    del pieces
    try:
        decoded = _decode_fields(blob, starts, run_ends, with_records, shifts)
    except (IndexError, ValueError) as exc:  # incl. Arrow's overflow / index errors
        raise CorruptRecordError(f"malformed record: {exc}") from None
    if failure is not None:
        raise failure
    if error is not None:
        raise error
    return decoded


def _walk_batch(buf: bytes, view: memoryview, fields: BatchFields,
                starts: array[int]) -> tuple[bytes, int, int]:
    """Append where each record of one batch starts (its records section decompressed first);
    returns that section as ``(data, start, end)``. Raises what decode_records raises for the
    batch's record framing (CorruptRecordError, or InvalidRecordError for an unknown codec)."""
    pos = fields[POSITION] + HEADER_SIZE
    end = fields[POSITION] + LOG_OVERHEAD + fields[BATCH_LENGTH]
    codec = fields[ATTRIBUTES] & COMPRESSION_MASK
    data: bytes = buf
    try:
        if codec:
            data = decompress(codec, view[pos:end])
            pos, end = 0, len(data)
        _walk(data, pos, end, fields[RECORD_COUNT], fields[BASE_OFFSET], starts)
    except (IndexError, ValueError) as exc:
        raise CorruptRecordError(
            f"malformed record in batch at base offset {fields[BASE_OFFSET]}: {exc}") from None
    return data, pos, end


def unframed_records(buf: bytes, batches: Sequence[BatchFields]
                     ) -> list[tuple[int, LoglakeError]]:
    """``(index in batches, error)`` of every batch whose records section does not decompress
    or does not hold exactly its record count of length-prefixed records: the record-framing
    half of :func:`decode_records`, batch by batch, for callers that must find every bad
    batch (not just the first) in one pass. The fields of the records are not decoded."""
    view = memoryview(buf)
    scratch = array("q")
    failures: list[tuple[int, LoglakeError]] = []
    for index, fields in enumerate(batches):
        try:
            _walk_batch(buf, view, fields, scratch)
        except LoglakeError as exc:
            failures.append((index, exc))
        del scratch[:]
    return failures


def _walk(data: bytes, pos: int, end: int, record_count: int, base_offset: int,
          starts: array[int]) -> None:
    """Append to ``starts`` where each record of ``data[pos:end]`` starts; CorruptRecordError
    unless exactly ``record_count`` records fill it."""
    steps, varint = RECORD_STEPS, _read_varint
    add = starts.append
    first = len(starts)
    while pos < end:
        add(pos)
        b = data[pos]
        if b < 0x80:
            pos += steps[b]
        else:
            c = data[pos + 1]
            if c < 0x80:
                pos += steps[b + (c << 7)]
            else:
                length, pos = varint(data, pos)
                pos += length if length >= MIN_RECORD_LENGTH else PAST_ANY_END
    found = len(starts) - first
    if pos != end:
        raise CorruptRecordError(
            f"record {found - 1} of batch at base offset {base_offset} declares a length "
            f"below {MIN_RECORD_LENGTH} or past the end of the batch"
        )
    if found != record_count:
        raise CorruptRecordError(
            f"batch at base offset {base_offset} declares {record_count} records "
            f"but holds {found}"
        )


def _decode_fields(blob: bytes, starts: array[int], run_ends: list[int],
                   batches: list[BatchFields], shifts: list[int]) -> DecodedRows:
    n = len(starts)
    ends = pa.array(run_ends, I64)

    def per_batch(values: Sequence[int | bool | None], type_: pa.DataType) -> pa.Array:
        run_values = pa.array(values, type_)
        if not n:
            return run_values
        return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(ends, run_values))

    positions = pa.Array.from_buffers(I64, n, [None, pa.py_buffer(starts)])
    if shifts:
        positions = pc.add(positions, per_batch(shifts, I64))
    reader = _Reader(blob)
    length, body = reader.varints(positions)
    record_end = pc.add(body, length)
    timestamp_delta, pos = reader.varints(pc.add(body, 1))  # after the attributes byte
    offset_delta, pos = reader.varints(pos)
    key_size, key_start = reader.varints(pos)
    value_size, value_start = reader.varints(reader.skip(key_start, key_size))
    header_count, after = reader.varints(reader.skip(value_start, value_size))
    if n and min(pc.min(key_size).as_py(), pc.min(value_size).as_py()) < -1:
        raise CorruptRecordError("invalid field length in record")
    if n and pc.min(header_count).as_py() < 0:
        raise CorruptRecordError("negative header count in record")
    has_headers = pc.not_equal(header_count, 0)
    wrong = pc.and_(pc.invert(has_headers), pc.not_equal(after, record_end))
    if n and pc.any(wrong).as_py():
        row = pc.index(wrong, True).as_py()
        raise CorruptRecordError(
            f"record declares {length[row].as_py()} bytes but its fields take "
            f"{after[row].as_py() - body[row].as_py()}"
        )
    headers = _decode_headers(reader, has_headers, header_count, after, record_end)
    offsets = pc.add_checked(per_batch([b[BASE_OFFSET] for b in batches], I64), offset_delta)
    timestamps = pc.add_checked(per_batch([b[BASE_TIMESTAMP] for b in batches], I64),
                                timestamp_delta)
    append_times = [b[MAX_TIMESTAMP] if b[ATTRIBUTES] & TIMESTAMP_TYPE_BIT else None
                    for b in batches]
    if any(t is not None for t in append_times):  # LogAppendTime: all get maxTimestamp
        append = per_batch(append_times, I64)
        timestamps = pc.if_else(pc.is_null(append), timestamps, append)
    return DecodedRows(offsets, timestamps, reader.gather(key_start, key_size),
                       reader.gather(value_start, value_size), headers, run_ends, batches)


class _Reader:
    """Vectorised reads from one records buffer, at many positions at a time."""

    def __init__(self, blob: bytes) -> None:
        self.blob = blob
        self.buffer = pa.py_buffer(blob)
        self.size = len(blob)
        self.bytes = pa.Array.from_buffers(pa.uint8(), len(blob), [None, self.buffer])
        self.last = max(len(blob) - 1, 0)

    def skip(self, positions: pa.Array, sizes: pa.Array) -> pa.Array:
        """``positions + sizes`` for field sizes (-1: null takes no bytes), kept in range."""
        return pc.add(positions,
                      pc.min_element_wise(pc.max_element_wise(sizes, 0), self.size + 1))

    def varints(self, positions: pa.Array) -> tuple[pa.Array, pa.Array]:
        """(values int64, next positions) of the zig-zag varints at ``positions``.

        A varint that starts past the buffer is an IndexError (its record overran the
        buffer); the bytes after its first are read clamped to the buffer, and whatever was
        read past it is rejected by the caller's end-of-record checks."""
        if len(positions) == 0:
            return positions, positions
        first = self.bytes.take(positions)
        if pc.max(first).as_py() < 0x80:
            return SHORT_VARINT_ARRAY.take(first), pc.add(positions, 1)
        second = self.bytes.take(pc.min_element_wise(pc.add(positions, 1), self.last))
        multi = pc.greater_equal(first, 0x80)
        if pc.any(pc.and_(multi, pc.greater_equal(second, 0x80))).as_py():
            return self._long_varints(positions)
        extra = multi.cast(I64)
        index = pc.add(first.cast(I64), pc.multiply(pc.shift_left(second.cast(I64), 7), extra))
        return SHORT_VARINT_ARRAY.take(index), pc.add(positions, pc.add(extra, 1))

    def _long_varints(self, positions: pa.Array) -> tuple[pa.Array, pa.Array]:
        byte = self.bytes.take(positions)
        raw = pc.bit_wise_and(byte, 0x7F).cast(U64)
        active = pc.greater_equal(byte, 0x80)
        size = pc.add(active.cast(I64), 1)
        for index in range(1, MAX_VARINT_BYTES):
            byte = self.bytes.take(pc.min_element_wise(pc.add(positions, index), self.last))
            bits = pc.bit_wise_and(byte, 0x7F).cast(U64)
            if index == MAX_VARINT_BYTES - 1 and pc.any(
                    pc.and_(active, pc.greater(bits, 1))).as_py():
                raise CorruptRecordError("varint does not fit 64 bits in record")
            raw = pc.if_else(active, pc.bit_wise_or(raw, pc.shift_left(bits, 7 * index)), raw)
            active = pc.and_(active, pc.greater_equal(byte, 0x80))
            if not pc.any(active).as_py():
                break
            size = pc.add(size, active.cast(I64))
        else:
            raise CorruptRecordError("varint longer than 10 bytes in record")
        half = pc.shift_right(raw, 1).cast(I64, safe=False)
        sign = pc.bit_wise_and(raw, 1).cast(I64)
        return pc.bit_wise_xor(half, pc.negate(sign)), pc.add(positions, size)

    def gather(self, starts: pa.Array, sizes: pa.Array) -> pa.Array:
        """The binary values ``blob[start:start + size]`` (null where size is -1), for
        ascending, non-overlapping fields. Taken as every other element of an array over the
        buffer whose offsets alternate the fields' starts and stops (validated in full, so
        fields of corrupt records cannot reach outside the buffer)."""
        n = len(starts)
        nulls = pc.less(sizes, 0)
        if n == 0 or pc.all(nulls).as_py():
            return pa.nulls(n, pa.binary())
        large = self.size >= 1 << 31
        stops = pc.add(starts, pc.max_element_wise(sizes, 0))
        bounds = pa.concat_arrays([starts, pa.array([self.size], I64), stops])
        steps = _arange(2 * n + 1)
        # j -> j/2 (a start) for even j; 2n -> the buffer end; odd j -> n + 1 + j/2 (a stop)
        interleave = pc.add(pc.shift_right(steps, 1),
                            pc.multiply(pc.bit_wise_and(steps, 1), n + 1))
        offsets = bounds.take(interleave).cast(I64 if large else pa.int32())
        pairs = pa.Array.from_buffers(pa.large_binary() if large else pa.binary(), 2 * n,
                                      [None, offsets.buffers()[1], self.buffer])
        pairs.validate(full=True)
        values = pairs.take(pc.multiply(steps.slice(0, n), 2))
        if large:
            values = values.cast(pa.binary())
        if pc.any(nulls).as_py():
            values = pc.if_else(nulls, pa.scalar(None, pa.binary()), values)
        return values


def _arange(count: int) -> pa.Array:
    """0, 1, ..., count - 1 as int64, computed in Arrow."""
    return pc.subtract(pc.cumulative_sum(pc.fill_null(pa.nulls(count, I64), 1)), 1)


MAX_VECTOR_HEADERS = 32
"""Above this many headers in a record, headers are parsed in Python (the vectorised reader
makes one round of Arrow calls per header index)."""


def _decode_headers(reader: _Reader, has_headers: pa.Array, counts: pa.Array,
                    first: pa.Array, record_end: pa.Array) -> pa.Array:
    """The headers column. ``counts``: each record's header count (0: none); ``first``: where
    its first header starts. Header ``j`` of all records that have one is read at once."""
    n = len(has_headers)
    rows = pc.indices_nonzero(has_headers)
    if len(rows) == 0:  # every list empty: all offsets 0
        offsets = pa.Array.from_buffers(pa.int32(), n + 1,
                                        [None, pa.py_buffer(bytes(4 * (n + 1)))])
        return pa.ListArray.from_arrays(offsets, pa.array([], HEADER_TYPE.value_type),
                                        type=HEADER_TYPE)
    ends = pc.cumulative_sum(counts)
    list_offsets = pa.concat_arrays([pa.array([0], I64), ends])
    counts = counts.take(rows)
    pos = first.take(rows)
    stop = record_end.take(rows)
    # each header takes at least two bytes: bounds the work below for corrupt counts
    if pc.any(pc.greater(pc.multiply(counts, 2), pc.subtract(stop, pos))).as_py():
        raise CorruptRecordError("header count exceeds the record")
    if pc.max(counts).as_py() > MAX_VECTOR_HEADERS:
        return _python_headers(reader.blob, list_offsets, counts, pos, stop)
    targets = pc.subtract(ends.take(rows), counts)  # where each record's headers go
    keys: list[pa.Array] = []
    values: list[pa.Array] = []
    placed: list[pa.Array] = []
    index = 0
    while True:
        key_size, key_start = reader.varints(pos)
        if pc.min(key_size).as_py() < 0:
            raise CorruptRecordError("invalid header key length in record")
        value_size, value_start = reader.varints(reader.skip(key_start, key_size))
        if pc.min(value_size).as_py() < -1:
            raise CorruptRecordError("invalid header value length in record")
        pos = reader.skip(value_start, value_size)
        done = pc.equal(counts, index + 1)
        if pc.any(pc.and_(done, pc.not_equal(pos, stop))).as_py():
            raise CorruptRecordError("record headers do not end where the record does")
        keys.append(reader.gather(key_start, key_size))
        values.append(reader.gather(value_start, value_size))
        placed.append(pc.add(targets, index))
        index += 1
        more = pc.greater(counts, index)
        if not pc.any(more).as_py():
            break
        counts, pos, stop, targets = (counts.filter(more), pos.filter(more),
                                      stop.filter(more), targets.filter(more))
    order = pc.sort_indices(pa.concat_arrays(placed))
    items = pa.StructArray.from_arrays(
        [_utf8(pa.concat_arrays(keys).take(order)), pa.concat_arrays(values).take(order)],
        fields=list(HEADER_TYPE.value_type),
    )
    return pa.ListArray.from_arrays(list_offsets.cast(pa.int32()), items, type=HEADER_TYPE)


def _utf8(keys: pa.Array) -> pa.Array:
    """Header keys as strings; invalid UTF-8 decoded with replacement characters, as
    records.py does."""
    try:
        return keys.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([k.decode("utf-8", "replace") for k in keys.to_pylist()], pa.string())


def _python_headers(blob: bytes, list_offsets: pa.Array, counts: pa.Array, first: pa.Array,
                    stop: pa.Array) -> pa.Array:
    keys: list[str] = []
    values: list[bytes | None] = []
    for count, pos, end in zip(counts.to_pylist(), first.to_pylist(), stop.to_pylist(),
                               strict=True):
        pos = _parse_headers(blob, pos, end, count, keys, values)
        if pos != end:
            raise CorruptRecordError("record headers do not end where the record does")
    items = pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(values, pa.binary())],
        fields=list(HEADER_TYPE.value_type),
    )
    return pa.ListArray.from_arrays(list_offsets.cast(pa.int32()), items, type=HEADER_TYPE)


def _parse_headers(data: bytes, pos: int, stop: int, count: int, keys: list[str],
                   values: list[bytes | None]) -> int:
    """Append the ``count`` headers starting at ``data[pos]`` of a record that ends at
    ``stop``; returns the position after them."""
    for _ in range(count):
        size, pos = _read_varint(data, pos)
        if size < 0 or pos + size > stop:
            raise CorruptRecordError(f"invalid header key length {size}")
        keys.append(data[pos : pos + size].decode("utf-8", "replace"))
        pos += size
        size, pos = _read_varint(data, pos)
        if size == -1:
            values.append(None)
        elif size < -1 or pos + size > stop:
            raise CorruptRecordError(f"invalid field length {size} in record")
        else:
            values.append(data[pos : pos + size])
            pos += size
    return pos


# ------------------------------------------------------------------------------- encoding

BYTES = pa.large_binary()
EMPTY = pa.scalar(b"", BYTES)
NULL_FIELD = pa.scalar(b"\x01", BYTES)  # varint -1: a null key / value / header value
ZERO = pa.scalar(b"\x00", BYTES)  # varint 0, also the record attributes byte
_LOW_BITS = 14
_LOW_LIMIT = 1 << _LOW_BITS


def _varint_bytes(value: int, *, more: bool = False) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    if more:  # a 14-bit group continued by further groups: both bytes carry the flag
        out.append(value | 0x80)
        if len(out) == 1:
            out.append(0x80)
    else:
        out.append(value)
    return bytes(out)


_FINAL = pa.array([_varint_bytes(v) for v in range(_LOW_LIMIT)], BYTES)
"""Varint bytes of every value below 2**14 (one or two bytes)."""
_CONTINUED = pa.array([_varint_bytes(v, more=True) for v in range(_LOW_LIMIT)], BYTES)
"""The two bytes of a 14-bit group followed by more groups."""


def zigzag(values: pa.Array) -> pa.Array:
    """Zig-zag of int64 ``values`` as uint64 (``(v << 1) ^ (v >> 63)``, 64-bit)."""
    values = values.cast(pa.int64())
    doubled = pc.shift_left(values, 1)  # wraps like the 64-bit mask of records.py
    signed = pc.if_else(pc.less(values, 0), pc.bit_wise_not(doubled), doubled)
    return signed.cast(pa.uint64(), safe=False)


def varints(unsigned: pa.Array) -> pa.Array:
    """The varint bytes (large_binary) of each already zig-zagged uint64 value."""
    if len(unsigned) == 0:
        return pa.array([], BYTES)
    largest = pc.max(unsigned).as_py()
    if largest < _LOW_LIMIT:
        return _FINAL.take(unsigned)
    low = pc.bit_wise_and(unsigned, _LOW_LIMIT - 1)
    high = pc.shift_right(unsigned, _LOW_BITS)
    final = _FINAL.take(pc.min_element_wise(unsigned, _LOW_LIMIT - 1))
    continued = pc.binary_join_element_wise(_CONTINUED.take(low), varints(high), EMPTY)
    return pc.if_else(pc.greater_equal(unsigned, _LOW_LIMIT), continued, final)


def _length_prefixed(blobs: pa.Array) -> pa.Array | pa.Scalar:
    """``varint(len) + bytes`` of each blob, ``varint(-1)`` for a null one."""
    if blobs.null_count == len(blobs):
        return NULL_FIELD
    blobs = blobs.cast(BYTES)
    lengths = pc.binary_length(blobs)
    joined = pc.binary_join_element_wise(varints(zigzag(pc.fill_null(lengths, 0))), blobs,
                                         EMPTY)
    return joined if blobs.null_count == 0 else pc.coalesce(joined, NULL_FIELD)


def _headers_part(headers: pa.Array) -> pa.Array | pa.Scalar:
    """``varint(count)`` + each header (key, value length-prefixed) per row; a null list is
    an empty one."""
    counts = pc.fill_null(pc.list_value_length(headers), 0)
    if len(headers) == 0 or pc.max(counts).as_py() == 0:
        return ZERO
    flat = headers.flatten()
    keys = flat.field("key")
    if keys.null_count:
        raise InvalidRecordError("a record header has a null key")
    encoded = pc.binary_join_element_wise(
        _length_prefixed(keys.cast(pa.binary())), _length_prefixed(flat.field("value")), EMPTY)
    offsets = pa.concat_arrays([pa.array([0], I64), pc.cumulative_sum(counts.cast(I64))])
    per_row = pc.binary_join(pa.LargeListArray.from_arrays(offsets, encoded), EMPTY)
    return pc.binary_join_element_wise(varints(zigzag(counts)), per_row, EMPTY)


def encode_bodies(
    offset_deltas: pa.Array, timestamp_deltas: pa.Array, keys: pa.Array, values: pa.Array,
    headers: pa.Array,
) -> pa.Array:
    """Each row's record in the v2 format, length prefix included (large_binary)."""
    body = pc.binary_join_element_wise(
        ZERO,  # attributes
        varints(zigzag(timestamp_deltas)),
        varints(zigzag(offset_deltas)),
        _length_prefixed(keys),
        _length_prefixed(values),
        _headers_part(headers),
        EMPTY,
    )
    return pc.binary_join_element_wise(varints(zigzag(pc.binary_length(body))), body, EMPTY)
