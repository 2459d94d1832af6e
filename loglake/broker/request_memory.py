"""The broker-wide budget of request bytes held in memory (``queued.max.request.bytes``).

Every request frame's bytes are reserved here before they are read from the socket, in chunks
of at most :data:`FRAME_CHUNK` bytes (never the whole declared size up front, so a 4-byte size
prefix reserves at most one chunk), and stay reserved until the request has been handled. A
connection holds one :class:`Holder`; its state is::

    idle ──first chunk──▶ partial ──last chunk──▶ handling ──release()──▶ idle
                             │
                             └──evicted (connection aborted)

When a reservation does not fit, the pool closes connections whose frames are still *partial*,
the one that made no progress for the longest time first (a client that started a frame and
stopped sending is the one to drop; Kafka clients reconnect and retry), until it fits. Frames
being handled are never evicted: if only they hold the memory, the reservation waits until one
is released (the connection is not read meanwhile, so TCP pushes back on its client). A small
request of a normal client therefore always gets through, at the cost of the stalest partial
frame, and the total stays at most ``capacity`` whatever the number of connections.

Memory outside this budget is per connection: the read-ahead of the socket reader
(``queued.max.request.bytes.per.connection``, see broker/server.py) and the kernel's socket
buffers.

Not thread-safe: used from the broker's event loop only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from loglake.errors import LoglakeError

log = logging.getLogger(__name__)

FRAME_CHUNK = 1 << 20
"""Bytes reserved (and read) at a time while a frame arrives; frames up to this size are read
with one reservation."""


class RequestMemoryExhausted(LoglakeError):
    """This connection's partial frame was evicted to make room for others."""

    code = ErrorCode.invalid_request


@dataclasses.dataclass(eq=False)
class Holder:
    """One connection's share of the pool."""

    close: Callable[[], None]
    peer: object = None
    held: int = 0
    partial: bool = False
    last_progress: float = 0.0
    evicted: bool = False


class RequestMemory:
    """Reservations of request bytes against ``capacity`` (``None``: unbounded, Kafka's -1)."""

    def __init__(self, capacity: int | None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self.used = 0
        self.evictions = 0
        self._clock = clock
        self._holders: set[Holder] = set()
        self._waiters: list[asyncio.Future[None]] = []

    def register(self, close: Callable[[], None], peer: object = None) -> Holder:
        holder = Holder(close=close, peer=peer)
        self._holders.add(holder)
        return holder

    def unregister(self, holder: Holder) -> None:
        """The connection is gone: return what it held."""
        self.release(holder)
        self._holders.discard(holder)

    async def reserve(self, holder: Holder, size: int) -> None:
        """Reserve ``size`` more bytes of a frame being received by ``holder``.

        Evicts stale partial frames of other connections, or waits, until it fits. Raises
        :class:`RequestMemoryExhausted` if ``holder`` itself is evicted meanwhile.
        """
        if holder.evicted:
            raise RequestMemoryExhausted("request memory exhausted: this connection was evicted")
        now = self._clock()
        if not holder.partial:
            holder.partial = True
            holder.last_progress = now
        capacity = self.capacity
        while capacity is not None and self.used + size > capacity:
            victim = self._stalest_partial(excluding=holder)
            if victim is not None:
                self._evict(victim, now)
                continue
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
            if holder.evicted:
                raise RequestMemoryExhausted(
                    "request memory exhausted: this connection was evicted")
        self.used += size
        holder.held += size

    def progress(self, holder: Holder) -> None:
        """Bytes of ``holder``'s frame arrived."""
        holder.last_progress = self._clock()

    def frame_complete(self, holder: Holder) -> None:
        """The frame is read; it is being handled and may no longer be evicted."""
        holder.partial = False

    def release(self, holder: Holder) -> None:
        """The request is handled (or the connection is gone): return its bytes."""
        if holder.held:
            self.used -= holder.held
            holder.held = 0
            self._wake()
        holder.partial = False

    def _stalest_partial(self, *, excluding: Holder) -> Holder | None:
        candidates = [h for h in self._holders
                      if h.partial and h.held and not h.evicted and h is not excluding]
        return min(candidates, key=lambda h: h.last_progress, default=None)

    def _evict(self, victim: Holder, now: float) -> None:
        log.warning("closing %s: request memory full (%d of %d bytes held), its partial frame "
                    "of %d bytes made no progress for %.1f s", victim.peer, self.used,
                    self.capacity, victim.held, now - victim.last_progress)
        victim.evicted = True
        self.evictions += 1
        self.used -= victim.held
        victim.held = 0
        victim.partial = False
        victim.close()
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
