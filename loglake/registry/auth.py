"""HTTP Basic authentication of registry requests against the cluster's SCRAM users.

A request's ``user:password`` is accepted when ``user`` has a SCRAM credential in ZooKeeper
(``/config/users/<user>``, Kafka's stored form: see
:mod:`loglake.broker.security.scram_credentials`) and the password yields that credential's
stored key (PBKDF2 with the stored salt and iterations, then RFC 5802's StoredKey; compared
in constant time). Either mechanism (SCRAM-SHA-256 or -512) will do. So the users who may log
in to the brokers (``loglake users add``) may call the registry, with the same password; a
user removed or whose password changed is refused once the cache entry expires.

Cache: a successful check is remembered for :data:`CACHE_TTL_S` seconds keyed by the user and
a SHA-256 of the password (never the password itself), so a client does not pay 4096 PBKDF2
rounds and a ZooKeeper read per request. Failures are not cached.

Thread-safety: called from the web server's worker threads; the cache has a lock. Blocking
(ZooKeeper read, PBKDF2).
"""

from __future__ import annotations

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


class ScramAuthenticator:
    """``authenticator(user, password) -> bool`` over the users' SCRAM credentials."""

    def __init__(self, entity_configs: EntityConfigs, *,
                 clock: Callable[[], float] = time.monotonic,
                 ttl: float = CACHE_TTL_S) -> None:
        self._configs = entity_configs
        self._clock = clock
        self._ttl = ttl
        self._accepted: dict[tuple[str, bytes], float] = {}
        self._lock = threading.Lock()

    def __call__(self, user: str, password: str) -> bool:
        key = (user, hashlib.sha256(password.encode("utf-8")).digest())
        now = self._clock()
        with self._lock:
            expiry = self._accepted.get(key)
            if expiry is not None and expiry > now:
                return True
        if not self.verify(user, password):
            return False
        with self._lock:
            if len(self._accepted) >= CACHE_SIZE:
                self._accepted = {k: t for k, t in self._accepted.items() if t > now}
                if len(self._accepted) >= CACHE_SIZE:
                    self._accepted.clear()
            self._accepted[key] = now + self._ttl
        return True

    def verify(self, user: str, password: str) -> bool:
        """Check against ZooKeeper now (no cache)."""
        if not user or not password:
            return False
        for mechanism, stored in user_credentials(self._configs, user).items():
            salted = salted_password(mechanism, password, stored.salt, stored.iterations)
            computed = credential_from_salted_password(mechanism, stored.salt, salted,
                                                       stored.iterations)
            if hmac.compare_digest(computed.stored_key, stored.stored_key):
                return True
        return False
