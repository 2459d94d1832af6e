"""The security client matrix (issue 15, "How it is checked (real clients)"): EACH of
confluent-kafka, kafka-python, aiokafka, kcat and Apache Kafka's Java client (kafka-clients
3.9.2, ``loglake.interop.SecureClients`` in the interop jar) produces and consumes over

* SASL_SSL with SCRAM-SHA-256 and with SCRAM-SHA-512 (credentials in ZooKeeper),
* SSL with a client certificate (``ssl.client.auth=required``, the principal from the
  certificate through ``ssl.principal.mapping.rules``),
* SASL_PLAINTEXT with PLAIN (users from a JAAS file, ``sasl.jaas.file``),

as the same NON-super user ``User:alice``, allowed by ACLs only (PREFIXED ``matrix-`` topics:
READ + WRITE; PREFIXED ``matrix-`` groups: READ; idempotent writes through KIP-679's implied
IDEMPOTENT_WRITE), with the ACL authorizer on; and the same user producing to a topic it has no
ACL for is refused with each client's own form of TOPIC_AUTHORIZATION_FAILED (nothing is
written). The Java client's negative cases: a wrong password and an unknown user
(SaslAuthenticationException), an untrusted server certificate (SslAuthenticationException,
an SSL handshake failure), a read of a topic and a group without ACLs (Topic/
GroupAuthorizationException); after each the broker still serves a good client. And KIP-368:
the Java producer re-authenticates (SCRAM-SHA-512 over TLS) on a listener with
``connections.max.reauth.ms``, on the same connection, while it keeps producing.

One broker process serves every protocol at once (ports: base, +100, +200, +300):

* PLAINTEXT -- set-up (topics, ACLs) and the inter-broker listener; ``User:ANONYMOUS`` is a
  super user there (only there: the other listeners never yield ANONYMOUS);
* SASL_SSL -- SCRAM-SHA-256 and SCRAM-SHA-512, server-only TLS;
* MTLS -- SSL, ``ssl.client.auth=required``, ``CN=alice,OU=eng,O=loglake`` -> ``alice``;
* SASL_PLAINTEXT -- PLAIN, users in the JAAS file's ``sasl_plaintext.KafkaServer`` section;
* REAUTH (+400) -- SASL_SSL, SCRAM-SHA-512, ``connections.max.reauth.ms`` = :data:`REAUTH_MS`
  (a listener of its own: kcat's librdkafka 2.0 and the Python clients do not re-authenticate).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from loglake import jvm
from loglake.dev.harness import DevCluster
from tests.java_interop import interop_jar
from tests.tls_util import TlsFiles, broker_ssl_settings, make_tls_files
from tests.zk_util import store_scram_users

__all__ = ["interop_jar"]  # the fixture, imported for pytest

pytestmark = pytest.mark.timeout(300)

USER = "alice"
SCRAM_PASSWORD = "alice-scram-secret"
PLAIN_PASSWORD = "alice-plain-secret"
ALLOWED = "matrix-"
"""The PREFIXED topic and group name alice's ACLs allow."""
DENIED = "secret-"
"""Topics alice has no ACL for."""
COUNT = 10
WAIT_S = 60.0

SASL_SSL_OFFSET, MTLS_OFFSET, PLAIN_OFFSET, REAUTH_OFFSET = 100, 200, 300, 400
REAUTH_MS = 2000
PROTOCOLS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "SSL", "PLAIN")
CLIENTS = ("confluent", "kafka-python", "aiokafka", "kcat", "java")


@dataclass(frozen=True)
class Target:
    """One way of reaching the module's broker as alice."""

    protocol: str
    """SCRAM-SHA-256, SCRAM-SHA-512, SSL (client certificate) or PLAIN."""
    bootstrap: str
    tls: TlsFiles
    password: str | None = None
    """Overrides the right password (negative cases)."""
    user: str = USER
    ca_file: Path | None = None
    """Overrides the truststore (negative cases)."""

    @property
    def security_protocol(self) -> str:
        return {"SSL": "SSL", "PLAIN": "SASL_PLAINTEXT"}.get(self.protocol, "SASL_SSL")

    @property
    def mechanism(self) -> str | None:
        return None if self.protocol == "SSL" else self.protocol

    @property
    def secret(self) -> str:
        if self.password is not None:
            return self.password
        return PLAIN_PASSWORD if self.protocol == "PLAIN" else SCRAM_PASSWORD

    @property
    def ca(self) -> Path:
        return self.ca_file or self.tls.ca.cert

    def with_(self, **changes: Any) -> Target:
        return Target(**{**self.__dict__, **changes})


