"""Replication throttles (Kafka's replication quotas, KIP-73): token buckets and which replicas
they apply to.

What is throttled, as in Kafka:

* **Rates** are broker configs, ``leader.replication.throttled.rate`` (bytes per second a leader
  sends to throttled followers) and ``follower.replication.throttled.rate`` (bytes per second a
  follower fetches for its throttled replicas); ``Long.MAX_VALUE`` (the default) means
  unthrottled. They are dynamic: a value for this broker (``/config/brokers/<id>``) wins over
  the cluster default (``/config/brokers/<default>``), which wins over ``server.properties``
  (:func:`effective_rates`).
* **Replicas** are named by the topic configs ``leader.replication.throttled.replicas`` and
  ``follower.replication.throttled.replicas``: ``partition:broker`` items, or ``*`` for every
  replica of the topic. The leader throttles partition P when ``P:<leader id>`` is listed; the
  follower throttles P when ``P:<its own id>`` is listed (:func:`is_throttled`).
  ``loglake partitions reassign --throttle`` lists the existing replicas of moving partitions on
  the leader side and the new ones on the follower side, as kafka-reassign-partitions does.
* **Only replicas outside the ISR are throttled** (Kafka's ``shouldLeaderThrottle`` /
  ``shouldFollowerThrottle``): an in-sync follower's fetches, which acks=all waits for, are
  never held back.

The leader enforces its rate in the replica manager's fetch (replica_manager.py): a throttled
partition gets at most what the leader bucket holds (:meth:`TokenBucket.available`), none while
the bucket is in debt (the follower's long poll then simply waits). The follower enforces its
rate in the replica fetcher (broker/replica_fetcher.py): a throttled partition is left out of
the fetch while the bucket is in debt and asks for at most what it holds otherwise. Both record
the bytes actually sent or received.

Token bucket: it holds at most ``BURST_S`` seconds of the rate and starts full; a whole record
batch may overdraw it (a batch is never split), and the debt is repaid before more throttled
bytes go. Over any T seconds at most ``rate * (T + BURST_S)`` bytes plus one batch pass.

Thread-safety: event-loop thread only; the clock is injectable for tests.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from loglake.config import DYNAMIC_BROKER_CONFIG_KEYS, LONG_MAX
from loglake.errors import LoglakeError

if TYPE_CHECKING:
    from loglake.broker.partition import Partition

log = logging.getLogger(__name__)

UNLIMITED = LONG_MAX
"""A rate of Long.MAX_VALUE bytes per second: unthrottled (Kafka's default)."""
BURST_S = 1.0
"""Seconds of the rate a full bucket holds."""
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
DEFAULT_ENTITY = "<default>"
"""The ``/config/brokers`` child holding the cluster-wide default (Kafka's name)."""


class TokenBucket:
    """Bytes per second with a burst of ``BURST_S`` seconds; overdraft allowed (see module)."""

    def __init__(self, rate: int = UNLIMITED, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.rate = rate
        self._tokens = float(self._capacity())
        self._at = clock()

    @property
    def limited(self) -> bool:
        return self.rate < UNLIMITED

    def _capacity(self) -> float:
        return self.rate * BURST_S

    def _refill(self) -> None:
        now = self._clock()
        if self.limited:
            self._tokens = min(self._tokens + (now - self._at) * self.rate, self._capacity())
        self._at = now

    def set_rate(self, rate: int) -> None:
        """Change the rate; a bucket that was unlimited starts full, otherwise what it holds
        (or owes) is kept, capped at the new capacity."""
        self._refill()
        was_limited = self.limited
        self.rate = max(int(rate), 0)
        if not was_limited:
            self._tokens = self._capacity()
        self._tokens = min(self._tokens, self._capacity())

    def available(self) -> int:
        """Bytes that may go now (<= 0 while in debt); UNLIMITED when unthrottled."""
        if not self.limited:
            return UNLIMITED
        self._refill()
        return math.floor(self._tokens)

    def record(self, size: int) -> None:
        """``size`` bytes went (or came): take them from the bucket, into debt if need be."""
        if self.limited and size > 0:
            self._refill()
            self._tokens -= size

    def delay_s(self) -> float:
        """Seconds until the bucket holds a positive amount again (0 when it does now)."""
        if not self.limited:
            return 0.0
        self._refill()
        if self._tokens > 0:
            return 0.0
        if self.rate <= 0:
            return math.inf
        return (1 - self._tokens) / self.rate


def is_throttled(replicas: tuple[str, ...], partition: int, broker_id: int) -> bool:
    """Whether a ``*.replication.throttled.replicas`` value names ``partition`` on
    ``broker_id`` (``*``: every replica)."""
    if replicas == ("*",):
        return True
    for item in replicas:
        index, _, broker = item.partition(":")
        if index.strip() == str(partition) and broker.strip() == str(broker_id):
            return True
    return False


def effective_rates(static: Mapping[str, int], cluster_default: Mapping[str, str],
                    own: Mapping[str, str]) -> dict[str, int]:
    """Each dynamic rate: this broker's value, else the cluster default, else ``static``
    (``server.properties`` or Kafka's default). A value ZooKeeper holds that does not parse is
    skipped with a warning (the next source counts)."""
    rates: dict[str, int] = {}
    for name, key in DYNAMIC_BROKER_CONFIG_KEYS.items():
        value = int(static.get(name, key.default))
        for source, configs in (("cluster default", cluster_default), ("broker", own)):
            raw = configs.get(name)
            if raw is None:
                continue
            try:
                value = int(key.parse(raw))
            except LoglakeError as exc:
                log.warning("ignoring the %s value of %s: %s", source, name, exc)
        rates[name] = value
    return rates


class ReplicationQuotas:
    """The leader and follower buckets of one broker and the throttling decisions."""

    def __init__(self, broker_id: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.broker_id = broker_id
        self.leader = TokenBucket(clock=clock)
        self.follower = TokenBucket(clock=clock)

    def apply(self, rates: Mapping[str, int]) -> None:
        """Adopt new rates (see :func:`effective_rates`); logs changes."""
        for name, bucket in ((LEADER_RATE, self.leader), (FOLLOWER_RATE, self.follower)):
            rate = int(rates.get(name, UNLIMITED))
            if rate != bucket.rate:
                log.info("%s: %s", name, "unthrottled" if rate >= UNLIMITED else f"{rate} B/s")
                bucket.set_rate(rate)

    def leader_throttles(self, partition: Partition, follower_id: int) -> bool:
        """Whether this leader throttles what it sends ``follower_id`` for ``partition``."""
        return (self.leader.limited and follower_id not in partition.isr
                and is_throttled(partition.config.leader_replication_throttled_replicas,
                                 partition.index, self.broker_id))

    def follower_throttles(self, partition: Partition) -> bool:
        """Whether this follower throttles its fetches of ``partition``."""
        return (self.follower.limited and self.broker_id not in partition.isr
                and is_throttled(partition.config.follower_replication_throttled_replicas,
                                 partition.index, self.broker_id))
