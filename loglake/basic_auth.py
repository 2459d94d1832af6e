"""HTTP Basic logins checked against the cluster's SCRAM users: shared by the web console
(``loglake console --basic-auth``) and the schema registry (``loglake registry --basic-auth``).

A request's ``user:password`` is accepted when ``user`` has a SCRAM credential in ZooKeeper
(``/config/users/<user>``, Kafka's stored form: see
:mod:`loglake.broker.security.scram_credentials`) and the password yields that credential's
stored key (PBKDF2 with the stored salt and iterations, then RFC 5802's StoredKey; compared
in constant time). Either mechanism (SCRAM-SHA-256 or -512) will do; :meth:`ScramAuthenticator.
mechanism` says which one matched, so a caller can log in to the brokers as that user with it.
So the users who may log in to the brokers (``loglake users create``) may log in over HTTP,
with the same password; a user removed or whose password changed is refused once the cache
entry expires.

Cache: a successful check is remembered for :data:`CACHE_TTL_S` seconds keyed by the user and
a SHA-256 of the password (never the password itself), so a client does not pay 4096 PBKDF2
rounds and a ZooKeeper read per request. A user name without any SCRAM credential is
remembered as unknown for :data:`NEGATIVE_TTL_S` seconds (a flood of made-up names costs no
ZooKeeper read each; a user created meanwhile may log in once that passes), and its refusal
still computes a known user's PBKDF2 work, so response times do not tell which user names
exist. Wrong passwords of known users are not cached. Each cache holds at most
:data:`CACHE_SIZE` entries (expired ones are dropped first, then all).

Failed logins (:class:`LoginLimiter`; :func:`check_login` is the whole check both web apps'
middlewares run): failures are counted per
client address and per user name over a sliding window; once an address (or a user name) has
``max_failures`` failures within ``window_s`` seconds, further attempts are refused before any
ZooKeeper read or PBKDF2 (HTTP 429 with ``Retry-After``: the seconds until the oldest failure
leaves the window). Attempts being checked count as failures until they end, so a burst of
concurrent guesses cannot overshoot the limit. Successful logins are never counted, and a login
whose password was accepted recently (:meth:`ScramAuthenticator.cached`) is served even while
its address or name is limited, so an attacker guessing alice's password does not lock out
alice's open browser session. Memory: at most ``max_tracked`` addresses and as many names
(least recently failed evicted first), each with at most ``max_failures`` timestamps.

Thread-safety: called from the web servers' worker threads; the caches and the limiter have
locks. Blocking (ZooKeeper read, PBKDF2) except :meth:`ScramAuthenticator.cached` and the
limiter.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from loglake.broker.security.scram_credentials import (
    DEFAULT_ITERATIONS,
    EntityConfigs,
    credential_from_salted_password,
    salted_password,
    user_credentials,
)
from loglake.errors import LoglakeError

CACHE_TTL_S = 30.0
CACHE_SIZE = 1024
NEGATIVE_TTL_S = 5.0
"""How long a user name without SCRAM credentials is remembered as unknown."""
K = TypeVar("K")
V = TypeVar("V")
MAX_HEADER_BYTES = 4096
"""An ``Authorization`` header longer than this is refused without decoding."""


def basic_credentials(header: bytes) -> tuple[str, str] | None:
    """``(user, password)`` of an ``Authorization: Basic <base64 user:password>`` header value
    (UTF-8), or None when it is absent, of another scheme, malformed or has an empty user."""
    if len(header) > MAX_HEADER_BYTES:
        return None
    scheme, _, encoded = header.strip().partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode(
            ).partition(":")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return (user, password) if sep and user else None


class ScramAuthenticator:
    """``authenticator(user, password) -> bool`` over the users' SCRAM credentials."""

    def __init__(self, entity_configs: EntityConfigs, *,
                 clock: Callable[[], float] = time.monotonic,
                 ttl: float = CACHE_TTL_S, negative_ttl: float = NEGATIVE_TTL_S) -> None:
        self._configs = entity_configs
        self._clock = clock
        self._ttl = ttl
        self._negative_ttl = negative_ttl
        self._accepted: dict[tuple[str, bytes], tuple[float, str]] = {}
        self._unknown: dict[str, float] = {}
        self._lock = threading.Lock()

    def __call__(self, user: str, password: str) -> bool:
        return self.mechanism(user, password) is not None

    def cached(self, user: str, password: str) -> str | None:
        """The mechanism of a login accepted within the cache's lifetime, else None (no
        ZooKeeper read, no PBKDF2: cheap enough to call before a rate limit)."""
        key = (user, hashlib.sha256(password.encode("utf-8")).digest())
        now = self._clock()
        with self._lock:
            cached = self._accepted.get(key)
            return cached[1] if cached is not None and cached[0] > now else None

    def mechanism(self, user: str, password: str) -> str | None:
        """The SCRAM mechanism (``SCRAM-SHA-512`` preferred) whose credential ``password``
        matches, or None when the login is refused (cached as the class says)."""
        found = self.cached(user, password)
        if found is not None:
            return found
        key = (user, hashlib.sha256(password.encode("utf-8")).digest())
        mechanism = self.check(user, password)
        if mechanism is None:
            return None
        now = self._clock()
        with self._lock:
            self._accepted = _bounded(self._accepted, now, expiry=lambda v: v[0])
            self._accepted[key] = (now + self._ttl, mechanism)
        return mechanism

    def verify(self, user: str, password: str) -> bool:
        """Check against ZooKeeper now (no success cache)."""
        return self.check(user, password) is not None

    def _known(self, user: str) -> bool:
        """False while ``user`` is remembered as having no credentials."""
        now = self._clock()
        with self._lock:
            until = self._unknown.get(user)
            return until is None or until <= now

    def check(self, user: str, password: str) -> str | None:
        """The matching mechanism, checked against ZooKeeper now (only the unknown-user
        cache is consulted). An unknown user costs the PBKDF2 work of a known one
        (:func:`_decoy_work`), so the answer's timing does not tell which names exist."""
        if not user or not password:
            return None
        if not self._known(user):
            _decoy_work(password)
            return None
        stored_all = user_credentials(self._configs, user)
        if not stored_all:
            now = self._clock()
            with self._lock:
                self._unknown = _bounded(self._unknown, now, expiry=lambda v: v)
                self._unknown[user] = now + self._negative_ttl
            _decoy_work(password)
            return None
        for mechanism in sorted(stored_all, reverse=True):  # SCRAM-SHA-512 first
            stored = stored_all[mechanism]
            salted = salted_password(mechanism, password, stored.salt, stored.iterations)
            computed = credential_from_salted_password(mechanism, stored.salt, salted,
                                                       stored.iterations)
            if hmac.compare_digest(computed.stored_key, stored.stored_key):
                return mechanism
        return None