@dataclass(frozen=True)
class Matrix:
    dev: DevCluster
    tls: TlsFiles

    def target(self, protocol: str) -> Target:
        offset = {"SSL": MTLS_OFFSET, "PLAIN": PLAIN_OFFSET}.get(protocol, SASL_SSL_OFFSET)
        return Target(protocol, f"127.0.0.1:{self.dev.broker_port(1) + offset}", self.tls)

    def reauth_target(self) -> Target:
        """SCRAM-SHA-512 on the listener whose sessions last :data:`REAUTH_MS`."""
        return Target("SCRAM-SHA-512",
                      f"127.0.0.1:{self.dev.broker_port(1) + REAUTH_OFFSET}", self.tls)


def _jaas_file(directory: Path) -> Path:
    path = directory / "kafka_server_jaas.conf"
    path.write_text(
        "// the SASL_PLAINTEXT listener's PLAIN users\n"
        "sasl_plaintext.KafkaServer {\n"
        "    org.apache.kafka.common.security.plain.PlainLoginModule required\n"
        f'    user_{USER}="{PLAIN_PASSWORD}"\n'
        '    user_bob="bob-plain-secret";\n'
        "};\n")
    return path


def _grant_alice(bootstrap: str) -> None:
    """alice's ACLs through CreateAcls (as kafka-acls --bootstrap-server): applied by the one
    broker before the answer."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    principal = f"User:{USER}"
    bindings = [
        AclBinding(ResourceType.TOPIC, ALLOWED, ResourcePatternType.PREFIXED, principal, "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, ALLOWED, ResourcePatternType.PREFIXED, principal, "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, ALLOWED, ResourcePatternType.PREFIXED, principal, "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
    ]
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result(timeout=60)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[Matrix]:
    tls = make_tls_files(tmp_path_factory.mktemp("matrix-tls"))
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{port:1},"
                     "MTLS://127.0.0.1:{port:2},SASL_PLAINTEXT://127.0.0.1:{port:3},"
                     "REAUTH://127.0.0.1:{port:4}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT,REAUTH:SASL_SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        **broker_ssl_settings(tls),
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.reauth.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.reauth.connections.max.reauth.ms": str(REAUTH_MS),
        "sasl.jaas.file": str(_jaas_file(tls.directory)),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules":
            "RULE:^CN=([^,]+),OU=.*$/$1/L,DEFAULT",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
        "group.initial.rebalance.delay.ms": "0",
    }
    data = tmp_path_factory.mktemp("matrix-cluster")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as dev:
        store_scram_users(dev.zookeeper_connect, {USER: SCRAM_PASSWORD},
                          ("SCRAM-SHA-256", "SCRAM-SHA-512"))
        _grant_alice(dev.bootstrap_servers)
        yield Matrix(dev, tls)


def _topics(matrix: Matrix) -> tuple[str, str]:
    """A new topic alice may use and one she may not (both created by the super user)."""
    suffix = uuid.uuid4().hex[:8]
    allowed, denied = f"{ALLOWED}{suffix}", f"{DENIED}{suffix}"
    for name in (allowed, denied):
        matrix.dev.create_topic(name, partitions=1)
    return allowed, denied


def _values() -> list[bytes]:
    return [f"v{i}".encode() for i in range(COUNT)]


def _end_offset(matrix: Matrix, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": matrix.dev.bootstrap_servers,
                         "group.id": "matrix-watermarks"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)[1])
    finally:
        consumer.close()


# ---- confluent-kafka (librdkafka) and kcat: the same librdkafka properties --------------------

def _librdkafka_conf(target: Target) -> dict[str, str]:
    conf = {"bootstrap.servers": target.bootstrap,
            "security.protocol": target.security_protocol}
    if target.security_protocol != "SASL_PLAINTEXT":
        conf["ssl.ca.location"] = str(target.ca)
    if target.mechanism is None:
        conf["ssl.certificate.location"] = str(target.tls.client.cert)
        conf["ssl.key.location"] = str(target.tls.client.key)
    else:
        conf.update({"sasl.mechanism": target.mechanism, "sasl.username": target.user,
                     "sasl.password": target.secret})
    return conf


def _confluent_roundtrip(target: Target, topic: str) -> list[bytes]:
    conf = _librdkafka_conf(target)
    producer = Producer({**conf, "acks": "all"})
    errors: list[KafkaError | None] = []
    for value in _values():
        producer.produce(topic, value, on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(WAIT_S) == 0 and errors == [None] * COUNT, errors
    consumer = Consumer({**conf, "group.id": f"{ALLOWED}{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < COUNT and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append(message.value() or b"")
    finally:
        consumer.close()
    return got


def _confluent_refused(target: Target, topic: str) -> str:
    producer = Producer({**_librdkafka_conf(target), "acks": "all",
                         "message.timeout.ms": 15000, "retries": 0})
    results: list[KafkaError | None] = []
    try:
        producer.produce(topic, b"x", on_delivery=lambda e, _m: results.append(e))
    except KafkaException as exc:  # librdkafka already knows the topic is not authorized
        return str(exc.args[0].name())
    producer.flush(WAIT_S)
    assert len(results) == 1 and results[0] is not None, results
    return str(results[0].name())


def _kcat(target: Target, tmp: Path, *args: str, data: bytes | None = None
          ) -> subprocess.CompletedProcess[bytes]:
    conf = tmp / f"kcat-{uuid.uuid4().hex[:6]}.conf"
    conf.write_text("".join(f"{key}={value}\n" for key, value in _librdkafka_conf(target).items()
                            if key != "bootstrap.servers"))
    conf.chmod(0o600)
    return subprocess.run(["kcat", "-b", target.bootstrap, "-F", str(conf), *args], input=data,
                          capture_output=True, timeout=WAIT_S * 2, check=False)


def _kcat_roundtrip(target: Target, topic: str, tmp: Path) -> list[bytes]:
    produced = _kcat(target, tmp, "-P", "-t", topic, data=b"\n".join(_values()) + b"\n")
    assert produced.returncode == 0, produced.stderr
    consumed = _kcat(target, tmp, "-C", "-t", topic, "-o", "beginning", "-e",
                     "-c", str(COUNT), "-q")
    assert consumed.returncode == 0, consumed.stderr
    return consumed.stdout.split()


def _kcat_refused(target: Target, topic: str, tmp: Path) -> str:
    produced = _kcat(target, tmp, "-P", "-t", topic, "-X", "message.timeout.ms=15000",
                     data=b"x\n")
    assert produced.returncode != 0, produced
    return produced.stderr.decode(errors="replace")


# ---- kafka-python -------------------------------------------------------------------------------

def _kafka_python_conf(target: Target) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap_servers": target.bootstrap,
                            "security_protocol": target.security_protocol}
    if target.security_protocol != "SASL_PLAINTEXT":
        conf["ssl_cafile"] = str(target.ca)
    if target.mechanism is None:
        conf.update(ssl_certfile=str(target.tls.client.cert),
                    ssl_keyfile=str(target.tls.client.key))
    else:
        conf.update(sasl_mechanism=target.mechanism, sasl_plain_username=target.user,
                    sasl_plain_password=target.secret)
    return conf


def _kafka_python_roundtrip(target: Target, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer
    conf = _kafka_python_conf(target)
    producer = KafkaProducer(**conf, acks="all")
    try:
        for value in _values():
            producer.send(topic, value).get(timeout=WAIT_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, **conf, group_id=f"{ALLOWED}{uuid.uuid4().hex[:8]}",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=int(WAIT_S * 1000))
    try:
        return [record.value for _, record in zip(range(COUNT), consumer, strict=False)]
    finally:
        consumer.close()


def _kafka_python_refused(target: Target, topic: str) -> str:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KafkaPythonError
    producer = KafkaProducer(**_kafka_python_conf(target), acks="all", max_block_ms=15000,
                             retries=0)
    try:
        producer.send(topic, b"x").get(timeout=WAIT_S)
    except KafkaPythonError as exc:
        return type(exc).__name__
    finally:
        producer.close()
    raise AssertionError("kafka-python's send to a topic without ACLs succeeded")


# ---- aiokafka -----------------------------------------------------------------------------------

def _aiokafka_conf(target: Target) -> dict[str, Any]:
    from aiokafka.helpers import create_ssl_context
    conf: dict[str, Any] = {"bootstrap_servers": target.bootstrap,
                            "security_protocol": target.security_protocol}
    if target.security_protocol != "SASL_PLAINTEXT":
        client = target.mechanism is None
        conf["ssl_context"] = create_ssl_context(
            cafile=str(target.ca), certfile=str(target.tls.client.cert) if client else None,
            keyfile=str(target.tls.client.key) if client else None)
    if target.mechanism is not None:
        conf.update(sasl_mechanism=target.mechanism, sasl_plain_username=target.user,
                    sasl_plain_password=target.secret)
    return conf


def _aiokafka_roundtrip(target: Target, topic: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def scenario() -> list[bytes]:
        producer = AIOKafkaProducer(**_aiokafka_conf(target), acks="all")
        await producer.start()
        try:
            for value in _values():
                await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, **_aiokafka_conf(target),
                                    group_id=f"{ALLOWED}{uuid.uuid4().hex[:8]}",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(WAIT_S):
                async for record in consumer:
                    got.append(record.value)
                    if len(got) == COUNT:
                        break
        finally:
            await consumer.stop()
        return got

    return asyncio.run(scenario())


def _aiokafka_refused(target: Target, topic: str) -> str:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError as AioKafkaError

    async def scenario() -> str:
        producer = AIOKafkaProducer(**_aiokafka_conf(target), acks="all",
                                    request_timeout_ms=15000)
        await producer.start()
        try:
            async with asyncio.timeout(WAIT_S):
                await producer.send_and_wait(topic, b"x")
        except AioKafkaError as exc:
            return type(exc).__name__
        finally:
            await producer.stop()
        raise AssertionError("aiokafka's send to a topic without ACLs succeeded")

    return asyncio.run(scenario())


# ---- Apache Kafka's Java client -----------------------------------------------------------------

def _java_properties(target: Target, path: Path) -> Path:
    """The client.properties an operator would write for ``target`` (PEM trust/key stores)."""
    lines = [f"security.protocol={target.security_protocol}"]
    if target.security_protocol != "SASL_PLAINTEXT":
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={target.ca}"]
    if target.mechanism is None:
        lines += ["ssl.keystore.type=PEM", f"ssl.keystore.location={target.tls.client.keystore}"]
    else:
        module = ("org.apache.kafka.common.security.plain.PlainLoginModule"
                  if target.mechanism == "PLAIN"
                  else "org.apache.kafka.common.security.scram.ScramLoginModule")
        lines += [f"sasl.mechanism={target.mechanism}",
                  f'sasl.jaas.config={module} required username="{target.user}" '
                  f'password="{target.secret}";']
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return path


def _java(jar: Path, mode: str, target: Target, tmp: Path, topic: str,
          group: str | None = None, count: int = COUNT, pause_ms: int = 0) -> dict[str, Any]:
    """Run ``SecureClients <mode>`` (bounded) and return its JSON result."""
    import json
    config = _java_properties(target, tmp / f"client-{uuid.uuid4().hex[:6]}.properties")
    classpath = f"{jar}{os.pathsep}{jvm.set_dir('kafka')}{os.sep}*"
    command = ["java", "-Xmx256m", "-cp", classpath, "loglake.interop.SecureClients", mode,
               "--bootstrap", target.bootstrap, f"config={config}", f"topic={topic}",
               f"count={count}", f"group={group or ALLOWED + uuid.uuid4().hex[:8]}",
               f"pause_ms={pause_ms}", "timeout_s=40"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=150, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, f"exit {done.returncode}: {done.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# ---- the matrix ---------------------------------------------------------------------------------

REFUSAL = {
    "confluent": "TOPIC_AUTHORIZATION_FAILED",
    "kafka-python": "TopicAuthorizationFailedError",
    "aiokafka": "TopicAuthorizationFailedError",
    "kcat": "Topic authorization failed",
    "java": "TopicAuthorizationException",
}
"""How each client names Kafka's TOPIC_AUTHORIZATION_FAILED (29) to its user."""


