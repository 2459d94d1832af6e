"""Kafka frame codec on top of kio: request decoding, response encoding, version-agnostic builders.

Frame format (Kafka protocol): ``length:int32`` then ``length`` bytes. A request starts with a
request header (v1 for non-flexible API versions, v2 with a tagged-field section for flexible
ones); a response starts with a response header (v0, or v1 for flexible versions except
ApiVersions, whose response header is always v0 so that old clients can parse the error).

Bounds first: kio's native reader reserves memory for a declared array count before it reads
the elements (a count of 2**32 aborts the process), so every request frame is checked by
:func:`loglake.broker.request_bounds.check_request` before kio sees it: each length, count and
varint against the bytes left, null only where the schema allows it, at most
``MAX_REQUEST_ELEMENTS`` array elements. Only a frame that passes is decoded.

Unknown tagged fields: the protocol says a receiver must skip tagged fields it does not know.
kio's native reader raises ``KeyError('Unknown tagged field tag: N')`` instead; the bounds check
reports unknown tags, and such frames are decoded by :func:`tolerant_reader`, a Python walker
over the same kio schema classes that reads known fields with kio's field readers and skips
unknown tags by their declared size. The native reader stays the fast path.

Responses are built from plain dictionaries with :func:`build`, which fills only the fields the
negotiated version has and supplies defaults for the rest, so one handler serves every version.

Thread-safety: pure functions; caches are filled at import or under the GIL.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, get_args, get_origin

from kio._kio_native import get_field_reader
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError as DecodeError
from kio.serial.readers import (
    read_compact_array_length,
    read_int8,
    read_legacy_array_length,
    read_unsigned_varint,
)
from kio.static.constants import EntityType

from loglake.broker.legacy_schemas import LEGACY_REQUESTS, LEGACY_RESPONSES
from loglake.broker.request_bounds import FrameBytes, FrameError, check_request
from loglake.broker.security.session import Session, internal_session

__all__ = ["FrameBytes", "FrameError", "RequestFrame", "build", "decode_header", "decode_request",
           "encode_response", "read_entity", "request_class", "response_class",
           "tolerant_reader"]

E = TypeVar("E")


@dataclasses.dataclass(frozen=True)
class RequestFrame:
    """A decoded request: header fields plus the kio request entity (None if unsupported)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    client_host: str = ""
    session: Session = dataclasses.field(default_factory=internal_session)
    """The connection's security session (listener, principal): shared by every frame of a
    connection, see broker/security/session.py."""


@functools.cache
def request_class(api_key: int, version: int) -> type[Any]:
    """kio's request class, or ours for a version Kafka 4.0 removed (broker/legacy_schemas.py);
    raises ``kio.index.KioIndexError`` for a version neither has."""
    legacy = LEGACY_REQUESTS.get((api_key, version))
    if legacy is not None:
        return legacy
    module = load_payload_module(api_key, version, EntityType.request)
    return _payload_class(module, "Request")


@functools.cache
def response_class(api_key: int, version: int) -> type[Any]:
    legacy = LEGACY_RESPONSES.get((api_key, version))
    if legacy is not None:
        return legacy
    module = load_payload_module(api_key, version, EntityType.response)
    return _payload_class(module, "Response")


def _payload_class(module: types.ModuleType, suffix: str) -> type[Any]:
    for name, value in vars(module).items():
        if (
            name.endswith(suffix)
            and isinstance(value, type)
            and getattr(value, "__type__", None) in (EntityType.request, EntityType.response)
            and value.__module__ == module.__name__
        ):
            return value
    raise LookupError(f"no {suffix} class in {module.__name__}")


