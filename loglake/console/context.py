"""What every console handler shares, and the helpers that answer a request.

:class:`ConsoleContext` is built once per application by :func:`loglake.console.app.create_app`
and kept in ``app.state.console``; :func:`console` fetches it from a request. It holds:

* ``catalog()`` — the ZooKeeper :class:`~loglake.catalog.zookeeper.ClusterCatalog` in tool mode
  (created on first use, in a worker thread; nothing is written to ZooKeeper through it except
  by explicit write methods a page calls on purpose). While its connection is down it raises
  ZooKeeperUnavailableError at once (a 503 page) instead of handing out a client whose calls
  would wait for the reconnection without a bound.
* ``admin()`` / ``producer()`` / ``bootstrap()`` — an SDK :class:`~loglake.client.Admin` and
  :class:`~loglake.client.Producer` (one each per context, reused; confluent-kafka's clients
  are thread-safe) and the bootstrap servers: the ``bootstrap`` given, else the registered
  brokers' endpoints speaking the configured protocol, read from ZooKeeper. Consumers (the
  message browser) are made per request and closed after it.
* ``security`` — the client settings from ``--command-config`` (PLAINTEXT without one), handed
  to every SDK client the console builds.
* Login (``--basic-auth``, :mod:`loglake.console.login`): while a request of a logged-in user
  is served, ``admin()``, ``producer()``, ``bootstrap()`` and ``client_security()`` give that
  user's clients (:mod:`loglake.console.user_clients`: SASL SCRAM as the user, over the
  listener of the console's protocol made SASL), so the brokers' ACLs decide what the user
  sees and does; without a login (no ``--basic-auth``, background tasks) the console's own.
  Pages that read ZooKeeper directly filter topics by ``visible_topics()`` (what the user's
  Metadata lists) and refuse a hidden topic with :meth:`ConsoleContext.check_topic_visible`
  (TOPIC_AUTHORIZATION_FAILED, as Kafka answers a topic one may not describe); data the
  console's own account gathered (the lag sampler) is shown per group only when the user's
  DescribeGroups allows the group (:meth:`ConsoleContext.check_group_visible`,
  GROUP_AUTHORIZATION_FAILED) and per topic only for visible topics. Pages ask the brokers
  afresh; the chart endpoints, polled every few seconds, reuse the user's answers for
  :data:`CHART_ANSWER_MAX_AGE_S`.
* ``templates`` — the Jinja2 environment of ``templates/``.
* ``extras`` — a dict for the parts of the console that keep state (the lag sampler stores
  itself here); ``on_start`` / ``on_stop`` callbacks run in the application's lifespan (the
  sampler hook: a page module may define ``async def start(ctx)`` / ``async def stop(ctx)``
  which :mod:`loglake.console.app` registers).

Thread-safety: ``catalog()``, ``admin()`` and ``bootstrap()`` block (ZooKeeper and Kafka
round trips) and must be called from a worker thread: handlers wrap them in :func:`blocking`.
Their lazy creation is guarded by a lock.

Answers: :func:`render` (a page, or with ``HX-Request`` a fragment when the template has one),
:func:`bad_request` (400), :func:`not_found` (404), :func:`error_response` (a
:class:`~loglake.errors.LoglakeError` turned into its HTTP status with the message). An error
answer never carries a traceback; the message is HTML-escaped.
"""

from __future__ import annotations

import contextlib
import html
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.templating import Jinja2Templates

from loglake.catalog.zookeeper import BrokerInfo, ClusterCatalog, ZooKeeperUnavailableError
from loglake.client import Admin, Producer, SecurityConfig
from loglake.console.login import Login, current_login
from loglake.console.user_clients import UserClients, UserEntry, user_security
from loglake.errors import LoglakeError

T = TypeVar("T")

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
STATIC_DIR = Path(__file__).resolve().parent / "static"

SDK_TIMEOUT_S = 10.0
"""Bound of every SDK call the console makes (a page never hangs longer on a dead cluster)."""
CHART_ANSWER_MAX_AGE_S = 5.0
"""How old a user's Metadata / DescribeGroups answer the chart endpoints may reuse."""

Hook = Callable[["ConsoleContext"], Awaitable[None]]


