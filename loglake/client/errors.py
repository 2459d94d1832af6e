"""Errors raised by the SDK, all under :class:`loglake.errors.LoglakeError`.

Two kinds, told apart by class:

* :class:`BrokerError` — the broker answered with a Kafka wire error code. ``code`` is that code
  (confluent-kafka's ``KafkaError.code()`` equals the wire code for broker errors) and the
  message carries the broker's own error message when it sent one.
* :class:`ClientError` — something failed on this side: a timeout waiting for the cluster, a
  transport failure, a delivery that expired in the local queue, bad arguments to librdkafka.
  ``code`` is the closest wire code (``request_timed_out``, ``network_exception``, ...) or
  ``unknown_server_error`` when there is none.

Both keep librdkafka's own error name (``kafka_name``, e.g. ``_TRANSPORT``) for diagnostics.
:func:`from_kafka_error` is the one place that turns a confluent-kafka error into one of these.

Transactional producer calls (``init_transactions``, ``begin/commit/abort_transaction``,
``send_offsets_to_transaction``) raise a :class:`TransactionError` instead, whose class says
what the application must do next (librdkafka's flags on the error decide it, in this order):

* :class:`FatalTransactionError` (``KafkaError.fatal()``): the producer cannot continue, e.g.
  ``PRODUCER_FENCED`` (another instance with the same transactional id took over) or
  ``_FENCED``; close it (a new producer with the same id fences this one for good).
* :class:`AbortableTransactionError` (``KafkaError.txn_requires_abort()``): call
  ``abort_transaction()`` and redo the work in a new transaction; nothing of the current
  one becomes visible to read_committed consumers.
* :class:`TransactionError` itself: ``retriable`` is librdkafka's ``retriable()`` flag (the same
  call may be repeated, e.g. a commit that timed out); otherwise a programming error (a call
  in the wrong state, ``_STATE``) or a broker refusal.
"""

from __future__ import annotations

import concurrent.futures

from confluent_kafka import KafkaError, KafkaException
from kio.schema.errors import ErrorCode

from loglake.errors import LoglakeError

# librdkafka's local (negative) error codes that have a natural wire equivalent.
_LOCAL_TO_WIRE: dict[int, ErrorCode] = {
    KafkaError._TIMED_OUT: ErrorCode.request_timed_out,
    KafkaError._MSG_TIMED_OUT: ErrorCode.request_timed_out,
    KafkaError._TIMED_OUT_QUEUE: ErrorCode.request_timed_out,
    KafkaError._TRANSPORT: ErrorCode.network_exception,
    KafkaError._ALL_BROKERS_DOWN: ErrorCode.network_exception,
    KafkaError._RESOLVE: ErrorCode.network_exception,
    KafkaError._UNKNOWN_TOPIC: ErrorCode.unknown_topic_or_partition,
    KafkaError._UNKNOWN_PARTITION: ErrorCode.unknown_topic_or_partition,
    KafkaError._BAD_MSG: ErrorCode.corrupt_message,
    KafkaError._BAD_COMPRESSION: ErrorCode.corrupt_message,
    KafkaError._INVALID_ARG: ErrorCode.invalid_request,
    KafkaError._UNSUPPORTED_FEATURE: ErrorCode.unsupported_version,
    KafkaError._AUTHENTICATION: ErrorCode.sasl_authentication_failed,
    KafkaError._SSL: ErrorCode.network_exception,
}


def _wire_code(code: int) -> ErrorCode | None:
    try:
        return ErrorCode(code)
    except ValueError:
        return None


class BrokerError(LoglakeError):
    """The broker rejected a request with a Kafka wire error code (see ``code``)."""

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode,
        kafka_name: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint, code=code)
        self.kafka_name = kafka_name


class ClientError(LoglakeError):
    """A client-side failure: timeout, unreachable cluster, local queue or argument error."""

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode = ErrorCode.unknown_server_error,
        kafka_name: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint, code=code)
        self.kafka_name = kafka_name


