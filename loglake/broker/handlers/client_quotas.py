"""DescribeClientQuotas (v0-1) and AlterClientQuotas (v0-1), Kafka 4.0's version ranges:
decode, one call, encode. The rules are broker/quotas/alteration.py's.

Authorization (Kafka 4.0's ``KafkaApis``, through handlers/authz.py): DescribeClientQuotas
needs DESCRIBE_CONFIGS on the cluster, AlterClientQuotas ALTER_CONFIGS on the cluster; a
refusal answers CLUSTER_AUTHORIZATION_FAILED (describe: top-level; alter: on every entry).

Describe reads the entity configs from ZooKeeper (on the ZooKeeper executor), as Kafka's
ZooKeeper-mode brokers do, so an alter through one broker is seen at once by a describe on any
other (the Java AdminClient sends the two to whichever brokers are least loaded); this broker's
quota cache (broker/quotas/config_sync.py) follows within milliseconds and only enforces.
ZooKeeper unavailable: the describe answers the catalog error's code.
Alter writes each valid entry's keys to its entity znode (catalog/entity_configs.py: only the
quota keys named change; SCRAM credentials beside them stay), which notifies every broker, and
applies the result to this broker's cache at once. ``validate_only`` validates and writes
nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.broker.handlers import authz
from loglake.broker.quotas.alteration import (
    Component,
    Op,
    QuotaRequestError,
    alteration,
    describe,
    describe_entity,
)
from loglake.broker.quotas.entities import QuotaEntity, entity_of_path, quota_values
from loglake.broker.quotas.ip_quotas import IP_QUOTA_KEYS, IpEntity, ip_of_path
from loglake.broker.security.acl_model import AclOperation
from loglake.errors import LoglakeError

if TYPE_CHECKING:
    from loglake.broker.quotas.manager import ClientQuotas
    from loglake.broker.security.authorizer import Authorizer
    from loglake.catalog.zookeeper import ClusterCatalog

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
T = TypeVar("T")


class ZkCalls(Protocol):
    """The ZooKeeper session's part these handlers use (broker/zk_session.py)."""

    @property
    def catalog(self) -> ClusterCatalog: ...

    async def call(self, func: Callable[..., T], *args: Any) -> T: ...


class QuotaServices(Protocol):
    """What these handlers use of the broker."""

    @property
    def quotas(self) -> ClientQuotas: ...

    @property
    def zk(self) -> ZkCalls: ...

    @property
    def authorizer(self) -> Authorizer: ...


async def describe_client_quotas(services: QuotaServices, frame: RequestFrame) -> Any:
    cls = response_class(DESCRIBE_CLIENT_QUOTAS, frame.api_version)
    request = frame.body
    if not authz.cluster_allowed(services, frame, AclOperation.DESCRIBE_CONFIGS):
        return build(cls, {"error_code": authz.CLUSTER_AUTHORIZATION_FAILED,
                           "error_message": None, "entries": None})
    components = [Component(c.entity_type, int(c.match_type), c.match)
                  for c in request.components]
    try:
        configs = await services.zk.call(services.zk.catalog.config_changes().load_all)
    except LoglakeError as exc:
        return build(cls, {"error_code": exc.code, "error_message": str(exc)[:300],
                           "entries": None})
    stored: dict[QuotaEntity | IpEntity, dict[str, float]] = {
        entity: values for path, config in configs.items()
        if (entity := entity_of_path(path)) is not None and (values := quota_values(config))}
    stored.update({IpEntity(ip): values for path, config in configs.items()
                   if (ip := ip_of_path(path)) is not None
                   and (values := quota_values(config, IP_QUOTA_KEYS))})
    try:
        matched = describe(components, bool(request.strict), stored)
    except QuotaRequestError as exc:
        return build(cls, {"error_code": exc.code, "error_message": exc.message,
                           "entries": None})
    entries = [{"entity": [{"entity_type": kind, "entity_name": name} for kind, name in items],
                "values": [{"key": key, "value": value} for key, value in sorted(values.items())]}
               for items, values in matched]
    return build(cls, {"error_code": ErrorCode.none, "error_message": None, "entries": entries})


async def alter_client_quotas(services: QuotaServices, frame: RequestFrame) -> Any:
    cls = response_class(ALTER_CLIENT_QUOTAS, frame.api_version)
    request = frame.body
    refused = not authz.cluster_allowed(services, frame, AclOperation.ALTER_CONFIGS)
    results: dict[tuple[tuple[str, str | None], ...], tuple[ErrorCode, str | None]] = {}
    writes: list[tuple[tuple[tuple[str, str | None], ...], QuotaEntity | IpEntity,
                       dict[str, str | None]]] = []
    for entry in request.entries:
        items = tuple((e.entity_type, e.entity_name) for e in entry.entity)
        if refused:
            results[items] = (authz.CLUSTER_AUTHORIZATION_FAILED, None)
            continue
        if items in results:
            results[items] = (ErrorCode.invalid_request,
                              f"Ignoring duplicate entity {describe_entity(items)}")
            continue
        try:
            entity, updates = alteration(items, [Op(op.key, float(op.value), bool(op.remove))
                                                 for op in entry.ops])
        except QuotaRequestError as exc:
            results[items] = (exc.code, exc.message)
            continue
        results[items] = (ErrorCode.none, None)
        writes.append((items, entity, updates))
    if not request.validate_only:
        store = services.zk.catalog.entity_configs()
        for items, entity, updates in writes:
            try:
                config = await services.zk.call(store.alter, entity.path, updates)
            except LoglakeError as exc:  # ZooKeeper unavailable: this entry failed
                results[items] = (exc.code, str(exc)[:300])
                continue
            if isinstance(entity, IpEntity):
                services.quotas.ips.apply(entity.name, config)
            else:
                services.quotas.apply(entity, config)
    entries = [{"error_code": code, "error_message": message,
                "entity": [{"entity_type": kind, "entity_name": name} for kind, name in items]}
               for items, (code, message) in results.items()]
    return build(cls, {"entries": entries})
