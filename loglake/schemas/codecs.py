"""One codec per registered schema: decode a payload to a column value, encode one back.

A codec is built from a :class:`RegisteredSchema` and a :class:`SchemaSource` (references
resolved and parsed once by parse.py) and cached by the schema's content and its resolved
references (:func:`codec_for`; bounded LRU). It knows:

- ``variant(body)``: which message a framed body holds and the payload after the prefix
  (Protobuf: the message-index path; Avro and JSON have one variant, ``()``);
- ``mapped(variant)``: the Arrow type of that variant and the converter to it (the column
  mappings in avro_columns.py, json_columns.py, protobuf_columns.py);
- ``decode(variant, payload)``: the Python value ready for ``pa.array`` (raises on a payload
  that does not decode; the caller turns that into the row's error text);
- ``encode(value)``: framed bytes of a column value (encode.py).

The codec's Arrow type (:attr:`Codec.arrow_type`) is its default variant's: Protobuf's first
message (index ``[0]``, Confluent's default), the schema itself otherwise.

Thread-safety: codecs are immutable after construction; fastavro readers, json and protobuf
message classes are safe to call from several threads. The cache is guarded by a lock.
"""

from __future__ import annotations

import io
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import fastavro
import pyarrow as pa

from loglake.errors import SchemaDecodeError
from loglake.schemas import avro_columns, json_columns, parse, protobuf_columns, wire
from loglake.schemas.column_mapping import Mapped
from loglake.schemas.model import RegisteredSchema
from loglake.schemas.schema_set import SchemaSource

Variant = tuple[int, ...]
DEFAULT_VARIANT: Variant = ()
CACHE_SIZE = 512


class Codec:
    """Decoder/encoder of one registered schema (see the module docstring)."""

    schema: RegisteredSchema
    parsed: parse.ParsedSchema

    def __init__(self, schema: RegisteredSchema, parsed: parse.ParsedSchema) -> None:
        self.schema = schema
        self.parsed = parsed

    @property
    def arrow_type(self) -> pa.DataType:
        return self.mapped(DEFAULT_VARIANT).type

    def variant(self, body: memoryview) -> tuple[Variant, memoryview]:
        return DEFAULT_VARIANT, body

    def mapped(self, variant: Variant) -> Mapped:
        raise NotImplementedError

    def decode(self, variant: Variant, payload: memoryview) -> Any:
        raise NotImplementedError

    def encode(self, value: Any, variant: Variant = DEFAULT_VARIANT) -> bytes:
        raise NotImplementedError


class AvroCodec(Codec):
    def __init__(self, schema: RegisteredSchema, parsed: parse.ParsedSchema) -> None:
        super().__init__(schema, parsed)
        self._avro = parse.fastavro_schema(parsed)
        named = (self._avro.get("__named_schemas", {}) if isinstance(self._avro, dict) else {})
        self._named: dict[str, Any] = dict(named)
        self._mapped = avro_columns.mapped(self._avro, self._named)
        self._options = avro_columns.decoder_options(self._avro, self._named)
        self._convert = self._mapped.convert

    def mapped(self, variant: Variant) -> Mapped:
        return self._mapped

    def decode(self, variant: Variant, payload: memoryview) -> Any:
        stream = io.BytesIO(payload)
        try:
            value = fastavro.schemaless_reader(stream, self._avro, None, **self._options)
        except (EOFError, IndexError, StopIteration) as e:
            raise SchemaDecodeError(f"truncated Avro payload ({len(payload)} bytes): "
                                    f"{type(e).__name__}") from None
        rest = len(payload) - stream.tell()
        if rest:
            raise SchemaDecodeError(f"{rest} bytes after the Avro value")
        return value if self._convert is None or value is None else self._convert(value)

    def encode(self, value: Any, variant: Variant = DEFAULT_VARIANT) -> bytes:
        stream = io.BytesIO()
        back = self._mapped.unconvert
        fastavro.schemaless_writer(stream, self._avro,
                                   value if back is None or value is None else back(value))
        return wire.frame(self.schema.id, stream.getvalue())


