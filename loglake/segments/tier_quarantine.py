"""Quarantine: the table rows of a sealed segment, whatever its bytes hold.

The tierer must never stop on a segment. Data written before produce-side validation existed,
or a bit flipped on disk, can leave bytes in a sealed segment that do not decode; retrying them
forever would hold the partition's tiering (and its local retention, which deletes only
tiered segments) for good. :func:`segment_rows` turns a segment's bytes into rows
(tier_rows.STORED_SCHEMA) in which every record that decodes appears exactly once at its
offset, and everything else becomes a *quarantined row* (format: tier_rows.py): one per bad
batch or per range of bytes that do not frame as batches, holding the raw bytes and the error.
Nothing is dropped silently, and the tier stays contiguous: the segment's offsets are covered
by records and quarantined rows, and the tiered end moves past them.

Steps:

1. framing: walk the batches by their length fields. A batch is *framed* when its header is
   complete, magic is 2, its length stays inside the buffer, lastOffsetDelta and recordCount
   are not negative, and its offsets are plausible (base above the previous batch's offsets and
   at least ``base_offset``, the segment's; last offset below ``end_offset``); it is *good*
   when its CRC matches too. A framed batch whose CRC fails is quarantined whole (the next
   batch may still start above its base: its lastOffsetDelta is not trusted). Anything else
   starts an unframed range, which ends where the next good batch with a plausible base
   offset starts (resynchronisation: candidates are the positions of a magic byte 2, each
   checked in full, CRC included) or at the end of the buffer.
2. decoding: the good batches in range are decoded together (tier_rows.rows_of_batches, the
   vectorised path); when that fails, the set is bisected until each failing batch is alone
   (k bad batches among n cost about k * log2(n) extra decodes of shrinking sets).
3. plausibility: a batch whose records' offsets fall outside its own range or do not increase
   is quarantined (its rows would duplicate or misplace offsets in the table).
4. offsets: a quarantined batch keeps its base offset; its last offset is cut below the next
   good batch. An unframed range stands for the offsets between the batch before it and the
   good batch after it (up to ``end_offset`` when none follows). Bytes that stand for no
   offset at all (a stray copy of a batch between two adjacent batches, junk after the last
   batch) are reported in :attr:`SegmentRows.quarantined` but get no row: a row needs an
   offset of its own. (Framed batches, good or not, have strictly increasing base offsets,
   so these ranges never overlap.)

Rows come out in offset order, offsets unique, within ``[start_offset, end_offset)``. A clean
segment costs one framing pass (as tier_codec.scan_batches) plus one vectorised offsets check
over what tier_rows.batches_to_rows costs.

Pure functions on in-memory data: thread-safe, no I/O (the tierer runs them in its worker
process).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from crc32c import crc32c

from loglake.errors import LoglakeError
from loglake.segments.batch import (
    ATTRIBUTES_OFFSET,
    CURRENT_MAGIC,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_BIT,
    Buffer,
)
from loglake.segments.tier_codec import (
    ATTRIBUTES,
    BASE_OFFSET,
    BASE_SEQUENCE,
    BATCH_LENGTH,
    CRC,
    LAST_OFFSET_DELTA,
    LEADER_EPOCH,
    MAGIC,
    POSITION,
    PRODUCER_EPOCH,
    PRODUCER_ID,
    RECORD_COUNT,
    BatchFields,
)
from loglake.segments.tier_rows import (
    FILE_SCHEMA,
    STORED_SCHEMA,
    TIMESTAMP_TYPE,
    conform_rows,
    rows_of_batches,
)

MAX_RAW_BYTES = 16 << 20
"""Most raw bytes one quarantined row keeps (a batch is at most max.message.bytes, 1 MiB by
default; an unframed range can be the rest of a segment). The error text says when bytes
were cut."""

_MAGIC_BYTE = bytes([CURRENT_MAGIC])
_DECODE_FAILURES = (LoglakeError, ValueError, OverflowError, IndexError, ArithmeticError,
                    pa.ArrowException)
"""What a failed decode of corrupt bytes may raise (tier_codec promises LoglakeError; the rest
is defence in depth: a batch that makes the decoder fail in any of these ways is poison)."""


@dataclass(frozen=True, slots=True)
class Quarantined:
    """One bad batch or unframed byte range of a segment."""

    first_offset: int
    """The first offset it stands for (its row's ``offset``, unless the range cuts it)."""
    last_offset: int
    """The last offset it stands for; ``first_offset - 1`` when it stands for none (no row)."""
    position: int
    """Byte position in the segment."""
    size: int
    """Bytes (the row keeps at most MAX_RAW_BYTES of them)."""
    framed: bool
    """True for a whole batch (header readable), False for bytes that do not frame."""
    error: str
    """What failed: ``<error class>: <message>``."""

    @property
    def stored(self) -> bool:
        """Whether it has a row (it stands for at least one offset)."""
        return self.last_offset >= self.first_offset

    def describe(self) -> str:
        what = "batch" if self.framed else "unframed bytes"
        where = (f"offsets [{self.first_offset}, {self.last_offset}]" if self.stored
                 else f"no offset (before {self.first_offset}), not stored")
        return f"{what} at byte {self.position} ({self.size} bytes), {where}: {self.error}"


@dataclass(frozen=True, slots=True)
class SegmentRows:
    """What :func:`segment_rows` made of a segment."""

    rows: pa.Table
    """STORED_SCHEMA rows in offset order: the records, and one row per stored quarantine."""
    quarantined: tuple[Quarantined, ...]
    """Every bad batch / unframed range met in the range, in byte order (stored or not)."""


@dataclass(slots=True)
class _Piece:
    """One stretch of the buffer: a batch (``fields``) or unframed bytes; bad when ``error``."""

    position: int
    size: int
    fields: BatchFields | None
    error: str | None
    first: int = 0
    last: int = -1


def segment_rows(
    data: Buffer, *, start_offset: int = 0, end_offset: int | None = None,
    base_offset: int = 0, fallback_timestamp_ms: int = 0, verify_crc: bool = True,
) -> SegmentRows:
    """The rows of the offsets ``[start_offset, end_offset)`` of a segment's bytes ``data``,
    records and quarantined rows (see the module docstring). ``base_offset``: the segment's
    first offset (no batch may start below it); ``fallback_timestamp_ms``: the timestamp of a
    quarantined row with no decodable record in range to borrow one from (the tierer passes
    the segment file's modification time, as Kafka's retention does for segments without
    timestamps)."""
    buf = data if isinstance(data, bytes) else bytes(data)
    pieces = _frame(buf, lower=base_offset, end=end_offset, verify_crc=verify_crc)
    wanted = [p for p in pieces if p.error is None and p.fields is not None
              and _last(p.fields) >= start_offset]
    tables, failures = _decode(buf, [p.fields for p in wanted if p.fields is not None],
                               start_offset, end_offset)
    by_position = {p.position: p for p in pieces}
    for position, error in failures:
        by_position[position].error = error
    rows = (pa.concat_tables(tables) if len(tables) > 1 else tables[0] if tables
            else FILE_SCHEMA.empty_table())
    misplaced = _misplaced_batches(rows)
    if misplaced:
        for piece in wanted:
            assert piece.fields is not None
            if piece.fields[BASE_OFFSET] in misplaced:
                piece.error = (f"CorruptRecordError: the records of the batch at byte "
                               f"{piece.position} (offsets [{piece.fields[BASE_OFFSET]}, "
                               f"{_last(piece.fields)}]) have offsets outside that range or "
                               "out of order")
        keep = pc.invert(pc.is_in(rows.column("batch_offset"),
                                  value_set=pa.array(sorted(misplaced), pa.int64())))
        rows = rows.filter(keep)
    if not any(p.error for p in pieces):
        return SegmentRows(conform_rows(rows), ())
    _assign_offsets(pieces, lower=base_offset, end=end_offset)
    bad = [p for p in pieces if p.error is not None and _in_range(p, start_offset, end_offset)]
    stored = [p for p in bad if p.last >= p.first]
    quarantine = _quarantine_rows(buf, stored, rows, start_offset, fallback_timestamp_ms)
    merged = pa.concat_tables([conform_rows(rows), quarantine]).sort_by("offset")
    summary = tuple(Quarantined(p.first, p.last, p.position, p.size, p.fields is not None,
                                p.error or "") for p in bad)
    return SegmentRows(merged, summary)


def _last(fields: BatchFields) -> int:
    return fields[BASE_OFFSET] + fields[LAST_OFFSET_DELTA]


# ---------------------------------------------------------------------------------- framing


def _inspect(buf: bytes, pos: int, expected: int, end: int | None,
             verify_crc: bool) -> tuple[BatchFields | None, str | None, int]:
    """``(fields, problem, hop)`` of the bytes at ``pos``: fields (with the position) of a
    framed batch with plausible offsets, else None; problem None when it is good; hop: the
    declared size when the length field looked sane (where the next batch may start)."""
    available = len(buf) - pos
    if available < HEADER_SIZE:
        return None, (f"CorruptRecordError: {available} bytes at byte {pos} are too few for "
                      "a batch header"), 0
    fields = HEADER.unpack_from(buf, pos)
    length = fields[BATCH_LENGTH]
    size = length + LOG_OVERHEAD
    if length < MIN_BATCH_LENGTH or size > available:
        return None, (f"CorruptRecordError: the batch at byte {pos} declares length {length}; "
                      f"{available} bytes are left"), 0
    if fields[MAGIC] != CURRENT_MAGIC:
        return None, (f"InvalidRecordError: unsupported record batch magic {fields[MAGIC]} at "
                      f"byte {pos}"), size
    if fields[LAST_OFFSET_DELTA] < 0 or fields[RECORD_COUNT] < 0:
        return None, (f"CorruptRecordError: the batch at byte {pos} has a negative "
                      "lastOffsetDelta or record count"), size
    base = fields[BASE_OFFSET]
    last = base + fields[LAST_OFFSET_DELTA]
    if base < expected or (end is not None and last >= end):
        limit = "" if end is None else f" below {end}"
        return None, (f"CorruptRecordError: the batch at byte {pos} claims offsets "
                      f"[{base}, {last}]; the segment holds offsets from {expected}{limit} "
                      "there"), size
    batch = (*fields, pos)
    if verify_crc:
        actual = crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])
        if actual != fields[CRC]:
            return batch, (f"CorruptRecordError: the batch at byte {pos} (base offset {base}) "
                           f"failed its CRC check: stored {fields[CRC]:#010x}, computed "
                           f"{actual:#010x}"), size
    return batch, None, size


