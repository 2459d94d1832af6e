"""Exactly-once writes of ``format("loglake")`` (``.option("deliveryGuarantee", "exactly-once")``).

**Guarantee.** Every row of a micro-batch (streaming) or of a job (batch ``write``) reaches the
topic exactly once for ``read_committed`` consumers, across task retries, lost executors,
speculative task copies and, for streaming queries, restarts from the checkpoint (including a
driver that died after the tasks wrote but before Spark logged the batch as committed, which
makes Spark replay that batch).

**How.** Each write task is identified by ``(sink id, partition id, batch id)``:

* the *sink id* is stable across attempts and restarts: for a streaming query, a hash of the
  query id (kept in the checkpoint, so the same across restarts; Spark hands it to tasks as the
  local property ``sql.streaming.queryId``) and the ``topic`` option; for a batch ``write``, a
  random id drawn once on the driver for the job (every attempt of a task shares it);
* the *partition id* is the task's ``TaskContext.partitionId()``;
* the *batch id* is the micro-batch (local property ``streaming.sql.batchId``), 0 for a batch job.

The task uses a transactional producer with ``transactional.id = loglake-sink-<sink id>-<partition
id>``: its ``init_transactions`` fences any older attempt of the same task (a zombie whose
writes then never become visible) and aborts the transaction it left open. Then the task reads
its *marker*: the committed offset of the consumer group ``loglake-sink-<sink id>-<partition
id>`` on partition 0 of the marker topic (the ``topic`` option, else the topic of the task's
first row), read ``read_committed`` (OffsetFetch with require_stable, so an in-doubt transaction
is waited out). A marker above the batch id means an earlier attempt committed this batch: the
task writes nothing. Otherwise one transaction holds the task's rows AND the marker
(``send_offsets_to_transaction`` of offset ``batch id + 1`` for that group: TxnOffsetCommit is
atomic with the data), so the rows and "this batch is done" become visible together or not at
all. The driver's ``commit`` has nothing transactional left to do.

**Assumptions.** A replayed batch gives each partition id the same rows as the first attempt
(deterministic partitioning): Spark guarantees it for replayable sources (``format("loglake")``,
Kafka, files) and deterministic plans; a nondeterministic plan (``repartition(n)`` without keys
after a nondeterministic step, rows that depend on the clock) may write a row again under another
partition id, or skip one. Readers must use ``read_committed`` (the default of librdkafka and
``format("loglake")``; the Java client and Spark's Kafka source default to ``read_uncommitted``,
set ``isolation.level``); ``read_uncommitted`` readers also see aborted attempts.
The marker group's offsets must outlive the query's restart gap (groups without members keep
their offsets for the brokers' offset retention). A batch ``write`` that fails as a whole keeps
the tasks that committed (like Spark's own sinks, a job is not one transaction).

**Cost.** Per task and batch, on top of producing the rows: FindCoordinator and InitProducerId
(transaction coordinator), OffsetFetch (group coordinator), AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn, and the coordinator's markers to every written partition: about eight
extra round trips, and the rows become visible only at the commit (readers wait at the last
stable offset meanwhile). One transactional id and one marker group per partition id of the
write stage.

Pure helpers (identity, marker decision) are separate from the I/O so they are tested alone.
Runs inside Spark's Python workers, one call per task; not thread-safe.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING

import pyarrow as pa

from loglake.streaming.errors import SourceOptionError
from loglake.streaming.options import SourceOptions

if TYPE_CHECKING:
    from loglake.client.consumer import Consumer

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""Spark's local property with the streaming query's id (stable across restarts)."""
BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""Spark's local property with the micro-batch id of a streaming write task."""
PREFIX = "loglake-sink"
MARKER_PARTITION = 0
"""The marker offsets sit on this partition of the marker topic (every topic has it)."""
UNSTABLE_MARKER_WAIT_S = 60.0


@dataclass(frozen=True)
class TaskIdentity:
    """Who a write task is: stable across attempts of the task and restarts of the query."""

    sink_id: str
    partition: int
    batch_id: int

    @property
    def transactional_id(self) -> str:
        """The task's producer's ``transactional.id`` (shared by every batch of the task)."""
        return f"{PREFIX}-{self.sink_id}-{self.partition}"

    @property
    def marker_group(self) -> str:
        """The consumer group whose committed offset says which batches are done."""
        return f"{PREFIX}-{self.sink_id}-{self.partition}"

    @property
    def marker_offset(self) -> int:
        """The marker a committed write of this batch leaves."""
        return self.batch_id + 1


