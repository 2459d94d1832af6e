"""Typing a segment's rows in the tier worker: the typed columns of a schema'd topic's sides.

Input: the STORED_SCHEMA rows the worker decoded from a sealed segment (tier_rows.py) and a
:class:`TierTyping` from the broker (broker/tier_schemas.py): which sides are typed and by
which subject, a ``SchemaSet`` snapshot (every version of those subjects with references, plus
ids looked up since) and the table's current ``<side>_typed`` types.

Steps (:func:`type_rows`)::

    1. the schema ids of each typed side's values (schemas/wire.py ``schema_ids``); ids the
       snapshot lacks and the broker did not mark absent -> report them (``missing_ids``),
       write nothing: the broker looks them up and runs the worker again
    2. the side's target type: schemas/arrow_types.py ``side_type`` (the table's current type
       merged with every subject version's and every seen id's; what cannot merge decodes as
       "does not fit the table column"); no type at all (no schema of the side known yet):
       the side gets no typed columns in this file
    3. decode (schemas/decode.py ``decode_column``): typed value, schema id, error per row;
       quarantined rows (tier_rows.py: raw bytes of a bad batch) get nulls in all three

A record that does not decode (not framed, unknown id, bad payload, does not fit) keeps its raw
bytes and gets ``<side>_error``; nothing here raises for a record's bytes, so tiering never
stops on them.

Pure (no I/O), picklable inputs and outputs; thread-safe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from loglake.schemas.schema_set import SchemaSet
from loglake.segments.tier_rows import DECODE_ERROR, SIDES, typed_fields


@dataclass(frozen=True)
class TierTyping:
    """How the worker types one segment's rows (picklable; built by broker/tier_schemas.py)."""

    subjects: Mapping[str, str]
    """``side -> subject`` of each typed side (``key``/``value``)."""
    schemas: SchemaSet
    """The subjects' versions with their schemas and references, and ids looked up since."""
    current: Mapping[str, pa.DataType] = field(default_factory=dict)
    """``side -> `` the table's current ``<side>_typed`` type (missing: not typed yet)."""
    absent: frozenset[int] = frozenset()
    """Ids the store did not know when asked for this segment: decoded as unknown."""

    def with_schemas(self, found: SchemaSet, absent: set[int]) -> TierTyping:
        """This typing with the schemas ``found`` added and the ids ``absent`` marked."""
        return dataclasses.replace(self, schemas=self.schemas.merged(found),
                                   absent=self.absent | frozenset(absent))


@dataclass(frozen=True)
class TypedRows:
    """What :func:`type_rows` made of some rows."""

    rows: pa.Table | None
    """The rows with the typed columns of every typed side (None: ``missing_ids``)."""
    typed: pa.Schema | None = None
    """The typed columns added (tier_rows.typed_schema order)."""
    missing_ids: tuple[int, ...] = ()
    """Ids to look up before the rows can be typed (step 1 of the module docstring)."""
    errors: int = 0
    """Values of typed sides that did not decode."""


def _array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks else pa.array([], column.type)
    return column


def missing_ids(rows: pa.Table, typing: TierTyping) -> tuple[int, ...]:
    """The schema ids the typed sides of ``rows`` carry that ``typing`` neither holds nor
    marks absent (sorted)."""
    from loglake.schemas.wire import schema_ids

    known = set(typing.schemas.by_id) | set(typing.absent)
    out: set[int] = set()
    for side in typing.subjects:
        ids = pc.unique(schema_ids(rows.column(side))).drop_null().to_pylist()
        out.update(int(i) for i in ids if int(i) not in known)
    return tuple(sorted(out))


def type_rows(rows: pa.Table, typing: TierTyping) -> TypedRows:
    """``rows`` (STORED_SCHEMA, records and quarantined rows) with the typed columns of the
    typed sides appended, in tier_rows order (see the module docstring)."""
    from loglake.schemas.arrow_types import side_type
    from loglake.schemas.decode import decode_column
    from loglake.schemas.wire import schema_ids

    missing = missing_ids(rows, typing)
    if missing:
        return TypedRows(None, missing_ids=missing)
    schemas = typing.schemas
    quarantine = (pc.is_valid(_array(rows.column(DECODE_ERROR)))
                  if DECODE_ERROR in rows.column_names else None)
    fields: list[pa.Field] = []
    errors = 0
    for side in SIDES:
        subject = typing.subjects.get(side)
        if subject is None:
            continue
        values = _array(rows.column(side))
        subject_schemas = [s for s in (schemas.schema(v.id) for v in schemas.versions(subject))
                           if s is not None]
        seen_ids = pc.unique(schema_ids(values)).drop_null().to_pylist()
        seen = [s for s in (schemas.schema(int(i)) for i in seen_ids) if s is not None]
        target = side_type(typing.current.get(side), subject_schemas, seen, schemas)
        if target is None:
            continue
        decoded = decode_column(values, target, schemas, skip=quarantine)
        typed, ids, error = decoded.typed, decoded.schema_ids, decoded.errors
        errors += len(error) - error.null_count
        side_fields = typed_fields(side, target)
        for column_field, array in zip(side_fields, (typed, ids, error), strict=True):
            rows = rows.append_column(column_field, array.cast(column_field.type))
        fields += side_fields
    return TypedRows(rows, pa.schema(fields) if fields else None, errors=errors)
