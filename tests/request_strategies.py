"""Hypothesis strategies for Kafka request frames: valid ones built from kio's schemas, and
mutations of their lengths, counts and varints to values that cannot fit.

* :func:`valid_frames` draws a supported (API key, version) and a random request entity of it
  (``st.from_type`` over kio's dataclasses), encoded with kio's writer — header and body, no
  size prefix.
* :func:`length_fields` walks a frame with kio's primitive readers (independently of
  ``loglake.broker.request_bounds``) and returns where every length, count and varint sits.
* :func:`out_of_range_frames` replaces one of them with a value larger than the bytes left (or
  a negative/null one, or an over-long varint); :func:`damaged_frames` adds truncation and
  random splices. Used in-process by tests/test_wire_bounds.py (inside a subprocess, since a
  regression could abort the interpreter) and against a live broker by tests/test_wire_fuzz.py.
"""

from __future__ import annotations

import dataclasses
import io
import struct
import types
import typing
from typing import Any, NamedTuple, get_args, get_origin

from hypothesis import assume
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.serial.readers import (
    read_compact_array_length,
    read_int8,
    read_int16,
    read_int32,
    read_unsigned_varint,
)
from kio.static.primitive import Records

from loglake.broker.apis import API_TABLE
from loglake.broker.codec import build, request_class
from loglake.schemas.wire import varint

st.register_type_strategy(Records, st.binary(max_size=48).map(Records))

SUPPORTED: list[tuple[int, int]] = [
    (api.key, version) for api in API_TABLE.values()
    for version in range(api.min_version, api.max_version + 1)
]
"""Every (API key, version) the broker advertises in ApiVersions."""

_FIXED = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2,
          "int32": 4, "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8,
          "timedelta_i64": 8, "datetime_i64": 8, "float64": 8, "uuid": 16}


class LengthField(NamedTuple):
    """A length, count or varint in a frame: ``offset`` of its first byte, ``width`` in bytes,
    ``kind`` ("varint", "int16" or "int32") and ``role`` ("string", "bytes", "array", "tags",
    "tag_size"); ``nullable`` if -1/0 (null) is legal there."""

    offset: int
    width: int
    kind: str
    role: str
    nullable: bool


def encode_frame(api_key: int, version: int, body: Any, *, correlation_id: int = 1,
                 client_id: str | None = "fuzz") -> bytes:
    """Header + body of a request (no size prefix); ``body`` is an entity or a dict."""
    cls = request_class(api_key, version)
    header_cls = cls.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_cls)(buffer, build(header_cls, {
        "request_api_key": api_key, "request_api_version": version,
        "correlation_id": correlation_id, "client_id": client_id}))
    entity_writer(cls)(buffer, body if dataclasses.is_dataclass(body) else build(cls, body))
    return buffer.getvalue()


@st.composite
def valid_frames(draw: st.DrawFn, apis: list[tuple[int, int]] | None = None
                 ) -> tuple[int, int, bytes]:
    """(api_key, version, frame) of a random valid request of an advertised API version."""
    api_key, version = draw(st.sampled_from(apis or SUPPORTED))
    entity = draw(st.from_type(request_class(api_key, version)))
    try:
        frame = encode_frame(api_key, version, entity,
                             correlation_id=draw(st.integers(0, 2**31 - 1)))
    except (ValueError, OverflowError, TypeError, struct.error):
        assume(False)  # kio cannot encode this drawn value (e.g. a timedelta out of range)
        raise
    return api_key, version, frame


def length_fields(api_key: int, version: int, frame: bytes) -> list[LengthField]:
    """Every length/count/varint of ``frame`` (header and body), in frame order."""
    cls = request_class(api_key, version)
    found: list[LengthField] = []
    offset = _walk(cls.__header_schema__, frame, 0, found)
    _walk(cls, frame, offset, found)
    return found


def _unwrap(annotation: Any) -> tuple[Any, bool, bool]:
    """(inner type, is array, is nullable) of a kio field annotation."""
    optional = get_origin(annotation) in (types.UnionType, typing.Union)
    if optional:
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    if get_origin(annotation) is tuple:
        return get_args(annotation)[0], True, optional
    return annotation, False, optional


def _walk(cls: Any, data: bytes, offset: int, found: list[LengthField]) -> int:
    flexible = bool(cls.__flexible__)
    is_header = cls.__name__ == "RequestHeader"
    for field in dataclasses.fields(cls):
        if field.metadata.get("tag") is not None:
            continue
        inner, is_array, optional = _unwrap(field.type)
        compact = flexible and not (is_header and field.name == "client_id")
        kafka_type = field.metadata.get("kafka_type")
        nullable = optional or (is_header and field.name == "client_id")
        if is_array:
            start = offset
            if compact:
                count, size = read_compact_array_length(data, offset)
                count = -1 if count is None else count
                found.append(LengthField(start, size, "varint", "array", nullable))
            else:
                count, size = read_int32(data, offset)
                found.append(LengthField(start, 4, "int32", "array", nullable))
            offset += size
            for _ in range(max(count, 0)):
                offset = _walk_value(inner, kafka_type, compact, data, offset, found)
        else:
            if dataclasses.is_dataclass(inner) and optional:
                marker, size = read_int8(data, offset)
                offset += size
                if marker < 0:
                    continue
            offset = _walk_value(inner, kafka_type, compact, data, offset, found, nullable)
    if flexible:
        start = offset
        count, size = read_unsigned_varint(data, offset)
        found.append(LengthField(start, size, "varint", "tags", True))
        offset += size
        for _ in range(count):
            _tag, size = read_unsigned_varint(data, offset)
            offset += size
            length, size = read_unsigned_varint(data, offset)
            found.append(LengthField(offset, size, "varint", "tag_size", False))
            offset += size + length
    return offset


