"""The test harness itself: ``wait_until``, clusters sharing the session's ZooKeeper under their
own chroots, ``create_topic(..., wait_isr=True)``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from loglake.dev.errors import ClusterStateError
from loglake.dev.harness import DevCluster, wait_until, wait_until_async


def test_wait_until_returns_the_first_truthy_value() -> None:
    values = iter([0, None, "", 7, 8])
    assert wait_until(lambda: next(values), 5, "never") == 7


def test_wait_until_names_what_and_the_last_value() -> None:
    with pytest.raises(AssertionError, match=r"^the answer \(not within 0.2s; last: ''\)$"):
        wait_until(lambda: "", 0.2, "the answer", interval=0.05)


def test_wait_until_message_and_last_value_on_timeout() -> None:
    calls = []

    def predicate() -> int:
        calls.append(1)
        return 0

    with pytest.raises(AssertionError) as raised:
        wait_until(predicate, 0.3, lambda: f"after {len(calls)} calls", interval=0.05)
    assert "not within 0.3s" in str(raised.value) and "last: 0" in str(raised.value)
    assert len(calls) >= 3  # polled, and once more at the deadline


def test_wait_until_ignores_only_listed_exceptions() -> None:
    attempts = iter([KeyError("a"), KeyError("b"), "done"])

    def flaky() -> str:
        value = next(attempts)
        if isinstance(value, Exception):
            raise value
        return value

    assert wait_until(flaky, 5, "flaky", interval=0.01, ignore=(KeyError,)) == "done"
    with pytest.raises(AssertionError, match="KeyError"):
        wait_until(lambda: {}["missing"], 0.1, "never", interval=0.02, ignore=(KeyError,))
    with pytest.raises(ZeroDivisionError):
        wait_until(lambda: 1 / 0, 5, "never", ignore=(KeyError,))


def test_wait_until_async_awaits_coroutine_and_plain_predicates() -> None:
    values = iter([0, "", 5])

    async def predicate() -> object:
        return next(values)

    async def never() -> int:
        return 0

    async def scenario() -> object:
        found = await wait_until_async(predicate, 5, "never", interval=0.01)
        with pytest.raises(AssertionError, match=r"the answer \(not within 0.1s; last: 0\)"):
            await wait_until_async(never, 0.1, "the answer", interval=0.02)
        plain = iter([None, "plain"])
        assert await wait_until_async(lambda: next(plain), 5, "never", interval=0.01) == "plain"
        return found

    assert asyncio.run(scenario()) == 5


def test_clusters_share_the_session_zookeeper_under_their_own_chroots(
        zookeeper_hosts: str, tmp_path: Path) -> None:
    with DevCluster(tmp_path / "a", brokers=2, zookeeper=zookeeper_hosts) as first, \
            DevCluster(tmp_path / "b", brokers=1, zookeeper=zookeeper_hosts) as second:
        assert first.zookeeper_hosts == second.zookeeper_hosts == zookeeper_hosts
        assert first.chroot != second.chroot
        assert first.zookeeper_connect == zookeeper_hosts + first.chroot
        first.create_topic("shared-name", partitions=3, replication_factor=2)
        second.create_topic("shared-name", partitions=1)
        zk = KazooClient(hosts=zookeeper_hosts, timeout=10)
        zk.start(timeout=10)
        try:
            for index in range(3):  # wait_isr: every partition has a leader and a full ISR
                raw, _ = zk.get(f"{first.chroot}/brokers/topics/shared-name/partitions/"
                                f"{index}/state")
                assert sorted(json.loads(raw)["isr"]) == [1, 2]
            assert sorted(zk.get_children(f"{first.chroot}/brokers/ids")) == ["1", "2"]
            assert zk.get_children(f"{second.chroot}/brokers/ids") == ["1"]
            assert zk.get_children(f"{second.chroot}/brokers/topics/shared-name/partitions") \
                == ["0"]
        finally:
            zk.stop()
            zk.close()
        with pytest.raises(ClusterStateError):  # not ours to fault
            first.kill_zookeeper()
        assert not any(status.role == "zookeeper" for status in first.status())
