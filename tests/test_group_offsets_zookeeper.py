"""Committed offsets in Kafka's classic ZooKeeper form (``/consumers/<g>/offsets/<t>/<p>`` holds
the plain decimal offset; metadata lives in ``offsets_meta`` beside it), the reader rules for
the two znodes, and the migration of loglake's older JSON form at broker start-up.

Real processes only: a standalone ZooKeeper for the store, a dev cluster with a real broker
and confluent-kafka (librdkafka) consumers for the end-to-end checks.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import TopicPartition
from kafka import KafkaAdminClient
from kafka.errors import KafkaError
from kazoo.client import KazooClient

from loglake.catalog.groups import (
    CommittedOffset,
    GroupStore,
    committed_offset,
    group_id_of,
    group_node,
    is_plain_offset,
    meta_path,
    offset_path,
)
from loglake.client import Admin
from loglake.dev.harness import DevCluster, wait_until
from tests.zk_util import fresh_chroot

pytestmark = pytest.mark.timeout(240)

WAIT_S = 60.0


# -- the reader rules (pure) ---------------------------------------------------------------------


def test_plain_offset_with_matching_metadata() -> None:
    meta = CommittedOffset(12, 3, "m", 1_700_000_000_000).to_json()
    assert committed_offset(b"12", 5, meta) == CommittedOffset(12, 3, "m", 1_700_000_000_000)


def test_plain_offset_whose_metadata_describes_another_offset() -> None:
    """A Kafka tool reset the offset (or a crash separated them): the offset wins, with the
    znode's modification time as commit time."""
    meta = CommittedOffset(12, 3, "m", 1).to_json()
    assert committed_offset(b"40", 777, meta) == CommittedOffset(40, -1, "", 777)


def test_plain_offset_without_or_with_unreadable_metadata() -> None:
    assert committed_offset(b"40", 777, None) == CommittedOffset(40, -1, "", 777)
    assert committed_offset(b"40", 777, b"{oops") == CommittedOffset(40, -1, "", 777)


def test_old_json_form_is_still_read() -> None:
    old = b'{"offset": 12, "leader_epoch": 2, "metadata": "x", "commit_time_ms": 9}'
    assert not is_plain_offset(old)
    assert committed_offset(old, 1, None) == CommittedOffset(12, 2, "x", 9)


def test_garbage_is_refused() -> None:
    with pytest.raises(ValueError, match="not an offset"):
        committed_offset(b"twelve", 1, None)
    assert is_plain_offset(b"0") and is_plain_offset(b"-1") and not is_plain_offset(b"")


# -- the store against a real ZooKeeper ----------------------------------------------------------


@pytest.fixture
def zk_hosts(zookeeper_hosts: str) -> str:
    """The session's ZooKeeper under a fresh chroot (an empty tree for this test)."""
    return fresh_chroot(zookeeper_hosts, "offsets")


def _client(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=20)
    return client


def test_commit_writes_plain_offset_and_metadata_beside_it(zk_hosts: str) -> None:
    zk = _client(zk_hosts)
    try:
        store = GroupStore(zk)
        store.commit("g", {("t", 0): CommittedOffset(12, 1, "a", 100),
                           ("t", 1): CommittedOffset(0, -1, "", 100)})
        store.commit("g", {("t", 0): CommittedOffset(13, 1, "b", 200)})
        assert zk.get(offset_path("g", "t", 0))[0] == b"13"
        assert zk.get(offset_path("g", "t", 1))[0] == b"0"
        assert json.loads(zk.get(meta_path("g", "t", 0))[0])["metadata"] == "b"
        assert store.fetch("g") == {("t", 0): CommittedOffset(13, 1, "b", 200),
                                    ("t", 1): CommittedOffset(0, -1, "", 100)}

        # a Kafka tool writes only the plain offset: the stale metadata is not attached
        zk.set(offset_path("g", "t", 1), b"5")
        fetched = store.fetch("g")[("t", 1)]
        assert (fetched.offset, fetched.metadata, fetched.leader_epoch) == (5, "", -1)
        assert fetched.commit_time_ms > 0  # the znode's mtime

        # an OffsetDelete that crashed after its first delete leaves only the metadata
        zk.delete(offset_path("g", "t", 0))
        assert ("t", 0) not in store.fetch("g")
        store.commit("g", {("t", 0): CommittedOffset(20, 2, "c", 300)})  # over the orphan
        assert store.fetch("g")[("t", 0)] == CommittedOffset(20, 2, "c", 300)

        store.delete_offsets("g", [("t", 0)])
        assert zk.exists(offset_path("g", "t", 0)) is None
        assert zk.exists(meta_path("g", "t", 0)) is None
        store.delete_group("g")
        assert zk.get_children("/consumers/g") == []
    finally:
        zk.stop()
        zk.close()


