"""ApiVersions and Metadata.

ApiVersions lists exactly the rows of broker/apis.py (every version we serve, nothing else).

Metadata authorizes as Kafka 4.0's ``KafkaApis.handleTopicMetadataRequest`` (through
handlers/authz.py):

* each topic needs DESCRIBE. Named topics the principal may not describe answer
  TOPIC_AUTHORIZATION_FAILED (no partitions, whether or not they exist, so existence does not
  leak); a request for all topics simply leaves them out (and logs no denial).
* auto-creation (``auto.create.topics.enable`` and the request's ``allow_auto_topic_creation``,
  never for an all-topics request) of a described but missing topic needs CREATE on the cluster
  or on the topic; without it the topic answers TOPIC_AUTHORIZATION_FAILED and is not created.
* v8-v10 ``cluster_authorized_operations`` when asked: the cluster bitfield if the principal may
  DESCRIBE the cluster, else 0; v8+ ``topic_authorized_operations`` when asked, for every topic
  entry the principal may describe (refused entries keep the "not requested" value). Without an
  authorizer the bitfields hold every operation the resource supports; unasked, the schema's
  "not requested" value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.broker.handlers import authz
from loglake.broker.security.acl_model import CLUSTER_NAME, AclOperation, ResourceType
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
    all_topics = requested is None or (version == 0 and not requested)
    if all_topics:
        names = sorted(services.metadata.topics)
    else:
        names = [t.name for t in requested if t.name is not None]
    described = authz.filter_authorized(services, frame, AclOperation.DESCRIBE,
                                        ResourceType.TOPIC, names, log_if_denied=not all_topics)
    allow_auto_create = (services.config.auto_create_topics_enable
                         and getattr(request, "allow_auto_topic_creation", True))
    not_creatable: set[str] = set()
    missing = [n for n in names if n in described and n not in services.metadata.topics]
    if allow_auto_create and missing and not authz.cluster_allowed(
            services, frame, AclOperation.CREATE, log_if_denied=False):
        creatable = authz.filter_authorized(services, frame, AclOperation.CREATE,
                                            ResourceType.TOPIC, missing)
        not_creatable = set(missing) - creatable
    auto_create = allow_auto_create and not all_topics
    with_operations = getattr(request, "include_topic_authorized_operations", False)
    topics = []
    for name in names:
        if name not in described:
            if not all_topics:
                topics.append(_refused(name))
            continue
        if name in not_creatable:
            topics.append(_refused(name))
            continue
        if name not in services.metadata.topics and auto_create:
            await _auto_create(services, name)
        topic = _topic_metadata(services, name, frame.session.listener, version)
        if with_operations:
            topic["topic_authorized_operations"] = authz.authorized_operations(
                services, frame, ResourceType.TOPIC, name)
        topics.append(topic)
    brokers = services.metadata.live_brokers
    cluster_operations = authz.AUTHORIZED_OPERATIONS_OMITTED
    if getattr(request, "include_cluster_authorized_operations", False):
        cluster_operations = (
            authz.authorized_operations(services, frame, ResourceType.CLUSTER, CLUSTER_NAME)
            if authz.cluster_allowed(services, frame, AclOperation.DESCRIBE) else 0)
    return build(
        response_class(3, version),
        {
            "cluster_authorized_operations": cluster_operations,
            "brokers": [
                {"node_id": b.broker_id, "host": e.host, "port": e.port, "rack": b.rack}
                for b, e in services.metadata.listener_brokers(frame.session.listener)
            ],
            "cluster_id": services.metadata.cluster_id,
            # any broker serves admin requests, so an unknown controller must not stall clients
            "controller_id": services.metadata.controller_id
            if services.metadata.controller_id in brokers else services.config.broker_id,
            "topics": topics,
        },
    )


def _refused(name: str) -> dict[str, Any]:
    """A topic entry the principal may not see (or create): no partitions, no id."""
    return {"error_code": authz.TOPIC_AUTHORIZATION_FAILED, "name": name, "partitions": [],
            "is_internal": False,
            "topic_authorized_operations": authz.AUTHORIZED_OPERATIONS_OMITTED}


async def _auto_create(services: BrokerServices, name: str) -> None:
    from loglake.broker.handlers.admin import create_topic

    try:
        validate_topic_name(name)
        await create_topic(services, name, -1, -1, {}, {})
    except LoglakeError:
        return


def _topic_metadata(services: BrokerServices, name: str, listener: str,
                    version: int) -> dict[str, Any]:
    """A topic's entry as a client on ``listener`` sees it: a partition whose live leader has
    no endpoint on that listener has no leader (-1) and LISTENER_NOT_FOUND from v6 on,
    LEADER_NOT_AVAILABLE before (Kafka's ``KRaftMetadataCache.getPartitionMetadata``), so
    the client is never sent a leader id that is missing from the brokers list."""
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
        error = ErrorCode.none if leader >= 0 else ErrorCode.leader_not_available
        if leader >= 0 and services.metadata.endpoint(leader, listener) is None:
            leader = -1
            error = (ErrorCode.listener_not_found if version >= 6
                     else ErrorCode.leader_not_available)
        partitions.append(
            {
                "error_code": error,
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
        "topic_authorized_operations": authz.AUTHORIZED_OPERATIONS_OMITTED,
    }
