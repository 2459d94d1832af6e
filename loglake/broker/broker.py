"""The broker: ZooKeeper registration, hosted replicas and their roles, lifecycle.

State machine of a broker process::

    STARTING --(ZK session, cluster id, registered, replicas opened, listening)--> RUNNING
    RUNNING  --(SIGTERM)--> SHUTTING DOWN: controlled shutdown hands our leaderships to other
                            in-sync replicas and leaves ISRs, then logs close (clean marker),
                            the ZK session closes (our /brokers/ids node goes at once) --> STOPPED

ZooKeeper session handling: a *lease* is renewed by a successful ZooKeeper read at least every
``LEASE_RENEW_S``; it lasts a third of the session timeout. Without a valid lease (session
SUSPENDED or LOST, or this process was paused) the broker refuses to act as leader: produce,
fetch and ListOffsets answer NOT_LEADER_OR_FOLLOWER, so a broker cut off from ZooKeeper never
acknowledges writes that a newly elected leader does not have. After a reconnect (a new session
after an expiry included) it re-registers and re-reads brokers, partition states and topics,
retrying with backoff until that succeeds (:meth:`Broker._rejoin_cluster`).

Start-up survives ZooKeeper outages: every ZooKeeper step of STARTING (connect, cluster id,
registration, watches, broker list, topics, storage publication) waits until ZooKeeper answers
(``ClusterCatalog.retrying``: bounded backoff, one log line per failed attempt), also across a
session expiry. Registration waits for the previous run's ephemeral ``/brokers/ids/<id>`` to
expire (``ClusterCatalog.register_broker_waiting``).

Replica roles come from the partition-state znodes: a DataWatch per hosted partition schedules
:meth:`Broker._apply_state` on the event loop. Leaders track followers and maintain the ISR
(version-checked writes of the state znode, same epoch); followers fetch through one
:class:`ReplicaFetcher` per leader. Topic creation/deletion reaches every broker through a
ChildrenWatch on ``/brokers/topics`` (:meth:`Broker.reconcile`); partitions added to a topic and
replicas reassigned (KIP-455) through a DataWatch on each topic's assignment znode: a replica
newly assigned here opens and fetches (an empty one starts at the leader's local log start, see
replica_fetcher.py), one no longer assigned here stops and its directory is deleted
(:meth:`Broker._remove_replica`, Kafka's StopReplica with delete), also at start-up for
directories left by a reassignment that completed while this broker was down. A leader's ISR
expansion is conditioned on the assignment version it knows, so it never re-adds a replica a
reassignment just removed. Replication throttle rates are dynamic broker configs, watched in
``/config/brokers/<id>`` and ``/config/brokers/<default>`` (broker/replication_quota.py).

Thread-safety: all mutable state is touched only on the event loop thread; kazoo callbacks hop
onto it with ``call_soon_threadsafe``; blocking ZooKeeper calls run in worker threads
(:meth:`Broker.zk_call`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import shutil
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from loglake.broker import election
from loglake.broker.controller import Controller
from loglake.broker.groups.coordinator import GroupCoordinator
from loglake.broker.partition import Partition, Role
from loglake.broker.replica_fetcher import ReplicaFetcher
from loglake.broker.replica_manager import ReplicaManager
from loglake.broker.replication_quota import DEFAULT_ENTITY, ReplicationQuotas, effective_rates
from loglake.broker.tiering import Tierer, ZooKeeperCallables
from loglake.catalog.zookeeper import (
    RETRY_MAX_DELAY_S,
    BrokerInfo,
    CatalogClosedError,
    ClusterCatalog,
    PartitionState,
    Registration,
    SessionEvent,
    StaleStateError,
    TopicMetadata,
    zookeeper_unavailable,
)
from loglake.config import BrokerConfig, TopicConfig
from loglake.errors import LoglakeError

log = logging.getLogger(__name__)

T = TypeVar("T")
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
PRODUCER_ID_BLOCK_SIZE = 1000
LEASE_RENEW_S = 0.5
ISR_CHECK_S = 0.5
SHUTDOWN_HANDOVER_S = 10.0


class Broker:
    def __init__(self, config: BrokerConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.catalog = ClusterCatalog(
            config.zookeeper_connect,
            session_timeout=config.zookeeper_session_timeout_ms / 1000,
        )
        self.topics: dict[str, TopicMetadata] = {}
        self.topic_configs: dict[str, TopicConfig] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.live_brokers: dict[int, BrokerInfo] = {}
        self.partition_states: dict[tuple[str, int], PartitionState] = {}  # metadata cache
        # every broker's offline replicas, from ZooKeeper: (topic, partition) -> broker ids
        self.offline_replicas: dict[tuple[str, int], frozenset[int]] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.replication_quotas = ReplicationQuotas(config.broker_id)
        self.dynamic_configs: dict[str, dict[str, str]] = {}  # entity -> /config/brokers/..
        self.apply_broker_configs()
        self.controller = Controller(self)
        self.groups = GroupCoordinator(self)
        self.tierer = Tierer(
            config, zookeeper=ZooKeeperCallables(self.catalog, self.zk_call, self.zk_healthy,
                                                 self.run_soon),
            hosted=lambda: self.replicas.partitions,
            topic_config=lambda topic: self.topic_configs.get(topic),
            clock=clock, stopping=lambda: self.stopping)
        self.replicas = ReplicaManager(config, metadata=self, lease_valid=self.zk_healthy,
                                       tier=self.tierer, quotas=self.replication_quotas,
                                       clock=clock)
        self.cluster_id = ""
        self.controller_id = -1
        self.stopping = False
        self._lease_until = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reconcile_pending = False
        self._producer_ids: list[int] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._running = False  # start() finished
        self._rejoin: asyncio.Task[None] | None = None
        self._rejoin_needed = False  # a reconnect came while starting or rejoining

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """STARTING -> RUNNING (see the module docstring).

        Each ZooKeeper step waits until ZooKeeper answers, so an outage or a pause of this
        process past the session timeout only delays start-up. Raises CatalogClosedError if
        :meth:`stop` begins meanwhile, BrokerIdInUseError if another live broker holds our id.
        """
        self._loop = asyncio.get_running_loop()
        self.config.log_dir.mkdir(parents=True, exist_ok=True)
        await self.zk_call(lambda: self.catalog.start(wait=True, stopped=self._is_stopping))
        self.catalog.add_session_listener(self._on_zk_state)
        self.cluster_id = await self._zk_step("reading the cluster id",
                                              self.catalog.ensure_cluster_id)
        await self.zk_call(self._register)
        self._renew_lease()
        await self._zk_step("watching /brokers/ids", self.catalog.watch_brokers,
                            lambda _ids: self.run_soon(self._refresh_brokers))
        await self._zk_step("watching /controller", self.catalog.watch_controller,
                            self._on_controller_change)
        await self._zk_step("watching offline replicas", self.catalog.watch_offline_replicas,
                            self._on_offline_replicas)
        for entity in (DEFAULT_ENTITY, str(self.config.broker_id)):
            await self._zk_step("watching dynamic broker configs",
                                self.catalog.watch_broker_config, entity,
                                self._broker_config_watcher(entity))
        await self._refresh_brokers_now()
        await self._reconcile_waiting()
        await self._zk_step("watching /brokers/topics", self.catalog.watch_topics,
                            lambda _children: self._schedule_reconcile())
        storage = self.tierer.storage
        if storage is not None:  # the tierer publishes too, but only tries once
            await self._zk_step("publishing the tier storage", self.catalog.publish_storage,
                                storage.url, dict(storage.options))
        for coroutine in (self._flush_loop(), self._lease_loop(), self._isr_loop(),
                          self.controller.run(), self.groups.run(), self.tierer.run()):
            self._tasks.append(asyncio.create_task(coroutine))
        self._running = True
        if self._rejoin_needed:  # the session changed while we were starting
            self._after_reconnect()

    async def stop(self) -> None:
        """Controlled shutdown, then close everything (see the module docstring)."""
        self.stopping = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._controlled_shutdown(), SHUTDOWN_HANDOVER_S)
        for task in self._tasks:
            task.cancel()
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
        self.tierer.close()
        for partition in self.partitions.values():
            try:
                partition.close()
            except Exception:
                log.exception("closing %s failed", partition.name)
        self.partitions.clear()
        await self.zk_call(self.catalog.stop)

    async def zk_call(self, func: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(func, *args)

    def run_soon(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` on the event loop (callable from kazoo's threads)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(callback)

    # ------------------------------------------------------------------ ZooKeeper session
    def _is_stopping(self) -> bool:
        return self.stopping

    async def _zk_step(self, what: str, func: Callable[..., T], *args: Any) -> T:
        """``func(*args)`` in a worker thread, called again while ZooKeeper is unavailable
        (``ClusterCatalog.retrying``); CatalogClosedError once the broker stops."""
        return await asyncio.to_thread(self.catalog.retrying, what, func, *args,
                                       stopped=self._is_stopping)

    def _spawn(self, coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``coroutine`` as a task that :meth:`stop` cancels (finished ones are dropped)."""
        self._tasks = [task for task in self._tasks if not task.done()]
        task = asyncio.ensure_future(coroutine)
        self._tasks.append(task)
        return task

    def _on_zk_state(self, event: SessionEvent) -> None:
        """On kazoo's thread: without a connection stop acting as leader at once; once
        connected again (same session or a new one) rejoin the cluster."""
        log.warning("ZooKeeper session: %s", event.value)
        if event in (SessionEvent.SUSPENDED, SessionEvent.LOST):
            self._lease_until = 0.0  # stop acting as leader at once
            self.run_soon(self.controller.resign)
        else:
            self.run_soon(self._after_reconnect)

    def _after_reconnect(self) -> None:
        """Start :meth:`_rejoin_cluster` (one at a time: a request while one runs, or while
        :meth:`start` runs, makes it run once more afterwards)."""
        if self.stopping:
            return
        if not self._running or (self._rejoin is not None and not self._rejoin.done()):
            self._rejoin_needed = True
            return
        self._rejoin = self._spawn(self._rejoin_cluster())

    async def _rejoin_cluster(self) -> None:
        """Register again (a new session lost our ephemeral node), then re-read the brokers,
        every partition state and the topics (watches may have missed changes). Retries the
        whole sequence with bounded backoff until it succeeds or the broker stops."""
        failures = 0
        while not self.stopping:
            self._rejoin_needed = False
            try:
                await self.zk_call(self._register)
                self._renew_lease()
                for topic, index in list(self.offline_partitions):  # went with the old session
                    await self.zk_call(self.catalog.set_replica_offline,
                                       self.config.broker_id, topic, index, True)
                await self._refresh_brokers_now()
                await self._reload_all_states()
                await self._reconcile_waiting()
                self.controller.poke()
            except CatalogClosedError:
                return
            except Exception as exc:
                failures += 1
                delay = min(0.5 * 2 ** min(failures, 4), 5.0)
                if zookeeper_unavailable(exc):
                    log.warning("rejoining the cluster failed (attempt %d): %s; retrying in "
                                "%.1f s", failures, exc, delay)
                else:
                    log.exception("rejoining the cluster failed (attempt %d); retrying in "
                                  "%.1f s", failures, delay)
                await asyncio.sleep(delay)
                continue
            log.info("rejoined the cluster: registered, brokers, partition states and topics "
                     "re-read%s", f" after {failures} failed attempt(s)" if failures else "")
            if not self._rejoin_needed:
                return

    def zk_healthy(self) -> bool:
        return time.monotonic() < self._lease_until

    def _renew_lease(self) -> None:
        self._lease_until = time.monotonic() + self.config.zookeeper_session_timeout_ms / 3000

    async def _lease_loop(self) -> None:
        """Renew the lease after every read that shows our session owns ``/brokers/ids/<id>``;
        rejoin when it does not (the node expired with an old session, or was deleted)."""
        while True:
            await asyncio.sleep(LEASE_RENEW_S)
            started = time.monotonic()
            try:
                held = await self.zk_call(self.catalog.registration, self.config.broker_id)
            except Exception:  # ZooKeeper unavailable: no renewal, the lease runs out
                continue
            if held is Registration.OURS:
                self._lease_until = started + self.config.zookeeper_session_timeout_ms / 3000
            elif not self.stopping and (self._rejoin is None or self._rejoin.done()):
                log.warning("our /brokers/ids node is %s: registering again",
                            "gone" if held is Registration.ABSENT else "another session's")
                self._after_reconnect()

    def _register(self) -> None:
        """Create our ``/brokers/ids/<id>`` for the current session (worker thread): waits
        out ZooKeeper outages and the previous run's node (``register_broker_waiting``)."""
        info = BrokerInfo(self.config.broker_id, self.config.host, self.config.port,
                          self.config.rack)
        self.catalog.register_broker_waiting(info, stopped=self._is_stopping)

    def _on_controller_change(self, controller: int) -> None:
        def apply() -> None:
            self.controller_id = controller
            self.controller.poke()

        self.run_soon(apply)

    def _refresh_brokers(self) -> None:
        self._tasks.append(asyncio.ensure_future(self._refresh_brokers_now()))
        self.controller.poke()

    async def _refresh_brokers_now(self) -> None:
        """Re-read the live brokers, waiting out ZooKeeper outages (until the broker stops)."""
        try:
            self.live_brokers = await self._zk_step("reading the live brokers",
                                                    self.catalog.brokers)
        except CatalogClosedError:
            return
        except Exception as exc:  # a malformed registration: keep the previous view
            log.warning("reading the live brokers failed: %s", exc)

    async def _reconcile_waiting(self) -> None:
        """:meth:`reconcile`, again while ZooKeeper is unavailable.

        reconcile reads ZooKeeper synchronously on the event loop, so first wait (in a worker
        thread) until ZooKeeper answers; an outage that still hits a pass fails it, and the
        topics that pass added (maybe before their watches were set) are forgotten so the next
        pass sets them up again."""
        failures = 0
        while True:
            await self._zk_step("reading topics", self.catalog.topic_names)
            known = set(self.topics)
            try:
                self.reconcile()
                return
            except Exception as exc:
                if not zookeeper_unavailable(exc):
                    raise
                failures += 1
                for name in set(self.topics) - known:
                    self.topics.pop(name, None)
                log.warning("reading topics failed (attempt %d): %s; retrying", failures, exc)
                await asyncio.sleep(min(0.2 * 2 ** failures, RETRY_MAX_DELAY_S))

    # ------------------------------------------------------------------ topics and replicas
    def _schedule_reconcile(self) -> None:
        if self._reconcile_pending:
            return
        self._reconcile_pending = True
        self.run_soon(self._reconcile_or_retry)

    def _reconcile_or_retry(self) -> None:
        """:meth:`reconcile` from the event loop; a failed pass (ZooKeeper unavailable, a
        topic deleted half-way) is logged in one line and tried again a second later."""
        try:
            self.reconcile()
        except Exception as exc:
            self._reconcile_pending = False
            log.warning("reconciling topics failed (%s: %s); retrying in 1 s",
                        type(exc).__name__, exc)
            if self._loop is not None and not self.stopping:
                self._loop.call_later(1.0, self._schedule_reconcile)

    def reconcile_after_change(self) -> None:
        """For request handlers that just wrote topics to ZooKeeper: apply the change now.
        A failed pass is logged and retried (:meth:`_reconcile_or_retry`); it never fails the
        request (the write succeeded) nor closes the client's connection."""
        self._reconcile_or_retry()

    def reconcile(self) -> None:
        """Make local replicas match ZooKeeper's topics (runs on the event loop)."""
        self._reconcile_pending = False
        names = set(self.catalog.topic_names())
        for name in names:
            meta = self.catalog.topic(name)
            if meta is None:
                continue
            known = self.topics.get(name)
            if known is None:
                self.topics[name] = meta
                self.topic_ids[name] = self._topic_id(name)
                self.catalog.watch_topic_config(name, self._config_watcher(name))
                self.catalog.watch_topic_assignment(name, self._assignment_watcher(name))
            self._apply_config(name, meta.configs)
            # partitions new to us (all of a new topic, those CreatePartitions added to a
            # known one): watch their states before the topic counts as up to date, so a
            # pass that fails half-way sets the rest up next time
            for index in meta.assignment:
                if known is None or index not in known.assignment:
                    self.catalog.watch_partition_state(name, index,
                                                       self._state_watcher(name, index))
            self.topics[name] = meta
            for index, replicas in meta.assignment.items():
                key = (name, index)
                if self.config.broker_id not in replicas:
                    if key in self.partitions or key in self.offline_partitions:
                        self._remove_replica(name, index)  # reassigned away
                    elif known is None and self.partition_dir(name, index).is_dir():
                        log.warning("%s-%d is not assigned to this broker (reassigned while "
                                    "it was down): deleting its local copy", name, index)
                        self._delete_directory(self.partition_dir(name, index))
                    continue
                hosted = self.partitions.get(key)
                if hosted is not None and hosted.replicas != replicas:
                    hosted.set_replicas(replicas)
                    log.info("%s: replicas now %s", hosted.name, list(replicas))
                if (self.config.broker_id in replicas and (name, index) not in self.partitions
                        and (name, index) not in self.offline_partitions):
                    self._open_partition(name, index, replicas)
                    partition = self.partitions.get((name, index))
                    if partition is not None:  # its state may have arrived before it opened
                        self._apply_state(partition, self.partition_states.get((name, index)))
        for name in set(self.topics) - names:
            self._drop_topic(name)

    def _assignment_watcher(self, topic: str) -> Callable[[int], None]:
        """Partitions added to ``topic`` (CreatePartitions) and replicas reassigned make every
        broker reconcile (the callback gets the assignment znode's version)."""

        def changed(version: int) -> None:
            known = self.topics.get(topic)
            if known is not None and version != known.version:
                self._schedule_reconcile()

        return lambda version: self.run_soon(lambda: changed(version))

    def _remove_replica(self, topic: str, index: int) -> None:
        """This broker's replica of ``topic``-``index`` was reassigned away: stop fetching it,
        close it and delete its directory (renamed aside at once, removed in a worker thread,
        so the event loop does not wait for the file system)."""
        key = (topic, index)
        for fetcher in self.fetchers.values():
            fetcher.remove(key)
        partition = self.partitions.pop(key, None)
        if partition is not None:
            try:
                partition.close()
            except Exception:
                log.exception("closing %s failed", partition.name)
        if self.offline_partitions.pop(key, None) is not None:
            self._spawn(self._publish_offline(topic, index, False))
        self._delete_directory(self.partition_dir(topic, index))
        log.warning("%s-%d: replica reassigned away from this broker; its local copy is "
                    "deleted", topic, index)

    def _delete_directory(self, directory: Path) -> None:
        """Rename ``directory`` to ``<name>.<ms>.deleted`` and remove it in a worker thread."""
        aside = directory.with_name(f"{directory.name}.{int(time.time() * 1000)}.deleted")
        try:
            directory.rename(aside)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("could not move %s aside for deletion: %s", directory, exc)
            aside = directory
        self._spawn(asyncio.to_thread(shutil.rmtree, aside, True))

    def _broker_config_watcher(self, entity: str) -> Callable[[dict[str, str]], None]:
        return lambda configs: self.run_soon(lambda: self.apply_broker_configs(entity, configs))

    def apply_broker_configs(self, entity: str | None = None,
                              configs: dict[str, str] | None = None) -> None:
        """Dynamic broker configs of ``entity`` changed (or, without arguments, start-up):
        recompute the replication throttle rates (see replication_quota.effective_rates)."""
        if entity is not None:
            self.dynamic_configs[entity] = dict(configs or {})
        static = {"leader.replication.throttled.rate":
                  self.config.leader_replication_throttled_rate,
                  "follower.replication.throttled.rate":
                  self.config.follower_replication_throttled_rate}
        self.replication_quotas.apply(effective_rates(
            static, self.dynamic_configs.get(DEFAULT_ENTITY, {}),
            self.dynamic_configs.get(str(self.config.broker_id), {})))

    def _topic_id(self, name: str) -> uuid.UUID:
        try:
            raw, _ = self.catalog.zk.get(f"/brokers/topics/{name}")
            topic_id = json.loads(raw).get("topic_id")
            return uuid.UUID(topic_id) if topic_id else uuid.UUID(int=0)
        except (NoNodeError, ValueError, TypeError):
            return uuid.UUID(int=0)

    def _config_watcher(self, topic: str) -> Callable[[dict[str, str]], None]:
        return lambda _config: self.run_soon(lambda: self._reload_config(topic))

    def _reload_config(self, topic: str) -> None:
        if topic in self.topics:
            self._apply_config(topic, self.catalog.topic_config(topic))

    def _apply_config(self, name: str, overrides: dict[str, str]) -> None:
        try:
            config = self.config.topic_config(overrides)
        except LoglakeError:
            log.exception("topic %s has an invalid config in ZooKeeper; keeping defaults", name)
            config = self.config.topic_config({})
        if self.topic_configs.get(name) == config:
            return
        self.topic_configs[name] = config
        for (topic, _), partition in self.partitions.items():
            if topic == name:
                partition.update_config(config)

    def unclean_election(self, topic: str) -> bool:
        config = self.topic_configs.get(topic)
        return bool(config and config.unclean_leader_election_enable)

    def _open_partition(self, topic: str, index: int, replicas: tuple[int, ...]) -> None:
        """Open a hosted replica. One that cannot be opened goes offline; it never stops the
        broker or its other partitions (see :meth:`_replace_offline_replica`)."""
        key = (topic, index)
        try:
            partition = Partition(
                topic, index, self.partition_dir(topic, index), self.topic_configs[topic],
                broker_id=self.config.broker_id, replicas=replicas, clock=self.clock,
            )
        except Exception as exc:  # any failure (I/O, damage, a bug): this partition only
            reason = f"{type(exc).__name__}: {exc}"
            self.offline_partitions[key] = reason
            self._spawn(self._publish_offline(topic, index, True))
            log.error("%s-%d cannot be opened and is offline: %s", topic, index, reason)
            if len(replicas) > 1 and not self.stopping:
                self._tasks.append(asyncio.ensure_future(
                    self._replace_offline_replica(topic, index, replicas)))
            return
        if self.offline_partitions.pop(key, None) is not None:
            self._spawn(self._publish_offline(topic, index, False))
        partition.log.on_roll = self.tierer.poke
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

    def _on_offline_replicas(self, offline: dict[tuple[str, int], frozenset[int]]) -> None:
        """Watch callback (kazoo's thread): the cluster's offline replicas, for Metadata."""

        def apply() -> None:
            self.offline_replicas = offline

        self.run_soon(apply)

    async def _publish_offline(self, topic: str, index: int, offline: bool) -> None:
        """Tell the cluster (Metadata of every broker) that our replica is offline or back."""
        try:
            await self._zk_step("publishing an offline replica", self.catalog.set_replica_offline,
                                self.config.broker_id, topic, index, offline)
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
        me = self.config.broker_id
        for _ in range(720):  # bounded: about an hour of retries at 5 s
            if self.stopping or key not in self.offline_partitions or topic not in self.topics:
                return
            try:
                state = await self.zk_call(self.catalog.partition_state, topic, index)
                if state is not None and (state.leader == me or me in state.isr):
                    moves = election.shutdown_moves(
                        [election.PartitionView(topic, index, replicas, state)], me,
                        set(self.live_brokers))
                    if moves:
                        await self.zk_call(self.catalog.update_partition_state, topic, index,
                                           moves[0].state)
                        log.warning("%s-%d (offline here): %s", topic, index,
                                    moves[0].reason.replace("controlled shutdown of", "replica"))
                        continue  # re-read: the write must have landed
                else:
                    if key in self.partitions or key not in self.offline_partitions:
                        return  # reopened meanwhile
                    directory = self.partition_dir(topic, index)
                    if directory.exists():
                        aside = directory.with_name(
                            f"{directory.name}.{int(time.time() * 1000)}.damaged")
                        directory.rename(aside)
                        log.warning("%s-%d: damaged replica moved to %s; re-replicating it "
                                    "from the leader", topic, index, aside.name)
                    self._open_partition(topic, index, replicas)
                    partition = self.partitions.get(key)
                    if partition is not None:
                        self._apply_state(partition, self.partition_states.get(key))
                    return
            except StaleStateError:
                continue
            except Exception as exc:
                log.warning("%s-%d stays offline: %s", topic, index, exc)
            await asyncio.sleep(5.0)

    def _state_watcher(self, topic: str, index: int) -> Callable[[PartitionState | None], None]:
        return lambda state: self.run_soon(lambda: self._on_state(topic, index, state))

    def _on_state(self, topic: str, index: int, state: PartitionState | None) -> None:
        key = (topic, index)
        if state is None:
            self.partition_states.pop(key, None)
            return
        known = self.partition_states.get(key)
        if known is not None and state.zk_version < known.zk_version:
            return
        self.partition_states[key] = state
        partition = self.partitions.get(key)
        if partition is not None:
            self._apply_state(partition, state)
        meta = self.topics.get(topic)
        if self.controller.active and meta is not None and index in meta.reassigning:
            self.controller.poke()  # an ISR change may complete the reassignment

    async def _reload_all_states(self) -> None:
        for (topic, index), (_replicas, state) in (
            await self.zk_call(self.catalog.all_partition_states)
        ).items():
            self._on_state(topic, index, state)

    def _apply_state(self, partition: Partition, state: PartitionState | None) -> None:
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
        for fetcher in self.fetchers.values():
            if partition.role is not Role.FOLLOWER or fetcher.leader_id != state.leader:
                fetcher.remove(key)
        if partition.role is Role.FOLLOWER and state.leader >= 0 and restart_following:
            if state.leader not in self.fetchers:
                self.fetchers[state.leader] = ReplicaFetcher(self, state.leader)
            self.fetchers[state.leader].add(partition)

    def _drop_topic(self, name: str) -> None:
        self.tierer.forget_topic(name)
        self.topics.pop(name, None)
        self.topic_configs.pop(name, None)
        self.topic_ids.pop(name, None)
        for key in [k for k in self.partition_states if k[0] == name]:
            del self.partition_states[key]
        for key in [k for k in self.offline_partitions if k[0] == name]:
            del self.offline_partitions[key]
        for key in [k for k in self.partitions if k[0] == name]:
            for fetcher in self.fetchers.values():
                fetcher.remove(key)
            partition = self.partitions.pop(key)
            partition.close()
            shutil.rmtree(self.partition_dir(*key), ignore_errors=True)
        log.info("deleted topic %s", name)

    def partition_dir(self, topic: str, index: int) -> Path:
        return self.config.log_dir / f"{topic}-{index}"

    @property
    def partitions(self) -> dict[tuple[str, int], Partition]:
        """The hosted replicas (owned by the replica manager)."""
        return self.replicas.partitions

    @property
    def offline_partitions(self) -> dict[tuple[str, int], str]:
        """Hosted replicas that could not be opened (owned by the replica manager)."""
        return self.replicas.offline_partitions

    def leader_partition(self, topic: str, index: int) -> Partition:
        """See :meth:`ReplicaManager.leader_partition`."""
        return self.replicas.leader_partition(topic, index)

    # ------------------------------------------------------------------ ISR maintenance
    async def _isr_loop(self) -> None:
        while True:
            await asyncio.sleep(ISR_CHECK_S)
            if not self.zk_healthy():
                continue
            for partition in list(self.partitions.values()):
                if partition.role is not Role.LEADER or partition.state is None:
                    continue
                lagging, caught_up = partition.isr_changes(self.config.replica_lag_time_max_ms)
                new = election.isr_change(partition.state, self.config.broker_id,
                                          partition.replicas, lagging, caught_up)
                if new is None:
                    continue
                # an expansion holds only while the assignment is the one we know (a
                # reassignment may have removed the replica meanwhile)
                meta = self.topics.get(partition.topic)
                guard = (meta.version if meta is not None and set(new.isr) - set(
                    partition.state.isr) else None)
                try:
                    version = await self.zk_call(
                        functools.partial(self.catalog.update_partition_state,
                                          assignment_version=guard),
                        partition.topic, partition.index, new)
                except StaleStateError:
                    continue  # the watch brings the newer state
                log.warning("%s: ISR %s -> %s", partition.name, list(partition.isr),
                            list(new.isr))
                self._on_state(partition.topic, partition.index, PartitionState(
                    new.leader, new.leader_epoch, new.isr, new.controller_epoch, version))

    async def _controlled_shutdown(self) -> None:
        if not self.zk_healthy():
            return
        # stop fetching first: a fetch after we left an ISR would let the leader add us back
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
        live = set(self.live_brokers)
        views = [
            election.PartitionView(p.topic, p.index, p.replicas, p.state)
            for p in self.partitions.values() if p.state is not None
        ]
        for write in election.shutdown_moves(views, self.config.broker_id, live):
            try:
                await self.zk_call(self.catalog.update_partition_state, write.topic,
                                   write.partition, write.state)
                log.warning("%s-%d: %s", write.topic, write.partition, write.reason)
            except StaleStateError:
                continue
        # give the new leaders a moment to take over before our connections close
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(
            p.role is Role.LEADER and len(p.replicas) > 1 and len(p.isr) > 1
            for p in self.partitions.values()
        ):
            await asyncio.sleep(0.1)

    async def _flush_loop(self) -> None:
        interval = self.config.log_flush_scheduler_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            for partition in list(self.partitions.values()):
                try:
                    partition.log.flush_if_due()
                    partition.checkpoint_hw()
                except Exception:
                    log.exception("flush of %s failed", partition.name)

    # ------------------------------------------------------------------ producer ids
    async def allocate_producer_id(self) -> int:
        if not self._producer_ids:
            start = await self.zk_call(self._claim_producer_id_block)
            self._producer_ids = list(range(start + PRODUCER_ID_BLOCK_SIZE - 1, start - 1, -1))
        return self._producer_ids.pop()

    def _claim_producer_id_block(self) -> int:
        """Claim the next block of producer ids with a version-checked write (Kafka's scheme)."""
        zk = self.catalog.zk
        for _ in range(100):
            try:
                raw, stat = zk.get(PRODUCER_ID_BLOCK_PATH)
            except NoNodeError:
                block = {"version": 1, "broker": self.config.broker_id, "block_start": "0",
                         "block_end": str(PRODUCER_ID_BLOCK_SIZE - 1)}
                try:
                    zk.create(PRODUCER_ID_BLOCK_PATH, json.dumps(block).encode())
                    return 0
                except NodeExistsError:
                    continue
            start = int(json.loads(raw)["block_end"]) + 1
            block = {"version": 1, "broker": self.config.broker_id, "block_start": str(start),
                     "block_end": str(start + PRODUCER_ID_BLOCK_SIZE - 1)}
            try:
                zk.set(PRODUCER_ID_BLOCK_PATH, json.dumps(block).encode(), version=stat.version)
                return start
            except BadVersionError:
                continue
        raise LoglakeError("could not claim a producer id block: too much contention")
