"""The SDK, the CLI and the raw admin requests against a secured dev cluster (real brokers on
SASL_SSL: SCRAM logins, TLS with a generated CA, the ACL authorizer with the admin as super
user, replication between the two brokers over SASL_SSL), and ``loglake dev up --security
sasl_ssl`` end to end with confluent-kafka and kcat using the printed client properties."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from kio.schema.errors import ErrorCode

from loglake.client import (
    Admin,
    BrokerError,
    ClientError,
    Consumer,
    Producer,
    SecurityConfig,
    _wire,
)
from loglake.client.security import read_properties
from loglake.dev.harness import DevCluster, wait_until
from loglake.dev.net import free_port_block
from tests.zk_util import store_scram_users

pytestmark = pytest.mark.timeout(240)

LIST_TRANSACTIONS = (66, 0)
EMPTY_LISTING: dict[str, list[object]] = {"state_filters": [], "producer_id_filters": []}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
            ) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("secured")
    with DevCluster(data / "dev", brokers=2, zookeeper=zookeeper_hosts,
                    security="sasl_ssl") as dev:
        yield dev


def java_security(dev: DevCluster) -> SecurityConfig:
    """The admin's settings read from the Java-form file (sasl.jaas.config, PEM truststore)."""
    assert dev.info.java_client_properties is not None
    return SecurityConfig.load(dev.info.java_client_properties)


def allow(dev: DevCluster, resource_type: str, name: str, principal: str,
          operation: str) -> None:
    from kazoo.client import KazooClient

    from loglake.catalog.acls import AclStore

    zk = KazooClient(hosts=dev.zookeeper_connect, timeout=10)
    zk.start(timeout=10)
    try:
        AclStore(zk).add(resource_type, name, principal=principal, operation=operation)
    finally:
        zk.stop()
        zk.close()


def test_sdk_over_sasl_ssl_with_java_style_properties(secured: DevCluster) -> None:
    """Admin, a transactional Producer and a group Consumer log in with the admin's Java-form
    settings; the raw requests (ListTransactions to every broker, DescribeTransactions to the
    coordinator) go over TLS + SCRAM too; the topic replicates between the brokers."""
    security = java_security(secured)
    assert security.protocol == "SASL_SSL" and security.sasl_mechanism == "SCRAM-SHA-512"
    topic = f"sdk-{uuid.uuid4().hex[:8]}"
    with Admin(secured.bootstrap_servers, security=security, timeout=30) as admin:
        admin.create_topic(topic, partitions=2, replication_factor=2)
        assert topic in admin.list_topics()
        producer = Producer(secured.bootstrap_servers, security=security,
                            transactional_id=f"tx-{topic}")
        producer.init_transactions()
        producer.begin_transaction()
        for index in range(20):
            producer.send(topic, f"v{index}".encode(), key=str(index).encode())
        producer.commit_transaction()
        producer.flush()
        assert admin.describe_transaction(f"tx-{topic}").state == "CompleteCommit"
        assert f"tx-{topic}" in {t.transactional_id for t in admin.list_transactions()}
        wait_until(lambda: all(sorted(p.isr) == [1, 2]
                               for p in admin.describe_topic(topic).partitions),
                   30, "both brokers in every ISR (replication over SASL_SSL)")
    with Consumer(secured.bootstrap_servers, security=security, group_id=f"g-{topic}",
                  request_timeout_s=30) as consumer:
        consumer.subscribe([topic])
        values = sorted(r.value for r in consumer.consume(20, timeout=60) if r.value)
        consumer.commit()
    assert values == sorted(f"v{i}".encode() for i in range(20))


def test_wire_requests_log_in_or_fail_cleanly(secured: DevCluster) -> None:
    """_wire over SASL_SSL: SCRAM-SHA-512 and -256 log in; a wrong password is
    SASL_AUTHENTICATION_FAILED; a plaintext client on the TLS port gets a transport error."""
    host, port = "127.0.0.1", secured.broker_port(1)
    admin = java_security(secured)

    def list_transactions(security: SecurityConfig | None) -> Any:
        return _wire.request(host, port, *LIST_TRANSACTIONS, EMPTY_LISTING, timeout=10,
                             client_id="test", operation="list", security=security)

    assert list_transactions(admin).error_code == ErrorCode.none
    sha256 = SecurityConfig.from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": admin.sasl_username or "", "sasl.password": admin.sasl_password or "",
        "ssl.ca.location": admin.ca_location or ""})
    assert list_transactions(sha256).error_code == ErrorCode.none
    wrong = SecurityConfig.from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin", "sasl.password": "not-the-password",
        "ssl.ca.location": admin.ca_location or ""})
    with pytest.raises(BrokerError) as failed:
        list_transactions(wrong)
    assert failed.value.code == ErrorCode.sasl_authentication_failed
    with pytest.raises(ClientError) as plaintext:
        list_transactions(None)
    assert plaintext.value.code in (ErrorCode.network_exception, ErrorCode.request_timed_out)
    untrusted = SecurityConfig.from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin", "sasl.password": admin.sasl_password or ""})  # system CAs
    with pytest.raises(ClientError, match="CERTIFICATE_VERIFY_FAILED"):
        list_transactions(untrusted)


