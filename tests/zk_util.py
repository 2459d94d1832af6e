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
