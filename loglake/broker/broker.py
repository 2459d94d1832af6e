"""The broker: builds and wires the parts, runs the process lifecycle (Kafka's ``KafkaServer``).

Layers (Kafka's broker, in the same order; each part gets only what it uses)::

    KafkaServer (server.py) -- frames --> handlers (handlers/*.py, apis.py)
        handlers get BrokerServices (services.py), never the Broker
    ReplicaManager (replica_manager.py) -> Partition (partition.py) -> PartitionLog (segments/)
        its flush loop: log flush and high-watermark checkpoint
    ReplicaStates (replica_states.py)   open, role changes, remove, offline replicas
    ReplicaFetcherManager (fetcher_manager.py) -> ReplicaFetcher (replica_fetcher.py)
    IsrManager (isr_manager.py)         ISR shrink/expand of led partitions
    TopicSync (topic_sync.py)           ZooKeeper watches -> MetadataCache, what to host
    DynamicBrokerConfig (dynamic_config.py)  /config/brokers -> replication throttle rates
    QuotaConfigSync (quotas/config_sync.py)  /config/users, /config/clients -> client quotas
    Controller (controller.py), GroupCoordinator (groups/), Tierer (tiering.py)
    TransactionCoordinator (transactions/)  transactional ids, markers to partition leaders
    MetadataCache (metadata_cache.py)   topics, partition states, brokers
    ZkSession (zk_session.py)           catalog, lease, the executors blocking calls run on
    LogManager (log_manager.py)         partition directories
    ProducerIds (producer_ids.py)       producer id blocks

What the Broker itself owns: building the parts in dependency order; the process lifecycle
(start, stop, controlled shutdown); rejoining the cluster after a session change; the
background tasks (every part's long-running loop and every task a part spawns through
:meth:`Broker._spawn` are cancelled at stop).

State machine of a broker process::

    STARTING --(ZK session, cluster id, registered, replicas opened, listening)--> RUNNING
    RUNNING  --(SIGTERM)--> SHUTTING DOWN: controlled shutdown hands our leaderships to other
                            in-sync replicas and leaves ISRs, then logs close (clean marker),
                            the ZK session closes (our /brokers/ids node goes at once) --> STOPPED

ZooKeeper session handling: the session's *lease* (zk_session.py) says whether this broker may
act as leader. Without a valid lease (session SUSPENDED or LOST, or this process was paused)
produce, fetch and ListOffsets answer NOT_LEADER_OR_FOLLOWER, so a broker cut off from
ZooKeeper never acknowledges writes that a newly elected leader does not have. After a
reconnect (a new session after an expiry included) it re-registers, republishes its offline
replicas and re-reads brokers, partition states and topics, retrying with backoff until that
succeeds (:meth:`Broker._rejoin_cluster`).

Start-up survives ZooKeeper outages: every ZooKeeper step of STARTING (connect, cluster id,
registration, watches, broker list, topics, storage publication) waits until ZooKeeper answers
(``ZkSession.step``: bounded backoff, one log line per failed attempt), also across a session
expiry. Registration waits for the previous run's ephemeral ``/brokers/ids/<id>`` to expire
(``ClusterCatalog.register_broker_waiting``). Before anything opens, directories left by an
interrupted deletion are removed (``LogManager.sweep``).

Thread-safety: all mutable state is touched only on the event loop thread; kazoo callbacks hop
onto it with ``ZkSession.run_soon``; blocking ZooKeeper calls run on the session's executor
(zk_session.py lists which thread runs what); directory removal in asyncio's default one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from loglake.broker import election
from loglake.broker.connection import InterBrokerLink
from loglake.broker.controller import Controller
from loglake.broker.dynamic_config import DynamicBrokerConfig
from loglake.broker.fetcher_manager import ReplicaFetcherManager
from loglake.broker.groups import txn_offsets
from loglake.broker.groups.coordinator import GroupCoordinator
from loglake.broker.handlers.sasl import CredentialCacheFeed
from loglake.broker.isr_manager import IsrManager
from loglake.broker.log_manager import LogManager
from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.metrics.collectors import (
    ConsumerLagCollector,
    ReplicationCollector,
    TierCollector,
)
from loglake.broker.metrics.http import MetricsEndpoint
from loglake.broker.metrics.quota_metrics import QuotaCollector
from loglake.broker.metrics.registry import BrokerMetrics
from loglake.broker.metrics.state_counters import StateCounters
from loglake.broker.metrics.transaction_metrics import TransactionCollector
from loglake.broker.partition import Role
from loglake.broker.producer_ids import ProducerIds
from loglake.broker.quotas.config_sync import QuotaConfigSync
from loglake.broker.quotas.manager import ClientQuotas
from loglake.broker.replica_manager import ReplicaManager
from loglake.broker.replica_states import ReplicaStates
from loglake.broker.replication_quota import ReplicationQuotas
from loglake.broker.schema_validation import SchemaValidation
from loglake.broker.security.acl_authorizer import AclAuthorizer
from loglake.broker.security.acl_sync import AclSync
from loglake.broker.security.authorizer import AllowAllAuthorizer, Authorizer
from loglake.broker.security.client_security import client_security_from_config
from loglake.broker.security.listeners import advertised_endpoints
from loglake.broker.services import BrokerServices
from loglake.broker.tiering import Tierer
from loglake.broker.topic_sync import TopicSync
from loglake.broker.transactions.coordinator import TransactionCoordinator
from loglake.broker.transactions.markers import MarkerSender
from loglake.broker.zk_session import ZkSession
from loglake.catalog.schemas import SchemaStore
from loglake.catalog.zk_auth import resolve_zk_auth
from loglake.catalog.zk_tls import ZkTls, resolve_zk_tls
from loglake.catalog.zookeeper import (
    BrokerInfo,
    CatalogClosedError,
    ClusterCatalog,
    Registration,
    SessionEvent,
    StaleStateError,
    zookeeper_unavailable,
)
from loglake.config import BrokerConfig

log = logging.getLogger(__name__)

T = TypeVar("T")
SHUTDOWN_HANDOVER_S = 10.0


def zk_tls_of(config: BrokerConfig) -> ZkTls | None:
    """The broker's TLS to ZooKeeper from its ``zookeeper.ssl.*`` settings (None: plaintext)."""
    return resolve_zk_tls({
        "zookeeper.ssl.client.enable": config.zookeeper_ssl_client_enable,
        "zookeeper.clientCnxnSocket": config.zookeeper_client_cnxn_socket,
        "zookeeper.ssl.keystore.location": config.zookeeper_ssl_keystore_location,
        "zookeeper.ssl.keystore.password": config.zookeeper_ssl_keystore_password,
        "zookeeper.ssl.keystore.type": config.zookeeper_ssl_keystore_type,
        "zookeeper.ssl.truststore.location": config.zookeeper_ssl_truststore_location,
        "zookeeper.ssl.truststore.password": config.zookeeper_ssl_truststore_password,
        "zookeeper.ssl.truststore.type": config.zookeeper_ssl_truststore_type,
        "zookeeper.ssl.protocol": config.zookeeper_ssl_protocol,
        "zookeeper.ssl.enabled.protocols": config.zookeeper_ssl_enabled_protocols,
        "zookeeper.ssl.cipher.suites": config.zookeeper_ssl_cipher_suites,
        "zookeeper.ssl.endpoint.identification.algorithm":
            config.zookeeper_ssl_endpoint_identification_algorithm,
        "zookeeper.ssl.crl.enable": config.zookeeper_ssl_crl_enable,
        "zookeeper.ssl.ocsp.enable": config.zookeeper_ssl_ocsp_enable,
    })


