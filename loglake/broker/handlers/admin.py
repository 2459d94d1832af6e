"""CreateTopics, DeleteTopics, DescribeConfigs, IncrementalAlterConfigs.

Topic state lives in ZooKeeper (see catalog.zookeeper); handlers write it there and then
reconcile local partitions, so a broker restart reloads exactly what ZooKeeper holds. Config
changes are validated as a whole (defaults + overrides) before anything is written; an invalid
value answers INVALID_CONFIG with Kafka's message.

Authorization (Kafka's ``KafkaApis``/``ConfigHelper`` rules, through handlers/authz.py):

* CreateTopics: CREATE on the cluster, else CREATE on the topic (TOPIC_AUTHORIZATION_FAILED
  "Authorization failed."), decided after the request checks (a name twice, ``__cluster_metadata``:
  INVALID_REQUEST) and before any other (an existing topic is not revealed). The created topic's
  configs, counts and id are returned only with DESCRIBE_CONFIGS on the topic; without it
  ``topic_config_error_code`` (v5+) is TOPIC_AUTHORIZATION_FAILED.
* DeleteTopics: DELETE on the topic; a topic named by id also needs DESCRIBE, else its name is
  not answered. Unknown ids answer UNKNOWN_TOPIC_ID, unknown names (authorized ones)
  UNKNOWN_TOPIC_OR_PARTITION.
* DescribeConfigs: DESCRIBE_CONFIGS, IncrementalAlterConfigs: ALTER_CONFIGS, on the topic for
  TOPIC resources, on the group for GROUP, on the cluster for BROKER, BROKER_LOGGER and
  CLIENT_METRICS; refusals answer TOPIC/GROUP/CLUSTER_AUTHORIZATION_FAILED per resource.
  IncrementalAlterConfigs runs Kafka's request checks (``ConfigAdminManager.preprocess``:
  resource or key twice, null values, another broker's id, invalid broker config values) first.
  BROKER_LOGGER resources (``kafka-configs --entity-type broker-loggers``) describe and set this
  broker process's logger levels: ``broker_loggers``.
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.broker.handlers import authz, broker_configs, broker_loggers
from loglake.broker.quotas.controller_mutation import UNBOUNDED, MutationQuota
from loglake.broker.quotas.enforcement import controller_mutation_quota, with_mutation_throttle
from loglake.broker.security.acl_model import CLUSTER_NAME, AclOperation, ResourceType
from loglake.broker.topics import assign_replicas, validate_topic_name
from loglake.config import TOPIC_CONFIG_KEYS, TopicConfig
from loglake.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    LoglakeError,
    TopicExistsError,
    UnknownTopicError,
)

if TYPE_CHECKING:
    from loglake.broker.services import BrokerServices

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
RESOURCE_GROUP = 32
_AUTHORIZATION_MESSAGES = {
    authz.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    authz.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    authz.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
}
"""Kafka's default messages of the codes (``Errors.message``), which DescribeConfigs answers."""
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
_CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7}


MAX_PARTITIONS_PER_TOPIC = 2000
"""Creating a topic writes its assignment and every partition's state znode in one ZooKeeper
transaction (atomic topic creation); at about 250 bytes a partition, 2,000 keep the request well
under ZooKeeper's default 1 MiB ``jute.maxbuffer`` (20,000 made the broker lose its session)."""


