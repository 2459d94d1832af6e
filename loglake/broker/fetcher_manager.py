"""The follower side of replication: one :class:`ReplicaFetcher` per leader broker (Kafka's
``ReplicaFetcherManager``).

Invariants:

* a followed partition is in at most one fetcher, the one of its current leader; a partition
  this broker leads, or whose leader is unknown (-1), is in none;
* a fetcher is created the first time a partition follows its leader and kept afterwards (an
  idle fetcher's task ends by itself once it has no partitions; ``add`` starts it again);
* after :meth:`ReplicaFetcherManager.shutdown` no fetcher runs and none is known; a later
  ``update`` would create new ones (the broker calls it only while running).

The replica fetcher itself (truncation by leader epoch, fetch, throttling) is in
replica_fetcher.py. Thread-safety: event loop only, like the fetchers and partitions.
"""

from __future__ import annotations

from loglake.broker.connection import InterBrokerLink
from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.partition import Partition, Role
from loglake.broker.replica_fetcher import ReplicaFetcher
from loglake.broker.replication_quota import ReplicationQuotas
from loglake.catalog.zookeeper import PartitionState


class ReplicaFetcherManager:
    """The fetchers of this broker's followed partitions, by leader id."""

    def __init__(self, *, broker_id: int, metadata: MetadataCache,
                 quotas: ReplicationQuotas, link: InterBrokerLink | None = None) -> None:
        """Fetch as replica ``broker_id``; leaders' addresses come from ``metadata``'s live
        brokers, follower throttles from ``quotas``, how to reach leaders from ``link`` (all
        handed to each fetcher)."""
        self.link = link or InterBrokerLink()
        self.broker_id = broker_id
        self.metadata = metadata
        self.quotas = quotas
        self.fetchers: dict[int, ReplicaFetcher] = {}

    def update(self, partition: Partition, state: PartitionState, *,
               restart_following: bool) -> None:
        """``partition`` has just applied ``state``: take it out of every fetcher but its
        leader's (all of them when this broker leads it), and, when it follows a known leader
        and must (re)start following (``Partition.apply_state``'s answer: a new leader or
        epoch), add it to the leader's fetcher, which truncates first (replica_fetcher.py)."""
        key = (partition.topic, partition.index)
        for fetcher in self.fetchers.values():
            if partition.role is not Role.FOLLOWER or fetcher.leader_id != state.leader:
                fetcher.remove(key)
        if partition.role is Role.FOLLOWER and state.leader >= 0 and restart_following:
            if state.leader not in self.fetchers:
                self.fetchers[state.leader] = ReplicaFetcher(
                    state.leader, broker_id=self.broker_id, metadata=self.metadata,
                    quotas=self.quotas, link=self.link)
            self.fetchers[state.leader].add(partition)

    def remove(self, key: tuple[str, int]) -> None:
        """Stop fetching ``key`` (a replica closed, removed or deleted)."""
        for fetcher in self.fetchers.values():
            fetcher.remove(key)

    async def shutdown(self) -> None:
        """Stop every fetcher (its task and connection) and forget them all."""
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
