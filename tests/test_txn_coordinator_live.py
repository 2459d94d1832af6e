"""The transaction coordinator on live brokers with confluent-kafka (librdkafka) and raw
requests: commit and abort seen by read_committed readers, DescribeTransactions /
ListTransactions, fencing of an older producer (and the error code per request version), an
abandoned transaction aborted after its ``transaction.timeout.ms``, and a coordinator SIGKILLed
between PrepareCommit and CompleteCommit whose transaction the next coordinator completes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from loglake.dev.harness import DevCluster, wait_until
from tests.clients import consume_messages
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(240)

OVERRIDES = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
         ) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("txn-coordinator")
    with DevCluster(data / "dev", brokers=2, zookeeper=zookeeper_hosts,
                    broker_overrides=OVERRIDES) as dev:
        yield dev


def _topic(dev: DevCluster, prefix: str, partitions: int = 2) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    dev.create_topic(name, partitions=partitions, replication_factor=2)
    return name


def _coordinator(dev: DevCluster, transactional_id: str) -> int:
    def find() -> int | None:
        for address in dev.bootstrap_servers.split(","):  # any live broker answers
            try:
                with WireClient.connect(address) as client:
                    answer = client.request(10, 3, {"key": transactional_id, "key_type": 1})
            except OSError:
                continue
            return answer.node_id if answer.error_code == ErrorCode.none else None
        return None

    found = wait_until(find, timeout=30, message=f"a coordinator for {transactional_id}")
    assert found is not None
    return found


def _ask_coordinator(dev: DevCluster, transactional_id: str, api_key: int, version: int,
                     body: dict[str, Any]) -> Any:
    node = _coordinator(dev, transactional_id)
    with WireClient("127.0.0.1", dev.broker_port(node)) as client:
        return client.request(api_key, version, body)


def _describe(dev: DevCluster, transactional_id: str) -> Any:
    answer = _ask_coordinator(dev, transactional_id, 65, 0,
                              {"transactional_ids": [transactional_id]})
    return answer.transaction_states[0]


def _read_committed(dev: DevCluster, topic: str, partitions: int, count: int,
                    **extra: Any) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": dev.bootstrap_servers, "group.id": "reader",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "fetch.wait.max.ms": 100, **extra})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    try:
        got = consume_messages(consumer, count, timeout=30, what=f"records of {topic}")
        extra_seen = consumer.consume(100, timeout=1.0)
        return sorted(m.value() or b"" for m in got + [m for m in extra_seen if not m.error()])
    finally:
        consumer.close()


def _producer(dev: DevCluster, transactional_id: str, **config: Any) -> Producer:
    producer = Producer({"bootstrap.servers": dev.bootstrap_servers, "linger.ms": 0,
                         "transactional.id": transactional_id, **config})
    producer.init_transactions(30)
    return producer


def test_commit_and_abort(pair: DevCluster) -> None:
    topic = _topic(pair, "commit")
    txn_id = f"ca-{uuid.uuid4().hex[:6]}"
    producer = _producer(pair, txn_id)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, value=f"c{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, value=f"a{i}".encode(), partition=i % 2)
    producer.flush(10)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"c4", partition=0)
    producer.commit_transaction(30)

    assert _read_committed(pair, topic, 2, 5) == [b"c0", b"c1", b"c2", b"c3", b"c4"]
    state = wait_until(lambda: (s := _describe(pair, txn_id)).transaction_state
                       == "CompleteCommit" and s, timeout=10, message="CompleteCommit")
    assert state.error_code == ErrorCode.none
    assert state.producer_epoch == 0 and state.topics == ()
    listed = _ask_coordinator(pair, txn_id, 66, 1, {"state_filters": ["CompleteCommit", "Nope"],
                                                    "producer_id_filters": [],
                                                    "duration_filter": -1})
    assert listed.unknown_state_filters == ("Nope",)
    assert txn_id in [t.transactional_id for t in listed.transaction_states]
    missing = _describe(pair, f"never-{uuid.uuid4().hex[:6]}")
    assert missing.error_code == ErrorCode.transactional_id_not_found


def test_second_producer_fences_the_first(pair: DevCluster) -> None:
    topic = _topic(pair, "fence", partitions=1)
    txn_id = f"fence-{uuid.uuid4().hex[:6]}"
    old = _producer(pair, txn_id)
    old.begin_transaction()
    old.produce(topic, value=b"zombie", partition=0)
    old.flush(10)
    old_state = _describe(pair, txn_id)
    assert old_state.transaction_state == "Ongoing"
    assert old_state.topics[0].topic == topic

    new = _producer(pair, txn_id)  # aborts the open transaction, bumps the epoch twice
    new.begin_transaction()
    new.produce(topic, value=b"fresh", partition=0)
    new.flush(10)
    state = _describe(pair, txn_id)
    assert state.transaction_state == "Ongoing"
    assert state.producer_id == old_state.producer_id
    assert state.producer_epoch == old_state.producer_epoch + 2
    new.commit_transaction(30)

    with pytest.raises(KafkaException) as raised:
        old.commit_transaction(10)
    assert raised.value.args[0].fatal()
    body = {"transactional_id": txn_id, "producer_id": old_state.producer_id,
            "producer_epoch": old_state.producer_epoch, "committed": True}
    assert _ask_coordinator(pair, txn_id, 26, 1, body).error_code \
        == ErrorCode.invalid_producer_epoch
    assert _ask_coordinator(pair, txn_id, 26, 3, body).error_code == ErrorCode.producer_fenced
    wrong_id = {**body, "producer_id": old_state.producer_id + 1000}
    assert _ask_coordinator(pair, txn_id, 26, 3, wrong_id).error_code \
        == ErrorCode.invalid_producer_id_mapping
    assert _read_committed(pair, topic, 1, 1) == [b"fresh"]


def test_abandoned_transaction_is_aborted_after_its_timeout(pair: DevCluster) -> None:
    topic = _topic(pair, "abandon", partitions=1)
    txn_id = f"abandon-{uuid.uuid4().hex[:6]}"
    too_long = _ask_coordinator(pair, txn_id, 22, 4, {
        "transactional_id": txn_id, "transaction_timeout": 900001, "producer_id": -1,
        "producer_epoch": -1})
    assert too_long.error_code == ErrorCode.invalid_transaction_timeout
    abandoned = _producer(pair, txn_id, **{"transaction.timeout.ms": 1500})
    abandoned.begin_transaction()
    abandoned.produce(topic, value=b"abandoned", partition=0)
    abandoned.flush(10)
    epoch = _describe(pair, txn_id).producer_epoch
    plain = Producer({"bootstrap.servers": pair.bootstrap_servers})
    plain.produce(topic, value=b"after", partition=0)
    plain.flush(10)
    state = wait_until(lambda: (s := _describe(pair, txn_id)).transaction_state
                       == "CompleteAbort" and s, timeout=20,
                       message="the abandoned transaction aborted")
    assert state.producer_epoch == epoch + 1  # the abandoned producer is fenced
    assert _read_committed(pair, topic, 1, 1) == [b"after"]


def test_coordinator_killed_mid_commit_completes_on_the_next(
        tmp_path: Any, zookeeper_hosts: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGLAKE_CRASH_AT", "txn-after-prepare-commit")
    with DevCluster(tmp_path / "dev", brokers=2, zookeeper=zookeeper_hosts,
                    broker_overrides=OVERRIDES) as dev:
        topic = _topic(dev, "killed")
        txn_id = f"killed-{uuid.uuid4().hex[:6]}"
        coordinator = _coordinator(dev, txn_id)
        producer = _producer(dev, txn_id)
        producer.begin_transaction()
        for i in range(6):
            producer.produce(topic, value=f"k{i}".encode(), partition=i % 2)
        producer.flush(10)
        # the coordinator dies right after writing PrepareCommit; the client retries EndTxn at
        # the next coordinator, which found the transaction prepared and completed it
        producer.commit_transaction(90)
        assert not dev.broker_alive(coordinator)
        assert _coordinator(dev, txn_id) != coordinator
        state = wait_until(lambda: (s := _describe(dev, txn_id)).transaction_state
                           == "CompleteCommit" and s, timeout=30, message="CompleteCommit")
        assert state.error_code == ErrorCode.none
        assert _read_committed(dev, topic, 2, 6) == [f"k{i}".encode() for i in range(6)]
