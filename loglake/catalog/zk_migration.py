"""``loglake zookeeper-security-migration``: set (or remove) Kafka's ACLs on every znode of a
cluster, as Kafka's ``zookeeper-security-migration`` (``ZkSecurityMigrator``) does.

Usage::

    loglake zookeeper-security-migration --zookeeper.acl secure|unsecure \\
        [--zookeeper.connect HOST:PORT[/CHROOT]] [--jaas-file FILE] [--enable.path.check]
        [--zk-tls-config-file FILE]

Kafka's migration, which this tool completes: (1) brokers log in to ZooKeeper with
``zookeeper.set.acl=false``, (2) then with ``zookeeper.set.acl=true`` (new znodes are secure),
(3) this tool secures the znodes created before. ``unsecure`` undoes it (brokers first back to
``zookeeper.set.acl=false``).

What it does (the order and paths of Kafka's tool): the chroot itself (``/`` of the connect
string) gets the ACL on its own, then each root of :data:`ROOT_PATHS` and everything below it,
recursively: Kafka's ``ZkData.SecureRootPaths`` (``/admin``, ``/brokers``, ``/cluster``,
``/config``, ``/controller``, ..., the ACL stores) plus loglake's ``/consumers`` (group offsets:
Kafka leaves its old consumers' path open, loglake has none) and ``/loglake``. ``secure``: the
ACL :func:`loglake.catalog.zk_auth.acl_for` gives (creator ALL through the ``auth`` scheme, i.e.
this tool's ``sasl:<user>``, plus world READ except under ``/config/users`` and
``/config/brokers``), and the layout's persistent paths (``PERSISTENT_PATHS``, what a secured
broker creates at start) are created secure when missing, as Kafka's
``makeSurePersistentPathExists`` does, so nobody can create them open later;
``unsecure``: ``world:anyone`` ALL. A missing layout root gets a warning line
(``--enable.path.check``: the tool stops there before changing anything, as Kafka's does);
Kafka roots loglake never creates (``/feature``, ...) are walked only where they exist.
Znodes are changed with version -1 (whatever their ACL version), in batches of
:data:`BATCH` asynchronous requests; a znode deleted meanwhile is skipped.

Login: required in both modes, as Kafka's tool refuses to run without a JAAS login: without
one, ``secure`` would give the znodes to nobody and ``unsecure`` could change only open ones.
The login comes from ``--jaas-file`` (its ``Client`` section), else the usual tool resolution
(``LOGLAKE_ZOOKEEPER_SASL_*``, else the dev profile's ZooKeeper login for these hosts:
:func:`loglake.catalog.zk_auth.zk_auth_for_connect`). A znode this user may not re-ACL (created
by another ZooKeeper user) is counted and named in the final error; the others are still done.
TLS (Kafka's ``--zk-tls-config-file``): a properties file with the ``zookeeper.ssl.*`` keys
(:mod:`loglake.catalog.zk_tls`; other keys ignored), else ``LOGLAKE_ZOOKEEPER_TLS_CONFIG_FILE``;
a TLS client certificate is a login too (identity ``x509:<DN>``), as in Kafka's tool.

Bounded: at most ``--max-znodes`` znodes (default :data:`DEFAULT_MAX_ZNODES`), each request
bounded by the catalog's session; progress lines on stdout (one per root, and every
:data:`PROGRESS_EVERY` znodes); bad input is one ``loglake: error: ...`` line and exit code 1.
Blocking (kazoo); one thread.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.security import ACL, OPEN_ACL_UNSAFE

from loglake import addresses
from loglake.catalog.zk_auth import (
    ENV_JAAS_FILE,
    ENV_PASSWORD,
    ENV_USERNAME,
    PERSISTENT_PATHS,
    ZkAuth,
    acl_for,
    resolve_zk_auth,
    zk_auth_for_connect,
)
from loglake.catalog.zk_tls import read_properties, resolve_zk_tls
from loglake.catalog.zookeeper import ClusterCatalog, NoClusterError
from loglake.errors import InvalidConfigError, LoglakeError

Mode = Literal["secure", "unsecure"]
MODES: tuple[Mode, ...] = ("secure", "unsecure")

KAFKA_SECURE_ROOT_PATHS = (
    "/admin", "/brokers", "/cluster", "/config", "/controller", "/controller_epoch",
    "/isr_change_notification", "/latest_producer_id_block", "/log_dir_event_notification",
    "/delegation_token", "/kafka-acl-extended", "/migration", "/feature", "/kafka-acl",
    "/kafka-acl-changes", "/kafka-acl-extended-changes",
)
"""Kafka's ``ZkData.SecureRootPaths`` (with ``ZkAclStore.securePaths``)."""

ROOT_PATHS = (*KAFKA_SECURE_ROOT_PATHS, "/consumers", "/loglake")
"""What the migration walks (below the chroot): Kafka's roots plus loglake's."""

LAYOUT_ROOTS = tuple(root for root in ROOT_PATHS
                     if any(path == root or path.startswith(root + "/")
                            for path in PERSISTENT_PATHS))
