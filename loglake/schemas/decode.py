"""Decoding a column of framed keys or values into a typed column, never failing.

:func:`decode_column` takes a binary column (the raw ``key`` or ``value``), a target Arrow type
(the table type of the side, arrow_types.side_type) and a :class:`SchemaSource`, and returns
:class:`DecodedColumn`: ``typed`` (the target type; null where a row has no value or does not
decode), ``schema_ids`` (int32, the id in the framing; null when unframed) and ``errors``
(string; null when the row decoded or is null, else one line):

    not framed: magic byte 0x7b | not framed: only 3 bytes | not framed: empty
    unknown schema id 42
    schema id 42 (AVRO): <why the schema or the payload does not decode>
    schema id 42 does not fit the table column: <why>

Rows are grouped by schema id (and, for Protobuf, by message): each group is looked up once,
its writer type checked once against the target (arrow_types.fit_error), then each payload
is decoded (fastavro ``schemaless_reader`` / ``json.loads`` / the message class) and
converted; the typed column is built by one ``pa.array(..., type=target)`` call. A value that
the Arrow conversion refuses is found row by row and gets its own error. No exception
escapes for bad data: this runs on every tiered record and must never stall tiering.

:func:`typed_columns` adds the contract's columns for the typed sides of a table of rows
(``value_typed``, ``value_schema_id``, ``value_error``, then ``key_*``). Rows with
``is_control`` true (quarantined bytes) are not decoded: their typed columns are null.

Pure; thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from loglake.schemas import wire
from loglake.schemas.arrow_types import fit_error
from loglake.schemas.codecs import Codec, Variant, codec_for
from loglake.schemas.schema_set import SchemaSource

SIDES = ("value", "key")
"""The sides in the order their columns are added."""


@dataclass(frozen=True)
class DecodedColumn:
    """A decoded side: the typed values, the framing's schema ids, the per-row errors."""

    typed: pa.Array
    schema_ids: pa.Int32Array
    errors: pa.StringArray


def _one_line(e: BaseException) -> str:
    text = " ".join(str(getattr(e, "message", None) or e).split())
    return text or type(e).__name__


def decode_column(values: pa.Array | pa.ChunkedArray, target: pa.DataType,
                  source: SchemaSource, *, skip: pa.Array | None = None) -> DecodedColumn:
    """Decode every framed value into ``target`` (see the module docstring). ``skip``: a
    boolean column; rows where it is true are left null with no error."""
    if isinstance(values, pa.ChunkedArray):
        values = (values.combine_chunks() if values.num_chunks
                  else pa.array([], type=values.type))
    count = len(values)
    ids = wire.schema_ids(values)
    typed: list[Any] = [None] * count
    errors: list[str | None] = [None] * count
    raw = values.to_pylist()
    skipped = ([False] * count if skip is None
               else pc.fill_null(skip, False).to_pylist())
    groups: dict[int, list[int]] = {}
    for row, (schema_id, data) in enumerate(zip(ids.to_pylist(), raw, strict=True)):
        if skipped[row] or data is None:
            continue
        if schema_id is None:
            errors[row] = wire.not_framed_reason(data)
        else:
            groups.setdefault(schema_id, []).append(row)
    for schema_id, rows in groups.items():
        _decode_group(schema_id, rows, raw, target, source, typed, errors)
    column = _to_arrow(typed, errors, target)
    if skip is not None and any(skipped):
        ids = pc.if_else(pc.fill_null(skip, False), pa.scalar(None, pa.int32()), ids)
    return DecodedColumn(column, ids, pa.array(errors, type=pa.string()))


def _decode_group(schema_id: int, rows: list[int], raw: list[Any], target: pa.DataType,
                  source: SchemaSource, typed: list[Any], errors: list[str | None]) -> None:
    def fail(message: str) -> None:
        for row in rows:
            errors[row] = message

    try:
        schema = source.schema(schema_id)
    except Exception as e:  # the source's own failure (ZooKeeper): the rows say so
        fail(f"schema id {schema_id}: lookup failed: {_one_line(e)}")
        return
    if schema is None:
        fail(f"unknown schema id {schema_id}")
        return
    prefix = f"schema id {schema_id} ({schema.schema_type})"
    try:
        codec = codec_for(schema, source)
    except Exception as e:
        fail(f"{prefix}: {_one_line(e)}")
        return
    fits: dict[Variant, str | None] = {}
    for row in rows:
        body = memoryview(raw[row])[wire.HEADER_SIZE:]
        try:
            variant, payload = codec.variant(body)
            if variant not in fits:
                fits[variant] = _fit(codec, variant, target)
            reason = fits[variant]
            if reason is not None:
                errors[row] = f"schema id {schema_id} does not fit the table column: {reason}"
                continue
            typed[row] = codec.decode(variant, payload)
        except Exception as e:  # any decoder failure is this row's error, never the batch's
            errors[row] = f"{prefix}: {_one_line(e)}"


def _fit(codec: Codec, variant: Variant, target: pa.DataType) -> str | None:
    try:
        return fit_error(target, codec.mapped(variant).type)
    except Exception as e:  # a message index naming no message, ...
        raise ValueError(_one_line(e)) from None


def _to_arrow(typed: list[Any], errors: list[str | None], target: pa.DataType) -> pa.Array:
    try:
        return pa.array(typed, type=target)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    for row, value in enumerate(typed):
        if value is None:
            continue
        try:
            pa.array([value], type=target)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
            typed[row] = None
            errors[row] = f"does not fit the table column: {_one_line(e)}"
    return pa.array(typed, type=target)


def typed_columns(rows: pa.Table, sides: Mapping[str, pa.DataType | None],
                  source: SchemaSource) -> pa.Table:
    """``rows`` with ``<side>_typed``, ``<side>_schema_id`` and ``<side>_error`` appended for
    each side in ``sides`` (``"value"``/``"key"`` -> its target type; None or absent: the
    side is not typed), values first (module docstring)."""
    skip = rows.column("is_control") if "is_control" in rows.column_names else None
    if skip is not None:
        skip = skip.combine_chunks() if skip.num_chunks else pa.array([], type=pa.bool_())
    for side in SIDES:
        target = sides.get(side)
        if target is None:
            continue
        decoded = decode_column(rows.column(side), target, source, skip=skip)
        rows = rows.append_column(pa.field(f"{side}_typed", target), decoded.typed)
        rows = rows.append_column(pa.field(f"{side}_schema_id", pa.int32()),
                                  decoded.schema_ids)
        rows = rows.append_column(pa.field(f"{side}_error", pa.string()), decoded.errors)
    return rows
