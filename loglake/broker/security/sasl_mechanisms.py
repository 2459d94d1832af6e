"""Server side of the SASL mechanisms: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802,
RFC 7677, with ``scramp``).

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

import hmac

import scramp

from loglake.broker.security.scram_credentials import SCRAM_MECHANISMS, ScramCredential

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
    docstring)."""

    def __init__(self, mechanism: str) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self.complete = False
        self.username: str | None = None
        self._client_first: str | None = None
        self._server: scramp.core.ScramServer | None = None
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
        authzid = parts[1][2:] if parts[1].startswith("a=") else ""
        if parts[1] and not parts[1].startswith("a="):
            raise SaslFailure("Invalid SCRAM client first message: bad authorization id")
        first = parts[2].split(",", 1)[0]
        if not first.startswith("n=") or len(first) <= 2:
            raise SaslFailure("Invalid SCRAM client first message: no user name")
        username = _sasl_name_to_user(first[2:])
        if authzid and _sasl_name_to_user(authzid) != username:
            raise SaslFailure("Authentication failed: Client requested an authorization id "
                              "that is different from username")
        self._client_first = text
        self.username = username
        self._stage = "server_first"
        return username

    def server_first(self, credential: ScramCredential | None) -> bytes:
        """The server-first message for the user's stored credential; SaslFailure when the
        user has none for this mechanism."""
        self._expect("server_first")
        if credential is None:
            raise SaslFailure("Authentication failed: Invalid user credentials")
        auth_info = credential.scramp_auth_info()
        try:
            server = scramp.ScramMechanism(self.mechanism).make_server(lambda _user: auth_info)
            server.set_client_first(self._client_first)
            answer = server.get_server_first()
        except scramp.ScramException as exc:
            raise SaslFailure(f"Invalid SCRAM client first message: {exc}") from None
        self._server = server
        self._stage = "client_final"
        return answer.encode("utf-8")

    def client_final(self, token: bytes) -> bytes:
        """Check the client's proof; the server-final message (with the server's signature)
        on success, SaslFailure otherwise."""
        self._expect("client_final")
        assert self._server is not None
        self._stage = "done"
        try:
            self._server.set_client_final(token.decode("utf-8"))
            answer = self._server.get_server_final()
        except (scramp.ScramException, UnicodeDecodeError):
            raise SaslFailure("Authentication failed: Invalid user credentials") from None
        self.complete = True
        return answer.encode("utf-8")

    def _expect(self, stage: str) -> None:
        if self._stage != stage:
            raise IllegalSaslState(f"SCRAM exchange expected {self._stage}, got {stage}")
