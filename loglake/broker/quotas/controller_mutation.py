"""Controller mutation quotas (KIP-599; Kafka's ``ControllerMutationQuotaManager``): the
partitions a user/client id creates (CreateTopics, CreatePartitions) or deletes (DeleteTopics)
are taken from a token bucket per quota metric tags, refilled at ``controller_mutation_rate``
partitions per second.

* **Token bucket** (Kafka's ``TokenBucket``): holds at most the burst ``controller.quota.window.num
  * controller.quota.window.size.seconds * rate`` tokens (Kafka's defaults 11 x 1 s), starts
  full, refills continuously; a recording takes its partitions even below zero.
* **Strict** (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+; Kafka's
  ``StrictControllerMutationQuota``): before each topic the bucket is checked; when it is below
  zero the topic is not done and answered THROTTLING_QUOTA_EXCEEDED (:class:`ThrottlingQuota
  ExceededError`), else its partitions are taken (so the topic that empties the bucket still
  goes through, as in Kafka).
* **Permissive** (older versions, whose clients do not know the error): every topic is done;
  going below zero only sets the throttle time.
* **Throttle time** (``ControllerMutationQuotaManager.throttleTimeMs``): the time the bucket
  needs to climb back to zero, ``-tokens / rate`` seconds, as of the recording that saw it
  negative, decreasing with the time since. The handler puts it in the response's
  ``throttle_time_ms`` and mutes the connection that long (Kafka's
  ``sendResponseMaybeThrottleWithControllerQuota``; the request-time quota's throttle when
  larger).

The quota of a connection is found with the 8-level user/client-id precedence and rates are
shared by the same tags as the other client quotas (entities.py's :class:`QuotaOverrides`).
Nothing is recorded until some entity has the key (Kafka's ``quotasEnabled``): brokers without
the quota hand out :data:`UNBOUNDED` and pay nothing.

Kafka counts on the active controller, where ZooKeeper-mode brokers forward these requests;
here any broker creates and deletes topics itself, so each broker keeps its own buckets and a
client spreading requests over N brokers gets up to N times the rate.

Not thread-safe: event loop only. Times are integer milliseconds from a monotonic clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loglake.broker.quotas.entities import CONTROLLER_MUTATION_RATE, QuotaEntity, QuotaOverrides
from loglake.broker.quotas.rate import SampledRate, WindowedAvg
from loglake.errors import ThrottlingQuotaExceededError

THROTTLING_QUOTA_MESSAGE = "The throttling quota has been exceeded."
"""Kafka's ``Errors.THROTTLING_QUOTA_EXCEEDED.message``."""
INACTIVE_EXPIRY_MS = 3_600_000
EXPIRY_CHECK_MS = 60_000
STRICT_SINCE = {19: 6, 20: 5, 37: 3}
"""The first version of CreateTopics (19), DeleteTopics (20) and CreatePartitions (37) whose
quota is strict (KIP-599)."""


@dataclass
class TokenBucket:
    """Kafka's ``TokenBucket`` stat: ``tokens`` as of ``last_ms`` (see the module)."""

    tokens: float = 0.0
    last_ms: int | None = None
    recorded: float = 0.0
    """Partitions recorded in total (the metric's cumulative count)."""

    def measure(self, rate: float, burst: float, now_ms: int) -> float:
        self._refill(rate, burst, now_ms)
        return self.tokens

    def record(self, value: float, rate: float, burst: float, now_ms: int) -> None:
        self._refill(rate, burst, now_ms)
        self.tokens = min(burst, self.tokens - value)
        self.recorded += value

    def _refill(self, rate: float, burst: float, now_ms: int) -> None:
        if self.last_ms is None:
            self.tokens = burst  # a new bucket starts full (Kafka: refilled from time 0)
        else:
            self.tokens = min(burst, self.tokens + rate * max(0, now_ms - self.last_ms) / 1000.0)
        self.last_ms = now_ms


