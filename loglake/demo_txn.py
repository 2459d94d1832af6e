"""The demo's transactions step: atomic writes across partitions, aborts, zombie fencing.

On the demo cluster (3 brokers), a ``demo.payments`` topic (3 partitions, RF 3) gets
:data:`COMMITTED` transactions of :data:`PER_TXN` records spread over all partitions from one
transactional SDK producer, with :data:`ABORTED` more transactions aborted in between. A second
producer with the same transactional id then fences the first: the first one's next commit
fails and its records never become visible. A read_committed consumer must see exactly the
committed records and a read_uncommitted one every record written (aborted and fenced ones
included), else the step raises RuntimeError. Every wait is bounded.
"""

from __future__ import annotations

import time
import uuid

from loglake.client import Admin, BrokerError, Consumer, Producer
from loglake.client.consumer import IsolationLevel
from loglake.client.errors import FatalTransactionError

TOPIC = "demo.payments"
PARTITIONS = 3
COMMITTED = 5
ABORTED = 2
PER_TXN = 60


def run(bootstrap: str, *, replicas: int) -> None:
    print("==> transactions: atomic writes over 3 partitions, aborts, a fenced zombie")
    with Admin(bootstrap) as admin:
        try:
            admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=replicas,
                               config={"min.insync.replicas": "2"})
        except BrokerError as exc:
            if "already exists" not in str(exc):
                raise
    with Consumer(bootstrap, isolation_level="read_uncommitted") as probe:
        start = {p: probe.watermarks(TOPIC, p)[1] for p in range(PARTITIONS)}
    txn_id = f"demo-payments-{uuid.uuid4().hex[:6]}"
    started = time.monotonic()
    committed = written = 0
    with Producer(bootstrap, transactional_id=txn_id) as producer:
        for n in range(COMMITTED + ABORTED):
            abort = n % 3 == 1 and n // 3 < ABORTED
            producer.begin_transaction()
            for i in range(PER_TXN):
                producer.send(TOPIC, f'{{"txn": {n}, "item": {i}}}'.encode(),
                              partition=i % PARTITIONS)
            written += PER_TXN
            if abort:
                producer.flush(30)
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
                committed += PER_TXN
        print(f"    {committed // PER_TXN} transactions of {PER_TXN} records committed, "
              f"{(written - committed) // PER_TXN} aborted, in "
              f"{time.monotonic() - started:.2f} s")
        producer.begin_transaction()
        producer.send(TOPIC, b'{"zombie": true}', partition=0)
        producer.flush(30)
        written += 1
        with Producer(bootstrap, transactional_id=txn_id) as successor:
            successor.init_transactions(30)  # fences `producer`, aborts its open transaction
        try:
            producer.commit_transaction(10)
        except FatalTransactionError as exc:
            print(f"    a second producer with the same id fenced the first: {exc}")
        else:
            raise RuntimeError("demo check failed: a fenced producer could still commit")
    levels: tuple[IsolationLevel, ...] = ("read_committed", "read_uncommitted")
    seen = {level: _count(bootstrap, start, level) for level in levels}
    print(f"==> read_committed consumers see {seen['read_committed']} records "
          f"(expected {committed}); read_uncommitted see {seen['read_uncommitted']} "
          f"(expected {written})")
    if seen != {"read_committed": committed, "read_uncommitted": written}:
        raise RuntimeError("demo check failed: transactions were not atomic")


def _count(bootstrap: str, start: dict[int, int], level: IsolationLevel) -> int:
    """Records from ``start`` at isolation ``level`` (until none arrived for 3 s)."""
    total = 0
    with Consumer(bootstrap, isolation_level=level) as consumer:
        for partition in range(PARTITIONS):
            consumer.assign(TOPIC, [partition], start=start[partition])
            total += sum(1 for _ in consumer.consume(timeout=3.0))
    return total
