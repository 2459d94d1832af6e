"""Follower replication: one task per leader broker fetches every partition we follow from it.

Protocol per partition (KIP-101 / KIP-279, as Kafka's ReplicaFetcherThread):

1. **Truncate first.** When a partition starts following a (new) leader, send
   OffsetForLeaderEpoch with our latest leader epoch. The leader answers the end offset of that
   epoch in its log (or of the largest epoch below it); we truncate to ``min(end, our LEO)`` and
   repeat until the epochs agree. If the leader knows no epoch at all we fall back to truncating
   to our high watermark. Divergent tails are therefore removed by epoch, never by HW alone.
2. **Fetch.** Fetch v12 with ``replica_id`` = our broker id from our log end offset, carrying the
   current leader epoch (a stale epoch gets FENCED_LEADER_EPOCH). Fetched batches are appended
   with their offsets and epochs unchanged; the leader's HW in the response becomes ours (capped
   by our LEO), and so does its log start offset once our log reaches it (Kafka's follower
   ``maybeIncrementLogStartOffset``: DeleteRecords and retention on the leader reach every
   replica; our fetches report our log start back, for the leader's low watermark). An offset
   mismatch sends the partition back to step 1.
3. **Start at the leader's local log start.** A replica whose log ends below the leader's log
   start -- a new replica (a reassignment added it; its log is empty) or one that fell behind
   retention -- gets OFFSET_OUT_OF_RANGE carrying the leader's *local* log start (follower
   fetches never read the Delta table) and restarts its log empty at that offset
   (``truncate_fully_and_start_at``), one round trip after it was added. With tiering and
   local retention the copy therefore holds only the leader's local tail: offsets below it stay
   in the topic's table, which serves consumer fetches there on whichever replica leads.

Throttling (broker/replication_quota.py): while this replica is not in the ISR and its topic's
``follower.replication.throttled.replicas`` names it, its fetches draw on the broker's
``follower.replication.throttled.rate``: left out of the request while the bucket is in debt,
asking for at most what the bucket holds otherwise; the bytes received are recorded.

Connection errors close the connection and retry after a short pause; partitions whose leader
changes are moved to another fetcher by the fetcher manager (fetcher_manager.py,
:meth:`ReplicaFetcher.remove`).
Runs on the broker's event loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial.errors import SerialError

from loglake.broker.connection import BrokerConnection, InterBrokerLink
from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.partition import Partition, Role
from loglake.broker.replication_quota import ReplicationQuotas
from loglake.errors import LoglakeError

log = logging.getLogger(__name__)
Key = tuple[str, int]
FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 16 * 1024 * 1024
PARTITION_MAX_BYTES = 4 * 1024 * 1024
RETRY_PAUSE_S = 0.3
MAX_TRUNCATION_ROUNDS = 20


def _quiet(error: int) -> bool:
    """Whether an error in a leader's answer is retried without a warning: Kafka's
    ``retriable`` flag of the code. It holds for every code of the hand-kept set this replaced
    (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE: leadership moving); the other retriable
    codes (REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, ...) are transient too and are now retried
    quietly as well. Every error is retried either way; the flag only decides the log line."""
    return bool(ErrorCode(error).retriable)


class ReplicaFetcher:
    def __init__(self, leader_id: int, *, broker_id: int, metadata: MetadataCache,
                 quotas: ReplicationQuotas, link: InterBrokerLink | None = None) -> None:
        """Fetch from broker ``leader_id`` as replica ``broker_id``; the leader's address comes
        from ``metadata``'s live brokers at each connect (its inter-broker listener's endpoint,
        reached with that listener's security: ``link``), throttles from ``quotas``."""
        self.link = link or InterBrokerLink()
        self.leader_id = leader_id
        self.broker_id = broker_id
        self.metadata = metadata
        self.quotas = quotas
        self.partitions: dict[Key, Partition] = {}
        self.truncating: dict[Key, int] = {}  # key -> rounds so far
        self._task: asyncio.Task[None] | None = None
        self._connection: BrokerConnection | None = None

    def add(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        self.partitions[key] = partition
        self.truncating[key] = 0
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"fetcher-{self.leader_id}")

    def remove(self, key: Key) -> None:
        self.partitions.pop(key, None)
        self.truncating.pop(key, None)

    async def stop(self) -> None:
        self.partitions.clear()
        self.truncating.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._disconnect()

    async def _disconnect(self) -> None:
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    async def _run(self) -> None:
        while self.partitions:
            try:
                connection = await self._connect()
                if connection is None:
                    await asyncio.sleep(RETRY_PAUSE_S)
                    continue
                if self.truncating:
                    await self._truncate(connection)
                if any(key not in self.truncating for key in self.partitions):
                    await self._fetch(connection)
                else:
                    await asyncio.sleep(RETRY_PAUSE_S)
            except asyncio.CancelledError:
                raise
            except (OSError, ConnectionError, asyncio.IncompleteReadError, TimeoutError,
                    SerialError) as exc:
                log.info("fetcher for leader %d: %s; reconnecting", self.leader_id, exc)
                await self._disconnect()
                await asyncio.sleep(RETRY_PAUSE_S)
            except Exception:
                log.exception("fetcher for leader %d failed; retrying", self.leader_id)
                await self._disconnect()
                await asyncio.sleep(1.0)
        await self._disconnect()

    async def _connect(self) -> BrokerConnection | None:
        if self._connection is not None and self._connection.connected:
            return self._connection
        info = self.metadata.live_brokers.get(self.leader_id)
        if info is None:
            return None
        self._connection = self.link.connection(
            info, client_id=f"replica-{self.broker_id}", timeout=FETCH_MAX_WAIT_MS / 1000 + 30)
        if self._connection is None:
            log.warning("leader %d has no %s listener (inter.broker.listener.name): cannot "
                        "fetch from it", self.leader_id, self.link.listener)
            return None
        await self._connection.connect()
        return self._connection

    def _current(self, key: Key, partition: Partition) -> bool:
        """Still ours to fetch: same object, following this leader."""
        return (self.partitions.get(key) is partition and partition.role is Role.FOLLOWER
                and partition.leader_id == self.leader_id)

    async def _truncate(self, connection: BrokerConnection) -> None:
        wanted: dict[Key, tuple[Partition, int]] = {}
        for key in list(self.truncating):
            partition = self.partitions.get(key)
            if partition is None:  # removed meanwhile
                self.truncating.pop(key, None)
                continue
            latest = partition.log.leader_epoch_cache.latest_epoch()
            if partition.log.log_end_offset == 0 or latest is None:
                if partition.log.log_end_offset > 0:
                    partition.truncate_to(partition.high_watermark)
                del self.truncating[key]
                continue
            wanted[key] = (partition, latest)
        if not wanted:
            return
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, index), (partition, latest) in wanted.items():
            topics.setdefault(topic, []).append({
                "partition": index, "current_leader_epoch": partition.leader_epoch,
                "leader_epoch": latest,
            })
        response = await connection.request(23, 4, {
            "replica_id": self.broker_id,
            "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
        })
        for topic in response.topics:
            for result in topic.partitions:
                key = (topic.topic, result.partition)
                if key not in wanted or not self._current(key, wanted[key][0]):
                    continue
                partition, latest = wanted[key]
                if result.error_code != ErrorCode.none:
                    if not _quiet(result.error_code):
                        log.warning("OffsetForLeaderEpoch %s-%d: %s", *key, result.error_code)
                    continue
                self._apply_epoch_end(key, partition, latest, result.leader_epoch,
                                      result.end_offset)
        if self.truncating and all(k in self.truncating for k in self.partitions):
            await asyncio.sleep(RETRY_PAUSE_S / 3)

    def _apply_epoch_end(self, key: Key, partition: Partition, asked: int, epoch: int,
                         end_offset: int) -> None:
        leo = partition.log.log_end_offset
        if end_offset < 0:
            target = partition.high_watermark  # leader knows no epochs: KIP-101 fallback
            done = True
        else:
            target = min(end_offset, leo)
            done = epoch == asked or end_offset >= leo
        if target < leo:
            log.info("%s: truncating from %d to %d (leader %d epoch %d ends at %d)",
                     partition.name, leo, target, self.leader_id, epoch, end_offset)
        partition.truncate_to(target)
        self.truncating[key] += 1
        if done or self.truncating[key] >= MAX_TRUNCATION_ROUNDS:
            del self.truncating[key]

    async def _fetch(self, connection: BrokerConnection) -> None:
        quotas = self.quotas
        fetching: dict[Key, Partition] = {}
        limits: dict[Key, int] = {}
        throttled: set[Key] = set()
        for key, partition in self.partitions.items():
            if key in self.truncating:
                continue
            limit = PARTITION_MAX_BYTES
            if quotas.follower_throttles(partition):
                allowance = quotas.follower.available()
                if allowance <= 0:
                    continue  # over follower.replication.throttled.rate: not this round
                limit = min(limit, allowance)
                throttled.add(key)
            fetching[key] = partition
            limits[key] = limit
        if not fetching:
            await asyncio.sleep(min(max(quotas.follower.delay_s(), 0.01), RETRY_PAUSE_S))
            return
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, index), partition in fetching.items():
            topics.setdefault(topic, []).append({
                "partition": index, "current_leader_epoch": partition.leader_epoch,
                "fetch_offset": partition.log.log_end_offset,
                "log_start_offset": partition.log.log_start_offset,
                "last_fetched_epoch": partition.last_fetched_epoch(),
                "partition_max_bytes": limits[(topic, index)],
            })
        response = await connection.request(1, 12, {
            "replica_id": self.broker_id, "max_wait": FETCH_MAX_WAIT_MS,
            "min_bytes": 1, "max_bytes": FETCH_MAX_BYTES, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
        })
        backoff = False
        for topic in response.responses:
            for data in topic.partitions:
                key = (topic.topic, data.partition_index)
                fetched = fetching.get(key)
                if key in throttled:
                    quotas.follower.record(len(data.records or b""))
                if fetched is None or not self._current(key, fetched):
                    continue
                backoff |= self._handle_fetched(key, fetched, data)
        if backoff:
            await asyncio.sleep(RETRY_PAUSE_S)

    def _handle_fetched(self, key: Key, partition: Partition, data: Any) -> bool:
        """Apply one partition's fetch result; True if the fetcher should pause briefly."""
        error = data.error_code
        diverging = getattr(data, "diverging_epoch", None)
        if error == ErrorCode.none and diverging is not None and (
                diverging.epoch >= 0 or diverging.end_offset >= 0):
            # KIP-320: our last fetched epoch does not end where the leader's does
            log.info("%s: log diverges from leader %d (its epoch %d ends at %d); truncating",
                     partition.name, self.leader_id, diverging.epoch, diverging.end_offset)
            self.truncating[key] = 0
            return False
        if error == ErrorCode.none:
            try:
                partition.append_as_follower(bytes(data.records or b""), data.high_watermark)
            except LoglakeError as exc:
                log.warning("%s: replicated batch rejected (%s); re-truncating",
                            partition.name, exc)
                self.truncating[key] = 0
                return False
            leader_start = data.log_start_offset
            if partition.log.log_start_offset < leader_start <= partition.log.log_end_offset:
                partition.advance_log_start(leader_start)
                log.info("%s: log start moved to %d (the leader's)", partition.name,
                         leader_start)
            return False
        if error == ErrorCode.offset_out_of_range:
            if data.log_start_offset > partition.log.log_end_offset:  # step 3
                log.info("%s: log ends at %d, below the leader's local log start %d: starting "
                         "the local log there (older offsets stay in the table)",
                         partition.name, partition.log.log_end_offset, data.log_start_offset)
                partition.truncate_fully_and_start_at(data.log_start_offset)
            else:
                self.truncating[key] = 0
            return False
        if not _quiet(error):
            log.warning("fetch of %s from leader %d: %s", partition.name, self.leader_id,
                        ErrorCode(error).name)
        return True
