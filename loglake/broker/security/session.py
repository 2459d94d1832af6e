"""The per-connection security session: which listener a connection came in on, its security
protocol, and who it is.

One :class:`Session` exists per client connection (created by broker/server.py when the
connection is accepted) and is shared by every request frame of that connection
(``RequestFrame.session``), so the SASL handlers can set the principal once authenticated and
every later request sees it. Invariants:

* ``authenticated`` is True from the start on PLAINTEXT and SSL listeners (the principal is
  ANONYMOUS or the certificate's), and on SASL listeners only after a successful
  SaslAuthenticate; before that only ApiVersions, SaslHandshake and SaslAuthenticate are served.
* ``client_host`` is the peer's IP address without a leading slash (ACL host matching).

Event loop only (one connection's requests are handled one at a time).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loglake.broker.security.principal import ANONYMOUS, KafkaPrincipal

PLAINTEXT = "PLAINTEXT"
SSL = "SSL"
SASL_PLAINTEXT = "SASL_PLAINTEXT"
SASL_SSL = "SASL_SSL"
SECURITY_PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)


def uses_sasl(security_protocol: str) -> bool:
    return security_protocol in (SASL_PLAINTEXT, SASL_SSL)


def uses_tls(security_protocol: str) -> bool:
    return security_protocol in (SSL, SASL_SSL)


@dataclass
class Session:
    """Who a connection is (see the module docstring)."""

    listener: str = PLAINTEXT
    security_protocol: str = PLAINTEXT
    client_host: str = ""
    principal: KafkaPrincipal = ANONYMOUS
    authenticated: bool = True
    sasl_mechanism: str | None = None
    expires_at: float | None = None
    """Monotonic time after which a re-authenticated session is needed (KIP-368), or None."""
    sasl_state: Any = field(default=None, repr=False)
    """The SASL part's per-connection state (handshake done, mechanism exchange in progress,
    failed attempts); opaque to everything else."""
    close_connection: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    """Closes this connection's transport at once (set by broker/server.py when the connection
    is accepted; None for internal sessions). For timers that end a connection from outside
    its request loop (the SASL authentication time limit); safe to call more than once."""
    on_authentication: Callable[..., None] | None = field(default=None, repr=False,
                                                         compare=False)
    """Told of each authentication outcome on this connection, as
    ``on_authentication(success=..., reauthentication=...)`` (the connection metrics; set by
    broker/server.py, called by security/sasl_gate.py); None: nobody listens."""
    muted_until: float = field(default=0.0, repr=False, compare=False)
    """Monotonic time before which the connection's next request is not read (a client quota
    throttle, KIP-219: broker/quotas/enforcement.py sets it, broker/server.py waits it out
    after writing the response); 0: not muted."""

    @classmethod
    def for_listener(cls, listener: str, security_protocol: str, client_host: str) -> Session:
        return cls(listener=listener, security_protocol=security_protocol,
                   client_host=client_host, authenticated=not uses_sasl(security_protocol))


def internal_session() -> Session:
    """A session for requests the broker makes of itself (no network peer): PLAINTEXT,
    ANONYMOUS, authenticated."""
    return Session()
