"""A real ZooKeeper server (standalone or one member of a loopback ensemble) for dev and tests.

Layout of a server directory ``D`` (everything the server reads or writes lives there)::

    D/conf/zoo.cfg            written by us on every start (see ZooKeeperServer.config_text)
    D/conf/log4j.properties   console logging; D/conf is first on the classpath
    D/conf/jaas.conf          with ``sasl_users`` only: the JAAS ``Server`` section
                              (DigestLoginModule, ``user_<name>="<password>"``), mode 0600
    D/data/                   dataDir: snapshots, transaction logs, myid (ensemble only)
    D/zookeeper.log           stdout+stderr of the JVM (unless another log path is given)

The JVM runs ``org.apache.zookeeper.server.quorum.QuorumPeerMain D/conf/zoo.cfg`` detached (own
session; see :mod:`loglake.dev.process`). Java is ``$JAVA_HOME/bin/java`` or the first ``java``
on PATH. The classpath is ``$LOGLAKE_ZOOKEEPER_CLASSPATH`` when set (a Java classpath that must
hold ZooKeeper and its dependencies), else Debian's ``zookeeper`` package: ``zookeeper.jar``
(its manifest lists the dependencies) plus the slf4j-log4j12 binding and log4j 1.2 when present.

Ensemble layout (:func:`ensemble_peers`): member ``i`` (1-based) of an ensemble whose first port
is ``P`` uses client port ``P + 3(i-1)``, quorum port ``P + 3(i-1) + 1`` and leader-election port
``P + 3(i-1) + 2``, all on 127.0.0.1.

SASL (``sasl_users``, see :meth:`ZooKeeperServer.config_text`): the server authenticates clients
with DIGEST-MD5 against ``jaas.conf`` (``authProvider.1=...SASLAuthenticationProvider``, the JVM
started with ``-Djava.security.auth.login.config``); a client's ZooKeeper identity is then
``sasl:<user>``. Clients without credentials are still served (and meet the znodes' ACLs) unless
``require_sasl`` (``enforce.auth.enabled`` with scheme ``sasl``: ZooKeeper closes the session of
an unauthenticated client at its first request). ``super_user``: that SASL user may do anything
(``zookeeper.superUser``), whatever the ACLs. The ``srvr`` probe needs no authentication.

TLS (``tls``, a :class:`ZooKeeperTls`; off by default): the server also listens on
``tls.port`` (``secureClientPort``, Netty's server connection factory) with the PEM keystore
(key + chain) and PEM truststore given, ``ssl.clientAuth`` need/want/none, and ZooKeeper's
x509 authentication provider, which makes a client certificate's session identity
``x509:<subject DN>``. The plaintext ``clientPort`` stays open (probes, the harness).

Crash behaviour: ZooKeeper's own; the data directory survives ``stop``/``kill`` and a new server
on the same directory recovers every committed znode.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from loglake.dev import net, process
from loglake.dev.errors import MissingDependencyError, StartupError
from loglake.dev.process import ProcessHandle

CLASSPATH_ENV = "LOGLAKE_ZOOKEEPER_CLASSPATH"
"""Environment variable overriding the ZooKeeper classpath (a ':'-separated Java classpath)."""

DEBIAN_ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
"""Where Debian's ``zookeeper`` package installs the server jar."""

DEBIAN_LOGGING_JARS = (Path("/usr/share/java/slf4j-log4j12.jar"),
                       Path("/usr/share/java/log4j-1.2.jar"))
"""slf4j binding + log4j 1.2 from Debian; added when present so the server log is not empty."""

MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

DEFAULT_JVM_OPTIONS: tuple[str, ...] = (
    "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
)
"""Small heap and fast startup: a dev ZooKeeper holds little data."""

NETTY_CODEC_JAR = Path("/usr/share/java/netty-codec.jar")
"""Netty's codec (TLS handler's base classes); added to the classpath with TLS when present."""

DEFAULT_TICK_TIME_MS = 2000
"""ZooKeeper's tickTime; session timeouts are bounded to [2, 20] ticks."""

DEFAULT_START_TIMEOUT_S = 30.0
DEFAULT_STOP_GRACE_S = 10.0

