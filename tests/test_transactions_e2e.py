"""Transactions end to end on a real 3-broker cluster with real clients (issue 14's checks).

* confluent-kafka, aiokafka and kafka-python transactional producers commit and abort across
  3 topics x 3 partitions; read_committed consumers see exactly the committed records,
  read_uncommitted ones see all of them; an open transaction holds read_committed readers at
  its first offset (the LSO) even when later transactions commit;
* zombie fencing: of two producers with one transactional id the older is fenced and none of
  its later writes become visible;
* consume-transform-produce (tests/txn_worker.py) with SIGKILLs of the processor and of the
  transaction coordinator's broker: the output holds each input record's transform exactly once
  and the group's offsets are at the input's end;
* recovery: the LSO and the aborted-transactions answer of a partition are the same after its
  leader is SIGKILLed (failover) and after the killed broker restarts and leads again.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from loglake.dev.harness import DevCluster, wait_until
from tests.clients import consume_messages
from tests.wire import WireClient

REPO = Path(__file__).resolve().parent.parent
WORKER_SECONDS = 150
"""Each consume-transform-produce worker process exits after this long at the latest."""
OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


@pytest.fixture(scope="module")
def trio(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
         ) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("txn-e2e")
    with DevCluster(data / "dev", brokers=3, zookeeper=zookeeper_hosts,
                    broker_overrides=OVERRIDES) as dev:
        yield dev


def _topics(dev: DevCluster, prefix: str, count: int = 3, partitions: int = 3,
            rf: int = 3) -> list[str]:
    names = [f"{prefix}-{i}-{uuid.uuid4().hex[:6]}" for i in range(count)]
    for name in names:
        dev.create_topic(name, partitions=partitions, replication_factor=rf,
                         configs={"min.insync.replicas": "2"} if rf == 3 else None)
    return names


def _read(bootstrap: str, topics: list[str], partitions: int, expected: int, *,
          committed: bool, timeout: float = 30.0, settle: float = 1.0) -> list[Any]:
    """Every record of ``topics`` from offset 0 (at least ``expected``; then ``settle`` more
    seconds to catch any surplus)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-e2e-reader",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                         "isolation.level": "read_committed" if committed
                         else "read_uncommitted"})
    consumer.assign([TopicPartition(t, p, 0) for t in topics for p in range(partitions)])
    try:
        got = consume_messages(consumer, expected, timeout=timeout, batch=5000,
                               what=f"records of {topics}") if expected else []
        end = time.monotonic() + settle
        while time.monotonic() < end:
            got.extend(m for m in consumer.consume(1000, timeout=0.2) if not m.error())
        return got
    finally:
        consumer.close()


def _values(messages: list[Any]) -> Counter[bytes]:
    return Counter(m.value() for m in messages)


def _produce_round(produce: Any, topics: list[str], tag: str, per_partition: int = 5) -> set[bytes]:
    values = set()
    for topic in topics:
        for partition in range(3):
            for i in range(per_partition):
                value = f"{tag}-{topic}-{partition}-{i}".encode()
                produce(topic, value, partition)
                values.add(value)
    return values


# ---------------------------------------------------------------------------- commit / abort
def test_confluent_commit_abort_across_three_topics(trio):
    topics = _topics(trio, "cf")
    producer = Producer({"bootstrap.servers": trio.bootstrap_servers,
                         "transactional.id": f"cf-{uuid.uuid4().hex[:6]}", "linger.ms": 5})
    producer.init_transactions(30)

    def send(topic: str, value: bytes, partition: int) -> None:
        producer.produce(topic, value=value, partition=partition)

    committed: set[bytes] = set()
    producer.begin_transaction()
    committed |= _produce_round(send, topics, "c1")
    producer.commit_transaction(30)
    producer.begin_transaction()
    aborted = _produce_round(send, topics, "a1")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    committed |= _produce_round(send, topics, "c2")
    producer.commit_transaction(30)

    seen = _read(trio.bootstrap_servers, topics, 3, len(committed), committed=True)
    assert _values(seen) == Counter(committed)
    everything = _read(trio.bootstrap_servers, topics, 3, len(committed) + len(aborted),
                       committed=False)
    assert _values(everything) == Counter(committed | aborted)


