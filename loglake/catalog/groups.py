"""Consumer-group state in ZooKeeper: committed offsets, group metadata, coordinator claims.

Layout under the cluster chroot::

    /consumers/<group>/offsets/<topic>/<partition>        the committed offset as a plain
                                                           decimal, e.g. ``12`` (Kafka's classic
                                                           form: tools built for Kafka's
                                                           ZooKeeper offsets, such as Burrow,
                                                           read it)
    /consumers/<group>/offsets_meta/<topic>/<partition>   {"offset","leader_epoch","metadata",
                                                           "commit_time_ms"}: what Kafka's form
                                                           has no room for; ``offset`` repeats
                                                           the offset it describes
    /consumers/<group>/state                               group metadata (generation, protocol,
                                                           leader, members with assignments)
    /consumers/<group>/owner                               ephemeral: the coordinating broker's id
    /loglake/txn_offsets/<producer_id>/<group>             pending TxnOffsetCommit offsets of a
                                                           producer's open transaction:
                                                           {"version":1,"producer_epoch",
                                                           "offsets":[{"topic","partition",
                                                           "offset","leader_epoch","metadata",
                                                           "commit_time_ms","order"}]}

Transactional offsets (broker/groups/txn_offsets.py has the rules): a TxnOffsetCommit writes the
producer's pending znode for the group (version-checked read-modify-write); indexing by producer
id lets the coordinator that receives the transaction's marker find them without having loaded
the group. ``order`` is the zxid of the write that last set that partition's entry (``null``:
the znode's own mzxid, i.e. the write that stored it). A commit marker turns them into committed
offsets in one multi-op transaction: per partition whose committed offset is older (its order:
the metadata's ``order`` field, present only on offsets a transaction committed, while that
metadata describes the offset znode and is not older than it; otherwise the offset znode's
mzxid) the offset and metadata znodes, conditioned on the offset znode's version read, and the
pending znode's deletion at its version read; a lost race re-reads and decides again. An abort
deletes the pending znode. The empty ``<producer_id>`` parent is removed afterwards (a
concurrent writer that finds it gone retries).

Writes: an OffsetCommit request becomes exactly one ZooKeeper multi-op transaction that sets
both znodes of every partition (all of its partitions or none), so a crash never separates an
offset from its metadata. What can still disagree, and how readers take it
(:func:`committed_offset`): the offset znode is the truth; its metadata counts only while the
metadata's ``offset`` equals it. An offset without (matching) metadata -- written by a Kafka
tool, or left by an OffsetDelete that crashed between its two deletes (offset first, then
metadata) -- reads with leader epoch -1, empty metadata and the znode's modification time as
commit time; metadata without an offset znode is ignored and overwritten by the next commit.

Migration: loglake once wrote the JSON document into the offset znode itself. Readers still
accept that form; :meth:`GroupStore.migrate_offsets` (run by every broker at start-up) rewrites
each such znode into the plain offset plus its metadata znode, in one transaction conditioned
on the znode version it read: idempotent (plain znodes are skipped), and safe while several
brokers migrate or coordinators commit at once (a lost race re-reads and finds the new form).

The ``state`` znode is written with version checks, so a coordinator that lost the group
(another broker claimed it) cannot overwrite newer metadata. ``owner`` is ephemeral: it
disappears with the coordinator's session, letting the next coordinator claim it.

Thread-safety: kazoo is thread-safe and this class keeps no other state; call it from worker
threads, never from the event loop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.protocol.states import ZnodeStat

from loglake.catalog.claims import claim_ephemeral
from loglake.errors import LoglakeError

log = logging.getLogger(__name__)

CONSUMERS = "/consumers"
OFFSETS = "offsets"
OFFSETS_META = "offsets_meta"
MIGRATION_ATTEMPTS = 3
"""Reads of one znode before the migration leaves it to the next start-up (it loses a race
only to a writer that already wrote the new form, so a second read nearly always ends it)."""

_PLAIN_OFFSET = re.compile(rb"\s*-?\d+\s*")

TopicPartitionKey = tuple[str, int]


class StaleGroupError(LoglakeError):
    """The group's metadata changed under us: another coordinator owns the group now."""


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_time_ms: int
    order: int = field(default=-1, compare=False)
    """Position among the group's offset writes (a ZooKeeper zxid) when it matters: the
    TxnOffsetCommit write of a transactional offset (see the module docstring); -1 otherwise."""

    def offset_value(self) -> bytes:
        """The offset znode's value: the plain decimal, as Kafka wrote it."""
        return str(self.offset).encode()

    def to_json(self) -> bytes:
        """The metadata znode's value."""
        data: dict[str, Any] = {"offset": self.offset, "leader_epoch": self.leader_epoch,
                                "metadata": self.metadata, "commit_time_ms": self.commit_time_ms}
        if self.order >= 0:
            data["order"] = self.order
        return json.dumps(data).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> CommittedOffset:
        data = json.loads(raw)
        return cls(int(data["offset"]), int(data.get("leader_epoch", -1)),
                   str(data.get("metadata") or ""), int(data.get("commit_time_ms", 0)),
                   order=int(data.get("order", -1)))