@dataclass
class ConsoleContext:
    """Shared state of one console application (see the module)."""

    zookeeper: str
    security: SecurityConfig
    templates: Jinja2Templates
    configured_bootstrap: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    on_start: list[Hook] = field(default_factory=list)
    on_stop: list[Hook] = field(default_factory=list)
    _catalog: ClusterCatalog | None = field(default=None, repr=False)
    _admin: Admin | None = field(default=None, repr=False)
    _admin_bootstrap: str | None = field(default=None, repr=False)
    _producer: Producer | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    users: UserClients = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.users = UserClients(lambda bootstrap, security: Admin(
            bootstrap, timeout=SDK_TIMEOUT_S, security=security, client_id="loglake-console"))

    # -- the logged-in user (see the module) -------------------------------------------------

    def login(self) -> Login | None:
        """The logged-in user of the request being served (None: the console's own account)."""
        return current_login()

    def client_security(self) -> SecurityConfig:
        """The client settings of the request being served: the logged-in user's, else the
        console's own."""
        login = current_login()
        return self.security if login is None else user_security(self.security, login)

    def _user_entry(self, login: Login) -> UserEntry:
        security = user_security(self.security, login)
        return self.users.entry(login, security, self._bootstrap_for(security))

    def visible_topics(self, *, max_age_s: float = 0.0) -> set[str] | None:
        """The topics the logged-in user's Metadata lists (blocking); None without a login
        (everything is shown). ``max_age_s`` > 0 accepts the user's answer of that many
        seconds ago (the polled chart endpoints); pages ask afresh."""
        login = current_login()
        if login is None:
            return None
        entry = self._user_entry(login)
        now = time.monotonic()
        with entry.lock:
            known = entry.topics
        if known is not None and max_age_s > 0 and now - known[0] <= max_age_s:
            return set(known[1])
        topics = frozenset(entry.admin.list_topics())
        with entry.lock:
            entry.topics = (now, topics)
        return set(topics)

    def check_group_visible(self, group_id: str, *, max_age_s: float = 0.0) -> None:
        """Raise GROUP_AUTHORIZATION_FAILED when a logged-in user's DescribeGroups refuses
        ``group_id`` (blocking; nothing without a login). ``max_age_s`` as
        :meth:`visible_topics`."""
        login = current_login()
        if login is None:
            return
        entry = self._user_entry(login)
        now = time.monotonic()
        with entry.lock:
            known = entry.groups.get(group_id)
        if known is not None and max_age_s > 0 and now - known[0] <= max_age_s:
            allowed = known[1]
        else:
            try:
                entry.admin.describe_group(group_id)
                allowed = True
            except LoglakeError as exc:
                if exc.code != ErrorCode.group_authorization_failed:
                    raise
                allowed = False
            entry.remember_group(group_id, now, allowed)
        if not allowed:
            raise LoglakeError(
                f"User:{login.user} may not describe group {group_id!r} "
                "(GROUP_AUTHORIZATION_FAILED)", code=ErrorCode.group_authorization_failed)

    def check_topic_visible(self, name: str) -> None:
        """Raise TOPIC_AUTHORIZATION_FAILED when a logged-in user's Metadata does not list
        ``name`` (blocking; nothing without a login)."""
        visible = self.visible_topics()
        if visible is not None and name not in visible:
            login = current_login()
            raise LoglakeError(
                f"User:{login.user if login else '?'} may not describe topic {name!r} "
                "(TOPIC_AUTHORIZATION_FAILED)", code=ErrorCode.topic_authorization_failed)

    # -- blocking accessors (call from a worker thread) --------------------------------------

    def catalog(self) -> ClusterCatalog:
        """The ZooKeeper catalog in tool mode, connected on first use (blocking)."""
        with self._lock:
            if self._catalog is None:
                catalog = ClusterCatalog(self.zookeeper, timeout=SDK_TIMEOUT_S, mode="tool")
                try:
                    catalog.start()
                except LoglakeError:
                    catalog.stop()
                    raise
                except Exception as exc:
                    catalog.stop()
                    raise ZooKeeperUnavailableError(
                        f"cannot reach ZooKeeper at {self.zookeeper}: {exc}") from None
                self._catalog = catalog
            elif not self._catalog.zk.connected:
                # kazoo queues a request made while it reconnects and waits for the answer
                # without a bound: fail now instead (the connection comes back by itself)
                raise ZooKeeperUnavailableError(
                    f"ZooKeeper at {self.zookeeper} is not reachable now (the console "
                    "reconnects by itself)")
            return self._catalog

    def bootstrap(self) -> str:
        """The bootstrap servers: the configured ones, else every registered broker's first
        endpoint (blocking; raises when no broker is registered)."""
        return self._bootstrap_for(self.client_security())

    def _bootstrap_for(self, security: SecurityConfig) -> str:
        if self.configured_bootstrap:
            return self.configured_bootstrap
        brokers = self.catalog().brokers()
        endpoints = ["{}:{}".format(*client_endpoint(info, security))
                     for _, info in sorted(brokers.items())]
        if not endpoints:
            raise LoglakeError("no broker is registered in ZooKeeper",
                               code=ErrorCode.broker_not_available)
        return ",".join(endpoints)

    def admin(self) -> Admin:
        """The shared SDK admin client, or the logged-in user's (blocking on first use)."""
        login = current_login()
        if login is not None:
            return self._user_entry(login).admin
        bootstrap = self.bootstrap()
        with self._lock:
            if self._admin is None or (self.configured_bootstrap is None
                                       and self._admin_bootstrap != bootstrap
                                       and not _overlaps(self._admin_bootstrap, bootstrap)):
                self._admin = Admin(bootstrap, timeout=SDK_TIMEOUT_S, security=self.security,
                                    client_id="loglake-console")
                self._admin_bootstrap = bootstrap
            return self._admin

    def producer(self) -> Producer:
        """The shared SDK producer of the produce form, or the logged-in user's (blocking on
        first use; acks=all)."""
        login = current_login()
        if login is not None:
            entry = self._user_entry(login)
            with entry.lock:
                if entry.producer is None:
                    entry.producer = _producer(entry.bootstrap, entry.security)
                return entry.producer
        bootstrap = self.bootstrap()
        with self._lock:
            if self._producer is None:
                self._producer = _producer(bootstrap, self.security)
            return self._producer

    def close(self) -> None:
        """Release the clients, the users' too (blocking)."""
        self.users.close()
        with self._lock:
            if self._producer is not None:
                with contextlib.suppress(LoglakeError):  # undelivered: nothing to do now
                    self._producer.close(timeout=SDK_TIMEOUT_S)
                self._producer = None
            if self._admin is not None:
                self._admin.close()
                self._admin = None
            if self._catalog is not None:
                self._catalog.stop()
                self._catalog = None


