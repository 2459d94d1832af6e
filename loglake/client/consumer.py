"""Consuming records: :class:`Consumer`.

Two modes, chosen by ``group_id``:

* **assign mode** (``group_id=None``, the only mode implemented today): the caller picks topic,
  partitions and start position with :meth:`Consumer.assign`; nothing is committed, no group is
  joined. librdkafka insists on a ``group.id`` even here, so a unique throw-away id is generated,
  with auto-commit and offset store disabled so it never reaches a group coordinator.
* **group mode** (``group_id="..."``): reserved for subscribe/commit, which come later; today a
  group id only changes the ``group.id`` sent and assign mode still applies.

Errors: non-retriable errors (unknown topic, offset out of range with ``auto_offset_reset=
"error"``, fatal errors) raise from ``poll``; retriable ones (a broker restarting, a transient
transport failure) are recorded in :attr:`Consumer.last_error` and polling continues, since
librdkafka recovers from them by itself.

Not thread-safe: use a ``Consumer`` from one thread.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    KafkaError,
    Message,
    TopicPartition,
)
from confluent_kafka import Consumer as KafkaConsumer
from kio.schema.errors import ErrorCode

from loglake.client._common import (
    DEFAULT_CLIENT_ID,
    ErrorTracker,
    base_config,
    lookup_partitions,
    unreachable_error,
)
from loglake.client.errors import BrokerError, from_exception, from_kafka_error
from loglake.client.model import Record, StartPosition, headers_from_wire
from loglake.errors import LoglakeError

OffsetReset = Literal["earliest", "latest", "error"]

_MAX_POLL_SLICE_S = 1.0


class Consumer:
    """Reads records from explicitly assigned partitions.

    >>> with Consumer("127.0.0.1:9092") as consumer:                      # doctest: +SKIP
    ...     consumer.assign("orders", start="earliest")
    ...     for record in consumer.consume(100, timeout=5.0):
    ...         print(record.offset, record.value)
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        group_id: str | None = None,
        auto_offset_reset: OffsetReset = "earliest",
        fetch_max_wait_ms: int = 500,
        request_timeout_s: float = 30.0,
        client_id: str = DEFAULT_CLIENT_ID,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        """Create a consumer; it connects on the first metadata request or poll.

        ``auto_offset_reset`` applies when a start offset is out of range. ``request_timeout_s``
        bounds metadata and offset look-ups. ``extra`` goes to librdkafka and wins over the rest.
        """
        if auto_offset_reset not in ("earliest", "latest", "error"):
            raise ValueError(f"auto_offset_reset must be earliest, latest or error, "
                             f"got {auto_offset_reset!r}")
        if request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be positive, got {request_timeout_s}")
        self.group_id = group_id
        self.request_timeout_s = request_timeout_s
        self.last_error: LoglakeError | None = None
        self._tracker = ErrorTracker()
        config = base_config(
            bootstrap_servers, client_id=client_id, tracker=self._tracker, extra=None
        )
        config.update(
            {
                "group.id": group_id or f"loglake-assign-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": auto_offset_reset,
                "fetch.wait.max.ms": fetch_max_wait_ms,
                "enable.partition.eof": False,
                "socket.connection.setup.timeout.ms": int(min(30.0, request_timeout_s) * 1000),
            }
        )
        config.update(extra or {})
        self._bootstrap: str = config["bootstrap.servers"]
        self._consumer = KafkaConsumer(config)
        self._assignment: list[TopicPartition] = []
        self._closed = False

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- assignment ------------------------------------------------------------------------

    def partitions_for(self, topic: str, *, timeout: float | None = None) -> list[int]:
        """Partition ids of ``topic``; :class:`BrokerError` ``unknown_topic_or_partition``."""
        return lookup_partitions(
            self._consumer,
            topic,
            limit=self._limit(timeout),
            bootstrap=self._bootstrap,
            tracker=self._tracker,
        )

    def assign(
        self,
        topic: str,
        partitions: Sequence[int] | None = None,
        *,
        start: StartPosition = "earliest",
        timeout: float | None = None,
    ) -> list[int]:
        """Read ``partitions`` of ``topic`` (all if ``None``) from ``start``; returns them.

        ``start`` is ``"earliest"``, ``"latest"`` (only records produced from now on) or an
        offset applied to every assigned partition. Replaces any previous assignment. Checks
        that the topic and partitions exist (bounded by ``timeout``).
        """
        offset = _start_offset(start)
        existing = self.partitions_for(topic, timeout=timeout)
        chosen = existing if partitions is None else sorted(dict.fromkeys(partitions))
        missing = [p for p in chosen if p not in existing]
        if missing:
            raise BrokerError(
                f"topic {topic!r} has no partition {', '.join(map(str, missing))}"
                f" (partitions: 0..{len(existing) - 1})",
                code=ErrorCode.unknown_topic_or_partition,
            )
        self._assignment = [TopicPartition(topic, p, offset) for p in chosen]
        try:
            self._consumer.assign(self._assignment)
        except Exception as exc:
            raise from_exception(exc, f"assign topic {topic!r}") from exc
        return chosen

    def assignment(self) -> list[tuple[str, int]]:
        """The assigned ``(topic, partition)`` pairs."""
        return [(tp.topic, tp.partition) for tp in self._consumer.assignment()]

    def seek(self, topic: str, partition: int, offset: StartPosition) -> None:
        """Continue an assigned partition at ``offset`` (or ``"earliest"``/``"latest"``)."""
        target = TopicPartition(topic, partition, _start_offset(offset))
        if (topic, partition) not in self.assignment():
            raise ValueError(f"partition {topic}[{partition}] is not assigned")
        try:
            self._consumer.seek(target)
        except Exception as exc:
            if not _is_state_error(exc):
                raise from_exception(exc, f"seek {topic}[{partition}]") from exc
            # Fetching has not started for the partition yet: restart it at the target instead.
            self._consumer.incremental_unassign([TopicPartition(topic, partition)])
            self._consumer.incremental_assign([target])
        self._assignment = [
            target if (tp.topic, tp.partition) == (topic, partition) else tp
            for tp in self._assignment
        ]

    def position(self, topic: str, partition: int) -> int | None:
        """Offset of the next record to be returned, or ``None`` before the first fetch."""
        [tp] = self._consumer.position([TopicPartition(topic, partition)])
        return tp.offset if tp.offset >= 0 else None

    def watermarks(
        self, topic: str, partition: int, *, timeout: float | None = None
    ) -> tuple[int, int]:
        """``(log start offset, high watermark)`` of a partition, asked from its leader."""
        limit = self._limit(timeout)
        operation = f"watermarks of {topic}[{partition}]"
        try:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=limit, cached=False
            )
        except Exception as exc:
            raise self._map(exc, operation, limit) from exc
        return low, high

    def offsets_for_times(
        self,
        topic: str,
        timestamp_ms: int,
        *,
        partitions: Sequence[int] | None = None,
        timeout: float | None = None,
    ) -> dict[int, int | None]:
        """Per partition, the first offset whose timestamp is >= ``timestamp_ms``.

        ``None`` for a partition means no such record (every record is older).
        """
        limit = self._limit(timeout)
        chosen = (
            list(partitions) if partitions is not None
            else self.partitions_for(topic, timeout=limit)
        )
        operation = f"offsets for time {timestamp_ms} in topic {topic!r}"
        try:
            found = self._consumer.offsets_for_times(
                [TopicPartition(topic, p, timestamp_ms) for p in chosen], timeout=limit
            )
        except Exception as exc:
            raise self._map(exc, operation, limit) from exc
        result: dict[int, int | None] = {}
        for tp in found:
            if tp.error is not None:
                raise from_kafka_error(tp.error, f"{operation}, partition {tp.partition}")
            result[tp.partition] = tp.offset if tp.offset >= 0 else None
        return result

    # -- reading ---------------------------------------------------------------------------

    def poll(self, timeout: float = 1.0) -> Record | None:
        """The next record, or ``None`` if none arrived within ``timeout`` seconds."""
        message = self._consumer.poll(timeout)
        if message is None:
            return None
        return self._record(message)

    def consume(
        self, max_records: int | None = None, *, timeout: float | None = 5.0
    ) -> Iterator[Record]:
        """Yield records until ``max_records`` were yielded or none arrived for ``timeout`` s.

        ``timeout=None`` waits for records forever (stop by breaking out of the loop).
        """
        if max_records is not None and max_records < 0:
            raise ValueError(f"max_records must be >= 0, got {max_records}")
        count = 0
        idle_since = time.monotonic()
        while max_records is None or count < max_records:
            if timeout is None:
                slice_s = _MAX_POLL_SLICE_S
            else:
                remaining = idle_since + timeout - time.monotonic()
                if remaining <= 0:
                    return
                slice_s = min(remaining, _MAX_POLL_SLICE_S)
            record = self.poll(slice_s)
            if record is None:
                continue
            count += 1
            idle_since = time.monotonic()
            yield record

    def close(self) -> None:
        """Leave: drop the assignment and close connections. Idempotent."""
        if not self._closed:
            self._closed = True
            self._consumer.close()

    # -- internals -------------------------------------------------------------------------

    def _record(self, message: Message) -> Record | None:
        error = message.error()
        if error is not None:
            mapped = from_kafka_error(
                error, f"consume {message.topic()}[{message.partition()}]"
            )
            if error.fatal() or not (error.retriable() or _is_transient(error)):
                raise mapped
            self.last_error = mapped
            return None
        stamp_type, stamp = message.timestamp()
        return Record(
            topic=message.topic() or "",
            partition=_number(message.partition()),
            offset=_number(message.offset()),
            timestamp_ms=stamp if stamp_type != 0 else None,
            key=message.key(),
            value=message.value(),
            headers=headers_from_wire(message.headers()),
        )

    def _limit(self, timeout: float | None) -> float:
        limit = self.request_timeout_s if timeout is None else timeout
        if limit <= 0:
            raise ValueError(f"timeout must be positive, got {limit}")
        return limit

    def _map(self, exc: BaseException, operation: str, limit: float) -> LoglakeError:
        # No poll(0) here to serve error_cb: on a consumer it would swallow a record.
        return unreachable_error(
            operation, self._bootstrap, limit, self._tracker, from_exception(exc, operation)
        )


def _start_offset(start: Any) -> int:
    if start == "earliest":
        return OFFSET_BEGINNING
    if start == "latest":
        return OFFSET_END
    if isinstance(start, int) and not isinstance(start, bool) and start >= 0:
        return start
    raise ValueError(f"start must be 'earliest', 'latest' or an offset >= 0, got {start!r}")


def _is_transient(error: KafkaError) -> bool:
    return error.code() in (
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
        KafkaError._TIMED_OUT,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
    )


def _is_state_error(exc: BaseException) -> bool:
    first = exc.args[0] if exc.args else None
    return isinstance(first, KafkaError) and first.code() == KafkaError._STATE


def _number(value: int | None) -> int:
    return -1 if value is None else value
