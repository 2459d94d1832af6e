"""Listening sockets for loglake's HTTP services (web console, schema registry).

The socket is created with ``IPPROTO_TCP`` as its protocol: asyncio turns on TCP_NODELAY only
for sockets that say so, and without it a keep-alive client (confluent-kafka's registry
client, a browser) waits for its delayed ACK, about 40 ms, on every response.

Pure socket calls; safe from any thread.
"""

from __future__ import annotations

import socket


def http_socket(host: str, port: int) -> tuple[socket.socket, str]:
    """A bound (not yet listening) TCP socket on ``host``:``port`` (0: any free port) and the
    ``host:port`` to print in a URL (IPv6 hosts bracketed)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return sock, f"{shown}:{bound_port}"
