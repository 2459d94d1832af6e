"""Fetch (long poll, size limits) and ListOffsets.

Fetch: every requested partition is answered (we never create fetch sessions: the response's
session id is 0, so clients keep sending full requests, which the protocol allows). The response
is sent when the accumulated record bytes reach ``min_bytes``, when any partition has an error,
or when ``max_wait_ms`` elapses; until then the request waits on the partitions' append futures.
Size limits follow KIP-74: ``partition_max_bytes`` per partition, ``max_bytes`` for the response,
but the first batch of the first non-empty partition is returned whole even if it is larger.

Tiered storage: a consumer fetch below the local log start is answered from the topic's Delta
table (broker/tiering.py re-encodes the original batches), and the log start offset consumers
see (Fetch, ListOffsets earliest) is the table's first offset. Follower fetches never read the
table: below the leader's local log start they get OFFSET_OUT_OF_RANGE and restart there.

Replication throttle (broker/replication_quota.py): a follower fetch of a partition this leader
throttles (``leader.replication.throttled.replicas`` names it, the follower is not in the ISR,
``leader.replication.throttled.rate`` is set) gets at most what the leader's bucket holds (no
records while it is in debt: the long poll waits), and the bytes sent are recorded.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.errors import LoglakeError, OffsetOutOfRangeError

if TYPE_CHECKING:
    from loglake.broker.broker import Broker
    from loglake.broker.partition import Partition

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


class _EpochError(LoglakeError):
    pass


def _check_epoch(partition: Partition, requested: int) -> None:
    if requested < 0 or requested == partition.leader_epoch:
        return
    error = _EpochError(
        f"Leader epoch {requested} does not match current epoch {partition.leader_epoch} "
        f"of {partition.topic}-{partition.index}."
    )
    error.code = (
        ErrorCode.fenced_leader_epoch if requested < partition.leader_epoch
        else ErrorCode.unknown_leader_epoch
    )
    raise error


async def fetch(broker: Broker, frame: RequestFrame) -> Any:
    request = frame.body
    cls = response_class(1, frame.api_version)
    if getattr(request, "session_id", 0) != 0:
        return build(cls, {"error_code": ErrorCode.fetch_session_id_not_found, "responses": []})
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait.total_seconds()
    first = True
    while True:
        responses, total, failed, watched, below = _collect(broker, request, first)
        first = False
        if below:
            tier_total, tier_failed = await _read_tier(broker, request, below, total)
            total += tier_total
            failed = failed or tier_failed
        remaining = deadline - loop.time()
        if total >= request.min_bytes or failed or remaining <= 0 or not watched:
            return build(cls, {"responses": responses})
        waiters = [partition.waiter() for partition in watched]
        try:
            await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()


def _response_budget(request: Any) -> int:
    """The response's record-byte limit (``max_bytes``; Fetch v0-2 have none)."""
    return max(request.max_bytes, 0) if hasattr(request, "max_bytes") else 2**31 - 1


_TierRead = tuple[dict[str, Any], "Partition", int, int]


