"""The replica manager: the partitions this broker hosts and the replication rules of produce,
fetch and offset lookups (Kafka's ``ReplicaManager``). Request handlers only decode a request,
make one call here and encode the answer.

Hosted replicas: ``partitions`` (open replicas) and ``offline_partitions`` (hosted replicas that
could not be opened: topic-partition -> why); broker/replica_states.py adds and removes entries as
ZooKeeper's assignment and partition states change. :meth:`ReplicaManager.leader_partition` answers
a partition only while this broker leads it and holds a valid ZooKeeper lease (``lease_valid``), so
a broker cut off from ZooKeeper never acknowledges a write nor serves a read as leader.

Produce (:meth:`ReplicaManager.append_records`, Kafka's ``appendRecords``): acks must be 0, 1 or
-1 (INVALID_REQUIRED_ACKS otherwise). Every partition's records are validated before anything
is appended: the request-level rules (segments/validation.py: one batch per partition, magic 2,
zstd needs v7, a transactional batch needs the request's transactional id) here, then the
topic's schema validation when its config turns it on (broker/schema_validation.py: every
value/key framed with a schema id of the topic's subject, else INVALID_RECORD; it may wait for
a ZooKeeper read, so leadership is checked again after it), the batch and record rules in the
log's append. Transactional batches are appended like any other; the
partition's producer state (broker/producer_state.py) opens the producer's transaction at its
first one and answers, as Kafka's log does at every Produce version: INVALID_PRODUCER_EPOCH for a
fenced epoch (never PRODUCER_FENCED, which only the coordinator APIs answer), INVALID_TXN_STATE
for a non-transactional batch of a producer whose transaction is open, INVALID_RECORD for a
control batch (only the broker writes markers). acks=-1 is refused up front with
NOT_ENOUGH_REPLICAS when the ISR is smaller than ``min.insync.replicas``, otherwise appended and
answered by a *delayed produce* (broker/delayed_operations.py): once the high watermark passes
the batch, REQUEST_TIMED_OUT after the request's timeout, NOT_ENOUGH_REPLICAS_AFTER_APPEND if
the ISR shrank below the minimum meanwhile. Partitions of one request are appended concurrently
and independently, in request order: one failing partition does not fail the others.

Fetch (:meth:`ReplicaManager.fetch_messages`, Kafka's ``fetchMessages``): every requested
partition is answered, in request order. The answer goes when the accumulated record bytes reach
``min_bytes``, when any partition has an error, or when ``max_wait`` elapses; until then the
fetch is a *delayed fetch*, re-read whenever one of its partitions changes (append, high
watermark or log start move, leadership loss). Size limits follow KIP-74: ``max_bytes`` per
partition and for the whole response, but the first batch of the first non-empty partition is
returned whole even if larger. KIP-320: a fetch naming an old leader epoch gets
FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH; a follower whose last fetched epoch
diverges from our log gets the diverging epoch and end offset (and no progress is counted).
Consumers read below the high watermark (``isolation_level`` 0, read_uncommitted) or below the
last stable offset (1, read_committed: Fetch v4+; the LSO is the first offset of the oldest open
transaction, at most the high watermark), followers up to the log end. Every consumer answer
carries the partition's LSO; a read_committed one also the aborted transactions
(``(producer_id, first_offset)``, oldest first) that overlap the returned batches, so the client
drops their records (Kafka's ``addAbortedTransactions``); read_uncommitted answers none (null on
the wire). A delayed read_committed fetch wakes when the LSO moves: that is a high-watermark
move or a marker's append, both of which wake the partition's waiters. A follower's fetch
position counts (once, on the first pass) as of the request's arrival: a long poll completing
later must not make a follower that left the ISR meanwhile look freshly caught up.

Tiered storage: a consumer fetch below the local log start is answered from the topic's Delta
table (the tier re-encodes the original batches), and the log start offset consumers see (Fetch,
ListOffsets earliest) is the table's first offset. Follower fetches never read the table: below
the leader's local log start they get OFFSET_OUT_OF_RANGE carrying the leader's local log start,
and restart there. A tier read that fails for any other reason answers KAFKA_STORAGE_ERROR.
The table holds committed data only (aborted records and markers never become rows, and only
offsets below the LSO are tiered), so a tier read answers read_committed consumers with no
aborted transactions and read_uncommitted ones with the same committed records (the aborted
offsets are gaps).

Replication throttle (broker/replication_quota.py): a follower fetch of a partition this leader
throttles gets at most what the leader's bucket holds (no records while it is in debt: the long
poll waits), and the bytes sent are recorded.

Offsets: :meth:`ReplicaManager.offset_for_timestamp` (ListOffsets v1+; with isolation_level 1,
v2+, the last stable offset bounds what it answers instead of the high watermark, as Kafka's
``fetchOffsetForTimestamp``), :meth:`ReplicaManager.legacy_offsets` (ListOffsets v0) and
:meth:`ReplicaManager.end_offset_for_epoch` (OffsetForLeaderEpoch).

Transaction markers (:meth:`ReplicaManager.write_txn_markers`, the data-partition half of
WriteTxnMarkers; Kafka appends them through ``appendRecords`` with acks=-1): each marker is
written on the leader by ``Partition.write_txn_marker`` (one control batch: COMMIT or ABORT,
with the coordinator epoch) and answered once the high watermark passes it, with the delayed
produce's rules and errors (NOT_ENOUGH_REPLICAS up front, REQUEST_TIMED_OUT,
NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER); a stale producer epoch answers
INVALID_PRODUCER_EPOCH and a stale coordinator epoch TRANSACTION_COORDINATOR_FENCED, both
before anything is appended. Partitions of one request are written concurrently and answered
independently. :meth:`ReplicaManager.producer_summaries` answers DescribeProducers (leader only).

Flush scheduler (Kafka's ``LogManager`` flush scheduler and ``ReplicaManager``'s high-watermark
checkpoint): :meth:`ReplicaManager.flush_loop` runs every ``log.flush.scheduler.interval.ms``;
each partition's log fsyncs when its ``flush.messages``/``flush.ms`` is due or a segment rolled,
and its high-watermark checkpoint is written when it changed (segments/checkpoint.py: the file).
The pass picks the work on the loop and runs the fsyncs in a worker thread. The same loop
expires idle producer ids every ``producer.id.expiration.check.interval.ms``
(:meth:`ReplicaManager.expire_producers`).

Thread-safety: event-loop thread only (like :class:`~loglake.broker.partition.Partition`); the
flush pass's worker thread touches only files, under each log's ``io_lock``. Segment files'
modification times are read in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from loglake.broker.delayed_operations import await_change, await_replication
from loglake.broker.metrics.topic_metrics import BrokerTopicMetrics
from loglake.broker.partition import Partition
from loglake.broker.replication_quota import ReplicationQuotas
from loglake.catalog.zookeeper import TopicMetadata
from loglake.config import BrokerConfig
from loglake.errors import (
    InvalidRecordError,
    InvalidRequestError,
    InvalidTimestampError,
    KafkaStorageError,
    LoglakeError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RecordError,
    UnknownTopicError,
)
from loglake.segments.batch import HEADER_SIZE, LOG_OVERHEAD
from loglake.segments.log import FlushJob
from loglake.segments.validation import check_produce_records

if TYPE_CHECKING:
    from loglake.broker.producer_state import ProducerSummary
    from loglake.broker.schema_validation import SchemaValidation

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
"""ListOffsets v8+ (KIP-405): the first offset of the local log."""
LATEST_TIERED_TIMESTAMP = -5
"""ListOffsets v9+ (KIP-1005): the last tiered offset (-1: nothing tiered)."""
NO_RESPONSE_LIMIT = 2**31 - 1
"""The response byte limit of fetches without one (Fetch v0-2)."""
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
"""Fetch and ListOffsets ``isolation_level`` values (Kafka's ``IsolationLevel``)."""
LAST_OFFSET_DELTA_OFFSET = 23
"""Where a RecordBatch v2 header holds lastOffsetDelta (after base offset, length, partition
leader epoch, magic, CRC and attributes)."""


class TopicsView(Protocol):
    """What the replica manager reads of the metadata cache: the known topics."""

    @property
    def topics(self) -> Mapping[str, TopicMetadata]: ...


class TierReader(Protocol):
    """What the replica manager reads of tiered storage (broker/tiering.py's ``Tierer``)."""

    @property
    def storage(self) -> object | None:
        """The tier's storage; None when this broker tiers nothing."""
        ...

    def known_log_start(self, partition: Partition) -> int: ...

    async def log_start(self, partition: Partition) -> int: ...

    async def read(self, partition: Partition, offset: int, max_bytes: int,
                   min_one_batch: bool) -> bytes | None: ...

    async def offset_for_timestamp(self, partition: Partition,
                                   timestamp_ms: int) -> tuple[int, int] | None: ...

    def tiered_end(self, partition: Partition) -> int | None: ...


@dataclass
class ProduceResult:
    """One partition's answer to a produce (Kafka's ``PartitionResponse``)."""

    topic: str
    index: int
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    record_errors: tuple[RecordError, ...] = ()  # INVALID_RECORD / INVALID_TIMESTAMP (KIP-467)
    base_offset: int = -1
    log_start_offset: int = -1
    log_append_time_ms: int = -1  # -1: CreateTime topic


@dataclass(frozen=True)
class FetchParams:
    """What a fetch request says about the whole fetch (Kafka's ``FetchParams``)."""

    replica_id: int = -1  # a follower's broker id; negative: a consumer
    max_wait_s: float = 0.0
    min_bytes: int = 0
    max_bytes: int = NO_RESPONSE_LIMIT  # record bytes in the whole response
    isolation_level: int = READ_UNCOMMITTED  # consumers (followers read to the log end)

    @property
    def from_follower(self) -> bool:
        return self.replica_id >= 0

    @property
    def read_committed(self) -> bool:
        return not self.from_follower and self.isolation_level == READ_COMMITTED


@dataclass(frozen=True)
class PartitionFetch:
    """One requested partition of a fetch (-1: the request does not say)."""

    topic: str
    index: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1  # followers (KIP-320)
    log_start_offset: int = -1  # followers: their log start


@dataclass
class FetchResult:
    """One partition's answer to a fetch. On an error the fields learnt before it keep their
    values (an OFFSET_OUT_OF_RANGE carries the high watermark and log start offset)."""

    topic: str
    index: int
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset), KIP-320
    # read_committed: (producer id, first offset) of the aborted transactions overlapping
    # ``records``, oldest first; None for read_uncommitted and follower fetches
    aborted_transactions: list[tuple[int, int]] | None = None


