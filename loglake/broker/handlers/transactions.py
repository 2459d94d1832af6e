"""InitProducerId (with a transactional id), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
DescribeTransactions, ListTransactions: decode, one call to the transaction coordinator
(broker/transactions/coordinator.py), encode.

Error codes by request version, as Kafka's ``KafkaApis``: PRODUCER_FENCED (KIP-588) is answered
as INVALID_PRODUCER_EPOCH to InitProducerId below v4 and to AddPartitionsToTxn, AddOffsetsToTxn
and EndTxn below v2, whose clients do not know it. AddPartitionsToTxn checks the partitions
first: if any is unknown, those get UNKNOWN_TOPIC_OR_PARTITION and the others
OPERATION_NOT_ATTEMPTED, and nothing is added. DescribeTransactions answers a transaction start
time of -1 for an id without a transaction since its last InitProducerId (Kafka's value).
InitProducerId with only one of producer id / epoch set (the other -1) is INVALID_REQUEST, as
Kafka's. ListTransactions answers COORDINATOR_LOAD_IN_PROGRESS while this broker loads a state
partition and COORDINATOR_NOT_AVAILABLE without a ZooKeeper lease (top-level error, no list).

Authorization (Kafka 4.0's ``KafkaApis``, through handlers/authz.py), checked before anything
else: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn need WRITE on the
transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED: top-level, or on every partition of
AddPartitionsToTxn). AddPartitionsToTxn then needs WRITE on each topic: a refused topic's
partitions answer TOPIC_AUTHORIZATION_FAILED (internal topics always, as Kafka: clients add
``__consumer_offsets`` with AddOffsetsToTxn), unknown ones UNKNOWN_TOPIC_OR_PARTITION, the rest
OPERATION_NOT_ATTEMPTED, and nothing is added. AddOffsetsToTxn also needs READ on the group
(GROUP_AUTHORIZATION_FAILED). DescribeTransactions needs DESCRIBE on each transactional id and
lists only the topics the principal may DESCRIBE; ListTransactions lists only the ids it may
DESCRIBE.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.broker.handlers import authz
from loglake.broker.security.acl_model import AclOperation, ResourceType
from loglake.broker.transactions.state import TransactionError, TransactionState

if TYPE_CHECKING:
    from loglake.broker.metadata_cache import MetadataCache
    from loglake.broker.security.authorizer import Authorizer
    from loglake.broker.transactions.coordinator import TransactionCoordinator

INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state"})
"""Kafka's ``Topic.isInternal`` names."""
FENCED_CODE_SINCE = {INIT_PRODUCER_ID: 4, ADD_PARTITIONS_TO_TXN: 2, ADD_OFFSETS_TO_TXN: 2,
                     END_TXN: 2}
"""First version of each API whose clients understand PRODUCER_FENCED."""


class TransactionServices(Protocol):
    """What these handlers use of the broker."""

    @property
    def transactions(self) -> TransactionCoordinator: ...

    @property
    def metadata(self) -> MetadataCache: ...

    @property
    def authorizer(self) -> Authorizer: ...


def _txn_id_allowed(services: TransactionServices, frame: RequestFrame,
                    transactional_id: str) -> bool:
    return authz.allowed(services, frame, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                         transactional_id)


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


def _code(exc: TransactionError, api_key: int, version: int) -> ErrorCode:
    if exc.code is ErrorCode.producer_fenced and version < FENCED_CODE_SINCE[api_key]:
        return ErrorCode.invalid_producer_epoch
    return exc.code


async def init_producer_id(services: TransactionServices, frame: RequestFrame) -> Any:
    """InitProducerId with a non-null transactional id (handlers/produce.py hands it here)."""
    request = frame.body
    cls = response_class(INIT_PRODUCER_ID, frame.api_version)
    if not _txn_id_allowed(services, frame, request.transactional_id):
        return build(cls, {"error_code": authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                           "producer_id": -1, "producer_epoch": -1})
    expected_id = int(getattr(request, "producer_id", -1))
    expected_epoch = int(getattr(request, "producer_epoch", -1))
    if (expected_id == -1) != (expected_epoch == -1):  # KafkaApis: both -1 or neither
        return build(cls, {"error_code": ErrorCode.invalid_request, "producer_id": -1,
                           "producer_epoch": -1})
    try:
        producer_id, epoch = await services.transactions.init_producer_id(
            request.transactional_id, timeout_ms=_ms(request.transaction_timeout),
            producer_id=expected_id, producer_epoch=expected_epoch)
    except TransactionError as exc:
        return build(cls, {"error_code": _code(exc, INIT_PRODUCER_ID, frame.api_version),
                           "producer_id": -1, "producer_epoch": -1})
    return build(cls, {"producer_id": producer_id, "producer_epoch": epoch})