async def create_topic(
    services: BrokerServices,
    name: str,
    num_partitions: int,
    replication_factor: int,
    configs: Mapping[str, str],
    manual: Mapping[int, tuple[int, ...]],
    *,
    validate_only: bool = False,
    mutation_quota: MutationQuota = UNBOUNDED,
) -> tuple[dict[int, tuple[int, ...]], TopicConfig, uuid.UUID]:
    """Validate and (unless ``validate_only``) create a topic; raises LoglakeError subclasses."""
    validate_topic_name(name)
    if name in services.metadata.topics:
        raise TopicExistsError(f"Topic '{name}' already exists.")
    config = services.config.topic_config(configs)
    registered = await services.zk.call(services.zk.catalog.brokers)
    live = sorted(registered)
    if manual:
        if num_partitions != -1 or replication_factor != -1:
            raise InvalidRequestError(
                "Both numPartitions or replicationFactor and replicasAssignments were set."
            )
        if len(manual) > MAX_PARTITIONS_PER_TOPIC:
            raise InvalidPartitionsError(
                f"A manual assignment of {len(manual)} partitions is above "
                f"{MAX_PARTITIONS_PER_TOPIC}, the most one topic can have here.")
        assignment = dict(sorted(manual.items()))
        if sorted(assignment) != list(range(len(assignment))):
            raise InvalidPartitionsError("Partitions in a manual assignment must be 0..n-1.")
        for replicas in assignment.values():
            if not replicas or len(set(replicas)) != len(replicas):
                raise InvalidReplicationFactorError("Replica lists must be non-empty and unique.")
            unknown = set(replicas) - set(live)
            if unknown:
                raise InvalidReplicationFactorError(f"Unknown broker ids {sorted(unknown)}.")
    else:
        partitions = services.config.num_partitions if num_partitions == -1 else num_partitions
        factor = (
            services.config.default_replication_factor
            if replication_factor == -1 else replication_factor
        )
        if partitions <= 0:
            raise InvalidPartitionsError(f"Number of partitions must be larger than 0, "
                                         f"got {partitions}.")
        if partitions > MAX_PARTITIONS_PER_TOPIC:
            raise InvalidPartitionsError(
                f"Number of partitions {partitions} is above {MAX_PARTITIONS_PER_TOPIC}, the most "
                "one topic can have here (its partition states are created in one ZooKeeper "
                "transaction, which must stay under ZooKeeper's 1 MiB request limit).")
        assignment = assign_replicas({b: info.rack for b, info in registered.items()},
                                     partitions, factor)
    topic_id = uuid.uuid4()
    if not validate_only:
        mutation_quota.record(len(assignment))  # KIP-599: may raise THROTTLING_QUOTA_EXCEEDED
        await services.zk.call(
            lambda: services.zk.catalog.create_topic(name, assignment, config.overrides,
                                                     topic_id=str(topic_id))
        )
        await services.topic_admin.reconcile_after_change()
    return assignment, config, topic_id


CLUSTER_METADATA_TOPIC = "__cluster_metadata"
"""KRaft's metadata log: Kafka refuses to create a topic of that name (INVALID_REQUEST)."""


