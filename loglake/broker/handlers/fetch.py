"""Fetch, ListOffsets and OffsetForLeaderEpoch: decode, one call, encode.

The rules (long poll, size limits, KIP-320 epoch checks, tier reads, replication throttle,
isolation levels, offset lookups) are the replica manager's (broker/replica_manager.py). What
stays here is the wire: we never create fetch sessions (the response's session id is 0, so
clients keep sending full requests, which the protocol allows; a request naming a session gets
FETCH_SESSION_ID_NOT_FOUND); ``isolation_level`` (Fetch v4+, ListOffsets v2+) is passed on:
read_committed fetches answer an ``aborted_transactions`` list (possibly empty), read_uncommitted
ones null, and every consumer fetch the partition's ``last_stable_offset``; another
isolation level fails the request as Kafka's does (UNKNOWN_SERVER_ERROR: top-level from Fetch
v7, per partition before v13; per partition in ListOffsets); ListOffsets v0 timestamps below -2
answer UNSUPPORTED_VERSION.

Authorization (Kafka 4.0's ``KafkaApis``, through handlers/authz.py): a follower's Fetch
(``replica_id`` >= 0) needs CLUSTER_ACTION on the cluster, else every partition answers
TOPIC_AUTHORIZATION_FAILED; a consumer's needs READ on each topic (TOPIC_AUTHORIZATION_FAILED
for the refused topics' partitions, which are not read). ListOffsets needs DESCRIBE on each
topic. OffsetForLeaderEpoch is allowed whole with CLUSTER_ACTION (followers; no audit line for
its denial), else per topic with DESCRIBE. Refused entries carry -1 offsets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.broker.handlers import authz
from loglake.broker.replica_manager import (
    EARLIEST_TIMESTAMP,
    NO_RESPONSE_LIMIT,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchParams,
    PartitionFetch,
)
from loglake.broker.security.acl_model import AclOperation, ResourceType
from loglake.errors import LoglakeError

ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)

if TYPE_CHECKING:
    from loglake.broker.replica_manager import FetchResult, ReplicaManager
    from loglake.broker.security.authorizer import Authorizer


class FetchServices(Protocol):
    """What these handlers use of the broker."""

    @property
    def replicas(self) -> ReplicaManager: ...

    @property
    def authorizer(self) -> Authorizer: ...


def _fetch_authorized(broker: FetchServices, frame: RequestFrame, replica_id: int) -> set[str]:
    """The topics of a Fetch the session may read (see the module docstring)."""
    names = [topic.topic for topic in frame.body.topics]
    if replica_id >= 0:
        return set(names) if authz.cluster_allowed(broker, frame,
                                                   AclOperation.CLUSTER_ACTION) else set()
    return authz.filter_authorized(broker, frame, AclOperation.READ, ResourceType.TOPIC, names)


def _refused_fetch(index: int) -> dict[str, Any]:
    return {"partition_index": index, "error_code": authz.TOPIC_AUTHORIZATION_FAILED,
            "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
            "records": None, "aborted_transactions": None}


async def fetch(broker: FetchServices, frame: RequestFrame) -> Any:
    request = frame.body
    cls = response_class(1, frame.api_version)
    if getattr(request, "session_id", 0) != 0:
        return build(cls, {"error_code": ErrorCode.fetch_session_id_not_found, "responses": []})
    isolation_level = getattr(request, "isolation_level", READ_UNCOMMITTED)
    if isolation_level not in ISOLATION_LEVELS:
        return _unknown_isolation_level(cls, request, frame.api_version)
    params = FetchParams(
        replica_id=getattr(request, "replica_id", -1),
        max_wait_s=request.max_wait.total_seconds(),
        min_bytes=request.min_bytes,
        # Fetch v0-2 have no response limit
        max_bytes=(max(request.max_bytes, 0) if hasattr(request, "max_bytes")
                   else NO_RESPONSE_LIMIT),
        isolation_level=isolation_level,
    )
    authorized = _fetch_authorized(broker, frame, params.replica_id)
    wanted = [
        PartitionFetch(
            topic.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
            current_leader_epoch=getattr(p, "current_leader_epoch", -1),
            last_fetched_epoch=getattr(p, "last_fetched_epoch", -1),
            log_start_offset=getattr(p, "log_start_offset", -1),
        )
        for topic in request.topics if topic.topic in authorized for p in topic.partitions
    ]
    results = iter(await broker.replicas.fetch_messages(params, wanted) if wanted else [])
    responses = [{"topic": topic.topic,
                  "partitions": [_fetch_entry(next(results)) if topic.topic in authorized
                                 else _refused_fetch(p.partition) for p in topic.partitions]}
                 for topic in request.topics]
    return build(cls, {"responses": responses})


def _unknown_isolation_level(cls: Any, request: Any, version: int) -> Any:
    """Kafka's answer to an isolation level other than 0 and 1 (``IsolationLevel.forId``
    throws; the request fails as a whole with UNKNOWN_SERVER_ERROR): top-level error code
    (v7+), and before v13 the same code for every requested partition."""
    error = ErrorCode.unknown_server_error
    responses = [] if version >= 13 else [
        {"topic": topic.topic, "partitions": [
            {"partition_index": p.partition, "error_code": error, "high_watermark": -1,
             "last_stable_offset": -1, "log_start_offset": -1, "records": None,
             "aborted_transactions": None} for p in topic.partitions]}
        for topic in request.topics]
    return build(cls, {"error_code": error, "responses": responses})


def _fetch_entry(result: FetchResult) -> dict[str, Any]:
    aborted = None
    if result.aborted_transactions is not None:
        aborted = [{"producer_id": producer_id, "first_offset": first_offset}
                   for producer_id, first_offset in result.aborted_transactions]
    entry: dict[str, Any] = {
        "partition_index": result.index, "error_code": result.error,
        "high_watermark": result.high_watermark,
        "last_stable_offset": result.last_stable_offset,
        "log_start_offset": result.log_start_offset, "records": result.records,
        "aborted_transactions": aborted,
    }
    if result.diverging_epoch is not None:
        epoch, end_offset = result.diverging_epoch
        entry["diverging_epoch"] = {"epoch": epoch, "end_offset": end_offset}
    return entry


async def list_offsets(broker: FetchServices, frame: RequestFrame) -> Any:
    request = frame.body
    if frame.api_version == 0:
        authorized = _described(broker, frame, (topic.name for topic in request.topics))
        return build(response_class(2, 0),
                     {"topics": await list_offsets_v0(broker, request, authorized)})
    isolation_level = getattr(request, "isolation_level", READ_UNCOMMITTED)  # v2+
    authorized = _described(broker, frame, (topic.name for topic in request.topics))
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            entry: dict[str, Any] = {"partition_index": wanted.partition_index,
                                     "timestamp": -1, "offset": -1, "leader_epoch": -1}
            if topic.name not in authorized:
                entry["error_code"] = authz.TOPIC_AUTHORIZATION_FAILED
                partitions.append(entry)
                continue
            if isolation_level not in ISOLATION_LEVELS:  # as Fetch: Kafka's forId throws
                entry["error_code"] = ErrorCode.unknown_server_error
                partitions.append(entry)
                continue
            try:
                found = await broker.replicas.offset_for_timestamp(
                    topic.name, wanted.partition_index, wanted.timestamp,
                    current_leader_epoch=getattr(wanted, "current_leader_epoch", -1),
                    isolation_level=isolation_level)
                entry.update(offset=found.offset, timestamp=found.timestamp,
                             leader_epoch=found.leader_epoch, error_code=ErrorCode.none)
            except LoglakeError as exc:
                entry["error_code"] = exc.code
            partitions.append(entry)
        topics.append({"name": topic.name, "partitions": partitions})
    return build(response_class(2, frame.api_version), {"topics": topics})


def _described(broker: FetchServices, frame: RequestFrame, names: Any) -> set[str]:
    return authz.filter_authorized(broker, frame, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                   names)


async def list_offsets_v0(broker: FetchServices, request: Any,
                          authorized: set[str] | None = None) -> list[dict[str, Any]]:
    """ListOffsets v0 (Kafka before 0.10.1; removed in 4.0 by KIP-896, kept for Burrow and
    sarama clients configured for old versions): each partition answers ``old_style_offsets``
    (:meth:`ReplicaManager.legacy_offsets`). Timestamps below -2 answer UNSUPPORTED_VERSION.
    Topics outside ``authorized`` (None: all allowed) answer TOPIC_AUTHORIZATION_FAILED."""
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            entry: dict[str, Any] = {"partition_index": wanted.partition_index,
                                     "old_style_offsets": []}
            if authorized is not None and topic.name not in authorized:
                entry["error_code"] = authz.TOPIC_AUTHORIZATION_FAILED
                partitions.append(entry)
                continue
            if wanted.timestamp < EARLIEST_TIMESTAMP:
                entry["error_code"] = ErrorCode.unsupported_version
                partitions.append(entry)
                continue
            try:
                entry["old_style_offsets"] = await broker.replicas.legacy_offsets(
                    topic.name, wanted.partition_index, wanted.timestamp,
                    wanted.max_num_offsets, replica_id=request.replica_id)
                entry["error_code"] = ErrorCode.none
            except LoglakeError as exc:
                entry["error_code"] = exc.code
            partitions.append(entry)
        topics.append({"name": topic.name, "partitions": partitions})
    return topics


async def offset_for_leader_epoch(broker: FetchServices, frame: RequestFrame) -> Any:
    """KIP-101/279: the end offset of the requested epoch in the leader's log."""
    request = frame.body
    names = [topic.topic for topic in request.topics]
    authorized = (set(names) if authz.cluster_allowed(broker, frame, AclOperation.CLUSTER_ACTION,
                                                      log_if_denied=False)
                  else _described(broker, frame, names))
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            entry: dict[str, Any] = {"partition": wanted.partition, "leader_epoch": -1,
                                     "end_offset": -1}
            if topic.topic not in authorized:
                entry["error_code"] = authz.TOPIC_AUTHORIZATION_FAILED
                partitions.append(entry)
                continue
            try:
                epoch, end = broker.replicas.end_offset_for_epoch(
                    topic.topic, wanted.partition, wanted.leader_epoch,
                    current_leader_epoch=wanted.current_leader_epoch)
                entry.update(leader_epoch=epoch, end_offset=end, error_code=ErrorCode.none)
            except LoglakeError as exc:
                entry["error_code"] = exc.code
            partitions.append(entry)
        topics.append({"topic": topic.topic, "partitions": partitions})
    return build(response_class(23, frame.api_version), {"topics": topics})
