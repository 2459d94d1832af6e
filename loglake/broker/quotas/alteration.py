"""DescribeClientQuotas filters and AlterClientQuotas validation, pure: Kafka 4.0's rules
(``ClientQuotasImage.describe``, ``ClientQuotaControlManager.alterClientQuotas``) with
Kafka's error codes and messages.

Describe: each filter component names an entity type (``user``, ``client-id``, ``ip``) at most
once, with match type 0 (exact name), 1 (the default entity) or 2 (any entity of that type,
default included); ``strict`` keeps only entities with exactly the filtered types. A bad
filter fails the whole request: INVALID_REQUEST, or UNSUPPORTED_VERSION for an unknown entity
type. IP entities (``ip``: an address or the default) match like the others.

Alter: per entry, its entity (user and/or client id; a null name is the default; not empty),
its operations (a key at most once; set values > 0, integral for the byte rates, a LONG at
most; removals of any key). An entry that fails is answered INVALID_REQUEST with Kafka's
message and changes nothing; the others are applied. A repeated entity is answered
"Ignoring duplicate entity" (as Kafka does, the first one is applied). An IP entity (an
address literal or the default; a host name is refused: brokers do not resolve names) takes
only ``connection_creation_rate`` (an INT); user/client-id entities take the byte rates,
``request_percentage`` and ``controller_mutation_rate`` (KIP-599, a DOUBLE).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from loglake.broker.quotas.entities import (
    CLIENT_ID,
    DEFAULT,
    INTEGRAL_KEYS,
    IP,
    QUOTA_KEYS,
    USER,
    QuotaEntity,
)
from loglake.broker.quotas.ip_quotas import (
    INT_MAX,
    IP_QUOTA_KEYS,
    InvalidIpError,
    IpEntity,
    canonical_ip,
)

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2
LONG_MAX = 2 ** 63 - 1
ENTITY_TYPES = (USER, CLIENT_ID, IP)


class QuotaRequestError(Exception):
    """A request (describe) or entry (alter) refused with a Kafka error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _invalid(message: str) -> QuotaRequestError:
    return QuotaRequestError(ErrorCode.invalid_request, message)


EntityItems = tuple[tuple[str, str | None], ...]
"""An entity as the wire names it: (entity type, name or None for the default), in order."""


AnyEntity = QuotaEntity | IpEntity


def entity_items(entity: AnyEntity) -> EntityItems:
    """The wire form of ``entity`` (user first; the default as None)."""
    if isinstance(entity, IpEntity):
        return ((IP, None if entity.name == DEFAULT else entity.name),)
    items: list[tuple[str, str | None]] = []
    if entity.user is not None:
        items.append((USER, None if entity.user == DEFAULT else entity.user))
    if entity.client_id is not None:
        items.append((CLIENT_ID, None if entity.client_id == DEFAULT else entity.client_id))
    return tuple(items)


def describe_entity(items: Iterable[tuple[str, str | None]]) -> str:
    """Kafka's ``ClientQuotaEntity.toString`` (for messages)."""
    inner = ", ".join(f"{kind}={name}" for kind, name in items)
    return f"ClientQuotaEntity(entries={{{inner}}})"


# ---- describe
@dataclass(frozen=True)
class Component:
    entity_type: str
    match_type: int
    match: str | None


