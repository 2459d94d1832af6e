"""The embedded dev cluster: ZooKeeper plus N broker processes on loopback, rooted in one directory.

Layout of a cluster directory ``DIR`` (data persists across ``down``/``up``)::

    DIR/dev-cluster.json                 what is running: role, id, pid, start time, port, command
    DIR/dev-cluster.lock                 flock held while a command changes the cluster
    DIR/zookeeper/node-<n>/              ZooKeeper member n (conf/, data/; see dev.zookeeper)
    DIR/broker-<id>/server.properties    written by ``up`` on every start
    DIR/broker-<id>/data/                the broker's log.dirs
    DIR/logs/zookeeper-<n>.log, DIR/logs/broker-<id>.log   stdout+stderr of each process

Ports: broker ``id`` (1..N) listens on ``base_port + id - 1``. ZooKeeper's first port defaults to
``base_port + 1000`` (so 10092 for the default 9092); a 1-node ZooKeeper uses just that port, an
ensemble member ``n`` uses three ports from ``first + 3(n-1)`` (client, quorum, election). Two
dev clusters do not collide when their base ports differ by at least
``max(brokers, 3 * zookeepers)``. Brokers reach ZooKeeper under the chroot ``/loglake``.

External ZooKeeper: ``up(..., external_zookeeper="127.0.0.1:2181", chroot="/t-1")`` starts no
ZooKeeper of its own; the brokers use that server under ``chroot`` (created if missing), the state
file records the connect string, and the ZooKeeper faults refuse (no recorded ZooKeeper process).
Tests use it to share one ZooKeeper JVM per test session with a fresh chroot per cluster.

State file protocol: ``dev-cluster.json`` is replaced atomically (temp file, fsync, rename, fsync
directory) after every process is started or restarted, so a crash of ``up`` itself still leaves
a record that ``down`` can act on. Processes are identified by pid *and* /proc start time (see
:mod:`loglake.dev.process`): nothing here ever signals a process it did not start.

Concurrency: every changing operation holds ``dev-cluster.lock`` (non-blocking flock); a second
``loglake dev`` command on the same directory fails fast instead of interleaving.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import loglake
from loglake.catalog import zk_auth
from loglake.dev import net, process, secure
from loglake.dev.errors import ClusterStateError, DevError, StartupError
from loglake.dev.process import ProcessHandle
from loglake.dev.zookeeper import ZooKeeperServer, ensemble_peers

Role = Literal["broker", "zookeeper", "console", "registry"]

STATE_FILE = "dev-cluster.json"
LOCK_FILE = "dev-cluster.lock"
STATE_FORMAT = 1

DEFAULT_BASE_PORT = 9092
ZOOKEEPER_PORT_OFFSET = 1000
METRICS_PORT_OFFSET = 2000
CONSOLE_PORT_OFFSET = 3000
"""With the console on (``up(..., console=True)``, ``loglake dev up``): its HTTP port = the
base port + this (``loglake console`` as a recorded process, stopped first by ``down``)."""
REGISTRY_PORT_OFFSET = 4000
"""With the schema registry on (``up(..., registry=True)``, ``loglake dev up``): its port = the
base port + this (``loglake registry`` as a recorded process; HTTPS with basic auth in a
secured cluster)."""
"""With metrics on (``up(..., metrics=True)``, ``loglake dev up``): a broker's ``/metrics``
port = its Kafka port + this."""
"""Default first ZooKeeper port = base port + this."""

CHROOT = "/loglake"
"""ZooKeeper chroot the brokers of a dev cluster use."""

DEFAULT_START_TIMEOUT_S = 30.0
DEFAULT_STOP_TIMEOUT_S = 20.0
PAUSE_WAIT_S = 5.0


@dataclass(frozen=True)
class ProcessStatus:
    """One recorded process of a dev cluster; ``alive`` is checked against pid + start time,
    ``paused`` means alive but stopped by SIGSTOP."""

    role: Role
    id: int
    pid: int
    port: int
    alive: bool
    paused: bool = False


@dataclass(frozen=True)
class ClusterInfo:
    """What ``up`` started (or what the state file records)."""

    data_dir: Path
    broker_ports: tuple[int, ...]
    zookeeper_ports: tuple[int, ...]
    chroot: str = CHROOT
    external_zookeeper: str | None = None
    """Connection string (no chroot) of a ZooKeeper this cluster did not start, if any."""
    security: str | None = None
    """``sasl_ssl`` for a secured cluster (``up(..., security=...)``), else None (PLAINTEXT)."""
    metrics: bool = False
    """Whether the brokers serve ``/metrics`` (port: :data:`METRICS_PORT_OFFSET`)."""
    console_port: int | None = None
    """The web console's port when ``up`` started one."""
    registry_port: int | None = None
    """The schema registry's port when ``up`` started one."""
    zookeeper_jaas_file: str | None = None
    """With ZooKeeper authentication (``up(..., zookeeper_auth=...)``): the JAAS ``Client``
    file brokers and tools log in to ZooKeeper with (:mod:`loglake.dev.secure`)."""

    @property
    def registry_url(self) -> str | None:
        """``http://127.0.0.1:<port>`` (``https`` in a secured cluster) of the registry."""
        if self.registry_port is None:
            return None
        scheme = "https" if self.security is not None else "http"
        return f"{scheme}://{net.LOOPBACK}:{self.registry_port}"

    @property
    def console_url(self) -> str | None:
        """``http://127.0.0.1:<port>/`` (``https`` with a login in a secured cluster)."""
        scheme = "https" if self.security is not None else "http"
        return None if self.console_port is None else (
            f"{scheme}://{net.LOOPBACK}:{self.console_port}/")

    @property
    def metrics_urls(self) -> tuple[str, ...]:
        """Each broker's scrape URL (empty without metrics)."""
        return tuple(f"http://{net.LOOPBACK}:{port + METRICS_PORT_OFFSET}/metrics"
                     for port in self.broker_ports) if self.metrics else ()

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{net.LOOPBACK}:{port}" for port in self.broker_ports)

    @property
    def zookeeper_hosts(self) -> str:
        """Connection string without the chroot."""
        if self.external_zookeeper is not None:
            return self.external_zookeeper
        return ",".join(f"{net.LOOPBACK}:{port}" for port in self.zookeeper_ports)

    @property
    def zookeeper_connect(self) -> str:
        """Connection string with the brokers' chroot (what ``zookeeper.connect`` holds)."""
        return self.zookeeper_hosts + self.chroot

    def summary_lines(self) -> list[str]:
        """What ``loglake dev up`` and ``dev status`` print: the addresses tools take (the
        ZooKeeper connect string with the brokers' chroot, as ``--zookeeper`` needs it)."""
        lines = [f"bootstrap.servers={self.bootstrap_servers}",
                 f"zookeeper={self.zookeeper_connect}"]
        if self.metrics:
            lines.append(f"metrics={','.join(self.metrics_urls)}")
        if self.console_url is not None:
            lines.append(f"console={self.console_url}")
        if self.registry_url is not None:
            lines.append(f"schema.registry.url={self.registry_url}")
        if self.security is not None:
            lines += [f"security.protocol={self.security.upper()}",
                      f"command.config={self.client_properties}",
                      f"java.command.config={self.java_client_properties}"]
        if self.zookeeper_jaas_file is not None:
            lines.append(f"zookeeper.sasl.jaas.file={self.zookeeper_jaas_file}")
        return lines

    def tool_env(self) -> dict[str, str]:
        """Environment of a loglake tool driven against this cluster: its ZooKeeper login
        (``LOGLAKE_ZOOKEEPER_SASL_JAAS_FILE``) when ZooKeeper authenticates, else nothing."""
        return {} if self.zookeeper_jaas_file is None else {
            zk_auth.ENV_JAAS_FILE: self.zookeeper_jaas_file}

    @property
    def client_properties(self) -> Path | None:
        """The admin's client properties file (librdkafka form) of a secured cluster."""
        return None if self.security is None else (
            secure.security_dir(self.data_dir) / secure.CLIENT_PROPERTIES)

    @property
    def java_client_properties(self) -> Path | None:
        """The same in Java form (Kafka's tools), for a secured cluster."""
        return None if self.security is None else (
            secure.security_dir(self.data_dir) / secure.JAVA_CLIENT_PROPERTIES)


