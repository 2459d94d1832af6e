"""Consumer groups with real confluent-kafka (librdkafka) consumers on a 3-broker cluster.

Invariant checked throughout: at every sample, no partition is assigned to two members; once a
rebalance settles, every partition of the topic is assigned to exactly one member.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as KafkaConsumer

from loglake.client import Admin, Consumer, Producer
from loglake.dev.harness import DevCluster, wait_until
from tests.clients import poll_pair, poll_until_assigned

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 6
SESSION_TIMEOUT_MS = 6000  # the broker's minimum
SETTLE_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("groups-confluent")
    with DevCluster(data / "dev", zookeeper=zookeeper_hosts, brokers=3,
                    broker_overrides={"group.initial.rebalance.delay.ms": "0"}) as cluster:
        yield cluster


def _topic(dev: DevCluster, partitions: int = PARTITIONS, records: int = 0) -> str:
    name = f"grp-{uuid.uuid4().hex[:8]}"
    with Admin(dev.bootstrap_servers, timeout=60) as admin:
        admin.create_topic(name, partitions=partitions, replication_factor=1)
    if records:
        with Producer(dev.bootstrap_servers) as producer:
            for i in range(records):
                producer.send(name, b"value-%d" % i, key=b"key-%d" % i)
            producer.flush()
    return name


def _member(dev: DevCluster, group: str, topic: str, **extra: Any) -> KafkaConsumer:
    consumer = KafkaConsumer({
        "bootstrap.servers": dev.bootstrap_servers, "group.id": group,
        "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 1000,
        "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra,
    })
    consumer.subscribe([topic])
    return consumer


def _owned(consumer: KafkaConsumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def _sample(consumers: Sequence[KafkaConsumer]) -> list[set[int]]:
    """Poll every member once and return their assignments; fail on any overlap."""
    for consumer in consumers:
        consumer.poll(0.05)
    owned = [_owned(c) for c in consumers]
    seen: set[int] = set()
    for partitions in owned:
        assert not (partitions & seen), f"partition assigned twice: {owned}"
        seen |= partitions
    return owned


def _settle(consumers: Sequence[KafkaConsumer], *, timeout: float = SETTLE_TIMEOUT_S,
            partitions: int = PARTITIONS) -> list[set[int]]:
    """Poll until the members together own every partition and each owns at least one, and
    that held for a second."""
    done_since: list[float] = []

    def settled() -> list[set[int]] | None:
        owned = _sample(consumers)
        done = (set().union(*owned) == set(range(partitions))
                and all(owned) if len(consumers) <= partitions else True)
        if not done:
            done_since.clear()
            return None
        done_since[:] = done_since or [time.monotonic()]
        return owned if time.monotonic() - done_since[0] >= 1.0 else None

    return wait_until(settled, timeout, lambda: f"group did not settle: {_sample(consumers)}",
                      interval=0)


def _read_distinct(members: Sequence[Consumer], records: int) -> set[bytes]:
    """Poll the members in turn until together they read ``records`` distinct values."""
    values: set[bytes] = set()

    def read_all() -> bool:
        for member in members:
            record = member.poll(0.05)
            if record is not None and record.value is not None:
                values.add(record.value)
        return len(values) >= records

    wait_until(read_all, SETTLE_TIMEOUT_S, lambda: f"read {len(values)} of {records} values",
               interval=0)
    return values


def _close_all(consumers: Sequence[KafkaConsumer]) -> None:
    for consumer in consumers:
        consumer.close()


def test_three_members_then_add_and_remove(dev: DevCluster) -> None:
    topic = _topic(dev)
    group = f"g-{uuid.uuid4().hex[:8]}"
    members = [_member(dev, group, topic, **{"client.id": f"member-{i}"}) for i in range(3)]
    try:
        owned = _settle(members)
        assert sorted(len(p) for p in owned) == [2, 2, 2]
        with Admin(dev.bootstrap_servers) as admin:
            described = admin.describe_group(group)
        assert described.state == "Stable" and len(described.members) == 3
        assert sorted(tp for m in described.members for tp in m.assignment) == [
            (topic, p) for p in range(PARTITIONS)]
        assert {m.client_id for m in described.members} == {"member-0", "member-1", "member-2"}

        members.append(_member(dev, group, topic, **{"client.id": "member-3"}))
        owned = _settle(members)
        assert sorted(len(p) for p in owned) == [1, 1, 2, 2]

        leaving = members.pop(1)
        leaving.close()  # LeaveGroup: the rest rebalance without waiting for the session
        started = time.monotonic()
        owned = _settle(members)
        assert sorted(len(p) for p in owned) == [2, 2, 2]
        assert time.monotonic() - started < SESSION_TIMEOUT_MS / 1000 + 5
    finally:
        _close_all(members)


MEMBER_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from confluent_kafka import Consumer
    bootstrap, group, topic, session = sys.argv[1:5]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "session.timeout.ms": int(session), "heartbeat.interval.ms": 1000,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "client.id": "doomed"})
    consumer.subscribe([topic])
    last = None
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        consumer.poll(0.1)
        owned = sorted(tp.partition for tp in consumer.assignment())
        if owned != last:
            print(json.dumps(owned), flush=True)
            last = owned
""")


