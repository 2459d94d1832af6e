"""ZooKeeper credentials: who brokers and tools authenticate to ZooKeeper as, and whether the
znodes they create get ACLs (Kafka's ``zookeeper.set.acl``).

Mechanism: SASL DIGEST-MD5 only (what ZooKeeper's ``DigestLoginModule`` serves; kazoo speaks
it through pure-sasl). A server checks the user against its JAAS ``Server`` section
(``user_<name>="<password>"``); the session's ZooKeeper identity is then ``sasl:<name>``.

Settings (the same names everywhere; each source is consulted in the order listed)::

    zookeeper.sasl.username      the ZooKeeper user (loglake's simple form) ...
    zookeeper.sasl.password      ... and its password
    zookeeper.sasl.jaas.file     or: a JAAS file whose client section holds a DigestLoginModule
                                 with username="..." password="..." (Kafka's form, which Kafka
                                 reads through -Djava.security.auth.login.config)
    zookeeper.sasl.clientconfig  the JAAS section to read (ZooKeeper's property; default Client)
    zookeeper.set.acl            true: znodes this process creates get the ACL policy below

- Brokers: ``server.properties`` (declared in :mod:`loglake.config`); ``zookeeper.set.acl``
  defaults to false as in Kafka (authenticate, but create open znodes: the way to migrate).
- Tools, clean-up jobs, Spark (driver side), the SDK's ZooKeeper paths: the same keys in their
  properties / options (:func:`zk_auth_from_properties`), else the environment::

      LOGLAKE_ZOOKEEPER_SASL_USERNAME, LOGLAKE_ZOOKEEPER_SASL_PASSWORD,
      LOGLAKE_ZOOKEEPER_SASL_JAAS_FILE, LOGLAKE_ZOOKEEPER_SASL_CLIENTCONFIG

  A tool that authenticates also sets ACLs on what it creates unless ``zookeeper.set.acl`` says
  otherwise (Kafka's tools do the same: secure iff ZooKeeper SASL is on).
  :class:`~loglake.catalog.zookeeper.ClusterCatalog` reads the environment when it is given no
  :class:`ZkAuth` (:func:`zk_auth_for_connect`), so every tool gains authentication from the
  environment alone; with nothing in the environment, the dev profile (``loglake dev up``,
  :mod:`loglake.addresses`) supplies the ZooKeeper JAAS file of its cluster when the catalog
  connects to that cluster's ZooKeeper hosts (the credentials belong to the ZooKeeper server,
  whatever the chroot).

Nothing set anywhere: no authentication and open znodes, exactly as before this module.

TLS (:mod:`loglake.catalog.zk_tls`, Kafka's KIP-515 ``zookeeper.ssl.*`` settings): a
:class:`ZkAuth` may carry a :class:`~loglake.catalog.zk_tls.ZkTls`; every kazoo client built
from it (:meth:`ZkAuth.kazoo_kwargs`) then speaks TLS. With a client certificate (Kafka's
``zkTlsClientAuthEnabled``), the session's identity is ``x509:<DN>`` and ``set_acl`` needs no
SASL login. Tools read the TLS settings from their properties, else from the file
``LOGLAKE_ZOOKEEPER_TLS_CONFIG_FILE`` names.

ACL policy with ``set_acl`` (Kafka's ``ZkData.defaultAcls``), in :func:`acl_for`: every znode
gets ALL for its creator's identity (``auth`` scheme: ``sasl:<user>``) plus READ for
``world:anyone``, except the sensitive paths ``/config/users`` (SCRAM credentials, quotas) and
``/config/brokers`` (dynamic broker configs) and everything below them, which get no world
access. Kafka leaves ``/consumers`` itself open for its old ZooKeeper consumers; loglake has none
(only group coordinators write there), so it is protected like the rest. The consequence, as in
Kafka: every broker and every writing tool of a secured cluster must use the same ZooKeeper
user (or a ZooKeeper super user), since only the creator may change or delete a znode and
create children under it.

Pure (no I/O besides reading a named JAAS file and the TLS stores); thread-safe (immutable values).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.security import ACL, CREATOR_ALL_ACL, READ_ACL_UNSAFE
from kio.schema.errors import ErrorCode

from loglake import addresses
from loglake.catalog.zk_tls import (
    ENABLE,
    KEYSTORE_LOCATION,
    ZkTls,
    zk_tls_from_environment,
    zk_tls_from_properties,
)
from loglake.errors import InvalidConfigError, LoglakeError

MECHANISM = "DIGEST-MD5"

USERNAME = "zookeeper.sasl.username"
PASSWORD = "zookeeper.sasl.password"
JAAS_FILE = "zookeeper.sasl.jaas.file"
JAAS_SECTION = "zookeeper.sasl.clientconfig"
SET_ACL = "zookeeper.set.acl"
PROPERTY_NAMES = (USERNAME, PASSWORD, JAAS_FILE, JAAS_SECTION, SET_ACL)
"""Every property this module reads (brokers, tools and Spark options use the same names)."""

DEFAULT_JAAS_SECTION = "Client"
"""ZooKeeper's default client section name (its ``zookeeper.sasl.clientconfig``)."""

