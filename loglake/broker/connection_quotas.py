"""Kafka's connection limits (``SocketServer.ConnectionQuotas``): counts, rates and slots.

What is limited, and what happens at the limit (each listener's acceptor, broker/acceptor.py,
calls :meth:`ConnectionQuotas.acquire` for every socket it accepts, before the next accept):

* ``max.connections`` (broker-wide) and ``listener.name.<l>.max.connections`` (one listener):
  at the limit the acceptor **waits** (no further accepts on that listener; the kernel's
  backlog holds new clients) until a connection of the listener/broker closes. The
  inter-broker listener is *protected* when the broker has more than one listener: only its own
  listener limit applies, and when its connection takes the broker over ``max.connections``,
  the least recently active connection of another listener is closed
  (:meth:`ConnectionQuotas.close_excess`, Kafka's ``Processor.closeExcessConnections``).
* ``max.connection.creation.rate`` (broker-wide, not on the protected listener) and
  ``listener.name.<l>.max.connection.creation.rate`` (KIP-612): each accept is recorded in a
  sampled rate (``quota.window.num`` x ``quota.window.size.seconds``); over the rate, the
  acceptor waits the throttle time (at most one window) before it serves the connection.
* ``max.connections.per.ip`` / ``max.connections.per.ip.overrides``: counted over all
  listeners; a new connection over its IP's limit is counted, then refused
  (:class:`TooManyConnections`) and closed at once.
* KIP-612 per-IP ``connection_creation_rate`` quotas (``/config/ips/<ip>`` and ``<default>``,
  looked up through the ``ip_rate`` callable): each accept from a quota'd IP is recorded (also
  when refused, as Kafka's sensor records before it checks); over the quota the connection is
  refused with :class:`ConnectionThrottled` carrying the throttle time, and the acceptor closes
  it after that time without serving it (Kafka's delayed close of throttled sockets).

Defaults (``INT_MAX`` everywhere, no IP quotas) never wait, refuse or close anything.

A :class:`ConnectionSlot` is the accepted connection's share of the counts; releasing it (once,
whatever closes the connection) frees the share and wakes waiting acceptors.

Event loop only: every method runs on the broker's loop (no locks); the clock is
``monotonic_ms`` unless a test injects one.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from loglake.broker.quotas.rate import SampledRate
from loglake.config import INT_MAX, BrokerConfig

log = logging.getLogger(__name__)


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class TooManyConnections(Exception):
    """The IP already holds its ``max.connections.per.ip`` connections (Kafka's
    TooManyConnectionsException): the new one is closed at once."""

    def __init__(self, ip: str, limit: int) -> None:
        super().__init__(f"Rejected connection from {ip}, address already has the configured "
                         f"maximum of {limit} connections.")
        self.ip = ip
        self.limit = limit


class ConnectionThrottled(Exception):
    """The IP's connection creation rate is over its quota (Kafka's
    ConnectionThrottledException): the connection is closed after ``throttle_ms``."""

    def __init__(self, ip: str, throttle_ms: int) -> None:
        super().__init__(f"connection from {ip} throttled for {throttle_ms} ms "
                         "(connection_creation_rate quota)")
        self.ip = ip
        self.throttle_ms = throttle_ms


@dataclass(frozen=True)
class ConnectionLimits:
    """The static limits, read once from the broker's config (see the module docstring)."""

    max_connections: int = INT_MAX
    listener_max_connections: dict[str, int] = field(default_factory=dict)
    max_connections_per_ip: int = INT_MAX
    per_ip_overrides: dict[str, int] = field(default_factory=dict)
    """IP address (normalised) -> its limit."""
    max_connection_creation_rate: int = INT_MAX
    listener_creation_rates: dict[str, int] = field(default_factory=dict)
    protected_listener: str | None = None
    """The inter-broker listener when the broker has more than one listener, else None."""
    window_ms: int = 1000
    samples: int = 11

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ConnectionLimits:
        """The limits of ``config``; host names in the per-IP overrides are resolved here
        (blocking: call it off the loop)."""
        names = [address.name for address in config.effective_listeners]
        per_listener = {name: config.for_listener(name) for name in names}
        overrides: dict[str, int] = {}
        for host, count in config.max_connections_per_ip_overrides:
            for ip in _resolve(host):
                overrides[ip] = count
        inter_broker = config.inter_broker_listener.upper()
        return cls(
            max_connections=config.max_connections,
            listener_max_connections={n: c.max_connections for n, c in per_listener.items()
                                      if c.max_connections != config.max_connections},
            max_connections_per_ip=config.max_connections_per_ip,
            per_ip_overrides=overrides,
            max_connection_creation_rate=config.max_connection_creation_rate,
            listener_creation_rates={
                n: c.max_connection_creation_rate for n, c in per_listener.items()
                if c.max_connection_creation_rate != config.max_connection_creation_rate},
            protected_listener=(inter_broker if inter_broker in names and len(names) > 1
                                else None),
            window_ms=config.quota_window_size_seconds * 1000,
            samples=config.quota_window_num)

    def ip_limit(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.max_connections_per_ip)

    def listener_limit(self, listener: str) -> int:
        """A listener's own max.connections (Kafka: the listener's value, which defaults to
        the broker-wide one)."""
        return self.listener_max_connections.get(listener, self.max_connections)


