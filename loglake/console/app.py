"""The console's Starlette application: :func:`create_app`.

Routes come from the page modules in :data:`PAGE_MODULES`; each lists
``ROUTES: list[starlette.routing.BaseRoute]`` and may define ``async def start(ctx)`` /
``async def stop(ctx)`` (run in the application's lifespan with the
:class:`~loglake.console.context.ConsoleContext`; e.g. a sampler task). To add pages, add the
module to that one list. ``/static`` serves ``static/`` (StaticFiles refuses paths that leave
the folder); ``/healthz`` answers ``ok`` once the application runs.

Errors: a :class:`~loglake.errors.LoglakeError` or ``ValueError`` escaping a handler becomes its
4xx/5xx page with the message (:func:`~loglake.console.context.error_response`); unknown paths
and methods get a 404/405 page; anything else a 500 page saying the request failed, never a
traceback (it is logged on the console's stderr).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from types import ModuleType
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from loglake.basic_auth import LoginLimiter, LoginLimits, ScramAuthenticator
from loglake.client import SecurityConfig
from loglake.console import (
    groups,
    jobs,
    overview,
    sampler,
    schemas,
    security,
    tiering,
    topic_page,
    topics,
    transactions,
)
from loglake.console.context import (
    STATIC_DIR,
    TEMPLATES_DIR,
    ConsoleContext,
    blocking,
    error_response,
    not_found,
)
from loglake.console.login import LoginMiddleware
from loglake.console.templating import install_filters
from loglake.errors import LoglakeError

log = logging.getLogger(__name__)

PAGE_MODULES: tuple[ModuleType, ...] = (overview, topics, topic_page, groups, tiering, jobs,
                                         security, sampler, transactions, schemas)
"""Every module contributing pages (CONSOLE2's modules are added here)."""


def create_app(zookeeper: str, *, bootstrap: str | None = None,
               command_config: str | None = None, basic_auth: bool = False,
               login_limits: LoginLimits | None = None) -> Starlette:
    """The console for the cluster at ``zookeeper`` (``host:port[/chroot]``).

    ``bootstrap``: the Kafka bootstrap servers (default: the registered brokers, read from
    ZooKeeper); ``command_config``: a client properties file (TLS/SASL) for the SDK clients;
    ``basic_auth``: require HTTP Basic logins of the cluster's SCRAM users and act as the
    logged-in user (:mod:`loglake.console.login`); ``login_limits``: how many failed logins
    an address or a user name may have (default :class:`~loglake.basic_auth.LoginLimits`).
    Nothing connects before the first request.
    """
    security = SecurityConfig() if command_config is None else SecurityConfig.load(
        command_config)
    templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
    install_filters(templates)
    ctx = ConsoleContext(zookeeper=zookeeper, security=security, templates=templates,
                         configured_bootstrap=bootstrap)
    routes: list[BaseRoute] = [
        Route("/healthz", _healthz, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=str(STATIC_DIR)), name="static"),
    ]
    for module in PAGE_MODULES:
        routes.extend(module.ROUTES)
        start = getattr(module, "start", None)
        if start is not None:
            ctx.on_start.append(start)
        stop = getattr(module, "stop", None)
        if stop is not None:
            ctx.on_stop.append(stop)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        for hook in ctx.on_start:
            await hook(ctx)
        try:
            yield
        finally:
            for hook in reversed(ctx.on_stop):
                try:
                    await hook(ctx)
                except Exception:
                    log.exception("console: stopping a page module failed")
            await blocking(ctx.close)

    app = Starlette(
        routes=routes, lifespan=lifespan,
        exception_handlers={
            HTTPException: _http_error,
            LoglakeError: _loglake_error,
            ValueError: _loglake_error,
            Exception: _internal_error,
        })
    app.state.console = ctx
    if basic_auth:
        authenticator = ScramAuthenticator(_CatalogConfigs(ctx))
        app.add_middleware(LoginMiddleware, check=authenticator.mechanism,
                           cached=authenticator.cached, limiter=LoginLimiter(login_limits))
    return app


class _CatalogConfigs:
    """The entity configs of the context's catalog, connected on first use (the
    authenticator is made before anything connects)."""

    def __init__(self, ctx: ConsoleContext) -> None:
        self._ctx = ctx

    def get(self, path: str) -> dict[str, str]:
        return self._ctx.catalog().entity_configs().get(path)

    def alter(self, path: str, updates: Mapping[str, str | None]) -> dict[str, str]:
        return self._ctx.catalog().entity_configs().alter(path, updates)


async def _healthz(_request: Request) -> Response:
    return PlainTextResponse("ok")


async def _http_error(request: Request, exc: Any) -> Response:
    """Starlette's own refusals (no route, wrong method, a form over its limits) as pages."""
    status = int(getattr(exc, "status_code", 500))
    if status == 404:
        return not_found(f"no page at {request.url.path}", request)
    detail = str(getattr(exc, "detail", "") or "") or "the request was refused"
    if status == 405:
        detail = f"{request.method} is not allowed on {request.url.path}"
    return error_response(ValueError(detail), request, status_code=status)


async def _loglake_error(request: Request, exc: Exception) -> Response:
    return error_response(exc, request)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.error("console: %s %s failed: %r", request.method, request.url.path, exc,
              exc_info=exc)
    return error_response(RuntimeError(
        f"the console could not answer {request.url.path}: {type(exc).__name__}"), request,
        status_code=500)
