"""One listener's acceptor: the accept loop that applies the connection limits (Kafka's
``SocketServer.Acceptor``).

Each listener gets one :class:`Acceptor` with its own listening socket(s) (``SO_REUSEADDR``,
backlog :data:`BACKLOG`) and one accept task per socket. For every accepted socket, in order:

1. :meth:`ConnectionQuotas.wait_for_slot`: the creation-rate throttle and ``max.connections``
   (broker-wide and per listener). The accept task waits here, so while a listener is at its
   limit nothing more is accepted on it and new clients wait in the kernel's backlog; other
   listeners keep accepting (one task each, as Kafka has one acceptor thread per listener).
2. :meth:`ConnectionQuotas.admit`: the per-IP connection-rate quota (refused: closed after the
   throttle time, never served) and ``max.connections.per.ip`` (refused: closed at once).
3. The connection is counted as created and handed to its own task: the TLS handshake on SSL /
   SASL_SSL listeners (bounded by the handshake timeout; a failure is a failed authentication
   and closes the socket), then the server's connection callback with the slot, which the
   server releases when the connection ends.

Event loop only. :meth:`Acceptor.close` stops accepting, closes the listening sockets and any
socket still waiting for a handshake or a delayed close.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable

from loglake.broker.connection_quotas import (
    ConnectionQuotas,
    ConnectionSlot,
    ConnectionThrottled,
    TooManyConnections,
)
from loglake.broker.metrics.connection_metrics import ConnectionMetrics
from loglake.broker.security.listeners import ListenerSpec

log = logging.getLogger(__name__)

BACKLOG = 100
"""Listen backlog (asyncio.start_server's default, which the broker used before)."""
ACCEPT_ERROR_PAUSE_S = 0.1
"""After an accept error such as EMFILE, wait this long before accepting again."""

ServeConnection = Callable[
    [ListenerSpec, ConnectionSlot, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Acceptor:
    """The accept loop of one listener (see the module docstring)."""

    def __init__(self, spec: ListenerSpec, quotas: ConnectionQuotas, serve: ServeConnection, *,
                 metrics: ConnectionMetrics, read_limit: int,
                 handshake_timeout_s: float) -> None:
        self.spec = spec
        self.quotas = quotas
        self.serve = serve
        self.metrics = metrics
        self.read_limit = read_limit
        self.handshake_timeout_s = handshake_timeout_s
        self.sockets: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: set[socket.socket] = set()
        """Accepted sockets not yet served: handshaking or waiting for a delayed close."""

    @property
    def port(self) -> int:
        return int(self.sockets[0].getsockname()[1])

    async def start(self) -> int:
        """Bind and listen, start accepting; the bound port."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(self.spec.host or None, self.spec.port,
                                       family=socket.AF_UNSPEC, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        port = self.spec.port
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                self.sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                if port == 0 and len(self.sockets) > 1:  # every address on the same port
                    address = (address[0], self.port, *address[2:])
                sock.bind(address)
                sock.listen(BACKLOG)
                sock.setblocking(False)
        except BaseException:
            await self.close()
            raise
        for sock in self.sockets:
            self._spawn(self._accept_loop(sock))
        return self.port

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for sock in [*self.sockets, *self._pending]:
            sock.close()
        self.sockets = []
        self._pending.clear()

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept_loop(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        name = self.spec.name
        while True:
            try:
                conn, address = await loop.sock_accept(listening)
            except OSError as exc:  # EMFILE, ENFILE, ECONNABORTED: keep the listener up
                if exc.errno not in (errno.ECONNABORTED, errno.EINTR):
                    log.warning("listener %s: accept failed (%s); retrying", name, exc)
                    await asyncio.sleep(ACCEPT_ERROR_PAUSE_S)
                continue
            self._pending.add(conn)
            try:
                self.metrics.acceptor_blocked(name, await self.quotas.wait_for_slot(name))
                slot = self.quotas.admit(name, str(address[0]) if address else "")
            except TooManyConnections as exc:
                log.info("listener %s: %s", name, exc)
                self.metrics.reject(name, "max_connections_per_ip")
                self._discard(conn)
                continue
            except ConnectionThrottled as exc:
                log.info("listener %s: delaying the close of the connection from %s for %d ms "
                         "(connection_creation_rate quota)", name, exc.ip, exc.throttle_ms)
                self.metrics.reject(name, "ip_connection_rate")
                loop.call_later(exc.throttle_ms / 1000, self._discard, conn)
                continue
            except BaseException:
                self._discard(conn)
                raise
            self.metrics.created(name)
            slot.on_release = lambda: self.metrics.closed(name)
            if name == self.quotas.limits.protected_listener:
                self.quotas.close_excess()
            self._spawn(self._establish(conn, slot))

    def _discard(self, conn: socket.socket) -> None:
        self._pending.discard(conn)
        conn.close()

    async def _establish(self, conn: socket.socket, slot: ConnectionSlot) -> None:
        """TLS handshake if the listener has TLS, then the server's callback with the slot."""
        loop = asyncio.get_running_loop()
        spec = self.spec

        def protocol() -> asyncio.StreamReaderProtocol:
            reader = asyncio.StreamReader(limit=self.read_limit, loop=loop)
            return asyncio.StreamReaderProtocol(
                reader, lambda r, w: self.serve(spec, slot, r, w), loop=loop)

        try:
            await loop.connect_accepted_socket(
                protocol, conn, ssl=spec.ssl_context,
                ssl_handshake_timeout=self.handshake_timeout_s if spec.ssl_context else None)
        except (TimeoutError, OSError, ssl.SSLError, EOFError) as exc:
            log.debug("listener %s: connection from %s closed during the TLS handshake: %s",
                      spec.name, slot.ip, exc)
            if spec.ssl_context is not None:
                self.metrics.authentication(spec.name, success=False)
            conn.close()
            slot.release()
        except BaseException:
            conn.close()
            slot.release()
            raise
        finally:
            self._pending.discard(conn)
