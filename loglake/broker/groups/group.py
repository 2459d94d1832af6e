"""One consumer group's state (Kafka's classic group protocol), held by its coordinator.

States (Kafka's ``GroupState``)::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable --join of a new member, leader rejoin, protocol change, leave, session expiry-->
        PreparingRebalance
    any --last member gone--> Empty;  Empty --DeleteGroups--> Dead

Every assignment to ``Group.state`` is checked against Kafka's allowed-transitions table
(:mod:`loglake.broker.groups.group_states`) and an illegal one raises
IllegalGroupStateTransition; only :meth:`Group.from_json` (a group restored by a new
coordinator) sets the state without a transition.

Invariants: ``generation`` increases by one at every completed join phase; only members of the
current generation may sync, heartbeat or commit; a static member (``group.instance.id``) maps
to exactly one member id at a time, and a newer join with that instance id fences the older
member id (FENCED_INSTANCE_ID).

Not thread-safe: owned by the coordinator on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass, field
from typing import Any

from loglake.broker.groups.group_states import GroupState, check_transition

__all__ = ["Group", "GroupState", "Member"]


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    deadline: float = 0.0  # loop time when the session expires without a heartbeat
    join_future: asyncio.Future[dict[str, Any]] | None = field(default=None, repr=False)
    sync_future: asyncio.Future[bytes] | None = field(default=None, repr=False)

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def to_json(self, protocol: str | None) -> dict[str, Any]:
        return {
            "member_id": self.member_id, "group_instance_id": self.group_instance_id,
            "client_id": self.client_id, "client_host": self.client_host,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "protocol_type": self.protocol_type,
            "protocols": [[n, base64.b64encode(m).decode()] for n, m in self.protocols
                          if protocol is None or n == protocol],
            "assignment": base64.b64encode(self.assignment).decode(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Member:
        return cls(
            member_id=data["member_id"], group_instance_id=data.get("group_instance_id"),
            client_id=data.get("client_id", ""), client_host=data.get("client_host", ""),
            session_timeout_ms=int(data["session_timeout_ms"]),
            rebalance_timeout_ms=int(data["rebalance_timeout_ms"]),
            protocol_type=data.get("protocol_type", "consumer"),
            protocols=[(n, base64.b64decode(m)) for n, m in data.get("protocols", [])],
            assignment=base64.b64decode(data.get("assignment", "")),
        )


@dataclass
class Group:
    group_id: str
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: set[str] = field(default_factory=set)  # ids handed out (KIP-394)
    rebalance_deadline: float = 0.0
    empty_since_ms: int = 0
    zk_version: int = -1  # version of the persisted state znode (-1: none yet)
    _state: GroupState = field(default=GroupState.EMPTY, init=False)

    @property
    def state(self) -> GroupState:
        return self._state

    @state.setter
    def state(self, target: GroupState) -> None:
        """Move to ``target``; IllegalGroupStateTransition if the table does not allow it."""
        check_transition(self.group_id, self._state, target)
        self._state = target

    def is_empty(self) -> bool:
        return not self.members

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Would a member with these protocols fit (same type, at least one common name)?"""
        if self.is_empty():
            return bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        return bool(self._candidates() & {name for name, _ in protocols})

    def _candidates(self) -> set[str]:
        names: set[str] | None = None
        for member in self.members.values():
            own = {name for name, _ in member.protocols}
            names = own if names is None else names & own
        return names or set()

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer (Kafka's vote)."""
        candidates = self._candidates()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(sorted(votes), key=lambda name: votes[name])

    def all_joined(self) -> bool:
        return all(m.join_future is not None for m in self.members.values())

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1, "state": self.state.value, "generation": self.generation,
            "protocol_type": self.protocol_type, "protocol": self.protocol,
            "leader": self.leader, "empty_since_ms": self.empty_since_ms,
            "members": [m.to_json(self.protocol) for m in self.members.values()],
        }

    @classmethod
    def from_json(cls, group_id: str, data: dict[str, Any], zk_version: int) -> Group:
        members = [Member.from_json(m) for m in data.get("members", [])]
        group = cls(
            group_id=group_id, generation=int(data.get("generation", 0)),
            protocol_type=data.get("protocol_type"), protocol=data.get("protocol"),
            leader=data.get("leader"), empty_since_ms=int(data.get("empty_since_ms", 0)),
            members={m.member_id: m for m in members}, zk_version=zk_version,
        )
        group.static = {m.group_instance_id: m.member_id for m in members if m.group_instance_id}
        state = GroupState(data.get("state", "Empty"))
        # a group persisted mid-rebalance restarts its rebalance under the new coordinator
        group._state = (GroupState.STABLE if state is GroupState.STABLE and members
                        else GroupState.EMPTY if not members else GroupState.PREPARING_REBALANCE)
        return group
