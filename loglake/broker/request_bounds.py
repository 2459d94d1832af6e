"""Bounds check of a request frame before kio decodes it: no count can make the decoder allocate.

kio's native reader trusts declared sizes: for an array it reserves ``count`` slots before it
reads the first element, so a compact array length of ``0xffffffff`` aborts the process
(``memory allocation of N bytes failed``) and smaller absurd counts reserve gigabytes before
failing. Every request frame therefore goes through :func:`check_request` first, a walk over the
same kio schema classes that reads only lengths, counts and varints and compares each with the
bytes left in the frame. It allocates nothing that grows with the input.

Rules (Kafka's generated readers do the same or less; a breach raises :class:`FrameError`):

* a string, bytes or records field of length ``n`` needs ``n`` bytes; a length below -1, or -1
  (null) where the schema says the field is not nullable, is refused (so is an array length
  below -1: Kafka reads it as null, kio cannot decode it);
* an array of ``n`` elements needs ``n * min_size`` bytes, ``min_size`` being the smallest
  encoding of one element (at least 1, so an array of empty elements is bounded by the bytes
  left as in Kafka's ``Tried to allocate a collection of size N``); a null array where the
  schema has no null (Kafka: ``non-nullable field X was serialized as null``) is refused, so
  handlers only ever see ``None`` in the fields whose kio type says ``| None``;
* all arrays of one request together hold at most :data:`MAX_REQUEST_ELEMENTS` elements, which
  bounds the memory of the decoded objects (a 100 MiB frame of 2-byte elements would otherwise
  become tens of millions of Python objects);
* an unsigned varint has at most 5 bytes; a tagged-field section of ``n`` fields needs ``2n``
  bytes, each field's declared size must fit, and a known tagged field's value must lie inside
  its declared size. Unknown tags are reported (the caller then uses the tolerant reader).

One checker function is generated per kio entity class, on first use, from its dataclass fields
(Python source compiled with :func:`exec`: runs of fixed-size fields become one addition, arrays
of fixed-size elements one multiplication, array elements are checked inline in the loop).
Bytes after the body are not looked at (Kafka ignores them too). Cost: about 1 µs for a typical
Produce or Fetch request, 40-80 µs for a Fetch of 1,000 partitions (see tests/test_wire_bounds.py
for what is covered).

Thread-safety: checkers are pure; the cache is filled under the GIL.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
import types
import typing
from collections.abc import Callable
from typing import Any, get_args, get_origin

from kio.schema.errors import ErrorCode

from loglake.errors import LoglakeError

MAX_REQUEST_ELEMENTS = 1 << 18
"""Array elements one request may hold in all (262,144: more than the partitions of a large
Kafka cluster, so no real request comes near it; 1M of the smallest elements, 4-character topic
names, decode into about 120 MiB of Python objects, so this bounds one request's objects to
about 30 MiB whatever its frame size)."""

MAX_VARINT_BYTES = 5


class FrameError(LoglakeError):
    """The frame cannot be decoded; the connection is closed (no error code reaches the
    client, as in Kafka, where a request that does not parse closes the channel)."""

    code = ErrorCode.invalid_request


FrameBytes = bytes | memoryview
"""A request frame: bytes, or a read-only view of the buffer a large frame was read into."""

Checker = Callable[[FrameBytes, int, int, list[Any]], int]
"""``check(data, offset, end, state) -> offset after the entity``; ``state`` is
``[elements left, unknown tag seen]``."""

_FIXED_SIZES: dict[str, int] = {
    "bool": 1, "int8": 1, "uint8": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8,
    "uuid": 16,
}
_VARIABLE = frozenset({"string", "bytes", "records"})


def check_request(data: FrameBytes, header_cls: Any, body_cls: Any) -> bool:
    """Check header and body of a request frame (without the size prefix) against ``data``.

    Returns True if the frame has tagged fields the schema does not know (decode it with the
    tolerant reader). Raises :class:`FrameError` if any length, count or varint does not fit.
    """
    state: list[Any] = [MAX_REQUEST_ELEMENTS, False]
    end = len(data)
    try:
        offset = entity_checker(header_cls)(data, 0, end, state)
        entity_checker(body_cls)(data, offset, end, state)
    except (IndexError, struct.error) as exc:  # a checker bug must still be a clean refusal
        raise FrameError(f"{body_cls.__name__}: {exc}") from None
    return bool(state[1])


# --------------------------------------------------------------------------------------------
# runtime helpers used by the generated code


def _truncated(where: str) -> FrameError:
    return FrameError(f"{where}: the frame ends inside this field")


def _read_uvarint(data: FrameBytes, offset: int, end: int, where: str) -> tuple[int, int]:
    value = 0
    shift = 0
    for _ in range(MAX_VARINT_BYTES):
        if offset >= end:
            raise _truncated(where)
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, offset
        shift += 7
    raise FrameError(f"{where}: varint longer than {MAX_VARINT_BYTES} bytes")


def _tagged_fields(data: FrameBytes, offset: int, end: int, state: list[Any],
                   known: dict[int, Checker], where: str) -> int:
    count, offset = _read_uvarint(data, offset, end, where)
    if count > (end - offset) // 2:
        raise FrameError(f"{where}: {count} tagged fields cannot fit in {end - offset} bytes")
    for _ in range(count):
        tag, offset = _read_uvarint(data, offset, end, where)
        size, offset = _read_uvarint(data, offset, end, where)
        if size > end - offset:
            raise FrameError(f"{where}: tagged field {tag} of {size} bytes runs past the frame")
        checker = known.get(tag)
        if checker is None:
            state[1] = True
        else:
            checker(data, offset, offset + size, state)
        offset += size
    return offset


def _too_many(where: str, count: int, left: int, min_size: int) -> FrameError:
    return FrameError(f"{where}: array of {count} elements (at least {min_size} bytes each) "
                      f"cannot fit in the {max(left, 0)} bytes left")


def _over_budget(where: str) -> FrameError:
    return FrameError(f"{where}: the request holds more than {MAX_REQUEST_ELEMENTS} array "
                      f"elements")


def _null(where: str) -> FrameError:
    return FrameError(f"{where}: null where the schema has no null")


def _negative(where: str, length: int) -> FrameError:
    return FrameError(f"{where}: negative length {length}")


_RUNTIME: dict[str, Any] = {
    "FrameError": FrameError, "_truncated": _truncated, "_read_uvarint": _read_uvarint,
    "_tagged_fields": _tagged_fields, "_too_many": _too_many, "_over_budget": _over_budget,
    "_null": _null, "_negative": _negative,
    "_i16": struct.Struct(">h").unpack_from, "_i32": struct.Struct(">i").unpack_from,
}


# --------------------------------------------------------------------------------------------
# schema analysis


@dataclasses.dataclass(frozen=True)
class _Field:
    """One field of a kio entity as the wire sees it."""

    name: str
    kafka_type: str | None  # None for entities
    entity: Any  # the nested entity class; None for primitives
    is_array: bool
    nullable: bool  # the array itself (arrays) or the value (others)
    compact: bool
    tag: int | None


def _fields(cls: Any) -> list[_Field]:
    flexible = bool(cls.__flexible__)
    is_header = cls.__name__ == "RequestHeader"
    result = []
    for field in dataclasses.fields(cls):
        inner, is_array, optional = _unwrap(field.type)
        entity = inner if isinstance(inner, type) and dataclasses.is_dataclass(inner) else None
        kafka_type = None if entity is not None else field.metadata.get("kafka_type")
        if entity is None and kafka_type not in _FIXED_SIZES and kafka_type not in _VARIABLE:
            raise LookupError(f"{cls.__name__}.{field.name}: unknown kafka type {kafka_type!r}")
        tag = field.metadata.get("tag")
        # Kafka: RequestHeader.client_id is a legacy nullable string even in header v2
        legacy_client_id = is_header and field.name == "client_id"
        result.append(_Field(
            name=field.name, kafka_type=kafka_type, entity=entity, is_array=is_array,
            nullable=optional or legacy_client_id or tag is not None,
            compact=flexible and not legacy_client_id, tag=None if tag is None else int(tag),
        ))
    return result


def _unwrap(annotation: Any) -> tuple[Any, bool, bool]:
    """(inner type, is array, is nullable) of a kio field annotation."""
    optional = False
    if get_origin(annotation) in (types.UnionType, typing.Union):
        args = [a for a in get_args(annotation) if a is not type(None)]
        optional = True
        annotation = args[0]
    if get_origin(annotation) is tuple:
        return get_args(annotation)[0], True, optional
    return annotation, False, optional


@functools.cache
def min_size(cls: Any) -> int:
    """The fewest bytes an encoding of entity ``cls`` can take."""
    total = 1 if cls.__flexible__ else 0  # the tagged-field count
    for field in _fields(cls):
        if field.tag is None:
            total += _field_min_size(field)
    return total


def _field_min_size(field: _Field) -> int:
    if field.is_array:
        return 1 if field.compact else 4
    if field.entity is not None:
        return 1 if field.nullable else min_size(field.entity)
    assert field.kafka_type is not None
    if field.kafka_type in _FIXED_SIZES:
        return _FIXED_SIZES[field.kafka_type]
    if field.compact:
        return 1
    return 2 if field.kafka_type == "string" else 4


def _element_min_size(field: _Field) -> int:
    if field.entity is not None:
        return min_size(field.entity)
    assert field.kafka_type is not None
    single = dataclasses.replace(field, is_array=False, nullable=False)
    return _field_min_size(single)


@functools.cache
def fixed_size(cls: Any) -> int | None:
    """The encoded size of ``cls`` if every encoding has it (no strings, arrays, tags)."""
    if cls.__flexible__:
        return None
    total = 0
    for field in _fields(cls):
        if field.is_array or field.kafka_type not in _FIXED_SIZES:
            return None
        total += _FIXED_SIZES[field.kafka_type]
    return total


def _element_fixed_size(field: _Field) -> int | None:
    if field.entity is not None:
        return fixed_size(field.entity)
    return _FIXED_SIZES.get(field.kafka_type or "")


# --------------------------------------------------------------------------------------------
# code generation


class _Source:
    """Lines of one generated function, with the fixed-size bytes not yet added to ``o``."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.lines: list[str] = []
        self.pending = 0
        self.depth = 0
        self.namespace = namespace

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def flush(self, indent: int) -> None:
        if self.pending:
            self.emit(indent, f"o += {self.pending}")
            self.pending = 0

    def constant(self, value: Any) -> str:
        name = f"_k{len(self.namespace)}"
        self.namespace[name] = value
        return name


