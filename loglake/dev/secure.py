"""Secured dev clusters (``loglake dev up --security sasl_ssl``): TLS material, the admin user,
the brokers' security settings and the client properties files.

Files under the cluster directory ``DIR`` (kept across ``down``/``up``, so clients keep
working)::

    DIR/security/ca.pem, ca-key.pem, broker.pem, client.pem   see loglake.dev.certs
    DIR/security/admin.password        the admin user's password (0600; made once, random)
    DIR/security/client.properties     librdkafka form: for ``loglake --command-config``,
                                       ``kcat -F`` and confluent-kafka (0600)
    DIR/security/client-java.properties  Java form (sasl.jaas.config, PEM truststore): for
                                       Kafka's own tools and Java clients (0600); with a
                                       schema registry also its URL and basic auth user info
                                       (Confluent's serializer keys: add_registry_settings)

Both log in as the admin with SCRAM-SHA-512.

The admin user ``admin`` gets SCRAM-SHA-256 and SCRAM-SHA-512 credentials in ZooKeeper
(``/config/users/admin``, Kafka's stored form: salt, stored and server keys, 4096 iterations;
never the password) BEFORE the brokers start, as ``kafka-configs --zookeeper`` does: the
brokers log in to each other as that user (inter-broker listener SASL_SSL, SCRAM-SHA-512),
and it is the authorizer's super user. Every other principal starts with no rights (default
deny): grant them with ``loglake acls add``.

Broker settings (:func:`broker_overrides`): one ``SASL_SSL`` listener per broker on its port,
also used between brokers; PEM keystore/truststore; SCRAM-SHA-256/512; the ACL authorizer with
``super.users=User:admin``. ``server.properties`` then holds the admin password (inside the
JAAS entry of the broker's own login), as Kafka's does: ``dev up`` writes it with mode 0600.

ZooKeeper authentication (``dev up --security sasl_ssl`` with its own ZooKeeper; on by default
there, ``--no-zookeeper-auth`` turns it off), Kafka's issue-15 item 6 set-up::

    DIR/security/zookeeper.password        the ZooKeeper user's password (0600; made once)
    DIR/security/zookeeper-client.jaas     the JAAS ``Client`` section (ZooKeeper's
                                           DigestLoginModule, user :data:`ZOOKEEPER_USER`):
                                           what brokers (``zookeeper.sasl.jaas.file``) and tools
                                           (``LOGLAKE_ZOOKEEPER_SASL_JAAS_FILE``, the profile's
                                           ``zookeeper_jaas_file``) log in with (0600)

The dev ZooKeeper gets a JAAS ``Server`` section with that one user (SASL DIGEST-MD5; anonymous
sessions are still served and meet the znodes' ACLs, as in Kafka's usual set-up); the brokers
run with ``zookeeper.set.acl=true``, so every znode gets Kafka's ACLs (creator ALL, world READ,
nothing for the world under ``/config/users`` and ``/config/brokers``). The admin's SCRAM
credentials and the chroot are written logged in, with those ACLs, before any broker starts.

Blocking (file and ZooKeeper I/O); called by ``dev up`` only.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from loglake.catalog.zk_auth import JAAS_FILE, MECHANISM, SET_ACL, acl_for
from loglake.dev.certs import DevCertificates, ensure_dev_certificates, write_private

Security = Literal["sasl_ssl"]
SECURITY_MODES: tuple[Security, ...] = ("sasl_ssl",)
ADMIN_USER = "admin"
SECURITY_DIR = "security"
CLIENT_PROPERTIES = "client.properties"
JAVA_CLIENT_PROPERTIES = "client-java.properties"
BROKER_MECHANISM = "SCRAM-SHA-512"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
LISTENER = "SASL_SSL"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
ZOOKEEPER_USER = "kafka"
"""The ZooKeeper SASL user of a dev cluster's brokers and tools (Kafka's habit: one user)."""
ZOOKEEPER_JAAS = "zookeeper-client.jaas"
ZOOKEEPER_PASSWORD = "zookeeper.password"
ZOOKEEPER_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"


@dataclass(frozen=True)
class ZooKeeperLogin:
    """The ZooKeeper SASL user of a dev cluster and the JAAS file holding its login."""

    username: str
    password: str = field(repr=False)
    jaas_file: Path

    def sasl_options(self) -> dict[str, str]:
        """kazoo's ``sasl_options`` (a fresh dict)."""
        return {"mechanism": MECHANISM, "username": self.username, "password": self.password}

    def broker_overrides(self) -> dict[str, str]:
        """``server.properties`` lines: log in to ZooKeeper and set Kafka's znode ACLs."""
        return {JAAS_FILE: str(self.jaas_file), SET_ACL: "true"}


