"""Producing records: :class:`Producer` and its per-record :class:`Delivery` handle.

Defaults are the safe ones: ``acks=all`` with idempotence (no duplicates or reordering on retry),
and the ``murmur2_random`` partitioner, which places keyed records exactly where Kafka's Java
client would. Every record either reaches the leader or fails within ``delivery_timeout_ms``, so
``flush()`` and ``close()`` are bounded even when the cluster is unreachable.

**Transactions** (``transactional_id=...``): records sent between :meth:`Producer.begin_transaction`
and :meth:`Producer.commit_transaction`, and consumer offsets given to
:meth:`Producer.send_offsets_to_transaction`, become visible to ``read_committed`` consumers
atomically, or (:meth:`Producer.abort_transaction`) never. ``with producer.transaction(): ...``
begins, and commits at the end of the block or aborts when the block raises.
:meth:`Producer.init_transactions` (implicit at the first ``begin_transaction``) registers the
transactional id with its coordinator: it fences every older producer with the same id and
completes (aborts) a transaction that one left open. Failures of these calls are
:class:`~loglake.client.errors.TransactionError` subclasses saying what to do next (fatal:
close; abortable: abort and redo; else ``retriable``). Once a record of the open transaction
failed (its delivery report has the error), librdkafka refuses further records of it:
:meth:`Producer.send` then raises :class:`~loglake.client.errors.AbortableTransactionError`
naming that first failure, as the commit would. A transaction is bounded by
``transaction_timeout_ms``: the coordinator aborts one left open longer and bumps the
producer's epoch, which fences this producer (:class:`~loglake.client.errors.FatalTransactionError`
at its next call, as Kafka's clients).

Threading: delivery reports are handled on whichever thread calls ``send``, ``flush``,
``poll`` or ``Delivery.result``; callbacks run there. One ``Producer`` may be shared by threads
(librdkafka's producer is thread-safe); ``Delivery.result`` polls the producer while it waits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka import Producer as KafkaProducer
from kio.schema.errors import ErrorCode

from loglake.client._common import (
    DEFAULT_CLIENT_ID,
    ErrorTracker,
    base_config,
    lookup_partitions,
)
from loglake.client.errors import (
    AbortableTransactionError,
    ClientError,
    FatalTransactionError,
    from_exception,
    from_kafka_error,
    transaction_error,
    transaction_exception,
)
from loglake.client.model import (
    ACKS_VALUES,
    COMPRESSION_VALUES,
    Acks,
    Compression,
    GroupMetadata,
    HeadersInput,
    RecordMetadata,
    TopicPartitionKey,
    normalize_headers,
    to_bytes,
)
from loglake.client.security import SecurityConfig
from loglake.client.security import coerce as coerce_security
from loglake.errors import LoglakeError

DeliveryCallback = Callable[[RecordMetadata | None, LoglakeError | None], None]
"""Called once per record with ``(metadata, None)`` on success or ``(None, error)``."""

DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
"""librdkafka's and the Java client's default ``transaction.timeout.ms``."""

_QUEUE_FULL_BACKOFF_S = 0.05
_POLL_INTERVAL_S = 0.05


class Delivery:
    """The outcome of one ``send``: completes when the leader acknowledges or delivery fails."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self._producer = producer
        self._topic = topic
        self._done = threading.Event()
        self._metadata: RecordMetadata | None = None
        self._error: LoglakeError | None = None

    def done(self) -> bool:
        """Whether the delivery report has arrived."""
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait for the report (polling the producer) and return where the record landed.

        Raises the delivery's :class:`LoglakeError`, or :class:`ClientError`
        ``request_timed_out`` if ``timeout`` seconds pass first (the record may still be sent).
        """
        self._wait(timeout)
        if self._error is not None:
            raise self._error
        assert self._metadata is not None
        return self._metadata

    def exception(self, timeout: float | None = None) -> LoglakeError | None:
        """Wait for the report and return its error, or ``None`` if the record was delivered."""
        self._wait(timeout)
        return self._error

    def _wait(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._done.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                raise ClientError(
                    f"send to topic {self._topic!r}: no delivery report within {timeout:g} s",
                    code=ErrorCode.request_timed_out,
                )
            self._producer.poll(_POLL_INTERVAL_S)

    def _complete(self, metadata: RecordMetadata | None, error: LoglakeError | None) -> None:
        self._metadata = metadata
        self._error = error
        self._done.set()


class Producer:
    """Sends records to a loglake cluster.

    >>> with Producer("127.0.0.1:9092", compression="zstd") as producer:     # doctest: +SKIP
    ...     producer.send("orders", b'{"id": 1}', key=b"customer-7")
    ...     partition, offset = producer.send_and_wait("orders", b"now")
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        acks: Acks = "all",
        compression: Compression = "none",
        linger_ms: int = 5,
        idempotence: bool | None = None,
        delivery_timeout_ms: int = 30_000,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        client_id: str = DEFAULT_CLIENT_ID,
        security: SecurityConfig | Mapping[str, str] | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        """Create a producer; nothing is sent until the first ``send``.

        ``idempotence`` defaults to on with ``acks="all"`` and off otherwise (librdkafka refuses
        idempotence without ``acks=all``). ``delivery_timeout_ms`` bounds each record's time from
        ``send`` to its report. ``transactional_id`` makes the producer transactional (needs
        ``acks="all"`` and idempotence; see the module docstring); ``transaction_timeout_ms``
        (at most the brokers' ``transaction.max.timeout.ms``) bounds each transaction and must
        not be below ``delivery_timeout_ms``. ``security``: TLS/SASL settings, a
        :class:`SecurityConfig` or a mapping of Kafka client properties
        (:mod:`loglake.client.security`). ``extra`` is passed to librdkafka as-is and wins
        over the rest.
        """
        if acks not in ACKS_VALUES:
            raise ValueError(f"acks must be one of {', '.join(ACKS_VALUES)}, got {acks!r}")
        if compression not in COMPRESSION_VALUES:
            raise ValueError(
                f"compression must be one of {', '.join(COMPRESSION_VALUES)}, got {compression!r}"
            )
        if idempotence is None:
            idempotence = acks == "all"
        if idempotence and acks != "all":
            raise ValueError("idempotence requires acks='all'")
        if delivery_timeout_ms <= 0:
            raise ValueError(f"delivery_timeout_ms must be positive, got {delivery_timeout_ms}")
        if not 0 <= linger_ms < delivery_timeout_ms:
            raise ValueError(f"linger_ms must be in [0, delivery_timeout_ms), got {linger_ms}")
        if transactional_id is not None:
            if not transactional_id:
                raise ValueError("transactional_id must not be empty")
            if not idempotence:
                raise ValueError("a transactional producer needs acks='all' and idempotence")
            if transaction_timeout_ms <= 0:
                raise ValueError(
                    f"transaction_timeout_ms must be positive, got {transaction_timeout_ms}")
            if delivery_timeout_ms > transaction_timeout_ms:
                raise ValueError(
                    f"delivery_timeout_ms ({delivery_timeout_ms}) must not exceed "
                    f"transaction_timeout_ms ({transaction_timeout_ms})")
        self._tracker = ErrorTracker()
        settings: dict[str, Any] = {
            "acks": acks,
            "enable.idempotence": idempotence,
            "compression.type": compression,
            "linger.ms": linger_ms,
            "message.timeout.ms": delivery_timeout_ms,
            "request.timeout.ms": min(30_000, delivery_timeout_ms),
            "socket.connection.setup.timeout.ms": min(30_000, delivery_timeout_ms),
            "partitioner": "murmur2_random",
        }
        if transactional_id is not None:
            settings["transactional.id"] = transactional_id
            settings["transaction.timeout.ms"] = transaction_timeout_ms
        config = base_config(
            bootstrap_servers, client_id=client_id, tracker=self._tracker, extra=None,
            security=coerce_security(security),
        )
        config.update(settings)
        config.update(extra or {})
        self._bootstrap: str = config["bootstrap.servers"]
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.transactional_id = transactional_id
        self._transactions_ready = False
        self._in_transaction = False
        self._txn_failure: LoglakeError | None = None
        """The first failed delivery of the open transaction (it must be aborted)."""
        self._producer = KafkaProducer(config)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.flush()  # deliver what was sent before the failure; do not mask the exception

    @property
    def bootstrap_servers(self) -> str:
        """The ``host:port,...`` string this producer was created with."""
        return self._bootstrap

    def partitions_for(self, topic: str, *, timeout: float = 10.0) -> list[int]:
        """Partition ids of ``topic``, asking the cluster (bounded by ``timeout`` seconds).

        Raises :class:`BrokerError` ``unknown_topic_or_partition`` if the topic does not exist,
        :class:`ClientError` if the cluster does not answer in time.
        """
        return lookup_partitions(
            self._producer,
            topic,
            limit=timeout,
            bootstrap=self._bootstrap,
            tracker=self._tracker,
            serve_callbacks=lambda: self._producer.poll(0),
        )

    def send(
        self,
        topic: str,
        value: bytes | str | None,
        *,
        key: bytes | str | None = None,
        headers: HeadersInput | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> Delivery:
        """Queue one record for ``topic`` and return its :class:`Delivery` handle.

        ``str`` keys, values and header values are UTF-8 encoded; ``None`` value is a tombstone.
        Without ``partition`` the partitioner chooses (by key hash when there is a key).
        ``timestamp_ms`` defaults to now. ``on_delivery`` is called from a later
        ``poll``/``flush``/``send`` with ``(metadata, None)`` or ``(None, error)``.
        """
        delivery = Delivery(self, topic)
        encoded_value = to_bytes(value, what="value")
        encoded_key = to_bytes(key, what="key")
        encoded_headers = normalize_headers(headers)
        operation = f"send to topic {topic!r}"

        def report(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                outcome: tuple[RecordMetadata | None, LoglakeError | None] = (
                    None,
                    from_kafka_error(error, operation),
                )
                if self._in_transaction and self._txn_failure is None:
                    self._txn_failure = outcome[1]
            else:
                stamp_type, stamp = message.timestamp()
                outcome = (
                    RecordMetadata(
                        topic=message.topic() or topic,
                        partition=_or_unknown(message.partition()),
                        offset=_or_unknown(message.offset()),
                        timestamp_ms=stamp if stamp_type != 0 else None,
                    ),
                    None,
                )
            delivery._complete(*outcome)
            if on_delivery is not None:
                on_delivery(*outcome)

        arguments: dict[str, Any] = {
            "value": encoded_value,
            "key": encoded_key,
            "on_delivery": report,
        }
        if encoded_headers:
            arguments["headers"] = encoded_headers
        if partition is not None:
            if partition < 0:
                raise ValueError(f"partition must be >= 0, got {partition}")
            arguments["partition"] = partition
        if timestamp_ms is not None:
            if timestamp_ms < 0:
                raise ValueError(f"timestamp_ms must be >= 0, got {timestamp_ms}")
            arguments["timestamp"] = timestamp_ms
        deadline = time.monotonic() + self.delivery_timeout_s
        while True:
            try:
                self._producer.produce(topic, **arguments)
                break
            except BufferError:
                # The local queue is full: serve delivery reports to make room, bounded.
                if time.monotonic() >= deadline:
                    raise ClientError(
                        f"{operation}: local queue stayed full for {self.delivery_timeout_s:g} s",
                        code=ErrorCode.request_timed_out,
                        hint="the cluster is not accepting records; check broker health",
                    ) from None
                self._serve(_QUEUE_FULL_BACKOFF_S, operation)
            except KafkaException as exc:
                raise self._send_failure(exc, operation) from exc
            except Exception as exc:
                raise from_exception(exc, operation) from exc
        self._serve(0, operation)
        return delivery

    def _send_failure(self, exc: KafkaException, operation: str) -> LoglakeError:
        """What a refused ``produce`` means: inside a transaction that already failed (librdkafka
        answers ``_STATE``) it must be aborted; a fenced producer (``_FATAL``) is done."""
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if self.transactional_id is None or not self._in_transaction or error is None:
            return from_exception(exc, operation)
        if error.code() == KafkaError._STATE:
            self._producer.poll(0)  # serve the delivery report that failed the transaction
            cause = self._txn_failure
            return AbortableTransactionError(
                f"{operation} (transactional id {self.transactional_id!r}): the transaction "
                f"failed: {cause if cause is not None else error.str()}",
                code=cause.code if cause is not None else ErrorCode.invalid_txn_state,
                kafka_name=error.name(),
                hint="call abort_transaction() and redo the transaction")
        return transaction_exception(exc, operation)

    def send_and_wait(
        self,
        topic: str,
        value: bytes | str | None,
        *,
        key: bytes | str | None = None,
        headers: HeadersInput | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        timeout: float | None = None,
    ) -> tuple[int, int]:
        """Send one record, wait for its acknowledgement, return ``(partition, offset)``."""
        delivery = self.send(
            topic,
            value,
            key=key,
            headers=headers,
            partition=partition,
            timestamp_ms=timestamp_ms,
        )
        metadata = delivery.result(timeout)
        return metadata.partition, metadata.offset

    # -- transactions ----------------------------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id with its coordinator (once; later calls do nothing).

        Fences every older producer with this id and completes a transaction it left open.
        Bounded by ``timeout`` seconds (default: the delivery timeout); raises a
        :class:`~loglake.client.errors.TransactionError`.
        """
        if self._transactions_ready:
            return
        self._transactional("init transactions", self._producer.init_transactions,
                            self._bound(timeout))
        self._transactions_ready = True

    def begin_transaction(self) -> None:
        """Start a transaction (calling :meth:`init_transactions` first if needed)."""
        self.init_transactions()
        self._transactional("begin transaction", self._producer.begin_transaction)
        self._in_transaction, self._txn_failure = True, None

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Deliver every record sent in the transaction, then commit it.

        :class:`~loglake.client.errors.AbortableTransactionError` when a record or the commit
        failed (abort then); a ``retriable`` :class:`TransactionError` (timeout) may be
        repeated: the commit is idempotent.
        """
        self._transactional("commit transaction", self._producer.commit_transaction,
                            self._bound(timeout))
        self._in_transaction = False

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: its records are purged or written as aborted, its offsets
        dropped; read_committed consumers never see them."""
        self._transactional("abort transaction", self._producer.abort_transaction,
                            self._bound(timeout))
        self._in_transaction, self._txn_failure = False, None

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartitionKey, int],
        group_metadata: GroupMetadata,
        *,
        timeout: float | None = None,
    ) -> None:
        """Commit consumer ``offsets`` (the next offset to read per ``(topic, partition)``) for
        the consumer group of ``group_metadata`` (:meth:`Consumer.group_metadata`) as part of
        the open transaction: they become the group's committed offsets only if it commits."""
        if not offsets:
            raise ValueError("send_offsets_to_transaction needs at least one partition")
        for (topic, partition), offset in offsets.items():
            if offset < 0:
                raise ValueError(f"offset for {topic}[{partition}] must be >= 0, got {offset}")
        positions = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        self._transactional(
            f"send offsets of group {group_metadata.group_id!r} to the transaction",
            self._producer.send_offsets_to_transaction, positions, group_metadata.handle,
            self._bound(timeout))

    @contextmanager
    def transaction(self, timeout: float | None = None) -> Iterator[Producer]:
        """``with producer.transaction(): ...``: begin; commit when the block ends, abort (and
        re-raise) when it raises. ``timeout`` bounds the commit or abort."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            # the block's exception says more; a fenced producer cannot abort
            with suppress(LoglakeError):
                self.abort_transaction(timeout)
            raise
        self.commit_transaction(timeout)

    def _bound(self, timeout: float | None) -> float:
        limit = self.delivery_timeout_s if timeout is None else timeout
        if limit <= 0:
            raise ValueError(f"timeout must be positive, got {limit}")
        return limit

    def _transactional(self, operation: str, call: Callable[..., object], *args: Any) -> None:
        if self.transactional_id is None:
            raise ValueError(f"{operation}: the producer has no transactional_id")
        where = f"{operation} (transactional id {self.transactional_id!r})"
        try:
            call(*args)
        except Exception as exc:
            raise transaction_exception(exc, where) from exc

    # -- delivery ----------------------------------------------------------------------------

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery reports for up to ``timeout`` seconds; returns how many were served."""
        return self._serve(timeout, f"poll of producer to {self._bootstrap}")

    def _serve(self, timeout: float, operation: str) -> int:
        """``poll`` of librdkafka, its failures typed (a fenced transactional producer raises
        :class:`FatalTransactionError`)."""
        try:
            return self._producer.poll(timeout)
        except (KafkaException, SystemError) as exc:
            raise _typed(exc, operation, self._tracker) from exc

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every queued record is reported; returns how many are still pending.

        Without ``timeout`` this waits at most about ``delivery_timeout_ms``, after which every
        undelivered record has failed with ``request_timed_out``. A transactional producer in a
        failed state raises the typed transaction error (e.g. :class:`FatalTransactionError`
        once fenced).
        """
        try:
            return self._producer.flush(-1 if timeout is None else timeout)
        except (KafkaException, SystemError) as exc:
            raise _typed(exc, f"flush of producer to {self._bootstrap}", self._tracker) from exc

    def __len__(self) -> int:
        """Records sent but not yet reported."""
        return len(self._producer)

    def close(self, timeout: float | None = None) -> None:
        """Flush; raises :class:`ClientError` if records are still pending after ``timeout``.
        A producer that is fenced (or failed fatally) has nothing left to deliver: closing it
        does not raise again."""
        try:
            pending = self.flush(timeout)
        except FatalTransactionError:
            return
        if pending:
            raise ClientError(
                f"producer to {self._bootstrap}: {pending} records still undelivered at close",
                code=ErrorCode.request_timed_out,
            )


def _typed(exc: KafkaException | SystemError, operation: str,
           tracker: ErrorTracker) -> Exception:
    """The loglake error for a failure of librdkafka's ``poll``/``flush``. confluent-kafka raises
    a fatal error (a fenced transactional producer) from them while it still serves delivery
    reports: the report callback's next call into the C extension then fails with a
    ``SystemError`` whose cause is that ``KafkaException``; the cause is what happened. Some
    interleavings lose the cause ("returned NULL without setting an exception"): then the fatal
    error ``error_cb`` reported (the tracker's) is what happened."""
    cause = exc.__cause__ if isinstance(exc, SystemError) else exc
    if isinstance(cause, KafkaException):
        return transaction_exception(cause, operation)
    if tracker.fatal is not None:
        return transaction_error(tracker.fatal, operation)
    return exc


def _or_unknown(number: int | None) -> int:
    """-1 where librdkafka has no value (the offset of an ``acks=0`` record)."""
    return -1 if number is None else number