def test_open_transaction_holds_read_committed_readers(trio):
    (topic,) = _topics(trio, "lso", count=1, partitions=1)
    bootstrap = trio.bootstrap_servers
    first = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                      "transactional.id": f"lso-a-{uuid.uuid4().hex[:6]}"})
    second = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                       "transactional.id": f"lso-b-{uuid.uuid4().hex[:6]}"})
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for p in (first, second):
        p.init_transactions(30)
    plain.produce(topic, value=b"before", partition=0)
    plain.flush(10)
    first.begin_transaction()
    first.produce(topic, value=b"open", partition=0)
    first.flush(10)
    second.begin_transaction()
    second.produce(topic, value=b"later-committed", partition=0)
    second.commit_transaction(30)
    plain.produce(topic, value=b"after", partition=0)
    plain.flush(10)

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso-reader",
                       "isolation.level": "read_committed"})
    try:
        _low, lso = reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=10,
                                                cached=False)
        assert lso == 1  # the open transaction starts at offset 1
    finally:
        reader.close()
    held = _read(bootstrap, [topic], 1, 1, committed=True, settle=2.0)
    assert [m.value() for m in held] == [b"before"]
    dirty = _read(bootstrap, [topic], 1, 4, committed=False)
    assert {m.value() for m in dirty} == {b"before", b"open", b"later-committed", b"after"}

    first.commit_transaction(30)
    everything = _read(bootstrap, [topic], 1, 4, committed=True)
    assert [m.value() for m in everything] == [b"before", b"open", b"later-committed",
                                               b"after"]


def test_aiokafka_commit_and_abort(trio):
    aiokafka = pytest.importorskip("aiokafka")
    topics = _topics(trio, "aio")

    async def run() -> tuple[set[bytes], set[bytes]]:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=trio.bootstrap_servers,
            transactional_id=f"aio-{uuid.uuid4().hex[:6]}", enable_idempotence=True)
        await producer.start()
        try:
            sends: list[Any] = []

            def send(topic: str, value: bytes, partition: int) -> None:
                sends.append(producer.send(topic, value=value, partition=partition))

            async with producer.transaction():
                committed = _produce_round(send, topics, "c")
                await asyncio.gather(*sends)
            sends.clear()
            await producer.begin_transaction()
            aborted = _produce_round(send, topics, "a")
            await asyncio.gather(*sends)
            await producer.abort_transaction()
            return committed, aborted
        finally:
            await producer.stop()

    committed, aborted = asyncio.run(run())
    assert _values(_read(trio.bootstrap_servers, topics, 3, len(committed),
                         committed=True)) == Counter(committed)
    assert _values(_read(trio.bootstrap_servers, topics, 3, len(committed) + len(aborted),
                         committed=False)) == Counter(committed | aborted)


def test_kafka_python_commit_and_abort(trio):
    kafka = pytest.importorskip("kafka")
    topics = _topics(trio, "kp")
    producer = kafka.KafkaProducer(bootstrap_servers=trio.bootstrap_servers,
                                   transactional_id=f"kp-{uuid.uuid4().hex[:6]}")
    try:
        producer.init_transactions()

        def send(topic: str, value: bytes, partition: int) -> None:
            producer.send(topic, value=value, partition=partition)

        producer.begin_transaction()
        committed = _produce_round(send, topics, "c")
        producer.commit_transaction()
        producer.begin_transaction()
        aborted = _produce_round(send, topics, "a")
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close(timeout=10)
    consumer = kafka.KafkaConsumer(bootstrap_servers=trio.bootstrap_servers,
                                   isolation_level="read_committed",
                                   enable_auto_commit=False, consumer_timeout_ms=3000)
    consumer.assign([kafka.TopicPartition(t, p) for t in topics for p in range(3)])
    consumer.seek_to_beginning()
    try:
        seen = Counter(m.value for m in consumer)
    finally:
        consumer.close()
    assert seen == Counter(committed)
    assert _values(_read(trio.bootstrap_servers, topics, 3, len(committed) + len(aborted),
                         committed=False)) == Counter(committed | aborted)


# ---------------------------------------------------------------------------- fencing
def test_zombie_is_fenced(trio):
    (topic,) = _topics(trio, "zombie", count=1, partitions=1)
    txn_id = f"zombie-{uuid.uuid4().hex[:6]}"
    config = {"bootstrap.servers": trio.bootstrap_servers, "transactional.id": txn_id,
              "linger.ms": 0}
    old = Producer(config)
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(topic, value=b"zombie-1", partition=0)
    old.flush(10)

    new = Producer(config)
    new.init_transactions(30)  # fences `old` and aborts its open transaction
    new.begin_transaction()
    new.produce(topic, value=b"new-1", partition=0)
    new.commit_transaction(30)

    old.produce(topic, value=b"zombie-2", partition=0)
    with pytest.raises(KafkaException) as raised:
        old.flush(10)
        old.commit_transaction(10)
    assert raised.value.args[0].fatal() or raised.value.args[0].txn_requires_abort()

    seen = _read(trio.bootstrap_servers, [topic], 1, 1, committed=True, settle=2.0)
    assert [m.value() for m in seen] == [b"new-1"]