def is_plain_offset(raw: bytes) -> bool:
    """Whether an offset znode holds Kafka's plain decimal form."""
    return _PLAIN_OFFSET.fullmatch(raw) is not None


def committed_offset(raw: bytes, modified_ms: int, meta: bytes | None) -> CommittedOffset:
    """One partition's committed offset from its offset znode (``raw``, last modified at
    ``modified_ms``) and its metadata znode (``meta``, None if absent); see the module
    docstring for the rules. Accepts the old JSON form in the offset znode. Raises ValueError
    for a value that is neither form."""
    if not is_plain_offset(raw):
        try:
            return CommittedOffset.from_json(raw)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ValueError(f"not an offset: {raw[:80]!r}") from None
    offset = int(raw)
    if meta is not None:
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
            described = CommittedOffset.from_json(meta)
            if described.offset == offset:
                return described
    return CommittedOffset(offset, -1, "", modified_ms)


def _znode_safe(char: str) -> bool:
    """ZooKeeper refuses these in node names (besides ``/``): control and surrogate/private-use
    ranges; ``%`` is ours, the escape character."""
    code = ord(char)
    return not (code <= 0x1F or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xF8FF
                or code >= 0xFFF0 or char in "/%")


def group_node(group_id: str) -> str:
    """The znode name of a group: the id itself (Kafka's layout) when ZooKeeper accepts it,
    else the id with each unusable character percent-encoded as UTF-8 bytes (``/`` → ``%2F``,
    ``%`` → ``%25``, ``.``/``..`` → ``%2E``…); the empty id is ``%``. Reversible by
    :func:`group_id_of`."""
    if group_id == "":
        return "%"
    if group_id in (".", ".."):
        return "".join(f"%{byte:02X}" for byte in group_id.encode())
    if all(_znode_safe(c) for c in group_id):
        return group_id
    return "".join(c if _znode_safe(c) else "".join(f"%{b:02X}" for b in c.encode("utf-8",
                                                                                 "surrogatepass"))
                   for c in group_id)


def group_id_of(node: str) -> str:
    """The group id a znode name stands for (inverse of :func:`group_node`)."""
    if node == "%":
        return ""
    if "%" not in node:
        return node
    try:
        return urllib.parse.unquote_to_bytes(node).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return node


def _group(group_id: str) -> str:
    return f"{CONSUMERS}/{group_node(group_id)}"


def offset_path(group_id: str, topic: str, partition: int) -> str:
    """The znode holding ``group_id``'s committed offset of ``topic``-``partition``."""
    return f"{_group(group_id)}/{OFFSETS}/{topic}/{partition}"


def meta_path(group_id: str, topic: str, partition: int) -> str:
    """The znode holding the metadata of that committed offset."""
    return f"{_group(group_id)}/{OFFSETS_META}/{topic}/{partition}"


TXN_OFFSETS = "/loglake/txn_offsets"