async def create_topics(services: BrokerServices, frame: RequestFrame) -> Any:
    """CreateTopics with Kafka's authorization (``KafkaApis.handleCreateTopicsRequest``): CREATE
    on the cluster, else CREATE on each topic (TOPIC_AUTHORIZATION_FAILED); the created topic's
    configs, partition count, replication factor and id are returned only with DESCRIBE_CONFIGS
    on the topic (else ``topic_config_error_code`` TOPIC_AUTHORIZATION_FAILED)."""
    request = frame.body
    names = [topic.name for topic in request.topics]
    counts = collections.Counter(names)
    candidates = {name for name in names if name != CLUSTER_METADATA_TOPIC}
    if authz.cluster_allowed(services, frame, AclOperation.CREATE, log_if_denied=False):
        creatable = candidates
    else:
        creatable = authz.filter_authorized(services, frame, AclOperation.CREATE,
                                            ResourceType.TOPIC, candidates)
    describable = authz.filter_authorized(services, frame, AclOperation.DESCRIBE_CONFIGS,
                                          ResourceType.TOPIC, candidates, log_if_denied=False)
    quota = controller_mutation_quota(services.quotas, frame)
    results = []
    for topic in request.topics:
        result: dict[str, Any] = {"name": topic.name, "num_partitions": -1,
                                  "replication_factor": -1, "configs": [],
                                  "topic_config_error_code": ErrorCode.none}
        if topic.name != CLUSTER_METADATA_TOPIC and topic.name not in describable:
            result["topic_config_error_code"] = authz.TOPIC_AUTHORIZATION_FAILED
        results.append(result)
        if topic.name == CLUSTER_METADATA_TOPIC:
            result.update(error_code=ErrorCode.invalid_request, error_message=(
                f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited."))
            continue
        if counts[topic.name] > 1:
            result.update(error_code=ErrorCode.invalid_request,
                          error_message="Found multiple entries for this topic.")
            continue
        if topic.name not in creatable:
            result.update(error_code=authz.TOPIC_AUTHORIZATION_FAILED,
                          error_message="Authorization failed.")
            continue
        try:
            configs = {c.name: c.value for c in topic.configs if c.value is not None}
            manual = {a.partition_index: tuple(a.broker_ids) for a in topic.assignments}
            assignment, config, topic_id = await create_topic(
                services, topic.name, topic.num_partitions, topic.replication_factor, configs,
                manual, validate_only=request.validate_only, mutation_quota=quota,
            )
            result["error_code"] = ErrorCode.none
            if topic.name in describable:
                result.update(
                    topic_id=topic_id,
                    num_partitions=len(assignment),
                    replication_factor=len(next(iter(assignment.values()))),
                    configs=[_describe_entry(services, config, key, False)
                             for key in TOPIC_CONFIG_KEYS],
                )
        except LoglakeError as exc:
            result.update(error_code=exc.code, error_message=exc.message,
                          topic_config_error_code=ErrorCode.none)
    return with_mutation_throttle(
        quota, frame, build(response_class(19, frame.api_version), {"topics": results}))


async def delete_topics(services: BrokerServices, frame: RequestFrame) -> Any:
    """DeleteTopics with Kafka's checks in Kafka's order (``handleDeleteTopicsRequest``): an
    entry (v6+) with both a name and an id, or neither, answers INVALID_REQUEST (Kafka 4.0's
    ControllerApis, per entry); a topic id no topic has answers UNKNOWN_TOPIC_ID; a topic
    named by id without DESCRIBE on it answers
    TOPIC_AUTHORIZATION_FAILED with its name left out; without DELETE on the topic
    TOPIC_AUTHORIZATION_FAILED; then UNKNOWN_TOPIC_OR_PARTITION for a topic that does not
    exist."""
    request = frame.body
    zero = uuid.UUID(int=0)
    if hasattr(request, "topics"):
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, zero) for name in request.topic_names]
    by_id = {v: k for k, v in services.metadata.topic_ids.items()}
    resolved = [(by_id.get(topic_id) if topic_id not in (None, zero) else name, topic_id or zero)
                for name, topic_id in wanted]
    named = [name for name, _ in resolved if name is not None]
    describable = authz.filter_authorized(services, frame, AclOperation.DESCRIBE,
                                          ResourceType.TOPIC, named)
    deletable = authz.filter_authorized(services, frame, AclOperation.DELETE,
                                        ResourceType.TOPIC, named)
    quota = controller_mutation_quota(services.quotas, frame)
    results = []
    for (asked_name, asked_id), (name, topic_id) in zip(wanted, resolved, strict=True):
        result: dict[str, Any] = {"name": name, "topic_id": topic_id}
        results.append(result)
        if asked_name is not None and asked_id not in (None, zero):  # v6+ (ControllerApis)
            result.update(name=asked_name, error_code=ErrorCode.invalid_request,
                          error_message="You may not specify both topic name and topic id.")
            continue
        if asked_name is None and asked_id in (None, zero):
            result.update(error_code=ErrorCode.invalid_request,
                          error_message="Neither topic name nor id were specified.")
            continue
        if name is None:
            result.update(error_code=ErrorCode.unknown_topic_id,
                          error_message=f"Topic id {topic_id} does not exist.")
            continue
        if topic_id != zero and name not in describable:
            result.update(name=None, error_code=authz.TOPIC_AUTHORIZATION_FAILED)
            continue
        if name not in deletable:
            result["error_code"] = authz.TOPIC_AUTHORIZATION_FAILED
            continue
        try:
            if name not in services.metadata.topics:
                raise UnknownTopicError(f"Topic '{name}' does not exist.")
            # KIP-599: the partitions deleted (may raise THROTTLING_QUOTA_EXCEEDED)
            quota.record(len(services.metadata.topics[name].assignment))
            await services.zk.call(services.zk.catalog.delete_topic, name)
            await services.tierer.delete_table(name)
            result["error_code"] = ErrorCode.none
        except LoglakeError as exc:
            result.update(error_code=exc.code, error_message=exc.message)
    await services.topic_admin.reconcile_after_change()
    return with_mutation_throttle(
        quota, frame, build(response_class(20, frame.api_version), {"responses": results}))


