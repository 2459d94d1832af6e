"""The console's optional login (``loglake console --basic-auth``): HTTP Basic against the
cluster's SCRAM users (:class:`loglake.basic_auth.ScramAuthenticator`, shared with the schema
registry).

:class:`LoginMiddleware` wraps the whole application: every HTTP request except
``/healthz`` must carry credentials the authenticator accepts, else it gets ``401`` with
``WWW-Authenticate: Basic realm="loglake console"`` (a browser then asks for them). An
accepted request runs with :data:`CURRENT_LOGIN` set to its :class:`Login` (user, password and
the SCRAM mechanism that matched), a context variable: Starlette copies it into the worker
threads that run the request's blocking calls, so :class:`~loglake.console.context.
ConsoleContext`'s client accessors act as that user (see there). Background tasks (the lag
sampler) run without a login and use the console's own ``--command-config`` account.

Failed logins are limited (:class:`loglake.basic_auth.LoginLimiter`): after too many failures
from one client address (the TCP peer; ``X-Forwarded-For`` is not trusted) or for one user name
within the window, further attempts get ``429`` with ``Retry-After`` before any ZooKeeper read
or PBKDF2; a login accepted within the last seconds (the authenticator's success cache) still
passes, so the real user's open session is not locked out by someone guessing. Requests
without credentials (a browser's first request) and malformed headers cost nothing and are
not counted.

Passwords: kept only in the request's context and in the per-user client cache
(:mod:`loglake.console.user_clients`), in memory; never logged, never written.
"""

from __future__ import annotations

import contextvars
import html
from dataclasses import dataclass, field

from starlette.responses import HTMLResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from loglake.basic_auth import LoginLimiter, MechanismCheck, check_login, retry_after_header

REALM = "loglake console"
OPEN_PATHS = frozenset({"/healthz"})
"""Paths served without credentials (the liveness probe says nothing about the cluster)."""

@dataclass(frozen=True)
class Login:
    """A logged-in console user."""

    user: str
    password: str = field(repr=False)
    mechanism: str
    """The SCRAM mechanism whose stored credential the password matched."""


CURRENT_LOGIN: contextvars.ContextVar[Login | None] = contextvars.ContextVar(
    "loglake_console_login", default=None)


def current_login() -> Login | None:
    """The login of the request being served (None without ``--basic-auth`` and in
    background tasks)."""
    return CURRENT_LOGIN.get()


class LoginMiddleware:
    """Refuse (401) HTTP requests without accepted Basic credentials, (429) logins from an
    address or name over the failure limit; run the others with :data:`CURRENT_LOGIN` set.
    The check runs in the thread pool (ZooKeeper read, PBKDF2)."""

    def __init__(self, app: ASGIApp, *, check: MechanismCheck,
                 cached: MechanismCheck | None = None,
                 limiter: LoginLimiter | None = None) -> None:
        self.app = app
        self.check = check
        self.cached = cached
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        outcome = await check_login(scope, check=self.check, cached=self.cached,
                                    limiter=self.limiter)
        if outcome.retry_after_s is not None:
            response = HTMLResponse(
                '<div class="error" role="alert"><strong>429</strong> too many failed '
                "logins from this address or for this user: try again later</div>",
                status_code=429, headers={"Retry-After": retry_after_header(
                    outcome.retry_after_s)})
        elif outcome.unavailable is not None:  # ZooKeeper unreachable: cannot check now
            response = HTMLResponse(
                f'<div class="error" role="alert"><strong>503</strong> cannot check '
                f"the login now: {html.escape(outcome.unavailable)}</div>", status_code=503)
        elif outcome.credentials is None or outcome.mechanism is None:
            response = HTMLResponse(
                '<div class="error" role="alert"><strong>401</strong> log in with the name '
                "and password of a SCRAM user of the cluster</div>", status_code=401,
                headers={"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'})
        else:
            user, password = outcome.credentials
            token = CURRENT_LOGIN.set(Login(user, password, outcome.mechanism))
            try:
                await self.app(scope, receive, send)
            finally:
                CURRENT_LOGIN.reset(token)
            return
        await response(scope, receive, send)
