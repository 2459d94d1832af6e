"""Schema texts as the registry handles them: parse (validate), canonical form, compatibility,
output formats. A thin adapter over :mod:`loglake.schemas.parse` and
:mod:`loglake.schemas.compatibility` (the format rules live there, not here).

Pure: no I/O; the caller resolves references (reference name -> the referenced schema, all of
them, transitively) before calling. Errors: :class:`~loglake.registry.errors.RegistryError`
with Confluent's codes (42201 invalid schema).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loglake.registry.errors import INVALID_SCHEMA, unprocessable
from loglake.schemas.model import SCHEMA_TYPES, RegisteredSchema


@dataclass(frozen=True)
class Prepared:
    """A schema accepted for registration or lookup.

    ``stored``: the text to store (as given; the canonical text with ``normalize``);
    ``canonical``: what equal schemas share (compared on lookup and for "already registered");
    ``parsed``: the format library's parsed schema (None when no parser is available).
    """

    schema_type: str
    stored: str
    canonical: str
    parsed: Any = None


def _library(name: str = "parse") -> Any:
    """``loglake.schemas.<name>`` (None while it does not exist)."""
    try:
        return importlib.import_module(f"loglake.schemas.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"loglake.schemas.{name}":
            raise
        return None


def check_type(schema_type: str) -> str:
    if schema_type not in SCHEMA_TYPES:
        raise unprocessable(INVALID_SCHEMA, f"Invalid schema type {schema_type!r}: expected one "
                            f"of {', '.join(SCHEMA_TYPES)}")
    return schema_type


def prepare(schema_type: str, text: str, references: Mapping[str, RegisteredSchema], *,
            normalize: bool = False) -> Prepared:
    """Parse ``text`` (42201 with the parser's one-line message when it is not a valid
    schema of ``schema_type``)."""
    check_type(schema_type)
    parse = _library()
    if parse is None:
        return _prepare_unparsed(schema_type, text, normalize=normalize)
    try:
        parsed = parse.parse(schema_type, text, references)
    except Exception as exc:  # the parser's InvalidSchemaError (or a library error)
        raise unprocessable(INVALID_SCHEMA, f"Invalid schema: {_one_line(exc)}") from None
    canonical = str(parsed.canonical)
    stored = canonical if normalize else stored_text(parsed, text)
    return Prepared(schema_type, stored, canonical, parsed)


def stored_text(parsed: Any, text: str) -> str:
    """The text kept for a registration: the parser's ``.text`` (a Protobuf schema given as a
    base64 FileDescriptorProto, as confluent-kafka's serializer registers it, becomes its
    .proto text, as Confluent stores it), else as given."""
    return str(getattr(parsed, "text", text))


def _prepare_unparsed(schema_type: str, text: str, *, normalize: bool) -> Prepared:
    """Without the parser library: JSON-based formats must be JSON; stored as given."""
    if schema_type in ("AVRO", "JSON"):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise unprocessable(INVALID_SCHEMA, f"Invalid schema: not JSON: {exc}") from None
        canonical = json.dumps(value, sort_keys=True, separators=(",", ":"))
    else:
        canonical = text.strip()
    return Prepared(schema_type, canonical if normalize else text, canonical)


def check_compatibility(new: Prepared, previous: Sequence[Prepared], level: str) -> list[str]:
    """Messages why ``new`` is not compatible with ``previous`` (oldest first) at ``level``
    (empty: compatible). Without the rules library every schema is compatible."""
    if level == "NONE" or not previous:
        return []
    compatibility = _library("compatibility")
    if compatibility is None:
        return []
    if new.parsed is None or any(p.parsed is None for p in previous):
        return []
    messages = compatibility.check_compatibility(new.parsed, [p.parsed for p in previous],
                                                 level)
    return [str(m) for m in messages]


def render(schema: RegisteredSchema, fmt: str | None,
           references: Mapping[str, RegisteredSchema]) -> str:
    """The schema text in output format ``fmt`` (``serialized``: a Protobuf schema as the
    base64 FileDescriptorProto confluent-kafka's deserializer asks for; None/``default``: as
    stored)."""
    if fmt in (None, "", "default", "resolved") or schema.schema_type != "PROTOBUF":
        return schema.schema
    if fmt != "serialized":
        raise unprocessable(INVALID_SCHEMA, f"Invalid format {fmt!r}: expected serialized")
    parse = _library()
    to_serialized = getattr(parse, "to_serialized", None)
    if to_serialized is None:
        return schema.schema
    try:
        parsed = parse.parse("PROTOBUF", schema.schema, references)
    except Exception as exc:
        raise unprocessable(INVALID_SCHEMA, f"Invalid schema: {_one_line(exc)}") from None
    return str(to_serialized(parsed))


def _one_line(exc: BaseException) -> str:
    """The error as one line, without the parser's own "Invalid schema: " (callers add it)."""
    text = " ".join((str(exc) or type(exc).__name__).split())
    return text.removeprefix("Invalid schema: ")
