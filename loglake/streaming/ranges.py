"""Reading one partition's offsets ``[start, end)`` exactly once, in offset order.

Planning (driver, :func:`plan_ranges`): each partition's range is cut at the tiered end of a
:class:`~loglake.streaming.offsets.TierSnapshot` (one Delta table version):

* ``[start, min(end, tiered_end))`` is read from the snapshot's Parquet files with pyarrow
  (the file list travels with the range, so a task never replays the Delta log and always
  sees the planner's version); the table holds committed records only (aborted records and
  markers were never tiered), and quarantined rows (undecodable bytes the tierer kept,
  tier_rows.py) and markers of tables tiered before are ``is_control`` rows and skipped: their
  offsets are a gap;
* ``[max(start, tiered_end), end)`` is read from the brokers with a confluent-kafka consumer
  (assign, no group, nothing committed) at the query's ``kafka.isolation.level``
  (``read_committed`` by default: aborted records are skipped by the consumer, options.py).
  Offsets below the brokers' local log start that got tiered after the snapshot are served
  by the brokers from the table, so nothing depends on who tiers or when.

Because both halves come from one snapshot, an offset is read by exactly one of them. Ranges
may be split further (``minPartitions``); pieces never overlap.

Broker reading stops at the first record at or past ``end``, or at partition EOF at or past
``end`` (the remaining offsets were control records, aborted records or removed by compaction:
offsets may have gaps). ``end`` never exceeds what the planner saw as latest: the last
stable offset for ``read_committed`` (the end a read_committed consumer reaches, its EOF),
else the high watermark, so waiting is bounded and never on an open transaction;
``kafkaConsumer.pollTimeoutMs`` without progress raises :class:`RangeReadError`. A start that
the brokers no longer hold raises :class:`DataLossError` (``failOnDataLoss=true``) or skips to
the earliest offset.

Output: Arrow record batches in the Kafka source schema (schema.py). Runs inside Spark tasks
(one range per task); stateless apart from the one consumer it creates and closes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from loglake.streaming.errors import DataLossError, RangeReadError
from loglake.streaming.options import SourceOptions, TopicPartition
from loglake.streaming.schema import ARROW_HEADERS_TYPE, ARROW_TIMESTAMP_TYPE, arrow_schema

if TYPE_CHECKING:
    from loglake.segments.storage import Storage
    from loglake.streaming.offsets import TierSnapshot
    from loglake.streaming.typed_read import TypedColumns

BATCH_ROWS = 8192
"""Rows per Arrow batch handed to Spark from the broker side."""
_CONSUME_MAX = 5000
_POLL_S = 0.2


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition, read from ``files`` (tier) or the brokers."""

    topic: str
    partition: int
    start: int
    end: int
    files: tuple[str, ...] = ()
    """URIs of the tier files holding the range (empty: read from the brokers)."""
    from_tier: bool = False

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)


@dataclass(frozen=True)
class ReadContext:
    """What a task needs besides its range; plain data, pickled into every task."""

    bootstrap_servers: str
    storage: Storage | None
    options: SourceOptions
    typed: TypedColumns | None = None
    """Typed sides (``valueFormat=registry``, streaming/typed_read.py): decoded per batch."""
    typed_schema: pa.Schema | None = None
    """The Arrow schema Spark expects when ``typed`` is set."""


def plan_ranges(starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int],
                snapshots: Mapping[str, TierSnapshot | None], *,
                min_partitions: int | None = None) -> list[OffsetRange]:
    """Ranges covering ``[starts[tp], ends[tp])`` for each partition, split at the tiered end
    of the topic's snapshot (see the module docstring), then split further until there are at
    least ``min_partitions`` of them (largest first)."""
    ranges: list[OffsetRange] = []
    for (topic, partition), end in sorted(ends.items()):
        start = starts.get((topic, partition), end)
        if start >= end:
            continue
        snapshot = snapshots.get(topic)
        tiered_end = snapshot.ends.get(partition) if snapshot is not None else None
        if snapshot is not None and tiered_end is not None and start < tiered_end:
            stop = min(end, tiered_end)
            files = tuple(f.uri for f in snapshot.files.get(partition, ())
                          if f.max_offset >= start and f.min_offset < stop)
            if files:
                ranges.append(OffsetRange(topic, partition, start, stop, files, True))
            start = stop
        if start < end:
            ranges.append(OffsetRange(topic, partition, start, end))
    if min_partitions:
        ranges = _split(ranges, min_partitions, snapshots)
    return ranges


