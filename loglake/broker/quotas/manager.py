"""Client quota managers (Kafka's ``ClientQuotaManager`` / ``ClientRequestQuotaManager``): one
sampled rate per quota metric tags, the throttle time of a recording, and the quotas of every
entity as last read from ZooKeeper.

Three managers, as in Kafka's ``QuotaFactory``:

* ``produce``: bytes of Produce requests (the request's size) against ``producer_byte_rate``;
* ``fetch``: bytes of consumer Fetch responses against ``consumer_byte_rate``;
* ``request``: request-handling time as a percentage of one thread (Kafka: nanoseconds * 100 /
  1e9 per request) against ``request_percentage``; its throttle time is capped at one quota
  window (Kafka's ``boundedThrottleTime``).

Each rate has ``quota.window.num`` samples of ``quota.window.size.seconds`` (rate.py). A
manager records nothing until a quota of its key exists (``enabled``; Kafka's
``quotasEnabled``), so brokers without quotas pay one attribute check per request. Rates of
connections idle for an hour are dropped (Kafka's sensor expiry), checked at most once a
minute when a rate is created.

Not thread-safe: event loop only. The clock is injectable (milliseconds, monotonic).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from loglake.broker.quotas.controller_mutation import ControllerMutationQuotaManager
from loglake.broker.quotas.entities import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    QUOTA_KEYS,
    REQUEST_PERCENTAGE,
    QuotaEntity,
    QuotaOverrides,
    Tags,
    quota_values,
)
from loglake.broker.quotas.ip_quotas import IpQuotas
from loglake.broker.quotas.rate import SampledRate, WindowedAvg

log = logging.getLogger(__name__)

INACTIVE_EXPIRY_MS = 3_600_000
"""Kafka's ``InactiveSensorExpirationTimeSeconds``: a rate unused this long is dropped."""
EXPIRY_CHECK_MS = 60_000
DEFAULT_WINDOW_NUM = 11
DEFAULT_WINDOW_SIZE_S = 1


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ClientQuotaManager:
    """The rates and quotas of one quota key (see the module docstring)."""

    def __init__(self, key: str, *, samples: int = DEFAULT_WINDOW_NUM,
                 window_s: int = DEFAULT_WINDOW_SIZE_S, max_throttle_ms: int | None = None,
                 clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self.key = key
        self.samples = samples
        self.window_ms = window_s * 1000
        self.max_throttle_ms = max_throttle_ms
        self.clock_ms = clock_ms
        self.overrides = QuotaOverrides()
        self._rates: dict[Tags, SampledRate] = {}
        self.throttle_times: dict[Tags, WindowedAvg] = {}
        """Throttle times (ms) recorded per rate, for Kafka's ``throttle-time`` metric."""
        self._next_expiry_ms = 0

    @property
    def enabled(self) -> bool:
        return self.overrides.enabled

    def update(self, entity: QuotaEntity, value: float | None) -> None:
        """``entity``'s quota of this key is now ``value`` (None: removed); existing rates
        take their new bounds at once (Kafka's ``updateQuotaMetricConfigs``)."""
        if not self.overrides.update(entity, value):
            return
        log.info("%s quota of %s is now %s", self.key, entity,
                 "unlimited" if value is None else value)
        for tags, rate in self._rates.items():
            rate.bound = self.overrides.limit(tags)

    def rate(self, user: str, client_id: str) -> SampledRate:
        """The rate a connection records into (created on first use)."""
        tags = self.overrides.metric_tags(user, client_id)
        rate = self._rates.get(tags)
        if rate is None:
            self._expire()
            rate = SampledRate(samples=self.samples, window_ms=self.window_ms,
                               bound=self.overrides.limit(tags))
            self._rates[tags] = rate
        return rate

    def record(self, user: str, client_id: str, value: float,
               now_ms: int | None = None) -> int:
        """Record ``value`` and return the throttle time in ms (0: within quota); Kafka's
        ``maybeRecordAndGetThrottleTimeMs``."""
        if not self.overrides.enabled:
            return 0
        now = self.clock_ms() if now_ms is None else now_ms
        rate = self.rate(user, client_id)
        rate.record(value, now)
        throttle = rate.throttle_ms(now, max_ms=self.max_throttle_ms)
        if throttle > 0:
            self.record_throttle(self.overrides.metric_tags(user, client_id), throttle, now)
        return throttle

    def record_throttle(self, tags: Tags, throttle_ms: int, now_ms: int) -> None:
        avg = self.throttle_times.get(tags)
        if avg is None:
            avg = self.throttle_times[tags] = WindowedAvg(samples=self.samples,
                                                          window_ms=self.window_ms)
        avg.record(throttle_ms, now_ms)

    def rates(self) -> dict[Tags, SampledRate]:
        """Every live rate by its metric tags (metrics)."""
        return dict(self._rates)

    def unrecord(self, user: str, client_id: str, value: float,
                 now_ms: int | None = None) -> None:
        """Take back a recorded value (a throttled fetch answers no data)."""
        if self.overrides.enabled:
            now = self.clock_ms() if now_ms is None else now_ms
            self.rate(user, client_id).record(-value, now)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most one request may record without a certain throttle (None: unlimited);
        Kafka caps consumer fetch sizes with it."""
        if not self.overrides.enabled:
            return None
        return self.rate(user, client_id).max_value_in_window()

    def quota(self, user: str, client_id: str) -> float | None:
        return self.overrides.quota_for(user, client_id)

    def _expire(self) -> None:
        now = self.clock_ms()
        if now < self._next_expiry_ms:
            return
        self._next_expiry_ms = now + EXPIRY_CHECK_MS
        for tags in [tags for tags, rate in self._rates.items()
                     if now - (rate.last_event_ms() or now) >= INACTIVE_EXPIRY_MS]:
            del self._rates[tags]
            self.throttle_times.pop(tags, None)


class ClientQuotas:
    """The broker's client quota managers (see the module docstring)."""

    def __init__(self, *, samples: int = DEFAULT_WINDOW_NUM,
                 window_s: int = DEFAULT_WINDOW_SIZE_S,
                 controller_samples: int = DEFAULT_WINDOW_NUM,
                 controller_window_s: int = DEFAULT_WINDOW_SIZE_S,
                 clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self.controller_mutation = ControllerMutationQuotaManager(
            samples=controller_samples, window_s=controller_window_s, clock_ms=clock_ms)
        """KIP-599 (controller_mutation.py): used by the topic admin handlers, not part of
        ``enabled`` (the request path needs nothing for it)."""
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, samples=samples,
                                          window_s=window_s, clock_ms=clock_ms)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, samples=samples,
                                        window_s=window_s, clock_ms=clock_ms)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, samples=samples,
                                          window_s=window_s, max_throttle_ms=window_s * 1000,
                                          clock_ms=clock_ms)
        self.clock_ms = clock_ms
        self.enabled = False
        """Whether any quota was ever set (the server's fast path checks only this)."""
        self._entities: dict[QuotaEntity, dict[str, float]] = {}
        self.ips = IpQuotas()
        """IP entities' ``connection_creation_rate`` (ip_quotas.py); never sets ``enabled``."""

    def ip_connection_rate(self, ip: str) -> float | None:
        """The ``connection_creation_rate`` quota of connections from ``ip`` (connections
        per second): its ``/config/ips/<ip>`` override, else ``/config/ips/<default>``'s, else
        None (unlimited). Kept current from ZooKeeper by config_sync.py; O(1), loop only."""
        return self.ips.connection_rate(ip)

    def managers(self) -> tuple[ClientQuotaManager, ...]:
        return (self.produce, self.fetch, self.request)

    def apply(self, entity: QuotaEntity, config: Mapping[str, str]) -> None:
        """``entity``'s config (the whole map; {} when it has none) as read from ZooKeeper."""
        values = quota_values(config)
        if self._entities.get(entity, {}) == values:
            return
        if values:
            self._entities[entity] = values
        else:
            self._entities.pop(entity, None)
        for manager in self.managers():
            manager.update(entity, values.get(manager.key))
        self.controller_mutation.update(entity, values.get(CONTROLLER_MUTATION_RATE))
        self.enabled = any(manager.enabled for manager in self.managers())

    def replace_all(self, configs: Mapping[QuotaEntity, Mapping[str, str]]) -> None:
        """Every entity's config (a full load): entities not named lose their quotas."""
        for entity in [e for e in self._entities if e not in configs]:
            self.apply(entity, {})
        for entity, config in configs.items():
            self.apply(entity, config)

    def entity_quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        """The quotas as this broker knows them (entities with at least one quota key)."""
        return {entity: dict(values) for entity, values in self._entities.items()}


def disabled_quotas() -> ClientQuotas:
    """Quotas that are never enabled (services' default: nothing is recorded or throttled)."""
    return ClientQuotas()


__all__ = ["QUOTA_KEYS", "ClientQuotaManager", "ClientQuotas", "disabled_quotas"]
