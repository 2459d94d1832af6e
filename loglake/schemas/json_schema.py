"""JSON Schemas: the meta-schema check (jsonschema) and ``$ref`` resolution through references.

A reference's name is the URL (or relative name) the schema uses in ``$ref`` (Confluent's
convention, e.g. ``{"$ref": "address.json"}`` with a reference named ``address.json``);
``$ref: "address.json#/definitions/x"`` points into it. Local refs (``#...``) and refs to the
schema's own ``$id`` need no reference. Every other ``$ref`` must name a given reference, or the
schema is invalid (Confluent refuses it too).

Canonical text (fingerprint/dedup): the JSON with sorted keys and no whitespace.

:func:`validator` builds a jsonschema validator whose ``referencing`` registry holds the
references, for callers that validate instances. Pure functions; thread-safe.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import referencing
import referencing.jsonschema

from loglake.errors import InvalidSchemaError
from loglake.schemas.avro_schema import load_json
from loglake.schemas.model import RegisteredSchema

DEFAULT_DIALECT = "http://json-schema.org/draft-07/schema#"
"""The dialect of a schema without ``$schema`` (Confluent's default, draft-07)."""


def parse(text: str, name_refs: Mapping[str, RegisteredSchema]) -> Any:
    """The schema document (a dict or a boolean), checked against its meta-schema; every
    ``$ref`` resolvable."""
    document = load_json(text)
    check_document(document)
    for reg in name_refs.values():
        if reg.schema_type != "JSON":
            raise InvalidSchemaError(f"Invalid schema: a JSON schema references a "
                                     f"{reg.schema_type} schema (id {reg.id})")
    own_id = document.get("$id", "") if isinstance(document, dict) else ""
    for ref in _refs(document):
        base = ref.partition("#")[0]
        if base and base != own_id and base not in name_refs:
            raise InvalidSchemaError(f"Invalid schema: $ref {ref!r} names no reference "
                                     f"(references: {sorted(name_refs) or 'none'})")
    return document


def check_document(document: Any) -> None:
    if not isinstance(document, dict | bool):
        raise InvalidSchemaError("Invalid schema: a JSON schema is an object or a boolean, "
                                 f"not {type(document).__name__}")
    cls = jsonschema.validators.validator_for(document, default=_default_validator())
    try:
        cls.check_schema(document)
    except jsonschema.exceptions.SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "(root)"
        raise InvalidSchemaError(f"Invalid schema: at {where}: {_one_line(e.message)}") from None


def canonical(text: str) -> str:
    return json.dumps(load_json(text), sort_keys=True, separators=(",", ":"))


def validator(document: Any, name_refs: Mapping[str, RegisteredSchema]) -> Any:
    """A jsonschema validator for ``document`` that resolves ``$ref`` to the references."""
    resources = []
    for name, reg in name_refs.items():
        contents = load_json(reg.schema)
        resource = referencing.jsonschema.specification_with(
            contents.get("$schema", DEFAULT_DIALECT) if isinstance(contents, dict)
            else DEFAULT_DIALECT).create_resource(contents)
        resources.append((name, resource))
    registry: referencing.Registry[Any] = referencing.Registry().with_resources(resources)
    cls = jsonschema.validators.validator_for(document, default=_default_validator())
    return cls(document, registry=registry)


def _default_validator() -> Any:
    return jsonschema.Draft7Validator


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def _one_line(message: str) -> str:
    return " ".join(message.split())
