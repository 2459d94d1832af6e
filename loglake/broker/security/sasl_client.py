"""The client side of SASL for the broker's own connections to other brokers.

:func:`sasl_client_authenticate` runs Kafka's exchange over an open connection (after TLS on
SASL_SSL): SaslHandshake v1 naming the mechanism, then SaslAuthenticate v2 with the
mechanism's tokens:

* PLAIN: one token ``NUL username NUL password``;
* SCRAM-SHA-256/512 (scramp's client): client-first, then client-final; the server's final
  message is checked (a server that does not know the password cannot forge it).

Any refusal (an error code in either response, a bad server signature) raises
:class:`~loglake.errors.SaslAuthenticationError`; connection errors propagate as they are.
It returns the session lifetime the server granted (``session_lifetime_ms`` of the last
SaslAuthenticate response; 0: unlimited): KIP-368, the caller re-authenticates the same
connection before it ends (:func:`reauthentication_delay_s`, as Kafka's
``SaslClientAuthenticator``), else the server closes it at its next request.
``request(api_key, version, body)`` is ``BrokerConnection.request``: it sends one request and
returns the decoded response. Runs on the event loop; the client's PBKDF2 (~ms for 4096
iterations) runs there once per connection, never per request.
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Awaitable, Callable
from typing import Any

import scramp
from kio.schema.errors import ErrorCode

from loglake.broker.security.scram_credentials import MIN_ITERATIONS, SCRAM_MECHANISMS
from loglake.errors import SaslAuthenticationError

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
HANDSHAKE_VERSION = 1
AUTHENTICATE_VERSION = 2
PLAIN = "PLAIN"
REAUTH_WINDOW = (0.85, 0.95)
"""Kafka's client re-authenticates between 85 % and 95 % of the session lifetime (a random
point, so connections made together do not re-authenticate together)."""

Request = Callable[[int, int, dict[str, Any]], Awaitable[Any]]


async def sasl_client_authenticate(request: Request, mechanism: str, username: str,
                                   password: str) -> int:
    """Authenticate the connection behind ``request`` as ``username`` (see the module
    docstring); SaslAuthenticationError when the broker refuses. Returns the session lifetime
    in milliseconds (0: the session does not expire)."""
    if mechanism != PLAIN and mechanism not in SCRAM_MECHANISMS:
        raise SaslAuthenticationError(
            f"SASL mechanism {mechanism} is not supported by loglake's broker client "
            f"(PLAIN, {', '.join(SCRAM_MECHANISMS)})")
    handshake = await request(SASL_HANDSHAKE, HANDSHAKE_VERSION, {"mechanism": mechanism})
    if handshake.error_code != ErrorCode.none:
        raise SaslAuthenticationError(
            f"SaslHandshake for {mechanism} refused: {handshake.error_code.name.upper()} "
            f"(the broker enables {', '.join(handshake.mechanisms) or 'no mechanism'})")
    if mechanism == PLAIN:
        response = await _authenticate(request, f"\x00{username}\x00{password}".encode())
        return _lifetime_ms(response)
    client = scramp.ScramClient([mechanism], username, password)
    try:
        server_first = await _authenticate(request, client.get_client_first().encode())
        _check_iterations(mechanism, bytes(server_first.auth_bytes))
        client.set_server_first(bytes(server_first.auth_bytes).decode("utf-8"))
        server_final = await _authenticate(request, client.get_client_final().encode())
        client.set_server_final(bytes(server_final.auth_bytes).decode("utf-8"))
    except (scramp.ScramException, UnicodeDecodeError) as exc:
        raise SaslAuthenticationError(f"{mechanism} exchange with the broker failed: {exc}"
                                      ) from None
    return _lifetime_ms(server_final)


def reauthentication_delay_s(lifetime_ms: int) -> float | None:
    """Seconds after a login when the client re-authenticates (None: never)."""
    if lifetime_ms <= 0:
        return None
    return lifetime_ms / 1000 * random.uniform(*REAUTH_WINDOW)


def _lifetime_ms(response: Any) -> int:
    """``session_lifetime_ms`` of a SaslAuthenticate v1+ response (kio decodes a timedelta)."""
    lifetime = getattr(response, "session_lifetime", None)
    if isinstance(lifetime, datetime.timedelta):
        return max(0, int(lifetime.total_seconds() * 1000))
    return max(0, int(lifetime or 0))


def _check_iterations(mechanism: str, server_first: bytes) -> None:
    """Kafka's ``ScramSaslClient``: a server asking for fewer than MIN_ITERATIONS is refused."""
    for attribute in server_first.split(b","):
        if attribute.startswith(b"i="):
            text = attribute[2:].decode("ascii", "replace")
            if not text.isdigit() or int(text) < MIN_ITERATIONS:
                raise SaslAuthenticationError(
                    f"Requested iterations {text} is less than the minimum {MIN_ITERATIONS} "
                    f"for {mechanism}")


async def _authenticate(request: Request, token: bytes) -> Any:
    response = await request(SASL_AUTHENTICATE, AUTHENTICATE_VERSION, {"auth_bytes": token})
    if response.error_code != ErrorCode.none:
        raise SaslAuthenticationError(
            f"SaslAuthenticate refused: {response.error_code.name.upper()}: "
            f"{response.error_message or ''}".rstrip(": "))
    return response
