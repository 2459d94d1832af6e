"""In-process tests of the broker's ZooKeeper session (broker/zk_session.py) and metadata cache.

The session is given a stand-in catalog that only answers ``registration`` (no ZooKeeper):
what is checked is where calls run -- lease renewal on its own executor, so ZooKeeper calls
stuck in the ``zk`` pool never delay it -- and the lease rules.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, cast

from loglake.broker import zk_session
from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.zk_session import ZkSession
from loglake.catalog.zookeeper import (
    CatalogClosedError,
    ClusterCatalog,
    PartitionState,
    Registration,
)
from loglake.dev.harness import wait_until_async


class RegistrationOnly:
    """Answers ``registration`` with ``held``; records the threads it was called on."""

    session_timeout = 3.0

    def __init__(self) -> None:
        self.held = Registration.OURS
        self.threads: list[str] = []

    def registration(self, broker_id: int) -> Registration:
        self.threads.append(threading.current_thread().name)
        return self.held

    def stop(self) -> None:
        pass


def _session(catalog: RegistrationOnly) -> ZkSession:
    return ZkSession(cast(ClusterCatalog, catalog), broker_id=1, stopped=lambda: False)


def test_lease_renews_while_every_zookeeper_worker_is_busy(monkeypatch: Any) -> None:
    monkeypatch.setattr(zk_session, "LEASE_RENEW_S", 0.05)
    catalog = RegistrationOnly()
    session = _session(catalog)
    release = threading.Event()

    async def scenario() -> tuple[bool, bool]:
        busy = [asyncio.ensure_future(session.call(release.wait, 10.0))
                for _ in range(zk_session.ZK_WORKERS + 4)]  # the pool is full, calls queue
        before = session.healthy()
        lease = asyncio.ensure_future(session.lease_loop(lambda _held: None))
        try:
            renewed = await wait_until_async(session.healthy, 5.0, "the lease renewed",
                                             interval=0.02)
        finally:
            release.set()
        await asyncio.gather(*busy)
        lease.cancel()
        await session.close()
        return before, renewed

    before, renewed = asyncio.run(scenario())
    assert not before and renewed
    assert catalog.threads and all(name.startswith("zk-lease") for name in catalog.threads)


def test_lease_lasts_a_third_of_the_session_timeout_and_drops_at_once() -> None:
    session = _session(RegistrationOnly())
    started = time.monotonic()
    session.renew_lease(started)
    assert session.healthy()
    session.renew_lease(started - 1.01)  # renewed by a read that began 1.01 s ago: 3 s / 3
    assert not session.healthy()
    session.renew_lease()
    session.drop_lease()
    assert not session.healthy()


def test_lease_loop_reports_a_registration_that_is_not_ours(monkeypatch: Any) -> None:
    monkeypatch.setattr(zk_session, "LEASE_RENEW_S", 0.02)
    catalog = RegistrationOnly()
    catalog.held = Registration.ABSENT
    session = _session(catalog)
    seen: list[Registration] = []

    async def scenario() -> None:
        lease = asyncio.ensure_future(session.lease_loop(seen.append))
        try:
            await wait_until_async(lambda: seen, 5.0, "a registration reported", interval=0.02)
        finally:
            lease.cancel()
        await session.close()

    asyncio.run(scenario())
    assert seen and seen[0] is Registration.ABSENT
    assert not session.healthy()


def test_calls_after_close_raise_catalog_closed() -> None:
    session = _session(RegistrationOnly())

    async def scenario() -> None:
        name = await session.call(lambda: threading.current_thread().name)
        assert name.startswith("zk") and not name.startswith("zk-lease")
        await session.close()
        try:
            await session.call(lambda: None)
        except CatalogClosedError:
            return
        raise AssertionError("a call after close ran")

    asyncio.run(scenario())


def _state(version: int, leader: int = 1) -> PartitionState:
    return PartitionState(leader, 0, (1, 2), 1, version)


def test_metadata_cache_keeps_the_newest_partition_state() -> None:
    cache = MetadataCache()
    assert cache.on_state("t", 0, _state(3))
    assert not cache.on_state("t", 0, _state(2, leader=2))  # a late notification
    assert cache.partition_states[("t", 0)].zk_version == 3
    assert cache.on_state("t", 0, _state(3))  # the same version again is stored
    assert cache.on_state("t", 0, _state(4, leader=2))
    assert cache.partition_states[("t", 0)].leader == 2
    assert not cache.on_state("t", 0, None)  # the znode is gone
    assert ("t", 0) not in cache.partition_states


def test_metadata_cache_drop_topic_forgets_its_partitions_only() -> None:
    cache = MetadataCache()
    cache.on_state("gone", 0, _state(1))
    cache.on_state("gone", 1, _state(1))
    cache.on_state("kept", 0, _state(1))
    cache.drop_topic("gone")
    assert list(cache.partition_states) == [("kept", 0)]