def from_kafka_error(error: KafkaError, operation: str, *, hint: str | None = None) -> LoglakeError:
    """Turn a confluent-kafka error into a loglake error saying what was being done.

    ``operation`` is a short phrase such as ``"create topic 'orders'"``; the result's message reads
    ``"<operation>: <librdkafka/broker message> [<NAME>]"``.
    """
    raw = error.code()
    name = error.name()
    message = f"{operation}: {error.str()} [{name}]"
    if raw > 0:
        wire = _wire_code(raw)
        if wire is not None:
            return BrokerError(message, code=wire, kafka_name=name, hint=hint)
    local = _LOCAL_TO_WIRE.get(raw, ErrorCode.unknown_server_error)
    return ClientError(message, code=local, kafka_name=name, hint=hint)


class TransactionError(LoglakeError):
    """A transactional producer call failed (see the module docstring for the subclasses).

    ``code`` is the wire code (or the closest one for a librdkafka-local error);
    ``retriable`` is librdkafka's verdict for this call, not only Kafka's flag of the code.
    """

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode,
        kafka_name: str | None = None,
        retriable: bool = False,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint, code=code)
        self.kafka_name = kafka_name
        self._retriable = retriable

    @property
    def retriable(self) -> bool:
        """Whether repeating the same call may succeed (librdkafka's ``retriable()``)."""
        return self._retriable


class AbortableTransactionError(TransactionError):
    """The current transaction cannot commit: call ``abort_transaction()`` and start over."""


class FatalTransactionError(TransactionError):
    """The producer is unusable (fenced by a newer instance, fatal idempotence error): close
    it; only a new producer can continue (and fences this one)."""


def transaction_error(error: KafkaError, operation: str) -> TransactionError:
    """Map a confluent-kafka error from a transactional call to the class that says what to do
    (fatal > abortable > plain, see the module docstring)."""
    raw = error.code()
    name = error.name()
    wire = _wire_code(raw) if raw > 0 else None
    code = wire if wire is not None else _LOCAL_TO_WIRE.get(raw, ErrorCode.unknown_server_error)
    message = f"{operation}: {error.str()} [{name}]"
    if error.fatal():
        return FatalTransactionError(
            message, code=code, kafka_name=name,
            hint="close this producer; a new one with the same transactional id takes over")
    if error.txn_requires_abort():
        return AbortableTransactionError(
            message, code=code, kafka_name=name,
            hint="call abort_transaction() and redo the transaction")
    return TransactionError(message, code=code, kafka_name=name, retriable=error.retriable())


def transaction_exception(exc: BaseException, operation: str) -> LoglakeError:
    """:func:`transaction_error` for an exception raised by a transactional call (other
    exceptions as :func:`from_exception`)."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return transaction_error(exc.args[0], operation)
    return from_exception(exc, operation)


def passes_by_itself(error: KafkaError) -> bool:
    """Whether a consume-side error is worth waiting out rather than raising: librdkafka's own
    ``retriable()``, or Kafka's ``retriable`` flag of the code :func:`from_kafka_error` maps it
    to (librdkafka's transport, resolve, all-brokers-down and timeout conditions map to
    retriable NETWORK_EXCEPTION and REQUEST_TIMED_OUT). CORRUPT_MESSAGE is retriable in Kafka's
    registry (a producer may send the batch again) but a batch read back corrupt does not heal
    by waiting: it is not waited out (readers raised on it before the flag decided, too)."""
    if error.retriable():
        return True
    mapped = from_kafka_error(error, "")
    return mapped.retriable and mapped.code != ErrorCode.corrupt_message


def from_exception(exc: BaseException, operation: str, *, hint: str | None = None) -> LoglakeError:
    """Map any exception raised by confluent-kafka (or a future of it) to a loglake error."""
    if isinstance(exc, LoglakeError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return from_kafka_error(exc.args[0], operation, hint=hint)
    if isinstance(exc, concurrent.futures.TimeoutError | TimeoutError):
        return ClientError(
            f"{operation}: timed out", code=ErrorCode.request_timed_out, hint=hint
        )
    return ClientError(f"{operation}: {exc}", hint=hint)
