"""The states of a classic consumer group and the transitions allowed between them.

Kafka's ``GroupMetadata`` (classic protocol) lists, for every state, the states a group may enter
it from; ``transitionTo`` refuses anything else with an IllegalStateException. The same table
here (:data:`VALID_PREVIOUS_STATES`)::

    PreparingRebalance  <- Stable, CompletingRebalance, Empty
    CompletingRebalance <- PreparingRebalance
    Stable              <- CompletingRebalance
    Empty               <- PreparingRebalance
    Dead                <- Stable, PreparingRebalance, CompletingRebalance, Empty, Dead

Every state change of a :class:`loglake.broker.groups.group.Group` goes through
:func:`check_transition` (its ``state`` setter calls it); restoring a persisted group under a new
coordinator is not a transition and sets the state directly (``Group.from_json``).

Pure data and functions: safe from any thread.
"""

from __future__ import annotations

import enum

from kio.schema.errors import ErrorCode

from loglake.errors import LoglakeError


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}
"""For each target state, the states it may be entered from (Kafka's GroupMetadata)."""


class IllegalGroupStateTransition(LoglakeError):
    """A group was asked to move between two states the table does not connect (a coordinator
    bug, as Kafka's IllegalStateException is): answered as UNKNOWN_SERVER_ERROR."""

    code = ErrorCode.unknown_server_error


def is_valid_transition(current: GroupState, target: GroupState) -> bool:
    """Whether a group in ``current`` may move to ``target``."""
    return current in VALID_PREVIOUS_STATES[target]


def check_transition(group_id: str, current: GroupState, target: GroupState) -> None:
    """Raise :class:`IllegalGroupStateTransition` unless ``current -> target`` is allowed."""
    if not is_valid_transition(current, target):
        allowed = ", ".join(sorted(s.value for s in VALID_PREVIOUS_STATES[target]))
        raise IllegalGroupStateTransition(
            f"group {group_id}: cannot move from {current.value} to {target.value} "
            f"(only from {allowed})")