def _collect(
    broker: Broker, request: Any, first: bool = True
) -> tuple[list[dict[str, Any]], int, bool, list[Partition], list[_TierRead]]:
    """One pass over the requested partitions. A follower's fetch position counts (once, on
    the ``first`` pass) as of the request's arrival: a long poll completing later must not
    make a follower that left the ISR meanwhile look freshly caught up."""
    budget = _response_budget(request)
    total = 0
    failed = False
    watched: list[Partition] = []
    below: list[_TierRead] = []  # consumer fetches under the local log: served from the tier
    tiering = broker.tierer.storage is not None
    responses = []
    read_committed = getattr(request, "isolation_level", 0) == 1
    replica = getattr(request, "replica_id", -1)
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            entry: dict[str, Any] = {
                "partition_index": wanted.partition, "high_watermark": -1,
                "last_stable_offset": -1, "log_start_offset": -1, "records": b"",
                "aborted_transactions": [] if read_committed else None,
            }
            try:
                partition = broker.leader_partition(topic.topic, wanted.partition)
                _check_epoch(partition, getattr(wanted, "current_leader_epoch", -1))
                if replica >= 0:
                    diverging = partition.follower_divergence(
                        getattr(wanted, "last_fetched_epoch", -1), wanted.fetch_offset)
                    if diverging is not None:  # no progress counted until it truncates
                        entry.update(error_code=ErrorCode.none,
                                     high_watermark=partition.high_watermark,
                                     log_start_offset=partition.log_start_offset,
                                     diverging_epoch={"epoch": diverging[0],
                                                      "end_offset": diverging[1]})
                        partitions.append(entry)
                        continue
                    if first:
                        partition.record_follower_fetch(
                            replica, wanted.fetch_offset,
                            getattr(wanted, "log_start_offset", -1))
                entry["high_watermark"] = partition.high_watermark
                entry["last_stable_offset"] = partition.high_watermark
                entry["log_start_offset"] = partition.log_start_offset
                if replica < 0 and tiering:
                    entry["log_start_offset"] = broker.tierer.known_log_start(partition)
                    if 0 <= wanted.fetch_offset < partition.log_start_offset:
                        entry["error_code"] = ErrorCode.none
                        below.append((entry, partition, wanted.fetch_offset,
                                      wanted.partition_max_bytes))
                        partitions.append(entry)
                        continue
                if not partition.log_start_offset <= wanted.fetch_offset <= (
                    partition.log.log_end_offset
                ):
                    raise OffsetOutOfRangeError(
                        f"Fetch offset {wanted.fetch_offset} is out of range for "
                        f"{topic.topic}-{wanted.partition}: [{partition.log_start_offset}, "
                        f"{partition.log.log_end_offset}]."
                    )
                limit = min(wanted.partition_max_bytes, budget - total)
                quotas = broker.replication_quotas
                throttled = replica >= 0 and quotas.leader_throttles(partition, replica)
                if throttled:
                    limit = min(limit, quotas.leader.available())
                records = b""
                visible = partition.high_watermark if replica < 0 else partition.log.log_end_offset
                if wanted.fetch_offset < visible and (limit > 0 or (total == 0
                                                                    and not throttled)):
                    records = partition.read(wanted.fetch_offset, max(limit, 0),
                                             min_one_batch=total == 0,
                                             committed_only=replica < 0)
                if throttled:
                    quotas.leader.record(len(records))
                entry["records"] = records
                entry["error_code"] = ErrorCode.none
                total += len(records)
                watched.append(partition)
            except LoglakeError as exc:
                entry["error_code"] = exc.code
                failed = True
            partitions.append(entry)
        responses.append({"topic": topic.topic, "partitions": partitions})
    return responses, total, failed, watched, below


async def _read_tier(broker: Broker, request: Any, below: list[_TierRead],
                     total: int) -> tuple[int, bool]:
    """Fill the entries of fetches below the local log start from the Delta table."""
    budget = _response_budget(request)
    added = 0
    failed = False
    for entry, partition, offset, partition_max in below:
        try:
            start = await broker.tierer.log_start(partition)
            entry["log_start_offset"] = start
            limit = min(partition_max, budget - total - added)
            records = None
            if offset >= start and (limit > 0 or total + added == 0):
                records = await broker.tierer.read(partition, offset, max(limit, 0),
                                                   min_one_batch=total + added == 0)
            if records is None:
                raise OffsetOutOfRangeError(
                    f"Fetch offset {offset} is out of range for {partition.name}: the log "
                    f"holds [{start}, {partition.log.log_end_offset}]."
                )
            entry["records"] = records
            added += len(records)
        except LoglakeError as exc:
            entry["error_code"] = exc.code
            failed = True
        except Exception as exc:  # storage unreachable, unreadable file: retriable for clients
            log.warning("tier read of %s at %d failed: %s", partition.name, offset, exc)
            entry["error_code"] = ErrorCode.kafka_storage_error
            failed = True
    return added, failed


async def list_offsets(broker: Broker, frame: RequestFrame) -> Any:
    request = frame.body
    if frame.api_version == 0:
        return build(response_class(2, 0), {"topics": await list_offsets_v0(broker, request)})
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            entry: dict[str, Any] = {"partition_index": wanted.partition_index,
                                     "timestamp": -1, "offset": -1, "leader_epoch": -1}
            try:
                partition = broker.leader_partition(topic.name, wanted.partition_index)
                _check_epoch(partition, getattr(wanted, "current_leader_epoch", -1))
                entry.update(await _lookup(broker, partition, wanted.timestamp))
                entry["leader_epoch"] = partition.leader_epoch
                entry["error_code"] = ErrorCode.none
            except LoglakeError as exc:
                entry["error_code"] = exc.code
            partitions.append(entry)
        topics.append({"name": topic.name, "partitions": partitions})
    return build(response_class(2, frame.api_version), {"topics": topics})