def _split(ranges: list[OffsetRange], wanted: int,
           snapshots: Mapping[str, TierSnapshot | None]) -> list[OffsetRange]:
    result = list(ranges)
    while len(result) < wanted:
        largest = max(range(len(result)), key=lambda i: result[i].size, default=None)
        if largest is None or result[largest].size < 2:
            break
        piece = result.pop(largest)
        middle = piece.start + piece.size // 2
        halves = [replace(piece, end=middle), replace(piece, start=middle)]
        if piece.from_tier:
            snapshot = snapshots[piece.topic]
            assert snapshot is not None
            files = snapshot.files.get(piece.partition, ())
            halves = [replace(h, files=tuple(f.uri for f in files if f.uri in piece.files
                                             and f.max_offset >= h.start
                                             and f.min_offset < h.end))
                      for h in halves]
            halves = [h for h in halves if h.files]
        result[largest:largest] = halves
    return result


def read_range(piece: OffsetRange, context: ReadContext) -> Iterator[pa.RecordBatch]:
    """The records of ``piece`` in offset order as Arrow batches (Kafka source schema; with
    ``context.typed``, the typed schema of streaming/typed_read.py)."""
    batches = _read_tier(piece, context) if piece.from_tier else _read_brokers(piece, context)
    if context.typed is None:
        yield from batches
        return
    from loglake.streaming.typed_read import StoreFallback, typed_batch

    assert context.typed_schema is not None
    source = StoreFallback(context.typed.schemas, context.typed.zookeeper)
    try:
        for batch in batches:
            yield typed_batch(batch, context.typed, source, context.typed_schema)
    finally:
        source.close()


# -- tier -------------------------------------------------------------------------------------


def _read_tier(piece: OffsetRange, context: ReadContext) -> Iterator[pa.RecordBatch]:
    import pyarrow.dataset as pads

    from loglake.segments.tier_rows import FILE_SCHEMA

    storage = context.storage
    assert storage is not None, "a tier range needs the storage"
    dataset = pads.dataset([storage.path_in_fs(uri) for uri in piece.files],
                           schema=FILE_SCHEMA, format="parquet",
                           filesystem=storage.pyarrow_filesystem())
    condition = ((pc.field("offset") >= piece.start) & (pc.field("offset") < piece.end)
                 & ~pc.field("is_control"))
    include_headers = context.options.include_headers
    columns = ["key", "value", "offset", "timestamp", "timestamp_type"]
    if include_headers:
        columns.append("headers")
    target = arrow_schema(include_headers)
    for batch in dataset.to_batches(columns=columns, filter=condition):
        if batch.num_rows:
            yield tier_rows_to_kafka(batch, piece.topic, piece.partition, target)


def tier_rows_to_kafka(rows: pa.RecordBatch, topic: str, partition: int,
                       target: pa.Schema) -> pa.RecordBatch:
    """Tier rows (tier_rows.FILE_SCHEMA columns) -> a batch of ``target`` (Kafka schema)."""
    n = rows.num_rows
    arrays: list[pa.Array] = [
        rows.column("key"),
        rows.column("value"),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        rows.column("offset"),
        rows.column("timestamp").cast(ARROW_TIMESTAMP_TYPE),
        rows.column("timestamp_type").cast(pa.int32()),
    ]
    if "headers" in target.names:
        headers = rows.column("headers").cast(ARROW_HEADERS_TYPE)
        empty = pc.equal(pc.list_value_length(headers), 0)
        arrays.append(pc.if_else(empty, pa.nulls(n, ARROW_HEADERS_TYPE), headers))
    return pa.RecordBatch.from_arrays(arrays, schema=target)


# -- brokers ----------------------------------------------------------------------------------


_TIMESTAMP_TYPES = {0: -1, 1: 0, 2: 1}
"""librdkafka's NOT_AVAILABLE / CREATE_TIME / LOG_APPEND_TIME -> Kafka's -1 / 0 / 1."""


