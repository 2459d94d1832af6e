"""ApiVersions and Metadata.

ApiVersions lists exactly the rows of broker/apis.py (every version we serve, nothing else).
Metadata v8-v10 answer ``cluster_authorized_operations`` and v8+ ``topic_authorized_operations``
when asked, as Kafka does without an authorizer: every operation the resource supports (see
handlers/cluster_admin.py); unasked, the schema's "not requested" value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.broker.handlers.cluster_admin import (
    CLUSTER_AUTHORIZED_OPERATIONS,
    TOPIC_AUTHORIZED_OPERATIONS,
    UNSET_AUTHORIZED_OPERATIONS,
)
from loglake.broker.topics import validate_topic_name
from loglake.errors import LoglakeError

if TYPE_CHECKING:
    from loglake.broker.services import BrokerServices


async def api_versions(services: BrokerServices, frame: RequestFrame) -> Any:
    from loglake.broker.apis import API_TABLE

    return api_versions_response(frame.api_version, ErrorCode.none, API_TABLE)


def api_versions_response(version: int, error: ErrorCode, table: dict[int, Any]) -> Any:
    keys = [
        {"api_key": api.key, "min_version": api.min_version, "max_version": api.max_version}
        for api in sorted(table.values(), key=lambda a: a.key)
    ]
    return build(response_class(18, version), {"error_code": error, "api_keys": keys})


async def metadata(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    version = frame.api_version
    requested = request.topics
    if requested is None or (version == 0 and not requested):
        names = sorted(services.metadata.topics)
    else:
        names = [t.name for t in requested if t.name is not None]
    auto_create = (
        services.config.auto_create_topics_enable
        and getattr(request, "allow_auto_topic_creation", True)
    )
    topics = []
    for name in names:
        if name not in services.metadata.topics and auto_create:
            await _auto_create(services, name)
        topics.append(_topic_metadata(services, name))
    brokers = services.metadata.live_brokers
    if getattr(request, "include_topic_authorized_operations", False):
        for topic in topics:
            if topic["error_code"] == ErrorCode.none:
                topic["topic_authorized_operations"] = TOPIC_AUTHORIZED_OPERATIONS
    return build(
        response_class(3, version),
        {
            "cluster_authorized_operations": CLUSTER_AUTHORIZED_OPERATIONS
            if getattr(request, "include_cluster_authorized_operations", False)
            else UNSET_AUTHORIZED_OPERATIONS,
            "brokers": [
                {"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
                for b in brokers.values()
            ],
            "cluster_id": services.metadata.cluster_id,
            # any broker serves admin requests, so an unknown controller must not stall clients
            "controller_id": services.metadata.controller_id
            if services.metadata.controller_id in brokers else services.config.broker_id,
            "topics": topics,
        },
    )


async def _auto_create(services: BrokerServices, name: str) -> None:
    from loglake.broker.handlers.admin import create_topic

    try:
        validate_topic_name(name)
        await create_topic(services, name, -1, -1, {}, {})
    except LoglakeError:
        return


def _topic_metadata(services: BrokerServices, name: str) -> dict[str, Any]:
    meta = services.metadata.topics.get(name)
    if meta is None:
        try:
            validate_topic_name(name)
            error = ErrorCode.unknown_topic_or_partition
        except LoglakeError:
            error = ErrorCode.invalid_topic_exception
        return {"error_code": error, "name": name, "partitions": []}
    live = services.metadata.live_brokers
    partitions = []
    me = services.config.broker_id
    for index, replicas in meta.assignment.items():
        state = services.metadata.partition_states.get((name, index))
        elsewhere = services.metadata.offline_replicas.get((name, index), frozenset())
        offline = [r for r in replicas if r not in live or r in elsewhere
                   or (r == me and (name, index) in services.replicas.offline_partitions)]
        leader = state.leader if state is not None and state.leader not in offline else -1
        if leader not in live:
            leader = -1
        partitions.append(
            {
                "error_code": ErrorCode.none if leader >= 0 else ErrorCode.leader_not_available,
                "partition_index": index,
                "leader_id": leader,
                "leader_epoch": state.leader_epoch if state is not None else -1,
                "replica_nodes": list(replicas),
                "isr_nodes": list(state.isr) if state is not None else [],
                "offline_replicas": offline,
            }
        )
    return {
        "error_code": ErrorCode.none,
        "name": name,
        "topic_id": services.metadata.topic_ids.get(name),
        "is_internal": False,
        "partitions": partitions,
        "topic_authorized_operations": UNSET_AUTHORIZED_OPERATIONS,
    }