"""The roots loglake's layout always has (brokers create them): a missing one is warned about
(a wrong chroot?) and, in ``secure`` mode, created secure. The other Kafka roots
(``/isr_change_notification``, ``/feature``, ...) are only walked where they exist."""

DEFAULT_MAX_ZNODES = 1_000_000
BATCH = 200
PROGRESS_EVERY = 1000
DEFAULT_TIMEOUT_S = 30.0


@dataclass
class MigrationResult:
    """What a run changed: znodes whose ACL was set, roots skipped (absent), roots created,
    and znodes this user was not allowed to re-ACL (NoAuth)."""

    changed: int = 0
    skipped_roots: list[str] = field(default_factory=list)
    created_roots: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def target_acl(mode: Mode, path: str) -> list[ACL]:
    """The ACL ``path`` (chroot-relative) gets in ``mode``."""
    return acl_for(path) if mode == "secure" else list(OPEN_ACL_UNSAFE)


def _child(path: str, name: str) -> str:
    return f"/{name}" if path == "/" else f"{path}/{name}"


class _Walker:
    """Sets ACLs over a tree with batches of asynchronous kazoo requests."""

    def __init__(self, client: Any, mode: Mode, result: MigrationResult, max_znodes: int,
                 progress: Callable[[str], None]) -> None:
        self.client = client
        self.mode = mode
        self.result = result
        self.max_znodes = max_znodes
        self.progress = progress
        self.visited = 0

    def _count(self, amount: int) -> None:
        before = self.visited
        self.visited += amount
        if self.visited > self.max_znodes:
            raise LoglakeError(f"more than {self.max_znodes} znodes under the roots: stopped "
                               f"after changing {self.result.changed}",
                               hint="raise --max-znodes if the cluster really is that big")
        if before // PROGRESS_EVERY != self.visited // PROGRESS_EVERY:
            self.progress(f"... {self.visited} znodes")

    def set_one(self, path: str) -> None:
        """Set the ACL of ``path`` alone (Kafka's ``setAclIndividually``)."""
        self._count(1)
        self._settle([(path, self.client.set_acls_async(path, target_acl(self.mode, path)))],
                     [])

    def walk(self, root: str) -> int:
        """Set the ACL of ``root`` and every znode below it; the number of znodes visited."""
        start = self.visited
        pending: deque[str] = deque([root])
        while pending:
            batch = [pending.popleft() for _ in range(min(BATCH, len(pending)))]
            self._count(len(batch))
            acls = [(path, self.client.set_acls_async(path, target_acl(self.mode, path)))
                    for path in batch]
            children = [(path, self.client.get_children_async(path)) for path in batch]
            pending.extend(self._settle(acls, children))
        return self.visited - start

    def _settle(self, acls: list[tuple[str, Any]], children: list[tuple[str, Any]]
                ) -> list[str]:
        """Wait for a batch; the children paths found (a znode gone meanwhile: skipped)."""
        for path, request in acls:
            try:
                request.get(timeout=DEFAULT_TIMEOUT_S)
                self.result.changed += 1
            except NoNodeError:
                pass
            except NoAuthError:
                self.result.refused.append(path)
        found: list[str] = []
        for path, request in children:
            try:
                names = request.get(timeout=DEFAULT_TIMEOUT_S)
            except NoNodeError:
                continue
            except NoAuthError:  # no READ: cannot list (the ACL set above may have failed)
                self.result.refused.append(path)
                continue
            found.extend(_child(path, name) for name in sorted(names))
        return found


def migrate(catalog: ClusterCatalog, mode: Mode, *, enable_path_check: bool = False,
            max_znodes: int = DEFAULT_MAX_ZNODES,
            progress: Callable[[str], None] = print) -> MigrationResult:
    """Set ``mode``'s ACLs over the cluster ``catalog`` (started, logged in) reaches; see the
    module docstring. Raises LoglakeError if a root is missing under ``enable_path_check``
    or the walk passes ``max_znodes``; NoAuth znodes are in the result, not raised."""
    client = catalog.zk
    missing = [root for root in ROOT_PATHS if client.exists(root) is None]
    absent = [root for root in missing if root in LAYOUT_ROOTS]
    if absent:
        progress(f"Warning: these root paths do not exist in ZooKeeper: {', '.join(absent)}")
        if enable_path_check:
            raise LoglakeError("root paths missing (--enable.path.check): nothing changed; "
                               "is the chroot right?")
    result = MigrationResult()
    if mode == "secure":  # what a secured broker creates at start, before anyone else can
        for path in PERSISTENT_PATHS:
            if client.exists(path) is None:
                client.ensure_path(path)  # the catalog's client: each with acl_for(path)
                result.created_roots.append(path)
    walker = _Walker(client, mode, result, max_znodes, progress)
    walker.set_one("/")
    for root in ROOT_PATHS:
        if client.exists(root) is None:
            result.skipped_roots.append(root)
            continue
        count = walker.walk(root)
        progress(f"{mode}: {root}: {count} znode{'s' if count != 1 else ''}")
    return result


