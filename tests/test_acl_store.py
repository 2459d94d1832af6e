"""ACLs in ZooKeeper (catalog/acls.py) at Kafka's paths and in Kafka's JSON, and a broker's
ACL cache following them (broker/security/acl_sync.py), against the session's real ZooKeeper.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from loglake.broker.security.acl_authorizer import AclAuthorizer
from loglake.broker.security.acl_model import AclOperation, ResourceType
from loglake.broker.security.acl_sync import AclSync
from loglake.broker.security.principal import KafkaPrincipal
from loglake.broker.security.session import Session
from loglake.broker.zk_session import ZkSession
from loglake.catalog.acls import (
    AclStore,
    StoredAcl,
    StoredResource,
    decode_acls,
    decode_change,
    encode_acls,
    encode_change,
)
from loglake.catalog.change_notifications import CHANGE_EXPIRATION_MS
from loglake.catalog.zookeeper import ClusterCatalog
from loglake.dev.harness import wait_until_async
from loglake.errors import InvalidRequestError
from tests.zk_util import fresh_chroot


@pytest.fixture
def connect(zookeeper_hosts: str) -> str:
    return fresh_chroot(zookeeper_hosts, "acls")


@pytest.fixture
def catalog(connect: str) -> Iterator[ClusterCatalog]:
    cat = ClusterCatalog(connect)
    cat.start()
    try:
        yield cat
    finally:
        cat.stop()


@pytest.fixture
def raw(connect: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=connect, timeout=10)
    client.start(timeout=20)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def session(name: str, host: str = "127.0.0.1") -> Session:
    return Session(client_host=host, principal=KafkaPrincipal.user(name))


def test_literal_acls_are_kafkas_json_at_kafkas_path(catalog: ClusterCatalog,
                                                     raw: KazooClient) -> None:
    store = catalog.acls()
    assert store.add("topic", "orders", principal="User:alice", operation="read")
    assert not store.add("TOPIC", "orders", principal="User:alice", operation="READ")  # again
    store.add(ResourceType.TOPIC, "orders", principal="User:bob", operation=AclOperation.WRITE,
              permission="deny", host="10.0.0.1")
    data, _ = raw.get("/kafka-acl/Topic/orders")
    value = json.loads(data)
    assert value["version"] == 1
    assert sorted(value["acls"], key=lambda a: a["principal"]) == [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
         "host": "*"},
        {"principal": "User:bob", "permissionType": "Deny", "operation": "Write",
         "host": "10.0.0.1"}]
    changes = sorted(raw.get_children("/kafka-acl-changes"))
    assert len(changes) == 2 and all(c.startswith("acl_changes_") for c in changes)
    assert raw.get(f"/kafka-acl-changes/{changes[0]}")[0] == b"TOPIC:orders"


def test_prefixed_acls_and_extended_notifications(catalog: ClusterCatalog,
                                                  raw: KazooClient) -> None:
    store = catalog.acls()
    store.add("transactional_id", "app-", principal="User:alice", operation="write",
              pattern_type="prefixed")
    data, _ = raw.get("/kafka-acl-extended/prefixed/TransactionalId/app-")
    assert json.loads(data)["acls"][0]["operation"] == "Write"
    (change,) = raw.get_children("/kafka-acl-extended-changes")
    assert json.loads(raw.get(f"/kafka-acl-extended-changes/{change}")[0]) == {
        "version": 1, "resourceType": "TRANSACTIONAL_ID", "name": "app-",
        "patternType": "PREFIXED"}


def test_removing_the_last_acl_deletes_the_znode(catalog: ClusterCatalog,
                                                 raw: KazooClient) -> None:
    store = catalog.acls()
    store.add("group", "g1", principal="User:alice", operation="read")
    assert store.remove("group", "g1", principal="User:alice", operation="read")
    assert not store.remove("group", "g1", principal="User:alice", operation="read")
    assert raw.exists("/kafka-acl/Group/g1") is None
    assert store.load_all() == {}


def test_reads_what_kafka_wrote(catalog: ClusterCatalog, raw: KazooClient) -> None:
    """ACLs written by Kafka's own tools (its JSON, its resource type names) are read."""
    raw.create("/kafka-acl/Cluster/kafka-cluster", json.dumps({"version": 1, "acls": [
        {"host": "*", "permissionType": "Allow", "operation": "ClusterAction",
         "principal": "User:broker"},
        {"host": "*", "permissionType": "Allow", "operation": "Bogus",
         "principal": "User:x"}]}).encode(), makepath=True)
    raw.create("/kafka-acl/Frobnicator/x", b'{"version":1,"acls":[]}', makepath=True)
    assert catalog.acls().bindings() == [
        (StoredResource("Cluster", "kafka-cluster"),
         StoredAcl("User:broker", "*", "ClusterAction", "Allow"))]


