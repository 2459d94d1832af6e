"""Kafka's ACLs in ZooKeeper, in Kafka's own layout and JSON (``ZkAclStore``, ``AclEntry``,
``ZkAclChangeStore``), so Kafka's tools written for ZooKeeper-mode clusters read them.

Layout under the cluster chroot::

    /kafka-acl/<ResourceType>/<name>                       LITERAL patterns (``*`` included)
    /kafka-acl-extended/prefixed/<ResourceType>/<name>     PREFIXED patterns
        {"version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow",
                                 "operation": "Read", "host": "*"}, ...]}
    /kafka-acl-changes/acl_changes_<seq>                   "TOPIC:orders" (LITERAL changes)
    /kafka-acl-extended-changes/acl_changes_<seq>          {"version": 1, "resourceType":
                                                            "TOPIC", "name": "orders",
                                                            "patternType": "PREFIXED"}

``<ResourceType>`` is Kafka's name (``Topic``, ``Group``, ``Cluster``, ``TransactionalId``,
``DelegationToken``, ``User``); operations and permissions are Kafka's JSON names (``Read``,
``DescribeConfigs``, ``Allow``, ``Deny``). This module speaks that storage form only (plain
strings in :class:`StoredResource` / :class:`StoredAcl`); the broker's ACL model
(``broker/security/acl_model.py``) converts. Values given to :meth:`AclStore.add` may be in any
case and with or without underscores (``read``, ``DESCRIBE_CONFIGS``), or any object with a
``zk_name`` (the model's enums).

Invariants (Kafka's ``AclAuthorizer.updateResourceAcls``): every change of a resource's ACL set
is a read, a change of the set, and a write conditioned on the version read (create if absent,
delete when the set becomes empty), retried on a lost race; each effective change appends one
change notification naming the resource, which every broker watches (:meth:`watch_changes`) to
re-read that resource. Notifications older than :data:`CHANGE_EXPIRATION_MS` are removed by the
readers (Kafka's ``ZkNodeChangeNotificationListener``). A resource name may not contain ``/``.

Errors: kazoo's connection errors become ZooKeeperUnavailableError. Thread-safety: stateless
beyond kazoo (thread-safe); blocking, so brokers call it on the ZooKeeper executor
(``ZkSession.call``), never on the event loop; watch callbacks run on kazoo's threads.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from loglake.catalog.change_notifications import purge, sequences
from loglake.catalog.zookeeper import _typed_errors
from loglake.errors import InvalidRequestError

LITERAL_ROOT = "/kafka-acl"
EXTENDED_ROOT = "/kafka-acl-extended"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
UPDATE_ATTEMPTS = 20
LITERAL = "LITERAL"
PREFIXED = "PREFIXED"

RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId", "DelegationToken", "User")
"""Kafka's resource type names in ZooKeeper paths."""
OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
              "DescribeConfigs", "AlterConfigs", "IdempotentWrite", "CreateTokens",
              "DescribeTokens")
"""Kafka's operation names in the ACL JSON."""
PERMISSIONS = ("Allow", "Deny")


def _key(text: str) -> str:
    return text.replace("_", "").replace("-", "").lower()


_RESOURCE_BY_KEY = {_key(name): name for name in RESOURCE_TYPES}
_OPERATION_BY_KEY = {_key(name): name for name in OPERATIONS}
_PERMISSION_BY_KEY = {_key(name): name for name in PERMISSIONS}


def _canonical(value: Any, table: dict[str, str], what: str) -> str:
    text = getattr(value, "zk_name", value)
    if not isinstance(text, str) or _key(text) not in table:
        raise InvalidRequestError(f"unknown ACL {what} {value!r}: one of "
                                  f"{', '.join(sorted(set(table.values())))}")
    return table[_key(text)]


def resource_type_name(value: Any) -> str:
    """Kafka's ZooKeeper name of a resource type given as ``topic``, ``TRANSACTIONAL_ID``,
    ``TransactionalId`` or the model's enum."""
    return _canonical(value, _RESOURCE_BY_KEY, "resource type")


def operation_name(value: Any) -> str:
    return _canonical(value, _OPERATION_BY_KEY, "operation")


