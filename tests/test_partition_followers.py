"""In-process tests of a leader's view of its followers: KIP-320 divergence and ISR rejoin."""

from __future__ import annotations

from pathlib import Path

from loglake.broker.partition import Partition
from loglake.catalog.zookeeper import PartitionState
from loglake.config import TopicConfig
from loglake.segments.records import Record, encode_batch

T0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0 / 1000

    def __call__(self) -> float:
        return self.now


def batch(count: int) -> bytes:
    return encode_batch([Record(i, T0, None, b"v%d" % i) for i in range(count)])


def leader(tmp_path: Path, clock: Clock) -> Partition:
    partition = Partition("t", 0, tmp_path / "t-0", TopicConfig(), broker_id=1,
                          replicas=(1, 2, 3), clock=clock)
    partition.apply_state(PartitionState(leader=1, leader_epoch=0, isr=(1, 2, 3), zk_version=0))
    partition.append(batch(10))  # epoch 0: [0, 10)
    partition.apply_state(PartitionState(leader=1, leader_epoch=2, isr=(1, 2, 3), zk_version=1))
    partition.append(batch(5))  # epoch 2: [10, 15)
    return partition


def test_follower_divergence_by_last_fetched_epoch(tmp_path: Path) -> None:
    partition = leader(tmp_path, Clock())
    assert partition.follower_divergence(-1, 7) is None  # empty follower / old protocol
    assert partition.follower_divergence(0, 10) is None  # epoch 0 ends at 10 here too
    assert partition.follower_divergence(0, 12) == (0, 10)  # follower has epoch 0 past 10
    assert partition.follower_divergence(1, 12) == (0, 10)  # an epoch we never had
    assert partition.follower_divergence(2, 15) is None
    assert partition.follower_divergence(2, 16) == (2, 15)  # more of epoch 2 than we have
    assert partition.follower_divergence(3, 15) is None  # beyond ours: fencing handles that
    assert partition.last_fetched_epoch() == 2
    partition.close()


def test_follower_that_left_the_isr_must_fetch_again_to_rejoin(tmp_path: Path) -> None:
    clock = Clock()
    partition = leader(tmp_path, clock)
    for replica in (2, 3):
        partition.record_follower_fetch(replica, 15)
    assert partition.high_watermark == 15
    # replica 3 leaves the ISR (say a controlled shutdown) right after a caught-up fetch
    partition.apply_state(PartitionState(leader=1, leader_epoch=2, isr=(1, 2), zk_version=2))
    _lagging, caught_up = partition.isr_changes(lag_time_ms=30_000)
    assert caught_up == set(), "its last fetch predates leaving the ISR"
    clock.now += 0.1
    partition.record_follower_fetch(3, 15)
    assert partition.isr_changes(lag_time_ms=30_000)[1] == {3}
    partition.close()


def test_truncating_to_the_log_end_drops_an_empty_epoch(tmp_path: Path) -> None:
    partition = leader(tmp_path, Clock())
    # an ex-leader: epoch 5 was assigned at its log end, nothing was appended in it
    partition.apply_state(PartitionState(leader=1, leader_epoch=5, isr=(1, 2, 3), zk_version=3))
    assert partition.log.leader_epoch_cache.latest_epoch() == 5
    partition.apply_state(PartitionState(leader=2, leader_epoch=6, isr=(1, 2, 3), zk_version=4))
    partition.truncate_to(partition.log.log_end_offset)
    assert partition.last_fetched_epoch() == 2
    partition.close()