async def add_partitions_to_txn(services: TransactionServices, frame: RequestFrame) -> Any:
    request = frame.body
    topics = [(str(t.name), [int(p) for p in t.partitions])
              for t in request.v3_and_below_topics]
    wanted = [(name, p) for name, parts in topics for p in parts]
    errors: dict[tuple[str, int], ErrorCode] = {}
    refused: dict[tuple[str, int], ErrorCode] = {}
    if not _txn_id_allowed(services, frame, request.v3_and_below_transactional_id):
        refused = dict.fromkeys(wanted, authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    else:
        authorized = authz.filter_authorized(
            services, frame, AclOperation.WRITE, ResourceType.TOPIC,
            (name for name, _ in wanted if name not in INTERNAL_TOPICS))
        known = services.metadata.topics
        for name, p in wanted:
            if name not in authorized:
                refused[(name, p)] = authz.TOPIC_AUTHORIZATION_FAILED
            elif name not in known or p not in known[name].assignment:
                refused[(name, p)] = ErrorCode.unknown_topic_or_partition
    if refused:
        errors = {tp: refused.get(tp, ErrorCode.operation_not_attempted) for tp in wanted}
    else:
        try:
            await services.transactions.add_partitions(
                request.v3_and_below_transactional_id,
                producer_id=request.v3_and_below_producer_id,
                epoch=request.v3_and_below_producer_epoch, partitions=wanted)
            code = ErrorCode.none
        except TransactionError as exc:
            code = _code(exc, ADD_PARTITIONS_TO_TXN, frame.api_version)
        errors = dict.fromkeys(wanted, code)
    return build(response_class(ADD_PARTITIONS_TO_TXN, frame.api_version), {
        "results_by_topic_v3_and_below": [
            {"name": name, "results_by_partition": [
                {"partition_index": p, "partition_error_code": errors[(name, p)]}
                for p in parts]}
            for name, parts in topics]})


async def add_offsets_to_txn(services: TransactionServices, frame: RequestFrame) -> Any:
    request = frame.body
    cls = response_class(ADD_OFFSETS_TO_TXN, frame.api_version)
    if not _txn_id_allowed(services, frame, request.transactional_id):
        return build(cls, {"error_code": authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})
    if not authz.allowed(services, frame, AclOperation.READ, ResourceType.GROUP,
                         request.group_id):
        return build(cls, {"error_code": authz.GROUP_AUTHORIZATION_FAILED})
    code = ErrorCode.none
    try:
        await services.transactions.add_offsets(
            request.transactional_id, producer_id=request.producer_id,
            epoch=request.producer_epoch, group_id=request.group_id)
    except TransactionError as exc:
        code = _code(exc, ADD_OFFSETS_TO_TXN, frame.api_version)
    return build(cls, {"error_code": code})


async def end_txn(services: TransactionServices, frame: RequestFrame) -> Any:
    request = frame.body
    if not _txn_id_allowed(services, frame, request.transactional_id):
        return build(response_class(END_TXN, frame.api_version),
                     {"error_code": authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})
    code = ErrorCode.none
    try:
        await services.transactions.end_txn(
            request.transactional_id, producer_id=request.producer_id,
            epoch=request.producer_epoch, commit=bool(request.committed))
    except TransactionError as exc:
        code = _code(exc, END_TXN, frame.api_version)
    return build(response_class(END_TXN, frame.api_version), {"error_code": code})


async def describe_transactions(services: TransactionServices, frame: RequestFrame) -> Any:
    states = []
    for transactional_id in frame.body.transactional_ids:
        # an error entry carries the schema's defaults (zeros), as Kafka's
        entry: dict[str, Any] = {"transactional_id": transactional_id, "producer_id": 0,
                                 "producer_epoch": 0, "transaction_state": "",
                                 "transaction_start_time": _time(0), "topics": []}
        if not authz.allowed(services, frame, AclOperation.DESCRIBE,
                             ResourceType.TRANSACTIONAL_ID, transactional_id):
            entry["error_code"] = authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            states.append(entry)
            continue
        try:
            meta = await services.transactions.describe(transactional_id)
        except TransactionError as exc:
            entry["error_code"] = exc.code
            states.append(entry)
            continue
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            topics.setdefault(topic, []).append(partition)
        for group in sorted(meta.groups):
            topics.setdefault(OFFSETS_TOPIC, []).append(
                services.transactions.offsets_partition_for(group))
        entry.update(error_code=ErrorCode.none, transaction_state=meta.state.value,
                     transaction_timeout=meta.timeout_ms,
                     transaction_start_time=_time(meta.txn_start_ms),
                     producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                     topics=[{"topic": t, "partitions": sorted(set(p))}
                             for t, p in topics.items()
                             if authz.allowed(services, frame, AclOperation.DESCRIBE,
                                              ResourceType.TOPIC, t)])
        states.append(entry)
    return build(response_class(DESCRIBE_TRANSACTIONS, frame.api_version),
                 {"transaction_states": states})


async def list_transactions(services: TransactionServices, frame: RequestFrame) -> Any:
    request = frame.body
    names = {state.value: state for state in TransactionState}
    wanted = frozenset(names[s] for s in request.state_filters if s in names)
    unknown = [s for s in request.state_filters if s not in names]
    code = ErrorCode.none
    try:
        listed = services.transactions.list_transactions(
            states=wanted, producer_ids=frozenset(int(p) for p in request.producer_id_filters),
            min_duration_ms=int(getattr(request, "duration_filter", -1)))
    except TransactionError as exc:
        code, listed, unknown = exc.code, [], []
    if unknown and not wanted:  # only unknown states asked for: nothing matches
        listed = []
    listed = [m for m in listed
              if authz.allowed(services, frame, AclOperation.DESCRIBE,
                               ResourceType.TRANSACTIONAL_ID, m.transactional_id)]
    return build(response_class(LIST_TRANSACTIONS, frame.api_version), {
        "error_code": code, "unknown_state_filters": unknown,
        "transaction_states": [{"transactional_id": m.transactional_id,
                                "producer_id": m.producer_id,
                                "transaction_state": m.state.value} for m in listed]})


def _time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