def decode_header(data: FrameBytes) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id from the first 8 bytes (same in every header)."""
    if len(data) < 8:
        raise FrameError(f"request of {len(data)} bytes is shorter than a request header")
    return (
        int.from_bytes(data[0:2], "big", signed=True),
        int.from_bytes(data[2:4], "big", signed=True),
        int.from_bytes(data[4:8], "big", signed=True),
    )


def decode_request(data: FrameBytes, api_key: int, api_version: int) -> RequestFrame:
    """Decode header and body of a request whose API key and version we support.

    Raises :class:`FrameError` for a frame that breaks the bounds (see module docstring) or
    does not decode; nothing is allocated for a frame's declared sizes before they are checked.
    """
    cls = request_class(api_key, api_version)
    header_cls = cls.__header_schema__
    if check_request(data, header_cls, cls):  # unknown tagged fields: skip them
        header, offset = _tolerant(header_cls, data, 0)
        body, _size = _tolerant(cls, data, offset)
    else:
        header, offset = read_entity(header_cls, data, 0)
        body, _size = read_entity(cls, data, offset)
    # Like Kafka's generated readers, bytes after the body are ignored: librdkafka sends
    # three extra bytes after an all-topics Metadata v12 request, and Kafka accepts them.
    return RequestFrame(
        api_key=api_key,
        api_version=api_version,
        correlation_id=header.correlation_id,
        client_id=header.client_id,
        body=body,
    )


def read_entity(cls: Any, data: FrameBytes, offset: int) -> tuple[Any, int]:
    """Read an entity with kio's native reader, falling back to the tolerant reader."""
    try:
        return entity_reader(cls)(data, offset)
    except KeyError as exc:
        if "Unknown tagged field" not in str(exc):
            raise FrameError(f"cannot decode {cls.__name__}: {exc}") from None
        return _tolerant(cls, data, offset)
    except (DecodeError, ValueError, IndexError, OverflowError, UnicodeDecodeError, TypeError,
            MemoryError) as exc:
        raise FrameError(f"cannot decode {cls.__name__}: {exc}") from None


def _tolerant(cls: Any, data: FrameBytes, offset: int) -> tuple[Any, int]:
    try:
        return tolerant_reader(cls)(data, offset)
    except FrameError:
        raise
    except (DecodeError, KeyError, ValueError, IndexError, OverflowError, UnicodeDecodeError,
            TypeError, MemoryError) as exc:
        raise FrameError(f"cannot decode {cls.__name__}: {exc}") from None


Reader = Callable[[FrameBytes, int], tuple[Any, int]]


@functools.cache
def tolerant_reader(cls: type[Any], nullable: bool = False) -> Reader:
    """A reader for kio entity ``cls`` that skips unknown tagged fields (see module docstring)."""
    flexible = bool(cls.__flexible__)
    is_header = cls.__name__ == "RequestHeader"
    plain: list[tuple[str, Reader]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    for field in dataclasses.fields(cls):
        tag = field.metadata.get("tag")
        reader = _field_reader(cls, field, is_header, tag is not None, flexible)
        if tag is None:
            plain.append((field.name, reader))
        else:
            tagged[int(tag)] = (field.name, reader)

    def read(data: FrameBytes, offset: int) -> tuple[Any, int]:
        start = offset
        if nullable:
            marker, size = read_int8(data, offset)
            offset += size
            if marker < 0:
                return None, offset - start
        values: dict[str, Any] = {}
        for name, reader in plain:
            values[name], size = reader(data, offset)
            offset += size
        if flexible:
            count, size = read_unsigned_varint(data, offset)
            offset += size
            for _ in range(count):
                tag, size = read_unsigned_varint(data, offset)
                offset += size
                length, size = read_unsigned_varint(data, offset)
                offset += size
                if tag in tagged:
                    name, reader = tagged[tag]
                    values[name], _ = reader(data, offset)
                offset += length
                if offset > len(data):
                    raise FrameError(f"tagged field {tag} runs past the end of the frame")
        return cls(**values), offset - start

    return read


def _field_reader(
    cls: type[Any], field: dataclasses.Field[Any], is_header: bool, is_tag: bool, flexible: bool
) -> Reader:
    inner, is_array, optional = _unwrap(field.type)
    if not _is_entity(inner):
        return get_field_reader(cls, field, is_header, is_tag)
    if not is_array:
        return tolerant_reader(inner, optional and not is_tag)
    element = tolerant_reader(inner)
    read_length = read_compact_array_length if flexible else read_legacy_array_length

    def read_array(data: FrameBytes, offset: int) -> tuple[Any, int]:
        start = offset
        length, size = read_length(data, offset)
        offset += size
        if length is None or length < 0:
            return None, offset - start
        items = []
        for _ in range(length):
            item, size = element(data, offset)
            offset += size
            items.append(item)
        return tuple(items), offset - start

    return read_array


def _is_entity(annotation: Any) -> bool:
    return isinstance(annotation, type) and dataclasses.is_dataclass(annotation)


def _unwrap(annotation: Any) -> tuple[Any, bool, bool]:
    """(inner type, is tuple, is optional) of a kio field annotation."""
    optional = False
    origin = get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in get_args(annotation) if a is not type(None)]
        optional = True
        annotation = args[0]
        origin = get_origin(annotation)
    if origin is tuple:
        return get_args(annotation)[0], True, optional
    return annotation, False, optional


