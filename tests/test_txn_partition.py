"""In-process tests of a partition's transaction state: producer-table rules (open, close,
fencing), the last stable offset across producers, markers, the aborted-transactions list,
follower replay, truncation, and restarts (clean and after a torn tail). Real Partition and
PartitionLog over temporary directories."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from loglake.broker.partition import Partition
from loglake.broker.producer_state import ProducerStateTable, ProducerSummary
from loglake.catalog.zookeeper import PartitionState
from loglake.config import TopicConfig
from loglake.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    NotLeaderError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from loglake.segments import filenames
from loglake.segments.batch import parse_batches
from loglake.segments.records import (
    Record,
    decode_end_txn_marker,
    encode_batch,
    encode_end_txn_marker,
)
from loglake.segments.txn_index import AbortedTxn

T0 = 1_700_000_000_000


def batch(count: int, *, pid: int = -1, epoch: int = 0, seq: int = -1,
          txn: bool = False) -> bytes:
    return encode_batch([Record(i, T0 + i, None, b"v%d" % i) for i in range(count)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        is_transactional=txn)


def open_partition(directory: Path, *, leader: bool = True, broker_id: int = 1,
                   config: TopicConfig | None = None) -> Partition:
    partition = Partition("t", 0, directory, config or TopicConfig(), broker_id=broker_id,
                          replicas=(1,))
    if leader:
        partition.apply_state(PartitionState(leader=broker_id, leader_epoch=0,
                                             isr=(broker_id,), zk_version=0))
    else:
        partition.apply_state(PartitionState(leader=99, leader_epoch=0, isr=(99,),
                                             zk_version=0))
    return partition


class Producer:
    """A transactional producer's batches with consecutive sequences."""

    def __init__(self, pid: int, epoch: int = 0) -> None:
        self.pid, self.epoch, self.seq = pid, epoch, 0

    def batch(self, count: int, *, txn: bool = True) -> bytes:
        data = batch(count, pid=self.pid, epoch=self.epoch, seq=self.seq, txn=txn)
        self.seq += count
        return data


# ------------------------------------------------------------------ control batches

def test_end_txn_marker_round_trip() -> None:
    data = encode_end_txn_marker(producer_id=7, producer_epoch=3, coordinator_epoch=11,
                                 commit=False, timestamp_ms=T0)
    (header,) = parse_batches(data, strict=False)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, -1)
    assert header.record_count == 1 and header.magic == 2
    marker = decode_end_txn_marker(data, header)
    assert marker is not None and not marker.commit and marker.coordinator_epoch == 11
    commit = encode_end_txn_marker(producer_id=7, producer_epoch=3, coordinator_epoch=0,
                                   commit=True, timestamp_ms=T0)
    marker = decode_end_txn_marker(commit, parse_batches(commit, strict=False)[0])
    assert marker is not None and marker.commit


# ------------------------------------------------------------------ producer table rules

def test_table_opens_and_closes_transactions_and_fences() -> None:
    table = ProducerStateTable()
    (first,) = parse_batches(batch(2, pid=5, seq=0, txn=True))
    assert table.check_batch(first) is None
    table.record_batch(dataclasses.replace(first, base_offset=10))
    assert table.first_unstable_offset(100) == 10
    (plain,) = parse_batches(batch(1, pid=5, seq=2))
    with pytest.raises(InvalidTxnStateError):
        table.check_batch(plain)
    (control,) = parse_batches(
        encode_end_txn_marker(producer_id=5, producer_epoch=0, coordinator_epoch=0,
                              commit=True, timestamp_ms=T0), strict=False)
    with pytest.raises(InvalidRecordError):
        table.check_batch(control)
    with pytest.raises(InvalidRecordError):  # transactional without a producer id
        table.check_batch(parse_batches(batch(1, txn=True))[0])
    table.check_marker(5, 0, 3)
    done = table.record_marker(5, 0, 3, commit=False, offset=20, timestamp=T0)
    assert (done.first_offset, done.last_offset, done.aborted, done.last_stable_offset) == (
        10, 20, True, 21)
    assert table.first_unstable_offset(20) == 10  # marker not yet below the HW
    assert table.first_unstable_offset(21) is None
    with pytest.raises(TransactionCoordinatorFencedError):
        table.check_marker(5, 0, 2)
    table.record_marker(5, 1, 3, commit=True, offset=21, timestamp=T0)  # newer epoch: fine
    with pytest.raises(InvalidProducerEpochError):
        table.check_marker(5, 0, 3)
    (old_epoch,) = parse_batches(batch(1, pid=5, epoch=0, seq=0, txn=True))
    with pytest.raises(InvalidProducerEpochError):
        table.check_batch(old_epoch)
    (wrong_seq,) = parse_batches(batch(1, pid=5, epoch=1, seq=4, txn=True))
    with pytest.raises(OutOfOrderSequenceError):
        table.check_batch(wrong_seq)
    (summary,) = table.summaries()
    assert summary == ProducerSummary(5, 1, -1, T0, 3, -1)


