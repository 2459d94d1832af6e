"""The replica manager: the partitions this broker hosts and the replication rules of produce
and fetch (Kafka's ``ReplicaManager``).

It owns the hosted replicas (``partitions``) and the hosted replicas that could not be opened
(``offline_partitions``: topic-partition -> why); the broker adds and removes entries as
ZooKeeper's assignment changes. Request handlers reach partitions only through it:
:meth:`ReplicaManager.leader_partition` answers a partition only while this broker leads it and
holds a valid ZooKeeper lease (``lease_valid``), so a broker cut off from ZooKeeper never
acknowledges a write nor serves a read as leader.

Thread-safety: event-loop thread only (like :class:`~loglake.broker.partition.Partition`); no
locks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Protocol

from loglake.broker.partition import Partition
from loglake.broker.replication_quota import ReplicationQuotas
from loglake.catalog.zookeeper import TopicMetadata
from loglake.config import BrokerConfig
from loglake.errors import KafkaStorageError, NotLeaderError, UnknownTopicError


class TopicsView(Protocol):
    """What the replica manager reads of the metadata cache: the known topics."""

    @property
    def topics(self) -> Mapping[str, TopicMetadata]: ...


class TierReader(Protocol):
    """What the replica manager reads of tiered storage (broker/tiering.py's ``Tierer``)."""

    @property
    def storage(self) -> object | None:
        """The tier's storage; None when this broker tiers nothing."""
        ...

    def known_log_start(self, partition: Partition) -> int: ...

    async def log_start(self, partition: Partition) -> int: ...

    async def read(self, partition: Partition, offset: int, max_bytes: int,
                   min_one_batch: bool) -> bytes | None: ...

    async def offset_for_timestamp(self, partition: Partition,
                                   timestamp_ms: int) -> tuple[int, int] | None: ...


class ReplicaManager:
    """The hosted partitions and the produce/fetch rules over them (see the module)."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        metadata: TopicsView,
        lease_valid: Callable[[], bool],
        tier: TierReader,
        quotas: ReplicationQuotas,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.metadata = metadata
        self.lease_valid = lease_valid
        self.tier = tier
        self.quotas = quotas
        self.clock = clock
        self.partitions: dict[tuple[str, int], Partition] = {}
        # hosted replicas that could not be opened: (topic, partition) -> why
        self.offline_partitions: dict[tuple[str, int], str] = {}

    def leader_partition(self, topic: str, index: int) -> Partition:
        """The partition if this broker leads it now (valid ZooKeeper lease); else
        KafkaStorageError (our replica is offline), UnknownTopicError (no such partition) or
        NotLeaderError (clients refresh metadata)."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            offline = self.offline_partitions.get((topic, index))
            if offline is not None:
                raise KafkaStorageError(
                    f"The replica of {topic}-{index} on broker {self.broker_id} is "
                    f"offline: {offline}")
            meta = self.metadata.topics.get(topic)
            if meta is None or index not in meta.assignment:
                raise UnknownTopicError(f"This server does not host {topic}-{index}.")
            raise NotLeaderError(f"Broker {self.broker_id} does not host {topic}-{index}.")
        partition.require_leader()
        if not self.lease_valid():
            raise NotLeaderError(
                f"Broker {self.broker_id} has no live ZooKeeper session; it does not "
                f"act as leader of {topic}-{index}."
            )
        return partition
