"""In-process tests of a partition's leader-side rules the replica manager builds on: the
acks=all decision (:func:`replication_done`), waiter wake-ups, KIP-320 epoch checks, the high
watermark over the ISR. Real Partition and PartitionLog over a temporary directory."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from loglake.broker.delayed_operations import replication_done
from loglake.broker.partition import Partition, Role
from loglake.catalog.zookeeper import PartitionState
from loglake.config import TopicConfig
from loglake.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasAfterAppendError,
    NotLeaderError,
    UnknownLeaderEpochError,
)
from loglake.segments.records import Record, encode_batch

T0 = 1_700_000_000_000


def batch(count: int) -> bytes:
    return encode_batch([Record(i, T0, None, b"v%d" % i) for i in range(count)])


def leader(tmp_path: Path, isr: tuple[int, ...] = (1, 2), epoch: int = 0) -> Partition:
    partition = Partition("t", 0, tmp_path / "t-0", TopicConfig(), broker_id=1,
                          replicas=(1, 2))
    partition.apply_state(PartitionState(leader=1, leader_epoch=epoch, isr=isr, zk_version=0))
    return partition


def test_high_watermark_is_the_minimum_log_end_over_the_isr(tmp_path: Path) -> None:
    partition = leader(tmp_path)
    partition.append(batch(5))
    assert partition.high_watermark == 0
    partition.record_follower_fetch(2, 3)
    assert partition.high_watermark == 3
    partition.record_follower_fetch(2, 5)
    assert partition.high_watermark == 5
    partition.close()


def test_replication_done_decides_acks_all(tmp_path: Path) -> None:
    partition = leader(tmp_path)
    outcome = partition.append(batch(3))
    assert not replication_done(partition, outcome.last_offset, min_isr=2)
    partition.record_follower_fetch(2, 3)
    assert replication_done(partition, outcome.last_offset, min_isr=2)
    second = partition.append(batch(1))
    partition.apply_state(PartitionState(leader=1, leader_epoch=0, isr=(1,), zk_version=1))
    with pytest.raises(NotEnoughReplicasAfterAppendError):
        replication_done(partition, second.last_offset, min_isr=2)
    assert replication_done(partition, second.last_offset, min_isr=1)
    third = partition.append(batch(1))
    partition.apply_state(PartitionState(leader=2, leader_epoch=1, isr=(2,), zk_version=2))
    with pytest.raises(NotLeaderError):
        replication_done(partition, third.last_offset + 1, min_isr=1)
    partition.close()


def test_replication_done_fails_once_closed(tmp_path: Path) -> None:
    partition = leader(tmp_path)
    outcome = partition.append(batch(1))
    partition.close()
    with pytest.raises(NotLeaderError):
        replication_done(partition, outcome.last_offset, min_isr=1)


def test_waiters_woken_by_append_hw_move_leadership_loss_and_close(tmp_path: Path) -> None:
    async def main() -> None:
        partition = leader(tmp_path)
        changes = [
            lambda: partition.append(batch(1)),
            lambda: partition.record_follower_fetch(2, 1),  # HW 0 -> 1
            lambda: partition.apply_state(PartitionState(leader=2, leader_epoch=1, isr=(2,),
                                                         zk_version=1)),
            partition.close,
        ]
        for change in changes:
            waiter = partition.waiter()
            assert not waiter.done()
            change()
            assert waiter.done()
        assert partition.role is Role.FOLLOWER and partition.closed

    asyncio.run(main())


def test_check_leader_epoch(tmp_path: Path) -> None:
    partition = leader(tmp_path, epoch=3)
    partition.check_leader_epoch(-1)
    partition.check_leader_epoch(3)
    with pytest.raises(FencedLeaderEpochError):
        partition.check_leader_epoch(2)
    with pytest.raises(UnknownLeaderEpochError):
        partition.check_leader_epoch(4)
    partition.close()
