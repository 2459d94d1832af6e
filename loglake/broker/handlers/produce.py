"""Produce and InitProducerId.

Produce semantics: acks must be 0, 1 or -1 (INVALID_REQUIRED_ACKS otherwise); with a single
replica, acks=-1 is satisfied by the leader's append. acks=0 gets no response frame at all (the
server returns None). Each partition is appended independently: one failing partition does not
fail the others. Errors carry Kafka's code plus an ``error_message`` (v8+).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.errors import InvalidRequestError, LoglakeError

if TYPE_CHECKING:
    from loglake.broker.broker import Broker


async def produce(broker: Broker, frame: RequestFrame) -> Any:
    request = frame.body
    acks = request.acks
    responses = []
    for topic in request.topic_data:
        partitions = []
        for data in topic.partition_data:
            partitions.append(_append(broker, topic.name, data.index, data.records, acks,
                                      request.transactional_id))
        responses.append({"name": topic.name, "partition_responses": partitions})
    if acks == 0:
        return None
    return build(response_class(0, frame.api_version), {"responses": responses})


def _append(
    broker: Broker, topic: str, index: int, records: bytes | None, acks: int,
    transactional_id: str | None,
) -> dict[str, Any]:
    result: dict[str, Any] = {"index": index, "base_offset": -1, "log_start_offset": -1,
                              "log_append_time": None}
    try:
        if acks not in (0, 1, -1):
            result["error_code"] = ErrorCode.invalid_required_acks
            result["error_message"] = f"acks={acks} is not one of 0, 1, -1 (all)."
            return result
        if transactional_id is not None:
            raise InvalidRequestError("Transactions are not supported by this broker.")
        if not records:
            raise InvalidRequestError("Produce request carries no record batches.")
        partition = broker.leader_partition(topic, index)
        outcome = partition.append(bytes(records))
    except LoglakeError as exc:
        result["error_code"] = exc.code
        result["error_message"] = exc.message
        return result
    result["error_code"] = ErrorCode.none
    result["base_offset"] = outcome.base_offset
    result["log_start_offset"] = outcome.log_start_offset
    if outcome.log_append_time_ms >= 0:
        result["log_append_time"] = datetime.datetime.fromtimestamp(
            outcome.log_append_time_ms / 1000, datetime.UTC
        )
    return result


async def init_producer_id(broker: Broker, frame: RequestFrame) -> Any:
    request = frame.body
    cls = response_class(22, frame.api_version)
    if request.transactional_id is not None:
        return build(cls, {"error_code": ErrorCode.transactional_id_authorization_failed,
                           "producer_id": -1, "producer_epoch": -1})
    producer_id = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if producer_id >= 0 and 0 <= epoch < 32766:
        # KIP-360: an existing idempotent producer bumps its epoch to reset sequences
        return build(cls, {"producer_id": producer_id, "producer_epoch": epoch + 1})
    return build(cls, {"producer_id": await broker.allocate_producer_id(), "producer_epoch": 0})