class Broker:
    """One broker process: the parts and their wiring (see the module docstring)."""

    def __init__(self, config: BrokerConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.stopping = False
        zookeeper_auth = resolve_zk_auth(  # ZooKeeper SASL login and znode ACLs (zk_auth.py)
            username=config.zookeeper_sasl_username, password=config.zookeeper_sasl_password,
            jaas_file=config.zookeeper_sasl_jaas_file,
            jaas_section=config.zookeeper_sasl_clientconfig,
            shared_jaas_file=config.sasl_jaas_file, set_acl=config.zookeeper_set_acl,
            tls=zk_tls_of(config))  # TLS to ZooKeeper (catalog/zk_tls.py)
        catalog = ClusterCatalog(config.zookeeper_connect,
                                 session_timeout=config.zookeeper_session_timeout_ms / 1000,
                                 auth=zookeeper_auth)
        self.metrics = BrokerMetrics()  # recorded always; served with metrics.listener
        self.metrics_endpoint: MetricsEndpoint | None = None
        if config.metrics_listener is not None:
            self.metrics_endpoint = MetricsEndpoint(self.metrics.registry,
                                                    *config.metrics_listener)
        self.zk = ZkSession(catalog, broker_id=config.broker_id, stopped=self._is_stopping,
                            call_seconds=self.metrics.zookeeper.observe_call)
        self.state_counters = StateCounters(self.metrics.registry)  # ISR changes, tiering
        self.metadata = MetadataCache()
        self.logs = LogManager(config.log_dir)
        self.replication_quotas = ReplicationQuotas(config.broker_id)
        self.broker_configs = DynamicBrokerConfig(config, self.replication_quotas)
        link = InterBrokerLink(config.inter_broker_listener, client_security_from_config(config))
        self.fetchers = ReplicaFetcherManager(broker_id=config.broker_id, metadata=self.metadata,
                                              quotas=self.replication_quotas, link=link)
        self.controller = Controller(self.zk, self.metadata, config)
        self.groups = GroupCoordinator(self.zk, self.metadata, config)
        self.replicas: ReplicaManager
        self.tierer = Tierer(
            config, zookeeper=self.zk, hosted=lambda: self.replicas.partitions,
            topic_config=lambda topic: self.metadata.topic_configs.get(topic), clock=clock,
            stopping=self._is_stopping, counters=self.state_counters)
        self.replicas = ReplicaManager(config, metadata=self.metadata,
                                       lease_valid=self.zk.healthy, tier=self.tierer,
                                       quotas=self.replication_quotas, clock=clock,
                                       topic_metrics=self.metrics.topics,
                                       schema_validation=SchemaValidation.over_store(
                                           self.zk.call, SchemaStore(catalog.zk)))
        self.replica_states = ReplicaStates(
            broker_id=config.broker_id, replicas=self.replicas, logs=self.logs,
            metadata=self.metadata, fetchers=self.fetchers, zk=self.zk, spawn=self._spawn,
            stopping=self._is_stopping, on_roll=self.tierer.poke, clock=clock)
        self.topic_sync = TopicSync(
            config, zk=self.zk, metadata=self.metadata, replica_states=self.replica_states,
            controller=self.controller, forget_topic=self._forget_topic,
            spawn=self._spawn, stopping=self._is_stopping)
        self.isr = IsrManager(
            broker_id=config.broker_id, replica_lag_time_max_ms=config.replica_lag_time_max_ms,
            replicas=self.replicas, metadata=self.metadata, zk=self.zk,
            on_written=self.topic_sync.on_state, counters=self.state_counters)
        self.producer_ids = ProducerIds(self.zk, config.broker_id)
        self.transactions = TransactionCoordinator(
            self.zk, self.metadata, config, allocate_producer_id=self.producer_ids.allocate,
            markers=MarkerSender(broker_id=config.broker_id, metadata=self.metadata,
                                 group_coordinator_for=self.groups.coordinator_for,
                                 offsets_partition_for=txn_offsets.offsets_partition_for,
                                 link=link),
            clock=clock)
        self.authorizer: Authorizer = AllowAllAuthorizer()
        self.acl_sync: AclSync | None = None  # with authorizer.class.name: ACLs from ZooKeeper
        if config.authorizer_class_name:
            acl_authorizer = AclAuthorizer.from_config(config)
            self.authorizer = acl_authorizer
            self.acl_sync = AclSync(self.zk, acl_authorizer, stopping=self._is_stopping)
        self.quotas = ClientQuotas(
            samples=config.quota_window_num, window_s=config.quota_window_size_seconds,
            controller_samples=config.controller_quota_window_num,
            controller_window_s=config.controller_quota_window_size_seconds)
        self.quota_sync = QuotaConfigSync(self.zk, self.quotas, stopping=self._is_stopping,
                                          credentials=CredentialCacheFeed(self.zk.catalog))
        self.services = BrokerServices(
            config=config, zk=self.zk, metadata=self.metadata, replicas=self.replicas,
            groups=self.groups, controller=self.controller, tierer=self.tierer,
            replication_quotas=self.replication_quotas, producer_ids=self.producer_ids,
            topic_admin=self.topic_sync, broker_configs=self.broker_configs,
            transactions=self.transactions, clock=clock, authorizer=self.authorizer,
            quotas=self.quotas)
        # state metrics, read from the parts on the loop at scrape time
        self.metrics.register_collector(ReplicationCollector(
            hosted=lambda: self.replicas.partitions, metadata=self.metadata,
            controller_active=lambda: self.controller.active,
            log_start=self.tierer.known_log_start))
        self.metrics.register_collector(ConsumerLagCollector(
            committed=self.groups.committed_offsets, hosted=lambda: self.replicas.partitions))
        self.metrics.register_collector(TierCollector(
            state=self.tierer.state, hosted=lambda: self.replicas.partitions,
            tiered=self.tierer.tiered, clock=clock))
        self.metrics.register_collector(QuotaCollector(self.quotas))
        self.metrics.register_collector(TransactionCollector(self.transactions,
                                                             self.transactions.markers.counts))
        self._tasks: list[asyncio.Future[Any]] = []
        self._running = False  # start() finished
        self._rejoin: asyncio.Future[None] | None = None
        self._rejoin_needed = False  # a reconnect came while starting or rejoining

    @property
    def catalog(self) -> ClusterCatalog:
        return self.zk.catalog

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
        self.config.log_dir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(self.logs.sweep)
        await self.zk.start()
        self.zk.add_listener(self._on_zk_state)
        self.metrics.zookeeper.set_state("connected")
        self.zk.add_listener(self.metrics.zookeeper.on_session_event)
        if self.metrics_endpoint is not None:  # bound before _register publishes its URL
            await self.metrics_endpoint.start()
        self.metadata.cluster_id = await self.zk.step("reading the cluster id",
                                                      self.catalog.ensure_cluster_id)
        if self.acl_sync is not None:  # decisions need the ACLs before anyone can ask
            await self.acl_sync.start()
            self._tasks.append(asyncio.create_task(self.acl_sync.run()))
        await self.quota_sync.start()  # client quotas apply from the first request
        self._tasks.append(asyncio.create_task(self.quota_sync.run()))
        await self.zk.call(self._register)
        self.zk.renew_lease()
        await self.topic_sync.watch_cluster()
        await self.broker_configs.watch(self.zk)
        await self.topic_sync.refresh_brokers()
        await self.topic_sync.reconcile_waiting()
        await self.topic_sync.watch_topics()
        storage = self.tierer.storage
        if storage is not None:  # the tierer publishes too, but only tries once
            await self.zk.step("publishing the tier storage", self.catalog.publish_storage,
                               storage.url, dict(storage.options))
        for coroutine in (self.replicas.flush_loop(), self.zk.lease_loop(self._on_not_registered),
                          self.isr.run(), self.controller.run(), self.groups.run(),
                          self.tierer.run(), self.transactions.run(),
                          self.metrics.event_loop.run()):
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
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.transactions.shutdown(), SHUTDOWN_HANDOVER_S)
        await self.fetchers.shutdown()
        self.tierer.close()
        self.replica_states.close_all()
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.stop()
        await self.zk.close()

    def _is_stopping(self) -> bool:
        return self.stopping

    def _forget_topic(self, topic: str) -> None:
        """``topic`` was deleted: stop tiering it and drop its per-topic traffic counters
        (Kafka's BrokerTopicStats.removeMetrics)."""
        self.tierer.forget_topic(topic)
        self.metrics.topics.forget_topic(topic)

    def _spawn(self, awaitable: Coroutine[Any, Any, T] | asyncio.Future[T]) -> asyncio.Future[T]:
        """Run ``awaitable`` as a task that :meth:`stop` cancels (finished ones are dropped)."""
        self._tasks = [task for task in self._tasks if not task.done()]
        task = asyncio.ensure_future(awaitable)
        self._tasks.append(task)
        return task

    async def _controlled_shutdown(self) -> None:
        """Hand our leaderships to other live in-sync replicas and leave the ISRs (Kafka's
        controlled shutdown, written by this broker: version-checked, same as an ISR write),
        then give the new leaders a moment to take over before our connections close."""
        if not self.zk.healthy():
            return
        # stop fetching first: a fetch after we left an ISR would let the leader add us back
        await self.fetchers.shutdown()
        partitions = self.replicas.partitions
        live = set(self.metadata.live_brokers)
        views = [
            election.PartitionView(p.topic, p.index, p.replicas, p.state)
            for p in partitions.values() if p.state is not None
        ]
        for write in election.shutdown_moves(views, self.config.broker_id, live):
            try:
                await self.zk.call(self.catalog.update_partition_state, write.topic,
                                   write.partition, write.state)
                log.warning("%s-%d: %s", write.topic, write.partition, write.reason)
            except StaleStateError:
                continue
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(
            p.role is Role.LEADER and len(p.replicas) > 1 and len(p.isr) > 1
            for p in partitions.values()
        ):
            await asyncio.sleep(0.1)

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
        """Register again (a new session lost our ephemeral node), republish our offline
        replicas, then re-read the brokers, every partition state and the topics (watches may
        have missed changes). Retries the whole sequence with bounded backoff until it
        succeeds or the broker stops."""
        failures = 0
        while not self.stopping:
            self._rejoin_needed = False
            try:
                await self.zk.call(self._register)
                self.zk.renew_lease()
                await self.replica_states.republish_offline()  # went with the old session
                await self.topic_sync.refresh_brokers()
                await self.topic_sync.reload_all_states()
                await self.topic_sync.reconcile_waiting()
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
        endpoints = advertised_endpoints(self.config)
        info = BrokerInfo(self.config.broker_id, endpoints[0].host, endpoints[0].port,
                          self.config.rack, endpoints=endpoints)
        self.catalog.register_broker_waiting(info, stopped=self._is_stopping)
        if self.metrics_endpoint is not None:  # ephemeral: again with every new session
            self.catalog.publish_metrics_url(self.config.broker_id, self.metrics_endpoint.url)