def _producer(bootstrap: str, security: SecurityConfig) -> Producer:
    return Producer(bootstrap, acks="all", linger_ms=0,
                    delivery_timeout_ms=int(SDK_TIMEOUT_S * 1000), security=security,
                    client_id="loglake-console")


def _overlaps(old: str | None, new: str) -> bool:
    """Whether the old admin's bootstrap list still names a live broker of the new one (then
    it keeps working: librdkafka learns the cluster from any one broker)."""
    return old is not None and bool(set(old.split(",")) & set(new.split(",")))


def client_endpoint(info: BrokerInfo, security: SecurityConfig) -> tuple[str, int]:
    """The host and port of ``info``'s first listener speaking ``security``'s protocol (its
    first listener when none does)."""
    for endpoint in info.all_endpoints:
        if endpoint.security_protocol == security.protocol:
            return endpoint.host, endpoint.port
    return info.host, info.port


def console(request: Request) -> ConsoleContext:
    """The context of the application serving ``request``."""
    ctx: ConsoleContext = request.app.state.console
    return ctx


async def blocking(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking call (SDK, ZooKeeper) in a worker thread, off the event loop."""
    return await run_in_threadpool(func, *args, **kwargs)


def is_fragment(request: Request) -> bool:
    """Whether htmx asked (``HX-Request``) for a part of a page rather than a whole page."""
    return request.headers.get("hx-request", "").lower() == "true"


def render(request: Request, template: str, *, status_code: int = 200,
           **context: Any) -> Response:
    """``template`` rendered with ``context`` (plus ``request`` and ``nav``: the current path)."""
    ctx = console(request)
    return ctx.templates.TemplateResponse(
        request, template, {"nav": request.url.path, **context}, status_code=status_code)


def _error_html(status_code: int, message: str, request: Request | None) -> Response:
    text = html.escape(message)
    if request is not None and not is_fragment(request):
        try:
            return render(request, "error.html", status_code=status_code, status=status_code,
                          message=message)
        except Exception:  # the error page itself must never fail: fall back to plain HTML
            pass
    return HTMLResponse(f'<div class="error" role="alert"><strong>{status_code}</strong> '
                        f"{text}</div>", status_code=status_code)


def bad_request(message: str, request: Request | None = None) -> Response:
    """A 400 with ``message``: a page when ``request`` is a page request, else a fragment."""
    return _error_html(400, message, request)


def not_found(message: str, request: Request | None = None) -> Response:
    """A 404 with ``message``: a page when ``request`` is a page request, else a fragment."""
    return _error_html(404, message, request)


def error_response(exc: BaseException, request: Request | None = None, *,
                   doing: str | None = None, status_code: int | None = None) -> Response:
    """``exc`` as an answer: its HTTP status (``status_code``, else :func:`status_for`) and its
    one-line message, prefixed by what was being done."""
    message = str(exc) or type(exc).__name__
    if doing:
        message = f"{doing}: {message}"
    status = status_code or status_for(exc)
    if status == 403 and isinstance(exc, LoglakeError) \
            and exc.code.name.upper() not in message.upper():
        message = f"{message} ({exc.code.name.upper()})"
    return _error_html(status, message, request)


_NOT_FOUND_CODES = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.group_id_not_found,
    ErrorCode.unknown_topic_id, ErrorCode.resource_not_found,
})
_CONFLICT_CODES = frozenset({
    ErrorCode.topic_already_exists, ErrorCode.non_empty_group,
})
_FORBIDDEN_CODES = frozenset({
    ErrorCode.topic_authorization_failed, ErrorCode.group_authorization_failed,
    ErrorCode.cluster_authorization_failed, ErrorCode.transactional_id_authorization_failed,
    ErrorCode.sasl_authentication_failed, ErrorCode.delegation_token_authorization_failed,
})
_UNAVAILABLE_CODES = frozenset({
    ErrorCode.broker_not_available, ErrorCode.leader_not_available,
    ErrorCode.not_leader_or_follower, ErrorCode.request_timed_out,
    ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
    ErrorCode.coordinator_load_in_progress, ErrorCode.network_exception,
    ErrorCode.not_controller,
})


def status_for(exc: BaseException) -> int:
    """The HTTP status of an error: 404 for unknown topics/groups, 409 for conflicts, 403 for
    authorization, 503 while the cluster is unreachable or moving, 400 for bad input (invalid
    configs, values, requests: the wire's ``invalid_*`` codes and ``ValueError``), else 502
    (the cluster answered with an error the console cannot blame on the request)."""
    if isinstance(exc, ZooKeeperUnavailableError):
        return 503
    if isinstance(exc, LoglakeError):
        code = exc.code
        if code in _NOT_FOUND_CODES:
            return 404
        if code in _CONFLICT_CODES:
            return 409
        if code in _FORBIDDEN_CODES:
            return 403
        if code in _UNAVAILABLE_CODES or exc.retriable:
            return 503
        if code.name.startswith(("invalid_", "policy_", "unsupported_")) \
                or code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large,
                            ErrorCode.offset_out_of_range):
            return 400
        return 502
    if isinstance(exc, ValueError):
        return 400
    if isinstance(exc, TimeoutError):
        return 503
    return 500


def form_value(form: Mapping[str, Any], name: str, *, default: str = "",
               max_length: int = 1 << 16) -> str:
    """A text field of a submitted form, stripped (ValueError if it is a file or too long)."""
    value = form.get(name, default)
    if not isinstance(value, str):
        raise ValueError(f"field {name!r} must be text")
    if len(value) > max_length:
        raise ValueError(f"field {name!r} is longer than {max_length} characters")
    return value.strip()


def int_param(raw: str | None, name: str, *, default: int | None = None,
              minimum: int | None = None, maximum: int | None = None) -> int | None:
    """An integer query or form parameter within bounds (ValueError with a clear message)."""
    if raw is None or raw.strip() == "":
        return default
    text = raw.strip()
    if len(text) > 20 or not text.lstrip("-+").isdigit():
        raise ValueError(f"{name} must be an integer, got {raw[:40]!r}")
    value = int(text)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    return value
