"""The broker's ZooKeeper session: the catalog, the lease, and where blocking calls run.

**Lease.** The broker may act as leader (and as group coordinator or controller) only while its
lease is valid. A lease is renewed by a successful read showing that our session owns
``/brokers/ids/<id>`` (:meth:`ZkSession.lease_loop`, every ``LEASE_RENEW_S``) and lasts a third
of the session timeout from the moment that read started. SUSPENDED or LOST (kazoo) ends it at
once, on kazoo's thread, before anything else learns of the change; a paused process finds it
expired when it wakes. :meth:`ZkSession.healthy` is the check.

**Executors: which thread runs what.**

* The event loop: everything that changes broker state. Kazoo's watch and session callbacks
  never touch that state themselves: they hop onto the loop with :meth:`ZkSession.run_soon`.
* ``zk`` executor (``ZK_WORKERS`` threads, named ``zk_N``): every blocking catalog call made
  through :meth:`ZkSession.call` and :meth:`ZkSession.step` (reads, version-checked writes,
  watch registrations, whose first read is blocking, and waits for ZooKeeper to come back).
  It is this module's own pool, not asyncio's default one, so object-store or file-system
  work in worker threads elsewhere (the tierer, directory deletion) never queues ZooKeeper
  calls behind it, and the other way round.
* ``zk-lease`` executor (one thread, ``zk-lease_0``): only the lease renewal read. A
  ZooKeeper call stuck in the ``zk`` pool (a ``step`` waiting out an outage, a slow
  transaction) can therefore never delay renewal, and the renewal read never waits for a free
  worker.
* kazoo's own threads: connection handling, watch and session callbacks (which must not block).
* not ZooKeeper's: asyncio's default executor runs the tierer's object-store and Parquet work
  and directory removal (log_manager.py); neither shares a thread with the two above.

:meth:`ZkSession.close` stops the catalog (operations waiting for ZooKeeper end with
CatalogClosedError) and shuts both executors down; a call made afterwards raises
CatalogClosedError.

Thread-safety: ``call``, ``step``, ``lease_loop`` and ``close`` are called on the event loop;
``run_soon``, ``healthy`` and ``drop_lease`` from any thread.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from loglake.broker.metrics.request_timing import remote_begin, remote_end
from loglake.catalog.zookeeper import (
    CatalogClosedError,
    ClusterCatalog,
    Registration,
    SessionEvent,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
LEASE_RENEW_S = 0.5
"""Interval between two lease renewal reads."""
ZK_WORKERS = 16
"""Threads of the ``zk`` executor: enough for ``step`` calls waiting out an outage (each holds
a thread) beside the ordinary short calls."""


class ZkSession:
    """One broker's ZooKeeper session (see the module docstring)."""

    def __init__(self, catalog: ClusterCatalog, *, broker_id: int,
                 stopped: Callable[[], bool],
                 call_seconds: Callable[[float], None] | None = None) -> None:
        """``call_seconds(s)``: told the duration of every :meth:`call` (metrics)."""
        self.catalog = catalog
        self._call_seconds = call_seconds
        self.broker_id = broker_id
        self._stopped = stopped
        self._lease_s = catalog.session_timeout / 3
        self._lease_until = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor = ThreadPoolExecutor(ZK_WORKERS, thread_name_prefix="zk")
        self._lease_executor = ThreadPoolExecutor(1, thread_name_prefix="zk-lease")
        self._closed = False
        self._listeners: list[Callable[[SessionEvent], Any]] = []

    # ---- connection
    async def start(self) -> None:
        """Connect, waiting as long as ZooKeeper is down (CatalogClosedError if the broker
        stops meanwhile); session events reach the listeners from then on."""
        self._loop = asyncio.get_running_loop()
        await self.call(lambda: self.catalog.start(wait=True, stopped=self._stopped))
        self.catalog.add_session_listener(self._on_session_event)

    async def close(self) -> None:
        """Close the session (our ephemeral znodes go at once) and the executors."""
        try:
            await self.call(self.catalog.stop)
        finally:
            self._closed = True
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._lease_executor.shutdown(wait=False, cancel_futures=True)

    def add_listener(self, listener: Callable[[SessionEvent], Any]) -> None:
        """Call ``listener(event)`` on the event loop after every session change (the lease
        has already been dropped for SUSPENDED and LOST)."""
        self._listeners.append(listener)

    def _on_session_event(self, event: SessionEvent) -> None:
        """On kazoo's thread: end the lease at once without a connection, then tell the
        listeners on the loop."""
        log.warning("ZooKeeper session: %s", event.value)
        if event in (SessionEvent.SUSPENDED, SessionEvent.LOST):
            self.drop_lease()
        for listener in list(self._listeners):
            self.run_soon(functools.partial(listener, event))

    def run_soon(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` on the event loop (callable from kazoo's threads)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(callback)

    # ---- blocking calls
    async def call(self, func: Callable[..., T], *args: Any) -> T:
        """``func(*args)`` on the ``zk`` executor."""
        if self._closed:
            raise CatalogClosedError("the broker's ZooKeeper session is closed")
        loop = asyncio.get_running_loop()
        remote = remote_begin()  # a request's remote time (broker/metrics/request_timing.py)
        started = time.perf_counter()
        try:
            return await loop.run_in_executor(self._executor, functools.partial(func, *args))
        finally:
            remote_end(remote)
            if self._call_seconds is not None:
                self._call_seconds(time.perf_counter() - started)

    async def step(self, what: str, func: Callable[..., T], *args: Any) -> T:
        """``func(*args)`` on the ``zk`` executor, called again while ZooKeeper is unavailable
        (``ClusterCatalog.retrying``); CatalogClosedError once the broker stops."""
        return await self.call(functools.partial(self.catalog.retrying, what, func, *args,
                                                 stopped=self._stopped))

    # ---- lease
    def healthy(self) -> bool:
        """Whether the lease is valid now (the broker may act as leader)."""
        return time.monotonic() < self._lease_until

    def renew_lease(self, started: float | None = None) -> None:
        """Renew the lease from ``started`` (``time.monotonic()``; default now), after a
        ZooKeeper operation that started then showed our registration is live."""
        self._lease_until = (time.monotonic() if started is None else started) + self._lease_s

    def drop_lease(self) -> None:
        self._lease_until = 0.0

    async def lease_loop(self, on_not_registered: Callable[[Registration], None]) -> None:
        """Renew the lease after every read that shows our session owns ``/brokers/ids/<id>``
        (on the ``zk-lease`` executor); call ``on_not_registered`` when it does not (the node
        expired with an old session, or was deleted). Runs until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(LEASE_RENEW_S)
            if self._closed:
                return
            started = time.monotonic()
            try:
                held = await loop.run_in_executor(self._lease_executor,
                                                  self.catalog.registration, self.broker_id)
            except RuntimeError:  # the executor shut down: the session is closed
                return
            except Exception:  # ZooKeeper unavailable: no renewal, the lease runs out
                continue
            if held is Registration.OURS:
                self.renew_lease(started)
            else:
                on_not_registered(held)
