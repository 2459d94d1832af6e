"""The transaction coordinator in process against a real ZooKeeper (a fresh chroot on the
session's server), with an injected clock and a recording marker sender: state written to
ZooKeeper at each transition, CONCURRENT_TRANSACTIONS while markers are written, timeout
aborts and id expiry driven by the clock, failover resume of a prepared commit by the next
coordinator, a deposed coordinator unable to overwrite its successor, NOT_COORDINATOR for ids
another broker coordinates. (Live brokers and real clients: test_txn_coordinator_live.py.)"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.transactions import coordinator as coordinator_module
from loglake.broker.transactions.coordinator import TransactionCoordinator
from loglake.broker.transactions.markers import MarkerOrder
from loglake.broker.transactions.ownership import coordinator_for_partition, state_partition_for
from loglake.broker.transactions.state import TransactionError, TransactionMetadata
from loglake.broker.zk_session import ZkSession
from loglake.catalog.transactions import TRANSACTIONS
from loglake.catalog.zookeeper import BrokerInfo, ClusterCatalog, TopicMetadata
from loglake.config import BrokerConfig
from tests.zk_util import fresh_chroot

pytestmark = pytest.mark.timeout(120)
T = TypeVar("T")


class RecordingMarkers:
    """Stands in for the WriteTxnMarkers client (markers.py, exercised live): records each
    order and completes it at once, or when ``release`` is set if ``hold`` is."""

    def __init__(self) -> None:
        self.orders: list[MarkerOrder] = []
        self.hold = False
        self.release = asyncio.Event()

    async def send(self, order: MarkerOrder, *, still_owner: Callable[[], bool],
                   crash_at: str | None = None) -> None:
        self.orders.append(order)
        if self.hold:
            await self.release.wait()

    async def close(self) -> None:
        pass

    @staticmethod
    def offsets_partition_for(group: str) -> int:
        return 7


class Node:
    """One in-process coordinator on its own ZooKeeper session."""

    def __init__(self, connect: str, broker_id: int, live: tuple[int, ...], log_dir: Path,
                 clock: list[float], **settings: Any) -> None:
        self.catalog = ClusterCatalog(connect, timeout=20)
        self.catalog.start()
        self.session = ZkSession(self.catalog, broker_id=broker_id, stopped=lambda: False)
        self.session.renew_lease(time.monotonic() + 3600)
        self.metadata = MetadataCache()
        self.metadata.topics["t"] = TopicMetadata("t", {0: (1,), 1: (1,)}, {})
        self.metadata.live_brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in live}
        config = BrokerConfig(broker_id=broker_id, host="127.0.0.1", port=0, log_dir=log_dir,
                              zookeeper_connect=connect, **settings)
        self.markers = RecordingMarkers()
        self.next_pid = 1000 * broker_id

        async def allocate() -> int:
            self.next_pid += 1
            return self.next_pid

        self.coordinator = TransactionCoordinator(
            self.session, self.metadata, config, allocate_producer_id=allocate,
            markers=self.markers, clock=lambda: clock[0])  # type: ignore[arg-type]

    def close(self) -> None:
        self.catalog.stop()


@pytest.fixture
def zk_connect(zookeeper_hosts: str) -> str:
    return fresh_chroot(zookeeper_hosts, "txn-coordinator")


@pytest.fixture(autouse=True)
def short_end_txn_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """EndTxn answers after at most 0.3 s of held markers (tests that hold them)."""
    monkeypatch.setattr(coordinator_module, "END_TXN_WAIT_S", 0.3)


@pytest.fixture
def clock() -> list[float]:
    return [1_000_000.0]


@pytest.fixture
def nodes(zk_connect: str, tmp_path: Path, clock: list[float]) -> Iterator[list[Node]]:
    made: list[Node] = []
    yield made
    for node in made:
        node.close()


def _node(nodes: list[Node], connect: str, broker_id: int, live: tuple[int, ...],
          tmp_path: Path, clock: list[float], **settings: Any) -> Node:
    node = Node(connect, broker_id, live, tmp_path / str(broker_id), clock, **settings)
    nodes.append(node)
    return node


def _id_for(broker: int, live: tuple[int, ...]) -> str:
    """A fresh transactional id that ``broker`` coordinates among ``live``."""
    for i in range(10_000):
        candidate = f"txn-{uuid.uuid4().hex[:6]}-{i}"
        if coordinator_for_partition(state_partition_for(candidate), live) == broker:
            return candidate
    raise AssertionError("no id found")


def _stored(connect: str, transactional_id: str) -> TransactionMetadata | None:
    client = KazooClient(hosts=connect, timeout=10)
    client.start(timeout=20)
    try:
        path = f"{TRANSACTIONS}/{state_partition_for(transactional_id)}/ids/{transactional_id}"
        if client.exists(path) is None:
            return None
        return TransactionMetadata.decode(transactional_id, client.get(path)[0])
    finally:
        client.stop()
        client.close()


def run(coro: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(coro(), 60))


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.01)


async def _code(awaitable: Awaitable[Any]) -> ErrorCode:
    try:
        await awaitable
    except TransactionError as exc:
        return exc.code
    return ErrorCode.none


def test_transitions_are_written_to_zookeeper(
        nodes: list[Node], zk_connect: str, tmp_path: Path, clock: list[float]) -> None:
    node = _node(nodes, zk_connect, 1, (1,), tmp_path, clock)
    txn = _id_for(1, (1,))
    coordinator = node.coordinator

    async def scenario() -> None:
        pid, epoch = await coordinator.init_producer_id(txn, timeout_ms=60000)
        assert epoch == 0
        assert _stored(zk_connect, txn).state.value == "Empty"  # type: ignore[union-attr]
        await coordinator.add_partitions(txn, producer_id=pid, epoch=0,
                                         partitions=[("t", 0), ("t", 1)])
        await coordinator.add_offsets(txn, producer_id=pid, epoch=0, group_id="g")
        stored = _stored(zk_connect, txn)
        assert stored is not None and stored.state.value == "Ongoing"
        assert stored.partitions == {("t", 0), ("t", 1)} and stored.groups == {"g"}
        await coordinator.end_txn(txn, producer_id=pid, epoch=0, commit=True)
        # answered once the markers are written and the transaction completed
        assert _stored(zk_connect, txn).state.value == "CompleteCommit"  # type: ignore
        (order,) = node.markers.orders
        assert (order.producer_id, order.producer_epoch, order.commit) == (pid, 0, True)
        assert order.partitions == {("t", 0), ("t", 1)} and order.groups == {"g"}
        assert order.coordinator_epoch == 0  # the first takeover of this partition
        # a commit retried after it completed succeeds; an unknown id has no mapping
        await coordinator.end_txn(txn, producer_id=pid, epoch=0, commit=True)
        assert await _code(coordinator.add_partitions(
            _id_for(1, (1,)), producer_id=pid, epoch=0, partitions=[("t", 0)])) \
            == ErrorCode.invalid_producer_id_mapping
        assert await _code(coordinator.init_producer_id(txn, timeout_ms=900_001)) \
            == ErrorCode.invalid_transaction_timeout

    run(scenario)


def test_concurrent_transactions_while_markers_are_written(
        nodes: list[Node], zk_connect: str, tmp_path: Path, clock: list[float]) -> None:
    node = _node(nodes, zk_connect, 1, (1,), tmp_path, clock)
    txn = _id_for(1, (1,))
    coordinator = node.coordinator
    node.markers.hold = True

    async def scenario() -> None:
        pid, _ = await coordinator.init_producer_id(txn, timeout_ms=60000)
        await coordinator.add_partitions(txn, producer_id=pid, epoch=0, partitions=[("t", 0)])
        await coordinator.end_txn(txn, producer_id=pid, epoch=0, commit=True)
        busy = ErrorCode.concurrent_transactions
        assert await _code(coordinator.end_txn(txn, producer_id=pid, epoch=0, commit=True)) \
            == busy
        assert await _code(coordinator.end_txn(txn, producer_id=pid, epoch=0, commit=False)) \
            == ErrorCode.invalid_txn_state
        assert await _code(coordinator.add_partitions(
            txn, producer_id=pid, epoch=0, partitions=[("t", 1)])) == busy
        assert await _code(coordinator.init_producer_id(txn, timeout_ms=60000)) == busy
        assert coordinator.list_transactions(states=frozenset(), producer_ids=frozenset())[0] \
            .state.value == "PrepareCommit"
        node.markers.release.set()
        await _settle()
        assert _stored(zk_connect, txn).state.value == "CompleteCommit"  # type: ignore

    run(scenario)


def test_new_producer_fences_and_aborts_the_open_transaction(
        nodes: list[Node], zk_connect: str, tmp_path: Path, clock: list[float]) -> None:
    node = _node(nodes, zk_connect, 1, (1,), tmp_path, clock)
    txn = _id_for(1, (1,))
    coordinator = node.coordinator

    async def scenario() -> None:
        pid, _ = await coordinator.init_producer_id(txn, timeout_ms=60000)
        await coordinator.add_partitions(txn, producer_id=pid, epoch=0, partitions=[("t", 0)])
        assert await _code(coordinator.init_producer_id(txn, timeout_ms=60000)) \
            == ErrorCode.concurrent_transactions
        await _settle()
        (order,) = node.markers.orders
        assert (order.commit, order.producer_epoch) == (False, 1)
        assert await coordinator.init_producer_id(txn, timeout_ms=60000) == (pid, 2)
        assert await _code(coordinator.end_txn(txn, producer_id=pid, epoch=0, commit=True)) \
            == ErrorCode.producer_fenced

    run(scenario)


def test_timeout_and_expiry_follow_the_clock(
        nodes: list[Node], zk_connect: str, tmp_path: Path, clock: list[float]) -> None:
    node = _node(nodes, zk_connect, 1, (1,), tmp_path, clock,
                 transactional_id_expiration_ms=5000)
    txn = _id_for(1, (1,))
    coordinator = node.coordinator

    async def scenario() -> None:
        pid, _ = await coordinator.init_producer_id(txn, timeout_ms=1000)
        await coordinator.add_partitions(txn, producer_id=pid, epoch=0, partitions=[("t", 0)])
        clock[0] += 1.0
        assert await coordinator.abort_timed_out() == 0
        clock[0] += 0.01
        assert await coordinator.abort_timed_out() == 1
        await _settle()
        (order,) = node.markers.orders
        assert (order.commit, order.producer_epoch) == (False, 1)
        stored = _stored(zk_connect, txn)
        assert stored is not None
        assert (stored.state.value, stored.producer_epoch) == ("CompleteAbort", 1)
        assert await _code(coordinator.end_txn(txn, producer_id=pid, epoch=0, commit=True)) \
            == ErrorCode.producer_fenced
        clock[0] += 4.9
        assert await coordinator.expire_ids() == 0
        clock[0] += 0.2
        assert await coordinator.expire_ids() == 1
        assert _stored(zk_connect, txn) is None
        assert await _code(coordinator.describe(txn)) == ErrorCode.transactional_id_not_found

    run(scenario)


def test_next_coordinator_completes_a_prepared_commit(
        nodes: list[Node], zk_connect: str, tmp_path: Path, clock: list[float]) -> None:
    first = _node(nodes, zk_connect, 1, (1, 2), tmp_path, clock)
    second = _node(nodes, zk_connect, 2, (1, 2), tmp_path, clock)
    txn = _id_for(1, (1, 2))
    first.markers.hold = True  # it dies before any marker is acknowledged

    async def scenario() -> None:
        pid, _ = await first.coordinator.init_producer_id(txn, timeout_ms=60000)
        await first.coordinator.add_partitions(txn, producer_id=pid, epoch=0,
                                               partitions=[("t", 1)])
        await first.coordinator.end_txn(txn, producer_id=pid, epoch=0, commit=True)
        assert await _code(second.coordinator.end_txn(txn, producer_id=pid, epoch=0,
                                                      commit=True)) == ErrorCode.not_coordinator
        await _settle()
        epoch_before = first.markers.orders[0].coordinator_epoch
        first.close()  # session closed: its owner znode goes
        second.metadata.live_brokers.pop(1)
        await second.coordinator.ownership_pass()
        await _settle()
        (order,) = second.markers.orders
        assert (order.producer_id, order.commit, order.partitions) == (pid, True, {("t", 1)})
        assert order.coordinator_epoch == epoch_before + 1
        assert _stored(zk_connect, txn).state.value == "CompleteCommit"  # type: ignore
        # the client's retried EndTxn at the new coordinator succeeds
        await second.coordinator.end_txn(txn, producer_id=pid, epoch=0, commit=True)

    run(scenario)


def test_deposed_coordinator_cannot_overwrite_its_successor(
        nodes: list[Node], zk_connect: str, tmp_path: Path, clock: list[float]) -> None:
    first = _node(nodes, zk_connect, 1, (1,), tmp_path, clock)
    second = _node(nodes, zk_connect, 2, (2,), tmp_path, clock)  # views differ
    txn = _id_for(1, (1,))
    index = state_partition_for(txn)

    async def scenario() -> None:
        pid, _ = await first.coordinator.init_producer_id(txn, timeout_ms=60000)
        # the successor cannot take over while the owner znode is held
        assert await _code(second.coordinator.init_producer_id(txn, timeout_ms=60000)) \
            == ErrorCode.coordinator_load_in_progress
        # the first broker's owner znode vanishes (as with its session) but it has not noticed
        client = KazooClient(hosts=zk_connect, timeout=10)
        client.start(timeout=20)
        try:
            client.delete(f"{TRANSACTIONS}/{index}/owner")
        finally:
            client.stop()
            client.close()
        assert await second.coordinator.init_producer_id(txn, timeout_ms=60000) == (pid, 1)
        assert await _code(first.coordinator.add_partitions(
            txn, producer_id=pid, epoch=0, partitions=[("t", 0)])) == ErrorCode.not_coordinator
        assert index not in first.coordinator.partitions  # it dropped the partition
        stored = _stored(zk_connect, txn)
        assert stored is not None and (stored.state.value, stored.producer_epoch) == ("Empty", 1)

    run(scenario)
