"""Security: SCRAM users, ACLs (list, add, remove) and client quotas (list, set, remove).

Routes: ``GET /security`` (page), ``GET /fragments/security`` (its tables, polled every 2 s),
``POST /actions/acls/add`` and ``POST /actions/acls/remove`` (form fields ``resource_type``:
Topic | Group | Cluster | TransactionalId, ``name`` (``kafka-cluster`` for Cluster; ``*``: every
resource), ``pattern_type``: LITERAL | PREFIXED, ``principal`` (``User:alice``), ``host``
(``*`` when empty), ``operation`` (Kafka's names: Read, Write, ..., All), ``permission``:
Allow | Deny), ``POST /actions/quotas/alter`` (``user`` and/or ``client_id``: a name or
``<default>``, ``key``: one of :data:`QUOTA_KEYS`, ``value``: a number, or ``remove`` set).

With a login (``loglake console --basic-auth``) everything on this page goes through the
brokers' Kafka APIs as the logged-in user (:mod:`loglake.console.admin_requests`:
DescribeAcls / CreateAcls / DeleteAcls, DescribeClientQuotas / AlterClientQuotas,
DescribeUserScramCredentials), so the authorizer decides: a user without the cluster
permissions sees why (Kafka's error name) instead of the tables, and a refused change is a
403 page. The quota form always uses AlterClientQuotas (the console's own account without a
login). Without a login, the rest is as follows.

Everything is read from and written to the cluster's ZooKeeper in Kafka's layout, as
``kafka-acls --authorizer-properties zookeeper.connect=...`` and ``kafka-configs
--zookeeper`` do (:mod:`loglake.catalog.acls`, :mod:`loglake.catalog.entity_configs`): an ACL
change appends the change notification every broker's authorizer watches, so brokers apply it
within moments. The console therefore needs no cluster ALTER permission of its own, and whoever
reaches the console can change ACLs: expose it only behind something that authenticates (see
``loglake console --help``). Users: the SCRAM mechanisms and iteration counts of
``/config/users/<user>`` (never a salt or key). Quotas: ``producer_byte_rate``,
``consumer_byte_rate``, ``request_percentage`` and ``controller_mutation_rate`` of users,
client ids and user/client-id pairs (``<default>`` entities included).

Threads: reads and writes block (ZooKeeper) and run in worker threads.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from loglake.broker.security.acl_model import CLUSTER_NAME
from loglake.catalog import acls as stored
from loglake.catalog.entity_configs import CLIENTS, IPS, USERS, desanitize
from loglake.console import admin_requests
from loglake.console.context import (
    ConsoleContext,
    blocking,
    console,
    error_response,
    form_value,
    is_fragment,
    render,
)
from loglake.errors import InvalidRequestError, LoglakeError

QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
              "controller_mutation_rate")
IP_QUOTA_KEYS = ("connection_creation_rate",)
"""KIP-612 IP entities' key (``/config/ips/<ip>``), shown read-only."""
SCRAM_PREFIX = "SCRAM-"
RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId")
"""The resource types the add form offers (the kinds Kafka's authorizer checks)."""
MAX_ENTITIES = 5000


@dataclass(frozen=True)
class UserRow:
    user: str
    mechanisms: tuple[tuple[str, int | None], ...]  # (mechanism, iterations)


@dataclass(frozen=True)
class QuotaRow:
    user: str | None
    client_id: str | None
    quotas: tuple[tuple[str, str], ...]
    ip: str | None = None


@dataclass(frozen=True)
class AclEntry:
    resource_type: str
    name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str


@dataclass(frozen=True)
class SecurityView:
    users: list[UserRow]
    acls: list[AclEntry]
    quotas: list[QuotaRow]
    refused: tuple[str, ...] = ()
    """Why a logged-in user sees a table empty (Kafka's error per refused read)."""


def scram_iterations(value: str) -> int | None:
    """``iterations`` of a stored SCRAM credential (``salt=..,stored_key=..,iterations=4096``)."""
    for part in value.split(","):
        key, sep, number = part.strip().partition("=")
        if sep and key == "iterations" and number.isdigit():
            return int(number)
    return None


def _entity_names(path: str) -> tuple[str | None, str | None]:
    parts = path.split("/")
    user = client = None
    if parts[0] == USERS:
        user = desanitize(parts[1])
        if len(parts) == 4:
            client = desanitize(parts[3])
    elif parts[0] == CLIENTS:
        client = desanitize(parts[1])
    return user, client