# ---------------------------------------------------------------------------- helpers (raw)
def _coordinator(dev: DevCluster, transactional_id: str) -> int:
    def find() -> int | None:
        with WireClient.connect(dev.bootstrap_servers) as client:
            answer = client.request(10, 3, {"key": transactional_id, "key_type": 1})
        return answer.node_id if answer.error_code == 0 else None

    return wait_until(find, timeout=30, message=f"a coordinator for {transactional_id}")


def _leader(dev: DevCluster, topic: str, partition: int) -> int:
    admin = AdminClient({"bootstrap.servers": dev.bootstrap_servers})

    def leader() -> int | None:
        meta = admin.list_topics(topic, timeout=5).topics[topic]
        state = meta.partitions.get(partition)
        return state.leader if state is not None and state.leader >= 0 else None

    return wait_until(leader, timeout=30, message=f"a leader for {topic}-{partition}")


def _committed_view(dev: DevCluster, topic: str, partition: int) -> tuple[int, list[Any]]:
    """(LSO, aborted transactions) as the partition's leader answers a read_committed Fetch."""
    def ask() -> tuple[int, list[Any]] | None:
        broker = _leader(dev, topic, partition)
        try:
            with WireClient("127.0.0.1", dev.broker_port(broker)) as client:
                answer = client.request(1, 11, {
                    "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 24,
                    "isolation_level": 1, "session_epoch": -1,
                    "topics": [{"topic": topic, "partitions": [
                        {"partition": partition, "fetch_offset": 0,
                         "partition_max_bytes": 1 << 24, "current_leader_epoch": -1,
                         "log_start_offset": -1, "last_fetched_epoch": -1}]}]})
        except OSError:
            return None
        part = answer.responses[0].partitions[0]
        if part.error_code != 0:
            return None
        aborted = sorted((a.producer_id, a.first_offset)
                         for a in (part.aborted_transactions or ()))
        return part.last_stable_offset, aborted

    return wait_until(ask, timeout=60, message=f"a read_committed answer for {topic}")


def _open_transactions(dev: DevCluster, topic: str) -> list[tuple[int, int, int]]:
    """(producer id, epoch, current transaction start offset) of every producer the leader of
    ``topic``-0 holds, from DescribeProducers."""
    def ask() -> list[tuple[int, int, int]] | None:
        broker = _leader(dev, topic, 0)
        try:
            with WireClient("127.0.0.1", dev.broker_port(broker)) as client:
                answer = client.request(61, 0, {"topics": [
                    {"name": topic, "partition_indexes": [0]}]})
        except OSError:
            return None
        part = answer.topics[0].partitions[0]
        if part.error_code != 0:
            return None
        return sorted((p.producer_id, p.producer_epoch, p.current_txn_start_offset)
                      for p in part.active_producers)

    return wait_until(ask, timeout=60, message=f"DescribeProducers of {topic}-0")


def _same_view_soon(dev: DevCluster, topic: str, expected: tuple[int, list[Any]]) -> None:
    """The leader answers ``expected`` within a few seconds: a new leader's high watermark
    (hence its LSO) can lag until its followers fetch from it, as in Kafka; it must never
    answer a different aborted list for the same LSO."""
    def same() -> bool:
        lso, aborted = _committed_view(dev, topic, 0)
        assert lso <= expected[0], (lso, expected)
        if lso == expected[0]:
            assert aborted == expected[1]
        return (lso, aborted) == expected

    wait_until(same, timeout=15, message=f"the leader answering {expected}")


