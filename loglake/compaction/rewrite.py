"""Rewriting one partition's tiered files: Kafka's two-pass log cleaner on Arrow, and bin-packing.

:func:`rewrite_partition` runs where it is called: in a Spark task (compaction: one task per
Kafka partition) or in the job's own process (optimize). It never commits; it returns the
uncommitted files (:class:`~loglake.segments.tiered_table.PendingFile`) for the driver's replace
commit, which removes exactly ``plan.files``.

Compaction (``plan.cleanable_end`` set; every input row has an offset below it):

1. offset map: read ``offset, key, is_control`` (and the transaction columns) of the input
   files and compute the highest offset per non-null data key (Arrow hash aggregation;
   memory: the key column of the partition's cleanable rows, like Kafka's cleaner offset map,
   never the values);
2. recopy: read the input row groups in offset order and keep a row when it has a null key
   (Kafka refuses those on compacted topics; we keep them), is a quarantined row
   (``is_control`` with ``decode_error``: undecodable bytes the tierer kept, tier_rows.py), is
   the last input row, or holds its key's highest offset -- unless it is a tombstone (null
   value) whose ``timestamp + delete.retention.ms`` has passed.

Transactions: tables hold committed data only -- the tierer never tiers aborted records or
transaction markers (segments/tier_txn.py) -- so what Kafka's cleaner does for transactions
(drop the records of aborted transactions, then drop a marker once its transaction's records
are gone and ``delete.retention.ms`` passed) has nothing left to do, and the offsets where they
were are gaps like any compacted offset (the last-row rule above is not needed by tier reads,
which serve the local log after a gap at the table's tail, broker/tier_reads.py). Tables
tiered before that may hold both: :func:`legacy_transactions` finds, from the markers in the
input, the records of aborted transactions and the markers themselves, and the recopy drops
them (a marker at once: no reader of a table needs one, tier reads answer no aborted
transactions). Records of a transaction whose marker is not in the input (beyond the cleanable
end) stay until a later run sees it. Optimize keeps every row (it changes no content).

Optimize (``plan.cleanable_end`` None): recopy every row.

Offsets, timestamps, headers, ``batch_offset`` / ``batch_last_offset``, producer fields,
``decode_error`` and the typed columns of a schema'd topic (``<side>_typed`` /
``<side>_schema_id`` / ``<side>_error``, cast to the table's newest type: fields added by a
later evolution are null in rows of older files) are kept (files written before a column
existed get it as null); rows
stay in offset order, so rows of one original batch stay contiguous and fetches re-encode each
surviving batch with its original base and last offset (with gaps inside).
Output files hold up to ~:data:`OUTPUT_FILE_ROWS` rows / :data:`OUTPUT_FILE_BYTES` bytes of
Arrow data each (cut between input row groups, which hold whole batches); memory: one output
file's rows.

Pure with respect to Delta (no commits); thread-safe; picklable plans.
"""

from __future__ import annotations

import bisect
import json
import struct
from dataclasses import asdict, dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from loglake.segments.batch import TRANSACTIONAL_BIT
from loglake.segments.storage import Storage
from loglake.segments.tier_rows import DECODE_ERROR, FILE_SCHEMA, STORED_SCHEMA, conform_rows
from loglake.segments.tiered_table import PendingFile, TieredTable

OUTPUT_FILE_ROWS = 2_000_000
OUTPUT_FILE_BYTES = 256 << 20


@dataclass(frozen=True)
class RewritePlan:
    topic: str
    partition: int
    files: tuple[str, ...]
    """URIs of the input files, in offset order."""
    cleanable_end: int | None = None
    """Compaction: every input offset is below it. None: optimize (keep every row)."""
    now_ms: int = 0
    delete_retention_ms: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RewritePlan:
        data = json.loads(text)
        data["files"] = tuple(data["files"])
        return cls(**data)


@dataclass(frozen=True)
class RewriteOutcome:
    partition: int
    written: tuple[PendingFile, ...]
    rows_in: int
    rows_out: int

    def to_json(self) -> str:
        return json.dumps({"partition": self.partition, "rows_in": self.rows_in,
                           "rows_out": self.rows_out,
                           "written": [asdict(f) for f in self.written]})

    @classmethod
    def from_json(cls, text: str) -> RewriteOutcome:
        data = json.loads(text)
        return cls(int(data["partition"]), tuple(PendingFile(**f) for f in data["written"]),
                   int(data["rows_in"]), int(data["rows_out"]))


def latest_offsets(storage: Storage, paths: list[str], dropped: pa.Array | None = None
                   ) -> tuple[pa.Array, int, int]:
    """Pass 1: (highest offset of each non-null, non-control key; input rows; last offset),
    leaving out the rows at the offsets ``dropped`` (legacy aborted records: like Kafka's
    cleaner, an aborted record never supersedes a committed one)."""
    dataset = pads.dataset(paths, schema=FILE_SCHEMA, format="parquet",
                           filesystem=storage.pyarrow_filesystem())
    rows = dataset.to_table(columns=["offset", "key", "is_control"])
    if rows.num_rows == 0:
        return pa.array([], pa.int64()), 0, -1
    last = pc.max(rows.column("offset")).as_py()
    keyed = pc.and_(pc.is_valid(rows.column("key")), pc.invert(rows.column("is_control")))
    if dropped is not None and len(dropped):
        keyed = pc.and_(keyed, pc.invert(pc.is_in(rows.column("offset"), value_set=dropped)))
    latest = rows.filter(keyed).group_by("key", use_threads=False).aggregate([("offset", "max")])
    return latest.column("offset_max").combine_chunks(), rows.num_rows, int(last)