def _walk_value(inner: Any, kafka_type: str | None, compact: bool, data: bytes, offset: int,
                found: list[LengthField], nullable: bool = False) -> int:
    if dataclasses.is_dataclass(inner):
        return _walk(inner, data, offset, found)
    assert kafka_type is not None
    if kafka_type in _FIXED:
        return offset + _FIXED[kafka_type]
    role = "string" if kafka_type == "string" else "bytes"
    length: int
    if compact:
        length, size = read_unsigned_varint(data, offset)
        found.append(LengthField(offset, size, "varint", role, nullable))
        return offset + size + max(length - 1, 0)
    if kafka_type == "string":
        length, size = read_int16(data, offset)
        found.append(LengthField(offset, 2, "int16", role, nullable))
    else:
        length, size = read_int32(data, offset)
        found.append(LengthField(offset, 4, "int32", role, nullable))
    return offset + size + max(length, 0)


encode_uvarint = varint
"""Kafka's unsigned varint of any value below 2**64: the same base-128 encoding as Protobuf's
(kio's writer refuses values past uint32, which the mutations need)."""


@st.composite
def out_of_range_frames(draw: st.DrawFn, apis: list[tuple[int, int]] | None = None
                        ) -> tuple[int, int, bytes, str]:
    """A valid frame with one length/count/varint replaced by a value that cannot be right:
    larger than the bytes left after it, negative below -1, null where not nullable, or a
    varint of more than 5 bytes. Returns (api_key, version, frame, what was done)."""
    api_key, version, frame = draw(valid_frames(apis))
    fields = [f for f in length_fields(api_key, version, frame) if f.role != "tag_size"]
    assume(fields)
    role = draw(st.sampled_from(sorted({f.role for f in fields})))  # arrays as often as strings
    field = draw(st.sampled_from([f for f in fields if f.role == role]))
    after = len(frame) - field.offset - field.width  # bytes after the field, as encoded
    if field.kind == "varint":
        choice = draw(st.sampled_from(["huge", "past_end", "too_long"]))
        if choice == "too_long":
            raw = b"\xff" * 5 + b"\x01"
        else:
            low = after + 2 if field.role != "tags" else after // 2 + 2
            value = (draw(st.integers(2**31, 2**35 - 1)) if choice == "huge"
                     else draw(st.integers(low, low + 1000)))
            raw = encode_uvarint(value)
        mutated = frame[:field.offset] + raw + frame[field.offset + field.width:]
        return api_key, version, mutated, f"{field.role} varint at {field.offset} -> {choice}"
    bits = 16 if field.kind == "int16" else 32
    choices = ["past_end", "negative"] + ([] if field.nullable else ["null"])
    choice = draw(st.sampled_from(choices))
    if choice == "null":
        value = -1
    elif choice == "negative":
        value = draw(st.integers(-(2 ** (bits - 1)), -2))
    else:
        assume(after + 1 < 2 ** (bits - 1))
        value = draw(st.integers(after + 1, 2 ** (bits - 1) - 1))
    raw = value.to_bytes(field.width, "big", signed=True)
    mutated = frame[:field.offset] + raw + frame[field.offset + field.width:]
    return api_key, version, mutated, f"{field.role} {field.kind} at {field.offset} -> {value}"


@st.composite
def damaged_frames(draw: st.DrawFn, apis: list[tuple[int, int]] | None = None
                   ) -> tuple[int, int, bytes, str]:
    """Out-of-range lengths, truncations, and random byte splices of valid frames (the frame's
    API key and version are kept, so the broker decodes it with that schema)."""
    kind = draw(st.sampled_from(["out_of_range", "truncate", "splice", "flip"]))
    if kind == "out_of_range":
        result: tuple[int, int, bytes, str] = draw(out_of_range_frames(apis))
        return result
    api_key, version, frame = draw(valid_frames(apis))
    if kind == "truncate":
        cut = draw(st.integers(8, max(8, len(frame) - 1)))
        return api_key, version, frame[:cut], f"truncated to {cut} of {len(frame)}"
    position = draw(st.integers(8, max(8, len(frame))))
    if kind == "splice":
        junk = draw(st.binary(min_size=1, max_size=16))
        drop = draw(st.integers(0, 8))
        mutated = frame[:position] + junk + frame[position + drop:]
        return api_key, version, mutated, f"spliced {junk.hex()} at {position}"
    index = min(position, len(frame) - 1)
    value = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
    mutated = frame[:index] + bytes([value]) + frame[index + 1:]
    return api_key, version, mutated, f"byte {index} -> {value:#x}"
