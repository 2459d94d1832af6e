"""Configuration and diagnostics shared by Producer, Consumer and Admin.

librdkafka retries connections forever and, left alone, prints its log lines to stderr. Every
SDK object therefore (1) routes librdkafka logs to the ``loglake.client.librdkafka`` logger
(silent unless the application configures logging), and (2) keeps the most recent cluster-level
error from ``error_cb`` in a :class:`ErrorTracker`, so that a timeout can say *why* the cluster
could not be reached instead of only that it was not. Callbacks run on the thread that calls
``poll``/``flush``/``consume``; the tracker only stores a reference, which is atomic in CPython.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError
from kio.schema.errors import ErrorCode

from loglake.client.errors import BrokerError, ClientError, from_exception, from_kafka_error
from loglake.client.security import SecurityConfig
from loglake.errors import LoglakeError

LIBRDKAFKA_LOGGER = logging.getLogger("loglake.client.librdkafka")
LIBRDKAFKA_LOGGER.addHandler(logging.NullHandler())

DEFAULT_CLIENT_ID = "loglake-python"



def bootstrap_string(bootstrap_servers: str | Sequence[str]) -> str:
    """``host:port[,host:port...]`` from a string or a sequence of ``host:port`` strings."""
    servers = (
        [bootstrap_servers] if isinstance(bootstrap_servers, str) else list(bootstrap_servers)
    )
    joined = ",".join(s.strip() for s in servers if s.strip())
    if not joined:
        raise ValueError("bootstrap_servers must name at least one host:port")
    return joined


class ErrorTracker:
    """Remembers the last global error librdkafka reported through ``error_cb``, and the
    first fatal one (a fenced transactional producer: nothing works after it)."""

    def __init__(self) -> None:
        self.last: KafkaError | None = None
        self.fatal: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        self.last = error
        if self.fatal is None and error.fatal():
            self.fatal = error

    def describe(self) -> str:
        """``"; last error: ..."`` or an empty string if nothing was reported."""
        return "" if self.last is None else f"; last error: {self.last.str()}"


def base_config(
    bootstrap_servers: str | Sequence[str],
    *,
    client_id: str,
    tracker: ErrorTracker,
    extra: Mapping[str, str] | None,
    security: SecurityConfig | None = None,
) -> dict[str, Any]:
    """The librdkafka settings common to all clients: these, then ``security``'s
    (:meth:`SecurityConfig.librdkafka`); ``extra`` overrides anything here."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap_string(bootstrap_servers),
        "client.id": client_id,
        "error_cb": tracker,
        "logger": LIBRDKAFKA_LOGGER,
    }
    if security is not None:
        config.update(security.librdkafka())
    if extra:
        config.update(extra)
    return config


def unreachable_error(
    operation: str,
    bootstrap: str,
    timeout_s: float,
    tracker: ErrorTracker,
    cause: LoglakeError | None = None,
) -> LoglakeError:
    """The error for a request the cluster did not answer.

    A timeout becomes "no answer from ... within N s" plus the last connection error; a transport
    failure (connection refused, closed by the broker) says why, preferring the last connection
    error over librdkafka's generic "Broker transport failure".
    Other errors (``cause`` being a :class:`BrokerError`, say) are returned unchanged.
    """
    hint = "check that a loglake broker is listening there (--bootstrap-server)"
    if cause is None or cause.code == ErrorCode.request_timed_out:
        return ClientError(
            f"{operation}: no answer from {bootstrap} within {timeout_s:g} s{tracker.describe()}",
            code=ErrorCode.request_timed_out,
            hint=hint,
        )
    if isinstance(cause, ClientError) and cause.code == ErrorCode.network_exception:
        reason = cause.message if tracker.last is None else tracker.last.str()
        return ClientError(
            f"{operation}: cannot reach {bootstrap} within {timeout_s:g} s: {reason}",
            code=ErrorCode.network_exception,
            kafka_name=cause.kafka_name,
            hint=hint,
        )
    return cause


def lookup_partitions(
    client: Any,
    topic: str,
    *,
    limit: float,
    bootstrap: str,
    tracker: ErrorTracker,
    serve_callbacks: Callable[[], object] | None = None,
) -> list[int]:
    """Partition ids of ``topic`` from a metadata request of a Producer or Consumer.

    Raises :class:`BrokerError` ``unknown_topic_or_partition`` when the topic does not exist and
    the "no answer" :class:`ClientError` when the cluster does not respond within ``limit``.
    ``serve_callbacks`` (a producer's ``poll(0)``; never a consumer's, which would eat a record)
    runs before building that error.
    """
    operation = f"metadata of topic {topic!r}"
    try:
        metadata = client.list_topics(topic, timeout=limit)
    except Exception as exc:
        if serve_callbacks is not None:
            serve_callbacks()  # lets error_cb tell the tracker why
        raise unreachable_error(
            operation, bootstrap, limit, tracker, from_exception(exc, operation)
        ) from exc
    entry = metadata.topics.get(topic)
    if entry is None or (
        entry.error is not None
        and entry.error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)
    ):
        raise BrokerError(
            f"topic {topic!r} does not exist",
            code=ErrorCode.unknown_topic_or_partition,
            hint="create it with 'loglake topics create'",
        )
    if entry.error is not None and not entry.partitions:
        raise from_kafka_error(entry.error, operation)
    return sorted(entry.partitions)
