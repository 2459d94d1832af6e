"""Committed rows only (segments/tier_txn.py, tiered_table.write_segment_file): aborted records
and transaction markers never become table rows; offsets of the kept rows are intact;
quarantined rows stay.

In-process: segments are built with records.py's encoder (transactional batches, control
batches with COMMIT / ABORT records as Kafka writes them); the table is a local Delta table.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads

from loglake.broker.partition import Partition
from loglake.broker.tier_reads import committed_local_read
from loglake.broker.tier_writer import _next_sealed
from loglake.catalog.zookeeper import PartitionState
from loglake.compaction.rewrite import (
    RewriteOutcome,
    RewritePlan,
    legacy_transactions,
    rewrite_partition,
)
from loglake.config import TopicConfig
from loglake.segments import filenames
from loglake.segments.batch import iter_batches
from loglake.segments.records import Record, encode_batch
from loglake.segments.storage import Storage
from loglake.segments.tier_quarantine import segment_rows
from loglake.segments.tier_rows import batches_to_rows, rows_to_batches
from loglake.segments.tier_txn import committed_rows
from loglake.segments.tiered_table import TieredTable, write_segment_file

TS = 1_700_000_000_000
PLAIN, COMMITTED, ABORTED = 7, 8, 9  # producer ids


def data(base: int, count: int, producer_id: int, *, txn: bool = True,
         tag: str = "") -> bytes:
    records = [Record(base + i, TS + base + i, b"k%d" % ((base + i) % 3),
                      f"{tag or producer_id}-{base + i}".encode()) for i in range(count)]
    return encode_batch(records, producer_id=producer_id, producer_epoch=0,
                        base_sequence=base, is_transactional=txn)


def marker(offset: int, producer_id: int, *, commit: bool) -> bytes:
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, 5)
    return encode_batch([Record(offset, TS + offset, key, value)], producer_id=producer_id,
                        producer_epoch=0, is_transactional=True, is_control=True)


def mixed_segment() -> tuple[bytes, list[tuple[int, int, int]], list[int]]:
    """A segment with a plain batch, a committed and an aborted transaction interleaved, their
    markers, and a second (committed) transaction of the aborted producer: the bytes, the
    aborted ranges (as the partition answers them) and the offsets that must stay."""
    parts = [
        data(0, 3, PLAIN, txn=False),        # 0-2 kept
        data(3, 2, COMMITTED),               # 3-4 kept
        data(5, 3, ABORTED),                 # 5-7 aborted
        data(8, 2, PLAIN, txn=False),        # 8-9 kept (not transactional)
        data(10, 2, ABORTED),                # 10-11 aborted
        marker(12, COMMITTED, commit=True),  # 12 marker
        marker(13, ABORTED, commit=False),   # 13 marker (last offset of the aborted txn)
        data(14, 2, ABORTED),                # 14-15 kept: the producer's next txn commits
        marker(16, ABORTED, commit=True),    # 16 marker
        data(17, 1, PLAIN, txn=False),       # 17 kept
    ]
    return b"".join(parts), [(ABORTED, 5, 13)], [0, 1, 2, 3, 4, 8, 9, 14, 15, 17]


def test_aborted_records_and_markers_are_dropped_offsets_intact() -> None:
    segment, aborted, kept = mixed_segment()
    rows = batches_to_rows(segment)
    result = committed_rows(rows, aborted)
    assert result.rows.column("offset").to_pylist() == kept
    assert (result.aborted_records, result.markers) == (5, 3)
    assert not any(result.rows.column("is_control").to_pylist())
    values = result.rows.column("value").to_pylist()
    assert values[5] == b"7-8" and values[8] == b"9-15"
    # the kept rows re-encode to their original batches (base and last offsets, producer)
    rebuilt = batches_to_rows(b"".join(rows_to_batches(result.rows)))
    assert rebuilt.equals(result.rows)


def test_without_aborted_transactions_only_markers_go() -> None:
    segment, _, _ = mixed_segment()
    result = committed_rows(batches_to_rows(segment), [])
    assert result.rows.column("offset").to_pylist() == [
        o for o in range(18) if o not in (12, 13, 16)]
    assert (result.aborted_records, result.markers) == (0, 3)


def test_aborted_ranges_apply_per_producer_and_per_range() -> None:
    segment, _, _ = mixed_segment()
    rows = batches_to_rows(segment)
    # another producer's aborted range over the same offsets drops nothing of these producers
    assert committed_rows(rows, [(12345, 0, 17)]).aborted_records == 0
    # a range ending before the batch does not reach it; two ranges of one producer both count
    two = committed_rows(rows, [(ABORTED, 5, 7), (ABORTED, 14, 16)])
    assert [o for o in range(18) if o not in two.rows.column("offset").to_pylist()] == [
        5, 6, 7, 12, 13, 14, 15, 16]


def test_a_range_cut_mid_transaction_still_drops_its_records() -> None:
    segment, aborted, kept = mixed_segment()
    rows = batches_to_rows(segment, start_offset=6, end_offset=15)
    result = committed_rows(rows, aborted)
    assert result.rows.column("offset").to_pylist() == [o for o in kept if 6 <= o < 15]


def test_quarantined_rows_stay_even_with_transactional_attributes() -> None:
    segment, aborted, _ = mixed_segment()
    damaged = bytearray(segment)
    # flip a payload byte of the aborted batch at offsets 5-7: it fails its CRC
    position = len(data(0, 3, PLAIN, txn=False)) + len(data(3, 2, COMMITTED))
    damaged[position + 70] ^= 0xFF
    rows = segment_rows(bytes(damaged)).rows
    result = committed_rows(rows, aborted)
    quarantined = [r for r in result.rows.to_pylist() if r["decode_error"] is not None]
    assert [(r["offset"], r["batch_last_offset"]) for r in quarantined] == [(5, 7)]
    assert result.rows.column("offset").to_pylist() == [0, 1, 2, 3, 4, 5, 8, 9, 14, 15, 17]


def test_write_segment_file_writes_committed_rows_and_a_fully_aborted_range_none(
        tmp_path: Path) -> None:
    storage = Storage.from_url(str(tmp_path / "tier"))
    table = TieredTable(storage, "t")
    table.ensure_created()
    segment, aborted, kept = mixed_segment()
    path = filenames.log_file(tmp_path, 0)
    path.write_bytes(segment)
    written = write_segment_file(storage, "t", 0, path, 0, 18, aborted)
    assert written.pending is not None
    assert (written.aborted_records, written.markers) == (5, 3)
    assert table.commit(0, [written.pending], 17, expected_end=None)
    assert table.tiered_end(0) == 18
    offsets = pa.concat_tables([pa.Table.from_batches([b]) for b in table.read_rows(0, 0)])
    assert offsets.column("offset").to_pylist() == kept

    only_aborted = filenames.log_file(tmp_path, 18)
    only_aborted.write_bytes(data(18, 4, ABORTED) + marker(22, ABORTED, commit=False))
    written = write_segment_file(storage, "t", 0, only_aborted, 18, 23, [(ABORTED, 18, 22)])
    assert written.pending is None and written.aborted_records == 4
    assert table.commit(0, [], 22, expected_end=18)  # the offsets move on without a file
    assert table.tiered_end(0) == 23
    chunk = table.read_chunk(0, 16)
    assert chunk is not None and chunk.column("offset").to_pylist() == [17]

    # a partition's earliest offset stays at its first tiered offset when the records there
    # were left out (as compaction keeps it): a consumer there gets the next batch
    leading = filenames.log_file(tmp_path / "p1", 0)
    leading.parent.mkdir()
    leading.write_bytes(data(0, 2, ABORTED) + marker(2, ABORTED, commit=False)
                        + data(3, 2, PLAIN, txn=False))
    written = write_segment_file(storage, "t", 1, leading, 0, 5, [(ABORTED, 0, 2)])
    assert written.pending is not None and written.pending.first_offset == 0
    assert table.commit(1, [written.pending], 4, expected_end=None)
    table.files(1, refresh=True)
    assert table.start_offset(1) == 0
    chunk = table.read_chunk(1, 0)
    assert chunk is not None and chunk.column("offset").to_pylist() == [3, 4]


# ------------------------------------------------------------------ on a real partition


def open_leader(directory: Path, segment_bytes: int = 300) -> Partition:
    """A single-replica leader (by default, segments roll every few batches)."""
    partition = Partition("t", 0, directory, TopicConfig(segment_bytes=segment_bytes),
                          broker_id=1, replicas=(1,))
    partition.apply_state(PartitionState(leader=1, leader_epoch=0, isr=(1,), zk_version=0))
    return partition


NOW_MS = int(time.time() * 1000)  # a partition rolls segments whose first record is a week old


def plain(count: int, tag: str) -> bytes:
    return encode_batch([Record(i, NOW_MS + i, None, b"%s-%d" % (tag.encode(), i))
                         for i in range(count)])


class TxnProducer:
    def __init__(self, pid: int) -> None:
        self.pid, self.seq = pid, 0

    def batch(self, count: int) -> bytes:
        records = [Record(i, NOW_MS + i, None, b"%d-%d" % (self.pid, self.seq + i))
                   for i in range(count)]
        data = encode_batch(records, producer_id=self.pid, producer_epoch=0,
                            base_sequence=self.seq, is_transactional=True)
        self.seq += count
        return data


def test_segments_are_tiered_only_below_the_last_stable_offset(tmp_path: Path) -> None:
    partition = open_leader(tmp_path / "t-0")
    try:
        opened = TxnProducer(1)
        partition.append(plain(2, "first"))
        partition.append(opened.batch(2))  # offsets 2-3: an open transaction
        for _ in range(12):
            partition.append(plain(2, "later"))
        sealed = [s for s in partition.log.segment_infos() if not s.active]
        assert len(sealed) >= 3, "segments must roll for this test"
        assert partition.high_watermark == 28 and partition.last_stable_offset == 2
        assert _next_sealed(partition, 0) is None  # the first segment reaches past the LSO
        partition.write_txn_marker(1, 0, 0, commit=True)
        assert partition.last_stable_offset == partition.high_watermark
        first = _next_sealed(partition, 0)
        assert first is not None and first.base_offset == 0
    finally:
        partition.close()


def test_a_local_answer_after_the_tier_holds_no_aborted_records(tmp_path: Path) -> None:
    partition = open_leader(tmp_path / "t-0", segment_bytes=1 << 20)
    try:
        aborted, committed = TxnProducer(ABORTED), TxnProducer(COMMITTED)
        partition.append(aborted.batch(3))    # 0-2 aborted
        partition.append(committed.batch(2))  # 3-4 committed
        partition.write_txn_marker(ABORTED, 0, 0, commit=False)  # 5
        partition.write_txn_marker(COMMITTED, 0, 0, commit=True)  # 6
        partition.append(aborted.batch(1))    # 7: open, above the LSO
        assert partition.last_stable_offset == 7
        answer = committed_local_read(partition, 1 << 20, True)
        kept = [(h.base_offset, h.is_control) for h in iter_batches(answer)]
        assert kept == [(3, False), (5, True), (6, True)]
        # a chunk of nothing but aborted records is read past (its marker ends the run)
        assert [h.base_offset for h in iter_batches(committed_local_read(
            partition, 10, True))] == [3]
    finally:
        partition.close()


# ------------------------------------------------------------------ compaction and optimize


def _rewritten(storage: Storage, table: TieredTable, outcome: RewriteOutcome) -> pa.Table:
    return pads.dataset([storage.path_in_fs(f"{table.uri}/{w.path}") for w in outcome.written],
                        format="parquet").to_table().sort_by("offset")


def test_compaction_and_optimize_work_on_tables_with_gaps_and_clean_legacy_ones(
        tmp_path: Path) -> None:
    storage = Storage.from_url(str(tmp_path / "tier"))
    table = TieredTable(storage, "t")
    table.ensure_created()
    segment, aborted, kept = mixed_segment()
    # partition 0: tiered now (gaps where aborted records and markers were)
    path = filenames.log_file(tmp_path / "p0", 0)
    path.parent.mkdir()
    path.write_bytes(segment)
    written = write_segment_file(storage, "t", 0, path, 0, 18, aborted)
    assert written.pending is not None
    assert table.commit(0, [written.pending], 17, expected_end=None)
    # partition 1: a table tiered before: every record and marker of the same segment
    legacy_rows = batches_to_rows(segment)
    assert table.commit(1, [table.write_file(1, legacy_rows)], 17, expected_end=None)
    for partition in (0, 1):
        files = tuple(f.uri for f in table.files(partition, refresh=True))
        optimized = _rewritten(storage, table, rewrite_partition(
            storage, RewritePlan("t", partition, files)))
        expected = kept if partition == 0 else list(range(18))
        assert optimized.column("offset").to_pylist() == expected  # optimize keeps every row
        outcome = rewrite_partition(storage, RewritePlan("t", partition, files,
                                                         cleanable_end=18, now_ms=TS))
        compacted = _rewritten(storage, table, outcome)
        # keys k0..k2 (offset % 3): the last committed record of each key (an aborted record
        # never supersedes one: k1's last is 4, not the aborted 7 or 10), and nothing of the
        # aborted transaction or of any marker
        assert compacted.column("offset").to_pylist() == [4, 15, 17], partition
        assert not any(compacted.column("is_control").to_pylist())
    assert rewrite_partition(storage, RewritePlan("t", 1, files, cleanable_end=18,
                                                  now_ms=TS)).rows_in == 18


def test_legacy_cleanup_keeps_transactions_whose_marker_is_not_in_the_input(
        tmp_path: Path) -> None:
    parts = [data(0, 2, ABORTED), data(2, 2, COMMITTED), marker(4, COMMITTED, commit=True)]
    storage = Storage.from_url(str(tmp_path))
    table = TieredTable(storage, "t")
    table.ensure_created()
    pending = table.write_file(0, batches_to_rows(b"".join(parts)))
    gone = legacy_transactions(storage, [storage.path_in_fs(f"{table.uri}/{pending.path}")])
    assert gone.to_pylist() == [4]  # only the decided marker; the open transaction's rows stay
