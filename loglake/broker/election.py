"""Controller decisions as pure functions: cluster state in, partition-state writes out.

Nothing here touches ZooKeeper or the network; :mod:`loglake.broker.controller` reads the state,
calls these functions and applies the writes through one version-checked path.

Rules (Kafka's, ZooKeeper mode):

* **Leader election on broker loss** (``elect_leader``): the new leader is the first replica in
  assignment order that is alive and in the ISR; the ISR shrinks to its live members. If no ISR
  member is alive the partition goes offline (leader -1, ISR kept as the last known one) unless
  ``unclean.leader.election.enable`` allows any live replica (which may lose acknowledged data).
* Every leader change bumps the leader epoch, so fenced ex-leaders and stale fetches are detected.
* **Offline recovery**: an offline partition elects again as soon as an ISR member (or, unclean,
  any replica) is back.
* **Preferred leader** (``preferred_leader_moves``): leadership returns to the first assigned
  replica when it is alive and in the ISR.
* **Controlled shutdown** (``shutdown_moves``): a stopping broker hands each partition it leads to
  another live ISR member and leaves the ISR of the others while enough replicas remain.
* **Elections an operator asks for** (ElectLeaders, ``admin_election``; Kafka's
  ``KafkaController.processReplicaLeaderElection``): *preferred* moves leadership to the first
  assigned replica when it is alive and in the ISR (ISR unchanged; ELECTION_NOT_NEEDED when it
  leads already, PREFERRED_LEADER_NOT_AVAILABLE otherwise); *unclean* elects only for a
  partition without a live leader (ELECTION_NOT_NEEDED otherwise): the first live ISR member,
  else the first live replica with an ISR of itself, whatever ``unclean.leader.election.enable``
  says (ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is alive).
* **Reassignment** (KIP-455; ``plan_reassignment``, ``complete_reassignment``): with ORS the
  original replicas, TRS the target, the partition's replica set becomes RS = TRS + ORS
  (target first), ``adding`` = RS - ORS, ``removing`` = RS - TRS (Kafka's
  ``ReplicaAssignment.reassignTo``). The new replicas fetch as followers and join the ISR as
  any follower does. Once every target replica is in the ISR the reassignment completes in one
  write: the leader stays if it is a live target replica, else the first live target replica
  leads; the ISR keeps only target replicas; RS = TRS; the leader epoch is bumped when the
  leader changes or replicas leave (fencing them). A new reassignment of a moving partition
  starts from its original replicas; replicas of the old target that the new one drops leave
  the ISR at once (with an epoch bump), as do the adding replicas of a *cancelled*
  reassignment (null target: back to ORS; NO_REASSIGNMENT_IN_PROGRESS when none runs).
  Targets are checked as Kafka's ``validateReplicas`` does: not empty, no duplicates, no
  negative ids, every added replica on a live broker (INVALID_REPLICA_ASSIGNMENT).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass, replace

from loglake.catalog.zookeeper import PartitionState, ReplicaAssignment
from loglake.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    NoReassignmentInProgressError,
    PreferredLeaderNotAvailableError,
)

NO_LEADER = -1
TopicPartition = tuple[str, int]
PREFERRED = 0
UNCLEAN = 1
"""ElectLeaders' ``election_type`` values (Kafka's ``ElectionType``)."""


@dataclass(frozen=True)
class PartitionView:
    """What the controller knows of one partition."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    state: PartitionState
    unclean: bool = False


@dataclass(frozen=True)
class StateWrite:
    """Replace the state of ``topic``/``partition`` with ``state`` if its version is unchanged."""

    topic: str
    partition: int
    state: PartitionState
    reason: str


