"""SASL_PLAINTEXT listeners end to end: real clients (confluent-kafka, kafka-python, aiokafka,
kcat) produce and consume with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 against a broker
process; the negative matrix (wrong password, unknown user, requests before authentication,
an unknown mechanism, oversized tokens, the authentication time limit, a flood of failed
logins) and KIP-368 re-authentication.

One broker with two listeners: PLAINTEXT (the harness's own admin calls, inter-broker) and
SASL_PLAINTEXT at base port + 100. SCRAM users are written into ZooKeeper as
``kafka-configs --zookeeper`` does (scram_credentials.store_user_credential)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import struct
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from loglake.broker.security.sasl_client import sasl_client_authenticate
from loglake.broker.security.scram_credentials import store_user_credential
from loglake.catalog.entity_configs import EntityConfigStore
from loglake.dev.harness import DevCluster
from loglake.errors import SaslAuthenticationError
from tests.wire import WireClient

PLAIN_USERS = {"alice": "alice-plain", "bob": "bob-plain"}
SCRAM_USERS = {"carol": "carol-scram", "dave": "dave-scram"}
AUTH_TIMEOUT_MS = 2000
REAUTH_MS = 3000


def _jaas() -> str:
    users = " ".join(f'user_{name}="{password}"' for name, password in PLAIN_USERS.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"


@pytest.fixture(scope="module")
def sasl_cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
                 ) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("sasl")
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{port:1}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": _jaas(),
        "sasl.server.authentication.timeout.ms": str(AUTH_TIMEOUT_MS),
        "sasl.server.max.receive.size": "4096",
        "connection.failed.authentication.delay.ms": "200",
    }
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as dev:
        zk = KazooClient(hosts=dev.zookeeper_connect, timeout=10)
        zk.start(timeout=10)
        try:
            store = EntityConfigStore(zk)
            for user, password in SCRAM_USERS.items():
                for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                    store_user_credential(store, user, mechanism, password)
        finally:
            zk.stop()
            zk.close()
        yield dev


def _sasl_bootstrap(dev: DevCluster) -> str:
    return f"127.0.0.1:{dev.broker_port(1) + 100}"


CASES = [("PLAIN", "alice", "alice-plain"), ("SCRAM-SHA-256", "carol", "carol-scram"),
         ("SCRAM-SHA-512", "dave", "dave-scram")]
CASE_IDS = [case[0] for case in CASES]


def _topic(dev: DevCluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    dev.create_topic(name, partitions=1)
    return name


def _confluent_conf(dev: DevCluster, mechanism: str, user: str, password: str
                    ) -> dict[str, Any]:
    return {"bootstrap.servers": _sasl_bootstrap(dev), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


# ------------------------------------------------------------------- real clients, success

@pytest.mark.parametrize(("mechanism", "user", "password"), CASES, ids=CASE_IDS)
def test_confluent_kafka(sasl_cluster: DevCluster, mechanism: str, user: str,
                         password: str) -> None:
    from confluent_kafka import Consumer, Producer

    topic = _topic(sasl_cluster, "ck")
    conf = _confluent_conf(sasl_cluster, mechanism, user, password)
    producer = Producer(conf)
    for i in range(10):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    assert got == [f"v{i}".encode() for i in range(10)]


@pytest.mark.parametrize(("mechanism", "user", "password"), CASES, ids=CASE_IDS)
def test_kafka_python(sasl_cluster: DevCluster, mechanism: str, user: str,
                      password: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = _topic(sasl_cluster, "kp")
    conf = {"bootstrap_servers": _sasl_bootstrap(sasl_cluster),
            "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": password}
    producer = KafkaProducer(**conf)
    try:
        for i in range(5):
            producer.send(topic, f"k{i}".encode()).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000,
                             **conf)
    try:
        got = [record.value for _, record in zip(range(5), consumer, strict=False)]
    finally:
        consumer.close()
    assert got == [f"k{i}".encode() for i in range(5)]


@pytest.mark.parametrize(("mechanism", "user", "password"), CASES, ids=CASE_IDS)
def test_aiokafka(sasl_cluster: DevCluster, mechanism: str, user: str, password: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = _topic(sasl_cluster, "aio")
    conf = {"bootstrap_servers": _sasl_bootstrap(sasl_cluster),
            "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": password}

    async def scenario() -> list[bytes]:
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for record in consumer:
                    got.append(record.value)
                    if len(got) == 5:
                        break
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(scenario()) == [f"a{i}".encode() for i in range(5)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
@pytest.mark.parametrize(("mechanism", "user", "password"), CASES, ids=CASE_IDS)
def test_kcat(sasl_cluster: DevCluster, mechanism: str, user: str, password: str,
              tmp_path: Path) -> None:
    topic = _topic(sasl_cluster, "kcat")
    conf = tmp_path / "kcat.conf"
    conf.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanisms={mechanism}\n"
                    f"sasl.username={user}\nsasl.password={password}\n")
    common = ["kcat", "-b", _sasl_bootstrap(sasl_cluster), "-F", str(conf), "-t", topic]
    subprocess.run([*common, "-P"], input=b"one\ntwo\nthree\n", check=True, timeout=60)
    out = subprocess.run([*common, "-C", "-o", "beginning", "-e", "-c", "3"], check=True,
                         capture_output=True, timeout=60)
    assert out.stdout.split() == [b"one", b"two", b"three"]


# ---------------------------------------------------------------------- negative matrix

class RawSasl:
    """A raw connection to the SASL listener, for requests no real client would send."""

    def __init__(self, dev: DevCluster) -> None:
        self.wire = WireClient.connect(_sasl_bootstrap(dev))

    def __enter__(self) -> RawSasl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.wire.close()

    async def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        return self.wire.request(api_key, version, body)

    def login(self, mechanism: str, user: str, password: str) -> None:
        asyncio.run(sasl_client_authenticate(self.request, mechanism, user, password))

    def metadata(self) -> Any:
        return self.wire.request(3, 12, {"topics": None})


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("PLAIN", "alice", "wrong"), ("PLAIN", "nobody", "alice-plain"),
    ("SCRAM-SHA-256", "carol", "wrong"), ("SCRAM-SHA-256", "nobody", "x"),
    ("SCRAM-SHA-512", "dave", "carol-scram")])
def test_bad_credentials(sasl_cluster: DevCluster, mechanism: str, user: str,
                         password: str) -> None:
    with RawSasl(sasl_cluster) as raw:
        started = time.monotonic()
        with pytest.raises(SaslAuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
            raw.login(mechanism, user, password)
        assert time.monotonic() - started >= 0.2  # connection.failed.authentication.delay.ms
        with pytest.raises(ConnectionError):  # one attempt per connection
            raw.metadata()


def test_confluent_kafka_wrong_password_reports_authentication(sasl_cluster: DevCluster
                                                                ) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    errors: list[KafkaError] = []
    conf = _confluent_conf(sasl_cluster, "SCRAM-SHA-512", "dave", "nope")
    admin = AdminClient({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        admin.poll(0.2)
        with contextlib.suppress(Exception):
            admin.list_topics(timeout=0.5)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_requests_before_authentication_close_the_connection(sasl_cluster: DevCluster
                                                              ) -> None:
    with RawSasl(sasl_cluster) as raw:
        versions = raw.wire.request(18, 3, {"client_software_name": "t",
                                            "client_software_version": "1"})
        assert versions.error_code == ErrorCode.none  # ApiVersions is served
        with pytest.raises(ConnectionError):
            raw.metadata()
    with RawSasl(sasl_cluster) as raw:  # mid-exchange too
        handshake = raw.wire.request(17, 1, {"mechanism": "SCRAM-SHA-256"})
        assert handshake.error_code == ErrorCode.none
        with pytest.raises(ConnectionError):
            raw.wire.request(0, 9, {"acks": 1, "timeout": 1000, "topic_data": []})


def test_unknown_mechanism(sasl_cluster: DevCluster) -> None:
    with RawSasl(sasl_cluster) as raw:
        response = raw.wire.request(17, 1, {"mechanism": "GSSAPI"})
        assert response.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(response.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        with pytest.raises(ConnectionError):
            raw.wire.request(17, 1, {"mechanism": "PLAIN"})


def test_authenticate_before_handshake(sasl_cluster: DevCluster) -> None:
    """Closed without an answer, as Kafka's SaslServerAuthenticator does."""
    with RawSasl(sasl_cluster) as raw, pytest.raises(ConnectionError):
        raw.wire.request(36, 2, {"auth_bytes": b"\x00alice\x00alice-plain"})


