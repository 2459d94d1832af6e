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

Blocking (file and ZooKeeper I/O); called by ``dev up`` only.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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
    password_file = folder / "admin.password"
    try:
        password = password_file.read_text().strip()
    except FileNotFoundError:
        password = ""
    if not password:
        password = secrets.token_urlsafe(18)
        write_private(password_file, (password + "\n").encode())
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
                      auth: Mapping[str, object] | None = None) -> None:
    """Store the admin's SCRAM credentials (both mechanisms) under ``zookeeper_connect``
    (hosts + chroot), as ``kafka-configs --zookeeper --alter --add-config`` would.
    ``auth``: extra KazooClient arguments (e.g. ``sasl_options`` for a secured ZooKeeper)."""
    from kazoo.client import KazooClient  # heavy imports, only needed here

    from loglake.broker.security.scram_credentials import store_user_credential
    from loglake.catalog.entity_configs import EntityConfigStore

    client = KazooClient(hosts=zookeeper_connect, timeout=timeout, **dict(auth or {}))
    try:
        client.start(timeout=timeout)
        store = EntityConfigStore(client)
        for mechanism in SCRAM_MECHANISMS:
            store_user_credential(store, setup.admin_user, mechanism, setup.admin_password)
    finally:
        client.stop()
        client.close()

