"""Group protocol edge cases with raw requests (tests/wire.py): the errors real clients rely on.

JoinGroup v4+ without a member id gets MEMBER_ID_REQUIRED and a member id to rejoin with;
OffsetCommit from a stale generation, an unknown member or a fenced static instance is rejected
(ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID) and leaves the committed offset alone.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.admin_util import create_topic
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(180)

JOIN_GROUP, SYNC_GROUP, OFFSET_COMMIT, OFFSET_FETCH, LEAVE_GROUP = 11, 14, 8, 9, 13
JOIN_V, SYNC_V, COMMIT_V, FETCH_V, LEAVE_V = 5, 3, 7, 5, 3
SESSION_MS = 10_000
REBALANCE_MS = 15_000


def _join(client: WireClient, group: str, member_id: str = "",
          instance_id: str | None = None) -> Any:
    return client.request(JOIN_GROUP, JOIN_V, {
        "group_id": group, "session_timeout": SESSION_MS, "rebalance_timeout": REBALANCE_MS,
        "member_id": member_id, "group_instance_id": instance_id, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x01"}],
    })


def _sync(client: WireClient, group: str, generation: int, member_id: str,
          instance_id: str | None = None, assignments: dict[str, bytes] | None = None) -> Any:
    return client.request(SYNC_GROUP, SYNC_V, {
        "group_id": group, "generation_id": generation, "member_id": member_id,
        "group_instance_id": instance_id,
        "assignments": [{"member_id": m, "assignment": a}
                        for m, a in (assignments or {}).items()],
    })


def _commit(client: WireClient, group: str, topic: str, offset: int, *, generation: int,
            member_id: str, instance_id: str | None = None) -> ErrorCode:
    response = client.request(OFFSET_COMMIT, COMMIT_V, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "group_instance_id": instance_id,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}],
    })
    return ErrorCode(response.topics[0].partitions[0].error_code)


def _committed(client: WireClient, group: str, topic: str) -> int:
    response = client.request(OFFSET_FETCH, FETCH_V, {
        "group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]})
    assert response.error_code == ErrorCode.none
    return int(response.topics[0].partitions[0].committed_offset)


def _leave(client: WireClient, group: str, member_id: str,
           instance_id: str | None = None) -> None:
    client.request(LEAVE_GROUP, LEAVE_V, {"group_id": group, "members": [
        {"member_id": member_id, "group_instance_id": instance_id}]})


def _stable_single_member(client: WireClient, group: str,
                          instance_id: str | None = None) -> tuple[str, int]:
    """Join ``group`` as its only member and sync; return (member id, generation)."""
    first = _join(client, group, instance_id=instance_id)
    if instance_id is None:
        assert first.error_code == ErrorCode.member_id_required
        first = _join(client, group, first.member_id)
    assert first.error_code == ErrorCode.none, first
    assert first.leader == first.member_id
    synced = _sync(client, group, first.generation_id, first.member_id, instance_id,
                   {first.member_id: b"assignment-1"})
    assert synced.error_code == ErrorCode.none
    assert bytes(synced.assignment) == b"assignment-1"
    return first.member_id, first.generation_id


@pytest.fixture
def group_id() -> str:
    return f"wire-group-{uuid.uuid4().hex[:8]}"


def test_member_id_required_on_join_v4_and_later(cluster: Any, group_id: str) -> None:
    with WireClient.connect(cluster.bootstrap_servers, timeout=30) as client:
        response = _join(client, group_id)
        assert response.error_code == ErrorCode.member_id_required  # 79
        assert response.member_id  # the id to rejoin with
        assert response.generation_id == -1
        rejoined = _join(client, group_id, response.member_id)
        assert rejoined.error_code == ErrorCode.none
        assert rejoined.member_id == response.member_id
        _leave(client, group_id, response.member_id)


def test_stale_generation_and_unknown_member_commits_rejected(
    cluster: Any, topic_name: str, group_id: str
) -> None:
    create_topic(cluster.bootstrap_servers, topic_name)
    with WireClient.connect(cluster.bootstrap_servers, timeout=30) as client:
        member, generation = _stable_single_member(client, group_id)
        ok = _commit(client, group_id, topic_name, 5, generation=generation, member_id=member)
        assert ok == ErrorCode.none
        stale = _commit(client, group_id, topic_name, 9, generation=generation - 1,
                        member_id=member)
        assert stale == ErrorCode.illegal_generation  # 22
        future = _commit(client, group_id, topic_name, 9, generation=generation + 1,
                         member_id=member)
        assert future == ErrorCode.illegal_generation
        unknown = _commit(client, group_id, topic_name, 9, generation=generation,
                          member_id="not-a-member")
        assert unknown == ErrorCode.unknown_member_id  # 25
        # a commit outside the group protocol (generation -1, no member) needs an empty group
        outside = _commit(client, group_id, topic_name, 9, generation=-1, member_id="")
        assert outside != ErrorCode.none
        assert _committed(client, group_id, topic_name) == 5
        _leave(client, group_id, member)
        # once the member left: its old generation is gone too, simple commits are accepted
        after = _commit(client, group_id, topic_name, 9, generation=generation, member_id=member)
        assert after in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation)
        simple = _commit(client, group_id, topic_name, 7, generation=-1, member_id="")
        assert simple == ErrorCode.none
        assert _committed(client, group_id, topic_name) == 7


def test_fenced_static_instance_cannot_commit(
    cluster: Any, topic_name: str, group_id: str
) -> None:
    create_topic(cluster.bootstrap_servers, topic_name)
    instance = "instance-1"
    with WireClient.connect(cluster.bootstrap_servers, timeout=30) as client:
        old_member, generation = _stable_single_member(client, group_id, instance)
        assert _commit(client, group_id, topic_name, 3, generation=generation,
                       member_id=old_member, instance_id=instance) == ErrorCode.none
        # the same static instance restarts: it joins without a member id and replaces the old
        again = _join(client, group_id, instance_id=instance)
        assert again.error_code == ErrorCode.none
        new_member = again.member_id
        assert new_member != old_member
        fenced = _commit(client, group_id, topic_name, 99, generation=generation,
                         member_id=old_member, instance_id=instance)
        assert fenced == ErrorCode.fenced_instance_id  # 82
        assert _committed(client, group_id, topic_name) == 3
        assert _commit(client, group_id, topic_name, 4, generation=again.generation_id,
                       member_id=new_member, instance_id=instance) == ErrorCode.none
        _leave(client, group_id, new_member, instance)


def test_commit_of_current_generation_accepted_while_rebalance_pending(
    cluster: Any, topic_name: str, group_id: str
) -> None:
    """Kafka accepts commits of the current generation in PreparingRebalance: eager consumers
    commit in their revoke callback after the rebalance started, before they rejoin."""
    create_topic(cluster.bootstrap_servers, topic_name)
    with WireClient.connect(cluster.bootstrap_servers, timeout=30) as first, \
            WireClient.connect(cluster.bootstrap_servers, timeout=40) as second:
        member, generation = _stable_single_member(first, group_id)
        answers: list[Any] = []

        def join_second() -> None:
            response = _join(second, group_id)
            if response.error_code == ErrorCode.member_id_required:
                response = _join(second, group_id, response.member_id)
            answers.append(response)

        joiner = threading.Thread(target=join_second, daemon=True)
        joiner.start()
        # the second member's join starts a rebalance; the first one learns it from a heartbeat
        for _ in range(50):
            beat = first.request(12, 3, {"group_id": group_id, "generation_id": generation,
                                         "member_id": member, "group_instance_id": None})
            if beat.error_code == ErrorCode.rebalance_in_progress:
                break
            threading.Event().wait(0.1)
        assert beat.error_code == ErrorCode.rebalance_in_progress
        result = _commit(first, group_id, topic_name, 11, generation=generation,
                         member_id=member)
        rejoin = _join(first, group_id, member)
        joiner.join(timeout=30)
        assert rejoin.error_code == ErrorCode.none
        assert answers and answers[0].error_code == ErrorCode.none
        assert result == ErrorCode.none, f"commit during PreparingRebalance answered {result!r}"
        assert _committed(first, group_id, topic_name) == 11