# -- state file ---------------------------------------------------------------------------------


@dataclass
class _Entry:
    role: Role
    id: int
    port: int
    command: list[str]
    log: str
    env: dict[str, str]
    pid: int = 0
    start_time: int = -1
    tls_ca: str = ""
    """A broker whose port speaks TLS: the CA file its readiness probe trusts ("" plaintext)."""

    @property
    def handle(self) -> ProcessHandle:
        return ProcessHandle(self.pid, self.start_time)

    @property
    def name(self) -> str:
        return f"{self.role} {self.id}"

    def alive(self) -> bool:
        return self.pid > 0 and process.is_alive(self.handle)

    def status(self) -> ProcessStatus:
        alive = self.alive()
        paused = alive and process.run_state(self.handle) in ("T", "t")
        return ProcessStatus(self.role, self.id, self.pid, self.port, alive, paused=paused)


@dataclass
class _State:
    data_dir: Path
    chroot: str
    entries: list[_Entry]
    external_zookeeper: str | None = None
    security: str | None = None
    metrics: bool = False
    zookeeper_jaas_file: str | None = None

    def of(self, role: Role) -> list[_Entry]:
        return [entry for entry in self.entries if entry.role == role]

    def find(self, role: Role, ident: int) -> _Entry:
        for entry in self.entries:
            if entry.role == role and entry.id == ident:
                return entry
        known = ", ".join(str(entry.id) for entry in self.of(role)) or "none"
        raise ClusterStateError(f"the dev cluster in {self.data_dir} has no {role} {ident} "
                                f"(known: {known})")

    def info(self) -> ClusterInfo:
        return ClusterInfo(self.data_dir, tuple(e.port for e in self.of("broker")),
                           tuple(e.port for e in self.of("zookeeper")), self.chroot,
                           self.external_zookeeper, self.security, self.metrics,
                           next((e.port for e in self.of("console")), None),
                           next((e.port for e in self.of("registry")), None),
                           self.zookeeper_jaas_file)

    def save(self) -> None:
        document = {
            "format": STATE_FORMAT,
            "chroot": self.chroot,
            "processes": [entry.__dict__ for entry in self.entries],
        }
        if self.external_zookeeper is not None:
            document["external_zookeeper"] = self.external_zookeeper
        if self.security is not None:
            document["security"] = self.security
        if self.metrics:
            document["metrics"] = True
        if self.zookeeper_jaas_file is not None:
            document["zookeeper_jaas_file"] = self.zookeeper_jaas_file
        write_durably(self.data_dir / STATE_FILE, json.dumps(document, indent=2) + "\n")