def _emit_uvarint(src: _Source, indent: int, var: str, where: str) -> None:
    src.flush(indent)
    src.emit(indent, "if o >= end:")
    src.emit(indent + 1, f"raise _truncated({where})")
    src.emit(indent, f"{var} = d[o]")
    src.emit(indent, f"if {var} < 128:")
    src.emit(indent + 1, "o += 1")
    src.emit(indent, "elif o + 1 < end and d[o + 1] < 128:")  # 128..16383: records lengths
    src.emit(indent + 1, f"{var} = ({var} & 127) | (d[o + 1] << 7)")
    src.emit(indent + 1, "o += 2")
    src.emit(indent, "else:")
    src.emit(indent + 1, f"{var}, o = _read_uvarint(d, o, end, {where})")


def _emit_int(src: _Source, indent: int, var: str, width: int, where: str) -> None:
    src.flush(indent)
    src.emit(indent, f"if o + {width} > end:")
    src.emit(indent + 1, f"raise _truncated({where})")
    src.emit(indent, f"{var} = {'_i16' if width == 2 else '_i32'}(d, o)[0]")
    src.emit(indent, f"o += {width}")


def _emit_length(src: _Source, indent: int, var: str, field: _Field, where: str,
                 *, nullable: bool, array: bool) -> int:
    """Read a length/count into ``var``; emit the null branch; return the indent of the
    non-null branch (``var`` then holds the length, >= 0)."""
    if field.compact:
        _emit_uvarint(src, indent, var, where)
        src.emit(indent, f"if {var} == 0:")
        src.emit(indent + 1, "pass" if nullable else f"raise _null({where})")
        src.emit(indent, "else:")
        src.emit(indent + 1, f"{var} -= 1")
        return indent + 1
    width = 4 if array or field.kafka_type != "string" else 2
    _emit_int(src, indent, var, width, where)
    src.emit(indent, f"if {var} < 0:")
    if nullable:
        src.emit(indent + 1, f"if {var} != -1:")
        src.emit(indent + 2, f"raise _negative({where}, {var})")
    else:
        src.emit(indent + 1, f"raise _null({where}) if {var} == -1 else _negative({where}, {var})")
    src.emit(indent, "else:")
    return indent + 1


