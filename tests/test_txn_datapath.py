"""In-process tests of the transactional data path in the replica manager: transactional
produce (and what it refuses), read_committed fetches bounded by the last stable offset with
the aborted-transactions list, ListOffsets per isolation level, WriteTxnMarkers' acks=all
semantics and errors, DescribeProducers.

Real :class:`Partition` and :class:`PartitionLog` objects over a temporary directory; partition
states are applied directly and the lease is a flag (what ZooKeeper would feed), as in
tests/test_replica_manager.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from loglake.broker.partition import Partition
from loglake.broker.replica_manager import (
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchParams,
    FetchResult,
    MarkerResult,
    PartitionFetch,
    ProduceResult,
    ReplicaManager,
    TxnMarker,
    produce_error,
)
from loglake.broker.replication_quota import ReplicationQuotas
from loglake.catalog.zookeeper import PartitionState, TopicMetadata
from loglake.config import BrokerConfig, TopicConfig
from loglake.segments import validation
from loglake.segments.batch import iter_batches
from loglake.segments.records import Record, encode_batch, encode_end_txn_marker
from tests.test_replica_manager import NoTier

T = TypeVar("T")
T0 = int(time.time() * 1000)  # markers carry the append time: no time-based roll
ME = 1
PRODUCE_VERSION = 9
PID = 4000
TXN_ID = "txn-a"


def txn_batch(count: int, seq: int, *, pid: int = PID, epoch: int = 0,
              transactional: bool = True, ts: int = T0) -> bytes:
    return encode_batch([Record(i, ts + i, None, b"s%d" % (seq + i)) for i in range(count)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        is_transactional=transactional)


@dataclass
class Metadata:
    topics: dict[str, TopicMetadata] = field(default_factory=dict)


@dataclass
class Setup:
    manager: ReplicaManager
    partition: Partition

    def isr(self, *isr: int) -> None:
        state = self.partition.state
        version = 0 if state is None else state.zk_version + 1
        self.partition.apply_state(PartitionState(leader=ME, leader_epoch=0, isr=isr,
                                                  zk_version=version))

    async def produce(self, records: bytes, *, transactional_id: str | None = TXN_ID,
                      acks: int = 1) -> ProduceResult:
        (result,) = await self.manager.append_records(
            [("t", 0, records)], acks=acks, timeout=5.0, api_version=PRODUCE_VERSION,
            transactional_id=transactional_id)
        return result

    async def marker(self, commit: bool, *, pid: int = PID, epoch: int = 0,
                     coordinator_epoch: int = 0, timeout: float = 5.0,
                     partitions: tuple[tuple[str, int], ...] = (("t", 0),)
                     ) -> list[MarkerResult]:
        (results,) = await self.manager.write_txn_markers(
            [TxnMarker(pid, epoch, coordinator_epoch, commit, partitions)], timeout=timeout)
        return results

    async def fetch(self, offset: int, isolation: int, *, max_wait: float = 0.0,
                    min_bytes: int = 1, max_bytes: int = 1 << 20) -> FetchResult:
        (result,) = await self.manager.fetch_messages(
            FetchParams(max_wait_s=max_wait, min_bytes=min_bytes, isolation_level=isolation),
            [PartitionFetch("t", 0, offset, max_bytes)])
        return result

    async def latest(self, isolation: int) -> int:
        found = await self.manager.offset_for_timestamp("t", 0, LATEST_TIMESTAMP,
                                                        isolation_level=isolation)
        return found.offset


def offsets(records: bytes) -> list[int]:
    """The data offsets of the (non-control) batches in ``records``."""
    out: list[int] = []
    for header in iter_batches(records, verify_crc=False):
        if not header.is_control:
            out.extend(range(header.base_offset, header.next_offset))
    return out


def run(test: Callable[[Setup], Coroutine[Any, Any, T]], tmp_path: Path, *,
        replicas: tuple[int, ...] = (ME,), min_isr: int = 1) -> T:
    async def main() -> T:
        config = BrokerConfig(broker_id=ME, host="127.0.0.1", port=0, log_dir=tmp_path,
                              zookeeper_connect="127.0.0.1:1")
        metadata = Metadata({"t": TopicMetadata("t", {0: replicas, 1: (2, 3)}, {})})
        manager = ReplicaManager(config, metadata=metadata, lease_valid=lambda: True,
                                 tier=NoTier(), quotas=ReplicationQuotas(ME), clock=time.time)
        partition = Partition("t", 0, tmp_path / "t-0",
                              TopicConfig(min_insync_replicas=min_isr), broker_id=ME,
                              replicas=replicas)
        manager.partitions[("t", 0)] = partition
        setup = Setup(manager, partition)
        setup.isr(*replicas)
        try:
            return await test(setup)
        finally:
            partition.close()

    return asyncio.run(main())


# ------------------------------------------------------------------------------ produce


def test_transactional_produce_is_appended(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        first = await s.produce(txn_batch(3, 0))
        assert (first.error, first.base_offset) == (ErrorCode.none, 0)
        retry = await s.produce(txn_batch(3, 0))  # idempotence holds for transactions
        assert (retry.error, retry.base_offset) == (ErrorCode.none, 0)
        assert s.partition.log.log_end_offset == 3

    run(test, tmp_path)


def test_produce_refusals_of_the_transactional_path(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        # a transactional batch needs the request's transactional id (Kafka's KafkaApis)
        bare = await s.produce(txn_batch(1, 0), transactional_id=None)
        assert bare.error == ErrorCode.transactional_id_authorization_failed
        # only the broker writes control batches
        control = await s.produce(encode_end_txn_marker(
            producer_id=PID, producer_epoch=0, coordinator_epoch=0, commit=True,
            timestamp_ms=T0))
        assert control.error == ErrorCode.invalid_record
        assert (await s.produce(txn_batch(2, 0, epoch=1))).error == ErrorCode.none
        # a non-transactional write while the producer's transaction is open
        plain = await s.produce(txn_batch(1, 2, epoch=1, transactional=False))
        assert plain.error == ErrorCode.invalid_txn_state
        # an older epoch: INVALID_PRODUCER_EPOCH (never PRODUCER_FENCED on Produce)
        stale = await s.produce(txn_batch(1, 0, epoch=0))
        assert stale.error == ErrorCode.invalid_producer_epoch
        assert s.partition.log.log_end_offset == 2

    run(test, tmp_path)


def test_produce_answers_invalid_producer_epoch_for_a_fenced_producer() -> None:
    assert produce_error(ErrorCode.producer_fenced) == ErrorCode.invalid_producer_epoch
    assert produce_error(ErrorCode.invalid_txn_state) == ErrorCode.invalid_txn_state


def test_request_rule_2_needs_a_transactional_id() -> None:
    records = txn_batch(1, 0)
    validation.check_produce_records(records, PRODUCE_VERSION, transactional_id=TXN_ID)
    try:
        validation.check_produce_records(records, PRODUCE_VERSION)
    except Exception as exc:
        assert getattr(exc, "code", None) == ErrorCode.transactional_id_authorization_failed
    else:
        raise AssertionError("a transactional batch without a transactional id passed")


# -------------------------------------------------------------------------------- fetch


def test_read_committed_stops_at_the_open_transaction(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        await s.produce(txn_batch(2, 0, pid=7, transactional=False), transactional_id=None)
        await s.produce(txn_batch(3, 0))  # offsets 2-4, open
        await s.produce(txn_batch(2, 2, pid=7, transactional=False), transactional_id=None)
        assert (s.partition.high_watermark, s.partition.last_stable_offset) == (7, 2)
        committed = await s.fetch(0, READ_COMMITTED)
        assert offsets(committed.records) == [0, 1]
        assert (committed.high_watermark, committed.last_stable_offset) == (7, 2)
        assert committed.aborted_transactions == []
        uncommitted = await s.fetch(0, READ_UNCOMMITTED)
        assert offsets(uncommitted.records) == list(range(7))
        assert uncommitted.last_stable_offset == 2
        assert uncommitted.aborted_transactions is None
        # at the LSO: nothing, no error
        at_lso = await s.fetch(2, READ_COMMITTED)
        assert (at_lso.error, at_lso.records) == (ErrorCode.none, b"")
        assert (await s.latest(READ_COMMITTED), await s.latest(READ_UNCOMMITTED)) == (2, 7)

        assert await s.marker(commit=True) == [MarkerResult("t", 0)]  # marker at offset 7
        assert s.partition.last_stable_offset == s.partition.high_watermark == 8
        after = await s.fetch(2, READ_COMMITTED)
        assert offsets(after.records) == [2, 3, 4, 5, 6]
        assert after.aborted_transactions == []
        assert await s.latest(READ_COMMITTED) == 8

    run(test, tmp_path)


def test_read_committed_answers_the_aborted_transactions_of_the_returned_range(
        tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        await s.produce(txn_batch(2, 0))  # 0-1
        await s.marker(commit=False)  # 2: ABORT
        await s.produce(txn_batch(2, 0, pid=PID + 1))  # 3-4
        await s.marker(commit=True, pid=PID + 1)  # 5: COMMIT
        await s.produce(txn_batch(2, 2))  # 6-7
        await s.marker(commit=False)  # 8: ABORT
        assert s.partition.last_stable_offset == 9
        whole = await s.fetch(0, READ_COMMITTED)
        assert whole.aborted_transactions == [(PID, 0), (PID, 6)]
        assert offsets(whole.records) == [0, 1, 3, 4, 6, 7]
        tail = await s.fetch(3, READ_COMMITTED)
        assert tail.aborted_transactions == [(PID, 6)]
        # only what the returned batches overlap: one batch (3-4) of a small fetch
        one_batch = await s.fetch(3, READ_COMMITTED, max_bytes=1)
        assert offsets(one_batch.records) == [3, 4]
        assert one_batch.aborted_transactions == []
        assert (await s.fetch(0, READ_UNCOMMITTED)).aborted_transactions is None

    run(test, tmp_path)


def test_delayed_read_committed_fetch_wakes_when_a_marker_moves_the_lso(
        tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        await s.produce(txn_batch(3, 0))
        fetch = asyncio.ensure_future(s.fetch(0, READ_COMMITTED, max_wait=10.0))
        await asyncio.sleep(0.1)
        assert not fetch.done()  # the open transaction holds it
        started = time.monotonic()
        await s.marker(commit=True)
        result = await asyncio.wait_for(fetch, 5.0)
        assert time.monotonic() - started < 2.0
        assert offsets(result.records) == [0, 1, 2]
        assert result.last_stable_offset == 4

    run(test, tmp_path)


def test_list_offsets_timestamps_are_bounded_by_the_lso_for_read_committed(
        tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        await s.produce(txn_batch(2, 0, pid=7, transactional=False, ts=T0),
                        transactional_id=None)
        await s.produce(txn_batch(2, 0, ts=T0 + 100))  # 2-3, open
        manager = s.manager
        committed = await manager.offset_for_timestamp("t", 0, T0 + 50,
                                                       isolation_level=READ_COMMITTED)
        uncommitted = await manager.offset_for_timestamp("t", 0, T0 + 50,
                                                         isolation_level=READ_UNCOMMITTED)
        assert (committed.offset, uncommitted.offset) == (-1, 2)
        newest = await manager.offset_for_timestamp("t", 0, MAX_TIMESTAMP,
                                                    isolation_level=READ_COMMITTED)
        assert newest.offset == -1
        await s.marker(commit=True)
        found = await manager.offset_for_timestamp("t", 0, T0 + 50,
                                                   isolation_level=READ_COMMITTED)
        assert (found.offset, found.timestamp) == (2, T0 + 100)

    run(test, tmp_path)


# ------------------------------------------------------------------------------ markers


def test_marker_waits_for_the_isr_like_acks_all(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        await s.produce(txn_batch(2, 0), acks=1)
        timed_out = await s.marker(commit=True, timeout=0.2)
        assert timed_out[0].error == ErrorCode.request_timed_out  # follower 2 never fetched
        marker_end = s.partition.log.log_end_offset
        pending = asyncio.ensure_future(s.marker(commit=True, coordinator_epoch=0))
        await asyncio.sleep(0.05)
        assert not pending.done()
        s.partition.record_follower_fetch(2, s.partition.log.log_end_offset)
        (result,) = await asyncio.wait_for(pending, 5.0)
        assert result.error == ErrorCode.none
        assert s.partition.high_watermark > marker_end

    run(test, tmp_path, replicas=(ME, 2))


def test_marker_refused_below_min_insync_replicas(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        s.isr(ME)
        (result,) = await s.marker(commit=True)
        assert result.error == ErrorCode.not_enough_replicas
        assert s.partition.log.log_end_offset == 0

    run(test, tmp_path, replicas=(ME, 2), min_isr=2)


def test_marker_errors_per_partition(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        await s.produce(txn_batch(1, 0, epoch=3))
        results = await s.marker(commit=True, epoch=3, coordinator_epoch=5,
                                 partitions=(("t", 0), ("t", 1), ("nope", 0)))
        assert [r.error for r in results] == [ErrorCode.none, ErrorCode.not_leader_or_follower,
                                              ErrorCode.unknown_topic_or_partition]
        stale_epoch = await s.marker(commit=True, epoch=2, coordinator_epoch=5)
        assert stale_epoch[0].error == ErrorCode.invalid_producer_epoch
        stale_coordinator = await s.marker(commit=True, epoch=3, coordinator_epoch=4)
        assert stale_coordinator[0].error == ErrorCode.transaction_coordinator_fenced
        # a re-sent marker (coordinator failover) is appended and answered
        again = await s.marker(commit=True, epoch=3, coordinator_epoch=5)
        assert again[0].error == ErrorCode.none

    run(test, tmp_path)


# ---------------------------------------------------------------------- describe producers


def test_producer_summaries_name_the_open_transaction(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        await s.produce(txn_batch(2, 0, pid=7, transactional=False), transactional_id=None)
        await s.produce(txn_batch(3, 0, epoch=2))  # 2-4, open
        summaries = {p.producer_id: p for p in s.manager.producer_summaries("t", 0)}
        assert summaries[PID].producer_epoch == 2
        assert summaries[PID].last_sequence == 2
        assert summaries[PID].current_txn_start_offset == 2
        assert summaries[7].current_txn_start_offset == -1
        await s.marker(commit=False, epoch=2, coordinator_epoch=9)
        after = {p.producer_id: p for p in s.manager.producer_summaries("t", 0)}
        assert after[PID].current_txn_start_offset == -1
        assert after[PID].coordinator_epoch == 9
        try:
            s.manager.producer_summaries("t", 1)
        except Exception as exc:
            assert getattr(exc, "code", None) == ErrorCode.not_leader_or_follower
        else:
            raise AssertionError("a follower answered DescribeProducers")

    run(test, tmp_path)