class JsonCodec(Codec):
    def __init__(self, schema: RegisteredSchema, parsed: parse.ParsedSchema) -> None:
        super().__init__(schema, parsed)
        self._mapped = json_columns.mapped(parse.json_document(parsed), parsed.reference_map)

    def mapped(self, variant: Variant) -> Mapped:
        return self._mapped

    def decode(self, variant: Variant, payload: memoryview) -> Any:
        value = json.loads(bytes(payload))
        convert = self._mapped.convert
        return value if convert is None or value is None else convert(value)

    def encode(self, value: Any, variant: Variant = DEFAULT_VARIANT) -> bytes:
        back = self._mapped.unconvert
        document = value if back is None or value is None else back(value)
        errors = sorted(parse.json_validator(self.parsed).iter_errors(document),
                        key=lambda e: list(e.path))
        if errors:
            where = "/".join(str(p) for p in errors[0].path) or "(root)"
            raise SchemaDecodeError(f"value does not validate at {where}: "
                                    f"{errors[0].message}")
        text = json.dumps(document, separators=(",", ":"))
        return wire.frame(self.schema.id, text.encode())


class ProtobufCodec(Codec):
    def __init__(self, schema: RegisteredSchema, parsed: parse.ParsedSchema) -> None:
        super().__init__(schema, parsed)
        self._variants: dict[Variant, tuple[Any, Mapped]] = {}
        self._lock = threading.Lock()
        self._variant_of(DEFAULT_VARIANT)

    def _variant_of(self, variant: Variant) -> tuple[Any, Mapped]:
        found = self._variants.get(variant)
        if found is None:
            with self._lock:
                descriptor = parse.message_descriptor(self.parsed, variant)
                found = (parse.message_class(self.parsed, variant),
                         protobuf_columns.mapped(descriptor))
                self._variants[variant] = found
        return found

    def variant(self, body: memoryview) -> tuple[Variant, memoryview]:
        indexes, payload = wire.message_indexes(body)
        variant = () if indexes == [0] else tuple(indexes)
        return variant, payload

    def mapped(self, variant: Variant) -> Mapped:
        return self._variant_of(variant)[1]

    def decode(self, variant: Variant, payload: memoryview) -> Any:
        cls, mapped = self._variant_of(variant)
        message = cls.FromString(bytes(payload))
        assert mapped.convert is not None
        return mapped.convert(message)

    def encode(self, value: Any, variant: Variant = DEFAULT_VARIANT) -> bytes:
        cls, column = self._variant_of(variant)
        message = protobuf_columns.to_message(value, cls, column)
        return wire.frame(self.schema.id, message.SerializeToString(),
                          list(variant) or [0])


_CODECS: dict[str, Callable[[RegisteredSchema, parse.ParsedSchema], Codec]] = {
    "AVRO": AvroCodec, "JSON": JsonCodec, "PROTOBUF": ProtobufCodec}
_cache: OrderedDict[tuple[object, ...], Codec] = OrderedDict()
_cache_lock = threading.Lock()


def codec_for(schema: RegisteredSchema, source: SchemaSource) -> Codec:
    """The (cached) codec of ``schema``; references resolved through ``source``.
    Raises SchemaDecodeError (a reference not found, a schema that does not parse)."""
    try:
        refs = parse.resolve_references(schema.references, source.referenced)
    except Exception as e:  # InvalidSchemaError, or the source's own errors
        raise SchemaDecodeError(_one_line(e)) from None
    key = (schema, tuple(sorted(refs.items())))
    with _cache_lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    codec = _build(schema, tuple(sorted(refs.items())))
    with _cache_lock:
        _cache[key] = codec
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return codec


def _build(schema: RegisteredSchema, refs: tuple[tuple[str, RegisteredSchema], ...]) -> Codec:
    kind = _CODECS.get(schema.schema_type.upper())
    if kind is None:
        raise SchemaDecodeError(f"unknown schema type {schema.schema_type!r}")
    try:
        parsed = parse.parse(schema.schema_type, schema.schema, dict(refs))
        return kind(schema, parsed)
    except SchemaDecodeError:
        raise
    except Exception as e:  # InvalidSchemaError, or a mapping that fails on an odd schema
        raise SchemaDecodeError(_one_line(e)) from None


def _one_line(e: BaseException) -> str:
    text = " ".join(str(getattr(e, "message", None) or e).split())
    return text or type(e).__name__
