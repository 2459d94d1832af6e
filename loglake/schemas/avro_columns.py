"""Arrow types of Avro schemas, and the conversion of fastavro's decoded values to them.

Mapping (docs/SCHEMAS.md "Arrow types"): int/long -> int64, float/double -> float64 (so the
promotions Avro allows within integers and within floats never change a column), boolean,
string/enum -> string, bytes/fixed -> binary, null -> null, record -> struct (fields in schema
order), array -> list, map -> map<string, T>, ``["null", T]`` -> T (every column is nullable),
other unions -> a struct with one field per member (named by the member's type name: ``int``,
``string``, a named type's short name; the member the value holds is set, the others null),
logical types: decimal -> decimal128(precision, scale) (beyond 38 digits: string), date ->
date32, time-millis/-micros -> int64 microseconds of the day (Delta has no time type),
timestamp-millis/-micros -> timestamp[us, UTC], local-timestamp-* -> timestamp[us], uuid ->
string. A record that contains itself holds the inner occurrence as JSON text; a record
without fields is JSON text.

Input: a schema parsed by fastavro (``parse_schema`` output) and its named-types table (named
types that are referenced by name, within the schema or from a reference, are looked up there).
Decoding with :func:`decoder_options`' options is what the converters expect (unions holding
records come back as ``(name, value)`` when a union has several non-null members).

Pure; thread-safe.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from loglake.schemas.column_mapping import (
    AS_JSON_TEXT,
    JSON_TEXT,
    MAX_DEPTH,
    Mapped,
    from_json_text,
    json_text,
    list_of,
    map_of,
    struct_of,
)

_PRIMITIVE_TYPES: dict[str, pa.DataType] = {
    "null": pa.null(), "boolean": pa.bool_(), "int": pa.int64(), "long": pa.int64(),
    "float": pa.float64(), "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
}
TIMESTAMP_UTC = pa.timestamp("us", tz="UTC")
_LOGICAL_PYTHON: dict[str, tuple[type, ...]] = {
    "decimal": (decimal.Decimal,), "date": (datetime.date,), "time-millis": (datetime.time,),
    "time-micros": (datetime.time,), "timestamp-millis": (datetime.datetime,),
    "timestamp-micros": (datetime.datetime,), "local-timestamp-millis": (datetime.datetime,),
    "local-timestamp-micros": (datetime.datetime,), "uuid": (uuid.UUID,),
}


def _micros_of_day(value: Any) -> Any:
    if not isinstance(value, datetime.time):
        return value
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def _time_of_micros(value: Any) -> Any:
    if not isinstance(value, int):
        return value
    seconds, micros = divmod(value, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return datetime.time(hour, minute, second, micros)


def _without_record_names(value: Any) -> Any:
    """fastavro's value with the ``(record name, record)`` pairs of unions unwrapped."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return _without_record_names(value[1])
    if isinstance(value, dict):
        return {k: _without_record_names(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_record_names(v) for v in value]
    return value


_AS_JSON_WITHOUT_NAMES = Mapped(JSON_TEXT, lambda value: json_text(_without_record_names(value)),
                                from_json_text)


def _resolve(schema: Any, named: Mapping[str, Any]) -> Any:
    if isinstance(schema, str) and schema not in _PRIMITIVE_TYPES:
        return named[schema]
    return schema


def _type_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    return str(schema["type"])


def _short_name(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def needs_record_names(schema: Any, named: Mapping[str, Any]) -> bool:
    """Whether a union with several non-null members holds a record (then decoding must
    return record names to tell members apart)."""
    seen: set[str] = set()

    def walk(node: Any) -> bool:
        node = _resolve(node, named)
        if isinstance(node, list):
            members = [_resolve(m, named) for m in node if m != "null"]
            if len(members) > 1 and any(isinstance(m, dict) and m.get("type") in
                                        ("record", "error") for m in members):
                return True
            return any(walk(m) for m in node)
        if isinstance(node, dict):
            kind = node.get("type")
            if kind in ("record", "error"):
                name = str(node.get("name"))
                if name in seen:
                    return False
                seen.add(name)
                return any(walk(f["type"]) for f in node.get("fields", ()))
            if kind == "array":
                return walk(node["items"])
            if kind == "map":
                return walk(node["values"])
        return False

    return walk(schema)


def decoder_options(schema: Any, named: Mapping[str, Any]) -> dict[str, Any]:
    """fastavro ``schemaless_reader`` keyword arguments the converters of :func:`mapped`
    expect."""
    return {"return_record_name": needs_record_names(schema, named)}


def mapped(schema: Any, named: Mapping[str, Any]) -> Mapped:
    """The Arrow type of an Avro schema and the converter of fastavro's values to it."""
    return _Mapper(named, needs_record_names(schema, named)).map(schema, (), 0)


class _Mapper:
    def __init__(self, named: Mapping[str, Any], record_names: bool) -> None:
        self.named = named
        self.record_names = record_names

    def map(self, schema: Any, parents: tuple[str, ...], depth: int) -> Mapped:
        schema = _resolve(schema, self.named)
        if depth > MAX_DEPTH:
            return AS_JSON_TEXT
        if isinstance(schema, str):
            return Mapped(_PRIMITIVE_TYPES[schema])
        if isinstance(schema, list):
            return self.union(schema, parents, depth)
        logical = schema.get("logicalType")
        kind = schema["type"]
        if logical is not None:
            found = self.logical(schema, str(logical))
            if found is not None:
                return found
        if isinstance(kind, (list, dict)) or (isinstance(kind, str) and kind in self.named):
            return self.map(kind, parents, depth)
        if kind in ("record", "error"):
            name = str(schema["name"])
            if name in parents:
                return _AS_JSON_WITHOUT_NAMES if self.record_names else AS_JSON_TEXT
            return struct_of([(str(f["name"]), self.map(f["type"], (*parents, name), depth + 1))
                              for f in schema.get("fields", ())])
        if kind == "enum":
            return Mapped(pa.string())
        if kind == "fixed":
            return Mapped(pa.binary())
        if kind == "array":
            return list_of(self.map(schema["items"], parents, depth + 1))
        if kind == "map":
            return map_of(pa.string(), self.map(schema["values"], parents, depth + 1))
        return Mapped(_PRIMITIVE_TYPES[str(kind)])

    @staticmethod
    def logical(schema: Mapping[str, Any], logical: str) -> Mapped | None:
        base = schema["type"]
        if logical == "decimal" and base in ("bytes", "fixed"):
            precision = int(schema.get("precision", 0))
            scale = int(schema.get("scale", 0))
            if 0 < precision <= 38:
                return Mapped(pa.decimal128(precision, scale))
            return Mapped(pa.string(), lambda value: None if value is None else str(value),
                          lambda text: None if text is None else decimal.Decimal(text))
        if logical == "date" and base == "int":
            return Mapped(pa.date32())
        if logical in ("time-millis", "time-micros") and base in ("int", "long"):
            return Mapped(pa.int64(), _micros_of_day, _time_of_micros)
        if logical in ("timestamp-millis", "timestamp-micros") and base == "long":
            return Mapped(TIMESTAMP_UTC)
        if logical in ("local-timestamp-millis", "local-timestamp-micros") and base == "long":
            return Mapped(pa.timestamp("us"))
        if logical == "uuid" and base in ("string", "fixed"):
            return Mapped(pa.string(), lambda value: None if value is None else str(value))
        return None

    def union(self, members: list[Any], parents: tuple[str, ...], depth: int) -> Mapped:
        non_null = [m for m in members if m != "null"]
        if not non_null:
            return Mapped(pa.null())
        if len(non_null) == 1:
            inner = self.map(non_null[0], parents, depth)
            if self.record_names and self._is_record(non_null[0]):
                fn = inner.convert

                def unwrap(value: Any) -> Any:
                    if isinstance(value, tuple):
                        value = value[1]
                    return value if fn is None else fn(value)

                return Mapped(inner.type, unwrap, inner.unconvert)
            return inner
        names: list[str] = []
        for member in non_null:
            resolved = _resolve(member, self.named)
            name = (_short_name(str(resolved["name"])) if isinstance(resolved, dict)
                    and "name" in resolved and resolved.get("type") in
                    ("record", "error", "enum", "fixed") else _type_name(resolved))
            names.append(name if name not in names else _type_name(member).replace(".", "_"))
        fields = [(name, self.map(member, parents, depth + 1))
                  for name, member in zip(names, non_null, strict=True)]
        struct = struct_of(fields)
        pick = _member_picker([_resolve(m, self.named) for m in non_null], names, self.named)
        convs = {name: m.convert for name, m in fields}

        def convert(value: Any) -> Any:
            if value is None:
                return None
            name, inner = pick(value)
            fn = convs[name]
            return {name: inner if fn is None or inner is None else fn(inner)}

        backs = {name: m.unconvert for name, m in fields}

        def unconvert(value: Any) -> Any:
            if value is None:
                return None
            for name, inner in value.items():
                if inner is not None:
                    back = backs.get(name)
                    return inner if back is None else back(inner)
            return None

        return Mapped(struct.type, convert, unconvert)

    def _is_record(self, schema: Any) -> bool:
        resolved = _resolve(schema, self.named)
        return isinstance(resolved, dict) and resolved.get("type") in ("record", "error")


def _member_picker(members: list[Any], names: list[str], named: Mapping[str, Any]) -> Any:
    """Which union member a decoded Python value came from (fastavro returns records as
    ``(full name, value)`` in such unions; other members are told apart by Python type)."""
    by_record: dict[str, str] = {}
    checks: list[tuple[str, tuple[type, ...], Any]] = []
    for name, member in zip(names, members, strict=True):
        kind = member if isinstance(member, str) else member.get("type")
        logical = member.get("logicalType") if isinstance(member, dict) else None
        if kind in ("record", "error"):
            by_record[str(member["name"])] = name
        elif logical is not None and logical in _LOGICAL_PYTHON:
            checks.append((name, _LOGICAL_PYTHON[logical], None))
        elif kind == "boolean":
            checks.append((name, (bool,), None))
        elif kind in ("int", "long"):
            checks.append((name, (int,), bool))
        elif kind in ("float", "double"):
            checks.append((name, (float,), None))
        elif kind == "string":
            checks.append((name, (str,), None))
        elif kind == "enum":
            symbols = frozenset(member.get("symbols", ()))
            checks.append((name, (str,), symbols))
        elif kind in ("bytes", "fixed"):
            checks.append((name, (bytes, bytearray), None))
        elif kind == "array":
            checks.append((name, (list,), None))
        elif kind == "map":
            checks.append((name, (dict,), None))
    enums_first = sorted(checks, key=lambda c: not isinstance(c[2], frozenset))

    def pick(value: Any) -> tuple[str, Any]:
        if isinstance(value, tuple) and len(value) == 2 and value[0] in by_record:
            return by_record[value[0]], value[1]
        for name, types, extra in enums_first:
            if not isinstance(value, types):
                continue
            if isinstance(extra, frozenset) and value not in extra:
                continue
            if extra is bool and isinstance(value, bool):
                continue
            return name, value
        raise ValueError(f"a union value of Python type {type(value).__name__} matches no member")

    return pick
