"""Consume-transform-produce, exactly once: :func:`run_transform`.

The loop, as Kafka's exactly-once processors run it (KIP-98, KIP-447)::

    consumer joins group G on SOURCE (read_committed, no auto commit)
    producer (transactional id T) init_transactions   <- fences an older instance of T
    repeat:
        records = up to max_batch records from one poll round
        begin_transaction
        send func(record) for each record to DEST
        send_offsets_to_transaction({partition: last offset + 1}, consumer.group_metadata())
        commit_transaction                             <- output and offsets, atomically

**Guarantee**: every input record's outputs reach DEST exactly once for read_committed readers,
and the group's committed offsets match what was written, across crashes and restarts of the
processor: a batch either commits its outputs together with the offsets past it, or neither
(a restarted processor resumes at the committed offsets, and its ``init_transactions`` aborts
a transaction its predecessor left open). Requires ``func`` to be deterministic for an identical
output, and DEST read with ``isolation_level="read_committed"``.

**Aborts**: on an :class:`~loglake.client.errors.AbortableTransactionError` (a record the
brokers refused or that timed out, raised by the next ``send`` or by the commit; a rebalance
that moved the generation on) the transaction is aborted and the consumer rewinds every
partition of the batch to the batch's first offset, which is where the last committed
transaction left the group's offsets (each batch starts where the previous committed one
ended); the batch is then read and processed again. A
:class:`~loglake.client.errors.FatalTransactionError` is raised: this instance must stop. That
happens when a newer instance with the same transactional id runs, and also when a batch took
longer than ``transaction_timeout_ms``: the coordinator aborts the transaction and bumps the
producer's epoch, which fences this producer (as with Kafka's clients). Nothing of that batch
becomes visible; a restarted processor resumes at the committed offsets.

Several processors may share group G (each with its own transactional id, e.g.
``<app>-<instance>``); the group spreads SOURCE's partitions over them. Processing happens
between polls, so a rebalance never lands inside a transaction.

Not thread-safe: one call runs one processor on the calling thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from loglake.client._common import DEFAULT_CLIENT_ID
from loglake.client.consumer import Consumer, OffsetReset
from loglake.client.errors import (
    AbortableTransactionError,
    FatalTransactionError,
    TransactionError,
)
from loglake.client.model import HeadersInput, Record, TopicPartitionKey
from loglake.client.producer import DEFAULT_TRANSACTION_TIMEOUT_MS, Producer
from loglake.client.security import SecurityConfig

_COMMIT_ATTEMPTS = 3
_JOIN_WAIT_S = 30.0
"""How much longer than ``idle_timeout_s`` to wait for the group to assign partitions."""


@dataclass(frozen=True)
class Output:
    """One record for the destination topic (``partition`` None: by key)."""

    value: bytes | str | None
    key: bytes | str | None = None
    headers: HeadersInput | None = None
    partition: int | None = None


TransformResult = Output | bytes | str | Iterable[Output | bytes | str] | None
"""What ``func`` returns for one input record: ``None`` (nothing), one :class:`Output`, a value
(written with the input record's key), or an iterable of those."""


@dataclass
class TransformStats:
    """What :func:`run_transform` did: committed transactions, input records they covered,
    output records they wrote, transactions aborted (and redone)."""

    transactions: int = 0
    records_in: int = 0
    records_out: int = 0
    aborts: int = 0
    committed: dict[TopicPartitionKey, int] = field(default_factory=dict)
    """The offsets committed last, per source partition."""


def run_transform(
    bootstrap_servers: str | Sequence[str],
    source_topic: str,
    dest_topic: str,
    func: Callable[[Record], TransformResult],
    *,
    group_id: str,
    transactional_id: str,
    max_batch: int = 500,
    poll_timeout_s: float = 0.2,
    idle_timeout_s: float | None = 5.0,
    max_records: int | None = None,
    should_stop: Callable[[], bool] | None = None,
    auto_offset_reset: OffsetReset = "earliest",
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
    max_aborts: int = 10,
    client_id: str = DEFAULT_CLIENT_ID,
    security: SecurityConfig | Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> TransformStats:
    """Read ``source_topic`` as group ``group_id``, write ``func(record)`` to ``dest_topic``,
    one transaction per poll batch (see the module docstring); return what was done.

    Stops when ``should_stop()`` is true (checked between batches), after ``max_records`` input
    records were committed, or when no record arrived for ``idle_timeout_s`` (None: never)
    since the last record or the last assignment of partitions (the group's first assignment
    is waited for up to ``idle_timeout_s`` + 30 s).
    Raises :class:`~loglake.client.errors.FatalTransactionError` when fenced, the abortable
    error itself after ``max_aborts`` consecutive aborts, and whatever ``func`` raises (after
    aborting the open transaction: nothing of that batch becomes visible).
    """
    if max_batch <= 0:
        raise ValueError(f"max_batch must be positive, got {max_batch}")
    if max_records is not None and max_records <= 0:
        raise ValueError(f"max_records must be positive, got {max_records}")
    stats = TransformStats()
    producer = Producer(bootstrap_servers, transactional_id=transactional_id,
                        transaction_timeout_ms=transaction_timeout_ms,
                        delivery_timeout_ms=min(30_000, transaction_timeout_ms),
                        client_id=client_id, security=security, extra=extra)
    with Consumer(bootstrap_servers, group_id=group_id, auto_offset_reset=auto_offset_reset,
                  isolation_level="read_committed", client_id=client_id, security=security,
                  extra=extra) as consumer:
        consumer.partitions_for(source_topic)  # fail fast on a missing topic
        producer.partitions_for(dest_topic)
        producer.init_transactions()
        assigned_at: list[float] = []
        consumer.subscribe([source_topic],
                           on_assign=lambda _: assigned_at.append(time.monotonic()))
        started = idle_since = time.monotonic()
        consecutive_aborts = 0
        while not (should_stop is not None and should_stop()):
            if max_records is not None and stats.records_in >= max_records:
                break
            wanted = max_batch if max_records is None else min(
                max_batch, max_records - stats.records_in)
            batch = _poll_batch(consumer, wanted, poll_timeout_s)
            if not batch:
                now = time.monotonic()
                if idle_timeout_s is not None and (
                        now - max(idle_since, assigned_at[-1]) >= idle_timeout_s
                        if assigned_at else now - started >= idle_timeout_s + _JOIN_WAIT_S):
                    break
                continue
            idle_since = time.monotonic()
            try:
                written = _one_transaction(producer, consumer, batch, dest_topic, func)
            except AbortableTransactionError:
                consecutive_aborts += 1
                stats.aborts += 1
                producer.abort_transaction()
                _rewind(consumer, batch)
                if consecutive_aborts >= max_aborts:
                    raise
                continue
            consecutive_aborts = 0
            stats.transactions += 1
            stats.records_in += len(batch)
            stats.records_out += written
            stats.committed.update(_next_offsets(batch))
    producer.flush(0)
    return stats


def _poll_batch(consumer: Consumer, wanted: int, timeout_s: float) -> list[Record]:
    """Up to ``wanted`` records: wait up to ``timeout_s`` for the first, then take what is
    already buffered."""
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    batch = [first]
    while len(batch) < wanted:
        record = consumer.poll(0)
        if record is None:
            break
        batch.append(record)
    return batch


def _one_transaction(producer: Producer, consumer: Consumer, batch: list[Record],
                     dest_topic: str, func: Callable[[Record], TransformResult]) -> int:
    producer.begin_transaction()
    written = 0
    try:
        for record in batch:
            for output in _outputs(func(record), record):
                producer.send(dest_topic, output.value, key=output.key, headers=output.headers,
                              partition=output.partition)
                written += 1
        producer.send_offsets_to_transaction(_next_offsets(batch), consumer.group_metadata())
    except AbortableTransactionError:
        raise
    except BaseException:
        producer.abort_transaction()
        raise
    for attempt in range(_COMMIT_ATTEMPTS):
        try:
            producer.commit_transaction()
            break
        except TransactionError as exc:
            # a commit that timed out may be repeated (librdkafka resumes it)
            if isinstance(exc, AbortableTransactionError | FatalTransactionError) or (
                    not exc.retriable or attempt == _COMMIT_ATTEMPTS - 1):
                raise
    return written


def _outputs(result: TransformResult, record: Record) -> list[Output]:
    if result is None:
        return []
    if isinstance(result, Output):
        return [result]
    if isinstance(result, bytes | str):
        return [Output(result, key=record.key)]
    outputs: list[Output] = []
    for item in result:
        if isinstance(item, Output):
            outputs.append(item)
        elif isinstance(item, bytes | str):
            outputs.append(Output(item, key=record.key))
        else:
            raise TypeError(f"transform result items must be Output, bytes or str, "
                            f"got {type(item).__name__}")
    return outputs


def _next_offsets(batch: Iterable[Record]) -> dict[TopicPartitionKey, int]:
    offsets: dict[TopicPartitionKey, int] = {}
    for record in batch:
        key = (record.topic, record.partition)
        offsets[key] = max(offsets.get(key, 0), record.offset + 1)
    return offsets


def _rewind(consumer: Consumer, batch: Iterable[Record]) -> None:
    """Seek every partition of ``batch`` back to its first offset in the batch (= the group's
    committed offset: the previous transaction committed exactly up to there)."""
    first: dict[TopicPartitionKey, int] = {}
    for record in batch:
        key = (record.topic, record.partition)
        first[key] = min(first.get(key, record.offset), record.offset)
    assigned = set(consumer.assignment())
    for (topic, partition), offset in first.items():
        if (topic, partition) in assigned:  # a partition revoked meanwhile restarts elsewhere
            consumer.seek(topic, partition, offset)