def test_migration_is_idempotent_and_safe_from_several_brokers(zk_hosts: str) -> None:
    """Four clients (as four brokers starting at once) migrate 60 old JSON znodes together:
    each is migrated exactly once and every value ends plain with its metadata kept."""
    setup = _client(zk_hosts)
    old = {}
    for group in ("a", "b", "c"):
        for partition in range(20):
            committed = CommittedOffset(partition * 7, partition % 3, f"m{partition}", 1000)
            old[(group, partition)] = committed
            setup.create(offset_path(group, "t", partition), committed.to_json(),
                         makepath=True)
    setup.create(offset_path("a", "u", 0), b"not json", makepath=True)  # left alone
    clients = [_client(zk_hosts) for _ in range(4)]
    counts: list[int] = []
    errors: list[BaseException] = []

    def migrate(client: KazooClient) -> None:
        try:
            counts.append(GroupStore(client).migrate_offsets())
        except BaseException as exc:
            errors.append(exc)

    try:
        threads = [threading.Thread(target=migrate, args=(c,)) for c in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors
        assert sum(counts) == len(old)
        assert GroupStore(setup).migrate_offsets() == 0  # idempotent
        for (group, partition), committed in old.items():
            assert setup.get(offset_path(group, "t", partition))[0] == str(
                committed.offset).encode()
            assert GroupStore(setup).fetch(group)[("t", partition)] == committed
        assert setup.get(offset_path("a", "u", 0))[0] == b"not json"
    finally:
        for client in [setup, *clients]:
            client.stop()
            client.close()


# -- a real broker and real consumers ------------------------------------------------------------


@pytest.fixture(scope="module")
def dev(group_dev: DevCluster) -> DevCluster:
    return group_dev  # one broker, no initial rebalance delay (tests/conftest.py)


def _topic(dev: DevCluster, partitions: int = 3) -> str:
    name = f"zkoff-{uuid.uuid4().hex[:8]}"
    with Admin(dev.bootstrap_servers, timeout=60) as admin:
        admin.create_topic(name, partitions=partitions)
    return name


def _consumer(dev: DevCluster, group: str) -> KafkaConsumer:
    return KafkaConsumer({"bootstrap.servers": dev.bootstrap_servers, "group.id": group,
                          "enable.auto.commit": False, "session.timeout.ms": 6000})


def _committed(dev: DevCluster, group: str) -> dict[int, tuple[int, str]]:
    """OffsetFetch (offset, metadata) through kafka-python's admin client (librdkafka's
    ``committed()`` reads metadata past its end), retried while the coordinator loads."""
    admin = KafkaAdminClient(bootstrap_servers=dev.bootstrap_servers)

    def fetched() -> tuple[dict[int, tuple[int, str]]]:
        found = admin.list_group_offsets(group)[group]
        return ({tp.partition: (om.offset, om.metadata) for tp, om in found.items()},)

    try:
        # KafkaError: e.g. COORDINATOR_LOAD_IN_PROGRESS right after a start
        [committed] = wait_until(fetched, WAIT_S, f"the offsets of {group}", interval=0.5,
                                 ignore=(KafkaError,))
        return committed
    finally:
        admin.close()


def test_offsets_committed_by_confluent_kafka_are_plain_integers(dev: DevCluster) -> None:
    topic, group = _topic(dev), f"burrow-{uuid.uuid4().hex[:8]}"
    consumer = _consumer(dev, group)
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 12, "checkpoint-a"),
                                 TopicPartition(topic, 2, 34)], asynchronous=False)
    finally:
        consumer.close()
    zk = _client(dev.zookeeper_connect)
    try:  # what a Kafka ZooKeeper-offset tool (Burrow: strconv.ParseInt) reads
        base = f"/consumers/{group}/offsets/{topic}"
        assert sorted(zk.get_children(base)) == ["0", "2"]
        values = {int(p): zk.get(f"{base}/{p}")[0] for p in zk.get_children(base)}
        assert values == {0: b"12", 2: b"34"}
        meta = json.loads(zk.get(meta_path(group, topic, 0))[0])
        # confluent-kafka-python sends the metadata with its C string's NUL; kept as sent
        assert (meta["offset"], meta["metadata"].rstrip("\x00")) == (12, "checkpoint-a")
    finally:
        zk.stop()
        zk.close()
    committed = _committed(dev, group)
    assert committed[0][0] == 12
    assert committed[0][1].rstrip("\x00") == "checkpoint-a"
    assert committed[2][0] == 34
    assert 1 not in committed


def test_broker_start_migrates_the_old_json_form(dev: DevCluster) -> None:
    topic, group = _topic(dev), f"migrated-{uuid.uuid4().hex[:8]}"
    dev.stop_broker(1)
    zk = _client(dev.zookeeper_connect)
    try:
        for partition, offset in ((0, 7), (1, 9)):
            old = {"offset": offset, "leader_epoch": 0, "metadata": f"old-{partition}",
                   "commit_time_ms": int(time.time() * 1000)}
            zk.create(offset_path(group, topic, partition), json.dumps(old).encode(),
                      makepath=True)
        dev.start_broker(1)
        wait_until(lambda: zk.get(offset_path(group, topic, 1))[0] == b"9", WAIT_S,
                   "the broker to migrate the offsets", interval=0.2)
        assert zk.get(offset_path(group, topic, 0))[0] == b"7"
        assert json.loads(zk.get(meta_path(group, topic, 0))[0])["metadata"] == "old-0"
    finally:
        zk.stop()
        zk.close()
    committed = _committed(dev, group)
    assert committed[0] == (7, "old-0")
    assert committed[1] == (9, "old-1")


def test_group_node_names_round_trip() -> None:
    for group in ("", ".", "..", "a/b", "x%y", "plain.group-1", "ü", "a\x01b", "\U0001f600"):
        node = group_node(group)
        assert "/" not in node and node not in ("", ".", "..")
        assert group_id_of(node) == group
    assert group_node("plain.group-1") == "plain.group-1"  # Kafka's layout where possible


@pytest.mark.parametrize("group", ["team/a", "..", "emoji-\U0001f600", "bad\x07bell"])
def test_group_ids_zookeeper_cannot_name_still_commit_and_fetch(dev: DevCluster,
                                                                group: str) -> None:
    topic = _topic(dev, partitions=1)
    consumer = _consumer(dev, group)
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    finally:
        consumer.close()
    assert _committed(dev, group)[0][0] == 5
    with Admin(dev.bootstrap_servers, timeout=60) as admin:
        assert group in [g.group_id for g in admin.list_groups()]
