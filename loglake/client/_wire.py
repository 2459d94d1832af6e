"""One Kafka request over a fresh blocking socket, for the admin APIs confluent-kafka lacks
(AlterPartitionReassignments, ListPartitionReassignments, the transaction APIs).

Security (``security``, a :class:`~loglake.client.security.SecurityConfig`): SSL and SASL_SSL
wrap the socket in TLS (the config's context; the host name checked unless disabled); SASL_*
then authenticate before the request as Kafka's clients do: SaslHandshake v1 naming the
mechanism, then SaslAuthenticate v2 frames carrying PLAIN's ``\0user\0password`` or SCRAM's
four messages (RFC 5802/7677, ``scramp``; the server's signature is verified). A refused login
raises :class:`~loglake.client.errors.BrokerError` ``sasl_authentication_failed`` (or
``unsupported_sasl_mechanism``) with the broker's message; a TLS failure ClientError
``network_exception``.

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
from loglake.client.errors import BrokerError, ClientError
from loglake.client.security import SecurityConfig

MAX_RESPONSE_BYTES = 64 * 1024 * 1024
SASL_HANDSHAKE = (17, 1)
SASL_AUTHENTICATE = (36, 2)
"""(API key, version) of the SASL requests: Kafka 4.0 serves SaslHandshake v0-1 and
SaslAuthenticate v0-2; v1 of the handshake means "SaslAuthenticate frames follow"."""


def request(host: str, port: int, api_key: int, version: int, body: dict[str, Any], *,
            timeout: float, client_id: str, operation: str,
            security: SecurityConfig | None = None) -> Any:
    """Send one request to ``host:port`` (after TLS and SASL as ``security`` says) and return
    the decoded response entity."""
    where = f"broker {host}:{port}"
    try:
        with _connect(host, port, timeout, security) as sock:
            sock.settimeout(timeout)
            exchange = _Exchange(sock, client_id, operation, where)
            if security is not None and security.uses_sasl:
                _authenticate(exchange, security)
            return exchange.call(api_key, version, body)
    except TimeoutError:
        raise ClientError(f"{operation}: {where} did not answer within "
                          f"{timeout:g} s", code=ErrorCode.request_timed_out) from None
    except OSError as exc:  # ssl.SSLError included
        raise ClientError(f"{operation}: {where}: {exc}",
                          code=ErrorCode.network_exception) from None


def _connect(host: str, port: int, timeout: float,
             security: SecurityConfig | None) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    context = None if security is None else security.ssl_context()
    if context is None:
        return sock
    try:
        return context.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise


class _Exchange:
    """Requests and responses in order over one connection (correlation ids 1, 2, ...)."""

    def __init__(self, sock: socket.socket, client_id: str, operation: str, where: str) -> None:
        self.sock = sock
        self.client_id = client_id
        self.operation = operation
        self.where = where
        self.correlation_id = 0

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.correlation_id += 1
        cls = request_class(api_key, version)
        header_cls = cls.__header_schema__
        buffer = io.BytesIO()
        entity_writer(header_cls)(buffer, build(header_cls, {
            "request_api_key": api_key, "request_api_version": version,
            "correlation_id": self.correlation_id, "client_id": self.client_id}))
        entity_writer(cls)(buffer, build(cls, body))
        payload = buffer.getvalue()
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", _read(self.sock, 4))[0]
        if not 4 <= size <= MAX_RESPONSE_BYTES:
            raise ClientError(f"{self.operation}: {self.where} sent a frame of {size} bytes",
                              code=ErrorCode.corrupt_message)
        frame = _read(self.sock, size)
        response_cls: Any = _LENIENT_RESPONSES.get((api_key, version)) \
            or response_class(api_key, version)
        offset = 5 if response_cls.__flexible__ and api_key != 18 else 4
        entity, _ = entity_reader(response_cls)(frame, offset)
        return entity


def _authenticate(exchange: _Exchange, security: SecurityConfig) -> None:
    """SaslHandshake v1 + SaslAuthenticate v2 with the configured mechanism and user."""
    mechanism = security.sasl_mechanism or ""
    username = security.sasl_username or ""
    password = security.sasl_password or ""
    what = f"{exchange.operation}: SASL {mechanism} login as {username!r} at {exchange.where}"
    handshake = exchange.call(*SASL_HANDSHAKE, {"mechanism": mechanism})
    if handshake.error_code != ErrorCode.none:
        raise BrokerError(f"{what}: {handshake.error_code.name} (the broker offers "
                          f"{', '.join(handshake.mechanisms) or 'none'})",
                          code=handshake.error_code)

    def step(token: bytes) -> bytes:
        response = exchange.call(*SASL_AUTHENTICATE, {"auth_bytes": token})
        if response.error_code != ErrorCode.none:
            detail = response.error_message or response.error_code.name
            raise BrokerError(f"{what}: {detail}", code=response.error_code,
                              hint="check sasl.username / sasl.password (or sasl.jaas.config)")
        return bytes(response.auth_bytes)

    if mechanism == "PLAIN":
        step(b"\0" + username.encode("utf-8") + b"\0" + password.encode("utf-8"))
        return
    from scramp import ScramClient, ScramException

    client = ScramClient([mechanism], username, password)
    try:
        client.set_server_first(step(client.get_client_first().encode("utf-8")).decode())
        client.set_server_final(step(client.get_client_final().encode("utf-8")).decode())
    except (ScramException, UnicodeDecodeError) as exc:
        raise ClientError(f"{what}: the broker's SCRAM answer failed verification: {exc}",
                          code=ErrorCode.sasl_authentication_failed) from None


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
