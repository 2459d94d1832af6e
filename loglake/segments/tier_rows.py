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
    is_control        boolean    not a data record: quarantined rows, and transaction markers
                                 in tables tiered before markers were left out (the tierer
                                 now drops markers and aborted records, tier_txn.py); hidden
                                 from Spark's row view and from consumers
    decode_error      string     null for every record; set on a quarantined row (below).
                                 Added after the first release: files written before lack
                                 the column (readers take it as null; :func:`conform_rows`)

Typed columns (schemas issue; docs/SCHEMAS.md "Typed tables and evolution"): a topic side
(key or value) decoded by its schema registry framing adds three nullable columns per side,
appended after ``decode_error`` in the order key, value (:data:`TYPED_COLUMNS`)::

    <side>_typed      the decoded key/value (struct, or the primitive's Arrow type); its type
                      is the table's current type of the side (schemas/decode.py ``side_type``)
    <side>_schema_id  int32   the schema id of the framing (null: not framed)
    <side>_error      string  why the side did not decode (null: decoded, or not typed)

They are added to the Delta schema the first time a side is typed and widened (nested fields
appended) by schema evolution (tiered_table.py); files written before lack them (readers take
null). ``key``/``value`` keep the raw bytes either way: tier fetches re-encode batches from
them alone. :func:`conform_rows` keeps a file's typed columns and casts them to the table's.

Rows of one batch are contiguous and ordered by offset, so :func:`rows_to_batches` rebuilds
batches with their original base offsets, offsets, timestamps, keys, values, headers, producer
fields and codec: a consumer cannot tell a batch re-encoded from the tier from the original
(the bytes of a compressed payload may differ; the records do not).

Quarantined rows (written by tier_quarantine.py for bytes of a sealed segment that do not decode:
a failed CRC, malformed records, an undecodable payload, a wrong record count, offsets outside
their batch, or bytes that do not frame as a batch at all): ONE row per bad batch or unframed
byte range, in offset order among the records, with ``decode_error`` = what failed,
``value`` = the raw bytes as stored on disk (at most tier_quarantine.MAX_RAW_BYTES),
``key`` null, ``headers`` empty, ``is_control`` true, ``offset`` = the first offset it stands
for, ``batch_offset`` .. ``batch_last_offset`` = the offsets it covers, and the header fields
(attributes, producer, leader epoch) of a batch whose header was readable (else 0 / -1). Its
timestamp is a neighbouring record's, so file statistics and time retention see only
plausible times. Every reader treats such a row as a gap: :func:`rows_to_batches` drops it,
Spark views and ``format("loglake")`` skip ``is_control`` rows, compaction keeps it verbatim.

Both directions work column-wise (tier_codec.py): no per-record Python objects, and no Python
code per record beyond following the length prefixes when decoding.

Pure functions on in-memory data: thread-safe, no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from crc32c import crc32c

from loglake.errors import CorruptRecordError, InvalidRecordError, LoglakeError
from loglake.segments import tier_codec
from loglake.segments.batch import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    CURRENT_MAGIC,
    HEADER,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    Buffer,
)
from loglake.segments.records import compress

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
"""The record columns, which every Parquet file of a table holds (the partition column is in
the path). Readers that only want records read these (and drop ``is_control`` rows)."""

DECODE_ERROR = "decode_error"
DECODE_ERROR_FIELD = pa.field(DECODE_ERROR, pa.string(), nullable=True)
STORED_SCHEMA = pa.schema([*FILE_SCHEMA, DECODE_ERROR_FIELD])
"""Columns of the Parquet files written now: FILE_SCHEMA plus ``decode_error`` (see
:func:`conform_rows` for files written before it existed)."""

TABLE_SCHEMA = pa.schema([pa.field("partition", pa.int32()), *STORED_SCHEMA])
"""The Delta table's schema, partitioned by ``partition``. Tables created before
``decode_error`` existed get it added (nullable) by TieredTable.ensure_created."""

SIDES = ("key", "value")
"""The record sides that may be typed, in the order their columns follow ``decode_error``."""


def typed_names(side: str) -> tuple[str, str, str]:
    """The three typed columns of ``side``: ``(<side>_typed, <side>_schema_id, <side>_error)``."""
    return f"{side}_typed", f"{side}_schema_id", f"{side}_error"


TYPED_COLUMNS = tuple(name for side in SIDES for name in typed_names(side))
"""Every typed column's name, in file order."""


def typed_fields(side: str, typed_type: pa.DataType) -> list[pa.Field]:
    """The typed columns of ``side`` whose decoded values have type ``typed_type``."""
    typed, schema_id, error = typed_names(side)
    return [pa.field(typed, typed_type, nullable=True), pa.field(schema_id, pa.int32()),
            pa.field(error, pa.string())]