def test_oversized_token_closes(sasl_cluster: DevCluster) -> None:
    with RawSasl(sasl_cluster) as raw:
        assert raw.wire.request(17, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.none
        with pytest.raises(ConnectionError):
            raw.wire.request(36, 2, {"auth_bytes": b"\x00alice\x00" + b"x" * 10000})
    with RawSasl(sasl_cluster) as raw:  # a huge frame announced before authentication
        raw.wire.send_raw(struct.pack(">i", 50_000) + b"\x00\x24\x00\x02" + b"\x00" * 49_996)
        assert raw.wire.is_closed()


def test_unauthenticated_connections_are_closed_in_time(sasl_cluster: DevCluster) -> None:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", sasl_cluster.broker_port(1) + 100),
                                  timeout=15) as sock:
        assert sock.recv(1) == b""  # closed by the broker, nothing sent
    elapsed = time.monotonic() - started
    assert AUTH_TIMEOUT_MS / 1000 - 0.2 <= elapsed < AUTH_TIMEOUT_MS / 1000 + 5


def test_failed_login_flood_does_not_stop_others(sasl_cluster: DevCluster) -> None:
    """Eight threads fail logins as fast as the broker lets them while a legitimate client
    logs in and fetches metadata over and over."""
    stop = threading.Event()
    failures = [0]

    def attacker() -> None:
        while not stop.is_set():
            try:
                with RawSasl(sasl_cluster) as raw:
                    raw.login("PLAIN", "alice", "guess")
            except (SaslAuthenticationError, OSError):
                failures[0] += 1

    threads = [threading.Thread(target=attacker, daemon=True) for _ in range(8)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.5)
        latencies = []
        for _ in range(10):
            started = time.monotonic()
            with RawSasl(sasl_cluster) as raw:
                raw.login("SCRAM-SHA-256", "carol", "carol-scram")
                assert raw.metadata().brokers
            latencies.append(time.monotonic() - started)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    assert failures[0] >= 8
    assert max(latencies) < 2.0, latencies


