"""ACL, client-quota and SCRAM-user reads and writes through the brokers' Kafka APIs, as the
console's security page does them for a logged-in user (and the quota form always):
CreateAcls v3, DeleteAcls v3, DescribeAcls v3, DescribeClientQuotas v1, AlterClientQuotas v1,
DescribeUserScramCredentials v0, sent by :meth:`loglake.client.Admin.request` with the
request's client (the user's own login, see :mod:`loglake.console.user_clients`), so the
broker's authorizer decides (CLUSTER ALTER for ACL changes, ALTER_CONFIGS for quotas; a
refusal raises a :class:`~loglake.errors.LoglakeError` with Kafka's code, a 403 page).

Every function blocks (one request, bounded by ``SDK_TIMEOUT_S``); call from a worker thread.
"""

from __future__ import annotations

import re
from typing import Any

from kio.schema.errors import ErrorCode

from loglake.broker.security.acl_model import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from loglake.client import Admin
from loglake.errors import LoglakeError

CREATE_ACLS = (30, 3)
DELETE_ACLS = (31, 3)
DESCRIBE_ACLS = (29, 3)
DESCRIBE_CLIENT_QUOTAS = (48, 1)
ALTER_CLIENT_QUOTAS = (49, 1)
DESCRIBE_SCRAM = (50, 0)
SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
USER, CLIENT = "user", "client-id"

AclTuple = tuple[str, str, str, str, str, str, str]
"""(resource type, name, pattern type, principal, host, operation, permission) in the names
ZooKeeper's JSON uses (``Topic``, ``LITERAL``, ``Read``, ``Allow``)."""


def _enum_name(text: str) -> str:
    """``TransactionalId`` / ``ClusterAction`` -> ``TRANSACTIONAL_ID`` / ``CLUSTER_ACTION``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", text).upper()


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _check(code: ErrorCode, message: str | None, doing: str) -> None:
    if code != ErrorCode.none:
        detail = f": {message}" if message else ""
        raise LoglakeError(f"{doing}: {code.name.upper()}{detail}", code=code)


def _binding(acl: AclTuple) -> dict[str, Any]:
    rtype, name, pattern, principal, host, operation, permission = acl
    return {"resource_type": int(ResourceType[_enum_name(rtype)]), "resource_name": name,
            "resource_pattern_type": int(PatternType[pattern.upper()]),
            "principal": principal, "host": host,
            "operation": int(AclOperation[_enum_name(operation)]),
            "permission_type": int(AclPermissionType[permission.upper()])}


def create_acl(admin: Admin, acl: AclTuple) -> None:
    """CreateAcls of one binding."""
    response = admin.request(*CREATE_ACLS, {"creations": [_binding(acl)]},
                             operation="create ACL")
    for result in response.results:
        _check(result.error_code, result.error_message, "create ACL")


def delete_acl(admin: Admin, acl: AclTuple) -> bool:
    """DeleteAcls of exactly one binding; False when there was none."""
    b = _binding(acl)
    response = admin.request(*DELETE_ACLS, {"filters": [{
        "resource_type_filter": b["resource_type"], "resource_name_filter": b["resource_name"],
        "pattern_type_filter": b["resource_pattern_type"], "principal_filter": b["principal"],
        "host_filter": b["host"], "operation": b["operation"],
        "permission_type": b["permission_type"]}]}, operation="delete ACL")
    found = False
    for result in response.filter_results:
        _check(result.error_code, result.error_message, "delete ACL")
        found = found or bool(result.matching_acls)
    return found


def describe_acls(admin: Admin) -> list[AclTuple]:
    """Every ACL binding (DescribeAcls with match-any filters), sorted."""
    response = admin.request(*DESCRIBE_ACLS, {
        "resource_type_filter": int(ResourceType.ANY), "resource_name_filter": None,
        "pattern_type_filter": int(PatternType.ANY), "principal_filter": None,
        "host_filter": None, "operation": int(AclOperation.ANY),
        "permission_type": int(AclPermissionType.ANY)}, operation="describe ACLs")
    _check(response.error_code, response.error_message, "describe ACLs")
    return sorted(
        (_camel(ResourceType(r.resource_type).name), r.resource_name,
         PatternType(r.pattern_type).name, a.principal, a.host,
         _camel(AclOperation(a.operation).name), _camel(AclPermissionType(a.permission_type).name))
        for r in response.resources for a in r.acls)


def describe_quotas(admin: Admin) -> list[tuple[str | None, str | None, dict[str, float]]]:
    """Every user / client-id quota entity: (user, client id, {key: value}); ``<default>``
    entities have the name ``<default>``."""
    response = admin.request(*DESCRIBE_CLIENT_QUOTAS, {"components": [], "strict": False},
                             operation="describe client quotas")
    _check(response.error_code, response.error_message, "describe client quotas")
    out: list[tuple[str | None, str | None, dict[str, float]]] = []
    for entry in response.entries or ():
        names = {e.entity_type: ("<default>" if e.entity_name is None else e.entity_name)
                 for e in entry.entity}
        if set(names) - {USER, CLIENT}:
            continue
        out.append((names.get(USER), names.get(CLIENT), {v.key: v.value for v in entry.values}))
    return sorted(out, key=lambda row: (row[0] or "", row[1] or ""))


def alter_quota(admin: Admin, *, user: str | None, client_id: str | None, key: str,
                value: float | None) -> None:
    """Set (``value``) or remove (None) one quota of a user and/or client-id entity
    (``""``/None: not part of the entity; ``<default>``: the default entity)."""
    entity = [{"entity_type": kind, "entity_name": None if name == "<default>" else name}
              for kind, name in ((USER, user), (CLIENT, client_id)) if name]
    if not entity:
        raise ValueError("name a user and/or a client id (<default> for the default)")
    response = admin.request(*ALTER_CLIENT_QUOTAS, {"entries": [{
        "entity": entity, "ops": [{"key": key, "value": 0.0 if value is None else value,
                                   "remove": value is None}]}], "validate_only": False},
        operation="alter client quota")
    for entry in response.entries:
        _check(entry.error_code, entry.error_message, "alter client quota")


def describe_scram_users(admin: Admin) -> list[tuple[str, tuple[tuple[str, int | None], ...]]]:
    """Every SCRAM user with its (mechanism, iterations), sorted."""
    response = admin.request(*DESCRIBE_SCRAM, {"users": None},
                             operation="describe SCRAM users")
    _check(response.error_code, response.error_message, "describe SCRAM users")
    out = []
    for result in response.results:
        _check(result.error_code, result.error_message, f"describe SCRAM user {result.user}")
        out.append((result.user, tuple(sorted(
            (SCRAM_MECHANISMS.get(int(c.mechanism), str(c.mechanism)), int(c.iterations))
            for c in result.credential_infos))))
    return sorted(out)