def test_bad_names_are_refused(catalog: ClusterCatalog) -> None:
    store = catalog.acls()
    for kwargs in ({"principal": "alice", "operation": "read"},
                   {"principal": "User:alice", "operation": "frobnicate"},
                   {"principal": "User:alice", "operation": "read", "permission": "maybe"},
                   {"principal": "User:alice", "operation": "read", "pattern_type": "match"}):
        with pytest.raises(InvalidRequestError):
            store.add("topic", "t", **kwargs)
    with pytest.raises(InvalidRequestError):
        store.add("topic", "a/b", principal="User:alice", operation="read")
    with pytest.raises(InvalidRequestError):
        store.add("broker", "t", principal="User:alice", operation="read")


def test_change_notifications_round_trip() -> None:
    for res in (StoredResource("Topic", "a:b"), StoredResource("TransactionalId", "x"),
                StoredResource("Group", "g-", "PREFIXED")):
        extended = res.pattern_type != "LITERAL"
        assert decode_change(encode_change(res), extended=extended) == res
    assert decode_change(b"Topic:legacy", extended=False) == StoredResource("Topic", "legacy")
    assert decode_change(b"garbage", extended=False) is None
    assert decode_change(b"{", extended=True) is None


def test_old_notifications_are_purged(catalog: ClusterCatalog, raw: KazooClient) -> None:
    store = catalog.acls()
    store.add("topic", "t", principal="User:a", operation="read")
    assert store.purge_changes() == 0
    later = time.time() * 1000 + CHANGE_EXPIRATION_MS + 1000
    assert store.purge_changes(now_ms=later) == 1
    assert raw.get_children("/kafka-acl-changes") == []


def test_concurrent_writers_lose_nothing(catalog: ClusterCatalog, connect: str) -> None:
    """Version-conditioned updates: two stores adding to the same resource at once keep
    every ACL."""
    other = ClusterCatalog(connect)
    other.start()
    try:
        stores = [catalog.acls(), other.acls()]

        async def add_all() -> None:
            await asyncio.gather(*(
                asyncio.to_thread(stores[i % 2].add, "topic", "shared",
                                  principal=f"User:u{i}", operation="read")
                for i in range(20)))

        asyncio.run(add_all())
    finally:
        other.stop()
    acls = catalog.acls().get(StoredResource("Topic", "shared")).acls
    assert {a.principal for a in acls} == {f"User:u{i}" for i in range(20)}


def test_a_broker_cache_follows_changes_within_moments(connect: str) -> None:
    async def scenario() -> None:
        writer = ClusterCatalog(connect)
        writer.start()
        store: AclStore = writer.acls()
        store.add("topic", "before", principal="User:alice", operation="read")
        zk = ZkSession(ClusterCatalog(connect), broker_id=1, stopped=lambda: False)
        await zk.start()
        authorizer = AclAuthorizer()
        sync = AclSync(zk, authorizer, stopping=lambda: False)
        await sync.start()
        task = asyncio.create_task(sync.run())
        try:
            alice = session("alice")
            assert authorizer.authorize(alice, AclOperation.READ, ResourceType.TOPIC, "before")
            assert not authorizer.authorize(alice, AclOperation.READ, ResourceType.TOPIC, "t2")
            started = time.monotonic()
            await asyncio.to_thread(store.add, "topic", "t2", principal="User:alice",
                                    operation="read")
            await wait_until_async(lambda: authorizer.authorize(
                alice, AclOperation.READ, ResourceType.TOPIC, "t2"), 5, "alice may read t2")
            assert time.monotonic() - started < 5.0  # milliseconds when idle; CI under load
            await asyncio.to_thread(store.add, "topic", "t", principal="User:alice",
                                    operation="all", permission="deny", pattern_type="prefixed")
            await wait_until_async(lambda: not authorizer.authorize(
                alice, AclOperation.READ, ResourceType.TOPIC, "t2"), 5, "the prefixed deny")
            await asyncio.to_thread(store.remove, "topic", "t", principal="User:alice",
                                    operation="all", permission="deny", pattern_type="prefixed")
            await asyncio.to_thread(store.remove, "topic", "before", principal="User:alice",
                                    operation="read")
            await wait_until_async(lambda: authorizer.authorize(
                alice, AclOperation.READ, ResourceType.TOPIC, "t2") and not authorizer.authorize(
                alice, AclOperation.READ, ResourceType.TOPIC, "before"), 5, "both removals")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await zk.close()
            writer.stop()

    asyncio.run(scenario())