def test_lso_is_the_earliest_open_transaction_of_any_producer() -> None:
    table = ProducerStateTable()
    for pid, offset in ((1, 5), (2, 8), (3, 12)):
        (header,) = parse_batches(batch(1, pid=pid, seq=0, txn=True))
        table.record_batch(dataclasses.replace(header, base_offset=offset))
    assert table.first_unstable_offset(100) == 5
    done = table.record_marker(2, 0, 0, commit=False, offset=20, timestamp=T0)
    assert done.last_stable_offset == 5  # producer 1 still open
    table.record_marker(1, 0, 0, commit=True, offset=21, timestamp=T0)
    assert table.first_unstable_offset(100) == 12
    assert table.open_transactions() == [(12, 3)]


# ------------------------------------------------------------------ partition


def test_partition_lso_markers_and_aborted_list(tmp_path: Path) -> None:
    partition = open_partition(tmp_path / "t-0")
    a, b, c = Producer(100), Producer(200), Producer(300)
    partition.append(batch(2))  # 0-1 plain
    assert partition.last_stable_offset == 2
    partition.append(a.batch(3))  # 2-4 txn a
    partition.append(b.batch(2))  # 5-6 txn b
    partition.append(c.batch(1))  # 7 txn c
    assert partition.high_watermark == 8  # single-replica ISR
    assert partition.last_stable_offset == 2
    with pytest.raises(InvalidTxnStateError):
        partition.append(a.batch(1, txn=False))
    a.seq -= 1
    abort_b = partition.write_txn_marker(200, 0, 0, commit=False)  # 8
    assert abort_b.base_offset == abort_b.last_offset == 8
    assert partition.last_stable_offset == 2
    partition.write_txn_marker(100, 0, 0, commit=True)  # 9
    assert partition.last_stable_offset == 7  # c still open
    partition.append(a.batch(2))  # 10-11 a's second transaction
    partition.write_txn_marker(300, 0, 0, commit=False)  # 12
    assert partition.last_stable_offset == 10
    partition.write_txn_marker(100, 0, 0, commit=False)  # 13
    assert partition.last_stable_offset == partition.high_watermark == 14
    assert partition.aborted_transactions(0, 14) == [
        AbortedTxn(200, 5, 8, 2), AbortedTxn(300, 7, 12, 10), AbortedTxn(100, 10, 13, 14)]
    assert partition.aborted_transactions(9, 10) == [AbortedTxn(300, 7, 12, 10)]
    assert partition.aborted_transactions(0, 5) == []
    assert partition.aborted_transactions(13, 14) == [AbortedTxn(100, 10, 13, 14)]
    summaries = {s.producer_id: s for s in partition.producer_summaries()}
    assert summaries[100].current_txn_start_offset == -1
    assert summaries[100].last_sequence == 4
    partition.append(c.batch(1))  # 14: c opens again
    assert {s.producer_id: s.current_txn_start_offset
            for s in partition.producer_summaries()}[300] == 14
    with pytest.raises(InvalidRecordError):
        partition.append(encode_end_txn_marker(producer_id=300, producer_epoch=0,
                                               coordinator_epoch=0, commit=True,
                                               timestamp_ms=T0))
    with pytest.raises(TransactionCoordinatorFencedError):
        partition.write_txn_marker(300, 0, -1, commit=True)
    with pytest.raises(InvalidProducerEpochError):
        partition.write_txn_marker(300, -1, 0, commit=True)
    partition.close()


