"""TLS listeners end to end: real clients (confluent-kafka, kafka-python, aiokafka, kcat) over SSL
with and without client certificates, the principal from the certificate, per-listener
advertising, and the TLS negative matrix (each refused connection closes cleanly and the
broker keeps serving).

One broker, four listeners (ports: base, +100, +200, +300):

* PLAINTEXT -- for set-up;
* SSL       -- server-only TLS (``ssl.client.auth=none``): clients are ANONYMOUS;
* MTLS      -- SSL with ``ssl.client.auth=required`` and a mapping rule ``CN=<x>,OU=... -> x``;
* TLS13     -- SSL with ``ssl.enabled.protocols=TLSv1.3`` only.

The ACL authorizer is on with ``super.users=User:ANONYMOUS;User:alice``: the certificate of
``CN=alice,OU=eng,O=loglake`` maps to ``alice`` and may do anything, a certificate of
``CN=bob,O=loglake`` (no rule but DEFAULT: the whole name) is refused.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import struct
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from loglake.dev.harness import DevCluster
from tests.admin_util import create_topic
from tests.tls_util import TlsFiles, broker_ssl_settings, issue, make_tls_files

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
SSL_OFFSET, MTLS_OFFSET, TLS13_OFFSET = 100, 200, 300


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    files = make_tls_files(tmp_path_factory.mktemp("tls"))
    issue(files.directory, "bob", "CN=bob,O=loglake", authority=files.ca)
    return files


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str,
                tls: TlsFiles) -> Iterator[DevCluster]:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{port:1},"
                     "MTLS://127.0.0.1:{port:2},TLS13://127.0.0.1:{port:3}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,TLS13:SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        **broker_ssl_settings(tls),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules":
            "RULE:^CN=([^,]+),OU=.*$/$1/L,DEFAULT",
        "listener.name.tls13.ssl.enabled.protocols": "TLSv1.3",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS;User:alice",
    }
    data = tmp_path_factory.mktemp("tls-cluster")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as dev:
        yield dev


def _port(dev: DevCluster, offset: int) -> int:
    return dev.broker_port(1) + offset


def _bootstrap(dev: DevCluster, offset: int) -> str:
    return f"127.0.0.1:{_port(dev, offset)}"


def _confluent_ssl(tls: TlsFiles, client: str | None = "client") -> dict[str, str]:
    settings = {"security.protocol": "SSL", "ssl.ca.location": str(tls.ca.cert)}
    if client is not None:
        settings["ssl.certificate.location"] = str(tls.directory / f"{client}.cert.pem")
        settings["ssl.key.location"] = str(tls.directory / f"{client}.key.pem")
    return settings


def _produce_consume_confluent(bootstrap: str, topic: str, settings: dict[str, str],
                               count: int = 50) -> list[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, **settings, "acks": "all"})
    errors: list[KafkaError] = []
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda e, _m: e and errors.append(e))
    assert producer.flush(30) == 0
    assert errors == []
    consumer = Consumer({"bootstrap.servers": bootstrap, **settings,
                         "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        for _ in range(300):
            if len(values) >= count:
                break
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


# ---- real clients ------------------------------------------------------------------------------

def test_confluent_server_only_tls(tls_cluster: DevCluster, tls: TlsFiles, topic_name: str
                                   ) -> None:
    create_topic(tls_cluster.bootstrap_servers, topic_name)
    values = _produce_consume_confluent(_bootstrap(tls_cluster, SSL_OFFSET), topic_name,
                                        _confluent_ssl(tls, client=None))
    assert values == [f"v{i}".encode() for i in range(50)]


def test_confluent_client_certificate(tls_cluster: DevCluster, tls: TlsFiles, topic_name: str
                                      ) -> None:
    create_topic(tls_cluster.bootstrap_servers, topic_name)
    values = _produce_consume_confluent(_bootstrap(tls_cluster, MTLS_OFFSET), topic_name,
                                        _confluent_ssl(tls))
    assert values == [f"v{i}".encode() for i in range(50)]


def test_certificate_principal_is_mapped_and_authorized(tls_cluster: DevCluster, tls: TlsFiles,
                                                        topic_name: str) -> None:
    """alice's certificate maps to User:alice (a super user) and may write; bob's maps to
    User:CN=bob,O=loglake (DEFAULT rule), which no ACL allows: TOPIC_AUTHORIZATION_FAILED."""
    create_topic(tls_cluster.bootstrap_servers, topic_name)
    bootstrap = _bootstrap(tls_cluster, MTLS_OFFSET)
    producer = Producer({"bootstrap.servers": bootstrap, **_confluent_ssl(tls, "bob"),
                         "acks": "all", "message.timeout.ms": 10000, "retries": 0})
    results: list[KafkaError | None] = []
    producer.produce(topic_name, b"x", on_delivery=lambda e, _m: results.append(e))
    producer.flush(20)
    assert len(results) == 1 and results[0] is not None
    assert results[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    alice = Producer({"bootstrap.servers": bootstrap, **_confluent_ssl(tls), "acks": "all"})
    alice.produce(topic_name, b"y", on_delivery=lambda e, _m: results.append(e))
    alice.flush(20)
    assert results[1:] == [None]


def test_kafka_python_tls(tls_cluster: DevCluster, tls: TlsFiles, topic_name: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    create_topic(tls_cluster.bootstrap_servers, topic_name)
    settings = {"bootstrap_servers": _bootstrap(tls_cluster, MTLS_OFFSET),
                "security_protocol": "SSL", "ssl_cafile": str(tls.ca.cert),
                "ssl_certfile": str(tls.client.cert), "ssl_keyfile": str(tls.client.key)}
    producer = KafkaProducer(**settings, acks="all")
    for i in range(20):
        producer.send(topic_name, f"k{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic_name, **settings, auto_offset_reset="earliest",
                             consumer_timeout_ms=10000, group_id=None)
    values = [message.value for _, message in zip(range(20), consumer, strict=False)]
    consumer.close()
    assert values == [f"k{i}".encode() for i in range(20)]


def test_aiokafka_tls(tls_cluster: DevCluster, tls: TlsFiles, topic_name: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    create_topic(tls_cluster.bootstrap_servers, topic_name)
    bootstrap = _bootstrap(tls_cluster, SSL_OFFSET)

    async def run() -> list[bytes]:
        context = create_ssl_context(cafile=str(tls.ca.cert))
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL",
                                    ssl_context=context, acks="all")
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait(topic_name, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic_name, bootstrap_servers=bootstrap,
                                    security_protocol="SSL", ssl_context=context,
                                    auto_offset_reset="earliest")
        await consumer.start()
        values: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for message in consumer:
                    values.append(message.value)
                    if len(values) == 20:
                        break
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(run()) == [f"a{i}".encode() for i in range(20)]


def test_kcat_tls(tls_cluster: DevCluster, tls: TlsFiles, topic_name: str) -> None:
    assert KCAT is not None
    create_topic(tls_cluster.bootstrap_servers, topic_name)
    common = ["-b", _bootstrap(tls_cluster, MTLS_OFFSET), "-X", "security.protocol=ssl",
              "-X", f"ssl.ca.location={tls.ca.cert}",
              "-X", f"ssl.certificate.location={tls.client.cert}",
              "-X", f"ssl.key.location={tls.client.key}"]
    lines = [f"line {i}" for i in range(30)]
    subprocess.run([KCAT, *common, "-P", "-t", topic_name], input="\n".join(lines) + "\n",
                   text=True, check=True, timeout=60, capture_output=True)
    out = subprocess.run([KCAT, *common, "-C", "-t", topic_name, "-o", "beginning", "-e", "-J"],
                         text=True, check=True, timeout=60, capture_output=True).stdout
    assert [json.loads(line)["payload"] for line in out.splitlines() if line.strip()] == lines


# ---- advertising ---------------------------------------------------------------------------------

def test_metadata_advertises_the_listener_of_the_connection(tls_cluster: DevCluster,
                                                            tls: TlsFiles) -> None:
    base = tls_cluster.broker_port(1)
    plain = AdminClient({"bootstrap.servers": tls_cluster.bootstrap_servers})
    assert [b.port for b in plain.list_topics(timeout=15).brokers.values()] == [base]
    over_tls = AdminClient({"bootstrap.servers": _bootstrap(tls_cluster, SSL_OFFSET),
                            **_confluent_ssl(tls, client=None)})
    assert [b.port for b in over_tls.list_topics(timeout=15).brokers.values()] == [
        base + SSL_OFFSET]
    cluster = over_tls.describe_cluster(request_timeout=15).result(timeout=20)
    assert [node.port for node in cluster.nodes] == [base + SSL_OFFSET]


def test_registration_has_kafkas_endpoints_json(tls_cluster: DevCluster) -> None:
    from kazoo.client import KazooClient
    client = KazooClient(hosts=tls_cluster.zookeeper_connect)
    client.start(timeout=15)
    try:
        data = json.loads(client.get("/brokers/ids/1")[0])
    finally:
        client.stop()
        client.close()
    base = tls_cluster.broker_port(1)
    assert data["endpoints"] == [
        f"PLAINTEXT://127.0.0.1:{base}", f"SSL://127.0.0.1:{base + SSL_OFFSET}",
        f"MTLS://127.0.0.1:{base + MTLS_OFFSET}", f"TLS13://127.0.0.1:{base + TLS13_OFFSET}"]
    assert data["listener_security_protocol_map"] == {
        "PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "MTLS": "SSL", "TLS13": "SSL"}
    assert (data["host"], data["port"], data["version"]) == ("127.0.0.1", base, 5)


# ---- negative matrix (raw sockets: each refusal is a closed connection, never an answer) -----

API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 7, 4) + b"test"


def _answers(sock: socket.socket | ssl.SSLSocket) -> bool:
    """Whether the peer answers an ApiVersions v0 request (False: closed, reset, TLS alert)."""
    try:
        sock.sendall(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
        header = b""
        while len(header) < 10:
            chunk = sock.recv(10 - len(header))
            if not chunk:
                return False
            header += chunk
    except (OSError, ssl.SSLError):
        return False
    return struct.unpack(">ih", header[4:10]) == (7, 0)


def _tls_answers(port: int, context: ssl.SSLContext) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            return _answers(sock)
    except (OSError, ssl.SSLError):
        return False


def _client_context(tls: TlsFiles, identity: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(tls.ca.cert))
    if identity is not None:
        context.load_cert_chain(tls.directory / f"{identity}.keystore.pem")
    return context


def test_good_tls_clients_are_answered(tls_cluster: DevCluster, tls: TlsFiles) -> None:
    assert _tls_answers(_port(tls_cluster, SSL_OFFSET), _client_context(tls))
    assert _tls_answers(_port(tls_cluster, MTLS_OFFSET), _client_context(tls, "client"))
    assert _tls_answers(_port(tls_cluster, TLS13_OFFSET), _client_context(tls))


def test_plaintext_client_on_a_tls_port_is_closed(tls_cluster: DevCluster) -> None:
    with socket.create_connection(("127.0.0.1", _port(tls_cluster, SSL_OFFSET)),
                                  timeout=15) as sock:
        assert not _answers(sock)


def test_tls_client_on_the_plaintext_port_is_closed(tls_cluster: DevCluster, tls: TlsFiles
                                                    ) -> None:
    assert not _tls_answers(tls_cluster.broker_port(1), _client_context(tls))


@pytest.mark.parametrize("identity", [None, "selfsigned", "untrusted", "expired"])
def test_required_client_auth_refuses_bad_certificates(tls_cluster: DevCluster, tls: TlsFiles,
                                                       identity: str | None) -> None:
    assert not _tls_answers(_port(tls_cluster, MTLS_OFFSET), _client_context(tls, identity))
    # the same certificates are fine where no client certificate is asked for... except that
    # the SSL listener asks for none, so the connection is simply anonymous
    assert _tls_answers(_port(tls_cluster, SSL_OFFSET), _client_context(tls, identity))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (TLS 1.0/1.1: that is the point)
def test_old_tls_versions_are_refused(tls_cluster: DevCluster, tls: TlsFiles) -> None:
    old = _client_context(tls)
    old.minimum_version = ssl.TLSVersion.TLSv1
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    assert not _tls_answers(_port(tls_cluster, SSL_OFFSET), old)
    tls12 = _client_context(tls)
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    assert _tls_answers(_port(tls_cluster, SSL_OFFSET), tls12)
    assert not _tls_answers(_port(tls_cluster, TLS13_OFFSET), tls12)  # per-listener setting


def test_broker_keeps_serving_after_refusals(tls_cluster: DevCluster, tls: TlsFiles) -> None:
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", _port(tls_cluster, MTLS_OFFSET)),
                                      timeout=10) as sock:
            sock.sendall(b"\x16\x03\x01\x00\x05hello")  # a broken ClientHello
        assert not _tls_answers(_port(tls_cluster, MTLS_OFFSET), _client_context(tls))
    assert _tls_answers(_port(tls_cluster, MTLS_OFFSET), _client_context(tls, "client"))
    admin = AdminClient({"bootstrap.servers": tls_cluster.bootstrap_servers})
    assert admin.list_topics(timeout=15).brokers


def test_untrusted_client_cannot_produce_with_confluent(tls_cluster: DevCluster, tls: TlsFiles,
                                                        topic_name: str) -> None:
    create_topic(tls_cluster.bootstrap_servers, topic_name)
    admin = AdminClient({"bootstrap.servers": _bootstrap(tls_cluster, MTLS_OFFSET),
                         **_confluent_ssl(tls, "untrusted")})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
