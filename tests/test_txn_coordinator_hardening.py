"""Hardening of the transaction coordinator in process, on a real ZooKeeper (a fresh chroot)
with an injected clock (test_txn_coordinator.py's nodes): Kafka's order of InitProducerId checks,
ListTransactions while a state partition loads or without a lease, the lenient decoding of
DescribeTransactions' start time of -1 by the project's client, and a takeover of a state
partition holding 2,000 ids that keeps the event loop responsive (numbers printed)."""

from __future__ import annotations

import asyncio
import datetime
import io
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kio.schema.describe_transactions.v0 import response as describe_v0
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from loglake.broker.codec import build
from loglake.broker.transactions.ownership import state_partition_for
from loglake.broker.transactions.state import TransactionState, new_metadata
from loglake.catalog.transactions import id_path
from loglake.client import _wire
from tests.test_txn_coordinator import Node, _code, _id_for, run
from tests.zk_util import fresh_chroot

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def connect(zookeeper_hosts: str) -> str:
    return fresh_chroot(zookeeper_hosts, "txn-hardening")


@pytest.fixture
def made(tmp_path: Path) -> Iterator[list[Node]]:
    nodes: list[Node] = []
    yield nodes
    for node in nodes:
        node.close()


def _node(made: list[Node], connect: str, broker: int, live: tuple[int, ...], tmp_path: Path,
          clock: list[float]) -> Node:
    node = Node(connect, broker, live, tmp_path / str(broker), clock)
    made.append(node)
    return node


def test_init_producer_id_checks_in_kafkas_order(made: list[Node], connect: str,
                                                  tmp_path: Path) -> None:
    clock = [1_000_000.0]
    node = _node(made, connect, 1, (1, 2), tmp_path, clock)
    elsewhere = _id_for(2, (1, 2))

    async def scenario() -> None:
        c = node.coordinator
        # an empty id is INVALID_REQUEST before the timeout is looked at (Kafka's order)
        assert await _code(c.init_producer_id("", timeout_ms=-5)) == ErrorCode.invalid_request
        # a bad timeout is refused even by a broker that does not coordinate the id
        for bad in (0, -1, -(2 ** 31), 900_001, 2 ** 31 - 1):
            assert await _code(c.init_producer_id(elsewhere, timeout_ms=bad)) \
                == ErrorCode.invalid_transaction_timeout, bad
        assert await _code(c.init_producer_id(elsewhere, timeout_ms=60_000)) \
            == ErrorCode.not_coordinator

    run(scenario)


def test_list_transactions_while_loading_or_without_a_lease(
        made: list[Node], connect: str, tmp_path: Path) -> None:
    clock = [1_000_000.0]
    node = _node(made, connect, 1, (1,), tmp_path, clock)
    txn = _id_for(1, (1,))

    async def scenario() -> None:
        c = node.coordinator
        await c.init_producer_id(txn, timeout_ms=60_000)
        assert [m.transactional_id for m in c.list_transactions(
            states=frozenset(), producer_ids=frozenset())] == [txn]
        # a partition being loaded: the answer would miss its ids, so it is an error
        loading: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        c._loading[(state_partition_for(txn) + 1) % 50] = loading  # type: ignore[assignment]
        assert await _code(_listing(node)) == ErrorCode.coordinator_load_in_progress
        c._loading.clear()
        node.session.drop_lease()
        assert await _code(_listing(node)) == ErrorCode.coordinator_not_available

    run(scenario)


async def _listing(node: Node) -> None:
    node.coordinator.list_transactions(states=frozenset(), producer_ids=frozenset())


def test_client_reads_a_start_time_of_minus_one() -> None:
    """kio refuses a negative timestamp; the project's wire client reads it as -1."""
    response = build(describe_v0.DescribeTransactionsResponse, {"transaction_states": [{
        "error_code": ErrorCode.none, "transactional_id": "x", "transaction_state": "Empty",
        "transaction_timeout": 60000, "producer_id": 7, "producer_epoch": 0, "topics": [],
        "transaction_start_time": datetime.datetime.fromtimestamp(-0.001, datetime.UTC)}]})
    buffer = io.BytesIO()
    entity_writer(describe_v0.DescribeTransactionsResponse)(buffer, response)
    decode: Any = _wire.entity_reader(_wire._LENIENT_RESPONSES[(65, 0)])
    [state] = decode(buffer.getvalue(), 0)[0].transaction_states
    assert (state.transaction_start_time, state.producer_id) == (-1, 7)
    with pytest.raises(Exception, match="negative"):
        _wire.entity_reader(describe_v0.DescribeTransactionsResponse)(buffer.getvalue(), 0)


IDS = 2000