def test_lso_held_by_the_high_watermark_and_by_unreplicated_markers(tmp_path: Path) -> None:
    partition = Partition("t", 0, tmp_path / "t-0", TopicConfig(), broker_id=1, replicas=(1, 2))
    partition.apply_state(PartitionState(leader=1, leader_epoch=0, isr=(1, 2), zk_version=0))
    a = Producer(1)
    partition.append(batch(3))
    partition.append(a.batch(2))  # 3-4
    partition.record_follower_fetch(2, 5)
    assert (partition.high_watermark, partition.last_stable_offset) == (5, 3)
    partition.write_txn_marker(1, 0, 0, commit=True)  # 5, not yet replicated
    assert partition.last_stable_offset == 3
    partition.record_follower_fetch(2, 6)
    assert partition.last_stable_offset == 6
    partition.close()


def test_write_txn_marker_needs_leadership(tmp_path: Path) -> None:
    partition = open_partition(tmp_path / "t-0", leader=False)
    with pytest.raises(NotLeaderError):
        partition.write_txn_marker(1, 0, 0, commit=True)
    partition.close()


# ------------------------------------------------------------------ followers, recovery

SMALL_SEGMENTS = dataclasses.replace(TopicConfig(), segment_bytes=1_500)


def _workload(partition: Partition, rounds: int) -> None:
    """Producers 1 (commits), 2 (aborts), 3 (long transactions, some aborted, one left
    open), plain batches in between; spans several segments with SMALL_SEGMENTS."""
    producers = {pid: Producer(pid) for pid in (1, 2, 3)}
    for i in range(rounds):
        for pid, producer in producers.items():
            if pid != 3 or i % 4 != 3:
                partition.append(producer.batch(2))
        partition.append(batch(1))
        partition.write_txn_marker(1, 0, 0, commit=True)
        partition.write_txn_marker(2, 0, 0, commit=False)
        if i % 4 == 2:
            partition.write_txn_marker(3, 0, 0, commit=i % 8 == 2)


def _state(partition: Partition) -> tuple[object, ...]:
    return (partition.last_stable_offset,
            partition.aborted_transactions(0, partition.log.log_end_offset),
            partition.producer_summaries(), partition.producers.open_transactions())


def test_follower_replay_gives_the_same_lso_and_aborted_list(tmp_path: Path) -> None:
    leader = open_partition(tmp_path / "leader" / "t-0", config=SMALL_SEGMENTS)
    follower = open_partition(tmp_path / "follower" / "t-0", leader=False, broker_id=2,
                              config=SMALL_SEGMENTS)
    _workload(leader, 10)
    offset = 0
    for _ in range(1000):  # bounded: a few hundred bytes per call
        chunk = leader.read(offset, 700, min_one_batch=True,
                            end=leader.log.log_end_offset)
        if not chunk:
            break
        follower.append_as_follower(chunk, leader.high_watermark)
        offset = follower.log.log_end_offset
    assert follower.log.log_end_offset == leader.log.log_end_offset
    assert follower.high_watermark == leader.high_watermark
    assert _state(follower) == _state(leader)
    assert leader.producers.open_transactions()  # producer 3 is still open
    assert leader.last_stable_offset < leader.high_watermark
    # the follower becomes leader: it knows the open transaction and may close it
    follower.apply_state(PartitionState(leader=2, leader_epoch=1, isr=(2,), zk_version=1))
    follower.write_txn_marker(3, 0, 0, commit=False)
    assert follower.last_stable_offset == follower.high_watermark
    leader.close()
    follower.close()


def _crash_copy(partition: Partition, target: Path) -> Path:
    """What a broker crash leaves: the files as they are now (page cache included), without
    a clean close."""
    shutil.copytree(partition.log.directory, target)
    return target