def normalise_ip(text: str) -> str:
    """``text`` as an IP address string in canonical form (IPv4-mapped IPv6 as IPv4); text that
    is not an address is returned unchanged."""
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return text
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def _resolve(host: str) -> list[str]:
    if normalise_ip(host) != host or _is_ip(host):
        return [normalise_ip(host)]
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        log.warning("max.connections.per.ip.overrides: cannot resolve %r (%s); ignored",
                    host, exc)
        return []
    return sorted({normalise_ip(str(info[4][0])) for info in infos})


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@dataclass(eq=False)
class ConnectionSlot:
    """One accepted connection's share of the counts (release exactly once)."""

    listener: str
    ip: str
    owner: ConnectionQuotas = field(repr=False)
    last_active: float = field(default_factory=time.monotonic)
    close: Callable[[], None] | None = field(default=None, repr=False)
    """Aborts the connection (set once it is served; used to close excess connections)."""
    on_release: Callable[[], None] | None = field(default=None, repr=False)
    """Called once when the slot is released (the connection metrics' close count)."""
    released: bool = False

    def touch(self) -> None:
        """The connection did something (read a request): it is not the least active."""
        self.last_active = time.monotonic()

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.owner.release(self)
            if self.on_release is not None:
                self.on_release()


class ConnectionQuotas:
    """Counts and rates of one broker's connections (see the module docstring)."""

    def __init__(self, limits: ConnectionLimits, *,
                 ip_rate: Callable[[str], float | None] = lambda ip: None,
                 clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self.limits = limits
        self.ip_rate = ip_rate
        self.clock_ms = clock_ms
        self.total = 0
        self.per_listener: dict[str, int] = {}
        self.per_ip: dict[str, int] = {}
        self._slots: set[ConnectionSlot] = set()
        self._changed = asyncio.Event()
        self._broker_rate = self._rate(limits.max_connection_creation_rate)
        self._listener_rates = {name: self._rate(rate)
                                for name, rate in limits.listener_creation_rates.items()}
        self._ip_rates: dict[str, SampledRate] = {}

    def _rate(self, bound: int) -> SampledRate | None:
        if bound >= INT_MAX:
            return None
        return SampledRate(samples=self.limits.samples, window_ms=self.limits.window_ms,
                           bound=float(bound))

    # ---- decisions (pure reads of the counts)
    def slot_available(self, listener: str) -> bool:
        """Kafka's ``connectionSlotAvailable``: the listener is under its own limit, and the
        broker under ``max.connections`` unless the listener is the protected one."""
        if self.per_listener.get(listener, 0) >= self.limits.listener_limit(listener):
            return False
        if listener == self.limits.protected_listener:
            return True
        return self.total < self.limits.max_connections

    def creation_throttle_ms(self, listener: str) -> int:
        """Record one accept on the listener's (and, unless protected, the broker's) creation
        rate; the time to wait before serving it (0: none)."""
        now = self.clock_ms()
        rates = [self._listener_rates.get(listener)]
        if listener != self.limits.protected_listener:
            rates.append(self._broker_rate)
        throttle = 0
        for rate in rates:
            if rate is not None:
                rate.record(1.0, now)
                throttle = max(throttle, rate.throttle_ms(now, max_ms=self.limits.window_ms))
        return throttle

    def ip_throttle_ms(self, ip: str) -> int:
        """Record one accept from ``ip`` against its connection_creation_rate quota; the
        throttle time when over it (0: under it or no quota)."""
        quota = self.ip_rate(ip)
        if quota is None:
            self._ip_rates.pop(ip, None)
            return 0
        rate = self._ip_rates.get(ip)
        if rate is None or rate.bound != quota:
            rate = SampledRate(samples=self.limits.samples, window_ms=self.limits.window_ms,
                               bound=float(quota))
            if len(self._ip_rates) > 10_000:  # bounded: forget idle IPs first
                self._ip_rates.clear()
            self._ip_rates[ip] = rate
        now = self.clock_ms()
        rate.record(1.0, now)
        return rate.throttle_ms(now, max_ms=self.limits.window_ms)

    # ---- the acceptor's path
    async def wait_for_slot(self, listener: str) -> float:
        """Wait out the creation-rate throttle and until a slot is available (Kafka's
        ``waitForConnectionSlot``); the seconds waited."""
        started = time.monotonic()
        throttle_ms = self.creation_throttle_ms(listener)
        if throttle_ms > 0:
            await asyncio.sleep(throttle_ms / 1000)
        while not self.slot_available(listener):
            self._changed.clear()
            await self._changed.wait()
        return time.monotonic() - started

    def admit(self, listener: str, ip: str) -> ConnectionSlot:
        """Count an accepted connection (after :meth:`wait_for_slot`); raises
        ConnectionThrottled (IP quota) before counting, TooManyConnections (per-IP limit)
        after counting and releasing again, as Kafka's ``inc`` + the acceptor's close."""
        ip = normalise_ip(ip)
        throttle_ms = self.ip_throttle_ms(ip)
        if throttle_ms > 0:
            raise ConnectionThrottled(ip, throttle_ms)
        slot = ConnectionSlot(listener, ip, self)
        count = self.per_ip.get(ip, 0)
        self.per_ip[ip] = count + 1
        self.per_listener[listener] = self.per_listener.get(listener, 0) + 1
        self.total += 1
        self._slots.add(slot)
        limit = self.limits.ip_limit(ip)
        if count >= limit:
            slot.release()
            raise TooManyConnections(ip, limit)
        return slot

    def release(self, slot: ConnectionSlot) -> None:
        """Called by :meth:`ConnectionSlot.release` only."""
        self._slots.discard(slot)
        self.total -= 1
        self.per_listener[slot.listener] -= 1
        left = self.per_ip[slot.ip] - 1
        if left:
            self.per_ip[slot.ip] = left
        else:
            del self.per_ip[slot.ip]
        self._changed.set()

    def close_excess(self) -> int:
        """While the broker is over ``max.connections`` (connections of the protected
        listener took it there), close the least recently active connection of another
        listener; the number closed (Kafka's ``closeExcessConnections``)."""
        closed = 0
        while self.total - closed > self.limits.max_connections:
            candidates = [slot for slot in self._slots
                          if slot.listener != self.limits.protected_listener
                          and slot.close is not None and not slot.released]
            if not candidates:
                break
            victim = min(candidates, key=lambda slot: slot.last_active)
            log.info("closing the least active connection from %s on listener %s: the broker "
                     "is over max.connections (%d)", victim.ip, victim.listener,
                     self.limits.max_connections)
            close, victim.close = victim.close, None
            assert close is not None
            close()
            closed += 1
        return closed
