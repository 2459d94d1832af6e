"""Consumer offsets inside transactions (TxnOffsetCommit, KIP-98/KIP-447): the pure rules.

**Where a group's transactional offsets go.** Kafka writes a group's TxnOffsetCommit records
to partition ``offsets_partition_for(group)`` of ``__consumer_offsets``, and the transaction
coordinator's marker for that partition commits or aborts them.
:func:`offsets_partition_for` is Kafka's ``Utils.abs(groupId.hashCode) % 50``: Java's
``String.hashCode`` over UTF-16 code units, and ``Utils.abs`` (``Math.abs``, except that
``Integer.MIN_VALUE`` maps to 0 -- not ``x & 0x7fffffff``, which differs for every negative
hash). loglake has no ``__consumer_offsets`` topic; the number only names which pending offsets
a WriteTxnMarkers entry for ``__consumer_offsets`` ends (see
:meth:`GroupCoordinator.complete_transaction`), so coordinator and marker sender agree on it.

**Pending offsets.** TxnOffsetCommit stores offsets as *pending* for (producer id, group):
durable in ZooKeeper at ``/loglake/txn_offsets/<producer_id>/<group>`` (catalog/groups.py)
before the response, and mirrored in the coordinator's memory for the groups it owns. They are
not committed: OffsetFetch answers the last committed offset, or UNSTABLE_OFFSET_COMMIT with
``require_stable``. A marker makes them committed (commit) or drops them (abort).

**Order of commits** (Kafka's ``GroupMetadata.completePendingTxnOffsetCommit``): every offset
write has a position in the offsets log; at commit, a transactional offset replaces the
committed one only if the committed one was written *before* the TxnOffsetCommit. So a plain
OffsetCommit made while the transaction is open wins over it (it was written later), and one
made before loses. Here the position is ZooKeeper's zxid of the write: a pending entry's order
is the zxid of the TxnOffsetCommit write that last set it, a committed offset's the zxid of its
OffsetCommit write or, if a transaction committed it, the order of its TxnOffsetCommit (kept in
its metadata znode) -- see :func:`transactional_offset_wins`.

**Epochs.** A TxnOffsetCommit with an epoch older than the producer's pending entry is fenced
(INVALID_PRODUCER_EPOCH); a newer epoch replaces an older entry (that transaction has ended:
the transaction coordinator completes it before a new epoch can write). A marker whose epoch
is older than the pending entry's is stale and leaves it alone; a marker may carry a newer
epoch (the coordinator bumps the epoch when it aborts on timeout, and Kafka's transaction
version 2 at every end).

Pure functions and constants: safe from any thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from loglake.catalog.groups import CommittedOffset, CommittedOrder, PendingTxnOffsets
from loglake.errors import InvalidProducerEpochError

OFFSETS_PARTITIONS = 50
"""Kafka's default ``offsets.topic.num.partitions``: the range of :func:`offsets_partition_for`."""

OFFSETS_TOPIC = "__consumer_offsets"
"""The topic name WriteTxnMarkers entries for group offsets carry."""

TopicPartitionKey = tuple[str, int]


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units,
    in 32-bit two's complement."""
    units = text.encode("utf-16-be", "surrogatepass")
    value = 0
    for i in range(0, len(units), 2):
        value = (value * 31 + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def kafka_abs(value: int) -> int:
    """Kafka's ``Utils.abs``: ``Math.abs``, except ``Integer.MIN_VALUE`` -> 0."""
    return 0 if value == -(1 << 31) else abs(value)


def offsets_partition_for(group_id: str) -> int:
    """The ``__consumer_offsets`` partition of a group, as Kafka computes it."""
    return kafka_abs(java_string_hash(group_id)) % OFFSETS_PARTITIONS


def merge_pending(existing: PendingTxnOffsets | None, producer_id: int, producer_epoch: int,
                  offsets: Mapping[TopicPartitionKey, CommittedOffset]) -> PendingTxnOffsets:
    """What the pending znode holds after a TxnOffsetCommit of ``offsets``: the new offsets
    (order -1: "this write") over the entries of the same epoch; an older epoch's entries
    are dropped. Raises InvalidProducerEpochError when ``existing`` has a newer epoch."""
    if existing is not None and existing.producer_epoch > producer_epoch:
        raise InvalidProducerEpochError(
            f"Producer {producer_id} epoch {producer_epoch} is older than the epoch "
            f"{existing.producer_epoch} of its pending offsets.")
    kept: dict[TopicPartitionKey, CommittedOffset] = {}
    if existing is not None and existing.producer_epoch == producer_epoch:
        kept.update(existing.offsets)
    kept.update({key: CommittedOffset(o.offset, o.leader_epoch, o.metadata, o.commit_time_ms)
                 for key, o in offsets.items()})
    return PendingTxnOffsets(producer_id, producer_epoch, kept,
                             existing.version if existing is not None else -1)


def marker_applies(pending: PendingTxnOffsets, marker_epoch: int) -> bool:
    """Whether a marker with ``marker_epoch`` ends these pending offsets (not a stale one
    from before the epoch that wrote them)."""
    return marker_epoch >= pending.producer_epoch


def transactional_offset_wins(pending_order: int, committed: CommittedOrder) -> bool:
    """Whether a committed transaction's offset (written at ``pending_order``) replaces the
    partition's committed offset: only if that one was written before it, or there is none."""
    return committed.order < 0 or committed.order < pending_order


@dataclass(frozen=True)
class Completion:
    """What ending a transaction does to one group besides deleting its pending znode: the
    offsets that become committed."""

    apply: Mapping[TopicPartitionKey, tuple[CommittedOffset, int]]
    """Offsets to write as committed: (offset with its order, offset-znode version or -1)."""


def plan_completion(pending: PendingTxnOffsets, *, commit: bool,
                    committed: Mapping[TopicPartitionKey, CommittedOrder]) -> Completion:
    """The committed offsets an ended transaction writes (none for an abort); see
    :func:`transactional_offset_wins`."""
    if not commit:
        return Completion({})
    apply = {}
    for key, offset in pending.offsets.items():
        current = committed.get(key, CommittedOrder(-1, -1))
        if transactional_offset_wins(offset.order, current):
            apply[key] = (offset, current.version)
    return Completion(apply)
