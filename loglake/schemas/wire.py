"""Confluent's wire framing of a schema'd key or value.

Format (what confluent-kafka's serializers write and its deserializers read)::

    byte 0       magic byte, always 0
    bytes 1-4    schema id, big-endian signed int32 (the registry's id)
    [PROTOBUF]   message indexes: zigzag varint count, then that many zigzag varint indexes
                 (the path of the message type in the .proto file: [0] the first top-level
                 message, [1, 0] the first nested message of the second one); the single
                 byte 0x00 stands for [0]
    rest         the payload: Avro binary (schemaless) / JSON UTF-8 text / Protobuf binary

Only Protobuf has message indexes: whether bytes 5.. start with them depends on the schema's
type, so :func:`unframe` returns everything after the id and :func:`message_indexes` reads
them off a Protobuf payload.

Pure functions: thread-safe, no I/O.
"""

from __future__ import annotations

import array
import struct
import sys
from collections.abc import Sequence
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from loglake.errors import SchemaDecodeError

MAGIC_BYTE = 0
HEADER_SIZE = 5
_ID = struct.Struct(">i")
_MAGIC = pa.scalar(bytes([MAGIC_BYTE]), pa.binary())
_NO_ID = pa.scalar(bytes(4), pa.binary())


class Framed(NamedTuple):
    """A framed record split: the schema id and the bytes after it."""

    schema_id: int
    body: memoryview


def frame(schema_id: int, payload: bytes, message_indexes: Sequence[int] | None = None
          ) -> bytes:
    """``payload`` framed with ``schema_id`` (``message_indexes``: Protobuf only; ``[0]`` is
    written as the single byte 0, as Confluent's serializer does)."""
    head = bytes([MAGIC_BYTE]) + _ID.pack(schema_id)
    if message_indexes is None:
        return head + payload
    return head + encode_message_indexes(message_indexes) + payload


def not_framed_reason(data: bytes | memoryview) -> str | None:
    """Why ``data`` is not framed (one line), or None when it is."""
    if len(data) == 0:
        return "not framed: empty"
    if data[0] != MAGIC_BYTE:
        return f"not framed: magic byte 0x{data[0]:02x}"
    if len(data) < HEADER_SIZE:
        return f"not framed: only {len(data)} bytes"
    return None


def unframe(data: bytes | memoryview) -> Framed:
    """The schema id and the bytes after it (SchemaDecodeError: not framed)."""
    reason = not_framed_reason(data)
    if reason is not None:
        raise SchemaDecodeError(reason)
    view = memoryview(data)
    return Framed(_ID.unpack_from(view, 1)[0], view[HEADER_SIZE:])


def schema_id_of(data: bytes | memoryview | None) -> int | None:
    """The schema id ``data`` is framed with, or None (null, or not framed)."""
    if data is None or not_framed_reason(data) is not None:
        return None
    return int(_ID.unpack_from(data, 1)[0])


def schema_ids(values: pa.Array | pa.ChunkedArray) -> pa.Int32Array:
    """The schema id of every value of a binary column, null where the value is null or not
    framed; vectorised (Arrow compute kernels and one byte swap, no Python per value)."""
    if isinstance(values, pa.ChunkedArray):
        values = (values.combine_chunks() if values.num_chunks
                  else pa.array([], type=values.type))
    if not (pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type)):
        values = values.cast(pa.large_binary())
    count = len(values)
    if count == 0:
        return pa.array([], type=pa.int32())
    framed = pc.and_(pc.greater_equal(pc.binary_length(values), HEADER_SIZE),
                     pc.equal(pc.binary_slice(values, 0, 1).cast(pa.binary()), _MAGIC))
    framed = pc.fill_null(framed, False)
    id_bytes = pc.if_else(framed, pc.binary_slice(values, 1, HEADER_SIZE).cast(pa.binary()),
                         _NO_ID)
    fixed = id_bytes.cast(pa.binary(4))
    words = array.array("i")
    words.frombytes(fixed.buffers()[1].to_pybytes()[fixed.offset * 4:(fixed.offset + count) * 4])
    if sys.byteorder == "little":
        words.byteswap()
    ids = pa.Array.from_buffers(pa.int32(), count, [None, pa.py_buffer(words)])
    return pc.if_else(framed, ids, pa.scalar(None, pa.int32()))


# --------------------------------------------------------------------- Protobuf indexes
def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def _unzigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def varint(value: int) -> bytes:
    """``value`` as an unsigned base-128 varint (7 bits a byte, low group first, at most 64 bits:
    Protobuf's and Kafka's unsigned varint)."""
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: memoryview | bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise SchemaDecodeError("truncated message indexes")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise SchemaDecodeError("malformed message indexes: varint too long")


def encode_message_indexes(indexes: Sequence[int]) -> bytes:
    """The Protobuf message-index prefix (``[0]`` is the single byte 0)."""
    if list(indexes) == [0]:
        return b"\x00"
    return varint(_zigzag(len(indexes))) + b"".join(varint(_zigzag(i)) for i in indexes)


MAX_MESSAGE_INDEXES = 64


def message_indexes(body: memoryview | bytes) -> tuple[list[int], memoryview]:
    """The message indexes at the start of a Protobuf ``body`` (what :func:`unframe` returned)
    and the payload after them (SchemaDecodeError: malformed)."""
    view = memoryview(body)
    count, pos = _read_varint(view, 0)
    count = _unzigzag(count)
    if count == 0:
        return [0], view[pos:]
    if count < 0 or count > MAX_MESSAGE_INDEXES:
        raise SchemaDecodeError(f"malformed message indexes: count {count}")
    indexes = []
    for _ in range(count):
        index, pos = _read_varint(view, pos)
        indexes.append(_unzigzag(index))
    return indexes, view[pos:]
