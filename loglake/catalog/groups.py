"""Consumer-group state in ZooKeeper: committed offsets, group metadata, coordinator claims.

Layout (JSON values) under the cluster chroot::

    /consumers/<group>/offsets/<topic>/<partition>   {"offset","leader_epoch","metadata",
                                                      "commit_time_ms"}
    /consumers/<group>/state                          group metadata (generation, protocol,
                                                      leader, members with assignments)
    /consumers/<group>/owner                          ephemeral: the coordinating broker's id

Invariants: an OffsetCommit request becomes exactly one ZooKeeper multi-op transaction (all of
its partitions or none). The ``state`` znode is written with version checks, so a coordinator
that lost the group (another broker claimed it) cannot overwrite newer metadata. ``owner`` is
ephemeral: it disappears with the coordinator's session, letting the next coordinator claim it.

Thread-safety: kazoo is thread-safe and this class keeps no other state; call it from worker
threads, never from the event loop.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from loglake.errors import LoglakeError

CONSUMERS = "/consumers"


class StaleGroupError(LoglakeError):
    """The group's metadata changed under us: another coordinator owns the group now."""


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_time_ms: int

    def to_json(self) -> bytes:
        return json.dumps({"offset": self.offset, "leader_epoch": self.leader_epoch,
                           "metadata": self.metadata,
                           "commit_time_ms": self.commit_time_ms}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> CommittedOffset:
        data = json.loads(raw)
        return cls(int(data["offset"]), int(data.get("leader_epoch", -1)),
                   str(data.get("metadata") or ""), int(data.get("commit_time_ms", 0)))


def _group(group_id: str) -> str:
    return f"{CONSUMERS}/{group_id}"


class GroupStore:
    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk

    def group_ids(self) -> list[str]:
        try:
            return sorted(self.zk.get_children(CONSUMERS))
        except NoNodeError:
            return []

    # ---- coordinator ownership
    def claim(self, group_id: str, broker_id: int) -> bool:
        """Become the group's coordinator unless another live session holds it."""
        path = f"{_group(group_id)}/owner"
        self.zk.ensure_path(_group(group_id))
        try:
            self.zk.create(path, str(broker_id).encode(), ephemeral=True)
            return True
        except NodeExistsError:
            try:
                _, stat = self.zk.get(path)
            except NoNodeError:
                return self.claim(group_id, broker_id)
            return bool(stat.ephemeralOwner == self.zk.client_id[0])

    def release(self, group_id: str) -> None:
        path = f"{_group(group_id)}/owner"
        with contextlib.suppress(NoNodeError):
            _, stat = self.zk.get(path)
            if stat.ephemeralOwner == self.zk.client_id[0]:
                self.zk.delete(path, version=stat.version)

    # ---- group metadata
    def load_state(self, group_id: str) -> tuple[dict[str, Any], int] | None:
        try:
            raw, stat = self.zk.get(f"{_group(group_id)}/state")
        except NoNodeError:
            return None
        return json.loads(raw), int(stat.version)

    def save_state(self, group_id: str, data: Mapping[str, Any], version: int) -> int:
        """Write the metadata iff it is still at ``version`` (-1: must not exist yet)."""
        path = f"{_group(group_id)}/state"
        value = json.dumps(data, separators=(",", ":")).encode()
        try:
            if version < 0:
                self.zk.create(path, value, makepath=True)
                return 0
            return int(self.zk.set(path, value, version=version).version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            raise StaleGroupError(f"metadata of group {group_id} changed concurrently") from None

    # ---- offsets
    def commit(self, group_id: str, offsets: Mapping[tuple[str, int], CommittedOffset]) -> None:
        """Write all ``offsets`` in one transaction (create or update each znode)."""
        for attempt in range(3):
            existing: dict[str, set[str]] = {}
            for topic in {t for t, _ in offsets}:
                base = f"{_group(group_id)}/offsets/{topic}"
                self.zk.ensure_path(base)
                existing[topic] = set(self.zk.get_children(base))
            tx = self.zk.transaction()
            for (topic, partition), committed in offsets.items():
                path = f"{_group(group_id)}/offsets/{topic}/{partition}"
                if str(partition) in existing[topic]:
                    tx.set_data(path, committed.to_json())
                else:
                    tx.create(path, committed.to_json())
            results = tx.commit()
            failures = [r for r in results if isinstance(r, Exception)]
            if not failures:
                return
            if attempt == 2 or not any(isinstance(r, (NodeExistsError, NoNodeError))
                                       for r in failures):
                raise failures[0]

    def fetch(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        result = {}
        base = f"{_group(group_id)}/offsets"
        try:
            topics = self.zk.get_children(base)
        except NoNodeError:
            return {}
        for topic in topics:
            with contextlib.suppress(NoNodeError):
                for partition in self.zk.get_children(f"{base}/{topic}"):
                    with contextlib.suppress(NoNodeError):
                        raw, _ = self.zk.get(f"{base}/{topic}/{partition}")
                        result[(topic, int(partition))] = CommittedOffset.from_json(raw)
        return result

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        for topic, partition in partitions:
            with contextlib.suppress(NoNodeError):
                self.zk.delete(f"{_group(group_id)}/offsets/{topic}/{partition}")

    def delete_group(self, group_id: str) -> None:
        """Remove offsets and metadata; keeps our ``owner`` claim until we release it."""
        for child in ("offsets", "state"):
            with contextlib.suppress(NoNodeError):
                self.zk.delete(f"{_group(group_id)}/{child}", recursive=True)