def elect_leader(
    replicas: Iterable[int], isr: Iterable[int], live: Set[int], *, unclean: bool
) -> tuple[int, tuple[int, ...]] | None:
    """(leader, isr) for a partition whose leader must change; None if nobody can lead."""
    in_sync = set(isr)
    live_isr = tuple(r for r in replicas if r in live and r in in_sync)
    if live_isr:
        return live_isr[0], tuple(r for r in isr if r in live)
    if unclean:
        live_replicas = [r for r in replicas if r in live]
        if live_replicas:
            return live_replicas[0], (live_replicas[0],)
    return None


def _new_state(
    old: PartitionState, leader: int, isr: tuple[int, ...], epoch: int
) -> PartitionState:
    return replace(old, leader=leader, leader_epoch=old.leader_epoch + 1, isr=isr,
                   controller_epoch=epoch)


def failover_writes(
    partitions: Iterable[PartitionView], live: Set[int], controller_epoch: int
) -> list[StateWrite]:
    """Writes that give every partition with a dead (or no) leader a new leader, if possible."""
    writes = []
    for view in partitions:
        state = view.state
        if state.leader in live:
            continue
        elected = elect_leader(view.replicas, state.isr, live, unclean=view.unclean)
        if elected is None:
            if state.leader != NO_LEADER:
                writes.append(StateWrite(
                    view.topic, view.partition,
                    _new_state(state, NO_LEADER, state.isr, controller_epoch),
                    f"no live in-sync replica of {view.replicas}: offline",
                ))
            continue
        leader, isr = elected
        if not isr:
            isr = (leader,)
        writes.append(StateWrite(
            view.topic, view.partition, _new_state(state, leader, isr, controller_epoch),
            f"leader {state.leader} is gone: elected {leader}",
        ))
    return writes


def bounce_writes(
    partitions: Iterable[PartitionView], live: Set[int], bounced: Set[int], controller_epoch: int
) -> list[StateWrite]:
    """Partitions led by a broker that restarted since the controller last looked.

    The restarted broker counts as failed: another live in-sync replica takes over and the
    restarted one leaves the ISR (it rejoins after catching up). When it is the only in-sync
    replica it keeps leading, but under a new epoch, so stale fetches are fenced.
    """
    writes = []
    for view in partitions:
        state = view.state
        if state.leader not in bounced:
            continue
        others = set(live) - set(bounced)
        elected = elect_leader(view.replicas, state.isr, others, unclean=False)
        if elected is not None:
            leader, isr = elected
            writes.append(StateWrite(
                view.topic, view.partition, _new_state(state, leader, isr, controller_epoch),
                f"leader {state.leader} restarted: elected {leader}",
            ))
        elif state.leader in live:
            writes.append(StateWrite(
                view.topic, view.partition,
                _new_state(state, state.leader, state.isr, controller_epoch),
                f"leader {state.leader} restarted and is the only in-sync replica: new epoch",
            ))
    return writes


def preferred_leader_moves(
    partitions: Iterable[PartitionView], live: Set[int], controller_epoch: int
) -> list[StateWrite]:
    """Move leadership back to the preferred (first assigned) replica where it can lead."""
    writes = []
    for view in partitions:
        preferred = view.replicas[0]
        state = view.state
        if state.leader == preferred or preferred not in live or preferred not in state.isr:
            continue
        if state.leader not in live:
            continue  # failover handles it
        writes.append(StateWrite(
            view.topic, view.partition,
            _new_state(state, preferred, state.isr, controller_epoch),
            f"preferred replica {preferred} is back in sync",
        ))
    return writes


def shutdown_moves(
    partitions: Iterable[PartitionView], stopping: int, live: Set[int]
) -> list[StateWrite]:
    """Hand leadership away from ``stopping`` and take it out of ISRs that stay large enough."""
    others = set(live) - {stopping}
    writes = []
    for view in partitions:
        state = view.state
        if stopping not in state.isr and state.leader != stopping:
            continue
        remaining = tuple(r for r in state.isr if r != stopping)
        if state.leader == stopping:
            candidates = [r for r in view.replicas if r in others and r in remaining]
            if not candidates:
                continue  # nobody in sync can take over: keep leading until the end
            writes.append(StateWrite(
                view.topic, view.partition,
                replace(state, leader=candidates[0], leader_epoch=state.leader_epoch + 1,
                        isr=remaining),
                f"controlled shutdown of {stopping}: leadership to {candidates[0]}",
            ))
        elif remaining:
            writes.append(StateWrite(
                view.topic, view.partition, replace(state, isr=remaining),
                f"controlled shutdown of {stopping}: leaves the ISR",
            ))
    return writes


