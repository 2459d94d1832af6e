"""The controller's pure decisions (election, ISR changes, controlled shutdown, placement),
checked by example and by property over random cluster states."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loglake.broker import election
from loglake.broker.topics import assign_replicas
from loglake.catalog.zookeeper import PartitionState


def _view(replicas, leader, isr, epoch=3, unclean=False):
    return election.PartitionView("t", 0, tuple(replicas),
                                  PartitionState(leader, epoch, tuple(isr), 1, 7), unclean)


def test_failover_picks_first_live_isr_member_and_bumps_epoch():
    [write] = election.failover_writes([_view([1, 2, 3], 1, [1, 3, 2])], {2, 3}, 9)
    assert (write.state.leader, write.state.isr) == (2, (3, 2))
    assert write.state.leader_epoch == 4 and write.state.controller_epoch == 9
    assert write.state.zk_version == 7  # conditioned on the version that was read


def test_no_live_isr_member_goes_offline_unless_unclean():
    [offline] = election.failover_writes([_view([1, 2, 3], 1, [1])], {2, 3}, 1)
    assert offline.state.leader == -1 and offline.state.isr == (1,)
    [unclean] = election.failover_writes([_view([1, 2, 3], 1, [1], unclean=True)], {3}, 1)
    assert (unclean.state.leader, unclean.state.isr) == (3, (3,))
    # already offline and still nobody: no write at all
    assert election.failover_writes([_view([1, 2], -1, [1])], {2}, 1) == []
    # offline and the ISR member is back: elected
    [back] = election.failover_writes([_view([1, 2], -1, [1])], {1, 2}, 1)
    assert back.state.leader == 1


def test_live_leader_is_left_alone_and_preferred_leader_returns():
    view = _view([1, 2, 3], 2, [1, 2, 3])
    assert election.failover_writes([view], {1, 2, 3}, 1) == []
    [move] = election.preferred_leader_moves([view], {1, 2, 3}, 1)
    assert move.state.leader == 1 and move.state.leader_epoch == 4
    assert election.preferred_leader_moves([_view([1, 2, 3], 2, [2, 3])], {1, 2, 3}, 1) == []


def test_controlled_shutdown_hands_over_and_leaves_isr():
    leader, follower = _view([1, 2, 3], 1, [1, 2, 3]), _view([2, 1, 3], 2, [2, 1, 3])
    moves = election.shutdown_moves([leader, follower], 1, {1, 2, 3})
    assert [(m.state.leader, m.state.isr) for m in moves] == [(2, (2, 3)), (2, (2, 3))]
    assert moves[0].state.leader_epoch == 4 and moves[1].state.leader_epoch == 3
    # sole in-sync replica keeps leading
    assert election.shutdown_moves([_view([1, 2], 1, [1])], 1, {1, 2}) == []


def test_isr_change_keeps_leader_and_assignment_order():
    state = PartitionState(1, 5, (1, 2, 3), 1, 4)
    shrunk = election.isr_change(state, 1, (1, 2, 3), lagging={3, 1}, caught_up=set())
    assert shrunk is not None and shrunk.isr == (1, 2) and shrunk.leader_epoch == 5
    grown = election.isr_change(PartitionState(1, 5, (1,), 1, 4), 1, (3, 1, 2),
                                lagging=set(), caught_up={2, 3})
    assert grown is not None and grown.isr == (3, 1, 2)
    assert election.isr_change(state, 1, (1, 2, 3), set(), set()) is None
    assert election.isr_change(state, 2, (1, 2, 3), {3}, set()) is None  # not the leader


@given(
    replicas=st.permutations([1, 2, 3, 4, 5]).map(lambda p: p[:3]),
    isr_mask=st.lists(st.booleans(), min_size=3, max_size=3),
    live=st.sets(st.integers(1, 5)),
    unclean=st.booleans(),
)
def test_election_properties(replicas, isr_mask, live, unclean):
    isr = [r for r, keep in zip(replicas, isr_mask, strict=True) if keep] or [replicas[0]]
    view = _view(replicas, replicas[0], isr, unclean=unclean)
    writes = election.failover_writes([view], live, 2)
    if replicas[0] in live:
        assert writes == []
        return
    for write in writes:
        new = write.state
        assert new.leader_epoch == view.state.leader_epoch + 1
        if new.leader >= 0:
            assert new.leader in live and new.leader in replicas
            assert new.leader in new.isr
            if not unclean or set(isr) & live:
                assert new.leader in isr  # clean election never picks an out-of-sync replica
        assert set(new.isr) <= set(replicas)


def test_rack_aware_assignment_spreads_replicas_across_racks():
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    assignment = assign_replicas(racks, 12, 3, seed=1)
    for replicas in assignment.values():
        assert len({racks[r] for r in replicas}) == 3
    leaders = [replicas[0] for replicas in assignment.values()]
    assert sorted(set(leaders)) == [1, 2, 3, 4, 5, 6]  # leadership spread over all brokers
    plain = assign_replicas([1, 2, 3], 3, 3, seed=0)
    assert all(sorted(r) == [1, 2, 3] for r in plain.values())
    assert len({r[0] for r in plain.values()}) == 3


def test_bounced_leader_loses_leadership_to_an_in_sync_replica():
    views = [_view([1, 2, 3], 1, [1, 2, 3]), _view([1, 2], 1, [1]), _view([2, 1], 2, [2, 1])]
    writes = election.bounce_writes(views, {1, 2, 3}, {1}, 5)
    assert [(w.state.leader, w.state.isr, w.state.leader_epoch) for w in writes] == [
        (2, (2, 3), 4),  # another in-sync replica takes over; 1 leaves the ISR
        (1, (1,), 4),  # sole in-sync replica: keeps leading under a new epoch
    ]
