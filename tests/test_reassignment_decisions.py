"""Pure logic of partition reassignment (KIP-455) and replication throttles: the controller's
decisions (broker/election.py), the token bucket and throttled-replica lists
(broker/replication_quota.py), the leader's follower tracking when replicas change
(Partition.set_replicas, on a real log in a temporary directory), and the plans of
``loglake partitions reassign`` (client/reassignment.py). No processes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from loglake.broker import election
from loglake.broker.partition import Partition
from loglake.broker.replication_quota import (
    BURST_S,
    UNLIMITED,
    ReplicationQuotas,
    TokenBucket,
    effective_rates,
    is_throttled,
)
from loglake.catalog.zookeeper import PartitionState, ReplicaAssignment
from loglake.client.reassignment import (
    PartitionReassignment,
    describe_ongoing,
    format_plan,
    moving,
    parse_plan,
    propose,
    throttled_brokers,
    throttled_replicas,
)
from loglake.config import TopicConfig
from loglake.errors import (
    InvalidConfigError,
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
)
from loglake.segments.records import Record, encode_batch

LIVE = {1, 2, 3, 4}


def state(leader: int, isr: tuple[int, ...], epoch: int = 5) -> PartitionState:
    return PartitionState(leader, epoch, isr, controller_epoch=1, zk_version=7)


# ------------------------------------------------------------------------- reassign_to


def test_reassign_to_is_target_then_original_with_adding_and_removing() -> None:
    moved = election.reassign_to(ReplicaAssignment((1, 2, 3)), (4, 2, 3))
    assert moved == ReplicaAssignment((4, 2, 3, 1), adding=(4,), removing=(1,))
    assert moved.target == (4, 2, 3) and moved.reassigning
    assert moved.original == (2, 3, 1)  # RS minus adding, in RS order (Kafka's originReplicas)


def test_reassign_to_the_original_or_a_reordering_is_no_reassignment() -> None:
    assert election.reassign_to(ReplicaAssignment((1, 2, 3)), (3, 2, 1)) == \
        ReplicaAssignment((3, 2, 1))
    ongoing = ReplicaAssignment((4, 2, 3, 1), adding=(4,), removing=(1,))
    assert election.reassign_to(ongoing, ongoing.original) == ReplicaAssignment((2, 3, 1))


def test_a_new_target_starts_from_the_original_replicas() -> None:
    ongoing = ReplicaAssignment((4, 2, 3, 1), adding=(4,), removing=(1,))
    assert election.reassign_to(ongoing, (5, 2, 3)) == ReplicaAssignment(
        (5, 2, 3, 1), adding=(5,), removing=(1,))


def test_shrinking_the_replication_factor_only_removes() -> None:
    assert election.reassign_to(ReplicaAssignment((1, 2, 3)), (1, 2)) == ReplicaAssignment(
        (1, 2, 3), removing=(3,))


# ------------------------------------------------------------------------- validation


@pytest.mark.parametrize(("target", "message"), [
    ((), "Empty replica list"),
    ((1, 1, 2), "Duplicate replica ids"),
    ((1, -2), "Invalid broker id"),
    ((1, 2, 9), "brokers that are not alive"),
])
def test_invalid_targets_are_refused_as_kafka_does(target: tuple[int, ...],
                                                  message: str) -> None:
    with pytest.raises(InvalidReplicaAssignmentError, match=message):
        election.plan_reassignment("t", 0, ReplicaAssignment((1, 2, 3)), target,
                                   state(1, (1, 2, 3)), LIVE, 1)


def test_a_dead_broker_that_already_holds_a_replica_may_stay() -> None:
    change = election.plan_reassignment("t", 0, ReplicaAssignment((1, 2, 3)), (3, 2, 4),
                                        state(1, (1, 2)), {1, 2, 4}, 1)
    assert change.assignment == ReplicaAssignment((3, 2, 4, 1), adding=(4,), removing=(1,))
    assert change.state is None  # nothing leaves the ISR before the reassignment completes


def test_cancelling_nothing_is_no_reassignment_in_progress() -> None:
    with pytest.raises(NoReassignmentInProgressError):
        election.plan_reassignment("t", 0, ReplicaAssignment((1, 2, 3)), None,
                                   state(1, (1, 2, 3)), LIVE, 1)


def test_cancel_reverts_and_takes_the_adding_replicas_out_of_the_isr() -> None:
    ongoing = ReplicaAssignment((4, 2, 3, 1), adding=(4,), removing=(1,))
    change = election.plan_reassignment("t", 0, ongoing, None, state(1, (1, 2, 3, 4)), LIVE, 2)
    assert change.assignment == ReplicaAssignment((2, 3, 1))
    assert change.state is not None
    assert change.state.isr == (1, 2, 3) and change.state.leader == 1
    assert change.state.leader_epoch == 6 and change.state.zk_version == 7  # fenced, checked


def test_cancel_while_an_adding_replica_leads_hands_leadership_to_an_original_one() -> None:
    ongoing = ReplicaAssignment((4, 2, 3, 1), adding=(4,), removing=(1,))
    change = election.plan_reassignment("t", 0, ongoing, None, state(4, (4, 2, 3)), LIVE, 2)
    assert change.state is not None
    assert change.state.leader == 2 and change.state.isr == (2, 3)


def test_cancel_is_refused_when_nobody_in_sync_could_take_over() -> None:
    ongoing = ReplicaAssignment((4, 1), adding=(4,), removing=(1,))
    with pytest.raises(InvalidReplicaAssignmentError, match="would leave"):
        election.plan_reassignment("t", 0, ongoing, None, state(4, (4,)), LIVE, 2)


def test_a_superseded_target_drops_its_replicas_from_the_isr_at_once() -> None:
    ongoing = ReplicaAssignment((4, 2, 3, 1), adding=(4,), removing=(1,))
    change = election.plan_reassignment("t", 0, ongoing, (5, 2, 3), state(1, (1, 2, 3, 4)),
                                        {1, 2, 3, 4, 5}, 2)
    assert change.assignment == ReplicaAssignment((5, 2, 3, 1), adding=(5,), removing=(1,))
    assert change.state is not None and change.state.isr == (1, 2, 3)


# ------------------------------------------------------------------------- completion


def test_no_completion_until_every_target_replica_is_in_the_isr() -> None:
    moving_ = ReplicaAssignment((4, 2, 3, 1), adding=(4,), removing=(1,))
    assert election.complete_reassignment("t", 0, moving_, state(1, (1, 2, 3)), LIVE, 1) is None
    assert election.complete_reassignment("t", 0, ReplicaAssignment((1, 2, 3)),
                                          state(1, (1, 2, 3)), LIVE, 1) is None


def test_completion_moves_the_leader_to_the_first_live_target_replica() -> None:
    moving_ = ReplicaAssignment((4, 2, 3, 1), adding=(4,), removing=(1,))
    change = election.complete_reassignment("t", 0, moving_, state(1, (1, 2, 3, 4)), LIVE, 3)
    assert change is not None
    assert change.assignment == ReplicaAssignment((4, 2, 3))
    assert change.state == PartitionState(4, 6, (2, 3, 4), 3, 7)
    dead_first = election.complete_reassignment("t", 0, moving_, state(1, (1, 2, 3, 4)),
                                                {1, 2, 3}, 3)
    assert dead_first is not None and dead_first.state is not None
    assert dead_first.state.leader == 2


def test_completion_keeps_a_leader_that_stays_and_fences_the_removed_replica() -> None:
    moving_ = ReplicaAssignment((2, 3, 4, 1), adding=(4,), removing=(1,))
    change = election.complete_reassignment("t", 0, moving_, state(2, (1, 2, 3, 4)), LIVE, 3)
    assert change is not None and change.state is not None
    assert change.state.leader == 2 and change.state.isr == (2, 3, 4)
    assert change.state.leader_epoch == 6


def test_adding_a_replica_completes_without_touching_the_state() -> None:
    grow = ReplicaAssignment((1, 2, 3), adding=(3,))
    change = election.complete_reassignment("t", 0, grow, state(1, (1, 2, 3)), LIVE, 3)
    assert change is not None
    assert change.assignment == ReplicaAssignment((1, 2, 3)) and change.state is None


def test_no_completion_while_no_target_replica_is_alive() -> None:
    moving_ = ReplicaAssignment((4, 1), adding=(4,), removing=(1,))
    assert election.complete_reassignment("t", 0, moving_, state(-1, (1, 4)), {1}, 3) is None


def test_isr_changes_never_keep_a_replica_the_assignment_dropped() -> None:
    new = election.isr_change(state(2, (1, 2, 3, 4)), 2, (2, 3, 4), set(), set())
    assert new is not None and new.isr == (2, 3, 4)


# ------------------------------------------------------------------------- throttles


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_starts_full_overdraws_and_repays() -> None:
    clock = Clock()
    bucket = TokenBucket(1000, clock=clock)
    assert bucket.available() == 1000 * BURST_S
    bucket.record(1500)  # one batch larger than the bucket
    assert bucket.available() == -500 and bucket.delay_s() == pytest.approx(0.501)
    clock.now += 0.5
    assert bucket.available() == 0
    clock.now += 10
    assert bucket.available() == 1000 * BURST_S  # capped at the burst


def test_unlimited_bucket_never_holds_back_and_starts_full_when_limited() -> None:
    clock = Clock()
    bucket = TokenBucket(clock=clock)
    bucket.record(10**12)
    assert not bucket.limited and bucket.available() == UNLIMITED and bucket.delay_s() == 0
    bucket.set_rate(200)
    assert bucket.limited and bucket.available() == 200
    bucket.record(300)
    bucket.set_rate(100)  # the debt stays
    assert bucket.available() == -100


def test_throttled_replica_lists() -> None:
    assert is_throttled(("*",), 3, 7)
    assert is_throttled(("0:1", "3:7"), 3, 7)
    assert not is_throttled(("0:1", "3:6"), 3, 7)
    assert not is_throttled((), 0, 1)


def test_throttled_replica_configs_are_validated_as_kafka_does() -> None:
    config = TopicConfig.from_overrides({"leader.replication.throttled.replicas": "0:1, 1:2"})
    assert config.leader_replication_throttled_replicas == ("0:1", "1:2")
    for bad in ("0:1,*", "a:1", "0-1", "0:1:2"):
        with pytest.raises(InvalidConfigError, match="literal"):
            TopicConfig.from_overrides({"follower.replication.throttled.replicas": bad})


def test_rates_from_broker_then_cluster_default_then_static() -> None:
    static = {"leader.replication.throttled.rate": 10}
    rates = effective_rates(static, {"leader.replication.throttled.rate": "20",
                                     "follower.replication.throttled.rate": "30"},
                            {"leader.replication.throttled.rate": "40"})
    assert rates == {"leader.replication.throttled.rate": 40,
                     "follower.replication.throttled.rate": 30}
    broken = effective_rates(static, {}, {"leader.replication.throttled.rate": "fast"})
    assert broken["leader.replication.throttled.rate"] == 10
    assert broken["follower.replication.throttled.rate"] == UNLIMITED


def batch(value: bytes) -> bytes:
    return encode_batch([Record(offset=0, timestamp=int(time.time() * 1000), key=None,
                                value=value)])


def _partition(tmp_path: Path, *, replicas: tuple[int, ...], isr: tuple[int, ...],
               leader: int = 1, overrides: dict[str, str] | None = None) -> Partition:
    partition = Partition("t", 0, tmp_path / "t-0", TopicConfig.from_overrides(overrides),
                          broker_id=1, replicas=replicas)
    partition.apply_state(PartitionState(leader, 1, isr, 1, 0))
    return partition


def test_only_listed_replicas_outside_the_isr_are_throttled(tmp_path: Path) -> None:
    partition = _partition(tmp_path, replicas=(1, 2, 3), isr=(1, 2), overrides={
        "leader.replication.throttled.replicas": "0:1",
        "follower.replication.throttled.replicas": "0:1"})
    quotas = ReplicationQuotas(1)
    assert not quotas.leader_throttles(partition, 3)  # no rate set
    quotas.apply({"leader.replication.throttled.rate": 100,
                  "follower.replication.throttled.rate": 100})
    assert quotas.leader_throttles(partition, 3)
    assert not quotas.leader_throttles(partition, 2)  # in sync: acks=all waits for it
    assert not quotas.follower_throttles(partition)  # we (1) are in the ISR
    partition.close()


def test_leader_tracks_added_followers_and_keeps_removed_ones_while_in_sync(
        tmp_path: Path) -> None:
    partition = _partition(tmp_path, replicas=(1, 2), isr=(1, 2))
    partition.append(batch(b"a"))
    partition.record_follower_fetch(2, 1)
    assert partition.high_watermark == 1
    partition.set_replicas((1, 3, 2))
    assert set(partition.followers) == {2, 3}
    partition.set_replicas((1, 3))
    assert 2 in partition.followers  # still in the ISR: still counted for the HW
    partition.append(batch(b"b"))
    assert partition.high_watermark == 1  # 2 has not fetched offset 1
    partition.apply_state(PartitionState(1, 2, (1,), 1, 1))  # the completion's state
    assert set(partition.followers) == {3}
    assert partition.high_watermark == 2
    partition.close()


# ------------------------------------------------------------------------- plans (CLI)


def test_plans_round_trip_in_kafkas_format() -> None:
    plan = {("orders", 1): (2, 4), ("orders", 0): (1, 2)}
    text = format_plan(plan)
    assert json.loads(text)["partitions"][0] == {
        "topic": "orders", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]}
    assert parse_plan(text) == plan
    assert parse_plan('{"version":1,"partitions":[{"topic":"a","partition":0,'
                      '"replicas":[3]}]}') == {("a", 0): (3,)}


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not valid JSON"),
    ('{"version":2,"partitions":[]}', "unsupported plan version"),
    ('{"partitions":[]}', "lists no partitions"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[]}]}', "non-empty list"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1,1]}]}', "duplicate"),
    ('{"partitions":[{"topic":"a","partition":-1,"replicas":[1]}]}', "partition number"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1],"log_dirs":["/d"]}]}',
     "log_dirs"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1]},'
     '{"topic":"a","partition":0,"replicas":[2]}]}', "twice"),
])
def test_bad_plans_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_plan(text)


def test_proposals_keep_partitions_and_replication_factor_on_the_given_brokers() -> None:
    current = {("a", p): (1, 2, 3) for p in range(6)} | {("b", 0): (1,)}
    proposal = propose(current, dict.fromkeys((2, 3, 4)), seed=1)
    assert set(proposal) == set(current)
    assert all(len(proposal[k]) == len(current[k]) for k in current)
    assert all(set(r) <= {2, 3, 4} and len(set(r)) == len(r) for r in proposal.values())
    leaders = [proposal[("a", p)][0] for p in range(6)]
    assert sorted(leaders) == [2, 2, 3, 3, 4, 4]  # spread evenly
    with pytest.raises(ValueError, match="replication factor 3"):
        propose(current, dict.fromkeys((2, 3)))


def test_throttles_name_existing_replicas_for_leaders_and_new_ones_for_followers() -> None:
    current = {("t", 0): (1, 2, 3), ("t", 1): (2, 3, 1), ("u", 0): (1,)}
    proposed = {("t", 0): (4, 2, 3), ("t", 1): (2, 3, 1), ("u", 0): (1,)}
    assert moving(current, proposed) == [("t", 0)]
    assert throttled_replicas(current, proposed) == {"t": {
        "leader.replication.throttled.replicas": "0:1,0:2,0:3",
        "follower.replication.throttled.replicas": "0:4"}}
    assert throttled_brokers(current, proposed) == [1, 2, 3, 4]


def test_ongoing_reassignments_are_listed_like_kafkas_tool() -> None:
    lines = list(describe_ongoing({("t", 0): PartitionReassignment((4, 2, 3, 1), (4,), (1,))}))
    assert lines == ["t-0: replicas: 4,2,3,1. adding: 4. removing: 1."]
