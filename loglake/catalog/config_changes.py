"""Entity config change notifications (``/config/changes``) and full loads of the user and
client-id entity configs, for brokers that keep entity configs cached (client quotas).

Layout (Kafka's ``ConfigEntityChangeNotificationZNode``; written by
catalog/entity_configs.py's ``EntityConfigStore.alter``)::

    /config/changes/config_change_<10-digit seq>   {"version": 2, "entity_path": "users/alice"}

A version-1 notification (Kafka before 0.10.1) is ``{"version": 1, "entity_type": "users",
"entity_name": "alice"}``; both are read. A reader remembers the highest sequence it processed
and re-reads the entity each newer notification names (:meth:`ConfigChanges.changes_after`);
notifications older than 15 minutes are removed by any broker (:meth:`purge`, Kafka's
``ZkNodeChangeNotificationListener``), so a reader that falls behind by more than that
reloads everything (a gap in the sequence).

Errors: kazoo's connection errors become the catalog's typed errors. Thread-safety: stateless
beyond kazoo; blocking, so brokers call it on the ZooKeeper executor, never on the event loop.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from loglake.catalog.change_notifications import purge, sequences
from loglake.catalog.entity_configs import (
    CHANGE_PREFIX,
    CHANGES,
    CLIENTS,
    IPS,
    USERS,
    EntityConfigStore,
)
from loglake.catalog.zookeeper import _typed_errors

"""Kafka's ``changeExpirationMs`` for config change notifications."""
ENTITY_TYPES = (USERS, CLIENTS, f"{USERS}/{CLIENTS}", IPS)


@dataclass(frozen=True)
class ConfigChange:
    """One notification: its sequence number and the entity path it names (None: removed
    before it was read, or unreadable)."""

    sequence: int
    entity_path: str | None


def decode_change(raw: bytes) -> str | None:
    """The entity path of a notification's JSON (version 1 or 2); None when it names none."""
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    if value.get("version") == 1:
        entity_type, name = value.get("entity_type"), value.get("entity_name")
        return f"{entity_type}/{name}" if entity_type and name else None
    path = value.get("entity_path")
    return path if isinstance(path, str) and path else None


class ConfigChanges:
    """Reading ``/config/changes`` and loading entity configs (see the module docstring)."""

    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk
        self.entities = EntityConfigStore(zk)

    def watch(self, callback: Callable[[], Any], alive: Callable[[], bool]) -> None:
        """Call ``callback()`` (on kazoo's thread; it must not block) whenever the children of
        ``/config/changes`` change, until ``alive()`` turns false."""
        with _typed_errors("watching config changes"):
            self.zk.ensure_path(CHANGES)

            def on_children(_children: list[str]) -> bool | None:
                if not alive():
                    return False
                callback()
                return None

            self.zk.ChildrenWatch(CHANGES)(on_children)

    def last_sequence(self) -> int:
        """The highest notification sequence number (-1: none)."""
        with _typed_errors("reading config change notifications"):
            return max(self._sequences(), default=-1)

    def changes_after(self, sequence: int) -> list[ConfigChange]:
        """Notifications above ``sequence``, oldest first."""
        out: list[ConfigChange] = []
        with _typed_errors("reading config change notifications"):
            for seq in sorted(s for s in self._sequences() if s > sequence):
                try:
                    raw, _ = self.zk.get(f"{CHANGES}/{CHANGE_PREFIX}{seq:010d}")
                except NoNodeError:
                    out.append(ConfigChange(seq, None))
                    continue
                out.append(ConfigChange(seq, decode_change(raw)))
        return out

    def load_all(self) -> dict[str, dict[str, str]]:
        """Every user, client-id, user/client-id and IP entity's config, by entity path."""
        out: dict[str, dict[str, str]] = {}
        for entity_type in ENTITY_TYPES:
            for path in self.entities.entities(entity_type):
                out[path] = self.entities.get(path)
        return out

    def get(self, path: str) -> dict[str, str]:
        return self.entities.get(path)

    def purge(self, *, now_ms: float | None = None) -> int:
        """Remove notifications older than :data:`CHANGE_EXPIRATION_MS`; several brokers may
        do it at once. Returns how many this call removed."""
        with _typed_errors("removing old config change notifications"):
            return purge(self.zk, CHANGES, CHANGE_PREFIX, now_ms=now_ms)

    def _sequences(self) -> list[int]:
        return sequences(self.zk, CHANGES, CHANGE_PREFIX)
