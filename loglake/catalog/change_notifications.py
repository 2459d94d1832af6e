"""Kafka's change-notification znodes: persistent sequential children ``<prefix><10 digits>``
of a change path (``/config/changes/config_change_``, ``/kafka-acl-changes/acl_changes_``,
``/kafka-acl-extended-changes/acl_changes_``), each naming what changed; readers remember the
last sequence number they processed, and anyone may remove notifications older than
:data:`CHANGE_EXPIRATION_MS` (Kafka's ``ZkNodeChangeNotificationListener``).

Blocking kazoo calls (thread-safe); callers wrap them in their typed-error context and run them
off the event loop.
"""

from __future__ import annotations

import time

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

CHANGE_EXPIRATION_MS = 15 * 60 * 1000
"""Kafka's ``changeExpirationMs``: notifications older than this may be removed."""


def node_name(path: str, prefix: str, seq: int) -> str:
    """The znode of notification ``seq`` under ``path``."""
    return f"{path}/{prefix}{seq:010d}"


def sequences(zk: KazooClient, path: str, prefix: str) -> list[int]:
    """The sequence numbers of the notifications under ``path``, ascending ([] without it)."""
    try:
        children = zk.get_children(path)
    except NoNodeError:
        return []
    return sorted(int(child[len(prefix):]) for child in children
                  if child.startswith(prefix) and child[len(prefix):].isdigit())


def purge(zk: KazooClient, path: str, prefix: str, *, now_ms: float | None = None) -> int:
    """Remove the notifications under ``path`` older than :data:`CHANGE_EXPIRATION_MS`, oldest
    first, stopping at the first younger one; several processes may purge at once. Returns how
    many this call removed."""
    now_ms = time.time() * 1000 if now_ms is None else now_ms
    removed = 0
    for seq in sequences(zk, path, prefix):
        node = node_name(path, prefix, seq)
        stat = zk.exists(node)
        if stat is None:
            continue
        if now_ms - stat.ctime <= CHANGE_EXPIRATION_MS:
            break  # younger ones follow
        try:
            zk.delete(node)
            removed += 1
        except NoNodeError:
            pass
    return removed
