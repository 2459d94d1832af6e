"""In-process tests of the replica manager: produce (acks, min.insync.replicas, the delayed
produce), fetch (the delayed fetch, follower progress), leadership and offline checks.

Real :class:`Partition` and :class:`PartitionLog` objects over a temporary directory; what is
absent is only what ZooKeeper would feed (partition states are applied directly, the lease is a
flag) and tiered storage (a tier reader for a broker without one).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kio.schema.errors import ErrorCode

from loglake.broker.partition import Partition
from loglake.broker.replica_manager import (
    FetchParams,
    FetchResult,
    PartitionFetch,
    ReplicaManager,
)
from loglake.broker.replication_quota import ReplicationQuotas
from loglake.catalog.zookeeper import PartitionState, TopicMetadata
from loglake.config import BrokerConfig, TopicConfig
from loglake.segments import checkpoint
from loglake.segments.records import Record, encode_batch

T = TypeVar("T")
T0 = 1_700_000_000_000
ME = 1
PRODUCE_VERSION = 9


def batch(count: int) -> bytes:
    return encode_batch([Record(i, T0, None, b"v%d" % i) for i in range(count)])


class NoTier:
    """The tier reader of a broker without tiered storage (what the Tierer answers then)."""

    storage = None

    def known_log_start(self, partition: Partition) -> int:
        return partition.log_start_offset

    async def log_start(self, partition: Partition) -> int:
        return partition.log_start_offset

    async def read(self, partition: Partition, offset: int, max_bytes: int,
                   min_one_batch: bool) -> bytes | None:
        return None

    async def offset_for_timestamp(self, partition: Partition,
                                   timestamp_ms: int) -> tuple[int, int] | None:
        return None


@dataclass
class Metadata:
    topics: dict[str, TopicMetadata] = field(default_factory=dict)


@dataclass
class Setup:
    manager: ReplicaManager
    partition: Partition
    lease: list[bool]

    def isr(self, *isr: int, epoch: int = 0) -> None:
        state = self.partition.state
        version = 0 if state is None else state.zk_version + 1
        self.partition.apply_state(PartitionState(leader=ME, leader_epoch=epoch, isr=isr,
                                                  zk_version=version))

    async def produce(self, count: int = 3, *, acks: int = 1, timeout: float = 5.0,
                      topic: str = "t", index: int = 0) -> Any:
        (result,) = await self.manager.append_records(
            [(topic, index, batch(count))], acks=acks, timeout=timeout,
            api_version=PRODUCE_VERSION)
        return result

    async def fetch(self, offset: int, *, replica: int = -1, max_wait: float = 0.0,
                    min_bytes: int = 1, epoch: int = -1, index: int = 0) -> FetchResult:
        (result,) = await self.manager.fetch_messages(
            FetchParams(replica_id=replica, max_wait_s=max_wait, min_bytes=min_bytes),
            [PartitionFetch("t", index, offset, 1 << 20, current_leader_epoch=epoch)])
        return result


def run(test: Callable[[Setup], Coroutine[Any, Any, T]], tmp_path: Path, *,
        replicas: tuple[int, ...] = (ME, 2, 3), isr: tuple[int, ...] | None = None,
        min_isr: int = 1) -> T:
    """Build a replica manager leading ``t-0`` (and knowing ``t-1``, hosted elsewhere) and
    run ``test`` on an event loop."""

    async def main() -> T:
        config = BrokerConfig(broker_id=ME, host="127.0.0.1", port=0, log_dir=tmp_path,
                              zookeeper_connect="127.0.0.1:1")
        lease = [True]
        metadata = Metadata({"t": TopicMetadata("t", {0: replicas, 1: (2, 3)}, {})})
        manager = ReplicaManager(config, metadata=metadata, lease_valid=lambda: lease[0],
                                 tier=NoTier(), quotas=ReplicationQuotas(ME),
                                 clock=time.time)
        partition = Partition("t", 0, tmp_path / "t-0",
                              TopicConfig(min_insync_replicas=min_isr), broker_id=ME,
                              replicas=replicas)
        manager.partitions[("t", 0)] = partition
        setup = Setup(manager, partition, lease)
        setup.isr(*(replicas if isr is None else isr))
        try:
            return await test(setup)
        finally:
            partition.close()

    return asyncio.run(main())


# ---------------------------------------------------------------------- produce
@pytest.mark.parametrize("acks", [0, 1])
def test_acks_0_and_1_answer_after_the_local_append(tmp_path: Path, acks: int) -> None:
    async def test(s: Setup) -> None:
        first = await s.produce(3, acks=acks)
        second = await s.produce(2, acks=acks)
        assert (first.error, first.base_offset) == (ErrorCode.none, 0)
        assert (second.error, second.base_offset) == (ErrorCode.none, 3)
        assert s.partition.log.log_end_offset == 5
        assert s.partition.high_watermark == 0, "followers have not fetched"

    run(test, tmp_path)


def test_invalid_acks_refused_and_nothing_appended(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        result = await s.produce(acks=2)
        assert result.error == ErrorCode.invalid_required_acks
        assert result.message is not None and "acks=2" in result.message
        assert result.base_offset == -1
        assert s.partition.log.log_end_offset == 0

    run(test, tmp_path)


def test_acks_all_below_min_insync_refused_before_the_append(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        result = await s.produce(acks=-1)
        assert result.error == ErrorCode.not_enough_replicas
        assert s.partition.log.log_end_offset == 0
        assert (await s.produce(acks=1)).error == ErrorCode.none, "acks=1 ignores the minimum"

    run(test, tmp_path, isr=(ME,), min_isr=2)


def test_acks_all_completes_when_follower_fetches_advance_the_high_watermark(
        tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        produce = asyncio.ensure_future(s.produce(4, acks=-1))
        await asyncio.sleep(0.05)
        assert not produce.done(), "waits for follower 2"
        fetched = await s.fetch(0, replica=2)
        assert fetched.error == ErrorCode.none and fetched.records
        assert fetched.high_watermark == 0
        assert not produce.done(), "follower 2 has not confirmed offset 3 yet"
        caught_up = await s.fetch(4, replica=2, max_wait=0.0)
        assert caught_up.high_watermark == 4
        result = await asyncio.wait_for(produce, 1.0)
        assert (result.error, result.base_offset) == (ErrorCode.none, 0)

    run(test, tmp_path, replicas=(ME, 2), min_isr=2)


def test_acks_all_times_out_with_request_timed_out(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        started = time.monotonic()
        result = await s.produce(acks=-1, timeout=0.2)
        assert time.monotonic() - started >= 0.19
        assert result.error == ErrorCode.request_timed_out
        assert s.partition.log.log_end_offset == 3, "appended, but not replicated"
        assert s.partition.high_watermark == 0

    run(test, tmp_path, replicas=(ME, 2))


def test_acks_all_fails_after_append_when_the_isr_shrinks_below_the_minimum(
        tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        produce = asyncio.ensure_future(s.produce(acks=-1))
        await asyncio.sleep(0.05)
        s.isr(ME)  # follower 2 dropped: the high watermark moves to our log end
        result = await asyncio.wait_for(produce, 1.0)
        assert result.error == ErrorCode.not_enough_replicas_after_append
        assert s.partition.high_watermark == 3

    run(test, tmp_path, replicas=(ME, 2), min_isr=2)


def test_acks_all_fails_with_not_leader_when_leadership_moves(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        produce = asyncio.ensure_future(s.produce(acks=-1))
        await asyncio.sleep(0.05)
        s.partition.apply_state(PartitionState(leader=2, leader_epoch=1, isr=(2,),
                                               zk_version=5))
        result = await asyncio.wait_for(produce, 1.0)
        assert result.error == ErrorCode.not_leader_or_follower

    run(test, tmp_path, replicas=(ME, 2))


def test_partitions_of_one_request_are_answered_independently_in_order(
        tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        results = await s.manager.append_records(
            [("t", 0, batch(2)), ("t", 1, batch(1)), ("nope", 0, batch(1)), ("t", 0, None)],
            acks=1, timeout=1.0, api_version=PRODUCE_VERSION)
        assert [(r.topic, r.index, r.error) for r in results] == [
            ("t", 0, ErrorCode.none),
            ("t", 1, ErrorCode.not_leader_or_follower),  # hosted elsewhere
            ("nope", 0, ErrorCode.unknown_topic_or_partition),
            ("t", 0, ErrorCode.invalid_request),  # no records
        ]

    run(test, tmp_path)


def test_no_lease_means_not_leader(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        s.lease[0] = False
        assert (await s.produce()).error == ErrorCode.not_leader_or_follower
        assert (await s.fetch(0)).error == ErrorCode.not_leader_or_follower
        assert s.partition.log.log_end_offset == 0
        s.lease[0] = True
        assert (await s.produce()).error == ErrorCode.none

    run(test, tmp_path)


def test_offline_partition_answers_kafka_storage_error(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        s.manager.offline_partitions[("t", 1)] = "OSError: damaged segment"
        assert (await s.produce(index=1)).error == ErrorCode.kafka_storage_error
        assert (await s.fetch(0, index=1)).error == ErrorCode.kafka_storage_error

    run(test, tmp_path)


def test_unknown_topic(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        assert (await s.produce(topic="nope")).error == ErrorCode.unknown_topic_or_partition
        assert (await s.produce(index=7)).error == ErrorCode.unknown_topic_or_partition

    run(test, tmp_path)


# ---------------------------------------------------------------------- fetch
def test_delayed_fetch_is_woken_by_an_append(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        started = time.monotonic()
        fetch = asyncio.ensure_future(s.fetch(0, max_wait=5.0))
        await asyncio.sleep(0.05)
        assert not fetch.done()
        await s.produce(3)  # a single-replica ISR: the high watermark moves at once
        result = await asyncio.wait_for(fetch, 2.0)
        assert time.monotonic() - started < 2.0
        assert result.error == ErrorCode.none and result.records
        assert (result.high_watermark, result.last_stable_offset) == (3, 3)

    run(test, tmp_path, replicas=(ME,))


def test_delayed_fetch_answers_empty_at_max_wait(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        await s.produce(3)  # above the high watermark: invisible to consumers
        started = time.monotonic()
        result = await s.fetch(0, max_wait=0.3)
        elapsed = time.monotonic() - started
        assert 0.29 <= elapsed < 2.0
        assert (result.error, result.records, result.high_watermark) == (ErrorCode.none, b"", 0)

    run(test, tmp_path)


def test_delayed_fetch_answers_at_once_when_leadership_moves(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        fetch = asyncio.ensure_future(s.fetch(0, max_wait=5.0))
        await asyncio.sleep(0.05)
        s.partition.apply_state(PartitionState(leader=2, leader_epoch=1, isr=(2,),
                                               zk_version=5))
        result = await asyncio.wait_for(fetch, 1.0)
        assert result.error == ErrorCode.not_leader_or_follower

    run(test, tmp_path)


def test_fetch_leader_epoch_checks(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        assert (await s.fetch(0, epoch=2)).error == ErrorCode.none
        assert (await s.fetch(0, epoch=1)).error == ErrorCode.fenced_leader_epoch
        assert (await s.fetch(0, epoch=3)).error == ErrorCode.unknown_leader_epoch

    async def start(s: Setup) -> None:
        s.isr(ME, epoch=2)
        await test(s)

    run(start, tmp_path, replicas=(ME,))


def test_fetch_out_of_range_carries_the_log_start_and_high_watermark(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        await s.produce(3)
        result = await s.fetch(10)
        assert result.error == ErrorCode.offset_out_of_range
        assert (result.log_start_offset, result.high_watermark) == (0, 0)

    run(test, tmp_path, replicas=(ME, 2))


def test_followers_read_to_the_log_end_consumers_to_the_high_watermark(
        tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        await s.produce(3)
        assert (await s.fetch(0)).records == b""
        follower = await s.fetch(0, replica=2)
        assert follower.records and follower.last_stable_offset == 0

    run(test, tmp_path, replicas=(ME, 2))


# ---------------------------------------------------------------------- offsets
def test_list_offsets_earliest_latest_and_epoch(tmp_path: Path) -> None:
    async def test(s: Setup) -> None:
        await s.produce(3)
        earliest = await s.manager.offset_for_timestamp("t", 0, -2)
        latest = await s.manager.offset_for_timestamp("t", 0, -1)
        assert (earliest.offset, latest.offset, latest.leader_epoch) == (0, 3, 0)
        by_time = await s.manager.offset_for_timestamp("t", 0, T0)
        assert (by_time.offset, by_time.timestamp) == (0, T0)
        assert s.manager.end_offset_for_epoch("t", 0, 0) == (0, 3)
        assert await s.manager.legacy_offsets("t", 0, -1, 5, replica_id=-1) == [3, 0]

    run(test, tmp_path, replicas=(ME,))


# ---------------------------------------------------------------------- flush scheduler
def test_flush_pass_fsyncs_rolled_segments_and_checkpoints_the_high_watermark_off_the_loop(
    tmp_path: Path,
) -> None:
    async def test(s: Setup) -> None:
        await s.produce(4)
        s.partition.log.roll()
        await s.produce(2)
        s.partition.log.roll()  # the second roll's flush covers offsets below 6
        loop_thread = threading.get_ident()
        threads: set[int] = set()
        real_fsync = os.fsync

        def recording_fsync(fd: int) -> None:
            threads.add(threading.get_ident())
            real_fsync(fd)

        os.fsync = recording_fsync
        try:
            await s.manager.flush_and_checkpoint()
        finally:
            os.fsync = real_fsync
        assert s.partition.log.recovery_point == 6
        assert threads and loop_thread not in threads, "fsyncs ran on the event loop"
        assert checkpoint.read_high_watermark(tmp_path / "t-0") == 6

    run(test, tmp_path, replicas=(ME,))
