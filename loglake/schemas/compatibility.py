"""Schema compatibility levels: may a new schema follow the previous versions of a subject?

:func:`check_compatibility` answers with a list of messages (empty: compatible), in the style of
Confluent's verbose answers: one ``{errorType:'...', description:'...'}`` line per problem, then
``{oldSchemaVersion: n}`` (when versions are given) and ``{compatibility: 'LEVEL'}``.

Levels (Confluent's): ``BACKWARD`` — consumers using the new schema read data written with the
latest previous one; ``FORWARD`` — consumers using the latest previous schema read data written
with the new one; ``FULL`` — both; the ``_TRANSITIVE`` forms check every previous version, not
only the latest; ``NONE`` checks nothing. Soft-deleted versions are the caller's business
(Confluent leaves them out; so should the registry).

Every check is "can a reader with schema R read what a writer with schema W wrote":
BACKWARD is (R=new, W=old), FORWARD (R=old, W=new). Per type:

- ``AVRO``: Apache avro's ``ReaderWriterCompatibilityChecker`` (avro.compatibility), the Avro
  specification's schema-resolution rules; nothing hand-written.
- ``JSON``: json_compatibility.py (hand-written: no library does it; the subset is listed there).
- ``PROTOBUF``: protobuf_compatibility.py (hand-written, Confluent's rules; listed there).

Schemas of different types are never compatible. Pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence

from loglake.errors import InvalidConfigError
from loglake.schemas import avro_schema
from loglake.schemas.json_compatibility import json_problems
from loglake.schemas.parse import ParsedSchema
from loglake.schemas.protobuf_compatibility import protobuf_problems

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE")
DEFAULT_LEVEL = "BACKWARD"


def check_level(level: str) -> str:
    """``level`` upper-cased, or InvalidConfigError (the registry's 42203)."""
    upper = (level or "").upper()
    if upper not in LEVELS:
        raise InvalidConfigError(f"Invalid compatibility level {level!r}: one of "
                                 f"{', '.join(LEVELS)}")
    return upper


def check_compatibility(new: ParsedSchema, previous: Sequence[ParsedSchema], level: str, *,
                        versions: Sequence[int] | None = None) -> list[str]:
    """Messages explaining why ``new`` may not follow ``previous`` (oldest first) under
    ``level``; empty when it may. ``versions``: the previous schemas' version numbers, for
    the messages."""
    level = check_level(level)
    if level == "NONE" or not previous:
        return []
    numbers = list(versions) if versions is not None else [None] * len(previous)
    pairs = list(zip(previous, numbers, strict=True))
    if not level.endswith("_TRANSITIVE"):
        pairs = pairs[-1:]
    backward = level.startswith(("BACKWARD", "FULL"))
    forward = level.startswith(("FORWARD", "FULL"))
    out: list[str] = []
    for old, number in reversed(pairs):  # newest first, as Confluent reports
        problems: list[str] = []
        if backward:
            problems += _problems(reader=new, writer=old, reader_is_new=True)
        if forward:
            problems += _problems(reader=old, writer=new, reader_is_new=False)
        if problems:
            out.extend(dict.fromkeys(problems))  # unique, in order
            if number is not None:
                out.append(f"{{oldSchemaVersion: {number}}}")
    if out:
        out.append(f"{{compatibility: '{level}'}}")
    return out


def is_compatible(new: ParsedSchema, previous: Sequence[ParsedSchema], level: str) -> bool:
    return not check_compatibility(new, previous, level)


def _problems(*, reader: ParsedSchema, writer: ParsedSchema, reader_is_new: bool) -> list[str]:
    if reader.schema_type != writer.schema_type:
        old, new = (writer, reader) if reader_is_new else (reader, writer)
        return [_line("SCHEMA_TYPE_CHANGED", f"The schema type changed from "
                      f"{old.schema_type} to {new.schema_type}")]
    names = ("new", "old") if reader_is_new else ("old", "new")
    if reader.schema_type == "AVRO":
        return _avro_problems(reader, writer, names)
    if reader.schema_type == "JSON":
        return json_problems(reader, writer, names)
    return protobuf_problems(reader, writer, names)


def _line(error_type: str, description: str, info: str = "") -> str:
    extra = f", additionalInfo:'{info}'" if info else ""
    return f"{{errorType:'{error_type}', description:'{description}'{extra}}}"


_AVRO_DESCRIPTIONS = {
    "reader_field_missing_default_value":
        "The field at path '{loc}' in the {reader} schema has no default value and is missing "
        "in the {writer} schema",
    "type_mismatch": "The type (path '{loc}') of a field in the {reader} schema does not match "
                     "with the {writer} schema",
    "name_mismatch": "The name of the schema has changed (path '{loc}')",
    "fixed_size_mismatch": "The size of FIXED type field at path '{loc}' in the {reader} schema "
                           "does not match with the {writer} schema",
    "missing_enum_symbols": "The {reader} schema is missing enum symbols at path '{loc}' in the "
                            "{writer} schema",
    "missing_union_branch": "The {reader} schema is missing a type inside a union field at path "
                            "'{loc}' in the {writer} schema",
}


def _avro_problems(reader: ParsedSchema, writer: ParsedSchema,
                   names: tuple[str, str]) -> list[str]:
    import avro.compatibility as compat

    reader_schema = avro_schema.apache_schema(reader.text, reader.reference_map,
                                              tuple(reader.reference_map))
    writer_schema = avro_schema.apache_schema(writer.text, writer.reference_map,
                                              tuple(writer.reference_map))
    result = compat.ReaderWriterCompatibilityChecker().get_compatibility(reader_schema,
                                                                         writer_schema)
    if result.compatibility is compat.SchemaCompatibilityType.compatible:
        return []
    kinds = [k.value for k in result.incompatibilities]
    locations = sorted(result.locations)
    messages = sorted(result.messages)
    if len(kinds) == len(locations) == len(messages) == 1:
        pairs = [(kinds[0], locations[0], messages[0])]
    else:  # the checker keeps locations and messages in sets: report them side by side
        pairs = [(kind, ", ".join(locations), "; ".join(messages)) for kind in dict.fromkeys(kinds)]
    out = []
    for kind, loc, info in pairs:
        template = _AVRO_DESCRIPTIONS.get(kind, "{kind} at path '{loc}'")
        out.append(_line(kind.upper(), template.format(loc=loc, reader=names[0],
                                                       writer=names[1], kind=kind), info))
    return out
