"""Conversion between Kafka record batches and the rows of a topic's Delta table.

Row schema (one row per record; DESIGN.md "Cold tier")::

    partition         int32      Delta partition column (lives in the file path, not the file)
    offset            int64      the record's offset
    timestamp         timestamp  microseconds UTC (Kafka's milliseconds, exactly)
    timestamp_type    int32      0 CreateTime, 1 LogAppendTime
    key, value        binary     null for a null key / a tombstone
    headers           array<struct<key string, value binary>>
    batch_offset      int64      base offset of the batch the record was produced in
    batch_last_offset int64      last offset the batch covered (kept when compaction drops rows)
    attributes        int16      the batch's attributes (codec bits 0-2, timestamp type,
                                 transactional, control)
    leader_epoch      int32      the batch's partition leader epoch
    producer_id       int64      idempotent/transactional producer id (-1 without)
    producer_epoch    int16
    base_sequence     int32      the batch's base sequence (-1 without)
    is_control        boolean    transaction markers (hidden from Spark's row view)

Rows of one batch are contiguous and ordered by offset, so :func:`rows_to_batches` rebuilds
batches with their original base offsets, offsets, timestamps, keys, values, headers, producer
fields and codec: a consumer cannot tell a batch re-encoded from the tier from the original
(the bytes of a compressed payload may differ; the records do not).

Pure functions on in-memory data: thread-safe, no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from loglake.errors import InvalidRecordError
from loglake.segments import tier_codec
from loglake.segments.batch import (
    CONTROL_BIT,
    HEADER,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    Buffer,
    compute_crc,
)
from loglake.segments.batch import iter_batches as iter_batch_headers
from loglake.segments.records import compress, decompress

HEADER_TYPE = tier_codec.HEADER_TYPE
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

FILE_SCHEMA = pa.schema([
    ("offset", pa.int64()),
    ("timestamp", TIMESTAMP_TYPE),
    ("timestamp_type", pa.int32()),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("headers", HEADER_TYPE),
    ("batch_offset", pa.int64()),
    ("batch_last_offset", pa.int64()),
    ("attributes", pa.int16()),
    ("leader_epoch", pa.int32()),
    ("producer_id", pa.int64()),
    ("producer_epoch", pa.int16()),
    ("base_sequence", pa.int32()),
    ("is_control", pa.bool_()),
])
"""Columns stored in each Parquet file (the partition column is in the path)."""

TABLE_SCHEMA = pa.schema([pa.field("partition", pa.int32()), *FILE_SCHEMA])
"""The Delta table's schema, partitioned by ``partition``."""

PARTITION_COLUMN = "partition"
_CRC = struct.Struct(">I")


ENCODE_CHUNK_ROWS = 1 << 17
"""rows_to_batches encodes at most about this many rows at a time (whole batches)."""


def batches_to_rows(
    data: Buffer, *, start_offset: int = 0, end_offset: int | None = None,
    verify_crc: bool = True,
) -> pa.Table:
    """Rows (FILE_SCHEMA) of every record in the back-to-back batches ``data`` whose offset is
    in ``[start_offset, end_offset)``. Batches are CRC-checked; corrupt data raises
    :class:`~loglake.errors.CorruptRecordError`."""
    buf = data if isinstance(data, bytes) else bytes(data)
    selected = []
    partial = False
    for header in iter_batch_headers(buf, verify_crc=verify_crc):
        if header.last_offset < start_offset:
            continue
        if end_offset is not None and header.base_offset >= end_offset:
            break
        partial = partial or header.base_offset < start_offset or (
            end_offset is not None and header.last_offset >= end_offset
        )
        selected.append(header)
    decoded = tier_codec.decode_records(buf, selected)
    ends = pa.array(decoded.run_ends, pa.int64())
    arrays: dict[str, pa.Array] = {
        "offset": decoded.offsets,
        "timestamp": pc.multiply_checked(decoded.timestamps_ms, 1000).cast(TIMESTAMP_TYPE),
        "key": decoded.keys,
        "value": decoded.values,
        "headers": decoded.headers,
    }
    batches = decoded.batches
    for name, values in (
        ("timestamp_type", [h.timestamp_type for h in batches]),
        ("batch_offset", [h.base_offset for h in batches]),
        ("batch_last_offset", [h.last_offset for h in batches]),
        ("attributes", [h.attributes for h in batches]),
        ("leader_epoch", [h.partition_leader_epoch for h in batches]),
        ("producer_id", [h.producer_id for h in batches]),
        ("producer_epoch", [h.producer_epoch for h in batches]),
        ("base_sequence", [h.base_sequence for h in batches]),
        ("is_control", [h.is_control for h in batches]),
    ):
        array = pa.array(values, FILE_SCHEMA.field(name).type)
        arrays[name] = (pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(ends, array))
                        if batches else array)
    rows = pa.Table.from_arrays([arrays[name] for name in FILE_SCHEMA.names], schema=FILE_SCHEMA)
    if partial:
        offsets = rows.column("offset")
        keep = pc.greater_equal(offsets, start_offset)
        if end_offset is not None:
            keep = pc.and_(keep, pc.less(offsets, end_offset))
        rows = rows.filter(keep)
    return rows