def test_a_broker_cache_reloads_everything_after_its_session_expired(connect: str) -> None:
    """A change whose notification the broker never saw (purged while it was away, or written
    without one) is invisible to the notification path; once the broker's ZooKeeper session
    expires and it connects again, it loads every ACL again (a broker must not keep serving
    stale ACLs forever)."""
    async def scenario() -> None:
        writer = ClusterCatalog(connect)
        writer.start()
        store: AclStore = writer.acls()
        zk = ZkSession(ClusterCatalog(connect, session_timeout=4.0), broker_id=1,
                       stopped=lambda: False)
        await zk.start()
        authorizer = AclAuthorizer()
        sync = AclSync(zk, authorizer, stopping=lambda: False)
        await sync.start()
        task = asyncio.create_task(sync.run())
        alice = session("alice")

        def may_read(topic: str) -> bool:
            return authorizer.authorize(alice, AclOperation.READ, ResourceType.TOPIC, topic)

        try:
            # "unseen": stored without a change notification
            unseen = StoredResource("Topic", "unseen")
            entry = StoredAcl("User:alice", "*", "Read", "Allow")
            await asyncio.to_thread(writer.zk.create, unseen.path, encode_acls([entry]),
                                    makepath=True)
            assert decode_acls(writer.zk.get(unseen.path)[0]) == {entry}
            # a later, notified change is processed; "unseen" stays unseen (no gap shows it)
            await asyncio.to_thread(store.add, "topic", "seen", principal="User:alice",
                                    operation="read")
            await wait_until_async(lambda: may_read("seen"), 30, "alice may read 'seen'")
            assert not may_read("unseen")
            reloads = sync.reloads

            old = zk.catalog.zk.client_id
            killer = KazooClient(hosts=connect, client_id=old, timeout=4.0)
            await asyncio.to_thread(killer.start, 20)
            await asyncio.to_thread(killer.stop)
            killer.close()
            await wait_until_async(lambda: may_read("unseen"), 60,
                                   "the cache loaded again after a new session")
            assert zk.catalog.zk.client_id[0] != old[0]
            assert sync.reloads > reloads
            # and the new session's watch follows changes again
            await asyncio.to_thread(store.add, "topic", "after", principal="User:alice",
                                    operation="read")
            await wait_until_async(lambda: may_read("after"), 30, "a change after the expiry")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await zk.close()
            writer.stop()

    asyncio.run(scenario())


def test_a_slow_notification_read_never_overwrites_a_newer_write(connect: str) -> None:
    """The notification path reads a resource's ACLs, and before it applies them this
    broker's own CreateAcls writes and applies a newer set: the older read must not win
    (both hold ``AclAuthorizer.updates`` from ZooKeeper to the cache, as Kafka's lock)."""
    async def scenario() -> None:
        writer = ClusterCatalog(connect)
        writer.start()
        store: AclStore = writer.acls()
        zk = ZkSession(ClusterCatalog(connect), broker_id=1, stopped=lambda: False)
        await zk.start()
        authorizer = AclAuthorizer()
        sync = AclSync(zk, authorizer, stopping=lambda: False)
        await sync.start()
        res = StoredResource("Topic", "raced")
        read_done, gate = asyncio.Event(), asyncio.Event()
        real_call = zk.call

        async def gated_call(func: Any, *args: Any) -> Any:
            result = await real_call(func, *args)
            if getattr(func, "__name__", "") == "get":  # the notification path's read
                read_done.set()
                await gate.wait()
            return result

        async def create_acls_like_a_handler() -> None:
            async with authorizer.updates:
                _, written = await asyncio.to_thread(
                    store.update, res, lambda acls: acls | {StoredAcl(
                        "User:alice", "*", "Delete", "Allow")})
                sync.apply_stored(res, written)

        try:
            await asyncio.to_thread(store.add, "topic", "raced", principal="User:alice",
                                    operation="read")
            zk.call = gated_call  # type: ignore[method-assign]
            reader = asyncio.create_task(sync.process_changes())
            await asyncio.wait_for(read_done.wait(), 30)
            handler = asyncio.create_task(create_acls_like_a_handler())
            await asyncio.sleep(0.3)  # the handler's chance to overtake the read
            gate.set()
            await asyncio.wait_for(asyncio.gather(reader, handler), 30)
            alice = session("alice")
            assert authorizer.authorize(alice, AclOperation.DELETE, ResourceType.TOPIC, "raced")
        finally:
            gate.set()
            zk.call = real_call  # type: ignore[method-assign]
            await zk.close()
            writer.stop()

    asyncio.run(scenario())
