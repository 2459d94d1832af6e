"""The controller: one broker at a time, elected through the ephemeral ``/controller`` znode.

State machine (every broker runs one)::

    CANDIDATE --creates /controller, bumps /controller_epoch--> ACTIVE(epoch, epoch version)
    ACTIVE --a write finds /controller_epoch changed (ControllerMovedError),
             or our session is lost--> CANDIDATE

While ACTIVE it reacts to ``/brokers/ids`` changes (and re-checks every ``RESCAN_S`` seconds):
it reads every partition state, asks :mod:`loglake.broker.election` what to change, and applies
each write with :meth:`ClusterCatalog.controller_write`, a ZooKeeper transaction that checks both
the ``/controller_epoch`` version it set and the state znode version it read (KAFKA-6082: a paused
or partitioned ex-controller cannot overwrite newer state). Decisions reach the brokers through
their watches on the partition-state znodes (no LeaderAndIsr RPC). Preferred-leader rebalancing
runs every ``leader.imbalance.check.interval.seconds`` when ``auto.leader.rebalance.enable``.

ElectLeaders (:meth:`Controller.elect_leaders`) runs on whichever broker a client sends it to
(Metadata names the controller, so clients send it here): it reads the partitions' assignments
and states from ZooKeeper, decides with :func:`election.admin_election` and writes each decision
with the same two checks while this broker is ACTIVE; on a broker that is not (the controller
moved after the client's Metadata) the write is conditioned on the state znode version alone,
as a leader's ISR change is, which is what keeps a concurrent controller decision from being
overwritten. A write that finds the state changed re-reads and decides again.

Reassignment (KIP-455; decisions in :func:`election.plan_reassignment` and
:func:`election.complete_reassignment`): AlterPartitionReassignments
(:meth:`Controller.alter_reassignments`) runs on the receiving broker like ElectLeaders and
writes, per topic, one transaction: the topic znode's new replica sets with their adding and
removing replicas (version-checked), plus the states of partitions whose ISR loses replicas at
once (a cancellation, a superseded target), with the controller epoch check while ACTIVE. The
brokers react through their assignment watches (new replicas open and fetch, removed ones are
deleted). The ACTIVE controller completes reassignments in its decision pass, which an ISR
change of a moving partition triggers (the broker pokes it when a state arrives): once every
target replica is in the ISR, one transaction moves the leader if needed, shrinks ISR and
replica set to the target and clears adding/removing. Partitions being reassigned are left
out of the preferred leader rebalance, as Kafka does (their leader moves when the
reassignment completes).

Runs as a task on the broker's event loop; ZooKeeper calls go through the session's executor
(broker/zk_session.py). Depends on the ZooKeeper session, the metadata cache and the config only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable

from loglake.broker import election
from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.zk_session import ZkSession
from loglake.catalog.zookeeper import (
    ControllerMovedError,
    PartitionState,
    ReplicaAssignment,
    StaleStateError,
    TopicReplicaAssignments,
)
from loglake.config import BrokerConfig
from loglake.errors import LoglakeError, RequestTimedOutError, UnknownTopicError

log = logging.getLogger(__name__)
RESCAN_S = 2.0
ELECTION_ATTEMPTS = 10
"""Reads and decisions per partition of one ElectLeaders before it answers with the conflict
(every attempt lost to a concurrent write of the same state znode)."""
ELECTION_WAIT_MAX_S = 30.0
"""Longest an ElectLeaders answer waits for the broker's metadata to show what it wrote."""
ElectionResult = dict[election.TopicPartition, PartitionState | LoglakeError]
"""(topic, partition) -> the state written (its leader elected), or why not."""
ReassignmentResult = dict[election.TopicPartition, LoglakeError | None]
"""(topic, partition) -> None when the reassignment (or cancellation) was written, or why not."""


