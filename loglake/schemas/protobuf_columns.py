"""Arrow types of Protobuf messages, and the conversion of decoded messages to them.

Mapping (docs/SCHEMAS.md "Arrow types"): message -> struct (fields in declaration order; a
oneof's members are ordinary nullable fields, the one set holds the value), int32, int64,
uint32, sint32/64, fixed32, sfixed32/64 -> int64; uint64 and fixed64 -> int64 holding the same
64 bits (values from 2^63 up read as negative: add 2^64 to get them back; Delta has no
unsigned type), float/double -> float64, bool, string, bytes -> binary, enum -> string (the
value's name; a number the enum does not define -> its decimal text), repeated -> list,
map<K, V> -> map<K', V'>, nested messages -> struct. Well-known types:
google.protobuf.Timestamp -> timestamp[us, UTC], Duration -> int64 microseconds, the wrappers
(Int64Value, StringValue, ...) -> their value's type (null when unset), Struct, Value,
ListValue, Any, FieldMask -> string holding the JSON text (protobuf's JSON mapping). A message
inside itself (recursion) and a message without fields -> JSON text.

Presence: a field with presence (message fields, proto3 ``optional``, proto2 optional, oneof
members) that is not set is null; a proto3 scalar without presence reads as its default (0,
"", false), as every Protobuf reader sees it.

Encoding goes the other way (:func:`to_message`): a column value (dict) -> a message through
protobuf's ``json_format.ParseDict`` after the few conversions the JSON mapping needs.

Pure; thread-safe (message classes are).
"""

from __future__ import annotations

import base64
import datetime
import math
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from loglake.schemas.column_mapping import (
    JSON_TEXT,
    MAX_DEPTH,
    Convert,
    Mapped,
    from_json_text,
    json_text,
)

TIMESTAMP_UTC = pa.timestamp("us", tz="UTC")
_UTC = datetime.UTC
_TWO_64 = 1 << 64
_INT64_MAX = (1 << 63) - 1
_FD = FieldDescriptor
_INTEGERS = frozenset({_FD.TYPE_INT32, _FD.TYPE_INT64, _FD.TYPE_UINT32, _FD.TYPE_SINT32,
                       _FD.TYPE_SINT64, _FD.TYPE_FIXED32, _FD.TYPE_SFIXED32,
                       _FD.TYPE_SFIXED64})
_UNSIGNED_64 = frozenset({_FD.TYPE_UINT64, _FD.TYPE_FIXED64})
_WRAPPERS: dict[str, pa.DataType] = {
    "google.protobuf.DoubleValue": pa.float64(), "google.protobuf.FloatValue": pa.float64(),
    "google.protobuf.Int64Value": pa.int64(), "google.protobuf.UInt64Value": pa.int64(),
    "google.protobuf.Int32Value": pa.int64(), "google.protobuf.UInt32Value": pa.int64(),
    "google.protobuf.BoolValue": pa.bool_(), "google.protobuf.StringValue": pa.string(),
    "google.protobuf.BytesValue": pa.binary(),
}
_JSON_WELL_KNOWN = frozenset({"google.protobuf.Struct", "google.protobuf.Value",
                              "google.protobuf.ListValue", "google.protobuf.Any",
                              "google.protobuf.FieldMask", "google.protobuf.Empty"})


def mapped(descriptor: Descriptor) -> Mapped:
    """The Arrow type of a message and the converter of a decoded message (an instance of
    its class) to a column value; ``unconvert`` gives a dict for :func:`to_message`."""
    return _message(descriptor, (), 0)


def _wrap_u64(value: int) -> int:
    return value - _TWO_64 if value > _INT64_MAX else value


def _unwrap_u64(value: Any) -> Any:
    return value + _TWO_64 if isinstance(value, int) and value < 0 else value


def _message_json(message: Message) -> str | None:
    try:
        return json_text(json_format.MessageToDict(message, preserving_proto_field_name=True))
    except Exception:  # Any with a type not in the pool: keep the bytes
        return json_text({"@bytes": base64.b64encode(message.SerializeToString()).decode()})


AS_MESSAGE_JSON = Mapped(JSON_TEXT, _message_json, from_json_text)


