"""ZooKeeper helpers for tests that talk to the session's ZooKeeper directly."""

from __future__ import annotations

import uuid

from kazoo.client import KazooClient


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
