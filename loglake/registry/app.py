"""The registry's Starlette application: Confluent Schema Registry's REST API.

Routes (``{subject}`` may hold ``/``, percent-encoded or not; ``{version}`` is a number,
``latest`` or ``-1``)::

    GET  /                                   {}
    GET  /schemas/types                      ["AVRO", "JSON", "PROTOBUF"]
    GET  /schemas                            ?subjectPrefix= &deleted= &latestOnly=
    GET  /schemas/ids/{id}                   ?subject= &format=serialized
    GET  /schemas/ids/{id}/schema            the schema text
    GET  /schemas/ids/{id}/subjects          ?deleted= &subject=
    GET  /schemas/ids/{id}/versions          [{"subject","version"}]
    GET  /subjects                           ?deleted= &subjectPrefix=
    GET  /subjects/{s}/versions              ?deleted=
    POST /subjects/{s}/versions              register ?normalize=
    GET  /subjects/{s}/versions/{v}          ?deleted= &format=
    DELETE /subjects/{s}/versions/{v}        ?permanent=
    GET  /subjects/{s}/versions/{v}/schema
    GET  /subjects/{s}/versions/{v}/referencedby
    POST /subjects/{s}                       lookup ?normalize= &deleted=
    DELETE /subjects/{s}                     ?permanent=
    POST /compatibility/subjects/{s}/versions[/{v}]   ?verbose= &normalize=
    GET|PUT|DELETE /config[/{s}]             ?defaultToGlobal= (GET of a subject)
    GET|PUT|DELETE /mode[/{s}]               ?force= (PUT), ?defaultToGlobal= (GET)

Responses are JSON with content type ``application/vnd.schemaregistry.v1+json``; request bodies
are read as JSON whatever their content type. Errors are ``{"error_code": N, "message": ...}``
with Confluent's codes (:mod:`loglake.registry.errors`); an unexpected failure answers 500
with code 50001 and is logged, never a traceback on the wire.

Authentication (optional): ``authenticate(user, password) -> mechanism | None`` checks HTTP
Basic credentials on every request (401 with ``WWW-Authenticate: Basic`` otherwise); with a
:class:`~loglake.basic_auth.LoginLimiter`, addresses and names with too many recent failures
get 429 with ``Retry-After`` before any check (:func:`loglake.basic_auth.check_login`).

Threads: handlers run on uvicorn's event loop and hand every service call (ZooKeeper round
trips) to Starlette's thread pool, so the loop never blocks.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from loglake.basic_auth import LoginLimiter, MechanismCheck, check_login, retry_after_header
from loglake.catalog.zookeeper import ZooKeeperUnavailableError
from loglake.errors import LoglakeError
from loglake.registry.errors import (
    BAD_REQUEST,
    STORE_ERROR,
    TOO_MANY_REQUESTS,
    UNAUTHORIZED,
    RegistryError,
)
from loglake.registry.service import RegistryService

log = logging.getLogger(__name__)

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_BODY_BYTES = 16 * 1024 * 1024


def _json(value: Any, status: int = 200) -> Response:
    return Response(json.dumps(value), status_code=status, media_type=MEDIA_TYPE)


def _error(status: int, code: int, message: str) -> Response:
    return _json({"error_code": code, "message": message}, status)


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "false").strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no", ""):
        return False
    raise RegistryError(400, BAD_REQUEST, f"Query parameter {name} must be true or false, "
                        f"got {value!r}")


def _int_param(request: Request, name: str) -> int:
    raw = request.path_params[name]
    try:
        return int(raw)
    except ValueError:
        raise RegistryError(404, 404, f"HTTP 404 Not Found: {name} {raw!r} is not a number"
                            ) from None


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise RegistryError(413, 413, f"Request body larger than {MAX_BODY_BYTES} bytes")
    try:
        value = json.loads(raw or b"{}")
    except ValueError as exc:
        raise RegistryError(400, BAD_REQUEST, f"Malformed JSON body: {exc}") from None
    if not isinstance(value, dict):
        raise RegistryError(400, BAD_REQUEST, "The request body must be a JSON object")
    return value


def create_app(service: RegistryService, *, authenticate: MechanismCheck | None = None,
               cached: MechanismCheck | None = None, limiter: LoginLimiter | None = None
               ) -> Starlette:
    """The REST application over ``service`` (see the module docstring)."""

    def call(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        return run_in_threadpool(func, *args, **kwargs)

    async def root(request: Request) -> Response:
        return _json({})

    async def schema_types(request: Request) -> Response:
        return _json(service.schema_types())

    async def schemas(request: Request) -> Response:
        return _json(await call(
            service.schemas, subject_prefix=request.query_params.get("subjectPrefix", ""),
            deleted=_flag(request, "deleted"), latest_only=_flag(request, "latestOnly")))

    async def schema_by_id(request: Request) -> Response:
        return _json(await call(service.schema_by_id, _int_param(request, "id"),
                                subject=request.query_params.get("subject") or None,
                                fmt=request.query_params.get("format") or None))

    async def schema_text(request: Request) -> Response:
        return Response(await call(service.schema_text_by_id, _int_param(request, "id")),
                        media_type=MEDIA_TYPE)

    async def id_subjects(request: Request) -> Response:
        return _json(await call(service.subjects_of_id, _int_param(request, "id"),
                                deleted=_flag(request, "deleted"),
                                subject=request.query_params.get("subject") or None))

    async def id_versions(request: Request) -> Response:
        found = await call(service.versions_of_id, _int_param(request, "id"),
                           deleted=_flag(request, "deleted"),
                           subject=request.query_params.get("subject") or None)
        return _json([{"subject": v.subject, "version": v.version} for v in found])

    async def subjects(request: Request) -> Response:
        return _json(await call(service.subjects, deleted=_flag(request, "deleted"),
                                prefix=request.query_params.get("subjectPrefix", "")))

    async def versions(request: Request) -> Response:
        subject = request.path_params["subject"]
        if request.method == "POST":
            return _json(await call(service.register, subject, await _body(request),
                                    normalize=_flag(request, "normalize")))
        return _json(await call(service.versions, subject, deleted=_flag(request, "deleted")))

    async def version(request: Request) -> Response:
        subject, number = request.path_params["subject"], request.path_params["version"]
        if request.method == "DELETE":
            return _json(await call(service.delete_version, subject, number,
                                    permanent=_flag(request, "permanent")))
        return _json(await call(service.get_version, subject, number,
                                deleted=_flag(request, "deleted"),
                                fmt=request.query_params.get("format") or None))

    async def version_schema(request: Request) -> Response:
        return Response(await call(service.get_version_text, request.path_params["subject"],
                                   request.path_params["version"],
                                   deleted=_flag(request, "deleted")), media_type=MEDIA_TYPE)

    async def referenced_by(request: Request) -> Response:
        return _json(await call(service.referenced_by, request.path_params["subject"],
                                request.path_params["version"]))

    async def subject(request: Request) -> Response:
        name = request.path_params["subject"]
        if request.method == "DELETE":
            return _json(await call(service.delete_subject, name,
                                    permanent=_flag(request, "permanent")))
        return _json(await call(service.lookup, name, await _body(request),
                                normalize=_flag(request, "normalize"),
                                deleted=_flag(request, "deleted")))

    async def compatibility(request: Request) -> Response:
        return _json(await call(service.check, request.path_params["subject"],
                                request.path_params.get("version"), await _body(request),
                                normalize=_flag(request, "normalize"),
                                verbose=_flag(request, "verbose")))

    async def config(request: Request) -> Response:
        name = request.path_params.get("subject")
        if request.method == "PUT":
            return _json(await call(service.set_config, name, await _body(request)))
        if request.method == "DELETE":
            return _json(await call(service.delete_config, name))
        return _json(await call(service.get_config, name,
                                default_to_global=_flag(request, "defaultToGlobal")))

    async def mode(request: Request) -> Response:
        name = request.path_params.get("subject")
        if request.method == "PUT":
            return _json(await call(service.set_mode, name, await _body(request),
                                    force=_flag(request, "force")))
        if request.method == "DELETE":
            if name is None:
                return _json(await call(service.set_mode, None, {"mode": "READWRITE"},
                                        force=True))
            return _json(await call(service.delete_mode, name))
        return _json(await call(service.get_mode, name,
                                default_to_global=_flag(request, "defaultToGlobal")))

    # most specific first: ``{subject:path}`` matches slashes
    routes = [
        Route("/", root, methods=["GET"]),
        Route("/schemas/types", schema_types, methods=["GET"]),
        Route("/schemas", schemas, methods=["GET"]),
        Route("/schemas/ids/{id}", schema_by_id, methods=["GET"]),
        Route("/schemas/ids/{id}/schema", schema_text, methods=["GET"]),
        Route("/schemas/ids/{id}/subjects", id_subjects, methods=["GET"]),
        Route("/schemas/ids/{id}/versions", id_versions, methods=["GET"]),
        Route("/subjects", subjects, methods=["GET"]),
        Route("/subjects/{subject:path}/versions/{version}/schema", version_schema,
              methods=["GET"]),
        Route("/subjects/{subject:path}/versions/{version}/referencedby", referenced_by,
              methods=["GET"]),
        Route("/subjects/{subject:path}/versions/{version}", version, methods=["GET", "DELETE"]),
        Route("/subjects/{subject:path}/versions", versions, methods=["GET", "POST"]),
        Route("/subjects/{subject:path}", subject, methods=["POST", "DELETE"]),
        Route("/compatibility/subjects/{subject:path}/versions/{version}", compatibility,
              methods=["POST"]),
        Route("/compatibility/subjects/{subject:path}/versions", compatibility,
              methods=["POST"]),
        Route("/config", config, methods=["GET", "PUT", "DELETE"]),
        Route("/config/{subject:path}", config, methods=["GET", "PUT", "DELETE"]),
        Route("/mode", mode, methods=["GET", "PUT", "DELETE"]),
        Route("/mode/{subject:path}", mode, methods=["GET", "PUT", "DELETE"]),
    ]

    async def registry_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RegistryError)
        return _error(exc.status, exc.error_code, exc.message)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return _error(exc.status_code, exc.status_code,
                      f"HTTP {exc.status_code} {exc.detail}")

    async def unavailable(request: Request, exc: Exception) -> Response:
        return _error(500, STORE_ERROR, f"Error in the backend data store: {exc}")

    async def unexpected(request: Request, exc: Exception) -> Response:
        log.error("request %s %s failed", request.method, request.url.path, exc_info=exc)
        return _error(500, STORE_ERROR, f"Internal error: {type(exc).__name__}")

    app = Starlette(routes=routes, exception_handlers={
        RegistryError: registry_error,
        HTTPException: http_error,
        ZooKeeperUnavailableError: unavailable,
        LoglakeError: unavailable,
        Exception: unexpected,
    })
    if authenticate is not None:
        app.add_middleware(BasicAuthMiddleware, check=authenticate, cached=cached,
                           limiter=limiter)
    return app


class BasicAuthMiddleware:
    """Refuse (401) every HTTP request without HTTP Basic credentials ``check`` accepts, and
    (429, ``Retry-After``) logins from an address or for a user name with too many recent
    failures (:func:`loglake.basic_auth.check_login`, the console's check too)."""

    def __init__(self, app: ASGIApp, *, check: MechanismCheck,
                 cached: MechanismCheck | None = None,
                 limiter: LoginLimiter | None = None) -> None:
        self.app = app
        self.check = check
        self.cached = cached
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        outcome = await check_login(scope, check=self.check, cached=self.cached,
                                    limiter=self.limiter)
        if outcome.mechanism is not None:
            await self.app(scope, receive, send)
            return
        if outcome.retry_after_s is not None:
            response = _error(429, TOO_MANY_REQUESTS, "Too many failed logins from this "
                              "address or for this user: try again later")
            response.headers["Retry-After"] = retry_after_header(outcome.retry_after_s)
        elif outcome.unavailable is not None:
            response = _error(503, STORE_ERROR, f"Cannot check the login now: "
                              f"{outcome.unavailable}")
        else:
            response = _error(401, UNAUTHORIZED, "Unauthorized: give valid HTTP Basic "
                              "credentials (a SCRAM user of the cluster)")
            response.headers["WWW-Authenticate"] = 'Basic realm="loglake schema registry"'
        await response(scope, receive, send)
