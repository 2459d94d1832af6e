"""Consumer offsets inside transactions: TxnOffsetCommit stores pending offsets (durable in
ZooKeeper, by producer id), a commit marker makes them the group's committed offsets, an abort
drops them; OffsetFetch ``require_stable`` answers UNSTABLE_OFFSET_COMMIT meanwhile.

Pure rules (offsets_partition_for against Java's String.hashCode, epochs, the order of plain
and transactional commits), the group coordinator in process against a real ZooKeeper (the
session's, under a fresh chroot), and a live broker spoken to with raw requests
(loglake/client/_wire.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kio.schema.errors import ErrorCode

from loglake.broker.groups.coordinator import GroupCoordinator, GroupError, coordinator_for
from loglake.broker.groups.group import GroupState, Member
from loglake.broker.groups.txn_offsets import (
    OFFSETS_PARTITIONS,
    OFFSETS_TOPIC,
    java_string_hash,
    merge_pending,
    offsets_partition_for,
    plan_completion,
)
from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.zk_session import ZkSession
from loglake.catalog.groups import (
    CommittedOffset,
    CommittedOrder,
    PendingTxnOffsets,
    offset_path,
    txn_offsets_path,
)
from loglake.catalog.zookeeper import BrokerInfo, ClusterCatalog, TopicMetadata
from loglake.client._wire import request
from loglake.config import BrokerConfig
from loglake.dev.harness import DevCluster
from loglake.errors import InvalidProducerEpochError
from tests.admin_util import create_topic
from tests.zk_util import fresh_chroot

pytestmark = pytest.mark.timeout(180)

T = TypeVar("T")
PID = 7001

# -- pure rules -----------------------------------------------------------------------------------

JAVA_HASHES = {
    # computed with OpenJDK 17: s.hashCode(), and Utils.abs(s.hashCode()) % 50
    "": (0, 0),
    "a": (97, 47),
    "hello": (99162322, 22),
    "polygenelubricants": (-2147483648, 0),  # Integer.MIN_VALUE: Utils.abs gives 0
    "my-group": (-1906497762, 12),  # negative: Math.abs, not & 0x7fffffff (36)
    "console-consumer-12345": (158455506, 6),
    "grüße": (98768023, 23),
    "😀group": (-1231696132, 32),  # a surrogate pair: two UTF-16 code units
    "zzzzzzzzzz": (-1580979136, 36),
    "group-1": (293427299, 49),
}


@pytest.mark.parametrize("group", sorted(JAVA_HASHES))
def test_offsets_partition_for_matches_kafka(group: str) -> None:
    java_hash, partition = JAVA_HASHES[group]
    assert java_string_hash(group) == java_hash
    assert offsets_partition_for(group) == partition
    assert 0 <= partition < OFFSETS_PARTITIONS


def _offset(value: int, order: int = -1) -> CommittedOffset:
    return CommittedOffset(value, -1, "", 1, order=order)


def test_merge_pending_fences_older_epochs_and_replaces_ended_ones() -> None:
    first = merge_pending(None, PID, 3, {("t", 0): _offset(5)})
    assert first.version == -1 and first.producer_epoch == 3
    stored = PendingTxnOffsets(PID, 3, {("t", 0): _offset(5, order=100)}, version=0)
    same = merge_pending(stored, PID, 3, {("t", 1): _offset(9)})
    assert {k: o.offset for k, o in same.offsets.items()} == {("t", 0): 5, ("t", 1): 9}
    assert same.offsets[("t", 0)].order == 100 and same.offsets[("t", 1)].order == -1
    assert same.version == 0
    newer = merge_pending(stored, PID, 4, {("t", 1): _offset(9)})
    assert set(newer.offsets) == {("t", 1)}
    with pytest.raises(InvalidProducerEpochError):
        merge_pending(stored, PID, 2, {("t", 1): _offset(9)})


def test_a_commit_applies_only_over_offsets_written_before_it() -> None:
    pending = PendingTxnOffsets(PID, 0, {("t", 0): _offset(10, order=50),
                                         ("t", 1): _offset(11, order=50),
                                         ("t", 2): _offset(12, order=50)}, version=1)
    committed = {("t", 0): CommittedOrder(40, 3),  # plain commit before the txn's write
                 ("t", 1): CommittedOrder(60, 4)}  # plain commit after it: it stays
    plan = plan_completion(pending, commit=True, committed=committed)
    assert {k: (o.offset, v) for k, (o, v) in plan.apply.items()} == {
        ("t", 0): (10, 3), ("t", 2): (12, -1)}
    assert plan_completion(pending, commit=False, committed=committed).apply == {}


# -- the coordinator in process, on a real ZooKeeper ----------------------------------------------


class Node:
    """One in-process group coordinator on its own ZooKeeper session."""

    def __init__(self, connect: str, broker_id: int, brokers: tuple[int, ...],
                 log_dir: Path) -> None:
        self.catalog = ClusterCatalog(connect, timeout=20)
        self.catalog.start()
        self.session = ZkSession(self.catalog, broker_id=broker_id, stopped=lambda: False)
        self.session.renew_lease(time.monotonic() + 3600)
        self.metadata = MetadataCache()
        self.metadata.topics["t"] = TopicMetadata("t", {0: (1,), 1: (1,), 2: (1,)}, {})
        self.metadata.live_brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in brokers}
        config = BrokerConfig(broker_id=broker_id, host="127.0.0.1", port=0, log_dir=log_dir,
                              zookeeper_connect=connect)
        self.groups = GroupCoordinator(self.session, self.metadata, config)
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.catalog.stop()


@pytest.fixture
def zk_connect(zookeeper_hosts: str) -> str:
    return fresh_chroot(zookeeper_hosts, "txn-offsets")


@pytest.fixture
def node(zk_connect: str, tmp_path: Path) -> Iterator[Node]:
    one = Node(zk_connect, 1, (1,), tmp_path)
    try:
        yield one
    finally:
        one.close()


def run(coro: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(coro(), 60))


def _commit_args(**offsets: int) -> dict[tuple[str, int], tuple[int, int, str | None]]:
    return {("t", int(k[1:])): (v, -1, f"m{v}") for k, v in offsets.items()}


async def txn_commit(groups: GroupCoordinator, group: str, *, epoch: int = 0,
                     pid: int = PID, generation: int = -1, member: str = "",
                     instance: str | None = None, **offsets: int) -> dict[Any, ErrorCode]:
    return await groups.txn_commit(group, producer_id=pid, producer_epoch=epoch,
                                   generation=generation, member_id=member,
                                   instance_id=instance, offsets=_commit_args(**offsets))


async def committed(groups: GroupCoordinator, group: str) -> dict[int, int]:
    return {p: o.offset for (_, p), o in (await groups.committed(group)).items()}


def test_pending_offsets_commit_at_the_marker_and_not_before(node: Node) -> None:
    groups, zk = node.groups, node.catalog.zk
    group = "g-commit"
    part = offsets_partition_for(group)

    async def main() -> None:
        await groups.commit(group, generation=-1, member_id="", instance_id=None,
                            offsets=_commit_args(p0=1))
        errors = await txn_commit(groups, group, p0=10, p1=11)
        assert set(errors.values()) == {ErrorCode.none}
        # durable before the answer, indexed by producer id; not committed yet
        assert zk.exists(txn_offsets_path(PID, group)) is not None
        assert await committed(groups, group) == {0: 1}
        assert await groups.unstable_partitions(group) == {("t", 0), ("t", 1)}
        # a marker for another offsets partition ends nothing
        await groups.complete_transaction(PID, 0, (part + 1) % OFFSETS_PARTITIONS, True)
        assert await committed(groups, group) == {0: 1}

        await groups.complete_transaction(PID, 0, part, True)
        assert await committed(groups, group) == {0: 10, 1: 11}
        assert (await groups.committed(group))[("t", 1)].metadata == "m11"
        assert await groups.unstable_partitions(group) == set()
        assert zk.exists(txn_offsets_path(PID, group)) is None
        assert zk.exists(txn_offsets_path(PID)) is None
        assert zk.get(offset_path(group, "t", 0))[0] == b"10"
        # re-sent marker (e.g. after a coordinator failover): nothing left, succeeds
        await groups.complete_transaction(PID, 0, part, True)
        await groups.complete_transaction(PID, 0, part, False)
        assert await committed(groups, group) == {0: 10, 1: 11}
        # what ZooKeeper holds is what a new coordinator reads
        assert {k: o.offset for k, o in node.groups.store.fetch(group).items()} == {
            ("t", 0): 10, ("t", 1): 11}

    run(main)


def test_abort_drops_pending_offsets(node: Node) -> None:
    groups, zk = node.groups, node.catalog.zk
    group = "g-abort"

    async def main() -> None:
        await txn_commit(groups, group, p0=10)
        await groups.complete_transaction(PID, 0, offsets_partition_for(group), False)
        assert await committed(groups, group) == {}
        assert await groups.unstable_partitions(group) == set()
        assert zk.exists(txn_offsets_path(PID, group)) is None

    run(main)


def test_epochs_fence_old_producers_and_stale_markers(node: Node) -> None:
    groups = node.groups
    group = "g-epochs"
    part = offsets_partition_for(group)

    async def main() -> None:
        await txn_commit(groups, group, epoch=3, p0=10)
        with pytest.raises(InvalidProducerEpochError):
            await txn_commit(groups, group, epoch=2, p0=99)
        await groups.complete_transaction(PID, 2, part, True)  # stale marker: left alone
        assert await committed(groups, group) == {}
        assert await groups.unstable_partitions(group) == {("t", 0)}
        await groups.complete_transaction(PID, 4, part, True)  # bumped epoch (TV2, timeout)
        assert await committed(groups, group) == {0: 10}

    run(main)


def test_plain_commits_and_transactional_ones_keep_their_write_order(node: Node) -> None:
    groups = node.groups
    group = "g-order"
    part = offsets_partition_for(group)
    other = PID + 1

    async def plain(**offsets: int) -> None:
        await groups.commit(group, generation=-1, member_id="", instance_id=None,
                            offsets=_commit_args(**offsets))

    async def main() -> None:
        await plain(p0=1, p1=1)
        await txn_commit(groups, group, p0=10, p1=10, p2=10)
        await plain(p1=20)  # written after the TxnOffsetCommit: wins at commit (Kafka)
        await txn_commit(groups, group, pid=other, p2=30)  # later than PID's p2
        await groups.complete_transaction(other, 0, part, True)
        assert await committed(groups, group) == {0: 1, 1: 20, 2: 30}
        await groups.complete_transaction(PID, 0, part, True)
        # p0: plain commit older -> 10; p1: plain newer -> 20; p2: other's newer -> 30
        assert await committed(groups, group) == {0: 10, 1: 20, 2: 30}
        # a transaction committed later still loses to nothing written after it
        await txn_commit(groups, group, p2=40)
        await groups.complete_transaction(PID, 0, part, True)
        assert await committed(groups, group) == {0: 10, 1: 20, 2: 40}

    run(main)


def test_txn_offset_commit_validation(node: Node) -> None:
    groups = node.groups
    group = "g-valid"

    async def main() -> None:
        errors = await groups.txn_commit(
            group, producer_id=PID, producer_epoch=0, generation=-1, member_id="",
            instance_id=None, offsets={("t", 0): (1, -1, "x" * 5000), ("t", 9): (1, -1, None),
                                       ("nope", 0): (1, -1, None), ("t", 1): (1, -1, None)})
        assert errors == {("t", 0): ErrorCode.offset_metadata_too_large,
                          ("t", 9): ErrorCode.unknown_topic_or_partition,
                          ("nope", 0): ErrorCode.unknown_topic_or_partition,
                          ("t", 1): ErrorCode.none}
        assert await groups.unstable_partitions(group) == {("t", 1)}
        # an empty group: a generation/member given is checked against no members (Kafka)
        with pytest.raises(GroupError) as empty:
            await txn_commit(groups, group, generation=1, member="m", p0=1)
        assert empty.value.code is ErrorCode.unknown_member_id

        # a group with a member (KIP-447's checks)
        live = await groups._owned(group)
        live.members["m1"] = Member("m1", "i1", "c", "h", 10000, 10000, "consumer", [])
        live.static["i1"] = "m1"
        live.state = GroupState.PREPARING_REBALANCE
        live.state = GroupState.COMPLETING_REBALANCE
        live.state = GroupState.STABLE
        live.generation = 5
        assert set((await txn_commit(groups, group, generation=5, member="m1",
                                     instance="i1", p0=2)).values()) == {ErrorCode.none}
        cases = [(dict(generation=4, member="m1"), ErrorCode.illegal_generation),
                 (dict(generation=5, member="m2"), ErrorCode.unknown_member_id),
                 (dict(generation=5, member="m2", instance="i1"), ErrorCode.fenced_instance_id),
                 (dict(generation=5, member="m1", instance="i9"), ErrorCode.unknown_member_id),
                 (dict(generation=-1, member="m2"), ErrorCode.unknown_member_id)]
        for args, code in cases:
            with pytest.raises(GroupError) as refused:
                await txn_commit(groups, group, p0=3, **args)  # type: ignore[arg-type]
            assert refused.value.code is code, args
        # v0-2 requests carry no generation or member: accepted (transactional rule)
        assert set((await txn_commit(groups, group, p0=4)).values()) == {ErrorCode.none}

    run(main)


def test_delete_group_drops_pending_offsets_and_expiry_keeps_them(node: Node) -> None:
    groups, zk = node.groups, node.catalog.zk
    group = "g-delete"

    async def main() -> None:
        await groups.commit(group, generation=-1, member_id="", instance_id=None,
                            offsets=_commit_args(p0=1, p1=1))
        await txn_commit(groups, group, p0=10)
        # expiry: the group emptied long ago, yet the partition with a pending offset stays
        groups.config = dataclasses.replace(groups.config, offsets_retention_minutes=1)
        live = await groups._owned(group)
        live.empty_since_ms = 0
        groups.offsets[group] = {k: CommittedOffset(o.offset, o.leader_epoch, o.metadata, 0)
                                 for k, o in groups.offsets[group].items()}
        await groups._expire_offsets()
        assert await committed(groups, group) == {0: 1}
        assert zk.exists(offset_path(group, "t", 1)) is None
        assert zk.exists(txn_offsets_path(PID, group)) is not None

        await groups.delete_group(group)
        assert zk.exists(txn_offsets_path(PID, group)) is None
        await groups.complete_transaction(PID, 0, offsets_partition_for(group), True)
        assert await committed(groups, group) == {}

    run(main)


def test_a_new_coordinator_finds_pending_offsets_in_zookeeper(zk_connect: str,
                                                              tmp_path: Path) -> None:
    """Broker 1 takes a TxnOffsetCommit and dies; broker 2, now the coordinator, completes the
    transaction from ZooKeeper without having served the group before."""
    group = next(g for g in (f"g-move-{i}" for i in range(100))
                 if coordinator_for(g, (1, 2)) == 1)
    first = Node(zk_connect, 1, (1, 2), tmp_path / "1")
    second = Node(zk_connect, 2, (1, 2), tmp_path / "2")
    try:
        async def before() -> None:
            await txn_commit(first.groups, group, p0=10)
            # broker 2 is not the group's coordinator: the marker belongs elsewhere
            with pytest.raises(GroupError) as wrong:
                await second.groups.complete_transaction(PID, 0, offsets_partition_for(group),
                                                         True)
            assert wrong.value.code is ErrorCode.not_coordinator

        run(before)
        first.close()  # its session ends: the owner znode goes
        second.metadata.live_brokers.pop(1)

        async def after() -> None:
            assert await second.groups.unstable_partitions(group) == {("t", 0)}
            await second.groups.complete_transaction(PID, 0, offsets_partition_for(group), True)
            assert await committed(second.groups, group) == {0: 10}

        run(after)
    finally:
        first.close()
        second.close()


# -- a live broker, raw requests ------------------------------------------------------------------

LIVE_PID = 880_001


def _send(cluster: DevCluster, api_key: int, version: int, body: dict[str, Any]) -> Any:
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    return request(host, int(port), api_key, version, body, timeout=30,
                   client_id="test-txn-offsets", operation=f"api {api_key} v{version}")


def _txn_offset_commit(cluster: DevCluster, group: str, topic: str, offset: int) -> list[Any]:
    response = _send(cluster, 28, 3, {
        "transactional_id": "tx-live", "group_id": group, "producer_id": LIVE_PID,
        "producer_epoch": 0, "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
             "committed_metadata": "txn"}]}]})
    return [p.error_code for t in response.topics for p in t.partitions]


def _fetch(cluster: DevCluster, group: str, topic: str, *, version: int,
           stable: bool) -> tuple[int, ErrorCode]:
    """(offset, partition error) of partition 0, OffsetFetch v7 or v8."""
    wanted = [{"name": topic, "partition_indexes": [0]}]
    if version >= 8:
        response = _send(cluster, 9, version, {"groups": [{"group_id": group, "topics": wanted}],
                                               "require_stable": stable})
        (answer,) = response.groups
        assert answer.error_code is ErrorCode.none
    else:
        answer = _send(cluster, 9, version, {"group_id": group, "topics": wanted,
                                             "require_stable": stable})
        assert answer.error_code is ErrorCode.none
    (partition,) = [p for t in answer.topics for p in t.partitions]
    return partition.committed_offset, partition.error_code


def _marker(cluster: DevCluster, group: str, *, commit: bool) -> ErrorCode:
    response = _send(cluster, 27, 1, {"markers": [{
        "producer_id": LIVE_PID, "producer_epoch": 0, "transaction_result": commit,
        "coordinator_epoch": 0, "topics": [{"name": OFFSETS_TOPIC,
                                            "partition_indexes": [offsets_partition_for(group)]}],
    }]})
    (code,) = [p.error_code for m in response.markers for t in m.topics for p in t.partitions]
    return code


def test_live_txn_offsets_are_pending_until_the_commit_marker(cluster: DevCluster,
                                                              topic_name: str) -> None:
    create_topic(cluster.bootstrap_servers, topic_name)
    group = f"g-live-{uuid.uuid4().hex[:8]}"
    plain = _send(cluster, 8, 8, {"group_id": group, "generation_id_or_member_epoch": -1,
                                  "member_id": "", "topics": [{"name": topic_name, "partitions": [
                                      {"partition_index": 0, "committed_offset": 3}]}]})
    assert plain.topics[0].partitions[0].error_code is ErrorCode.none

    assert _txn_offset_commit(cluster, group, topic_name, 10) == [ErrorCode.none]
    for version in (7, 8):
        assert _fetch(cluster, group, topic_name, version=version, stable=False) == (
            3, ErrorCode.none)
        assert _fetch(cluster, group, topic_name, version=version, stable=True) == (
            -1, ErrorCode.unstable_offset_commit)

    assert _marker(cluster, group, commit=True) is ErrorCode.none
    assert _fetch(cluster, group, topic_name, version=7, stable=True) == (10, ErrorCode.none)
    assert _marker(cluster, group, commit=True) is ErrorCode.none  # re-sent: idempotent

    # the next transaction aborts: its offset vanishes, the committed one stays
    assert _txn_offset_commit(cluster, group, topic_name, 20) == [ErrorCode.none]
    assert _marker(cluster, group, commit=False) is ErrorCode.none
    assert _fetch(cluster, group, topic_name, version=8, stable=True) == (10, ErrorCode.none)