def _frame(buf: bytes, *, lower: int, end: int | None, verify_crc: bool) -> list[_Piece]:
    """Step 1 of the module docstring: the buffer cut into batches and unframed ranges."""
    pieces: list[_Piece] = []
    pos, n = 0, len(buf)
    expected = lower
    while pos < n:
        fields, problem, hop = _inspect(buf, pos, expected, end, verify_crc)
        if fields is not None:
            pieces.append(_Piece(pos, hop, fields, problem))
            # a CRC failure leaves lastOffsetDelta untrusted: the next batch may start above
            # the base (offsets are reassigned in _assign_offsets)
            expected = _last(fields) + 1 if problem is None else fields[BASE_OFFSET] + 1
            pos += hop
            continue
        following = _resync(buf, pos, hop, expected, end, verify_crc)
        pieces.append(_Piece(pos, following - pos, None, problem))
        pos = following
    return pieces


def _resync(buf: bytes, pos: int, hop: int, expected: int, end: int | None,
            verify_crc: bool) -> int:
    """Where the next good batch after the bad bytes at ``pos`` starts (the buffer's end when
    none does): at ``pos + hop`` if the length field was sane, else at the first position
    whose magic byte is 2 and whose batch checks out in full."""
    n = len(buf)
    if hop and pos + hop < n and _inspect(buf, pos + hop, expected, end, verify_crc)[1] is None:
        return pos + hop
    probe = pos + 1 + MAGIC_OFFSET
    while True:
        at = buf.find(_MAGIC_BYTE, probe)
        if at < 0 or at - MAGIC_OFFSET + HEADER_SIZE > n:
            return n
        candidate = at - MAGIC_OFFSET
        if _inspect(buf, candidate, expected, end, verify_crc)[1] is None:
            return candidate
        probe = at + 1