async def list_offsets_v0(broker: Broker, request: Any) -> list[dict[str, Any]]:
    """ListOffsets v0 (Kafka before 0.10.1; removed in 4.0 by KIP-896, kept for Burrow and
    sarama clients configured for old versions): each partition answers ``old_style_offsets``,
    Kafka's ``legacyFetchOffsetsBefore``. The candidates are, per segment, ``(max(base offset,
    log start offset), file modification time)``, plus ``(log end offset, now)`` if the last
    segment is not empty; LATEST (-1) starts at the last candidate, EARLIEST (-2) at the first
    (the first consumer-visible offset, the tier's when the topic is tiered), any other
    timestamp at the last candidate whose time is not after it. At most ``max_num_offsets``
    offsets are returned, going back from there, in descending order. A consumer
    (``replica_id`` -1) never sees offsets above the high watermark: they are replaced by it.
    Timestamps below -2 answer UNSUPPORTED_VERSION. ``replica_id`` -2 (debugging) may read a
    follower replica."""
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            entry: dict[str, Any] = {"partition_index": wanted.partition_index,
                                     "old_style_offsets": []}
            if wanted.timestamp < EARLIEST_TIMESTAMP:
                entry["error_code"] = ErrorCode.unsupported_version
                partitions.append(entry)
                continue
            try:
                key = (topic.name, wanted.partition_index)
                if request.replica_id == -2 and key in broker.partitions:
                    partition = broker.partitions[key]
                else:
                    partition = broker.leader_partition(*key)
                entry["old_style_offsets"] = await _legacy_offsets(
                    broker, partition, wanted.timestamp, wanted.max_num_offsets,
                    consumer=request.replica_id == -1)
                entry["error_code"] = ErrorCode.none
            except LoglakeError as exc:
                entry["error_code"] = exc.code
            partitions.append(entry)
        topics.append({"name": topic.name, "partitions": partitions})
    return topics


async def _legacy_offsets(broker: Broker, partition: Partition, timestamp: int,
                          max_num_offsets: int, *, consumer: bool) -> list[int]:
    infos = partition.log.segment_infos()
    start = partition.log_start_offset
    mtimes = await asyncio.to_thread(_mtimes_ms, [info.log_path for info in infos])
    candidates = [(max(info.base_offset, start), mtime)
                  for info, mtime in zip(infos, mtimes, strict=True)]
    if infos and infos[-1].size_bytes > 0:
        candidates.append((partition.log.log_end_offset, int(broker.clock() * 1000)))
    if candidates:
        first = await broker.tierer.log_start(partition)
        candidates[0] = (min(candidates[0][0], first), candidates[0][1])
    if timestamp == LATEST_TIMESTAMP:
        index = len(candidates) - 1
    elif timestamp == EARLIEST_TIMESTAMP:
        index = 0
    else:
        index = len(candidates) - 1
        while index >= 0 and candidates[index][1] > timestamp:
            index -= 1
    count = max(min(max_num_offsets, index + 1), 0)
    offsets = sorted((candidates[index - j][0] for j in range(count)), reverse=True)
    if consumer and any(offset > partition.high_watermark for offset in offsets):
        hw = partition.high_watermark
        offsets = [hw] + [offset for offset in offsets if offset <= hw]
    return offsets


def _mtimes_ms(paths: list[Any]) -> list[int]:
    """Modification times in ms of segment files (0 for a file gone meanwhile)."""
    times = []
    for path in paths:
        try:
            times.append(int(os.stat(path).st_mtime * 1000))
        except OSError:
            times.append(0)
    return times


async def _lookup(broker: Broker, partition: Partition, timestamp: int) -> dict[str, int]:
    if timestamp == EARLIEST_TIMESTAMP:
        return {"offset": await broker.tierer.log_start(partition), "timestamp": -1}
    if timestamp == LATEST_TIMESTAMP:
        return {"offset": partition.high_watermark, "timestamp": -1}
    if timestamp == MAX_TIMESTAMP:
        found = partition.log.max_timestamp()
        if found is None:
            return {"offset": -1, "timestamp": -1}
        max_ts, offset = found
        return {"offset": offset, "timestamp": max_ts}
    hit = None
    if partition.log_start_offset > 0 and timestamp >= 0:
        hit = await broker.tierer.offset_for_timestamp(partition, timestamp)
    if hit is None:
        hit = partition.log.offset_for_timestamp(timestamp)
    if hit is None or hit[0] >= partition.high_watermark:
        return {"offset": -1, "timestamp": -1}
    return {"offset": hit[0], "timestamp": hit[1]}


async def offset_for_leader_epoch(broker: Broker, frame: RequestFrame) -> Any:
    """KIP-101/279: the end offset of the requested epoch in the leader's log."""
    request = frame.body
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            entry: dict[str, Any] = {"partition": wanted.partition, "leader_epoch": -1,
                                     "end_offset": -1}
            try:
                partition = broker.leader_partition(topic.topic, wanted.partition)
                _check_epoch(partition, wanted.current_leader_epoch)
                epoch, end = partition.log.leader_epoch_cache.end_offset_for(wanted.leader_epoch)
                entry.update(leader_epoch=epoch, end_offset=end, error_code=ErrorCode.none)
            except LoglakeError as exc:
                entry["error_code"] = exc.code
            partitions.append(entry)
        topics.append({"topic": topic.topic, "partitions": partitions})
    return build(response_class(23, frame.api_version), {"topics": topics})