def _describe_entry(
    services: BrokerServices, config: TopicConfig, name: str, synonyms: bool,
    documentation: bool = False,
) -> dict[str, Any]:
    key = TOPIC_CONFIG_KEYS[name]
    if not config.is_default(name):
        source = SOURCE_DYNAMIC_TOPIC
    elif name in services.config.topic_defaults:
        source = SOURCE_STATIC_BROKER
    else:
        source = SOURCE_DEFAULT
    entry: dict[str, Any] = {
        "name": name, "value": config.value_string(name), "read_only": False,
        "config_source": source, "is_sensitive": False, "is_default": source == SOURCE_DEFAULT,
        "config_type": _CONFIG_TYPES[key.type],
        "documentation": key.doc if documentation else None, "synonyms": [],
    }
    if synonyms:
        entry["synonyms"] = [{"name": name, "value": config.value_string(name),
                              "source": source}]
    return entry


def config_resource_acl(resource_type: int, name: str) -> tuple[ResourceType, str] | None:
    """The ACL resource that guards a config resource (Kafka's ``ConfigHelper`` /
    ``KafkaApis``): BROKER, BROKER_LOGGER and CLIENT_METRICS configs are the cluster's, TOPIC
    and GROUP configs their topic's or group's; None for a type Kafka does not know."""
    if resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS):
        return ResourceType.CLUSTER, CLUSTER_NAME
    if resource_type == RESOURCE_TOPIC:
        return ResourceType.TOPIC, name
    if resource_type == RESOURCE_GROUP:
        return ResourceType.GROUP, name
    return None


def config_resource_allowed(services: BrokerServices, frame: RequestFrame,
                            operation: AclOperation, resource_type: int,
                            name: str) -> ErrorCode | None:
    """None when the session may perform ``operation`` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on
    the config resource, else the *_AUTHORIZATION_FAILED code to answer (a type Kafka does not
    know is left to the handler's own checks: None)."""
    guard = config_resource_acl(resource_type, name)
    if guard is None or authz.allowed(services, frame, operation, *guard):
        return None
    return authz.authorization_error(guard[0])


async def describe_configs(services: BrokerServices, frame: RequestFrame) -> Any:
    """DescribeConfigs: each resource needs DESCRIBE_CONFIGS on what guards it (see
    :func:`config_resource_acl`); a refused one answers its *_AUTHORIZATION_FAILED code with
    Kafka's message and no configs."""
    request = frame.body
    synonyms = getattr(request, "include_synonyms", False)
    documentation = getattr(request, "include_documentation", False)
    results = []
    for resource in request.resources:
        result: dict[str, Any] = {"resource_type": resource.resource_type,
                                  "resource_name": resource.resource_name, "configs": []}
        results.append(result)
        refused = config_resource_allowed(services, frame, AclOperation.DESCRIBE_CONFIGS,
                                          resource.resource_type, resource.resource_name)
        if refused is not None:
            result.update(error_code=refused, error_message=_AUTHORIZATION_MESSAGES[refused])
            continue
        try:
            if resource.resource_type == RESOURCE_TOPIC:
                config = await _current_topic_config(services, resource.resource_name)
                keys = resource.configuration_keys or list(TOPIC_CONFIG_KEYS)
                result["configs"] = [
                    _describe_entry(services, config, key, synonyms, documentation)
                    for key in keys if key in TOPIC_CONFIG_KEYS
                ]
            elif resource.resource_type == RESOURCE_BROKER:
                default = not resource.resource_name  # the cluster default: its keys only
                result["configs"] = ([] if default else _broker_configs(
                    services, resource.configuration_keys, synonyms)) + \
                    broker_configs.describe_dynamic(services, resource.configuration_keys,
                                                    synonyms=synonyms, cluster_default=default)
            elif resource.resource_type == RESOURCE_BROKER_LOGGER:
                broker_loggers.check_broker_id(resource.resource_name, services.config.broker_id)
                result["configs"] = broker_loggers.describe(resource.configuration_keys)
            else:
                raise InvalidRequestError(
                    f"Unsupported resource type {resource.resource_type}."
                )
            result["error_code"] = ErrorCode.none
        except LoglakeError as exc:
            result.update(error_code=exc.code, error_message=exc.message)
    return build(response_class(32, frame.api_version), {"results": results})


