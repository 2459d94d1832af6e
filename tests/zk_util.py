"""ZooKeeper helpers for tests that talk to the session's ZooKeeper directly."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from kazoo.client import KazooClient

from loglake.broker.security.scram_credentials import store_user_credential
from loglake.catalog.entity_configs import EntityConfigStore


def fresh_chroot(hosts: str, prefix: str) -> str:
    """``hosts`` (no chroot) under a new, empty ``/<prefix>-<random>`` chroot, created here:
    each test gets a tree of its own on the shared ZooKeeper."""
    chroot = f"/{prefix}-{uuid.uuid4().hex[:12]}"
    root = KazooClient(hosts=hosts, timeout=10)
    root.start(timeout=20)
    try:
        root.ensure_path(chroot)
    finally:
        root.stop()
        root.close()
    return hosts + chroot


def kazoo_client(hosts: str, user: str | None = None, password: str | None = None
                 ) -> KazooClient:
    """A started kazoo client on ``hosts`` (a chroot allowed), logged in as ``user`` with
    SASL DIGEST-MD5 when given, else anonymous; the caller stops and closes it."""
    options = ({"mechanism": "DIGEST-MD5", "username": user, "password": password}
               if user is not None else None)
    client = KazooClient(hosts=hosts, timeout=10, sasl_options=options,
                         connection_retry={"max_tries": 3, "delay": 0.2})
    client.start(timeout=15)
    return client


def store_scram_users(zookeeper_connect: str, users: Mapping[str, str],
                      mechanisms: Iterable[str] = ("SCRAM-SHA-256",)) -> None:
    """Store each of ``users`` (name -> password) as a SCRAM user of the cluster at
    ``zookeeper_connect`` for each of ``mechanisms`` (as kafka-configs --zookeeper does)."""
    client = KazooClient(hosts=zookeeper_connect, timeout=10)
    client.start(timeout=20)
    try:
        store = EntityConfigStore(client)
        for user, password in users.items():
            for mechanism in mechanisms:
                store_user_credential(store, user, mechanism, password)
    finally:
        client.stop()
        client.close()


def registered_brokers(zookeeper_connect: str) -> set[int]:
    """The broker ids registered in ``/brokers/ids`` of the cluster at ``zookeeper_connect``
    (each an ephemeral znode of the broker's ZooKeeper session), read now."""
    client = kazoo_client(zookeeper_connect)
    try:
        return {int(child) for child in client.get_children("/brokers/ids")}
    finally:
        client.stop()
        client.close()
