"""Keeping a broker's ACL cache (``acl_authorizer.AclAuthorizer``) equal to ZooKeeper's ACLs,
and the conversions between the stored form (``catalog/acls.py``) and the ACL model.

Start-up (Kafka's ``AclAuthorizer.configure``): create the ACL paths, start watching both
change-notification paths, note the newest notification of each, then load every ACL. A watch
firing (kazoo's thread) only sets an event on the loop; :meth:`AclSync.run` then reads the
notifications newer than the last processed ones and re-reads each resource they name, on the
ZooKeeper executor, and applies the result on the loop. Since the watch is set before the load,
no change is missed: a change during the load is read again afterwards (idempotent). A gap in
the notifications (one purged before we read it) reloads everything. Every
``PURGE_INTERVAL_S`` the notifications older than 15 minutes are removed (any broker may).

After a ZooKeeper reconnection (the same session again, or a new one after the old expired)
everything is loaded again, as Kafka's notification listener processes the notifications again
after a new session: while the broker was away its watch may not have fired, and the
notifications of changes made meanwhile may have been purged (a broker away for more than 15
minutes), which no gap would reveal if no change followed. A broker never keeps serving stale
ACLs beyond its reconnection.

Reads and writes are serialized with ``AclAuthorizer.updates`` (held from the ZooKeeper read or
write to the cache update, as Kafka's lock), so an older read never overwrites a newer apply.

A broker's own CreateAcls/DeleteAcls apply their written sets at once
(:meth:`AclSync.apply_stored`), so a DescribeAcls on the same broker right after sees them;
other brokers see them when their watch fires (milliseconds on loopback).

Event loop only, except the blocking store calls, which run on the ZooKeeper executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from loglake.broker.security.acl_authorizer import AclAuthorizer
from loglake.broker.security.acl_model import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from loglake.catalog.acls import (
    LITERAL,
    AclStore,
    StoredAcl,
    StoredResource,
    VersionedAcls,
    enum_name,
)
from loglake.catalog.zookeeper import SessionEvent

if TYPE_CHECKING:
    from loglake.broker.zk_session import ZkSession

log = logging.getLogger(__name__)

PURGE_INTERVAL_S = 60.0
RETRY_DELAY_S = 0.5


# ---- conversions (pure)
def pattern_of(res: StoredResource) -> ResourcePattern:
    return ResourcePattern(ResourceType[enum_name(res.resource_type)], res.name,
                           PatternType.LITERAL if res.pattern_type == LITERAL
                           else PatternType.PREFIXED)


def entry_of(stored: StoredAcl) -> AccessControlEntry:
    return AccessControlEntry(stored.principal, stored.host,
                              AclOperation[enum_name(stored.operation)],
                              AclPermissionType[enum_name(stored.permission)])


def stored_resource(pattern: ResourcePattern) -> StoredResource:
    """LITERAL or PREFIXED patterns of a concrete type only (callers validate first)."""
    return StoredResource(pattern.resource_type.zk_name, pattern.name,
                          "LITERAL" if pattern.pattern_type is PatternType.LITERAL
                          else "PREFIXED")


def stored_acl(entry: AccessControlEntry) -> StoredAcl:
    return StoredAcl(entry.principal, entry.host, entry.operation.zk_name,
                     entry.permission.zk_name)


def bindings_of(res: StoredResource, acls: frozenset[StoredAcl]) -> list[AclBinding]:
    pattern = pattern_of(res)
    return [AclBinding(pattern, entry_of(a)) for a in acls]


class AclSync:
    """Loads and follows the stored ACLs into an :class:`AclAuthorizer` (see the module
    docstring)."""

    def __init__(self, zk: ZkSession, authorizer: AclAuthorizer, *,
                 stopping: Callable[[], bool]) -> None:
        self.zk = zk
        self.authorizer = authorizer
        self.stopping = stopping
        self._changed = asyncio.Event()
        self._literal_seq = -1
        self._extended_seq = -1
        self._reload_wanted = False
        self.loaded = False
        self.reloads = 0
        """Complete loads so far (start-up, gaps, reconnections)."""

    @property
    def store(self) -> AclStore:
        return self.zk.catalog.acls()

    async def start(self) -> None:
        """Create the paths, watch, load (each step waits out ZooKeeper outages)."""
        store = self.store
        await self.zk.step("creating the ACL paths", store.create_paths)
        await self.zk.step("watching ACL changes", store.watch_changes, self._on_watch,
                           lambda: not self.stopping())
        self.zk.add_listener(self._on_session_event)
        await self._reload_all(wait=True)
        self.loaded = True

    def _on_watch(self) -> None:
        """kazoo's thread: hop onto the loop."""
        self.zk.run_soon(self._changed.set)

    def _on_session_event(self, event: SessionEvent) -> None:
        """Loop: after a reconnection, load everything again (see the module docstring)."""
        if event in (SessionEvent.RECONNECTED, SessionEvent.NEW_SESSION):
            self._reload_wanted = True
            self._changed.set()

    async def _reload_all(self, *, wait: bool = False) -> None:
        """Load every ACL; with ``wait`` (start-up, before anyone asks) ZooKeeper outages are
        waited out, else they raise (the caller retries) so the lock is never held through
        an outage (CreateAcls/DeleteAcls would hang instead of failing)."""
        store = self.store
        async with self.authorizer.updates:
            if wait:
                seqs = await self.zk.step("reading ACL change notifications",
                                          store.last_sequences)
                stored = await self.zk.step("loading ACLs", store.load_all)
            else:
                seqs = await self.zk.call(store.last_sequences)
                stored = await self.zk.call(store.load_all)
            self._literal_seq, self._extended_seq = seqs
            self.authorizer.replace_all({pattern_of(res): [entry_of(a) for a in versioned.acls]
                                         for res, versioned in stored.items()})
        self.reloads += 1
        log.info("loaded %d ACL resource patterns", len(stored))

    def apply_stored(self, res: StoredResource, versioned: VersionedAcls) -> None:
        """Use ``versioned`` (just written or read) as ``res``'s ACLs in the cache."""
        self.authorizer.apply(pattern_of(res), [entry_of(a) for a in versioned.acls])

    async def run(self) -> None:
        """Process change notifications until cancelled; purge old ones now and then."""
        loop = asyncio.get_running_loop()
        next_purge = loop.time() + PURGE_INTERVAL_S
        while not self.stopping():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(),
                                       max(0.1, next_purge - loop.time()))
            reload = False
            try:
                if self._changed.is_set():
                    self._changed.clear()
                    reload, self._reload_wanted = self._reload_wanted, False
                    if reload:
                        await self._reload_all()
                        reload = False
                    await self.process_changes()
                if loop.time() >= next_purge:
                    next_purge = loop.time() + PURGE_INTERVAL_S
                    await self.zk.call(self.store.purge_changes)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("processing ACL changes failed (%s); retrying", exc)
                self._reload_wanted = self._reload_wanted or reload
                self._changed.set()
                await asyncio.sleep(RETRY_DELAY_S)

    async def process_changes(self) -> int:
        """Re-read the resources named by notifications newer than the last processed ones;
        returns how many notifications were processed."""
        store = self.store
        notices = await self.zk.call(store.changes_after, self._literal_seq,
                                     self._extended_seq)
        if not notices:
            return 0
        gap = any(n.resource is None for n in notices)
        for extended, last in ((False, self._literal_seq), (True, self._extended_seq)):
            first = next((n.sequence for n in notices if n.extended == extended), None)
            # sequence numbers follow the parent's child version: deletions (purges) skip
            # numbers too, so a skip may be harmless; reloading everything is always right
            # (also when none was seen yet: notifications may have come and gone meanwhile)
            if first is not None and first > last + 1:
                gap = True
        if gap:
            await self._reload_all()
            return len(notices)
        resources = list(dict.fromkeys(n.resource for n in notices if n.resource is not None))
        for res in resources:
            async with self.authorizer.updates:
                versioned = await self.zk.call(store.get, res)
                self.apply_stored(res, versioned)
        for notice in notices:
            if notice.extended:
                self._extended_seq = max(self._extended_seq, notice.sequence)
            else:
                self._literal_seq = max(self._literal_seq, notice.sequence)
        return len(notices)

