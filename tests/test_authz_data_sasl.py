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
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

from loglake.catalog.acls import AclStore
from loglake.dev.harness import DevCluster
from tests.authz_util import (
    PLAIN_USERS,
    acl_store,
    eventually,
    granted,
    plain_sasl_overrides,
)

USERS = PLAIN_USERS


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[DevCluster]:
    overrides = {**plain_sasl_overrides(), "group.initial.rebalance.delay.ms": "0"}
    data = tmp_path_factory.mktemp("authz-data-sasl")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def store(dev: DevCluster) -> Iterator[AclStore]:
    with acl_store(dev.zookeeper_connect) as zk_store:
        yield zk_store


@pytest.fixture
def acls(store: AclStore) -> Iterator[Callable[..., None]]:
    """``acls(resource_type, name, operation, principal=..., permission=..., ...)``: an ACL
    removed at the end of the test."""
    with granted(store) as add:
        yield add


def _bootstrap(dev: DevCluster) -> str:
    return f"127.0.0.1:{dev.broker_port(1) + 100}"


def _conf(dev: DevCluster, user: str) -> dict[str, Any]:
    return {"bootstrap.servers": _bootstrap(dev), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user]}


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


def _init_transactions(dev: DevCluster, user: str, txn: str) -> tuple[int, Producer]:
    """A new transactional producer of ``user`` after init_transactions: (error code or 0, the
    producer); a refused one is fatal for librdkafka, hence a new producer per attempt."""
    producer = Producer({**_conf(dev, user), "transactional.id": txn})
    try:
        producer.init_transactions(15)
    except KafkaException as exc:
        return int(exc.args[0].code()), producer
    return 0, producer


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
    acls("Topic", topic, "Write", principal="User:*")
    acls("TransactionalId", txn, "Write", principal="User:alice")
    # the broker applies ACL changes in order: once alice's transactional id is hers, the
    # topic grant written before it is there too
    _, alice = eventually(lambda: _init_transactions(dev, "alice", txn),
                          lambda result: result[0] == 0,
                          "alice's WRITE on the transactional id reached the broker")
    bob = Producer({**_conf(dev, "bob"), "transactional.id": txn})
    with pytest.raises(KafkaException) as refused:
        bob.init_transactions(10)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    alice.begin_transaction()
    alice.produce(topic, b"in-txn")
    alice.commit_transaction(15)