def _emit_value(src: _Source, indent: int, field: _Field, where: str, *, nullable: bool) -> None:
    """One non-array value of ``field`` (entity or primitive)."""
    if field.entity is not None:
        checker = src.constant(entity_checker(field.entity))
        src.flush(indent)
        if nullable:  # KIP-893 nullable struct: int8 marker, negative = null
            src.emit(indent, "if o >= end:")
            src.emit(indent + 1, f"raise _truncated({where})")
            src.emit(indent, "o += 1")
            src.emit(indent, "if d[o - 1] < 128:")
            src.emit(indent + 1, f"o = {checker}(d, o, end, st)")
        else:
            src.emit(indent, f"o = {checker}(d, o, end, st)")
        return
    assert field.kafka_type is not None
    if field.kafka_type in _FIXED_SIZES:
        src.pending += _FIXED_SIZES[field.kafka_type]
        return
    var = f"n{src.depth}"
    inner = _emit_length(src, indent, var, field, where, nullable=nullable, array=False)
    src.emit(inner, f"o += {var}")
    src.emit(inner, "if o > end:")
    src.emit(inner + 1, f"raise _truncated({where})")


def _emit_field(src: _Source, indent: int, field: _Field, where: str) -> None:
    if not field.is_array:
        _emit_value(src, indent, field, where, nullable=field.nullable)
        return
    var = f"n{src.depth}"
    inner = _emit_length(src, indent, var, field, where, nullable=field.nullable, array=True)
    least = max(1, _element_min_size(field))
    src.emit(inner, f"if {var} > (end - o) // {least}:")
    src.emit(inner + 1, f"raise _too_many({where}, {var}, end - o, {least})")
    src.emit(inner, f"st[0] -= {var}")
    src.emit(inner, "if st[0] < 0:")
    src.emit(inner + 1, f"raise _over_budget({where})")
    size = _element_fixed_size(field)
    if size is not None:
        src.emit(inner, f"o += {var} * {size}")
        return
    src.emit(inner, f"for _ in range({var}):")
    src.depth += 1
    if field.entity is not None:  # inline: no call per element
        _emit_entity_body(src, inner + 1, field.entity)
    else:
        _emit_value(src, inner + 1, field, where, nullable=False)
    src.flush(inner + 1)
    src.depth -= 1