DECOY_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
"""What a refused login of an unknown user computes: what a wrong password of a user with both
credentials at Kafka's default iterations costs (``loglake users create`` stores both)."""
_DECOY_SALT = b"loglake-unknown-user"


def _decoy_work(password: str) -> None:
    """Spend a known user's PBKDF2 cost on ``password`` and discard the result (timing only)."""
    for mechanism in DECOY_MECHANISMS:
        salted_password(mechanism, password, _DECOY_SALT, DEFAULT_ITERATIONS)


def _bounded(cache: dict[K, V], now: float, expiry: Callable[[V], float]) -> dict[K, V]:
    """``cache`` with room for one more entry: expired entries dropped when it is full, then
    everything when that was not enough (call with the owner's lock held)."""
    if len(cache) < CACHE_SIZE:
        return cache
    kept = {k: v for k, v in cache.items() if expiry(v) > now}
    return kept if len(kept) < CACHE_SIZE else {}


# ---- failed-login limits ---------------------------------------------------------------------

MAX_FAILURES_PER_ADDRESS = 10
MAX_FAILURES_PER_USER = 30
FAILURE_WINDOW_S = 60.0
MAX_TRACKED = 10_000


@dataclass(frozen=True)
class LoginLimits:
    """Failures allowed per client address and per user name within ``window_s`` seconds
    (see the module); ``max_tracked`` bounds the addresses and names remembered."""

    per_address: int = MAX_FAILURES_PER_ADDRESS
    per_user: int = MAX_FAILURES_PER_USER
    window_s: float = FAILURE_WINDOW_S
    max_tracked: int = MAX_TRACKED

    def __post_init__(self) -> None:
        if self.per_address < 1 or self.per_user < 1:
            raise ValueError("login failure limits must be at least 1, got "
                             f"{self.per_address} per address and {self.per_user} per user")
        if not 0 < self.window_s <= 86_400:
            raise ValueError(f"the login failure window must be within (0, 86400] seconds, "
                             f"got {self.window_s}")
        if self.max_tracked < 1:
            raise ValueError(f"max_tracked must be at least 1, got {self.max_tracked}")


class _FailureCounts:
    """Failure timestamps per key over a sliding window (caller holds the limiter's lock)."""

    def __init__(self, limit: int, window_s: float, max_keys: int) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_keys = max_keys
        self.failures: OrderedDict[str, deque[float]] = OrderedDict()
        self.in_flight: dict[str, int] = {}

    def _recent(self, key: str, now: float) -> deque[float] | None:
        times = self.failures.get(key)
        if times is None:
            return None
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self.failures[key]
            return None
        return times

    def retry_after(self, key: str, now: float) -> float | None:
        """Seconds until ``key`` may try again, None when it may now."""
        times = self._recent(key, now)
        count = (len(times) if times else 0) + self.in_flight.get(key, 0)
        if count < self.limit:
            return None
        if not times:  # only attempts in flight: try again in a moment
            return 1.0
        return max(times[0] + self.window_s - now, 0.001)

    def begin(self, key: str) -> None:
        self.in_flight[key] = self.in_flight.get(key, 0) + 1

    def end(self, key: str, now: float, *, failed: bool) -> None:
        left = self.in_flight.get(key, 0) - 1
        if left > 0:
            self.in_flight[key] = left
        else:
            self.in_flight.pop(key, None)
        if not failed:
            return
        times = self._recent(key, now)
        if times is None:
            times = self.failures[key] = deque(maxlen=self.limit)
        times.append(now)
        self.failures.move_to_end(key)
        while len(self.failures) > self.max_keys:
            self.failures.popitem(last=False)

    def __len__(self) -> int:
        return len(self.failures)


