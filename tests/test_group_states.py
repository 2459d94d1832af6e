"""In-process unit tests of a consumer group's state machine (no broker, no ZooKeeper).

Every (current, target) pair of states is tried against Kafka's allowed-transitions table
(``GroupMetadata``, classic protocol), written out here independently of the code: allowed
transitions happen, every other one is refused with IllegalGroupStateTransition and leaves the
group as it was.
"""

from __future__ import annotations

import itertools

import pytest

from loglake.broker.groups.group import Group, Member
from loglake.broker.groups.group_states import (
    VALID_PREVIOUS_STATES,
    GroupState,
    IllegalGroupStateTransition,
    is_valid_transition,
)
from loglake.errors import LoglakeError

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    GroupState.EMPTY, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE, GroupState.DEAD)

KAFKA_ALLOWED = {
    (STABLE, PREPARING), (COMPLETING, PREPARING), (EMPTY, PREPARING),
    (PREPARING, COMPLETING),
    (COMPLETING, STABLE),
    (PREPARING, EMPTY),
    (STABLE, DEAD), (PREPARING, DEAD), (COMPLETING, DEAD), (EMPTY, DEAD), (DEAD, DEAD),
}
"""Kafka's GroupMetadata validPreviousStates, as (from, to) pairs."""

PATH_TO = {
    EMPTY: [],
    PREPARING: [PREPARING],
    COMPLETING: [PREPARING, COMPLETING],
    STABLE: [PREPARING, COMPLETING, STABLE],
    DEAD: [DEAD],
}
"""Allowed steps from a new (Empty) group to each state."""


def group_in(state: GroupState) -> Group:
    group = Group("g")
    for step in PATH_TO[state]:
        group.state = step
    assert group.state is state
    return group


def member(member_id: str) -> Member:
    return Member(member_id, None, "client", "/127.0.0.1", 10_000, 30_000, "consumer",
                  [("range", b"meta")])


def test_the_table_is_kafkas() -> None:
    table = {(before, after) for after, befores in VALID_PREVIOUS_STATES.items()
             for before in befores}
    assert table == KAFKA_ALLOWED
    assert set(VALID_PREVIOUS_STATES) == set(GroupState)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(GroupState, GroupState)),
                         ids=lambda state: state.value)
def test_each_transition_against_the_table(current: GroupState, target: GroupState) -> None:
    group = group_in(current)
    assert is_valid_transition(current, target) == ((current, target) in KAFKA_ALLOWED)
    if (current, target) in KAFKA_ALLOWED:
        group.state = target
        assert group.state is target
    else:
        with pytest.raises(IllegalGroupStateTransition,
                           match=f"cannot move from {current.value} to {target.value}"):
            group.state = target
        assert group.state is current


def test_refusal_is_a_typed_error_with_a_wire_code() -> None:
    with pytest.raises(LoglakeError) as raised:
        Group("g").state = STABLE  # Empty -> Stable skips the join and sync phases
    assert raised.value.code.name == "unknown_server_error"
    assert "only from CompletingRebalance" in str(raised.value)


def test_a_rebalance_cycle_of_the_classic_protocol() -> None:
    """Join, sync, a second member joins, the first leaves, the last leaves, the group is
    deleted: the sequence a coordinator drives, every step through the guarded setter."""
    group = Group("g")
    group.members["a"] = member("a")
    group.state = PREPARING          # first JoinGroup
    group.generation += 1
    group.state = COMPLETING         # everyone joined: JoinGroup responses
    group.state = STABLE             # leader's SyncGroup
    group.members["b"] = member("b")
    group.state = PREPARING          # a new member joins
    group.state = COMPLETING
    group.state = STABLE
    with pytest.raises(IllegalGroupStateTransition):
        group.state = EMPTY          # members leave through a rebalance, never from Stable
    del group.members["a"], group.members["b"]
    group.state = PREPARING
    group.state = EMPTY              # the join phase ends with no members
    group.state = DEAD               # DeleteGroups
    group.state = DEAD               # Dead stays Dead
    for target in (EMPTY, PREPARING, COMPLETING, STABLE):
        with pytest.raises(IllegalGroupStateTransition):
            group.state = target


@pytest.mark.parametrize(("persisted", "members", "restored"), [
    ("Stable", 1, STABLE), ("CompletingRebalance", 1, PREPARING),
    ("PreparingRebalance", 1, PREPARING), ("Stable", 0, EMPTY), ("Empty", 0, EMPTY),
])
def test_restored_group_is_not_a_transition(persisted: str, members: int,
                                            restored: GroupState) -> None:
    """A new coordinator loads the persisted state: a group caught mid-rebalance restarts its
    rebalance, and loading is no transition (Stable is restored without passing Completing)."""
    data = {"state": persisted, "generation": 4, "protocol_type": "consumer",
            "protocol": "range", "leader": "a",
            "members": [member(f"m{i}").to_json("range") for i in range(members)]}
    group = Group.from_json("g", data, zk_version=3)
    assert group.state is restored and group.generation == 4 and group.zk_version == 3
    assert Group.from_json("g", group.to_json(), zk_version=3).state is restored