def _column(rows: pa.Table | pa.RecordBatch, name: str) -> pa.Array:
    column = rows.column(name)
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def _group_starts(batch_offsets: pa.Array) -> list[int]:
    """First row of each run of equal ``batch_offset`` values."""
    n = len(batch_offsets)
    if n == 0:
        return []
    changed = pc.not_equal(batch_offsets.slice(1), batch_offsets.slice(0, n - 1))
    return [0, *pc.add(pc.indices_nonzero(changed), 1).to_pylist()]


def iter_batch_groups(rows: pa.Table | pa.RecordBatch) -> Iterator[tuple[int, int]]:
    """``(start_row, stop_row)`` of each run of rows that came from one batch."""
    starts = _group_starts(_column(rows, "batch_offset"))
    yield from zip(starts, [*starts[1:], rows.num_rows], strict=True)


def rows_to_batches(rows: pa.Table | pa.RecordBatch) -> list[bytes]:
    """Re-encode rows (FILE_SCHEMA columns, ordered by offset) as Kafka record batches, one per
    original batch, with the original base offset, last offset, codec and producer fields."""
    starts = _group_starts(_column(rows, "batch_offset"))
    out: list[bytes] = []
    first = 0
    while first < len(starts):
        last = first + 1  # encode batches [first, last) together, ~ENCODE_CHUNK_ROWS rows
        while last < len(starts) and starts[last] - starts[first] < ENCODE_CHUNK_ROWS:
            last += 1
        stop = starts[last] if last < len(starts) else rows.num_rows
        chunk = rows.slice(starts[first], stop - starts[first])
        out += _encode_chunk(chunk, [s - starts[first] for s in starts[first:last]])
        first = last
    return out


def _encode_chunk(rows: pa.Table | pa.RecordBatch, starts: list[int]) -> list[bytes]:
    """The batches of ``rows``, whose batches begin at the rows ``starts``."""
    n = rows.num_rows
    stops = [*starts[1:], n]
    ends = pa.array(stops, pa.int64())
    first_rows = pa.array(starts, pa.int64())
    ms = _floor_ms(_column(rows, "timestamp").cast(pa.int64()))
    first_ms = ms.take(first_rows)
    offset_deltas = pc.subtract(_column(rows, "offset"), _column(rows, "batch_offset"))
    if pc.min(offset_deltas).as_py() < 0:
        row = pc.index(pc.less(offset_deltas, 0), True).as_py()
        raise InvalidRecordError(
            f"record offset {_column(rows, 'offset')[row].as_py()} below base offset "
            f"{_column(rows, 'batch_offset')[row].as_py()}")
    timestamp_deltas = pc.subtract(
        ms, pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(ends, first_ms)))
    encoded = tier_codec.encode_bodies(
        offset_deltas, timestamp_deltas, _column(rows, "key"), _column(rows, "value"),
        _column(rows, "headers"))
    _, offsets_buffer, data_buffer = encoded.buffers()
    record_offsets = pa.Array.from_buffers(pa.int64(), n + 1, [None, offsets_buffer],
                                           offset=encoded.offset)
    bounds = record_offsets.take(pa.array([*starts, n], pa.int64())).to_pylist()
    data = memoryview(data_buffer)
    group = pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(
        ends, pa.array(range(len(starts)), pa.int64())))
    max_ms = (pa.table({"group": group, "ms": ms})
              .group_by("group", use_threads=False).aggregate([("ms", "max")])
              .sort_by("group").column("ms_max").to_pylist())
    fields = {name: _column(rows, name).take(first_rows).to_pylist()
              for name in ("attributes", "timestamp_type", "batch_offset", "batch_last_offset",
                           "producer_id", "producer_epoch", "base_sequence", "leader_epoch")}
    out: list[bytes] = []
    for index, base_ms in enumerate(first_ms.to_pylist()):
        codec = fields["attributes"][index] & 0x07
        attributes = codec
        if fields["timestamp_type"][index] == LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_BIT
            max_timestamp = base_ms
        else:
            max_timestamp = max_ms[index]
        attributes |= fields["attributes"][index] & (TRANSACTIONAL_BIT | CONTROL_BIT)
        section = data[bounds[index] : bounds[index + 1]]
        payload = section if codec == 0 else compress(codec, bytes(section))
        size = HEADER_SIZE + len(payload)
        batch = bytearray(size)
        base_offset = fields["batch_offset"][index]
        HEADER.pack_into(
            batch, 0, base_offset, size - LOG_OVERHEAD, fields["leader_epoch"][index], 2, 0,
            attributes, fields["batch_last_offset"][index] - base_offset, base_ms,
            max_timestamp, fields["producer_id"][index], fields["producer_epoch"][index],
            fields["base_sequence"][index], stops[index] - starts[index],
        )
        batch[HEADER_SIZE:] = payload
        _CRC.pack_into(batch, 17, compute_crc(batch, 0, size))
        out.append(bytes(batch))
    return out


def _floor_ms(micros: pa.Array) -> pa.Array:
    """``micros // 1000`` (floor, as Python's ``//``) of an int64 array."""
    quotient = pc.divide(micros, 1000)
    if pc.min(micros).as_py() >= 0:
        return quotient
    return pc.if_else(pc.greater(pc.multiply(quotient, 1000), micros),
                      pc.subtract(quotient, 1), quotient)