def legacy_transactions(storage: Storage, paths: list[str]) -> pa.Array:
    """Sorted offsets of the rows to drop from a table tiered before aborted records and
    markers were left out (module docstring): every marker row, and every row of a
    transactional batch of producer P that an ABORT marker of P closes (the batches of P since
    its previous marker in the input). Empty for tables tiered since."""
    dataset = pads.dataset(paths, schema=STORED_SCHEMA, format="parquet",
                           filesystem=storage.pyarrow_filesystem())
    transactional = pc.not_equal(pc.bit_wise_and(pc.field("attributes"), TRANSACTIONAL_BIT), 0)
    rows = dataset.to_table(
        columns=["offset", "key", "is_control", "batch_offset", "producer_id", DECODE_ERROR],
        filter=transactional & pc.field(DECODE_ERROR).is_null())
    if rows.num_rows == 0:
        return pa.array([], pa.int64())
    rows = rows.sort_by("offset")
    batch_offsets = rows.column("batch_offset").combine_chunks()
    n = rows.num_rows
    changed = pc.not_equal(batch_offsets.slice(1), batch_offsets.slice(0, n - 1))
    starts = [0, *pc.add(pc.indices_nonzero(changed), 1).to_pylist()]
    first_rows = pa.array(starts, pa.int64())
    heads = rows.take(first_rows).select(
        ["batch_offset", "producer_id", "is_control", "key"]).to_pylist()
    pending: dict[int, list[int]] = {}
    dropped: list[int] = []  # batch offsets
    for head in heads:
        producer_id = int(head["producer_id"])
        if not head["is_control"]:
            pending.setdefault(producer_id, []).append(int(head["batch_offset"]))
            continue
        dropped.append(int(head["batch_offset"]))  # the marker
        closed = pending.pop(producer_id, [])
        key = head["key"]
        if key is not None and len(key) >= 4 and struct.unpack_from(">h", key, 2)[0] == 0:
            dropped += closed  # ABORT: the transaction's records go too
    if not dropped:
        return pa.array([], pa.int64())
    drop = pc.is_in(batch_offsets, value_set=pa.array(dropped, pa.int64()))
    return rows.column("offset").combine_chunks().filter(drop).sort()


class _SortedOffsets:
    """The latest offset of every key, sorted, so each row group looks up only the offsets in
    its own range (``is_in`` builds a hash table of its value set on every call)."""

    def __init__(self, latest: pa.Array) -> None:
        self.array = latest.sort() if len(latest) else latest
        self.values = self.array.to_pylist()

    def within(self, low: int, high: int) -> pa.Array:
        start = bisect.bisect_left(self.values, low)
        stop = bisect.bisect_right(self.values, high)
        return self.array.slice(start, stop - start)


def _keep_mask(rows: pa.Table, plan: RewritePlan, latest: _SortedOffsets,
               last: int, legacy: _SortedOffsets) -> pa.Array:
    offsets = rows.column("offset")
    keyed = pc.and_(pc.is_valid(rows.column("key")), pc.invert(rows.column("is_control")))
    bounds = pc.min_max(offsets)
    value_set = latest.within(bounds["min"].as_py(), bounds["max"].as_py())
    is_latest = pc.is_in(offsets, value_set=value_set)
    cutoff_us = (plan.now_ms - plan.delete_retention_ms) * 1000
    expired_tombstone = pc.and_(
        pc.is_null(rows.column("value")),
        pc.less_equal(rows.column("timestamp").cast(pa.int64()), cutoff_us))
    keep = pc.or_(pc.invert(keyed), pc.and_(is_latest, pc.invert(expired_tombstone)))
    keep = pc.or_(keep, pc.equal(offsets, last))
    gone = legacy.within(bounds["min"].as_py(), bounds["max"].as_py())
    if len(gone):
        keep = pc.and_(keep, pc.invert(pc.is_in(offsets, value_set=gone)))
    return keep


def rewrite_partition(storage: Storage, plan: RewritePlan) -> RewriteOutcome:
    """Write the rows of ``plan.files`` that survive (module docstring) as new files."""
    fs = storage.pyarrow_filesystem()
    paths = [storage.path_in_fs(uri) for uri in plan.files]
    compacting = plan.cleanable_end is not None
    latest = legacy = _SortedOffsets(pa.array([], pa.int64()))
    last = -1
    if compacting:
        legacy = _SortedOffsets(legacy_transactions(storage, paths))
        latest_array, _rows, last = latest_offsets(storage, paths, legacy.array)
        latest = _SortedOffsets(latest_array)
    writer = TieredTable(storage, plan.topic)
    typed = writer.typed_schema()  # the newest table schema's: wider than every input's
    written: list[PendingFile] = []
    buffered: list[pa.Table] = []
    buffered_rows = buffered_bytes = rows_in = rows_out = 0

    def flush() -> None:
        nonlocal buffered_rows, buffered_bytes
        if buffered_rows:
            written.append(writer.write_file(plan.partition, pa.concat_tables(buffered)))
        buffered.clear()
        buffered_rows = buffered_bytes = 0

    for path in paths:
        with fs.open_input_file(path) as source:
            parquet = pq.ParquetFile(source)
            for index in range(parquet.num_row_groups):
                rows = conform_rows(parquet.read_row_group(index), typed)
                rows_in += rows.num_rows
                if compacting:
                    rows = rows.filter(_keep_mask(rows, plan, latest, last, legacy))
                if rows.num_rows == 0:
                    continue
                rows_out += rows.num_rows
                buffered.append(rows)
                buffered_rows += rows.num_rows
                buffered_bytes += rows.nbytes
                if buffered_rows >= OUTPUT_FILE_ROWS or buffered_bytes >= OUTPUT_FILE_BYTES:
                    flush()
    flush()
    return RewriteOutcome(plan.partition, tuple(written), rows_in, rows_out)