class _Columns:
    """Column builders for broker records (plain lists, converted per batch)."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.clear()

    def clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int | None] = []
        self.types: list[int] = []
        self.headers: list[list[dict[str, Any]] | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, message: Any) -> None:
        self.keys.append(message.key())
        self.values.append(message.value())
        self.offsets.append(message.offset())
        kind, stamp = message.timestamp()
        self.types.append(_TIMESTAMP_TYPES.get(kind, -1))
        self.timestamps.append(stamp * 1000 if kind else None)
        if self.include_headers:
            headers = message.headers()
            self.headers.append([{"key": k, "value": v} for k, v in headers] if headers else None)

    def batch(self, topic: str, partition: int, target: pa.Schema) -> pa.RecordBatch:
        n = len(self)
        arrays: list[pa.Array] = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, pa.int64()).cast(ARROW_TIMESTAMP_TYPE),
            pa.array(self.types, pa.int32()),
        ]
        if self.include_headers:
            arrays.append(pa.array(self.headers, ARROW_HEADERS_TYPE))
        self.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=target)


def consumer_config(context: ReadContext) -> dict[str, Any]:
    """librdkafka settings of a range consumer: no group membership, no commits, EOF events,
    offsets out of range reported (not silently reset), the query's isolation level
    (``kafka.isolation.level``, read_committed by default); the security options
    (``options.security``), then the other ``kafka.*`` options, win."""
    from loglake.client._common import LIBRDKAFKA_LOGGER

    config: dict[str, Any] = {
        "bootstrap.servers": context.bootstrap_servers,
        "group.id": f"loglake-spark-{uuid.uuid4().hex}",
        "client.id": "loglake-spark",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "logger": LIBRDKAFKA_LOGGER,
    }
    config.update(context.options.security.librdkafka())
    config.update(context.options.kafka)
    config["isolation.level"] = context.options.isolation_level
    return config


def _read_brokers(piece: OffsetRange, context: ReadContext) -> Iterator[pa.RecordBatch]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from loglake.client.errors import passes_by_itself

    options = context.options
    target = arrow_schema(options.include_headers)
    consumer = Consumer(consumer_config(context))
    name = f"{piece.topic}-{piece.partition}"
    try:
        consumer.assign([TopicPartition(piece.topic, piece.partition, piece.start)])
        columns = _Columns(options.include_headers)
        position = piece.start
        end = piece.end
        patience = options.poll_timeout_ms / 1000
        deadline = time.monotonic() + patience
        while position < end:
            # asking for exactly what is left returns as soon as a gap-free range is complete
            messages = consumer.consume(num_messages=min(_CONSUME_MAX, end - position),
                                        timeout=_POLL_S)
            progressed = False
            for message in messages:
                error = message.error()
                if error is None:
                    offset = message.offset() or 0
                    if offset >= end:
                        position = end
                        break
                    if offset >= position:
                        columns.add(message)
                        position = offset + 1
                        progressed = True
                    continue
                code = error.code()
                if code == KafkaError._PARTITION_EOF:
                    eof = message.offset()
                    if eof is not None and eof >= end:
                        position = end
                        break
                elif code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                    position = _after_data_loss(consumer, piece, position, options)
                    progressed = True
                    if position >= end:
                        break
                    consumer.assign([TopicPartition(piece.topic, piece.partition, position)])
                elif error.fatal() or not passes_by_itself(error):
                    raise RangeReadError(f"reading {name} [{piece.start}, {end}) from "
                                         f"{context.bootstrap_servers}: {error.str()}")
            if len(columns) >= BATCH_ROWS or (position >= end and len(columns)):
                yield columns.batch(piece.topic, piece.partition, target)
            if progressed:
                deadline = time.monotonic() + patience
            elif position < end and time.monotonic() >= deadline:
                raise RangeReadError(
                    f"reading {name} [{piece.start}, {end}) from {context.bootstrap_servers}: "
                    f"no progress at offset {position} for {patience:g} s",
                    hint="check that the partition's leader is up (raise "
                    "kafkaConsumer.pollTimeoutMs to wait longer)",
                )
        if len(columns):
            yield columns.batch(piece.topic, piece.partition, target)
    finally:
        consumer.close()


def _after_data_loss(consumer: Any, piece: OffsetRange, position: int,
                     options: SourceOptions) -> int:
    from confluent_kafka import TopicPartition

    low, _high = consumer.get_watermark_offsets(
        TopicPartition(piece.topic, piece.partition), timeout=options.poll_timeout_ms / 1000,
        cached=False)
    if options.fail_on_data_loss or low <= position:
        raise DataLossError(
            f"offset {position} of {piece.topic}-{piece.partition} no longer exists "
            f"(earliest is now {low})",
            hint="deleted by retention while the query ran; set failOnDataLoss=false to skip",
        )
    return int(low)