def _compile(name: str, src: _Source, body_indent: int) -> Checker:
    src.flush(body_indent)
    src.emit(body_indent, "if o > end:")
    src.emit(body_indent + 1, f"raise _truncated({src.constant(name)})")
    src.emit(body_indent, "return o")
    code = "def check(d, o, end, st):\n" + "\n".join(src.lines) + "\n"
    exec(compile(code, f"<request_bounds {name}>", "exec"), src.namespace)
    checker: Checker = src.namespace["check"]
    return checker


@functools.cache
def entity_checker(cls: Any) -> Checker:
    """The compiled bounds checker of kio entity ``cls`` (see module docstring)."""
    src = _Source(dict(_RUNTIME))
    _emit_entity_body(src, 1, cls)
    return _compile(cls.__name__, src, 1)


def _emit_entity_body(src: _Source, indent: int, cls: Any) -> None:
    """The fields of ``cls`` and its tagged-field section, at ``indent``."""
    known: dict[int, Checker] = {}
    for field in _fields(cls):
        where = src.constant(f"{cls.__name__}.{field.name}")
        if field.tag is not None:
            known[field.tag] = _tag_checker(cls, field)
            continue
        _emit_field(src, indent, field, where)
    if cls.__flexible__:
        where = src.constant(f"{cls.__name__} tagged fields")
        table = src.constant(known)
        src.flush(indent)
        src.emit(indent, "if o >= end:")
        src.emit(indent + 1, f"raise _truncated({where})")
        src.emit(indent, "if d[o] == 0:")
        src.emit(indent + 1, "o += 1")
        src.emit(indent, "else:")
        src.emit(indent + 1, f"o = _tagged_fields(d, o, end, st, {table}, {where})")


def _tag_checker(cls: Any, field: _Field) -> Checker:
    src = _Source(dict(_RUNTIME))
    _emit_field(src, 1, field, src.constant(f"{cls.__name__}.{field.name}"))
    return _compile(f"{cls.__name__}.{field.name}", src, 1)