def isr_change(
    state: PartitionState, me: int, replicas: tuple[int, ...], lagging: Set[int],
    caught_up: Set[int],
) -> PartitionState | None:
    """The leader's ISR update: drop ``lagging`` followers, add ``caught_up`` ones (same epoch).

    Returns None when nothing changes. The leader itself always stays in its ISR.
    """
    if state.leader != me:
        return None
    isr = [r for r in state.isr if r == me or r not in lagging]
    isr += [r for r in replicas if r in caught_up and r not in isr]
    ordered = tuple(r for r in replicas if r in isr)
    if set(ordered) == set(state.isr):
        return None
    return replace(state, isr=ordered)


def admin_election(
    view: PartitionView, live: Set[int], election_type: int, controller_epoch: int
) -> StateWrite:
    """The write an ElectLeaders request asks for on one partition (see the module docstring).

    ``live``: brokers that can lead it now (alive, and their replica of it not offline).
    Raises ElectionNotNeededError, PreferredLeaderNotAvailableError,
    EligibleLeadersNotAvailableError or InvalidRequestError (unknown election type).
    """
    state = view.state
    name = f"{view.topic}-{view.partition}"
    if election_type == PREFERRED:
        preferred = view.replicas[0]
        if state.leader == preferred:
            raise ElectionNotNeededError(
                f"Leader of {name} is already the preferred replica {preferred}.")
        if preferred not in live or preferred not in state.isr:
            where = "not alive" if preferred not in live else "not in the ISR"
            raise PreferredLeaderNotAvailableError(
                f"Failed to elect leader for partition {name} under strategy "
                f"PreferredReplicaPartitionLeaderElectionStrategy: preferred replica "
                f"{preferred} is {where} (ISR {list(state.isr)}).")
        return StateWrite(view.topic, view.partition,
                          _new_state(state, preferred, state.isr, controller_epoch),
                          f"preferred replica election: leadership to {preferred}")
    if election_type == UNCLEAN:
        if state.leader != NO_LEADER and state.leader in live:
            raise ElectionNotNeededError(f"{name} has a live leader ({state.leader}).")
        elected = elect_leader(view.replicas, state.isr, live, unclean=True)
        if elected is None:
            raise EligibleLeadersNotAvailableError(
                f"Failed to elect leader for partition {name} under strategy "
                f"OfflinePartitionLeaderElectionStrategy(true): no replica of "
                f"{list(view.replicas)} is alive.")
        leader, isr = elected
        clean = leader in state.isr
        return StateWrite(view.topic, view.partition,
                          _new_state(state, leader, isr or (leader,), controller_epoch),
                          f"{'' if clean else 'unclean '}election asked for: elected {leader}")
    raise InvalidRequestError(f"Unknown election type {election_type}.")


# ------------------------------------------------------------------ reassignment (KIP-455)


@dataclass(frozen=True)
class ReassignmentChange:
    """One partition's part of a reassignment write: its new assignment and, when replicas
    leave the ISR or the leader moves, its new state (None: the state stays)."""

    topic: str
    partition: int
    assignment: ReplicaAssignment
    state: PartitionState | None
    reason: str


def reassign_to(current: ReplicaAssignment, target: Sequence[int]) -> ReplicaAssignment:
    """Kafka's ``reassignTo``: RS = target + original replicas (target first), the replicas
    to add and to remove. A target equal to the original set (a cancellation) or a reordering
    of it is not a reassignment: nothing to add or remove."""
    original = current.original
    full = tuple(dict.fromkeys((*target, *original)))
    return ReplicaAssignment(full, tuple(r for r in full if r not in original),
                             tuple(r for r in full if r not in target))