# --------------------------------------------------------------------------------- decoding


def _decode(buf: bytes, batches: Sequence[BatchFields], start: int, end: int | None
            ) -> tuple[list[pa.Table], list[tuple[int, str]]]:
    """Step 2: rows of the batches that decode, and ``(position, error)`` of those that do
    not (bisection)."""
    if not batches:
        return [], []
    try:
        return [rows_of_batches(buf, batches, start_offset=start, end_offset=end)], []
    except _DECODE_FAILURES as exc:
        if len(batches) == 1:
            return [], [(batches[0][POSITION], f"{type(exc).__name__}: {exc}")]
    middle = len(batches) // 2
    tables, failures = _decode(buf, batches[:middle], start, end)
    more_tables, more_failures = _decode(buf, batches[middle:], start, end)
    return tables + more_tables, failures + more_failures


def _misplaced_batches(rows: pa.Table) -> set[int]:
    """Step 3: base offsets of the batches whose records' offsets leave the batch's range or
    do not increase."""
    n = rows.num_rows
    if n == 0:
        return set()
    offsets = rows.column("offset")
    bases = rows.column("batch_offset")
    outside = pc.or_(pc.less(offsets, bases), pc.greater(offsets, rows.column("batch_last_offset")))
    bad = pc.filter(bases, outside) if pc.any(outside).as_py() else pa.array([], pa.int64())
    found = set(bad.to_pylist())
    if n > 1:
        backwards = pc.less_equal(offsets.slice(1), offsets.slice(0, n - 1))
        if pc.any(backwards).as_py():
            found |= set(pc.filter(bases.slice(1), backwards).to_pylist())
    return found