class MutationQuota:
    """The quota of one request (see the module): :meth:`record` per topic, then
    :meth:`throttle_ms` for the response."""

    def __init__(self, manager: ControllerMutationQuotaManager | None, bucket: TokenBucket | None,
                 tags: tuple[str, str], *, strict: bool) -> None:
        self.manager = manager
        self.bucket = bucket
        self.tags = tags
        self.strict = strict
        self._throttle_ms = 0
        self._recorded_ms = 0

    def record(self, partitions: float) -> None:
        """Take ``partitions`` tokens; strict and the bucket below zero: raise
        ThrottlingQuotaExceededError (nothing taken)."""
        manager, bucket = self.manager, self.bucket
        if manager is None or bucket is None:
            return
        rate = manager.overrides.limit(self.tags)
        if rate is None:
            return
        burst = manager.burst(rate)
        now = manager.clock_ms()
        if self.strict:
            tokens = bucket.measure(rate, burst, now)
            if tokens < 0:
                self._set_throttle(tokens, rate, now)
                manager.throttled += 1
                raise ThrottlingQuotaExceededError(THROTTLING_QUOTA_MESSAGE)
            bucket.record(partitions, rate, burst, now)
            manager.record_mutations(self.tags, partitions, now)
            return
        bucket.record(partitions, rate, burst, now)
        manager.record_mutations(self.tags, partitions, now)
        if bucket.tokens < 0:
            self._set_throttle(bucket.tokens, rate, now)

    def _set_throttle(self, tokens: float, rate: float, now_ms: int) -> None:
        self._throttle_ms = round(-tokens / rate * 1000)
        self._recorded_ms = now_ms
        if self.manager is not None:
            self.manager.record_throttle(self.tags, self._throttle_ms, now_ms)

    def throttle_ms(self) -> int:
        """The throttle time now: as recorded, less the time since (Kafka's
        ``AbstractControllerMutationQuota.throttleTime``)."""
        if self.manager is None or not self._throttle_ms:
            return 0
        return max(0, self._throttle_ms - (self.manager.clock_ms() - self._recorded_ms))


UNBOUNDED = MutationQuota(None, None, ("", ""), strict=False)
"""The quota of every request while no entity has ``controller_mutation_rate``."""


class ControllerMutationQuotaManager:
    """Token buckets per quota metric tags and the ``controller_mutation_rate`` of every
    entity (see the module)."""

    def __init__(self, *, samples: int, window_s: int, clock_ms: Callable[[], int]) -> None:
        self.key = CONTROLLER_MUTATION_RATE
        self.samples = samples
        self.window_s = window_s
        self.clock_ms = clock_ms
        self.overrides = QuotaOverrides()
        self.buckets: dict[tuple[str, str], TokenBucket] = {}
        self.mutation_rates: dict[tuple[str, str], SampledRate] = {}
        """Partitions per second per tags (Kafka's ``mutation-rate`` metric)."""
        self.throttle_times: dict[tuple[str, str], WindowedAvg] = {}
        """Throttle times (ms) per tags (Kafka's ``throttle-time`` metric)."""
        self.throttled = 0
        """Topics refused with THROTTLING_QUOTA_EXCEEDED since start."""
        self._next_expiry_ms = 0

    @property
    def enabled(self) -> bool:
        return self.overrides.enabled

    def burst(self, rate: float) -> float:
        return self.samples * self.window_s * rate

    def update(self, entity: QuotaEntity, value: float | None) -> None:
        """``entity``'s ``controller_mutation_rate`` is now ``value`` (None: removed)."""
        self.overrides.update(entity, value)

    def quota_for(self, user: str, client_id: str, api_key: int,
                  api_version: int) -> MutationQuota:
        """The quota of one request: strict from the API's KIP-599 version, else permissive;
        :data:`UNBOUNDED` while no entity has the key."""
        if not self.enabled:
            return UNBOUNDED
        tags = self.overrides.metric_tags(user, client_id)
        bucket = self.buckets.get(tags)
        if bucket is None:
            self._expire()
            bucket = self.buckets[tags] = TokenBucket()
        strict = api_version >= STRICT_SINCE.get(api_key, 1 << 15)
        return MutationQuota(self, bucket, tags, strict=strict)

    def _expire(self) -> None:
        """Drop the state of tags idle for an hour (Kafka's sensor expiry), at most once a
        minute: a bucket idle that long is full again anyway."""
        now = self.clock_ms()
        if now < self._next_expiry_ms:
            return
        self._next_expiry_ms = now + EXPIRY_CHECK_MS
        for tags in [t for t, b in self.buckets.items()
                     if b.last_ms is not None and now - b.last_ms >= INACTIVE_EXPIRY_MS]:
            del self.buckets[tags]
            self.mutation_rates.pop(tags, None)
            self.throttle_times.pop(tags, None)

    def record_mutations(self, tags: tuple[str, str], partitions: float, now_ms: int) -> None:
        rate = self.mutation_rates.get(tags)
        if rate is None:
            rate = self.mutation_rates[tags] = SampledRate(samples=self.samples,
                                                           window_ms=self.window_s * 1000)
        rate.record(partitions, now_ms)

    def record_throttle(self, tags: tuple[str, str], throttle_ms: int, now_ms: int) -> None:
        avg = self.throttle_times.get(tags)
        if avg is None:
            avg = self.throttle_times[tags] = WindowedAvg(samples=self.samples,
                                                          window_ms=self.window_s * 1000)
        avg.record(throttle_ms, now_ms)

    def tokens(self, tags: tuple[str, str]) -> float | None:
        """The tokens of the bucket of ``tags`` now (None: no bucket or no quota)."""
        bucket = self.buckets.get(tags)
        rate = self.overrides.limit(tags)
        if bucket is None or rate is None:
            return None
        return bucket.measure(rate, self.burst(rate), self.clock_ms())