def permission_name(value: Any) -> str:
    return _canonical(value, _PERMISSION_BY_KEY, "permission type")


def enum_name(zk_name: str) -> str:
    """``TransactionalId`` -> ``TRANSACTIONAL_ID`` (Java enum names, used in notifications)."""
    out = []
    for i, ch in enumerate(zk_name):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.upper())
    return "".join(out)


@dataclass(frozen=True, order=True)
class StoredResource:
    """A resource pattern as stored: Kafka's resource type name, the name, and ``LITERAL``
    or ``PREFIXED``."""

    resource_type: str
    name: str
    pattern_type: str = LITERAL

    @property
    def path(self) -> str:
        root = LITERAL_ROOT if self.pattern_type == LITERAL else PREFIXED_ROOT
        return f"{root}/{self.resource_type}/{self.name}"


@dataclass(frozen=True, order=True)
class StoredAcl:
    """One ACL entry as stored (Kafka's JSON names)."""

    principal: str
    host: str
    operation: str
    permission: str

    def to_json(self) -> dict[str, str]:
        return {"principal": self.principal, "permissionType": self.permission,
                "operation": self.operation, "host": self.host}


@dataclass(frozen=True)
class VersionedAcls:
    """A resource's ACL set and the znode version it was read at (-1: no znode)."""

    acls: frozenset[StoredAcl]
    version: int


NO_ACLS = VersionedAcls(frozenset(), -1)


def resource(resource_type: Any, name: str, pattern_type: Any = LITERAL) -> StoredResource:
    """A :class:`StoredResource` from loose names (see the module docstring); checks the
    pattern type (LITERAL or PREFIXED) and the name (non-empty, no ``/``)."""
    pattern = str(getattr(pattern_type, "name", pattern_type)).upper()
    if pattern not in (LITERAL, PREFIXED):
        raise InvalidRequestError(f"ACLs are stored for LITERAL or PREFIXED patterns, not "
                                  f"{pattern_type!r}")
    if not name or "/" in name:
        raise InvalidRequestError(f"invalid ACL resource name {name!r} (empty or containing "
                                  f"'/')")
    return StoredResource(resource_type_name(resource_type), name, pattern)


def acl(principal: str, operation: Any, *, permission: Any = "Allow",
        host: str = "*") -> StoredAcl:
    """A :class:`StoredAcl` from loose names; the principal must look like ``Type:name``."""
    principal = principal.strip()
    kind, sep, who = principal.partition(":")
    if not sep or not kind or not who:
        raise InvalidRequestError(f"a principal looks like User:<name>, got {principal!r}")
    if not host:
        raise InvalidRequestError("an ACL host is an IP address or '*'")
    return StoredAcl(principal, host, operation_name(operation), permission_name(permission))


def encode_acls(acls: Iterable[StoredAcl]) -> bytes:
    return json.dumps({"version": 1, "acls": [a.to_json() for a in sorted(acls)]}).encode()


def decode_acls(raw: bytes | None) -> frozenset[StoredAcl]:
    """Kafka's ``AclEntry.fromBytes``; entries with unknown names are skipped."""
    if not raw:
        return frozenset()
    try:
        value = json.loads(raw)
    except ValueError:
        return frozenset()
    out = set()
    for item in value.get("acls", []) if isinstance(value, dict) else []:
        try:
            out.add(StoredAcl(str(item["principal"]), str(item["host"]),
                              operation_name(item["operation"]),
                              permission_name(item["permissionType"])))
        except (KeyError, TypeError, InvalidRequestError):
            continue
    return frozenset(out)


def encode_change(res: StoredResource) -> bytes:
    if res.pattern_type == LITERAL:
        return f"{enum_name(res.resource_type)}:{res.name}".encode()
    return json.dumps({"version": 1, "resourceType": enum_name(res.resource_type),
                       "name": res.name, "patternType": res.pattern_type}).encode()


def decode_change(raw: bytes, *, extended: bool) -> StoredResource | None:
    """The resource a change notification names; None if it cannot be read."""
    try:
        if not extended:
            kind, sep, name = raw.decode().partition(":")
            return StoredResource(resource_type_name(kind), name, LITERAL) if sep else None
        value = json.loads(raw)
        pattern = str(value["patternType"]).upper()
        if pattern not in (LITERAL, PREFIXED):
            return None
        return StoredResource(resource_type_name(value["resourceType"]), str(value["name"]),
                              pattern)
    except (ValueError, KeyError, TypeError, InvalidRequestError):
        return None


