"""Dynamic broker configs (the replication throttle rates) through IncrementalAlterConfigs and
DescribeConfigs on BROKER resources, as Kafka's ZooKeeper-mode brokers handle them.

* The resource name is this broker's id (that broker's own znode, ``/config/brokers/<id>``) or
  the empty string (the cluster default, ``/config/brokers/<default>``); another broker's id
  answers INVALID_REQUEST "Unexpected broker id", as in Kafka, whose clients send a broker
  resource to that broker.
* Only the keys in ``config.DYNAMIC_BROKER_CONFIG_KEYS`` may change; any other name answers
  INVALID_CONFIG. SET validates the value (a long >= 0), DELETE reverts to the next source
  (cluster default, then ``server.properties``); APPEND/SUBTRACT are refused (not lists).
  DELETE of any other name is accepted and changes nothing, as in Kafka (whose
  ``kafka-reassign-partitions --verify`` deletes ``replica.alter.log.dirs.io.max.bytes.per.
  second`` with the two rates when it clears a finished reassignment's throttle).
  ``validate_only`` writes nothing. Every broker applies a change through its watch on the
  znode (DynamicBrokerConfig.apply_broker_configs); the receiving broker applies its own at once.
* The legacy AlterConfigs on a BROKER resource (what Kafka 3.9's ``kafka-configs
  --entity-type brokers --alter`` sends: the entity's current dynamic entries plus the added
  ones) *replaces* the entity's set (:func:`replace_broker_configs`), each key checked as SET is.
* DescribeConfigs lists each dynamic key with its effective value and Kafka's source:
  DYNAMIC_BROKER_CONFIG (2), DYNAMIC_DEFAULT_BROKER_CONFIG (3), STATIC_BROKER_CONFIG (4) or
  DEFAULT_CONFIG (5); they are not read-only. Asked for synonyms, each entry lists, as Kafka,
  every source that holds a value for the key, the effective one first. The cluster default
  resource (empty name) lists only the keys the default sets (Kafka's ConfigHelper): what
  ``kafka-configs --entity-default`` reads back before its replacing alter.

Runs on the event loop; ZooKeeper calls go through the session's
executor (``services.zk.call``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loglake.broker.replication_quota import DEFAULT_ENTITY
from loglake.config import DYNAMIC_BROKER_CONFIG_KEYS
from loglake.errors import InvalidConfigError, InvalidRequestError, LoglakeError

if TYPE_CHECKING:
    from loglake.broker.services import BrokerServices

OP_SET, OP_DELETE = 0, 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
CONFIG_TYPE_LONG = 5


def entity_of(services: BrokerServices, resource_name: str) -> str:
    """The ``/config/brokers`` child a BROKER resource names (see the module docstring)."""
    if not resource_name:
        return DEFAULT_ENTITY
    own = str(services.config.broker_id)
    if resource_name.strip() != own:
        raise InvalidRequestError(
            f"Unexpected broker id, expected {own} or empty string, but received "
            f"{resource_name}")
    return own


async def alter_broker_configs(services: BrokerServices, resource_name: str, operations: Any, *,
                               validate_only: bool) -> None:
    """IncrementalAlterConfigs on one BROKER resource. Raises InvalidRequestError,
    InvalidConfigError, or ZooKeeper's unavailability."""
    entity = entity_of(services, resource_name)
    current = dict(await services.zk.call(services.zk.catalog.broker_config, entity))
    for op in operations:
        if op.config_operation == OP_DELETE:  # any name, as Kafka: absent keys change nothing
            current.pop(op.name, None)
            continue
        key = _dynamic_key(op.name)
        if op.config_operation == OP_SET:
            if op.value is None:
                raise InvalidConfigError(f"Null value not supported for: {op.name}")
            key.parse(op.value)
            current[op.name] = str(op.value).strip()
        else:
            raise InvalidConfigError(
                f"Config value append/subtract is not allowed for config key {op.name}.")
    if validate_only:
        return
    await services.zk.call(services.zk.catalog.set_broker_config, entity, current)
    services.broker_configs.apply_broker_configs(entity, current)


def _dynamic_key(name: str) -> Any:
    """The ConfigKey of a dynamic broker config; InvalidConfigError for any other name."""
    key = DYNAMIC_BROKER_CONFIG_KEYS.get(name)
    if key is None:
        raise InvalidConfigError(
            f"Cannot update broker config {name} dynamically: the dynamic broker "
            f"configs are {', '.join(sorted(DYNAMIC_BROKER_CONFIG_KEYS))}")
    return key


def broker_replacement(services: BrokerServices, resource_name: str,
                       entries: dict[str, str]) -> tuple[str, dict[str, str]]:
    """Kafka's request check of a legacy AlterConfigs BROKER resource (``ConfigAdminManager
    .preprocess``, before authorization): the entity and its new dynamic set. Raises
    InvalidRequestError for another broker's id, a key that is not dynamic or a bad value (Kafka
    answers INVALID_REQUEST there, KAFKA-13609)."""
    entity = entity_of(services, resource_name)
    replaced = {}
    for name, value in entries.items():
        try:
            _dynamic_key(name).parse(value)
        except LoglakeError as exc:
            raise InvalidRequestError(exc.message) from exc
        replaced[name] = str(value).strip()
    return entity, replaced


async def replace_broker_configs(services: BrokerServices, entity: str,
                                 replaced: dict[str, str]) -> None:
    """Legacy AlterConfigs on one BROKER entity (see :func:`broker_replacement`): its dynamic
    set becomes ``replaced`` (a key not named returns to the next source)."""
    await services.zk.call(services.zk.catalog.set_broker_config, entity, replaced)
    services.broker_configs.apply_broker_configs(entity, replaced)


def describe_dynamic(services: BrokerServices, keys: Any, *, synonyms: bool = False,
                     cluster_default: bool = False) -> list[dict[str, Any]]:
    """DescribeConfigs entries of the dynamic broker configs (all, or those in ``keys``).
    ``cluster_default`` (the resource named by the empty string): as Kafka's ConfigHelper, only
    the keys the cluster default sets, seen without this broker's own entries."""
    own = {} if cluster_default else services.broker_configs.dynamic_configs.get(
        str(services.config.broker_id), {})
    cluster = services.broker_configs.dynamic_configs.get(DEFAULT_ENTITY, {})
    static = {"leader.replication.throttled.rate":
              services.config.leader_replication_throttled_rate,
              "follower.replication.throttled.rate":
              services.config.follower_replication_throttled_rate}
    entries = []
    for name, key in DYNAMIC_BROKER_CONFIG_KEYS.items():
        if (keys and name not in keys) or (cluster_default and name not in cluster):
            continue
        chain = [(own[name], SOURCE_DYNAMIC_BROKER)] if name in own else []
        if name in cluster:
            chain.append((cluster[name], SOURCE_DYNAMIC_DEFAULT_BROKER))
        if static[name] != key.default:
            chain.append((str(static[name]), SOURCE_STATIC_BROKER))
        chain.append((str(key.default), SOURCE_DEFAULT))
        value, source = chain[0]
        entries.append({"name": name, "value": value, "read_only": False,
                        "config_source": source, "is_sensitive": False,
                        "is_default": source == SOURCE_DEFAULT,
                        "config_type": CONFIG_TYPE_LONG,
                        "synonyms": [{"name": name, "value": v, "source": s}
                                     for v, s in chain] if synonyms else [],
                        "documentation": None})
    return entries