def test_sigkilled_member_partitions_move_within_session_timeout(
    dev: DevCluster, tmp_path: Path
) -> None:
    topic = _topic(dev)
    group = f"g-{uuid.uuid4().hex[:8]}"
    members = [_member(dev, group, topic) for _ in range(2)]
    doomed = subprocess.Popen(
        [sys.executable, "-c", MEMBER_SCRIPT, dev.bootstrap_servers, group, topic,
         str(SESSION_TIMEOUT_MS)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert doomed.stdout is not None
        os.set_blocking(doomed.stdout.fileno(), False)
        child_owned: list[int] = []
        owned: list[set[int]] = []

        def three_settled() -> bool:
            nonlocal child_owned, owned
            owned = _sample(members)
            for line in doomed.stdout.readlines():
                child_owned = json.loads(line)
            both = set().union(*owned)
            return len(child_owned) == 2 and not both & set(child_owned) and len(both) == 4

        wait_until(three_settled, SETTLE_TIMEOUT_S,
                   lambda: f"3-member group did not settle: {owned} + {child_owned}", interval=0)

        doomed.send_signal(signal.SIGKILL)  # only the member process this test started
        doomed.wait(timeout=10)
        killed_at = time.monotonic()
        owned = _settle(members, timeout=SESSION_TIMEOUT_MS / 1000 + 30)
        moved_after = time.monotonic() - killed_at - 1.0  # _settle waits 1 s of stability
        assert set().union(*owned) == set(range(PARTITIONS))
        assert set(child_owned) <= set().union(*owned)
        # detection within the session timeout, plus one heartbeat + rejoin round for the rest
        assert moved_after < SESSION_TIMEOUT_MS / 1000 + 4, moved_after
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(timeout=10)
        _close_all(members)


def test_two_groups_each_receive_every_record(dev: DevCluster) -> None:
    records = 300
    topic = _topic(dev, partitions=3, records=records)
    received: dict[str, set[bytes]] = {}
    for group in (f"pub-a-{uuid.uuid4().hex[:6]}", f"pub-b-{uuid.uuid4().hex[:6]}"):
        members = [Consumer(dev.bootstrap_servers, group_id=group, session_timeout_ms=6000,
                            heartbeat_interval_ms=1000) for _ in range(2)]
        try:
            for member in members:
                member.subscribe([topic])
            # a set: records read before the second member's join may be read again after it
            values = _read_distinct(members, records)
            for member in members:
                member.commit()
            received[group] = values
        finally:
            for member in members:
                member.close()
    expected = {b"value-%d" % i for i in range(records)}
    assert len(received) == 2
    for group, values in received.items():
        assert values == expected, group


def test_cooperative_sticky_moves_only_what_it_must(dev: DevCluster) -> None:
    topic = _topic(dev)
    group = f"coop-{uuid.uuid4().hex[:8]}"
    events: dict[str, list[tuple[str, list[tuple[str, int]]]]] = {"a": [], "b": []}

    def member(name: str) -> Consumer:
        consumer = Consumer(dev.bootstrap_servers, group_id=group,
                            assignment_strategy="cooperative-sticky",
                            session_timeout_ms=6000, heartbeat_interval_ms=1000)
        consumer.subscribe(
            [topic],
            on_assign=lambda parts: events[name].append(("assign", parts)),
            on_revoke=lambda parts: events[name].append(("revoke", parts)),
            on_lost=lambda parts: events[name].append(("lost", parts)),
        )
        return consumer

    first = member("a")
    second: Consumer | None = None
    try:
        poll_until_assigned(first, PARTITIONS, timeout=SETTLE_TIMEOUT_S)
        second = member("b")
        wait_until(lambda: tuple(map(len, poll_pair(first, second))) == (PARTITIONS // 2,) * 2,
                   SETTLE_TIMEOUT_S, "the two members split the partitions", interval=0)
        # incremental: the first member never gave up what it kept, the second only gained
        revoked = [parts for kind, parts in events["a"] if kind == "revoke"]
        assert revoked and all(len(parts) < PARTITIONS for parts in revoked)
        assert sum(len(p) for p in revoked) == PARTITIONS // 2
        assert set(first.assignment()).isdisjoint(p for parts in revoked for p in parts)
        assert not [e for e in events["b"] if e[0] != "assign"]
        with Admin(dev.bootstrap_servers) as admin:
            described = admin.describe_group(group)
        assert described.assignor == "cooperative-sticky"
    finally:
        first.close()
        if second is not None:
            second.close()