@dataclass(frozen=True)
class ChangeNotice:
    """One change notification: which store, its sequence number, the resource it names."""

    extended: bool
    sequence: int
    resource: StoredResource | None


class AclStore:
    """Read and change ACLs (see the module docstring). Blocking."""

    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk

    # ---- paths
    def create_paths(self) -> None:
        """Kafka's ``createAclPaths``: the roots of both stores and their change paths."""
        with _typed_errors("creating the ACL paths"):
            for path in (LITERAL_ROOT, PREFIXED_ROOT, LITERAL_CHANGES, EXTENDED_CHANGES):
                self.zk.ensure_path(path)

    # ---- reads
    def get(self, res: StoredResource) -> VersionedAcls:
        with _typed_errors(f"reading {res.path}"):
            try:
                raw, stat = self.zk.get(res.path)
            except NoNodeError:
                return NO_ACLS
        return VersionedAcls(decode_acls(raw), stat.version)

    def resources(self) -> list[StoredResource]:
        """Every resource pattern with a znode, in both stores."""
        out: list[StoredResource] = []
        with _typed_errors("listing ACL resources"):
            for root, pattern in ((LITERAL_ROOT, LITERAL), (PREFIXED_ROOT, PREFIXED)):
                for kind in self._children(root):
                    if _key(kind) not in _RESOURCE_BY_KEY:
                        continue  # Kafka: "Ignoring unknown ResourceType"
                    for name in self._children(f"{root}/{kind}"):
                        out.append(StoredResource(_RESOURCE_BY_KEY[_key(kind)], name, pattern))
        return out

    def load_all(self) -> dict[StoredResource, VersionedAcls]:
        """Every resource pattern's ACLs (Kafka's ``loadAllAcls``); resources with none are
        left out."""
        out = {}
        for res in self.resources():
            versioned = self.get(res)
            if versioned.acls:
                out[res] = versioned
        return out

    def bindings(self) -> list[tuple[StoredResource, StoredAcl]]:
        """Every (resource, ACL) pair, sorted."""
        return sorted((res, entry) for res, versioned in self.load_all().items()
                      for entry in versioned.acls)

    # ---- writes
    def update(self, res: StoredResource,
               change: Callable[[frozenset[StoredAcl]], frozenset[StoredAcl]]
               ) -> tuple[bool, VersionedAcls]:
        """Apply ``change`` to ``res``'s ACL set, conditioned on the version read, retried on
        a lost race; the znode is deleted when the set becomes empty. Appends a change
        notification when the set changed. Returns (changed, the set written)."""
        with _typed_errors(f"changing {res.path}"):
            for _ in range(UPDATE_ATTEMPTS):
                current = self.get(res)
                new = frozenset(change(current.acls))
                if new == current.acls:
                    return False, current
                try:
                    if not new:
                        self.zk.delete(res.path, version=current.version)
                        written = NO_ACLS
                    elif current.version < 0:
                        self.zk.create(res.path, encode_acls(new), makepath=True)
                        written = VersionedAcls(new, 0)
                    else:
                        stat = self.zk.set(res.path, encode_acls(new), version=current.version)
                        written = VersionedAcls(new, stat.version)
                except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
                    # jittered, as Kafka's backoff: writers that lost together do not retry
                    # in lockstep
                    time.sleep(random.uniform(0.005, 0.03))
                    continue
                self._notify(res)
                return True, written
        raise RuntimeError(f"{res.path} kept changing under {UPDATE_ATTEMPTS} attempts")

    def add(self, resource_type: Any, name: str, *, principal: str, operation: Any,
            permission: Any = "Allow", host: str = "*", pattern_type: Any = LITERAL) -> bool:
        """Add one ACL (``add("topic", "orders", principal="User:alice", operation="read")``);
        False if it was there already. Brokers see it within a moment (change notification)."""
        res = resource(resource_type, name, pattern_type)
        entry = acl(principal, operation, permission=permission, host=host)
        changed, _ = self.update(res, lambda acls: acls | {entry})
        return changed

    def add_many(self, res: StoredResource, entries: Iterable[StoredAcl]) -> bool:
        new = frozenset(entries)
        changed, _ = self.update(res, lambda acls: acls | new)
        return changed

    def remove(self, resource_type: Any, name: str, *, principal: str, operation: Any,
               permission: Any = "Allow", host: str = "*", pattern_type: Any = LITERAL) -> bool:
        """Remove one ACL; False if it was not there."""
        res = resource(resource_type, name, pattern_type)
        entry = acl(principal, operation, permission=permission, host=host)
        changed, _ = self.update(res, lambda acls: acls - {entry})
        return changed

    def remove_matching(self, res: StoredResource, keep: Callable[[StoredAcl], bool]
                        ) -> frozenset[StoredAcl]:
        """Remove ``res``'s ACLs for which ``keep`` is False; returns those removed."""
        removed: set[StoredAcl] = set()

        def change(acls: frozenset[StoredAcl]) -> frozenset[StoredAcl]:
            removed.clear()
            removed.update(a for a in acls if not keep(a))
            return acls - removed

        changed, _ = self.update(res, change)
        return frozenset(removed) if changed else frozenset()

    # ---- change notifications
    def _notify(self, res: StoredResource) -> None:
        root = LITERAL_CHANGES if res.pattern_type == LITERAL else EXTENDED_CHANGES
        self.zk.create(f"{root}/{CHANGE_PREFIX}", encode_change(res), sequence=True,
                       makepath=True)

    def watch_changes(self, callback: Callable[[], Any], alive: Callable[[], bool]) -> None:
        """Call ``callback()`` (on kazoo's thread; it must not block) whenever a change
        notification appears in either change path, until ``alive()`` turns false; the
        caller then reads the new ones with :meth:`changes_after`."""
        with _typed_errors("watching ACL changes"):
            for path in (LITERAL_CHANGES, EXTENDED_CHANGES):
                self.zk.ensure_path(path)

                def on_children(_children: list[str]) -> bool | None:
                    if not alive():
                        return False
                    callback()
                    return None

                self.zk.ChildrenWatch(path)(on_children)

    def last_sequences(self) -> tuple[int, int]:
        """The highest sequence number in the (literal, extended) change paths (-1: none)."""
        with _typed_errors("reading ACL change notifications"):
            return (max(self._sequences(LITERAL_CHANGES), default=-1),
                    max(self._sequences(EXTENDED_CHANGES), default=-1))

    def changes_after(self, literal_seq: int, extended_seq: int) -> list[ChangeNotice]:
        """Change notifications with a sequence number above the given ones, oldest first per
        path (a notification removed meanwhile comes with ``resource`` None)."""
        out: list[ChangeNotice] = []
        with _typed_errors("reading ACL change notifications"):
            for path, extended, after in ((LITERAL_CHANGES, False, literal_seq),
                                          (EXTENDED_CHANGES, True, extended_seq)):
                for seq in sorted(s for s in self._sequences(path) if s > after):
                    try:
                        raw, _ = self.zk.get(f"{path}/{CHANGE_PREFIX}{seq:010d}")
                    except NoNodeError:
                        out.append(ChangeNotice(extended, seq, None))
                        continue
                    out.append(ChangeNotice(extended, seq, decode_change(raw, extended=extended)))
        return out

    def purge_changes(self, *, now_ms: float | None = None) -> int:
        """Remove change notifications older than :data:`CHANGE_EXPIRATION_MS` (Kafka's
        ``ZkNodeChangeNotificationListener.purgeObsoleteNotifications``); several brokers may
        do it at once. Returns how many this call removed."""
        with _typed_errors("removing old ACL change notifications"):
            return sum(purge(self.zk, path, CHANGE_PREFIX, now_ms=now_ms)
                       for path in (LITERAL_CHANGES, EXTENDED_CHANGES))

    def _sequences(self, path: str) -> list[int]:
        return sequences(self.zk, path, CHANGE_PREFIX)

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self.zk.get_children(path))
        except NoNodeError:
            return []