def _load_state(data_dir: Path) -> _State | None:
    path = data_dir / STATE_FILE
    try:
        document: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ClusterStateError(f"cannot read {path}: {exc}",
                                hint="if no dev cluster runs there, delete the file") from exc
    if document.get("format") != STATE_FORMAT:
        raise ClusterStateError(f"{path} has unknown format {document.get('format')!r}")
    entries = [_Entry(**raw) for raw in document["processes"]]
    return _State(data_dir, document["chroot"], entries, document.get("external_zookeeper"),
                  document.get("security"), bool(document.get("metrics", False)),
                  document.get("zookeeper_jaas_file"))


def _require_state(data_dir: Path) -> _State:
    state = _load_state(data_dir)
    if state is None:
        raise ClusterStateError(f"no dev cluster recorded in {data_dir} (no {STATE_FILE})",
                                hint=f"start one with `loglake dev up --data {data_dir}`")
    return state


def write_durably(path: Path, text: str, *, private: bool = False) -> None:
    """Replace ``path`` with ``text`` crash-safely (``private``: mode 0600, for files holding
    secrets).

    1. write ``.<name>.tmp`` in the same directory and fsync it;
    2. rename it over ``path`` (atomic: readers see the old or the new file, never a mix);
    3. fsync the directory so the rename itself survives a power loss.
    A crash before 2 leaves the old file (and a stray temp file, overwritten next time).
    """
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o666)
    if private:
        os.fchmod(fd, 0o600)  # an old temp file keeps its mode otherwise
    with os.fdopen(fd, "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def _locked(data_dir: Path, *, create: bool = False) -> Iterator[None]:
    if create:
        data_dir.mkdir(parents=True, exist_ok=True)
    elif not data_dir.is_dir():
        raise ClusterStateError(f"no dev cluster recorded in {data_dir} (no such directory)")
    with open(data_dir / LOCK_FILE, "a") as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ClusterStateError(f"another loglake dev command is working on {data_dir}",
                                    hint="wait for it to finish") from None
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


DEFAULT_STORAGE_DIR = "lake"  # under the dev cluster's data dir: where Delta tables go


# -- starting -------------------------------------------------------------------------------------


_PORT_PLACEHOLDER = re.compile(r"\{port(?::(\d+))?\}")
LISTENER_PORT_STEP = 100
"""``{port:N}`` in a broker override is the broker's port + N * this (its N-th extra
listener): brokers 1..B use base..base+B-1, so their second listeners use base+100.., and
so on (keep B below 100)."""


def expand_placeholders(value: str, broker_id: int, port: int) -> str:
    """``{id}`` -> the broker id, ``{port}`` -> its port, ``{port:N}`` -> port + N * 100."""
    value = value.replace("{id}", str(broker_id))
    return _PORT_PLACEHOLDER.sub(
        lambda m: str(port + LISTENER_PORT_STEP * int(m.group(1) or 0)), value)


def listener_port_offsets(overrides: Mapping[str, str] | None) -> tuple[int, ...]:
    """The offsets (N * 100, N > 0) of the extra listener ports named by ``{port:N}`` in
    ``overrides``, so they can be checked free like the brokers' own ports."""
    return tuple(sorted({LISTENER_PORT_STEP * int(n) for value in (overrides or {}).values()
                         for n in _PORT_PLACEHOLDER.findall(value) if n and int(n) > 0}))


def broker_properties(data_dir: Path, broker_id: int, port: int, zookeeper_connect: str,
                      overrides: Mapping[str, str] | None = None) -> str:
    """The ``server.properties`` text of one dev broker (overrides win over our defaults;
    their values may hold ``{id}``, ``{port}`` and ``{port:N}``: :func:`expand_placeholders`).
    """
    settings = {
        "broker.id": str(broker_id),
        "listeners": f"PLAINTEXT://{net.LOOPBACK}:{port}",
        "log.dirs": str(data_dir / f"broker-{broker_id}" / "data"),
        "zookeeper.connect": zookeeper_connect,
        # every broker tiers into the same Delta tables: by default a folder of the dev cluster
        "remote.log.storage.url": str(data_dir / DEFAULT_STORAGE_DIR),
    }
    settings.update({key: expand_placeholders(value, broker_id, port)
                     for key, value in (overrides or {}).items()})
    lines = ["# Written by `loglake dev up`; rewritten on every start."]
    lines += [f"{key}={value}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def _broker_env() -> dict[str, str]:
    """Extra environment of a broker: our package first on PYTHONPATH (works from a checkout
    without installing) and unbuffered output (log tails show the latest lines)."""
    package_root = str(Path(loglake.__file__).resolve().parent.parent)
    existing = os.environ.get("PYTHONPATH")
    pythonpath = package_root if not existing else f"{package_root}{os.pathsep}{existing}"
    return {"PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}


PORT_RELEASE_WAIT_S = 15.0


def _spawn(state: _State, entry: _Entry, *, port_wait: float = 0.0) -> None:
    """Start ``entry``'s command detached and record the new pid durably.

    A port just released by a killed process can stay unbindable for a few seconds while the
    kernel finishes closing that process's orphaned connections (FIN-WAIT with a peer that has
    not closed yet), so a restart polls the port for up to ``port_wait`` seconds.
    """
    deadline = time.monotonic() + port_wait
    while not net.port_is_free(entry.port) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not net.port_is_free(entry.port):
        raise StartupError(f"cannot start {entry.name}: port {entry.port} is in use",
                           hint="stop whatever listens there or choose another base port")
    handle = process.spawn_detached(entry.command, log_path=Path(entry.log),
                                    env={**os.environ, **entry.env})
    entry.pid, entry.start_time = handle.pid, handle.start_time
    state.save()


def _console_ready(port: int, tls_ca: str = "") -> bool:
    import ssl

    scheme = "https" if tls_ca else "http"
    context = ssl.create_default_context(cafile=tls_ca) if tls_ca else None
    try:
        with urllib.request.urlopen(f"{scheme}://{net.LOOPBACK}:{port}/healthz", timeout=1.0,
                                    context=context) as got:
            return bool(got.status == 200)
    except OSError:
        return False


def _registry_ready(port: int, tls_ca: str) -> bool:
    """The registry answers ``GET /`` (any HTTP status: 401 without credentials is fine)."""
    import ssl
    import urllib.error

    scheme = "https" if tls_ca else "http"
    context = ssl.create_default_context(cafile=tls_ca) if tls_ca else None
    try:
        with urllib.request.urlopen(f"{scheme}://{net.LOOPBACK}:{port}/", timeout=1.0,
                                    context=context) as got:
            return bool(got.status == 200)
    except urllib.error.HTTPError as exc:
        return exc.code == 401
    except OSError:
        return False


def _ready(entry: _Entry) -> bool:
    if entry.role == "console":
        return _console_ready(entry.port, entry.tls_ca)
    if entry.role == "registry":
        return _registry_ready(entry.port, entry.tls_ca)
    if entry.role == "broker":
        return net.kafka_api_versions_ok(entry.port, tls_ca=entry.tls_ca or None)
    return net.zookeeper_is_serving(entry.port)


def _wait_ready(entries: Sequence[_Entry], timeout: float) -> None:
    """Return once every entry answers its readiness probe (ApiVersions for brokers, ``srvr``
    for ZooKeeper). Raises StartupError with the log tail if one exits first or ``timeout``
    seconds pass; stops nothing itself."""
    pending = list(entries)
    deadline = time.monotonic() + timeout
    while pending:
        for entry in list(pending):
            if not entry.alive():
                code = process.exit_status(entry.pid)
                status = "" if code is None else f" with exit code {code}"
                raise StartupError(f"{entry.name} (pid {entry.pid}) exited during startup{status}",
                                   log_path=Path(entry.log),
                                   log_tail=process.log_tail(Path(entry.log)))
            if _ready(entry):
                pending.remove(entry)
        if pending and time.monotonic() >= deadline:
            entry = pending[0]
            what = "answer ApiVersions" if entry.role == "broker" else "serve clients"
            raise StartupError(
                f"{entry.name} (pid {entry.pid}) did not {what} on port {entry.port} "
                f"within {timeout:g}s", log_path=Path(entry.log),
                log_tail=process.log_tail(Path(entry.log)))
        if pending:
            time.sleep(0.1)


def _ensure_chroot(hosts: str, chroot: str, timeout: float,
                   login: secure.ZooKeeperLogin | None = None) -> None:
    """Create the brokers' chroot znode so brokers can connect under it (logged in as
    ``login`` with Kafka's secure ACL when ZooKeeper authenticates)."""
    from loglake.catalog.zk_acls import PathAclKazooClient, world_writable  # heavy, only here

    client = PathAclKazooClient(
        hosts=hosts, timeout=timeout, sasl_options=None if login is None else login.sasl_options(),
        acl_policy=None if login is None else zk_auth.acl_for)
    try:
        client.start(timeout=timeout)
        if login is not None and client.exists(chroot) is not None and world_writable(
                client.get_acls(chroot)[0]):
            print(f"loglake: warning: the znodes under {chroot} were created without ZooKeeper "
                  "authentication and stay open to anyone: run `loglake "
                  "zookeeper-security-migration --zookeeper.acl secure` once the brokers run",
                  file=sys.stderr)
        client.ensure_path(chroot)
    except Exception as exc:
        raise StartupError(f"cannot create the chroot {chroot} in ZooKeeper at {hosts}: {exc}"
                           ) from exc
    finally:
        client.stop()
        client.close()


def _zookeeper_servers(data_dir: Path, first_port: int, count: int,
                       login: secure.ZooKeeperLogin | None = None) -> list[ZooKeeperServer]:
    """The ZooKeeper members of a dev cluster: standalone for one, a loopback ensemble else;
    with ``login``, SASL (DIGEST-MD5) with that one user in their JAAS ``Server`` section."""
    users = None if login is None else {login.username: login.password}
    if count == 1:
        return [ZooKeeperServer(data_dir / "zookeeper" / "node-1", client_port=first_port,
                                log_path=data_dir / "logs" / "zookeeper-1.log",
                                sasl_users=users)]
    peers = ensemble_peers(first_port, count)
    return [ZooKeeperServer(data_dir / "zookeeper" / f"node-{peer.server_id}",
                            client_port=peer.client_port, server_id=peer.server_id, peers=peers,
                            log_path=data_dir / "logs" / f"zookeeper-{peer.server_id}.log",
                            sasl_users=users)
            for peer in peers]


def up(
    data_dir: Path,
    *,
    brokers: int = 1,
    base_port: int = DEFAULT_BASE_PORT,
    zookeeper_port: int | None = None,
    zookeepers: int = 1,
    broker_overrides: dict[str, str] | None = None,
    timeout: float = DEFAULT_START_TIMEOUT_S,
    external_zookeeper: str | None = None,
    chroot: str = CHROOT,
    security: secure.Security | None = None,
    metrics: bool = False,
    console: bool = False,
    registry: bool = False,
    zookeeper_auth: bool | None = None,
) -> ClusterInfo:
    """Start ZooKeeper (``zookeepers`` members) and ``brokers`` brokers rooted in ``data_dir``.

    With ``external_zookeeper`` (a connection string without chroot) no ZooKeeper is started:
    the brokers use that one under ``chroot``. ``security="sasl_ssl"`` makes a secured
    cluster (:mod:`loglake.dev.secure`: certificates, the admin user stored in ZooKeeper before
    any broker starts, SASL_SSL listeners, the ACL authorizer; ``broker_overrides`` still win);
    the returned info names its client properties files. ``console``: also run
    ``loglake console`` on the base port + :data:`CONSOLE_PORT_OFFSET` (ready when its
    ``/healthz`` answers; the info names its URL). ``metrics``: every broker serves
    ``/metrics`` on its port + :data:`METRICS_PORT_OFFSET` (``metrics.listener``; an override
    of it wins); the info lists the URLs. ``registry``: also run ``loglake registry`` on the
    base port + :data:`REGISTRY_PORT_OFFSET` (ready when ``GET /`` answers; in a secured
    cluster over HTTPS with the cluster's certificate and HTTP Basic auth against the SCRAM
    users, and the client properties file gets ``schema.registry.url`` and
    ``basic.auth.user.info``); the info names its URL. ``zookeeper_auth`` (default: on for a
    secured cluster with its own ZooKeeper, and for one whose ZooKeeper was secured before, its
    login being under ``DIR/security``; off otherwise; an external ZooKeeper has its own users,
    so it cannot be turned on there): ZooKeeper with SASL, brokers logging in with
    ``zookeeper.set.acl=true``, and the console and registry logging in too
    (:mod:`loglake.dev.secure`); the info names the JAAS file tools log in with.

    Returns once every ZooKeeper member serves clients and every broker answers ApiVersions, each
    wait bounded by ``timeout`` seconds. Existing data in ``data_dir`` is reused. Refuses
    (:class:`ClusterStateError`) if processes recorded in ``data_dir`` still run, and
    (:class:`StartupError`) if a port is taken. If anything fails or is interrupted, every
    process this call started is stopped (brokers first), the state file is removed, and the
    error (with the failing process's log tail) propagates.
    """
    if brokers < 1 or zookeepers < 1:
        raise ValueError("a dev cluster needs at least one broker and one ZooKeeper")
    if security is not None and security not in secure.SECURITY_MODES:
        raise ValueError(f"security must be one of {', '.join(secure.SECURITY_MODES)}, "
                         f"got {security!r}")
    data_dir = Path(data_dir).absolute()
    if zookeeper_auth is None:  # a ZooKeeper secured once stays so (its znodes' ACLs do)
        zookeeper_auth = external_zookeeper is None and (
            security is not None or secure.zookeeper_login_exists(data_dir))
    if zookeeper_auth and external_zookeeper is not None:
        raise ValueError("ZooKeeper authentication needs the dev cluster's own ZooKeeper (an "
                         "external one has its own SASL users): drop zookeeper_auth or "
                         "external_zookeeper")
    with _locked(data_dir, create=True):
        previous = _load_state(data_dir)
        if previous is not None:
            running = [entry for entry in previous.entries if entry.alive()]
            if running:
                pids = ", ".join(f"{entry.name} pid {entry.pid}" for entry in running)
                raise ClusterStateError(
                    f"a dev cluster is already running in {data_dir} ({pids})",
                    hint=f"stop it first: loglake dev down --data {data_dir}")

        first_zk_port = base_port + ZOOKEEPER_PORT_OFFSET if zookeeper_port is None \
            else zookeeper_port
        login = secure.prepare_zookeeper_login(data_dir) if zookeeper_auth else None
        servers = [] if external_zookeeper is not None else \
            _zookeeper_servers(data_dir, first_zk_port, zookeepers, login)
        zk_commands = [server.command() for server in servers]  # fails early without java
        wanted = [base_port + index for index in range(brokers)]
        extra_ports = [port + offset for port in wanted
                       for offset in listener_port_offsets(broker_overrides)]
        if metrics:
            extra_ports += [port + METRICS_PORT_OFFSET for port in wanted]
        if console:
            extra_ports.append(base_port + CONSOLE_PORT_OFFSET)
        if registry:
            extra_ports.append(base_port + REGISTRY_PORT_OFFSET)
        wanted += [server.client_port for server in servers]
        wanted += [port for server in servers[:1] for peer in server.peers
                   for port in (peer.peer_port, peer.election_port)]
        busy = [port for port in wanted + extra_ports if not net.port_is_free(port)]
        if busy:
            raise StartupError(f"ports already in use: {', '.join(map(str, busy))}",
                               hint="stop what listens there or pick another --base-port")
        low, high = net.ephemeral_port_range()
        broker_ports = wanted[:brokers]
        if any(low <= port <= high for port in broker_ports):
            # a client reconnecting to a dead broker's port in that range can connect to
            # itself (TCP self-connect) and hang until its request timeout
            print(f"loglake: warning: broker ports {min(broker_ports)}-{max(broker_ports)} "
                  f"overlap the kernel's ephemeral range {low}-{high}; prefer a base port "
                  f"below {low}", file=sys.stderr)

        state = _State(data_dir, chroot, [], external_zookeeper, security, metrics,
                       None if login is None else str(login.jaas_file))
        try:
            zk_entries = []
            for server, command in zip(servers, zk_commands, strict=True):
                server.write_config()
                entry = _Entry("zookeeper", server.server_id, server.client_port, command,
                               str(server.log_path), {})
                state.entries.append(entry)
                zk_entries.append(entry)
                _spawn(state, entry)
            _wait_ready(zk_entries, timeout)
            info = state.info()
            _ensure_chroot(info.zookeeper_hosts, chroot, timeout, login)
            overrides = dict(broker_overrides or {})
            if login is not None:
                overrides = {**login.broker_overrides(), **overrides}
            tls_ca = ""
            if security is not None:
                setup = secure.prepare(data_dir)
                secure.create_admin_user(setup, info.zookeeper_connect, timeout,
                                         zookeeper_login=login)
                overrides = {**secure.broker_overrides(setup), **overrides}
                tls_ca = str(setup.ca)

            broker_entries = []
            for broker_id in range(1, brokers + 1):
                port = base_port + broker_id - 1
                config_path = data_dir / f"broker-{broker_id}" / "server.properties"
                (data_dir / f"broker-{broker_id}" / "data").mkdir(parents=True, exist_ok=True)
                metrics_url = f"http://{net.LOOPBACK}:{port + METRICS_PORT_OFFSET}"
                listener = {"metrics.listener": metrics_url} if metrics else {}
                write_durably(config_path, broker_properties(
                    data_dir, broker_id, port, info.zookeeper_connect, {**listener, **overrides}),
                    private=security is not None)
                command = [sys.executable, "-m", "loglake", "broker", "start",
                           "--config", str(config_path)]
                entry = _Entry("broker", broker_id, port, command,
                               str(data_dir / "logs" / f"broker-{broker_id}.log"), _broker_env(),
                               tls_ca=tls_ca)
                state.entries.append(entry)
                broker_entries.append(entry)
                _spawn(state, entry)
            _wait_ready(broker_entries, timeout)
            if console:
                command = [sys.executable, "-m", "loglake", "console", "--zookeeper",
                           info.zookeeper_connect, "--port",
                           str(base_port + CONSOLE_PORT_OFFSET)]
                console_ca = ""
                if security is not None:  # HTTPS, and every user logs in (SCRAM users)
                    console_tls = secure.prepare(data_dir)
                    command += ["--command-config", str(state.info().client_properties),
                                "--basic-auth", "--certfile",
                                str(console_tls.certificates.broker)]
                    console_ca = str(console_tls.ca)
                entry = _Entry("console", 1, base_port + CONSOLE_PORT_OFFSET, command,
                               str(data_dir / "logs" / "console.log"),
                               {**_broker_env(), **info.tool_env()}, tls_ca=console_ca)
                state.entries.append(entry)
                _spawn(state, entry)
                _wait_ready([entry], timeout)
            if registry:
                _start_registry(state, data_dir, base_port + REGISTRY_PORT_OFFSET, timeout)
        except BaseException:
            _stop_all(state, timeout=5.0)
            (data_dir / STATE_FILE).unlink(missing_ok=True)
            raise
        return state.info()


def _start_registry(state: _State, data_dir: Path, port: int, timeout: float) -> None:
    """Spawn ``loglake registry`` on ``port`` and wait until it answers."""
    info = state.info()
    command = [sys.executable, "-m", "loglake", "registry", "--zookeeper",
               info.zookeeper_connect, "--port", str(port)]
    tls_ca = ""
    setup = None if state.security is None else secure.prepare(data_dir)
    if setup is not None:
        command += ["--certfile", str(setup.certificates.broker), "--basic-auth"]
        tls_ca = str(setup.ca)
    entry = _Entry("registry", 1, port, command, str(data_dir / "logs" / "registry.log"),
                   {**_broker_env(), **info.tool_env()}, tls_ca=tls_ca)
    state.entries.append(entry)
    _spawn(state, entry)
    _wait_ready([entry], timeout)
    if setup is not None:
        secure.add_registry_settings(setup, f"https://{net.LOOPBACK}:{port}")


# -- inspecting and stopping --------------------------------------------------------------------


def info(data_dir: Path) -> ClusterInfo:
    """Ports and connection strings recorded for the dev cluster in ``data_dir``."""
    return _require_state(Path(data_dir).absolute()).info()


def status(data_dir: Path) -> list[ProcessStatus]:
    """Every recorded process (ZooKeeper first, then brokers) and whether it is alive."""
    return [entry.status() for entry in _require_state(Path(data_dir).absolute()).entries]


def _stop_all(state: _State, *, timeout: float) -> None:
    """SIGTERM the registry, the console and the brokers, wait ``timeout`` s, SIGKILL
    stragglers; then the same for ZooKeeper."""
    roles: tuple[Role, ...] = ("registry", "console", "broker", "zookeeper")
    for role in roles:
        handles = [entry.handle for entry in state.of(role) if entry.pid > 0]
        process.terminate(handles, grace=timeout)


def down(data_dir: Path, *, timeout: float = DEFAULT_STOP_TIMEOUT_S) -> None:
    """Stop exactly the processes recorded in ``data_dir`` and remove the state file.

    Brokers first (SIGTERM, up to ``timeout`` s, then SIGKILL), then ZooKeeper the same way;
    a recorded pid whose start time no longer matches is left alone. Returns when all recorded
    processes are gone. Data is kept. Raises :class:`ClusterStateError` if nothing is recorded.
    """
    data_dir = Path(data_dir).absolute()
    with _locked(data_dir):
        state = _require_state(data_dir)
        _stop_all(state, timeout=timeout)
        (data_dir / STATE_FILE).unlink()


# -- single-process controls (fault injection) --------------------------------------------------


def start_process(data_dir: Path, role: Role, ident: int, *, wait: bool = True,
                  timeout: float = DEFAULT_START_TIMEOUT_S) -> ProcessStatus:
    """Start a stopped/killed member again with its recorded command; with ``wait``, return
    once it answers its probe (``timeout`` s bound; on failure it is killed and StartupError
    raised). Refuses if it is still running (a paused process counts as running)."""
    data_dir = Path(data_dir).absolute()
    with _locked(data_dir):
        state = _require_state(data_dir)
        entry = state.find(role, ident)
        if entry.alive():
            raise ClusterStateError(f"{entry.name} is already running (pid {entry.pid})")
        _spawn(state, entry, port_wait=PORT_RELEASE_WAIT_S)
        if wait:
            try:
                _wait_ready([entry], timeout)
            except StartupError:
                process.kill([entry.handle])
                raise
        return entry.status()


def stop_process(data_dir: Path, role: Role, ident: int, *,
                 timeout: float = DEFAULT_STOP_TIMEOUT_S) -> None:
    """SIGTERM (then SIGCONT, in case it is paused) one recorded process, SIGKILL it after
    ``timeout`` s; return when it is gone. No-op if it is not running."""
    entry = _require_state(Path(data_dir).absolute()).find(role, ident)
    process.terminate([entry.handle], grace=timeout)


def kill_process(data_dir: Path, role: Role, ident: int) -> None:
    """SIGKILL one recorded process and return when it is gone. No-op if it is not running."""
    entry = _require_state(Path(data_dir).absolute()).find(role, ident)
    process.kill([entry.handle])


def pause_process(data_dir: Path, role: Role, ident: int) -> None:
    """SIGSTOP one recorded process; return once the kernel reports it stopped (bounded).

    Its sockets stay open, so peers see a hung process, not a closed connection.
    """
    entry = _require_state(Path(data_dir).absolute()).find(role, ident)
    if not process.send_signal(entry.handle, signal.SIGSTOP):
        raise ClusterStateError(f"{entry.name} is not running")
    deadline = time.monotonic() + PAUSE_WAIT_S
    while process.run_state(entry.handle) not in ("T", "t", None):
        if time.monotonic() >= deadline:
            raise DevError(f"{entry.name} (pid {entry.pid}) did not stop after SIGSTOP")
        time.sleep(process.POLL_INTERVAL_S)


def resume_process(data_dir: Path, role: Role, ident: int) -> None:
    """SIGCONT one recorded process (undoes :func:`pause_process`)."""
    entry = _require_state(Path(data_dir).absolute()).find(role, ident)
    if not process.send_signal(entry.handle, signal.SIGCONT):
        raise ClusterStateError(f"{entry.name} is not running")


def start_broker(data_dir: Path, broker_id: int, *, wait: bool = True,
                 timeout: float = DEFAULT_START_TIMEOUT_S) -> ProcessStatus:
    """Start broker ``broker_id`` again; see :func:`start_process`."""
    return start_process(data_dir, "broker", broker_id, wait=wait, timeout=timeout)


def stop_broker(data_dir: Path, broker_id: int, *,
                timeout: float = DEFAULT_STOP_TIMEOUT_S) -> None:
    """Gracefully stop broker ``broker_id``; see :func:`stop_process`."""
    stop_process(data_dir, "broker", broker_id, timeout=timeout)


def kill_broker(data_dir: Path, broker_id: int) -> None:
    """SIGKILL broker ``broker_id``; see :func:`kill_process`."""
    kill_process(data_dir, "broker", broker_id)


def pause_broker(data_dir: Path, broker_id: int) -> None:
    """SIGSTOP broker ``broker_id``; see :func:`pause_process`."""
    pause_process(data_dir, "broker", broker_id)


def resume_broker(data_dir: Path, broker_id: int) -> None:
    """SIGCONT broker ``broker_id``; see :func:`resume_process`."""
    resume_process(data_dir, "broker", broker_id)


def start_zookeeper(data_dir: Path, node: int = 1, *, wait: bool = True,
                    timeout: float = DEFAULT_START_TIMEOUT_S) -> ProcessStatus:
    """Start ZooKeeper member ``node`` again; see :func:`start_process`."""
    return start_process(data_dir, "zookeeper", node, wait=wait, timeout=timeout)


def stop_zookeeper(data_dir: Path, node: int = 1, *,
                   timeout: float = DEFAULT_STOP_TIMEOUT_S) -> None:
    """Gracefully stop ZooKeeper member ``node``; see :func:`stop_process`."""
    stop_process(data_dir, "zookeeper", node, timeout=timeout)


def kill_zookeeper(data_dir: Path, node: int = 1) -> None:
    """SIGKILL ZooKeeper member ``node``; see :func:`kill_process`."""
    kill_process(data_dir, "zookeeper", node)


def pause_zookeeper(data_dir: Path, node: int = 1) -> None:
    """SIGSTOP ZooKeeper member ``node``; see :func:`pause_process`."""
    pause_process(data_dir, "zookeeper", node)


def resume_zookeeper(data_dir: Path, node: int = 1) -> None:
    """SIGCONT ZooKeeper member ``node``; see :func:`resume_process`."""
    resume_process(data_dir, "zookeeper", node)