def _client(name: str, request: pytest.FixtureRequest, tmp: Path
            ) -> tuple[Callable[[Target, str], list[bytes]], Callable[[Target, str], str]]:
    """(round trip, refusal) of one client."""
    if name == "confluent":
        return _confluent_roundtrip, _confluent_refused
    if name == "kafka-python":
        return _kafka_python_roundtrip, _kafka_python_refused
    if name == "aiokafka":
        return _aiokafka_roundtrip, _aiokafka_refused
    if name == "kcat":
        return (lambda t, topic: _kcat_roundtrip(t, topic, tmp),
                lambda t, topic: _kcat_refused(t, topic, tmp))
    jar: Path = request.getfixturevalue("interop_jar")

    def java_roundtrip(target: Target, topic: str) -> list[bytes]:
        result = _java(jar, "roundtrip", target, tmp, topic)
        assert result["ok"] is True and result["produced"] == COUNT, result
        return [value.encode() for value in result["values"]]

    def java_refused(target: Target, topic: str) -> str:
        result = _java(jar, "produce", target, tmp, topic, count=1)
        assert result["ok"] is False, result
        return str(result["error"])

    return java_roundtrip, java_refused


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_produces_consumes_and_is_refused_without_acls(
        matrix: Matrix, client: str, protocol: str, request: pytest.FixtureRequest,
        tmp_path: Path) -> None:
    roundtrip, refused = _client(client, request, tmp_path)
    target = matrix.target(protocol)
    allowed, denied = _topics(matrix)
    assert roundtrip(target, allowed) == _values()
    assert REFUSAL[client] in refused(target, denied)
    assert _end_offset(matrix, denied) == 0
    assert _end_offset(matrix, allowed) == COUNT


