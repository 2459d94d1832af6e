"""A minimal raw Kafka-protocol client for tests: encode requests with kio, decode responses.

Used where real clients cannot be made to send what a test needs (duplicate idempotent batches,
sequence gaps, garbage frames, unsupported versions).
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.serial import entity_reader, entity_writer

from loglake.broker.codec import build, request_class, response_class


class WireClient:
    client_id = "wire-test"
    """The request header's client id (set per instance to act as another client)."""

    def __init__(self, host: str, port: int, *, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.correlation_id = 0

    @classmethod
    def connect(cls, bootstrap: str, **kwargs: Any) -> WireClient:
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        return cls(host, int(port), **kwargs)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def encode(self, api_key: int, version: int, body: dict[str, Any]) -> bytes:
        cls = request_class(api_key, version)
        header_cls = cls.__header_schema__
        self.correlation_id += 1
        buffer = io.BytesIO()
        header = {"request_api_key": api_key, "request_api_version": version,
                  "correlation_id": self.correlation_id, "client_id": self.client_id}
        entity_writer(header_cls)(buffer, build(header_cls, header))
        entity_writer(cls)(buffer, build(cls, body))
        payload = buffer.getvalue()
        return struct.pack(">i", len(payload)) + payload

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._read(4))[0]
        return self._read(size)

    def _read(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("connection closed by broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.send_raw(self.encode(api_key, version, body))
        return self.decode_response(api_key, version, self.recv_frame())

    @staticmethod
    def decode_response(api_key: int, version: int, frame: bytes) -> Any:
        cls = response_class(api_key, version)
        offset = 4
        if cls.__flexible__ and api_key != 18:
            offset += 1  # empty tagged fields of response header v1
        body, _ = entity_reader(cls)(frame, offset)
        return body

    def served(self) -> bool:
        """ApiVersions answered on this connection (False: closed or no answer within the
        socket's timeout)."""
        try:
            return self.request(18, 3, {"client_software_name": "t",
                                        "client_software_version": "1"}).error_code == 0
        except (ConnectionError, TimeoutError, OSError):
            return False

    def is_closed(self, timeout: float = 5.0) -> bool:
        """True if the broker closed this connection (recv returns EOF) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
