"""SaslHandshake (v0-1) and SaslAuthenticate (v0-2): Kafka's SASL authentication in-band.

Kafka 4.0's ranges (KIP-896 kept SaslHandshake v0 for old kafka-python). A client sends
SaslHandshake v1 naming a mechanism, then SaslAuthenticate requests carrying the mechanism's
tokens (PLAIN: one; SCRAM: client-first, client-final), as in ``SaslServerAuthenticator``:

* a mechanism the listener does not enable: UNSUPPORTED_SASL_MECHANISM with the enabled list;
* tokens in the wrong order (SaslAuthenticate before the handshake, a second handshake during
  the exchange, a token after completion): ILLEGAL_SASL_STATE;
* bad credentials: SASL_AUTHENTICATION_FAILED with a message that does not say whether the
  user exists, answered after ``connection.failed.authentication.delay.ms``;
* on a PLAINTEXT/SSL connection, or an authenticated one that is not re-authenticating:
  ILLEGAL_SASL_STATE (Kafka's ``KafkaApis`` answers), the connection stays open.

Each failure but the last makes the connection serve nothing more (security/sasl_gate.py).

SaslHandshake v0 is served as Kafka 3.9 serves it (kafka-python before 2.1 sends it; KIP-896
kept it in Kafka 4.0 for that reason): after a successful v0 handshake the mechanism's tokens
travel unframed, each a size-prefixed raw token without a Kafka header, answered with the
mechanism's raw size-prefixed token (PLAIN: an empty one) by :func:`sasl_unframed_token`, which
broker/server.py calls while ``sasl_gate.expects_unframed_token``; a failure gets no answer,
the connection is closed after ``connection.failed.authentication.delay.ms`` (there is no error
field to carry it), and no re-authentication follows (it needs SaslAuthenticate v1).

On success the session's principal becomes ``User:<name>``. KIP-368: with
``connections.max.reauth.ms`` > 0 the session expires that long after authenticating and v1+
responses carry ``session_lifetime_ms``; a client that sent SaslAuthenticate v1+ may
re-authenticate on the same connection (SaslHandshake + SaslAuthenticate again, same
mechanism, same principal, else SASL_AUTHENTICATION_FAILED and the connection is closed).

SCRAM credentials are read from ZooKeeper (``/config/users/<user>``) on the ZooKeeper
executor at each login; nothing else blocks. The last credentials read of each user are kept
(:class:`CredentialFallback`, bounded; loaded for every user at start and kept current from
config change notifications by :class:`CredentialCacheFeed`, and updated by each login's read)
and used only when ZooKeeper cannot be read (a reconnection, a session expiry, an outage):
Kafka's brokers log users in from their in-memory credential cache then, so clients and the
other brokers can still (re)connect and re-authenticate; a user seen as deleted or changed
while ZooKeeper answers is forgotten or replaced at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake.broker.codec import FrameError, RequestFrame, build, response_class
from loglake.broker.security import sasl_gate
from loglake.broker.security.principal import KafkaPrincipal
from loglake.broker.security.sasl_mechanisms import (
    PLAIN,
    IllegalSaslState,
    PlainExchange,
    SaslFailure,
    ScramExchange,
)
from loglake.broker.security.scram_credentials import (
    ScramCredential,
    credentials_of,
    user_credentials,
)
from loglake.broker.security.session import Session, uses_sasl
from loglake.errors import LoglakeError

if TYPE_CHECKING:
    from loglake.broker.services import BrokerServices

log = logging.getLogger(__name__)
HANDSHAKE_KEY = 17
AUTHENTICATE_KEY = 36


def _handshake_response(version: int, error: ErrorCode, mechanisms: tuple[str, ...]) -> Any:
    return build(response_class(HANDSHAKE_KEY, version),
                 {"error_code": error, "mechanisms": list(mechanisms)})


def _authenticate_response(version: int, error: ErrorCode, message: str | None = None,
                           auth_bytes: bytes = b"", lifetime_ms: int = 0) -> Any:
    return build(response_class(AUTHENTICATE_KEY, version),
                 {"error_code": error, "error_message": message, "auth_bytes": auth_bytes,
                  "session_lifetime": lifetime_ms})


async def sasl_handshake(services: BrokerServices, frame: RequestFrame) -> Any:
    session = frame.session
    version = frame.api_version
    if not uses_sasl(session.security_protocol):
        return _handshake_response(version, ErrorCode.illegal_sasl_state, ())
    state = sasl_gate.connection_state(session, services.config)
    assert state.settings is not None
    enabled = state.settings.mechanisms
    mechanism = frame.body.mechanism
    if session.authenticated:
        if state.stage != sasl_gate.COMPLETE or not state.supports_reauthentication:
            # Kafka's KafkaApis: a handshake on an authenticated connection that cannot
            # re-authenticate is answered, nothing else happens
            return _handshake_response(version, ErrorCode.illegal_sasl_state, enabled)
        if mechanism != state.mechanism:
            log.info("re-authentication from %s with %s refused: the session used %s",
                     session.client_host, mechanism, state.mechanism)
            sasl_gate.fail(session, f"re-authentication changed the mechanism to {mechanism}")
            return _handshake_response(version, ErrorCode.unsupported_sasl_mechanism, enabled)
        state.reauthenticating = True
    elif state.stage != sasl_gate.HANDSHAKE:
        sasl_gate.fail(session, "a second SaslHandshake during authentication")
        return _handshake_response(version, ErrorCode.illegal_sasl_state, enabled)
    if mechanism not in enabled:
        log.info("SASL mechanism %r from %s on listener %s is not enabled (%s)", mechanism,
                 session.client_host, session.listener, ", ".join(enabled))
        sasl_gate.fail(session, f"unsupported SASL mechanism {mechanism}")
        return _handshake_response(version, ErrorCode.unsupported_sasl_mechanism, enabled)
    state.mechanism = mechanism
    state.exchange = (PlainExchange(state.settings.plain_users) if mechanism == PLAIN
                      else ScramExchange(mechanism))
    state.stage = sasl_gate.AUTHENTICATE
    state.unframed = version == 0
    return _handshake_response(version, ErrorCode.none, enabled)


async def sasl_unframed_token(services: BrokerServices, session: Session, token: bytes) -> bytes:
    """One raw SASL token after a SaslHandshake v0: the size-prefixed raw answer; raises
    FrameError (the connection is closed, after the failed-authentication delay) on failure."""
    state = sasl_gate.connection_state(session, services.config)
    exchange = state.exchange
    assert exchange is not None and state.settings is not None
    try:
        answer = await _evaluate(services, exchange, token)
    except (IllegalSaslState, SaslFailure, LoglakeError) as exc:
        log.info("Failed authentication with %s on listener %s (unframed %s: %s)",
                 session.client_host, session.listener, exchange.mechanism, exc)
        if not isinstance(exc, LoglakeError) and state.settings.failed_authentication_delay_s:
            await asyncio.sleep(state.settings.failed_authentication_delay_s)
        sasl_gate.fail(session, "authentication failed")
        raise FrameError(f"SASL {exchange.mechanism} authentication failed (tokens unframed "
                         "after SaslHandshake v0): closing") from None
    if exchange.complete:
        assert exchange.username is not None
        lifetime_ms = state.settings.max_reauth_ms if state.settings.max_reauth_ms > 0 else 0
        session.principal = KafkaPrincipal.user(exchange.username)
        session.sasl_mechanism = exchange.mechanism
        session.expires_at = time.monotonic() + lifetime_ms / 1000 if lifetime_ms else None
        session.authenticated = True
        sasl_gate.authenticated(session)
    return len(answer).to_bytes(4, "big") + answer


async def sasl_authenticate(services: BrokerServices, frame: RequestFrame) -> Any:
    session = frame.session
    version = frame.api_version
    if not uses_sasl(session.security_protocol):
        return _authenticate_response(
            version, ErrorCode.illegal_sasl_state,
            "SaslAuthenticate request received after successful authentication")
    state = sasl_gate.connection_state(session, services.config)
    assert state.settings is not None
    if session.authenticated and not state.reauthenticating:
        return _authenticate_response(
            version, ErrorCode.illegal_sasl_state,
            "SaslAuthenticate request received after successful authentication")
    exchange = state.exchange
    if state.stage != sasl_gate.AUTHENTICATE or exchange is None:
        sasl_gate.fail(session, "SaslAuthenticate before SaslHandshake")
        return _authenticate_response(
            version, ErrorCode.illegal_sasl_state,
            "Unexpected SaslAuthenticate request: send SaslHandshake first")
    token = bytes(frame.body.auth_bytes)
    if len(token) > state.settings.max_receive_size:
        sasl_gate.fail(session, "oversized SASL token")
        raise FrameError(f"SASL token of {len(token)} bytes exceeds "
                         f"sasl.server.max.receive.size ({state.settings.max_receive_size})")
    if version > 0:
        state.supports_reauthentication = True
    what = "re-authentication" if state.reauthenticating else "authentication"
    try:
        answer = await _evaluate(services, exchange, token)
    except IllegalSaslState as exc:
        sasl_gate.fail(session, str(exc))
        return _authenticate_response(version, ErrorCode.illegal_sasl_state, str(exc))
    except SaslFailure as exc:
        # Kafka's SaslServerAuthenticator: a mechanism's own refusal text is sent as is, a
        # SaslException's (malformed message, unknown user, bad proof) never is
        message = (str(exc) if exc.public else f"Authentication failed during {what} due to "
                   f"invalid credentials with SASL mechanism {exchange.mechanism}")
        log.debug("SASL %s from %s failed: %s", what, session.client_host, exc)
        return await _failed(session, state.settings.failed_authentication_delay_s, version,
                             message)
    except LoglakeError as exc:  # ZooKeeper unreachable: the credential could not be read
        log.warning("SASL %s of %s failed: %s", what, session.client_host, exc)
        sasl_gate.fail(session, "credentials unavailable")
        return _authenticate_response(
            version, ErrorCode.sasl_authentication_failed,
            f"Authentication failed during {what}: credentials could not be read, retry")
    if not exchange.complete:
        return _authenticate_response(version, ErrorCode.none, auth_bytes=answer)
    assert exchange.username is not None
    principal = KafkaPrincipal.user(exchange.username)
    if state.reauthenticating and principal != session.principal:
        return await _failed(
            session, state.settings.failed_authentication_delay_s, version,
            f"Cannot change principals during re-authentication from "
            f"{session.principal.principal_type}.{session.principal.name}: "
            f"{principal.principal_type}.{principal.name}")
    lifetime_ms = state.settings.max_reauth_ms if state.settings.max_reauth_ms > 0 else 0
    session.principal = principal
    session.sasl_mechanism = exchange.mechanism
    session.expires_at = time.monotonic() + lifetime_ms / 1000 if lifetime_ms else None
    session.authenticated = True
    sasl_gate.authenticated(session)
    log.debug("%s of %s from %s with %s succeeded", what, principal, session.client_host,
              exchange.mechanism)
    return _authenticate_response(version, ErrorCode.none, auth_bytes=answer,
                                  lifetime_ms=lifetime_ms)


async def _evaluate(services: BrokerServices, exchange: PlainExchange | ScramExchange,
                    token: bytes) -> bytes:
    if isinstance(exchange, PlainExchange):
        return exchange.evaluate(token)
    if exchange.username is None:
        username = exchange.client_first(token)
        credential = await _credential(services, username, exchange.mechanism)
        return exchange.server_first(credential)
    return exchange.client_final(token)


class CredentialFallback:
    """The last SCRAM credentials read from ZooKeeper per user, for logins while ZooKeeper
    cannot be read (see the module docstring). At most :attr:`limit` users (least recently
    read dropped first). Event loop only."""

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._users: OrderedDict[tuple[int, str], dict[str, ScramCredential]] = OrderedDict()

    def remember(self, owner: object, user: str, found: dict[str, ScramCredential]) -> None:
        key = (id(owner), user)
        self._users.pop(key, None)
        if found:
            self._users[key] = found
            while len(self._users) > self.limit:
                self._users.popitem(last=False)

    def recall(self, owner: object, user: str) -> dict[str, ScramCredential] | None:
        return self._users.get((id(owner), user))

    def replace_all(self, owner: object, users: Mapping[str, dict[str, ScramCredential]]
                    ) -> None:
        """Every user of ``owner`` as just loaded (users not in ``users`` are forgotten)."""
        owner_id = id(owner)
        for key in [key for key in self._users if key[0] == owner_id]:
            del self._users[key]
        for user, found in users.items():
            self.remember(owner, user, found)


_FALLBACK = CredentialFallback()


class CredentialCacheFeed:
    """Feeds :class:`CredentialFallback` from the broker's config sync (a
    ``quotas.config_sync.UserCredentialSink``): every user's credentials at each full load, so
    logins during a ZooKeeper outage work for every user, not only those seen before, as with
    Kafka's credential cache; a user's after each change (no SCRAM keys: forgotten). ``owner``
    is the broker's catalog (what :func:`_credential` keys by). Event loop only."""

    def __init__(self, owner: object) -> None:
        self.owner = owner

    def load_all(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        _FALLBACK.replace_all(self.owner, {user: credentials_of(config)
                                           for user, config in configs.items()})

    def update(self, user: str, config: Mapping[str, str]) -> None:
        _FALLBACK.remember(self.owner, user, credentials_of(config))


async def _credential(services: BrokerServices, username: str,
                      mechanism: str) -> ScramCredential | None:
    catalog = services.zk.catalog
    if not catalog.connected:
        # a read would wait for the reconnection: answer from the cache at once, as Kafka's
        # brokers always do (it holds every user: a miss is an unknown user)
        cached = _FALLBACK.recall(catalog, username)
        log.info("ZooKeeper disconnected: logging %s in with the credentials last read%s",
                 username, "" if cached is not None else " (none: unknown user)")
        return None if cached is None else cached.get(mechanism)
    try:
        found = await services.zk.call(
            lambda: user_credentials(catalog.entity_configs(), username))
    except LoglakeError:
        cached = _FALLBACK.recall(catalog, username)
        if cached is None:
            raise
        log.info("ZooKeeper unavailable: logging %s in with the credentials last read",
                 username)
        found = cached
    else:
        _FALLBACK.remember(catalog, username, found)
    return found.get(mechanism)


async def _failed(session: Session, delay_s: float, version: int, message: str) -> Any:
    """SASL_AUTHENTICATION_FAILED after the failed-authentication delay; the connection
    serves nothing more."""
    log.info("Failed authentication with %s on listener %s (%s)", session.client_host,
             session.listener, message)
    if delay_s > 0:
        await asyncio.sleep(delay_s)
    sasl_gate.fail(session, "authentication failed")
    return _authenticate_response(version, ErrorCode.sasl_authentication_failed, message)