@dataclass(frozen=True)
class TxnMarker:
    """One marker of a WriteTxnMarkers request, for the data partitions it names."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool  # False: ABORT
    partitions: tuple[tuple[str, int], ...]  # (topic, partition)


@dataclass
class MarkerResult:
    """One partition's answer to a marker write."""

    topic: str
    index: int
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True)
class OffsetAndTimestamp:
    """A ListOffsets answer: the offset found, its timestamp (-1: none) and the leader epoch."""

    offset: int
    timestamp: int
    leader_epoch: int


@dataclass
class _TierRead:
    """A consumer fetch below the local log start, answered from the tier."""

    result: FetchResult
    partition: Partition
    offset: int
    max_bytes: int


@dataclass
class _Pass:
    """One read over a fetch's partitions."""

    results: list[FetchResult] = field(default_factory=list)
    total: int = 0  # record bytes
    failed: bool = False
    watched: list[Partition] = field(default_factory=list)  # what a delayed fetch waits on
    below: list[_TierRead] = field(default_factory=list)


class ReplicaManager:
    """The hosted partitions and the produce/fetch rules over them (see the module)."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        metadata: TopicsView,
        lease_valid: Callable[[], bool],
        tier: TierReader,
        quotas: ReplicationQuotas,
        clock: Callable[[], float] = time.time,
        topic_metrics: BrokerTopicMetrics | None = None,
        schema_validation: SchemaValidation | None = None,
    ) -> None:
        self.config = config
        # confluent.*.schema.validation (broker/schema_validation.py); None: never validated
        self.schema_validation = schema_validation
        # Kafka's BrokerTopicMetrics: counted where produces and fetches are answered
        self.topic_metrics = topic_metrics if topic_metrics is not None else (
            BrokerTopicMetrics())
        self.broker_id = config.broker_id
        self.metadata = metadata
        self.lease_valid = lease_valid
        self.tier = tier
        self.quotas = quotas
        self.clock = clock
        self.partitions: dict[tuple[str, int], Partition] = {}
        # hosted replicas that could not be opened: (topic, partition) -> why
        self.offline_partitions: dict[tuple[str, int], str] = {}

    def leader_partition(self, topic: str, index: int) -> Partition:
        """The partition if this broker leads it now (valid ZooKeeper lease); else
        KafkaStorageError (our replica is offline), UnknownTopicError (no such partition) or
        NotLeaderError (clients refresh metadata)."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            offline = self.offline_partitions.get((topic, index))
            if offline is not None:
                raise KafkaStorageError(
                    f"The replica of {topic}-{index} on broker {self.broker_id} is "
                    f"offline: {offline}")
            meta = self.metadata.topics.get(topic)
            if meta is None or index not in meta.assignment:
                raise UnknownTopicError(f"This server does not host {topic}-{index}.")
            raise NotLeaderError(f"Broker {self.broker_id} does not host {topic}-{index}.")
        partition.require_leader()
        if not self.lease_valid():
            raise NotLeaderError(
                f"Broker {self.broker_id} has no live ZooKeeper session; it does not "
                f"act as leader of {topic}-{index}."
            )
        return partition

    # ------------------------------------------------------------------ produce
    async def append_records(
        self, entries: Sequence[tuple[str, int, bytes | None]], *, acks: int, timeout: float,
        api_version: int, transactional_id: str | None = None,
    ) -> list[ProduceResult]:
        """Append each ``(topic, partition, records)`` as leader and answer each, in order
        (see the module: acks, min.insync.replicas, the delayed produce). ``timeout`` is the
        request's, in seconds; ``api_version`` the Produce version (validation rules)."""
        results = list(await asyncio.gather(*(
            self._append(topic, index, records, acks=acks, timeout=max(timeout, 0.0),
                         api_version=api_version, transactional_id=transactional_id)
            for topic, index, records in entries
        )))
        for result in results:
            self.topic_metrics.produce_answered(result.topic, result.error != ErrorCode.none)
        return results

    async def _append(self, topic: str, index: int, records: bytes | None, *, acks: int,
                      timeout: float, api_version: int,
                      transactional_id: str | None) -> ProduceResult:
        result = ProduceResult(topic, index)
        if acks not in (0, 1, -1):
            result.error = ErrorCode.invalid_required_acks
            result.message = f"acks={acks} is not one of 0, 1, -1 (all)."
            return result
        try:
            if not records:
                raise InvalidRequestError("Produce request carries no record batches.")
            partition = self.leader_partition(topic, index)
            check_produce_records(records, api_version, transactional_id=transactional_id)
            validation = self.schema_validation
            if validation is not None and validation.enabled(partition.config):
                await validation.check(topic, index, partition.config, records)
                partition = self.leader_partition(topic, index)  # still, after the wait
            min_isr = partition.config.min_insync_replicas
            if acks == -1 and len(partition.isr) < min_isr:
                raise NotEnoughReplicasError(
                    f"{partition.name} has {len(partition.isr)} in-sync replicas "
                    f"{list(partition.isr)}, min.insync.replicas is {min_isr}."
                )
            outcome = partition.append(bytes(records))
            self.topic_metrics.appended(topic, outcome.last_offset - outcome.base_offset + 1,
                                        len(records))
            if acks == -1:
                await await_replication(partition, outcome.last_offset, min_isr, timeout)
        except LoglakeError as exc:
            result.error = produce_error(exc.code)
            result.message = exc.message
            if isinstance(exc, InvalidRecordError | InvalidTimestampError):
                result.record_errors = tuple(exc.record_errors)
            return result
        result.base_offset = outcome.base_offset
        result.log_start_offset = outcome.log_start_offset
        result.log_append_time_ms = outcome.log_append_time_ms
        return result

    # ------------------------------------------------------------------ fetch
    async def fetch_messages(self, params: FetchParams,
                             wanted: Sequence[PartitionFetch]) -> list[FetchResult]:
        """Read ``wanted`` as leader, long-polling up to ``params.max_wait_s`` for
        ``params.min_bytes`` (the delayed fetch; see the module). One result per entry of
        ``wanted``, in order."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + params.max_wait_s
        first = True
        while True:
            attempt = self._read(params, wanted, first)
            first = False
            if attempt.below:
                await self._read_tier(params, attempt)
            remaining = deadline - loop.time()
            if (attempt.total >= params.min_bytes or attempt.failed or remaining <= 0
                    or not attempt.watched):
                metrics = self.topic_metrics
                for result in attempt.results:
                    metrics.fetch_answered(result.topic, len(result.records),
                                           result.error != ErrorCode.none)
                return attempt.results
            await await_change(attempt.watched, remaining)

    def _read(self, params: FetchParams, wanted: Sequence[PartitionFetch],
              first: bool) -> _Pass:
        """One pass over the requested partitions (local logs only; reads below the local log
        start are left in ``below`` for :meth:`_read_tier`)."""
        attempt = _Pass()
        tiering = self.tier.storage is not None
        replica = params.replica_id
        for want in wanted:
            result = FetchResult(want.topic, want.index)
            attempt.results.append(result)
            try:
                partition = self.leader_partition(want.topic, want.index)
                partition.check_leader_epoch(want.current_leader_epoch)
                if params.from_follower:
                    diverging = partition.follower_divergence(want.last_fetched_epoch,
                                                              want.fetch_offset)
                    if diverging is not None:  # no progress counted until it truncates
                        result.high_watermark = partition.high_watermark
                        result.log_start_offset = partition.log_start_offset
                        result.diverging_epoch = diverging
                        continue
                    if first:
                        partition.record_follower_fetch(replica, want.fetch_offset,
                                                        want.log_start_offset)
                result.high_watermark = partition.high_watermark
                result.last_stable_offset = partition.last_stable_offset
                result.log_start_offset = partition.log_start_offset
                if params.read_committed:
                    result.aborted_transactions = []
                if not params.from_follower and tiering:
                    result.log_start_offset = self.tier.known_log_start(partition)
                    if 0 <= want.fetch_offset < partition.log_start_offset:
                        attempt.below.append(_TierRead(result, partition, want.fetch_offset,
                                                       want.max_bytes))
                        continue
                if not partition.log_start_offset <= want.fetch_offset <= (
                    partition.log.log_end_offset
                ):
                    raise OffsetOutOfRangeError(
                        f"Fetch offset {want.fetch_offset} is out of range for "
                        f"{want.topic}-{want.index}: [{partition.log_start_offset}, "
                        f"{partition.log.log_end_offset}]."
                    )
                limit = min(want.max_bytes, params.max_bytes - attempt.total)
                throttled = (params.from_follower
                             and self.quotas.leader_throttles(partition, replica))
                if throttled:
                    limit = min(limit, self.quotas.leader.available())
                records = b""
                visible = partition.visible_end(from_follower=params.from_follower,
                                                read_committed=params.read_committed)
                if want.fetch_offset < visible and (
                        limit > 0 or (attempt.total == 0 and not throttled)):
                    records = partition.read(want.fetch_offset, max(limit, 0), end=visible,
                                             min_one_batch=attempt.total == 0)
                if throttled:
                    self.quotas.leader.record(len(records))
                if records and params.read_committed:
                    result.aborted_transactions = aborted_in(partition, want.fetch_offset,
                                                             visible, records)
                result.records = records
                attempt.total += len(records)
                attempt.watched.append(partition)
            except LoglakeError as exc:
                result.error = exc.code
                attempt.failed = True
        return attempt

    async def _read_tier(self, params: FetchParams, attempt: _Pass) -> None:
        """Fill the results of fetches below the local log start from the Delta table."""
        for read in attempt.below:
            result, partition, offset = read.result, read.partition, read.offset
            try:
                start = await self.tier.log_start(partition)
                result.log_start_offset = start
                limit = min(read.max_bytes, params.max_bytes - attempt.total)
                records = None
                if offset >= start and (limit > 0 or attempt.total == 0):
                    records = await self.tier.read(partition, offset, max(limit, 0),
                                                   min_one_batch=attempt.total == 0)
                if records is None:
                    raise OffsetOutOfRangeError(
                        f"Fetch offset {offset} is out of range for {partition.name}: the log "
                        f"holds [{start}, {partition.log.log_end_offset}]."
                    )
                result.records = records
                attempt.total += len(records)
            except LoglakeError as exc:
                result.error = exc.code
                attempt.failed = True
            except Exception as exc:  # storage unreachable, unreadable file: retriable
                log.warning("tier read of %s at %d failed: %s", partition.name, offset, exc)
                result.error = ErrorCode.kafka_storage_error
                attempt.failed = True

    # ------------------------------------------------------------------ offsets
    async def offset_for_timestamp(self, topic: str, index: int, timestamp: int, *,
                                   current_leader_epoch: int = -1,
                                   isolation_level: int = READ_UNCOMMITTED,
                                   ) -> OffsetAndTimestamp:
        """ListOffsets v1+ (Kafka's ``fetchOffsetForTimestamp``). The *fetchable end* is the
        high watermark for read_uncommitted (``isolation_level`` 0) and the last stable offset
        for read_committed (1, ListOffsets v2+). EARLIEST (-2) is the first offset consumers
        see (the tier's when tiered), LATEST (-1) the fetchable end, MAX_TIMESTAMP (-3) the
        record with the largest timestamp (read_committed: only below the fetchable end),
        EARLIEST_LOCAL (-4, v8+) the local log start, LATEST_TIERED (-5, v9+) the last tiered
        offset (-1 when nothing is tiered, as Kafka answers for a topic without remote
        storage), any
        other timestamp the first record at or after it below the fetchable end (offset -1
        when none)."""
        partition = self.leader_partition(topic, index)
        partition.check_leader_epoch(current_leader_epoch)
        offset, found = await self._lookup(partition, timestamp,
                                           isolation_level == READ_COMMITTED)
        return OffsetAndTimestamp(offset, found, partition.leader_epoch)

    async def _lookup(self, partition: Partition, timestamp: int,
                      read_committed: bool) -> tuple[int, int]:
        end = partition.visible_end(from_follower=False, read_committed=read_committed)
        if timestamp == EARLIEST_TIMESTAMP:
            return await self.tier.log_start(partition), -1
        if timestamp == LATEST_TIMESTAMP:
            return end, -1
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            return partition.log_start_offset, -1
        if timestamp == LATEST_TIERED_TIMESTAMP:
            tiered = self.tier.tiered_end(partition) if self.tier.storage is not None else None
            return (tiered - 1 if tiered else -1), -1
        if timestamp == MAX_TIMESTAMP:
            found = partition.log.max_timestamp()
            if found is None or (read_committed and found[1] >= end):
                return -1, -1
            max_ts, offset = found
            return offset, max_ts
        hit = None
        if partition.log_start_offset > 0 and timestamp >= 0:
            hit = await self.tier.offset_for_timestamp(partition, timestamp)
        if hit is None:
            hit = partition.log.offset_for_timestamp(timestamp)
        if hit is None or hit[0] >= end:
            return -1, -1
        return hit[0], hit[1]

    async def legacy_offsets(self, topic: str, index: int, timestamp: int,
                             max_num_offsets: int, *, replica_id: int) -> list[int]:
        """ListOffsets v0 (Kafka's ``legacyFetchOffsetsBefore``). The candidates are, per
        segment, ``(max(base offset, log start offset), file modification time)``, plus
        ``(log end offset, now)`` if the last segment is not empty; LATEST (-1) starts at the
        last candidate, EARLIEST (-2) at the first (the first consumer-visible offset, the
        tier's when the topic is tiered), any other timestamp at the last candidate whose time
        is not after it. At most ``max_num_offsets`` offsets are returned, going back from
        there, in descending order. A consumer (``replica_id`` -1) never sees offsets above the
        high watermark: they are replaced by it. ``replica_id`` -2 (debugging) may read a
        follower replica."""
        key = (topic, index)
        if replica_id == -2 and key in self.partitions:
            partition = self.partitions[key]
        else:
            partition = self.leader_partition(topic, index)
        infos = partition.log.segment_infos()
        start = partition.log_start_offset
        mtimes = await asyncio.to_thread(_mtimes_ms, [info.log_path for info in infos])
        candidates = [(max(info.base_offset, start), mtime)
                      for info, mtime in zip(infos, mtimes, strict=True)]
        if infos and infos[-1].size_bytes > 0:
            candidates.append((partition.log.log_end_offset, int(self.clock() * 1000)))
        if candidates:
            first = await self.tier.log_start(partition)
            candidates[0] = (min(candidates[0][0], first), candidates[0][1])
        if timestamp == LATEST_TIMESTAMP:
            position = len(candidates) - 1
        elif timestamp == EARLIEST_TIMESTAMP:
            position = 0
        else:
            position = len(candidates) - 1
            while position >= 0 and candidates[position][1] > timestamp:
                position -= 1
        count = max(min(max_num_offsets, position + 1), 0)
        offsets = sorted((candidates[position - j][0] for j in range(count)), reverse=True)
        if replica_id == -1 and any(offset > partition.high_watermark for offset in offsets):
            hw = partition.high_watermark
            offsets = [hw] + [offset for offset in offsets if offset <= hw]
        return offsets

    # ------------------------------------------------------------------ transactions
    async def write_txn_markers(self, markers: Sequence[TxnMarker], *,
                                timeout: float) -> list[list[MarkerResult]]:
        """Write each marker to each of its partitions as leader and answer each (see the
        module): per marker, one result per partition in its order. ``timeout`` (seconds)
        bounds the wait for the high watermark, as a Produce request's timeout does."""
        async def one_marker(marker: TxnMarker) -> list[MarkerResult]:
            return list(await asyncio.gather(*(
                self._write_marker(marker, topic, index, max(timeout, 0.0))
                for topic, index in marker.partitions)))

        return list(await asyncio.gather(*(one_marker(marker) for marker in markers)))

    async def _write_marker(self, marker: TxnMarker, topic: str, index: int,
                            timeout: float) -> MarkerResult:
        result = MarkerResult(topic, index)
        try:
            partition = self.leader_partition(topic, index)
            min_isr = partition.config.min_insync_replicas
            if len(partition.isr) < min_isr:
                raise NotEnoughReplicasError(
                    f"{partition.name} has {len(partition.isr)} in-sync replicas "
                    f"{list(partition.isr)}, min.insync.replicas is {min_isr}: the "
                    "transaction marker is not written."
                )
            outcome = partition.write_txn_marker(marker.producer_id, marker.producer_epoch,
                                                 marker.coordinator_epoch, marker.commit)
            await await_replication(partition, outcome.last_offset, min_isr, timeout)
        except LoglakeError as exc:
            result.error = exc.code
            result.message = exc.message
        return result

    def producer_summaries(self, topic: str, index: int) -> list[ProducerSummary]:
        """DescribeProducers: the active producers of a partition this broker hosts, leader or
        follower (Kafka's ``ReplicaManager.activeProducerState``); else the errors of
        :meth:`leader_partition`."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            partition = self.leader_partition(topic, index)  # raises why it is not hosted
        return partition.producer_summaries()

    # ------------------------------------------------------------------ epochs
    def end_offset_for_epoch(self, topic: str, index: int, leader_epoch: int, *,
                             current_leader_epoch: int = -1) -> tuple[int, int]:
        """OffsetForLeaderEpoch (KIP-101/279): ``(epoch, end offset)`` of ``leader_epoch`` in
        this leader's log (the largest epoch not above it, and where the next one starts)."""
        partition = self.leader_partition(topic, index)
        partition.check_leader_epoch(current_leader_epoch)
        epoch, end = partition.log.leader_epoch_cache.end_offset_for(leader_epoch)
        return epoch, end

    # ---- flush scheduler and high-watermark checkpoint
    async def flush_and_checkpoint(self) -> None:
        """One pass over the hosted partitions: fsync each log whose ``flush.messages`` /
        ``flush.ms`` is due or that rolled a segment, and write each high-watermark checkpoint
        that changed. What is due is picked on the loop; the fsyncs and checkpoint writes run
        in one worker thread (they hold each log's ``io_lock``, segments/log.py), so the loop
        keeps serving meanwhile. A partition that fails is logged; the others still go."""
        work: list[tuple[Partition, FlushJob | None, int | None]] = []
        for partition in list(self.partitions.values()):
            try:
                job = partition.log.prepare_flush()
                hw = partition.prepare_hw_checkpoint()
            except Exception:
                log.exception("flush of %s failed", partition.name)
                continue
            if job is not None or hw is not None:
                work.append((partition, job, hw))
        if not work:
            return
        outcomes = await asyncio.to_thread(_run_flushes, work)
        for (partition, job, hw), (flushed, hw_written) in zip(work, outcomes, strict=True):
            if flushed and job is not None:
                partition.log.complete_flush(job)
            if hw_written and hw is not None:
                partition.hw_checkpoint_written(hw)

    async def flush_loop(self) -> None:
        """:meth:`flush_and_checkpoint` every ``log.flush.scheduler.interval.ms``, until
        cancelled (the broker's background task)."""
        interval = self.config.log_flush_scheduler_interval_ms / 1000
        next_expiry = self.clock() + self.config.producer_id_expiration_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            await self.flush_and_checkpoint()
            if self.clock() >= next_expiry:
                next_expiry = (self.clock()
                               + self.config.producer_id_expiration_check_interval_ms / 1000)
                self.expire_producers()

    def expire_producers(self) -> int:
        """Forget, in every hosted partition, producer ids idle for
        ``producer.id.expiration.ms`` without an open transaction (run by :meth:`flush_loop`
        every ``producer.id.expiration.check.interval.ms``); how many went."""
        removed = 0
        for partition in list(self.partitions.values()):
            if not partition.closed:
                removed += len(partition.expire_producers(
                    self.config.producer_id_expiration_ms))
        return removed


def produce_error(code: ErrorCode) -> ErrorCode:
    """The code a Produce response carries for ``code``: as in Kafka's log since 2.7
    (KIP-588), a fenced producer epoch is INVALID_PRODUCER_EPOCH at every Produce version;
    PRODUCER_FENCED is answered only by the coordinator APIs (InitProducerId, EndTxn, ...)."""
    if code == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    return code


def aborted_in(partition: Partition, fetch_offset: int, visible: int,
               records: bytes) -> list[tuple[int, int]]:
    """``(producer id, first offset)`` of the aborted transactions of ``partition`` that overlap
    the batches ``records`` (read from ``fetch_offset``, below ``visible``), oldest first: what
    a read_committed fetch answers (Kafka bounds the range by the offset after the returned
    data too). The batches' end is only looked for when an aborted transaction lies in
    [fetch_offset, visible), the common case costing one index lookup."""
    aborted = partition.aborted_transactions(fetch_offset, visible)
    if not aborted:
        return []
    end = _end_offset(records)
    return [(txn.producer_id, txn.first_offset) for txn in aborted if txn.first_offset < end]


_BATCH_START = struct.Struct(">qi")  # base offset, batch length
_LAST_OFFSET_DELTA = struct.Struct(">i")  # at LAST_OFFSET_DELTA_OFFSET in the header


def _end_offset(records: bytes) -> int:
    """The offset after the last whole batch of ``records`` (batches back to back, as the log
    returns them; headers only, no CRC check)."""
    position = last = 0
    size = len(records)
    while position + HEADER_SIZE <= size:
        _, length = _BATCH_START.unpack_from(records, position)
        last = position
        position += LOG_OVERHEAD + length
    base, _ = _BATCH_START.unpack_from(records, last)
    (delta,) = _LAST_OFFSET_DELTA.unpack_from(records, last + LAST_OFFSET_DELTA_OFFSET)
    return int(base + delta + 1)


def _run_flushes(
    work: Sequence[tuple[Partition, FlushJob | None, int | None]],
) -> list[tuple[bool, bool]]:
    """Worker thread: run each partition's flush job and high-watermark write; per partition
    (flushed, hw written). A failure is logged and leaves that part for the next pass."""
    outcomes = []
    for partition, job, hw in work:
        flushed = hw_written = False
        try:
            if job is not None:
                job.run()
                flushed = True
            if hw is not None:
                hw_written = partition.write_hw_checkpoint(hw)
        except Exception:
            log.exception("flush of %s failed", partition.name)
        outcomes.append((flushed, hw_written))
    return outcomes


def _mtimes_ms(paths: Sequence[Path]) -> list[int]:
    """Modification times in ms of segment files (0 for a file gone meanwhile)."""
    times = []
    for path in paths:
        try:
            times.append(int(os.stat(path).st_mtime * 1000))
        except OSError:
            times.append(0)
    return times
