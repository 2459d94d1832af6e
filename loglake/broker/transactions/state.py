"""The state of one transactional id and every decision on it, as pure functions (Kafka's
``TransactionMetadata``, ``TransactionState`` and the checks of ``TransactionCoordinator``).

State machine (:data:`VALID_PREVIOUS` lists, for each state, the states it may follow)::

    (new id) -> Empty --AddPartitions/AddOffsets--> Ongoing --EndTxn(commit)--> PrepareCommit
                  ^  ^                                 |  \\                           |
                  |  |                                 |   EndTxn(abort), or           markers
                  |  |                                 |   InitProducerId / timeout    written
                  |  |                                 |   (PrepareEpochFence: epoch+1) |
                  |  |                                 v                               v
                  |  +--InitProducerId-- CompleteAbort <--markers-- PrepareAbort   CompleteCommit
                  +------------------------------------InitProducerId-----------------+
    Empty / CompleteCommit / CompleteAbort --(transactional.id.expiration.ms idle)--> Dead

``PrepareEpochFence`` is never stored: a fence (InitProducerId of a new producer instance while a
transaction is Ongoing, or the transaction timing out) bumps the epoch and goes on to
PrepareAbort in the same write, as Kafka appends it.

Every decision takes the current :class:`TransactionMetadata` and returns the next one (or
None when nothing changes), or raises :class:`TransactionError` carrying Kafka's error code.
The caller (coordinator.py) writes the result to ZooKeeper (version-checked) before it answers;
nothing here does I/O or reads a clock (``now_ms`` is passed in).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from loglake.errors import LoglakeError

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767
"""Short.MAX_VALUE: the largest producer epoch."""


class TransactionError(LoglakeError):
    """A transaction-protocol answer other than success; ``code`` is set per instance."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message, code=code)