_LOG4J_PROPERTIES = """\
# Written by loglake: ZooKeeper logs to stdout, which loglake redirects to a log file.
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
"""


def _jaas_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def find_java() -> Path:
    """``$JAVA_HOME/bin/java`` if JAVA_HOME is set, else ``java`` on PATH.

    Raises :class:`MissingDependencyError` (one line, naming the Debian package) if neither
    exists.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return candidate
        raise MissingDependencyError(
            f"JAVA_HOME is {java_home} but {candidate} is not an executable",
            hint="fix or unset JAVA_HOME; on Debian: apt-get install default-jre-headless",
        )
    found = shutil.which("java")
    if found is None:
        raise MissingDependencyError(
            "java not found on PATH and JAVA_HOME is not set",
            hint="on Debian: apt-get install default-jre-headless",
        )
    return Path(found).resolve()


def zookeeper_classpath() -> list[str]:
    """The classpath entries holding ZooKeeper (without our conf directory).

    From ``$LOGLAKE_ZOOKEEPER_CLASSPATH`` if set (each entry must exist; ``dir/*`` needs ``dir``),
    else Debian's jars. Raises :class:`MissingDependencyError` naming what is missing.
    """
    configured = os.environ.get(CLASSPATH_ENV)
    if configured:
        entries = [entry for entry in configured.split(os.pathsep) if entry]
        missing = [entry for entry in entries
                   if not Path(entry[:-2] if entry.endswith("/*") else entry).exists()]
        if missing or not entries:
            raise MissingDependencyError(
                f"ZooKeeper classpath from {CLASSPATH_ENV} has missing entries: "
                f"{', '.join(missing) or '(empty)'}",
                hint=f"point {CLASSPATH_ENV} at ZooKeeper's jars, or unset it to use Debian's "
                     "zookeeper package (apt-get install zookeeper)",
            )
        return entries
    if not DEBIAN_ZOOKEEPER_JAR.is_file():
        raise MissingDependencyError(
            f"ZooKeeper jar not found at {DEBIAN_ZOOKEEPER_JAR}",
            hint=f"on Debian: apt-get install zookeeper; or set {CLASSPATH_ENV} to a classpath "
                 "holding ZooKeeper's jars",
        )
    return [str(DEBIAN_ZOOKEEPER_JAR)] + [str(jar) for jar in DEBIAN_LOGGING_JARS
                                          if jar.is_file()]


@dataclass(frozen=True)
class ZooKeeperTls:
    """A TLS client port: ``keystore`` is a PEM file with the server's key and certificate
    chain, ``truststore`` a PEM CA bundle (the CAs of client certificates); ``client_auth``
    is ZooKeeper's ``ssl.clientAuth`` (need, want or none)."""

    port: int
    keystore: Path
    truststore: Path
    client_auth: str = "need"

    def config_lines(self) -> list[str]:
        if self.client_auth not in ("need", "want", "none"):
            raise ValueError(f"client_auth must be need, want or none, got {self.client_auth!r}")
        return [
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            f"secureClientPort={self.port}",
            f"secureClientPortAddress={net.LOOPBACK}",
            f"ssl.keyStore.location={Path(self.keystore).absolute()}",
            "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={Path(self.truststore).absolute()}",
            "ssl.trustStore.type=PEM",
            f"ssl.clientAuth={self.client_auth}",
            "authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider",
        ]


@dataclass(frozen=True)
class QuorumPeer:
    """One ensemble member's id and loopback ports."""

    server_id: int
    client_port: int
    peer_port: int
    election_port: int

    @property
    def config_line(self) -> str:
        return f"server.{self.server_id}={net.LOOPBACK}:{self.peer_port}:{self.election_port}"


def ensemble_peers(first_port: int, count: int) -> tuple[QuorumPeer, ...]:
    """The members of a ``count``-node loopback ensemble whose ports start at ``first_port``
    (three consecutive ports per member: client, quorum, election)."""
    return tuple(
        QuorumPeer(index + 1, first_port + 3 * index, first_port + 3 * index + 1,
                   first_port + 3 * index + 2)
        for index in range(count)
    )


class ZooKeeperServer:
    """One ZooKeeper JVM: writes its configuration, starts it detached, probes it, stops it.

    Standalone when ``peers`` is empty; otherwise a member (``server_id``) of the ensemble
    ``peers``, whose own entry fixes ``client_port``. Not thread-safe. Usable as a context
    manager: ``with ZooKeeperServer(path, client_port=p) as zk: ...`` starts, waits until it
    serves, and stops on exit.
    """

    def __init__(
        self,
        directory: Path,
        *,
        client_port: int,
        server_id: int = 1,
        peers: Sequence[QuorumPeer] = (),
        tick_time_ms: int = DEFAULT_TICK_TIME_MS,
        log_path: Path | None = None,
        jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS,
        sasl_users: Mapping[str, str] | None = None,
        require_sasl: bool = False,
        super_user: str | None = None,
        tls: ZooKeeperTls | None = None,
    ) -> None:
        if peers:
            own = [peer for peer in peers if peer.server_id == server_id]
            if len(own) != 1 or own[0].client_port != client_port:
                raise ValueError(f"server {server_id} with client port {client_port} is not "
                                 f"a member of the ensemble {list(peers)}")
        self.directory = Path(directory).absolute()
        self.client_port = client_port
        self.server_id = server_id
        self.peers = tuple(peers)
        self.tick_time_ms = tick_time_ms
        self.log_path = (Path(log_path).absolute() if log_path is not None
                         else self.directory / "zookeeper.log")
        self.jvm_options = tuple(jvm_options)
        self.sasl_users = dict(sasl_users or {})
        """SASL DIGEST-MD5 users (name -> password); empty: no SASL (the default)."""
        if (require_sasl or super_user is not None) and not self.sasl_users:
            raise ValueError("require_sasl and super_user need sasl_users")
        for name in self.sasl_users:
            if not name.replace("_", "").replace("-", "").replace(".", "").isalnum():
                raise ValueError(f"SASL user name {name!r}: letters, digits, '_', '-', '.' only")
        self.require_sasl = require_sasl
        self.super_user = super_user
        self.tls = tls
        """An extra TLS client port (None: plaintext only, the default)."""
        self.handle: ProcessHandle | None = None
        """The running JVM, if started by (or attached to) this object."""

    # -- layout ---------------------------------------------------------------------------------

    @property
    def conf_dir(self) -> Path:
        return self.directory / "conf"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def config_path(self) -> Path:
        return self.conf_dir / "zoo.cfg"

    @property
    def jaas_path(self) -> Path:
        return self.conf_dir / "jaas.conf"

    def jaas_text(self) -> str:
        """The JAAS ``Server`` section of :attr:`sasl_users` (ZooKeeper's DigestLoginModule)."""
        users = "".join(f'\n    user_{name}="{_jaas_quote(password)}"'
                        for name, password in self.sasl_users.items())
        return ("Server {\n    org.apache.zookeeper.server.auth.DigestLoginModule required"
                f"{users};\n}};\n")

    @property
    def hosts(self) -> str:
        """Connection string of this server alone: ``127.0.0.1:<client port>``."""
        return f"{net.LOOPBACK}:{self.client_port}"

    @property
    def tls_hosts(self) -> str:
        """Connection string of this server's TLS port: ``127.0.0.1:<secure client port>``."""
        if self.tls is None:
            raise ValueError("this ZooKeeper has no TLS port")
        return f"{net.LOOPBACK}:{self.tls.port}"

    def config_text(self) -> str:
        """The zoo.cfg we run with."""
        lines = [
            "# Written by loglake (loglake.dev.zookeeper); rewritten on every start.",
            f"tickTime={self.tick_time_ms}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.client_port}",
            f"clientPortAddress={net.LOOPBACK}",
            "admin.enableServer=false",
            "maxClientCnxns=0",
            "4lw.commands.whitelist=ruok,stat,srvr",
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
        ]
        if self.sasl_users:
            lines.append("authProvider.1=org.apache.zookeeper.server.auth."
                         "SASLAuthenticationProvider")
        if self.require_sasl:
            lines += ["enforce.auth.enabled=true", "enforce.auth.schemes=sasl"]
        if self.super_user is not None:
            lines.append(f"superUser={self.super_user}")  # -> zookeeper.superUser
        if self.tls is not None:
            lines += self.tls.config_lines()
        if self.peers:
            lines += ["initLimit=10", "syncLimit=5"]
            lines += [peer.config_line for peer in self.peers]
        return "\n".join(lines) + "\n"

    def write_config(self) -> None:
        """Write zoo.cfg, log4j.properties and (in an ensemble) myid; keep existing data."""
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config_text())
        (self.conf_dir / "log4j.properties").write_text(_LOG4J_PROPERTIES)
        if self.sasl_users:
            self.jaas_path.touch(mode=0o600)
            self.jaas_path.write_text(self.jaas_text())
        if self.peers:
            (self.data_dir / "myid").write_text(f"{self.server_id}\n")

    def command(self) -> list[str]:
        """The JVM command line; raises :class:`MissingDependencyError` if java or jars are
        missing."""
        codec = ([str(NETTY_CODEC_JAR)] if self.tls is not None and NETTY_CODEC_JAR.is_file()
                 else [])
        classpath = os.pathsep.join([str(self.conf_dir), *zookeeper_classpath(), *codec])
        sasl = ([f"-Djava.security.auth.login.config={self.jaas_path}"]
                if self.sasl_users else [])
        return [str(find_java()), *self.jvm_options, *sasl, "-cp", classpath, MAIN_CLASS,
                str(self.config_path)]

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self, *, wait: bool = True, timeout: float = DEFAULT_START_TIMEOUT_S
              ) -> ProcessHandle:
        """Write the config and start the JVM detached; with ``wait``, return once it serves.

        Refuses (StartupError) if this object's JVM is still running or if the client port is
        already taken (a probe would otherwise talk to someone else's server). With ``wait``,
        a failure to serve within ``timeout`` seconds kills the JVM it started and raises
        :class:`StartupError` with the tail of the log. An ensemble member only serves once a
        quorum is up: start all members with ``wait=False``, then :meth:`wait_until_serving`.
        """
        if self.handle is not None and process.is_alive(self.handle):
            raise StartupError(f"ZooKeeper {self.server_id} is already running "
                               f"(pid {self.handle.pid})")
        argv = self.command()
        for port in (self.client_port, *([self.tls.port] if self.tls is not None else [])):
            if not net.port_is_free(port):
                raise StartupError(
                    f"cannot start ZooKeeper {self.server_id}: port {port} is in use",
                    hint="stop whatever listens there or choose another port",
                )
        self.write_config()
        self.handle = process.spawn_detached(argv, log_path=self.log_path)
        if wait:
            try:
                self.wait_until_serving(timeout=timeout)
            except StartupError:
                self.kill()
                raise
        return self.handle

    def wait_until_serving(self, *, timeout: float = DEFAULT_START_TIMEOUT_S) -> None:
        """Return once the server answers ``srvr`` with a mode (it serves clients).

        Raises :class:`StartupError` with the log tail if the JVM exits first or ``timeout``
        seconds pass. Does not stop the JVM on failure.
        """
        process.wait_ready(
            self._require_handle(), lambda: net.zookeeper_is_serving(self.client_port),
            name=f"ZooKeeper {self.server_id}", log_path=self.log_path, timeout=timeout,
            not_ready=f"did not serve on port {self.client_port}")

    def is_running(self) -> bool:
        """True while the JVM this object started is alive (it may not serve yet)."""
        return self.handle is not None and process.is_alive(self.handle)

    def stop(self, *, grace: float = DEFAULT_STOP_GRACE_S) -> None:
        """SIGTERM the JVM this object started, SIGKILL it after ``grace`` s; return when gone.

        Only the recorded (pid, start time) is signalled; a no-op if it is not running.
        """
        if self.handle is not None:
            process.terminate([self.handle], grace=grace)
            self.handle = None

    def kill(self) -> None:
        """SIGKILL the JVM this object started and wait until it is gone (no-op if not running).
        """
        if self.handle is not None:
            process.kill([self.handle])
            self.handle = None

    def _require_handle(self) -> ProcessHandle:
        if self.handle is None:
            raise StartupError(f"ZooKeeper {self.server_id} was not started")
        return self.handle

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
