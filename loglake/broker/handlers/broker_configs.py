"""Dynamic broker configs (the replication throttle rates) through IncrementalAlterConfigs and
DescribeConfigs on BROKER resources, as Kafka's ZooKeeper-mode brokers handle them.

* The resource name is this broker's id (that broker's own znode, ``/config/brokers/<id>``) or
  the empty string (the cluster default, ``/config/brokers/<default>``); another broker's id
  answers INVALID_REQUEST "Unexpected broker id", as in Kafka, whose clients send a broker
  resource to that broker.
* Only the keys in ``config.DYNAMIC_BROKER_CONFIG_KEYS`` may change; any other name answers
  INVALID_CONFIG. SET validates the value (a long >= 0), DELETE reverts to the next source
  (cluster default, then ``server.properties``); APPEND/SUBTRACT are refused (not lists).
  ``validate_only`` writes nothing. Every broker applies a change through its watch on the
  znode (DynamicBrokerConfig.apply_broker_configs); the receiving broker applies its own at once.
* DescribeConfigs lists each dynamic key with its effective value and Kafka's source:
  DYNAMIC_BROKER_CONFIG (2), DYNAMIC_DEFAULT_BROKER_CONFIG (3), STATIC_BROKER_CONFIG (4) or
  DEFAULT_CONFIG (5); they are not read-only.

Runs on the event loop; ZooKeeper calls go through the session's
executor (``services.zk.call``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loglake.broker.replication_quota import DEFAULT_ENTITY
from loglake.config import DYNAMIC_BROKER_CONFIG_KEYS
from loglake.errors import InvalidConfigError, InvalidRequestError

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
        key = DYNAMIC_BROKER_CONFIG_KEYS.get(op.name)
        if key is None:
            raise InvalidConfigError(
                f"Cannot update broker config {op.name} dynamically: the dynamic broker "
                f"configs are {', '.join(sorted(DYNAMIC_BROKER_CONFIG_KEYS))}")
        if op.config_operation == OP_SET:
            if op.value is None:
                raise InvalidConfigError(f"Null value not supported for: {op.name}")
            key.parse(op.value)
            current[op.name] = str(op.value).strip()
        elif op.config_operation == OP_DELETE:
            current.pop(op.name, None)
        else:
            raise InvalidConfigError(
                f"Config value append/subtract is not allowed for config key {op.name}.")
    if validate_only:
        return
    await services.zk.call(services.zk.catalog.set_broker_config, entity, current)
    services.broker_configs.apply_broker_configs(entity, current)


def describe_dynamic(services: BrokerServices, keys: Any) -> list[dict[str, Any]]:
    """DescribeConfigs entries of the dynamic broker configs (all, or those in ``keys``)."""
    own = services.broker_configs.dynamic_configs.get(str(services.config.broker_id), {})
    cluster = services.broker_configs.dynamic_configs.get(DEFAULT_ENTITY, {})
    static = {"leader.replication.throttled.rate":
              services.config.leader_replication_throttled_rate,
              "follower.replication.throttled.rate":
              services.config.follower_replication_throttled_rate}
    entries = []
    for name, key in DYNAMIC_BROKER_CONFIG_KEYS.items():
        if keys and name not in keys:
            continue
        if name in own:
            value, source = own[name], SOURCE_DYNAMIC_BROKER
        elif name in cluster:
            value, source = cluster[name], SOURCE_DYNAMIC_DEFAULT_BROKER
        elif static[name] != key.default:
            value, source = str(static[name]), SOURCE_STATIC_BROKER
        else:
            value, source = str(key.default), SOURCE_DEFAULT
        entries.append({"name": name, "value": value, "read_only": False,
                        "config_source": source, "is_sensitive": False,
                        "is_default": source == SOURCE_DEFAULT,
                        "config_type": CONFIG_TYPE_LONG, "synonyms": [],
                        "documentation": None})
    return entries