class Controller:
    def __init__(self, zk: ZkSession, metadata: MetadataCache, config: BrokerConfig) -> None:
        """``zk``: the broker's session (lease and ZooKeeper calls); ``metadata``: its cache
        (topics, partition states, offline replicas, topic configs); ``config``: broker id
        and the leader rebalance settings."""
        self.zk = zk
        self.metadata = metadata
        self.config = config
        self.catalog = zk.catalog
        self.epoch: int | None = None
        self.epoch_version = -1
        self.changed = asyncio.Event()
        self._last_rebalance = time.monotonic()
        self._registrations: dict[int, int] = {}  # broker id -> czxid seen at the last decision

    @property
    def active(self) -> bool:
        return self.epoch is not None

    def poke(self) -> None:
        """Something changed (brokers, controller znode): re-evaluate soon."""
        self.changed.set()

    def resign(self) -> None:
        if self.epoch is not None:
            log.warning("broker %d is no longer controller (epoch %d)",
                        self.config.broker_id, self.epoch)
        self.epoch = None

    async def run(self) -> None:
        while True:
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except ControllerMovedError:
                self.resign()
            except Exception:
                log.exception("controller step failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), RESCAN_S)
            self.changed.clear()

    async def _step(self) -> None:
        if not self.zk.healthy():
            self.resign()
            return
        if self.epoch is None:
            won = await self.zk.call(self.catalog.try_become_controller,
                                     self.config.broker_id)
            if won is None:
                return
            self.epoch, self.epoch_version = won
            log.warning("broker %d is controller, epoch %d", self.config.broker_id, self.epoch)
        await self._decide()

    async def _decide(self) -> None:
        assert self.epoch is not None
        registered = await self.zk.call(self.catalog.brokers)
        live = set(registered)
        bounced = {b for b, info in registered.items()
                   if self._registrations.get(b, info.registration) != info.registration}
        states = await self.zk.call(self.catalog.all_partition_states)
        views = [
            election.PartitionView(topic, partition, replicas, state,
                                   unclean=self.metadata.unclean_election(topic))
            for (topic, partition), (replicas, state) in states.items()
        ]
        # A broker that re-registered since our last look (a bounce shorter than our reaction)
        # is treated as failed and restarted: its leaderships move to other in-sync replicas
        # where there are any, so it rejoins as a follower and truncates against the new epoch.
        writes = election.bounce_writes(views, live, bounced, self.epoch)
        if bounced:
            log.warning("controller: brokers %s re-registered (bounced)", sorted(bounced))
        moved = {(w.topic, w.partition) for w in writes}
        writes += [w for w in election.failover_writes(views, live, self.epoch)
                   if (w.topic, w.partition) not in moved]
        config = self.config
        moved = {(w.topic, w.partition) for w in writes}
        ongoing = await self.zk.call(self.catalog.ongoing_reassignments)
        reassigning = {(topic, p) for topic, found in ongoing.items()
                       for p, a in found.partitions.items() if a.reassigning}
        if (config.auto_leader_rebalance_enable and time.monotonic() - self._last_rebalance
                >= config.leader_imbalance_check_interval_seconds):
            self._last_rebalance = time.monotonic()
            writes += [w for w in election.preferred_leader_moves(views, live, self.epoch)
                       if (w.topic, w.partition) not in moved | reassigning]
        complete = True
        for write in writes:
            try:
                await self.zk.call(self.catalog.controller_write, write.topic,
                                   write.partition, write.state, self.epoch_version)
                log.warning("controller: %s-%d: %s (epoch %d)", write.topic, write.partition,
                            write.reason, write.state.leader_epoch)
            except StaleStateError:
                complete = False
                self.poke()  # re-read and decide again
        if complete:  # a bounce stays "unseen" until every decision about it is written
            self._registrations = {b: info.registration for b, info in registered.items()}
        written = {(w.topic, w.partition) for w in writes}
        for found in ongoing.values():
            await self._complete_reassignments(found, states, live, written)

    async def _complete_reassignments(
        self, found: TopicReplicaAssignments,
        states: dict[election.TopicPartition, tuple[tuple[int, ...], PartitionState]],
        live: set[int], skip: set[election.TopicPartition],
    ) -> None:
        """Complete every partition of one topic whose target replicas are all in the ISR,
        in one transaction (a partition written earlier in this pass waits for the next)."""
        assert self.epoch is not None
        changes = []
        for partition, assignment in found.partitions.items():
            key = (found.name, partition)
            if key in skip or key not in states:
                continue
            change = election.complete_reassignment(found.name, partition, assignment,
                                                    states[key][1], live, self.epoch)
            if change is not None:
                changes.append(change)
        if not changes:
            return
        try:
            await self._write_reassignment(found.name, changes, found.version, strict=True)
        except StaleStateError:
            self.poke()  # re-read and decide again
            return
        for change in changes:
            log.warning("controller: %s-%d: %s", change.topic, change.partition, change.reason)

    # ------------------------------------------------------------------ reassignment
    async def alter_reassignments(
        self, requested: dict[election.TopicPartition, tuple[int, ...] | None]
    ) -> ReassignmentResult:
        """Run an AlterPartitionReassignments request (see the module docstring): per
        partition, the target replicas or None to cancel. Each partition gets None (written)
        or a typed error."""
        live = set(await self.zk.call(self.catalog.brokers))
        by_topic: dict[str, dict[int, tuple[int, ...] | None]] = {}
        for (topic, partition), target in requested.items():
            by_topic.setdefault(topic, {})[partition] = target
        results: ReassignmentResult = {}
        for topic, wanted in by_topic.items():
            results.update(await self._reassign_topic(topic, wanted, live))
        self.poke()
        return results

    async def _reassign_topic(self, topic: str, wanted: dict[int, tuple[int, ...] | None],
                              live: set[int]) -> ReassignmentResult:
        for _ in range(ELECTION_ATTEMPTS):
            results: ReassignmentResult = {}
            found = await self.zk.call(self.catalog.replica_assignments, topic)
            if found is None:
                return {(topic, p): UnknownTopicError(f"Topic '{topic}' does not exist.")
                        for p in wanted}
            states = await self.zk.call(self._read_states, [(topic, p) for p in wanted])
            changes = []
            for partition, target in wanted.items():
                key = (topic, partition)
                current = found.partitions.get(partition)
                if current is None or key not in states:
                    results[key] = UnknownTopicError(
                        f"The partition {topic}-{partition} does not exist.")
                    continue
                try:
                    change = election.plan_reassignment(
                        topic, partition, current, target, states[key][1], live,
                        self.epoch or 0)
                except LoglakeError as exc:
                    results[key] = exc
                    continue
                if change.assignment == current and change.state is None:
                    results[key] = None  # already so: nothing to write
                else:
                    changes.append(change)
            if changes:
                try:
                    await self._write_reassignment(topic, changes, found.version)
                except StaleStateError:
                    continue
            for change in changes:
                results[(topic, change.partition)] = None
                log.warning("%s-%d: %s", topic, change.partition, change.reason)
            return results
        return {(topic, p): LoglakeError(
            f"The assignment of {topic}-{p} kept changing during the reassignment.")
            for p in wanted}

    async def _write_reassignment(self, topic: str, changes: list[election.ReassignmentChange],
                                  version: int, *, strict: bool = False) -> None:
        """One topic's reassignment changes in one transaction: with the controller epoch
        check while ACTIVE, else with the znode versions alone (as :meth:`_write`).
        ``strict`` (the controller's own decisions): ControllerMovedError propagates."""
        assignments: dict[int, ReplicaAssignment] = {c.partition: c.assignment for c in changes}
        states = {c.partition: c.state for c in changes if c.state is not None}
        if self.epoch is not None:
            epoch_version = self.epoch_version
            try:
                await self.zk.call(lambda: self.catalog.write_replica_assignments(
                    topic, assignments, version, states, epoch_version=epoch_version))
                return
            except ControllerMovedError:
                if strict:
                    raise
                self.resign()
        await self.zk.call(self.catalog.write_replica_assignments, topic, assignments,
                           version, states)

    # ------------------------------------------------------------------ ElectLeaders
    async def elect_leaders(
        self, partitions: Iterable[election.TopicPartition] | None, election_type: int
    ) -> ElectionResult:
        """Run an ElectLeaders request (see the module docstring); ``partitions`` None: every
        partition of every topic. Each partition gets the state written (with its new leader)
        or a typed error; partitions this broker's metadata does not know are not looked up."""
        registered = await self.zk.call(self.catalog.brokers)
        if partitions is None:
            states = await self.zk.call(self.catalog.all_partition_states)
            wanted = sorted(states)
        else:
            wanted = list(dict.fromkeys(partitions))
            known = [key for key in wanted if key[0] in self.metadata.topics
                     and key[1] in self.metadata.topics[key[0]].assignment]
            states = await self.zk.call(self._read_states, known) if known else {}
        results: ElectionResult = {}
        for key in wanted:
            found = states.get(key)
            for _ in range(ELECTION_ATTEMPTS):
                if found is None:
                    results[key] = UnknownTopicError(
                        f"The partition {key[0]}-{key[1]} does not exist.")
                    break
                replicas, state = found
                offline = self.metadata.offline_replicas.get(key, frozenset())
                view = election.PartitionView(key[0], key[1], replicas, state)
                try:
                    write = election.admin_election(view, set(registered) - offline,
                                                    election_type, self.epoch or 0)
                    await self._write(write)
                except StaleStateError:
                    found = (await self.zk.call(self._read_states, [key])).get(key)
                    continue
                except LoglakeError as exc:
                    results[key] = exc
                    break
                log.warning("%s-%d: %s (epoch %d)", key[0], key[1], write.reason,
                            write.state.leader_epoch)
                results[key] = write.state
                break
            else:
                results[key] = LoglakeError(
                    f"The state of {key[0]}-{key[1]} kept changing during the election.")
        return results

    async def _write(self, write: election.StateWrite) -> None:
        """One decision: with the controller epoch check while ACTIVE, else with the state
        znode version alone. StaleStateError when the state changed since it was read."""
        if self.epoch is not None:
            try:
                await self.zk.call(self.catalog.controller_write, write.topic,
                                   write.partition, write.state, self.epoch_version)
                return
            except ControllerMovedError:
                self.resign()
        await self.zk.call(self.catalog.update_partition_state, write.topic,
                           write.partition, write.state)

    def _read_states(self, keys: Iterable[election.TopicPartition]
                     ) -> dict[election.TopicPartition, tuple[tuple[int, ...], PartitionState]]:
        """Assignment and state of ``keys`` that exist (worker thread)."""
        catalog = self.catalog
        result = {}
        topics: dict[str, dict[int, tuple[int, ...]] | None] = {}
        for topic, partition in keys:
            if topic not in topics:
                meta = catalog.topic(topic)
                topics[topic] = None if meta is None else meta.assignment
            assignment = topics[topic]
            if assignment is None or partition not in assignment:
                continue
            state = catalog.partition_state(topic, partition)
            if state is not None:
                result[(topic, partition)] = (assignment[partition], state)
        return result

    async def await_elected(self, results: ElectionResult, timeout: float) -> ElectionResult:
        """Wait (at most ``timeout`` s, ELECTION_WAIT_MAX_S) until this broker's metadata shows
        every state written, or a later one, so a client's next Metadata request sees the new
        leader (Kafka's DelayedElectLeader); partitions still not shown then answer
        REQUEST_TIMED_OUT."""
        deadline = time.monotonic() + min(max(timeout, 0.0), ELECTION_WAIT_MAX_S)

        def pending() -> list[election.TopicPartition]:
            return [key for key, written in results.items()
                    if isinstance(written, PartitionState)
                    and ((state := self.metadata.partition_states.get(key)) is None
                         or state.leader_epoch < written.leader_epoch)]

        while pending() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        late = pending()
        return {**results, **{key: RequestTimedOutError(
            f"The election of {key[0]}-{key[1]} was written but not seen within the "
            "request timeout.") for key in late}}