# ---- the Java client's negative cases -----------------------------------------------------------

JAVA_NEGATIVE = {
    "wrong-password": ("SCRAM-SHA-512", "SaslAuthenticationException"),
    "unknown-user": ("SCRAM-SHA-256", "SaslAuthenticationException"),
    "wrong-plain-password": ("PLAIN", "SaslAuthenticationException"),
    "untrusted-server-certificate": ("SCRAM-SHA-256", "SslAuthenticationException"),
    "untrusted-server-certificate-mtls": ("SSL", "SslAuthenticationException"),
    "topic-without-acl": ("SCRAM-SHA-256", "TopicAuthorizationException"),
    "group-without-acl": ("SSL", "GroupAuthorizationException"),
}


@pytest.mark.parametrize("case", list(JAVA_NEGATIVE))
def test_java_client_refusals(matrix: Matrix, interop_jar: Path, case: str,
                              tmp_path: Path) -> None:
    protocol, expected = JAVA_NEGATIVE[case]
    target = matrix.target(protocol)
    allowed, denied = _topics(matrix)
    topic, group, mode = allowed, None, "roundtrip"
    if case in ("wrong-password", "wrong-plain-password"):
        target = target.with_(password="not-" + target.secret)
    elif case == "unknown-user":
        target = target.with_(user="mallory")
    elif case.startswith("untrusted-server-certificate"):
        target = target.with_(ca_file=matrix.tls.other_ca.cert)
    elif case == "topic-without-acl":
        topic, mode = denied, "consume"
    elif case == "group-without-acl":
        group, mode = f"{DENIED}{uuid.uuid4().hex[:8]}", "consume"
    result = _java(interop_jar, mode, target, tmp_path, topic, group=group)
    assert result["ok"] is False, result
    assert result["error"] == expected, result
    if expected == "SslAuthenticationException":
        assert result["cause"] == "SSLHandshakeException", result
    assert _end_offset(matrix, allowed) == 0  # nothing was written by the refused client
    # the broker keeps serving others, on the same listener
    assert _confluent_roundtrip(matrix.target(protocol), allowed) == _values()


def test_java_client_reauthenticates(matrix: Matrix, interop_jar: Path, tmp_path: Path) -> None:
    """KIP-368: SaslAuthenticate v1+ answers session_lifetime_ms; the Java producer logs in
    again on the same connection before its session ends and keeps producing. Its own metrics
    show successful re-authentications, none failed, and no connection beyond the bootstrap
    and the leader's (a broker that closed expired sessions would force new ones)."""
    allowed, _ = _topics(matrix)
    pause_ms, count = 250, 12  # >= 3 s of producing on the connection: > REAUTH_MS
    result = _java(interop_jar, "roundtrip", matrix.reauth_target(), tmp_path, allowed,
                   count=count, pause_ms=pause_ms)
    assert result["ok"] is True, result
    assert result["values"] == [f"v{i}" for i in range(count)]
    metrics = result["producer_metrics"]
    assert metrics["successful-reauthentication-total"] >= 1, metrics
    assert metrics["failed-reauthentication-total"] == 0, metrics
    assert metrics["connection-creation-total"] <= 2, metrics
