"""ISR maintenance of the partitions this broker leads (Kafka's ``ReplicaManager.maybeShrinkIsr``
and ``Partition.maybeExpandIsr``, ZooKeeper mode: the leader writes the state znode itself).

Every ``ISR_CHECK_S`` seconds, while the ZooKeeper lease is valid, each led partition is asked
which followers lag (no fetch reaching the log end within ``replica.lag.time.max.ms``) and which
caught up (``Partition.isr_changes``); the pure decision ``election.isr_change`` says the new
state (same leader and epoch, the ISR shrunk and/or expanded; None: no change). The write is
version-checked against the state znode version the partition applied, so a controller's or
another leader's newer write always wins (StaleStateError: the state watch brings the newer
state). An *expansion* is also conditioned on the assignment znode version this broker knows
(``assignment_version``): a reassignment that removed the replica meanwhile makes the write
fail instead of re-adding a replica no longer assigned. A write that lands is applied at once
through ``on_written`` (the same path as the state watch), without waiting for the watch.

Thread-safety: event loop only; the writes run on the ZooKeeper executor (``ZkSession.call``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

from loglake.broker import election
from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.metrics.state_counters import StateCounters
from loglake.broker.partition import Role
from loglake.broker.replica_manager import ReplicaManager
from loglake.broker.zk_session import ZkSession
from loglake.catalog.zookeeper import PartitionState, StaleStateError

log = logging.getLogger(__name__)

ISR_CHECK_S = 0.5


class IsrManager:
    """Shrinks and expands the ISRs of the partitions this broker leads (see the module)."""

    def __init__(self, *, broker_id: int, replica_lag_time_max_ms: int,
                 replicas: ReplicaManager, metadata: MetadataCache, zk: ZkSession,
                 on_written: Callable[[str, int, PartitionState], None],
                 counters: StateCounters | None = None) -> None:
        """``on_written(topic, index, state)`` applies a state this broker just wrote;
        ``counters`` counts the shrinks and expansions that land (metrics)."""
        self.counters = counters if counters is not None else StateCounters()
        self.broker_id = broker_id
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.replicas = replicas
        self.metadata = metadata
        self.zk = zk
        self.on_written = on_written

    async def run(self) -> None:
        """:meth:`check` every ``ISR_CHECK_S`` while the lease is valid, until cancelled."""
        while True:
            await asyncio.sleep(ISR_CHECK_S)
            if not self.zk.healthy():
                continue
            await self.check()

    async def check(self) -> None:
        """One pass over the led partitions: write each ISR change that is due."""
        catalog = self.zk.catalog
        for partition in list(self.replicas.partitions.values()):
            if partition.role is not Role.LEADER or partition.state is None:
                continue
            lagging, caught_up = partition.isr_changes(self.replica_lag_time_max_ms)
            new = election.isr_change(partition.state, self.broker_id,
                                      partition.replicas, lagging, caught_up)
            if new is None:
                continue
            # an expansion holds only while the assignment is the one we know (a
            # reassignment may have removed the replica meanwhile)
            meta = self.metadata.topics.get(partition.topic)
            old_isr = partition.state.isr
            guard = (meta.version if meta is not None and set(new.isr) - set(old_isr)
                     else None)
            try:
                version = await self.zk.call(
                    functools.partial(catalog.update_partition_state,
                                      assignment_version=guard),
                    partition.topic, partition.index, new)
            except StaleStateError:
                continue  # the watch brings the newer state
            self.counters.isr_changed(old_isr, new.isr)
            log.warning("%s: ISR %s -> %s", partition.name, list(partition.isr),
                        list(new.isr))
            self.on_written(partition.topic, partition.index, PartitionState(
                new.leader, new.leader_epoch, new.isr, new.controller_epoch, version))
