"""Typed key/value columns in Spark: ``valueFormat=registry`` / ``keyFormat=registry`` reads and
the typed SQL views (docs/SCHEMAS.md "Spark").

Row schema of a read with a typed side (here the value; a typed key likewise)::

    key, value, topic, partition, offset, timestamp, timestampType[, headers]   Kafka's columns,
                                  but ``value`` is the decoded value (a struct for records,
                                  messages and objects; the mapped type for a primitive schema)
    value_bytes      binary       the raw record value (what ``value`` is in an untyped read)
    value_schema_id  int          the schema id of the framing (null: unframed / null value)
    value_error      string       why the value did not decode (null when it did)

``value_*`` columns come first, then ``key_*``, each only for a typed side.

The column type (the *target*) is computed ONCE on the driver (:func:`resolve`), with
loglake.schemas' ``side_type``: the merge of the topic table's ``value_typed`` type (so a view's
tiered rows and its hot tail union), and the type of every version of the side's subject
(soft-deleted ones too; ``valueSchema.subject`` or the topic's own: ``value.schema.subject`` /
``<topic>-value``). Several topics: their targets are merged too (a type clash is a
:class:`SourceOptionError`). The target is normalised to what Spark's Arrow conversion gives
(``to_arrow_type(from_arrow_type(t))``), since Spark checks the batches' schema exactly.

Executors get a :class:`TypedColumns` (plain data, pickled into every task): the targets and a
``SchemaSet`` snapshot of the subject's schemas with their references. A record framed with an
id outside the snapshot (another subject's schema, one registered after planning) is looked up
in the cluster's schema store through the ``zookeeper`` option, once per task and id
(:class:`StoreFallback`); an id unknown there too gives ``value_error`` ``unknown schema id N``.
A record whose schema does not fit the target (registered after the query was planned with a
clashing type) gets ``value_error`` too; a running stream keeps the type it started with
(restart it to see fields added since). Decoding never raises: every failure is that row's
``*_error``.

The tier is decoded from the raw bytes here as well (not read from the table's
``value_typed``), so a ``format("loglake")`` read gives typed values for rows tiered before the
topic became typed too. The views over the catalog table read the table's ``value_typed``
(sql_views.py): rows tiered before the side became typed show a null ``value`` there until the
backfill job re-types the table.

Driver functions talk to ZooKeeper (blocking); :func:`typed_batch` is pure apart from the
store fallback. Not thread-safe (Spark calls each task's reader from one thread).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from loglake.streaming.errors import SourceOptionError
from loglake.streaming.options import SideSchemaOption, SourceOptions

if TYPE_CHECKING:
    from pyspark.sql.types import StructField, StructType

    from loglake.catalog.zookeeper import ClusterCatalog
    from loglake.schemas.model import RegisteredSchema, SchemaReference
    from loglake.segments.storage import Storage

Side = Literal["key", "value"]
SIDES: tuple[Side, ...] = ("value", "key")
"""Order of the extra columns."""


@dataclass(frozen=True)
class TypedSide:
    """One decoded side: the Spark-normalised Arrow type of its column and its subjects."""

    side: Side
    arrow_type: pa.DataType
    subjects: tuple[str, ...] = ()


@dataclass(frozen=True)
class TypedColumns:
    """What a task needs to type a batch: the typed sides, the schema snapshot and where to
    look up ids outside it (plain data: pickled into every task)."""

    sides: tuple[TypedSide, ...]
    schemas: Any = None
    """A ``loglake.schemas`` ``SchemaSet`` (dict-backed, picklable)."""
    zookeeper: str | None = None
    ids: tuple[int, ...] = field(default=())
    """The ids in ``schemas`` (for messages)."""

    def side(self, name: Side) -> TypedSide | None:
        return next((s for s in self.sides if s.side == name), None)


# -- Spark <-> Arrow types ------------------------------------------------------------------------


def spark_type_of(arrow_type: pa.DataType) -> Any:
    """The Spark type of an Arrow column type (as Spark's Arrow conversion maps it)."""
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(arrow_type, prefer_timestamp_ntz=False)


def arrow_type_of(spark_type: Any) -> pa.DataType:
    """The Arrow type Spark expects for a column of ``spark_type`` (UTC session)."""
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(spark_type, timezone="UTC")


def spark_normalised(arrow_type: pa.DataType) -> pa.DataType:
    """``arrow_type`` as it comes back from a round trip through Spark's type system."""
    return arrow_type_of(spark_type_of(arrow_type))


def extra_fields(typed: TypedColumns) -> list[StructField]:
    """The ``<side>_bytes`` / ``_schema_id`` / ``_error`` fields, value side first."""
    from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField

    fields: list[StructField] = []
    for name in SIDES:
        if typed.side(name) is not None:
            fields += [StructField(f"{name}_bytes", BinaryType()),
                       StructField(f"{name}_schema_id", IntegerType()),
                       StructField(f"{name}_error", StringType())]
    return fields


def typed_spark_schema(base: StructType, typed: TypedColumns) -> StructType:
    """``base`` (Kafka's schema) with the typed sides' columns typed and the extra columns."""
    from pyspark.sql.types import StructField, StructType

    fields = []
    for item in base.fields:
        side = typed.side(item.name) if item.name in SIDES else None
        fields.append(StructField(item.name, spark_type_of(side.arrow_type)) if side else item)
    return StructType(fields + extra_fields(typed))


def typed_arrow_schema(spark_schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects from the reader for ``spark_schema``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema, timezone="UTC")


# -- driver: which sides, which types -------------------------------------------------------------


def wanted_sides(options: SourceOptions) -> list[SideSchemaOption]:
    """The sides a read decodes, value first."""
    return [s for s in (options.value_schema, options.key_schema) if s.registry]


def topic_subject(catalog: ClusterCatalog, topic: str, side: Side,
                  given: str | None = None) -> str | None:
    """The subject typing ``side`` of ``topic``: ``given``, else the topic's configured one
    (loglake.schemas' ``typed_sides``: ``schema.columns.enable`` and ``<side>.schema.subject``
    or ``<topic>-<side>`` when it exists); None: the side is not typed."""
    from loglake.catalog.schemas import SchemaStore
    from loglake.config import TopicConfig
    from loglake.schemas.typed_sides import typed_sides

    if given is not None:
        return given
    store = SchemaStore(catalog.zk)
    config = TopicConfig.from_overrides(catalog.topic_config(topic))
    sides = typed_sides(topic, config, lambda subject: bool(store.versions(subject)))
    return sides.value_subject if side == "value" else sides.key_subject


def table_side_type(storage: Storage | None, topic: str, side: Side) -> pa.DataType | None:
    """The type of the topic table's ``<side>_typed`` column (None: no table / no column)."""
    if storage is None:
        return None
    from loglake.segments.tier_rows import side_types
    from loglake.segments.tiered_table import TieredTable

    return side_types(TieredTable(storage, topic).typed_schema()).get(side)


def subject_schemas(store: Any, subject: str) -> list[RegisteredSchema]:
    """Every version's schema of ``subject``, oldest first, soft-deleted ones included."""
    found = []
    for version in store.versions(subject):
        schema = store.schema(version.id)
        if schema is not None:
            found.append(schema)
    return found


def resolve(catalog: ClusterCatalog, storage: Storage | None, topics: Iterable[str],
            options: SourceOptions) -> TypedColumns | None:
    """The typed sides of a read of ``topics`` (None: nothing decoded). Raises
    :class:`SourceOptionError` for a side no subject types, or targets that do not merge."""
    from loglake.catalog.schemas import SchemaStore
    from loglake.errors import IncompatibleTypeError
    from loglake.schemas.arrow_types import merge_types, side_type
    from loglake.schemas.schema_set import SchemaSet

    sides = wanted_sides(options)
    if not sides:
        return None
    store = SchemaStore(catalog.zk)
    typed: list[TypedSide] = []
    ids: set[int] = set()
    for wanted in sides:
        target: pa.DataType | None = None
        subjects: list[str] = []
        for topic in sorted(set(topics)):
            subject = topic_subject(catalog, topic, wanted.side, wanted.subject)
            if subject is None:
                raise SourceOptionError(
                    f"option '{wanted.side}Format=registry': topic {topic!r} has no "
                    f"{wanted.side} schema",
                    hint=f"register subject '{topic}-{wanted.side}', set the topic config "
                    f"'{wanted.side}.schema.subject', or give the option "
                    f"'{wanted.side}Schema.subject'")
            schemas = subject_schemas(store, subject)
            if not schemas:
                raise SourceOptionError(
                    f"option '{wanted.side}Format=registry': subject {subject!r} (topic "
                    f"{topic!r}) has no schema")
            ids.update(s.id for s in schemas)
            subjects.append(subject)
            try:
                current = table_side_type(storage, topic, wanted.side)
                one = side_type(current, schemas, (), store)
                if one is None:
                    raise SourceOptionError(
                        f"no schema of subject {subject!r} (topic {topic!r}) maps to a column "
                        f"type")
                target = one if target is None else merge_types(target, one)
            except IncompatibleTypeError as exc:
                raise SourceOptionError(
                    f"{wanted.side} column type of topic {topic!r} (subject {subject!r}): "
                    f"{exc.message}") from None
        assert target is not None
        typed.append(TypedSide(wanted.side, spark_normalised(target),
                               tuple(dict.fromkeys(subjects))))
    subjects = sorted({subject for side in typed for subject in side.subjects})
    snapshot = SchemaSet.collect(store, sorted(ids), subjects=subjects)
    return TypedColumns(tuple(typed), snapshot, options.zookeeper, tuple(sorted(ids)))


def with_snapshot(typed: TypedColumns, catalog: ClusterCatalog,
                  topics: Iterable[str]) -> TypedColumns:
    """``typed`` with a snapshot of the schemas of its subjects (each topic's, or the one the
    options named) as the store holds them now: planning calls this per batch / micro-batch,
    so versions registered since the schema was fixed are decoded from the snapshot."""
    from loglake.catalog.schemas import SchemaStore
    from loglake.schemas.schema_set import SchemaSet

    store = SchemaStore(catalog.zk)
    sides = []
    for side in typed.sides:
        subjects = list(side.subjects)
        if not subjects:
            subjects = [s for s in (topic_subject(catalog, t, side.side)
                                    for t in sorted(set(topics))) if s is not None]
        sides.append(TypedSide(side.side, side.arrow_type, tuple(dict.fromkeys(subjects))))
    subjects = sorted({subject for side in sides for subject in side.subjects})
    snapshot = SchemaSet.collect(store, subjects=subjects)
    return TypedColumns(tuple(sides), snapshot, typed.zookeeper, tuple(snapshot.ids()))


def from_schema(spark_schema: StructType, options: SourceOptions) -> TypedColumns | None:
    """The typed sides as Spark gave the schema back to the reader (types only; the
    snapshot is added at planning: :func:`with_snapshot`)."""
    sides = []
    for wanted in wanted_sides(options):
        sides.append(TypedSide(wanted.side, arrow_type_of(spark_schema[wanted.side].dataType),
                               (wanted.subject,) if wanted.subject else ()))
    return TypedColumns(tuple(sides), None, options.zookeeper) if sides else None


# -- executors: typing a batch --------------------------------------------------------------------


class StoreFallback:
    """A schema source: the snapshot first, then the cluster's store (opened on the first
    miss, closed by :meth:`close`), remembering every answer (misses too) for the task."""

    def __init__(self, snapshot: Any, zookeeper: str | None) -> None:
        self.snapshot = snapshot
        self.zookeeper = zookeeper
        self._catalog: ClusterCatalog | None = None
        self._store: Any = None
        self._schemas: dict[int, RegisteredSchema | None] = {}
        self._references: dict[SchemaReference, RegisteredSchema | None] = {}

    def _open(self) -> Any:
        if self._store is None and self.zookeeper is not None:
            from loglake.catalog.schemas import SchemaStore
            from loglake.catalog.zookeeper import ClusterCatalog

            catalog = ClusterCatalog(self.zookeeper, mode="tool")
            catalog.start()
            self._catalog = catalog
            self._store = SchemaStore(catalog.zk)
        return self._store

    def schema(self, schema_id: int) -> RegisteredSchema | None:
        found = self.snapshot.schema(schema_id) if self.snapshot is not None else None
        if found is not None:
            return found
        if schema_id not in self._schemas:
            store = self._open()
            self._schemas[schema_id] = store.schema(schema_id) if store is not None else None
        return self._schemas[schema_id]

    def referenced(self, reference: SchemaReference) -> RegisteredSchema | None:
        found = self.snapshot.referenced(reference) if self.snapshot is not None else None
        if found is not None:
            return found
        if reference not in self._references:
            store = self._open()
            self._references[reference] = (store.referenced(reference) if store is not None
                                           else None)
        return self._references[reference]

    def close(self) -> None:
        if self._catalog is not None:
            self._catalog.stop()
            self._catalog = None
            self._store = None


def typed_batch(batch: pa.RecordBatch, typed: TypedColumns, source: Any,
                target: pa.Schema) -> pa.RecordBatch:
    """A Kafka-schema ``batch`` with the typed sides decoded, in ``target``'s layout."""
    from loglake.schemas.decode import decode_column

    columns: dict[str, pa.Array] = {name: batch.column(name) for name in batch.schema.names}
    for side in typed.sides:
        raw = batch.column(side.side)
        decoded = decode_column(raw, side.arrow_type, source)
        columns[side.side] = decoded.typed
        columns[f"{side.side}_bytes"] = raw
        columns[f"{side.side}_schema_id"] = decoded.schema_ids
        columns[f"{side.side}_error"] = decoded.errors
    arrays = [_as(columns[f.name], f.type) for f in target]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _as(array: pa.Array | pa.ChunkedArray, wanted: pa.DataType) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    return array if array.type.equals(wanted, check_metadata=False) else array.cast(wanted)


def typed_sides_of(catalog: ClusterCatalog, topics: Iterable[str]
                   ) -> Mapping[str, dict[Side, str]]:
    """Per topic, the subject of each typed side (topics with none left out)."""
    result: dict[str, dict[Side, str]] = {}
    for topic in topics:
        for side in SIDES:
            subject = topic_subject(catalog, topic, side)
            if subject is not None:
                result.setdefault(topic, {})[side] = subject
    return result
