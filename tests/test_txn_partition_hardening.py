"""In-process tests of partition-side transaction rules an outside tester probes: several
batches of one producer in one Produce request, producers unknown or expired
(``producer.id.expiration.ms``), re-sent markers, an open transaction cut by DeleteRecords
(before and after a restart), and opens over damaged or missing ``.txnindex`` / ``.snapshot``
files (seeded, bounded) compared with a full replay of the surviving log. Real Partition and
PartitionLog over temporary directories, an injected clock."""

from __future__ import annotations

import dataclasses
import random
import shutil
from pathlib import Path

import pytest

from loglake.broker.partition import Partition
from loglake.broker.producer_state import ProducerStateTable
from loglake.catalog.zookeeper import PartitionState
from loglake.config import BrokerConfig, TopicConfig
from loglake.errors import InvalidTxnStateError, OutOfOrderSequenceError
from loglake.segments import filenames, producer_snapshot
from loglake.segments.batch import parse_batches
from loglake.segments.records import Record, encode_batch
from loglake.segments.txn_index import AbortedTxn

T0 = 1_700_000_000_000
SMALL_SEGMENTS = dataclasses.replace(TopicConfig(), segment_bytes=1_500)


def batch(count: int, *, pid: int = -1, epoch: int = 0, seq: int = -1,
          txn: bool = False, timestamp: int = T0) -> bytes:
    return encode_batch([Record(i, timestamp + i, None, b"v%d" % i) for i in range(count)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        is_transactional=txn)


class Clock:
    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


def open_partition(directory: Path, *, config: TopicConfig | None = None,
                   clock: Clock | None = None, leader: bool = True) -> Partition:
    partition = Partition("t", 0, directory, config or TopicConfig(), broker_id=1,
                          replicas=(1,), clock=clock or Clock())
    if leader:
        partition.apply_state(PartitionState(leader=1, leader_epoch=0, isr=(1,),
                                             zk_version=0))
    else:
        partition.apply_state(PartitionState(leader=9, leader_epoch=0, isr=(9,),
                                             zk_version=0))
    return partition


# ------------------------------------------------------------------ one request, many batches

def test_batches_of_one_request_are_checked_against_each_other(tmp_path: Path) -> None:
    partition = open_partition(tmp_path / "t-0")
    partition.append(batch(2, pid=5, seq=0))  # 0-1, last sequence 1
    # two consecutive batches in one request: the second follows the first
    two = batch(2, pid=5, seq=2) + batch(2, pid=5, seq=4)
    outcome = partition.append(two)
    assert (outcome.base_offset, outcome.last_offset) == (2, 5)
    assert partition.producer_summaries()[0].last_sequence == 5
    # the same batch twice in one request is not appended twice
    again = batch(1, pid=5, seq=6) + batch(1, pid=5, seq=6)
    with pytest.raises(OutOfOrderSequenceError):
        partition.append(again)
    # a gap between the batches of one request
    with pytest.raises(OutOfOrderSequenceError):
        partition.append(batch(1, pid=5, seq=6) + batch(1, pid=5, seq=8))
    # a transactional batch then a plain one of the same producer: INVALID_TXN_STATE
    with pytest.raises(InvalidTxnStateError):
        partition.append(batch(1, pid=7, seq=0, txn=True) + batch(1, pid=7, seq=1))
    assert partition.log.log_end_offset == 6  # nothing refused was appended
    assert partition.last_stable_offset == 6
    # two producers interleaved in one request
    mixed = (batch(1, pid=8, seq=0, txn=True) + batch(1, pid=5, seq=6)
             + batch(1, pid=8, seq=1, txn=True) + batch(1, pid=5, seq=7))
    partition.append(mixed)
    assert partition.producers.open_transactions() == [(6, 8)]
    assert {s.producer_id: s.last_sequence for s in partition.producer_summaries()} == {
        5: 7, 8: 1}
    partition.close()


def test_unknown_producer_starts_at_any_sequence() -> None:
    """Kafka since KIP-360: no state for a producer id (new, expired, deleted) accepts its
    batch at any sequence; a known producer's new epoch must start at 0."""
    table = ProducerStateTable()
    (header,) = parse_batches(batch(2, pid=3, seq=57))
    assert table.check_batch(header) is None
    table.record_batch(dataclasses.replace(header, base_offset=0))
    (bumped,) = parse_batches(batch(1, pid=3, epoch=1, seq=4))
    with pytest.raises(OutOfOrderSequenceError):
        table.check_batch(bumped)


# ------------------------------------------------------------------ markers

def test_a_resent_marker_adds_no_aborted_transaction(tmp_path: Path) -> None:
    partition = open_partition(tmp_path / "t-0")
    partition.append(batch(2, pid=5, seq=0, txn=True))  # 0-1
    partition.write_txn_marker(5, 0, 0, commit=False)  # 2
    partition.write_txn_marker(5, 0, 0, commit=False)  # 3: re-sent after a failover
    partition.write_txn_marker(9, 0, 0, commit=False)  # 4: a producer never seen here
    assert partition.aborted_transactions(0, 5) == [AbortedTxn(5, 0, 2, 3)]
    assert partition.last_stable_offset == 5
    summaries = {s.producer_id: s for s in partition.producer_summaries()}
    assert summaries[9].current_txn_start_offset == -1
    partition.close()
    reopened = open_partition(tmp_path / "t-0")  # replay after the snapshot: the same
    assert reopened.aborted_transactions(0, 5) == [AbortedTxn(5, 0, 2, 3)]
    reopened.close()


# ------------------------------------------------------------------ expiry

def test_idle_producers_expire_but_not_open_transactions(tmp_path: Path) -> None:
    clock = Clock()
    partition = open_partition(tmp_path / "t-0", clock=clock)
    day = 86_400_000
    partition.append(batch(2, pid=1, seq=0, timestamp=T0))  # idle
    partition.append(batch(2, pid=2, seq=0, txn=True, timestamp=T0))  # open transaction
    partition.append(batch(2, pid=3, seq=0, timestamp=T0 + day // 2))  # recent
    clock.ms = T0 + day + 10
    assert partition.expire_producers(day) == [1]
    assert [s.producer_id for s in partition.producer_summaries()] == [2, 3]
    # an expired producer resumes at its next sequence: accepted as a new one
    outcome = partition.append(batch(1, pid=1, seq=2, timestamp=clock.ms))
    assert outcome.base_offset == 6
    partition.write_txn_marker(2, 0, 0, commit=True)  # marker time: now
    clock.ms += day // 2
    assert partition.expire_producers(day) == [3]
    clock.ms += day
    assert partition.expire_producers(day) == [1, 2]
    assert partition.producer_summaries() == []
    partition.close()


BASE = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"}


def test_producer_expiration_settings_have_kafka_defaults() -> None:
    config = BrokerConfig.from_properties(BASE)
    assert config.producer_id_expiration_ms == 86_400_000
    assert config.producer_id_expiration_check_interval_ms == 600_000
    tuned = BrokerConfig.from_properties({**BASE, "producer.id.expiration.ms": "5",
                                          "producer.id.expiration.check.interval.ms": "7"})
    assert (tuned.producer_id_expiration_ms,
            tuned.producer_id_expiration_check_interval_ms) == (5, 7)


# ------------------------------------------------------------------ log start in a transaction

def _read_committed(partition: Partition, offset: int) -> tuple[list[int], int]:
    """What a read_committed consumer gets from ``offset``: offsets of the data records it
    keeps (aborted producers' batches and markers skipped, as Kafka's consumer does with the
    aborted list) and its next fetch offset."""
    end = partition.last_stable_offset
    data = partition.log.read(offset, 1 << 20, max_offset=end)
    aborted = partition.aborted_transactions(offset, end)
    kept: list[int] = []
    next_offset = offset
    for header in parse_batches(data, strict=False):
        next_offset = header.next_offset
        if header.is_control:
            continue
        if any(a.producer_id == header.producer_id and a.first_offset <= header.base_offset
               <= a.last_offset for a in aborted):
            continue
        kept.extend(range(max(offset, header.base_offset), header.next_offset))
    return kept, next_offset


@pytest.mark.parametrize("clean", [True, False])
def test_delete_records_into_an_open_transaction(tmp_path: Path, clean: bool) -> None:
    directory = tmp_path / "t-0"
    partition = open_partition(directory, config=SMALL_SEGMENTS)
    partition.append(batch(2, pid=5, seq=0, txn=True))  # 0-1: the open transaction
    seq = 0
    for _ in range(100):  # several segments of plain data after it
        partition.append(batch(2, pid=6, seq=seq))
        seq += 2
    assert len(partition.log.segments) > 3
    assert partition.last_stable_offset == 0
    target = partition.log.segments[2] + 1
    assert partition.advance_log_start(target)
    assert partition.log.log_start_offset == target
    # the LSO is never below the log start; the transaction is still open
    assert partition.last_stable_offset == target
    assert partition.producers.open_transactions() == [(0, 5)]
    if clean:
        partition.close()
    else:  # what a crash leaves (page cache included)
        partition.log.flush()
        shutil.copytree(directory, tmp_path / "crash")
        partition.close()
        shutil.rmtree(directory)
        shutil.move(tmp_path / "crash", directory)
        (directory / filenames.CLEAN_SHUTDOWN_MARKER).unlink(missing_ok=True)
    partition = open_partition(directory, config=SMALL_SEGMENTS)
    assert partition.producers.open_transactions() == [(0, 5)]
    assert partition.last_stable_offset == target
    partition.append(batch(1, pid=5, seq=2, txn=True))  # more of the open transaction
    marker = partition.write_txn_marker(5, 0, 0, commit=False)
    assert partition.last_stable_offset == partition.high_watermark
    assert partition.aborted_transactions(target, partition.high_watermark) == [
        AbortedTxn(5, 0, marker.base_offset, marker.base_offset + 1)]
    # a read_committed consumer from the log start reaches the end, skipping producer 5
    kept: list[int] = []
    offset = target
    for _ in range(100):
        if offset >= partition.high_watermark:
            break
        got, offset = _read_committed(partition, offset)
        kept += got
    assert offset == partition.high_watermark
    assert kept == list(range(target, marker.base_offset - 1))
    partition.close()


# ------------------------------------------------------------------ damaged index and snapshots

def _workload(partition: Partition, rng: random.Random, rounds: int) -> None:
    """Four transactional producers and plain batches, random commits and aborts, some
    re-sent markers; leaves some transactions open. Spans many small segments."""
    seqs = dict.fromkeys((1, 2, 3, 4), 0)
    open_txns: set[int] = set()
    for _ in range(rounds):
        pid = rng.choice([1, 2, 3, 4])
        action = rng.random()
        if action < 0.55:
            count = rng.randint(1, 3)
            partition.append(batch(count, pid=pid, seq=seqs[pid], txn=True))
            seqs[pid] += count
            open_txns.add(pid)
        elif action < 0.9 and pid in open_txns:
            partition.write_txn_marker(pid, 0, 0, commit=rng.random() < 0.5)
            open_txns.discard(pid)
        elif action < 0.95:
            partition.write_txn_marker(pid, 0, 0, commit=False)  # maybe a re-send
            open_txns.discard(pid)
        else:
            partition.append(batch(1))


def _txn_view(partition: Partition) -> tuple[object, ...]:
    end = partition.log.log_end_offset
    # what Fetch answers of the aborted list (a lowered last stable offset, which a bit flip
    # can make, only lengthens searches)
    aborted = [(a.producer_id, a.first_offset, a.last_offset)
               for a in partition.aborted_transactions(0, end)]
    return (partition.last_stable_offset, aborted,
            partition.producers.open_transactions(),
            [(s.producer_id, s.producer_epoch, s.last_sequence, s.coordinator_epoch,
              s.current_txn_start_offset) for s in partition.producer_summaries()])


def _full_replay(directory: Path, target: Path) -> tuple[object, ...]:
    """The state a replay of the surviving log alone gives: a copy without any transaction
    index or snapshot, opened."""
    shutil.copytree(directory, target)
    for path in list(target.iterdir()):
        if path.name.endswith((".txnindex", ".snapshot")):
            path.unlink()
    partition = open_partition(target, config=SMALL_SEGMENTS)
    view = _txn_view(partition)
    partition.close()
    return view


def _damage(directory: Path, rng: random.Random) -> list[str]:
    """Delete, truncate, or flip bytes in a few random .txnindex / .snapshot files. A
    ``.txnindex`` is never cut at an entry boundary nor emptied: nothing tells that from a
    segment with fewer aborted transactions (as in Kafka)."""
    done = []
    files = sorted(p for p in directory.iterdir()
                   if p.name.endswith((".txnindex", ".snapshot")))
    for path in rng.sample(files, min(len(files), rng.randint(1, 4))):
        data = path.read_bytes()
        how = rng.choice(["delete", "truncate", "flip", "empty"])
        if how == "delete" or not data:
            path.unlink()
        elif how == "truncate":
            cut = rng.randrange(len(data))
            if path.name.endswith(".txnindex") and cut % 34 == 0:
                cut += 1
            path.write_bytes(data[:cut])
        elif how == "flip":
            at = rng.randrange(len(data))
            path.write_bytes(data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))])
                             + data[at + 1:])
        elif path.name.endswith(".snapshot"):
            path.write_bytes(b"")
        else:
            path.unlink()
        done.append(f"{how} {path.name}")
    return done