@dataclass(frozen=True)
class PendingTxnOffsets:
    """One producer's pending TxnOffsetCommit offsets for one group: what
    ``/loglake/txn_offsets/<producer_id>/<group>`` holds. Each offset carries its ``order``
    (the zxid of the write that last set that partition; -1: set by the write that stores this
    value); ``version`` is the znode's version when read (-1: not written yet)."""

    producer_id: int
    producer_epoch: int
    offsets: Mapping[TopicPartitionKey, CommittedOffset]
    version: int = -1

    def to_json(self) -> bytes:
        """The znode's value; an order of -1 is stored as ``null``, which readers resolve to
        the znode's mzxid (the write that stored it)."""
        return json.dumps({
            "version": 1, "producer_epoch": self.producer_epoch,
            "offsets": [{"topic": topic, "partition": partition, "offset": o.offset,
                         "leader_epoch": o.leader_epoch, "metadata": o.metadata,
                         "commit_time_ms": o.commit_time_ms,
                         "order": o.order if o.order >= 0 else None}
                        for (topic, partition), o in sorted(self.offsets.items())],
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, producer_id: int, raw: bytes, mzxid: int,
                  version: int) -> PendingTxnOffsets:
        data = json.loads(raw)
        offsets = {}
        for entry in data.get("offsets", []):
            order = entry.get("order")
            offsets[(str(entry["topic"]), int(entry["partition"]))] = CommittedOffset(
                int(entry["offset"]), int(entry.get("leader_epoch", -1)),
                str(entry.get("metadata") or ""), int(entry.get("commit_time_ms", 0)),
                order=mzxid if order is None else int(order))
        return cls(producer_id, int(data["producer_epoch"]), offsets, version)


@dataclass(frozen=True)
class CommittedOrder:
    """Where a partition's committed offset stands among the group's offset writes: ``order``
    (a zxid; -1: nothing committed) and the offset znode's ``version`` (-1: absent), the
    condition a transaction's completion writes under."""

    order: int
    version: int


def txn_offsets_path(producer_id: int, group_id: str | None = None) -> str:
    """The producer's pending-offsets znode of ``group_id`` (its parent for None)."""
    base = f"{TXN_OFFSETS}/{producer_id}"
    return base if group_id is None else f"{base}/{group_node(group_id)}"


class GroupStore:
    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk

    def group_ids(self) -> list[str]:
        try:
            return sorted(group_id_of(node) for node in self.zk.get_children(CONSUMERS))
        except NoNodeError:
            return []

    # ---- coordinator ownership
    def claim(self, group_id: str, broker_id: int) -> bool:
        """Become the group's coordinator unless another live session holds it."""
        self.zk.ensure_path(_group(group_id))
        return claim_ephemeral(self.zk, f"{_group(group_id)}/owner", str(broker_id).encode())

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
    def commit(self, group_id: str, offsets: Mapping[TopicPartitionKey, CommittedOffset]) -> None:
        """Write all ``offsets`` in one transaction: per partition the plain offset and its
        metadata znode (each created or updated)."""
        topics = sorted({t for t, _ in offsets})
        for attempt in range(3):
            existing: dict[str, set[str]] = {}
            for topic in topics:
                for kind in (OFFSETS, OFFSETS_META):
                    base = f"{_group(group_id)}/{kind}/{topic}"
                    self.zk.ensure_path(base)
                    existing[base] = set(self.zk.get_children(base))
            tx = self.zk.transaction()
            for (topic, partition), committed in offsets.items():
                for path, value in ((offset_path(group_id, topic, partition),
                                     committed.offset_value()),
                                    (meta_path(group_id, topic, partition),
                                     committed.to_json())):
                    base, _, child = path.rpartition("/")
                    if child in existing[base]:
                        tx.set_data(path, value)
                    else:
                        tx.create(path, value)
            results = tx.commit()
            failures = [r for r in results if isinstance(r, Exception)]
            if not failures:
                return
            if attempt == 2 or not any(isinstance(r, (NodeExistsError, NoNodeError))
                                       for r in failures):
                raise failures[0]

    def fetch(self, group_id: str) -> dict[TopicPartitionKey, CommittedOffset]:
        """Every committed offset of ``group_id`` (reads pipelined: one round trip per
        level, not per znode). Unreadable values are skipped with a warning."""
        base = f"{_group(group_id)}/{OFFSETS}"
        try:
            topics = self.zk.get_children(base)
        except NoNodeError:
            return {}
        listings = {topic: self.zk.get_children_async(f"{base}/{topic}") for topic in topics}
        keys: list[TopicPartitionKey] = []
        for topic, listing in listings.items():
            with contextlib.suppress(NoNodeError):
                keys += [(topic, int(p)) for p in listing.get() if p.isdigit()]
        reads = {key: (self.zk.get_async(offset_path(group_id, *key)),
                       self.zk.get_async(meta_path(group_id, *key))) for key in keys}
        result = {}
        for key, (offset_read, meta_read) in reads.items():
            try:
                raw, stat = offset_read.get()
            except NoNodeError:
                continue
            try:
                meta: bytes | None = meta_read.get()[0]
            except NoNodeError:
                meta = None
            try:
                result[key] = committed_offset(raw, _mtime(stat), meta)
            except ValueError as exc:
                log.warning("group %s, %s-%d: ignoring the committed offset: %s", group_id,
                            key[0], key[1], exc)
        return result

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartitionKey]) -> None:
        """Delete committed offsets: the offset znode first, then its metadata (a crash in
        between leaves metadata without an offset, which readers ignore)."""
        for topic, partition in partitions:
            for path in (offset_path(group_id, topic, partition),
                         meta_path(group_id, topic, partition)):
                with contextlib.suppress(NoNodeError):
                    self.zk.delete(path)

    def delete_group(self, group_id: str) -> None:
        """Remove offsets and metadata; keeps our ``owner`` claim until we release it."""
        for child in (OFFSETS, OFFSETS_META, "state"):
            with contextlib.suppress(NoNodeError):
                self.zk.delete(f"{_group(group_id)}/{child}", recursive=True)

    # ---- pending transactional offsets
    def read_pending(self, producer_id: int, group_id: str) -> PendingTxnOffsets | None:
        """The producer's pending offsets for the group, orders resolved; None if none."""
        try:
            raw, stat = self.zk.get(txn_offsets_path(producer_id, group_id))
        except NoNodeError:
            return None
        return PendingTxnOffsets.from_json(producer_id, raw, int(stat.mzxid), int(stat.version))

    def write_pending(self, group_id: str, pending: PendingTxnOffsets) -> bool:
        """Store ``pending`` iff the znode is still at ``pending.version`` (-1: absent);
        False when it changed meanwhile (read again and retry)."""
        path = txn_offsets_path(pending.producer_id, group_id)
        try:
            if pending.version < 0:
                self.zk.ensure_path(txn_offsets_path(pending.producer_id))
                self.zk.create(path, pending.to_json())
            else:
                self.zk.set(path, pending.to_json(), version=pending.version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            return False
        return True

    def pending_groups(self, producer_id: int) -> list[str]:
        """The groups that hold pending offsets of ``producer_id``."""
        try:
            return sorted(group_id_of(n) for n in self.zk.get_children(
                txn_offsets_path(producer_id)))
        except NoNodeError:
            return []

    def pending_of_group(self, group_id: str) -> dict[int, PendingTxnOffsets]:
        """Every producer's pending offsets for ``group_id`` (one listing of the producers
        with pending offsets, then pipelined reads: the index is by producer, and only
        producers inside a transaction have an entry)."""
        try:
            producers = [int(p) for p in self.zk.get_children(TXN_OFFSETS) if p.isdigit()]
        except NoNodeError:
            return {}
        reads = {pid: self.zk.get_async(txn_offsets_path(pid, group_id)) for pid in producers}
        result = {}
        for pid, read in reads.items():
            try:
                raw, stat = read.get()
            except NoNodeError:
                continue
            try:
                result[pid] = PendingTxnOffsets.from_json(pid, raw, int(stat.mzxid),
                                                          int(stat.version))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("group %s: ignoring unreadable pending offsets of producer %d: %s",
                            group_id, pid, exc)
        return result

    def committed_orders(self, group_id: str,
                         keys: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey,
                                                                    CommittedOrder]:
        """For each partition, the order of its committed offset: the ``order`` its metadata
        records (an offset a transaction committed) while that metadata still describes the
        offset znode and is not older than it, else the offset znode's mzxid."""
        reads = {key: (self.zk.get_async(offset_path(group_id, *key)),
                       self.zk.get_async(meta_path(group_id, *key))) for key in keys}
        result = {}
        for key, (offset_read, meta_read) in reads.items():
            try:
                raw, stat = offset_read.get()
            except NoNodeError:
                with contextlib.suppress(NoNodeError):
                    meta_read.get()
                result[key] = CommittedOrder(-1, -1)
                continue
            order = int(stat.mzxid)
            with contextlib.suppress(NoNodeError, ValueError, KeyError, TypeError,
                                     AttributeError):
                meta_raw, meta_stat = meta_read.get()
                described = CommittedOffset.from_json(meta_raw)
                if (described.order >= 0 and int(meta_stat.mzxid) >= order
                        and is_plain_offset(raw) and described.offset == int(raw)):
                    order = described.order
            result[key] = CommittedOrder(order, int(stat.version))
        return result

    def finish_pending(self, producer_id: int, group_id: str, pending_version: int,
                       apply: Mapping[TopicPartitionKey, tuple[CommittedOffset, int]]) -> bool:
        """End a transaction's pending offsets for the group in one ZooKeeper transaction:
        each ``apply`` entry (offset, offset-znode version it was decided against, -1: absent)
        becomes the committed offset, and the pending znode (at ``pending_version``) is
        deleted. False when any condition failed (something changed: decide again)."""
        for topic in sorted({t for t, _ in apply}):
            for kind in (OFFSETS, OFFSETS_META):
                self.zk.ensure_path(f"{_group(group_id)}/{kind}/{topic}")
        metas = {key: self.zk.exists_async(meta_path(group_id, *key)) for key in apply}
        tx = self.zk.transaction()
        for key, (committed, version) in apply.items():
            path = offset_path(group_id, *key)
            if version < 0:
                tx.create(path, committed.offset_value())
            else:
                tx.set_data(path, committed.offset_value(), version=version)
            if metas[key].get() is None:
                tx.create(meta_path(group_id, *key), committed.to_json())
            else:
                tx.set_data(meta_path(group_id, *key), committed.to_json())
        tx.delete(txn_offsets_path(producer_id, group_id), version=pending_version)
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            return False
        with contextlib.suppress(NoNodeError, NotEmptyError):
            self.zk.delete(txn_offsets_path(producer_id))
        return True

    def delete_pending_of_group(self, group_id: str) -> int:
        """Drop every producer's pending offsets for ``group_id`` (DeleteGroups); returns how
        many producers had some."""
        dropped = 0
        for producer_id in self.pending_of_group(group_id):
            with contextlib.suppress(NoNodeError):
                self.zk.delete(txn_offsets_path(producer_id, group_id))
                dropped += 1
            with contextlib.suppress(NoNodeError, NotEmptyError):
                self.zk.delete(txn_offsets_path(producer_id))
        return dropped

    # ---- migration
    def migrate_offsets(self) -> int:
        """Rewrite every offset znode still in loglake's old JSON form into the plain offset
        plus its metadata znode (see the module docstring); returns how many were rewritten.
        Idempotent and safe to run from several brokers at once."""
        migrated = 0
        for group_id in self.group_ids():
            base = f"{_group(group_id)}/{OFFSETS}"
            try:
                topics = self.zk.get_children(base)
            except NoNodeError:
                continue
            for topic in topics:
                try:
                    partitions = self.zk.get_children(f"{base}/{topic}")
                except NoNodeError:
                    continue
                for partition in partitions:
                    if partition.isdigit() and self._migrate_one(group_id, topic,
                                                                 int(partition)):
                        migrated += 1
        return migrated

    def _migrate_one(self, group_id: str, topic: str, partition: int) -> bool:
        path = offset_path(group_id, topic, partition)
        meta = meta_path(group_id, topic, partition)
        for _ in range(MIGRATION_ATTEMPTS):
            try:
                raw, stat = self.zk.get(path)
            except NoNodeError:
                return False
            if is_plain_offset(raw):
                return False
            try:
                committed = CommittedOffset.from_json(raw)
            except (ValueError, KeyError, TypeError, AttributeError):
                log.warning("%s holds neither a plain offset nor loglake's old JSON form; "
                            "left as it is: %r", path, raw[:80])
                return False
            self.zk.ensure_path(meta.rpartition("/")[0])
            tx = self.zk.transaction()
            tx.set_data(path, committed.offset_value(), version=stat.version)
            if self.zk.exists(meta) is None:
                tx.create(meta, committed.to_json())
            else:
                tx.set_data(meta, committed.to_json())
            results = tx.commit()
            if not any(isinstance(r, Exception) for r in results):
                return True
            # BadVersion: a coordinator or another broker wrote meanwhile; NodeExists /
            # NoNode: the metadata znode came or went. Read again.
        log.warning("%s changed on every attempt to migrate it; the next start-up tries again",
                    path)
        return False


def _mtime(stat: ZnodeStat) -> int:
    return int(stat.mtime)
