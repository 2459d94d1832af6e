"""Consuming records: :class:`Consumer`, alone (assign mode) or as a member of a group.

* **assign mode** (:meth:`Consumer.assign`): the caller picks topic, partitions and start position;
  no group is joined. Without ``group_id`` nothing is ever committed: librdkafka insists on a
  ``group.id`` even here, so a unique throw-away id is generated. With ``group_id``,
  ``start="committed"`` resumes from the group's committed offsets and :meth:`Consumer.commit`
  stores offsets for the group (the broker accepts that only while the group has no members).
* **group mode** (``group_id=...`` and :meth:`Consumer.subscribe`): the consumer joins the group;
  the group coordinator and the client-side assignor (``assignment_strategy``) give each partition
  of the subscribed topics to exactly one member. A new member starts a partition at the group's
  committed offset, or at ``auto_offset_reset`` when there is none.

**Commits** store the *position* (last processed offset + 1), never more. A record counts as
processed once the application asks for the next record (the next ``poll``) or calls
:meth:`Consumer.commit`; so with ``auto_commit=True`` the background commit (every
``auto_commit_interval_ms``, on revocation and on close) covers only records the application has
moved past: at-least-once, duplicates limited to the records after the last commit. With
``auto_commit=False`` (the default) call :meth:`Consumer.commit`.

**Rebalance callbacks** (:meth:`Consumer.subscribe`) run inside ``poll`` on the caller's thread
and receive lists of ``(topic, partition)``: ``on_assign`` with the partitions added,
``on_revoke`` with the partitions about to be taken away (commit there; with ``auto_commit`` the
consumer commits the processed positions of revoked partitions itself, after the callback), and
``on_lost`` with partitions already given to another member (session lost; committing them is no
longer possible). With the eager strategies (``range``, ``roundrobin``) every rebalance revokes
all partitions and assigns the new set; with ``cooperative-sticky`` only the partitions that move
are revoked and assigned. An exception raised in a callback propagates out of ``poll``.

Errors: non-retriable errors (unknown topic, offset out of range with ``auto_offset_reset=
"error"``, fatal errors such as a fenced static member) raise from ``poll``; retriable ones (a
broker restarting, a transient transport failure) are recorded in :attr:`Consumer.last_error` and
polling continues, since librdkafka recovers from them by itself.

**Isolation** (``isolation_level``): ``read_committed`` (the default, as librdkafka's; the Java
client defaults to ``read_uncommitted``) returns only records of committed transactions and
stops at a partition's last stable offset while a transaction there is open;
``read_uncommitted`` returns everything up to the high watermark, aborted records included.
Control records (transaction markers) are never returned. :meth:`Consumer.group_metadata` is
what a transactional producer's ``send_offsets_to_transaction`` needs (consume-transform-produce:
``loglake.client.transform``).

Not thread-safe: use a ``Consumer`` from one thread.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_STORED,
    KafkaError,
    KafkaException,
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
from loglake.client.errors import (
    BrokerError,
    from_exception,
    from_kafka_error,
    passes_by_itself,
)
from loglake.client.model import (
    ISOLATION_LEVELS,
    GroupMetadata,
    IsolationLevel,
    Record,
    StartPosition,
    TopicPartitionKey,
    headers_from_wire,
)
from loglake.client.security import SecurityConfig
from loglake.client.security import coerce as coerce_security
from loglake.errors import LoglakeError

OffsetReset = Literal["earliest", "latest", "error"]
AssignmentStrategy = Literal["range", "roundrobin", "cooperative-sticky"]
AssignStart = StartPosition | Literal["committed"]
RebalanceCallback = Callable[[list[TopicPartitionKey]], object]
"""Called with the ``(topic, partition)`` pairs assigned, revoked or lost."""

ASSIGNMENT_STRATEGIES: tuple[AssignmentStrategy, ...] = (
    "range", "roundrobin", "cooperative-sticky",
)
DEFAULT_SESSION_TIMEOUT_MS = 45_000
DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000
DEFAULT_MAX_POLL_INTERVAL_MS = 300_000
DEFAULT_AUTO_COMMIT_INTERVAL_MS = 5_000

_MAX_POLL_SLICE_S = 1.0


class Consumer:
    """Reads records from assigned partitions or, with a ``group_id``, as a group member.

    >>> with Consumer("127.0.0.1:9092") as consumer:                      # doctest: +SKIP
    ...     consumer.assign("orders", start="earliest")
    ...     for record in consumer.consume(100, timeout=5.0):
    ...         print(record.offset, record.value)

    >>> with Consumer("127.0.0.1:9092", group_id="billing") as consumer:  # doctest: +SKIP
    ...     consumer.subscribe(["orders"], on_revoke=lambda parts: consumer.commit())
    ...     for record in consumer.consume(100, timeout=5.0):
    ...         handle(record)
    ...     consumer.commit()
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        group_id: str | None = None,
        group_instance_id: str | None = None,
        auto_commit: bool = False,
        auto_commit_interval_ms: int = DEFAULT_AUTO_COMMIT_INTERVAL_MS,
        assignment_strategy: AssignmentStrategy = "range",
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
        max_poll_interval_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS,
        auto_offset_reset: OffsetReset = "earliest",
        isolation_level: IsolationLevel = "read_committed",
        fetch_max_wait_ms: int = 500,
        request_timeout_s: float = 30.0,
        client_id: str = DEFAULT_CLIENT_ID,
        security: SecurityConfig | Mapping[str, str] | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        """Create a consumer; it connects on the first metadata request or poll.

        ``group_id`` names the consumer group (needed for :meth:`subscribe`, :meth:`commit` and
        :meth:`committed`); ``group_instance_id`` makes the member static (KIP-345: it keeps its
        partitions across restarts within ``session_timeout_ms`` without a rebalance).
        ``auto_commit`` commits processed positions every ``auto_commit_interval_ms`` (see the
        module docstring). ``assignment_strategy`` picks the client-side assignor; all members
        of a group must share one. ``session_timeout_ms`` (the broker accepts 6000..1800000) is
        how long the coordinator waits for a heartbeat before handing the member's partitions
        to others; ``max_poll_interval_ms`` is how long the application may go without calling
        ``poll`` before the consumer leaves the group. ``auto_offset_reset`` applies when a
        start offset is out of range or the group has no committed offset.
        ``isolation_level``: see the module docstring (committed offsets are also read as
        "stable" then: a pending transactional offset commit is waited out).
        ``request_timeout_s`` bounds metadata, offset look-ups and synchronous commits.
        ``security``: TLS/SASL settings, a :class:`SecurityConfig` or a mapping of Kafka client
        properties (:mod:`loglake.client.security`). ``extra`` goes to librdkafka and wins over
        the rest.
        """
        if auto_offset_reset not in ("earliest", "latest", "error"):
            raise ValueError(f"auto_offset_reset must be earliest, latest or error, "
                             f"got {auto_offset_reset!r}")
        if assignment_strategy not in ASSIGNMENT_STRATEGIES:
            raise ValueError(f"assignment_strategy must be one of "
                             f"{', '.join(ASSIGNMENT_STRATEGIES)}, got {assignment_strategy!r}")
        if isolation_level not in ISOLATION_LEVELS:
            raise ValueError(f"isolation_level must be one of {', '.join(ISOLATION_LEVELS)}, "
                             f"got {isolation_level!r}")
        if request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be positive, got {request_timeout_s}")
        if group_id is not None and not group_id:
            raise ValueError("group_id must not be empty")
        if group_id is None and (group_instance_id is not None or auto_commit):
            raise ValueError("group_instance_id and auto_commit need a group_id")
        for name, value in (("auto_commit_interval_ms", auto_commit_interval_ms),
                            ("session_timeout_ms", session_timeout_ms),
                            ("heartbeat_interval_ms", heartbeat_interval_ms),
                            ("max_poll_interval_ms", max_poll_interval_ms)):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError(f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be lower "
                             f"than session_timeout_ms ({session_timeout_ms})")
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.auto_commit = auto_commit
        self.isolation_level: IsolationLevel = isolation_level
        self.request_timeout_s = request_timeout_s
        self.last_error: LoglakeError | None = None
        self._tracker = ErrorTracker()
        config = base_config(
            bootstrap_servers, client_id=client_id, tracker=self._tracker, extra=None,
            security=coerce_security(security),
        )
        config.update(
            {
                "group.id": group_id or f"loglake-assign-{uuid.uuid4().hex}",
                "enable.auto.commit": auto_commit,
                "auto.commit.interval.ms": auto_commit_interval_ms,
                "enable.auto.offset.store": False,
                "auto.offset.reset": auto_offset_reset,
                "isolation.level": isolation_level,
                "partition.assignment.strategy": assignment_strategy,
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": heartbeat_interval_ms,
                "max.poll.interval.ms": max_poll_interval_ms,
                "fetch.wait.max.ms": fetch_max_wait_ms,
                "enable.partition.eof": False,
                "socket.connection.setup.timeout.ms": int(min(30.0, request_timeout_s) * 1000),
                "on_commit": self._on_commit,
            }
        )
        if group_instance_id is not None:
            config["group.instance.id"] = group_instance_id
        config.update(extra or {})
        self._bootstrap: str = config["bootstrap.servers"]
        self._consumer = KafkaConsumer(config)
        self._assignment: list[TopicPartition] = []
        self._subscribed = False
        # next offset to commit per partition: last record handed to the caller + 1
        self._returned: dict[TopicPartitionKey, int] = {}
        # partitions whose returned position librdkafka's offset store has not seen yet
        self._unstored: set[TopicPartitionKey] = set()
        # the record returned last: it becomes "processed" at the next poll
        self._in_flight: TopicPartitionKey | None = None
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
        start: AssignStart = "earliest",
        timeout: float | None = None,
    ) -> list[int]:
        """Read ``partitions`` of ``topic`` (all if ``None``) from ``start``; returns them.

        ``start`` is ``"earliest"``, ``"latest"`` (only records produced from now on), an
        offset applied to every assigned partition, or ``"committed"`` (needs ``group_id``: the
        group's committed offset, else ``auto_offset_reset``). Replaces any previous assignment.
        Checks that the topic and partitions exist (bounded by ``timeout``). Not allowed after
        :meth:`subscribe` (the group assigns partitions then).
        """
        if self._subscribed:
            raise ValueError("assign() after subscribe(): the group assigns the partitions; "
                             "use a consumer without subscribe for manual assignment")
        if start == "committed":
            if self.group_id is None:
                raise ValueError("start='committed' needs a group_id")
            offset = OFFSET_STORED
        else:
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
        self._forget(set(self._returned) - {(topic, p) for p in chosen})
        return chosen

    # -- group membership ------------------------------------------------------------------

    def subscribe(
        self,
        topics: str | Sequence[str],
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        """Join the group and consume the partitions it assigns from ``topics``.

        A topic starting with ``^`` is a regular expression over topic names. The join happens
        during the following ``poll`` calls; callbacks run there too (see the module
        docstring for when each runs). ``on_lost`` defaults to ``on_revoke`` semantics minus
        the commit. Replaces a previous subscription.
        """
        if self.group_id is None:
            raise ValueError("subscribe() needs a group_id")
        names = [topics] if isinstance(topics, str) else list(topics)
        if not names or not all(isinstance(t, str) and t for t in names):
            raise ValueError(f"topics must be a non-empty list of topic names, got {topics!r}")
        if self._assignment:
            self._consumer.unassign()
            self._assignment = []

        def assigned(_: Any, partitions: list[TopicPartition]) -> None:
            if on_assign is not None:
                on_assign(_keys(partitions))

        def revoked(_: Any, partitions: list[TopicPartition]) -> None:
            keys = _keys(partitions)
            if on_revoke is not None:
                on_revoke(keys)
            if self.auto_commit:
                self._commit_on_revoke(keys)
            self._forget(set(keys))

        def lost(_: Any, partitions: list[TopicPartition]) -> None:
            keys = _keys(partitions)
            self._forget(set(keys))
            if on_lost is not None:
                on_lost(keys)

        try:
            self._consumer.subscribe(names, on_assign=assigned, on_revoke=revoked, on_lost=lost)
        except Exception as exc:
            raise from_exception(exc, f"subscribe to {', '.join(names)}") from exc
        self._subscribed = True

    def unsubscribe(self) -> None:
        """Leave the group's subscription (revoking every partition); the consumer stays open."""
        if self._subscribed:
            self._consumer.unsubscribe()
            self._subscribed = False

    def member_id(self) -> str | None:
        """The member id the coordinator gave this consumer (``None`` before joining)."""
        return self._consumer.memberid() or None

    def group_metadata(self) -> GroupMetadata:
        """This consumer's group identity (group id, and generation and member id once it
        joined) for a transactional producer's ``send_offsets_to_transaction``; needs a
        ``group_id``. Take it after the ``poll`` that returned the records whose offsets go
        into the transaction: a rebalance in between changes the generation (the commit then
        fails with an abortable error instead of overwriting a new owner's offsets)."""
        if self.group_id is None:
            raise ValueError("group_metadata() needs a group_id")
        try:
            handle = self._consumer.consumer_group_metadata()
        except Exception as exc:
            raise from_exception(exc, f"group metadata of {self.group_id!r}") from exc
        return GroupMetadata(self.group_id, handle)

    def commit(
        self,
        *,
        records: Iterable[Record] | None = None,
        offsets: Mapping[TopicPartitionKey, int] | None = None,
        asynchronous: bool = False,
    ) -> dict[TopicPartitionKey, int]:
        """Commit positions for the group; returns what was sent, by (topic, partition).

        Without arguments: for every assigned partition, the offset after the last record this
        consumer returned. ``records``: per partition, the highest offset among them + 1.
        ``offsets``: exactly these positions (the next offset to read, not the last read).
        Synchronous unless ``asynchronous`` (then failures land in :attr:`last_error`).
        Raises :class:`BrokerError` ``rebalance_in_progress``/``illegal_generation``/
        ``unknown_member_id`` when the group moved on (the partition may belong to another
        member now) and ``fenced_instance_id`` when another consumer took this static identity.
        Nothing to commit is not an error: an empty dict is returned.
        """
        if self.group_id is None:
            raise ValueError("commit() needs a group_id")
        if records is not None and offsets is not None:
            raise ValueError("pass records or offsets, not both")
        chosen: dict[TopicPartitionKey, int]
        if offsets is not None:
            chosen = dict(offsets)
            for key, offset in chosen.items():
                if offset < 0:
                    raise ValueError(f"offset for {key[0]}[{key[1]}] must be >= 0, got {offset}")
        elif records is not None:
            chosen = {}
            for record in records:
                key = (record.topic, record.partition)
                chosen[key] = max(chosen.get(key, 0), record.offset + 1)
        else:
            self._mark_processed()
            assigned = set(self.assignment())
            chosen = {k: v for k, v in self._returned.items() if k in assigned}
        if not chosen:
            return {}
        self._commit(chosen, asynchronous=asynchronous)
        return dict(sorted(chosen.items()))

    def committed(
        self,
        topic: str,
        partitions: Sequence[int] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[int, int | None]:
        """The group's committed offset per partition of ``topic`` (``None``: none committed).

        ``partitions`` defaults to all partitions of the topic.
        """
        if self.group_id is None:
            raise ValueError("committed() needs a group_id")
        limit = self._limit(timeout)
        chosen = self._chosen_partitions(topic, partitions, limit)
        operation = f"committed offsets of group {self.group_id!r} for topic {topic!r}"
        try:
            found = self._consumer.committed(
                [TopicPartition(topic, p) for p in chosen], timeout=limit
            )
        except Exception as exc:
            raise self._map(exc, operation, limit) from exc
        result: dict[int, int | None] = {}
        for tp in found:
            if tp.error is not None:
                raise from_kafka_error(tp.error, f"{operation}, partition {tp.partition}")
            result[tp.partition] = tp.offset if tp.offset >= 0 else None
        return dict(sorted(result.items()))

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
        chosen = self._chosen_partitions(topic, partitions, limit)
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
        """The next record, or ``None`` if none arrived within ``timeout`` seconds.

        In group mode this also joins the group, heartbeats and runs rebalance callbacks; the
        record returned before counts as processed from now on (see the module docstring).
        """
        self._mark_processed()
        if self.auto_commit:
            self._store_processed()
        message = self._consumer.poll(timeout)
        if message is None:
            return None
        record = self._record(message)
        if record is not None and self.group_id is not None:
            key = (record.topic, record.partition)
            self._returned[key] = record.offset + 1
            self._in_flight = key
        return record

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
        """Leave the group (unless static) and close connections. Idempotent.

        With ``auto_commit`` the positions of all records returned so far are committed first.
        """
        if not self._closed:
            self._closed = True
            try:
                if self.auto_commit:
                    self._mark_processed()
                    self._store_processed()
            finally:
                self._consumer.close()

    # -- internals -------------------------------------------------------------------------

    def _mark_processed(self) -> None:
        if self._in_flight is not None:
            self._unstored.add(self._in_flight)
            self._in_flight = None

    def _store_processed(self) -> None:
        """Hand processed positions to librdkafka's offset store (auto-commit sends them)."""
        if not self._unstored:
            return
        assigned = set(self.assignment())
        keys = [k for k in self._unstored if k in assigned and k in self._returned]
        self._unstored.clear()
        if keys:
            with _suppress_state_error():
                self._consumer.store_offsets(
                    offsets=[TopicPartition(t, p, self._returned[(t, p)]) for t, p in keys]
                )

    def _commit_on_revoke(self, keys: list[TopicPartitionKey]) -> None:
        self._mark_processed()
        chosen = {k: self._returned[k] for k in keys if k in self._returned}
        if not chosen:
            return
        try:
            self._commit(chosen, asynchronous=False)
        except LoglakeError as exc:
            # the partitions are going away; a failed commit only means re-delivery elsewhere
            self.last_error = exc

    def _commit(self, chosen: Mapping[TopicPartitionKey, int], *, asynchronous: bool) -> None:
        operation = f"commit offsets of group {self.group_id!r}"
        partitions = [TopicPartition(t, p, o) for (t, p), o in sorted(chosen.items())]
        try:
            result: list[TopicPartition] | None
            if asynchronous:
                result = self._consumer.commit(offsets=partitions, asynchronous=True)
            else:
                result = self._consumer.commit(offsets=partitions, asynchronous=False)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError._NO_OFFSET:
                return
            raise self._map(exc, operation, self.request_timeout_s) from exc
        except Exception as exc:
            raise self._map(exc, operation, self.request_timeout_s) from exc
        for tp in result or ():
            if tp.error is not None:
                raise from_kafka_error(tp.error, f"{operation}, {tp.topic}[{tp.partition}]")

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """librdkafka's commit report (auto and asynchronous commits): keep the failure."""
        if error is not None and error.code() != KafkaError._NO_OFFSET:
            self.last_error = from_kafka_error(error, f"commit offsets of group {self.group_id!r}")
            return
        for tp in partitions:
            if tp.error is not None:
                self.last_error = from_kafka_error(
                    tp.error, f"commit offsets of group {self.group_id!r}, "
                    f"{tp.topic}[{tp.partition}]")

    def _forget(self, keys: set[TopicPartitionKey]) -> None:
        """Drop tracked positions of partitions this consumer no longer owns."""
        for key in keys:
            self._returned.pop(key, None)
            self._unstored.discard(key)
        if self._in_flight in keys:
            self._in_flight = None

    def _record(self, message: Message) -> Record | None:
        error = message.error()
        if error is not None:
            where = (f"consume {message.topic()}[{message.partition()}]"
                     if message.topic() is not None else
                     "consume" if self.group_id is None else f"consume as group {self.group_id!r}")
            mapped = from_kafka_error(error, where)
            # Kafka flags UNKNOWN_TOPIC_OR_PARTITION retriable (metadata may lag a creation),
            # but a consumer is told at once that what it asked for does not exist (as before
            # the flag decided: see the module docstring)
            if error.fatal() or not passes_by_itself(error) \
                    or mapped.code == ErrorCode.unknown_topic_or_partition:
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

    def _chosen_partitions(
        self, topic: str, partitions: Sequence[int] | None, limit: float
    ) -> list[int]:
        """``partitions`` as given, or every partition of ``topic``."""
        if partitions is not None:
            return list(partitions)
        return self.partitions_for(topic, timeout=limit)

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


def _keys(partitions: Iterable[TopicPartition]) -> list[TopicPartitionKey]:
    return sorted((tp.topic, tp.partition) for tp in partitions)


class _suppress_state_error:
    """Ignore librdkafka's _STATE error (partition no longer assigned) from store_offsets."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> bool:
        return exc is not None and _is_state_error(exc)


def _is_state_error(exc: BaseException) -> bool:
    first = exc.args[0] if exc.args else None
    return isinstance(first, KafkaError) and first.code() == KafkaError._STATE


def _number(value: int | None) -> int:
    return -1 if value is None else value
