"""The ``/metrics`` endpoint of a broker, served on the broker's own event loop.

``metrics.listener`` (``http://host:port``; unset: nothing is served, nothing is bound) names
where it listens. :class:`MetricsEndpoint` binds the socket itself (port 0: a free port;
:attr:`MetricsEndpoint.url` is the scrape URL the broker publishes at
``/loglake/metrics/<id>``), then runs a ``uvicorn.Server`` as a task of the broker's loop, so
every collector runs on the loop thread during a scrape and reads broker state without locks
(prometheus_client's ``make_asgi_app`` renders the registry inside the request's coroutine).
uvicorn's signal handlers are not installed (SIGTERM stays the broker's) and it does not touch
the logging configuration.

Requests:

* ``GET /metrics`` (or HEAD): the registry in Prometheus text format (OpenMetrics when asked
  through ``Accept``; gzip when accepted); no parameters (prometheus_client's ``name[]``
  filter needs collectors that describe themselves, which ours do not: refused with 400);
* ``GET /``: a one-line text pointing at ``/metrics``;
* anything else: 404 (unknown path), 405 (other methods), 400 (any query parameter), each
  with a one-line plain-text message; a rendering failure is logged and answered 500 with a
  one-line message, never a traceback.

Event loop only (start, stop and every request).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Generator, MutableMapping
from typing import Any
from urllib.parse import parse_qs

import uvicorn
from prometheus_client import CollectorRegistry, make_asgi_app

from loglake.errors import InvalidConfigError

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MAX_QUERY_BYTES = 4096
SHUTDOWN_GRACE_S = 1


class _LoopServer(uvicorn.Server):
    """uvicorn without its signal handlers: the broker process owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def metrics_app(registry: CollectorRegistry) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The ASGI app of the endpoint (see the module docstring)."""
    render = make_asgi_app(registry)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            return
        path = scope.get("path", "")
        method = scope.get("method", "GET")
        if path not in ("/", "/metrics", "/metrics/"):
            await _text(send, 404, f"no such path {path[:200]!r}: metrics are at /metrics")
            return
        if method not in ("GET", "HEAD"):
            await _text(send, 405, f"{method[:20]} is not allowed: use GET", allow=True)
            return
        if path == "/":
            await _text(send, 200, "loglake broker metrics: GET /metrics")
            return
        problem = _query_problem(scope.get("query_string", b""))
        if problem is not None:
            await _text(send, 400, problem)
            return
        try:
            await render(scope, receive, send)
        except Exception as exc:
            log.exception("rendering /metrics failed")
            await _text(send, 500, f"rendering the metrics failed: {type(exc).__name__}")

    return app


def _query_problem(raw: bytes) -> str | None:
    """Why the query string is refused, or None (the endpoint takes no parameters)."""
    if not raw:
        return None
    try:
        names = sorted(parse_qs(raw[:MAX_QUERY_BYTES].decode("utf-8"), keep_blank_values=True,
                                strict_parsing=True))
    except (UnicodeDecodeError, ValueError):
        return "malformed query string: /metrics takes no parameters"
    return (f"unknown parameter(s) {', '.join(ascii(n[:50]) for n in names[:5])}: /metrics "
            "takes no parameters")


async def _text(send: Send, status: int, message: str, *, allow: bool = False) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8")]
    if allow:
        headers.append((b"allow", b"GET, HEAD"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": (message + "\n").encode()})


class MetricsEndpoint:
    """The endpoint's socket and server task (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self._server: _LoopServer | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        """The scrape URL (after :meth:`start`: with the bound port)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    async def start(self) -> None:
        """Bind (InvalidConfigError naming ``metrics.listener`` if that fails) and serve."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise InvalidConfigError(
                f"metrics.listener http://{self.host}:{self.port}: cannot listen: {exc}") from exc
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(metrics_app(self.registry), lifespan="off", log_config=None,
                                access_log=False, log_level="warning", http="h11",
                                timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
        self._server = _LoopServer(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        for _ in range(200):  # started: the socket is served (bounded: 2 s)
            if self._server.started or self._task.done():
                break
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()  # raises what stopped it
        log.info("metrics endpoint listening on %s", self.url)

    async def stop(self) -> None:
        server, task = self._server, self._task
        if server is None or task is None:
            return
        server.should_exit = True
        try:
            await asyncio.wait_for(task, SHUTDOWN_GRACE_S + 2)
        except (TimeoutError, asyncio.CancelledError, Exception):
            task.cancel()
        self._server = self._task = None
