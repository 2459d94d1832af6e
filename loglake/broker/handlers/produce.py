"""Produce and InitProducerId: decode, one call, encode.

Produce goes to :meth:`ReplicaManager.append_records <loglake.broker.replica_manager.
ReplicaManager.append_records>`, which holds the rules (acks, min.insync.replicas, validation,
the acks=all delayed produce). acks=0 gets no response frame at all (the handler returns None).
Errors carry Kafka's code plus an ``error_message`` (v8+); INVALID_RECORD / INVALID_TIMESTAMP
also ``record_errors`` naming the offending records by index (v8+, KIP-467). The request's
``transactional_id`` goes along: transactional batches need it, and the transaction errors
(INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH, INVALID_RECORD for a control batch) are answered
per partition with the same codes at every Produce version, as Kafka does.

Authorization (Kafka 4.0's ``KafkaApis.handleProduceRequest``, through handlers/authz.py):
a request carrying transactional batches needs WRITE on its transactional id, else the whole
request is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED (a transactional batch without a
transactional id keeps the validator's per-partition answer); each topic needs WRITE, else its
partitions answer TOPIC_AUTHORIZATION_FAILED and are not appended. An acks=0 request with a
refused partition closes the connection (its sender reads no response), as Kafka does.
Idempotent producers are authorized at InitProducerId (IDEMPOTENT_WRITE on the cluster, or
WRITE on some topic: KIP-679), not per Produce. InitProducerId with a transactional id needs
WRITE on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), without one IDEMPOTENT_WRITE or KIP-679
(CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from loglake.broker.codec import FrameError, RequestFrame, build, response_class
from loglake.broker.handlers import authz, transactions
from loglake.broker.security.acl_model import AclOperation, ResourceType
from loglake.segments.batch import TRANSACTIONAL_BIT

if TYPE_CHECKING:
    from loglake.broker.metadata_cache import MetadataCache
    from loglake.broker.producer_ids import ProducerIds
    from loglake.broker.replica_manager import ProduceResult, ReplicaManager
    from loglake.broker.security.authorizer import Authorizer
    from loglake.broker.transactions.coordinator import TransactionCoordinator


class ProduceServices(Protocol):
    """What these handlers use of the broker."""

    @property
    def replicas(self) -> ReplicaManager: ...

    @property
    def producer_ids(self) -> ProducerIds: ...

    @property
    def transactions(self) -> TransactionCoordinator: ...

    @property
    def metadata(self) -> MetadataCache: ...

    @property
    def authorizer(self) -> Authorizer: ...


_ATTRIBUTES_AT = 21
"""Byte offset of a v2 record batch's int16 attributes (baseOffset 8, batchLength 4,
partitionLeaderEpoch 4, magic 1, crc 4)."""


def _has_transactional_records(request: Any) -> bool:
    """Does any partition's first batch carry the transactional bit (Kafka's
    ``RequestUtils.hasTransactionalRecords``)? Malformed batches are the validator's."""
    for topic in request.topic_data:
        for data in topic.partition_data:
            records = data.records
            if records and len(records) > _ATTRIBUTES_AT + 1 and (
                    records[_ATTRIBUTES_AT + 1] & TRANSACTIONAL_BIT):
                return True
    return False


async def produce(broker: ProduceServices, frame: RequestFrame) -> Any:
    request = frame.body
    if (request.transactional_id is not None and _has_transactional_records(request)
            and not authz.allowed(broker, frame, AclOperation.WRITE,
                                  ResourceType.TRANSACTIONAL_ID, request.transactional_id)):
        if request.acks == 0:
            raise FrameError("Produce (acks=0) refused: transactional id not authorized.")
        return authz.error_response(frame, authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    authorized = authz.filter_authorized(broker, frame, AclOperation.WRITE, ResourceType.TOPIC,
                                         (topic.name for topic in request.topic_data))
    entries = [(topic.name, data.index, data.records)
               for topic in request.topic_data if topic.name in authorized
               for data in topic.partition_data]
    results = iter(await broker.replicas.append_records(
        entries, acks=request.acks, timeout=request.timeout.total_seconds(),
        api_version=frame.api_version, transactional_id=request.transactional_id)
        if entries else [])
    if request.acks == 0:
        if any(topic.name not in authorized for topic in request.topic_data):
            raise FrameError("Produce (acks=0) with a topic not authorized: closing.")
        return None
    responses = [{"name": topic.name,
                  "partition_responses": [
                      _partition_response(next(results)) if topic.name in authorized
                      else _refused(data.index) for data in topic.partition_data]}
                 for topic in request.topic_data]
    return build(response_class(0, frame.api_version), {"responses": responses})


def _refused(index: int) -> dict[str, Any]:
    return {"index": index, "error_code": ErrorCode.topic_authorization_failed,
            "base_offset": -1, "log_start_offset": -1, "log_append_time": None}


def _partition_response(result: ProduceResult) -> dict[str, Any]:
    append_time = None
    if result.log_append_time_ms >= 0:
        append_time = datetime.datetime.fromtimestamp(result.log_append_time_ms / 1000,
                                                      datetime.UTC)
    return {
        "index": result.index, "error_code": result.error, "error_message": result.message,
        "base_offset": result.base_offset, "log_start_offset": result.log_start_offset,
        "log_append_time": append_time,
        "record_errors": [{"batch_index": i, "batch_index_error_message": message}
                          for i, message in result.record_errors],
    }


async def init_producer_id(broker: ProduceServices, frame: RequestFrame) -> Any:
    request = frame.body
    cls = response_class(22, frame.api_version)
    if request.transactional_id is not None:  # the transaction coordinator's
        return await transactions.init_producer_id(broker, frame)
    if not (authz.cluster_allowed(broker, frame, AclOperation.IDEMPOTENT_WRITE,
                                  log_if_denied=False)
            or authz.allowed_by_resource_type(broker, frame, AclOperation.WRITE,
                                              ResourceType.TOPIC)):
        return build(cls, {"error_code": ErrorCode.cluster_authorization_failed,
                           "producer_id": -1, "producer_epoch": -1})
    producer_id = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if producer_id >= 0 and 0 <= epoch < 32766:
        # KIP-360: an existing idempotent producer bumps its epoch to reset sequences
        return build(cls, {"producer_id": producer_id, "producer_epoch": epoch + 1})
    return build(cls, {"producer_id": await broker.producer_ids.allocate(), "producer_epoch": 0})
