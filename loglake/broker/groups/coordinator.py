"""The group coordinator: JoinGroup/SyncGroup/Heartbeat/LeaveGroup and offsets, per group.

**Which broker coordinates a group.** Rendezvous hashing over the live brokers
(:func:`coordinator_for`): the live broker with the highest ``md5(group:broker)`` score. When a
broker dies only its groups move; when it returns they move back. Exclusivity does not rely on
every broker seeing the same live set at the same instant: the coordinator also holds the
ephemeral ``/consumers/<group>/owner`` znode, and a broker that computes itself as coordinator
but cannot claim that znode answers COORDINATOR_NOT_AVAILABLE (clients retry) until the previous
owner releases it or its session ends. A broker that stops being the hash choice persists the
group, releases the claim and drops it; clients get NOT_COORDINATOR and look up the new one.

**What moves with a group.** Committed offsets live in ZooKeeper (catalog.groups: the plain
offset at Kafka's path, metadata beside it; :meth:`GroupCoordinator.migrate_offsets` rewrites
loglake's older JSON form at start-up). Group
metadata (generation, protocol, leader, members with their assignments and static instance ids)
is persisted with version checks whenever a rebalance completes or membership changes, and the
next coordinator loads it, so members keep heartbeating in the same generation after a
coordinator move: no rebalance (this is what lets static members ride out rolling bounces).
Pending transactional offsets (TxnOffsetCommit) live in ZooKeeper too, indexed by producer id
(``/loglake/txn_offsets/<producer_id>/<group>``, txn_offsets.py); the coordinator mirrors those
of its groups in memory (loaded with the group) and :meth:`GroupCoordinator.complete_transaction`
reads ZooKeeper, so a coordinator that just took a group over ends its open transactions.
A group's offset writes (plain commits, TxnOffsetCommit, completions) are serialised per group
so the in-memory cache follows the order ZooKeeper applied them in.

**Timers** (one task, ``TICK_S``): session expiry (members not awaiting a join/sync response),
the join phase deadline (max rebalance timeout, or ``group.initial.rebalance.delay.ms`` for a
group that was empty), the sync phase deadline, ownership re-checks and offset expiry of empty
groups after ``offsets.retention.minutes`` (KIP-211).

Runs on the broker's event loop (not thread-safe); ZooKeeper I/O goes through the session's
executor (broker/zk_session.py). Depends on the ZooKeeper session, the metadata cache and the
config only.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from loglake.broker.groups.group import Group, GroupState, Member
from loglake.broker.groups.txn_offsets import (
    marker_applies,
    merge_pending,
    offsets_partition_for,
    plan_completion,
)
from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.zk_session import ZkSession
from loglake.catalog.groups import (
    CommittedOffset,
    GroupStore,
    PendingTxnOffsets,
    StaleGroupError,
)
from loglake.catalog.zookeeper import CatalogClosedError
from loglake.config import BrokerConfig
from loglake.errors import LoglakeError

log = logging.getLogger(__name__)
TICK_S = 0.1
MIN_SESSION_TIMEOUT_MS = 6000
MAX_SESSION_TIMEOUT_MS = 1800000
OFFSET_METADATA_MAX_BYTES = 4096
TXN_OFFSET_WRITE_ATTEMPTS = 5
"""Version-checked writes of one group's pending or completed transactional offsets before
the request fails retriably (each lost race means another write to the same znodes landed)."""


class GroupError(LoglakeError):
    """A group-protocol error; ``code`` is set per instance."""

    def __init__(self, code: ErrorCode, message: str, *, member_id: str = "") -> None:
        super().__init__(message, code=code)
        self.member_id = member_id


def coordinator_for(group_id: str, live: Iterable[int]) -> int:
    """Rendezvous (highest random weight) choice of the coordinating broker; -1 if none."""
    def score(broker: int) -> bytes:
        return hashlib.md5(f"{group_id}:{broker}".encode(), usedforsecurity=False).digest()

    brokers = list(live)
    return max(brokers, key=score) if brokers else -1


class GroupCoordinator:
    def __init__(self, zk: ZkSession, metadata: MetadataCache, config: BrokerConfig) -> None:
        """``zk``: the broker's session (lease, ZooKeeper calls, the group store);
        ``metadata``: live brokers (who coordinates what) and topics; ``config``: broker id,
        rebalance delay and offset retention."""
        self.zk = zk
        self.metadata = metadata
        self.config = config
        self.store = zk.catalog.group_store()
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self.pending: dict[str, dict[int, PendingTxnOffsets]] = {}
        """Pending transactional offsets of the owned groups, by producer id (the durable
        copy: ZooKeeper, txn_offsets.py)."""
        self._offset_locks: dict[str, asyncio.Lock] = {}
        self._loading: dict[str, asyncio.Future[Group]] = {}
        self._persist_locks: dict[str, asyncio.Lock] = {}
        self._initial_delay_until: dict[str, float] = {}
        self._last_expiry_check = time.monotonic()
        self._background: set[asyncio.Future[None]] = set()

    @property
    def me(self) -> int:
        return self.config.broker_id

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def coordinator_for(self, group_id: str) -> int:
        return coordinator_for(group_id, self.metadata.live_brokers)

    # ------------------------------------------------------------------ ownership
    async def _owned(self, group_id: str) -> Group:
        if not group_id:
            raise GroupError(ErrorCode.invalid_group_id, "The group id must not be empty.")
        if not self.zk.healthy():
            raise GroupError(ErrorCode.coordinator_not_available,
                             "This broker has no live ZooKeeper session.")
        if self.coordinator_for(group_id) != self.me:
            raise GroupError(ErrorCode.not_coordinator,
                             f"Broker {self.me} is not the coordinator of group {group_id}.")
        group = self.groups.get(group_id)
        if group is not None:
            return group
        loading = self._loading.get(group_id)
        if loading is None:
            loading = asyncio.ensure_future(self._load(group_id))
            self._loading[group_id] = loading
            loading.add_done_callback(lambda _f: self._loading.pop(group_id, None))
        return await asyncio.shield(loading)

    async def _load(self, group_id: str) -> Group:
        if not await self.zk.call(self.store.claim, group_id, self.me):
            raise GroupError(ErrorCode.coordinator_not_available,
                             f"Group {group_id} is still owned by its previous coordinator.")
        stored = await self.zk.call(self.store.load_state, group_id)
        offsets = await self.zk.call(self.store.fetch, group_id)
        pending = await self.zk.call(self.store.pending_of_group, group_id)
        if stored is None:
            group = Group(group_id, empty_since_ms=int(time.time() * 1000))
        else:
            group = Group.from_json(group_id, stored[0], stored[1])
            now = self._now()
            for member in group.members.values():
                member.deadline = now + member.session_timeout_ms / 1000
            if group.state is GroupState.PREPARING_REBALANCE:
                group.rebalance_deadline = now + group.max_rebalance_timeout_ms() / 1000
        self.groups[group_id] = group
        self.offsets[group_id] = offsets
        self.pending[group_id] = pending
        log.info("coordinating group %s (generation %d, %d members)", group_id,
                 group.generation, len(group.members))
        return group

    async def _release(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        self.offsets.pop(group_id, None)
        self.pending.pop(group_id, None)
        if group is not None:
            for member in group.members.values():
                _fail(member, GroupError(ErrorCode.not_coordinator,
                                         f"Group {group_id} moved to another coordinator."))
        with contextlib.suppress(Exception):
            await self.zk.call(self.store.release, group_id)
        log.info("released group %s", group_id)

    async def _persist(self, group: Group) -> None:
        lock = self._persist_locks.setdefault(group.group_id, asyncio.Lock())
        async with lock:
            if self.groups.get(group.group_id) is not group:
                return
            try:
                group.zk_version = await self.zk.call(
                    self.store.save_state, group.group_id, group.to_json(), group.zk_version)
            except StaleGroupError:
                log.warning("group %s was taken over by another coordinator", group.group_id)
                await self._release(group.group_id)
            except Exception:  # ZooKeeper unavailable: the next change persists again
                log.exception("saving the metadata of group %s failed", group.group_id)

    def _persist_soon(self, group: Group) -> None:
        task = asyncio.ensure_future(self._persist(group))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ join / sync
    async def join(
        self, group_id: str, *, member_id: str, instance_id: str | None, client_id: str,
        client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]], require_known_member: bool,
    ) -> dict[str, Any]:
        group = await self._owned(group_id)
        if not MIN_SESSION_TIMEOUT_MS <= session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            raise GroupError(ErrorCode.invalid_session_timeout,
                             f"Session timeout {session_timeout_ms} ms is outside "
                             f"[{MIN_SESSION_TIMEOUT_MS}, {MAX_SESSION_TIMEOUT_MS}].")
        if group.state is GroupState.DEAD:
            raise GroupError(ErrorCode.coordinator_not_available, "The group is being deleted.")
        known = group.members.get(member_id)
        if not group.supports(protocol_type, protocols) and not (
            known is not None and len(group.members) == 1
        ):
            raise GroupError(ErrorCode.inconsistent_group_protocol,
                             "The member's protocols do not match the group's.")
        now = self._now()

        def fresh(new_id: str) -> Member:
            return Member(new_id, instance_id, client_id, client_host, session_timeout_ms,
                          rebalance_timeout_ms, protocol_type, list(protocols),
                          deadline=now + session_timeout_ms / 1000)

        if not member_id:
            new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if instance_id is not None:
                return await self._join_static(group, instance_id, fresh(new_id))
            if require_known_member:
                group.pending_members.add(new_id)
                raise GroupError(ErrorCode.member_id_required,
                                 "A member id is required: rejoin with the one given.",
                                 member_id=new_id)
            return await self._join_and_wait(group, fresh(new_id), new=True)
        if known is None:
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                return await self._join_and_wait(group, fresh(member_id), new=True)
            raise GroupError(ErrorCode.unknown_member_id,
                             f"Member {member_id} is not in group {group_id}.")
        if instance_id is not None and group.static.get(instance_id) != member_id:
            raise GroupError(ErrorCode.fenced_instance_id,
                             f"Instance {instance_id} now belongs to another member id.")
        changed = known.protocols != list(protocols)
        known.protocols = list(protocols)
        known.session_timeout_ms = session_timeout_ms
        known.rebalance_timeout_ms = rebalance_timeout_ms
        known.deadline = now + session_timeout_ms / 1000
        if group.state is GroupState.COMPLETING_REBALANCE and not changed:
            return self._join_response(group, known)
        if group.state is GroupState.STABLE and not changed and group.leader != member_id:
            return self._join_response(group, known)
        return await self._join_and_wait(group, known, new=False)

    async def _join_static(self, group: Group, instance_id: str, member: Member) -> dict[str, Any]:
        old_id = group.static.get(instance_id)
        old = group.members.get(old_id) if old_id else None
        if old is None:
            group.static[instance_id] = member.member_id
            return await self._join_and_wait(group, member, new=True)
        # a static member came back: it takes over the old member id's place and assignment
        _fail(old, GroupError(ErrorCode.fenced_instance_id,
                              f"Instance {instance_id} rejoined under a new member id."))
        del group.members[old.member_id]
        member.assignment = old.assignment
        group.members[member.member_id] = member
        group.static[instance_id] = member.member_id
        if group.leader == old.member_id:
            group.leader = member.member_id
        # Kafka's rule (updateStaticMemberAndRebalance): a rejoin while Stable rebalances only
        # when the group's selected protocol would change; the metadata bytes may differ
        # between a member's joins (the Java consumer's subscription carries its generation and
        # owned partitions). The member keeps the old member id's assignment.
        if group.state is GroupState.STABLE and group.select_protocol() == group.protocol:
            await self._persist(group)
            return self._join_response(group, member)
        return await self._join_and_wait(group, member, new=False)

    async def _join_and_wait(self, group: Group, member: Member, *, new: bool) -> dict[str, Any]:
        if new:
            group.members[member.member_id] = member
            if member.group_instance_id:
                group.static[member.group_instance_id] = member.member_id
            if group.protocol_type is None:
                group.protocol_type = member.protocol_type
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        if member.join_future is not None and not member.join_future.done():
            member.join_future.cancel()
        member.join_future = future
        self._prepare_rebalance(group, f"member {member.member_id} joined")
        self._maybe_complete_join(group)
        if new:
            self._persist_soon(group)
        limit = member.rebalance_timeout_ms / 1000 + member.session_timeout_ms / 1000 + 5
        return await asyncio.wait_for(future, limit)

    def _join_response(self, group: Group, member: Member) -> dict[str, Any]:
        leader = group.leader == member.member_id
        return {
            "error_code": ErrorCode.none, "generation_id": group.generation,
            "protocol_type": group.protocol_type, "protocol_name": group.protocol,
            "leader": group.leader or "", "member_id": member.member_id,
            "skip_assignment": False,
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata_for(group.protocol or "")}
                for m in group.members.values()
            ] if leader else [],
        }

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state is GroupState.PREPARING_REBALANCE:
            return
        was_empty = group.state is GroupState.EMPTY
        for member in group.members.values():
            _fail(member, GroupError(ErrorCode.rebalance_in_progress,
                                     "The group is rebalancing; rejoin."), join=False)
        group.state = GroupState.PREPARING_REBALANCE
        now = self._now()
        group.rebalance_deadline = now + max(group.max_rebalance_timeout_ms(), 1) / 1000
        delay = self.config.group_initial_rebalance_delay_ms / 1000
        if was_empty and delay > 0:
            self._initial_delay_until[group.group_id] = now + delay
            group.rebalance_deadline = min(group.rebalance_deadline, now + delay)
        log.info("group %s rebalancing (generation %d): %s", group.group_id, group.generation,
                 reason)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        delayed = self._initial_delay_until.get(group.group_id, 0.0) > self._now()
        if group.all_joined() and not delayed:
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        self._initial_delay_until.pop(group.group_id, None)
        for member_id in [m.member_id for m in group.members.values() if m.join_future is None]:
            self._remove_member(group, member_id)
        group.generation += 1
        now = self._now()
        if not group.members:
            group.state = GroupState.EMPTY
            group.protocol = group.leader = None  # protocol_type stays, as in Kafka
            group.empty_since_ms = int(time.time() * 1000)
            self._persist_soon(group)
            return
        group.protocol = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = GroupState.COMPLETING_REBALANCE
        group.rebalance_deadline = now + max(group.max_rebalance_timeout_ms(), 1) / 1000
        for member in group.members.values():
            future, member.join_future = member.join_future, None
            member.deadline = now + member.session_timeout_ms / 1000
            if future is not None and not future.done():
                future.set_result(self._join_response(group, member))
        log.info("group %s: generation %d, protocol %s, leader %s, %d members", group.group_id,
                 group.generation, group.protocol, group.leader, len(group.members))
        self._persist_soon(group)

    def _remove_member(self, group: Group, member_id: str) -> None:
        member = group.members.pop(member_id, None)
        if member is None:
            return
        if member.group_instance_id and group.static.get(member.group_instance_id) == member_id:
            del group.static[member.group_instance_id]
        _fail(member, GroupError(ErrorCode.unknown_member_id,
                                 f"Member {member_id} was removed from the group."))

    async def sync(
        self, group_id: str, *, generation: int, member_id: str, instance_id: str | None,
        protocol_type: str | None, protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> dict[str, Any]:
        group = await self._owned(group_id)
        member = self._check_member(group, member_id, instance_id, generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol
        ):
            raise GroupError(ErrorCode.inconsistent_group_protocol,
                             "SyncGroup protocol does not match the group's.")
        if group.state is GroupState.PREPARING_REBALANCE:
            raise GroupError(ErrorCode.rebalance_in_progress, "The group is rebalancing.")
        if group.state is GroupState.STABLE:
            return self._sync_response(group, member.assignment)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        member.sync_future = future
        member.deadline = self._now() + member.session_timeout_ms / 1000
        if member_id == group.leader:
            for other in group.members.values():
                other.assignment = bytes(assignments.get(other.member_id, b""))
            group.state = GroupState.STABLE
            await self._persist(group)
            for other in group.members.values():
                waiting, other.sync_future = other.sync_future, None
                if waiting is not None and not waiting.done():
                    waiting.set_result(other.assignment)
        assignment = await asyncio.wait_for(future, member.rebalance_timeout_ms / 1000 + 5)
        return self._sync_response(group, assignment)

    def _sync_response(self, group: Group, assignment: bytes) -> dict[str, Any]:
        return {"error_code": ErrorCode.none, "protocol_type": group.protocol_type,
                "protocol_name": group.protocol, "assignment": assignment}

    def _check_member(self, group: Group, member_id: str, instance_id: str | None,
                      generation: int) -> Member:
        if instance_id is not None and instance_id in group.static and (
            group.static[instance_id] != member_id
        ):
            raise GroupError(ErrorCode.fenced_instance_id,
                             f"Instance {instance_id} belongs to another member id now.")
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(ErrorCode.unknown_member_id,
                             f"Member {member_id} is not in group {group.group_id}.")
        if generation != group.generation:
            raise GroupError(ErrorCode.illegal_generation,
                             f"Generation {generation} is not the group's current "
                             f"{group.generation}.")
        return member

    async def heartbeat(self, group_id: str, *, generation: int, member_id: str,
                        instance_id: str | None) -> None:
        group = await self._owned(group_id)
        if group.state is GroupState.EMPTY:
            raise GroupError(ErrorCode.unknown_member_id, "The group has no members.")
        member = self._check_member(group, member_id, instance_id, generation)
        member.deadline = self._now() + member.session_timeout_ms / 1000
        if group.state is GroupState.PREPARING_REBALANCE:
            raise GroupError(ErrorCode.rebalance_in_progress, "The group is rebalancing.")

    async def leave(self, group_id: str,
                    members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        group = await self._owned(group_id)
        results = []
        removed = False
        for member_id, instance_id in members:
            if instance_id is not None:
                owner = group.static.get(instance_id)
                if owner is None:
                    results.append(ErrorCode.unknown_member_id)
                    continue
                if member_id and owner != member_id:
                    results.append(ErrorCode.fenced_instance_id)
                    continue
                member_id = owner
            if member_id not in group.members:
                results.append(ErrorCode.unknown_member_id)
                continue
            self._remove_member(group, member_id)
            removed = True
            results.append(ErrorCode.none)
        if removed:
            self._after_membership_change(group, "member left")
        return results

    def _after_membership_change(self, group: Group, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            if group.members:
                self._prepare_rebalance(group, reason)
            else:
                group.state = GroupState.PREPARING_REBALANCE
        self._maybe_complete_join(group)
        if group.state is GroupState.PREPARING_REBALANCE and not group.members:
            self._complete_join(group)
        self._persist_soon(group)

    # ------------------------------------------------------------------ offsets
    async def commit(
        self, group_id: str, *, generation: int, member_id: str, instance_id: str | None,
        offsets: Mapping[tuple[str, int], tuple[int, int, str | None]],
    ) -> dict[tuple[str, int], ErrorCode]:
        group = await self._owned(group_id)
        if generation < 0 and not member_id:
            if group.members:
                raise GroupError(ErrorCode.illegal_generation,
                                 "Commits outside the group protocol need an empty group.")
        else:
            member = self._check_member(group, member_id, instance_id, generation)
            # Kafka accepts commits of the current generation while a rebalance is being
            # prepared (consumers commit in their revoke callback), not while it completes
            if group.state is GroupState.COMPLETING_REBALANCE:
                raise GroupError(ErrorCode.rebalance_in_progress, "The group is rebalancing.")
            member.deadline = self._now() + member.session_timeout_ms / 1000
        errors, accepted = self._accept_offsets(offsets)
        if accepted:
            async with self._offset_lock(group_id):
                await self.zk.call(self.store.commit, group_id, accepted)
                self.offsets.setdefault(group_id, {}).update(accepted)
        return errors

    def _offset_lock(self, group_id: str) -> asyncio.Lock:
        """Serialises a group's offset writes with their cache updates, so the cache ends in
        the order ZooKeeper applied them (plain commits, TxnOffsetCommit, completions)."""
        return self._offset_locks.setdefault(group_id, asyncio.Lock())

    def _accept_offsets(
        self, offsets: Mapping[tuple[str, int], tuple[int, int, str | None]],
    ) -> tuple[dict[tuple[str, int], ErrorCode], dict[tuple[str, int], CommittedOffset]]:
        """Per-partition checks shared by OffsetCommit and TxnOffsetCommit: unknown topic or
        partition, metadata too large; returns (errors, accepted offsets)."""
        errors: dict[tuple[str, int], ErrorCode] = {}
        accepted: dict[tuple[str, int], CommittedOffset] = {}
        now_ms = int(time.time() * 1000)
        for (topic, partition), (offset, epoch, metadata) in offsets.items():
            meta = self.metadata.topics.get(topic)
            if meta is None or partition not in meta.assignment:
                errors[(topic, partition)] = ErrorCode.unknown_topic_or_partition
            elif metadata is not None and len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                errors[(topic, partition)] = ErrorCode.offset_metadata_too_large
            else:
                accepted[(topic, partition)] = CommittedOffset(offset, epoch, metadata or "",
                                                               now_ms)
                errors[(topic, partition)] = ErrorCode.none
        return errors, accepted

    # ------------------------------------------------------------------ transactional offsets
    async def txn_commit(
        self, group_id: str, *, producer_id: int, producer_epoch: int, generation: int,
        member_id: str, instance_id: str | None,
        offsets: Mapping[tuple[str, int], tuple[int, int, str | None]],
    ) -> dict[tuple[str, int], ErrorCode]:
        """TxnOffsetCommit: validate as Kafka's GroupCoordinator.handleTxnOffsetCommit and
        store the accepted offsets as the producer's pending offsets for the group (durable
        before this returns); they become committed at the transaction's commit marker
        (:meth:`complete_transaction`)."""
        group = await self._owned(group_id)
        if group.state is GroupState.DEAD:
            raise GroupError(ErrorCode.coordinator_not_available, "The group is being deleted.")
        if generation < 0 and group.state is GroupState.EMPTY:
            pass  # a producer outside the group protocol, or an empty group (Kafka's rule)
        elif generation >= 0 or member_id or instance_id is not None:
            self._check_txn_member(group, member_id, instance_id, generation)
        errors, accepted = self._accept_offsets(offsets)
        if not accepted:
            return errors
        async with self._offset_lock(group_id):
            pending = await self.zk.call(_write_pending, self.store, group_id, producer_id,
                                         producer_epoch, accepted)
            if self.groups.get(group_id) is group:
                self.pending.setdefault(group_id, {})[producer_id] = pending
        return errors

    def _check_txn_member(self, group: Group, member_id: str, instance_id: str | None,
                          generation: int) -> None:
        """KIP-447's checks (Kafka's validateCurrentMember, then the generation)."""
        if instance_id is not None:
            owner = group.static.get(instance_id)
            if owner is None:
                raise GroupError(ErrorCode.unknown_member_id,
                                 f"Instance {instance_id} is not in group {group.group_id}.")
            if owner != member_id:
                raise GroupError(ErrorCode.fenced_instance_id,
                                 f"Instance {instance_id} belongs to another member id now.")
        elif member_id not in group.members:
            raise GroupError(ErrorCode.unknown_member_id,
                             f"Member {member_id} is not in group {group.group_id}.")
        if generation != group.generation:
            raise GroupError(ErrorCode.illegal_generation,
                             f"Generation {generation} is not the group's current "
                             f"{group.generation}.")

    async def complete_transaction(self, producer_id: int, producer_epoch: int,
                                   offsets_partition: int, commit: bool) -> None:
        """A transaction marker for ``__consumer_offsets`` partition ``offsets_partition``:
        commit (or drop) ``producer_id``'s pending offsets of every group this broker
        coordinates whose :func:`offsets_partition_for` is that partition. Groups coordinated
        elsewhere are left to their coordinators (the marker sender addresses each group's
        coordinator); NOT_COORDINATOR when such groups have pending offsets and none of them is
        ours. Idempotent: a re-sent marker finds nothing left and succeeds. A marker older than
        the pending offsets' epoch leaves them alone."""
        if not self.zk.healthy():
            raise GroupError(ErrorCode.coordinator_not_available,
                             "This broker has no live ZooKeeper session.")
        groups = [g for g in await self.zk.call(self.store.pending_groups, producer_id)
                  if offsets_partition_for(g) == offsets_partition]
        mine = [g for g in groups if self.coordinator_for(g) == self.me]
        if groups and not mine:
            raise GroupError(ErrorCode.not_coordinator,
                             f"Broker {self.me} coordinates none of the groups with pending "
                             f"offsets of producer {producer_id} in partition "
                             f"{offsets_partition}.")
        for group_id in mine:
            group = await self._owned(group_id)
            async with self._offset_lock(group_id):
                applied = await self.zk.call(_complete_pending, self.store, group_id,
                                             producer_id, producer_epoch, commit)
                if self.groups.get(group_id) is not group or applied is None:
                    continue
                self.pending.get(group_id, {}).pop(producer_id, None)
                self.offsets.setdefault(group_id, {}).update(applied)
            log.info("group %s: %s transactional offsets of producer %d (%d applied)",
                     group_id, "committed" if commit else "aborted", producer_id, len(applied))

    async def unstable_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions of the group with pending transactional offsets (OffsetFetch's
        ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for them)."""
        await self._owned(group_id)
        return {key for pending in self.pending.get(group_id, {}).values()
                for key in pending.offsets}

    async def committed(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        await self._owned(group_id)
        return dict(self.offsets.get(group_id, {}))

    def committed_offsets(self) -> dict[str, dict[tuple[str, int], CommittedOffset]]:
        """The committed offsets of the loaded groups this broker coordinates, from memory
        (no I/O, no loading: the consumer-lag metrics read it at scrape time)."""
        return {group_id: offsets for group_id, offsets in list(self.offsets.items())
                if group_id in self.groups and self.coordinator_for(group_id) == self.me}

    async def delete_offsets(self, group_id: str,
                             partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        group = await self._owned(group_id)
        subscribed = self._subscribed_topics(group)
        errors: dict[tuple[str, int], ErrorCode] = {}
        deletable = []
        for topic, partition in partitions:
            if topic in subscribed:
                errors[(topic, partition)] = ErrorCode.group_subscribed_to_topic
            else:
                errors[(topic, partition)] = ErrorCode.none
                deletable.append((topic, partition))
        if deletable:
            await self.zk.call(self.store.delete_offsets, group_id, deletable)
            for key in deletable:
                self.offsets.get(group_id, {}).pop(key, None)
        return errors

    def _subscribed_topics(self, group: Group) -> set[str]:
        from kio.schema.consumer_protocol_subscription.v0.data import (
            ConsumerProtocolSubscription,
        )

        from loglake.broker.codec import read_entity

        topics: set[str] = set()
        if group.protocol_type != "consumer":
            return topics
        for member in group.members.values():
            metadata = member.metadata_for(group.protocol or "")
            with contextlib.suppress(Exception):
                subscription, _ = read_entity(ConsumerProtocolSubscription, metadata, 2)
                topics.update(subscription.topics)
        return topics

    # ------------------------------------------------------------------ admin
    async def describe(self, group_id: str) -> Group:
        return await self._owned(group_id)

    async def list_groups(self) -> list[Group]:
        ids = set(self.groups)
        with contextlib.suppress(Exception):
            ids |= set(await self.zk.call(self.store.group_ids))
        result = []
        for group_id in sorted(ids):
            if self.coordinator_for(group_id) != self.me:
                continue
            try:
                group = await self._owned(group_id)
            except GroupError:
                continue
            if group.members or group.zk_version >= 0 or self.offsets.get(group_id):
                result.append(group)  # skip ids that exist only because someone asked
        return result

    async def delete_group(self, group_id: str) -> None:
        group = await self._owned(group_id)
        stored = self.offsets.get(group_id)
        if group.members:
            raise GroupError(ErrorCode.non_empty_group, f"Group {group_id} has members.")
        if group.zk_version < 0 and not stored:
            raise GroupError(ErrorCode.group_id_not_found, f"Group {group_id} does not exist.")
        group.state = GroupState.DEAD
        await self.zk.call(self.store.delete_group, group_id)
        await self.zk.call(self.store.delete_pending_of_group, group_id)
        await self._release(group_id)

    # ------------------------------------------------------------------ timers
    async def run(self) -> None:
        migration = asyncio.ensure_future(self.migrate_offsets())
        try:
            while True:
                await asyncio.sleep(TICK_S)
                try:
                    await self._tick()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("group coordinator tick failed")
        finally:
            migration.cancel()

    async def migrate_offsets(self) -> None:
        """Rewrite committed offsets still in loglake's old JSON form into Kafka's plain form
        (catalog.groups), once at start-up, waiting out ZooKeeper outages. Runs beside the
        coordinator: readers accept both forms meanwhile."""
        try:
            migrated = await self.zk.step("migrating committed offsets",
                                          self.store.migrate_offsets)
        except CatalogClosedError:  # the broker stops; the next start-up migrates
            return
        except Exception:  # e.g. ZooKeeper refused a write: the next start-up retries
            log.exception("migrating committed offsets to the plain form failed")
            return
        if migrated:
            log.info("migrated %d committed offsets to Kafka's plain form", migrated)

    async def _tick(self) -> None:
        now = self._now()
        for group_id, group in list(self.groups.items()):
            if self.coordinator_for(group_id) != self.me or not self.zk.healthy():
                await self._persist(group)
                await self._release(group_id)
                continue
            if group.state is GroupState.PREPARING_REBALANCE:
                if now >= group.rebalance_deadline:
                    self._complete_join(group)
                else:
                    self._maybe_complete_join(group)
            elif group.state is GroupState.COMPLETING_REBALANCE and now >= group.rebalance_deadline:
                for member_id in [m.member_id for m in group.members.values()
                                  if m.sync_future is None]:
                    self._remove_member(group, member_id)
                self._after_membership_change(group, "members did not sync in time")
            # Like Kafka's onExpireHeartbeat: any member not waiting for a join/sync response
            # expires, also while a rebalance is prepared (a dead member must not hold the
            # join phase for the whole rebalance timeout); live members heartbeat meanwhile.
            expired = [m.member_id for m in group.members.values()
                       if now >= m.deadline and m.join_future is None and m.sync_future is None]
            for member_id in expired:
                log.info("group %s: member %s session expired", group_id, member_id)
                self._remove_member(group, member_id)
            if expired:
                self._after_membership_change(group, "session expired")
        interval = self.config.offsets_retention_check_interval_ms / 1000
        if time.monotonic() - self._last_expiry_check >= interval:
            self._last_expiry_check = time.monotonic()
            await self._expire_offsets()

    async def _expire_offsets(self) -> None:
        retention_ms = self.config.offsets_retention_minutes * 60_000
        now_ms = int(time.time() * 1000)
        for group in await self.list_groups():
            if group.members:
                continue
            offsets = self.offsets.get(group.group_id, {})
            if not offsets:
                continue
            last_activity = max([group.empty_since_ms, *(o.commit_time_ms for o in
                                                         offsets.values())])
            if now_ms - last_activity <= retention_ms:
                continue
            log.info("group %s: offsets expired (empty for %d min)", group.group_id,
                     (now_ms - last_activity) // 60_000)
            pending = {key for p in self.pending.get(group.group_id, {}).values()
                       for key in p.offsets}
            if pending:  # Kafka keeps offsets with a transaction pending, and the group
                expired = [key for key in offsets if key not in pending]
                await self.zk.call(self.store.delete_offsets, group.group_id, expired)
                for key in expired:
                    offsets.pop(key, None)
                continue
            await self.zk.call(self.store.delete_group, group.group_id)
            self.offsets[group.group_id] = {}
            group.zk_version = -1


def _write_pending(store: GroupStore, group_id: str, producer_id: int, producer_epoch: int,
                   offsets: Mapping[tuple[str, int], CommittedOffset]) -> PendingTxnOffsets:
    """Merge ``offsets`` into the producer's pending znode of the group (version-checked
    read-modify-write; runs on the zk executor)."""
    for _ in range(TXN_OFFSET_WRITE_ATTEMPTS):
        existing = store.read_pending(producer_id, group_id)
        merged = merge_pending(existing, producer_id, producer_epoch, offsets)
        if store.write_pending(group_id, merged):
            return merged
    raise GroupError(ErrorCode.coordinator_not_available,
                     f"Pending offsets of producer {producer_id} in group {group_id} kept "
                     "changing; retry.")


def _complete_pending(store: GroupStore, group_id: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> dict[tuple[str, int], CommittedOffset] | None:
    """End the producer's pending offsets of the group (runs on the zk executor): the offsets
    that became committed (none for an abort, or when nothing was pending: a re-sent marker),
    or None for a marker older than their epoch (they stay)."""
    for _ in range(TXN_OFFSET_WRITE_ATTEMPTS):
        pending = store.read_pending(producer_id, group_id)
        if pending is None:
            return {}
        if not marker_applies(pending, producer_epoch):
            log.info("group %s: marker epoch %d of producer %d is older than its pending "
                     "offsets' epoch %d; left alone", group_id, producer_epoch, producer_id,
                     pending.producer_epoch)
            return None
        committed = (store.committed_orders(group_id, pending.offsets) if commit else {})
        plan = plan_completion(pending, commit=commit, committed=committed)
        if store.finish_pending(producer_id, group_id, pending.version, plan.apply):
            return {key: offset for key, (offset, _) in plan.apply.items()}
    raise GroupError(ErrorCode.coordinator_not_available,
                     f"Offsets of group {group_id} kept changing while producer {producer_id}'s "
                     "transaction ended; retry.")


def _fail(member: Member, error: GroupError, *, join: bool = True) -> None:
    futures: list[asyncio.Future[Any] | None] = [member.sync_future]
    if join:
        futures.append(member.join_future)
    for future in futures:
        if future is not None and not future.done():
            future.set_exception(error)
    member.sync_future = None
    if join:
        member.join_future = None
