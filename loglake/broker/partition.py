"""One partition replica hosted by this broker: log, role, high watermark, follower progress.

Roles (from the partition-state znode in ZooKeeper, applied by :meth:`Partition.apply_state`)::

    NONE ──state names us leader──▶ LEADER ◀──new state, leader == us──┐
      │                              │ state names someone else        │
      └──state names someone else──▶ FOLLOWER ─────────────────────────┘

Invariants:

* Consumers only see offsets below the high watermark (HW). As leader, HW is the minimum log end
  offset (LEO) over the ISR, never decreasing while leading; a follower learns HW from the
  leader's fetch responses, capped by its own LEO. HW is checkpointed (``high-watermark``) so a
  restarted replica does not expose uncommitted records nor hide committed ones for long.
* On becoming leader with epoch E, the leader-epoch cache records (E, LEO): followers truncate
  against it (KIP-101/279) instead of trusting their HW.
* Waiters (:meth:`Partition.waiter`, used by the replica manager's delayed produce and delayed
  fetch, broker/delayed_operations.py) are woken by every append, high-watermark move,
  log-start move, loss of leadership and by :meth:`Partition.close`.
* A follower is *caught up* at time T if its fetch offset reached the leader's LEO as it was at
  its previous fetch at T (Kafka's rule); followers not caught up for ``replica.lag.time.max.ms``
  leave the ISR, followers whose LEO reaches HW (and the current epoch's start) with a fetch in
  the last ``FRESH_FETCH_MS`` rejoin it. :meth:`isr_changes` only names them: the broker writes
  the new ISR to ZooKeeper, and it takes effect here through :meth:`apply_state`.
* Transactions (Kafka's ``ProducerStateManager`` in ``UnifiedLog``): the producer table
  (producer_state.py) knows every open transaction; the *last stable offset* (LSO,
  :attr:`Partition.last_stable_offset`) is the minimum of the high watermark and the first
  unstable offset, on leaders and followers alike (followers rebuild the table from the
  replicated batches and markers, so a new leader knows the open transactions). Markers are
  appended by :meth:`Partition.write_txn_marker` (leader only); every ABORT marker adds an entry
  to the transaction index of the segment it lands in (segments/txn_index.py), which
  :meth:`Partition.aborted_transactions` answers from memory.
* Producer-state snapshots (segments/producer_snapshot.py): written as of the new segment's
  base offset when a segment rolls and as of the log end at :meth:`Partition.close`; the two
  newest are kept, plus every one from the newest at or below the checkpointed recovery point
  (an unclean open recovers, and replays, from that segment's base); those above a truncation
  point, and those below the first segment once retention or DeleteRecords deleted it, are
  deleted. At open and after a truncation the table is the newest readable snapshot at or below
  the log end (after an unclean stop, at or below the first segment recovery re-validated) and
  not below the first segment, plus a replay of every stored batch header after it (below the
  log start too: a transaction DeleteRecords cut into stays open); the replay also re-adds
  transaction-index entries that the crash lost, and those of a damaged index
  (``PartitionLog.check_txn_indexes``: a sealed segment's file missing, an entry that is not
  an ABORT marker of the segment) from a snapshot at or below it. The snapshot at a roll is
  written durably on the event loop (two fsyncs: measured 6-18 ms for 10 to 10,000 producers on
  the development disk), once per rolled segment (segment.bytes, 1 GiB by default): kept there
  rather than in the flush job because the roll's retention of older snapshots relies on it.
* The log start offset only moves forward (DeleteRecords, retention: :meth:`advance_log_start`).
  Followers adopt the leader's from fetch responses; the leader keeps the one each follower
  reports in its fetches, and the *low watermark* (:meth:`low_watermark`) is the smallest over
  itself and the followers it waits for, as Kafka's ``lowWatermarkIfLeader``.

Thread-safety: everything runs on the broker's event-loop thread; no locks.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loglake.broker.producer_state import CompletedTxn, ProducerStateTable, ProducerSummary
from loglake.catalog.zookeeper import PartitionState
from loglake.config import TopicConfig
from loglake.errors import (
    FencedLeaderEpochError,
    NotLeaderError,
    OutOfOrderSequenceError,
    UnknownLeaderEpochError,
)
from loglake.segments import checkpoint, producer_snapshot
from loglake.segments.batch import BatchHeader, Buffer, parse_batches
from loglake.segments.log import PartitionLog
from loglake.segments.records import decode_end_txn_marker, encode_end_txn_marker
from loglake.segments.txn_index import AbortedTxn

# a follower only rejoins the ISR on the strength of a recent fetch (Kafka expands on fetch)
FRESH_FETCH_MS = 2000
SNAPSHOTS_KEPT = 2  # newest producer-state snapshots kept (plus one at the active base)


class Role(enum.Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass
class FollowerProgress:
    """What the leader knows of one follower (reset at every leadership change)."""

    log_end_offset: int = -1
    last_caught_up_ms: float = 0.0
    last_fetch_leader_leo: int = 0
    last_fetch_ms: float = 0.0
    log_start_offset: int = -1  # as its last fetch reported it (-1: unknown)


class AppendOutcome:
    """What a produce to this partition answers: offsets, append time, log start."""

    __slots__ = ("base_offset", "last_offset", "log_append_time_ms", "log_start_offset")

    def __init__(self, base_offset: int, last_offset: int, log_append_time_ms: int,
                 log_start_offset: int):
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.log_append_time_ms = log_append_time_ms
        self.log_start_offset = log_start_offset


class Partition:
    def __init__(
        self,
        topic: str,
        index: int,
        directory: Path,
        config: TopicConfig,
        *,
        broker_id: int,
        replicas: tuple[int, ...] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.topic = topic
        self.index = index
        self.config = config
        self.broker_id = broker_id
        self.replicas = replicas or (broker_id,)
        self.clock = clock
        self.log = PartitionLog.open(directory, config, clock=clock)
        self.producers = ProducerStateTable()
        self.role = Role.NONE
        self.state: PartitionState | None = None
        self.leader_epoch = -1
        self.followers: dict[int, FollowerProgress] = {}
        self._hw = min(self._read_hw_checkpoint(), self.log.log_end_offset)
        self._hw_checkpointed = self._hw
        self.closed = False
        self._waiters: set[asyncio.Future[None]] = set()
        limit = self.log.log_end_offset
        for damaged in (self.log.first_recovered_offset, self.log.check_txn_indexes()):
            if damaged is not None:
                limit = min(limit, damaged)  # replay from at or below it
        self._load_producer_state(limit)
        self.log.ensure_txn_index_files()
        self.log.before_roll = self._snapshot_producer_state

    # ------------------------------------------------------------------ state
    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        """The high watermark, or the first offset of a transaction not yet decided (or
        decided by a marker not yet below the high watermark) when that is lower; never
        below the log start offset (DeleteRecords may cut into an open transaction)."""
        first = self.producers.first_unstable_offset(self._hw)
        lso = self._hw if first is None else min(first, self._hw)
        return max(lso, min(self.log.log_start_offset, self._hw))

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, end_offset), oldest first (from the
        in-memory transaction indexes)."""
        return self.log.aborted_transactions(start_offset, end_offset)

    def producer_summaries(self) -> list[ProducerSummary]:
        """Every producer this partition holds state for (DescribeProducers)."""
        return self.producers.summaries()

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr if self.state is not None else ()

    @property
    def leader_id(self) -> int:
        return self.state.leader if self.state is not None else -1

    def apply_state(self, state: PartitionState) -> bool:
        """Adopt a new partition state; returns True if this replica must (re)start following
        (new leader or new epoch), so the caller can schedule truncation and fetching."""
        previous = self.state
        self.state = state
        if state.leader == self.broker_id:
            if self.role is not Role.LEADER or state.leader_epoch != self.leader_epoch:
                self._become_leader(state)
            else:
                if previous is not None:  # who left the ISR must fetch again to rejoin
                    for replica in set(previous.isr) - set(state.isr):
                        progress = self.followers.get(replica)
                        if progress is not None:
                            progress.last_fetch_ms = 0.0
                        if replica not in self.replicas:  # reassigned away (set_replicas)
                            self.followers.pop(replica, None)
                self._maybe_advance_hw()  # the ISR may have shrunk
            return False
        new_leader = (
            self.role is not Role.FOLLOWER
            or previous is None
            or previous.leader != state.leader
            or previous.leader_epoch != state.leader_epoch
        )
        self.role = Role.FOLLOWER
        self.leader_epoch = state.leader_epoch
        self.followers.clear()
        self._wake()  # delayed produces fail, long polls answer NOT_LEADER_OR_FOLLOWER
        return new_leader

    def _become_leader(self, state: PartitionState) -> None:
        now = self.clock() * 1000
        self.role = Role.LEADER
        self.leader_epoch = state.leader_epoch
        self.log.leader_epoch_cache.assign(state.leader_epoch, self.log.log_end_offset)
        self.followers = {
            replica: FollowerProgress(last_caught_up_ms=now, last_fetch_ms=now)
            for replica in self.replicas if replica != self.broker_id
        }
        self._maybe_advance_hw()

    def set_replicas(self, replicas: tuple[int, ...]) -> None:
        """The assignment changed (a reassignment added or removed replicas). As leader, new
        followers are tracked from now on (they join the ISR once caught up, as any follower);
        a removed one is forgotten once it is out of the ISR: until the state drops it, it
        still counts for the high watermark, so acks=all never loses a member silently."""
        self.replicas = replicas
        if self.role is not Role.LEADER:
            return
        for replica in replicas:
            if replica != self.broker_id and replica not in self.followers:
                self.followers[replica] = FollowerProgress(last_caught_up_ms=self.clock() * 1000)
        for replica in list(self.followers):
            if replica not in replicas and replica not in self.isr:
                del self.followers[replica]

    def require_leader(self) -> None:
        if self.role is not Role.LEADER:
            raise NotLeaderError(
                f"Broker {self.broker_id} is not the leader of {self.name} "
                f"(leader: {self.leader_id})."
            )

    def check_leader_epoch(self, requested: int) -> None:
        """KIP-320: a request naming a leader epoch (-1: none) must name the current one;
        FencedLeaderEpochError when it is older, UnknownLeaderEpochError when newer."""
        if requested < 0 or requested == self.leader_epoch:
            return
        message = (f"Leader epoch {requested} does not match current epoch "
                   f"{self.leader_epoch} of {self.name}.")
        if requested < self.leader_epoch:
            raise FencedLeaderEpochError(message)
        raise UnknownLeaderEpochError(message)

    # ------------------------------------------------------------------ leader: append
    def append(self, records: bytes) -> AppendOutcome:
        """Append a producer's batches as leader; wakes fetchers. As in Kafka, every record is
        validated (PartitionLog.validate) before the idempotence check, and nothing refused
        is appended."""
        self.require_leader()
        headers = parse_batches(records)
        validated = self.log.validate(records, headers)
        duplicates = self.producers.check_batches(headers)
        if any(d is not None for d in duplicates):
            if all(d is not None for d in duplicates):
                first = duplicates[0]
                assert first is not None
                last = first + sum(h.last_offset_delta + 1 for h in headers) - 1
                return AppendOutcome(first, last, -1, self.log.log_start_offset)
            raise OutOfOrderSequenceError(
                "Request mixes duplicate and new batches of an idempotent producer."
            )
        result = self.log.append(records, leader_epoch=self.leader_epoch, headers=headers,
                                 validated=validated)
        for header in result.batches:
            self.producers.record_batch(header)
        self._maybe_advance_hw()
        self._wake()
        return AppendOutcome(result.base_offset, result.last_offset, result.log_append_time_ms,
                             result.log_start_offset)

    def write_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                         commit: bool) -> AppendOutcome:
        """Append a COMMIT (``commit``) or ABORT marker for the producer's transaction as
        leader (WriteTxnMarkers). InvalidProducerEpochError for an older producer epoch,
        TransactionCoordinatorFencedError for an older coordinator epoch (producer_state.py).
        An ABORT adds the transaction to the segment's transaction index."""
        self.require_leader()
        self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        now_ms = int(self.clock() * 1000)
        data = encode_end_txn_marker(producer_id=producer_id, producer_epoch=producer_epoch,
                                     coordinator_epoch=coordinator_epoch, commit=commit,
                                     timestamp_ms=now_ms)
        result = self.log.append(data, leader_epoch=self.leader_epoch,
                                 headers=parse_batches(data), validated=[now_ms])
        self._apply_batch(result.batches[0], data, 0)
        self._maybe_advance_hw()
        self._wake()
        return AppendOutcome(result.base_offset, result.last_offset, result.log_append_time_ms,
                             result.log_start_offset)

    def _apply_batch(self, header: BatchHeader, data: Buffer, position: int) -> None:
        """Update the producer table (and, for an ABORT, the transaction index) for a batch
        stored at ``header.base_offset`` whose bytes start at ``data[position]``. No checks:
        the leader made them (followers, replays, and the leader after its checks)."""
        if not header.is_control:
            self.producers.record_batch(header)
            return
        marker = decode_end_txn_marker(data, header, position)
        if marker is None:
            return
        completed = self.producers.record_marker(
            header.producer_id, header.producer_epoch, marker.coordinator_epoch,
            commit=marker.commit, offset=header.base_offset, timestamp=header.max_timestamp)
        if completed is not None and completed.aborted:
            self.log.add_aborted_txn(_index_entry(completed))

    # ------------------------------------------------------------------ leader: followers
    def record_follower_fetch(self, replica: int, fetch_offset: int,
                              log_start_offset: int = -1) -> None:
        """A follower fetched from ``fetch_offset``: that is its log end offset (and
        ``log_start_offset`` its log start, when the request says)."""
        progress = self.followers.get(replica)
        if progress is None or self.role is not Role.LEADER:
            return
        if log_start_offset >= 0:
            progress.log_start_offset = log_start_offset
        now = self.clock() * 1000
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            progress.last_caught_up_ms = now
        elif fetch_offset >= progress.last_fetch_leader_leo:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end_offset = fetch_offset
        progress.last_fetch_leader_leo = leo
        progress.last_fetch_ms = now
        self._maybe_advance_hw()

    def follower_divergence(self, last_fetched_epoch: int,
                            fetch_offset: int) -> tuple[int, int] | None:
        """KIP-320: ``(epoch, end offset)`` of our log to send back when a follower's last
        fetched epoch does not end at or after its fetch offset in our log (its tail diverges
        and must be truncated before it may count as caught up); None when consistent, or when
        either side knows no epochs (then OffsetForLeaderEpoch's HW fallback applies)."""
        if last_fetched_epoch < 0:
            return None
        epoch, end = self.log.leader_epoch_cache.end_offset_for(last_fetched_epoch)
        if epoch < 0 and end < 0:
            return None
        if epoch < last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def last_fetched_epoch(self) -> int:
        """The leader epoch of our last batch (-1 for an empty log): sent in follower fetches."""
        if self.log.log_end_offset <= self.log.log_start_offset:
            return -1
        latest = self.log.leader_epoch_cache.latest_epoch()
        return -1 if latest is None else latest

    def isr_changes(self, lag_time_ms: int) -> tuple[set[int], set[int]]:
        """(followers to drop from the ISR, followers to add) as of now."""
        if self.role is not Role.LEADER or self.state is None:
            return set(), set()
        now = self.clock() * 1000
        isr = set(self.state.isr)
        epoch_start = self._epoch_start_offset()
        lagging = {
            replica for replica, progress in self.followers.items()
            if replica in isr and now - progress.last_caught_up_ms > lag_time_ms
        }
        caught_up = {
            replica for replica, progress in self.followers.items()
            if replica not in isr and progress.log_end_offset >= max(self._hw, epoch_start)
            and now - progress.last_fetch_ms <= FRESH_FETCH_MS
        }
        return lagging, caught_up

    def _epoch_start_offset(self) -> int:
        for epoch, start in reversed(self.log.leader_epoch_cache.entries):
            if epoch == self.leader_epoch:
                return int(start)
        return 0

    def _maybe_advance_hw(self) -> None:
        if self.role is not Role.LEADER:
            return
        candidates = [self.log.log_end_offset]
        for replica in self.isr:
            if replica == self.broker_id:
                continue
            progress = self.followers.get(replica)
            candidates.append(progress.log_end_offset if progress else -1)
        new_hw = min(candidates)
        if new_hw > self._hw:
            self._hw = new_hw
            self._wake()

    # ------------------------------------------------------------------ log start
    def advance_log_start(self, offset: int) -> bool:
        """Move the log start offset up to ``offset`` (never down, never past the log end)
        and delete the segments wholly below it; True if it moved. The new start is
        checkpointed before any file goes (PartitionLog.set_log_start_offset)."""
        target = min(offset, self.log.log_end_offset)
        if target <= self.log.log_start_offset:
            return False
        self.log.set_log_start_offset(target)
        self.log.delete_segments_before(target)
        self.producers.on_log_start_advanced(self.log.log_start_offset)
        producer_snapshot.delete_below(self.log.directory, self.log.segments[0])
        self._wake()
        return True

    def expire_producers(self, expiration_ms: int) -> list[int]:
        """Forget producers idle for ``expiration_ms`` without an open transaction
        (``producer.id.expiration.ms``, producer_state.py); their ids. Any role."""
        return self.producers.remove_expired(int(self.clock() * 1000), expiration_ms)

    def low_watermark(self, followers: set[int]) -> int:
        """The smallest log start offset over this leader and ``followers`` (as their fetches
        last reported it; -1 while one has not reported)."""
        starts = [self.log.log_start_offset]
        for replica in followers:
            progress = self.followers.get(replica)
            starts.append(progress.log_start_offset if progress is not None else -1)
        return min(starts)

    # ------------------------------------------------------------------ follower
    def append_as_follower(self, records: bytes, leader_hw: int) -> None:
        """Append batches fetched from the leader (offsets kept) and adopt its HW."""
        if records:
            result = self.log.append_as_follower(records)
            start = result.batches[0].position  # where ``records`` begins in the segment
            for header in result.batches:
                self._apply_batch(header, records, header.position - start)
        self.set_follower_hw(leader_hw)

    def set_follower_hw(self, leader_hw: int) -> None:
        new_hw = min(leader_hw, self.log.log_end_offset)
        if new_hw != self._hw:
            self._hw = new_hw
            self._wake()

    def truncate_to(self, offset: int) -> None:
        """Drop local records at or after ``offset`` (divergent tail) and their producer state.

        Even when nothing is cut, epochs that start at our log end go (as in Kafka): an
        ex-leader's cache has an entry for its epoch although it appended nothing in it."""
        if offset >= self.log.log_end_offset:
            self.log.leader_epoch_cache.truncate_from_end(self.log.log_end_offset)
            return
        self.log.truncate_to(offset)
        self._load_producer_state(self.log.log_end_offset)
        self._hw = min(self._hw, self.log.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset`` (a follower far behind the leader's log
        start); the producer state and its snapshots go with it."""
        self.log.truncate_fully_and_start_at(offset)
        producer_snapshot.delete_above(self.log.directory, -1)
        self.producers = ProducerStateTable()

    # ------------------------------------------------------------------ producer state
    def _load_producer_state(self, limit: int) -> None:
        """Rebuild the producer table: the newest readable snapshot at or below ``limit``
        (snapshots above the log end are deleted first) plus a replay of every batch after
        it; ABORT markers replayed re-add missing transaction-index entries."""
        directory = self.log.directory
        producer_snapshot.delete_above(directory, self.log.log_end_offset)
        first_base = self.log.segments[0]
        loaded = producer_snapshot.load_newest(directory, limit, at_least=first_base)
        if loaded is None:
            self.producers, start = ProducerStateTable(), first_base
        else:
            start, producers = loaded
            self.producers = ProducerStateTable.from_snapshot(producers)
        # every stored batch, below the log start too (a transaction DeleteRecords cut into)
        for header in self.log.batch_headers(start, below_log_start=True):
            if header.base_offset < start:
                continue
            if header.is_control:
                self._apply_batch(header, self.log.read_batch(header), 0)
            else:
                self.producers.record_batch(header)

    def _snapshot_producer_state(self, offset: int) -> None:
        """Write the producer state as of ``offset`` (the log end: a roll, a clean close)
        and keep the newest SNAPSHOTS_KEPT snapshots, plus the newest at or below the active
        segment's base (``offset`` at a roll): what an unclean open needs to rebuild the
        transaction index of the active segment without a full replay."""
        directory = self.log.directory
        producer_snapshot.write(directory, offset, self.producers.to_snapshot())
        producer_snapshot.retain_newest(
            directory, SNAPSHOTS_KEPT,
            all_from_at_or_below=min(offset, self.log.checkpointed_recovery_point))

    # ------------------------------------------------------------------ reads and waits
    def visible_end(self, *, from_follower: bool, read_committed: bool) -> int:
        """The offset a fetch reads below: the log end for followers, the high watermark for
        read_uncommitted consumers, the last stable offset for read_committed ones."""
        if from_follower:
            return self.log.log_end_offset
        return self.last_stable_offset if read_committed else self._hw

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool, end: int) -> bytes:
        """Batches from ``offset`` below ``end`` (:meth:`visible_end`)."""
        return self.log.read(offset, max_bytes, max_offset=end, min_one_batch=min_one_batch)

    def waiter(self) -> asyncio.Future[None]:
        """A future completed at the next change (see the module: append, HW or log-start
        move, loss of leadership, close); the waiter re-checks what it waits for."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(future)
        future.add_done_callback(self._waiters.discard)
        return future

    def _wake(self) -> None:
        for future in list(self._waiters):
            if not future.done():
                future.set_result(None)

    # ------------------------------------------------------------------ lifecycle
    def _read_hw_checkpoint(self) -> int:
        return checkpoint.read_high_watermark(self.log.directory)

    def checkpoint_hw(self) -> None:
        """Write the high-watermark checkpoint now if it changed (on the loop; at close)."""
        with self.log.io_lock:
            if self._hw != self._hw_checkpointed:
                checkpoint.write_high_watermark(self.log.directory, self._hw)
                self._hw_checkpointed = self._hw

    def prepare_hw_checkpoint(self) -> int | None:
        """On the loop: the high watermark to checkpoint, or None if the file has it."""
        return None if self.closed or self._hw == self._hw_checkpointed else self._hw

    def write_hw_checkpoint(self, hw: int) -> bool:
        """Any thread: write ``hw`` (from :meth:`prepare_hw_checkpoint`) unless the partition
        closed meanwhile (close writes the newest itself); holds the log's ``io_lock``."""
        with self.log.io_lock:
            if self.closed:
                return False
            checkpoint.write_high_watermark(self.log.directory, hw)
            return True

    def hw_checkpoint_written(self, hw: int) -> None:
        """On the loop, after :meth:`write_hw_checkpoint` wrote ``hw``."""
        self._hw_checkpointed = hw

    def update_config(self, config: TopicConfig) -> None:
        self.config = config
        self.log.update_config(config)

    def close(self) -> None:
        with self.log.io_lock:  # waits for a flush of this partition in a worker thread
            self.closed = True
            self._wake()
            self.checkpoint_hw()
            if not self.log.closed:
                self._snapshot_producer_state(self.log.log_end_offset)
                self.log.close()  # flushed, checkpointed: no recovery needs older snapshots
                producer_snapshot.retain_newest(self.log.directory, SNAPSHOTS_KEPT)
            self.log.close()


def _index_entry(completed: CompletedTxn) -> AbortedTxn:
    return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                      completed.last_stable_offset)