class TransactionState(enum.Enum):
    """Kafka's states, named as DescribeTransactions/ListTransactions print them."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


S = TransactionState
VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
COMPLETED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
"""States without an open transaction: a new one may begin, the id may expire."""
PREPARED = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})
"""States whose markers are being written."""

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class TransactionMetadata:
    """One transactional id (the stored JSON document is :meth:`to_json`)."""

    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition] = frozenset()
    groups: frozenset[str] = frozenset()
    txn_start_ms: int = -1
    last_update_ms: int = -1

    @property
    def epoch_exhausted(self) -> bool:
        """Kafka's ``isProducerEpochExhausted``: no bump left for this producer id (one is kept
        for fencing)."""
        return self.producer_epoch >= MAX_EPOCH - 1

    def to_json(self) -> dict[str, Any]:
        return {"producer_id": self.producer_id, "last_producer_id": self.last_producer_id,
                "producer_epoch": self.producer_epoch,
                "last_producer_epoch": self.last_producer_epoch, "timeout_ms": self.timeout_ms,
                "state": self.state.value,
                "partitions": [[t, p] for t, p in sorted(self.partitions)],
                "groups": sorted(self.groups), "txn_start_ms": self.txn_start_ms,
                "last_update_ms": self.last_update_ms}

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, transactional_id: str, data: Mapping[str, Any]) -> TransactionMetadata:
        return cls(
            transactional_id, int(data["producer_id"]),
            int(data.get("last_producer_id", NO_PRODUCER_ID)), int(data["producer_epoch"]),
            int(data.get("last_producer_epoch", NO_PRODUCER_EPOCH)), int(data["timeout_ms"]),
            TransactionState(data["state"]),
            frozenset((str(t), int(p)) for t, p in data.get("partitions", ())),
            frozenset(str(g) for g in data.get("groups", ())),
            int(data.get("txn_start_ms", -1)), int(data.get("last_update_ms", -1)))

    @classmethod
    def decode(cls, transactional_id: str, raw: bytes) -> TransactionMetadata:
        return cls.from_json(transactional_id, json.loads(raw))


def transition(meta: TransactionMetadata, state: TransactionState,
               **changes: Any) -> TransactionMetadata:
    """The one guarded way to a new state: ``meta`` in ``state`` with ``changes`` applied,
    if ``state`` may follow ``meta.state`` (:data:`VALID_PREVIOUS`); else INVALID_TXN_STATE."""
    if meta.state not in VALID_PREVIOUS[state]:
        raise TransactionError(
            ErrorCode.invalid_txn_state,
            f"Transactional id {meta.transactional_id}: {state.value} cannot follow "
            f"{meta.state.value}.")
    return dataclasses.replace(meta, state=state, **changes)


def new_metadata(transactional_id: str, producer_id: int, timeout_ms: int,
                 now_ms: int) -> TransactionMetadata:
    """A transactional id seen for the first time: Empty, epoch -1 (the first
    InitProducerId bumps it to 0)."""
    return TransactionMetadata(transactional_id, producer_id, NO_PRODUCER_ID, NO_PRODUCER_EPOCH,
                               NO_PRODUCER_EPOCH, timeout_ms, S.EMPTY, last_update_ms=now_ms)


# ---------------------------------------------------------------------------- InitProducerId
@dataclass(frozen=True)
class InitDecision:
    """What an InitProducerId leads to: ``meta`` is the metadata to write. ``rotate``: the
    epoch is exhausted, so the coordinator must allocate a new producer id and call
    :func:`rotate_producer_id` instead. ``fenced_abort``: ``meta`` is the PrepareAbort of the
    previous producer's transaction (epoch bumped); answer CONCURRENT_TRANSACTIONS once it is
    written, and the client retries after the abort completed."""

    meta: TransactionMetadata
    rotate: bool = False
    fenced_abort: bool = False


def _valid_expected_producer(meta: TransactionMetadata, producer_id: int, epoch: int) -> bool:
    """Kafka's ``isValidProducerId`` (KIP-360): a producer id/epoch in the request must be the
    current id, or the previous id with an exhausted epoch (a retry after a rotation), unless the
    id has never had an epoch (an idempotent producer turning transactional)."""
    return (meta.producer_epoch == NO_PRODUCER_EPOCH or producer_id == meta.producer_id
            or (producer_id == meta.last_producer_id and epoch >= MAX_EPOCH - 1))


def decide_init(meta: TransactionMetadata, *, timeout_ms: int,
                expected: tuple[int, int] | None, now_ms: int) -> InitDecision:
    """InitProducerId for an existing (or just created, :func:`new_metadata`) id.
    ``expected``: the (producer id, epoch) the request carries (KIP-360), None if -1/-1."""
    if expected is not None and not _valid_expected_producer(meta, *expected):
        raise TransactionError(
            ErrorCode.producer_fenced,
            f"Producer id {expected[0]} of transactional id {meta.transactional_id} was "
            f"replaced by {meta.producer_id}.")
    if meta.state in PREPARED:
        raise TransactionError(
            ErrorCode.concurrent_transactions,
            f"Transactional id {meta.transactional_id} is completing its transaction "
            f"({meta.state.value}).")
    if meta.state is S.ONGOING:
        return InitDecision(fence_and_abort(meta, now_ms=now_ms), fenced_abort=True)
    if meta.state not in COMPLETED:
        raise TransactionError(ErrorCode.invalid_txn_state,
                               f"Transactional id {meta.transactional_id} is "
                               f"{meta.state.value}.")
    if meta.epoch_exhausted and (expected is None or expected[1] == meta.producer_epoch):
        return InitDecision(meta, rotate=True)
    if meta.epoch_exhausted:  # a retry with an older epoch of an exhausted producer id
        raise TransactionError(ErrorCode.producer_fenced,
                               f"Epoch {expected[1] if expected else -1} of transactional id "
                               f"{meta.transactional_id} is fenced.")
    bumped = meta.producer_epoch + 1
    if expected is None or meta.producer_epoch == NO_PRODUCER_EPOCH \
            or expected[1] == meta.producer_epoch:
        epoch, last = bumped, (NO_PRODUCER_EPOCH if expected is None else meta.producer_epoch)
    elif expected[1] == meta.last_producer_epoch:
        # a retry of a bump whose answer the producer never got: answer the current epoch
        epoch, last = meta.producer_epoch, meta.last_producer_epoch
    else:
        raise TransactionError(
            ErrorCode.producer_fenced,
            f"Epoch {expected[1]} of transactional id {meta.transactional_id} is fenced by "
            f"epoch {meta.producer_epoch}.")
    return InitDecision(transition(meta, S.EMPTY, producer_epoch=epoch, last_producer_epoch=last,
                                   timeout_ms=timeout_ms, partitions=frozenset(),
                                   groups=frozenset(), txn_start_ms=-1, last_update_ms=now_ms))


def rotate_producer_id(meta: TransactionMetadata, new_producer_id: int, *, timeout_ms: int,
                       record_last_epoch: bool, now_ms: int) -> TransactionMetadata:
    """Kafka's ``prepareProducerIdRotation``: an exhausted epoch moves to a new producer id at
    epoch 0; the old id (and, when the request named it, its epoch) are kept for retries."""
    return transition(meta, S.EMPTY, producer_id=new_producer_id,
                      last_producer_id=meta.producer_id, producer_epoch=0,
                      last_producer_epoch=meta.producer_epoch if record_last_epoch
                      else NO_PRODUCER_EPOCH,
                      timeout_ms=timeout_ms, partitions=frozenset(), groups=frozenset(),
                      txn_start_ms=-1, last_update_ms=now_ms)


def fence_and_abort(meta: TransactionMetadata, *, now_ms: int) -> TransactionMetadata:
    """Ongoing -> (PrepareEpochFence) -> PrepareAbort with the epoch bumped, so the producer
    that began the transaction is fenced (Kafka's ``prepareFenceProducerEpoch`` followed by the
    abort): used when a new producer instance initialises and when the transaction times out."""
    if meta.producer_epoch >= MAX_EPOCH:
        raise TransactionError(ErrorCode.invalid_txn_state,
                               f"Transactional id {meta.transactional_id}: epoch "
                               f"{meta.producer_epoch} cannot be bumped.")
    fencing = transition(meta, S.PREPARE_EPOCH_FENCE, producer_epoch=meta.producer_epoch + 1,
                         last_producer_epoch=NO_PRODUCER_EPOCH)
    return transition(fencing, S.PREPARE_ABORT, last_update_ms=now_ms)


# ---------------------------------------------------------------------------- in a transaction
def _check_producer(meta: TransactionMetadata, producer_id: int, epoch: int) -> None:
    if producer_id != meta.producer_id:
        raise TransactionError(
            ErrorCode.invalid_producer_id_mapping,
            f"Producer id {producer_id} is not the one of transactional id "
            f"{meta.transactional_id}.")
    if epoch != meta.producer_epoch:
        raise TransactionError(
            ErrorCode.producer_fenced,
            f"Epoch {epoch} of transactional id {meta.transactional_id} is fenced (current "
            f"epoch {meta.producer_epoch}).")


def decide_add(meta: TransactionMetadata, *, producer_id: int, epoch: int,
               partitions: Iterable[TopicPartition] = (), groups: Iterable[str] = (),
               now_ms: int) -> TransactionMetadata | None:
    """AddPartitionsToTxn / AddOffsetsToTxn: the transaction becomes (or stays) Ongoing with
    these partitions and groups; None when it already holds them all."""
    _check_producer(meta, producer_id, epoch)
    if meta.state in PREPARED:
        raise TransactionError(
            ErrorCode.concurrent_transactions,
            f"Transactional id {meta.transactional_id} is completing its previous transaction "
            f"({meta.state.value}).")
    added_partitions, added_groups = frozenset(partitions), frozenset(groups)
    if meta.state is S.ONGOING and added_partitions <= meta.partitions \
            and added_groups <= meta.groups:
        return None
    begins = meta.state in COMPLETED
    return transition(
        meta, S.ONGOING,
        partitions=(frozenset() if begins else meta.partitions) | added_partitions,
        groups=(frozenset() if begins else meta.groups) | added_groups,
        txn_start_ms=now_ms if begins else meta.txn_start_ms, last_update_ms=now_ms)


def decide_end(meta: TransactionMetadata, *, producer_id: int, epoch: int, commit: bool,
               now_ms: int) -> TransactionMetadata | None:
    """EndTxn from a client: Ongoing -> PrepareCommit/PrepareAbort (the metadata to write);
    None when the same outcome already completed (a retried EndTxn succeeds, as in Kafka).
    While the markers of the same outcome are written: CONCURRENT_TRANSACTIONS; the opposite
    outcome of a prepared or completed transaction, or an EndTxn without a transaction:
    INVALID_TXN_STATE."""
    _check_producer(meta, producer_id, epoch)
    wanted = "commit" if commit else "abort"
    if meta.state is S.ONGOING:
        return transition(meta, S.PREPARE_COMMIT if commit else S.PREPARE_ABORT,
                          last_update_ms=now_ms)
    if meta.state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
        return None
    if meta.state is (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
        raise TransactionError(
            ErrorCode.concurrent_transactions,
            f"Transactional id {meta.transactional_id}: the {wanted} is being completed.")
    raise TransactionError(
        ErrorCode.invalid_txn_state,
        f"Transactional id {meta.transactional_id} cannot {wanted} in state "
        f"{meta.state.value}.")


def complete(meta: TransactionMetadata, *, now_ms: int) -> TransactionMetadata:
    """PrepareCommit/PrepareAbort -> CompleteCommit/CompleteAbort once every marker is written
    (the transaction's partitions and groups are cleared, as Kafka's ``prepareComplete``)."""
    target = S.COMPLETE_COMMIT if meta.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
    return transition(meta, target, partitions=frozenset(), groups=frozenset(),
                      last_update_ms=now_ms)


# ---------------------------------------------------------------------------- timers
def timed_out(meta: TransactionMetadata, now_ms: int) -> bool:
    """An Ongoing transaction older than its ``transaction.timeout.ms`` (aborted by the
    coordinator, fencing the producer's epoch)."""
    return meta.state is S.ONGOING and meta.txn_start_ms + meta.timeout_ms < now_ms


def expired(meta: TransactionMetadata, now_ms: int, expiration_ms: int) -> bool:
    """An id idle for ``transactional.id.expiration.ms`` without an open transaction."""
    return meta.state in COMPLETED and meta.last_update_ms + expiration_ms <= now_ms


def listed(meta: TransactionMetadata, *, states: frozenset[TransactionState],
           producer_ids: frozenset[int], min_duration_ms: int, now_ms: int) -> bool:
    """Whether ListTransactions' filters keep ``meta`` (empty filter: all; duration -1: all;
    otherwise transactions running longer than ``min_duration_ms``, as Kafka)."""
    if meta.state is S.DEAD:
        return False
    if producer_ids and meta.producer_id not in producer_ids:
        return False
    if states and meta.state not in states:
        return False
    return not (min_duration_ms >= 0 and now_ms - meta.txn_start_ms <= min_duration_ms)