def typed_schema(schema: pa.Schema) -> pa.Schema:
    """The typed columns ``schema`` (a file's, a table's, some rows') holds, in file order."""
    names = set(schema.names)
    return pa.schema([schema.field(name) for name in TYPED_COLUMNS if name in names])


def side_types(schema: pa.Schema) -> dict[str, pa.DataType]:
    """``side -> <side>_typed`` type for the typed sides of ``schema``."""
    names = set(schema.names)
    return {side: schema.field(typed_names(side)[0]).type for side in SIDES
            if typed_names(side)[0] in names}


PARTITION_COLUMN = "partition"
ENCODE_CHUNK_ROWS = 1 << 17
"""rows_to_batches encodes at most about this many rows at a time (whole batches)."""
_BEFORE_CRC = struct.Struct(">qiibI")  # baseOffset .. crc: batch.HEADER split at the CRC
_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordCount: what the CRC covers
_AFTER_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # batchLength counts from partitionLeaderEpoch on
assert _BEFORE_CRC.size + _AFTER_CRC.size == HEADER.size


def batches_to_rows(
    data: Buffer, *, start_offset: int = 0, end_offset: int | None = None,
    verify_crc: bool = True,
) -> pa.Table:
    """Rows (FILE_SCHEMA) of every record in the back-to-back batches ``data`` whose offset is
    in ``[start_offset, end_offset)``. Batches are CRC-checked; corrupt data raises
    :class:`~loglake.errors.CorruptRecordError` (so does a batch whose offsets or timestamps
    do not fit 64 bits, even outside the range)."""
    buf = data if isinstance(data, bytes) else bytes(data)
    scan = tier_codec.scan_batches(buf, start_offset=start_offset, end_offset=end_offset,
                                   verify_crc=verify_crc)
    return rows_of_batches(buf, scan.batches, start_offset=start_offset, end_offset=end_offset,
                           error=scan.error, partial=scan.partial)


def rows_of_batches(
    buf: bytes, batches: Sequence[tier_codec.BatchFields], *, start_offset: int = 0,
    end_offset: int | None = None, error: LoglakeError | None = None,
    partial: bool | None = None,
) -> pa.Table:
    """Rows (FILE_SCHEMA) of the records in ``[start_offset, end_offset)`` of ``batches``,
    already scanned (and CRC-checked, if wanted) out of ``buf`` by
    :func:`tier_codec.scan_batches` or an equivalent framing pass; raises as
    :func:`batches_to_rows` does (``error``: what ended the scan, raised after these batches
    decoded). ``partial``: whether the range cuts a batch (computed when None)."""
    if partial is None:
        partial = any(
            b[tier_codec.BASE_OFFSET] < start_offset or (
                end_offset is not None
                and b[tier_codec.BASE_OFFSET] + b[tier_codec.LAST_OFFSET_DELTA] >= end_offset)
            for b in batches)
    decoded = tier_codec.decode_records(buf, batches, error)
    arrays: dict[str, pa.Array] = {
        "offset": decoded.offsets,
        "timestamp": decoded.timestamps_ms,  # milliseconds until the rows are filtered
        "key": decoded.keys,
        "value": decoded.values,
        "headers": decoded.headers,
    }
    # one value per batch (columns of the scanned header tuples), expanded to its rows
    fields = [pa.array(column, pa.int64()) for column in zip(*decoded.batches, strict=True)]
    if not fields:
        fields = [pa.array([], pa.int64())] * (tier_codec.POSITION + 1)
    attributes = fields[tier_codec.ATTRIBUTES]
    base_offsets = fields[tier_codec.BASE_OFFSET]
    for name, values in (
        ("timestamp_type", pc.not_equal(pc.bit_wise_and(attributes, TIMESTAMP_TYPE_BIT), 0)),
        ("batch_offset", base_offsets),
        ("batch_last_offset", _checked_add(base_offsets, fields[tier_codec.LAST_OFFSET_DELTA])),
        ("attributes", attributes),
        ("leader_epoch", fields[tier_codec.LEADER_EPOCH]),
        ("producer_id", fields[tier_codec.PRODUCER_ID]),
        ("producer_epoch", fields[tier_codec.PRODUCER_EPOCH]),
        ("base_sequence", fields[tier_codec.BASE_SEQUENCE]),
        ("is_control", pc.not_equal(pc.bit_wise_and(attributes, CONTROL_BIT), 0)),
    ):
        per_batch = values.cast(FILE_SCHEMA.field(name).type)
        arrays[name] = (pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(
            pa.array(decoded.run_ends, pa.int64()), per_batch)) if len(per_batch) else per_batch)
    if partial:
        keep = pc.greater_equal(decoded.offsets, start_offset)
        if end_offset is not None:
            keep = pc.and_(keep, pc.less(decoded.offsets, end_offset))
        arrays = {name: array.filter(keep) for name, array in arrays.items()}
    try:
        micros = pc.multiply_checked(arrays["timestamp"], 1000)
    except pa.ArrowInvalid:
        raise CorruptRecordError("record timestamp out of range") from None
    arrays["timestamp"] = micros.cast(TIMESTAMP_TYPE)
    return pa.Table.from_arrays([arrays[name] for name in FILE_SCHEMA.names],
                                schema=FILE_SCHEMA)


