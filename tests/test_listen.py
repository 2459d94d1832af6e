"""HTTP listening sockets: accepted connections get TCP_NODELAY from asyncio."""

from __future__ import annotations

import asyncio
import socket

from loglake.listen import http_socket


def test_accepted_connections_have_nodelay() -> None:
    sock, where = http_socket("127.0.0.1", 0)
    seen: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted = writer.get_extra_info("socket")
        seen.append(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, sock=sock)
        host, port = where.rsplit(":", 1)
        _, writer = await asyncio.open_connection(host, int(port))
        for _ in range(200):  # bounded: the handler runs within a few loop turns
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    assert seen and seen[0] != 0
    assert where.startswith("127.0.0.1:") and not where.endswith(":0")
