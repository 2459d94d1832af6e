"""Per-user Kafka clients of a console with login (``--basic-auth``): :class:`UserClients`.

When a user is logged in, the console's SDK clients log in to the brokers as that user (SASL
SCRAM with the user's own name, password and the mechanism their HTTP password matched), the
rest of the settings (TLS trust, client certificate, untranslated librdkafka keys) from the
console's ``--command-config``: :func:`user_security`. So the brokers' ACLs decide what each
user sees and may do.

Cache: one :class:`UserEntry` (security settings, an :class:`~loglake.client.Admin`, a
:class:`~loglake.client.Producer` made on first use, and the user's latest Metadata topic list
and DescribeGroups verdicts with their times, which the often-polled chart endpoints reuse for
a few seconds) per (user, SHA-256 of the password), at
most :data:`MAX_USERS`, least recently used evicted first; an entry unused for
:data:`IDLE_S` seconds is dropped at the next lookup. Dropped entries' clients are closed
(outside the lock). A changed password is a new key, the old entry ages out. :meth:`close`
closes everything (the application's shutdown).

Thread-safety: lookups come from Starlette's worker threads; one lock guards the map. Client
creation and closing block (librdkafka), so they run in those threads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from loglake.client import Admin, Producer, SecurityConfig
from loglake.console.login import Login
from loglake.errors import LoglakeError

MAX_USERS = 32
MAX_GROUP_ANSWERS = 256
IDLE_S = 600.0
CLOSE_TIMEOUT_S = 5.0

_SASL_PROTOCOL = {"PLAINTEXT": "SASL_PLAINTEXT", "SSL": "SASL_SSL",
                  "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL"}


def user_security(base: SecurityConfig, login: Login) -> SecurityConfig:
    """``base`` (the console's own client settings) logging in as ``login``: SASL over the
    same transport (PLAINTEXT -> SASL_PLAINTEXT, SSL -> SASL_SSL), the login's SCRAM
    mechanism, user and password."""
    return dataclasses.replace(
        base, protocol=_SASL_PROTOCOL[base.protocol],  # type: ignore[arg-type]
        sasl_mechanism=login.mechanism, sasl_username=login.user, sasl_password=login.password)


@dataclass
class UserEntry:
    """One user's clients (see the module)."""

    security: SecurityConfig
    admin: Admin
    bootstrap: str
    producer: Producer | None = None
    last_used: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    topics: tuple[float, frozenset[str]] | None = None
    """(monotonic time of the answer, the topics the user's Metadata listed)."""
    groups: OrderedDict[str, tuple[float, bool]] = field(default_factory=OrderedDict)
    """group id -> (monotonic time of the answer, whether DescribeGroups allowed it); at
    most :data:`MAX_GROUP_ANSWERS`, oldest dropped first."""

    def remember_group(self, group_id: str, at: float, allowed: bool) -> None:
        """Keep the user's latest DescribeGroups verdict on ``group_id`` (bounded)."""
        with self.lock:
            self.groups[group_id] = (at, allowed)
            self.groups.move_to_end(group_id)
            while len(self.groups) > MAX_GROUP_ANSWERS:
                self.groups.popitem(last=False)

    def close(self) -> None:
        """Close the clients (blocking; an undelivered produce is dropped)."""
        if self.producer is not None:
            with contextlib.suppress(LoglakeError):
                self.producer.close(timeout=CLOSE_TIMEOUT_S)
            self.producer = None
        self.admin.close()


AdminFactory = Callable[[str, SecurityConfig], Admin]
"""(bootstrap, security) -> a new Admin."""


class UserClients:
    """A bounded cache of per-user clients (see the module)."""

    def __init__(self, make_admin: AdminFactory, *, max_users: int = MAX_USERS,
                 idle_s: float = IDLE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._make_admin = make_admin
        self._max_users = max_users
        self._idle_s = idle_s
        self._clock = clock
        self._entries: OrderedDict[tuple[str, bytes], UserEntry] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def entry(self, login: Login, security: SecurityConfig, bootstrap: str) -> UserEntry:
        """``login``'s clients, made on first use (blocking)."""
        key = (login.user, hashlib.sha256(login.password.encode("utf-8")).digest())
        now = self._clock()
        dropped: list[UserEntry] = []
        with self._lock:
            for old_key in [k for k, e in self._entries.items()
                            if now - e.last_used > self._idle_s and k != key]:
                dropped.append(self._entries.pop(old_key))
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                found.last_used = now
        try:
            if found is not None:
                return found
            made = UserEntry(security, self._make_admin(bootstrap, security), bootstrap,
                             last_used=now)
            with self._lock:
                found = self._entries.get(key)
                if found is not None:  # made meanwhile by another request of this user
                    dropped.append(made)
                    return found
                self._entries[key] = made
                while len(self._entries) > self._max_users:
                    dropped.append(self._entries.popitem(last=False)[1])
            return made
        finally:
            for entry in dropped:
                entry.close()

    def close(self) -> None:
        """Close every user's clients (blocking)."""
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for entry in entries:
            entry.close()
