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

1. framing: walk the batches by their length fields. Bytes *frame* a batch when the header is
   complete, magic is 2, the length stays inside the buffer, and lastOffsetDelta and
   recordCount are not negative. Bytes that do not frame start an unframed range, which ends
   where the next good batch starts (resynchronisation: at the declared length when it was
   sane, else at the next position holding a magic byte 2 whose batch checks out in full,
   CRC included) or at the end of the buffer. A framed batch is *good* when its CRC matches
   and its offsets lie in the segment (from ``base_offset``, below ``next_offset``). The base
   offset is
   outside the CRC, so a damaged one shows only as a batch out of order with its
   neighbours: of the good batches, those outside the best run whose offset ranges strictly
   increase (in byte order; the most batches, then the most batches adjacent to their
   neighbours in the file) are bad too --
   one damaged header costs one batch, never the intact batches around it. A batch whose CRC
   fails ends at its declared length when bytes frame there, else (its length may be what is
   damaged) where the next good batch starts.
2. decoding: the good batches in range are decoded together (tier_rows.rows_of_batches, the
   vectorised path). When that fails, one pass over the batches finds every batch whose
   records do not frame (malformed length prefixes, wrong record count, undecodable
   compression: tier_codec.unframed_records); the rest is decoded again and, if that still
   fails (a bad field inside a record), bisected until each failing batch is alone (k such
   batches among n cost about k * log2(n) extra decodes of shrinking sets).
3. plausibility: a batch whose records' offsets fall outside its own range or do not increase
   is bad (its rows would duplicate or misplace offsets in the table).
4. offsets: each run of bad pieces stands for the offsets between the good batches around it
   (up to ``next_offset``, else ``end_offset``, after the last one). A bad batch whose header
   fits there and is not out of order keeps its own range (a failed CRC or decode with an
   intact header: the usual case); the other pieces share out the rest. Pieces left with no
   offset at all (a stray copy of a batch between two adjacent batches, junk after the last
   batch) are reported in :attr:`SegmentRows.quarantined` but get no row: a row needs an
   offset of its own.

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
    unframed_records,
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
    trusted: bool = True  # its header's offsets may stand for it (not out of order)
    first: int = 0
    last: int = -1


def segment_rows(
    data: Buffer, *, start_offset: int = 0, end_offset: int | None = None,
    base_offset: int = 0, next_offset: int | None = None, fallback_timestamp_ms: int = 0,
    verify_crc: bool = True,
) -> SegmentRows:
    """The rows of the offsets ``[start_offset, end_offset)`` of a segment's bytes ``data``,
    records and quarantined rows (see the module docstring). ``base_offset`` and
    ``next_offset``: the segment's first offset and the offset after its last (no batch may
    start below the one or reach the other; None: no upper bound); ``fallback_timestamp_ms``:
    the timestamp of a quarantined row with no decodable record in range to borrow one from
    (the tierer passes the segment file's modification time, as Kafka's retention does for
    segments without timestamps)."""
    buf = data if isinstance(data, bytes) else bytes(data)
    pieces = _frame(buf, lower=base_offset, end=next_offset, verify_crc=verify_crc)
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
    _assign_offsets(pieces, lower=base_offset,
                    end=next_offset if next_offset is not None else end_offset)
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


def _inspect(buf: bytes, pos: int, lower: int, end: int | None,
             verify_crc: bool) -> tuple[BatchFields | None, str | None, int, bool]:
    """``(fields, problem, hop, crc_ok)`` of the bytes at ``pos``: the header fields (plus
    position) when they frame a batch, else None; problem None when the batch is good (CRC,
    offsets within ``[lower, end)``); hop: the declared size when the length field looked
    sane (where the next batch may start); crc_ok: the CRC matched (or was not checked), so
    the length is right too."""
    available = len(buf) - pos
    if available < HEADER_SIZE:
        return None, (f"CorruptRecordError: {available} bytes at byte {pos} are too few for "
                      "a batch header"), 0, False
    fields = HEADER.unpack_from(buf, pos)
    length = fields[BATCH_LENGTH]
    size = length + LOG_OVERHEAD
    if length < MIN_BATCH_LENGTH or size > available:
        return None, (f"CorruptRecordError: the batch at byte {pos} declares length {length}; "
                      f"{available} bytes are left"), 0, False
    if fields[MAGIC] != CURRENT_MAGIC:
        return None, (f"InvalidRecordError: unsupported record batch magic {fields[MAGIC]} at "
                      f"byte {pos}"), size, False
    if fields[LAST_OFFSET_DELTA] < 0 or fields[RECORD_COUNT] < 0:
        return None, (f"CorruptRecordError: the batch at byte {pos} has a negative "
                      "lastOffsetDelta or record count"), size, False
    batch = (*fields, pos)
    base = fields[BASE_OFFSET]
    if verify_crc:
        actual = crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])
        if actual != fields[CRC]:
            return batch, (f"CorruptRecordError: the batch at byte {pos} (base offset {base}) "
                           f"failed its CRC check: stored {fields[CRC]:#010x}, computed "
                           f"{actual:#010x}"), size, False
    last = base + fields[LAST_OFFSET_DELTA]
    if base < lower or (end is not None and last >= end):
        limit = "" if end is None else f" below {end}"
        return batch, (f"CorruptRecordError: the batch at byte {pos} claims offsets "
                       f"[{base}, {last}]; the segment holds offsets from {lower}{limit} "
                       "(its base offset, which no CRC covers, may be damaged)"), size, True
    return batch, None, size, True