ENV_USERNAME = "LOGLAKE_ZOOKEEPER_SASL_USERNAME"
ENV_PASSWORD = "LOGLAKE_ZOOKEEPER_SASL_PASSWORD"
ENV_JAAS_FILE = "LOGLAKE_ZOOKEEPER_SASL_JAAS_FILE"
ENV_JAAS_SECTION = "LOGLAKE_ZOOKEEPER_SASL_CLIENTCONFIG"
ENVIRONMENT = {USERNAME: ENV_USERNAME, PASSWORD: ENV_PASSWORD, JAAS_FILE: ENV_JAAS_FILE,
               JAAS_SECTION: ENV_JAAS_SECTION}
"""Property name -> environment variable consulted when no property gives credentials."""

SENSITIVE_PATHS = ("/config/users", "/config/brokers")
"""Kafka's sensitive root paths: they and their descendants get no world access."""

PERSISTENT_PATHS = (
    "/brokers/ids", "/brokers/topics", "/config/topics", "/config/brokers", "/config/users",
    "/config/clients", "/config/changes", "/admin/delete_topics", "/consumers", "/cluster",
    "/loglake", "/kafka-acl", "/kafka-acl-extended/prefixed", "/kafka-acl-changes",
    "/kafka-acl-extended-changes",
)
"""The layout's top-level znodes (Kafka's ``PersistentZkPaths`` and loglake's root), created at
broker start when ``set_acl``: so that nobody can create them first with an open ACL."""


class ZooKeeperAuthenticationError(LoglakeError):
    """ZooKeeper refused our SASL login (wrong user or password, or the server has no SASL
    configured). Not retriable: fix the credentials."""

    code = ErrorCode.sasl_authentication_failed


class ZooKeeperNoAuthError(LoglakeError):
    """A znode's ACL refused the operation (ZooKeeper's NoAuth): this process is not
    authenticated as the user that created it."""

    code = ErrorCode.cluster_authorization_failed


@dataclass(frozen=True)
class ZkAuth:
    """The ZooKeeper identity of one process and whether its creations get ACLs.

    ``ZkAuth()`` is today's default: anonymous, open znodes. ``set_acl`` needs credentials
    (Kafka refuses ``zookeeper.set.acl=true`` without them too: the creator would be nobody).
    """

    username: str | None = None
    password: str | None = field(default=None, repr=False)
    set_acl: bool = False
    tls: ZkTls | None = field(default=None, repr=False)
    """TLS to ZooKeeper (None: plaintext, as before)."""

    def __post_init__(self) -> None:
        if (self.username is None) != (self.password is None):
            raise InvalidConfigError(
                f"ZooKeeper SASL needs both {USERNAME} and {PASSWORD} (got only one)")
        if self.username == "":
            raise InvalidConfigError(f"{USERNAME} is empty")
        if self.set_acl and not self.authenticated:
            raise InvalidConfigError(
                f"{SET_ACL} is true but no ZooKeeper credentials are configured (neither a "
                f"SASL login nor a TLS client certificate: {ENABLE}, "
                f"zookeeper.clientCnxnSocket and {KEYSTORE_LOCATION})",
                hint=f"set {USERNAME}/{PASSWORD} or {JAAS_FILE} (or {ENV_USERNAME}/"
                     f"{ENV_PASSWORD} for tools), or the zookeeper.ssl.* client certificate")

    @property
    def authenticated(self) -> bool:
        """A SASL login, or a TLS client certificate (identity ``x509:<DN>``)."""
        return self.username is not None or (self.tls is not None and self.tls.client_auth)

    @property
    def identity(self) -> str:
        """Who ZooKeeper sees, for messages: ``sasl:<user>``, ``x509`` or ``anonymous``."""
        if self.username is not None:
            return f"sasl:{self.username}"
        return "x509 (client certificate)" if self.authenticated else "anonymous"

    def kazoo_kwargs(self) -> dict[str, Any]:
        """kazoo client arguments: ``sasl_options`` and, with TLS, a fresh TLS ``handler``."""
        kwargs: dict[str, Any] = {"sasl_options": self.sasl_options()}
        if self.tls is not None:
            kwargs["handler"] = self.tls.handler()
        return kwargs

    def sasl_options(self) -> dict[str, str] | None:
        """kazoo's ``sasl_options`` (a fresh dict: kazoo adds keys to it), None if anonymous."""
        if self.username is None or self.password is None:
            return None
        return {"mechanism": MECHANISM, "username": self.username, "password": self.password}

    def acl(self, path: str) -> list[ACL] | None:
        """The ACL a znode created at ``path`` (chroot-relative) gets; None: kazoo's default
        (open), i.e. ``set_acl`` is off."""
        return acl_for(path) if self.set_acl else None