def test_restart_after_a_torn_tail_rebuilds_lso_and_aborted_list(tmp_path: Path) -> None:
    partition = open_partition(tmp_path / "t-0", config=SMALL_SEGMENTS)
    _workload(partition, 12)
    partition.log.flush(partition.log.segments[-1])  # sealed segments durable
    partition.log.write_checkpoints()
    before = _state(partition)
    lso_before = partition.last_stable_offset
    active = partition.log.segments[-1]
    assert any(e.last_offset >= active for e in partition.aborted_transactions(0, 10**6))

    crashed = _crash_copy(partition, tmp_path / "crash1" / "t-0")
    filenames.txn_index_file(crashed, active).unlink()  # the crash lost the active index
    with filenames.log_file(crashed, active).open("ab") as f:
        f.write(b"\x00" * 30)  # a torn write after the last batch
    restarted = open_partition(crashed, config=SMALL_SEGMENTS)
    assert restarted.log.first_recovered_offset == active
    assert _state(restarted) == before
    assert filenames.txn_index_file(crashed, active).exists()  # rebuilt
    restarted.close()

    # a torn write cuts the last ABORT marker: its transaction is open again after restart
    producer = Producer(50)
    first = partition.append(producer.batch(2)).base_offset
    marker = partition.write_txn_marker(50, 0, 0, commit=False)
    assert partition.aborted_transactions(marker.base_offset, marker.base_offset + 1)
    crashed = _crash_copy(partition, tmp_path / "crash2" / "t-0")
    log_path = filenames.log_file(crashed, partition.log.segments[-1])
    with log_path.open("r+b") as f:
        f.truncate(log_path.stat().st_size - 20)
    restarted = open_partition(crashed, config=SMALL_SEGMENTS)
    assert restarted.log.log_end_offset == marker.base_offset
    assert (first, 50) in restarted.producers.open_transactions()
    assert restarted.last_stable_offset == min(first, lso_before)
    assert restarted.aborted_transactions(0, 10**6) == before[1]
    restarted.close()
    partition.close()


_KILLED_WRITER = """
import json, sys, time, dataclasses
from pathlib import Path
from loglake.broker.partition import Partition
from loglake.catalog.zookeeper import PartitionState
from loglake.config import TopicConfig
from loglake.segments.records import Record, encode_batch

config = dataclasses.replace(TopicConfig(), segment_bytes=1_500)
p = Partition("t", 0, Path(sys.argv[1]), config, broker_id=1, replicas=(1,))
p.apply_state(PartitionState(leader=1, leader_epoch=0, isr=(1,), zk_version=0))
seqs = {1: 0, 2: 0, 3: 0}
for i in range(42):  # producer 3 ends with an open transaction
    for pid in (1, 2, 3):
        if pid != 3 or i % 4 != 3:
            p.append(encode_batch([Record(j, 1, None, b"v") for j in range(2)],
                                  producer_id=pid, producer_epoch=0, base_sequence=seqs[pid],
                                  is_transactional=True))
            seqs[pid] += 2
    p.write_txn_marker(1, 0, 0, commit=True)
    p.write_txn_marker(2, 0, 0, commit=False)
    if i % 4 == 2:
        p.write_txn_marker(3, 0, 0, commit=False)
    if i == 20:  # what the flush pass does meanwhile
        p.log.flush()
        p.log.write_checkpoints()
end = p.log.log_end_offset
print(json.dumps([p.last_stable_offset, end,
                  [list(dataclasses.astuple(a)) for a in p.aborted_transactions(0, end)]]),
      flush=True)
time.sleep(60)
"""


def test_sigkilled_leader_answers_the_same_lso_and_aborted_list(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    directory = tmp_path / "t-0"
    process = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(directory)],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # the writer is done and sleeps
    finally:
        process.kill()  # SIGKILL: no close, no clean-shutdown marker, no final snapshot
        process.wait(timeout=30)
    lso, end, aborted = json.loads(line)
    assert not (directory / filenames.CLEAN_SHUTDOWN_MARKER).exists()
    restarted = open_partition(directory, config=SMALL_SEGMENTS)
    assert restarted.log.log_end_offset == end
    assert restarted.last_stable_offset == lso < end
    assert restarted.aborted_transactions(0, end) == [AbortedTxn(*a) for a in aborted]
    restarted.close()
