"""What every per-format column mapping yields: an Arrow type and a value converter.

A mapping (avro_columns.py, json_columns.py, protobuf_columns.py) turns a parsed schema into
:class:`Mapped`: the Arrow type of the typed column (docs/SCHEMAS.md "Arrow types") and a
function turning the decoder's Python value into what ``pa.array(..., type=...)`` takes, or None
when the decoder's value already is (the fast path: no Python per field).

Shared helpers: the JSON text of a value a column cannot type (recursion cut, open content),
and the rule that Parquet cannot hold a struct without fields (such a type becomes a string of
JSON text). Pure; thread-safe.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

Convert = Callable[[Any], Any]

JSON_TEXT = pa.string()
"""The type of a column that holds a value as JSON text (what no Arrow type represents)."""

MAX_DEPTH = 16
"""Nesting beyond this depth is held as JSON text (recursive schemas stop at their first
recursion anyway)."""


@dataclass(frozen=True)
class Mapped:
    """The Arrow type of a schema, how to convert its decoded values to column values, and
    column values back to what the encoder takes (None: as they are)."""

    type: pa.DataType
    convert: Convert | None = None
    unconvert: Convert | None = None


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return str(value)


def json_text(value: Any) -> str | None:
    """``value`` as compact JSON text (bytes base64, times ISO 8601); None stays None."""
    if value is None:
        return None
    return json.dumps(value, default=_json_default, separators=(",", ":"), sort_keys=False)


def from_json_text(value: Any) -> Any:
    return None if value is None else json.loads(value)


AS_JSON_TEXT = Mapped(JSON_TEXT, json_text, from_json_text)


def _each_field(fields: list[tuple[str, Convert]], drop_none: bool) -> Convert:
    def convert(value: Any) -> Any:
        if value is None:
            return None
        out = dict(value)
        for name, fn in fields:
            item = out.get(name)
            if item is not None:
                out[name] = fn(item)
        if drop_none:
            return {k: v for k, v in out.items() if v is not None}
        return out

    return convert


def struct_of(fields: list[tuple[str, Mapped]], *, drop_none: bool = False) -> Mapped:
    """A struct of named mapped fields (converting only the fields that need it); a struct
    without fields is JSON text (Parquet has no empty groups). ``drop_none``: unconverting
    leaves absent fields out (JSON objects) rather than null."""
    if not fields:
        return AS_JSON_TEXT
    arrow = pa.struct([pa.field(name, m.type) for name, m in fields])
    converters = [(name, m.convert) for name, m in fields if m.convert is not None]
    inverse = [(name, m.unconvert) for name, m in fields if m.unconvert is not None]
    return Mapped(arrow, _each_field(converters, False) if converters else None,
                  _each_field(inverse, drop_none)
                  if inverse or drop_none else None)


def _each_item(fn: Convert) -> Convert:
    return lambda value: None if value is None else [None if v is None else fn(v)
                                                       for v in value]


def list_of(item: Mapped) -> Mapped:
    return Mapped(pa.list_(item.type),
                  None if item.convert is None else _each_item(item.convert),
                  None if item.unconvert is None else _each_item(item.unconvert))


def map_of(key: pa.DataType, item: Mapped) -> Mapped:
    """A map; its column values come back from Arrow as ``[(key, value), ...]``."""
    fn = item.convert
    back = item.unconvert

    def unconvert(value: Any) -> Any:
        if value is None:
            return None
        pairs = value.items() if isinstance(value, dict) else value
        return {k: v if back is None or v is None else back(v) for k, v in pairs}

    return Mapped(pa.map_(key, item.type),
                  None if fn is None else (lambda value: None if value is None else
                                           {k: None if v is None else fn(v)
                                            for k, v in value.items()}),
                  unconvert)
