"""The broker: builds and wires the parts, runs the process lifecycle.

Layers (Kafka's broker, in the same order; each part gets only what it uses)::

    KafkaServer (server.py) -- frames --> handlers (handlers/*.py, apis.py)
        handlers get BrokerServices (services.py), never the Broker
    ReplicaManager (replica_manager.py) -> Partition (partition.py) -> PartitionLog (segments/)
    Controller (controller.py), GroupCoordinator (groups/), ReplicaFetcher (replica_fetcher.py),
        Tierer (tiering.py): a ZooKeeper session, the metadata cache, config values
    MetadataCache (metadata_cache.py)   fed by ZooKeeper watches
    ZkSession (zk_session.py)           catalog, lease, the executors blocking calls run on
    LogManager (log_manager.py)         partition directories
    ProducerIds (producer_ids.py)       producer id blocks

What the Broker itself still owns: building and wiring the parts; the process lifecycle
(start, stop, controlled shutdown); rejoining the cluster after a session change; topic
reconciliation (local replicas follow ZooKeeper's topics and partition states) and the ISR
maintenance of partitions it leads; dynamic broker configs.

State machine of a broker process::

    STARTING --(ZK session, cluster id, registered, replicas opened, listening)--> RUNNING
    RUNNING  --(SIGTERM)--> SHUTTING DOWN: controlled shutdown hands our leaderships to other
                            in-sync replicas and leaves ISRs, then logs close (clean marker),
                            the ZK session closes (our /brokers/ids node goes at once) --> STOPPED

ZooKeeper session handling: the session's *lease* (zk_session.py) says whether this broker may
act as leader. Without a valid lease (session SUSPENDED or LOST, or this process was paused)
produce, fetch and ListOffsets answer NOT_LEADER_OR_FOLLOWER, so a broker cut off from
ZooKeeper never acknowledges writes that a newly elected leader does not have. After a
reconnect (a new session after an expiry included) it re-registers and re-reads brokers,
partition states and topics, retrying with backoff until that succeeds
(:meth:`Broker._rejoin_cluster`).

Start-up survives ZooKeeper outages: every ZooKeeper step of STARTING (connect, cluster id,
registration, watches, broker list, topics, storage publication) waits until ZooKeeper answers
(``ZkSession.step``: bounded backoff, one log line per failed attempt), also across a session
expiry. Registration waits for the previous run's ephemeral ``/brokers/ids/<id>`` to expire
(``ClusterCatalog.register_broker_waiting``). Before anything opens, directories left by an
interrupted deletion are removed (``LogManager.sweep``).

Topics: a ChildrenWatch on ``/brokers/topics`` schedules a reconcile pass
(:meth:`Broker.reconcile`). A pass reads everything it needs in one go on the ZooKeeper
executor (topic names, each topic's assignment and config, the ids of new topics) and
registers the watches of new topics and partitions there (a DataWatch reads on registration),
then applies the result on the event loop: new replicas open, removed ones close, deleted
topics go. Passes run one at a time; a failed pass is logged and retried a second later, and
never fails the request that asked for it. Partitions added to a topic and replicas
reassigned (KIP-455) reach every broker through a DataWatch on each topic's assignment znode:
a replica newly assigned here opens and fetches (an empty one starts at the leader's local log
start, see replica_fetcher.py), one no longer assigned here stops and its directory is deleted
(:meth:`Broker._remove_replica`, Kafka's StopReplica with delete), also at start-up for
directories left by a reassignment that completed while this broker was down. Topic configs
arrive with their DataWatch's data (no read on the loop).

Replica roles come from the partition-state znodes: a DataWatch per hosted partition hands
the state to :meth:`Broker._on_state` on the event loop. Leaders track followers and maintain
the ISR (version-checked writes of the state znode, same epoch; an expansion is conditioned on
the assignment version it knows, so it never re-adds a replica a reassignment just removed);
followers fetch through one :class:`ReplicaFetcher` per leader. Replication throttle rates are
dynamic broker configs, watched in ``/config/brokers/<id>`` and ``/config/brokers/<default>``
(broker/replication_quota.py).

Thread-safety: all mutable state is touched only on the event loop thread; kazoo callbacks hop
onto it with ``ZkSession.run_soon``; blocking ZooKeeper calls run on the session's executor
(zk_session.py lists which thread runs what); directory removal in asyncio's default one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from loglake.broker import election
from loglake.broker.controller import Controller
from loglake.broker.dynamic_config import DynamicBrokerConfig
from loglake.broker.fetcher_manager import ReplicaFetcherManager
from loglake.broker.groups.coordinator import GroupCoordinator
from loglake.broker.isr_manager import IsrManager
from loglake.broker.log_manager import LogManager
from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.partition import Partition, Role
from loglake.broker.producer_ids import ProducerIds
from loglake.broker.replica_manager import ReplicaManager
from loglake.broker.replica_states import ReplicaStates
from loglake.broker.replication_quota import ReplicationQuotas
from loglake.broker.services import BrokerServices
from loglake.broker.tiering import Tierer
from loglake.broker.zk_session import ZkSession
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
from loglake.config import BrokerConfig
from loglake.errors import LoglakeError

log = logging.getLogger(__name__)

T = TypeVar("T")
SHUTDOWN_HANDOVER_S = 10.0
RECONCILE_RETRY_S = 1.0


@dataclass(frozen=True)
class TopicsRead:
    """What one reconcile pass read from ZooKeeper (on the ZooKeeper executor)."""

    names: frozenset[str]
    """Every topic name listed (a topic deleted while the pass read is listed, not found)."""
    found: dict[str, TopicMetadata]
    """The topics read, with assignment and config overrides."""
    new_ids: dict[str, uuid.UUID]
    """Topic ids of the topics new to this broker (watches registered for them)."""


class Broker:
    """One broker process: the parts and their wiring (see the module docstring)."""

    def __init__(self, config: BrokerConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.stopping = False
        catalog = ClusterCatalog(config.zookeeper_connect,
                                 session_timeout=config.zookeeper_session_timeout_ms / 1000)
        self.zk = ZkSession(catalog, broker_id=config.broker_id, stopped=self._is_stopping)
        self.metadata = MetadataCache()
        self.logs = LogManager(config.log_dir)
        self.replication_quotas = ReplicationQuotas(config.broker_id)
        self.fetchers = ReplicaFetcherManager(broker_id=config.broker_id, metadata=self.metadata,
                                              quotas=self.replication_quotas)
        self.broker_configs = DynamicBrokerConfig(config, self.replication_quotas)
        self.controller = Controller(self.zk, self.metadata, config)
        self.groups = GroupCoordinator(self.zk, self.metadata, config)
        self.replicas: ReplicaManager
        self.tierer = Tierer(
            config, zookeeper=self.zk, hosted=lambda: self.replicas.partitions,
            topic_config=lambda topic: self.metadata.topic_configs.get(topic), clock=clock,
            stopping=self._is_stopping)
        self.replicas = ReplicaManager(config, metadata=self.metadata,
                                       lease_valid=self.zk.healthy, tier=self.tierer,
                                       quotas=self.replication_quotas, clock=clock)
        self.replica_states = ReplicaStates(
            broker_id=config.broker_id, replicas=self.replicas, logs=self.logs,
            metadata=self.metadata, fetchers=self.fetchers, zk=self.zk, spawn=self._spawn,
            stopping=self._is_stopping, on_roll=self.tierer.poke, clock=clock)
        self.isr = IsrManager(
            broker_id=config.broker_id, replica_lag_time_max_ms=config.replica_lag_time_max_ms,
            replicas=self.replicas, metadata=self.metadata, zk=self.zk, on_written=self._on_state)
        self.producer_ids = ProducerIds(self.zk, config.broker_id)
        self.services = BrokerServices(
            config=config, zk=self.zk, metadata=self.metadata, replicas=self.replicas,
            groups=self.groups, controller=self.controller, tierer=self.tierer,
            replication_quotas=self.replication_quotas, producer_ids=self.producer_ids,
            topic_admin=self, broker_configs=self.broker_configs, clock=clock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reconcile_pending = False
        self._reconcile_lock = asyncio.Lock()
        self._configs_seen: dict[str, dict[str, str]] = {}  # by config watches during a pass
        self._tasks: list[asyncio.Future[Any]] = []
        self._running = False  # start() finished
        self._rejoin: asyncio.Future[None] | None = None
        self._rejoin_needed = False  # a reconnect came while starting or rejoining

    @property
    def catalog(self) -> ClusterCatalog:
        return self.zk.catalog

    @property
    def partitions(self) -> dict[tuple[str, int], Partition]:
        """The hosted replicas (owned by the replica manager)."""
        return self.replicas.partitions

    @property
    def offline_partitions(self) -> dict[tuple[str, int], str]:
        """Hosted replicas that could not be opened (owned by the replica manager)."""
        return self.replicas.offline_partitions

    @property
    def cluster_id(self) -> str:
        return self.metadata.cluster_id

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """STARTING -> RUNNING (see the module docstring).

        Each ZooKeeper step waits until ZooKeeper answers, so an outage or a pause of this
        process past the session timeout only delays start-up. Raises CatalogClosedError if
        :meth:`stop` begins meanwhile, BrokerIdInUseError if another live broker holds our id.
        """
        self._loop = asyncio.get_running_loop()
        self.config.log_dir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(self.logs.sweep)
        await self.zk.start()
        self.zk.add_listener(self._on_zk_state)
        self.metadata.cluster_id = await self.zk.step("reading the cluster id",
                                                      self.catalog.ensure_cluster_id)
        await self.zk.call(self._register)
        self.zk.renew_lease()
        await self.zk.step("watching /brokers/ids", self.catalog.watch_brokers,
                           lambda _ids: self.zk.run_soon(self._refresh_brokers))
        await self.zk.step("watching /controller", self.catalog.watch_controller,
                           self._on_controller_change)
        await self.zk.step("watching offline replicas", self.catalog.watch_offline_replicas,
                           self._on_offline_replicas)
        await self.broker_configs.watch(self.zk)
        await self._refresh_brokers_now()
        await self._reconcile_waiting()
        await self.zk.step("watching /brokers/topics", self.catalog.watch_topics,
                           lambda _children: self.zk.run_soon(self._schedule_reconcile))
        storage = self.tierer.storage
        if storage is not None:  # the tierer publishes too, but only tries once
            await self.zk.step("publishing the tier storage", self.catalog.publish_storage,
                               storage.url, dict(storage.options))
        for coroutine in (self.replicas.flush_loop(), self.zk.lease_loop(self._on_not_registered),
                          self.isr.run(), self.controller.run(), self.groups.run(),
                          self.tierer.run()):
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
        await self.fetchers.shutdown()
        self.tierer.close()
        self.replica_states.close_all()
        await self.zk.close()

    def _is_stopping(self) -> bool:
        return self.stopping

    def _spawn(self, awaitable: Coroutine[Any, Any, T] | asyncio.Future[T]) -> asyncio.Future[T]:
        """Run ``awaitable`` as a task that :meth:`stop` cancels (finished ones are dropped)."""
        self._tasks = [task for task in self._tasks if not task.done()]
        task = asyncio.ensure_future(awaitable)
        self._tasks.append(task)
        return task

    # ------------------------------------------------------------------ ZooKeeper session
    def _on_zk_state(self, event: SessionEvent) -> None:
        """On the loop, after the session dropped the lease for SUSPENDED/LOST: stop acting
        as controller; once connected again (same session or a new one) rejoin the cluster."""
        if event in (SessionEvent.SUSPENDED, SessionEvent.LOST):
            self.controller.resign()
        else:
            self._after_reconnect()

    def _on_not_registered(self, held: Registration) -> None:
        """The lease loop found our ``/brokers/ids/<id>`` gone or another session's."""
        if not self.stopping and (self._rejoin is None or self._rejoin.done()):
            log.warning("our /brokers/ids node is %s: registering again",
                        "gone" if held is Registration.ABSENT else "another session's")
            self._after_reconnect()

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
                await self.zk.call(self._register)
                self.zk.renew_lease()
                await self.replica_states.republish_offline()  # went with the old session
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

    def _register(self) -> None:
        """Create our ``/brokers/ids/<id>`` for the current session (ZooKeeper executor):
        waits out ZooKeeper outages and the previous run's node (``register_broker_waiting``)."""
        info = BrokerInfo(self.config.broker_id, self.config.host, self.config.port,
                          self.config.rack)
        self.catalog.register_broker_waiting(info, stopped=self._is_stopping)

    def _on_controller_change(self, controller: int) -> None:
        def apply() -> None:
            self.metadata.controller_id = controller
            self.controller.poke()

        self.zk.run_soon(apply)

    def _refresh_brokers(self) -> None:
        self._spawn(self._refresh_brokers_now())
        self.controller.poke()

    async def _refresh_brokers_now(self) -> None:
        """Re-read the live brokers, waiting out ZooKeeper outages (until the broker stops)."""
        try:
            self.metadata.live_brokers = await self.zk.step("reading the live brokers",
                                                            self.catalog.brokers)
        except CatalogClosedError:
            return
        except Exception as exc:  # a malformed registration: keep the previous view
            log.warning("reading the live brokers failed: %s", exc)

    def _on_offline_replicas(self, offline: dict[tuple[str, int], frozenset[int]]) -> None:
        """Watch callback (kazoo's thread): the cluster's offline replicas, for Metadata."""

        def apply() -> None:
            self.metadata.offline_replicas = offline

        self.zk.run_soon(apply)

    # ------------------------------------------------------------------ topics: reconcile
    async def _reconcile_waiting(self) -> None:
        """:meth:`reconcile`, again while ZooKeeper is unavailable (start-up and rejoin): wait
        until ZooKeeper answers, run a pass; a pass an outage still hits is retried with
        backoff. Other errors propagate; CatalogClosedError once the broker stops."""
        failures = 0
        while True:
            await self.zk.step("reading topics", self.catalog.topic_names)
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

    def _schedule_reconcile(self) -> None:
        """A pass soon (on the loop); one pending pass covers any number of requests."""
        if self._reconcile_pending or self.stopping:
            return
        self._reconcile_pending = True
        self._spawn(self._reconcile_or_retry())

    async def _reconcile_or_retry(self) -> None:
        """:meth:`reconcile`; a failed pass (ZooKeeper unavailable, a topic deleted half-way)
        is logged in one line and tried again a second later. Never raises."""
        try:
            await self.reconcile()
        except Exception as exc:
            self._reconcile_pending = False
            if self.stopping:
                return
            log.warning("reconciling topics failed (%s: %s); retrying in %.0f s",
                        type(exc).__name__, exc, RECONCILE_RETRY_S)
            if self._loop is not None:
                self._loop.call_later(RECONCILE_RETRY_S, self._schedule_reconcile)

    async def reconcile_after_change(self) -> None:
        """For request handlers that just wrote topics to ZooKeeper: apply the change now.
        A failed pass is logged and retried (:meth:`_reconcile_or_retry`); it never fails the
        request (the write succeeded) nor closes the client's connection."""
        await self._reconcile_or_retry()

    async def reconcile(self) -> None:
        """Make local replicas and the metadata cache match ZooKeeper's topics.

        One pass at a time. Reads (and watch registrations) run on the ZooKeeper executor
        (:meth:`_read_topics`), then the result is applied on the loop (:meth:`_apply_topics`).
        A pass that fails while reading applies nothing: the next pass sets up again what it
        had started (a watch may then be registered twice, which only repeats callbacks)."""
        async with self._reconcile_lock:
            self._reconcile_pending = False
            self._configs_seen = {}
            known = {name: frozenset(meta.assignment)
                     for name, meta in self.metadata.topics.items()}
            read = await self.zk.call(self._read_topics, known)
            self._apply_topics(read)

    def _read_topics(self, known: Mapping[str, frozenset[int]]) -> TopicsRead:
        """ZooKeeper executor: every topic's metadata; for topics and partitions not in
        ``known`` (topic -> partitions this broker watches), the topic id and the watches."""
        catalog = self.catalog
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
        for name, meta in read.found.items():
            known = self.metadata.topics.get(name)
            if known is None:
                self.metadata.topic_ids[name] = read.new_ids.get(name, uuid.UUID(int=0))
            self.metadata.topics[name] = meta
            # a config watch that fired during the pass saw a config at least as new
            self.apply_topic_config(name, self._configs_seen.get(name, meta.configs))
            for index, replicas in meta.assignment.items():
                key = (name, index)
                if me not in replicas:
                    if self.replica_states.is_hosted(name, index):
                        self.replica_states.remove(name, index)  # reassigned away
                    elif known is None and self.logs.partition_dir(name, index).is_dir():
                        log.warning("%s-%d is not assigned to this broker (reassigned while "
                                    "it was down): deleting its local copy", name, index)
                        self.replica_states.delete_dir(name, index)
                    continue
                hosted = self.partitions.get(key)
                if hosted is not None and hosted.replicas != replicas:
                    hosted.set_replicas(replicas)
                    log.info("%s: replicas now %s", hosted.name, list(replicas))
                if not self.replica_states.is_hosted(name, index):
                    self.replica_states.open(name, index, replicas)
        for name in set(self.metadata.topics) - read.names:
            self._drop_topic(name)

    def _assignment_watcher(self, topic: str) -> Callable[[int], None]:
        """Partitions added to ``topic`` (CreatePartitions) and replicas reassigned make every
        broker reconcile (the callback gets the assignment znode's version)."""

        def changed(version: int) -> None:
            known = self.metadata.topics.get(topic)
            if known is not None and version != known.version:
                self._schedule_reconcile()

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
        for (topic, _), partition in self.partitions.items():
            if topic == name:
                partition.update_config(config)

    def _drop_topic(self, name: str) -> None:
        self.tierer.forget_topic(name)
        self.metadata.drop_topic(name)
        self._configs_seen.pop(name, None)
        self.replica_states.drop_topic(name)
        log.info("deleted topic %s", name)

    # ------------------------------------------------------------------ partition states
    def _state_watcher(self, topic: str, index: int) -> Callable[[PartitionState | None], None]:
        return lambda state: self.zk.run_soon(lambda: self._on_state(topic, index, state))

    def _on_state(self, topic: str, index: int, state: PartitionState | None) -> None:
        if not self.metadata.on_state(topic, index, state):
            return
        assert state is not None
        partition = self.partitions.get((topic, index))
        if partition is not None:
            self.replica_states.apply_state(partition, state)
        meta = self.metadata.topics.get(topic)
        if self.controller.active and meta is not None and index in meta.reassigning:
            self.controller.poke()  # an ISR change may complete the reassignment

    async def _reload_all_states(self) -> None:
        for (topic, index), (_replicas, state) in (
            await self.zk.call(self.catalog.all_partition_states)
        ).items():
            self._on_state(topic, index, state)

    async def _controlled_shutdown(self) -> None:
        if not self.zk.healthy():
            return
        # stop fetching first: a fetch after we left an ISR would let the leader add us back
        await self.fetchers.shutdown()
        live = set(self.metadata.live_brokers)
        views = [
            election.PartitionView(p.topic, p.index, p.replicas, p.state)
            for p in self.partitions.values() if p.state is not None
        ]
        for write in election.shutdown_moves(views, self.config.broker_id, live):
            try:
                await self.zk.call(self.catalog.update_partition_state, write.topic,
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