class LoginLimiter:
    """Refuse logins from addresses and names with too many recent failures (see the module).

    Use: ``wait = limiter.acquire(address, user)``; when ``wait`` is not None refuse the login
    (429, ``Retry-After: ceil(wait)``) without checking it; else check it and call
    ``limiter.release(address, user, failed=...)`` exactly once.
    """

    def __init__(self, limits: LoginLimits | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits or LoginLimits()
        self._clock = clock
        self._addresses = _FailureCounts(self.limits.per_address, self.limits.window_s,
                                         self.limits.max_tracked)
        self._users = _FailureCounts(self.limits.per_user, self.limits.window_s,
                                     self.limits.max_tracked)
        self._lock = threading.Lock()

    def acquire(self, address: str, user: str) -> float | None:
        """None and the attempt counted as in flight, or the seconds to wait (refused)."""
        now = self._clock()
        with self._lock:
            waits = [w for w in (self._addresses.retry_after(address, now),
                                 self._users.retry_after(user, now)) if w is not None]
            if waits:
                return max(waits)
            self._addresses.begin(address)
            self._users.begin(user)
            return None

    def release(self, address: str, user: str, *, failed: bool) -> None:
        """End an attempt :meth:`acquire` let through; a failure is counted for both keys."""
        now = self._clock()
        with self._lock:
            self._addresses.end(address, now, failed=failed)
            self._users.end(user, now, failed=failed)

    def tracked(self) -> tuple[int, int]:
        """(addresses, names) remembered now (for tests of the memory bound)."""
        with self._lock:
            return len(self._addresses), len(self._users)


def retry_after_header(wait_s: float) -> str:
    """``Retry-After``'s value: whole seconds, at least 1."""
    return str(max(1, math.ceil(wait_s)))


MechanismCheck = Callable[[str, str], "str | None"]
"""(user, password) -> the SCRAM mechanism that matched, or None (refused); blocking."""


@dataclass(frozen=True)
class LoginOutcome:
    """What :func:`check_login` decided for one HTTP request.

    Exactly one holds: ``mechanism`` (accepted: ``credentials`` are the user and password),
    ``retry_after_s`` (refused by the limiter: answer 429), ``unavailable`` (the check could
    not run, e.g. ZooKeeper unreachable: answer 503 with it), or none of them (answer 401).
    """

    credentials: tuple[str, str] | None = None
    mechanism: str | None = None
    retry_after_s: float | None = None
    unavailable: str | None = None


async def check_login(scope: Mapping[str, Any], *, check: MechanismCheck,
                      cached: MechanismCheck | None = None,
                      limiter: LoginLimiter | None = None) -> LoginOutcome:
    """Check the HTTP Basic credentials of the ASGI request ``scope`` (see the module).

    ``cached`` (no I/O) is asked first; otherwise the limiter (per TCP peer address and user
    name) is consulted and ``check`` runs in the thread pool. A :class:`LoglakeError` from
    ``check`` (ZooKeeper unreachable) becomes ``unavailable`` and is not counted as a failure.
    """
    from starlette.concurrency import run_in_threadpool

    headers = dict(scope.get("headers") or [])
    credentials = basic_credentials(headers.get(b"authorization", b""))
    if credentials is None:
        return LoginOutcome()
    mechanism = cached(*credentials) if cached is not None else None
    if mechanism is not None:
        return LoginOutcome(credentials, mechanism)
    client = scope.get("client")
    address = str(client[0]) if client else "-"
    wait = None if limiter is None else limiter.acquire(address, credentials[0])
    if wait is not None:
        return LoginOutcome(credentials, retry_after_s=wait)
    failed = False
    try:
        mechanism = await run_in_threadpool(check, *credentials)
        failed = mechanism is None
    except LoglakeError as exc:
        return LoginOutcome(credentials, unavailable=str(exc))
    finally:
        if limiter is not None:
            limiter.release(address, credentials[0], failed=failed)
    return LoginOutcome(credentials, mechanism)


def warn_plaintext_login(service: str, *, tls: bool, basic_auth: bool) -> None:
    """One stderr line when HTTP Basic logins are served without TLS (passwords in clear)."""
    if basic_auth and not tls:
        import sys
        print(f"{service}: warning: --basic-auth without --certfile: passwords travel in "
              "clear text over HTTP; give --certfile/--keyfile", file=sys.stderr, flush=True)
