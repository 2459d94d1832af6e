"""Produce and InitProducerId.

Produce semantics: acks must be 0, 1 or -1 (INVALID_REQUIRED_ACKS otherwise). acks=-1 is refused
up front with NOT_ENOUGH_REPLICAS when the ISR is smaller than min.insync.replicas, otherwise
appended and answered once the high watermark passes the batch (every ISR member has it), with
REQUEST_TIMED_OUT after the request's timeout and NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR
shrank below the minimum meanwhile. Partitions of one request are appended concurrently and
independently: one failing partition does not fail the others. acks=0 gets no response frame
at all (the server returns None). Errors carry Kafka's code plus an ``error_message`` (v8+).

Every partition's records are validated before anything is appended (segments/validation.py):
the request-level rules here (one batch per partition, magic 2, zstd needs v7, no
transactional batches), the batch and record rules in the log's append. A refused batch is
answered with its error and, for INVALID_RECORD / INVALID_TIMESTAMP, ``record_errors`` naming
the offending records by index (v8+, KIP-467).
"""

from __future__ import annotations

import asyncio
import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.errors import (
    InvalidRecordError,
    InvalidRequestError,
    InvalidTimestampError,
    LoglakeError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    RequestTimedOutError,
)
from loglake.segments.validation import check_produce_records

if TYPE_CHECKING:
    from loglake.broker.broker import Broker


async def produce(broker: Broker, frame: RequestFrame) -> Any:
    request = frame.body
    acks = request.acks
    timeout = max(request.timeout.total_seconds(), 0.0)
    jobs = []
    names = []
    for topic in request.topic_data:
        names.append(topic.name)
        jobs.append(asyncio.gather(*(
            _append(broker, topic.name, data.index, data.records, acks,
                    request.transactional_id, timeout, frame.api_version)
            for data in topic.partition_data
        )))
    results = await asyncio.gather(*jobs)
    if acks == 0:
        return None
    responses = [{"name": name, "partition_responses": list(partitions)}
                 for name, partitions in zip(names, results, strict=True)]
    return build(response_class(0, frame.api_version), {"responses": responses})


async def _append(
    broker: Broker, topic: str, index: int, records: bytes | None, acks: int,
    transactional_id: str | None, timeout: float, api_version: int,
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
        check_produce_records(records, api_version)
        min_isr = partition.config.min_insync_replicas
        if acks == -1 and len(partition.isr) < min_isr:
            raise NotEnoughReplicasError(
                f"{partition.name} has {len(partition.isr)} in-sync replicas "
                f"{list(partition.isr)}, min.insync.replicas is {min_isr}."
            )
        outcome = partition.append(bytes(records))
        if acks == -1:
            try:
                await partition.wait_committed(outcome.last_offset, timeout)
            except TimeoutError:
                raise RequestTimedOutError(
                    f"{partition.name}: offset {outcome.last_offset} was not replicated to "
                    f"the ISR {list(partition.isr)} within {timeout:g} s."
                ) from None
            if len(partition.isr) < min_isr:
                raise NotEnoughReplicasAfterAppendError(
                    f"{partition.name}: the ISR shrank to {list(partition.isr)} below "
                    f"min.insync.replicas {min_isr} after the append."
                )
    except LoglakeError as exc:
        result["error_code"] = exc.code
        result["error_message"] = exc.message
        if isinstance(exc, InvalidRecordError | InvalidTimestampError):
            result["record_errors"] = [
                {"batch_index": i, "batch_index_error_message": message}
                for i, message in exc.record_errors
            ]
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
