"""A consumer-group member for fault tests, run as its own process so a test can SIGKILL it.

Usage (the test starts it with the interpreter that runs pytest)::

    python tests/group_worker.py --bootstrap HOST:PORT --topic T --group G --out FILE
        [--instance-id ID] [--session-timeout-ms 6000] [--heartbeat-interval-ms 1000]
        [--max-poll-interval-ms N] [--batch 200] [--pause 0.1] [--max-seconds 300]

It subscribes one confluent-kafka consumer (``enable.auto.commit=false``) to ``--topic`` and
loops: ``consume`` up to ``--batch`` records, *process* them (append one line per record to
``--out`` and flush it to the kernel), then commit the next offset of every partition in the
batch synchronously, then sleep ``--pause`` seconds (to stretch a run over the faults a test
injects). Because a record's line reaches the kernel before the commit covering it is sent,
a SIGKILL can lose uncommitted progress but never a processed line of a committed offset.

Event lines (space separated; ``t`` is ``time.monotonic()``, which on Linux is one clock shared
by all processes, so lines of different workers can be ordered)::

    S t pid                      started
    A t p,p,...|-                on_assign (partitions of --topic)
    R t p,p,...|-                on_revoke
    L t p,p,...|-                on_lost
    P t partition offset value   processed one record (value decoded as ASCII)
    C t p:offset,...             a synchronous commit succeeded for these partitions
    F t error                    a commit failed (nothing committed by this request)
    E t error                    a consumer error event
    X t                          clean exit (SIGTERM or --max-seconds)

Every loop is bounded by ``--max-seconds``; SIGTERM ends the loop and closes the consumer.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition


class EventLog:
    """Line-oriented event file; :meth:`flush` pushes buffered lines to the kernel."""

    def __init__(self, path: str) -> None:
        self.file: TextIO = open(path, "a", encoding="ascii")  # noqa: SIM115 (closed in close)

    def write(self, kind: str, *fields: object) -> None:
        self.file.write(" ".join([kind, f"{time.monotonic():.6f}", *map(str, fields)]) + "\n")

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def _partitions(partitions: Sequence[TopicPartition], topic: str) -> str:
    numbers = sorted(tp.partition for tp in partitions if tp.topic == topic)
    return ",".join(map(str, numbers)) or "-"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--instance-id", default=None)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=1000)
    parser.add_argument("--max-poll-interval-ms", type=int, default=None,
                        help="librdkafka max.poll.interval.ms, also the rebalance timeout the "
                             "member sends in JoinGroup (default: librdkafka's, 300000)")
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--pause", type=float, default=0.1)
    parser.add_argument("--max-seconds", type=float, default=300.0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    events = EventLog(args.out)
    events.write("S", os.getpid())
    events.flush()
    stopping = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    config: dict[str, object] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": args.heartbeat_interval_ms,
        "partition.assignment.strategy": "range",
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 1000,
        "socket.timeout.ms": 10_000,
        "topic.metadata.refresh.interval.ms": 2000,
        "error_cb": lambda err: events.write("E", str(err).replace("\n", " ")),
    }
    if args.max_poll_interval_ms is not None:
        config["max.poll.interval.ms"] = args.max_poll_interval_ms
    if args.instance_id:
        config["group.instance.id"] = args.instance_id
    consumer = Consumer(config)

    def on_assign(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        events.write("A", _partitions(partitions, args.topic))
        events.flush()

    def on_revoke(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        events.write("R", _partitions(partitions, args.topic))
        events.flush()

    def on_lost(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        events.write("L", _partitions(partitions, args.topic))
        events.flush()

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    deadline = time.monotonic() + args.max_seconds
    try:
        while not stopping and time.monotonic() < deadline:
            messages = consumer.consume(args.batch, 1.0)
            now = time.monotonic()
            next_offsets: dict[int, int] = {}
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        events.write("E", str(error).replace("\n", " "))
                    continue
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                value = (message.value() or b"").decode("ascii", "replace")
                events.file.write(f"P {now:.6f} {partition} {offset} {value}\n")
                next_offsets[partition] = max(next_offsets.get(partition, 0), offset + 1)
            events.flush()  # processed lines reach the kernel before the commit is sent
            if next_offsets:
                _commit(consumer, events, args.topic, next_offsets)
            if args.pause > 0 and messages:
                time.sleep(args.pause)
        events.write("X")
    finally:
        events.flush()
        consumer.close()
        events.close()
    return 0


def _commit(consumer: Consumer, events: EventLog, topic: str,
            next_offsets: dict[int, int]) -> None:
    """Commit ``next_offsets`` synchronously; log C (what succeeded) or F (the error)."""
    offsets = [TopicPartition(topic, p, o) for p, o in sorted(next_offsets.items())]
    try:
        result = consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as exc:
        events.write("F", str(exc).replace("\n", " "))
        events.flush()
        return
    done = [f"{tp.partition}:{tp.offset}" for tp in result or [] if tp.error is None]
    failed = [f"{tp.partition}:{tp.error}" for tp in result or [] if tp.error is not None]
    if done:
        events.write("C", ",".join(done))
    if failed:
        events.write("F", ",".join(failed).replace(" ", "_"))
    events.flush()


if __name__ == "__main__":
    sys.exit(main())
