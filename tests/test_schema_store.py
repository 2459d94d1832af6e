"""The ZooKeeper schema store against a real ZooKeeper: ids are shared, unique, never reused."""

from __future__ import annotations

import concurrent.futures
import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from loglake.catalog.schemas import SchemaReference, SchemaStore, VersionTakenError


@pytest.fixture
def zk(zookeeper_hosts: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=f"{zookeeper_hosts}/store-{uuid.uuid4().hex[:8]}")
    client.start(timeout=30)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def test_same_content_same_id_and_ids_survive_a_new_session(zk: KazooClient,
                                                            zookeeper_hosts: str) -> None:
    store = SchemaStore(zk)
    first = store.ensure_id("AVRO", '"string"')
    ref = SchemaReference("com.acme.Other", "other-value", 1)
    second = store.ensure_id("AVRO", '"string"', [ref])
    assert store.ensure_id("AVRO", '"string"') == first
    assert second != first
    assert store.schema(second).references == (ref,)  # type: ignore[union-attr]
    assert store.schema(10_000) is None
    assert store.ids() == sorted([first, second])


def test_racing_registrars_agree_on_one_id(zk: KazooClient) -> None:
    stores = [SchemaStore(zk) for _ in range(4)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        ids = list(pool.map(lambda s: s.ensure_id("JSON", '{"type":"object"}'), stores))
    assert len(set(ids)) == 1
    # ids handed out after the race are new and larger: never reused
    assert stores[0].ensure_id("JSON", '{"type":"string"}') > ids[0]


def test_versions_soft_and_hard_delete(zk: KazooClient) -> None:
    store = SchemaStore(zk)
    schema_id = store.ensure_id("AVRO", '"long"')
    subject = "orders/v1.value"  # a '/' and '.' in a subject name
    store.create_version(subject, 1, schema_id)
    with pytest.raises(VersionTakenError):
        store.create_version(subject, 1, schema_id)
    store.create_version(subject, 2, schema_id)
    store.set_deleted(subject, 1)
    assert [(v.version, v.deleted) for v in store.versions(subject)] == [(1, True), (2, False)]
    assert store.subjects() == [subject]
    store.remove_version(subject, 1)
    store.remove_version(subject, 2)
    assert store.versions(subject) == []
    assert store.schema(schema_id) is not None  # ids outlive their versions


def test_compatibility_and_mode_settings(zk: KazooClient) -> None:
    store = SchemaStore(zk)
    assert store.compatibility() is None
    store.set_compatibility(None, "FULL")
    store.set_compatibility("s", "NONE")
    store.set_mode("s", "READONLY")
    assert (store.compatibility(), store.compatibility("s"), store.mode("s")) == (
        "FULL", "NONE", "READONLY")
    store.set_compatibility("s", None)
    assert store.compatibility("s") is None


def test_imported_ids_are_skipped_by_later_registrations(zk: KazooClient) -> None:
    """IMPORT mode stores content under a given id; ids handed out later step over it, and
    an import naming an id that holds other content is refused."""
    from loglake.catalog.schemas import IdTakenError

    store = SchemaStore(zk)
    first = store.ensure_id("AVRO", '"int"')
    assert store.import_id(first + 1, "AVRO", '"long"') == first + 1
    assert store.import_id(first + 1, "AVRO", '"long"') == first + 1  # the same again: fine
    with pytest.raises(IdTakenError):
        store.import_id(first + 1, "AVRO", '"float"')
    assert store.ensure_id("AVRO", '"long"') == first + 1  # found by its fingerprint
    assert store.ensure_id("AVRO", '"double"') == first + 2  # first + 1 is skipped
    assert store.schema(first + 1).schema == '"long"'  # type: ignore[union-attr]
