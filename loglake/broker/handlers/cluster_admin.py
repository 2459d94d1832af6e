"""DescribeCluster (60), DescribeLogDirs (35) and AlterConfigs (33).

* DescribeCluster: the cluster id, the controller, the live brokers (with rack) from the
  metadata cache. The controller id follows our Metadata responses (the ZooKeeper controller
  while it is registered, else this broker, which serves admin requests as well), so the two
  APIs never disagree. The request itself needs no ACL (as in Kafka); asked for them, the
  cluster's authorized operations are 0 without DESCRIBE on the cluster, else the bitfield of
  the cluster operations the principal may perform (without an authorizer: every operation
  Kafka supports on a cluster, CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS,
  ALTER_CONFIGS, IDEMPOTENT_WRITE). Endpoint type 2 (controllers) is refused with
  MISMATCHED_ENDPOINT_TYPE, unknown types with UNSUPPORTED_ENDPOINT_TYPE (INVALID_REQUEST at
  v0), as Kafka's brokers do. No broker
  is ever fenced (``is_fenced`` false): a broker is live while its ZooKeeper registration is.
* DescribeLogDirs: needs DESCRIBE on the cluster, else the top-level CLUSTER_AUTHORIZATION_FAILED
  and no directories (v1-2 have no top-level code: an empty answer, as Kafka's). One log
  directory per broker (``log.dirs``). For each replica this broker
  holds (leader or follower; replicas taken offline by a storage failure are not listed, as
  Kafka lists only online logs): the size of its segments, the offset lag
  ``max(high watermark - log end offset, 0)`` (Kafka's ``getLogEndOffsetLag``: 0 on a leader,
  on a follower what it has not yet fetched of what the leader has committed) and
  ``is_future_key`` false (there is no AlterReplicaLogDirs). KIP-827's ``total_bytes`` and
  ``usable_bytes`` are the file system's size and the space available to this process
  (``statvfs``, read off the event loop). A directory that cannot be read answers
  KAFKA_STORAGE_ERROR. Null topics means every replica; topics absent here are left out.
* AlterConfigs: the legacy, non-incremental form. A topic's override set is *replaced* by the
  request's entries (a key not named returns to its default), validated as a whole with the
  same validation IncrementalAlterConfigs uses (defaults + overrides through
  ``BrokerConfig.topic_config``: unknown names and bad values answer INVALID_CONFIG), written to
  ``/config/topics/<topic>`` unless ``validate_only``. Request checks in Kafka's order
  (``ConfigAdminManager.preprocess``): a resource named twice, a key named twice or a null value
  answer INVALID_REQUEST. A BROKER resource (this broker's id or the cluster default: what
  Kafka 3.9's ``kafka-configs --entity-type brokers --alter`` sends) needs ALTER_CONFIGS on the
  cluster, else CLUSTER_AUTHORIZATION_FAILED, and replaces that entity's dynamic broker configs
  (``broker_configs.broker_replacement``: only the dynamic keys, checked before authorization,
  INVALID_REQUEST for others as Kafka's preprocess answers; the rest of a broker's configs
  are static, read from its properties file at start); other
  resource types answer INVALID_REQUEST. After those checks a topic needs ALTER_CONFIGS on
  it, else TOPIC_AUTHORIZATION_FAILED.

Handlers translate requests and responses only; runs on the event loop.
"""

from __future__ import annotations

import asyncio
import collections
import os
import shutil
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.broker.handlers import authz, broker_configs
from loglake.broker.security.acl_model import CLUSTER_NAME, AclOperation, ResourceType
from loglake.errors import InvalidRequestError, LoglakeError, UnknownTopicError

if TYPE_CHECKING:
    from loglake.broker.services import BrokerServices

DESCRIBE_CLUSTER_KEY = 60
DESCRIBE_LOG_DIRS_KEY = 35
ALTER_CONFIGS_KEY = 33

ENDPOINT_BROKERS = 1
ENDPOINT_CONTROLLERS = 2
UNSET_AUTHORIZED_OPERATIONS = -2147483648
"""The schema's default: authorized operations were not asked for."""

