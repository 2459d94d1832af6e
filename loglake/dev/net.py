"""Loopback port helpers and readiness probes for dev processes.

Probes open a fresh TCP connection per call, bounded by ``timeout``; they answer "ready or not"
and never raise for network errors. Ports are only probed on 127.0.0.1: dev clusters never listen
elsewhere.
"""

from __future__ import annotations

import os
import random
import socket
import struct
from collections.abc import Sequence

LOOPBACK = "127.0.0.1"

API_VERSIONS_KEY = 18
"""Kafka api_key of ApiVersions; v0 of its request has an empty body on every broker."""


def port_is_free(port: int) -> bool:
    """True if nothing listens on 127.0.0.1:``port`` (checked by binding it, SO_REUSEADDR on,
    as the servers themselves do, so sockets lingering in TIME_WAIT do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (ip_local_port_range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as file:
            low, high = (int(part) for part in file.read().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return low, high


def free_port_block(count: int, *, attempts: int = 200, also: Sequence[int] = ()) -> int:
    """First port of ``count`` consecutive ports that are free on 127.0.0.1 right now (and
    ``first + offset`` for each offset in ``also``: a dev broker's extra listener ports).

    Ports are drawn below the kernel's ephemeral range (so outgoing connections do not take them
    later) from a generator seeded with the pid (so parallel test processes spread out). A port
    can still be taken between this call and its use; callers that bind later should expect it.
    """
    if count < 1:
        raise ValueError("count must be at least 1")
    low, _high = ephemeral_port_range()
    bottom, top = (10000, low - count) if low - count > 11000 else (1024, 65536 - count)
    rng = random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "big"))
    for _ in range(attempts):
        first = rng.randrange(bottom, top)
        if first + max(also, default=0) < 65536 and all(
                port_is_free(port) for port in
                [*range(first, first + count), *(first + offset for offset in also)]):
            return first
    raise OSError(f"no block of {count} free consecutive loopback ports found")


def four_letter_word(port: int, word: str, *, timeout: float = 1.0) -> str | None:
    """Send a ZooKeeper four-letter word to 127.0.0.1:``port``; the reply, or None on error."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout) as sock:
            sock.sendall(word.encode("ascii"))
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
    except OSError:
        return None
    return b"".join(chunks).decode("utf-8", "replace")


def zookeeper_is_serving(port: int, *, timeout: float = 1.0) -> bool:
    """True if the ZooKeeper server on ``port`` serves clients (standalone, leader or follower).

    Uses ``srvr``: unlike ``ruok``, it reports "not currently serving requests" while an
    ensemble member has no quorum.
    """
    reply = four_letter_word(port, "srvr", timeout=timeout)
    return reply is not None and "Mode: " in reply


def kafka_api_versions_ok(port: int, *, timeout: float = 1.0, tls_ca: str | None = None) -> bool:
    """True if 127.0.0.1:``port`` answers a Kafka ApiVersions v0 request with error code 0
    (over TLS trusting the CA file ``tls_ca`` when given: a SSL or SASL_SSL listener; SASL
    listeners answer ApiVersions before authentication).

    Frame: int32 size, then request header v1 (api_key int16 = 18, api_version int16 = 0,
    correlation_id int32, client_id int16-length string) and an empty body. The v0 response is
    int32 size, correlation_id int32, error_code int16, api_keys array.
    """
    correlation_id = random.randrange(1, 2**31)
    client_id = b"loglake-dev-probe"
    header = struct.pack(">hhih", API_VERSIONS_KEY, 0, correlation_id, len(client_id)) + client_id
    try:
        with _connect(port, timeout, tls_ca) as sock:
            sock.sendall(struct.pack(">i", len(header)) + header)
            size_bytes = _recv_exactly(sock, 4)
            (size,) = struct.unpack(">i", size_bytes)
            if size < 6:
                return False
            prefix = _recv_exactly(sock, 6)
    except (OSError, EOFError):  # ssl.SSLError is an OSError
        return False
    answered_id, error_code = struct.unpack(">ih", prefix)
    return answered_id == correlation_id and error_code == 0


def _connect(port: int, timeout: float, tls_ca: str | None) -> socket.socket:
    sock = socket.create_connection((LOOPBACK, port), timeout=timeout)
    if tls_ca is None:
        return sock
    import ssl

    try:
        context = ssl.create_default_context(cafile=tls_ca)
        return context.wrap_socket(sock, server_hostname=LOOPBACK)
    except BaseException:
        sock.close()
        raise


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError("connection closed")
        data += chunk
    return data
