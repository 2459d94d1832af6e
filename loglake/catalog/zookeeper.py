"""Cluster metadata in ZooKeeper: Kafka's classic layout under a chroot, with typed accessors.

Layout (JSON values, as Kafka writes them)::

    /brokers/ids/<id>                                ephemeral {"host","port","rack","version"}
    /brokers/topics/<topic>                          {"version":3,"topic_id",
                                                      "partitions":{"0":[1,2]},
                                                      "adding_replicas":{"0":[3]},
                                                      "removing_replicas":{"0":[1]}}
    /brokers/topics/<topic>/partitions/<p>/state     {"leader","leader_epoch","isr",
                                                      "controller_epoch","version"}
    /config/topics/<topic>                           {"version":1,"config":{name: value}}
    /config/brokers/<id> and /config/brokers/<default>
                                                     {"version":1,"config":{name: value}}:
                                                      dynamic broker configs (replication
                                                      throttle rates), one broker / all
    /admin/delete_topics/<topic>                     marker while a deletion runs
    /controller (ephemeral), /controller_epoch
    /latest_producer_id_block                        {"version":1,"broker","block_start",
                                                      "block_end"} (Kafka's; decimal strings)
    /consumers/<group>/offsets/<topic>/<p>           committed offset, plain decimal (Kafka's
                                                      form); metadata in offsets_meta/ beside
                                                      it (catalog/groups.py)
    /loglake/txn_offsets/<producer_id>/<group>       pending transactional offsets
                                                      (catalog/groups.py)
    /loglake/storage                                 {"url", "options"}: where the Delta tables
                                                      live (options without secrets)
    /loglake/tiering/<topic>/<p>                     {"tiered_end","tier_start","lag_offsets",
                                                      "lag_seconds","quarantined","failures",
                                                      "last_error","leader","updated_ms"}
    /loglake/table_changes/<topic>                   {"version","operation","updated_ms"}: set
                                                      by clean-up jobs after a commit that
                                                      removed files; brokers watch it and drop
                                                      their cached view of the table
    /loglake/metrics/<id>                            ephemeral, UTF-8: the scrape URL of broker
                                                      <id>'s metrics endpoint
                                                      (``http://host:port/metrics``), only while
                                                      its ``metrics.listener`` serves
    /loglake/jobs/...                                clean-up job runs (bounded history per
                                                      job) and next-due times
                                                      (catalog/job_runs.py)
    /loglake/transactions/<p>/...                    transaction coordinator state: owner,
                                                      coordinator epoch, one znode per
                                                      transactional id (catalog/transactions.py)

Invariants: a topic exists once its assignment znode exists; creation writes assignment, config
and every partition state in one multi-op transaction, so readers never see a partial topic.
Adding partitions (CreatePartitions, :meth:`ClusterCatalog.add_partitions`) is one transaction
too: the assignment znode, conditioned on the version it was read at, and every new partition's
state znode; a partition is listed in the assignment exactly when its state exists.
Partition-state writes are conditioned on the znode version (``set_partition_state``).

Reassignment (KIP-455, Kafka's topic-znode form): while partition P moves, ``partitions[P]``
holds the full replica set RS = target + original (target first), ``adding_replicas[P]`` the
replicas not in the original set and ``removing_replicas[P]`` those not in the target; both
maps list only partitions being reassigned (:class:`ReplicaAssignment`). Every change of them
is one transaction (:meth:`ClusterCatalog.write_replica_assignments`): the topic znode at the
version it was read, the state znodes it changes at theirs, and the controller epoch when the
controller writes. A leader's ISR expansion checks the topic znode version it knows
(``update_partition_state(..., assignment_version=)``), so it never adds a replica that a
reassignment removed meanwhile.

Errors: kazoo's exceptions do not leave this module for connection trouble. ConnectionLoss,
SessionExpired and OperationTimeout (and a connect time-out) become
:class:`ZooKeeperUnavailableError` (retriable); a stopped catalog raises
:class:`CatalogClosedError`. :meth:`ClusterCatalog.retrying` waits such outages out (bounded
backoff, one log line per failed attempt); :func:`zookeeper_unavailable` classifies an exception
for callers that reach kazoo some other way. Node-level outcomes that callers decide on are
typed too: a topic that exists (TopicExistsError) or not (UnknownTopicError), a conditioned
write that lost a race (StaleStateError); no kazoo exception leaves this package. A refused
SASL login is ZooKeeperAuthenticationError, a znode ACL's refusal ZooKeeperNoAuthError.

Security (catalog/zk_auth.py, catalog/zk_acls.py): the catalog authenticates with SASL
DIGEST-MD5 when its :class:`ZkAuth` (or the LOGLAKE_ZOOKEEPER_SASL_* environment) names a user,
and with ``set_acl`` every znode it creates gets Kafka's ACL policy (creator ALL + world READ;
no world access under ``/config/users`` and ``/config/brokers``). Default: neither.

Sessions (see :class:`SessionEvent`): kazoo reconnects by itself and, after an expiry (state
LOST), opens a *new* session. The catalog remembers every session id it has held, so a
``/brokers/ids/<id>`` node left by an earlier, expired session of this same catalog is
recognised as ours and replaced, while a node of any other session (the previous run of this
broker, whose session has not expired yet) is waited for (:meth:`register_broker_waiting`).

Thread-safety: kazoo clients are thread-safe; the session bookkeeping is guarded by a lock.
Watches and session listeners fire on kazoo's threads: callers must hop to their own loop.
Blocking calls (everything that talks to ZooKeeper) belong in worker threads, never on an event
loop.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import json
import logging
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, KeeperState
from kazoo.retry import ForceRetryError, KazooRetry, RetryFailedError
from kio.schema.errors import ErrorCode

from loglake.catalog.groups import GroupStore
from loglake.catalog.zk_acls import PathAclKazooClient, secure_if_open
from loglake.catalog.zk_auth import (
    PERSISTENT_PATHS,
    ZkAuth,
    ZooKeeperAuthenticationError,
    ZooKeeperNoAuthError,
    acl_for,
    zk_auth_for_connect,
)
from loglake.catalog.zk_tls import start_client, tls_failure
from loglake.errors import InvalidConfigError, LoglakeError, TopicExistsError, UnknownTopicError

if TYPE_CHECKING:
    from loglake.catalog.acls import AclStore
    from loglake.catalog.config_changes import ConfigChanges
    from loglake.catalog.entity_configs import EntityConfigStore
    from loglake.catalog.job_runs import JobRunStore
    from loglake.catalog.transactions import TransactionStore

log = logging.getLogger(__name__)
# kazoo warns on stderr when a chroot does not exist; brokers create it first and tools report
# a missing cluster themselves (ClusterCatalog._require_cluster), in one line
warnings.filterwarnings("ignore", message="No chroot path exists", category=UserWarning)

P = ParamSpec("P")
T = TypeVar("T")


class ControllerMovedError(LoglakeError):
    """``/controller_epoch`` changed: another broker is controller now; stop writing."""


class StaleStateError(LoglakeError):
    """The partition-state znode changed since it was read; re-read and decide again."""


class ZooKeeperUnavailableError(LoglakeError):
    """ZooKeeper could not answer: the connection is down, our session expired (kazoo opens a
    new one), or a request or connect attempt timed out. Retriable: try again later
    (:meth:`ClusterCatalog.retrying` does)."""

    code = ErrorCode.request_timed_out


class CatalogClosedError(ZooKeeperUnavailableError):
    """The catalog was stopped (the process is shutting down) while an operation waited for
    ZooKeeper; retrying cannot help."""


class NoClusterError(LoglakeError):
    """ZooKeeper answered, but no loglake cluster lives under the given chroot (a tool's
    :meth:`ClusterCatalog.start`); the message names the chroot to try when one is found."""

    code = ErrorCode.invalid_request


class BrokerIdInUseError(LoglakeError):
    """``/brokers/ids/<id>`` stayed registered by another ZooKeeper session for longer than a
    previous run of this broker could have kept it: another live broker uses this broker.id."""

    code = ErrorCode.duplicate_broker_registration


class RegistrationHeldError(LoglakeError):
    """``/brokers/ids/<id>`` exists and belongs to a session that is not (and never was) ours:
    usually the previous run of this broker, whose session expires within its timeout."""

    def __init__(self, message: str, *, owner: int) -> None:
        super().__init__(message)
        self.owner = owner


class SessionEvent(enum.Enum):
    """What a session listener (:meth:`ClusterCatalog.add_session_listener`) is told.

    ``SUSPENDED``: the connection dropped; the session (ephemeral nodes, watches) may survive.
    ``LOST``: the session expired or was closed; its ephemeral nodes are gone.
    ``RECONNECTED``: connected again within the same session.
    ``NEW_SESSION``: connected with a session we did not have before (first connect, or after
    LOST): ephemeral nodes must be created again.
    """

    SUSPENDED = "suspended"
    LOST = "lost"
    RECONNECTED = "reconnected"
    NEW_SESSION = "new session"


class Registration(enum.Enum):
    """Who holds ``/brokers/ids/<id>`` (:meth:`ClusterCatalog.registration`)."""

    OURS = "ours"  # our current session
    ABSENT = "absent"
    OTHER = "other"  # any other session, an earlier one of ours included


_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError)
"""kazoo's ways of saying "no answer from ZooKeeper now" (ConnectionClosedError, a subclass of
SessionExpiredError, means the client was stopped and is told apart first)."""

RETRY_FIRST_DELAY_S = 0.2
RETRY_MAX_DELAY_S = 2.0
"""Backoff of :meth:`ClusterCatalog.retrying`: 0.2 s doubling to at most 2 s, jittered 20 %."""
RECONNECT_MAX_DELAY_S = 1.0
"""Cap of kazoo's own reconnect backoff (its default grows to an hour): a broker reconnects
within about a second of ZooKeeper coming back, well inside any session timeout."""
CONNECT_LOG_EVERY_S = 5.0
REGISTRATION_POLL_S = 0.5
REGISTRATION_LOG_EVERY_S = 5.0
REGISTRATION_GRACE_S = 5.0
"""A foreign ``/brokers/ids/<id>`` node is waited for up to twice our session timeout plus this
(:class:`RegistrationWait`); ZooKeeper expires sessions up to one tick late and may round the
previous run's timeout up."""


