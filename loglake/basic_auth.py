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
rounds and a ZooKeeper read per request. Failures are not cached. At most
:data:`CACHE_SIZE` entries (expired ones are dropped first, then all).

Thread-safety: called from the web servers' worker threads; the cache has a lock. Blocking
(ZooKeeper read, PBKDF2).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import threading
import time
from collections.abc import Callable

from loglake.broker.security.scram_credentials import (
    EntityConfigs,
    credential_from_salted_password,
    salted_password,
    user_credentials,
)

CACHE_TTL_S = 30.0
CACHE_SIZE = 1024
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
                 ttl: float = CACHE_TTL_S) -> None:
        self._configs = entity_configs
        self._clock = clock
        self._ttl = ttl
        self._accepted: dict[tuple[str, bytes], tuple[float, str]] = {}
        self._lock = threading.Lock()

    def __call__(self, user: str, password: str) -> bool:
        return self.mechanism(user, password) is not None

    def mechanism(self, user: str, password: str) -> str | None:
        """The SCRAM mechanism (``SCRAM-SHA-512`` preferred) whose credential ``password``
        matches, or None when the login is refused (cached as the class says)."""
        key = (user, hashlib.sha256(password.encode("utf-8")).digest())
        now = self._clock()
        with self._lock:
            cached = self._accepted.get(key)
            if cached is not None and cached[0] > now:
                return cached[1]
        mechanism = self.check(user, password)
        if mechanism is None:
            return None
        with self._lock:
            if len(self._accepted) >= CACHE_SIZE:
                self._accepted = {k: v for k, v in self._accepted.items() if v[0] > now}
                if len(self._accepted) >= CACHE_SIZE:
                    self._accepted.clear()
            self._accepted[key] = (now + self._ttl, mechanism)
        return mechanism

    def verify(self, user: str, password: str) -> bool:
        """Check against ZooKeeper now (no cache)."""
        return self.check(user, password) is not None

    def check(self, user: str, password: str) -> str | None:
        """The matching mechanism, checked against ZooKeeper now (no cache)."""
        if not user or not password:
            return None
        stored_all = user_credentials(self._configs, user)
        for mechanism in sorted(stored_all, reverse=True):  # SCRAM-SHA-512 first
            stored = stored_all[mechanism]
            salted = salted_password(mechanism, password, stored.salt, stored.iterations)
            computed = credential_from_salted_password(mechanism, stored.salt, salted,
                                                       stored.iterations)
            if hmac.compare_digest(computed.stored_key, stored.stored_key):
                return mechanism
        return None
