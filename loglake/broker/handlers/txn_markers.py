"""WriteTxnMarkers (v1, key 27): the transaction coordinator asks partition leaders and group
coordinators to end a transaction. Decode, one call per kind of entry, encode.

This is an inter-broker API: only the transaction coordinator (broker/transactions/, its
marker sender) sends it. As Kafka, it needs ALTER (checked without an audit line for a denial)
or CLUSTER_ACTION on the cluster; otherwise every partition of the request answers
CLUSTER_AUTHORIZATION_FAILED (Kafka's error response for the ClusterAuthorizationException)
and nothing is written. Brokers are authorized as ``super.users`` or by an ACL for their
principal.

For each marker (producer id, producer epoch, coordinator epoch, COMMIT or ABORT) and each
partition it names:

* topic ``__consumer_offsets`` (``GROUP_OFFSETS_TOPIC``): the entry stands for the transactional
  offset commits of the groups whose offsets partition (``offsets_partition_for(group)``) is
  that index; the group coordinator makes them committed or drops them
  (``GroupCoordinator.complete_transaction``). Its NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE
  and COORDINATOR_LOAD_IN_PROGRESS answer NOT_LEADER_OR_FOLLOWER, as Kafka translates them: the
  marker sender refreshes and retries on that code and would not expect the others.
* any other topic: the replica manager writes the control batch on the leader and answers once
  the high watermark passes it (acks=all; ``ReplicaManager.write_txn_markers``), bounded by
  ``MARKER_TIMEOUT_S`` (Kafka: the broker's ``request.timeout.ms``, 30 s by default). Errors
  per partition: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR,
  NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT, INVALID_PRODUCER_EPOCH (the marker's
  epoch is older than the producer's), TRANSACTION_COORDINATOR_FENCED (an older coordinator
  epoch than the partition has seen for this producer).

All entries of a request run concurrently; the response lists every marker and partition in
request order. Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.broker.handlers import authz
from loglake.broker.replica_manager import MarkerResult, TxnMarker
from loglake.broker.security.acl_model import AclOperation
from loglake.errors import LoglakeError

if TYPE_CHECKING:
    from loglake.broker.services import BrokerServices

log = logging.getLogger(__name__)

GROUP_OFFSETS_TOPIC = "__consumer_offsets"
MARKER_TIMEOUT_S = 30.0
"""How long a marker waits for the high watermark (Kafka's request.timeout.ms default)."""

_NOT_READY = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                        ErrorCode.coordinator_load_in_progress})


async def write_txn_markers(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    if not (authz.cluster_allowed(services, frame, AclOperation.ALTER, log_if_denied=False)
            or authz.cluster_allowed(services, frame, AclOperation.CLUSTER_ACTION)):
        return authz.error_response(frame, authz.CLUSTER_AUTHORIZATION_FAILED)
    data_markers = [
        TxnMarker(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                  bool(marker.transaction_result),
                  tuple((topic.name, index) for topic in marker.topics
                        if topic.name != GROUP_OFFSETS_TOPIC
                        for index in topic.partition_indexes))
        for marker in request.markers
    ]
    group_entries = [
        [_complete_offsets(services, marker.producer_id, marker.producer_epoch, index,
                           bool(marker.transaction_result))
         for topic in marker.topics if topic.name == GROUP_OFFSETS_TOPIC
         for index in topic.partition_indexes]
        for marker in request.markers
    ]
    written, completed = await asyncio.gather(
        services.replicas.write_txn_markers(data_markers, timeout=MARKER_TIMEOUT_S),
        asyncio.gather(*(asyncio.gather(*entries) for entries in group_entries)),
    )
    markers = []
    for marker, data_results, group_results in zip(request.markers, written, completed,
                                                   strict=True):
        data = iter(data_results)
        groups = iter(group_results)
        topics = []
        for topic in marker.topics:
            results = groups if topic.name == GROUP_OFFSETS_TOPIC else data
            topics.append({"name": topic.name, "partitions": [
                {"partition_index": index, "error_code": next(results).error}
                for index in topic.partition_indexes]})
        markers.append({"producer_id": marker.producer_id, "topics": topics})
    return build(response_class(27, frame.api_version), {"markers": markers})


async def _complete_offsets(services: BrokerServices, producer_id: int, producer_epoch: int,
                            offsets_partition: int, commit: bool) -> MarkerResult:
    """One ``__consumer_offsets`` entry: the group coordinator ends the transaction's offset
    commits (see the module for the error translation)."""
    result = MarkerResult(GROUP_OFFSETS_TOPIC, offsets_partition)
    try:
        await services.groups.complete_transaction(producer_id, producer_epoch,
                                                   offsets_partition, commit)
    except LoglakeError as exc:
        result.error = exc.code
        result.message = exc.message
    except Exception:
        log.exception("completing the offsets of producer %d in offsets partition %d failed",
                      producer_id, offsets_partition)
        result.error = ErrorCode.unknown_server_error
    if result.error in _NOT_READY:
        result.error = ErrorCode.not_leader_or_follower
    return result
