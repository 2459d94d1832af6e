"""Produce and InitProducerId: decode, one call, encode.

Produce goes to :meth:`ReplicaManager.append_records <loglake.broker.replica_manager.
ReplicaManager.append_records>`, which holds the rules (acks, min.insync.replicas, validation,
the acks=all delayed produce). acks=0 gets no response frame at all (the handler returns None).
Errors carry Kafka's code plus an ``error_message`` (v8+); INVALID_RECORD / INVALID_TIMESTAMP
also ``record_errors`` naming the offending records by index (v8+, KIP-467). The request's
``transactional_id`` goes along: transactional batches need it, and the transaction errors
(INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH, INVALID_RECORD for a control batch) are answered
per partition with the same codes at every Produce version, as Kafka does.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, Protocol

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.broker.handlers import transactions

if TYPE_CHECKING:
    from loglake.broker.metadata_cache import MetadataCache
    from loglake.broker.producer_ids import ProducerIds
    from loglake.broker.replica_manager import ProduceResult, ReplicaManager
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


async def produce(broker: ProduceServices, frame: RequestFrame) -> Any:
    request = frame.body
    entries = [(topic.name, data.index, data.records)
               for topic in request.topic_data for data in topic.partition_data]
    results = iter(await broker.replicas.append_records(
        entries, acks=request.acks, timeout=request.timeout.total_seconds(),
        api_version=frame.api_version, transactional_id=request.transactional_id))
    if request.acks == 0:
        return None
    responses = [{"name": topic.name,
                  "partition_responses": [_partition_response(next(results))
                                          for _ in topic.partition_data]}
                 for topic in request.topic_data]
    return build(response_class(0, frame.api_version), {"responses": responses})


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
    producer_id = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if producer_id >= 0 and 0 <= epoch < 32766:
        # KIP-360: an existing idempotent producer bumps its epoch to reset sequences
        return build(cls, {"producer_id": producer_id, "producer_epoch": epoch + 1})
    return build(cls, {"producer_id": await broker.producer_ids.allocate(), "producer_epoch": 0})