def snapshot(ctx: ConsoleContext) -> SecurityView:
    """Users, ACLs and quotas (blocking): the logged-in user's view through the Kafka APIs,
    else ZooKeeper's."""
    if ctx.login() is not None:
        return _snapshot_as_user(ctx)
    catalog = ctx.catalog()
    configs = catalog.entity_configs()
    users: list[UserRow] = []
    quotas: list[QuotaRow] = []
    for kind in (USERS, CLIENTS, f"{USERS}/{CLIENTS}", IPS):
        for path in configs.entities(kind)[:MAX_ENTITIES]:
            config = configs.get(path)
            if kind == IPS:
                ip_limits = tuple((k, config[k]) for k in IP_QUOTA_KEYS if k in config)
                if ip_limits:
                    quotas.append(QuotaRow(None, None, ip_limits, ip=desanitize(path[4:])))
                continue
            user, client = _entity_names(path)
            mechanisms = tuple(sorted((k, scram_iterations(v)) for k, v in config.items()
                                      if k.startswith(SCRAM_PREFIX)))
            if mechanisms and user is not None and client is None:
                users.append(UserRow(user, mechanisms))
            limits = tuple((k, config[k]) for k in QUOTA_KEYS if k in config)
            if limits:
                quotas.append(QuotaRow(user, client, limits))
    entries = [AclEntry(res.resource_type, res.name, res.pattern_type, entry.principal,
                        entry.host, entry.operation, entry.permission)
               for res, entry in catalog.acls().bindings()]
    users.sort(key=lambda u: u.user)
    quotas.sort(key=lambda q: (q.ip or "", q.user or "", q.client_id or ""))
    return SecurityView(users, entries, quotas)


def _snapshot_as_user(ctx: ConsoleContext) -> SecurityView:
    admin = ctx.admin()
    refused: list[str] = []
    users: list[UserRow] = []
    entries: list[AclEntry] = []
    quotas: list[QuotaRow] = []
    try:
        users = [UserRow(user, mechanisms)
                 for user, mechanisms in admin_requests.describe_scram_users(admin)]
    except LoglakeError as exc:
        refused.append(f"users: {exc}")
    try:
        entries = [AclEntry(*acl) for acl in admin_requests.describe_acls(admin)]
    except LoglakeError as exc:
        refused.append(f"ACLs: {exc}")
    try:
        quotas = [QuotaRow(user, client, tuple((k, _number(v)) for k, v in sorted(values.items())))
                  for user, client, values in admin_requests.describe_quotas(admin)]
    except LoglakeError as exc:
        refused.append(f"quotas: {exc}")
    return SecurityView(users, entries, quotas, tuple(refused))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def parse_acl(form: Mapping[str, Any]) -> AclEntry:
    """An ACL form (InvalidRequestError/ValueError with a clear message)."""
    rtype = form_value(form, "resource_type", max_length=40)
    if rtype not in RESOURCE_TYPES:
        raise InvalidRequestError(f"resource type is one of {', '.join(RESOURCE_TYPES)}, got "
                                  f"{rtype[:40]!r}")
    name = form_value(form, "name", max_length=300)
    if rtype == "Cluster":
        name = name or CLUSTER_NAME
        if name != CLUSTER_NAME:
            raise InvalidRequestError(f"the cluster resource is named {CLUSTER_NAME!r}")
    pattern = (form_value(form, "pattern_type", default="LITERAL", max_length=20)
               or "LITERAL").upper()
    if pattern == "PREFIXED" and name == "*":
        raise InvalidRequestError("'*' is a LITERAL name (every resource), not a prefix")
    res = stored.resource(rtype, name, pattern)
    entry = stored.acl(form_value(form, "principal", max_length=300),
                       form_value(form, "operation", max_length=40),
                       permission=form_value(form, "permission", default="Allow",
                                             max_length=10) or "Allow",
                       host=form_value(form, "host", max_length=300) or "*")
    return AclEntry(res.resource_type, res.name, res.pattern_type, entry.principal,
                    entry.host, entry.operation, entry.permission)


