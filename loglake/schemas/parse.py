"""Parsing registered schemas of the three types, with their references; the forms served.

:func:`parse` turns ``(schema_type, text, references)`` into a :class:`ParsedSchema` or raises
:class:`~loglake.errors.InvalidSchemaError` with a one-line message (the registry answers 42201
with it). Per type (details in each helper's docstring):

- ``AVRO`` (avro_schema.py): fastavro; references are named types (a reference's name is the
  full name of the type its schema defines).
- ``JSON`` (json_schema.py): jsonschema's meta-schema check (draft-07 unless ``$schema`` says
  otherwise); a reference's name is the URL a ``$ref`` uses.
- ``PROTOBUF`` (protobuf_schema.py): ``.proto`` text compiled by protoc (grpcio-tools,
  in-process) or a base64 serialized ``FileDescriptorProto`` (what confluent-kafka's Python
  serializer registers); a reference's name is the import path.

**References**: ``references`` maps a reference name to the schema it resolves to, and must hold
the transitive closure (the references of the referenced schemas too, under their own names):
:func:`resolve_references` builds it from a schema's ``SchemaReference`` list and a lookup
(``SchemaStore.referenced`` satisfies it). A name missing from the mapping makes the schema
invalid.

**Texts**: ``.text`` is what to store and serve (as registered; for a Protobuf schema given in
serialized form, the ``.proto`` text rendered from it, as Confluent stores). ``.canonical`` is a
normalized text for fingerprints under ``?normalize=true``: whitespace and key-order differences
of the same schema give the same canonical text (Avro: names fully qualified, sorted keys; JSON:
sorted keys; Protobuf: rendered from the compiled descriptor, so comments, whitespace and
``.proto``-level spelling disappear). Identical texts always give identical results.

:func:`to_text` / :func:`to_serialized` give the forms ``GET /schemas/ids/{id}?format=`` serves.
:func:`fastavro_schema`, :func:`json_validator`, :func:`file_descriptor_set`,
:func:`message_descriptor` and :func:`message_class` give decoders what they need (built once
per ParsedSchema and cached).

Results are cached by ``(schema_type, text, references)``: a ParsedSchema and what it holds are
shared, read-only. Thread-safe (protoc calls are serialized inside protobuf_schema).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, FileDescriptor
from google.protobuf.message import Message

from loglake.errors import InvalidSchemaError
from loglake.schemas import avro_schema, json_schema, protobuf_schema
from loglake.schemas.model import SCHEMA_TYPES, RegisteredSchema, SchemaReference

MAX_REFERENCES = 1000
"""Bound on a schema's transitive references (a cycle or a runaway graph is refused)."""


@dataclass(frozen=True)
class ParsedSchema:
    """A schema that parsed, with the references it was parsed against (read-only, shared)."""

    schema_type: str
    text: str
    canonical: str
    references: tuple[tuple[str, RegisteredSchema], ...]
    """The transitive references, ``(name, schema)`` sorted by name."""
    payload: Any = field(compare=False, hash=False, repr=False)
    """Per type: the fastavro-parsed schema; the JSON document; the FileDescriptorSet
    (dependencies first, the schema's own file last)."""

    @property
    def reference_map(self) -> dict[str, RegisteredSchema]:
        return dict(self.references)


def parse(schema_type: str, text: str,
          references: Mapping[str, RegisteredSchema] | None = None) -> ParsedSchema:
    """Parse ``text`` as a ``schema_type`` schema; ``references``: name → schema, transitive
    (see the module docstring). Raises InvalidSchemaError."""
    schema_type = (schema_type or "AVRO").upper()
    if schema_type not in SCHEMA_TYPES:
        raise InvalidSchemaError(f"Invalid schema type {schema_type!r}: one of "
                                 f"{', '.join(SCHEMA_TYPES)}")
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchemaError("Invalid schema: empty schema")
    refs = tuple(sorted((references or {}).items()))
    return _parse(schema_type, text, refs)


@functools.lru_cache(maxsize=1024)
def _parse(schema_type: str, text: str,
           refs: tuple[tuple[str, RegisteredSchema], ...]) -> ParsedSchema:
    name_refs = dict(refs)
    roots = tuple(name_refs)
    if schema_type == "AVRO":
        parsed, _named = avro_schema.parse(text, name_refs, roots)
        return ParsedSchema(schema_type, text, avro_schema.canonical(text), refs, parsed)
    if schema_type == "JSON":
        document = json_schema.parse(text, name_refs)
        return ParsedSchema(schema_type, text, json_schema.canonical(text), refs, document)
    files, serialized = protobuf_schema.parse(text, name_refs, roots)
    rendered = protobuf_schema.to_text_file(files.file[-1])
    return ParsedSchema(schema_type, rendered if serialized else text, rendered, refs, files)