def validate_target(name: str, target: Sequence[int], current: ReplicaAssignment,
                    live: Set[int]) -> None:
    """Kafka's ``validateReplicas``; raises InvalidReplicaAssignmentError."""
    listed = ", ".join(str(r) for r in target)
    if not target:
        raise InvalidReplicaAssignmentError(
            f"Empty replica list specified in partition reassignment of {name}.")
    if len(set(target)) != len(target):
        raise InvalidReplicaAssignmentError(
            f"Duplicate replica ids in partition reassignment replica list: [{listed}].")
    if any(r < 0 for r in target):
        raise InvalidReplicaAssignmentError(f"Invalid broker id in replica list: [{listed}].")
    adding = reassign_to(current, target).adding
    if not set(adding) <= set(live):
        raise InvalidReplicaAssignmentError(
            f"Replica assignment has brokers that are not alive. Replica list: "
            f"{list(adding)}, live broker list: {sorted(live)}.")


def plan_reassignment(
    topic: str, partition: int, current: ReplicaAssignment, target: Sequence[int] | None,
    state: PartitionState, live: Set[int], controller_epoch: int,
) -> ReassignmentChange:
    """What an AlterPartitionReassignments entry writes (see the module docstring);
    ``target`` None cancels. Raises NoReassignmentInProgressError or
    InvalidReplicaAssignmentError."""
    name = f"{topic}-{partition}"
    if target is None:
        if not current.reassigning:
            raise NoReassignmentInProgressError(
                f"There is no ongoing reassignment of partition {name} to cancel.")
        target = current.original
        what = f"reassignment cancelled: back to {list(target)}"
    else:
        validate_target(name, target, current, live)
        what = f"reassignment to {list(target)}"
    assignment = reassign_to(current, target)
    unneeded = set(current.replicas) - set(assignment.replicas)
    new_state = None
    if unneeded & ({state.leader} | set(state.isr)):
        isr = tuple(r for r in state.isr if r not in unneeded)
        leader = state.leader
        if leader in unneeded:
            elected = elect_leader(assignment.replicas, isr, live, unclean=False)
            if elected is None:
                raise InvalidReplicaAssignmentError(
                    f"Cannot apply the {what} of {name}: its leader {leader} would leave and "
                    f"no remaining replica is alive and in sync ({list(state.isr)}).")
            leader, isr = elected
        new_state = replace(state, leader=leader, leader_epoch=state.leader_epoch + 1,
                            isr=isr or (leader,), controller_epoch=controller_epoch)
        what += f"; {sorted(unneeded)} leave the ISR"
    return ReassignmentChange(topic, partition, assignment, new_state, what)


def complete_reassignment(
    topic: str, partition: int, assignment: ReplicaAssignment, state: PartitionState,
    live: Set[int], controller_epoch: int,
) -> ReassignmentChange | None:
    """The write that finishes a reassignment once every target replica is in the ISR (see
    the module docstring); None while it cannot finish yet (or there is none)."""
    if not assignment.reassigning:
        return None
    target = assignment.target
    if not set(target) <= set(state.isr):
        return None
    if state.leader in target and state.leader in live:
        leader = state.leader
    else:
        candidates = [r for r in target if r in live]
        if not candidates:
            return None
        leader = candidates[0]
    isr = tuple(r for r in state.isr if r in target)
    new_state = None
    if leader != state.leader or isr != state.isr:
        new_state = replace(state, leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                            controller_epoch=controller_epoch)
    reason = f"reassignment to {list(target)} complete"
    if leader != state.leader:
        reason += f": leadership {state.leader} -> {leader}"
    if assignment.removing:
        reason += f"; {list(assignment.removing)} removed"
    return ReassignmentChange(topic, partition, ReplicaAssignment(target), new_state, reason)
