"""Server side of the SASL mechanisms: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802,
RFC 7677; the tests check it against ``scramp``'s client, and the broker's own client uses
scramp).

Each exchange is a small state machine fed the client's tokens (SaslAuthenticate's
``auth_bytes``) and answering the server's; it raises :class:`SaslFailure` when the client
fails, with a message that is safe to send (it never says whether the user exists, as
Kafka's ``SaslServerAuthenticator``). Pure: no I/O. The SCRAM exchange is split so the
caller can look the user's credential up (a ZooKeeper read) between reading the client's first
message and answering it:

    PLAIN:  evaluate(token) -> b""                            (one step, complete)
    SCRAM:  client_first(token) -> username
            server_first(credential or None) -> server-first   (None: fails)
            client_final(token) -> server-final               (complete)

The PBKDF2 of SCRAM runs on the client; the server's work per login is a few HMACs.
Not thread-safe: one exchange per connection, used from the event loop.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

from loglake.broker.security.scram_credentials import (
    MIN_ITERATIONS,
    ScramCredential,
    hash_name,
)

PLAIN = "PLAIN"


class SaslFailure(Exception):
    """The client failed to authenticate (the message may be sent to it)."""


class IllegalSaslState(Exception):
    """A token arrived when the exchange expects none (ILLEGAL_SASL_STATE)."""


class PlainExchange:
    """PLAIN: ``[authzid] NUL authcid NUL passwd`` against configured users (Kafka's
    ``PlainSaslServer``: an authorization id other than the user name is refused)."""

    mechanism = PLAIN

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.complete = False
        self.username: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise IllegalSaslState("PLAIN authentication is already complete")
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslFailure("Invalid SASL/PLAIN response: expected 3 tokens, got "
                              f"{len(parts)}")
        try:
            authzid, username, password = (part.decode("utf-8") for part in parts)
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SASL/PLAIN response: not UTF-8") from None
        if not username:
            raise SaslFailure("Authentication failed: username not specified")
        if not password:
            raise SaslFailure("Authentication failed: password not specified")
        if authzid and authzid != username:
            raise SaslFailure("Authentication failed: Client requested an authorization id "
                              "that is different from username")
        expected = self._users.get(username)
        # compare even for an unknown user, so the answer takes as long either way
        matches = hmac.compare_digest(password.encode("utf-8"),
                                      (expected if expected is not None else "\x00").encode())
        if expected is None or not matches:
            raise SaslFailure("Authentication failed: Invalid username or password")
        self.complete = True
        self.username = username
        return b""


def _sasl_name_to_user(name: str) -> str:
    """RFC 5802's saslname: ``=2C`` is ``,`` and ``=3D`` is ``=`` (Kafka's
    ``ScramFormatter.username``)."""
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramExchange:
    """SCRAM-SHA-256/512 without channel binding (as Kafka), in three calls (see the module
    docstring). The checks are Kafka's ``ScramSaslServer``'s: the client-final nonce must end
    with the server-first nonce (librdkafka 2.0.x repeats the client nonce in front, and Kafka
    accepts it), the proof must match the stored key; the server-final message carries the
    server signature."""

    def __init__(self, mechanism: str) -> None:
        self.mechanism = mechanism
        self._hash = hash_name(mechanism)
        self.complete = False
        self.username: str | None = None
        self._client_first_bare = ""
        self._client_nonce = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._stage = "client_first"

    def client_first(self, token: bytes) -> str:
        """Read the client-first message; returns the user name whose credential the caller
        looks up for :meth:`server_first`."""
        self._expect("client_first")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SCRAM client first message: not UTF-8") from None
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise SaslFailure("Invalid SCRAM client first message (channel binding is not "
                              "supported)")
        if parts[1] and not parts[1].startswith("a="):
            raise SaslFailure("Invalid SCRAM client first message: bad authorization id")
        authzid = parts[1][2:]
        attributes = parts[2].split(",")
        if (len(attributes) < 2 or not attributes[0].startswith("n=") or len(attributes[0]) < 3
                or not attributes[1].startswith("r=") or len(attributes[1]) < 3):
            raise SaslFailure("Invalid SCRAM client first message: expected n=<user>,r=<nonce>")
        username = _sasl_name_to_user(attributes[0][2:])
        if authzid and _sasl_name_to_user(authzid) != username:
            raise SaslFailure("Authentication failed: Client requested an authorization id "
                              "that is different from username")
        self._client_first_bare = parts[2]
        self._client_nonce = attributes[1][2:]
        self.username = username
        self._stage = "server_first"
        return username

    def server_first(self, credential: ScramCredential | None) -> bytes:
        """The server-first message for the user's stored credential; SaslFailure when the
        user has none for this mechanism."""
        self._expect("server_first")
        if credential is None:
            raise SaslFailure("Authentication failed: Invalid user credentials")
        if credential.iterations < MIN_ITERATIONS:
            raise SaslFailure("Authentication failed: Invalid user credentials")
        self._credential = credential
        self._nonce = self._client_nonce + secrets.token_urlsafe(24)
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._stage = "client_final"
        return self._server_first.encode("utf-8")

    def client_final(self, token: bytes) -> bytes:
        """Check the client's proof; the server-final message (with the server's signature)
        on success, SaslFailure otherwise."""
        self._expect("client_final")
        self._stage = "done"
        credential = self._credential
        assert credential is not None
        try:
            text = token.decode("utf-8")
            without_proof, sep, proof_text = text.rpartition(",p=")
            proof = base64.b64decode(proof_text, validate=True)
        except (UnicodeDecodeError, binascii.Error):
            raise SaslFailure("Authentication failed: Invalid client final message") from None
        attributes = without_proof.split(",")
        if (not sep or len(attributes) < 2 or not attributes[0].startswith("c=")
                or not attributes[1].startswith("r=")):
            raise SaslFailure("Authentication failed: Invalid client final message")
        if not attributes[1][2:].endswith(self._nonce):
            raise SaslFailure("Invalid client nonce in the final client message.")
        auth_message = ",".join((self._client_first_bare, self._server_first,
                                 without_proof)).encode("utf-8")
        signature = hmac.new(credential.stored_key, auth_message, self._hash).digest()
        if len(proof) != len(signature):
            raise SaslFailure("Authentication failed: Invalid user credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(),
                                   credential.stored_key):
            raise SaslFailure("Authentication failed: Invalid user credentials")
        server_signature = hmac.new(credential.server_key, auth_message, self._hash).digest()
        self.complete = True
        self._credential = None
        return b"v=" + base64.b64encode(server_signature)

    def _expect(self, stage: str) -> None:
        if self._stage != stage:
            raise IllegalSaslState(f"SCRAM exchange expected {self._stage}, got {stage}")
