"""``run_transform`` (client/transform.py) against real transaction failures, then restarts.

* abort and rewind: the destination topic refuses one output record (``max.message.bytes``,
  the broker answers MESSAGE_TOO_LARGE), which makes the open transaction abortable; the
  processor aborts it (its other records stay invisible to read_committed readers: they are in
  the log, read_uncommitted sees them), rewinds, and redoes the batch once the operator raised
  the limit. A restart with more input continues where the committed offsets are.
* a transaction that outlives ``transaction.timeout.ms`` (a slow transform): the coordinator
  aborts it and bumps the producer's epoch, so the processor is fenced (FatalTransactionError,
  as Kafka's clients are) and none of that batch becomes visible; a restarted processor (same
  transactional id) completes the copy.

* the bare Producer whose transaction timed out: the fencing surfaces as FatalTransactionError
  from ``flush`` (confluent-kafka raises it while serving delivery reports, which used to leak a
  ``SystemError``), from ``commit_transaction`` and from ``abort_transaction``.

Either way the destination, read ``read_committed``, holds each input's output exactly once and
the group's committed offsets are the source's end. Own one-broker cluster on the session's
ZooKeeper: the coordinator checks for timed-out transactions every 300 ms (default 10 s).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from loglake.client import Admin, Consumer, Producer
from loglake.client.errors import FatalTransactionError
from loglake.client.model import Record
from loglake.client.transform import Output, run_transform
from loglake.dev.harness import DevCluster
from tests.admin_util import create_topic

pytestmark = pytest.mark.timeout(240)

LIMIT = 4096
"""max.message.bytes of the destination at first (a record batch larger than this is refused)."""


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("transform-aborts")
    with DevCluster(data / "dev", zookeeper=zookeeper_hosts, brokers=1, broker_overrides={
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
            "group.initial.rebalance.delay.ms": "0"}) as cluster:
        yield cluster


def _fill(bootstrap: str, topic: str, start: int, count: int) -> None:
    producer = Producer(bootstrap)
    for i in range(start, start + count):
        producer.send(topic, str(i), key=f"k{i}", partition=i % 2)
    assert producer.flush(30) == 0
    producer.close()


def _read(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    with Consumer(bootstrap, isolation_level=isolation) as consumer:  # type: ignore[arg-type]
        consumer.assign(topic, start="earliest")
        return [r.value or b"" for r in consumer.consume(expected + 50, timeout=4.0)]


def _check_once(bootstrap: str, source: str, dest: str, group: str, total: int,
                output: dict[int, bytes]) -> None:
    counts = Counter(_read(bootstrap, dest, "read_committed", total))
    assert counts == Counter(output[i] for i in range(total)), (
        f"twice: {[v[:20] for v, n in counts.items() if n > 1][:5]}, "
        f"missing: {[i for i in range(total) if output[i] not in counts][:5]}")
    with Admin(bootstrap) as admin:
        assert admin.group_offsets(group) == {
            (source, p): n for p, n in admin.list_offsets(source, "latest").items()}


def test_abortable_error_aborts_rewinds_and_redoes(dev: DevCluster, topic_name: str) -> None:
    bootstrap = dev.bootstrap_servers
    source, dest = f"tin.{topic_name}", f"tout.{topic_name}"
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, dest, 2, {"max.message.bytes": str(LIMIT)})
    _fill(bootstrap, source, 0, 200)
    big = 57
    output = {i: (b"X" * (2 * LIMIT) if i == big else f"{i}:t".encode()) for i in range(300)}
    seen: Counter[int] = Counter()

    def transform(record: Record) -> Output:
        number = int(record.value or b"")
        seen[number] += 1
        if number == big and seen[number] == 2:  # the redo: the operator raised the limit
            with Admin(bootstrap) as admin:
                admin.alter_config(dest, set={"max.message.bytes": str(8 * LIMIT)})
            time.sleep(1.0)  # the broker applies topic config changes from ZooKeeper
        return Output(output[number], key=record.key, partition=record.partition)

    group, transactional_id = f"g-{topic_name}", f"t-{uuid.uuid4().hex[:8]}"
    stats = run_transform(bootstrap, source, dest, transform, group_id=group,
                          transactional_id=transactional_id, max_batch=40, idle_timeout_s=3.0)
    assert stats.aborts >= 1 and stats.records_in == 200, stats
    assert seen[big] >= 2  # the batch holding record 57 was rewound and read again
    _check_once(bootstrap, source, dest, group, 200, output)

    _fill(bootstrap, source, 200, 100)  # a restart picks up at the committed offsets
    again = run_transform(bootstrap, source, dest, transform, group_id=group,
                          transactional_id=transactional_id, max_batch=40, idle_timeout_s=3.0)
    assert (again.records_in, again.aborts) == (100, 0), again
    _check_once(bootstrap, source, dest, group, 300, output)


def test_timed_out_transaction_fences_and_a_restart_completes(dev: DevCluster,
                                                              topic_name: str) -> None:
    bootstrap = dev.bootstrap_servers
    source, dest = f"tin.{topic_name}", f"tout.{topic_name}"
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, dest, 2)
    _fill(bootstrap, source, 0, 200)
    output = {i: f"{i}:t".encode() for i in range(200)}
    slow = {"pending": True}

    def transform(record: Record) -> Output:
        number = int(record.value or b"")
        if number == 57 and slow["pending"]:  # outlive transaction.timeout.ms once
            slow["pending"] = False
            time.sleep(4.0)
        return Output(output[number], key=record.key, partition=record.partition)

    group, transactional_id = f"g-{topic_name}", f"t-{uuid.uuid4().hex[:8]}"
    with pytest.raises(FatalTransactionError):
        run_transform(bootstrap, source, dest, transform, group_id=group,
                      transactional_id=transactional_id, max_batch=40, idle_timeout_s=3.0,
                      transaction_timeout_ms=1500)
    assert not slow["pending"]
    committed = Counter(_read(bootstrap, dest, "read_committed", 200))
    assert all(n == 1 for n in committed.values()) and len(committed) < 200

    restarted = run_transform(bootstrap, source, dest, transform, group_id=group,
                              transactional_id=transactional_id, max_batch=40,
                              idle_timeout_s=3.0)
    assert restarted.records_in == 200 - len(committed), restarted
    _check_once(bootstrap, source, dest, group, 200, output)


def test_fenced_producer_raises_fatal_errors_from_flush(dev: DevCluster,
                                                        topic_name: str) -> None:
    bootstrap = dev.bootstrap_servers
    create_topic(bootstrap, topic_name, 1)
    producer = Producer(bootstrap, transactional_id=f"t-{uuid.uuid4().hex[:8]}",
                        transaction_timeout_ms=1500, delivery_timeout_ms=1500)
    producer.begin_transaction()
    producer.send(topic_name, "first", partition=0)
    assert producer.flush(10) == 0
    time.sleep(4.0)  # the coordinator aborts the transaction and bumps the epoch
    producer.send(topic_name, "late", partition=0)
    with pytest.raises(FatalTransactionError):
        producer.flush(10)
    with pytest.raises(FatalTransactionError):
        producer.commit_transaction()
    with pytest.raises(FatalTransactionError):
        producer.abort_transaction()
    assert _read(bootstrap, topic_name, "read_committed", 2) == []