# ---------------------------------------------------------------------------------- offsets


def _assign_offsets(pieces: list[_Piece], *, lower: int, end: int | None) -> None:
    """Step 4: the offsets each bad piece stands for (``first``..``last``; last < first: none)."""
    # framed pieces (good or bad) have strictly increasing base offsets (see _frame): each
    # bad piece ends below the next one's base
    next_base: list[int | None] = [None] * len(pieces)
    following: int | None = None
    for index in range(len(pieces) - 1, -1, -1):
        next_base[index] = following
        fields = pieces[index].fields
        if fields is not None:
            following = fields[BASE_OFFSET]
    previous_last = lower - 1
    for index, piece in enumerate(pieces):
        fields = piece.fields
        if piece.error is None and fields is not None:
            previous_last = _last(fields)
            continue
        limit = next_base[index]
        upper = limit - 1 if limit is not None else (end - 1 if end is not None else None)
        first = previous_last + 1
        if fields is not None:
            first = max(first, fields[BASE_OFFSET])
            last = _last(fields) if upper is None else min(_last(fields), upper)
        else:
            last = first - 1 if upper is None else upper
        piece.first, piece.last = first, max(last, first - 1)
        previous_last = max(previous_last, piece.last)


def _in_range(piece: _Piece, start: int, end: int | None) -> bool:
    if piece.last >= piece.first:  # stands for offsets: those must meet the range
        return piece.last >= start and (end is None or piece.first < end)
    return piece.first >= start and (end is None or piece.first <= end)


def _quarantine_rows(buf: bytes, pieces: Sequence[_Piece], records: pa.Table, start: int,
                     fallback_ms: int) -> pa.Table:
    """One STORED_SCHEMA row per stored bad piece (format in tier_rows.py)."""
    offsets = records.column("offset").to_pylist()
    micros = records.column("timestamp").cast(pa.int64()).to_pylist()
    columns: dict[str, list[object]] = {name: [] for name in STORED_SCHEMA.names}
    for piece in pieces:
        offset = max(piece.first, start)
        at = bisect.bisect_left(offsets, offset)
        neighbour = at - 1 if at > 0 else at if at < len(offsets) else None
        raw = buf[piece.position : piece.position + min(piece.size, MAX_RAW_BYTES)]
        error = piece.error or ""
        if piece.size > MAX_RAW_BYTES:
            error += f" (the first {MAX_RAW_BYTES} of {piece.size} bytes are kept)"
        fields = piece.fields
        attributes = fields[ATTRIBUTES] if fields is not None else 0
        values: dict[str, object] = {
            "offset": offset,
            "timestamp": micros[neighbour] if neighbour is not None else fallback_ms * 1000,
            "timestamp_type": int(bool(attributes & TIMESTAMP_TYPE_BIT)),
            "key": None,
            "value": raw,
            "headers": [],
            "batch_offset": fields[BASE_OFFSET] if fields is not None else piece.first,
            "batch_last_offset": piece.last,
            "attributes": attributes,
            "leader_epoch": fields[LEADER_EPOCH] if fields is not None else -1,
            "producer_id": fields[PRODUCER_ID] if fields is not None else -1,
            "producer_epoch": fields[PRODUCER_EPOCH] if fields is not None else -1,
            "base_sequence": fields[BASE_SEQUENCE] if fields is not None else -1,
            "is_control": True,
            "decode_error": error,
        }
        for name, value in values.items():
            columns[name].append(value)
    arrays = [
        pa.array(columns[f.name], pa.int64()).cast(TIMESTAMP_TYPE) if f.name == "timestamp"
        else pa.array(columns[f.name], f.type)
        for f in STORED_SCHEMA
    ]
    return pa.Table.from_arrays(arrays, schema=STORED_SCHEMA)