# ---- command line
def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "zookeeper-security-migration",
        help="set or remove Kafka's ZooKeeper ACLs on every znode of the cluster",
        description="Like Kafka's zookeeper-security-migration: secure gives every znode of "
                    "the cluster Kafka's ACLs (creator ALL + world READ; no world access to "
                    "/config/users and /config/brokers), unsecure opens them again. Needs a "
                    "ZooKeeper SASL login (--jaas-file, LOGLAKE_ZOOKEEPER_SASL_*, or the dev "
                    "profile).")
    parser.add_argument("--zookeeper.acl", dest="zookeeper_acl", required=True,
                        metavar="secure|unsecure",
                        help="make the znodes secure or unsecure")
    parser.add_argument("--zookeeper.connect", "--zookeeper", dest="zookeeper", default=None,
                        metavar="HOST:PORT[/CHROOT]",
                        help=f"the cluster's ZooKeeper with the brokers' chroot (default: "
                             f"${addresses.ZOOKEEPER_ENV}, else the last `loglake dev up`)")
    parser.add_argument("--jaas-file", default=None, metavar="FILE",
                        help=f"JAAS file whose Client section holds the ZooKeeper login "
                             f"(default: ${ENV_JAAS_FILE} or ${ENV_USERNAME}/${ENV_PASSWORD}, "
                             f"else the dev profile's)")
    parser.add_argument("--zk-tls-config-file", dest="zk_tls_config_file", default=None,
                        metavar="FILE",
                        help="properties file with the zookeeper.ssl.* / zookeeper.clientCnxnSocket"
                             " settings of TLS to ZooKeeper (other keys are ignored)")
    parser.add_argument("--enable.path.check", dest="enable_path_check", action="store_true",
                        help="stop before changing anything if a root path is missing")
    parser.add_argument("--max-znodes", type=int, default=DEFAULT_MAX_ZNODES, metavar="N",
                        help=f"most znodes to visit (default: {DEFAULT_MAX_ZNODES})")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help="how long to wait for ZooKeeper at start")
    parser.set_defaults(handler=run)


def _login(connect: str, jaas_file: str | None, mode: Mode, tls_file: str | None = None
           ) -> ZkAuth:
    tls = (resolve_zk_tls(read_properties(tls_file, setting="--zk-tls-config-file"))
           if tls_file else None)
    login = (resolve_zk_auth(jaas_file=jaas_file, environ={}, tls=tls) if jaas_file
             else zk_auth_for_connect(connect))
    if tls_file:
        login = dataclasses.replace(login, set_acl=False, tls=tls)
    if not login.authenticated:
        raise InvalidConfigError(
            "no ZooKeeper SASL login configured (nor a TLS client certificate): the migration "
            "must run as the brokers' ZooKeeper identity (Kafka's tool refuses too)",
            hint=f"pass --jaas-file FILE (a Client section) or set {ENV_USERNAME}/"
                 f"{ENV_PASSWORD}, or --zk-tls-config-file FILE with zookeeper.ssl.client.enable,"
                 " zookeeper.clientCnxnSocket and zookeeper.ssl.keystore.location")
    return ZkAuth(login.username, login.password, set_acl=mode == "secure", tls=login.tls)


def run(args: argparse.Namespace) -> int:
    mode = args.zookeeper_acl
    if mode not in MODES:
        raise InvalidConfigError(f"--zookeeper.acl must be secure or unsecure, got {mode!r}")
    if args.max_znodes < 1:
        raise InvalidConfigError(f"--max-znodes must be at least 1, got {args.max_znodes}")
    if not args.timeout > 0:
        raise InvalidConfigError(f"--timeout must be positive, got {args.timeout}")
    connect = addresses.zookeeper(args.zookeeper)
    if not logging.getLogger().handlers:  # the typed error below says it; kazoo's warnings
        logging.getLogger("kazoo").setLevel(logging.ERROR)  # would repeat it untidily
    catalog = ClusterCatalog(connect, timeout=args.timeout, mode="tool",
                             auth=_login(connect, args.jaas_file, mode,
                                         args.zk_tls_config_file))
    started = time.monotonic()
    try:
        catalog.start()
    except (NoClusterError, LoglakeError):
        catalog.stop()
        raise
    except Exception as exc:
        catalog.stop()
        raise LoglakeError(f"cannot reach ZooKeeper at {connect}: {exc}") from None
    try:
        print(f"zookeeper.acl={mode}: {connect} as {catalog.auth.identity}")
        result = migrate(catalog, mode, enable_path_check=args.enable_path_check,
                         max_znodes=args.max_znodes)
    finally:
        catalog.stop()
    print(f"Done: {result.changed} znodes {mode}d in {time.monotonic() - started:.1f}s"
          + (f"; created {', '.join(result.created_roots)}" if result.created_roots else ""))
    if result.refused:
        shown = ", ".join(result.refused[:5]) + (" ..." if len(result.refused) > 5 else "")
        raise LoglakeError(f"{len(result.refused)} znodes refused the change (NoAuth: created "
                           f"by another ZooKeeper user): {shown}")
    return 0
