"""Test harness: real ZooKeeper and broker processes with named faults, for pytest.

Usage in a test module or conftest::

    from loglake.dev.harness import DevCluster, zookeeper

    @pytest.fixture
    def cluster(tmp_path):
        with DevCluster(tmp_path / "cluster", brokers=3) as dev:
            yield dev            # dev.bootstrap_servers, dev.kill_broker(2), ...

    @pytest.fixture
    def zk(tmp_path):
        with zookeeper(tmp_path / "zk") as server:
            yield server          # server.hosts == "127.0.0.1:<port>"

    # one ZooKeeper JVM for many clusters, each under a fresh chroot (kazoo's harness does this)
    with zookeeper(tmp / "zk") as server:
        with DevCluster(tmp / "a", brokers=3, zookeeper=server.hosts) as dev:
            dev.create_topic("t", partitions=3, replication_factor=3)   # leaders + full ISR
            wait_until(lambda: ..., timeout=10, message="what we waited for")

A cluster on a shared ZooKeeper cannot fault ZooKeeper itself (``kill_zookeeper`` and friends
raise :class:`ClusterStateError`): tests that pause or stop ZooKeeper start their own.

Ports come from :func:`free_port_block` unless given, so tests can run next to a developer's own
dev cluster and next to each other. Cleanup (``__exit__``) stops exactly the processes this
harness started (pid + start time, via the cluster's state file), paused ones included, and
keeps the directory so a failing test's logs can be read (:meth:`DevCluster.broker_log`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TypeVar, overload

from loglake.dev import cluster, net, process
from loglake.dev.cluster import ClusterInfo, ProcessStatus
from loglake.dev.errors import ClusterStateError, StartupError
from loglake.dev.net import free_port_block
from loglake.dev.secure import Security
from loglake.dev.zookeeper import DEFAULT_TICK_TIME_MS, ZooKeeperServer

__all__ = ["DevCluster", "free_port_block", "wait_until", "wait_until_async", "zookeeper"]

T = TypeVar("T")

DEFAULT_WAIT_INTERVAL_S = 0.1


def wait_until(
    predicate: Callable[[], T], timeout: float, message: str | Callable[[], str], *,
    interval: float = DEFAULT_WAIT_INTERVAL_S,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``predicate()`` every ``interval`` seconds until it returns something truthy; return
    that value.

    After ``timeout`` seconds (the predicate is always called at least once, and once more at
    the deadline) raise AssertionError with ``message`` (a string, or a callable evaluated then),
    the bound and the last value returned. Exceptions of the types in ``ignore`` count as "not
    yet" (the last one is reported); any other exception propagates at once.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        expired = time.monotonic() >= deadline
        try:
            value = predicate()
        except ignore as exc:
            last = exc
        else:
            if value:
                return value
            last = value
        if expired:
            text = message() if callable(message) else message
            raise AssertionError(f"{text} (not within {timeout:g}s; last: {last!r})")
        time.sleep(max(0.0, min(interval, deadline - time.monotonic())))


@overload
async def wait_until_async(
    predicate: Callable[[], Awaitable[T]], timeout: float, message: str | Callable[[], str], *,
    interval: float = DEFAULT_WAIT_INTERVAL_S,
) -> T: ...


@overload
async def wait_until_async(
    predicate: Callable[[], T], timeout: float, message: str | Callable[[], str], *,
    interval: float = DEFAULT_WAIT_INTERVAL_S,
) -> T: ...


async def wait_until_async(
    predicate: Callable[[], object], timeout: float, message: str | Callable[[], str], *,
    interval: float = DEFAULT_WAIT_INTERVAL_S,
) -> object:
    """:func:`wait_until` inside a coroutine: call ``predicate()`` (awaiting its result if it is
    awaitable) every ``interval`` seconds, sleeping with ``asyncio.sleep`` so the event loop
    keeps running, until it returns something truthy; return that. AssertionError after
    ``timeout`` seconds as there."""
    deadline = time.monotonic() + timeout
    while True:
        expired = time.monotonic() >= deadline
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if expired:
            text = message() if callable(message) else message
            raise AssertionError(f"{text} (not within {timeout:g}s; last: {value!r})")
        await asyncio.sleep(max(0.0, min(interval, deadline - time.monotonic())))


TEST_BROKER_DEFAULTS: dict[str, str] = {
    "zookeeper.session.timeout.ms": "6000",
    "log.retention.check.interval.ms": "1000",
}
"""Broker settings the harness applies unless overridden: a killed broker's ephemeral znode
expires after 6 s instead of Kafka's 18 s, so kill-and-restart tests do not wait that long
(ZooKeeper's default tickTime of 2 s allows sessions of 4 to 40 s); retention is checked every
second instead of every 5 minutes."""


class DevCluster:
    """A dev cluster for one test: ``up`` on enter, ``down`` on exit, faults in between.

    Brokers get :data:`TEST_BROKER_DEFAULTS` unless ``broker_overrides`` says otherwise.

    Not thread-safe: drive it from the test's thread.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        brokers: int = 1,
        base_port: int | None = None,
        zookeepers: int = 1,
        zookeeper_port: int | None = None,
        broker_overrides: dict[str, str] | None = None,
        storage: str | None = None,
        start_timeout: float = cluster.DEFAULT_START_TIMEOUT_S,
        stop_timeout: float = cluster.DEFAULT_STOP_TIMEOUT_S,
        zookeeper: str | None = None,
        chroot: str | None = None,
        security: Security | None = None,
        registry: bool = False,
        zookeeper_auth: bool | None = None,
    ) -> None:
        """``zookeeper``: connection string (no chroot) of a running ZooKeeper to use instead of
        starting one; the brokers then live under ``chroot`` (default: a fresh
        ``/loglake-<random>``, so clusters sharing one ZooKeeper never see each other).
        ``security="sasl_ssl"``: a secured cluster (see ``cluster.up``); :meth:`client_config`
        then holds the admin's settings, which the harness's own admin calls use.
        ``registry``: also run a schema registry (``loglake registry``) on the base port +
        ``cluster.REGISTRY_PORT_OFFSET``: :attr:`registry_url` (HTTPS + basic auth as the
        admin when secured: :meth:`registry_config`). ``zookeeper_auth``: ZooKeeper with SASL
        and Kafka's znode ACLs (default: on for a secured cluster with its own ZooKeeper; see
        ``cluster.up``); :meth:`tool_env` then holds the ZooKeeper login of tools."""
        if zookeeper is not None and zookeepers != 1:
            raise ValueError("an external ZooKeeper replaces the cluster's own ensemble")
        zk_ports = 0 if zookeeper is not None else 1 if zookeepers == 1 else 3 * zookeepers
        if base_port is None or zookeeper_port is None:
            # one block for everything, so the broker and ZooKeeper ranges cannot overlap
            first = free_port_block(brokers + zk_ports, also=[
                index + offset for index in range(brokers)
                for offset in cluster.listener_port_offsets(broker_overrides)]
                + ([cluster.REGISTRY_PORT_OFFSET] if registry else []))
            base_port = first if base_port is None else base_port
            zookeeper_port = first + brokers if zookeeper_port is None else zookeeper_port
        self.data_dir = Path(data_dir).absolute()
        self.brokers = brokers
        self.base_port = base_port
        self.zookeepers = zookeepers
        self.zookeeper_port = zookeeper_port
        self.external_zookeeper = zookeeper
        self.requested_chroot = chroot if chroot is not None else (
            cluster.CHROOT if zookeeper is None else f"/loglake-{uuid.uuid4().hex[:12]}")
        self.broker_overrides = {**TEST_BROKER_DEFAULTS, **(broker_overrides or {})}
        if storage is not None:
            self.broker_overrides["remote.log.storage.url"] = storage
        self.storage_url = self.broker_overrides.get(
            "remote.log.storage.url", str(self.data_dir / cluster.DEFAULT_STORAGE_DIR))
        """Where the brokers tier to (``storage`` or the default folder under the data dir)."""
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.security = security
        self.registry = registry
        self.zookeeper_auth = zookeeper_auth
        self._info: ClusterInfo | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> DevCluster:
        """Start ZooKeeper and all brokers; return once every one answers (see cluster.up)."""
        self._info = cluster.up(
            self.data_dir, brokers=self.brokers, base_port=self.base_port,
            zookeeper_port=self.zookeeper_port, zookeepers=self.zookeepers,
            broker_overrides=self.broker_overrides or None, timeout=self.start_timeout,
            external_zookeeper=self.external_zookeeper, chroot=self.requested_chroot,
            security=self.security, registry=self.registry, zookeeper_auth=self.zookeeper_auth)
        return self

    def stop(self) -> None:
        """Stop every process this harness started (brokers, then ZooKeeper); keep the data."""
        if self._info is not None:
            self._info = None
            with contextlib.suppress(ClusterStateError):  # already down
                cluster.down(self.data_dir, timeout=self.stop_timeout)

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- connection strings ---------------------------------------------------------------------

    @property
    def info(self) -> ClusterInfo:
        if self._info is None:
            raise ClusterStateError("the dev cluster is not started")
        return self._info

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>,...`` of all brokers."""
        return self.info.bootstrap_servers

    @property
    def zookeeper_hosts(self) -> str:
        """ZooKeeper connection string without chroot (the whole tree)."""
        return self.info.zookeeper_hosts

    @property
    def zookeeper_connect(self) -> str:
        """ZooKeeper connection string with the brokers' chroot (what brokers use)."""
        return self.info.zookeeper_connect

    @property
    def chroot(self) -> str:
        return self.info.chroot

    @property
    def registry_url(self) -> str:
        """The schema registry's base URL (``DevCluster(registry=True)``)."""
        url = self.info.registry_url
        if url is None:
            raise ClusterStateError("this dev cluster runs no schema registry: "
                                    "DevCluster(..., registry=True)")
        return url

    def registry_config(self) -> dict[str, str]:
        """confluent-kafka ``SchemaRegistryClient`` settings reaching the registry (for a
        secured cluster: the cluster's CA and the admin's basic auth user info)."""
        config = {"url": self.registry_url}
        path = self.info.client_properties
        if path is not None:
            from loglake.client.security import read_properties

            props = read_properties(path)
            config["ssl.ca.location"] = props["ssl.ca.location"]
            config["basic.auth.user.info"] = f"{props['sasl.username']}:{props['sasl.password']}"
        return config

    def broker_port(self, broker_id: int) -> int:
        return self.info.broker_ports[broker_id - 1]

    def status(self) -> list[ProcessStatus]:
        return cluster.status(self.data_dir)

    @property
    def client_properties(self) -> Path | None:
        """The admin's client properties file (librdkafka form) of a secured cluster."""
        return self.info.client_properties

    def tool_env(self) -> dict[str, str]:
        """Environment variables a loglake tool (subprocess) needs to log in to this cluster's
        ZooKeeper (``LOGLAKE_ZOOKEEPER_SASL_JAAS_FILE``); empty without ZooKeeper auth."""
        return self.info.tool_env()

    def zookeeper_sasl_options(self) -> dict[str, str] | None:
        """kazoo's ``sasl_options`` of the cluster's ZooKeeper user (None without ZooKeeper
        auth): what the harness's own ZooKeeper clients log in with."""
        path = self.info.zookeeper_jaas_file
        if path is None:
            return None
        from loglake.catalog.zk_auth import resolve_zk_auth

        return resolve_zk_auth(jaas_file=path, environ={}).sasl_options()

    def client_config(self) -> dict[str, str | int | float | bool]:
        """librdkafka settings reaching this cluster (bootstrap servers; for a secured cluster
        also the admin's security settings, from its client properties file)."""
        config: dict[str, str | int | float | bool] = {"bootstrap.servers": self.bootstrap_servers}
        path = self.info.client_properties
        if path is not None:
            from loglake.client.security import SecurityConfig

            config.update(SecurityConfig.load(path).librdkafka())
        return config

    # -- topics ---------------------------------------------------------------------------------

    def create_topic(
        self, name: str, *, partitions: int = 1, replication_factor: int = 1,
        configs: Mapping[str, str] | None = None, wait_isr: bool = True, timeout: float = 30.0,
    ) -> None:
        """Create ``name`` through CreateTopics (confluent-kafka's AdminClient).

        With ``wait_isr`` return only once every partition has a leader and a full ISR (all
        assigned replicas) in ZooKeeper and the brokers' Metadata shows every partition with a
        leader (see :meth:`wait_topic_ready`). Each wait is bounded by ``timeout`` seconds.
        """
        from confluent_kafka.admin import AdminClient, NewTopic  # heavy import

        admin = AdminClient(self.client_config())
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                      config=dict(configs or {}))],
            operation_timeout=timeout, request_timeout=timeout)
        futures[name].result(timeout=timeout)
        if wait_isr:
            self.wait_topic_ready(name, partitions=partitions, timeout=timeout)

    def wait_topic_ready(self, name: str, *, partitions: int, timeout: float = 30.0) -> None:
        """Return once each of the ``partitions`` partitions of ``name`` has a leader and every
        assigned replica in its ISR (ZooKeeper state) and Metadata reports every partition with
        a leader. AssertionError (with the last state seen) after ``timeout`` seconds."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError

        zk = KazooClient(hosts=self.zookeeper_connect, timeout=timeout,
                         sasl_options=self.zookeeper_sasl_options())
        zk.start(timeout=timeout)
        admin = AdminClient(self.client_config())

        def zookeeper_ready() -> str:
            """Empty once ready, else what is missing."""
            try:
                assignment = json.loads(zk.get(f"/brokers/topics/{name}")[0])["partitions"]
                for index in range(partitions):
                    raw, _ = zk.get(f"/brokers/topics/{name}/partitions/{index}/state")
                    state = json.loads(raw)
                    replicas = assignment[str(index)]
                    if state["leader"] < 0 or sorted(state["isr"]) != sorted(replicas):
                        return f"partition {index}: state {state}, replicas {replicas}"
            except (NoNodeError, KeyError) as exc:
                return f"not in ZooKeeper yet ({exc!r})"
            return ""

        def metadata_ready() -> str:
            topic = admin.list_topics(name, timeout=5).topics.get(name)
            if topic is None or topic.error is not None:
                return f"metadata: {topic.error if topic is not None else 'no topic'}"
            missing = [index for index in range(partitions)
                       if index not in topic.partitions or topic.partitions[index].leader < 0]
            return f"metadata: no leader for partitions {missing}" if missing else ""

        try:
            last = {"state": ""}

            def ready() -> bool:
                last["state"] = zookeeper_ready() or metadata_ready()
                return not last["state"]

            wait_until(ready, timeout,
                       lambda: f"topic {name} not ready in {self.zookeeper_connect}: "
                               f"{last['state']}", interval=0.1, ignore=(KafkaException,))
        finally:
            zk.stop()
            zk.close()

    def broker_log(self, broker_id: int) -> str:
        """Everything broker ``broker_id`` wrote to stdout/stderr so far (all its runs)."""
        return self._log(f"broker-{broker_id}.log")

    def zookeeper_log(self, node: int = 1) -> str:
        return self._log(f"zookeeper-{node}.log")

    def _log(self, name: str) -> str:
        path = self.data_dir / "logs" / name
        return path.read_text(errors="replace") if path.exists() else ""

    # -- faults ---------------------------------------------------------------------------------

    def kill_broker(self, broker_id: int) -> None:
        """SIGKILL the broker; returns when the process is gone (no graceful shutdown)."""
        cluster.kill_broker(self.data_dir, broker_id)

    def stop_broker(self, broker_id: int) -> None:
        """SIGTERM the broker (SIGKILL after the stop timeout); returns when it is gone."""
        cluster.stop_broker(self.data_dir, broker_id, timeout=self.stop_timeout)

    def start_broker(self, broker_id: int, *, wait: bool = True) -> None:
        """Start a stopped/killed broker; with ``wait``, return once it answers ApiVersions
        (else at once: see :meth:`wait_broker_ready`)."""
        cluster.start_broker(self.data_dir, broker_id, wait=wait, timeout=self.start_timeout)

    def broker_alive(self, broker_id: int) -> bool:
        """Whether the broker's recorded process runs (paused counts as running)."""
        return any(s.alive for s in self.status() if s.role == "broker" and s.id == broker_id)

    def wait_broker_ready(self, broker_id: int, *, timeout: float) -> None:
        """Return once the broker answers ApiVersions (it has registered and listens).

        Raises StartupError (with its log tail) if its process exits first or ``timeout``
        seconds pass."""
        deadline = time.monotonic() + timeout
        log_path = self.data_dir / "logs" / f"broker-{broker_id}.log"
        while not net.kafka_api_versions_ok(self.broker_port(broker_id)):
            if not self.broker_alive(broker_id):
                raise StartupError(f"broker-{broker_id} exited during startup",
                                   log_path=log_path, log_tail=process.log_tail(log_path))
            if time.monotonic() >= deadline:
                raise StartupError(f"broker-{broker_id} did not answer ApiVersions within "
                                   f"{timeout:g}s", log_path=log_path,
                                   log_tail=process.log_tail(log_path))
            time.sleep(0.2)

    def restart_broker(self, broker_id: int) -> None:
        """Stop the broker if it runs (gracefully, even if paused), start it, wait until it
        answers ApiVersions."""
        self.stop_broker(broker_id)
        self.start_broker(broker_id)

    def pause_broker(self, broker_id: int) -> None:
        """SIGSTOP the broker: connections stay open but nothing is answered."""
        cluster.pause_broker(self.data_dir, broker_id)

    def resume_broker(self, broker_id: int) -> None:
        cluster.resume_broker(self.data_dir, broker_id)

    def kill_registry(self) -> None:
        """SIGKILL the schema registry; returns when the process is gone."""
        cluster.kill_process(self.data_dir, "registry", 1)

    def start_registry(self) -> None:
        """Start the killed/stopped schema registry again; returns once it answers."""
        cluster.start_process(self.data_dir, "registry", 1, timeout=self.start_timeout)

    def registry_log(self) -> str:
        return self._log("registry.log")

    def kill_zookeeper(self, node: int = 1) -> None:
        cluster.kill_zookeeper(self.data_dir, node)

    def stop_zookeeper(self, node: int = 1) -> None:
        cluster.stop_zookeeper(self.data_dir, node, timeout=self.stop_timeout)

    def start_zookeeper(self, node: int = 1) -> None:
        """Start a stopped ZooKeeper member; returns once it serves clients."""
        cluster.start_zookeeper(self.data_dir, node, timeout=self.start_timeout)

    def restart_zookeeper(self, node: int = 1) -> None:
        self.stop_zookeeper(node)
        self.start_zookeeper(node)

    def pause_zookeeper(self, node: int = 1) -> None:
        cluster.pause_zookeeper(self.data_dir, node)

    def resume_zookeeper(self, node: int = 1) -> None:
        cluster.resume_zookeeper(self.data_dir, node)


@contextlib.contextmanager
def zookeeper(
    directory: Path, *, port: int | None = None, tick_time_ms: int = DEFAULT_TICK_TIME_MS,
    timeout: float = 30.0,
) -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper on a free port (or ``port``) for the ``with`` block.

    Yields once it serves clients; on exit stops the JVM it started (SIGTERM, then SIGKILL).
    """
    server = ZooKeeperServer(Path(directory), client_port=port or free_port_block(1),
                             tick_time_ms=tick_time_ms)
    server.start(timeout=timeout)
    try:
        yield server
    finally:
        server.stop()
