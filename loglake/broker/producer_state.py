"""Idempotent-producer state of one partition: per producer id, its epoch and last 5 batches.

Rules (Kafka's ``ProducerStateManager`` / ``ProducerAppendInfo``):

* a batch with producer id -1 is not idempotent: no checks;
* epoch lower than the known one -> INVALID_PRODUCER_EPOCH (a fenced, zombie producer);
* epoch higher than the known one, or a producer we hold no state for -> first sequence must be 0;
* a batch whose (first, last) sequence equals one of the last 5 retained batches is a duplicate
  (a retry): it is answered with its original base offset and not appended again;
* otherwise the first sequence must follow the last appended one (``int32`` wrap-around to 0),
  else OUT_OF_ORDER_SEQUENCE_NUMBER.

State is rebuilt on start-up by replaying the batch headers of the log (:meth:`replay`), so it
survives restarts without a snapshot file (cost: one header scan of the partition at open).

Thread-safety: used from the broker's event loop only.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from loglake.errors import InvalidProducerEpochError, OutOfOrderSequenceError

RETAINED_BATCHES = 5
INT32_MAX = 2**31 - 1


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

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


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


class ProducerStateTable:
    """Producer id -> :class:`ProducerEntry` for one partition."""

    def __init__(self) -> None:
        self._entries: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> int | None:
        """Validate a batch before it is appended.

        Returns the original base offset when the batch is a duplicate of a retained one,
        None when it may be appended. Raises InvalidProducerEpochError or
        OutOfOrderSequenceError.
        """
        if producer_id < 0:
            return None
        entry = self._entries.get(producer_id)
        if entry is None or epoch > entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"Producer {producer_id} epoch {epoch}: first batch has sequence "
                    f"{first_seq}, expected 0."
                )
            return None
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"Producer {producer_id} used epoch {epoch}, but {entry.epoch} is current."
            )
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch.first_offset
        if first_seq != _next_seq(entry.last_seq):
            raise OutOfOrderSequenceError(
                f"Producer {producer_id}: sequence {first_seq} does not follow "
                f"{entry.last_seq} (a batch was lost or reordered)."
            )
        return None

    def record(
        self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
        first_offset: int, last_offset: int,
    ) -> None:
        """Remember an appended batch (after :meth:`check` passed, or when replaying the log)."""
        if producer_id < 0:
            return
        entry = self._entries.get(producer_id)
        if entry is None or epoch != entry.epoch:
            entry = ProducerEntry(epoch)
            self._entries[producer_id] = entry
        entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset))

    def check_batch(self, header: BatchIdentity) -> int | None:
        """:meth:`check` for a batch header."""
        return self.check(header.producer_id, header.producer_epoch, header.base_sequence,
                          last_sequence(header.base_sequence, header.last_offset_delta))

    def record_batch(self, header: BatchIdentity) -> None:
        """:meth:`record` for a batch header as stored (offsets assigned)."""
        self.record(header.producer_id, header.producer_epoch, header.base_sequence,
                    last_sequence(header.base_sequence, header.last_offset_delta),
                    header.base_offset, header.base_offset + header.last_offset_delta)

    def truncate_from(self, offset: int) -> None:
        """Forget batches at or beyond ``offset`` (log truncation)."""
        for producer_id in list(self._entries):
            entry = self._entries[producer_id]
            kept = [b for b in entry.batches if b.last_offset < offset]
            entry.batches.clear()
            entry.batches.extend(kept)
            if not kept:
                del self._entries[producer_id]