# ---------------------------------------------------------------------- re-authentication

@pytest.fixture(scope="module")
def reauth_cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
                   ) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("reauth")
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{port:1}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": _jaas(),
        "listener.name.sasl_plaintext.connections.max.reauth.ms": str(REAUTH_MS),
    }
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as dev:
        yield dev


def test_session_expires_without_reauthentication(reauth_cluster: DevCluster) -> None:
    with RawSasl(reauth_cluster) as raw:
        raw.login("PLAIN", "alice", "alice-plain")
        assert raw.metadata().brokers
        time.sleep(REAUTH_MS / 1000 + 0.3)
        with pytest.raises(ConnectionError):
            raw.metadata()


def test_reauthentication_on_the_same_connection(reauth_cluster: DevCluster) -> None:
    with RawSasl(reauth_cluster) as raw:
        for _ in range(3):
            raw.login("PLAIN", "alice", "alice-plain")
            assert raw.metadata().brokers
            time.sleep(REAUTH_MS / 1000 * 0.6)
        assert raw.metadata().brokers  # 5.4 s after the first login: still served
        with pytest.raises(SaslAuthenticationError, match="Cannot change principals"):
            raw.login("PLAIN", "bob", "bob-plain")


def test_real_clients_reauthenticate(reauth_cluster: DevCluster) -> None:
    """confluent-kafka (librdkafka, KIP-368) and kafka-python keep producing over three session
    lifetimes on one connection without an error."""
    from confluent_kafka import Producer
    from kafka import KafkaProducer

    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    reauth_cluster.create_topic(topic, partitions=1)
    errors: list[Any] = []
    producer = Producer({**_confluent_conf(reauth_cluster, "PLAIN", "alice", "alice-plain"),
                         "error_cb": errors.append})
    python_producer = KafkaProducer(
        bootstrap_servers=_sasl_bootstrap(reauth_cluster), security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password="bob-plain")
    delivered = [0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            delivered[0] += 1
        else:
            errors.append(err)

    try:
        deadline = time.monotonic() + 3 * REAUTH_MS / 1000
        sent = 0
        while time.monotonic() < deadline:
            producer.produce(topic, b"x", on_delivery=on_delivery)
            python_producer.send(topic, b"y").get(timeout=10)
            producer.poll(0.2)
            sent += 1
        assert producer.flush(20) == 0
    finally:
        python_producer.close()
    assert errors == [] and delivered[0] == sent


# ------------------------------------------------------- Describe/AlterUserScramCredentials

def test_scram_credentials_api_with_confluent_kafka(sasl_cluster: DevCluster) -> None:
    """AdminClient.alter_user_scram_credentials salts on the client; the broker stores the keys
    and the new user logs in; describe lists mechanisms and iterations; delete locks out."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": sasl_cluster.bootstrap_servers})
    user = f"erin-{uuid.uuid4().hex[:6]}"
    upserts = [UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"erin-pw")]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(timeout=20)
    with RawSasl(sasl_cluster) as raw:
        raw.login("SCRAM-SHA-512", user, "erin-pw")
        assert raw.metadata().brokers
    described = admin.describe_user_scram_credentials([user])[user].result(timeout=20)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)]
    everyone = admin.describe_user_scram_credentials().result(timeout=20)
    assert {user, "carol", "dave"} <= set(everyone)

    too_few = [UserScramCredentialUpsertion(
        "frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"pw")]
    with pytest.raises(KafkaException, match=r"(?i)iterations"):
        admin.alter_user_scram_credentials(too_few)["frank"].result(timeout=20)
    with pytest.raises(KafkaException):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(timeout=20)
    missing = [UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256)]
    with pytest.raises(KafkaException, match=r"(?i)does not exist"):
        admin.alter_user_scram_credentials(missing)["nobody"].result(timeout=20)

    deletion = [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)]
    admin.alter_user_scram_credentials(deletion)[user].result(timeout=20)
    with RawSasl(sasl_cluster) as raw, pytest.raises(SaslAuthenticationError):
        raw.login("SCRAM-SHA-512", user, "erin-pw")


# ------------------------------------------------------------------------- loglake users

def _users_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    import sys

    return subprocess.run([sys.executable, "-m", "loglake", "users", *args], input=stdin,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("where", ["bootstrap", "zookeeper"])
def test_users_cli(sasl_cluster: DevCluster, where: str) -> None:
    target = (["--bootstrap-server", sasl_cluster.bootstrap_servers] if where == "bootstrap"
              else ["--zookeeper", sasl_cluster.zookeeper_connect])
    user = f"gina-{where}"
    created = _users_cli("create", user, "--mechanism", "SCRAM-SHA-256", "--iterations", "4096",
                         *target, stdin="gina-pw\n")
    assert created.returncode == 0, created.stderr
    with RawSasl(sasl_cluster) as raw:
        raw.login("SCRAM-SHA-256", user, "gina-pw")
    listed = _users_cli("list", *target)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split("\t") == ["User", "Mechanism", "Iterations"]
    assert f"{user}\tSCRAM-SHA-256\t4096" in lines and "gina-pw" not in listed.stdout
    deleted = _users_cli("delete", user, *target)
    assert deleted.returncode == 0, deleted.stderr
    with RawSasl(sasl_cluster) as raw, pytest.raises(SaslAuthenticationError):
        raw.login("SCRAM-SHA-256", user, "gina-pw")
    again = _users_cli("delete", user, *target)
    assert again.returncode == 1 and "no SCRAM credentials" in again.stderr
    bad = _users_cli("create", "x", "--iterations", "10", "--password", "p", *target)
    assert bad.returncode == 1 and "iterations" in bad.stderr


# ------------------------------------------------------------------------------- SASL_SSL

@pytest.fixture(scope="module")
def sasl_ssl_cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
                     ) -> Iterator[DevCluster]:
    """Two brokers with SASL_SSL listeners only (also between brokers: SCRAM-SHA-512 as the
    admin), the ACL authorizer with the admin as super user: `dev up --security sasl_ssl`."""
    data = tmp_path_factory.mktemp("sasl-ssl")
    with DevCluster(data / "dev", brokers=2, zookeeper=zookeeper_hosts,
                    security="sasl_ssl") as dev:
        yield dev


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_ssl_real_clients(sasl_ssl_cluster: DevCluster, mechanism: str,
                               tmp_path: Path) -> None:
    """confluent-kafka, kafka-python and kcat over SASL_SSL (TLS verified against the dev CA)
    with SCRAM, a topic replicated across both brokers (replication over SASL_SSL too)."""
    from confluent_kafka import Consumer, Producer
    from kafka import KafkaConsumer

    dev = sasl_ssl_cluster
    config = {**dev.client_config(), "sasl.mechanism": mechanism}
    topic = f"ssl-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    dev.create_topic(topic, partitions=1, replication_factor=2)
    producer = Producer(config)
    for i in range(5):
        producer.produce(topic, value=f"s{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < 5 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    assert got == [f"s{i}".encode() for i in range(5)]

    python_consumer = KafkaConsumer(
        topic, bootstrap_servers=dev.bootstrap_servers, security_protocol="SASL_SSL",
        ssl_cafile=str(config["ssl.ca.location"]), sasl_mechanism=mechanism,
        sasl_plain_username=str(config["sasl.username"]),
        sasl_plain_password=str(config["sasl.password"]), auto_offset_reset="earliest",
        consumer_timeout_ms=10000)
    try:
        python_got = [r.value for _, r in zip(range(5), python_consumer, strict=False)]
    finally:
        python_consumer.close()
    assert python_got == got

    if shutil.which("kcat") is not None:
        conf = tmp_path / "kcat.conf"
        conf.write_text("".join(f"{key}={value}\n" for key, value in config.items()
                                if key != "bootstrap.servers"))
        out = subprocess.run(["kcat", "-b", dev.bootstrap_servers, "-F", str(conf), "-t", topic,
                              "-C", "-o", "beginning", "-e", "-c", "5"], capture_output=True,
                             timeout=60, check=True)
        assert out.stdout.split() == got

    # plaintext to a TLS port: the TLS handshake fails, the broker closes
    with WireClient.connect(dev.bootstrap_servers) as plain, pytest.raises(OSError):
        plain.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
