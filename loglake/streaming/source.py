"""The Spark data source ``loglake``: batch and streaming reads of topics (tier + hot tail).

``spark.read.format("loglake")`` / ``spark.readStream.format("loglake")`` take the options of
Spark's Kafka source (options.py) and produce its row schema (schema.py), so ``format("kafka")``
can be swapped for ``format("loglake")``. Writes (``df.write`` / ``writeStream``) are in
sink.py; :func:`loglake.streaming.register` registers the source under the short name
``loglake``.

Where each hook runs (PySpark's datasource.py contract):

* ``reader()`` / ``streamReader()`` / ``pushFilters()`` / ``partitions()`` run in Python workers
  on the driver and talk to ZooKeeper and the brokers (:class:`ClusterView`);
* ``read()`` runs in tasks: it reads one :class:`RangePartition` (an
  :class:`~loglake.streaming.ranges.OffsetRange` plus its :class:`ReadContext`) and keeps no
  state between calls;
* the stream reader object lives for the whole query in one driver-side worker:
  ``initialOffset`` / ``latestOffset`` / ``partitions`` / ``commit`` / ``stop`` are called on it
  one at a time, so it may keep its cluster connection and trigger bookkeeping.

Offsets are Spark-Kafka JSON: ``{"topic": {"0": 23}}``, next offset to read per partition.
A micro-batch ``(start, end]`` reads ``[start[tp], end[tp])`` per partition; a partition absent
from ``start`` (discovered later) is read from its earliest offset, as Spark's Kafka source does.
Replaying a batch after a restart re-plans the same offsets, so the records are the same.

Isolation (``kafka.isolation.level``, options.py): by default every read sees committed data
only. The tier holds committed records only, and a batch's or micro-batch's ``latest`` end is
the last stable offset, read with a read_committed consumer, so an open transaction holds a
stream at its first offset (as it holds a read_committed Kafka consumer) and its records
appear, if committed, in a later micro-batch. Offsets may have gaps (markers, aborted
records); ``read_uncommitted`` reads up to the high watermark instead.

Filter pushdown (batch reads; needs ``spark.sql.python.filterPushdown.enabled``, which
:func:`loglake.streaming.register` turns on): ``topic`` and ``partition`` equality / IN and
``offset`` comparisons prune the planned ranges exactly; ``timestamp >= / >`` moves each
partition's start to the first offset at that time (ListOffsets by time) and is still checked by
Spark, since timestamps need not grow with offsets.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from loglake.streaming.errors import DataLossError, SourceOptionError
from loglake.streaming.offsets import (
    ClusterView,
    PartitionOffsets,
    check_data_loss,
    from_json_offsets,
    rate_limit,
    to_json_offsets,
)
from loglake.streaming.options import SourceOptions, TopicPartition, parse_options
from loglake.streaming.ranges import OffsetRange, ReadContext, plan_ranges, read_range
from loglake.streaming.schema import spark_schema

if TYPE_CHECKING:
    from loglake.streaming.typed_read import TypedColumns

SHORT_NAME = "loglake"


class RangePartition(InputPartition):
    """One Spark input partition: an offset range and what is needed to read it."""

    def __init__(self, piece: OffsetRange, context: ReadContext) -> None:
        super().__init__(None)
        self.piece = piece
        self.context = context

    def __repr__(self) -> str:
        p = self.piece
        where = "tier" if p.from_tier else "brokers"
        return f"RangePartition({p.topic}-{p.partition} [{p.start}, {p.end}) from {where})"


class LoglakeDataSource(DataSource):
    """``format("loglake")``: see the module docstring and options.py."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> StructType:
        raw = str(self.options.get("includeHeaders", "false")).strip().lower()
        base = spark_schema(raw == "true")
        if not _decodes(self.options):
            return base
        from loglake.streaming.typed_read import typed_spark_schema

        typed = _typed_columns(parse_options(_schema_options(self.options), "batch"))
        return typed_spark_schema(base, typed)

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(parse_options(self.options, "batch"), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(parse_options(self.options, "stream"), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from loglake.streaming.sink import batch_writer

        return batch_writer(parse_options(self.options, "write"), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from loglake.streaming.sink import stream_writer

        return stream_writer(parse_options(self.options, "write"), schema)


# -- typed sides (valueFormat / keyFormat = registry: streaming/typed_read.py) ------------------

_OFFSET_OPTION_PREFIXES = ("starting", "ending", "maxoffsetspertrigger", "minoffsetspertrigger",
                           "maxtriggerdelay", "loglake.asofoffsets")


def _decodes(options: Mapping[str, str]) -> bool:
    """Whether the options ask for a typed side (checked before any parsing)."""
    return any(str(k).lower() in ("valueformat", "keyformat")
               and str(v).strip().lower() == "registry" for k, v in options.items()
               if v is not None)


def _schema_options(options: Mapping[str, str]) -> dict[str, str]:
    """The options that decide the row schema (offsets, which batch and stream validate
    differently, are checked when the reader is made)."""
    return {k: v for k, v in options.items()
            if not str(k).lower().startswith(_OFFSET_OPTION_PREFIXES)}


def _typed_columns(options: SourceOptions) -> TypedColumns:
    """The typed sides of a read, types computed from the cluster (driver)."""
    from loglake.streaming.typed_read import resolve

    assert options.subscription is not None
    view = ClusterView(options)
    try:
        topics = sorted({t for t, _ in view.topic_partitions(options.subscription)})
        if not topics:
            raise SourceOptionError(
                "a read with valueFormat/keyFormat=registry needs its topics to exist: no "
                "topic matches the subscription")
        catalog = view.catalog()
        assert catalog is not None  # the options need zookeeper for registry
        typed = resolve(catalog, view.storage(), topics, options)
        assert typed is not None
        return typed
    finally:
        view.close()


def _typed_context(view: ClusterView, schema: StructType | None, options: SourceOptions,
                   topics: Iterable[str]) -> tuple[TypedColumns | None, pa.Schema | None]:
    """The typed sides for the tasks of one planning step: the types from ``schema`` (as
    Spark fixed them) and a snapshot of the subjects' schemas taken now."""
    from loglake.streaming.typed_read import from_schema, typed_arrow_schema, with_snapshot

    if schema is None:
        return None, None
    typed = from_schema(schema, options)
    if typed is None:
        return None, None
    catalog = view.catalog()
    assert catalog is not None
    return with_snapshot(typed, catalog, topics), typed_arrow_schema(schema)


# -- planning shared by batch and stream --------------------------------------------------------


def plan(view: ClusterView, starts: PartitionOffsets, ends: PartitionOffsets,
         options: SourceOptions, *, what: str,
         schema: StructType | None = None) -> list[RangePartition]:
    """Input partitions reading ``[starts[tp], ends[tp])`` (missing start: earliest)."""
    partitions = sorted(ends)
    earliest = view.list_offsets(partitions, "earliest") if partitions else {}
    starts = {tp: starts.get(tp, earliest.get(tp, 0)) for tp in partitions}
    starts = check_data_loss(starts, earliest, fail=options.fail_on_data_loss, what=what)
    backwards = {tp: (starts[tp], ends[tp]) for tp in partitions if starts[tp] > ends[tp]}
    if backwards and options.fail_on_data_loss:
        listed = ", ".join(f"{t}-{p} ({s} > {e})" for (t, p), (s, e) in sorted(backwards.items()))
        raise DataLossError(
            f"{what}: start offset is past the end in {listed}",
            hint="the partition was truncated or re-created; set failOnDataLoss=false to skip",
        )
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    snapshots = {topic: view.tier_snapshot(topic, numbers) for topic, numbers in by_topic.items()}
    ranges = plan_ranges(starts, ends, snapshots, min_partitions=options.min_partitions)
    typed, typed_schema = _typed_context(view, schema, options, by_topic)
    context = ReadContext(view.bootstrap_servers(), view.storage(), options, typed,
                          typed_schema)
    return [RangePartition(r, context) for r in ranges]


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if isinstance(partition, RangePartition):
        yield from read_range(partition.piece, partition.context)


# -- batch --------------------------------------------------------------------------------------


@dataclass
class PushedFilters:
    """What the batch reader took over from Spark's filters (an AND of them)."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    offset_from: int = 0
    offset_until: int | None = None
    timestamp_from_ms: int | None = None

    def allows(self, tp: TopicPartition) -> bool:
        return (self.topics is None or tp[0] in self.topics) and (
            self.partitions is None or tp[1] in self.partitions)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _timestamp_ms(value: object) -> int | None:
    import datetime as dt

    if isinstance(value, dt.datetime):
        return max(int(value.timestamp() * 1000) - 1, 0)  # floor, a millisecond of slack
    return None


class BatchReader(DataSourceReader):
    """``spark.read.format("loglake")``: one input partition per offset range."""

    def __init__(self, options: SourceOptions, schema: StructType | None = None) -> None:
        self.options = options
        self.schema = schema
        self.pushed = PushedFilters()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for item in filters:
            if not self._take(item):
                yield item  # not taken over (or only used to prune): Spark evaluates it

    def _take(self, item: Filter) -> bool:
        """Record what ``item`` implies; True when the planned ranges enforce it exactly."""
        pushed = self.pushed
        column = getattr(item, "attribute", ("",))
        name = column[0] if len(column) == 1 else ""
        value: Any = getattr(item, "value", None)
        if name in ("topic", "partition") and isinstance(item, EqualTo | In):
            values = {value} if isinstance(item, EqualTo) else set(value)
            if name == "topic" and all(isinstance(v, str) for v in values):
                pushed.topics = frozenset(values) if pushed.topics is None else (
                    pushed.topics & values)
                return True
            if name == "partition" and all(_is_int(v) for v in values):
                pushed.partitions = frozenset(values) if pushed.partitions is None else (
                    pushed.partitions & values)
                return True
            return False
        if name == "offset" and _is_int(value) and isinstance(
                item, EqualTo | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual):
            number = int(value)
            bounds: dict[type, tuple[int, int | None]] = {
                EqualTo: (number, number + 1), GreaterThan: (number + 1, None),
                GreaterThanOrEqual: (number, None), LessThan: (0, number),
                LessThanOrEqual: (0, number + 1),
            }
            low, high = bounds[type(item)]
            pushed.offset_from = max(pushed.offset_from, low)
            if high is not None:
                pushed.offset_until = high if pushed.offset_until is None else min(
                    pushed.offset_until, high)
            return True
        if name == "timestamp" and isinstance(item, GreaterThan | GreaterThanOrEqual):
            ms = _timestamp_ms(value)
            if ms is not None:
                pushed.timestamp_from_ms = max(pushed.timestamp_from_ms or 0, ms)
        return False

    def partitions(self) -> list[InputPartition]:
        options = self.options
        assert options.subscription is not None
        view = ClusterView(options)
        try:
            tps = [tp for tp in view.topic_partitions(options.subscription)
                   if self.pushed.allows(tp)]
            if not tps:
                return []
            if options.as_of_offsets is not None:
                return self._as_of(view, tps, options.as_of_offsets)
            latest = view.list_offsets(tps, "latest")
            starts = view.resolve_start(options.starting, tps)
            ends = view.resolve(options.ending, tps, latest=latest)
            backwards = sorted(tp for tp in tps if starts[tp] > ends[tp])
            if backwards:
                listed = ", ".join(f"{t}-{p} ({starts[(t, p)]} > {ends[(t, p)]})"
                                   for t, p in backwards)
                raise SourceOptionError(f"startingOffsets is past endingOffsets in {listed}")
            starts, ends = self._narrow(view, starts, ends)
            return list(plan(view, starts, ends, options, what="startingOffsets",
                             schema=self.schema))
        finally:
            view.close()

    def _as_of(self, view: ClusterView, tps: list[TopicPartition],
               as_of: Mapping[TopicPartition, int]) -> list[InputPartition]:
        """``loglake.asOfOffsets``: the tier as of the version those offsets were tiered in
        (offset_versions.py), the rest from the brokers."""
        from loglake.streaming.offset_versions import plan_as_of

        starts, ends, snapshots = plan_as_of(view, tps, as_of)
        starts, ends = self._narrow(view, starts, ends)
        hot = {tp: max(o, snapshots[tp[0]].ends.get(tp[1], o))  # type: ignore[union-attr]
               if snapshots.get(tp[0]) is not None else o for tp, o in starts.items()}
        check_data_loss({tp: o for tp, o in hot.items() if o < ends[tp]},
                        view.list_offsets(tps, "earliest"),
                        fail=self.options.fail_on_data_loss, what="loglake.asOfOffsets")
        ranges = plan_ranges(starts, ends, snapshots, min_partitions=self.options.min_partitions)
        typed, typed_schema = _typed_context(view, self.schema, self.options,
                                             {t for t, _ in tps})
        context = ReadContext(view.bootstrap_servers(), view.storage(), self.options, typed,
                              typed_schema)
        return [RangePartition(r, context) for r in ranges]

    def _narrow(self, view: ClusterView, starts: PartitionOffsets,
                ends: PartitionOffsets) -> tuple[PartitionOffsets, PartitionOffsets]:
        """Apply pushed offset/timestamp bounds (empty ranges become start == end)."""
        pushed = self.pushed
        if pushed.offset_until is not None:
            ends = {tp: min(o, pushed.offset_until) for tp, o in ends.items()}
        starts = {tp: max(o, pushed.offset_from) for tp, o in starts.items()}
        if pushed.timestamp_from_ms is not None:
            at = view.list_offsets(list(starts), pushed.timestamp_from_ms)
            starts = {tp: max(o, at.get(tp, o)) for tp, o in starts.items()}
        starts = {tp: min(o, ends[tp]) for tp, o in starts.items()}
        return starts, ends

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)


# -- stream -------------------------------------------------------------------------------------


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("loglake")`` (micro-batches; see the module docstring)."""

    def __init__(self, options: SourceOptions, schema: StructType | None = None) -> None:
        self.options = options
        self.schema = schema
        self._view: ClusterView | None = None
        self._last_batch = time.monotonic()
        self._target: PartitionOffsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_view"] = None  # network clients stay on the driver
        return state

    def _cluster(self) -> ClusterView:
        if self._view is None:
            self._view = ClusterView(self.options)
        return self._view

    def _partitions(self) -> list[TopicPartition]:
        assert self.options.subscription is not None
        return self._cluster().topic_partitions(self.options.subscription)

    def initialOffset(self) -> dict:
        tps = self._partitions()
        return to_json_offsets(self._cluster().resolve_start(self.options.starting, tps))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self._partitions()
        self._target = self._cluster().list_offsets(tps, "latest")

    def reportLatestOffset(self) -> dict | None:
        tps = self._partitions()
        return to_json_offsets(self._cluster().list_offsets(tps, "latest"))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        view = self._cluster()
        begin = from_json_offsets(start)
        tps = self._partitions()
        if self._target is not None:
            tps = [tp for tp in tps if tp in self._target]
        gone = sorted(set(begin) - set(tps))
        if gone and self.options.fail_on_data_loss and self._target is None:
            listed = ", ".join(f"{t}-{p}" for t, p in gone)
            raise DataLossError(f"partitions disappeared while the stream read them: {listed}",
                                hint="set failOnDataLoss=false to go on without them")
        latest = view.list_offsets(tps, "latest") if tps else {}
        if self._target is not None:
            latest = {tp: min(o, self._target[tp]) for tp, o in latest.items()}
        new = [tp for tp in tps if tp not in begin]
        from_offsets = dict(begin)
        if new:
            from_offsets.update(view.list_offsets(new, "earliest"))
        end = {tp: max(latest[tp], from_offsets[tp]) if tp in begin else latest[tp]
               for tp in tps}
        if not isinstance(limit, ReadAllAvailable):
            end = self._limit(from_offsets, end, limit)
        if end == begin:
            return start
        if any(end[tp] != from_offsets.get(tp) for tp in end):
            self._last_batch = time.monotonic()
        return to_json_offsets(end)

    def _limit(self, begin: PartitionOffsets, end: PartitionOffsets,
               limit: ReadLimit) -> PartitionOffsets:
        options = self.options
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else (
            options.max_offsets_per_trigger)
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else (
            options.min_offsets_per_trigger)
        available = sum(max(o - begin.get(tp, o), 0) for tp, o in end.items())
        if min_rows is not None and available < min_rows:
            waited_ms = (time.monotonic() - self._last_batch) * 1000
            if waited_ms < options.max_trigger_delay_ms:
                return {tp: begin.get(tp, o) for tp, o in end.items() if tp in begin}
        if max_rows is not None:
            return rate_limit(begin, end, max_rows)
        return end

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin = from_json_offsets(start)
        until = from_json_offsets(end)
        starts = {tp: o for tp, o in begin.items() if tp in until}
        return list(plan(self._cluster(), starts, until, self.options,
                         what="the stream's next offsets", schema=self.schema))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in the cluster."""

    def stop(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None

