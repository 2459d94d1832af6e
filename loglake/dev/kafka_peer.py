"""Apache Kafka (3.9, ZooKeeper mode) as a test and benchmark peer: broker JVMs on loopback.

A :class:`KafkaPeer` starts ``brokers`` Apache Kafka brokers (``kafka.Kafka``, jars of the
``kafka`` set fetched by ``python -m loglake.jvm fetch kafka``) on an EXISTING ZooKeeper ensemble,
under a chroot of their own (``zookeeper.connect=<hosts>/<chroot>``; Kafka creates the chroot), so
the peer shares ZooKeeper with loglake clusters without seeing their znodes.

Settings: Kafka's own defaults (``log.flush.*`` unset: flushing is left to the OS, as loglake
does), plus only what a multi-broker loopback cluster needs: ``broker.id``, one PLAINTEXT
listener on 127.0.0.1, ``log.dirs`` under the data dir, the internal topics' replication factor
and ``min.insync.replicas`` sized to the broker count (Kafka's defaults, 3 and 2, when there
are 3 brokers), and ``group.initial.rebalance.delay.ms=0`` as Kafka's shipped
``config/server.properties`` sets it, and ``controlled.shutdown.retry.backoff.ms=1000`` (Kafka:
5000; shutdown only: when every broker stops at once the last one has nowhere to move its
leaders and retries three times before it exits). ``overrides`` (values may hold ``{id}`` and
``{port}``) replace or add settings. JVM: Kafka's ``kafka-run-class`` performance options with
a smaller heap (``-Xmx512m`` by default: several JVMs share a small box).

Layout of ``data_dir``: ``broker-<id>/server.properties``, ``broker-<id>/logs/`` (the log dirs),
``broker-<id>/server.log`` (stdout + stderr of the JVM, log4j to the console),
``log4j.properties``.

Processes: started detached (:mod:`loglake.dev.process`), remembered by (pid, start time); stop
and kill signal only those. :meth:`KafkaPeer.stop` sends SIGTERM (controlled shutdown) to every
broker at once and SIGKILLs what is left after the grace period. Ports come from
:func:`loglake.dev.net.free_port_block` unless ``base_port`` is given (broker ``i`` listens on
``base_port + i - 1``).

Not thread-safe: drive one peer from one thread.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from loglake import jvm
from loglake.dev import net, process
from loglake.dev.errors import ClusterStateError, MissingDependencyError, StartupError
from loglake.dev.process import ProcessHandle
from loglake.dev.zookeeper import find_java

KAFKA_MAIN = "kafka.Kafka"
KAFKA_VERSION = "3.9.2"
"""The version the ``kafka`` jar set pins (jvm/kafka/pom.xml)."""

DEFAULT_HEAP = "512m"
DEFAULT_START_TIMEOUT_S = 120.0
DEFAULT_STOP_GRACE_S = 30.0

JVM_PERFORMANCE_OPTIONS = (
    "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true",
)
"""``KAFKA_JVM_PERFORMANCE_OPTS`` of Kafka's ``bin/kafka-run-class.sh``."""

LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.controller=INFO
log4j.logger.kafka.log.LogCleaner=INFO
"""

TOOLS_LOG4J_PROPERTIES = """\
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.stderr.Target=System.err
"""


def classpath() -> str:
    """``<kafka set dir>/*``; raises :class:`MissingDependencyError` when the set is absent."""
    if not jvm.available("kafka"):
        raise MissingDependencyError(
            f"the Apache Kafka jars are not fetched (no complete {jvm.set_dir('kafka')})",
            hint="run `python -m loglake.jvm fetch kafka` (needs Maven)")
    return str(jvm.set_dir("kafka") / "*")


def java_command(main_class: str, args: Sequence[str] = (), *, heap: str = "256m",
                 jvm_options: Sequence[str] = (), extra_classpath: Sequence[str] = (),
                 log4j: Path | None = None) -> list[str]:
    """A command line running ``main_class`` of the kafka set (a tool, Connect, Streams app).

    ``log4j``: a log4j 1 properties file (reload4j); default: the jars' own, which is silent.
    ``extra_classpath`` entries come first (e.g. an application jar).
    """
    entries = [*extra_classpath, classpath()]
    logging = [f"-Dlog4j.configuration=file:{log4j}"] if log4j is not None else []
    return [str(find_java()), f"-Xmx{heap}", *JVM_PERFORMANCE_OPTIONS, *logging, *jvm_options,
            "-cp", os.pathsep.join(entries), main_class, *args]


def tools_log4j(directory: Path) -> Path:
    """Write (once) a log4j file sending WARN and above to stderr, for the command-line tools,
    whose stdout is their result; return its path."""
    path = Path(directory) / "tools-log4j.properties"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(TOOLS_LOG4J_PROPERTIES)
    return path


class KafkaPeer:
    """``brokers`` Apache Kafka brokers on ``zookeeper`` under their own chroot.

    Usage::

        with KafkaPeer(tmp / "kafka", zookeeper=zookeeper_hosts) as peer:
            peer.bootstrap_servers            # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
            peer.create_topic("t", partitions=3, replication_factor=3)
            peer.kill_broker(2); peer.start_broker(2)
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        zookeeper: str,
        brokers: int = 3,
        chroot: str | None = None,
        base_port: int | None = None,
        overrides: Mapping[str, str] | None = None,
        heap: str = DEFAULT_HEAP,
        start_timeout: float = DEFAULT_START_TIMEOUT_S,
        stop_grace: float = DEFAULT_STOP_GRACE_S,
    ) -> None:
        """``zookeeper``: connection string (no chroot) of a running ensemble. ``chroot``:
        default a fresh ``/kafka-peer-<random>``."""
        if brokers < 1:
            raise ValueError("a Kafka peer needs at least one broker")
        if "/" in zookeeper:
            raise ValueError(f"zookeeper must be hosts without a chroot, got {zookeeper!r}")
        self.data_dir = Path(data_dir).absolute()
        self.zookeeper_hosts = zookeeper
        self.chroot = chroot if chroot is not None else f"/kafka-peer-{uuid.uuid4().hex[:12]}"
        if not self.chroot.startswith("/") or self.chroot == "/":
            raise ValueError(f"chroot must be an absolute znode path, got {self.chroot!r}")
        self.brokers = brokers
        self.base_port = base_port if base_port is not None else net.free_port_block(brokers)
        self.overrides = dict(overrides or {})
        self.heap = heap
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        self._handles: dict[int, ProcessHandle] = {}

    # -- addresses ------------------------------------------------------------------------------

    @property
    def broker_ids(self) -> list[int]:
        return list(range(1, self.brokers + 1))

    def broker_port(self, broker_id: int) -> int:
        self._check_id(broker_id)
        return self.base_port + broker_id - 1

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{net.LOOPBACK}:{self.broker_port(b)}" for b in self.broker_ids)

    @property
    def zookeeper_connect(self) -> str:
        """``hosts/chroot``: what the brokers use (and ``kafka-configs --zookeeper`` would)."""
        return f"{self.zookeeper_hosts}{self.chroot}"

    def client_config(self) -> dict[str, str | int | float | bool]:
        """confluent-kafka settings reaching the peer."""
        return {"bootstrap.servers": self.bootstrap_servers}

    # -- files ----------------------------------------------------------------------------------

    def broker_dir(self, broker_id: int) -> Path:
        self._check_id(broker_id)
        return self.data_dir / f"broker-{broker_id}"

    def log_path(self, broker_id: int) -> Path:
        return self.broker_dir(broker_id) / "server.log"

    def broker_log(self, broker_id: int, *, lines: int = 60) -> str:
        """The tail of broker ``broker_id``'s log (empty before it started)."""
        return process.log_tail(self.log_path(broker_id), lines=lines)

    def server_properties(self, broker_id: int) -> dict[str, str]:
        """The settings broker ``broker_id`` runs with (Kafka's defaults + see module doc)."""
        port = self.broker_port(broker_id)
        replicas = str(min(3, self.brokers))
        min_isr = str(min(2, self.brokers))
        settings = {
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://{net.LOOPBACK}:{port}",
            "advertised.listeners": f"PLAINTEXT://{net.LOOPBACK}:{port}",
            "log.dirs": str(self.broker_dir(broker_id) / "logs"),
            "zookeeper.connect": self.zookeeper_connect,
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": "0",
            "controlled.shutdown.retry.backoff.ms": "1000",
        }
        for key, value in self.overrides.items():
            settings[key] = value.replace("{id}", str(broker_id)).replace("{port}", str(port))
        return settings

    def _write_files(self, broker_id: int) -> Path:
        directory = self.broker_dir(broker_id)
        (directory / "logs").mkdir(parents=True, exist_ok=True)
        log4j = self.data_dir / "log4j.properties"
        if not log4j.is_file():
            log4j.write_text(LOG4J_PROPERTIES)
        path = directory / "server.properties"
        path.write_text("".join(f"{key}={value}\n"
                                for key, value in self.server_properties(broker_id).items()))
        return path

    def command(self, broker_id: int) -> list[str]:
        """The broker JVM's command line (raises MissingDependencyError without java/jars)."""
        config = self._write_files(broker_id)
        return java_command(
            KAFKA_MAIN, [str(config)], heap=self.heap,
            log4j=self.data_dir / "log4j.properties",
            jvm_options=[f"-Xms{self.heap}", f"-Dkafka.logs.dir={self.broker_dir(broker_id)}"])

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> KafkaPeer:
        """Start every broker; return once each answers and sees all brokers in Metadata.

        On failure (a JVM exits or the wait times out) every broker this peer started is killed
        and :class:`StartupError` is raised with the failing broker's log tail.
        """
        try:
            for broker_id in self.broker_ids:
                self.start_broker(broker_id, wait=False)
            deadline = time.monotonic() + self.start_timeout
            for broker_id in self.broker_ids:
                self.wait_broker_ready(broker_id, timeout=max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.kill()
            raise
        return self

    def start_broker(self, broker_id: int, *, wait: bool = True) -> None:
        """Start broker ``broker_id`` (refused while it runs or its port is taken)."""
        if self.broker_alive(broker_id):
            raise ClusterStateError(f"Kafka broker {broker_id} is already running "
                                    f"(pid {self._handles[broker_id].pid})")
        argv = self.command(broker_id)
        port = self.broker_port(broker_id)
        if not net.port_is_free(port):
            raise StartupError(f"cannot start Kafka broker {broker_id}: port {port} is in use",
                               hint="stop whatever listens there or choose another base_port")
        self._handles[broker_id] = process.spawn_detached(argv, log_path=self.log_path(broker_id))
        if wait:
            self.wait_broker_ready(broker_id, timeout=self.start_timeout)

    def wait_broker_ready(self, broker_id: int, *, timeout: float) -> None:
        """Return once broker ``broker_id`` answers ApiVersions and its Metadata lists every
        running broker of the peer; :class:`StartupError` (with the log tail) if it exits or
        ``timeout`` seconds pass."""
        handle = self._handles.get(broker_id)
        if handle is None:
            raise ClusterStateError(f"Kafka broker {broker_id} was not started")
        port = self.broker_port(broker_id)
        process.wait_ready(
            handle, lambda: net.kafka_api_versions_ok(port) and self._metadata_complete(port),
            name=f"Kafka broker {broker_id}", log_path=self.log_path(broker_id),
            timeout=timeout, not_ready=f"was not ready on port {port}", interval=0.2)

    def _metadata_complete(self, port: int) -> bool:
        """True when the broker on ``port`` lists every live broker of this peer."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient  # heavy import

        expected = {b for b in self.broker_ids if self.broker_alive(b)}
        admin = AdminClient({"bootstrap.servers": f"{net.LOOPBACK}:{port}",
                             "socket.timeout.ms": 2000})
        try:
            metadata = admin.list_topics(timeout=2)
        except KafkaException:
            return False
        return expected <= set(metadata.brokers)

    def stop(self) -> None:
        """SIGTERM every running broker at once (controlled shutdown), SIGKILL those still
        alive after ``stop_grace`` seconds; return when all are gone."""
        handles = list(self._handles.values())
        self._handles.clear()
        process.terminate(handles, grace=self.stop_grace)

    def kill(self) -> None:
        """SIGKILL every broker this peer started and wait until they are gone."""
        handles = list(self._handles.values())
        self._handles.clear()
        process.kill(handles)

    def stop_broker(self, broker_id: int) -> None:
        """SIGTERM broker ``broker_id`` (controlled shutdown); SIGKILL after the grace period."""
        handle = self._handles.pop(broker_id, None)
        if handle is not None:
            process.terminate([handle], grace=self.stop_grace)

    def kill_broker(self, broker_id: int) -> None:
        """SIGKILL broker ``broker_id`` (no controlled shutdown: a crash)."""
        handle = self._handles.pop(broker_id, None)
        if handle is not None:
            process.kill([handle])

    def broker_alive(self, broker_id: int) -> bool:
        handle = self._handles.get(broker_id)
        return handle is not None and process.is_alive(handle)

    def pids(self) -> list[int]:
        """Pids of the running brokers (e.g. to sum their CPU time from /proc)."""
        return [handle.pid for handle in self._handles.values() if process.is_alive(handle)]

    def __enter__(self) -> KafkaPeer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    # -- topics ---------------------------------------------------------------------------------

    def create_topic(
        self, name: str, *, partitions: int = 1, replication_factor: int = 1,
        configs: Mapping[str, str] | None = None, wait_isr: bool = True, timeout: float = 30.0,
    ) -> None:
        """Create ``name`` with confluent-kafka's AdminClient; with ``wait_isr`` return once
        every broker's Metadata shows each partition with a leader and a full ISR."""
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
        """Every running broker's Metadata shows ``partitions`` partitions of ``name``, each
        with a leader and every replica in the ISR. :class:`StartupError` after ``timeout``."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        last = "no metadata yet"
        while True:
            ready = True
            for broker_id in self.broker_ids:
                if not self.broker_alive(broker_id):
                    continue
                admin = AdminClient({
                    "bootstrap.servers": f"{net.LOOPBACK}:{self.broker_port(broker_id)}"})
                try:
                    topic = admin.list_topics(topic=name, timeout=5).topics.get(name)
                except KafkaException as exc:
                    ready, last = False, f"broker {broker_id}: {exc}"
                    break
                found = {} if topic is None or topic.error is not None else topic.partitions
                if len(found) != partitions or any(
                        p.leader < 0 or set(p.isrs) != set(p.replicas) for p in found.values()):
                    ready = False
                    last = f"broker {broker_id}: " + ", ".join(
                        f"{p.id}: leader {p.leader} isr {p.isrs}/{p.replicas}"
                        for p in found.values()) if found else f"broker {broker_id}: no topic"
                    break
            if ready:
                return
            if time.monotonic() >= deadline:
                raise StartupError(f"topic {name} not ready on the Kafka peer within "
                                   f"{timeout:g}s (last: {last})")
            time.sleep(0.2)

    def _check_id(self, broker_id: int) -> None:
        if not 1 <= broker_id <= self.brokers:
            raise ValueError(f"no Kafka broker {broker_id} (brokers are 1..{self.brokers})")


@contextmanager
def kafka_peer(data_dir: Path, *, zookeeper: str, brokers: int = 3,
               overrides: Mapping[str, str] | None = None) -> Iterator[KafkaPeer]:
    """A started :class:`KafkaPeer`, stopped on exit."""
    with KafkaPeer(data_dir, zookeeper=zookeeper, brokers=brokers,
                   overrides=overrides) as peer:
        yield peer
