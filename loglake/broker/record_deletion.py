"""DeleteRecords on the partition leader (Kafka's ``ReplicaManager.deleteRecords`` and
``DelayedDeleteRecords``): records below a requested offset disappear for every reader.

Per partition, on its leader (:func:`delete_records`):

1. checks, in Kafka's order: this broker leads the partition (NOT_LEADER_OR_FOLLOWER,
   UNKNOWN_TOPIC_OR_PARTITION), ``cleanup.policy`` contains ``delete`` (POLICY_VIOLATION), the
   offset is ``-1`` (the high watermark) or within ``[0, high watermark]``
   (OFFSET_OUT_OF_RANGE);
2. the partition's rows below the offset leave the topic's Delta table (Tierer.delete_records:
   one commit, announced to the other brokers) -- first, so a failure there (storage
   unreachable: KAFKA_STORAGE_ERROR, retriable; running it again is harmless) leaves the local
   log untouched and nothing half-deleted behind a success;
3. the local log start offset moves up to the offset (checkpointed, whole segments below it
   deleted): consumers below it get OFFSET_OUT_OF_RANGE and follow ``auto.offset.reset``,
   ListOffsets(earliest) answers it;
4. followers adopt the leader's log start from their next fetch response and report theirs
   in the fetch after (replica_fetcher.py); the answer waits, at most the request's timeout,
   until the *low watermark* -- the smallest log start over the leader, the table and every
   follower on a live broker whose replica is not offline -- reaches the offset, and is that
   low watermark; REQUEST_TIMED_OUT (low watermark -1) when the time runs out first, as Kafka.

An offset at or below the current log start changes nothing and answers the low watermark.
Runs on the broker's event loop; the table work runs in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Protocol

from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.partition import Partition, Role
from loglake.broker.replica_manager import ReplicaManager
from loglake.errors import (
    KafkaStorageError,
    LoglakeError,
    NotLeaderError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    RequestTimedOutError,
)


class TieredRecords(Protocol):
    """What DeleteRecords needs of the tiered storage (broker/tiering.py's ``Tierer``)."""

    async def delete_records(self, partition: Partition, offset: int) -> None: ...

    async def log_start(self, partition: Partition) -> int: ...

    def known_log_start(self, partition: Partition) -> int: ...

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
HIGH_WATERMARK = -1
"""The offset that means "everything below the high watermark"."""
POLL_S = 0.02


async def delete_records(
    wanted: Mapping[TopicPartition, int], timeout_s: float, *, replicas: ReplicaManager,
    tier: TieredRecords, metadata: MetadataCache,
) -> dict[TopicPartition, int | LoglakeError]:
    """Delete below ``wanted[(topic, partition)]`` on every partition this broker leads (see
    the module docstring); each gets its low watermark or a typed error. ``replicas``: the
    hosted partitions; ``tier``: the tiered storage; ``metadata``: live brokers and offline
    replicas (who the low watermark waits for)."""
    results: dict[TopicPartition, int | LoglakeError] = {}
    pending: dict[TopicPartition, tuple[Partition, int]] = {}
    deadline = time.monotonic() + max(timeout_s, 0.0)
    for key, offset in wanted.items():
        try:
            partition = replicas.leader_partition(*key)
            target = _target(partition, offset)
            try:
                await tier.delete_records(partition, target)
            except Exception as exc:
                log.warning("DeleteRecords on %s: the table could not be changed: %s",
                            partition.name, exc)
                raise KafkaStorageError(
                    f"DeleteRecords on {partition.name}: the tiered table could not be "
                    f"changed: {exc}", hint="retry once the storage is reachable") from exc
            if replicas.partitions.get(key) is not partition or partition.role is not Role.LEADER:
                raise NotLeaderError(f"Broker {replicas.broker_id} stopped leading "
                                     f"{partition.name} during DeleteRecords.")
            try:
                moved = partition.advance_log_start(target)
            except OSError as exc:
                raise KafkaStorageError(
                    f"DeleteRecords on {partition.name}: moving the log start offset to "
                    f"{target} failed: {exc}") from exc
            if moved:
                log.info("%s: DeleteRecords moved the log start offset to %d", partition.name,
                         target)
            await tier.log_start(partition)  # reload the table's start (cached)
            pending[key] = (partition, target)
        except LoglakeError as exc:
            results[key] = exc
    while pending:
        for key, (partition, target) in list(pending.items()):
            if replicas.partitions.get(key) is not partition or partition.role is not Role.LEADER:
                results[key] = NotLeaderError(
                    f"Broker {replicas.broker_id} stopped leading {partition.name} before "
                    "its replicas deleted the records.")
            else:
                low = low_watermark(partition, replicas.broker_id, tier, metadata)
                if low < target:
                    continue
                results[key] = low
            del pending[key]
        if not pending or time.monotonic() >= deadline:
            break
        await asyncio.sleep(POLL_S)
    for key, (partition, target) in pending.items():
        results[key] = RequestTimedOutError(
            f"DeleteRecords on {partition.name}: the leader moved its log start to {target}, "
            f"but not every replica did within the request timeout (low watermark "
            f"{low_watermark(partition, replicas.broker_id, tier, metadata)}).")
    return results


def _target(partition: Partition, offset: int) -> int:
    """The offset to delete below, checked against the partition (step 1)."""
    if "delete" not in partition.config.cleanup_policy:
        raise PolicyViolationError(
            f"Records of partition {partition.name} can not be deleted due to the configured "
            f"policy (cleanup.policy={','.join(partition.config.cleanup_policy)}).")
    high_watermark = partition.high_watermark
    if offset == HIGH_WATERMARK:
        return high_watermark
    if offset < 0:
        raise OffsetOutOfRangeError(
            f"The offset {offset} for partition {partition.name} is not valid.")
    if offset > high_watermark:
        raise OffsetOutOfRangeError(
            f"Cannot increment the log start offset to {offset} of partition "
            f"{partition.name} since it is larger than the high watermark {high_watermark}.")
    return offset


def low_watermark(partition: Partition, broker_id: int, tier: TieredRecords,
                  metadata: MetadataCache) -> int:
    """The smallest log start offset among the leader (table included) and the followers it
    waits for: those on live brokers whose replica is not offline."""
    key = (partition.topic, partition.index)
    offline = metadata.offline_replicas.get(key, frozenset())
    followers = {r for r in partition.replicas if r != broker_id
                 and r in metadata.live_brokers and r not in offline}
    return min(tier.known_log_start(partition), partition.low_watermark(followers))
