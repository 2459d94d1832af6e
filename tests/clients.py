"""Reading from real Kafka clients in tests, bounded by count and time.

``collect_until`` gathers what a fetch function returns until there are ``count`` items;
``consume_messages`` does that for a confluent-kafka consumer (assigned or subscribed by the
caller), skipping end-of-partition events, ``read_records`` for the SDK's consumer. They stop at
``count`` or after ``timeout`` seconds, whichever comes first, and raise AssertionError saying
how many of how many arrived. ``topic_with_records`` makes a filled topic for group tests;
``produce_and_consume`` is a round trip through a group (confluent-kafka);
``poll_until_assigned`` and ``poll_pair`` drive group members
through a rebalance. Everything runs on the caller's thread and starts nothing; the caller owns
(and closes) the consumers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Literal, TypeVar

from confluent_kafka import Consumer, KafkaError, Message
from confluent_kafka import Producer as KafkaProducer

from loglake.client import Admin, Producer, Record
from loglake.client import Consumer as SdkConsumer
from loglake.dev.harness import wait_until

T = TypeVar("T")


def collect_until(fetch: Callable[[], Iterable[T]], count: int, *, timeout: float, what: str,
                  interval: float = 0.0) -> list[T]:
    """Call ``fetch()`` (which itself waits, e.g. a consumer poll) and gather its items until
    there are at least ``count``; return them all (possibly more than ``count``).

    AssertionError after ``timeout`` seconds: ``what``, how many of ``count`` arrived."""
    got: list[T] = []

    def enough() -> bool:
        got.extend(fetch())
        return len(got) >= count

    wait_until(enough, timeout, lambda: f"{what}: {len(got)} of {count}", interval=interval)
    return got


def consume_messages(consumer: Consumer, count: int, *, timeout: float, batch: int = 1000,
                     poll: float = 0.5, errors: Literal["raise", "skip"] = "raise",
                     what: str = "consumed") -> list[Message]:
    """``consumer.consume(batch, poll)`` until ``count`` records arrived; return them in order
    of arrival.

    End-of-partition events are skipped; any other error event raises AssertionError
    (``errors="raise"``) or is skipped (``errors="skip"``). AssertionError after ``timeout``
    seconds, naming ``what`` and how many of ``count`` records arrived."""

    def records() -> list[Message]:
        out = []
        for msg in consumer.consume(batch, poll):
            error = msg.error()
            if error is None:
                out.append(msg)
            elif errors == "raise" and error.code() != KafkaError._PARTITION_EOF:
                raise AssertionError(f"{what}: consumer error {error}")
        return out

    return collect_until(records, count, timeout=timeout, what=what)


def produce_and_consume(bootstrap: str, topic: str, count: int, *, commit: bool = False,
                        timeout: float = 60.0) -> None:
    """Produce values ``<topic>-<i>`` for i < ``count`` (acks=all) to an existing ``topic``,
    then read them all back in group ``<topic>-g`` from the earliest offset (committing them
    when ``commit``); AssertionError when a delivery fails or the values read differ."""
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all"})
    for index in range(count):
        producer.produce(topic, value=f"{topic}-{index}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-g",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        got = consume_messages(consumer, count, timeout=timeout)
        assert sorted(m.value() or b"" for m in got) == sorted(
            f"{topic}-{index}".encode() for index in range(count))
        if commit:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def poll_message(consumer: Consumer, *, timeout: float, poll: float = 0.5,
                 what: str = "a record") -> Message:
    """``consumer.poll(poll)`` until it returns a message (a record or an error event); return
    it. AssertionError after ``timeout`` seconds. (A message with an empty value has length 0,
    so it is tested against None, not for truth.)"""
    [msg] = collect_until(lambda: [m for m in [consumer.poll(poll)] if m is not None], 1,
                          timeout=timeout, what=what)
    return msg


def read_records(consumer: SdkConsumer, count: int, *, timeout: float,
                 poll: float = 0.2) -> list[Record]:
    """``consumer.poll(poll)`` (the SDK's consumer) until ``count`` records arrived; return
    exactly those. AssertionError after ``timeout`` seconds."""
    return collect_until(lambda: [r for r in [consumer.poll(poll)] if r is not None], count,
                         timeout=timeout, what="records read")


def poll_until_assigned(consumer: SdkConsumer, partitions: int, *, timeout: float,
                        poll: float = 0.1) -> None:
    """Poll a group member until it owns ``partitions`` partitions (AssertionError after
    ``timeout`` seconds)."""

    def owns_all() -> bool:
        consumer.poll(poll)
        return len(consumer.assignment()) >= partitions

    wait_until(owns_all, timeout,
               lambda: f"member owns {sorted(consumer.assignment())}, not {partitions} "
                       "partitions", interval=0)


def poll_pair(first: SdkConsumer, second: SdkConsumer, *, poll: float = 0.05
              ) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
    """Poll two members of one group once each; return what each owns. Fails (AssertionError)
    if they own a partition in common."""
    first.poll(poll)
    second.poll(poll)
    mine, theirs = set(first.assignment()), set(second.assignment())
    assert not mine & theirs, f"partitions owned by both members: {sorted(mine & theirs)}"
    return mine, theirs


def topic_with_records(bootstrap: str, prefix: str, *, partitions: int, records: int,
                       value: bytes = b"v%d") -> str:
    """Create the topic ``<prefix>-<random>`` with ``partitions`` partitions (replication factor
    1), send ``value % i`` to partition ``i % partitions`` for each ``i`` below ``records``
    (flushed), and return its name."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap, timeout=60) as admin:
        admin.create_topic(name, partitions=partitions)
    with Producer(bootstrap) as producer:
        for i in range(records):
            producer.send(name, value % i, partition=i % partitions)
        producer.flush()
    return name