_CLUSTER_OPERATIONS = (5, 7, 8, 9, 10, 11, 12)
"""AclOperation codes Kafka supports on the cluster resource: CREATE, ALTER, DESCRIBE,
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE."""
CLUSTER_AUTHORIZED_OPERATIONS = sum(1 << code for code in _CLUSTER_OPERATIONS)
"""Kafka's 32-bit field of the operations (``Utils.to32BitField``): 8096."""
_TOPIC_OPERATIONS = (3, 4, 5, 6, 7, 8, 10, 11)
"""READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS."""
TOPIC_AUTHORIZED_OPERATIONS = sum(1 << code for code in _TOPIC_OPERATIONS)
"""The same for a topic (Metadata v8+ ``topic_authorized_operations``): 3576."""

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
_KNOWN_RESOURCE_TYPES = {RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, 16, 32}
"""TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP."""


# ---------------------------------------------------------------------------- DescribeCluster


async def describe_cluster(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    cls = response_class(DESCRIBE_CLUSTER_KEY, frame.api_version)
    endpoint = getattr(request, "endpoint_type", ENDPOINT_BROKERS)
    if endpoint != ENDPOINT_BROKERS:
        if endpoint == ENDPOINT_CONTROLLERS:
            error = ErrorCode.mismatched_endpoint_type
            message = ("The request was sent to an endpoint of type BROKER, but we wanted an "
                       "endpoint of type CONTROLLER")
        else:
            error = ErrorCode.unsupported_endpoint_type
            message = f"Unsupported endpoint type {endpoint}"
        if frame.api_version == 0:
            error = ErrorCode.invalid_request
        return build(cls, {"error_code": error, "error_message": message,
                           "controller_id": -1, "brokers": []})
    brokers = services.metadata.live_brokers
    controller = (services.metadata.controller_id if services.metadata.controller_id in brokers
                  else services.config.broker_id)
    return build(cls, {
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": ENDPOINT_BROKERS,
        "cluster_id": services.metadata.cluster_id,
        "controller_id": controller,
        "brokers": [{"broker_id": b.broker_id, "host": e.host, "port": e.port, "rack": b.rack,
                     "is_fenced": False}
                    for b, e in services.metadata.listener_brokers(frame.session.listener)],
        "cluster_authorized_operations": _cluster_authorized_operations(services, frame),
    })


def _cluster_authorized_operations(services: BrokerServices, frame: RequestFrame) -> int:
    """Kafka's ``computeDescribeClusterResponse``: the schema default when not asked; 0 without
    DESCRIBE on the cluster; else the bitfield of the cluster operations the session may do."""
    if not frame.body.include_cluster_authorized_operations:
        return UNSET_AUTHORIZED_OPERATIONS
    if not authz.cluster_allowed(services, frame, AclOperation.DESCRIBE):
        return 0
    return authz.authorized_operations(services, frame, ResourceType.CLUSTER, CLUSTER_NAME)


# ---------------------------------------------------------------------------- DescribeLogDirs


def _disk_space(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding ``path`` (Java's ``FileStore``
    ``getTotalSpace`` / ``getUsableSpace``: usable is what an unprivileged writer may use)."""
    usage = shutil.disk_usage(path)
    return usage.total, usage.free


async def describe_log_dirs(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    if not authz.cluster_allowed(services, frame, AclOperation.DESCRIBE):
        return build(response_class(DESCRIBE_LOG_DIRS_KEY, frame.api_version),
                     {"error_code": authz.CLUSTER_AUTHORIZATION_FAILED, "results": []})
    log_dir = os.path.abspath(services.config.log_dir)
    wanted: set[tuple[str, int]] | None = None
    if request.topics is not None:
        wanted = {(t.topic, index) for t in request.topics for index in t.partitions}
    by_topic: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for (topic, index), partition in sorted(services.replicas.partitions.items()):
        if wanted is not None and (topic, index) not in wanted:
            continue
        by_topic[topic].append({
            "partition_index": index,
            "partition_size": partition.log.size_bytes,
            "offset_lag": max(partition.high_watermark - partition.log.log_end_offset, 0),
            "is_future_key": False,
        })
    result: dict[str, Any] = {"log_dir": log_dir, "error_code": ErrorCode.none}
    try:
        total, usable = await asyncio.to_thread(_disk_space, log_dir)
    except OSError:
        result["error_code"] = ErrorCode.kafka_storage_error
    else:
        result.update(total_bytes=total, usable_bytes=usable,
                      topics=[{"name": name, "partitions": partitions}
                              for name, partitions in by_topic.items()])
    return build(response_class(DESCRIBE_LOG_DIRS_KEY, frame.api_version),
                 {"error_code": ErrorCode.none, "results": [result]})


# ------------------------------------------------------------------------------ AlterConfigs


async def alter_configs(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    seen = collections.Counter((r.resource_type, r.resource_name) for r in request.resources)
    results = []
    for resource in request.resources:
        result: dict[str, Any] = {"resource_type": resource.resource_type,
                                  "resource_name": resource.resource_name,
                                  "error_code": ErrorCode.none, "error_message": None}
        try:
            if seen[(resource.resource_type, resource.resource_name)] > 1:
                raise InvalidRequestError("Each resource must appear at most once.")
            overrides = _overrides(resource)
            if resource.resource_type == RESOURCE_BROKER:
                entity, replaced = broker_configs.broker_replacement(
                    services, resource.resource_name, overrides)
                if not authz.allowed(services, frame, AclOperation.ALTER_CONFIGS,
                                     ResourceType.CLUSTER, CLUSTER_NAME):
                    result["error_code"] = ErrorCode.cluster_authorization_failed
                elif not request.validate_only:
                    await broker_configs.replace_broker_configs(services, entity, replaced)
                results.append(result)
                continue
            if not authz.allowed(services, frame, AclOperation.ALTER_CONFIGS,
                                 ResourceType.TOPIC, resource.resource_name):
                result["error_code"] = authz.TOPIC_AUTHORIZATION_FAILED
                results.append(result)
                continue
            await _replace_topic_config(services, resource.resource_name, overrides,
                                        validate_only=request.validate_only)
        except LoglakeError as exc:
            result.update(error_code=exc.code, error_message=exc.message)
        results.append(result)
    return build(response_class(ALTER_CONFIGS_KEY, frame.api_version), {"responses": results})


def _overrides(resource: Any) -> dict[str, str]:
    """The request's entries for one resource after Kafka's request checks (see docstring)."""
    names = [config.name for config in resource.configs]
    if len(set(names)) != len(names):
        raise InvalidRequestError("Error due to duplicate config keys")
    nulls = [config.name for config in resource.configs if config.value is None]
    if nulls:
        raise InvalidRequestError("Null value not supported for : " + ", ".join(nulls))
    if resource.resource_type not in _KNOWN_RESOURCE_TYPES or (
            resource.resource_type == RESOURCE_BROKER_LOGGER):
        raise InvalidRequestError(f"Unknown resource type {resource.resource_type}")
    if resource.resource_type not in (RESOURCE_TOPIC, RESOURCE_BROKER):
        raise InvalidRequestError(
            "Only topic and dynamic broker configs can be altered (the other broker configs "
            "are static: set them in the broker's properties file and restart it).")
    return {config.name: config.value for config in resource.configs}


async def _replace_topic_config(services: BrokerServices, name: str, overrides: dict[str, str], *,
                                validate_only: bool) -> None:
    if not name:
        raise InvalidRequestError("Default topic resources are not allowed.")
    if name not in services.metadata.topics:
        raise UnknownTopicError(f"The topic '{name}' does not exist.")
    config = services.config.topic_config(overrides)  # validates the whole set: INVALID_CONFIG
    if validate_only:
        return
    await services.zk.call(services.zk.catalog.set_topic_config, name, config.overrides)
    services.topic_admin.apply_topic_config(name, dict(config.overrides))