def _frame(buf: bytes, *, lower: int, end: int | None, verify_crc: bool) -> list[_Piece]:
    """Step 1 of the module docstring: the buffer cut into batches and unframed ranges; the
    good batches that break the offset order are marked bad (:func:`_keep_ordered`)."""
    pieces: list[_Piece] = []
    pos, n = 0, len(buf)
    while pos < n:
        fields, problem, hop, crc_ok = _inspect(buf, pos, lower, end, verify_crc)
        if fields is not None:
            step = hop
            if not crc_ok:
                # the failed CRC may come from a damaged length: the batch ends where a good
                # batch starts inside what it claims, or where the next good batch starts
                # when nothing frames where it points
                inside = _resync(buf, pos, 0, lower, end, verify_crc, limit=pos + hop)
                if inside < pos + hop:
                    step = inside - pos
                elif pos + hop < n and _inspect(buf, pos + hop, lower, end,
                                                verify_crc)[0] is None:
                    step = _resync(buf, pos + hop, 0, lower, end, verify_crc) - pos
            # a CRC-valid batch is bad only for offsets outside the segment: not to be trusted
            pieces.append(_Piece(pos, step, fields, problem,
                                 trusted=problem is None or not crc_ok))
            pos += step
            continue
        following = _resync(buf, pos, hop, lower, end, verify_crc)
        pieces.append(_Piece(pos, following - pos, None, problem))
        pos = following
    _keep_ordered(pieces, lower, end)
    return pieces


def _resync(buf: bytes, pos: int, hop: int, lower: int, end: int | None,
            verify_crc: bool, *, limit: int | None = None) -> int:
    """Where the next good batch after the bad bytes at ``pos`` starts, before ``limit`` (the
    buffer's end when none does; ``limit`` when none does before it): at ``pos + hop`` if the
    length field was sane, else at the first position whose magic byte is 2 and whose batch
    checks out in full."""
    n = len(buf) if limit is None else min(limit, len(buf))
    if hop and pos + hop < n and _inspect(buf, pos + hop, lower, end, verify_crc)[1] is None:
        return pos + hop
    probe = pos + 1 + MAGIC_OFFSET
    while True:
        at = buf.find(_MAGIC_BYTE, probe, n + MAGIC_OFFSET)
        if at < 0 or at - MAGIC_OFFSET >= n or at - MAGIC_OFFSET + HEADER_SIZE > len(buf):
            return n
        candidate = at - MAGIC_OFFSET
        if _inspect(buf, candidate, lower, end, verify_crc)[1] is None:
            return candidate
        probe = at + 1


def _keep_ordered(pieces: list[_Piece], lower: int, upper: int | None) -> None:
    """Mark bad the good batches outside the best run (in byte order) of good batches whose
    offset ranges strictly increase. A base offset is not covered by the CRC, so a damaged one
    shows only as a batch out of order with its neighbours; the best run has the most batches
    and, among those, the most anchored ones (starting right after the previous batch in the
    file or ending right before the next, as the batches of a local log do), so one damaged
    header costs its own batch and never the intact batches around it. (A weighted longest
    increasing run: O(n log n), run only when the batches are out of order.)"""
    candidates: list[int] = []
    ranges: list[tuple[int, int]] = []
    for index, piece in enumerate(pieces):
        if piece.error is None and piece.fields is not None:
            candidates.append(index)
            ranges.append((piece.fields[BASE_OFFSET], _last(piece.fields)))
    if all(ranges[k][0] > ranges[k - 1][1] for k in range(1, len(ranges))):
        return  # already in order (a healthy segment): nothing to choose
    # a batch is anchored when it starts right after the batch before it in the file (the
    # first one: at the segment's base offset) or ends right before the one after it (the
    # last one: before the segment's next offset), bad batches included: a damaged base
    # offset un-anchors its own batch only
    framed = [(p.fields[BASE_OFFSET], _last(p.fields)) for p in pieces if p.fields is not None]
    framed_at = [i for i, p in enumerate(pieces) if p.fields is not None]
    where = {index: k for k, index in enumerate(framed_at)}
    anchored = []
    for index, (base, last) in zip(candidates, ranges, strict=True):
        k = where[index]
        previous = framed[k - 1][1] if k > 0 else lower - 1
        following = framed[k + 1][0] if k + 1 < len(framed) else upper
        anchored.append(previous + 1 == base or (following is not None
                                                 and last + 1 == following))
    weight = len(ranges) + 1  # one batch more outweighs every anchoring bonus together
    lasts = sorted({last for _base, last in ranges})
    tree = [(0, -1)] * (len(lasts) + 1)  # Fenwick tree: best (score, k) by last-offset rank

    def best_below(rank: int) -> tuple[int, int]:
        best = (0, -1)
        while rank > 0:
            best = max(best, tree[rank])
            rank -= rank & -rank
        return best

    def record(rank: int, value: tuple[int, int]) -> None:
        while rank <= len(lasts):
            tree[rank] = max(tree[rank], value)
            rank += rank & -rank

    score: list[int] = []
    before: list[int] = []
    for k, (base, last) in enumerate(ranges):
        best, previous = best_below(bisect.bisect_left(lasts, base))  # runs ending below base
        score.append(best + weight + anchored[k])
        before.append(previous)
        record(bisect.bisect_left(lasts, last) + 1, (score[k], k))
    kept: set[int] = set()
    cursor = max(range(len(ranges)), key=lambda k: score[k])
    while cursor >= 0:
        kept.add(candidates[cursor])
        cursor = before[cursor]
    for index in candidates:
        if index not in kept:
            piece = pieces[index]
            assert piece.fields is not None
            piece.trusted = False
            piece.error = (f"CorruptRecordError: the batch at byte {piece.position} claims "
                           f"offsets [{piece.fields[BASE_OFFSET]}, {_last(piece.fields)}], "
                           "out of order with the batches around it (its base offset, which "
                           "no CRC covers, may be damaged)")


