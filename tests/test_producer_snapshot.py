"""Producer-state snapshots (``<offset>.snapshot``): format round trip, damaged snapshots
ignored, which ones are kept, and that a partition opens from the newest one and reaches the
same state as a full replay of its log. Real Partition/PartitionLog over temporary dirs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from loglake.broker.partition import Partition
from loglake.broker.producer_state import ProducerStateTable
from loglake.catalog.zookeeper import PartitionState
from loglake.config import TopicConfig
from loglake.segments import filenames, producer_snapshot
from loglake.segments.producer_snapshot import SnapshotBatch, SnapshotProducer
from loglake.segments.records import Record, encode_batch

T0 = 1_700_000_000_000
SMALL_SEGMENTS = dataclasses.replace(TopicConfig(), segment_bytes=2_000)

PRODUCERS = [
    SnapshotProducer(7, 2, 5, T0, 40, (SnapshotBatch(0, 3, 30, 33), SnapshotBatch(4, 4, 40, 40))),
    SnapshotProducer(9, 0, -1, -1, -1, ()),
]


def test_round_trip_and_damage(tmp_path: Path) -> None:
    path = producer_snapshot.write(tmp_path, 42, PRODUCERS)
    assert path.name == "00000000000000000042.snapshot"
    assert producer_snapshot.read(path) == PRODUCERS
    data = path.read_bytes()
    for damaged in (data[:-1], data[:3], data[:20] + bytes([data[20] ^ 1]) + data[21:],
                    b"\x00\x02" + data[2:], b""):
        path.write_bytes(damaged)
        assert producer_snapshot.read(path) is None
    assert producer_snapshot.read(tmp_path / "missing.snapshot") is None


def test_load_newest_skips_damaged_and_newer(tmp_path: Path) -> None:
    for offset in (10, 20, 30):
        producer_snapshot.write(tmp_path, offset, PRODUCERS[offset // 10 - 1:])
    filenames.snapshot_file(tmp_path, 20).write_bytes(b"garbage")
    loaded = producer_snapshot.load_newest(tmp_path, 25)
    assert loaded == (10, PRODUCERS)
    assert producer_snapshot.offsets(tmp_path) == [10, 30]  # the damaged one is gone
    assert producer_snapshot.load_newest(tmp_path, 9) is None
    producer_snapshot.delete_above(tmp_path, 10)
    assert producer_snapshot.offsets(tmp_path) == [10]


def test_retention_keeps_two_newest_and_one_at_the_active_base(tmp_path: Path) -> None:
    for offset in (5, 10, 20, 30, 40):
        producer_snapshot.write(tmp_path, offset, [])
    producer_snapshot.retain_newest(tmp_path, 2, also_at_or_below=12)
    assert producer_snapshot.offsets(tmp_path) == [10, 30, 40]
    producer_snapshot.retain_newest(tmp_path, 2)
    assert producer_snapshot.offsets(tmp_path) == [30, 40]


def test_table_round_trips_through_a_snapshot() -> None:
    table = ProducerStateTable.from_snapshot(PRODUCERS)
    assert table.to_snapshot() == PRODUCERS
    assert table.first_unstable_offset(1000) == 40
    assert table.open_transactions() == [(40, 7)]


# ------------------------------------------------------------------ partitions


def _open(directory: Path) -> Partition:
    partition = Partition("t", 0, directory, SMALL_SEGMENTS, broker_id=1, replicas=(1,))
    partition.apply_state(PartitionState(leader=1, leader_epoch=0, isr=(1,), zk_version=0))
    return partition


def _workload(partition: Partition, rounds: int) -> None:
    """Three transactional producers (commit, abort, left open at the end), one idempotent
    and plain batches, over several segments."""
    seqs = {1: 0, 2: 0, 3: 0, 4: 0}
    for i in range(rounds):
        for pid in (1, 2, 3, 4):
            partition.append(encode_batch(
                [Record(j, T0 + i, b"k", b"v" * 50) for j in range(2)], producer_id=pid,
                producer_epoch=0, base_sequence=seqs[pid], is_transactional=pid != 4))
            seqs[pid] += 2
        partition.append(encode_batch([Record(0, T0, None, b"plain")]))
        partition.write_txn_marker(1, 0, 0, commit=True)
        partition.write_txn_marker(2, 0, 0, commit=False)
        if i % 3 == 2:
            partition.write_txn_marker(3, 0, 0, commit=i % 2 == 0)


def _state(partition: Partition) -> tuple[object, ...]:
    end = partition.log.log_end_offset
    return (partition.last_stable_offset, partition.aborted_transactions(0, end),
            partition.producer_summaries(), partition.producers.open_transactions(),
            partition.producers.to_snapshot())


def test_open_uses_the_snapshot_and_matches_a_full_replay(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    partition = _open(directory)
    _workload(partition, 20)
    assert len(partition.log.segments) > 3
    assert producer_snapshot.offsets(directory)  # written at rolls
    before = _state(partition)
    end = partition.log.log_end_offset
    partition.close()
    assert producer_snapshot.offsets(directory)[-1] == end  # written at clean close
    assert len(producer_snapshot.offsets(directory)) <= 3

    reopened = _open(directory)
    assert _state(reopened) == before
    reopened.close()

    # proof that open reads the snapshot: a producer only the snapshot knows appears
    fake = SnapshotProducer(555, 1, 3, T0, -1, ())
    producer_snapshot.write(directory, end, [*reopened.producers.to_snapshot(), fake])
    with_fake = _open(directory)
    assert 555 in {s.producer_id for s in with_fake.producer_summaries()}
    with_fake.close()

    # a damaged newest snapshot is ignored: an older one plus a replay gives the same state
    filenames.snapshot_file(directory, end).write_bytes(b"\x00\x01garbage")
    fallback = _open(directory)
    assert _state(fallback) == before
    fallback.close()

    # no snapshot at all: the full replay reaches the same state
    for offset in producer_snapshot.offsets(directory):
        filenames.snapshot_file(directory, offset).unlink()
    full = _open(directory)
    assert _state(full) == before
    full.close()


def test_truncation_deletes_newer_snapshots_and_reopens_transactions(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    partition = _open(directory)
    _workload(partition, 12)
    # cut just before the last ABORT marker: its transaction is open again
    last_abort = partition.aborted_transactions(0, partition.log.log_end_offset)[-1]
    partition.truncate_to(last_abort.last_offset)
    assert all(o <= partition.log.log_end_offset for o in producer_snapshot.offsets(directory))
    assert (last_abort.first_offset, last_abort.producer_id) in (
        partition.producers.open_transactions())
    assert partition.last_stable_offset <= last_abort.first_offset
    assert last_abort not in partition.aborted_transactions(0, last_abort.last_offset + 1)
    state = _state(partition)
    partition.close()
    for offset in producer_snapshot.offsets(directory):
        filenames.snapshot_file(directory, offset).unlink()
    full = _open(directory)
    assert _state(full) == state
    full.close()
