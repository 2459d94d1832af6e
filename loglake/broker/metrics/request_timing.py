"""The phases of one request (see request_metrics.py for what each phase means).

:class:`RequestTiming` is made by broker/server.py when a frame has been read, told when the
handler starts and ends, and recorded once the response is sent. The handler's *remote* time
(Kafka's time in purgatory) is the time during which at least one wait of the request was in
progress: the waits mark themselves with :func:`remote_begin` / :func:`remote_end`
(``delayed_operations.await_change``: acks=all and fetch long polls; ``ZkSession.call``:
ZooKeeper). The request's :class:`RemoteTime` reaches them through a context variable, so it
follows the handler into tasks it spawns (``asyncio.gather`` of per-partition appends copies
the context, and the copy holds the same object). Parallel waits count once (the union of the
wait intervals). *Local* time is the rest of the handler's time. Tier reads (fetches and
list-offsets below the local log start, answered from the Delta table: broker/tier_reads.py) are
remote time too, as Kafka counts a KIP-405 remote-storage read (its DelayedRemoteFetch): their
methods carry :func:`remote_time`.

Event loop only; a context variable per connection task, no locks.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

from loglake.broker.metrics.request_metrics import RequestMetrics, response_errors

P = ParamSpec("P")
R = TypeVar("R")

_REMOTE: ContextVar[RemoteTime | None] = ContextVar("loglake_request_remote", default=None)


class RemoteTime:
    """Seconds during which at least one wait of the current request was in progress."""

    __slots__ = ("_since", "_waiting", "seconds")

    def __init__(self) -> None:
        self.seconds = 0.0
        self._waiting = 0
        self._since = 0.0

    def begin(self) -> None:
        if self._waiting == 0:
            self._since = time.perf_counter()
        self._waiting += 1

    def end(self) -> None:
        self._waiting -= 1
        if self._waiting == 0:
            self.seconds += time.perf_counter() - self._since


def remote_begin() -> RemoteTime | None:
    """A wait of the current request starts (None outside a request: nothing to do)."""
    remote = _REMOTE.get()
    if remote is not None:
        remote.begin()
    return remote


def remote_end(remote: RemoteTime | None) -> None:
    """The wait :func:`remote_begin` returned ``remote`` for has ended."""
    if remote is not None:
        remote.end()


def remote_time(func: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Decorate a coroutine function: while it runs, the calling request is in a remote
    wait (:func:`remote_begin` / :func:`remote_end`; nothing outside a request)."""

    @functools.wraps(func)
    async def waiting(*args: P.args, **kwargs: P.kwargs) -> R:
        remote = remote_begin()
        try:
            return await func(*args, **kwargs)
        finally:
            remote_end(remote)

    return waiting


class RequestTiming:
    """One request's phase timestamps (``time.perf_counter`` seconds)."""

    __slots__ = ("api_key", "errors", "handled", "name", "received", "remote", "started",
                 "version")

    def __init__(self) -> None:
        self.received = time.perf_counter()
        self.name = ""
        self.api_key = -1
        self.version = -1
        self.started = self.handled = 0.0
        self.remote: RemoteTime | None = None
        self.errors: list[str] = []

    def start(self, api_key: int, name: str, version: int) -> None:
        """The handler is about to run (in the connection's task: the context variable set
        here is seen by everything the handler awaits or spawns)."""
        self.api_key, self.name, self.version = api_key, name, version
        self.remote = RemoteTime()
        _REMOTE.set(self.remote)
        self.started = time.perf_counter()

    def finish(self, body: Any, *, failed: bool = False) -> None:
        """The handler returned ``body`` (None: no response), or failed."""
        self.handled = time.perf_counter()
        _REMOTE.set(None)
        if failed:
            self.errors = ["UNKNOWN_SERVER_ERROR"]
        elif body is not None:
            try:
                self.errors = response_errors(self.api_key, body)
            except (AttributeError, TypeError, ValueError):
                self.errors = []

    def record(self, metrics: RequestMetrics) -> None:
        """The response was sent (or none was due): record every phase."""
        if not self.name or not self.handled:
            return  # refused before a handler ran (unsupported version, bad frame)
        remote_s = self.remote.seconds if self.remote is not None else 0.0
        handler_s = self.handled - self.started
        remote_s = min(remote_s, handler_s)
        metrics.record(self.name, self.version, self.errors,
                       queue_s=self.started - self.received, local_s=handler_s - remote_s,
                       remote_s=remote_s, send_s=time.perf_counter() - self.handled)