def zookeeper_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says ZooKeeper could not answer now (retry later), typed or kazoo's."""
    return isinstance(exc, (ZooKeeperUnavailableError, *_CONNECTION_ERRORS))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ConnectionClosedError):
        return "the client is closed"
    if isinstance(exc, SessionExpiredError):
        return "session expired"
    if isinstance(exc, ConnectionLoss):
        return "connection lost"
    if isinstance(exc, OperationTimeoutError):
        return "operation timed out"
    if isinstance(exc, KazooTimeoutError):
        return "no connection within the connect timeout"
    return str(exc) or type(exc).__name__


@contextlib.contextmanager
def _typed_errors(what: str) -> Iterator[None]:
    """Turn kazoo's connection errors inside the block into our typed ones."""
    try:
        yield
    except ConnectionClosedError:
        raise CatalogClosedError(f"{what}: the ZooKeeper client is closed") from None
    except _CONNECTION_ERRORS as exc:
        raise ZooKeeperUnavailableError(f"{what}: ZooKeeper {_describe(exc)}") from None
    except AuthFailedError:
        raise ZooKeeperAuthenticationError(
            f"{what}: ZooKeeper refused our SASL login",
            hint="check zookeeper.sasl.username/password (or the JAAS file) against the "
                 "server's JAAS Server section") from None
    except NoAuthError:
        raise ZooKeeperNoAuthError(
            f"{what}: ZooKeeper's ACL refused it (NoAuth)",
            hint="authenticate as the cluster's ZooKeeper user: zookeeper.sasl.* settings, or "
                 "LOGLAKE_ZOOKEEPER_SASL_USERNAME/PASSWORD for tools") from None


def _zookeeper_op(func: Callable[P, T]) -> Callable[P, T]:
    """Decorate a public catalog method: connection errors leave it typed (see the module
    docstring)."""
    what = func.__name__.replace("_", " ")

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        with _typed_errors(what):
            return func(*args, **kwargs)

    return wrapper


def _config_of(raw: bytes) -> dict[str, str]:
    """The ``config`` map of a config znode in Kafka's form."""
    return {str(k): str(v) for k, v in json.loads(raw).get("config", {}).items()}


def _never() -> bool:
    return False


@dataclass
class RegistrationWait:
    """How long start-up waits for a foreign ``/brokers/ids/<id>`` node to go (pure; the caller
    passes the clock readings, so it is testable without ZooKeeper).

    The previous run's node lives until its session expires, at most one session timeout after
    ZooKeeper last heard from it. The clock starts when we first see an owner and restarts
    when the owner changes, when our connection was (re)established after the clock started (a
    restarted ZooKeeper gives every session a fresh timeout; kazoo's new session after our own
    expiry counts too), and when two checks lie more than ``pause_gap_s`` apart (this process
    was paused or starved, so it did not watch the clock). ``limit_s`` after the clock last
    restarted, the node is taken to belong to another live broker.
    """

    limit_s: float
    pause_gap_s: float
    owner: int | None = None
    since: float = 0.0
    last_check: float = 0.0

    def check(self, owner: int, *, now: float, connected_at: float) -> bool:
        """Note that ``owner`` still holds the node at ``now``; True once ``limit_s`` passed."""
        if (owner != self.owner or connected_at > self.since
                or now - self.last_check > self.pause_gap_s):
            self.owner, self.since = owner, now
        self.last_check = now
        return now - self.since > self.limit_s

    def waited(self, now: float) -> float:
        return now - self.since

CLUSTER_ID = "/cluster/id"
BROKER_IDS = "/brokers/ids"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
TOPICS = "/brokers/topics"
TOPIC_CONFIGS = "/config/topics"
BROKER_CONFIGS = "/config/brokers"
DELETE_TOPICS = "/admin/delete_topics"
STORAGE = "/loglake/storage"
TIERING = "/loglake/tiering"
TABLE_CHANGES = "/loglake/table_changes"
OFFLINE_REPLICAS = "/loglake/offline_replicas"
METRICS = "/loglake/metrics"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
"""One ephemeral child ``<broker>:<partition>:<topic>`` per replica its broker cannot open
(``:`` never occurs in a topic name); it goes with the broker's session."""
CHROOT_SCAN_LIMIT = 100
"""Top-level znodes a tool looks under for a cluster when its chroot holds none."""
_SECRET_MARKERS = ("secret", "password", "token", "access_key", "credential")


