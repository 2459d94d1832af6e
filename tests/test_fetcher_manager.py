"""In-process tests of the replica fetcher manager (broker/fetcher_manager.py): a followed
partition is in exactly its leader's fetcher, in none once this broker leads it or it is
removed, and shutdown stops every fetcher. Real Partition and PartitionLog over a temporary
directory; no leader is reachable (the metadata cache knows no live broker), so the fetchers'
tasks only wait."""

from __future__ import annotations

import asyncio
from pathlib import Path

from loglake.broker.fetcher_manager import ReplicaFetcherManager
from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.partition import Partition
from loglake.broker.replication_quota import ReplicationQuotas
from loglake.catalog.zookeeper import PartitionState
from loglake.config import TopicConfig

ME = 1


def _partition(tmp_path: Path, index: int) -> Partition:
    return Partition("t", index, tmp_path / f"t-{index}", TopicConfig(), broker_id=ME,
                     replicas=(1, 2, 3))


def _apply(manager: ReplicaFetcherManager, partition: Partition, leader: int, epoch: int,
           version: int) -> None:
    state = PartitionState(leader=leader, leader_epoch=epoch, isr=(1, 2, 3), zk_version=version)
    manager.update(partition, state, restart_following=partition.apply_state(state))


def _followed(manager: ReplicaFetcherManager) -> dict[int, set[tuple[str, int]]]:
    return {leader: set(fetcher.partitions) for leader, fetcher in manager.fetchers.items()}


def test_a_partition_follows_in_its_leaders_fetcher_only(tmp_path: Path) -> None:
    async def run() -> None:
        manager = ReplicaFetcherManager(broker_id=ME, metadata=MetadataCache(),
                                        quotas=ReplicationQuotas(ME))
        first, second = _partition(tmp_path, 0), _partition(tmp_path, 1)
        try:
            _apply(manager, first, leader=2, epoch=0, version=0)
            _apply(manager, second, leader=2, epoch=0, version=0)
            assert _followed(manager) == {2: {("t", 0), ("t", 1)}}

            _apply(manager, first, leader=3, epoch=1, version=1)  # leader moved
            assert _followed(manager) == {2: {("t", 1)}, 3: {("t", 0)}}

            _apply(manager, second, leader=ME, epoch=1, version=1)  # we lead it now
            assert _followed(manager) == {2: set(), 3: {("t", 0)}}

            _apply(manager, first, leader=-1, epoch=2, version=2)  # no leader: fetch nothing
            assert _followed(manager) == {2: set(), 3: set()}

            _apply(manager, first, leader=3, epoch=3, version=3)
            manager.remove(("t", 0))  # closed or reassigned away
            assert _followed(manager) == {2: set(), 3: set()}

            _apply(manager, first, leader=2, epoch=4, version=4)
            tasks = [fetcher._task for fetcher in manager.fetchers.values()]
            await manager.shutdown()
            assert manager.fetchers == {}
            assert all(task is None or task.done() for task in tasks)
        finally:
            first.close()
            second.close()

    asyncio.run(run())


def test_the_same_leader_and_epoch_does_not_restart_following(tmp_path: Path) -> None:
    async def run() -> None:
        manager = ReplicaFetcherManager(broker_id=ME, metadata=MetadataCache(),
                                        quotas=ReplicationQuotas(ME))
        partition = _partition(tmp_path, 0)
        try:
            _apply(manager, partition, leader=2, epoch=0, version=0)
            fetcher = manager.fetchers[2]
            fetcher.truncating.pop(("t", 0))  # as if truncation had finished
            _apply(manager, partition, leader=2, epoch=0, version=1)  # an ISR-only change
            assert ("t", 0) in fetcher.partitions
            assert ("t", 0) not in fetcher.truncating  # not sent back to truncation
            await manager.shutdown()
        finally:
            partition.close()

    asyncio.run(run())