def test_other_users_are_denied_until_granted(secured: DevCluster) -> None:
    """The dev cluster runs the ACL authorizer with default deny: a new SCRAM user logs in but
    may not write a topic until an ACL allows it."""
    topic = f"deny-{uuid.uuid4().hex[:8]}"
    secured.create_topic(topic, partitions=1, replication_factor=2)
    store_scram_users(secured.zookeeper_connect, {"bob": "bob-secret"})
    bob = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
           "sasl.username": "bob", "sasl.password": "bob-secret",
           "ssl.ca.location": str(secured.data_dir / "security" / "ca.pem")}
    producer = Producer(secured.bootstrap_servers, security=bob, delivery_timeout_ms=10_000)
    with pytest.raises(BrokerError) as denied:
        producer.send(topic, b"x").result(30)
    assert denied.value.code == ErrorCode.topic_authorization_failed
    with Consumer(secured.bootstrap_servers, security=bob, group_id="bob-group",
                  request_timeout_s=20) as consumer:
        consumer.subscribe([topic])
        with pytest.raises(BrokerError, match="consume as group 'bob-group'") as no_group:
            list(consumer.consume(1, timeout=20))
    assert no_group.value.code == ErrorCode.group_authorization_failed
    allow(secured, "Topic", topic, "User:bob", "Write")
    allow(secured, "Topic", topic, "User:bob", "Describe")

    def delivered() -> bool:
        attempt = Producer(secured.bootstrap_servers, security=bob, delivery_timeout_ms=5_000)
        try:
            attempt.send(topic, b"granted").result(10)
        except BrokerError:
            return False
        return True

    wait_until(delivered, 30, "bob may write once allowed", ignore=(ClientError,))


def loglake(*args: str, env: dict[str, str] | None = None, stdin: bytes | None = None,
            timeout: float = 90) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "loglake", *args], input=stdin,
                          capture_output=True, timeout=timeout, check=False,
                          env=None if env is None else {**os.environ, **env})


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def test_cli_with_command_config(secured: DevCluster) -> None:
    """Every broker command takes --command-config (librdkafka or Java form); without it the
    SASL_SSL cluster cannot be reached and the command fails with one error line."""
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    librdkafka_form = str(secured.client_properties)
    java_form = str(secured.info.java_client_properties)
    common = ["--bootstrap-server", secured.bootstrap_servers]
    ok(loglake("topics", "create", topic, "--partitions", "2", "--replication-factor", "2",
               *common, "--command-config", librdkafka_form))
    assert topic in ok(loglake("topics", "list", *common, "--command-config", java_form))
    result = loglake("produce", topic, *common, "--command-config", java_form,
                     stdin=b"one\ntwo\nthree\n")
    assert result.returncode == 0, result.stderr.decode()
    consumed = ok(loglake("consume", topic, "--from-beginning", "--max-messages", "3",
                          "--group", f"g-{topic}", "--timeout-ms", "20000", *common,
                          "--command-config", librdkafka_form))
    assert sorted(consumed.split()) == ["one", "three", "two"]
    assert f"g-{topic}" in ok(loglake("groups", "list", *common,
                                      "--command-config", librdkafka_form))
    ok(loglake("transactions", "list", *common, "--command-config", java_form))
    refused = loglake("topics", "list", *common, "--request-timeout-ms", "3000")
    assert refused.returncode == 1
    assert refused.stderr.decode().startswith("loglake: error: ")
    missing = loglake("topics", "list", *common, "--command-config", "/nonexistent/x")
    assert missing.returncode == 1 and b"cannot read the client properties" in missing.stderr


def test_dev_up_sasl_ssl_end_to_end(tmp_path: Path) -> None:
    """`loglake dev up --security sasl_ssl` prints the client properties file; confluent-kafka
    and kcat produce and consume with it, and loglake commands use it from the profile."""
    base = free_port_block(2)
    data = tmp_path / "dev"
    env = {"LOGLAKE_CONFIG_DIR": str(tmp_path / "config")}
    try:
        up = ok(loglake("dev", "up", "--data", str(data), "--base-port", str(base),
                        "--zookeeper-port", str(base + 1), "--security", "sasl_ssl",
                        "--broker-config", "zookeeper.session.timeout.ms=6000", env=env))
        printed = dict(line.split("=", 1) for line in up.splitlines() if "=" in line)
        assert printed["security.protocol"] == "SASL_SSL"
        properties_file = Path(printed["command.config"])
        assert properties_file.stat().st_mode & 0o077 == 0
        settings = read_properties(properties_file)
        assert settings["security.protocol"] == "SASL_SSL"
        bootstrap = printed["bootstrap.servers"]
        topic = "secured-orders"

        ok(loglake("topics", "create", topic, "--partitions", "1", env=env))  # the profile's
        assert settings["sasl.mechanism"] == "SCRAM-SHA-512"
        producer = KafkaProducer({"bootstrap.servers": bootstrap, **settings})
        for index in range(5):
            producer.produce(topic, f"ck-{index}".encode())
        assert producer.flush(30) == 0

        kcat = shutil.which("kcat")
        assert kcat is not None, "kcat is on the PATH"
        subprocess.run([kcat, "-F", str(properties_file), "-b", bootstrap, "-P", "-t", topic],
                       input=b"kcat-a\nkcat-b\n", check=True, timeout=60, capture_output=True)
        read = subprocess.run([kcat, "-F", str(properties_file), "-b", bootstrap, "-C",
                               "-t", topic, "-o", "beginning", "-e", "-q"],
                              check=True, timeout=60, capture_output=True).stdout.split()
        assert read == [f"ck-{i}".encode() for i in range(5)] + [b"kcat-a", b"kcat-b"]

        consumer = KafkaConsumer({"bootstrap.servers": bootstrap, **settings,
                                  "group.id": "e2e", "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        values: list[bytes] = []
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.append(message.value() or b"")
            if len(values) == 7:
                break
        consumer.close()
        assert sorted(values) == sorted(read)

        plain = subprocess.run([kcat, "-b", bootstrap, "-L", "-m", "5"], timeout=60,
                               capture_output=True, check=False)
        assert plain.returncode != 0  # no plaintext way in
    finally:
        with contextlib.suppress(Exception):
            loglake("dev", "down", "--data", str(data), env=env)
