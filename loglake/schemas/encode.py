"""Serializing column values with a registered schema into Confluent-framed bytes (the Spark
sink's ``valueSchema.subject`` path, tests, tools).

:func:`encode_rows` takes column values (Python values as ``pa.Array.to_pylist()`` gives them
for the schema's column type, arrow_types.arrow_type: dicts for structs, ``[(k, v)]`` or dicts
for maps, ``{member: value}`` structs for Avro unions) or an Arrow array, and returns one
framed ``bytes`` per value (None stays None: a tombstone). Avro is written by fastavro's
``schemaless_writer``, JSON is checked against the schema with jsonschema then written as
compact UTF-8 text, Protobuf goes through the message class (``message_indexes`` picks a
message other than the file's first). What decode.decode_column reads back gives the same
column values, and confluent-kafka's deserializers read the bytes.

A value the schema does not accept raises :class:`SchemaEncodeError` naming the row. Pure;
thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from loglake.errors import SchemaDecodeError
from loglake.schemas.codecs import codec_for
from loglake.schemas.model import RegisteredSchema
from loglake.schemas.schema_set import SchemaSource


class SchemaEncodeError(SchemaDecodeError):
    """A value the schema does not accept (the row and the reason)."""


def encode_rows(values: Iterable[Any] | pa.Array | pa.ChunkedArray, schema: RegisteredSchema,
                source: SchemaSource, *, message_indexes: Sequence[int] | None = None
                ) -> list[bytes | None]:
    """Framed bytes of every value (module docstring); ``source`` resolves references."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        values = values.to_pylist()
    codec = codec_for(schema, source)
    variant = tuple(message_indexes or ())
    if variant == (0,):
        variant = ()
    out: list[bytes | None] = []
    for row, value in enumerate(values):
        if value is None:
            out.append(None)
            continue
        try:
            out.append(codec.encode(value, variant))
        except Exception as e:  # fastavro / jsonschema / protobuf refusals
            text = " ".join(str(getattr(e, "message", None) or e).split()) or type(e).__name__
            raise SchemaEncodeError(f"row {row}: schema id {schema.id} "
                                    f"({schema.schema_type}) does not accept the value: "
                                    f"{text}") from None
    return out