def stream_sink_id(query_id: str, topic: str | None) -> str:
    """The sink id of a streaming query: 16 hex digits of SHA-256 over query id and topic."""
    return hashlib.sha256(f"{query_id}\0{topic or ''}".encode()).hexdigest()[:16]


def batch_sink_id() -> str:
    """A fresh sink id for one batch ``write`` job (drawn on the driver)."""
    return uuid.uuid4().hex[:16]


def is_done(marker: int | None, batch_id: int) -> bool:
    """Whether a committed marker says batch ``batch_id`` was already written."""
    return marker is not None and marker > batch_id


def task_identity(sink_id: str | None, topic: str | None) -> TaskIdentity:
    """The identity of the running Spark task: ``sink_id`` for a batch job, ``None`` for a
    streaming query (the query id and batch id come from the task's local properties)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("exactly-once writes run inside Spark tasks only")
    partition = context.partitionId()
    if sink_id is not None:
        return TaskIdentity(sink_id, partition, 0)
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
    batch = context.getLocalProperty(BATCH_ID_PROPERTY)
    if not query_id or batch is None:
        raise SourceOptionError(
            "deliveryGuarantee exactly-once: the task carries no streaming query id or batch id",
            hint="use it with writeStream.format('loglake') or df.write.format('loglake')")
    return TaskIdentity(stream_sink_id(query_id, topic), partition, int(batch))


def check_options(options: SourceOptions) -> None:
    """Refuse librdkafka settings that would break the per-task transactional identity."""
    for key in ("transactional.id", "enable.idempotence", "acks"):
        if key in options.kafka:
            raise SourceOptionError(
                f"option 'kafka.{key}' cannot be set with deliveryGuarantee exactly-once: the "
                f"sink sets it for every task")


def peek_topic(batches: Iterator[pa.RecordBatch], options: SourceOptions
               ) -> tuple[str | None, Iterator[pa.RecordBatch]]:
    """The marker topic (the ``topic`` option, else the first row's ``topic``; ``None`` when the
    task has no rows) and the batches, unconsumed."""
    if options.sink_topic is not None:
        return options.sink_topic, batches
    for batch in batches:
        if batch.num_rows:
            first = batch.column("topic")[0].as_py()
            if not first:
                raise SourceOptionError("row 1 of the task has a null topic")
            return str(first), chain([batch], batches)
    return None, iter(())


def write_exactly_once(
    batches: Iterator[pa.RecordBatch],
    *,
    bootstrap: str,
    options: SourceOptions,
    identity: TaskIdentity,
    marker_topic: str,
    send_rows: Callable[..., int],
) -> int | None:
    """One transaction with the rows of ``batches`` and the task's marker; returns the rows
    written, or ``None`` when the marker says an earlier attempt already wrote this batch.

    ``send_rows(producer, batches)`` sends every row and returns how many (the sink's row
    encoding). Raises the first failure after aborting the transaction (Spark retries the task).
    """
    from loglake.client.consumer import Consumer
    from loglake.client.producer import Producer
    from loglake.errors import LoglakeError

    extra = dict(options.kafka)
    producer = Producer(bootstrap, transactional_id=identity.transactional_id,
                        client_id="loglake-spark", security=options.security, extra=extra)
    # the marker is read committed (stable) whatever kafka.isolation.level says for sources
    marker_extra = {k: v for k, v in extra.items() if k != "isolation.level"}
    with Consumer(bootstrap, group_id=identity.marker_group, isolation_level="read_committed",
                  client_id="loglake-spark", security=options.security,
                  extra=marker_extra) as marker:
        producer.init_transactions()  # fences older attempts, aborts what they left open
        if is_done(_read_marker(marker, marker_topic), identity.batch_id):
            return None
        producer.begin_transaction()
        try:
            rows = send_rows(producer, batches)
            producer.send_offsets_to_transaction(
                {(marker_topic, MARKER_PARTITION): identity.marker_offset},
                marker.group_metadata())
            producer.commit_transaction()
        except BaseException:
            with suppress(LoglakeError):
                producer.abort_transaction()
            raise
    return rows


def _read_marker(marker: Consumer, topic: str) -> int | None:
    """The marker group's committed offset, waiting out an in-doubt (unstable) commit."""
    from kio.schema.errors import ErrorCode

    from loglake.errors import LoglakeError

    deadline = time.monotonic() + UNSTABLE_MARKER_WAIT_S
    while True:
        try:
            return marker.committed(topic, [MARKER_PARTITION])[MARKER_PARTITION]
        except LoglakeError as exc:
            if exc.code != ErrorCode.unstable_offset_commit or time.monotonic() >= deadline:
                raise
        time.sleep(0.2)
