"""Data, group and transaction authorization with distinct SASL principals: what ``alice`` is
granted ``bob`` is not. One broker with the ACL authorizer, a SASL_PLAINTEXT listener (PLAIN
users ``admin`` (a super user), ``alice``, ``bob``) and a PLAINTEXT listener for the harness
and the broker's own traffic (``User:ANONYMOUS``, a super user here, as a broker principal is).
Clients: confluent-kafka and kafka-python over SASL_PLAINTEXT.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kazoo.client import KazooClient

from loglake.catalog.acls import AclStore
from loglake.dev.harness import DevCluster

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
WAIT_S = 15.0
T = TypeVar("T")


def _jaas() -> str:
    users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[DevCluster]:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{port:1}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": _jaas(),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "group.initial.rebalance.delay.ms": "0",
    }
    data = tmp_path_factory.mktemp("authz-data-sasl")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def store(dev: DevCluster) -> Iterator[AclStore]:
    client = KazooClient(hosts=dev.zookeeper_connect, timeout=10)
    client.start(timeout=20)
    try:
        yield AclStore(client)
    finally:
        client.stop()
        client.close()


@pytest.fixture
def acls(store: AclStore) -> Iterator[Callable[..., None]]:
    """``acls(resource_type, name, operation, principal=...)``: an ACL removed at the end."""
    added: list[dict[str, Any]] = []

    def add(resource_type: str, name: str, operation: str, *, principal: str,
            permission: str = "Allow") -> None:
        acl = {"resource_type": resource_type, "name": name, "operation": operation,
               "principal": principal, "permission": permission, "host": "*"}
        store.add(**acl)
        added.append(acl)

    try:
        yield add
    finally:
        for acl in reversed(added):
            store.remove(**acl)


def _bootstrap(dev: DevCluster) -> str:
    return f"127.0.0.1:{dev.broker_port(1) + 100}"


def _conf(dev: DevCluster, user: str) -> dict[str, Any]:
    return {"bootstrap.servers": _bootstrap(dev), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user]}


def eventually(action: Callable[[], T], holds: Callable[[T], bool], what: str) -> T:
    deadline = time.monotonic() + WAIT_S
    while True:
        result = action()
        if holds(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: last answer {result!r}")
        time.sleep(0.2)


@pytest.fixture
def topic(dev: DevCluster) -> str:
    name = f"sasl-data-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(_conf(dev, "admin"))  # kept alive until the future resolves
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(20)
    return name


def _produce(dev: DevCluster, user: str, topic: str, value: bytes) -> int | None:
    """The delivery error code of one record sent as ``user`` (None: delivered)."""
    reports: list[Any] = []
    producer = Producer({**_conf(dev, user), "message.timeout.ms": 5000})
    producer.produce(topic, value, on_delivery=lambda err, msg: reports.append(err))
    producer.flush(15)
    assert reports, "no delivery report"
    return None if reports[0] is None else int(reports[0].code())


def _consume(dev: DevCluster, user: str, topic: str, group: str) -> tuple[int | None, bytes]:
    consumer = Consumer({**_conf(dev, user), "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                return int(error.code()), b""
            return None, msg.value() or b""
        return None, b""
    finally:
        consumer.close()


def test_write_granted_to_alice_is_not_bobs(dev: DevCluster, acls: Callable[..., None],
                                            topic: str) -> None:
    assert _produce(dev, "alice", topic, b"x") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls("Topic", topic, "Write", principal="User:alice")
    eventually(lambda: _produce(dev, "alice", topic, b"from-alice"), lambda e: e is None,
               "alice with WRITE")
    assert _produce(dev, "bob", topic, b"x") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _produce(dev, "admin", topic, b"from-admin") is None  # super user


def test_group_read_per_principal_and_metadata_per_principal(
        dev: DevCluster, acls: Callable[..., None], topic: str) -> None:
    assert _produce(dev, "admin", topic, b"hello") is None
    group = topic + "-g"
    acls("Topic", topic, "Read", principal="User:*")  # everyone may read the topic
    acls("Group", group, "Read", principal="User:alice")  # only alice may use the group
    eventually(lambda: _consume(dev, "alice", topic, group), lambda r: r == (None, b"hello"),
               "alice consumes")
    assert _consume(dev, "bob", topic, group)[0] == KafkaError.GROUP_AUTHORIZATION_FAILED

    # Metadata: bob sees the topic through User:*; a DENY for bob hides it from him only
    acls("Topic", topic, "Describe", principal="User:bob", permission="Deny")

    def sees(user: str) -> bool:
        client = KafkaConsumer(bootstrap_servers=_bootstrap(dev),
                               security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                               sasl_plain_username=user, sasl_plain_password=USERS[user])
        try:
            return topic in client.topics()
        finally:
            client.close()

    eventually(lambda: (sees("alice"), sees("bob")), lambda r: r == (True, False),
               "DENY DESCRIBE for bob hides the topic from him")


def test_transactional_id_granted_to_alice_is_not_bobs(
        dev: DevCluster, acls: Callable[..., None], topic: str) -> None:
    txn = topic + "-txn"
    acls("TransactionalId", txn, "Write", principal="User:alice")
    acls("Topic", topic, "Write", principal="User:*")
    time.sleep(1.0)  # the grants reach the broker
    bob = Producer({**_conf(dev, "bob"), "transactional.id": txn})
    with pytest.raises(KafkaException) as refused:
        bob.init_transactions(10)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    alice = Producer({**_conf(dev, "alice"), "transactional.id": txn})
    alice.init_transactions(15)
    alice.begin_transaction()
    alice.produce(topic, b"in-txn")
    alice.commit_transaction(15)
