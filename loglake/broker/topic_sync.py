"""Keeps the metadata cache in step with ZooKeeper and tells the replica states what to host
(the ZooKeeper-mode part of Kafka's ``MetadataCache`` updates and ``becomeLeaderOrFollower``
requests: here every broker reads ZooKeeper itself instead of waiting for the controller).

Topics: a ChildrenWatch on ``/brokers/topics`` schedules a reconcile pass
(:meth:`TopicSync.reconcile`). A pass reads everything it needs in one go on the ZooKeeper
executor (topic names, each topic's assignment and config, the ids of new topics) and registers
the watches of new topics and partitions there (a DataWatch reads on registration), then applies
the result on the event loop: the cache's topics, ids and configs are replaced, new replicas
open, replicas reassigned away are removed, deleted topics go (replica_states.py does the
opening and removing). Passes run one at a time; one pending pass covers any number of
requests; a failed pass is logged and retried a second later, and never fails the request
that asked for it (:meth:`TopicSync.reconcile_after_change`). A pass that fails while reading
applies nothing: the next pass sets up again what it had started (a watch may then be
registered twice, which only repeats callbacks).

Partitions added to a topic and replicas reassigned (KIP-455) reach every broker through a
DataWatch on each topic's assignment znode, which schedules a pass when the znode version
differs from the cached one: a replica newly assigned here opens and fetches (an empty one
starts at the leader's local log start, see replica_fetcher.py), one no longer assigned here
stops and its directory is deleted (Kafka's StopReplica with delete), also at start-up for
directories left by a reassignment that completed while this broker was down. Topic configs
arrive with their DataWatch's data (no read on the loop); a config seen by the watch during a
pass wins over the one the pass read (it is at least as new).

Partition states: a DataWatch per partition hands the state to :meth:`TopicSync.on_state` on
the loop, which stores it in the cache (never an older znode version over a newer one) and
applies it to the hosted replica (its role; ReplicaStates.apply_state). The ISR manager's own
writes come through the same method. While the controller runs here and the partition is being
reassigned, a state change pokes the controller (an ISR change may complete the reassignment).

Cluster: the live brokers (``/brokers/ids``, re-read on every change, waiting out ZooKeeper
outages), the controller id (``/controller``) and the cluster's offline replicas are watched
into the cache too, and poke the controller.

Thread-safety: every cache write happens on the event loop; watch callbacks run on kazoo's
threads and only hop onto the loop (``ZkSession.run_soon``); every ZooKeeper read, and every
watch registration, runs on the ZooKeeper executor (``ZkSession.call``/``step``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.replica_states import ReplicaStates, Spawn
from loglake.broker.zk_session import ZkSession
from loglake.catalog.zookeeper import (
    RETRY_MAX_DELAY_S,
    CatalogClosedError,
    PartitionState,
    TopicMetadata,
    zookeeper_unavailable,
)
from loglake.config import BrokerConfig
from loglake.errors import LoglakeError
from loglake.faults import held

log = logging.getLogger(__name__)

RECONCILE_RETRY_S = 1.0


class ControllerHints(Protocol):
    """What the sync tells the controller (controller.py's ``Controller``)."""

    @property
    def active(self) -> bool:
        """Whether this broker is the controller now."""
        ...

    def poke(self) -> None:
        """Something the controller decides on changed: re-evaluate soon."""
        ...


@dataclass(frozen=True)
class TopicsRead:
    """What one reconcile pass read from ZooKeeper (on the ZooKeeper executor)."""

    names: frozenset[str]
    """Every topic name listed (a topic deleted while the pass read is listed, not found)."""
    found: dict[str, TopicMetadata]
    """The topics read, with assignment and config overrides."""
    new_ids: dict[str, uuid.UUID]
    """Topic ids of the topics new to this broker (watches registered for them)."""


class TopicSync:
    """ZooKeeper -> metadata cache and hosted replicas (see the module docstring)."""

    def __init__(self, config: BrokerConfig, *, zk: ZkSession, metadata: MetadataCache,
                 replica_states: ReplicaStates, controller: ControllerHints,
                 forget_topic: Callable[[str], None], spawn: Spawn,
                 stopping: Callable[[], bool]) -> None:
        """``config`` gives this broker's id and the topic-config defaults; ``forget_topic``
        drops a deleted topic's tiering state; ``spawn`` runs background tasks the broker
        owns; ``stopping`` says the broker is shutting down (no pass is scheduled then)."""
        self.config = config
        self.zk = zk
        self.metadata = metadata
        self.replica_states = replica_states
        self.controller = controller
        self.forget_topic = forget_topic
        self.spawn = spawn
        self.stopping = stopping
        self._pending = False
        self._lock = asyncio.Lock()
        self._configs_seen: dict[str, dict[str, str]] = {}  # by config watches during a pass

    # ---- cluster: brokers, controller, offline replicas
    async def watch_cluster(self) -> None:
        """Watch ``/brokers/ids``, ``/controller`` and the offline replicas (each step waits
        out ZooKeeper outages)."""
        catalog = self.zk.catalog
        await self.zk.step("watching /brokers/ids", catalog.watch_brokers,
                           lambda _ids: self.zk.run_soon(self._brokers_changed))
        await self.zk.step("watching /controller", catalog.watch_controller,
                           self._on_controller_change)
        await self.zk.step("watching offline replicas", catalog.watch_offline_replicas,
                           self._on_offline_replicas)

    async def watch_topics(self) -> None:
        """Watch ``/brokers/topics``: every change schedules a reconcile pass."""
        await self.zk.step("watching /brokers/topics", self.zk.catalog.watch_topics,
                           lambda _children: self.zk.run_soon(self.schedule_reconcile))

    def _brokers_changed(self) -> None:
        self.spawn(self.refresh_brokers())
        self.controller.poke()

    async def refresh_brokers(self) -> None:
        """Re-read the live brokers, waiting out ZooKeeper outages (until the broker stops)."""
        try:
            self.metadata.live_brokers = await self.zk.step("reading the live brokers",
                                                            self.zk.catalog.brokers)
        except CatalogClosedError:
            return
        except Exception as exc:  # a malformed registration: keep the previous view
            log.warning("reading the live brokers failed: %s", exc)

    def _on_controller_change(self, controller: int) -> None:
        """Watch callback (kazoo's thread): the controller's id, for Metadata."""

        def apply() -> None:
            self.metadata.controller_id = controller
            self.controller.poke()

        self.zk.run_soon(apply)

    def _on_offline_replicas(self, offline: dict[tuple[str, int], frozenset[int]]) -> None:
        """Watch callback (kazoo's thread): the cluster's offline replicas, for Metadata."""

        def apply() -> None:
            self.metadata.offline_replicas = offline

        self.zk.run_soon(apply)

    # ---- topics: reconcile
    async def reconcile_waiting(self) -> None:
        """:meth:`reconcile`, again while ZooKeeper is unavailable (start-up and rejoin): wait
        until ZooKeeper answers, run a pass; a pass an outage still hits is retried with
        backoff. Other errors propagate; CatalogClosedError once the broker stops."""
        failures = 0
        while True:
            await self.zk.step("reading topics", self.zk.catalog.topic_names)
            try:
                await self.reconcile()
                return
            except CatalogClosedError:
                raise
            except Exception as exc:
                if not zookeeper_unavailable(exc):
                    raise
                failures += 1
                log.warning("reading topics failed (attempt %d): %s; retrying", failures, exc)
                await asyncio.sleep(min(0.2 * 2 ** failures, RETRY_MAX_DELAY_S))

    def schedule_reconcile(self) -> None:
        """A pass soon (on the loop); one pending pass covers any number of requests."""
        if self._pending or self.stopping():
            return
        self._pending = True
        self.spawn(self._reconcile_or_retry())

    async def _reconcile_or_retry(self) -> None:
        """:meth:`reconcile`; a failed pass (ZooKeeper unavailable, a topic deleted half-way)
        is logged in one line and tried again a second later. Never raises."""
        try:
            await self.reconcile()
        except Exception as exc:
            self._pending = False
            if self.stopping():
                return
            log.warning("reconciling topics failed (%s: %s); retrying in %.0f s",
                        type(exc).__name__, exc, RECONCILE_RETRY_S)
            asyncio.get_running_loop().call_later(RECONCILE_RETRY_S, self.schedule_reconcile)

    async def reconcile_after_change(self) -> None:
        """For request handlers that just wrote topics to ZooKeeper: apply the change now.
        A failed pass is logged and retried (:meth:`_reconcile_or_retry`); it never fails the
        request (the write succeeded) nor closes the client's connection."""
        await self._reconcile_or_retry()

    async def reconcile(self) -> None:
        """Make local replicas and the metadata cache match ZooKeeper's topics: one pass,
        read on the ZooKeeper executor (:meth:`_read_topics`), applied on the loop
        (:meth:`_apply_topics`). Passes run one at a time."""
        async with self._lock:
            self._pending = False
            self._configs_seen = {}
            known = {name: frozenset(meta.assignment)
                     for name, meta in self.metadata.topics.items()}
            read = await self.zk.call(self._read_topics, known)
            self._apply_topics(read)

    def _read_topics(self, known: Mapping[str, frozenset[int]]) -> TopicsRead:
        """ZooKeeper executor: every topic's metadata; for topics and partitions not in
        ``known`` (topic -> partitions this broker watches), the topic id and the watches."""
        catalog = self.zk.catalog
        names = frozenset(catalog.topic_names())
        found: dict[str, TopicMetadata] = {}
        new_ids: dict[str, uuid.UUID] = {}
        for name in sorted(names):
            meta = catalog.topic(name)
            if meta is None:
                continue
            watched = known.get(name)
            if watched is None:
                new_ids[name] = catalog.topic_id(name)
                catalog.watch_topic_config(name, self._config_watcher(name))
                catalog.watch_topic_assignment(name, self._assignment_watcher(name))
            for index in meta.assignment:
                if watched is None or index not in watched:
                    catalog.watch_partition_state(name, index, self._state_watcher(name, index))
            found[name] = meta
        return TopicsRead(names, found, new_ids)

    def _apply_topics(self, read: TopicsRead) -> None:
        """On the loop: apply what :meth:`_read_topics` read."""
        me = self.config.broker_id
        replica_states = self.replica_states
        for name, meta in read.found.items():
            known = self.metadata.topics.get(name)
            if known is None:
                self.metadata.topic_ids[name] = read.new_ids.get(name, uuid.UUID(int=0))
            self.metadata.topics[name] = meta
            # a config watch that fired during the pass saw a config at least as new
            self.apply_topic_config(name, self._configs_seen.get(name, meta.configs))
            for index, replicas in meta.assignment.items():
                if me not in replicas:
                    if replica_states.is_hosted(name, index):
                        replica_states.remove(name, index)  # reassigned away
                    elif known is None and replica_states.has_directory(name, index):
                        log.warning("%s-%d is not assigned to this broker (reassigned while "
                                    "it was down): deleting its local copy", name, index)
                        replica_states.delete_dir(name, index)
                    continue
                hosted = replica_states.partitions.get((name, index))
                if hosted is not None and hosted.replicas != replicas:
                    hosted.set_replicas(replicas)
                    log.info("%s: replicas now %s", hosted.name, list(replicas))
                if not replica_states.is_hosted(name, index):
                    replica_states.open(name, index, replicas)
        gone = set(self.metadata.topics) - read.names
        if gone and held("topic-drop"):  # a test widens the window (loglake/faults.py)
            asyncio.get_running_loop().call_later(RECONCILE_RETRY_S, self.schedule_reconcile)
            return
        for name in gone:
            self._drop_topic(name)

    def _assignment_watcher(self, topic: str) -> Callable[[int], None]:
        """Partitions added to ``topic`` (CreatePartitions) and replicas reassigned make every
        broker reconcile (the callback gets the assignment znode's version)."""

        def changed(version: int) -> None:
            known = self.metadata.topics.get(topic)
            if known is not None and version != known.version:
                self.schedule_reconcile()

        return lambda version: self.zk.run_soon(lambda: changed(version))

    def _config_watcher(self, topic: str) -> Callable[[dict[str, str]], None]:
        """A topic's config znode changed: apply the data the watch read (on the loop)."""

        def changed(overrides: dict[str, str]) -> None:
            self._configs_seen[topic] = overrides
            if topic in self.metadata.topics:
                self.apply_topic_config(topic, overrides)

        return lambda overrides: self.zk.run_soon(lambda: changed(overrides))

    def apply_topic_config(self, name: str, overrides: Mapping[str, str]) -> None:
        """Use ``overrides`` (on top of the broker defaults) as ``name``'s config: in the
        metadata cache and in every hosted partition of the topic. An invalid set in
        ZooKeeper is logged and the defaults are used."""
        try:
            config = self.config.topic_config(dict(overrides))
        except LoglakeError:
            log.exception("topic %s has an invalid config in ZooKeeper; keeping defaults", name)
            config = self.config.topic_config({})
        if self.metadata.topic_configs.get(name) == config:
            return
        self.metadata.topic_configs[name] = config
        for (topic, _), partition in self.replica_states.partitions.items():
            if topic == name:
                partition.update_config(config)

    def _drop_topic(self, name: str) -> None:
        self.forget_topic(name)
        self.metadata.drop_topic(name)
        self._configs_seen.pop(name, None)
        self.replica_states.drop_topic(name)
        log.info("deleted topic %s", name)

    # ---- partition states
    def _state_watcher(self, topic: str, index: int) -> Callable[[PartitionState | None], None]:
        return lambda state: self.zk.run_soon(lambda: self.on_state(topic, index, state))

    def on_state(self, topic: str, index: int, state: PartitionState | None) -> None:
        """A partition state read or written (None: the znode is gone): into the cache, then
        to the hosted replica (see the module docstring)."""
        if not self.metadata.on_state(topic, index, state):
            return
        assert state is not None
        partition = self.replica_states.partitions.get((topic, index))
        if partition is not None:
            self.replica_states.apply_state(partition, state)
        meta = self.metadata.topics.get(topic)
        if self.controller.active and meta is not None and index in meta.reassigning:
            self.controller.poke()  # an ISR change may complete the reassignment

    async def reload_all_states(self) -> None:
        """Re-read every partition state (after a session change: watches may have missed
        changes). Errors propagate (the rejoin retries)."""
        for (topic, index), (_replicas, state) in (
            await self.zk.call(self.zk.catalog.all_partition_states)
        ).items():
            self.on_state(topic, index, state)
