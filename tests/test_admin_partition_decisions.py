"""Pure decisions behind CreatePartitions, DeleteRecords and ElectLeaders, in process.

election.admin_election (Kafka's preferred / unclean rules), plan_added_partitions and the
round-robin continuation of assign_replicas (CreatePartitions), tier_delete.plan_delete, and
tier_delete.delete_below on a real local Delta table (no broker): after it, the table holds no
row of the partition below the new start, for deltalake readers too.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from kio.schema.errors import ErrorCode

from loglake.broker import election
from loglake.broker.handlers.partition_admin import plan_added_partitions
from loglake.broker.partition import Partition
from loglake.broker.topics import assign_replicas
from loglake.catalog.zookeeper import PartitionState
from loglake.config import TopicConfig
from loglake.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    PreferredLeaderNotAvailableError,
)
from loglake.segments.records import Record, encode_batch
from loglake.segments.storage import Storage
from loglake.segments.tier_delete import delete_below, plan_delete
from loglake.segments.tier_rows import batches_to_rows
from loglake.segments.tiered_table import TieredTable, TierFile

EPOCH = 7


def view(replicas: tuple[int, ...], leader: int, isr: tuple[int, ...],
         epoch: int = 3) -> election.PartitionView:
    return election.PartitionView("t", 0, replicas, PartitionState(leader, epoch, isr, 1, 5))


# ---------------------------------------------------------------------------- ElectLeaders


def test_preferred_moves_leadership_back_keeping_the_isr() -> None:
    write = election.admin_election(view((1, 2, 3), 2, (2, 3, 1)), {1, 2, 3},
                                    election.PREFERRED, EPOCH)
    assert (write.state.leader, write.state.leader_epoch, write.state.isr) == (1, 4, (2, 3, 1))
    assert write.state.controller_epoch == EPOCH
    assert write.state.zk_version == 5  # conditioned on the version read


def test_preferred_also_repairs_a_partition_without_leader() -> None:
    write = election.admin_election(view((1, 2), -1, (1,)), {1, 2}, election.PREFERRED, EPOCH)
    assert write.state.leader == 1


@pytest.mark.parametrize(("leader", "isr", "live", "error"), [
    (1, (1, 2), {1, 2}, ElectionNotNeededError),
    (1, (1, 2), {2}, ElectionNotNeededError),  # Kafka: the leader is the preferred one
    (2, (2, 3), {1, 2, 3}, PreferredLeaderNotAvailableError),  # preferred out of sync
    (2, (2, 1), {2, 3}, PreferredLeaderNotAvailableError),  # preferred not alive
])
def test_preferred_refusals(leader: int, isr: tuple[int, ...], live: set[int],
                            error: type[Exception]) -> None:
    with pytest.raises(error):
        election.admin_election(view((1, 2, 3), leader, isr), live, election.PREFERRED, EPOCH)


def test_unclean_prefers_a_live_isr_member() -> None:
    write = election.admin_election(view((1, 2, 3), 1, (1, 3)), {2, 3}, election.UNCLEAN,
                                    EPOCH)
    assert (write.state.leader, write.state.isr) == (3, (3,))


def test_unclean_takes_an_out_of_sync_replica_when_no_isr_member_lives() -> None:
    write = election.admin_election(view((1, 2, 3), -1, (1,)), {3}, election.UNCLEAN, EPOCH)
    assert (write.state.leader, write.state.isr, write.state.leader_epoch) == (3, (3,), 4)
    assert "unclean" in write.reason


def test_unclean_refusals() -> None:
    with pytest.raises(ElectionNotNeededError):
        election.admin_election(view((1, 2), 2, (2,)), {1, 2}, election.UNCLEAN, EPOCH)
    with pytest.raises(EligibleLeadersNotAvailableError):
        election.admin_election(view((1, 2), -1, (1,)), {3}, election.UNCLEAN, EPOCH)
    with pytest.raises(InvalidRequestError):
        election.admin_election(view((1, 2), -1, (1,)), {1}, 2, EPOCH)


def test_election_errors_carry_kafka_codes() -> None:
    assert ElectionNotNeededError("x").code == ErrorCode.election_not_needed
    assert PreferredLeaderNotAvailableError("x").code == ErrorCode.preferred_leader_not_available
    assert EligibleLeadersNotAvailableError("x").code == ErrorCode.eligible_leaders_not_available


# ---------------------------------------------------------------------------- CreatePartitions

EXISTING = {0: (1, 2), 1: (2, 3), 2: (3, 1)}
BROKERS: dict[int, str | None] = {1: None, 2: None, 3: None}


def test_automatic_assignment_continues_the_round_robin() -> None:
    added = plan_added_partitions(EXISTING, 6, None, BROKERS)
    assert added == {3: (1, 2), 4: (2, 3), 5: (3, 1)}


def test_assignment_continuation_is_rack_aware_and_survives_a_gone_broker() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    grown = assign_replicas(racks, 4, 2, first_partition=4, partition0_leader=1)
    assert sorted(grown) == [4, 5, 6, 7]
    for replicas in grown.values():
        assert len({racks[b] for b in replicas}) == 2, grown
    anywhere = assign_replicas(BROKERS, 2, 3, first_partition=3, partition0_leader=9, seed=1)
    assert sorted(anywhere) == [3, 4] and all(len(set(r)) == 3 for r in anywhere.values())


def test_manual_assignment_is_taken_as_given() -> None:
    assert plan_added_partitions(EXISTING, 5, [[3, 2], [1, 3]], BROKERS) == {
        3: (3, 2), 4: (1, 3)}


@pytest.mark.parametrize(("count", "manual", "error", "message"), [
    (3, None, InvalidPartitionsError, "Topic already has 3 partitions."),
    (2, None, InvalidPartitionsError, "can only be increased"),
    (2001, None, InvalidPartitionsError, "2000"),
    (5, [[1, 2]], InvalidReplicaAssignmentError,
     "Increasing the number of partitions by 2 but 1 assignments provided."),
    (4, [[1, 1]], InvalidReplicaAssignmentError,
     "Duplicate brokers not allowed in replica assignment: 1, 1 for partition id 3."),
    (4, [[1, 7]], InvalidReplicaAssignmentError, "Unknown broker(s) in replica assignment: 7."),
    (4, [[1, 2, 3]], InvalidReplicaAssignmentError,
     "Inconsistent replication factor between partitions, partition 0 has 2 while "
     "partitions [3] have replication factors [3], respectively."),
    (4, [[]], InvalidReplicaAssignmentError, "replication factor of 0"),
])
def test_create_partitions_refusals(count: int, manual: list[list[int]] | None,
                                    error: type[Exception], message: str) -> None:
    with pytest.raises(error) as caught:
        plan_added_partitions(EXISTING, count, manual, BROKERS)
    assert message in str(caught.value)


def test_automatic_assignment_needs_enough_brokers() -> None:
    with pytest.raises(InvalidReplicationFactorError):
        plan_added_partitions({0: (1, 2, 3)}, 2, None, {1: None, 2: None})


# ---------------------------------------------------------------------------- DeleteRecords


def test_log_start_moves_forward_only_and_the_low_watermark_waits_for_followers(
        tmp_path: Path) -> None:
    config = TopicConfig.from_overrides({"segment.bytes": "1024"})
    partition = Partition("t", 0, tmp_path / "t-0", config, broker_id=1, replicas=(1, 2, 3))
    partition.apply_state(PartitionState(leader=1, leader_epoch=0, isr=(1, 2, 3), zk_version=0))
    for _ in range(10):  # producers send base offset 0; the leader assigns offsets
        partition.append(encode_batch([Record(i, 1_700_000_000_000, None, b"x" * 20)
                                       for i in range(20)]))
    assert len(partition.log.segments) > 3
    assert partition.advance_log_start(110)
    assert partition.log_start_offset == 110
    assert partition.log.segments[0] <= 110 < partition.log.segments[1]  # older ones deleted
    assert not partition.advance_log_start(50)  # never backwards
    assert partition.low_watermark({2, 3}) == -1  # followers have not reported yet
    partition.record_follower_fetch(2, 200, 110)
    partition.record_follower_fetch(3, 200, 90)
    assert partition.low_watermark({2, 3}) == 90
    assert partition.low_watermark({2}) == 110  # 3 is not waited for (dead or offline)
    assert partition.advance_log_start(10_000)  # capped at the log end
    assert partition.log_start_offset == partition.log.log_end_offset == 200
    partition.close()
    reopened = Partition("t", 0, tmp_path / "t-0", config, broker_id=1, replicas=(1, 2, 3))
    assert reopened.log_start_offset == 200  # checkpointed
    reopened.close()



def tier_file(first: int, last: int) -> TierFile:
    return TierFile(f"/t/{first}", 100, last - first + 1, first, last, 0, 0)


def test_plan_delete_removes_below_and_rewrites_the_straddling_file() -> None:
    files = [tier_file(0, 99), tier_file(100, 199), tier_file(200, 299)]
    plan = plan_delete(files, 300, 150)
    assert [f.min_offset for f in plan.remove] == [0]
    assert plan.rewrite is not None and plan.rewrite.min_offset == 100
    assert not plan.move_tiered_end
    exact = plan_delete(files, 300, 200)  # on a file boundary: nothing to rewrite
    assert [f.min_offset for f in exact.remove] == [0, 100] and exact.rewrite is None
    assert plan_delete(files, 300, 0).empty
    beyond = plan_delete(files, 300, 450)  # not tiered yet: every file goes, tiered end moves
    assert len(beyond.remove) == 3 and beyond.rewrite is None and beyond.move_tiered_end
    assert plan_delete([], None, 10).move_tiered_end
    assert plan_delete([], None, 0).empty


def _rows(first: int, count: int, per_batch: int) -> pa.Table:
    """Rows of ``count`` records from offset ``first``, ``per_batch`` records per batch."""
    tables = []
    for base in range(first, first + count, per_batch):
        n = min(per_batch, first + count - base)
        records = [Record(offset=base + i, timestamp=1_700_000_000_000 + base + i, key=b"k",
                          value=b"v%d" % (base + i)) for i in range(n)]
        tables.append(batches_to_rows(encode_batch(records)))
    return pa.concat_tables(tables)


def test_delete_below_leaves_no_row_below_the_new_start(tmp_path: Path) -> None:
    storage = Storage.from_url(str(tmp_path / "lake"))
    table = TieredTable(storage, "t")
    table.ensure_created()
    for first in (0, 100):
        pending = table.write_file(0, _rows(first, 100, 10))
        assert table.commit(0, [pending], first + 99, expected_end=None if first == 0 else 100)
    pending = table.write_file(1, _rows(0, 50, 10))
    assert table.commit(1, [pending], 49, expected_end=None)

    result = delete_below(TieredTable(storage, "t"), 0, 135, create=True)
    assert (result.removed_files, result.rewritten_files, result.removed_rows) == (1, 1, 135)
    rows = DeltaTable(table.uri).to_pyarrow_table()
    offsets = sorted(rows.filter(pa.compute.equal(rows["partition"], 0))["offset"].to_pylist())
    assert offsets == list(range(135, 200))  # 135 sits inside a batch: kept from there on
    assert len(rows.filter(pa.compute.equal(rows["partition"], 1))) == 50  # untouched
    fresh = TieredTable(storage, "t")
    assert fresh.tiered_end(0) == 200 and fresh.start_offset(0) == 135
    chunk = fresh.read_chunk(0, 135)
    assert chunk is not None and chunk["offset"][0].as_py() == 135

    assert delete_below(TieredTable(storage, "t"), 0, 120, create=True).version is None
    beyond = delete_below(TieredTable(storage, "t"), 0, 260, create=True)
    assert beyond.removed_rows == 65
    fresh = TieredTable(storage, "t")
    assert fresh.start_offset(0) is None and fresh.tiered_end(0) == 260  # tiering resumes there
    assert not table.commit(0, [], 259, expected_end=200)  # a tier commit in flight loses


def test_delete_below_without_a_table(tmp_path: Path) -> None:
    storage = Storage.from_url(str(tmp_path / "lake"))
    assert delete_below(TieredTable(storage, "t"), 0, 10, create=False).version is None
    created = delete_below(TieredTable(storage, "t"), 0, 10, create=True)
    assert created.version is not None and TieredTable(storage, "t").tiered_end(0) == 10
