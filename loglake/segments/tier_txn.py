"""Committed rows only: what the tierer keeps of a segment's transactional data.

A topic's Delta table holds committed data only (DESIGN.md "Cold tier"). The tierer tiers a
sealed segment only once it lies wholly below the partition's last stable offset (every
transaction with a record in it has its COMMIT or ABORT marker), and before writing it drops:

* every record of an aborted transaction: a row of a *transactional* batch of producer ``P``
  whose batch base offset lies in ``[first_offset, last_offset]`` of an aborted transaction of
  ``P`` (``last_offset`` is the offset of its ABORT marker; Kafka's ``AbortedTxn`` / the
  ``.txnindex`` entry, which the partition answers with ``aborted_transactions(start, end)``).
  A batch never spans two transactions, so the decision is per batch, as in Kafka's consumer
  and log cleaner;
* every control batch (COMMIT / ABORT markers): a marker is bookkeeping for consumers that read
  the log, and a table that holds no aborted record needs none.

Quarantined rows (``decode_error`` set, tier_quarantine.py) stay, whatever their header's
attributes say: they stand for bytes nobody could decode, and the quarantine keeps them.
Offsets of the kept rows are unchanged; the dropped offsets are a gap, as after compaction
(tier reads, Spark and compaction all accept gaps). Non-transactional batches of a producer are
never dropped, even inside an aborted range (they cannot be part of the transaction).

``aborted`` is plain data (tuples of ints) so it crosses into the tierer's worker process
without importing the partition's types there.

Pure functions on in-memory data: thread-safe, no I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from loglake.segments.batch import CONTROL_BIT, TRANSACTIONAL_BIT, iter_batches
from loglake.segments.tier_rows import DECODE_ERROR

AbortedRange = tuple[int, int, int]
"""``(producer_id, first_offset, last_offset)`` of one aborted transaction (inclusive; the last
offset is its ABORT marker's)."""


@dataclass(frozen=True, slots=True)
class CommittedRows:
    """What :func:`committed_rows` kept, and what it dropped (counts of rows)."""

    rows: pa.Table
    aborted_records: int = 0
    markers: int = 0


def committed_rows(rows: pa.Table, aborted: Sequence[AbortedRange] = ()) -> CommittedRows:
    """``rows`` (tier_rows FILE_SCHEMA / STORED_SCHEMA columns, in offset order, rows of a batch
    contiguous) without aborted records and control markers (module docstring)."""
    n = rows.num_rows
    if n == 0:
        return CommittedRows(rows)
    attributes = _column(rows, "attributes").cast(pa.int64())
    control = pc.not_equal(pc.bit_wise_and(attributes, CONTROL_BIT), 0)
    transactional = pc.not_equal(pc.bit_wise_and(attributes, TRANSACTIONAL_BIT), 0)
    if DECODE_ERROR in rows.column_names:
        kept_anyway = pc.is_valid(_column(rows, DECODE_ERROR))  # quarantined rows
    else:
        kept_anyway = pa.repeat(pa.scalar(False), n)
    markers = pc.and_(control, pc.invert(kept_anyway))
    drop_aborted = _aborted_mask(rows, aborted, pc.and_(
        pc.and_(transactional, pc.invert(control)), pc.invert(kept_anyway)))
    drop = markers if drop_aborted is None else pc.or_(markers, drop_aborted)
    dropped = pc.sum(drop.cast(pa.int64())).as_py() or 0
    if not dropped:
        return CommittedRows(rows)
    marker_count = pc.sum(markers.cast(pa.int64())).as_py() or 0
    return CommittedRows(rows.filter(pc.invert(drop)), dropped - marker_count, marker_count)


def _aborted_mask(rows: pa.Table, aborted: Sequence[AbortedRange],
                  candidates: pa.Array) -> pa.Array | None:
    """Rows of aborted transactions among ``candidates`` (transactional data rows); None when
    there are none."""
    if not aborted:
        return None
    spans = _spans(aborted)
    producers = _column(rows, "producer_id")
    candidates = pc.and_(candidates, pc.is_in(producers, value_set=pa.array(
        sorted(spans), pa.int64())))
    hits = pc.indices_nonzero(candidates)
    if not len(hits):
        return None
    # one decision per run of rows from one batch (they share batch_offset and producer)
    bases = _column(rows, "batch_offset").take(hits)
    owners = producers.take(hits)
    count = len(hits)
    changed = pc.or_(pc.not_equal(bases.slice(1), bases.slice(0, count - 1)),
                     pc.not_equal(owners.slice(1), owners.slice(0, count - 1)))
    starts = [0, *pc.add(pc.indices_nonzero(changed), 1).to_pylist()]
    ends = [*starts[1:], count]
    first_rows = pa.array(starts, pa.int64())
    verdicts = [_in_aborted(spans[producer_id], base) for producer_id, base in zip(
        owners.take(first_rows).to_pylist(), bases.take(first_rows).to_pylist(), strict=True)]
    if not any(verdicts):
        return None
    per_hit = pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(
        pa.array(ends, pa.int64()), pa.array(verdicts, pa.bool_())))
    dropped = hits.filter(per_hit)
    return pc.is_in(pa.array(range(rows.num_rows), pa.uint64()),
                    value_set=dropped.cast(pa.uint64()))


def _spans(aborted: Sequence[AbortedRange]) -> dict[int, tuple[list[int], list[int]]]:
    """Per producer: the first and last offsets of its aborted transactions, sorted."""
    spans: dict[int, tuple[list[int], list[int]]] = {}
    for producer_id, first, last in sorted(aborted, key=lambda a: (a[0], a[1])):
        firsts, lasts = spans.setdefault(int(producer_id), ([], []))
        firsts.append(int(first))
        lasts.append(int(last))
    return spans


def _in_aborted(spans: tuple[list[int], list[int]], offset: int) -> bool:
    """Whether ``offset`` lies in one of a producer's aborted ``spans`` (first offsets and last
    offsets, sorted; a producer's transactions never overlap)."""
    firsts, lasts = spans
    i = bisect.bisect_right(firsts, offset) - 1
    return i >= 0 and offset <= lasts[i]


def without_aborted_batches(data: bytes, aborted: Sequence[AbortedRange]) -> bytes:
    """The back-to-back batches ``data`` (read from a local log) without the batches of the
    ``aborted`` transactions; control batches stay (a consumer skips them but moves past their
    offsets, so an answer is never empty while it holds a marker). For answers that carry no
    aborted-transactions list (tier_reads.py)."""
    if not aborted:
        return data
    spans = _spans(aborted)
    kept: list[bytes] = []
    for header in iter_batches(data, verify_crc=False):
        mine = spans.get(header.producer_id)
        if (mine is not None and header.is_transactional and not header.is_control
                and _in_aborted(mine, header.base_offset)):
            continue
        kept.append(data[header.position:header.end_position])
    return b"".join(kept)


def _column(rows: pa.Table, name: str) -> pa.Array:
    column = rows.column(name)
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