def kept_password(password_file: Path) -> str:
    """The password kept in ``password_file``; a new random one written there (owner-only)
    first when the file is missing or empty."""
    try:
        password = password_file.read_text().strip()
    except FileNotFoundError:
        password = ""
    if not password:
        password = secrets.token_urlsafe(18)
        write_private(password_file, (password + "\n").encode())
    return password


def zookeeper_login_exists(data_dir: Path) -> bool:
    """Whether the dev cluster in ``data_dir`` had ZooKeeper authentication before (its
    ZooKeeper's znodes then carry ACLs only that login passes)."""
    return (security_dir(data_dir) / ZOOKEEPER_JAAS).is_file()


def prepare_zookeeper_login(data_dir: Path) -> ZooKeeperLogin:
    """The ZooKeeper user's password (made once, random, kept) and its JAAS ``Client`` file
    under ``DIR/security``."""
    folder = security_dir(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    login = ZooKeeperLogin(ZOOKEEPER_USER, kept_password(folder / ZOOKEEPER_PASSWORD),
                           folder / ZOOKEEPER_JAAS)
    jaas = ("// Written by `loglake dev up --security sasl_ssl`: the ZooKeeper login of this\n"
            "// cluster's brokers and tools (SASL DIGEST-MD5).\n"
            f"Client {{\n    {ZOOKEEPER_LOGIN_MODULE} required\n"
            f"    username={_quoted(login.username)}\n"
            f"    password={_quoted(login.password)};\n}};\n")
    write_private(login.jaas_file, jaas.encode())
    return login


@dataclass(frozen=True)
class SecuredSetup:
    """What ``dev up`` needs for a secured cluster."""

    certificates: DevCertificates
    admin_user: str
    admin_password: str
    client_properties: Path
    java_client_properties: Path

    @property
    def ca(self) -> Path:
        return self.certificates.ca


def security_dir(data_dir: Path) -> Path:
    return data_dir / SECURITY_DIR


def prepare(data_dir: Path) -> SecuredSetup:
    """Certificates, the admin password and both client properties files under
    ``DIR/security`` (existing ones kept)."""
    folder = security_dir(data_dir)
    certificates = ensure_dev_certificates(folder)
    password = kept_password(folder / "admin.password")
    setup = SecuredSetup(certificates, ADMIN_USER, password, folder / CLIENT_PROPERTIES,
                         folder / JAVA_CLIENT_PROPERTIES)
    write_private(setup.client_properties, client_properties(setup).encode())
    write_private(setup.java_client_properties, java_client_properties(setup).encode())
    return setup


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _jaas(user: str, password: str) -> str:
    """The SCRAM login JAAS entry of ``user``."""
    return (f"{SCRAM_LOGIN_MODULE} required username={_quoted(user)} "
            f"password={_quoted(password)};")


def client_properties(setup: SecuredSetup) -> str:
    """The librdkafka-form properties (``kcat -F``, confluent-kafka, ``--command-config``)."""
    return "\n".join([
        "# Written by `loglake dev up --security sasl_ssl`: the admin user of this cluster.",
        "# Use with: loglake ... --command-config THIS_FILE, kcat -F THIS_FILE",
        "security.protocol=SASL_SSL",
        f"sasl.mechanism={BROKER_MECHANISM}",
        f"sasl.username={setup.admin_user}",
        f"sasl.password={setup.admin_password}",
        f"ssl.ca.location={setup.ca}",
        "",
    ])


def java_client_properties(setup: SecuredSetup) -> str:
    """The Java-form properties (Kafka's tools: ``--command-config``; Java clients)."""
    return "\n".join([
        "# Written by `loglake dev up --security sasl_ssl`: the admin user of this cluster.",
        "security.protocol=SASL_SSL",
        f"sasl.mechanism={BROKER_MECHANISM}",
        f"sasl.jaas.config={_jaas(setup.admin_user, setup.admin_password)}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={setup.ca}",
        "",
    ])


def add_registry_settings(setup: SecuredSetup, url: str) -> None:
    """Append the schema registry's client settings (``schema.registry.url``,
    ``basic.auth.user.info`` as the admin, ``schema.registry.ssl.truststore.*`` = the CA) to
    the Java-form file, where Java clients and Confluent's serializers read them. The
    librdkafka-form file stays without them: librdkafka and kcat refuse keys they do not know.
    :func:`prepare` rewrites the file on every start, so the settings go with the registry."""
    registry = "\n".join([
        f"schema.registry.url={url}",
        "basic.auth.credentials.source=USER_INFO",
        f"basic.auth.user.info={setup.admin_user}:{setup.admin_password}",
        "schema.registry.ssl.truststore.type=PEM",
        f"schema.registry.ssl.truststore.location={setup.ca}",
        "",
    ])
    write_private(setup.java_client_properties,
                  (java_client_properties(setup) + registry).encode())


def broker_overrides(setup: SecuredSetup) -> dict[str, str]:
    """``server.properties`` lines of every broker (``{port}``: the broker's own port)."""
    listener = LISTENER.lower()
    return {
        "listeners": f"{LISTENER}://127.0.0.1:{{port}}",
        "inter.broker.listener.name": LISTENER,
        "sasl.enabled.mechanisms": ",".join(SCRAM_MECHANISMS),
        "sasl.mechanism.inter.broker.protocol": BROKER_MECHANISM,
        f"listener.name.{listener}.{BROKER_MECHANISM.lower()}.sasl.jaas.config":
            _jaas(setup.admin_user, setup.admin_password),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(setup.certificates.broker),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(setup.ca),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": f"User:{setup.admin_user}",
    }


def create_admin_user(setup: SecuredSetup, zookeeper_connect: str, timeout: float,
                      auth: Mapping[str, object] | None = None,
                      zookeeper_login: ZooKeeperLogin | None = None) -> None:
    """Store the admin's SCRAM credentials (both mechanisms) under ``zookeeper_connect``
    (hosts + chroot), as ``kafka-configs --zookeeper --alter --add-config`` would.
    ``auth``: extra KazooClient arguments (e.g. ``sasl_options`` for a secured ZooKeeper);
    ``zookeeper_login``: log in as that user and create the znodes with Kafka's ACLs."""
    from loglake.broker.security.scram_credentials import store_user_credential
    from loglake.catalog.entity_configs import EntityConfigStore
    from loglake.catalog.zk_acls import PathAclKazooClient  # heavy imports, only needed here

    options: dict[str, Any] = dict(auth or {})
    if zookeeper_login is not None:
        options["sasl_options"] = zookeeper_login.sasl_options()
    client = PathAclKazooClient(hosts=zookeeper_connect, timeout=timeout,
                                acl_policy=None if zookeeper_login is None else acl_for,
                                **options)
    try:
        client.start(timeout=timeout)
        store = EntityConfigStore(client)
        for mechanism in SCRAM_MECHANISMS:
            store_user_credential(store, setup.admin_user, mechanism, setup.admin_password)
    finally:
        client.stop()
        client.close()

