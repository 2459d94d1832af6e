"""Brokers under the ACL authorizer: replication and the transaction coordinator's markers need
CLUSTER_ACTION for the broker principal, and work once it is granted.

Two brokers on PLAINTEXT: their connections to each other are ``User:ANONYMOUS``, like the
test's clients, so the test first shows a follower refused (an acks=all produce cannot complete:
the follower's fetches answer TOPIC_AUTHORIZATION_FAILED), then grants ANONYMOUS CLUSTER_ACTION
on the cluster (as an operator grants it to the broker principal) and checks replication,
a consumer group and a transaction across both brokers.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from loglake.catalog.acls import AclStore
from loglake.dev.harness import DevCluster
from loglake.segments.records import Record, encode_batch
from tests.authz_util import ANONYMOUS, wait_allowed
from tests.wire import WireClient

WAIT_S = 20.0


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
         ) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("authz-brokers")
    with DevCluster(data / "dev", brokers=2, zookeeper=zookeeper_hosts, broker_overrides={
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "group.initial.rebalance.delay.ms": "0"}) as dev:
        yield dev


@pytest.fixture(scope="module")
def store(pair: DevCluster) -> Iterator[AclStore]:
    client = KazooClient(hosts=pair.zookeeper_connect, timeout=10)
    client.start(timeout=20)
    try:
        yield AclStore(client)
    finally:
        client.stop()
        client.close()


def _produce_all(pair: DevCluster, topic: str, leader: int) -> int:
    """An acks=all produce of one batch to partition 0 at its leader: the error code."""
    records = encode_batch([Record(offset=0, timestamp=int(time.time() * 1000), key=b"k",
                                   value=b"v")], base_offset=0)
    with WireClient("127.0.0.1", pair.broker_port(leader), timeout=15) as wire:
        response = wire.request(0, 9, {"acks": -1, "timeout": 2000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return int(response.responses[0].partition_responses[0].error_code)


def _leader(store: AclStore, topic: str) -> int:
    raw, _ = store.zk.get(f"/brokers/topics/{topic}/partitions/0/state")
    return int(json.loads(raw)["leader"])


def test_replication_and_transactions_need_cluster_action_for_brokers(
        pair: DevCluster, store: AclStore) -> None:
    topic = f"authz-repl-{uuid.uuid4().hex[:8]}"
    store.add("Topic", topic, principal=ANONYMOUS, operation="All")
    admin = AdminClient({"bootstrap.servers": pair.bootstrap_servers})
    deadline = time.monotonic() + WAIT_S
    while True:  # the grant reaches the brokers within a moment
        try:
            admin.create_topics([NewTopic(topic, 1, 2)], request_timeout=15)[topic].result(20)
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    while not store.zk.exists(f"/brokers/topics/{topic}/partitions/0/state"):
        assert time.monotonic() < deadline, "no partition state"
        time.sleep(0.1)
    leader = _leader(store, topic)

    # the follower's fetches are refused: an acks=all produce cannot complete (once the leader
    # hosts the partition: under load it may still answer UNKNOWN_TOPIC_OR_PARTITION first)
    code = _produce_all(pair, topic, leader)
    while code in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
        leader = _leader(store, topic)
        code = _produce_all(pair, topic, leader)
    assert code in (ErrorCode.request_timed_out, ErrorCode.not_enough_replicas,
                    ErrorCode.not_enough_replicas_after_append), code
    follower = 1 if leader != 1 else 2
    assert "topic_authorization_failed" in pair.broker_log(follower)

    store.add("Cluster", "kafka-cluster", principal=ANONYMOUS, operation="ClusterAction")
    deadline = time.monotonic() + WAIT_S
    while _produce_all(pair, topic, leader) != ErrorCode.none:
        assert time.monotonic() < deadline, "acks=all never completed with CLUSTER_ACTION"
        time.sleep(0.2)

    # a transaction across the brokers (coordinator markers) and a consumer group
    txn, group = topic + "-txn", topic + "-g"
    store.add("TransactionalId", txn, principal=ANONYMOUS, operation="Write")
    store.add("Group", group, principal=ANONYMOUS, operation="Read")
    ports = [pair.broker_port(1), pair.broker_port(2)]
    wait_allowed(ports, "Cluster", "kafka-cluster", "ClusterAction")  # markers, any broker
    wait_allowed(ports, "TransactionalId", txn, "Write")
    wait_allowed(ports, "Group", group, "Read")
    producer = Producer({"bootstrap.servers": pair.bootstrap_servers, "transactional.id": txn,
                         "transaction.timeout.ms": 10000})
    producer.init_transactions(20)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, b"txn-%d" % i)
    producer.commit_transaction(20)

    consumer = Consumer({"bootstrap.servers": pair.bootstrap_servers, "group.id": group,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        values: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        wanted = [b"txn-%d" % i for i in range(5)]
        while values[-5:] != wanted and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                values.append(msg.value() or b"")
        assert values[-5:] == wanted  # after the acks=all records ("v")
        assert set(values[:-5]) == {b"v"}
        consumer.commit(asynchronous=False)  # the group coordinator with the authorizer on
    finally:
        consumer.close()
