"""Avro schemas: parsing with fastavro (named types from references) and the canonical text.

References are Avro named types: a reference's name is the full name of a type its schema
defines (Confluent's convention), and the referencing schema uses that name as a type. Referenced
schemas are parsed first, in dependency order, into one ``named_schemas`` table (fastavro) or one
``avro.name.Names`` (Apache avro, for the compatibility checker), so the main schema sees them.

Canonical text (fingerprint/dedup, Confluent's ``normalize=true``): the schema as JSON with every
name fully qualified (no ``namespace`` attributes), ``{"type": "int"}`` written ``"int"``, object
keys sorted and no whitespace. Unlike Avro's Parsing Canonical Form it keeps defaults, docs,
aliases and logical types, which change what a schema means to readers.

Pure functions; thread-safe.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import fastavro.schema

from loglake.errors import InvalidSchemaError
from loglake.schemas.model import RegisteredSchema

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "error", "enum", "fixed"})
MAX_REFERENCE_DEPTH = 32


def load_json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, TypeError) as e:
        raise InvalidSchemaError(f"Invalid schema: not JSON: {e}") from None


def ordered_references(name_refs: Mapping[str, RegisteredSchema],
                       roots: tuple[str, ...]) -> list[RegisteredSchema]:
    """The schemas ``roots`` (reference names) need, transitively, dependencies first."""
    out: list[RegisteredSchema] = []
    done: set[str] = set()

    def visit(name: str, depth: int) -> None:
        if name in done:
            return
        if depth > MAX_REFERENCE_DEPTH:
            raise InvalidSchemaError(f"Invalid schema: references nest deeper than "
                                     f"{MAX_REFERENCE_DEPTH} (a cycle?) at {name!r}")
        reg = name_refs.get(name)
        if reg is None:
            raise InvalidSchemaError(f"Invalid schema: reference {name!r} was not resolved")
        done.add(name)
        for ref in reg.references:
            visit(ref.name, depth + 1)
        out.append(reg)

    for root in roots:
        visit(root, 0)
    return out


def _fastavro_parse(json_schema: Any, named: dict[str, Any]) -> Any:
    try:
        return fastavro.schema.parse_schema(json_schema, named_schemas=named)
    except Exception as e:  # fastavro raises SchemaParseException, ValueError, TypeError, ...
        raise InvalidSchemaError(f"Invalid schema: {_one_line(e)}") from None


def parse(text: str, name_refs: Mapping[str, RegisteredSchema],
          roots: tuple[str, ...]) -> tuple[Any, dict[str, Any]]:
    """(the fastavro-parsed schema, the named types table incl. the references')."""
    named: dict[str, Any] = {}
    for reg in ordered_references(name_refs, roots):
        if reg.schema_type != "AVRO":
            raise InvalidSchemaError(f"Invalid schema: an AVRO schema references a "
                                     f"{reg.schema_type} schema (id {reg.id})")
        _fastavro_parse(load_json(reg.schema), named)
    parsed = _fastavro_parse(load_json(text), named)
    return parsed, named


def apache_schema(text: str, name_refs: Mapping[str, RegisteredSchema],
                  roots: tuple[str, ...]) -> Any:
    """The schema as Apache avro's ``avro.schema.Schema`` (what ``avro.compatibility`` checks)."""
    import avro.errors
    import avro.name
    import avro.schema

    names = avro.name.Names()
    try:
        for reg in ordered_references(name_refs, roots):
            avro.schema.make_avsc_object(load_json(reg.schema), names)
        return avro.schema.make_avsc_object(load_json(text), names)
    except (avro.errors.AvroException, ValueError, TypeError, KeyError) as e:
        raise InvalidSchemaError(f"Invalid schema: {_one_line(e)}") from None


def canonical(text: str) -> str:
    return json.dumps(_normalize(load_json(text), ""), sort_keys=True, separators=(",", ":"))


def _full_name(name: str, namespace: str) -> str:
    if "." in name or not namespace or name in PRIMITIVES:
        return name
    return f"{namespace}.{name}"


def _normalize(node: Any, namespace: str) -> Any:
    if isinstance(node, str):
        return _full_name(node, namespace)
    if isinstance(node, list):
        return [_normalize(member, namespace) for member in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if isinstance(kind, str) and kind in PRIMITIVES and len(node) == 1:
        return kind
    out = dict(node)
    if isinstance(kind, str) and kind in _NAMED and isinstance(node.get("name"), str):
        full = _full_name(node["name"], str(node.get("namespace") or namespace))
        out.pop("namespace", None)
        out["name"] = full
        namespace = full.rpartition(".")[0]
        if isinstance(node.get("fields"), list):
            out["fields"] = [
                {**f, "type": _normalize(f.get("type"), namespace)} if isinstance(f, dict) else f
                for f in node["fields"]]
    else:
        out["type"] = _normalize(kind, namespace) if not (
            isinstance(kind, str) and kind in PRIMITIVES | {"array", "map"}) else kind
    for key in ("items", "values"):
        if key in node:
            out[key] = _normalize(node[key], namespace)
    return out


def _one_line(e: BaseException) -> str:
    message = " ".join(str(e).split())
    return f"{type(e).__name__}: {message}" if message else type(e).__name__