def split_connect(connect: str) -> tuple[str, str]:
    """``host:port[,host:port][/chroot]`` -> (hosts, chroot) ("" when there is none)."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, (slash + chroot).rstrip("/") if slash else ""


@dataclass(frozen=True)
class BrokerEndpoint:
    """One advertised listener of a broker (Kafka's ``EndPoint``)."""

    listener: str
    host: str
    port: int
    security_protocol: str

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True)
class BrokerInfo:
    """A registered broker. ``host``/``port`` are its first endpoint; ``endpoints`` all of
    them (empty: one PLAINTEXT endpoint at host:port, as brokers before listeners wrote)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    registration: int = 0  # czxid of /brokers/ids/<id>: changes when the broker re-registers
    endpoints: tuple[BrokerEndpoint, ...] = ()

    @property
    def all_endpoints(self) -> tuple[BrokerEndpoint, ...]:
        return self.endpoints or (
            BrokerEndpoint("PLAINTEXT", self.host, self.port, "PLAINTEXT"),)

    def endpoint(self, listener: str) -> BrokerEndpoint | None:
        """The endpoint of ``listener``, or None when this broker has no such listener."""
        return next((e for e in self.all_endpoints if e.listener == listener.upper()), None)

    def to_json(self) -> dict[str, Any]:
        """Kafka's ``/brokers/ids/<id>`` JSON (version 5): ``endpoints`` as NAME://host:port,
        ``listener_security_protocol_map``; ``host``/``port`` those of the first PLAINTEXT
        endpoint (null / -1 when there is none), as Kafka writes them for old readers."""
        endpoints = self.all_endpoints
        plain = next((e for e in endpoints if e.security_protocol == "PLAINTEXT"), None)
        return {
            "listener_security_protocol_map": {e.listener: e.security_protocol
                                               for e in endpoints},
            "endpoints": [str(e) for e in endpoints],
            "rack": self.rack, "jmx_port": -1, "features": {},
            "host": plain.host if plain else None, "port": plain.port if plain else -1,
            "timestamp": str(int(time.time() * 1000)), "version": 5,
        }

    @classmethod
    def from_json(cls, broker_id: int, data: Mapping[str, Any],
                  registration: int = 0) -> BrokerInfo:
        """Read Kafka's JSON (any version: without ``endpoints``, host/port are PLAINTEXT)."""
        protocols = data.get("listener_security_protocol_map") or {}
        endpoints = []
        for text in data.get("endpoints") or ():
            name, _, address = str(text).partition("://")
            address_host, _, address_port = address.rpartition(":")
            endpoints.append(BrokerEndpoint(name, address_host.strip("[]"), int(address_port),
                                            protocols.get(name, name)))
        first = endpoints[0] if endpoints else BrokerEndpoint(
            "PLAINTEXT", str(data["host"]), int(data["port"]), "PLAINTEXT")
        return cls(broker_id, first.host, first.port, data.get("rack"), registration,
                   tuple(endpoints))


@dataclass(frozen=True)
class PartitionState:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int = 0
    zk_version: int = -1

    def to_json(self) -> bytes:
        return _dump(
            {
                "controller_epoch": self.controller_epoch,
                "leader": self.leader,
                "version": 1,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
            }
        )


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    assignment: dict[int, tuple[int, ...]]  # partition -> replica broker ids (RS while moving)
    configs: dict[str, str]
    version: int = -1  # of the assignment znode
    reassigning: frozenset[int] = frozenset()  # partitions being reassigned


@dataclass(frozen=True)
class ReplicaAssignment:
    """One partition's replicas as its topic znode holds them (see the module docstring):
    ``replicas`` is the full set RS, ``adding``/``removing`` are empty unless it moves."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target(self) -> tuple[int, ...]:
        """TRS: where the partition is going (RS without the replicas being removed)."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        """ORS: where it was (RS without the replicas being added)."""
        return tuple(r for r in self.replicas if r not in self.adding)


@dataclass(frozen=True)
class TopicReplicaAssignments:
    """Every partition's :class:`ReplicaAssignment` of one topic and the znode version."""

    name: str
    partitions: dict[int, ReplicaAssignment]
    version: int


def _replica_assignments(name: str, raw: bytes, version: int) -> TopicReplicaAssignments:
    data = json.loads(raw)
    adding = data.get("adding_replicas") or {}
    removing = data.get("removing_replicas") or {}
    partitions = {
        int(p): ReplicaAssignment(tuple(replicas), tuple(adding.get(p, ())),
                                  tuple(removing.get(p, ())))
        for p, replicas in data["partitions"].items()
    }
    return TopicReplicaAssignments(name, dict(sorted(partitions.items())), version)


def _transaction_failure(results: list[Any]) -> tuple[int, Exception] | None:
    """(index, error) of the operation that failed a ZooKeeper multi-op, None if it committed
    (the other operations report RolledBackError / RuntimeInconsistency)."""
    for index, result in enumerate(results):
        if isinstance(result, Exception) and not isinstance(
                result, (RolledBackError, RuntimeInconsistency)):
            return index, result
    return None


def _dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