def test_takeover_of_2000_ids_keeps_the_loop_responsive(
        made: list[Node], connect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
        ) -> None:
    clock = [1_000_000.0]
    first = _node(made, connect, 1, (1,), tmp_path, clock)
    seed = _id_for(1, (1,))
    index = state_partition_for(seed)
    same = [i for i in (f"bulk-{n}" for n in range(200_000)) if state_partition_for(i) == index]
    ids = [seed, *same[:IDS - 1]]
    assert len(ids) == IDS

    async def claim() -> None:  # creates the partition's epoch and ids znodes
        await first.coordinator.init_producer_id(seed, timeout_ms=60_000)

    run(claim)
    writer = KazooClient(hosts=connect, timeout=20)
    writer.start(timeout=20)
    try:
        pending = [writer.create_async(id_path(index, i), new_metadata(
            i, 5000 + n, 60_000, 1_000_000_000).encode()) for n, i in enumerate(ids[1:])]
        for result in pending:
            result.get(timeout=30)
    finally:
        writer.stop()
        writer.close()
    first.close()
    made.remove(first)
    second = _node(made, connect, 2, (2,), tmp_path, clock)

    async def take_over() -> tuple[float, float]:
        worst, stop = 0.0, False

        async def ticker() -> None:
            nonlocal worst
            while not stop:
                before = time.perf_counter()
                await asyncio.sleep(0.002)
                worst = max(worst, time.perf_counter() - before - 0.002)

        ticking = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        await second.coordinator.ownership_pass()
        took = time.perf_counter() - started
        stop = True
        await ticking
        part = second.coordinator.partitions[index]
        assert len(part.entries) == IDS
        assert {e.meta.state for e in part.entries.values()} == {TransactionState.EMPTY}
        return took, worst

    took, worst = run(take_over)
    with capsys.disabled():
        print(f"\ntakeover of {IDS} ids (all 50 partitions): {took * 1000:.0f} ms, "
              f"longest event-loop stall {worst * 1000:.1f} ms")
    # relative, not absolute (the box is shared): decoding on the loop stalls it for most of
    # the takeover; off the loop only the applying of the decoded ids remains (and, on a
    # loaded box, the GIL held by the decoding thread: one CI run saw 0.37 s of 0.95 s)
    assert worst < max(0.15, took / 2), (worst, took)


def test_live_answers_as_kafka(tmp_path: Path, zookeeper_hosts: str) -> None:
    """On a live broker with raw requests and the project's Admin: InitProducerId with only one
    of producer id / epoch (INVALID_REQUEST) or an empty id (INVALID_REQUEST); EndTxn without a
    transaction (INVALID_TXN_STATE); DescribeTransactions of an unknown id
    (TRANSACTIONAL_ID_NOT_FOUND) and of an id without a transaction (start time -1, read by the
    Admin as None); AddOffsetsToTxn with an empty group id (accepted, as Kafka: its marker
    goes to ``__consumer_offsets``) and the commit completes."""
    from loglake.client.admin import Admin
    from loglake.dev.harness import DevCluster
    from tests.wire import WireClient

    with DevCluster(tmp_path / "dev", brokers=1, zookeeper=zookeeper_hosts) as dev, \
            WireClient("127.0.0.1", dev.broker_port(1)) as client:
        txn = f"live-{uuid.uuid4().hex[:6]}"
        init = {"transactional_id": txn, "transaction_timeout": 60000}
        assert client.request(22, 4, {**init, "producer_id": 5, "producer_epoch": -1}
                              ).error_code == ErrorCode.invalid_request
        assert client.request(22, 4, {**init, "transactional_id": "", "producer_id": -1,
                                      "producer_epoch": -1}).error_code \
            == ErrorCode.invalid_request
        answer = client.request(22, 4, {**init, "producer_id": -1, "producer_epoch": -1})
        assert answer.error_code == ErrorCode.none
        ids = {"transactional_id": txn, "producer_id": answer.producer_id,
               "producer_epoch": answer.producer_epoch}
        assert client.request(26, 3, {**ids, "committed": True}).error_code \
            == ErrorCode.invalid_txn_state
        [unknown] = client.request(65, 0, {"transactional_ids": ["never-seen"]}
                                   ).transaction_states
        assert unknown.error_code == ErrorCode.transactional_id_not_found
        description = Admin(dev.bootstrap_servers).describe_transaction(txn, timeout=30)
        assert (description.state, description.start_time_ms) == ("Empty", None)
        assert client.request(25, 3, {**ids, "group_id": ""}).error_code == ErrorCode.none
        assert client.request(26, 3, {**ids, "committed": True}).error_code == ErrorCode.none
        assert Admin(dev.bootstrap_servers).describe_transaction(
            txn, timeout=30).state == "CompleteCommit"
