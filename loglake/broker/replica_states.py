"""Hosted replicas follow ZooKeeper: open, role changes, stop and remove, offline replicas
(Kafka's ``ReplicaManager.becomeLeaderOrFollower`` and ``stopReplicas``).

The replica manager (replica_manager.py) holds the hosted replicas; this module changes which
ones it holds and in which role, as the topic sync (topic_sync.py) and the ISR manager
(isr_manager.py) tell it:

* :meth:`ReplicaStates.open`: a replica assigned to this broker opens (its directory from the
  :class:`LogManager`, its topic config from the metadata cache), then takes the partition state
  the metadata cache knows (the state may arrive before the replica opens). A replica that
  cannot be opened goes *offline* instead: it is kept in ``offline_partitions`` with the reason,
  published in ZooKeeper (``/loglake/offline_replicas``, so every broker's Metadata lists it as
  offline), and re-replicated from the others (:meth:`ReplicaStates._replace_offline_replica`)
  when the partition has other replicas. It never stops the broker or its other partitions.
* :meth:`ReplicaStates.apply_state`: a partition state becomes the replica's role (leader or
  follower of an epoch) and the fetchers follow (fetcher_manager.py). A state older (lower znode
  version) than the one applied is ignored.
* :meth:`ReplicaStates.remove` (StopReplica with delete: reassigned away) and
  :meth:`ReplicaStates.drop_topic` (topic deleted): stop fetching, close, and delete the
  directory crash-safely (``LogManager.delete``: renamed aside at once, removed in a worker
  thread).

Invariants: a key is in at most one of ``partitions`` and ``offline_partitions``; an offline
replica is published offline in ZooKeeper, and unpublished once it opens or goes (a
publication that fails is logged; a rejoin republishes every offline replica, since the
entries are ephemeral to the old session); a removed or dropped replica is in no fetcher.

Thread-safety: event loop only. ZooKeeper calls go through the session's executor
(``ZkSession.call``/``step``); background work (publications, replacements, directory removals)
runs as tasks of the broker's ``spawn``, which the broker cancels at stop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from loglake.broker import election
from loglake.broker.fetcher_manager import ReplicaFetcherManager
from loglake.broker.log_manager import LogManager
from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.partition import Partition
from loglake.broker.replica_manager import ReplicaManager
from loglake.broker.zk_session import ZkSession
from loglake.catalog.zookeeper import CatalogClosedError, PartitionState, StaleStateError

log = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[Any, Any, Any] | asyncio.Future[Any]], object]
"""Run an awaitable as a background task the broker owns (cancelled at stop)."""

REPLACE_RETRY_S = 5.0
REPLACE_ATTEMPTS = 720  # about an hour of retries at REPLACE_RETRY_S


class ReplicaStates:
    """Opens, re-roles and removes the replica manager's hosted replicas (see the module)."""

    def __init__(self, *, broker_id: int, replicas: ReplicaManager, logs: LogManager,
                 metadata: MetadataCache, fetchers: ReplicaFetcherManager, zk: ZkSession,
                 spawn: Spawn, stopping: Callable[[], bool], on_roll: Callable[[], None],
                 clock: Callable[[], float] = time.time) -> None:
        """``on_roll`` is called when a hosted log rolls a segment (the tierer's poke);
        ``stopping`` says the broker is shutting down (no replacement starts then)."""
        self.broker_id = broker_id
        self.replicas = replicas
        self.logs = logs
        self.metadata = metadata
        self.fetchers = fetchers
        self.zk = zk
        self.spawn = spawn
        self.stopping = stopping
        self.on_roll = on_roll
        self.clock = clock

    @property
    def partitions(self) -> dict[tuple[str, int], Partition]:
        return self.replicas.partitions

    @property
    def offline_partitions(self) -> dict[tuple[str, int], str]:
        return self.replicas.offline_partitions

    def is_hosted(self, topic: str, index: int) -> bool:
        """Whether this broker holds a replica of the partition, open or offline."""
        key = (topic, index)
        return key in self.partitions or key in self.offline_partitions

    # ---- open
    def open(self, topic: str, index: int, replicas: tuple[int, ...]) -> None:
        """Open a hosted replica and apply the partition state the metadata cache knows.
        One that cannot be opened goes offline (see the module docstring)."""
        key = (topic, index)
        try:
            partition = Partition(
                topic, index, self.logs.create(topic, index),
                self.metadata.topic_configs[topic], broker_id=self.broker_id,
                replicas=replicas, clock=self.clock,
            )
        except Exception as exc:  # any failure (I/O, damage, a bug): this partition only
            reason = f"{type(exc).__name__}: {exc}"
            self.offline_partitions[key] = reason
            self.spawn(self._publish_offline(topic, index, True))
            log.error("%s-%d cannot be opened and is offline: %s", topic, index, reason)
            if len(replicas) > 1 and not self.stopping():
                self.spawn(self._replace_offline_replica(topic, index, replicas))
            return
        if self.offline_partitions.pop(key, None) is not None:
            self.spawn(self._publish_offline(topic, index, False))
        partition.log.on_roll = self.on_roll
        self.partitions[key] = partition
        damage = partition.log.recovery_damage
        if damage is not None:
            log.warning("%s: recovery cut the log at offset %d (%s); dropped %d later "
                        "segment(s); the replica re-fetches from there and stays out of the "
                        "ISR until it has", partition.name, damage.truncated_at, damage.reason,
                        len(damage.dropped_segments))
        log.info("opened %s at offsets [%d, %d), hw %d", partition.name,
                 partition.log_start_offset, partition.log.log_end_offset,
                 partition.high_watermark)
        # its state may have arrived before it opened
        self.apply_state(partition, self.metadata.partition_states.get(key))

    # ---- roles
    def apply_state(self, partition: Partition, state: PartitionState | None) -> None:
        """Make ``partition`` (if still hosted) leader or follower as ``state`` says; the
        fetchers follow. Ignored when ``state`` is None or older than the applied one."""
        key = (partition.topic, partition.index)
        if state is None or self.partitions.get(key) is not partition:
            return
        if partition.state is not None and state.zk_version < partition.state.zk_version:
            return  # an older notification overtaken by a newer read
        was = (partition.role, partition.leader_id, partition.leader_epoch)
        restart_following = partition.apply_state(state)
        now = (partition.role, partition.leader_id, partition.leader_epoch)
        if was != now:
            log.info("%s: %s of epoch %d (leader %d, isr %s)", partition.name,
                     partition.role.value, state.leader_epoch, state.leader, list(state.isr))
        self.fetchers.update(partition, state, restart_following=restart_following)

    # ---- stop and remove
    def remove(self, topic: str, index: int) -> None:
        """This broker's replica of ``topic``-``index`` was reassigned away: stop fetching it,
        close it and delete its directory (LogManager.delete: renamed aside at once, removed
        in a worker thread)."""
        key = (topic, index)
        self._stop_and_delete(key)
        if self.offline_partitions.pop(key, None) is not None:
            self.spawn(self._publish_offline(topic, index, False))
        log.warning("%s-%d: replica reassigned away from this broker; its local copy is "
                    "deleted", topic, index)

    def drop_topic(self, name: str) -> None:
        """Topic ``name`` was deleted: forget its offline replicas; stop, close and delete
        each of its open ones."""
        for key in [k for k in self.offline_partitions if k[0] == name]:
            del self.offline_partitions[key]
        for key in [k for k in self.partitions if k[0] == name]:
            self._stop_and_delete(key)

    def _stop_and_delete(self, key: tuple[str, int]) -> None:
        """Stop fetching ``key``, close its replica if open, and delete its directory."""
        self.fetchers.remove(key)
        partition = self.partitions.pop(key, None)
        if partition is not None:
            _close(partition)
        self.delete_dir(*key)

    def has_directory(self, topic: str, index: int) -> bool:
        """Whether the log directory holds a directory of the partition (hosted or left
        behind)."""
        return self.logs.partition_dir(topic, index).is_dir()

    def delete_dir(self, topic: str, index: int) -> None:
        """Delete the replica's directory crash-safely (the removal runs as a background
        task)."""
        removal = self.logs.delete(topic, index)
        if removal is not None:
            self.spawn(removal)

    def close_all(self) -> None:
        """Close every open replica (broker stop; clean-shutdown markers are written) and
        forget them."""
        for partition in self.partitions.values():
            _close(partition)
        self.partitions.clear()

    # ---- offline replicas
    async def republish_offline(self) -> None:
        """Publish every offline replica again (a new session lost the ephemeral entries).
        Errors propagate (the rejoin retries)."""
        for topic, index in list(self.offline_partitions):
            await self.zk.call(self.zk.catalog.set_replica_offline, self.broker_id, topic,
                               index, True)

    async def _publish_offline(self, topic: str, index: int, offline: bool) -> None:
        """Tell the cluster (Metadata of every broker) that our replica is offline or back."""
        try:
            await self.zk.step("publishing an offline replica",
                               self.zk.catalog.set_replica_offline,
                               self.broker_id, topic, index, offline)
        except CatalogClosedError:
            return
        except Exception as exc:
            log.warning("could not publish %s-%d as %s: %s", topic, index,
                        "offline" if offline else "online", exc)

    async def _replace_offline_replica(self, topic: str, index: int,
                                       replicas: tuple[int, ...]) -> None:
        """Re-replicate an offline replica from the others, once that cannot lose data.

        Steps: (1) make sure this broker neither leads the partition nor is in its ISR (a
        version-checked write handing leadership to another live ISR member and/or leaving
        the ISR, as a controlled shutdown does); while that is impossible (no other in-sync
        replica is alive) the replica stays offline and this is retried; (2) rename the
        damaged directory aside (``<dir>.<ms>.damaged``, kept for the operator); (3) open an
        empty replica, which fetches everything from the leader and rejoins the ISR once it
        has caught up.
        """
        key = (topic, index)
        me = self.broker_id
        catalog = self.zk.catalog
        for _ in range(REPLACE_ATTEMPTS):
            if (self.stopping() or key not in self.offline_partitions
                    or topic not in self.metadata.topics):
                return
            try:
                state = await self.zk.call(catalog.partition_state, topic, index)
                if state is not None and (state.leader == me or me in state.isr):
                    moves = election.shutdown_moves(
                        [election.PartitionView(topic, index, replicas, state)], me,
                        set(self.metadata.live_brokers))
                    if moves:
                        await self.zk.call(catalog.update_partition_state, topic, index,
                                           moves[0].state)
                        log.warning("%s-%d (offline here): %s", topic, index,
                                    moves[0].reason.replace("controlled shutdown of", "replica"))
                        continue  # re-read: the write must have landed
                else:
                    if key in self.partitions or key not in self.offline_partitions:
                        return  # reopened meanwhile
                    aside = self.logs.move_aside_damaged(topic, index)
                    if aside is not None:
                        log.warning("%s-%d: damaged replica moved to %s; re-replicating it "
                                    "from the leader", topic, index, aside.name)
                    self.open(topic, index, replicas)
                    return
            except StaleStateError:
                continue
            except Exception as exc:
                log.warning("%s-%d stays offline: %s", topic, index, exc)
            await asyncio.sleep(REPLACE_RETRY_S)


def _close(partition: Partition) -> None:
    try:
        partition.close()
    except Exception:
        log.exception("closing %s failed", partition.name)
