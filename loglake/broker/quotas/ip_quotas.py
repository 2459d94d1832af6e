"""IP connection-rate quotas (KIP-612): ``connection_creation_rate`` per IP entity, Kafka's
``/config/ips/<ip>`` entity configs, kept in memory for the accept path.

An IP entity is an IP address literal (IPv4 or IPv6, as Kafka's ``InetAddress.getByName``
accepts it, but host names are refused: the broker never resolves names) or the default
entity ``<default>``. Its config znode is ``/config/ips/<sanitized ip>`` (the name sanitized
as users' and client ids' are: ``::1`` -> ``%3A%3A1``) holding ``{"connection_creation_rate":
"<int>"}`` (Kafka declares it an INT: connections per second); AlterClientQuotas writes it,
with a change notification like every other entity.

Lookup (Kafka's ``ConnectionQuotas.connectionRateForIp``): the IP's own override, else the
``<default>`` entity's, else None (unlimited). Addresses are compared in canonical form
(``ipaddress``), so ``0:0::1`` and ``::1`` are one entity and an IPv4-mapped IPv6 address
(``::ffff:10.0.0.1``) is its IPv4 address, as Java's ``InetAddress`` reads them.

Not thread-safe: event loop only (a dict lookup; no I/O).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from loglake.broker.quotas.entities import quota_values
from loglake.catalog.entity_configs import DEFAULT_ENTITY, IPS, desanitize, sanitize

log = logging.getLogger(__name__)

CONNECTION_CREATION_RATE = "connection_creation_rate"
IP_QUOTA_KEYS = (CONNECTION_CREATION_RATE,)
"""Kafka's ``QuotaConfig.ipConfigs`` keys (an INT, at least 1 when set by AlterClientQuotas)."""
INT_MAX = 2 ** 31 - 1


class InvalidIpError(ValueError):
    """A name that is not an IP address literal nor ``<default>``."""


def canonical_ip(name: str) -> str:
    """The canonical text of the IP ``name`` (IPv4-mapped IPv6 as IPv4); raises
    InvalidIpError for anything else (host names, CIDR blocks, empty)."""
    try:
        address = ipaddress.ip_address(name.strip("[]") if name.startswith("[") else name)
    except ValueError:
        raise InvalidIpError(f"{name} is not a valid IP or resolvable host.") from None
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        if address.scope_id:
            return str(ipaddress.IPv6Address(str(address).split("%", 1)[0]))
    return str(address)


def ip_of_path(path: str) -> str | None:
    """``ips/10.0.0.1`` -> ``10.0.0.1``, ``ips/<default>`` -> ``<default>``; None for other
    entity paths."""
    parts = path.strip("/").split("/")
    if len(parts) == 2 and parts[0] == IPS:
        return desanitize(parts[1])
    return None


class IpQuotas:
    """The IP entities' quotas as last read from ZooKeeper (see the module docstring)."""

    def __init__(self) -> None:
        self._rates: dict[str, float] = {}
        """canonical IP (or ``<default>``) -> connection_creation_rate."""
        self._entities: dict[str, dict[str, float]] = {}
        """entity name as stored -> its IP quota values."""
        self.version = 0
        """Bumped on every change (callers caching a lookup may compare it)."""

    def apply(self, name: str, config: Mapping[str, str]) -> None:
        """Entity ``name``'s whole config ({} when it has none), as stored or read."""
        values = quota_values(config, IP_QUOTA_KEYS)
        if self._entities.get(name, {}) == values:
            return
        try:
            if name != DEFAULT_ENTITY:
                canonical_ip(name)
        except InvalidIpError:
            log.warning("ignoring the quota of IP entity %r: not an IP address", name)
            return
        if values:
            self._entities[name] = values
        else:
            self._entities.pop(name, None)
        rates: dict[str, float] = {}
        for entity, entity_values in self._entities.items():
            entity_rate = entity_values.get(CONNECTION_CREATION_RATE)
            if entity_rate is not None:  # two spellings of one address: the last set wins
                rates[entity if entity == DEFAULT_ENTITY else canonical_ip(entity)] = entity_rate
        self._rates = rates
        rate = values.get(CONNECTION_CREATION_RATE)
        self.version += 1
        log.info("connection_creation_rate of IP %s is now %s", name,
                 "unlimited" if rate is None else rate)

    def replace_all(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """Every IP entity's config (a full load): entities not named lose their quotas."""
        for name in [n for n in self._entities if n not in configs]:
            self.apply(name, {})
        for name, config in configs.items():
            self.apply(name, config)

    def connection_rate(self, ip: str) -> float | None:
        """The ``connection_creation_rate`` that applies to connections from ``ip``: its
        override, else ``<default>``'s, else None (unlimited). ``ip`` not an address: the
        default's."""
        rates = self._rates
        if not rates:
            return None
        try:
            rate = rates.get(canonical_ip(ip))
        except InvalidIpError:
            rate = None
        return rate if rate is not None else rates.get(DEFAULT_ENTITY)

    def entities(self) -> dict[str, dict[str, float]]:
        """The IP entities with quotas, by name as stored (``<default>`` included)."""
        return {name: dict(values) for name, values in self._entities.items()}


@dataclass(frozen=True, slots=True)
class IpEntity:
    """An IP quota entity: ``name`` is the address as given or ``<default>``."""

    name: str

    @property
    def path(self) -> str:
        """The entity path below ``/config`` (``ips/<sanitized name>``)."""
        return f"{IPS}/{sanitize(self.name)}"
