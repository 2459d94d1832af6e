"""Arrow types of JSON Schemas, and the conversion of parsed JSON values to them.

Mapping (docs/SCHEMAS.md "Arrow types"): ``object`` with ``properties`` -> struct of its
properties (in the order written; properties the record has beyond them are dropped from the
typed column, the raw bytes keep them), ``object`` without properties whose
``additionalProperties`` is a schema -> map<string, T>, ``integer`` -> int64, ``number`` ->
float64, ``string`` -> string, ``boolean`` -> bool, ``null`` -> null, ``array`` with one
``items`` schema -> list. ``["null", T]`` -> T, ``["integer", "number"]`` -> float64;
``enum``/``const`` of strings -> string, of integers -> int64. ``oneOf``/``anyOf`` whose
non-null alternatives map to the same type -> that type; ``allOf`` of objects -> a struct of
all their properties. ``$ref`` is followed (local pointers, and references by name). Anything
else (no type, alternatives of different types, tuple ``items``, open ``patternProperties``
without properties, a schema that contains itself) -> string holding the JSON text.

Converting checks each value against its column type (an ``integer`` must be a whole number,
a ``string`` a string, ...): a record that does not fit fails with the JSON path in the
message (the row's ``*_error``). This is not full JSON Schema validation (patterns, bounds,
required are the producer's/broker's business): it is what the typed column needs.

Pure; thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from loglake.errors import SchemaDecodeError
from loglake.schemas.column_mapping import (
    AS_JSON_TEXT,
    MAX_DEPTH,
    Convert,
    Mapped,
    list_of,
    map_of,
    struct_of,
)
from loglake.schemas.model import RegisteredSchema


def mapped(document: Any, references: Mapping[str, RegisteredSchema]) -> Mapped:
    """The Arrow type of a JSON Schema document and the converter of parsed JSON to it."""
    import json

    docs = {name: json.loads(reg.schema) for name, reg in references.items()}
    return _Mapper(document, docs).map(document, "", (), 0)


def _check(kind: str, ok: Any) -> Convert:
    def convert(value: Any) -> Any:
        if value is None:
            return None
        result = ok(value)
        if result is _BAD:
            raise SchemaDecodeError(f"expected {kind}, got {_json_kind(value)}")
        return result

    return convert


_BAD = object()


def _integer(value: Any) -> Any:
    if isinstance(value, bool):
        return _BAD
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return _BAD


def _number(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _BAD
    return float(value)


def _of(types: type | tuple[type, ...]) -> Any:
    return lambda value: value if isinstance(value, types) else _BAD


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null" if value is None else type(value).__name__


INTEGER = Mapped(pa.int64(), _check("integer", _integer))
NUMBER = Mapped(pa.float64(), _check("number", _number))
STRING = Mapped(pa.string(), _check("string", _of(str)))
BOOLEAN = Mapped(pa.bool_(), _check("boolean", _of(bool)))
NULL = Mapped(pa.null(), _check("null", lambda value: _BAD))


def _object_check(inner: Mapped) -> Mapped:
    return _container_check(inner, dict, "object")


def _array_check(inner: Mapped) -> Mapped:
    return _container_check(inner, list, "array")


def _container_check(inner: Mapped, container: type, kind: str) -> Mapped:
    """``inner`` refusing a non-null value that is not a ``container`` (JSON ``kind``)."""
    fn = inner.convert

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, container):
            raise SchemaDecodeError(f"expected {kind}, got {_json_kind(value)}")
        return value if fn is None else fn(value)

    return Mapped(inner.type, convert, inner.unconvert)


def _with_path(name: str, inner: Mapped) -> Mapped:
    fn = inner.convert
    if fn is None:
        return inner

    def convert(value: Any) -> Any:
        try:
            return fn(value)
        except SchemaDecodeError as e:
            raise SchemaDecodeError(f"{name}: {e.message}") from None

    return Mapped(inner.type, convert, inner.unconvert)


class _Mapper:
    def __init__(self, root: Any, references: Mapping[str, Any]) -> None:
        self.root = root
        self.references = references

    def resolve(self, ref: str, base: str) -> tuple[Any, str]:
        """The schema ``$ref`` points at, and the document it is in ("" for the root)."""
        target, _, pointer = ref.partition("#")
        doc_name = target if target and target in self.references else base
        if target and target not in self.references:
            own = self.root.get("$id") if isinstance(self.root, dict) else None
            if target != own:
                raise SchemaDecodeError(f"$ref {ref!r} names no reference")
            doc_name = ""
        node = self.references[doc_name] if doc_name else self.root
        for part in [p for p in pointer.split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            node = node[int(part)] if isinstance(node, list) else node[part]
        return node, doc_name

    def map(self, node: Any, base: str, seen: tuple[int, ...], depth: int) -> Mapped:
        if depth > MAX_DEPTH or not isinstance(node, dict):
            return AS_JSON_TEXT
        if id(node) in seen:
            return AS_JSON_TEXT
        seen = (*seen, id(node))
        if "$ref" in node and isinstance(node["$ref"], str):
            target, doc = self.resolve(node["$ref"], base)
            return self.map(target, doc, seen, depth + 1)
        kind = node.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if k != "null"]
            if len(kinds) == 1:
                kind = kinds[0]
            elif sorted(kinds) == ["integer", "number"]:
                return NUMBER
            elif not kinds:
                return NULL
            else:
                return AS_JSON_TEXT
        if kind is None:
            for key in ("oneOf", "anyOf"):
                if isinstance(node.get(key), list):
                    return self.alternatives(node[key], base, seen, depth)
            if isinstance(node.get("allOf"), list):
                return self.all_of(node["allOf"], base, seen, depth)
            if "properties" in node:
                kind = "object"
            elif "items" in node:
                kind = "array"
            elif "enum" in node or "const" in node:
                return self.constants(node)
            else:
                return AS_JSON_TEXT
        if kind == "object":
            return self.object(node, base, seen, depth)
        if kind == "array":
            items = node.get("items")
            if not isinstance(items, dict):
                return AS_JSON_TEXT
            return _array_check(list_of(self.map(items, base, seen, depth + 1)))
        return {"integer": INTEGER, "number": NUMBER, "string": STRING,
                "boolean": BOOLEAN, "null": NULL}.get(str(kind), AS_JSON_TEXT)

    def properties(self, node: Mapping[str, Any], base: str, seen: tuple[int, ...],
                   depth: int) -> list[tuple[str, Mapped]]:
        props = node.get("properties")
        if not isinstance(props, dict):
            return []
        return [(str(name), _with_path(str(name), self.map(sub, base, seen, depth + 1)))
                for name, sub in props.items()]

    def object(self, node: Mapping[str, Any], base: str, seen: tuple[int, ...],
               depth: int) -> Mapped:
        fields = self.properties(node, base, seen, depth)
        if not fields:
            extra = node.get("additionalProperties")
            if isinstance(extra, dict) and extra and not node.get("patternProperties"):
                return _object_check(map_of(pa.string(), self.map(extra, base, seen,
                                                                  depth + 1)))
            return AS_JSON_TEXT
        return _object_check(struct_of(fields, drop_none=True))

    def alternatives(self, options: list[Any], base: str, seen: tuple[int, ...],
                     depth: int) -> Mapped:
        mapped = [self.map(o, base, seen, depth + 1) for o in options]
        non_null = [m for m in mapped if m.type != pa.null()]
        if not non_null:
            return NULL
        if all(m.type == non_null[0].type for m in non_null[1:]):
            if len(non_null) == 1:
                return non_null[0]
            convs = [m.convert for m in non_null]

            def convert(value: Any) -> Any:
                failure: SchemaDecodeError | None = None
                for fn in convs:
                    try:
                        return value if fn is None else fn(value)
                    except SchemaDecodeError as e:
                        failure = failure or e
                assert failure is not None
                raise failure

            return Mapped(non_null[0].type, convert, non_null[0].unconvert)
        return AS_JSON_TEXT

    def all_of(self, options: list[Any], base: str, seen: tuple[int, ...],
               depth: int) -> Mapped:
        if len(options) == 1:
            return self.map(options[0], base, seen, depth + 1)
        fields: dict[str, Mapped] = {}
        for option in options:
            while isinstance(option, dict) and isinstance(option.get("$ref"), str):
                option, base = self.resolve(option["$ref"], base)
            if not isinstance(option, dict) or option.get("type", "object") != "object":
                return AS_JSON_TEXT
            for name, m in self.properties(option, base, seen, depth):
                fields.setdefault(name, m)
        if not fields:
            return AS_JSON_TEXT
        return _object_check(struct_of(list(fields.items()), drop_none=True))

    @staticmethod
    def constants(node: Mapping[str, Any]) -> Mapped:
        values = list(node.get("enum") or ()) + ([node["const"]] if "const" in node else [])
        values = [v for v in values if v is not None]
        if values and all(isinstance(v, str) for v in values):
            return STRING
        if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return INTEGER
        return AS_JSON_TEXT
