"""Writing rows to topics: ``df.write.format("loglake")`` and ``writeStream.format("loglake")``.

Input columns, as Spark's Kafka sink takes them (other columns are ignored):

==============  ===========================================================================
``value``       required; string (UTF-8) or binary; null writes a tombstone
``key``         optional; string or binary
``topic``       string; required unless the ``topic`` option is set (the option wins)
``partition``   optional int; null or absent: the partitioner chooses (murmur2 of the key,
                as Kafka's Java client)
``headers``     optional ``array<struct<key: string, value: binary>>``
==============  ===========================================================================

With ``valueSchema.subject`` (``keySchema.subject``) the ``value`` (``key``) column may have any
type the subject's schema maps to (a struct for a record) and is serialized with that schema
into Confluent's wire format (streaming/typed_write.py).

Delivery guarantee (option ``deliveryGuarantee``):

* ``at-least-once`` (default): each task produces its rows with one idempotent ``acks=all``
  producer (loglake.client.Producer) and flushes before it returns its commit message, so a
  task that succeeded has every row acknowledged by the in-sync replicas. A task that fails
  raises the first delivery error; Spark retries the task, which may write some rows twice, and
  a streaming query restarted after a driver crash may replay a whole micro-batch: like Spark's
  Kafka sink this is at-least-once (idempotence only removes duplicates from the producer's own
  retries).
* ``exactly-once``: each task writes its rows and a "batch done" marker in one Kafka
  transaction with a transactional id stable across attempts and restarts, and skips a batch
  whose marker is already committed (``streaming/exactly_once.py``: the guarantee, its
  assumptions, its cost). Read the topic ``read_committed``.

Save modes: ``append``. (Spark offers Python data sources only append and overwrite, so the
default ``errorifexists`` is refused by Spark itself; overwrite is refused here: a log cannot be
overwritten.)

The writers are pickled to executors: they hold only options, the bootstrap string and the
column layout. Not thread-safe (Spark calls ``write`` once per task).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from loglake.errors import UnknownTopicError
from loglake.streaming import exactly_once
from loglake.streaming.errors import SourceOptionError
from loglake.streaming.offsets import ClusterView
from loglake.streaming.options import SourceOptions

if TYPE_CHECKING:
    from loglake.client.producer import Producer
    from loglake.streaming.typed_write import SchemaWriter

FLUSH_TIMEOUT_S = 120.0


@dataclass
class WrittenRows(WriterCommitMessage):
    """Commit message of one task: how many rows it produced (``skipped``: exactly-once found
    the task's batch already written by an earlier attempt and wrote nothing)."""

    rows: int
    skipped: bool = False


@dataclass(frozen=True)
class SinkLayout:
    """Which input columns exist (validated against the rules in the module docstring)."""

    has_key: bool
    has_topic: bool
    has_partition: bool
    has_headers: bool
    writers: tuple[SchemaWriter, ...] = ()
    """Sides serialized with a registered schema (``<side>Schema.subject``)."""


def _is_headers(data_type: DataType) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in data_type.elementType.fields}
    return set(fields) == {"key", "value"} and isinstance(fields["key"], StringType) and (
        isinstance(fields["value"], BinaryType | StringType))


def sink_layout(options: SourceOptions, schema: StructType) -> SinkLayout:
    """Check ``schema`` against the sink's column rules; raise :class:`SourceOptionError`.
    Resolves the schemas of ``<side>Schema.subject`` (ZooKeeper) when given."""
    fields = {f.name: f.dataType for f in schema.fields}
    text_or_bytes = (StringType, BinaryType)
    typed = {side.side for side in (options.key_schema, options.value_schema)
             if side.subject is not None}
    if "value" not in fields:
        raise SourceOptionError("writing to loglake needs a 'value' column (string or binary)")
    if "value" not in typed and not isinstance(fields["value"], text_or_bytes):
        raise SourceOptionError(f"column 'value' must be string or binary, "
                                f"got {fields['value'].simpleString()}",
                                hint="or serialize it with a registered schema: option "
                                "'valueSchema.subject'")
    if "key" in fields and "key" not in typed and not isinstance(fields["key"], text_or_bytes):
        raise SourceOptionError(f"column 'key' must be string or binary, "
                                f"got {fields['key'].simpleString()}")
    if options.sink_topic is None:
        if "topic" not in fields:
            raise SourceOptionError(
                "writing to loglake needs a 'topic' column or the 'topic' option")
        if not isinstance(fields["topic"], StringType):
            raise SourceOptionError(f"column 'topic' must be string, "
                                    f"got {fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise SourceOptionError(f"column 'partition' must be int, "
                                f"got {fields['partition'].simpleString()}")
    if "headers" in fields and not _is_headers(fields["headers"]):
        raise SourceOptionError(f"column 'headers' must be array<struct<key: string, "
                                f"value: binary>>, got {fields['headers'].simpleString()}")
    writers: tuple[SchemaWriter, ...] = ()
    if typed:
        from loglake.streaming.typed_write import resolve_writers

        writers = resolve_writers(options)
    return SinkLayout("key" in fields, "topic" in fields, "partition" in fields,
                      "headers" in fields, writers)


def produce(batches: Iterator[pa.RecordBatch], *, bootstrap: str, options: SourceOptions,
            layout: SinkLayout) -> int:
    """Produce every row of ``batches``, flush, and return the row count; raise the first
    delivery error (:class:`~loglake.errors.LoglakeError`). At-least-once."""
    from loglake.client.errors import ClientError
    from loglake.client.producer import Producer
    from loglake.errors import LoglakeError

    failures: list[LoglakeError] = []
    producer = Producer(bootstrap, acks="all", idempotence=True, client_id="loglake-spark",
                        security=options.security, extra=dict(options.kafka))
    rows = send_rows(producer, batches, options=options, layout=layout, failures=failures)
    pending = producer.flush(FLUSH_TIMEOUT_S)
    if failures:
        raise failures[0]
    if pending:
        raise ClientError(f"{pending} records to {bootstrap} still undelivered after "
                          f"{FLUSH_TIMEOUT_S:g} s")
    return rows