def change_acl(ctx: ConsoleContext, entry: AclEntry, *, add: bool) -> bool:
    """Add or remove one ACL (blocking); False when nothing changed. As the logged-in user
    through CreateAcls/DeleteAcls, else in ZooKeeper."""
    if ctx.login() is not None:
        acl = (entry.resource_type, entry.name, entry.pattern_type, entry.principal,
               entry.host, entry.operation, entry.permission)
        if add:
            admin_requests.create_acl(ctx.admin(), acl)
            return True
        return admin_requests.delete_acl(ctx.admin(), acl)
    store = ctx.catalog().acls()
    change = store.add if add else store.remove
    return change(entry.resource_type, entry.name, principal=entry.principal,
                  operation=entry.operation, permission=entry.permission, host=entry.host,
                  pattern_type=entry.pattern_type)


def describe(entry: AclEntry) -> str:
    return (f"{entry.permission} {entry.principal} {entry.operation} from host {entry.host} on "
            f"{entry.resource_type} {entry.name} ({entry.pattern_type})")


# ---- handlers --------------------------------------------------------------------------------

async def page(request: Request) -> Response:
    view = await blocking(snapshot, console(request))
    return render(request, "security.html", view=view, resource_types=RESOURCE_TYPES,
                  operations=stored.OPERATIONS, quota_keys=QUOTA_KEYS,
                  login=console(request).login())


async def live(request: Request) -> Response:
    view = await blocking(snapshot, console(request))
    return render(request, "security_live.html", view=view)


async def _change(request: Request, *, add: bool) -> Response:
    form = await request.form(max_files=0, max_fields=20, max_part_size=64 * 1024)
    entry = parse_acl(form)
    try:
        changed = await blocking(change_acl, console(request), entry, add=add)
    except LoglakeError as exc:
        return error_response(exc, request, doing="add ACL" if add else "remove ACL")
    if not is_fragment(request):
        return RedirectResponse("/security", status_code=303)
    if add:
        text = f"Added: {describe(entry)}" if changed else \
            f"Already there: {describe(entry)}"
    else:
        text = f"Removed: {describe(entry)}" if changed else \
            f"No such ACL: {describe(entry)}"
    return HTMLResponse(f'<div class="notice" role="status">{html.escape(text)}</div>')


async def add_acl(request: Request) -> Response:
    return await _change(request, add=True)


async def remove_acl(request: Request) -> Response:
    return await _change(request, add=False)


@dataclass(frozen=True)
class QuotaChange:
    user: str | None
    client_id: str | None
    key: str
    value: float | None  # None: remove


def parse_quota(form: Mapping[str, Any]) -> QuotaChange:
    """The quota form (ValueError with a clear message)."""
    user = form_value(form, "user", max_length=300) or None
    client_id = form_value(form, "client_id", max_length=300) or None
    if user is None and client_id is None:
        raise ValueError("name a user and/or a client id (<default> for the default entity)")
    key = form_value(form, "key", max_length=60)
    if key not in QUOTA_KEYS:
        raise ValueError(f"quota key is one of {', '.join(QUOTA_KEYS)}, got {key[:60]!r}")
    if form_value(form, "remove", max_length=10):
        return QuotaChange(user, client_id, key, None)
    text = form_value(form, "value", max_length=40)
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"the quota value must be a number, got {text[:40]!r}") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"the quota value must be a positive number, got {text[:40]!r}")
    return QuotaChange(user, client_id, key, value)


async def alter_quota(request: Request) -> Response:
    form = await request.form(max_files=0, max_fields=20, max_part_size=64 * 1024)
    change = parse_quota(form)
    ctx = console(request)

    def call() -> None:
        admin_requests.alter_quota(ctx.admin(), user=change.user, client_id=change.client_id,
                                   key=change.key, value=change.value)

    try:
        await blocking(call)
    except LoglakeError as exc:
        return error_response(exc, request, doing="alter quota")
    if not is_fragment(request):
        return RedirectResponse("/security", status_code=303)
    who = ", ".join(f"{kind} {name}" for kind, name in (("user", change.user),
                                                        ("client-id", change.client_id))
                    if name)
    text = (f"Removed {change.key} of {who}" if change.value is None
            else f"Set {change.key}={change.value:g} for {who}")
    return HTMLResponse(f'<div class="notice" role="status">{html.escape(text)}</div>')


ROUTES: list[BaseRoute] = [
    Route("/security", page, methods=["GET"]),
    Route("/fragments/security", live, methods=["GET"]),
    Route("/actions/acls/add", add_acl, methods=["POST"]),
    Route("/actions/acls/remove", remove_acl, methods=["POST"]),
    Route("/actions/quotas/alter", alter_quota, methods=["POST"]),
]