def _timestamp(message: Message) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(0, _UTC) + datetime.timedelta(
        seconds=message.seconds, microseconds=message.nanos // 1000)


def _timestamp_json(value: Any) -> Any:
    if value is None:
        return None
    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp.ToJsonString()


def _duration(message: Message) -> int:
    return int(message.seconds) * 1_000_000 + int(message.nanos) // 1000


def _duration_json(value: Any) -> Any:
    if value is None:
        return None
    duration = Duration()
    duration.FromMicroseconds(int(value))
    return duration.ToJsonString()


def _float_json(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _bytes_json(value: Any) -> Any:
    return None if value is None else base64.b64encode(bytes(value)).decode("ascii")


def _message(descriptor: Descriptor, parents: tuple[str, ...], depth: int) -> Mapped:
    name = descriptor.full_name
    if name == "google.protobuf.Timestamp":
        return Mapped(TIMESTAMP_UTC, _timestamp, _timestamp_json)
    if name == "google.protobuf.Duration":
        return Mapped(pa.int64(), _duration, _duration_json)
    if name in _WRAPPERS:
        inner = descriptor.fields_by_name["value"]
        scalar = _scalar(inner)
        fn = scalar.convert
        return Mapped(_WRAPPERS[name], (lambda m: m.value) if fn is None
                      else (lambda m: fn(m.value)), scalar.unconvert)
    if (name in _JSON_WELL_KNOWN or name in parents or depth > MAX_DEPTH
            or not descriptor.fields):
        return AS_MESSAGE_JSON
    parents = (*parents, name)
    getters: list[tuple[str, Callable[[Message], Any]]] = []
    fields: list[pa.Field] = []
    backs: list[tuple[str, Convert]] = []
    for field in descriptor.fields:
        column = _field(field, parents, depth)
        fields.append(pa.field(field.name, column.type))
        getters.append((field.name, _getter(field, column)))
        if column.unconvert is not None:
            backs.append((field.name, column.unconvert))

    def convert(message: Message) -> dict[str, Any]:
        return {key: get(message) for key, get in getters}

    def unconvert(value: Any) -> Any:
        if value is None:
            return None
        out = {k: v for k, v in dict(value).items() if v is not None}
        for key, back in backs:
            if key in out:
                out[key] = back(out[key])
        return out

    return Mapped(pa.struct(fields), convert, unconvert)


def _scalar(field: FieldDescriptor) -> Mapped:
    kind = field.type
    if kind in _INTEGERS:
        return Mapped(pa.int64())
    if kind in _UNSIGNED_64:
        return Mapped(pa.int64(), _wrap_u64, _unwrap_u64)
    if kind in (_FD.TYPE_DOUBLE, _FD.TYPE_FLOAT):
        return Mapped(pa.float64(), None, _float_json)
    if kind == _FD.TYPE_BOOL:
        return Mapped(pa.bool_())
    if kind == _FD.TYPE_STRING:
        return Mapped(pa.string())
    if kind == _FD.TYPE_BYTES:
        return Mapped(pa.binary(), None, _bytes_json)
    if kind == _FD.TYPE_ENUM:
        by_number = {v.number: v.name for v in field.enum_type.values}
        return Mapped(pa.string(), lambda number: by_number.get(number, str(number)),
                      lambda name: int(name) if isinstance(name, str) and
                      name.lstrip("-").isdigit() else name)
    raise ValueError(f"field {field.full_name}: unsupported type {kind}")


def _is_repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _is_map(field: FieldDescriptor) -> bool:
    return (_is_repeated(field) and field.message_type is not None
            and field.message_type.GetOptions().map_entry)


def _field(field: FieldDescriptor, parents: tuple[str, ...], depth: int) -> Mapped:
    if _is_map(field):
        entry = field.message_type
        key = _scalar(entry.fields_by_name["key"])
        value = _element(entry.fields_by_name["value"], parents, depth)
        return Mapped(pa.map_(key.type, value.type), _map_convert(key, value),
                      _map_unconvert(key, value))
    element = _element(field, parents, depth)
    if _is_repeated(field):
        fn, back = element.convert, element.unconvert
        return Mapped(pa.list_(element.type),
                      None if fn is None else (lambda items: [fn(i) for i in items]),
                      None if back is None else (lambda items: [back(i) for i in items]))
    return element


def _element(field: FieldDescriptor, parents: tuple[str, ...], depth: int) -> Mapped:
    if field.type in (_FD.TYPE_MESSAGE, _FD.TYPE_GROUP):
        return _message(field.message_type, parents, depth + 1)
    return _scalar(field)


def _map_convert(key: Mapped, value: Mapped) -> Convert:
    kfn, vfn = key.convert, value.convert

    def convert(container: Any) -> Any:
        return [(k if kfn is None else kfn(k), v if vfn is None else vfn(v))
                for k, v in container.items()]

    return convert


def _map_unconvert(key: Mapped, value: Mapped) -> Convert:
    kback, vback = key.unconvert, value.unconvert

    def unconvert(pairs: Any) -> Any:
        if pairs is None:
            return None
        items = pairs.items() if isinstance(pairs, dict) else pairs
        return {str(k if kback is None else kback(k)): v if vback is None or v is None
                else vback(v) for k, v in items}

    return unconvert


def _getter(field: FieldDescriptor, column: Mapped) -> Callable[[Message], Any]:
    name = field.name
    fn = column.convert
    if _is_repeated(field):
        if fn is None:
            return lambda message: list(getattr(message, name))
        return lambda message: fn(getattr(message, name))
    if field.has_presence:
        if fn is None:
            return lambda message: (getattr(message, name) if message.HasField(name)
                                    else None)
        return lambda message: fn(getattr(message, name)) if message.HasField(name) else None
    if fn is None:
        return lambda message: getattr(message, name)
    return lambda message: fn(getattr(message, name))


def to_message(value: Any, cls: type[Message], column: Mapped) -> Message:
    """A message of ``cls`` from a column value of its mapping ``column`` (a dict)."""
    back = column.unconvert
    document = value if back is None else back(value)
    message = cls()
    json_format.ParseDict(document, message)
    return message
