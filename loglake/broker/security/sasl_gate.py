"""The pre-authentication gate of SASL listeners and each SASL connection's state.

broker/server.py calls :func:`on_connect` when it accepts a connection and :func:`admit` for
every request once its header is decoded (before the body is handled); a non-None answer of
``admit`` is the reason the connection is closed. On PLAINTEXT and SSL listeners both do
nothing. On SASL_PLAINTEXT / SASL_SSL listeners (Kafka's ``SaslServerAuthenticator`` rules):

* before authentication only ApiVersions (before the handshake), SaslHandshake and
  SaslAuthenticate (after the handshake) are served; any other request, SaslAuthenticate
  before SaslHandshake included, closes the connection without an answer (Kafka's
  IllegalSaslStateException), and so does a frame larger than ``sasl.server.max.receive.size``;
* a connection that has not authenticated ``sasl.server.authentication.timeout.ms`` after it
  was accepted is closed (a loop timer armed by :func:`on_connect`, calling
  ``Session.close_connection``);
* once an authentication has failed (SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM,
  ILLEGAL_SASL_STATE), the connection serves nothing more: its next request closes it (the
  failure answer itself is delayed by ``connection.failed.authentication.delay.ms``, in
  handlers/sasl.py), so a client gets one attempt per connection;
* KIP-368: an authenticated session with ``expires_at`` in the past serves only SaslHandshake
  and SaslAuthenticate (re-authentication); any other request closes the connection.

Connection state (:class:`SaslConnection`, kept in ``Session.sasl_state``)::

    HANDSHAKE --SaslHandshake ok--> AUTHENTICATE --exchange complete--> COMPLETE
        |                                |                               |
        +-- refused / out of order --> FAILED <-- failed / principal changed -- (re-auth:
                                                                 SaslHandshake -> AUTHENTICATE)

Event loop only: ``admit`` and the handlers run on the loop, the timer fires there too.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loglake.broker.security.sasl_mechanisms import PlainExchange, ScramExchange
from loglake.broker.security.sasl_settings import SaslListenerSettings, listener_settings
from loglake.broker.security.session import Session, uses_sasl
from loglake.errors import InvalidConfigError

if TYPE_CHECKING:
    from loglake.config import BrokerConfig

log = logging.getLogger(__name__)

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
SASL_APIS = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})

HANDSHAKE = "handshake"
AUTHENTICATE = "authenticate"
COMPLETE = "complete"
FAILED = "failed"
FAILED_CLOSE_DELAY_S = 1.0
"""A connection whose authentication failed is closed this long after the failure answer
(time for the client to read it) unless the client closes it first."""


@dataclass
class SaslConnection:
    """One SASL connection's authentication state (see the module docstring)."""

    settings: SaslListenerSettings | None = None
    stage: str = HANDSHAKE
    mechanism: str | None = None
    exchange: PlainExchange | ScramExchange | None = field(default=None, repr=False)
    reauthenticating: bool = False
    supports_reauthentication: bool = False
    """The client sent SaslAuthenticate v1+ (it reads session_lifetime_ms), as Kafka."""
    unframed: bool = False
    """The handshake was SaslHandshake v0: until the exchange ends, every frame is a raw SASL
    token without a Kafka header, answered with a raw size-prefixed token (Kafka's
    ``enableKafkaSaslAuthenticateHeaders(false)``; see :func:`expects_unframed_token`)."""
    failure: str | None = None
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


_SETTINGS: dict[tuple[int, str], tuple[BrokerConfig, SaslListenerSettings]] = {}


def settings_for(config: BrokerConfig, listener: str) -> SaslListenerSettings:
    """The listener's SASL settings, built once per (config, listener)."""
    key = (id(config), listener)
    cached = _SETTINGS.get(key)
    if cached is None or cached[0] is not config:
        cached = (config, listener_settings(config, listener))
        _SETTINGS[key] = cached
    return cached[1]


def connection_state(session: Session, config: BrokerConfig | None = None) -> SaslConnection:
    """The session's SASL state, created on first use (settings filled once a config is
    given)."""
    state = session.sasl_state
    if not isinstance(state, SaslConnection):
        state = SaslConnection()
        session.sasl_state = state
    if state.settings is None and config is not None:
        state.settings = settings_for(config, session.listener)
    return state


