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

from collections.abc import Iterator

import pyarrow as pa

from loglake.segments.batch import CONTROL_BIT, LOG_APPEND_TIME, TRANSACTIONAL_BIT, Buffer
from loglake.segments.batch import iter_batches as iter_batch_headers
from loglake.segments.records import Record, decode_records, encode_batch

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
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


class _Columns:
    """Column builders for :func:`batches_to_rows` (plain lists, converted once)."""

    def __init__(self) -> None:
        self.columns: dict[str, list[object]] = {name: [] for name in FILE_SCHEMA.names}

    def add_batch(self, records: list[Record], header_fields: dict[str, object]) -> None:
        cols = self.columns
        n = len(records)
        cols["offset"].extend(r.offset for r in records)
        cols["timestamp"].extend(r.timestamp * 1000 for r in records)
        cols["key"].extend(r.key for r in records)
        cols["value"].extend(r.value for r in records)
        cols["headers"].extend(
            [{"key": k, "value": v} for k, v in r.headers] for r in records
        )
        for name, value in header_fields.items():
            cols[name].extend([value] * n)

    def table(self) -> pa.Table:
        arrays = []
        for field in FILE_SCHEMA:
            values = self.columns[field.name]
            if field.name == "timestamp":
                arrays.append(pa.array(values, pa.int64()).cast(TIMESTAMP_TYPE))
            else:
                arrays.append(pa.array(values, field.type))
        return pa.Table.from_arrays(arrays, schema=FILE_SCHEMA)


def batches_to_rows(
    data: Buffer, *, start_offset: int = 0, end_offset: int | None = None,
    verify_crc: bool = True,
) -> pa.Table:
    """Rows (FILE_SCHEMA) of every record in the back-to-back batches ``data`` whose offset is
    in ``[start_offset, end_offset)``. Batches are CRC-checked; corrupt data raises
    :class:`~loglake.errors.CorruptRecordError`."""
    columns = _Columns()
    for header in iter_batch_headers(data, verify_crc=verify_crc):
        if header.last_offset < start_offset:
            continue
        if end_offset is not None and header.base_offset >= end_offset:
            break
        records = decode_records(data, header)
        if header.base_offset < start_offset or (
            end_offset is not None and header.last_offset >= end_offset
        ):
            records = [
                r for r in records
                if r.offset >= start_offset and (end_offset is None or r.offset < end_offset)
            ]
        if not records:
            continue
        columns.add_batch(records, {
            "timestamp_type": header.timestamp_type,
            "batch_offset": header.base_offset,
            "batch_last_offset": header.last_offset,
            "attributes": header.attributes,
            "leader_epoch": header.partition_leader_epoch,
            "producer_id": header.producer_id,
            "producer_epoch": header.producer_epoch,
            "base_sequence": header.base_sequence,
            "is_control": header.is_control,
        })
    return columns.table()


def iter_batch_groups(rows: pa.Table | pa.RecordBatch) -> Iterator[tuple[int, int]]:
    """``(start_row, stop_row)`` of each run of rows that came from one batch."""
    batch_offsets = rows.column("batch_offset").to_pylist()
    start = 0
    for i in range(1, len(batch_offsets) + 1):
        if i == len(batch_offsets) or batch_offsets[i] != batch_offsets[start]:
            yield start, i
            start = i


def rows_to_batches(rows: pa.Table | pa.RecordBatch) -> list[bytes]:
    """Re-encode rows (FILE_SCHEMA columns, ordered by offset) as Kafka record batches, one per
    original batch, with the original base offset, last offset, codec and producer fields."""
    cols = {name: rows.column(name).to_pylist()
            for name in FILE_SCHEMA.names if name != "timestamp"}
    timestamps = rows.column("timestamp").cast(pa.int64()).to_pylist()
    out: list[bytes] = []
    for start, stop in iter_batch_groups(rows):
        attributes = cols["attributes"][start]
        records = [
            Record(
                cols["offset"][i],
                timestamps[i] // 1000,
                cols["key"][i],
                cols["value"][i],
                [(h["key"], h["value"]) for h in cols["headers"][i] or ()],
                cols["timestamp_type"][i],
            )
            for i in range(start, stop)
        ]
        timestamp_type = cols["timestamp_type"][start]
        out.append(encode_batch(
            records,
            base_offset=cols["batch_offset"][start],
            compression=attributes & 0x07,
            timestamp_type=timestamp_type,
            max_timestamp=records[0].timestamp if timestamp_type == LOG_APPEND_TIME else None,
            last_offset_delta=cols["batch_last_offset"][start] - cols["batch_offset"][start],
            producer_id=cols["producer_id"][start],
            producer_epoch=cols["producer_epoch"][start],
            base_sequence=cols["base_sequence"][start],
            partition_leader_epoch=cols["leader_epoch"][start],
            is_transactional=bool(attributes & TRANSACTIONAL_BIT),
            is_control=bool(attributes & CONTROL_BIT),
        ))
    return out
