"""One Kafka request over a fresh blocking socket, for the admin APIs confluent-kafka lacks
(AlterPartitionReassignments, ListPartitionReassignments).

Requests and responses are encoded with kio (``loglake.broker.codec``), so the same dict shape
serves every version. Each call opens a connection, sends one request, reads one response and
closes; the whole exchange is bounded by ``timeout``. Socket failures raise ClientError
(``network_exception``, or ``request_timed_out`` on a timeout). DescribeTransactions v0 answers
are read with ``transaction_start_time`` as an int of ms (it may be -1, which kio refuses as a
time). Thread-safe: no shared state.
"""

from __future__ import annotations

import dataclasses
import io
import socket
import struct
import typing
from typing import Any

from kio.schema.describe_transactions.v0 import response as describe_transactions_v0
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i64

from loglake.broker.codec import build, request_class, response_class
from loglake.client.errors import ClientError

MAX_RESPONSE_BYTES = 64 * 1024 * 1024


def request(host: str, port: int, api_key: int, version: int, body: dict[str, Any], *,
            timeout: float, client_id: str, operation: str) -> Any:
    """Send one request to ``host:port`` and return the decoded response entity."""
    cls = request_class(api_key, version)
    header_cls = cls.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_cls)(buffer, build(header_cls, {
        "request_api_key": api_key, "request_api_version": version, "correlation_id": 1,
        "client_id": client_id}))
    entity_writer(cls)(buffer, build(cls, body))
    payload = buffer.getvalue()
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(payload)) + payload)
            size = struct.unpack(">i", _read(sock, 4))[0]
            if not 4 <= size <= MAX_RESPONSE_BYTES:
                raise ClientError(f"{operation}: broker {host}:{port} sent a frame of "
                                  f"{size} bytes", code=ErrorCode.corrupt_message)
            frame = _read(sock, size)
    except TimeoutError:
        raise ClientError(f"{operation}: broker {host}:{port} did not answer within "
                          f"{timeout:g} s", code=ErrorCode.request_timed_out) from None
    except OSError as exc:
        raise ClientError(f"{operation}: broker {host}:{port}: {exc}",
                          code=ErrorCode.network_exception) from None
    response_cls: Any = _LENIENT_RESPONSES.get((api_key, version)) \
        or response_class(api_key, version)
    offset = 5 if response_cls.__flexible__ and api_key != 18 else 4
    entity, _ = entity_reader(response_cls)(frame, offset)
    return entity


def _with_field(cls: type, name: str, kind: Any, metadata: dict[str, Any]) -> type:
    """A copy of kio's entity class ``cls`` whose field ``name`` has type ``kind`` and kio
    metadata ``metadata`` (the decoder follows both)."""
    hints = typing.get_type_hints(cls)
    fields = [(f.name, kind if f.name == name else hints[f.name],
               dataclasses.field(metadata=metadata if f.name == name else dict(f.metadata)))
              for f in dataclasses.fields(cls)]
    copy = dataclasses.make_dataclass(cls.__name__, fields, frozen=True, slots=True,
                                      kw_only=True)
    for attribute in ("__type__", "__version__", "__flexible__", "__api_key__",
                      "__header_schema__"):
        if attribute in vars(cls):
            setattr(copy, attribute, vars(cls)[attribute])
    return copy


def _lenient_describe_transactions() -> type:
    """DescribeTransactions v0 whose ``transaction_start_time`` is read as a plain int64 (ms):
    Kafka answers -1 for an id without a transaction since InitProducerId, and kio refuses
    negative timestamps."""
    state = _with_field(describe_transactions_v0.TransactionState, "transaction_start_time",
                        i64, {"kafka_type": "int64"})
    return _with_field(describe_transactions_v0.DescribeTransactionsResponse,
                       "transaction_states", tuple[state, ...], {})  # type: ignore[valid-type]


_LENIENT_RESPONSES: dict[tuple[int, int], type] = {(65, 0): _lenient_describe_transactions()}
"""Responses decoded with a field kio would refuse read as a plain integer."""


def _read(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