def on_connect(session: Session, config: BrokerConfig) -> None:
    """A connection was accepted: on a SASL listener, create its state and arm the
    authentication time limit."""
    if not uses_sasl(session.security_protocol):
        return
    try:
        state = connection_state(session, config)
    except InvalidConfigError as exc:  # an unreadable sasl.jaas.file: no login can succeed
        log.error("SASL listener %s cannot authenticate anyone: %s", session.listener, exc)
        connection_state(session).stage = FAILED
        connection_state(session).failure = str(exc)
        return
    assert state.settings is not None
    timeout = state.settings.authentication_timeout_s
    if timeout > 0:
        state.timer = asyncio.get_running_loop().call_later(
            timeout, _authentication_timed_out, session)


def fail(session: Session, reason: str) -> None:
    """Authentication failed on ``session``'s connection: it serves nothing more, and is
    closed :data:`FAILED_CLOSE_DELAY_S` after the failure answer if the client keeps it."""
    state = connection_state(session)
    if state.stage != FAILED and session.on_authentication is not None:
        session.on_authentication(success=False, reauthentication=session.authenticated)
    state.stage = FAILED
    state.failure = reason
    state.exchange = None
    state.unframed = False
    state.cancel_timer()
    state.timer = asyncio.get_running_loop().call_later(
        FAILED_CLOSE_DELAY_S, _close, session, "authentication failed")


def authenticated(session: Session) -> None:
    """The exchange completed: the time limit no longer applies."""
    state = connection_state(session)
    if session.on_authentication is not None:
        session.on_authentication(success=True, reauthentication=state.reauthenticating)
    state.stage = COMPLETE
    state.exchange = None
    state.unframed = False
    state.reauthenticating = False
    state.cancel_timer()


def _authentication_timed_out(session: Session) -> None:
    if session.authenticated:
        return
    _close(session, "not authenticated within sasl.server.authentication.timeout.ms")


def _close(session: Session, why: str) -> None:
    state = session.sasl_state
    if isinstance(state, SaslConnection):
        state.timer = None
    log.info("closing connection from %s on listener %s: %s", session.client_host,
             session.listener, why)
    if session.close_connection is not None:
        session.close_connection()


def expects_unframed_token(session: Session) -> bool:
    """Whether the connection's next frame is a raw SASL token (after SaslHandshake v0), not a
    Kafka request: broker/server.py hands it to handlers/sasl.py's unframed exchange."""
    state = session.sasl_state
    return (isinstance(state, SaslConnection) and state.unframed
            and state.stage == AUTHENTICATE)


def admit_size(session: Session, size: int) -> str | None:
    """Checked on a frame's size before its body is read: on a SASL listener before
    authentication, a frame above ``sasl.server.max.receive.size`` closes the connection
    unread (Kafka's SaslServerAuthenticator reads at most that much before a login), so an
    unauthenticated client cannot make the broker buffer ``socket.request.max.bytes``."""
    if session.authenticated or not uses_sasl(session.security_protocol):
        return None
    state = connection_state(session)
    limit = state.settings.max_receive_size if state.settings is not None else None
    if limit is not None and size > limit:
        return (f"a frame of {size} bytes before SASL authentication exceeds "
                f"sasl.server.max.receive.size ({limit})")
    return None


def admit(session: Session, api_key: int, now: float, size: int = 0) -> str | None:
    """None if the request may be handled; else why the connection must be closed.
    ``now`` is ``time.monotonic()``; ``size`` the frame's size in bytes."""
    if not uses_sasl(session.security_protocol):
        return None
    state = connection_state(session)
    if state.stage == FAILED:
        return f"SASL authentication failed on this connection ({state.failure})"
    if not session.authenticated:
        limit = state.settings.max_receive_size if state.settings is not None else None
        if limit is not None and size > limit:
            return (f"a frame of {size} bytes before SASL authentication exceeds "
                    f"sasl.server.max.receive.size ({limit})")
        if api_key == SASL_AUTHENTICATE and state.stage == HANDSHAKE:
            # Kafka's SaslServerAuthenticator: only ApiVersions and SaslHandshake are read
            # before the handshake; anything else is an IllegalSaslStateException and the
            # channel is closed without an answer
            return "SaslAuthenticate before SaslHandshake"
        if api_key in SASL_APIS or (api_key == API_VERSIONS and state.stage == HANDSHAKE):
            return None
        return f"request with API key {api_key} before SASL authentication completed"
    if api_key in SASL_APIS:
        return None
    if session.expires_at is not None and now >= session.expires_at:
        return (f"the SASL session of {session.principal} expired (connections.max.reauth.ms) "
                "and was not re-authenticated")
    return None