# --------------------------------------------------------------------------------- decoding


def _decode(buf: bytes, batches: Sequence[BatchFields], start: int, end: int | None
            ) -> tuple[list[pa.Table], list[tuple[int, str]]]:
    """Step 2: rows of the batches that decode, and ``(position, error)`` of those that do
    not. When the whole set fails, one pass finds every batch whose records do not frame
    (tier_codec.unframed_records: the usual poison), then bisection the rest."""
    if not batches:
        return [], []
    try:
        return [rows_of_batches(buf, batches, start_offset=start, end_offset=end)], []
    except _DECODE_FAILURES:
        pass
    unframed = dict(unframed_records(buf, batches))
    failures = [(batches[index][POSITION], f"{type(exc).__name__}: {exc}")
                for index, exc in unframed.items()]
    rest = [fields for index, fields in enumerate(batches) if index not in unframed]
    tables, more = _bisect(buf, rest, start, end, known_bad=not unframed)
    return tables, failures + more


def _bisect(buf: bytes, batches: Sequence[BatchFields], start: int, end: int | None, *,
            known_bad: bool = False) -> tuple[list[pa.Table], list[tuple[int, str]]]:
    """Rows of the batches that decode and the failures of the others, by halving the set
    until each failing batch is alone (``known_bad``: the set is known to fail)."""
    if not batches:
        return [], []
    if not known_bad:
        try:
            return [rows_of_batches(buf, batches, start_offset=start, end_offset=end)], []
        except _DECODE_FAILURES as exc:
            if len(batches) == 1:
                return [], [(batches[0][POSITION], f"{type(exc).__name__}: {exc}")]
    elif len(batches) == 1:
        return _bisect(buf, batches, start, end)
    middle = len(batches) // 2
    tables, failures = _bisect(buf, batches[:middle], start, end)
    more_tables, more_failures = _bisect(buf, batches[middle:], start, end)
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
    """Step 4: the offsets each bad piece stands for (``first``..``last``; last < first: none).
    Each run of bad pieces fills the window between the good batches around it."""
    previous_last = lower - 1
    run: list[_Piece] = []
    for piece in [*pieces, None]:
        if piece is not None and piece.error is not None:
            run.append(piece)
            continue
        if run:
            if piece is not None:
                assert piece.fields is not None
                high: int | None = piece.fields[BASE_OFFSET] - 1
            else:
                high = None if end is None else end - 1
            _assign_run(run, previous_last + 1, high)
            run = []
        if piece is not None:
            assert piece.fields is not None
            previous_last = _last(piece.fields)


def _assign_run(run: Sequence[_Piece], low: int, high: int | None) -> None:
    """Offsets of consecutive bad pieces in the window ``[low, high]`` (None: unbounded). A
    batch whose header is trusted (not out of order) and fits the window, after the pieces
    before it, keeps its own offsets (cut at ``high``); the other pieces share out what lies
    between those."""
    claims: list[tuple[int, int] | None] = []
    cursor = low - 1
    for piece in run:
        fields = piece.fields if piece.trusted else None
        if (fields is not None and fields[BASE_OFFSET] > cursor
                and (high is None or fields[BASE_OFFSET] <= high)):
            last = _last(fields) if high is None else min(_last(fields), high)
            claims.append((fields[BASE_OFFSET], last))
            cursor = last
        else:
            claims.append(None)
    previous = low - 1
    for index, piece in enumerate(run):
        claim = claims[index]
        if claim is None:
            following = next((c[0] for c in claims[index + 1:] if c is not None), None)
            upper = following - 1 if following is not None else high
            claim = (previous + 1, previous if upper is None else max(upper, previous))
        piece.first, piece.last = claim
        previous = max(previous, piece.last)


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
            "batch_offset": piece.first,
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

