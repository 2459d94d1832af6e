"""The SDK's group mode: subscribe with rebalance callbacks, manual and automatic commits of the
processed position, committed(), group administration, and offsets visible in ZooKeeper."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from loglake.client import Admin, BrokerError, Consumer, Record
from loglake.dev.harness import DevCluster, wait_until
from tests.clients import poll_pair, poll_until_assigned, read_records, topic_with_records

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 3
RECORDS = 90
WAIT_S = 60.0


@pytest.fixture(scope="module")
def dev(group_dev: DevCluster) -> DevCluster:
    return group_dev  # one broker, no initial rebalance delay (tests/conftest.py)


@pytest.fixture
def topic(dev: DevCluster) -> str:
    return topic_with_records(dev.bootstrap_servers, "sdk", partitions=PARTITIONS,
                              records=RECORDS)


@pytest.fixture
def group() -> str:
    return f"sdk-group-{uuid.uuid4().hex[:8]}"


def _member(dev: DevCluster, group: str, **kwargs: object) -> Consumer:
    return Consumer(dev.bootstrap_servers, group_id=group, session_timeout_ms=6000,
                    heartbeat_interval_ms=1000, **kwargs)  # type: ignore[arg-type]


def _read(consumer: Consumer, count: int) -> list[Record]:
    return read_records(consumer, count, timeout=WAIT_S)


def test_manual_commit_of_processed_position(dev: DevCluster, topic: str, group: str) -> None:
    assigned: list[list[tuple[str, int]]] = []
    with _member(dev, group) as consumer:
        consumer.subscribe([topic], on_assign=assigned.append)
        records = _read(consumer, 10)
        assert assigned == [[(topic, p) for p in range(PARTITIONS)]]
        assert consumer.member_id()
        # nothing committed yet
        assert consumer.committed(topic) == dict.fromkeys(range(PARTITIONS))
        committed = consumer.commit(records=records[:4])
        expected: dict[int, int] = {}
        for record in records[:4]:
            expected[record.partition] = max(expected.get(record.partition, 0),
                                             record.offset + 1)
        assert committed == {(topic, p): o for p, o in expected.items()}
        assert {p: o for p, o in consumer.committed(topic).items() if o is not None} == expected
        # commit() without arguments: everything returned so far, last record included
        everything = consumer.commit()
        last: dict[int, int] = {}
        for record in records:
            last[record.partition] = record.offset + 1
        assert everything == {(topic, p): o for p, o in last.items()}
        assert consumer.commit(offsets={(topic, 0): 1}) == {(topic, 0): 1}
        assert consumer.committed(topic, [0]) == {0: 1}
    # a new member of the group continues at the committed positions
    with _member(dev, group) as again:
        again.subscribe(topic)
        first = _read(again, 1)[0]
        positions = {**last, 0: 1}
        assert first.offset == positions[first.partition]


def test_auto_commit_covers_only_records_moved_past(
    dev: DevCluster, topic: str, group: str
) -> None:
    def positions(records: list[Record]) -> dict[int, int]:
        result: dict[int, int] = {}
        for record in records:
            result[record.partition] = record.offset + 1
        return result

    with _member(dev, group, auto_commit=True, auto_commit_interval_ms=200) as consumer:
        consumer.subscribe([topic])
        records = _read(consumer, 5)
        # no poll since the 5th record was returned: it is still being processed, so the
        # background commits (every 200 ms) cover exactly the first four
        processed = positions(records[:4])
        wait_until(lambda: {p: o for p, o in consumer.committed(topic).items()
                            if o is not None} == processed, WAIT_S,
                   f"committed offsets to reach {processed}", interval=0.2)
        time.sleep(1.0)  # more intervals: still nothing beyond what was processed
        assert {p: o for p, o in consumer.committed(topic).items() if o is not None} == processed
        assert consumer.last_error is None
    # close() commits the 5th record too: the application is done with everything returned
    with Admin(dev.bootstrap_servers) as admin:
        assert admin.group_offsets(group) == {
            (topic, p): o for p, o in positions(records).items()}


def test_rebalance_callbacks_on_member_join(dev: DevCluster, topic: str, group: str) -> None:
    events: list[tuple[str, str, list[tuple[str, int]]]] = []

    def member(name: str) -> Consumer:
        consumer = _member(dev, group)
        consumer.subscribe(
            [topic],
            on_assign=lambda parts: events.append((name, "assign", parts)),
            on_revoke=lambda parts: events.append((name, "revoke", parts)),
        )
        return consumer

    with member("a") as first:
        poll_until_assigned(first, PARTITIONS, timeout=WAIT_S)
        with member("b") as second:

            def both_own_some() -> bool:
                mine, theirs = poll_pair(first, second)
                return bool(mine and theirs and len(mine | theirs) == PARTITIONS)

            wait_until(both_own_some, WAIT_S, "the two members split the partitions",
                       interval=0)
    all_parts = [(topic, p) for p in range(PARTITIONS)]
    assert events[0] == ("a", "assign", all_parts)
    assert ("a", "revoke", all_parts) in events  # eager (range): everything is revoked
    assert any(e[0] == "b" and e[1] == "assign" and e[2] for e in events)


def test_offsets_visible_in_zookeeper_and_admin(dev: DevCluster, topic: str, group: str) -> None:
    with _member(dev, group) as consumer:
        consumer.subscribe([topic])
        _read(consumer, 3)
        consumer.commit(offsets={(topic, 0): 7, (topic, 2): 11})
    with Admin(dev.bootstrap_servers) as admin:
        assert admin.group_offsets(group) == {(topic, 0): 7, (topic, 2): 11}
        assert group in [g.group_id for g in admin.list_groups()]
    zk = KazooClient(hosts=dev.zookeeper_connect, timeout=20)
    zk.start(timeout=30)
    try:
        base = f"/consumers/{group}/offsets/{topic}"
        assert sorted(zk.get_children(base)) == ["0", "2"]
        assert zk.get(f"{base}/0")[0] == b"7"  # Kafka's plain form
        assert zk.get(f"{base}/2")[0] == b"11"
        meta = json.loads(zk.get(f"/consumers/{group}/offsets_meta/{topic}/0")[0])
        assert meta["offset"] == 7
        assert meta["commit_time_ms"] > 0
    finally:
        zk.stop()
        zk.close()


def test_admin_refuses_changes_to_active_group(dev: DevCluster, topic: str, group: str) -> None:
    with _member(dev, group) as consumer:
        consumer.subscribe([topic])
        _read(consumer, 1)
        with Admin(dev.bootstrap_servers) as admin:
            described = admin.describe_group(group)
            assert described.state == "Stable" and not described.is_empty
            with pytest.raises(BrokerError) as refused:
                admin.delete_group(group)
            assert refused.value.code == ErrorCode.non_empty_group
    with Admin(dev.bootstrap_servers) as admin:
        assert admin.describe_group(group).is_empty
        admin.alter_group_offsets(group, {(topic, 1): 2})
        assert admin.group_offsets(group)[(topic, 1)] == 2
        admin.delete_group(group)
        assert admin.group_offsets(group) == {}
        with pytest.raises(BrokerError) as missing:
            admin.delete_group(group)
        assert missing.value.code == ErrorCode.group_id_not_found


def test_assign_mode_with_group_resumes_from_committed(
    dev: DevCluster, topic: str, group: str
) -> None:
    with Admin(dev.bootstrap_servers) as admin:
        admin.alter_group_offsets(group, {(topic, 1): 20})
    with _member(dev, group) as consumer:
        consumer.assign(topic, [1], start="committed")
        assert _read(consumer, 1)[0].offset == 20
        # a consumer outside the group protocol may commit while the group has no members
        assert consumer.commit() == {(topic, 1): 21}
        assert consumer.committed(topic, [1]) == {1: 21}
        with pytest.raises(ValueError):
            consumer.assign(topic, start="bogus")  # type: ignore[arg-type]
    with Consumer(dev.bootstrap_servers) as plain, pytest.raises(ValueError):
        plain.subscribe([topic])