class ClusterCatalog:
    """Typed access to the ZooKeeper layout above.

    ``connect`` is Kafka's ``zookeeper.connect`` string (may end in a chroot). Nothing
    connects before :meth:`start`. ``mode``: a ``"broker"`` creates the chroot and the
    top-level znodes at start; a ``"tool"`` creates nothing at start (not even on a wrong
    chroot) and refuses a chroot holding no cluster (:class:`NoClusterError`); its reads never
    create znodes, and it writes only through explicit write methods (a clean-up job
    announcing its commit).
    """

    def __init__(self, connect: str, *, timeout: float = 10.0, session_timeout: float = 18.0,
                 mode: Literal["broker", "tool"] = "broker", auth: ZkAuth | None = None):
        self._hosts, self._chroot = split_connect(connect)
        self.mode = mode
        self.session_timeout = session_timeout
        self.auth = auth if auth is not None else zk_auth_for_connect(connect)
        """Our ZooKeeper identity and ACL policy (catalog/zk_auth.py); without ``auth``, the
        LOGLAKE_ZOOKEEPER_SASL_* environment, else the dev profile's ZooKeeper login for these
        hosts (anonymous and open znodes when neither)."""
        self.zk = self._client(self._hosts + self._chroot, session_timeout)
        self._start_timeout = timeout
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._session: int | None = None  # id of the session we are (or were last) connected in
        self._old_sessions: set[int] = set()  # every earlier session of this catalog: expired
        self._connected_at = 0.0  # time.monotonic() of the last (re)connection
        self._listeners: list[Callable[[SessionEvent], Any]] = []
        self.zk.add_listener(self._on_state)

    def _client(self, hosts: str, session_timeout: float) -> KazooClient:
        reconnect = KazooRetry(max_tries=-1, delay=0.1, backoff=2,
                               max_delay=RECONNECT_MAX_DELAY_S)
        commands = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=RETRY_MAX_DELAY_S)
        return PathAclKazooClient(
            hosts=hosts, timeout=session_timeout, connection_retry=reconnect,
            command_retry=commands, acl_policy=acl_for if self.auth.set_acl else None,
            **self.auth.kazoo_kwargs())  # SASL login, TLS handler (zk_auth.py, zk_tls.py)

    # ---- session
    def start(self, *, wait: bool = False, stopped: Callable[[], bool] = _never) -> None:
        """Connect (creating the chroot) and create the top-level znodes of the layout.

        Without ``wait`` (tools): give up after the connect timeout with
        ZooKeeperUnavailableError. With ``wait`` (brokers): wait as long as ZooKeeper is down,
        logging now and then, until connected; raises CatalogClosedError if :meth:`stop` is
        called or ``stopped()`` turns true meanwhile. Blocking: run it in a worker thread.
        A tool (``mode="tool"``) only connects and checks that a cluster lives there.
        """
        if self.mode == "tool":
            self._connect(self.zk, wait=wait, stopped=stopped)
            with _typed_errors("looking for the cluster"):
                self._require_cluster()
            return
        if self._chroot:
            bootstrap = self._client(self._hosts, self.session_timeout)
            try:
                self._connect(bootstrap, wait=wait, stopped=stopped)
                self._call(wait, "creating the chroot", bootstrap.ensure_path, self._chroot,
                           stopped=stopped)
                if self.auth.set_acl:
                    self._call(wait, "securing the chroot", secure_if_open, bootstrap,
                               self._chroot, acl_for("/"), stopped=stopped)
            finally:
                bootstrap.stop()
                bootstrap.close()
        self._connect(self.zk, wait=wait, stopped=stopped)
        secured = PERSISTENT_PATHS if self.auth.set_acl else ()  # before anyone else can
        for path in (BROKER_IDS, TOPICS, TOPIC_CONFIGS, DELETE_TOPICS, *secured):
            self._call(wait, "creating the top-level znodes", self.zk.ensure_path, path,
                       stopped=stopped)

    def _require_cluster(self) -> None:
        """Raise NoClusterError unless ``/cluster/id`` exists or a broker is registered under
        our chroot (an empty ``/brokers/ids`` may be a stray left by an older tool)."""
        if self.zk.exists(CLUSTER_ID) is not None:
            return
        with contextlib.suppress(NoNodeError):
            if self.zk.get_children(BROKER_IDS):
                return
        here = f"{self._hosts}{self._chroot}"
        found = self._clusters_near_root()
        if found:
            tries = " or ".join(f"{self._hosts}{chroot}" for chroot in found)
            raise NoClusterError(f"no loglake cluster in ZooKeeper at {here} (nothing under "
                                 f"the chroot {self._chroot or '/'}); did you mean {tries}?")
        raise NoClusterError(
            f"no loglake cluster in ZooKeeper at {here} (no /cluster/id under the chroot "
            f"{self._chroot or '/'}, nor at the root or one level below it)",
            hint="give the brokers' zookeeper.connect, chroot included")

    def _clusters_near_root(self) -> list[str]:
        """Chroots (``""`` for the root) with a ``/cluster/id``: the root and its children
        (at most CHROOT_SCAN_LIMIT of them). Reads only."""
        root = self._client(self._hosts, self.session_timeout)
        try:
            self._connect(root, wait=False, stopped=_never)
            found = [""] if root.exists(CLUSTER_ID) is not None else []
            children = sorted(c for c in root.get_children("/") if c != "zookeeper")
            for child in children[:CHROOT_SCAN_LIMIT]:
                if f"/{child}" != self._chroot and root.exists(f"/{child}{CLUSTER_ID}"):
                    found.append(f"/{child}")
            return [chroot for chroot in found if chroot != self._chroot]
        finally:
            root.stop()
            root.close()

    def _call(self, wait: bool, what: str, func: Callable[..., T], *args: Any,
              stopped: Callable[[], bool]) -> T:
        if wait:
            return self.retrying(what, func, *args, stopped=stopped)
        with _typed_errors(what):
            return func(*args)

    def _connect(self, client: KazooClient, *, wait: bool, stopped: Callable[[], bool]) -> None:
        if not wait:
            with _typed_errors(f"connecting to ZooKeeper at {self._hosts}"):
                start_client(client, self._start_timeout)  # stops at a TLS config failure
            return
        connected = client.start_async()  # kazoo keeps trying (RECONNECT_MAX_DELAY_S backoff)
        started = time.monotonic()
        logged = started
        while not connected.wait(0.2):
            if self._closing.is_set() or stopped():
                raise CatalogClosedError("stopped while waiting for ZooKeeper")
            if client.client_state == KeeperState.AUTH_FAILED:  # kazoo stopped connecting
                with _typed_errors(f"connecting to ZooKeeper at {self._hosts}"):
                    raise AuthFailedError()
            if (failure := tls_failure(client)) is not None:  # not cured by retrying
                client.stop()
                raise InvalidConfigError(failure)
            if time.monotonic() - logged >= CONNECT_LOG_EVERY_S:
                logged = time.monotonic()
                log.warning("waiting for ZooKeeper at %s (%.0f s so far)", self._hosts,
                            logged - started)

    def stop(self) -> None:
        """Close the session (our ephemeral nodes go at once). Operations waiting in
        :meth:`retrying` or :meth:`start` end with CatalogClosedError."""
        self._closing.set()
        self.zk.stop()
        self.zk.close()

    def add_session_listener(self, listener: Callable[[SessionEvent], Any]) -> None:
        """Call ``listener`` (on kazoo's thread; it must not block) on every session change."""
        with self._lock:
            self._listeners.append(listener)

    def _on_state(self, state: KazooState) -> None:
        if state == KazooState.CONNECTED:
            client_id = self.zk.client_id
            session = int(client_id[0]) if client_id else None
            with self._lock:
                new = session != self._session
                if new and self._session is not None:
                    self._old_sessions.add(self._session)
                self._session = session
                self._connected_at = time.monotonic()
            event = SessionEvent.NEW_SESSION if new else SessionEvent.RECONNECTED
        elif state == KazooState.SUSPENDED:
            event = SessionEvent.SUSPENDED
        else:
            event = SessionEvent.LOST
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(event)
            except Exception:
                log.exception("session listener failed on %s", event.value)

    @property
    def connected(self) -> bool:
        """Whether the client is connected to ZooKeeper now (a read would be answered rather
        than wait for a reconnection). Thread-safe."""
        return bool(self.zk.connected)

    @property
    def connected_at(self) -> float:
        """``time.monotonic()`` of the last (re)connection to ZooKeeper (0 before any)."""
        with self._lock:
            return self._connected_at

    def _current_session(self) -> int | None:
        client_id = self.zk.client_id
        return int(client_id[0]) if client_id and client_id[0] else None

    def _was_our_session(self, session: int) -> bool:
        with self._lock:
            return session in self._old_sessions

    def retrying(self, what: str, func: Callable[..., T], *args: Any,
                 stopped: Callable[[], bool] = _never) -> T:
        """``func(*args)``, called again while ZooKeeper is unavailable, until it returns.

        Retries on ZooKeeperUnavailableError and kazoo's connection errors (after a session
        expiry kazoo connects with a new session by itself) with KazooRetry's jittered backoff,
        RETRY_FIRST_DELAY_S doubling to RETRY_MAX_DELAY_S, and logs one warning line per failed
        attempt. Other exceptions propagate at once. Raises CatalogClosedError once the catalog
        is stopped or ``stopped()`` is true. Blocking: call it from a worker thread. A request
        made while disconnected waits in kazoo's queue until the connection is back (or fails
        when the session turns out expired), so a long outage costs few attempts.
        """
        attempts = 0

        def interrupted() -> bool:
            return self._closing.is_set() or stopped()

        def attempt() -> T:
            nonlocal attempts
            if interrupted():
                raise CatalogClosedError(f"{what}: stopped while ZooKeeper was unavailable")
            attempts += 1
            try:
                with _typed_errors(what):
                    return func(*args)
            except CatalogClosedError:
                raise
            except ZooKeeperUnavailableError as exc:
                if interrupted():
                    raise CatalogClosedError(
                        f"{what}: stopped while ZooKeeper was unavailable") from None
                log.warning("%s failed (attempt %d): %s; retrying", what, attempts, exc.message)
                raise ForceRetryError() from None

        retry = KazooRetry(max_tries=-1, delay=RETRY_FIRST_DELAY_S, backoff=2, max_jitter=0.2,
                           max_delay=RETRY_MAX_DELAY_S, interrupt=interrupted)
        try:
            return retry(attempt)
        except RetryFailedError:  # interrupted between attempts
            raise CatalogClosedError(f"{what}: stopped while ZooKeeper was unavailable") from None

    # ---- cluster id
    @_zookeeper_op
    def ensure_cluster_id(self) -> str:
        """The id in ``/cluster/id`` (Kafka's ``{"version":"1","id":...}``), created with a
        random 22-character id if there is none yet (the first broker wins a race)."""
        candidate = _dump({"version": "1", "id": uuid.uuid4().hex[:22]})
        with contextlib.suppress(NodeExistsError):
            self.zk.create(CLUSTER_ID, candidate, makepath=True)
        raw, _ = self.zk.get(CLUSTER_ID)
        return str(json.loads(raw)["id"])

    # ---- brokers
    @_zookeeper_op
    def register_broker(self, info: BrokerInfo) -> None:
        """Create the ephemeral ``/brokers/ids/<id>`` for our current session (one attempt).

        Done if the node exists and our current session owns it (also after a ConnectionLoss
        that hid a successful create). A node owned by an earlier session of this catalog --
        expired, since kazoo changes sessions only on expiry -- is ours to replace: it is
        deleted (version-checked) and created again, as Kafka's ``registerBroker`` checks the
        owner instead of failing. A node of any other session raises RegistrationHeldError.
        """
        data = _dump(info.to_json())
        path = f"{BROKER_IDS}/{info.broker_id}"
        for _ in range(3):
            try:
                self.zk.create(path, data, ephemeral=True)
                return
            except NodeExistsError:
                pass
            try:
                _, stat = self.zk.get(path)
            except NoNodeError:  # the old session's node expired in between: try again
                continue
            owner = int(stat.ephemeralOwner)
            if owner == self._current_session():
                return
            if not self._was_our_session(owner):
                raise RegistrationHeldError(
                    f"/brokers/ids/{info.broker_id} is registered by session {owner:#x}",
                    owner=owner)
            log.warning("/brokers/ids/%d is left from our expired session %#x: replacing it",
                        info.broker_id, owner)
            with contextlib.suppress(NoNodeError, BadVersionError):
                self.zk.delete(path, version=stat.version)
        raise ZooKeeperUnavailableError(
            f"/brokers/ids/{info.broker_id} changed under us while registering")

    def register_broker_waiting(self, info: BrokerInfo, *,
                                stopped: Callable[[], bool] = _never) -> None:
        """Register (:meth:`register_broker`), waiting out ZooKeeper outages (:meth:`retrying`)
        and a previous run's node until its session expires (:class:`RegistrationWait`).

        Raises BrokerIdInUseError if another session keeps the node past the wait limit, and
        CatalogClosedError if stopped meanwhile. Blocking: call it from a worker thread.
        """
        what = f"registering broker {info.broker_id}"
        wait = RegistrationWait(limit_s=2 * self.session_timeout + REGISTRATION_GRACE_S,
                                pause_gap_s=REGISTRATION_POLL_S + 2.0)
        logged_at = -REGISTRATION_LOG_EVERY_S
        while True:
            try:
                self.retrying(what, self.register_broker, info, stopped=stopped)
                if wait.owner is not None:
                    log.warning("registered broker %d after the old registration expired",
                                info.broker_id)
                return
            except RegistrationHeldError as exc:
                now = time.monotonic()
                if wait.check(exc.owner, now=now, connected_at=self.connected_at):
                    raise BrokerIdInUseError(
                        f"broker id {info.broker_id} is registered by ZooKeeper session "
                        f"{exc.owner:#x}, which is not ours, for {wait.waited(now):.0f} s",
                        hint="is another broker running with this broker.id?") from None
                if wait.since == now or now - logged_at >= REGISTRATION_LOG_EVERY_S:
                    logged_at = now
                    log.warning(
                        "broker id %d is still registered by session %#x (the previous run of "
                        "this broker?): waiting for it to expire (%.0f s of at most %.0f s)",
                        info.broker_id, exc.owner, wait.waited(now), wait.limit_s)
            deadline = time.monotonic() + REGISTRATION_POLL_S
            while time.monotonic() < deadline:
                if self._closing.is_set() or stopped():
                    raise CatalogClosedError(f"{what}: stopped while waiting")
                time.sleep(0.1)

    @_zookeeper_op
    def registration(self, broker_id: int) -> Registration:
        """Who holds ``/brokers/ids/<broker_id>`` now."""
        stat = self.zk.exists(f"{BROKER_IDS}/{broker_id}")
        if stat is None:
            return Registration.ABSENT
        if int(stat.ephemeralOwner) == self._current_session():
            return Registration.OURS
        return Registration.OTHER

    @_zookeeper_op
    def brokers(self) -> dict[int, BrokerInfo]:
        result = {}
        try:
            children = self.zk.get_children(BROKER_IDS)
        except NoNodeError:  # a tool on a cluster no broker joined yet
            return {}
        for child in children:
            try:
                raw, stat = self.zk.get(f"{BROKER_IDS}/{child}")
            except NoNodeError:
                continue
            result[int(child)] = BrokerInfo.from_json(int(child), json.loads(raw), stat.czxid)
        return result

    # ---- topics
    @_zookeeper_op
    def topic_names(self) -> list[str]:
        try:
            return sorted(self.zk.get_children(TOPICS))
        except NoNodeError:  # a tool on a cluster no broker joined yet
            return []

    @_zookeeper_op
    def watch_topics(self, callback: Callable[[list[str]], Any]) -> None:
        self.zk.ChildrenWatch(TOPICS)(callback)

    @_zookeeper_op
    def topic(self, name: str) -> TopicMetadata | None:
        try:
            raw, stat = self.zk.get(f"{TOPICS}/{name}")
        except NoNodeError:
            return None
        found = _replica_assignments(name, raw, int(stat.version))
        assignment = {p: a.replicas for p, a in found.partitions.items()}
        return TopicMetadata(name, assignment, self.topic_config(name), found.version,
                             frozenset(p for p, a in found.partitions.items() if a.reassigning))

    @_zookeeper_op
    def topic_id(self, name: str) -> uuid.UUID:
        """The topic id in ``/brokers/topics/<name>`` (the zero UUID if none, or no topic)."""
        try:
            raw, _ = self.zk.get(f"{TOPICS}/{name}")
            topic_id = json.loads(raw).get("topic_id")
            return uuid.UUID(topic_id) if topic_id else uuid.UUID(int=0)
        except (NoNodeError, ValueError, TypeError):
            return uuid.UUID(int=0)

    @_zookeeper_op
    def create_topic(
        self,
        name: str,
        assignment: Mapping[int, tuple[int, ...]],
        configs: Mapping[str, str],
        *,
        topic_id: str,
        controller_epoch: int = 0,
    ) -> None:
        """Write assignment, config and initial partition states atomically.

        The first replica of each partition starts as leader with epoch 0 and the full
        replica set as ISR. Raises TopicExistsError if the topic (or its deletion) exists.
        """
        if self.zk.exists(f"{DELETE_TOPICS}/{name}"):
            raise TopicExistsError(f"Topic '{name}' is marked for deletion.")
        tx = self.zk.transaction()
        tx.create(f"{TOPICS}/{name}", _dump(
            {"version": 3, "topic_id": topic_id,
             "partitions": {str(p): list(r) for p, r in assignment.items()}}
        ))
        config_path = f"{TOPIC_CONFIGS}/{name}"
        config_value = _dump({"version": 1, "config": dict(configs)})
        if self.zk.exists(config_path):
            tx.set_data(config_path, config_value)
        else:
            tx.create(config_path, config_value)
        tx.create(f"{TOPICS}/{name}/partitions")
        for partition, replicas in assignment.items():
            tx.create(f"{TOPICS}/{name}/partitions/{partition}")
            state = PartitionState(replicas[0], 0, tuple(replicas), controller_epoch)
            tx.create(f"{TOPICS}/{name}/partitions/{partition}/state", state.to_json())
        results = tx.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            if any(isinstance(r, NodeExistsError) for r in failures) and self.zk.exists(
                f"{TOPICS}/{name}"
            ):
                raise TopicExistsError(f"Topic '{name}' already exists.")
            raise failures[0]

    @_zookeeper_op
    def topic_assignment(self, name: str) -> tuple[dict[int, tuple[int, ...]], int] | None:
        """``(partition -> replicas, znode version)`` of ``/brokers/topics/<name>`` (None: no
        such topic); the version conditions :meth:`add_partitions`."""
        try:
            raw, stat = self.zk.get(f"{TOPICS}/{name}")
        except NoNodeError:
            return None
        partitions = json.loads(raw)["partitions"]
        assignment = {int(p): tuple(replicas) for p, replicas in partitions.items()}
        return dict(sorted(assignment.items())), int(stat.version)

    @_zookeeper_op
    def add_partitions(self, name: str, additions: Mapping[int, tuple[int, ...]],
                       version: int, *, controller_epoch: int = 0) -> None:
        """Add partitions to a topic in one transaction (see Invariants): the assignment znode
        gets ``additions`` if it is still at ``version``, and each new partition a state with
        its first replica as leader, epoch 0 and every replica in the ISR (as at creation).

        Raises StaleStateError when the assignment changed since it was read (read again and
        decide again) and UnknownTopicError when the topic is gone or being deleted."""
        path = f"{TOPICS}/{name}"
        if self.zk.exists(f"{DELETE_TOPICS}/{name}"):
            raise UnknownTopicError(f"Topic '{name}' is marked for deletion.")
        try:
            raw, stat = self.zk.get(path)
        except NoNodeError:
            raise UnknownTopicError(f"Topic '{name}' does not exist.") from None
        if stat.version != version:
            raise StaleStateError(f"the assignment of {name} changed concurrently")
        data = json.loads(raw)
        partitions = dict(data["partitions"])
        for partition, replicas in additions.items():
            if str(partition) in partitions:
                raise StaleStateError(f"partition {partition} of {name} exists already")
            partitions[str(partition)] = list(replicas)
        data["partitions"] = dict(sorted(partitions.items(), key=lambda item: int(item[0])))
        tx = self.zk.transaction()
        tx.set_data(path, _dump(data), version=version)
        for partition, replicas in sorted(additions.items()):
            tx.create(f"{path}/partitions/{partition}")
            state = PartitionState(replicas[0], 0, tuple(replicas), controller_epoch)
            tx.create(f"{path}/partitions/{partition}/state", state.to_json())
        results = tx.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if not failures:
            return
        if isinstance(results[0], NoNodeError):
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        if isinstance(results[0], BadVersionError) or any(
                isinstance(r, NodeExistsError) for r in failures):
            raise StaleStateError(f"the assignment of {name} changed concurrently")
        raise failures[0]

    @_zookeeper_op
    def watch_topic_assignment(self, name: str, callback: Callable[[int], Any]) -> None:
        """Call ``callback`` with the version of ``/brokers/topics/<name>`` now and after every
        change of it (partitions added, replicas reassigned; on kazoo's thread); stops once
        the topic is deleted."""

        def on_change(data: bytes | None, stat: Any) -> bool | None:
            if data is None:
                return False
            callback(int(stat.version))
            return None

        self.zk.DataWatch(f"{TOPICS}/{name}")(on_change)

    # ---- replica assignments (reassignment, KIP-455)
    @_zookeeper_op
    def replica_assignments(self, name: str) -> TopicReplicaAssignments | None:
        """Every partition's replicas, adding and removing replicas of ``name`` (None: no such
        topic, or it is being deleted)."""
        if self.zk.exists(f"{DELETE_TOPICS}/{name}"):
            return None
        try:
            raw, stat = self.zk.get(f"{TOPICS}/{name}")
        except NoNodeError:
            return None
        return _replica_assignments(name, raw, int(stat.version))

    @_zookeeper_op
    def ongoing_reassignments(self) -> dict[str, TopicReplicaAssignments]:
        """The topics with a partition being reassigned (reads every topic znode, not the
        partition states)."""
        result = {}
        for name in self.topic_names():
            try:
                raw, stat = self.zk.get(f"{TOPICS}/{name}")
            except NoNodeError:
                continue
            found = _replica_assignments(name, raw, int(stat.version))
            if any(a.reassigning for a in found.partitions.values()):
                result[name] = found
        return result

    @_zookeeper_op
    def write_replica_assignments(
        self, name: str, changes: Mapping[int, ReplicaAssignment], version: int,
        states: Mapping[int, PartitionState] | None = None, *,
        epoch_version: int | None = None,
    ) -> int:
        """Apply ``changes`` to the topic znode of ``name`` and write ``states`` in one
        transaction (see the module docstring): the topic znode only if still at ``version``,
        each state only if still at its ``zk_version``, and, with ``epoch_version``, only while
        ``/controller_epoch`` is at it. Other fields of the topic znode (topic id, other
        partitions) are kept. Returns the topic znode's new version.

        Raises StaleStateError (the topic or a state changed: read again and decide again),
        ControllerMovedError, or UnknownTopicError (topic or partition gone)."""
        path = f"{TOPICS}/{name}"
        try:
            raw, stat = self.zk.get(path)
        except NoNodeError:
            raise UnknownTopicError(f"Topic '{name}' does not exist.") from None
        if stat.version != version:
            raise StaleStateError(f"the assignment of {name} changed concurrently")
        data = json.loads(raw)
        partitions = dict(data["partitions"])
        adding = dict(data.get("adding_replicas") or {})
        removing = dict(data.get("removing_replicas") or {})
        for partition, assignment in changes.items():
            key = str(partition)
            if key not in partitions:
                raise UnknownTopicError(f"Partition {name}-{partition} does not exist.")
            partitions[key] = list(assignment.replicas)
            for field, values in ((adding, assignment.adding), (removing, assignment.removing)):
                if values:
                    field[key] = list(values)
                else:
                    field.pop(key, None)

        def ordered(mapping: dict[str, Any]) -> dict[str, Any]:
            return dict(sorted(mapping.items(), key=lambda item: int(item[0])))

        data.update(partitions=ordered(partitions), adding_replicas=ordered(adding),
                    removing_replicas=ordered(removing))
        tx = self.zk.transaction()
        if epoch_version is not None:
            tx.check(CONTROLLER_EPOCH, epoch_version)
        tx.set_data(path, _dump(data), version=version)
        for partition, state in sorted((states or {}).items()):
            tx.set_data(f"{path}/partitions/{partition}/state", state.to_json(),
                        version=state.zk_version)
        results = tx.commit()
        failure = _transaction_failure(results)
        if failure is None:
            return int(version) + 1
        index, error = failure
        if epoch_version is not None and index == 0:
            raise ControllerMovedError("controller epoch changed: no longer controller")
        if isinstance(error, NoNodeError):
            raise UnknownTopicError(f"Topic '{name}' or one of its partitions is gone.")
        if isinstance(error, BadVersionError):
            raise StaleStateError(f"the assignment or a state of {name} changed concurrently")
        raise error

    @_zookeeper_op
    def delete_topic(self, name: str) -> None:
        """Remove a topic's znodes (assignment, states, config) behind a delete marker."""
        if not self.zk.exists(f"{TOPICS}/{name}"):
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        self.zk.ensure_path(f"{DELETE_TOPICS}/{name}")
        self.zk.delete(f"{TOPICS}/{name}", recursive=True)
        with contextlib.suppress(NoNodeError):
            self.zk.delete(f"{TOPIC_CONFIGS}/{name}")
        for path in (f"{TIERING}/{name}", f"{TABLE_CHANGES}/{name}"):
            with contextlib.suppress(NoNodeError):
                self.zk.delete(path, recursive=True)
        self.zk.delete(f"{DELETE_TOPICS}/{name}")

    # ---- producer ids
    @_zookeeper_op
    def claim_producer_id_block(self, broker_id: int, size: int) -> int:
        """Claim the next ``size`` producer ids (Kafka's ``/latest_producer_id_block`` scheme:
        version-checked write of the block after the latest one); the block's first id."""
        for _ in range(100):
            try:
                raw, stat = self.zk.get(PRODUCER_ID_BLOCK)
            except NoNodeError:
                block = {"version": 1, "broker": broker_id, "block_start": "0",
                         "block_end": str(size - 1)}
                try:
                    self.zk.create(PRODUCER_ID_BLOCK, json.dumps(block).encode())
                    return 0
                except NodeExistsError:
                    continue
            start = int(json.loads(raw)["block_end"]) + 1
            block = {"version": 1, "broker": broker_id, "block_start": str(start),
                     "block_end": str(start + size - 1)}
            try:
                self.zk.set(PRODUCER_ID_BLOCK, json.dumps(block).encode(), version=stat.version)
                return start
            except BadVersionError:
                continue
        raise LoglakeError("could not claim a producer id block: too much contention")

    # ---- consumer groups
    def group_store(self) -> GroupStore:
        """Committed offsets and group metadata of consumer groups (catalog/groups.py), on
        this catalog's session."""
        return GroupStore(self.zk)

    def transaction_store(self) -> TransactionStore:
        """Transaction coordinator state (catalog/transactions.py), on this catalog's
        session."""
        from loglake.catalog.transactions import TransactionStore
        return TransactionStore(self.zk)

    def entity_configs(self) -> EntityConfigStore:
        """User and client-id configs (SCRAM credentials, quotas): catalog/entity_configs.py.
        Blocking calls: use them off the event loop."""
        from loglake.catalog.entity_configs import EntityConfigStore
        return EntityConfigStore(self.zk)

    def job_runs(self) -> JobRunStore:
        """Run history and next-due times of the clean-up jobs (``/loglake/jobs``):
        catalog/job_runs.py. Blocking calls: use them off the event loop."""
        from loglake.catalog.job_runs import JobRunStore
        return JobRunStore(self.zk)

    def config_changes(self) -> ConfigChanges:
        """``/config/changes`` notifications and full loads of user/client entity configs
        (client quotas): catalog/config_changes.py. Blocking calls: use them off the event
        loop."""
        from loglake.catalog.config_changes import ConfigChanges
        return ConfigChanges(self.zk)

    def acls(self) -> AclStore:
        """Kafka's ACLs (``/kafka-acl``, ``/kafka-acl-extended``, change notifications):
        catalog/acls.py. Blocking calls: use them off the event loop."""
        from loglake.catalog.acls import AclStore
        return AclStore(self.zk)

    # ---- configs
    @_zookeeper_op
    def topic_config(self, name: str) -> dict[str, str]:
        return self._read_config(f"{TOPIC_CONFIGS}/{name}")

    @_zookeeper_op
    def set_topic_config(self, name: str, configs: Mapping[str, str]) -> None:
        self._write_config(f"{TOPIC_CONFIGS}/{name}", configs)

    def _read_config(self, path: str) -> dict[str, str]:
        """A config znode in Kafka's form (``{"version": 1, "config": {...}}``); {} if none."""
        try:
            raw, _ = self.zk.get(path)
        except NoNodeError:
            return {}
        return _config_of(raw)

    def _write_config(self, path: str, configs: Mapping[str, str]) -> None:
        self._put(path, _dump({"version": 1, "config": dict(configs)}))

    def _put(self, path: str, value: bytes) -> None:
        """Write ``value`` at ``path`` whether or not the znode (or its parents) exist yet; a
        concurrent creator does not make the write fail."""
        try:
            self.zk.set(path, value)
        except NoNodeError:
            try:
                self.zk.create(path, value, makepath=True)
            except NodeExistsError:
                self.zk.set(path, value)

    @_zookeeper_op
    def watch_topic_config(self, name: str, callback: Callable[[dict[str, str]], Any]) -> None:
        def on_change(data: bytes | None, _stat: Any) -> bool | None:
            if data is None:
                return False  # znode gone: stop watching
            callback(_config_of(data))
            return None

        self.zk.DataWatch(f"{TOPIC_CONFIGS}/{name}")(on_change)

    # ---- dynamic broker configs
    @_zookeeper_op
    def broker_config(self, entity: str) -> dict[str, str]:
        """Dynamic configs of broker ``entity`` (its id, or ``<default>`` for all brokers)."""
        return self._read_config(f"{BROKER_CONFIGS}/{entity}")

    @_zookeeper_op
    def set_broker_config(self, entity: str, configs: Mapping[str, str]) -> None:
        """Replace the dynamic configs of broker ``entity`` (Kafka's znode form)."""
        self._write_config(f"{BROKER_CONFIGS}/{entity}", configs)

    @_zookeeper_op
    def watch_broker_config(self, entity: str,
                            callback: Callable[[dict[str, str]], Any]) -> None:
        """Call ``callback`` with the dynamic configs of ``entity`` now and after every change
        (``{}`` while the znode does not exist; on kazoo's thread)."""

        def on_change(data: bytes | None, _stat: Any) -> None:
            configs: dict[str, str] = {}
            if data:
                with contextlib.suppress(ValueError, AttributeError, TypeError):
                    configs = _config_of(data)
            callback(configs)

        self.zk.DataWatch(f"{BROKER_CONFIGS}/{entity}")(on_change)

    # ---- partition state
    @_zookeeper_op
    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        try:
            raw, stat = self.zk.get(f"{TOPICS}/{topic}/partitions/{partition}/state")
        except NoNodeError:
            return None
        return _parse_state(raw, stat.version)

    @_zookeeper_op
    def set_partition_state(self, topic: str, partition: int, state: PartitionState) -> int:
        """Write ``state`` only if the znode is still at ``state.zk_version``; new version back.

        Raises StaleStateError when someone else wrote in between.
        """
        try:
            stat = self.zk.set(f"{TOPICS}/{topic}/partitions/{partition}/state",
                               state.to_json(), version=state.zk_version)
        except BadVersionError:
            raise StaleStateError(
                f"state of {topic}-{partition} changed concurrently") from None
        return int(stat.version)

    @_zookeeper_op
    def watch_controller(self, callback: Callable[[int], Any]) -> None:
        """Call ``callback`` with the controller's broker id (-1: none) now and after every
        change of ``/controller`` (on kazoo's thread)."""

        def on_change(data: bytes | None, _stat: Any) -> None:
            callback(_controller_of(data))

        self.zk.DataWatch(CONTROLLER)(on_change)

    @_zookeeper_op
    def watch_brokers(self, callback: Callable[[list[str]], Any]) -> None:
        self.zk.ChildrenWatch(BROKER_IDS)(callback)

    @_zookeeper_op
    def set_replica_offline(self, broker_id: int, topic: str, partition: int,
                            offline: bool) -> None:
        """Publish (ephemeral, with this session) or withdraw that ``broker_id`` cannot open
        its replica of ``topic``-``partition``."""
        path = f"{OFFLINE_REPLICAS}/{broker_id}:{partition}:{topic}"
        if offline:
            try:
                self.zk.create(path, b"", ephemeral=True, makepath=True)
            except NodeExistsError:  # ours, or left by our expired session: make it ours
                stat = self.zk.exists(path)
                if stat is not None and stat.ephemeralOwner != self.zk.client_id[0]:
                    with contextlib.suppress(NoNodeError):
                        self.zk.delete(path, version=stat.version)
                    with contextlib.suppress(NodeExistsError):
                        self.zk.create(path, b"", ephemeral=True, makepath=True)
        else:
            with contextlib.suppress(NoNodeError):
                self.zk.delete(path)

    @_zookeeper_op
    def publish_metrics_url(self, broker_id: int, url: str) -> None:
        """Publish (ephemeral, with this session) the scrape URL of ``broker_id``'s metrics
        endpoint at ``/loglake/metrics/<id>``; a node left by our expired session is replaced."""
        path = f"{METRICS}/{broker_id}"
        data = url.encode()
        try:
            self.zk.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            stat = self.zk.exists(path)
            if stat is not None and stat.ephemeralOwner != self.zk.client_id[0]:
                with contextlib.suppress(NoNodeError):
                    self.zk.delete(path, version=stat.version)
                with contextlib.suppress(NodeExistsError):
                    self.zk.create(path, data, ephemeral=True, makepath=True)
            elif stat is not None:
                self.zk.set(path, data)

    @_zookeeper_op
    def metrics_urls(self) -> dict[int, str]:
        """Broker id -> the scrape URL its metrics endpoint published (live brokers with
        ``metrics.listener`` only)."""
        try:
            children = self.zk.get_children(METRICS)
        except NoNodeError:
            return {}
        urls: dict[int, str] = {}
        for child in children:
            if not child.isdigit():
                continue
            try:
                raw, _ = self.zk.get(f"{METRICS}/{child}")
            except NoNodeError:
                continue
            urls[int(child)] = raw.decode("utf-8", "replace")
        return urls

    @_zookeeper_op
    def watch_offline_replicas(
        self, callback: Callable[[dict[tuple[str, int], frozenset[int]]], Any]
    ) -> None:
        """Call ``callback`` with (topic, partition) -> brokers whose replica is offline, now
        and after every change (on kazoo's thread). Creates the parent znode (brokers only)."""
        self.zk.ensure_path(OFFLINE_REPLICAS)

        def on_children(children: list[str]) -> None:
            offline: dict[tuple[str, int], set[int]] = {}
            for child in children:
                broker, _, rest = child.partition(":")
                partition, _, topic = rest.partition(":")
                with contextlib.suppress(ValueError):
                    offline.setdefault((topic, int(partition)), set()).add(int(broker))
            callback({key: frozenset(brokers) for key, brokers in offline.items()})

        self.zk.ChildrenWatch(OFFLINE_REPLICAS)(on_children)

    @_zookeeper_op
    def watch_partition_state(
        self, topic: str, partition: int, callback: Callable[[PartitionState | None], Any]
    ) -> None:
        """Call ``callback`` with the state now and after every change; stops when deleted."""

        def on_change(data: bytes | None, stat: Any) -> bool | None:
            if data is None:
                callback(None)
                return False
            callback(_parse_state(data, stat.version))
            return None

        self.zk.DataWatch(f"{TOPICS}/{topic}/partitions/{partition}/state")(on_change)

    @_zookeeper_op
    def update_partition_state(self, topic: str, partition: int, state: PartitionState, *,
                               assignment_version: int | None = None) -> int:
        """A leader's ISR change: write iff the znode is still at ``state.zk_version`` (and,
        with ``assignment_version``, the topic znode still at that version: an ISR expansion
        must not add a replica a reassignment removed meanwhile).

        Raises StaleStateError when someone (controller, new leader) wrote in between.
        """
        if assignment_version is None:
            return self.set_partition_state(topic, partition, state)
        tx = self.zk.transaction()
        tx.check(f"{TOPICS}/{topic}", assignment_version)
        tx.set_data(f"{TOPICS}/{topic}/partitions/{partition}/state", state.to_json(),
                    version=state.zk_version)
        if _transaction_failure(tx.commit()) is not None:
            raise StaleStateError(f"the state or assignment of {topic}-{partition} changed "
                                  "concurrently")
        return state.zk_version + 1

    # ---- controller
    @_zookeeper_op
    def try_become_controller(self, broker_id: int) -> tuple[int, int] | None:
        """Create the ephemeral ``/controller``; if it is ours, bump ``/controller_epoch``.

        Returns (epoch, epoch znode version) for conditioning later writes, or None if another
        broker holds ``/controller``. The epoch bump is version-checked, so two brokers racing
        through a controller change can never both hold the same epoch.
        """
        value = _dump({"version": 1, "brokerid": broker_id})
        try:
            self.zk.create(CONTROLLER, value, ephemeral=True)
        except NodeExistsError:
            raw, stat = self.zk.get(CONTROLLER)
            if stat.ephemeralOwner != self.zk.client_id[0]:
                return None
        while True:
            try:
                raw, stat = self.zk.get(CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self.zk.create(CONTROLLER_EPOCH, b"1")
                    _, stat = self.zk.get(CONTROLLER_EPOCH)
                    return 1, stat.version
                except NodeExistsError:
                    continue
            epoch = int(raw) + 1
            try:
                new = self.zk.set(CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
                return epoch, new.version
            except BadVersionError:
                continue

    @_zookeeper_op
    def controller_id(self) -> int:
        try:
            raw, _ = self.zk.get(CONTROLLER)
        except NoNodeError:
            return -1
        return _controller_of(raw)

    @_zookeeper_op
    def controller_write(self, topic: str, partition: int, state: PartitionState,
                         epoch_version: int) -> None:
        """Apply a controller decision (KAFKA-6082): one transaction that checks the
        ``/controller_epoch`` version we set and the state znode version we read."""
        tx = self.zk.transaction()
        tx.check(CONTROLLER_EPOCH, epoch_version)
        tx.set_data(f"{TOPICS}/{topic}/partitions/{partition}/state", state.to_json(),
                    version=state.zk_version)
        failure = _transaction_failure(tx.commit())
        if failure is not None and failure[0] == 0:
            raise ControllerMovedError("controller epoch changed: no longer controller")
        if failure is not None:  # (the epoch check then reports RolledBackError)
            raise StaleStateError(f"state of {topic}-{partition} changed concurrently")

    # ---- tiered storage
    @_zookeeper_op
    def publish_storage(self, url: str, options: Mapping[str, str]) -> None:
        """Record where the Delta tables live, for tools and Spark (secrets are left out:
        readers take credentials from their own environment)."""
        public = {k: v for k, v in options.items()
                  if not any(marker in k.lower() for marker in _SECRET_MARKERS)}
        self._put(STORAGE, _dump({"url": url, "options": public}))

    @_zookeeper_op
    def storage(self) -> tuple[str, dict[str, str]] | None:
        """``(url, options)`` published by the brokers; None if no broker tiers."""
        try:
            raw, _ = self.zk.get(STORAGE)
        except NoNodeError:
            return None
        data = json.loads(raw)
        return str(data["url"]), {str(k): str(v) for k, v in data.get("options", {}).items()}

    @_zookeeper_op
    def set_tiering_status(self, topic: str, partition: int, status: Mapping[str, Any]) -> None:
        self._put(f"{TIERING}/{topic}/{partition}", _dump(dict(status)))

    @_zookeeper_op
    def announce_table_change(self, topic: str, version: int, operation: str) -> None:
        """Tell every broker that ``topic``'s table lost files at ``version`` (a clean-up job
        committed): they drop cached file lists and row groups (see watch_table_changes)."""
        self._put(f"{TABLE_CHANGES}/{topic}", _dump({
            "version": version, "operation": operation, "updated_ms": int(time.time() * 1000)}))

    @_zookeeper_op
    def watch_table_changes(self, topic: str, callback: Callable[[], Any],
                            alive: Callable[[], bool]) -> None:
        """Call ``callback`` now and after every :meth:`announce_table_change` of ``topic``
        (on kazoo's thread), until ``alive()`` turns false."""

        def on_change(_data: bytes | None, _stat: Any) -> bool | None:
            if not alive():
                return False
            callback()
            return None

        self.zk.DataWatch(f"{TABLE_CHANGES}/{topic}")(on_change)

    @_zookeeper_op
    def tiering_status(self, topic: str) -> dict[int, dict[str, Any]]:
        """Partition -> the status its leader last reported (see the layout above)."""
        try:
            children = self.zk.get_children(f"{TIERING}/{topic}")
        except NoNodeError:
            return {}
        result = {}
        for child in children:
            with contextlib.suppress(NoNodeError, ValueError):
                raw, _ = self.zk.get(f"{TIERING}/{topic}/{child}")
                result[int(child)] = dict(json.loads(raw))
        return result

    @_zookeeper_op
    def all_partition_states(self) -> dict[tuple[str, int], tuple[tuple[int, ...],
                                                                   PartitionState]]:
        """(topic, partition) -> (replicas, state) for every partition with a state znode."""
        result = {}
        for name in self.topic_names():
            meta = self.topic(name)
            if meta is None:
                continue
            for partition, replicas in meta.assignment.items():
                state = self.partition_state(name, partition)
                if state is not None:
                    result[(name, partition)] = (replicas, state)
        return result


def _controller_of(raw: bytes | None) -> int:
    """``brokerid`` of a ``/controller`` value; -1 for none (or an unreadable value)."""
    if not raw:
        return -1
    try:
        return int(json.loads(raw)["brokerid"])
    except (ValueError, KeyError, TypeError):
        return -1


def _parse_state(raw: bytes, version: int) -> PartitionState:
    data = json.loads(raw)
    return PartitionState(int(data["leader"]), int(data["leader_epoch"]), tuple(data["isr"]),
                          int(data.get("controller_epoch", 0)), version)