def _checked_add(left: pa.Array, right: pa.Array) -> pa.Array:
    try:
        return pc.add_checked(left, right)
    except pa.ArrowInvalid:
        raise CorruptRecordError("batch last offset out of range") from None


def _column(rows: pa.Table | pa.RecordBatch, name: str) -> pa.Array:
    column = rows.column(name)
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def conform_rows(rows: pa.Table, typed: pa.Schema | None = None) -> pa.Table:
    """``rows`` with the STORED_SCHEMA columns, in order, then typed columns: a
    ``decode_error`` column of nulls is added to rows of files written before it existed (or
    to records decoded by :func:`batches_to_rows`); FILE_SCHEMA columns must all be there.

    ``typed`` None: the typed columns ``rows`` hold are kept as they are. Otherwise exactly the
    columns of ``typed`` (a table's :func:`typed_schema`) follow: missing ones are null, and
    held ones are cast to the table's type (struct fields matched by name; fields the rows lack
    are null), so rows of files written before an evolution fit the table's newest schema."""
    if DECODE_ERROR not in rows.column_names:
        rows = rows.append_column(DECODE_ERROR_FIELD, pa.nulls(rows.num_rows, pa.string()))
    target = typed_schema(rows.schema) if typed is None else typed
    arrays = [rows.column(name) for name in STORED_SCHEMA.names]
    for field in target:
        if field.name in rows.column_names:
            arrays.append(rows.column(field.name))
        else:
            arrays.append(pa.nulls(rows.num_rows, field.type))
    schema = pa.schema([*STORED_SCHEMA, *target])
    return pa.Table.from_arrays(arrays, names=schema.names).cast(schema)


def quarantined(rows: pa.Table | pa.RecordBatch) -> pa.Array | None:
    """Boolean mask of the quarantined rows (``decode_error`` set); None when there are none
    (including rows without the column)."""
    if DECODE_ERROR not in rows.schema.names:
        return None
    errors = _column(rows, DECODE_ERROR)
    if errors.null_count == len(errors):
        return None
    return pc.is_valid(errors)


def records_only(rows: pa.Table) -> pa.Table:
    """``rows`` without quarantined rows (the rows a consumer may be served)."""
    mask = quarantined(rows)
    return rows if mask is None else rows.filter(pc.invert(mask))


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
    if starts:
        yield from zip(starts, [*starts[1:], rows.num_rows], strict=True)


def rows_to_batches(rows: pa.Table | pa.RecordBatch) -> list[bytes]:
    """Re-encode rows (FILE_SCHEMA columns, ordered by offset) as Kafka record batches, one per
    original batch, with the original base offset, last offset, codec and producer fields.
    Quarantined rows are not batches: they are left out (their offsets become a gap)."""
    mask = quarantined(rows)
    if mask is not None:
        rows = rows.filter(pc.invert(mask))
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
    columns = [_column(rows, name).take(first_rows).to_pylist()
               for name in ("batch_offset", "batch_last_offset", "attributes", "timestamp_type",
                            "leader_epoch", "producer_id", "producer_epoch", "base_sequence")]
    out: list[bytes] = []
    for (base_offset, last_offset, original, timestamp_type, leader_epoch, producer_id,
         producer_epoch, base_sequence, base_ms, batch_max_ms, start, stop, first, last) in zip(
            *columns, first_ms.to_pylist(), max_ms, bounds[:-1], bounds[1:], starts, stops,
            strict=True):
        codec = original & COMPRESSION_MASK
        attributes = codec | (original & (TRANSACTIONAL_BIT | CONTROL_BIT))
        max_timestamp = batch_max_ms
        if timestamp_type == LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_BIT
            max_timestamp = base_ms
        section = data[start:stop]
        payload = section if codec == 0 else compress(codec, bytes(section))
        tail = _AFTER_CRC.pack(attributes, last_offset - base_offset, base_ms, max_timestamp,
                               producer_id, producer_epoch, base_sequence, last - first)
        out.append(b"".join((
            _BEFORE_CRC.pack(base_offset, _AFTER_LENGTH + len(payload), leader_epoch,
                             CURRENT_MAGIC, crc32c(payload, crc32c(tail))),
            tail, payload)))
    return out


def _floor_ms(micros: pa.Array) -> pa.Array:
    """``micros // 1000`` (floor, as Python's ``//``) of an int64 array."""
    quotient = pc.divide(micros, 1000)
    if pc.min(micros).as_py() >= 0:
        return quotient
    return pc.if_else(pc.greater(pc.multiply(quotient, 1000), micros),
                      pc.subtract(quotient, 1), quotient)