def test_leader_crash_keeps_lso_and_aborted_list(trio):
    (topic,) = _topics(trio, "recover", count=1, partitions=1)
    bootstrap = trio.bootstrap_servers
    config = {"bootstrap.servers": bootstrap, "linger.ms": 0, "transaction.timeout.ms": 120000}
    a = Producer({**config, "transactional.id": f"ra-{uuid.uuid4().hex[:6]}"})
    b = Producer({**config, "transactional.id": f"rb-{uuid.uuid4().hex[:6]}"})
    for p in (a, b):
        p.init_transactions(30)
    for round_ in range(3):
        a.begin_transaction()
        a.produce(topic, value=f"c{round_}".encode(), partition=0)
        a.commit_transaction(30)
        a.begin_transaction()
        a.produce(topic, value=f"a{round_}".encode(), partition=0)
        a.flush(10)
        a.abort_transaction(30)
    b.begin_transaction()  # left open across the crash
    b.produce(topic, value=b"open", partition=0)
    b.flush(10)

    before = _committed_view(trio, topic, 0)
    assert len(before[1]) == 3
    producers = _open_transactions(trio, topic)
    assert sorted(start for *_, start in producers) == [-1, before[0]]  # b: open at the LSO
    leader = _leader(trio, topic, 0)
    trio.kill_broker(leader)
    wait_until(lambda: _leader(trio, topic, 0) != leader, timeout=60,
               message="a new leader after the SIGKILL")
    _same_view_soon(trio, topic, before)
    assert _open_transactions(trio, topic) == producers  # the follower replicated the state
    trio.start_broker(leader)
    # the restarted broker recovers its log, rejoins the ISR and (preferred) leads again
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def back_in_isr() -> bool:
        state = admin.list_topics(topic, timeout=5).topics[topic].partitions[0]
        return leader in state.isrs

    wait_until(back_in_isr, timeout=90, message="the restarted broker back in the ISR",
               ignore=(KafkaException,))

    def preferred_leads() -> bool:
        if _leader(trio, topic, 0) != leader:
            admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result()
        return _leader(trio, topic, 0) == leader

    wait_until(preferred_leads, timeout=60, message="the restarted broker leading again",
               ignore=(KafkaException,))
    _same_view_soon(trio, topic, before)
    assert _open_transactions(trio, topic) == producers  # rebuilt from its own log
    b.commit_transaction(60)  # answered before the markers are written, as in Kafka
    _lso, aborted = wait_until(
        lambda: (view := _committed_view(trio, topic, 0))[0] > before[0] and view,
        timeout=30, message="the LSO moving past the committed transaction")
    assert aborted == before[1]


# ---------------------------------------------------------------------------- exactly once
def _start_worker(dev: DevCluster, source: str, sink: str, group: str, txn_id: str,
                  log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "txn_worker.py"),
         "--bootstrap", dev.bootstrap_servers, "--input", source, "--output", sink,
         "--group", group, "--transactional-id", txn_id, "--batch", "40", "--pause", "0.02",
         "--max-seconds", str(WORKER_SECONDS)],
        cwd=REPO, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(REPO)})


def _group_offsets(dev: DevCluster, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": dev.bootstrap_servers, "group.id": group})
    try:
        return [tp.offset for tp in consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=10)]
    finally:
        consumer.close()


@pytest.mark.slow
def test_consume_transform_produce_exactly_once_across_kills(trio, tmp_path):
    source, sink = _topics(trio, "ctp", count=2)
    total = 1500
    feeder = Producer({"bootstrap.servers": trio.bootstrap_servers, "linger.ms": 5,
                       "enable.idempotence": True})
    for i in range(total):
        feeder.produce(source, key=str(i).encode(), value=f"r{i}".encode(), partition=i % 3)
    assert feeder.flush(30) == 0
    group, txn_id = f"ctp-{uuid.uuid4().hex[:6]}", f"ctp-{uuid.uuid4().hex[:6]}"
    log = tmp_path / "worker.log"
    rng = random.Random(14)
    worker = _start_worker(trio, source, sink, group, txn_id, log)
    try:
        for kill in range(3):  # SIGKILL the processor at random points, then restart it
            time.sleep(rng.uniform(1.0, 3.0))
            worker.kill()
            worker.wait(10)
            if kill == 1:  # and the coordinator's broker, mid-flight
                worker = _start_worker(trio, source, sink, group, txn_id, log)
                time.sleep(rng.uniform(1.0, 2.0))
                coordinator = _coordinator(trio, txn_id)
                trio.kill_broker(coordinator)
                time.sleep(1.0)
                trio.start_broker(coordinator)
                worker.kill()
                worker.wait(10)
            worker = _start_worker(trio, source, sink, group, txn_id, log)
        for _ in range(5):  # let it finish; a worker that exits early is restarted
            try:
                worker.wait(WORKER_SECONDS + 30)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the worker did not finish:\n{log.read_text()[-3000:]}")
            if _group_offsets(trio, group, source, 3) == [500, 500, 500]:
                break
            worker = _start_worker(trio, source, sink, group, txn_id, log)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    assert _group_offsets(trio, group, source, 3) == [500, 500, 500], log.read_text()[-3000:]
    out = _read(trio.bootstrap_servers, [sink], 3, total, committed=True, settle=2.0)
    counts = _values(out)
    duplicates = {v: c for v, c in counts.items() if c > 1}
    assert not duplicates, f"{len(duplicates)} duplicated, e.g. {list(duplicates)[:5]}"
    assert set(counts) == {f"r{i}:t".encode() for i in range(total)}
