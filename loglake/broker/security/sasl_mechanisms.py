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
import re
import secrets

from loglake.broker.security.scram_credentials import (
    MIN_ITERATIONS,
    ScramCredential,
    hash_name,
)

PLAIN = "PLAIN"


class SaslFailure(Exception):
    """The client failed to authenticate.

    ``public``: the message may be sent to the client as it is (Kafka's
    ``SaslAuthenticationException``); otherwise the client is told only that its credentials
    were invalid (Kafka's ``SaslException``, whose text ``SaslServerAuthenticator`` never
    sends: it could say whether the user exists or echo the client's message)."""

    def __init__(self, message: str, *, public: bool = True) -> None:
        super().__init__(message)
        self.public = public


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
        expected = self._users.get(username)
        # compare even for an unknown user, so the answer takes as long either way
        matches = hmac.compare_digest(password.encode("utf-8"),
                                      (expected if expected is not None else "\x00").encode())
        if expected is None or not matches:
            raise SaslFailure("Authentication failed: Invalid username or password")
        if authzid and authzid != username:  # checked after the password, as Kafka
            raise SaslFailure("Authentication failed: Client requested an authorization id "
                              "that is different from username")
        self.complete = True
        self.username = username
        return b""


# RFC 5802's grammar (section 7), as Kafka's ScramMessages reads it: the gs2 header must be
# "n" (no channel binding: "y" and "p=..." are refused, as Kafka does), an optional reserved
# "m=" attribute, then n=<saslname>,r=<nonce> and extensions <letters>=<value> (read, ignored:
# Kafka's only extension, tokenauth, is for delegation tokens, which loglake does not issue).
_SASLNAME = r"(?:[^\x00=,]|=2C|=3D)+"
_VALUE = r"[^\x00,]+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_BASE64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?P<bare>(?:m={_VALUE},)?n=(?P<saslname>{_SASLNAME}),"
    rf"r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))")
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),"
    rf"p=(?P<proof>{_BASE64})")


def _sasl_name_to_user(name: str) -> str:
    """RFC 5802's saslname: ``=2C`` is ``,`` and ``=3D`` is ``=`` (Kafka's
    ``ScramFormatter.username``; the grammar admits no other ``=``)."""
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramExchange:
    """SCRAM-SHA-256/512 without channel binding (as Kafka), in three calls (see the module
    docstring). The checks are Kafka's ``ScramSaslServer``'s: the client-final nonce must end
    with the server-first nonce (librdkafka 2.0.x repeats the client nonce in front, and Kafka
    accepts it), the proof must match the stored key; the server-final message carries the
    server signature. Messages are read with RFC 5802's grammar as Kafka's ``ScramMessages``
    (gs2 header ``n`` only, extensions read and ignored, base64 checked); beyond Kafka, the
    client-final ``c=`` must be the client-first gs2 header (RFC 5802) and user names may be
    UTF-8 (Kafka's pattern admits ASCII only). Any failure ends the exchange."""

    def __init__(self, mechanism: str) -> None:
        self.mechanism = mechanism
        self._hash = hash_name(mechanism)
        self.complete = False
        self.username: str | None = None
        self._gs2_header = ""
        self._authzid = ""
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
        self._stage = "done"  # until the message is read: a failure ends the exchange
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SCRAM client first message: not UTF-8",
                              public=False) from None
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            raise SaslFailure("Invalid SCRAM client first message format (channel binding is "
                              "not supported)", public=False)
        extensions = dict(item.split("=", 1) for item in match["extensions"][1:].split(",")
                          if item)
        if extensions.get("tokenauth", "").lower() == "true":
            raise SaslFailure("Token authentication failed: delegation tokens are not "
                              "supported", public=False)
        username = _sasl_name_to_user(match["saslname"])
        authzid = match["authzid"]
        self._authzid = _sasl_name_to_user(authzid) if authzid else ""
        self._gs2_header = text[:match.start("bare")]
        self._client_first_bare = match["bare"]
        self._client_nonce = match["nonce"]
        self.username = username
        self._stage = "server_first"
        return username

    def server_first(self, credential: ScramCredential | None) -> bytes:
        """The server-first message for the user's stored credential; SaslFailure when the
        user has none for this mechanism."""
        self._expect("server_first")
        self._stage = "done"
        if credential is None:
            raise SaslFailure("Authentication failed: Invalid user credentials", public=False)
        if self._authzid and self._authzid != self.username:  # after the lookup, as Kafka
            raise SaslFailure("Authentication failed: Client requested an authorization id "
                              "that is different from username")
        if credential.iterations < MIN_ITERATIONS:
            raise SaslFailure(f"Iterations {credential.iterations} is less than the minimum "
                              f"{MIN_ITERATIONS} for {self.mechanism}", public=False)
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
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SCRAM client final message: not UTF-8",
                              public=False) from None
        match = _CLIENT_FINAL.fullmatch(text)
        if match is None:
            raise SaslFailure("Invalid SCRAM client final message format", public=False)
        if not match["nonce"].endswith(self._nonce):
            raise SaslFailure("Invalid client nonce in the final client message.",
                              public=False)
        try:
            proof = base64.b64decode(match["proof"], validate=True)
            channel = base64.b64decode(match["channel"], validate=True)
        except binascii.Error:
            raise SaslFailure("Invalid SCRAM client final message: bad base64",
                              public=False) from None
        if channel != self._gs2_header.encode("utf-8"):
            # RFC 5802: c= carries the gs2 header of the client-first message (no binding data)
            raise SaslFailure("Invalid channel binding in the final client message",
                              public=False)
        auth_message = ",".join((self._client_first_bare, self._server_first,
                                 match["without_proof"])).encode("utf-8")
        signature = hmac.new(credential.stored_key, auth_message, self._hash).digest()
        if len(proof) != len(signature):
            raise SaslFailure("Authentication failed: Invalid client proof", public=False)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(),
                                   credential.stored_key):
            raise SaslFailure("Authentication failed: Invalid user credentials", public=False)
        server_signature = hmac.new(credential.server_key, auth_message, self._hash).digest()
        self.complete = True
        self._credential = None
        return b"v=" + base64.b64encode(server_signature)

    def _expect(self, stage: str) -> None:
        if self._stage != stage:
            raise IllegalSaslState(f"SCRAM exchange expected {self._stage}, got {stage}")