def send_rows(producer: Producer, batches: Iterator[pa.RecordBatch], *,
              options: SourceOptions, layout: SinkLayout, failures: list[Any]) -> int:
    """Send every row of ``batches`` with ``producer`` (no flush); returns the row count.
    The first delivery error lands in ``failures`` and is raised at the next row."""
    from loglake.errors import LoglakeError

    def on_delivery(_metadata: object, error: LoglakeError | None) -> None:
        if error is not None and not failures:
            failures.append(error)

    rows = 0
    for batch in batches:
        if layout.writers:
            from loglake.streaming.typed_write import encode_batch

            batch = encode_batch(batch, layout.writers, rows)
        columns: dict[str, list[Any]] = {
            name: batch.column(name).to_pylist()
            for name in ("value", "key", "topic", "partition", "headers")
            if name in batch.schema.names
        }
        values = columns["value"]
        keys = columns.get("key")
        topics = columns.get("topic")
        partitions = columns.get("partition") if layout.has_partition else None
        headers = columns.get("headers") if layout.has_headers else None
        for i, value in enumerate(values):
            topic = options.sink_topic or (topics[i] if topics is not None else None)
            if not topic:
                raise SourceOptionError(f"row {rows + 1} of the task has a null topic")
            pairs = None
            if headers is not None and headers[i]:
                pairs = [(h["key"], h["value"]) for h in headers[i]]
            producer.send(topic, value, key=keys[i] if keys is not None else None,
                          headers=pairs,
                          partition=partitions[i] if partitions is not None else None,
                          on_delivery=on_delivery)
            rows += 1
            if failures:
                raise failures[0]
    return rows


def write_task(batches: Iterator[pa.RecordBatch], *, bootstrap: str, options: SourceOptions,
               layout: SinkLayout, sink_id: str | None) -> WrittenRows:
    """One write task with the configured delivery guarantee (``sink_id``: the batch job's
    id for exactly-once batch writes, ``None`` for streaming)."""
    if options.delivery_guarantee != "exactly-once":
        return WrittenRows(produce(batches, bootstrap=bootstrap, options=options,
                                   layout=layout))
    topic, batches = exactly_once.peek_topic(batches, options)
    if topic is None:
        return WrittenRows(0)  # no rows: nothing to write, nothing to mark
    identity = exactly_once.task_identity(sink_id, options.sink_topic)
    failures: list[Any] = []

    def send(producer: Producer, rows: Iterator[pa.RecordBatch]) -> int:
        return send_rows(producer, rows, options=options, layout=layout, failures=failures)

    written = exactly_once.write_exactly_once(
        batches, bootstrap=bootstrap, options=options, identity=identity, marker_topic=topic,
        send_rows=send)
    return WrittenRows(0, skipped=True) if written is None else WrittenRows(written)


def _bootstrap(options: SourceOptions) -> str:
    """The brokers to produce to; checks that the ``topic`` option names an existing topic
    (records for a missing topic would only fail after the delivery timeout)."""
    view = ClusterView(options)
    try:
        bootstrap = view.bootstrap_servers()
        if options.sink_topic is not None and options.sink_topic not in (
                view.admin().list_topics()):
            raise UnknownTopicError(f"option 'topic': topic {options.sink_topic!r} does not exist",
                                    hint="create it with 'loglake topics create'")
        return bootstrap
    finally:
        view.close()


class TopicWriter(DataSourceArrowWriter):
    """``df.write.format("loglake")``: each task produces its rows and flushes."""

    def __init__(self, options: SourceOptions, bootstrap: str, layout: SinkLayout) -> None:
        self.options = options
        self.bootstrap = bootstrap
        self.layout = layout
        # one id per write job, drawn on the driver: every attempt of a task shares it
        self.sink_id = exactly_once.batch_sink_id()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRows:
        return write_task(iterator, bootstrap=self.bootstrap, options=self.options,
                          layout=self.layout, sink_id=self.sink_id)


class TopicStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("loglake")``: like :class:`TopicWriter` per micro-batch."""

    def __init__(self, options: SourceOptions, bootstrap: str, layout: SinkLayout) -> None:
        self.options = options
        self.bootstrap = bootstrap
        self.layout = layout

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRows:
        return write_task(iterator, bootstrap=self.bootstrap, options=self.options,
                          layout=self.layout, sink_id=None)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Rows are acknowledged (or, exactly-once, their transactions committed together with
        the batch markers) when each task returns: nothing left to commit."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records already acknowledged stay (at-least-once, as Spark's Kafka sink); committed
        exactly-once tasks stay too, and their markers make a replay skip them."""


def batch_writer(options: SourceOptions, schema: StructType, overwrite: bool) -> TopicWriter:
    if overwrite:
        raise SourceOptionError(
            "save mode overwrite is not supported: topics are append-only logs",
            hint="use mode('append')",
        )
    layout = sink_layout(options, schema)
    if options.delivery_guarantee == "exactly-once":
        exactly_once.check_options(options)
    return TopicWriter(options, _bootstrap(options), layout)


def stream_writer(options: SourceOptions, schema: StructType) -> TopicStreamWriter:
    layout = sink_layout(options, schema)
    if options.delivery_guarantee == "exactly-once":
        exactly_once.check_options(options)
    return TopicStreamWriter(options, _bootstrap(options), layout)