@pytest.mark.parametrize("seed", range(16))
def test_damaged_txn_indexes_and_snapshots_reopen_as_a_full_replay(tmp_path: Path,
                                                                  seed: int) -> None:
    """After a crash (no clean close), random .txnindex / .snapshot damage: the reopened
    partition's LSO, aborted list, open transactions and producers equal a full replay of
    the log that survived (and the log itself is untouched by index damage)."""
    rng = random.Random(seed)
    directory = tmp_path / "t-0"
    partition = open_partition(directory, config=SMALL_SEGMENTS)
    _workload(partition, rng, 160)
    if seed % 2:
        partition.log.flush()
        partition.log.write_checkpoints()
    end = partition.log.log_end_offset
    crash = tmp_path / "crash" / "t-0"
    shutil.copytree(directory, crash)
    partition.close()
    (crash / filenames.CLEAN_SHUTDOWN_MARKER).unlink(missing_ok=True)
    assert producer_snapshot.offsets(crash), "rolls wrote snapshots"
    damage = _damage(crash, rng)
    if seed % 3 == 0:  # and a torn tail
        log_path = filenames.log_file(crash, max(int(p.name.split(".")[0]) for p in
                                                 crash.glob("*.log")))
        with log_path.open("r+b") as f:
            f.truncate(max(0, log_path.stat().st_size - rng.randint(1, 60)))
    expected = _full_replay(crash, tmp_path / "replay" / "t-0")
    reopened = open_partition(crash, config=SMALL_SEGMENTS)
    assert reopened.log.log_end_offset <= end
    assert _txn_view(reopened) == expected, damage
    reopened.close()
    # and once more, after that clean close (snapshots and indexes written by this open)
    again = open_partition(crash, config=SMALL_SEGMENTS)
    assert _txn_view(again) == expected, damage
    again.close()
