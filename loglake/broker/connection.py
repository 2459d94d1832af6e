"""A minimal asyncio Kafka client connection for broker-to-broker requests (replica fetches,
OffsetForLeaderEpoch). One request in flight at a time; requests are encoded with kio through
:func:`loglake.broker.codec.build`, so one dict shape serves every version.

Security (:class:`~loglake.broker.security.client_security.ClientSecurity`): on SSL and
SASL_SSL the connection is TLS (the server's certificate checked against the truststore, and
its host name unless ``ssl.endpoint.identification.algorithm`` is empty); on SASL_* the
connection authenticates right after connecting (SaslHandshake + SaslAuthenticate through
``broker/security/sasl_client.py``) before any other request is sent. KIP-368: when the
server grants a limited session (``connections.max.reauth.ms``), the connection
re-authenticates in place before the first request sent after 85-95 % of the lifetime (as
Kafka's clients), so the other broker never closes it for an expired session.

:class:`InterBrokerLink` is how a broker part (replica fetcher, marker sender) reaches another
broker: the endpoint of ``inter.broker.listener.name`` in its registration, with that
listener's security.

Not thread-safe: use from the event loop that created it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import struct
import time
from dataclasses import dataclass
from typing import Any

from kio.serial import entity_reader, entity_writer

from loglake.broker.codec import build, request_class, response_class
from loglake.broker.security.client_security import PLAINTEXT_CLIENT, ClientSecurity
from loglake.catalog.zookeeper import BrokerInfo

READ_LIMIT = 32 * 1024 * 1024  # above the largest replica fetch response we ask for


class BrokerConnection:
    def __init__(self, host: str, port: int, *, client_id: str, timeout: float = 30.0,
                 security: ClientSecurity | None = None) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout
        self.security = security or PLAINTEXT_CLIENT
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0
        self._reauthenticate_at: float | None = None
        """Monotonic time from which the next request re-authenticates first (KIP-368)."""

    async def connect(self) -> None:
        """Connect (TLS handshake and SASL authentication included, per ``security``); raises
        OSError / ssl.SSLError / TimeoutError, or SaslAuthenticationError when the other
        broker refuses our credentials (the connection is closed then)."""
        context = self.security.ssl_context
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, limit=READ_LIMIT, ssl=context,
                                    server_hostname=self.host if context else None),
            self.timeout,
        )
        self._reauthenticate_at = None
        if self.security.sasl_mechanism is not None:
            await self._authenticate()

    async def _authenticate(self) -> None:
        """SASL login (again, on a re-authentication); closes the connection on failure."""
        from loglake.broker.security.sasl_client import (
            reauthentication_delay_s,
            sasl_client_authenticate,
        )

        assert self.security.sasl_mechanism is not None
        started = time.monotonic()
        try:
            lifetime_ms = await sasl_client_authenticate(
                self._exchange, self.security.sasl_mechanism,
                self.security.sasl_username or "", self.security.sasl_password or "")
        except BaseException:
            await self.close()
            raise
        delay = reauthentication_delay_s(lifetime_ms)
        self._reauthenticate_at = None if delay is None else started + delay

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self._writer.wait_closed()
        self._reader = self._writer = None
        self._reauthenticate_at = None

    async def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        """Send one request and return the decoded response entity."""
        if self._reader is None or self._writer is None:
            await self.connect()
        elif (self._reauthenticate_at is not None
              and time.monotonic() >= self._reauthenticate_at):
            await self._authenticate()
        return await self._exchange(api_key, version, body)

    async def _exchange(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        """One request and its response on the open connection (no login checks)."""
        assert self._reader is not None and self._writer is not None
        self._correlation_id += 1
        cls = request_class(api_key, version)
        header_cls = cls.__header_schema__
        buffer = io.BytesIO()
        buffer.write(b"\x00\x00\x00\x00")
        entity_writer(header_cls)(buffer, build(header_cls, {
            "request_api_key": api_key, "request_api_version": version,
            "correlation_id": self._correlation_id, "client_id": self.client_id,
        }))
        entity_writer(cls)(buffer, build(cls, body))
        frame = buffer.getbuffer()
        frame[0:4] = struct.pack(">i", len(frame) - 4)
        self._writer.write(bytes(frame))
        async with asyncio.timeout(self.timeout):
            await self._writer.drain()
            size = struct.unpack(">i", await self._reader.readexactly(4))[0]
            payload = await self._reader.readexactly(size)
        correlation_id = struct.unpack(">i", payload[:4])[0]
        if correlation_id != self._correlation_id:
            raise ConnectionError(
                f"response correlation id {correlation_id} != {self._correlation_id}"
            )
        response_cls = response_class(api_key, version)
        offset = 5 if response_cls.__flexible__ and api_key != 18 else 4
        body_entity, _ = entity_reader(response_cls)(payload, offset)
        return body_entity


@dataclass(frozen=True)
class InterBrokerLink:
    """How this broker reaches the others: their ``listener`` endpoint, with ``security``
    (the default: PLAINTEXT listener named PLAINTEXT, as before listeners were configurable)."""

    listener: str = "PLAINTEXT"
    security: ClientSecurity = PLAINTEXT_CLIENT

    def address(self, info: BrokerInfo) -> tuple[str, int] | None:
        """``info``'s endpoint on our inter-broker listener (None: it has no such listener)."""
        endpoint = info.endpoint(self.listener)
        return None if endpoint is None else (endpoint.host, endpoint.port)

    def connection(self, info: BrokerInfo, *, client_id: str,
                   timeout: float) -> BrokerConnection | None:
        """A new (not yet connected) connection to ``info``, or None when it has no endpoint
        on our inter-broker listener."""
        address = self.address(info)
        if address is None:
            return None
        return BrokerConnection(address[0], address[1], client_id=client_id, timeout=timeout,
                                security=self.security)
