"""The transaction state machine as pure decisions (broker/transactions/state.py) and the
ownership formulas (broker/transactions/ownership.py): transitions, epoch bumps and fencing
(KIP-360 retries, epoch exhaustion), EndTxn retries, timeouts and expiry with explicit times,
ListTransactions filters."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from loglake.broker.transactions.ownership import (
    STATE_PARTITIONS,
    coordinator_for_partition,
    state_partition_for,
)
from loglake.broker.transactions.state import (
    MAX_EPOCH,
    VALID_PREVIOUS,
    TransactionError,
    TransactionMetadata,
    TransactionState,
    complete,
    decide_add,
    decide_end,
    decide_init,
    expired,
    fence_and_abort,
    listed,
    new_metadata,
    rotate_producer_id,
    timed_out,
    transition,
)

S = TransactionState
PID = 4000


def _code(excinfo: pytest.ExceptionInfo[TransactionError]) -> ErrorCode:
    return excinfo.value.code


def _initialised(epoch: int = 0) -> TransactionMetadata:
    meta = decide_init(new_metadata("t", PID, 60000, 1000), timeout_ms=60000, expected=None,
                       now_ms=1000).meta
    return meta if epoch == 0 else TransactionMetadata(
        **{**meta.__dict__, "producer_epoch": epoch})


def _ongoing(epoch: int = 0) -> TransactionMetadata:
    meta = decide_add(_initialised(epoch), producer_id=PID, epoch=epoch,
                      partitions=[("a", 0)], now_ms=2000)
    assert meta is not None
    return meta


def test_first_init_gives_epoch_zero_and_reinit_bumps() -> None:
    meta = _initialised()
    assert (meta.state, meta.producer_id, meta.producer_epoch) == (S.EMPTY, PID, 0)
    again = decide_init(meta, timeout_ms=30000, expected=None, now_ms=3000).meta
    assert (again.producer_epoch, again.last_producer_epoch, again.timeout_ms) == (1, -1, 30000)


def test_kip360_retry_and_fencing() -> None:
    meta = _initialised()
    bumped = decide_init(meta, timeout_ms=60000, expected=(PID, 0), now_ms=3000).meta
    assert (bumped.producer_epoch, bumped.last_producer_epoch) == (1, 0)
    # the producer never saw the answer and retries with epoch 0: the same epoch, no bump
    retried = decide_init(bumped, timeout_ms=60000, expected=(PID, 0), now_ms=3001).meta
    assert (retried.producer_epoch, retried.last_producer_epoch) == (1, 0)
    with pytest.raises(TransactionError) as fenced:  # an older epoch
        decide_init(bumped.__class__(**{**bumped.__dict__, "producer_epoch": 5,
                                        "last_producer_epoch": 4}),
                    timeout_ms=60000, expected=(PID, 2), now_ms=3002)
    assert _code(fenced) is ErrorCode.producer_fenced
    with pytest.raises(TransactionError) as other:  # another producer id
        decide_init(bumped, timeout_ms=60000, expected=(PID + 1, 0), now_ms=3003)
    assert _code(other) is ErrorCode.producer_fenced


def test_exhausted_epoch_rotates_the_producer_id() -> None:
    meta = TransactionMetadata(**{**_initialised().__dict__, "producer_epoch": MAX_EPOCH - 1})
    decision = decide_init(meta, timeout_ms=60000, expected=(PID, MAX_EPOCH - 1), now_ms=5000)
    assert decision.rotate
    rotated = rotate_producer_id(meta, PID + 7, timeout_ms=60000, record_last_epoch=True,
                                 now_ms=5000)
    assert (rotated.producer_id, rotated.producer_epoch) == (PID + 7, 0)
    assert (rotated.last_producer_id, rotated.last_producer_epoch) == (PID, MAX_EPOCH - 1)
    # a retry with the old id and exhausted epoch is accepted and answers the new id
    retry = decide_init(rotated, timeout_ms=60000, expected=(PID, MAX_EPOCH - 1), now_ms=5001)
    assert (retry.meta.producer_id, retry.meta.producer_epoch) == (PID + 7, 0)


def test_init_while_ongoing_fences_and_aborts() -> None:
    meta = _ongoing()
    decision = decide_init(meta, timeout_ms=60000, expected=None, now_ms=3000)
    assert decision.fenced_abort
    assert decision.meta.state is S.PREPARE_ABORT
    assert decision.meta.producer_epoch == 1
    assert decision.meta.partitions == {("a", 0)}
    with pytest.raises(TransactionError) as busy:  # while the abort's markers are written
        decide_init(decision.meta, timeout_ms=60000, expected=None, now_ms=3001)
    assert _code(busy) is ErrorCode.concurrent_transactions
    done = complete(decision.meta, now_ms=3002)
    assert (done.state, done.partitions) == (S.COMPLETE_ABORT, frozenset())
    after = decide_init(done, timeout_ms=60000, expected=None, now_ms=3003).meta
    assert (after.state, after.producer_epoch) == (S.EMPTY, 2)
    # the fenced producer (epoch 0) can no longer end or extend anything
    with pytest.raises(TransactionError) as fenced:
        decide_end(after, producer_id=PID, epoch=0, commit=True, now_ms=3004)
    assert _code(fenced) is ErrorCode.producer_fenced


def test_add_partitions_and_groups() -> None:
    meta = _initialised()
    first = decide_add(meta, producer_id=PID, epoch=0, partitions=[("a", 0), ("a", 1)],
                       now_ms=2000)
    assert first is not None and first.state is S.ONGOING and first.txn_start_ms == 2000
    assert decide_add(first, producer_id=PID, epoch=0, partitions=[("a", 1)], now_ms=2001) is None
    more = decide_add(first, producer_id=PID, epoch=0, groups=["g"], now_ms=2500)
    assert more is not None
    assert (more.partitions, more.groups, more.txn_start_ms) == (
        {("a", 0), ("a", 1)}, {"g"}, 2000)
    with pytest.raises(TransactionError) as mapping:
        decide_add(more, producer_id=PID + 1, epoch=0, partitions=[("b", 0)], now_ms=2600)
    assert _code(mapping) is ErrorCode.invalid_producer_id_mapping
    with pytest.raises(TransactionError) as fenced:
        decide_add(more, producer_id=PID, epoch=3, partitions=[("b", 0)], now_ms=2600)
    assert _code(fenced) is ErrorCode.producer_fenced
    prepared = decide_end(more, producer_id=PID, epoch=0, commit=True, now_ms=3000)
    assert prepared is not None
    with pytest.raises(TransactionError) as busy:
        decide_add(prepared, producer_id=PID, epoch=0, partitions=[("b", 0)], now_ms=3001)
    assert _code(busy) is ErrorCode.concurrent_transactions
    # the next transaction starts afresh after the previous one completed
    nxt = decide_add(complete(prepared, now_ms=3002), producer_id=PID, epoch=0,
                     partitions=[("b", 0)], now_ms=4000)
    assert nxt is not None and (nxt.partitions, nxt.groups, nxt.txn_start_ms) == (
        {("b", 0)}, frozenset(), 4000)


def test_end_txn_states() -> None:
    ongoing = _ongoing()
    commit = decide_end(ongoing, producer_id=PID, epoch=0, commit=True, now_ms=3000)
    assert commit is not None and commit.state is S.PREPARE_COMMIT
    for outcome, code in ((True, ErrorCode.concurrent_transactions),
                          (False, ErrorCode.invalid_txn_state)):
        with pytest.raises(TransactionError) as err:
            decide_end(commit, producer_id=PID, epoch=0, commit=outcome, now_ms=3001)
        assert _code(err) is code
    done = complete(commit, now_ms=3002)
    assert done.state is S.COMPLETE_COMMIT
    # a commit retried after it completed succeeds; an abort of it is refused
    assert decide_end(done, producer_id=PID, epoch=0, commit=True, now_ms=3003) is None
    with pytest.raises(TransactionError) as wrong:
        decide_end(done, producer_id=PID, epoch=0, commit=False, now_ms=3003)
    assert _code(wrong) is ErrorCode.invalid_txn_state
    with pytest.raises(TransactionError) as empty:
        decide_end(_initialised(), producer_id=PID, epoch=0, commit=True, now_ms=3004)
    assert _code(empty) is ErrorCode.invalid_txn_state
    aborted = decide_end(ongoing, producer_id=PID, epoch=0, commit=False, now_ms=3000)
    assert aborted is not None and complete(aborted, now_ms=1).state is S.COMPLETE_ABORT


def test_transition_table_refuses_illegal_moves() -> None:
    for state, previous in VALID_PREVIOUS.items():
        for current in TransactionState:
            meta = TransactionMetadata("t", PID, -1, 0, -1, 1000, current)
            if current in previous:
                assert transition(meta, state).state is state
            else:
                with pytest.raises(TransactionError):
                    transition(meta, state)


def test_timeout_and_expiry_by_the_clock() -> None:
    meta = _ongoing()  # started at 2000, timeout 60000
    assert not timed_out(meta, 62000)
    assert timed_out(meta, 62001)
    fenced = fence_and_abort(meta, now_ms=62001)
    assert (fenced.state, fenced.producer_epoch, fenced.last_producer_epoch) == (
        S.PREPARE_ABORT, 1, -1)
    assert not timed_out(fenced, 10**9)
    done = complete(fenced, now_ms=62002)
    assert not expired(done, 62002 + 999, 1000)
    assert expired(done, 62002 + 1000, 1000)
    assert not expired(meta, 10**12, 1000)  # an open transaction never expires


def test_list_filters() -> None:
    ongoing, empty = _ongoing(), _initialised()
    everything = frozenset[S]()
    assert listed(ongoing, states=everything, producer_ids=frozenset(), min_duration_ms=-1,
                  now_ms=5000)
    assert not listed(empty, states=frozenset({S.ONGOING}), producer_ids=frozenset(),
                      min_duration_ms=-1, now_ms=5000)
    assert not listed(ongoing, states=everything, producer_ids=frozenset({1}),
                      min_duration_ms=-1, now_ms=5000)
    assert listed(ongoing, states=everything, producer_ids=frozenset(), min_duration_ms=2999,
                  now_ms=5000)
    assert not listed(ongoing, states=everything, producer_ids=frozenset(),
                      min_duration_ms=3000, now_ms=5000)


def test_metadata_round_trips_through_json() -> None:
    meta = decide_add(_ongoing(), producer_id=PID, epoch=0, groups=["g"], now_ms=2100)
    assert meta is not None
    assert TransactionMetadata.decode("t", meta.encode()) == meta


# ---------------------------------------------------------------------------- ownership
def test_state_partition_is_kafkas() -> None:
    # Utils.abs(id.hashCode) % 50, as Kafka's TransactionStateManager.partitionFor
    assert state_partition_for("hello") == 22
    assert state_partition_for("my-group") == 12
    assert state_partition_for("polygenelubricants") == 0  # Integer.MIN_VALUE
    assert all(0 <= state_partition_for(f"id-{i}") < STATE_PARTITIONS for i in range(200))


def test_rendezvous_moves_only_the_dead_brokers_partitions() -> None:
    live = [1, 2, 3]
    before = {p: coordinator_for_partition(p, live) for p in range(STATE_PARTITIONS)}
    assert set(before.values()) == {1, 2, 3}
    after = {p: coordinator_for_partition(p, [1, 3]) for p in range(STATE_PARTITIONS)}
    assert all(after[p] == before[p] for p in before if before[p] != 2)
    assert coordinator_for_partition(0, []) == -1