def resolve_references(references: Iterable[SchemaReference],
                       lookup: Callable[[SchemaReference], RegisteredSchema | None],
                       ) -> dict[str, RegisteredSchema]:
    """The transitive reference mapping :func:`parse` takes, from a schema's direct
    references and ``lookup`` (subject version → schema; ``SchemaStore.referenced``).
    Raises InvalidSchemaError for a reference that does not resolve."""
    out: dict[str, RegisteredSchema] = {}
    pending = list(references)
    while pending:
        ref = pending.pop()
        if ref.name in out:
            continue
        if len(out) >= MAX_REFERENCES:
            raise InvalidSchemaError(f"Invalid schema: more than {MAX_REFERENCES} references")
        target = lookup(ref)
        if target is None:
            raise InvalidSchemaError(f"Invalid schema: reference {ref.name!r} to subject "
                                     f"{ref.subject!r} version {ref.version} does not exist")
        out[ref.name] = target
        pending.extend(target.references)
    return out


def parse_registered(schema: RegisteredSchema,
                     lookup: Callable[[SchemaReference], RegisteredSchema | None],
                     ) -> ParsedSchema:
    """A stored schema parsed with its references resolved through ``lookup``."""
    return parse(schema.schema_type, schema.schema,
                 resolve_references(schema.references, lookup))


# -- forms served -------------------------------------------------------------------------


def to_text(parsed: ParsedSchema) -> str:
    """The schema's text (Protobuf: ``.proto`` text, whatever form was registered)."""
    return parsed.text


def to_serialized(parsed: ParsedSchema) -> str:
    """``?format=serialized``: Protobuf as a base64 serialized FileDescriptorProto (what
    confluent-kafka's Python deserializer reads); other types: the text."""
    if parsed.schema_type != "PROTOBUF":
        return parsed.text
    return protobuf_schema.to_serialized_file(file_descriptor_set(parsed).file[-1])


# -- for decoders -------------------------------------------------------------------------


def fastavro_schema(parsed: ParsedSchema) -> Any:
    """The fastavro-parsed schema (named types of the references included)."""
    _expect(parsed, "AVRO")
    return parsed.payload



def json_document(parsed: ParsedSchema) -> Any:
    _expect(parsed, "JSON")
    return parsed.payload


@functools.lru_cache(maxsize=256)
def json_validator(parsed: ParsedSchema) -> Any:
    """A jsonschema validator for the schema, ``$ref`` resolved to its references."""
    _expect(parsed, "JSON")
    return json_schema.validator(parsed.payload, parsed.reference_map)


def file_descriptor_set(parsed: ParsedSchema) -> descriptor_pb2.FileDescriptorSet:
    """The schema's file and its imports (dependencies first, the schema's file last)."""
    _expect(parsed, "PROTOBUF")
    files: descriptor_pb2.FileDescriptorSet = parsed.payload
    return files


@functools.lru_cache(maxsize=256)
def _pool(parsed: ParsedSchema) -> descriptor_pool.DescriptorPool:
    return protobuf_schema.build_pool(file_descriptor_set(parsed))


def file_descriptor(parsed: ParsedSchema) -> FileDescriptor:
    """The schema's file as a descriptor, in a pool of its own (cached per schema)."""
    return _pool(parsed).FindFileByName(file_descriptor_set(parsed).file[-1].name)


def message_descriptor(parsed: ParsedSchema, indexes: Sequence[int] = ()) -> Descriptor:
    """The message a Confluent message-index path names (``[]``/``[0]``: the first message)."""
    return protobuf_schema.message_descriptor(_pool(parsed), file_descriptor_set(parsed).file[-1],
                                              indexes)


def message_class(parsed: ParsedSchema, indexes: Sequence[int] = ()) -> type[Message]:
    """A generated message class for the message ``indexes`` names (cached per schema)."""
    return protobuf_schema.message_class(message_descriptor(parsed, tuple(indexes)))


def _expect(parsed: ParsedSchema, schema_type: str) -> None:
    if parsed.schema_type != schema_type:
        raise InvalidSchemaError(f"a {parsed.schema_type} schema is not {schema_type}")