NO_AUTH = ZkAuth()


def sensitive(path: str) -> bool:
    """Whether ``path`` is one of :data:`SENSITIVE_PATHS` or below one."""
    return any(path == root or path.startswith(root + "/") for root in SENSITIVE_PATHS)


def acl_for(path: str) -> list[ACL]:
    """Kafka's secure ACL of ``path``: creator ALL, plus world READ unless sensitive."""
    return list(CREATOR_ALL_ACL) + ([] if sensitive(path) else list(READ_ACL_UNSAFE))


# ---- JAAS
_SECTION = re.compile(r"([A-Za-z0-9_.-]+)\s*\{(.*?)\}\s*;", re.DOTALL)
_OPTION = re.compile(r'([A-Za-z0-9_.-]+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def jaas_sections(text: str) -> dict[str, list[tuple[str, dict[str, str]]]]:
    """Parse a JAAS configuration: section name -> its login modules, each as (class name,
    options). Options are ``key="value"`` pairs (Kafka's and ZooKeeper's form); comments are
    ignored. Raises InvalidConfigError on a section without a login module."""
    sections: dict[str, list[tuple[str, dict[str, str]]]] = {}
    for name, body in _SECTION.findall(_COMMENT.sub("", text)):
        modules = []
        for entry in body.split(";"):
            words = entry.split(None, 2)
            if not words:
                continue
            if len(words) < 2:
                raise InvalidConfigError(f"JAAS section {name}: expected '<LoginModule> "
                                         f"<flag> key=\"value\" ...;', got {entry.strip()!r}")
            options = {key: value.replace('\\"', '"').replace("\\\\", "\\")
                       for key, value in _OPTION.findall(words[2] if len(words) > 2 else "")}
            modules.append((words[0], options))
        sections[name] = modules
    return sections


def jaas_client_credentials(text: str, section: str = DEFAULT_JAAS_SECTION
                            ) -> tuple[str, str]:
    """(username, password) of the first login module of JAAS section ``section``."""
    sections = jaas_sections(text)
    if section not in sections:
        raise InvalidConfigError(f"JAAS configuration has no {section} section "
                                 f"(sections: {', '.join(sorted(sections)) or 'none'})")
    for _module, options in sections[section]:
        if "username" in options and "password" in options:
            return options["username"], options["password"]
    raise InvalidConfigError(f"JAAS section {section} has no login module with username and "
                             "password")


# ---- resolution
def _read_jaas(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except OSError as exc:
        raise InvalidConfigError(f"cannot read the JAAS file {path}: "
                                 f"{exc.strerror or exc}") from None


def resolve_zk_auth(*, username: str | None = None, password: str | None = None,
                    jaas_file: str | None = None, jaas_section: str | None = None,
                    shared_jaas_file: str | None = None, set_acl: bool | None = None,
                    environ: Mapping[str, str] | None = None, tls: ZkTls | None = None
                    ) -> ZkAuth:
    """The :class:`ZkAuth` from explicit values, else from ``environ`` (``os.environ`` by
    default; pass ``{}`` to ignore the environment).

    Credentials: ``username``/``password``, else ``jaas_file``'s section, else
    ``shared_jaas_file``'s section if it has one (a broker's ``sasl.jaas.file``: Kafka reads
    its ZooKeeper login from the ``Client`` section of the JVM's one JAAS file, and logs in to
    ZooKeeper only when that section exists), else the same from the environment variables.
    ``set_acl`` None means "iff authenticated" (tools); brokers pass their
    ``zookeeper.set.acl``. ``tls``: TLS to ZooKeeper (brokers and tools resolve it with
    :mod:`loglake.catalog.zk_tls`). Raises InvalidConfigError on half or unreadable
    credentials.
    """
    env = os.environ if environ is None else environ
    section = jaas_section or DEFAULT_JAAS_SECTION
    if (username is None and password is None and jaas_file is None and shared_jaas_file
            and section in jaas_sections(_read_jaas(shared_jaas_file))):
        jaas_file = shared_jaas_file
    if username is None and password is None and jaas_file is None:
        username, password = env.get(ENV_USERNAME) or None, env.get(ENV_PASSWORD) or None
        jaas_file = env.get(ENV_JAAS_FILE) or None
        jaas_section = jaas_section or env.get(ENV_JAAS_SECTION) or None
    if username is None and password is None and jaas_file is not None:
        username, password = jaas_client_credentials(
            _read_jaas(jaas_file), jaas_section or section)
    authenticated = username is not None or (tls is not None and tls.client_auth)
    return ZkAuth(username=username, password=password,
                  set_acl=authenticated if set_acl is None else set_acl, tls=tls)


def zk_auth_from_properties(props: Mapping[str, str],
                            environ: Mapping[str, str] | None = None) -> ZkAuth:
    """The :class:`ZkAuth` of a tool from its properties / options (keys
    :data:`PROPERTY_NAMES` and ``zookeeper.ssl.*``, case-insensitive as Spark's options are),
    else the environment."""
    lowered = {key.lower(): value for key, value in props.items()}
    tls = (zk_tls_from_properties(props) if ENABLE in lowered
           else zk_tls_from_environment(environ))

    def get(name: str) -> str | None:
        return lowered.get(name) or None

    set_acl = get(SET_ACL)
    return resolve_zk_auth(username=get(USERNAME), password=get(PASSWORD),
                           jaas_file=get(JAAS_FILE), jaas_section=get(JAAS_SECTION),
                           set_acl=None if set_acl is None else set_acl.lower() == "true",
                           environ=environ, tls=tls)


def zk_auth_from_environment(environ: Mapping[str, str] | None = None) -> ZkAuth:
    """The :class:`ZkAuth` the environment variables give (:data:`NO_AUTH` when none are set)."""
    return resolve_zk_auth(environ=environ, tls=zk_tls_from_environment(environ))


def _hosts(connect: str) -> str:
    """The host list of a ``zookeeper.connect`` string (chroot dropped, order kept)."""
    slash = connect.find("/")
    return (connect if slash < 0 else connect[:slash]).strip()


def zk_auth_for_connect(connect: str, environ: Mapping[str, str] | None = None) -> ZkAuth:
    """The :class:`ZkAuth` of a tool connecting to ``connect`` that was given none: the
    environment variables if any is set, else the ZooKeeper JAAS file the dev profile records
    for a cluster on the same ZooKeeper hosts, else :data:`NO_AUTH`. Raises
    InvalidConfigError on half or unreadable credentials (an unreadable profile counts as
    none: :mod:`loglake.addresses` reports it where the address itself comes from it)."""
    env = os.environ if environ is None else environ
    tls = zk_tls_from_environment(env)  # LOGLAKE_ZOOKEEPER_TLS_CONFIG_FILE
    anonymous = NO_AUTH if tls is None else resolve_zk_auth(environ={}, tls=tls)
    if any(env.get(name) for name in (ENV_USERNAME, ENV_PASSWORD, ENV_JAAS_FILE)):
        return resolve_zk_auth(environ=env, tls=tls)
    try:
        profile = addresses.read_profile(env)
    except addresses.AddressError:
        return anonymous
    if (profile is None or not profile.zookeeper_jaas_file
            or _hosts(profile.zookeeper) != _hosts(connect)):
        return anonymous
    return resolve_zk_auth(jaas_file=profile.zookeeper_jaas_file, environ={}, tls=tls)
