"""The network layer: length-prefixed Kafka frames over asyncio streams.

Per connection, requests are processed one at a time in arrival order and answered in that order
(Kafka mutes a channel while a request is in flight; clients rely on the ordering). Frame rules:

* the 4-byte size must be within [8, ``socket.request.max.bytes``]; otherwise the connection is
  closed without reading the body (there is no error code for it, as in Kafka);
* an unknown API key closes the connection (as in Kafka);
* ApiVersions with an unsupported version is answered with UNSUPPORTED_VERSION and our version
  table in a v0 response, so clients can downgrade (KIP-511, as in Kafka);
* any other API at a version outside our range (below the KIP-896 floor, or above our ceiling)
  is answered with UNSUPPORTED_VERSION in a response *of the requested version*, echoing the
  request's topics, partitions, groups or resources with the error
  (broker/error_responses.py), whenever we have that version's schema (kio's, or
  broker/legacy_schemas.py for DescribeConfigs v0 and DescribeLogDirs v0); otherwise — no
  schema to read the request or write a response the client could parse, or Produce with
  acks=0, whose sender reads no response — the connection is closed. Each case is logged once
  per client id, API and version with the range we serve.

  Kafka 4.0 closes the connection for every unsupported version but ApiVersions'
  (``SocketServer.parseRequestHeader`` throws InvalidRequestException for a version that
  ``ApiKeys.isVersionEnabled`` refuses; the processor then closes the channel). Clients that
  negotiate through ApiVersions (the Java client, librdkafka, kafka-python, aiokafka, KafkaJS)
  never send such a version, so the difference only reaches clients that send a fixed,
  configured version (sarama's ``Config.Version``, tools built on it): they get a response
  they can parse that names the problem (sarama: "The version of API is not supported")
  instead of an EOF, and nothing else changes. Where no parseable response exists we do what
  Kafka does;
* a body that does not decode closes the connection (lengths, counts and varints are checked
  against the frame before anything is allocated, see broker/request_bounds.py); a handler
  error is answered with UNKNOWN_SERVER_ERROR on every entry of the request (Kafka's
  ``KafkaApis.handleError``), and closes the connection only where no response can carry it.

Memory: a frame's body is read in chunks of at most 1 MiB, each reserved first from the
broker-wide budget ``queued.max.request.bytes`` (broker/request_memory.py: when it is full, the
connections with the stalest partial frames are closed; requests being handled are waited for)
and held until the request is handled, so a client that announces 100 MiB and sends nothing
holds at most one chunk, and all connections together hold at most the budget. Beyond the frame
being handled, a connection reads ahead at most ``queued.max.request.bytes.per.connection``
bytes (pipelined requests); then its socket is not read, and TCP pushes back on the client.

A bad connection never affects other connections: everything is caught per connection.

Listeners (broker/security/listeners.py): one asyncio server per entry of ``listeners``, each
with its security protocol; on SSL / SASL_SSL listeners asyncio's transport does the TLS
handshake (bounded by ``TLS_HANDSHAKE_TIMEOUT_S``) before the connection is served, and a failed
handshake (plaintext client, untrusted or expired certificate, TLS < 1.2) just closes it. Every
connection gets one :class:`Session`: its listener and protocol, the peer's IP, and on TLS the
principal mapped from the client certificate (``ssl.principal.mapping.rules``; a certificate no
rule maps is refused, as in Kafka); ``session.close_connection`` aborts the transport.

Connection limits (Kafka's ``max.connections``, per listener, per IP, creation rates, KIP-612
IP quotas) are applied by each listener's accept loop (broker/acceptor.py,
broker/connection_quotas.py) before a connection is served; the connection's slot is released
when it ends. Connection and authentication counts per listener go to
broker/metrics/connection_metrics.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from typing import TYPE_CHECKING, Any

from kio.index import KioIndexError
from kio.schema.errors import ErrorCode

from loglake.broker.acceptor import Acceptor
from loglake.broker.apis import API_TABLE, Api
from loglake.broker.codec import (
    FrameBytes,
    FrameError,
    RequestFrame,
    build,
    decode_header,
    decode_request,
    encode_response,
    request_class,
    response_class,
)
from loglake.broker.connection_quotas import ConnectionLimits, ConnectionQuotas, ConnectionSlot
from loglake.broker.error_responses import error_body
from loglake.broker.handlers.metadata import api_versions_response
from loglake.broker.handlers.sasl import sasl_unframed_token
from loglake.broker.metrics.connection_metrics import ConnectionMetrics
from loglake.broker.metrics.request_metrics import RequestMetrics
from loglake.broker.metrics.request_timing import RequestTiming
from loglake.broker.quotas.enforcement import handle_with_quotas, wait_if_muted
from loglake.broker.request_memory import (
    FRAME_CHUNK,
    Holder,
    RequestMemory,
    RequestMemoryExhausted,
)
from loglake.broker.security import sasl_gate
from loglake.broker.security.listeners import ListenerSpec, listener_specs, tls_principal
from loglake.broker.security.principal_mapping import NoMatchingRuleError
from loglake.broker.security.session import Session, uses_sasl

if TYPE_CHECKING:
    from loglake.broker.services import BrokerServices

log = logging.getLogger(__name__)
API_VERSIONS_KEY = 18
PRODUCE_KEY = 0
TLS_HANDSHAKE_TIMEOUT_S = 10.0
UNSUPPORTED_LOGGED_MAX = 1024
"""Distinct (client id, API, version) refusals logged at WARNING; later ones at DEBUG."""


def preload_schemas() -> None:
    """Import kio's schema modules of every advertised API version now, not on first use
    (a lazy import costs tens of milliseconds in the middle of a client's first request)."""
    for api in API_TABLE.values():
        for version in range(api.min_version, api.max_version + 1):
            request_class(api.key, version)
            response_class(api.key, version)


class KafkaServer:
    def __init__(self, services: BrokerServices, *,
                 request_metrics: RequestMetrics | None = None,
                 connection_metrics: ConnectionMetrics | None = None) -> None:
        """Serve the Kafka protocol with the handlers of broker/apis.py, each given
        ``services`` (the parts of the broker a handler may use); every answered request is
        recorded in ``request_metrics`` (phases: broker/metrics/request_metrics.py)."""
        self.services = services
        self.request_metrics = request_metrics if request_metrics is not None else (
            RequestMetrics())
        self.connection_metrics = connection_metrics if connection_metrics is not None else (
            ConnectionMetrics())
        self.config = services.config
        self._acceptors: list[Acceptor] = []
        self.connection_quotas: ConnectionQuotas | None = None
        self._connections: set[asyncio.Task[None]] = set()
        budget = services.config.queued_max_request_bytes
        self.memory = RequestMemory(budget if budget >= 0 else None)
        self._unsupported_logged: set[tuple[str, int, int]] = set()
        self.bound_ports: dict[str, int] = {}
        """Listener name -> the port it is bound to (differs from the config for port 0)."""

    async def start(self) -> None:
        """Listen on every listener (TLS files are read here: a bad one raises
        InvalidConfigError naming it, before anything is served)."""
        preload_schemas()
        specs = await asyncio.to_thread(listener_specs, self.config)
        limits = await asyncio.to_thread(ConnectionLimits.from_config, self.config)
        self.connection_quotas = ConnectionQuotas(  # KIP-612 IP quotas from broker/quotas
            limits, ip_rate=self.services.quotas.ip_connection_rate)
        # the StreamReader stops reading a socket once it buffers more than 2 * limit
        read_ahead = max(1, self.config.queued_max_request_bytes_per_connection // 2)
        try:
            for spec in specs:
                acceptor = Acceptor(spec, self.connection_quotas, self._on_connection,
                                    metrics=self.connection_metrics, read_limit=read_ahead,
                                    handshake_timeout_s=TLS_HANDSHAKE_TIMEOUT_S)
                self._acceptors.append(acceptor)
                self.bound_ports[spec.name] = await acceptor.start()
                log.info("listening on %s:%d (listener %s, %s)", spec.host,
                         self.bound_ports[spec.name], spec.name, spec.security_protocol)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        for acceptor in self._acceptors:
            await acceptor.close()
        self._acceptors = []
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _on_connection(
        self, spec: ListenerSpec, slot: ConnectionSlot | None, reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        holder = self.memory.register(writer.transport.abort, peer)
        session = Session.for_listener(
            spec.name, spec.security_protocol,
            str(peer[0]) if isinstance(peer, tuple) and peer else "")
        session.close_connection = writer.transport.abort
        session.on_authentication = functools.partial(self.connection_metrics.authentication,
                                                      spec.name)
        if slot is not None:
            slot.close = writer.transport.abort
        sasl_gate.on_connect(session, self.config)
        try:
            if spec.ssl_context is not None:
                session.principal = tls_principal(writer.get_extra_info("ssl_object"),
                                                  spec.principal_mapper)
            if not uses_sasl(spec.security_protocol):
                self.connection_metrics.authentication(spec.name, success=True)
            await self._serve(reader, writer, peer, holder, session, slot)
        except NoMatchingRuleError as exc:
            self.connection_metrics.authentication(spec.name, success=False)
            log.warning("closing %s on listener %s: %s", peer, spec.name, exc)
        except (asyncio.IncompleteReadError, ConnectionError, RequestMemoryExhausted):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection %s failed", peer)
        finally:
            session.close_connection = None
            self.memory.unregister(holder)
            self._connections.discard(task)
            writer.close()
            if slot is not None:
                slot.release()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: object,
        holder: Holder, session: Session, slot: ConnectionSlot | None = None,
    ) -> None:
        max_size = self.config.socket_request_max_bytes
        while True:
            size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
            if slot is not None:
                slot.touch()
            smallest = 0 if sasl_gate.expects_unframed_token(session) else 8  # raw SASL token
            if size < smallest or size > max_size:
                log.warning("closing %s: frame size %d outside [8, %d]", peer, size, max_size)
                return
            if (too_big := sasl_gate.admit_size(session, size)) is not None:
                log.warning("closing %s: %s", peer, too_big)
                return
            data = await self._read_frame(reader, holder, size)
            timing = RequestTiming()
            try:
                response = await self._handle(data, peer, session, timing)
            except FrameError as exc:
                log.warning("closing %s: %s", peer, exc)
                return
            finally:
                del data
                self.memory.release(holder)
            if response is not None:
                writer.write(response)
                await writer.drain()
            timing.record(self.request_metrics)
            if session.muted_until:  # a client quota throttle (KIP-219): mute after the answer
                await wait_if_muted(session)

    async def _read_frame(self, reader: asyncio.StreamReader, holder: Holder,
                          size: int) -> FrameBytes:
        """The frame body, reserved from the request memory one chunk at a time."""
        data: FrameBytes
        if size <= FRAME_CHUNK:
            await self.memory.reserve(holder, size)
            data = await reader.readexactly(size)
        else:
            buffer = bytearray()
            while len(buffer) < size:
                chunk = min(size - len(buffer), FRAME_CHUNK)
                await self.memory.reserve(holder, chunk)
                buffer += await reader.readexactly(chunk)
                self.memory.progress(holder)
            data = memoryview(buffer).toreadonly()  # kio reads read-only buffers: no copy
        self.memory.frame_complete(holder)
        return data

    async def _handle(self, data: FrameBytes, peer: object = None,
                      session: Session | None = None,
                      timing: RequestTiming | None = None) -> bytes | None:
        if session is not None and sasl_gate.expects_unframed_token(session):
            return await sasl_unframed_token(self.services, session, bytes(data))
        api_key, version, correlation_id = decode_header(data)
        if session is not None and (reason := sasl_gate.admit(
                session, api_key, time.monotonic(), len(data))) is not None:
            raise FrameError(reason)  # SASL listeners: see security/sasl_gate.py
        api = API_TABLE.get(api_key)
        if api is None:
            raise FrameError(f"unknown API key {api_key}")
        if not api.supports(version):
            if api_key == API_VERSIONS_KEY:
                body = api_versions_response(0, ErrorCode.unsupported_version, API_TABLE)
                return encode_response(api_key, 0, correlation_id, body)
            return self._unsupported_version(api, version, correlation_id, data, peer)
        frame = decode_request(data, api_key, version)
        if isinstance(peer, tuple) and peer:
            frame = dataclasses.replace(frame, client_host=f"/{peer[0]}")
        if session is not None:
            frame = dataclasses.replace(frame, session=session)
        if timing is not None:
            timing.start(api_key, api.name, version)
        try:
            if self.services.quotas.enabled:
                body = await handle_with_quotas(self.services.quotas, api.handler,
                                                self.services, frame, len(data))
            else:
                body = await api.handler(self.services, frame)
        except FrameError:
            raise
        except Exception as exc:
            log.exception("%s v%d handler failed", api.name, version)
            if timing is not None:
                timing.finish(None, failed=True)
                timing = None
            body = self._handler_error(api, version, frame, exc)
        if timing is not None:
            timing.finish(body)
        if body is None:
            return None
        try:
            return encode_response(api_key, version, correlation_id, body)
        except Exception as exc:  # a response we cannot encode is our bug
            log.exception("%s v%d response could not be encoded", api.name, version)
            raise FrameError(f"{api.name} response encoding failed: {exc}") from exc

    @staticmethod
    def _handler_error(api: Api, version: int, frame: RequestFrame, exc: Exception) -> Any:
        """A handler failed (our bug, or a dependency's): answer UNKNOWN_SERVER_ERROR on every
        entry of the request, as Kafka's ``KafkaApis.handleError`` does; close the connection
        (FrameError) only where no response could carry it (or Produce acks=0 expects none)."""
        message = f"{api.name} failed on the broker: {type(exc).__name__}: {exc}"[:500]
        if api.key == PRODUCE_KEY and getattr(frame.body, "acks", 1) == 0:
            raise FrameError(message) from exc
        body = error_body(api.key, version, frame.body, ErrorCode.unknown_server_error, message)
        if body is None:
            raise FrameError(message) from exc
        return build(response_class(api.key, version), body)

    def _unsupported_version(self, api: Api, version: int, correlation_id: int,
                             data: FrameBytes, peer: object) -> bytes:
        """UNSUPPORTED_VERSION in a response of the requested version, or FrameError (close)
        where the client could not parse one (see the module docstring)."""
        client_id = _client_id(data)
        message = (
            f"{api.name} v{version} is not supported: this broker serves {api.name} "
            f"v{api.min_version}-v{api.max_version} (Kafka 4.0's baseline, KIP-896). Upgrade "
            "the client, or configure it for a newer Kafka protocol version.")
        answered = False
        try:
            try:
                frame = decode_request(data, api.key, version)
                body_cls = response_class(api.key, version)
            except KioIndexError:
                raise FrameError(f"{message} No schema of this version: closing.") from None
            if api.key == PRODUCE_KEY and frame.body.acks == 0:
                raise FrameError(f"{message} Produce with acks=0 reads no response: closing.")
            body = error_body(api.key, version, frame.body, ErrorCode.unsupported_version,
                              message)
            if body is None:
                raise FrameError(f"{message} No error response for this API: closing.")
            response = encode_response(api.key, version, correlation_id, build(body_cls, body))
            answered = True
            return response
        finally:
            key = (client_id, api.key, version)
            level = logging.DEBUG
            if key not in self._unsupported_logged and (
                    len(self._unsupported_logged) < UNSUPPORTED_LOGGED_MAX):
                self._unsupported_logged.add(key)
                level = logging.WARNING
            log.log(level, "%s (client id %r at %s): %s", "answered UNSUPPORTED_VERSION"
                    if answered else "closing", client_id, peer, message)


def _client_id(data: FrameBytes) -> str:
    """The request header's client id (the same place in header v1 and v2), for logs only."""
    if len(data) < 10:
        return ""
    size = int.from_bytes(data[8:10], "big", signed=True)
    if size < 0 or 10 + size > len(data):
        return ""
    return bytes(data[10:10 + size]).decode("utf-8", "replace")
