"""A consume-transform-produce processor for exactly-once fault tests, run as its own process
so a test can SIGKILL it at any point.

Usage (the test starts it with the interpreter that runs pytest)::

    python tests/txn_worker.py --bootstrap HOST:PORT --input IN --output OUT --group G
        --transactional-id ID [--batch 50] [--pause 0.0] [--max-seconds 120]

It subscribes one confluent-kafka consumer (``isolation.level=read_committed``,
``enable.auto.commit=false``) to ``--input`` and loops: consume up to ``--batch`` records, begin
a transaction, produce ``<value>:t`` for each record (same key, same partition number) to
``--output``, send the consumed positions with ``send_offsets_to_transaction`` and commit. On
an abortable error it aborts and rewinds to the group's committed offsets; on a fatal one
(fenced) it exits with code 3. Every loop is bounded by ``--max-seconds`` (counted from the
process start); it exits 0 once it has had an assignment and no records for 5 s, or on
SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition


def _rewind(consumer: Consumer) -> None:
    assignment = consumer.assignment()
    if not assignment:
        return
    committed = consumer.committed(assignment, timeout=10)
    for tp in committed:
        consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--input", "--output", "--group", "--transactional-id"):
        parser.add_argument(name, required=True)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    args = parser.parse_args(argv)
    stop = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap, "group.id": args.group,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed", "fetch.wait.max.ms": 100,
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
    })
    producer = Producer({
        "bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id,
        "transaction.timeout.ms": 10000, "linger.ms": 5,
    })
    deadline = time.monotonic() + args.max_seconds
    producer.init_transactions(max(1.0, deadline - time.monotonic()))
    consumer.subscribe([args.input])
    idle_since = time.monotonic()
    try:
        while not stop and time.monotonic() < deadline:
            messages = [m for m in consumer.consume(args.batch, timeout=0.5) if not m.error()]
            if not messages:
                if not consumer.assignment():
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > 5.0:
                    break
                continue
            idle_since = time.monotonic()
            try:
                producer.begin_transaction()
                for m in messages:
                    producer.produce(args.output, key=m.key(),
                                     value=(m.value() or b"") + b":t", partition=m.partition())
                positions = consumer.position(consumer.assignment())
                producer.send_offsets_to_transaction(
                    positions, consumer.consumer_group_metadata(), 30)
                producer.commit_transaction(30)
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.fatal():
                    print(f"fatal: {error}", file=sys.stderr)
                    return 3
                if error.txn_requires_abort():
                    producer.abort_transaction(30)
                    _rewind(consumer)
                elif error.retriable():
                    # the outcome of the commit is unknown: retrying commit is what Kafka says
                    producer.commit_transaction(30)
                else:
                    raise
            if args.pause:
                time.sleep(args.pause)
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
