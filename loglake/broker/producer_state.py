"""Producer state of one partition: per producer id, its epoch, last 5 batches and transaction.

Rules (Kafka's ``ProducerStateManager`` / ``ProducerAppendInfo``), checked on the leader for
client batches (:meth:`ProducerStateTable.check_batch`) and markers (:meth:`check_marker`):

* a batch with producer id -1 is not idempotent: no checks (a transactional one is refused);
* a producer we hold no state for (new, or expired) may start at any sequence (Kafka since
  KIP-360: no UNKNOWN_PRODUCER_ID);
* epoch lower than the known one -> INVALID_PRODUCER_EPOCH (a fenced, zombie producer);
* epoch higher than the known one -> first sequence must be 0;
* a batch whose (first, last) sequence equals one of the last 5 retained batches is a duplicate
  (a retry): it is answered with its original base offset and not appended again;
* otherwise the first sequence must follow the last appended one (``int32`` wrap-around to 0),
  else OUT_OF_ORDER_SEQUENCE_NUMBER;
* a transactional batch of a producer without an open transaction opens one at its base
  offset; a non-transactional batch while the producer's transaction is open ->
  INVALID_TXN_STATE; control batches never come from clients (INVALID_RECORD);
* the batches of one Produce request are checked in order, each against the state the earlier
  ones leave (:meth:`check_batches`);
* a COMMIT/ABORT marker closes the producer's transaction (:meth:`record_marker`); one with an
  older producer epoch -> INVALID_PRODUCER_EPOCH, an older coordinator epoch than the last
  marker's -> TRANSACTION_COORDINATOR_FENCED. A marker may carry a newer epoch (the coordinator
  bumps it when it aborts a timed-out transaction): the producer's epoch moves up and its
  retained batches are forgotten. A marker for a producer without an open transaction is
  recorded too (a re-sent marker): as in Kafka it moves the producer's epochs and timestamp
  but completes no transaction (no transaction-index entry, no effect on the LSO).

Expiry and the log start (Kafka's ``removeExpiredProducers`` / ``onLogStartOffsetIncremented``):
a producer without an open transaction whose last write is ``producer.id.expiration.ms`` old
is forgotten (:meth:`remove_expired`, run by the broker every
``producer.id.expiration.check.interval.ms``); moving the log start forgets only completed
transactions whose marker it passed. Producers whose batches were all deleted stay until they
expire, as in Kafka since KIP-360 (before it, ``truncateHead`` dropped them at once).

Followers, and replays of the log at open or after a truncation, call only the ``record_*``
methods: no checks, the leader already made them.

The *first unstable offset* (:meth:`first_unstable_offset`) is the smallest first offset of an
open transaction or of a completed one whose marker is not yet below the high watermark
(Kafka's ``unreplicatedTxns``: a new leader without the marker would reopen it). The partition's
last stable offset is the minimum of it and the high watermark.

Durability: the table is rebuilt at open from the newest producer-state snapshot
(segments/producer_snapshot.py, :meth:`to_snapshot` / :meth:`from_snapshot`) plus a replay of
the batch headers after it (broker/partition.py).

Thread-safety: used from the broker's event loop only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from loglake.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from loglake.segments.producer_snapshot import SnapshotBatch, SnapshotProducer

RETAINED_BATCHES = 5
INT32_MAX = 2**31 - 1
NO_TXN = -1


@dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=RETAINED_BATCHES))
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int = NO_TXN

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True)
class CompletedTxn:
    """A transaction closed by a marker at ``last_offset`` (Kafka's ``CompletedTxn``);
    ``last_stable_offset`` is the first unstable offset of the other producers right after it
    (``last_offset + 1`` when none), as the transaction index stores it."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool
    last_stable_offset: int


@dataclass(frozen=True)
class ProducerSummary:
    """What DescribeProducers answers for one producer (``current_txn_start_offset`` -1 when
    no transaction is open)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


def _next_seq(seq: int) -> int:
    return 0 if seq == INT32_MAX else seq + 1


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """Sequence of a batch's last record (sequences wrap at int32 max to 0)."""
    total = base_sequence + last_offset_delta
    return total - INT32_MAX - 1 if total > INT32_MAX else total


class BatchIdentity(Protocol):
    """What the table needs of a batch header (segments.batch.BatchHeader satisfies it)."""

    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset_delta(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...


class ProducerStateTable:
    """Producer id -> :class:`ProducerEntry` for one partition, plus its open transactions."""

    def __init__(self) -> None:
        self._entries: dict[int, ProducerEntry] = {}
        # first offset -> producer id of every open transaction, ordered by first offset
        self._ongoing: dict[int, int] = {}
        # completed transactions whose marker may not be below the high watermark yet
        self._unreplicated: list[CompletedTxn] = []

    def __len__(self) -> int:
        return len(self._entries)

    # ------------------------------------------------------------------ checks (leader)
    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, *,
              staged: dict[int, ProducerEntry] | None = None) -> int | None:
        """Validate a batch's epoch and sequences before it is appended.

        Returns the original base offset when the batch is a duplicate of a retained one,
        None when it may be appended. Raises InvalidProducerEpochError or
        OutOfOrderSequenceError. Duplicates are looked for in the table; epoch and sequence
        are checked against ``staged[producer_id]`` when given (the state the earlier batches
        of the same request leave, :meth:`check_batches`), else the table's entry.
        """
        if producer_id < 0:
            return None
        entry = self._entries.get(producer_id)
        if entry is not None and epoch == entry.epoch:
            for batch in entry.batches:
                if batch.first_seq == first_seq and batch.last_seq == last_seq:
                    return batch.first_offset
        if staged is not None and producer_id in staged:
            entry = staged[producer_id]
        if entry is None:
            return None  # unknown (new, expired): any sequence starts it (Kafka, KIP-360)
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"Producer {producer_id} used epoch {epoch}, but {entry.epoch} is current."
            )
        if epoch > entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"Producer {producer_id} epoch {epoch}: first batch has sequence "
                    f"{first_seq}, expected 0."
                )
            return None
        if first_seq != _next_seq(entry.last_seq):
            raise OutOfOrderSequenceError(
                f"Producer {producer_id}: sequence {first_seq} does not follow "
                f"{entry.last_seq} (a batch was lost or reordered)."
            )
        return None

    def check_batch(self, header: BatchIdentity, *,
                    staged: dict[int, ProducerEntry] | None = None) -> int | None:
        """Every rule for a client's batch (see the module): :meth:`check`, then the
        transaction rules. Returns the original base offset of a duplicate, else None."""
        if header.is_control:
            raise InvalidRecordError("Clients are not allowed to write control records.")
        producer_id = header.producer_id
        if header.is_transactional and producer_id < 0:
            raise InvalidRecordError("A transactional record batch must carry a producer id.")
        duplicate = self.check(producer_id, header.producer_epoch, header.base_sequence,
                               last_sequence(header.base_sequence, header.last_offset_delta),
                               staged=staged)
        if duplicate is not None or producer_id < 0:
            return duplicate
        entry = self._entries.get(producer_id)
        if staged is not None and producer_id in staged:
            entry = staged[producer_id]
        if (not header.is_transactional and entry is not None
                and entry.current_txn_first_offset != NO_TXN):
            raise InvalidTxnStateError(
                f"Producer {producer_id} wrote a non-transactional batch while its transaction "
                f"(from offset {entry.current_txn_first_offset}) is open."
            )
        return None

    def check_batches(self, headers: Sequence[BatchIdentity]) -> list[int | None]:
        """:meth:`check_batch` for every batch of one Produce request, each against the state
        the earlier batches of the request leave (as Kafka's per-request
        ``ProducerAppendInfo``): a producer's second batch must follow its first, a
        non-transactional batch after a transactional one of the same request is
        INVALID_TXN_STATE. Duplicates are looked for in the state before the request. Nothing
        in the table changes."""
        staged: dict[int, ProducerEntry] = {}
        results: list[int | None] = []
        for header in headers:
            duplicate = self.check_batch(header, staged=staged)
            results.append(duplicate)
            producer_id = header.producer_id
            if duplicate is not None or producer_id < 0:
                continue
            entry = staged.get(producer_id)
            if entry is None:
                known = self._entries.get(producer_id)
                entry = ProducerEntry(header.producer_epoch) if known is None else ProducerEntry(
                    known.epoch, deque(known.batches, maxlen=RETAINED_BATCHES),
                    known.coordinator_epoch, known.last_timestamp,
                    known.current_txn_first_offset)
                staged[producer_id] = entry
            if header.producer_epoch != entry.epoch:
                entry.epoch = header.producer_epoch
                entry.batches.clear()
            entry.batches.append(BatchMetadata(
                header.base_sequence,
                last_sequence(header.base_sequence, header.last_offset_delta), -1, -1))
            if header.is_transactional and entry.current_txn_first_offset == NO_TXN:
                entry.current_txn_first_offset = 0  # open (its offset is not known yet)
        return results

    def check_marker(self, producer_id: int, producer_epoch: int,
                     coordinator_epoch: int) -> None:
        """A COMMIT/ABORT marker may be written: raises InvalidProducerEpochError for an
        older producer epoch, TransactionCoordinatorFencedError for an older coordinator
        epoch than the producer's last marker."""
        entry = self._entries.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"Transaction marker for producer {producer_id} has epoch {producer_epoch}, "
                f"but {entry.epoch} is current."
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"Transaction marker for producer {producer_id} comes from coordinator epoch "
                f"{coordinator_epoch}, older than the last one seen ({entry.coordinator_epoch})."
            )

    # ------------------------------------------------------------------ updates (all roles)
    def record(
        self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
        first_offset: int, last_offset: int,
    ) -> None:
        """Remember an appended data batch (after :meth:`check` passed, or when replaying)."""
        if producer_id < 0:
            return
        entry = self._entry(producer_id, epoch)
        entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset))

    def record_batch(self, header: BatchIdentity) -> None:
        """Remember a data batch as stored (offsets assigned): sequences, timestamp, and the
        producer's transaction opens at a transactional batch when none is open."""
        producer_id = header.producer_id
        if producer_id < 0:
            return
        self.record(producer_id, header.producer_epoch, header.base_sequence,
                    last_sequence(header.base_sequence, header.last_offset_delta),
                    header.base_offset, header.base_offset + header.last_offset_delta)
        entry = self._entries[producer_id]
        entry.last_timestamp = header.max_timestamp
        if header.is_transactional and entry.current_txn_first_offset == NO_TXN:
            entry.current_txn_first_offset = header.base_offset
            self._open(header.base_offset, producer_id)

    def record_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      *, commit: bool, offset: int, timestamp: int) -> CompletedTxn | None:
        """Remember a COMMIT/ABORT marker stored at ``offset``: the producer's transaction is
        complete. None when no transaction was open (a re-sent marker): as in Kafka only the
        producer's epochs and timestamp move, and no transaction-index entry is due."""
        entry = self._entry(producer_id, producer_epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = timestamp
        first = entry.current_txn_first_offset
        if first == NO_TXN:
            return None
        self._ongoing.pop(first, None)
        entry.current_txn_first_offset = NO_TXN
        lso = next(iter(self._ongoing), offset + 1)
        completed = CompletedTxn(producer_id, first, offset, not commit, lso)
        self._unreplicated.append(completed)
        return completed

    def on_log_start_advanced(self, log_start: int) -> None:
        """The log start moved (DeleteRecords, retention): completed transactions whose marker
        is below it stop holding the first unstable offset (Kafka's
        ``onLogStartOffsetIncremented``). Producers stay (as Kafka since KIP-360: their
        sequences still fence retries) until they expire (:meth:`remove_expired`); an open
        transaction whose first offset was deleted stays open, and the partition's LSO is
        never below the log start."""
        self._unreplicated = [t for t in self._unreplicated if t.last_offset >= log_start]

    def remove_expired(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget producers without an open transaction whose last write (batch or marker
        timestamp) is ``expiration_ms`` or more before ``now_ms`` (Kafka's
        ``removeExpiredProducers``, ``producer.id.expiration.ms``); their ids, sorted. A
        forgotten producer's next batch is accepted at any sequence, as a new one's."""
        expired = sorted(
            pid for pid, entry in self._entries.items()
            if entry.current_txn_first_offset == NO_TXN
            and now_ms - entry.last_timestamp >= expiration_ms
        )
        for pid in expired:
            del self._entries[pid]
        return expired

    def _entry(self, producer_id: int, epoch: int) -> ProducerEntry:
        """The producer's entry at ``epoch``: created if missing; a newer epoch forgets the
        retained batches (they belong to the old epoch) but keeps the transaction."""
        entry = self._entries.get(producer_id)
        if entry is None:
            entry = self._entries[producer_id] = ProducerEntry(epoch)
        elif epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        return entry

    def _open(self, first_offset: int, producer_id: int) -> None:
        if self._ongoing and first_offset < next(reversed(self._ongoing)):
            items = sorted([*self._ongoing.items(), (first_offset, producer_id)])
            self._ongoing = dict(items)
        else:
            self._ongoing[first_offset] = producer_id

    # ------------------------------------------------------------------ queries
    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The smallest first offset of an open transaction or of a completed one whose
        marker is at or above ``high_watermark`` (see the module); None when none."""
        first = next(iter(self._ongoing), None)
        if self._unreplicated:
            self._unreplicated = [t for t in self._unreplicated
                                  if t.last_offset >= high_watermark]
            for txn in self._unreplicated:
                if first is None or txn.first_offset < first:
                    first = txn.first_offset
        return first

    def open_transactions(self) -> list[tuple[int, int]]:
        """``(first offset, producer id)`` of every open transaction, oldest first."""
        return list(self._ongoing.items())

    def summaries(self) -> list[ProducerSummary]:
        """One :class:`ProducerSummary` per producer, by producer id."""
        return [
            ProducerSummary(pid, entry.epoch, entry.last_seq, entry.last_timestamp,
                            entry.coordinator_epoch, entry.current_txn_first_offset)
            for pid, entry in sorted(self._entries.items())
        ]

    # ------------------------------------------------------------------ snapshots
    def to_snapshot(self) -> list[SnapshotProducer]:
        """The table as snapshot entries (segments/producer_snapshot.py)."""
        return [
            SnapshotProducer(
                pid, entry.epoch, entry.coordinator_epoch, entry.last_timestamp,
                entry.current_txn_first_offset,
                tuple(SnapshotBatch(b.first_seq, b.last_seq, b.first_offset, b.last_offset)
                      for b in entry.batches),
            )
            for pid, entry in sorted(self._entries.items())
        ]

    @classmethod
    def from_snapshot(cls, producers: list[SnapshotProducer]) -> ProducerStateTable:
        """A table holding what a snapshot stored (completed transactions are all taken as
        replicated: the snapshot was written at or below the log end)."""
        table = cls()
        for producer in producers:
            entry = ProducerEntry(producer.producer_epoch)
            for b in producer.batches:
                entry.batches.append(BatchMetadata(b.first_seq, b.last_seq, b.first_offset,
                                                   b.last_offset))
            entry.coordinator_epoch = producer.coordinator_epoch
            entry.last_timestamp = producer.last_timestamp
            entry.current_txn_first_offset = producer.current_txn_first_offset
            table._entries[producer.producer_id] = entry
            if producer.current_txn_first_offset != NO_TXN:
                table._open(producer.current_txn_first_offset, producer.producer_id)
        return table
