"""SCRAM credentials (RFC 5802 / RFC 7677) in Kafka's stored form.

A user's credential for one mechanism is what Kafka's ``ScramCredentialUtils`` writes into the
user's entity config (``/config/users/<user>``, key = the mechanism name)::

    SCRAM-SHA-256 = salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>

with ``SaltedPassword = PBKDF2-HMAC(password, salt, iterations)``,
``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")``. The password itself is never stored;
knowing the stored form is not enough to log in (RFC 5802 section 9).

Iterations are bounded as in Kafka's ``ScramMechanism``: at least 4096 and at most 16384
(:data:`MIN_ITERATIONS`, :data:`MAX_ITERATIONS`).

Everything here is pure (no I/O, any thread) except :func:`store_user_credential` and
:func:`delete_user_credential`, which write through an ``EntityConfigStore`` (blocking
ZooKeeper calls: tools call them directly, brokers on the ZooKeeper executor). The SDK and
CLI may import this module (see tests/test_layering.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
SALT_BYTES = 32

MECHANISM_CODES: dict[str, int] = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
"""Kafka's ``ScramMechanism`` type codes (the int8 of Describe/AlterUserScramCredentials;
0 is UNKNOWN)."""
MECHANISM_BY_CODE: dict[int, str] = {code: name for name, code in MECHANISM_CODES.items()}

_HASHES: dict[str, str] = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}


class CredentialFormatError(ValueError):
    """A stored credential string that is not in Kafka's form."""


@dataclass(frozen=True)
class ScramCredential:
    """One mechanism's stored credential (the salted keys, never the password)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_string(self) -> str:
        """Kafka's string form (``ScramCredentialUtils.credentialToString``)."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    def scramp_auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """What scramp's ``auth_fn`` returns: (salt, stored_key, server_key, iterations)."""
        return self.salt, self.stored_key, self.server_key, self.iterations


def hash_name(mechanism: str) -> str:
    """hashlib's name of a SCRAM mechanism's hash; ValueError for another mechanism."""
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise ValueError(f"not a SCRAM mechanism: {mechanism!r} (one of "
                         f"{', '.join(SCRAM_MECHANISMS)})") from None


def check_iterations(iterations: int) -> None:
    """ValueError outside [MIN_ITERATIONS, MAX_ITERATIONS] (Kafka's bounds)."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"SCRAM iterations must be within [{MIN_ITERATIONS}, "
                         f"{MAX_ITERATIONS}], got {iterations}")


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword: PBKDF2 with the mechanism's HMAC (what a client sends in
    AlterUserScramCredentials, so the password never leaves it)."""
    return hashlib.pbkdf2_hmac(hash_name(mechanism), password.encode("utf-8"), salt,
                               iterations)


def credential_from_salted_password(mechanism: str, salt: bytes, salted: bytes,
                                    iterations: int) -> ScramCredential:
    """The stored keys of a salted password (Kafka's ``ScramFormatter.generateCredential``)."""
    name = hash_name(mechanism)
    client_key = hmac.new(salted, b"Client Key", name).digest()
    stored_key = hashlib.new(name, client_key).digest()
    server_key = hmac.new(salted, b"Server Key", name).digest()
    return ScramCredential(salt, stored_key, server_key, iterations)


def new_salt() -> bytes:
    return os.urandom(SALT_BYTES)


def make_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                    *, salt: bytes | None = None) -> str:
    """A new credential for ``password`` in Kafka's string form (random salt unless given).
    ValueError for a non-SCRAM mechanism, an empty password or iterations out of bounds."""
    if not password:
        raise ValueError("a SCRAM password must not be empty")
    check_iterations(iterations)
    salt = new_salt() if salt is None else salt
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted_password(mechanism, salt, salted, iterations).to_string()


def parse_credential(text: str) -> ScramCredential:
    """Kafka's string form -> :class:`ScramCredential`; CredentialFormatError otherwise."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise CredentialFormatError(f"not a SCRAM credential: {part!r} has no '='")
        fields[key.strip()] = value.strip()
    missing = [k for k in ("salt", "stored_key", "server_key", "iterations") if k not in fields]
    if missing:
        raise CredentialFormatError(f"SCRAM credential lacks {', '.join(missing)}")
    try:
        return ScramCredential(
            salt=base64.b64decode(fields["salt"], validate=True),
            stored_key=base64.b64decode(fields["stored_key"], validate=True),
            server_key=base64.b64decode(fields["server_key"], validate=True),
            iterations=int(fields["iterations"]))
    except (binascii.Error, ValueError) as exc:
        raise CredentialFormatError(f"SCRAM credential is malformed: {exc}") from None


def credentials_of(config: Mapping[str, str]) -> dict[str, ScramCredential]:
    """The SCRAM credentials in a user's entity config map (mechanism -> credential);
    malformed entries are left out."""
    out: dict[str, ScramCredential] = {}
    for mechanism in SCRAM_MECHANISMS:
        text = config.get(mechanism)
        if text is None:
            continue
        try:
            out[mechanism] = parse_credential(text)
        except CredentialFormatError:
            continue
    return out


class EntityConfigs(Protocol):
    """What the writers below need of ``catalog.entity_configs.EntityConfigStore``."""

    def get(self, path: str) -> dict[str, str]: ...

    def alter(self, path: str, updates: Mapping[str, str | None]) -> dict[str, str]: ...


def _user_path(user: str) -> str:
    from loglake.catalog.entity_configs import entity_path  # (blocking side only)

    return entity_path(user=user)


def store_user_credential(entity_configs: EntityConfigs, user: str, mechanism: str,
                          password: str, iterations: int = DEFAULT_ITERATIONS) -> str:
    """Create or replace ``user``'s credential for ``mechanism`` in ``/config/users/<user>``
    (as ``kafka-configs --alter --add-config 'SCRAM-SHA-256=[password=..]'`` does); the
    user's other keys (quotas, the other mechanism) stay. Blocking. Returns the stored form."""
    if not user:
        raise ValueError("a SCRAM user name must not be empty")
    text = make_credential(mechanism, password, iterations)
    entity_configs.alter(_user_path(user), {mechanism: text})
    return text


def delete_user_credential(entity_configs: EntityConfigs, user: str,
                           mechanism: str | None = None) -> None:
    """Remove ``user``'s credential for ``mechanism`` (None: every SCRAM mechanism).
    Blocking; removing what is absent is a no-op."""
    mechanisms = SCRAM_MECHANISMS if mechanism is None else (mechanism,)
    for name in mechanisms:
        hash_name(name)
    entity_configs.alter(_user_path(user), dict.fromkeys(mechanisms))


def user_credentials(entity_configs: EntityConfigs, user: str) -> dict[str, ScramCredential]:
    """``user``'s SCRAM credentials (mechanism -> credential). Blocking."""
    return credentials_of(entity_configs.get(_user_path(user)))


CredentialLookup = Callable[[str, str], ScramCredential | None]
"""(user, mechanism) -> the user's credential, or None for an unknown user."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