def describe(components: Sequence[Component], strict: bool,
             quotas: Mapping[AnyEntity, Mapping[str, float]]
             ) -> list[tuple[EntityItems, dict[str, float]]]:
    """The entities matching the filter with their quota values (raises QuotaRequestError)."""
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for component in components:
        kind = component.entity_type
        if not kind:
            raise _invalid("Invalid empty entity type.")
        if kind in exact or kind in typed:
            raise _invalid(f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in ENTITY_TYPES:
            raise QuotaRequestError(ErrorCode.unsupported_version,
                                    f"Unsupported entity type {kind}")
        if component.match_type == MATCH_EXACT:
            if component.match is None:
                raise _invalid("Request specified MATCH_TYPE_EXACT, but set match string to "
                               "null.")
            exact[kind] = component.match
        elif component.match_type == MATCH_DEFAULT:
            if component.match is not None:
                raise _invalid("Request specified MATCH_TYPE_DEFAULT, but also specified a "
                               "match string.")
            exact[kind] = None
        elif component.match_type == MATCH_SPECIFIED:
            if component.match is not None:
                raise _invalid("Request specified MATCH_TYPE_SPECIFIED, but also specified a "
                               "match string.")
            typed.add(kind)
        else:
            raise _invalid(f"Unknown match type {component.match_type}")
    if (IP in exact or IP in typed) and (
            USER in exact or USER in typed or CLIENT_ID in exact or CLIENT_ID in typed):
        raise _invalid("Invalid entity filter component combination. IP filter component "
                       "should not be used with user or clientId filter component.")
    out: list[tuple[EntityItems, dict[str, float]]] = []
    for entity in sorted(quotas, key=_sort_key):
        items = entity_items(entity)
        if _matches(dict(items), exact, typed, strict):
            out.append((items, dict(quotas[entity])))
    return out


def _sort_key(entity: AnyEntity) -> tuple[str, str, str]:
    if isinstance(entity, IpEntity):
        return ("~ip", entity.name, "")
    return ("", entity.user or "", entity.client_id or "")


def _matches(entity: Mapping[str, str | None], exact: Mapping[str, str | None],
             typed: set[str], strict: bool) -> bool:
    if strict and len(entity) != len(exact) + len(typed):
        return False
    for kind, name in exact.items():
        if kind not in entity or entity[kind] != name:
            return False
    return all(kind in entity for kind in typed)


# ---- alter
@dataclass(frozen=True)
class Op:
    key: str
    value: float
    remove: bool


def alteration(items: Sequence[tuple[str, str | None]], ops: Sequence[Op]
               ) -> tuple[AnyEntity, dict[str, str | None]]:
    """The entity of one AlterClientQuotas entry and the config updates its ops make (a value
    as the string stored in ZooKeeper, None to remove); raises QuotaRequestError."""
    seen: set[str] = set()
    for op in ops:
        if op.key in seen:
            # Kafka 4.0 reports a repeated key with the duplicate-entity message
            raise _invalid(f"Ignoring duplicate entity {describe_entity(items)}")
        seen.add(op.key)
    entity = _entity(items)
    updates: dict[str, str | None] = {}
    for op in ops:
        if op.remove:
            updates[op.key] = None
            continue
        updates[op.key] = _validated_value(op.key, op.value, ip=isinstance(entity, IpEntity))
    return entity, updates


def _entity(items: Sequence[tuple[str, str | None]]) -> AnyEntity:
    if not items:
        raise _invalid("Invalid empty client quota entity")
    names: dict[str, str | None] = {}
    for kind, name in items:
        if kind in names:
            raise _invalid(f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind not in ENTITY_TYPES:
            raise _invalid(f"Unhandled client quota entity type: {kind}")
        if name is not None and not name:
            raise _invalid(f"Empty {kind} not supported")
        names[kind] = name
    if IP in names:
        if USER in names or CLIENT_ID in names:
            raise _invalid("Invalid quota entity combination, IP entity shouldnot be combined "
                           "with User or ClientId")
        name = names[IP]
        if name is None:
            return IpEntity(DEFAULT)
        try:
            canonical_ip(name)
        except InvalidIpError as exc:
            raise _invalid(str(exc)) from None
        return IpEntity(name)

    def part(kind: str) -> str | None:
        if kind not in names:
            return None
        name = names[kind]
        return DEFAULT if name is None else name

    return QuotaEntity(user=part(USER), client_id=part(CLIENT_ID))


def _validated_value(key: str, value: float, *, ip: bool = False) -> str:
    if key not in (IP_QUOTA_KEYS if ip else QUOTA_KEYS):
        raise _invalid(f"Invalid configuration key {key}")
    if not value > 0.0:
        raise _invalid(f"Quota {key} must be greater than 0")
    if ip:
        if value > INT_MAX:
            raise _invalid(f"Proposed value for {key} is too large for an INT.")
        if abs(value % 1.0) > 1e-6:
            raise _invalid(f"{key} cannot be a fractional value.")
        return str(int(value))
    if key in INTEGRAL_KEYS:
        if value > LONG_MAX:
            raise _invalid(f"Proposed value for {key} is too large for a LONG.")
        if abs(value % 1.0) > 1e-6:
            raise _invalid(f"{key} cannot be a fractional value.")
        return str(int(value))
    return repr(float(value))
