"""Client quota entities and Kafka's 8-level precedence (``ClientQuotaManager``'s
``DefaultQuotaCallback``), pure.

An entity is a user, a client id, or both; either part may be the default (``<default>``). Its
config lives at ``/config/users/<u>``, ``/config/clients/<c>`` or
``/config/users/<u>/clients/<c>`` (catalog/entity_configs.py) and holds, among other keys, the
quota keys ``producer_byte_rate``, ``consumer_byte_rate`` (bytes per second, integral) and
``request_percentage`` (percent of one request-handling thread, a double) and
``controller_mutation_rate`` (partitions created/deleted per second, a double).

For a connection of user U (the principal's name; ANONYMOUS on PLAINTEXT) with client id C,
the quota of one key is the first entity that has it, in this order::

    1. /config/users/U/clients/C          5. /config/users/<default>/clients/<default>
    2. /config/users/U/clients/<default>  6. /config/users/<default>
    3. /config/users/U                    7. /config/clients/C
    4. /config/users/<default>/clients/C  8. /config/clients/<default>

Which connections share one rate (Kafka's metric tags ``(user, client-id)``): connections
whose winning level is a user+client entity share per (U, C); a user level per U (tags
``(U, "")``); a client level per C (tags ``("", C)``). When only one level kind was ever
configured for a key, Kafka skips the walk and uses that kind's tags for everyone; the walk
gives the same answer for the quota itself, and :meth:`QuotaOverrides.metric_tags` mirrors
Kafka's shortcut so connections share rates exactly as on Kafka. A level kind counts as
configured from the first time an entity of that kind had the key until restart (Kafka's
``quotaTypesEnabled``), so ``enabled`` never turns off by itself.

Names here are desanitized (the principal's and client's own); entity paths are parsed with
catalog/entity_configs.py's ``desanitize``. Not thread-safe: event loop only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from loglake.catalog.entity_configs import (
    CLIENTS,
    DEFAULT_ENTITY,
    USERS,
    desanitize,
    entity_path,
)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE,
              CONTROLLER_MUTATION_RATE)
"""Kafka's user/client-id quota keys (``QuotaConfig.USER_AND_CLIENT_QUOTA_NAMES``);
``controller_mutation_rate`` (partitions per second, KIP-599) is controller_mutation.py's."""
INTEGRAL_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})
"""Keys Kafka declares LONG (a fractional value is refused); the others are DOUBLE."""
DEFAULT = DEFAULT_ENTITY

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
"""Kafka's entity type names (``ClientQuotaEntity.USER``, ``CLIENT_ID``, ``IP``)."""

# Kafka's QuotaTypes bits
CLIENT_ID_LEVEL = 1
USER_LEVEL = 2
USER_CLIENT_ID_LEVEL = 4


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A quota entity: ``user`` and/or ``client_id``; None = not part of it, ``<default>`` =
    the default entity of that kind."""

    user: str | None = None
    client_id: str | None = None

    @property
    def level(self) -> int:
        if self.user is not None:
            return USER_CLIENT_ID_LEVEL if self.client_id is not None else USER_LEVEL
        return CLIENT_ID_LEVEL

    @property
    def path(self) -> str:
        """The entity path below ``/config`` (catalog/entity_configs.py's ``entity_path``)."""
        return entity_path(self.user, self.client_id)


def entity_of_path(path: str) -> QuotaEntity | None:
    """``users/alice`` -> QuotaEntity("alice"); ``users/a/clients/c``, ``clients/c``; None for a
    path that names no user/client entity (brokers, topics, ips)."""
    parts = path.strip("/").split("/")
    if len(parts) == 2 and parts[0] == USERS:
        return QuotaEntity(user=desanitize(parts[1]))
    if len(parts) == 2 and parts[0] == CLIENTS:
        return QuotaEntity(client_id=desanitize(parts[1]))
    if len(parts) == 4 and parts[0] == USERS and parts[2] == CLIENTS:
        return QuotaEntity(user=desanitize(parts[1]), client_id=desanitize(parts[3]))
    return None


def quota_values(config: Mapping[str, str], keys: Iterable[str] = QUOTA_KEYS
                 ) -> dict[str, float]:
    """The quota keys ``keys`` (default: the user/client-id ones) of an entity config map, as
    numbers (a value that does not parse is left out, as Kafka's config parsing would refuse
    it)."""
    out: dict[str, float] = {}
    for key in keys:
        raw = config.get(key)
        if raw is None:
            continue
        try:
            out[key] = float(raw)
        except ValueError:
            continue
    return out


Tags = tuple[str, str]
"""Kafka's quota metric tags (user, client id); "" = not part of it."""


class QuotaOverrides:
    """The quotas of one key (e.g. ``producer_byte_rate``) per entity, with Kafka's lookup
    (see the module docstring)."""

    def __init__(self) -> None:
        self._quotas: dict[QuotaEntity, float] = {}
        self.levels = 0

    @property
    def enabled(self) -> bool:
        return self.levels != 0

    def update(self, entity: QuotaEntity, value: float | None) -> bool:
        """Set (value) or remove (None) ``entity``'s quota; returns whether anything changed."""
        if value is not None:
            self.levels |= entity.level
            if self._quotas.get(entity) == value:
                return False
            self._quotas[entity] = value
            return True
        return self._quotas.pop(entity, None) is not None

    def metric_tags(self, user: str, client_id: str) -> Tags:
        """Which rate a connection of ``user`` with ``client_id`` records into (Kafka's
        ``quotaMetricTags``)."""
        levels = self.levels
        if levels in (0, CLIENT_ID_LEVEL):
            return ("", client_id)
        if levels == USER_LEVEL:
            return (user, "")
        if levels == USER_CLIENT_ID_LEVEL:
            return (user, client_id)
        quotas = self._quotas
        if (QuotaEntity(user, client_id) in quotas
                or QuotaEntity(user, DEFAULT) in quotas):
            return (user, client_id)
        if QuotaEntity(user) in quotas:
            return (user, "")
        if (QuotaEntity(DEFAULT, client_id) in quotas
                or QuotaEntity(DEFAULT, DEFAULT) in quotas):
            return (user, client_id)
        if QuotaEntity(DEFAULT) in quotas:
            return (user, "")
        return ("", client_id)

    def limit(self, tags: Tags) -> float | None:
        """The quota of a rate with these tags (Kafka's ``quotaLimit``); None = unlimited."""
        user, client_id = tags
        get = self._quotas.get
        if user and client_id:
            for entity in (QuotaEntity(user, client_id), QuotaEntity(user, DEFAULT),
                           QuotaEntity(DEFAULT, client_id), QuotaEntity(DEFAULT, DEFAULT)):
                value = get(entity)
                if value is not None:
                    return value
            return None
        if user:
            value = get(QuotaEntity(user))
            return value if value is not None else get(QuotaEntity(DEFAULT))
        if client_id:
            value = get(QuotaEntity(client_id=client_id))
            return value if value is not None else get(QuotaEntity(client_id=DEFAULT))
        return None

    def quota_for(self, user: str, client_id: str) -> float | None:
        """The quota that applies to a connection (tests and tools)."""
        return self.limit(self.metric_tags(user, client_id))
