"""Reading from real Kafka clients in tests, bounded by count and time.

``collect_until`` gathers what a fetch function returns until there are ``count`` items;
``consume_messages`` does that for a confluent-kafka consumer (assigned or subscribed by the
caller), skipping end-of-partition events. Both stop at ``count`` or after ``timeout`` seconds,
whichever comes first, and raise AssertionError saying how many of how many arrived. They run on
the caller's thread and start nothing; the caller owns (and closes) the consumer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal, TypeVar

from confluent_kafka import Consumer, KafkaError, Message

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


def poll_message(consumer: Consumer, *, timeout: float, poll: float = 0.5,
                 what: str = "a record") -> Message:
    """``consumer.poll(poll)`` until it returns a message (a record or an error event); return
    it. AssertionError after ``timeout`` seconds. (A message with an empty value has length 0,
    so it is tested against None, not for truth.)"""
    [msg] = collect_until(lambda: [m for m in [consumer.poll(poll)] if m is not None], 1,
                          timeout=timeout, what=what)
    return msg