async def _current_topic_config(services: BrokerServices, name: str) -> TopicConfig:
    """A topic's config as ZooKeeper holds it now (as Kafka's DescribeConfigs reads it), so a
    describe right after an alter on another broker sees the change; UnknownTopicError if the
    topic does not exist."""
    if name not in services.metadata.topics and await services.zk.call(
            services.zk.catalog.topic, name) is None:
        raise UnknownTopicError(f"Topic '{name}' does not exist.")
    overrides = await services.zk.call(services.zk.catalog.topic_config, name)
    try:
        return services.config.topic_config(overrides)
    except LoglakeError:  # an invalid value in ZooKeeper: what the broker runs with
        cached = services.metadata.topic_configs.get(name)
        return cached if cached is not None else services.config.topic_config({})


def _broker_configs(services: BrokerServices, keys: Any,
                    synonyms: bool = False) -> list[dict[str, Any]]:
    """The static broker entries; asked for synonyms, each names its one source."""
    c = services.config
    values = {
        "broker.id": str(c.broker_id),
        "listeners": ",".join(str(address) for address in c.effective_listeners),
        "log.dirs": str(c.log_dir),
        "zookeeper.connect": c.zookeeper_connect,
        "auto.create.topics.enable": str(c.auto_create_topics_enable).lower(),
        "num.partitions": str(c.num_partitions),
        "default.replication.factor": str(c.default_replication_factor),
        "socket.request.max.bytes": str(c.socket_request_max_bytes),
    }
    return [
        {"name": k, "value": v, "read_only": True, "config_source": SOURCE_STATIC_BROKER,
         "is_sensitive": False, "config_type": 2,
         "synonyms": [{"name": k, "value": v, "source": SOURCE_STATIC_BROKER}] if synonyms else []}
        for k, v in values.items() if not keys or k in keys
    ]


def _preprocess_incremental(services: BrokerServices, resource: Any,
                            duplicates: collections.Counter[tuple[int, str]]) -> None:
    """Kafka's request checks before authorization (``ConfigAdminManager.preprocess``): a
    resource named twice, a key named twice, a null value for anything but DELETE, an unknown
    resource type, or another broker's id answer INVALID_REQUEST."""
    if duplicates[(resource.resource_type, resource.resource_name)] > 1:
        raise InvalidRequestError("Each resource must appear at most once.")
    names = [op.name for op in resource.configs]
    if len(set(names)) != len(names):
        raise InvalidRequestError("Error due to duplicate config keys")
    nulls = [op.name for op in resource.configs
             if op.config_operation != OP_DELETE and op.value is None]
    if nulls:
        raise InvalidRequestError("Null value not supported for : " + ", ".join(nulls))
    if config_resource_acl(resource.resource_type, resource.resource_name) is None:
        raise InvalidRequestError(f"Unknown resource type {resource.resource_type}")
    if resource.resource_type == RESOURCE_BROKER:
        broker_configs.entity_of(services, resource.resource_name)


