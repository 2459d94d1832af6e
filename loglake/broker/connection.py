"""A minimal asyncio Kafka client connection for broker-to-broker requests (replica fetches,
OffsetForLeaderEpoch). One request in flight at a time; requests are encoded with kio through
:func:`loglake.broker.codec.build`, so one dict shape serves every version.

Not thread-safe: use from the event loop that created it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import struct
from typing import Any

from kio.serial import entity_reader, entity_writer

from loglake.broker.codec import build, request_class, response_class

READ_LIMIT = 32 * 1024 * 1024  # above the largest replica fetch response we ask for


class BrokerConnection:
    def __init__(self, host: str, port: int, *, client_id: str, timeout: float = 30.0) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0

    async def connect(self) -> None:
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, limit=READ_LIMIT), self.timeout
        )

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self._writer.wait_closed()
        self._reader = self._writer = None

    async def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        """Send one request and return the decoded response entity."""
        if self._reader is None or self._writer is None:
            await self.connect()
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