# --------------------------------------------------------------------------------------------
# Responses


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """Serialize response header + body, returning the frame including its length prefix."""
    cls = type(body)
    buffer = io.BytesIO()
    buffer.write(b"\x00\x00\x00\x00")
    buffer.write(correlation_id.to_bytes(4, "big", signed=True))
    if cls.__flexible__ and api_key != 18:
        buffer.write(b"\x00")  # response header v1: empty tagged fields
    entity_writer(cls)(buffer, body)
    frame = buffer.getbuffer()
    frame[0:4] = (len(frame) - 4).to_bytes(4, "big")
    return bytes(frame)


def build(cls: Any, data: Mapping[str, Any]) -> Any:
    """Build kio entity ``cls`` from a dict tree, keeping only fields this version has.

    Nested entities and arrays of entities may be given as dicts/lists of dicts. Fields absent
    from ``data`` take the dataclass default or a neutral value for their type (0, "", empty
    tuple, None when nullable, ErrorCode.none). The per-class field plan is computed once.
    """
    values: dict[str, Any] = {}
    for plan in _plan(cls):
        name = plan.name
        if name in data:
            value = data[name]
            if value is None:
                if not plan.optional:
                    value = plan.neutral()  # older versions: not nullable
            elif plan.entity is not None:
                entity = plan.entity
                if plan.is_array:
                    value = tuple(v if _is_instance(v) else build(entity, v) for v in value)
                elif not _is_instance(value):
                    value = build(entity, value)
            elif plan.is_array:
                value = tuple(value)
            elif plan.is_timedelta and not isinstance(value, datetime.timedelta):
                value = _ms(value)
            values[name] = value
        elif not plan.has_default:
            values[name] = plan.neutral()
    return cls(**values)


@dataclasses.dataclass(frozen=True)
class _FieldPlan:
    name: str
    inner: Any
    is_array: bool
    optional: bool
    entity: Any  # the nested entity class, or None
    is_timedelta: bool
    has_default: bool

    def neutral(self) -> Any:
        return _neutral(self.inner, self.is_array, self.optional)


@functools.cache
def _plan(cls: Any) -> tuple[_FieldPlan, ...]:
    plans = []
    for field in dataclasses.fields(cls):
        inner, is_array, optional = _unwrap(field.type)
        plans.append(_FieldPlan(
            name=field.name, inner=inner, is_array=is_array, optional=optional,
            entity=inner if _is_entity(inner) else None,
            is_timedelta=_is_timedelta(inner),
            has_default=(field.default is not dataclasses.MISSING
                         or field.default_factory is not dataclasses.MISSING),
        ))
    return tuple(plans)


def _is_instance(value: Any) -> bool:
    return hasattr(value, "__dataclass_fields__")


def _is_timedelta(inner: Any) -> bool:
    return isinstance(inner, type) and issubclass(inner, datetime.timedelta)


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=int(value))


def _neutral(inner: Any, is_array: bool, optional: bool) -> Any:
    if is_array:
        return ()
    if optional:
        return None
    if inner is ErrorCode:
        return ErrorCode.none
    if _is_timedelta(inner):
        return datetime.timedelta(0)
    if isinstance(inner, type):
        if issubclass(inner, bool):
            return False
        if issubclass(inner, int):
            return 0
        if issubclass(inner, float):
            return 0.0
        if issubclass(inner, str):
            return ""
        if issubclass(inner, bytes):
            return b""
        if dataclasses.is_dataclass(inner):
            return build(inner, {})
    if getattr(inner, "__name__", "") == "UUID":
        import uuid

        return uuid.UUID(int=0)
    return None