async def incremental_alter_configs(services: BrokerServices, frame: RequestFrame) -> Any:
    """IncrementalAlterConfigs: Kafka's request checks first (:func:`_preprocess_incremental`;
    a BROKER resource's changes are validated there too, as Kafka does), then ALTER_CONFIGS on
    what guards each resource (:func:`config_resource_acl`; a refused one answers its
    *_AUTHORIZATION_FAILED code), then the change."""
    request = frame.body
    duplicates = collections.Counter((r.resource_type, r.resource_name)
                                     for r in request.resources)
    results = []
    for resource in request.resources:
        result: dict[str, Any] = {"resource_type": resource.resource_type,
                                  "resource_name": resource.resource_name,
                                  "error_code": ErrorCode.none, "error_message": None}
        results.append(result)
        try:
            _preprocess_incremental(services, resource, duplicates)
            if resource.resource_type == RESOURCE_BROKER:  # validated before authorization
                await broker_configs.alter_broker_configs(
                    services, resource.resource_name, resource.configs, validate_only=True)
        except LoglakeError as exc:
            result.update(error_code=exc.code, error_message=exc.message)
            continue
        refused = config_resource_allowed(services, frame, AclOperation.ALTER_CONFIGS,
                                          resource.resource_type, resource.resource_name)
        if refused is not None:
            result["error_code"] = refused
            continue
        try:
            await _alter_incrementally(services, resource, validate_only=request.validate_only)
        except LoglakeError as exc:
            result.update(error_code=exc.code, error_message=exc.message)
    return build(response_class(44, frame.api_version), {"responses": results})


async def _alter_incrementally(services: BrokerServices, resource: Any, *,
                               validate_only: bool) -> None:
    """One authorized resource's IncrementalAlterConfigs change; raises LoglakeError."""
    if resource.resource_type == RESOURCE_BROKER:  # the dynamic ones (throttle rates)
        await broker_configs.alter_broker_configs(
            services, resource.resource_name, resource.configs, validate_only=validate_only)
        return
    if resource.resource_type == RESOURCE_BROKER_LOGGER:  # kafka-configs --entity-type
        broker_loggers.check_broker_id(resource.resource_name, services.config.broker_id)
        broker_loggers.validate(resource.configs)
        if not validate_only:
            broker_loggers.apply(resource.configs)
        return
    if resource.resource_type != RESOURCE_TOPIC:
        raise InvalidRequestError("Only topic and broker configs can be altered.")
    name = resource.resource_name
    if name not in services.metadata.topics:
        raise UnknownTopicError(f"Topic '{name}' does not exist.")
    current = dict(await services.zk.call(services.zk.catalog.topic_config, name))
    updated = _apply_ops(current, resource.configs)
    services.config.topic_config(updated)  # validates the result as a whole
    if not validate_only:
        await services.zk.call(services.zk.catalog.set_topic_config, name, updated)
        services.topic_admin.apply_topic_config(name, updated)


def _apply_ops(current: dict[str, str], operations: Any) -> dict[str, str]:
    updated = dict(current)
    for op in operations:
        key = TOPIC_CONFIG_KEYS.get(op.name)
        if key is None:
            raise InvalidConfigError(f"Unknown topic config name: {op.name}")
        if op.config_operation == OP_SET:
            if op.value is None:
                raise InvalidConfigError(f"Null value not supported for topic configs: {op.name}")
            updated[op.name] = op.value
        elif op.config_operation == OP_DELETE:
            updated.pop(op.name, None)
        elif op.config_operation in (OP_APPEND, OP_SUBTRACT):
            if key.type != "list":
                raise InvalidConfigError(
                    f"Config value append/subtract is not allowed for config key {op.name}."
                )
            base = updated.get(op.name) or ",".join(key.default)
            items = [i for i in base.split(",") if i]
            new = [i for i in (op.value or "").split(",") if i]
            if op.config_operation == OP_APPEND:
                items += [i for i in new if i not in items]
            else:
                items = [i for i in items if i not in new]
            updated[op.name] = ",".join(items)
        else:
            raise InvalidRequestError(f"Unknown config operation {op.config_operation}.")
    return updated
