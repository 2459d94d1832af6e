"""Writing typed rows: the sink's ``valueSchema.subject`` / ``keySchema.subject`` options.

With ``valueSchema.subject`` the sink's ``value`` column may be a struct (or any type the
subject's schema maps to: docs/SCHEMAS.md) instead of string/binary; each row's value is
serialized with that subject's schema (its latest version, or ``valueSchema.version``) into
Confluent's wire format (magic byte 0, the schema id, Protobuf message indexes, the payload),
exactly what confluent-kafka's serializers write, so its deserializers and loglake's typed
tables read it. Keys likewise with ``keySchema.*``. Null values stay null (tombstones).

The schema is resolved once on the driver (:func:`resolve_writers`, ZooKeeper through the
``zookeeper`` option) and shipped to the tasks with its references
(:class:`SchemaWriter`: plain data, picklable). A row that the schema cannot serialize fails the
task with :class:`SchemaEncodeError` naming the row and the reason (Spark retries it; the rows
written before it stay, at-least-once as every sink failure).

Not thread-safe (one task, one thread).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from loglake.errors import LoglakeError
from loglake.streaming.errors import SourceOptionError

if TYPE_CHECKING:
    from loglake.schemas.model import RegisteredSchema
    from loglake.schemas.schema_set import SchemaSet
    from loglake.streaming.options import SourceOptions


class SchemaEncodeError(LoglakeError):
    """A sink row's key or value does not fit the schema it is written with."""


@dataclass(frozen=True)
class SchemaWriter:
    """How one side is serialized: the subject version's schema and what it references."""

    side: str
    subject: str
    version: int
    schema: RegisteredSchema
    schemas: SchemaSet


def resolve_writers(options: SourceOptions) -> tuple[SchemaWriter, ...]:
    """The schema of each side written with one (driver: reads ZooKeeper). Raises
    :class:`SourceOptionError` for an unknown subject or version."""
    sides = [s for s in (options.key_schema, options.value_schema) if s.subject is not None]
    if not sides:
        return ()
    from loglake.catalog.schemas import SchemaStore
    from loglake.catalog.zookeeper import ClusterCatalog
    from loglake.schemas.schema_set import SchemaSet

    assert options.zookeeper is not None  # parse_options demands it with a subject
    catalog = ClusterCatalog(options.zookeeper, mode="tool")
    catalog.start()
    try:
        store = SchemaStore(catalog.zk)
        writers = []
        for side in sides:
            assert side.subject is not None
            option = f"{side.side}Schema.subject"
            live = [v for v in store.versions(side.subject) if not v.deleted]
            if not live:
                raise SourceOptionError(f"option {option!r}: subject {side.subject!r} has no "
                                        f"version", hint="register a schema under it first")
            chosen = live[-1] if side.version is None else next(
                (v for v in live if v.version == side.version), None)
            if chosen is None:
                raise SourceOptionError(
                    f"option '{side.side}Schema.version': subject {side.subject!r} has no "
                    f"version {side.version} (versions: "
                    f"{', '.join(str(v.version) for v in live)})")
            schema = store.schema(chosen.id)
            if schema is None:
                raise SourceOptionError(f"option {option!r}: schema id {chosen.id} of "
                                        f"{side.subject!r} version {chosen.version} is missing")
            writers.append(SchemaWriter(side.side, side.subject, chosen.version, schema,
                                        SchemaSet.collect(store, [schema.id])))
        return tuple(writers)
    finally:
        catalog.stop()


def encode_batch(batch: pa.RecordBatch, writers: tuple[SchemaWriter, ...],
                 first_row: int = 0) -> pa.RecordBatch:
    """``batch`` with each written side's column replaced by its framed bytes (binary);
    ``first_row``: the task's row number of the batch's first row (for messages)."""
    from loglake.schemas.encode import encode_rows

    columns = {name: batch.column(name) for name in batch.schema.names}
    for writer in writers:
        if writer.side not in columns:
            continue
        try:
            encoded = encode_rows(columns[writer.side], writer.schema, writer.schemas)
        except LoglakeError as exc:
            raise SchemaEncodeError(
                f"the {writer.side} of a row (batch of the task from row {first_row + 1}) "
                f"does not fit {writer.subject!r} version {writer.version}: "
                f"{exc.message}") from None
        columns[writer.side] = pa.array(encoded, pa.binary())
    return pa.RecordBatch.from_pydict(columns)
