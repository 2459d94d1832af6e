"""DescribeAcls (key 29), CreateAcls (30) and DeleteAcls (31), v1-3 as Kafka 4.0 (KIP-896 removed
v0): Kafka's ``AclApis`` over the ACL authorizer and the ACLs in ZooKeeper (catalog/acls.py).

* Authorization first: DescribeAcls needs DESCRIBE on the cluster, Create/DeleteAcls ALTER
  (handlers/authz.py); a refusal answers CLUSTER_AUTHORIZATION_FAILED (DescribeAcls: the
  top-level code; the others: every entry).
* Without ``authorizer.class.name`` every request answers SECURITY_DISABLED, as Kafka.
* CreateAcls: each creation is checked (Kafka's ``validateNewAcl`` and AclApis' checks:
  concrete resource type, LITERAL or PREFIXED, a concrete operation, ALLOW or DENY, a principal
  ``Type:name``, a non-empty name without ``/``, the CLUSTER resource only as ``kafka-cluster``;
  else INVALID_REQUEST for that entry); the valid ones are written per resource (one
  version-conditioned update, ``AclStore.update``) and applied to this broker's cache at once.
* DeleteAcls: a filter with UNKNOWN elements answers INVALID_REQUEST; otherwise the resources
  it may touch are those in this broker's cache (MATCH/ANY filters) plus the one it names
  exactly (Kafka: an ACL created elsewhere and not propagated yet is deleted only when the
  filter names its resource exactly); each resource's matching ACLs are removed with one
  conditioned update, and every removed binding is reported under the first filter matching it.
* DescribeAcls answers from this broker's cache (Kafka's ``acls(filter)``), grouped by resource.

Handlers here call the ACL authorizer for ACL management (what Kafka's ``Authorizer.acls``,
``createAcls`` and ``deleteAcls`` do); authorization decisions go through authz. Event loop
only; ZooKeeper writes run on the ZooKeeper executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.broker.handlers import authz
from loglake.broker.security.acl_authorizer import AclAuthorizer
from loglake.broker.security.acl_filters import (
    AccessControlEntryFilter,
    AclBindingFilter,
    ResourcePatternFilter,
    enum_or_unknown,
)
from loglake.broker.security.acl_model import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from loglake.broker.security.acl_sync import (
    entry_of,
    pattern_of,
    stored_acl,
    stored_resource,
)
from loglake.catalog.acls import StoredAcl, StoredResource
from loglake.errors import LoglakeError

if TYPE_CHECKING:
    from loglake.broker.services import BrokerServices

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
NO_AUTHORIZER = "No Authorizer is configured on the broker"
CLUSTER_REFUSED = "Cluster authorization failed."


class InvalidAclError(Exception):
    """A creation or filter Kafka answers INVALID_REQUEST for (message as the answer's)."""


def _acl_authorizer(services: BrokerServices) -> AclAuthorizer | None:
    authorizer = services.authorizer
    return authorizer if isinstance(authorizer, AclAuthorizer) else None


def _failure(exc: BaseException) -> tuple[ErrorCode, str]:
    if isinstance(exc, LoglakeError):
        return exc.code, str(exc)
    return ErrorCode.unknown_server_error, str(exc) or type(exc).__name__


# ---- DescribeAcls -------------------------------------------------------------------------
async def describe_acls(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    cls = response_class(DESCRIBE_ACLS, frame.api_version)
    if not authz.cluster_allowed(services, frame, AclOperation.DESCRIBE):
        return build(cls, {"error_code": authz.CLUSTER_AUTHORIZATION_FAILED,
                           "error_message": CLUSTER_REFUSED, "resources": []})
    authorizer = _acl_authorizer(services)
    if authorizer is None:
        return build(cls, {"error_code": ErrorCode.security_disabled,
                           "error_message": NO_AUTHORIZER, "resources": []})
    binding_filter = _filter(request)
    if binding_filter.is_unknown():
        return build(cls, {"error_code": ErrorCode.invalid_request,
                           "error_message": "The filter contains UNKNOWN elements",
                           "resources": []})
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in authorizer.acls(binding_filter):
        grouped.setdefault(binding.pattern, []).append(binding.entry)
    resources = [
        {"resource_type": int(pattern.resource_type), "resource_name": pattern.name,
         "pattern_type": int(pattern.pattern_type),
         "acls": [{"principal": e.principal, "host": e.host, "operation": int(e.operation),
                   "permission_type": int(e.permission)} for e in entries]}
        for pattern, entries in grouped.items()]
    return build(cls, {"error_code": ErrorCode.none, "error_message": None,
                       "resources": resources})


def _filter(item: Any) -> AclBindingFilter:
    """A DescribeAcls request or DeleteAcls filter as a binding filter (Kafka's
    ``DescribeAclsRequest.filter``)."""
    return AclBindingFilter(
        ResourcePatternFilter(enum_or_unknown(ResourceType, item.resource_type_filter),
                              item.resource_name_filter,
                              enum_or_unknown(PatternType, item.pattern_type_filter)),
        AccessControlEntryFilter(item.principal_filter, item.host_filter,
                                 enum_or_unknown(AclOperation, item.operation),
                                 enum_or_unknown(AclPermissionType, item.permission_type)))


# ---- CreateAcls ---------------------------------------------------------------------------
async def create_acls(services: BrokerServices, frame: RequestFrame) -> Any:
    creations = frame.body.creations
    cls = response_class(CREATE_ACLS, frame.api_version)

    def all_failed(code: ErrorCode, message: str) -> Any:
        return build(cls, {"results": [{"error_code": code, "error_message": message}
                                       for _ in creations]})

    if not authz.cluster_allowed(services, frame, AclOperation.ALTER):
        return all_failed(authz.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_REFUSED)
    authorizer = _acl_authorizer(services)
    if authorizer is None:
        return all_failed(ErrorCode.security_disabled, NO_AUTHORIZER)
    results: list[dict[str, Any]] = [{"error_code": ErrorCode.none, "error_message": None}
                                     for _ in creations]
    by_resource: dict[StoredResource, list[tuple[int, StoredAcl]]] = {}
    for index, creation in enumerate(creations):
        try:
            binding = new_binding(creation)
        except InvalidAclError as exc:
            results[index] = {"error_code": ErrorCode.invalid_request,
                              "error_message": str(exc)}
            continue
        by_resource.setdefault(stored_resource(binding.pattern), []).append(
            (index, stored_acl(binding.entry)))
    store = services.zk.catalog.acls()
    for res, items in by_resource.items():
        new = frozenset(entry for _, entry in items)
        async with authorizer.updates:  # write and apply as one (acl_sync.py)
            try:
                _, written = await services.zk.call(store.update, res,
                                                    lambda acls, new=new: acls | new)
            except Exception as exc:
                code, message = _failure(exc)
                for index, _ in items:
                    results[index] = {"error_code": code, "error_message": message}
                continue
            authorizer.apply(pattern_of(res), [entry_of(a) for a in written.acls])
    return build(cls, {"results": results})


def new_binding(creation: Any) -> AclBinding:
    """The binding a creation asks for, checked as Kafka does (InvalidAclError otherwise)."""
    resource_type = enum_or_unknown(ResourceType, creation.resource_type)
    pattern_type = enum_or_unknown(PatternType, creation.resource_pattern_type)
    operation = enum_or_unknown(AclOperation, creation.operation)
    permission = enum_or_unknown(AclPermissionType, creation.permission_type)
    name = creation.resource_name
    if resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAclError(f"Invalid resourceType {_name(resource_type)}")
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAclError(f"Invalid patternType {_name(pattern_type)}")
    if operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidAclError(f"Invalid operation {_name(operation)}")
    if permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidAclError(f"Invalid permissionType {_name(permission)}")
    if not name:
        raise InvalidAclError("Resource name should not be empty")
    if resource_type is ResourceType.CLUSTER and name != CLUSTER_NAME:
        raise InvalidAclError(
            f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if "/" in name:
        raise InvalidAclError(f"ACL binding contains invalid resource name: {name}")
    kind, sep, who = (creation.principal or "").partition(":")
    if not sep or not kind or not who:
        raise InvalidAclError(
            f"Could not parse principal from `{creation.principal}` (no colon is present "
            f"separating the principal type from the principal name)")
    if not creation.host:
        raise InvalidAclError("Invalid empty host")
    return AclBinding(ResourcePattern(resource_type, name, pattern_type),
                      AccessControlEntry(creation.principal, creation.host,
                                         operation, permission))


def _name(value: Any) -> str:
    return str(getattr(value, "name", value))


# ---- DeleteAcls ---------------------------------------------------------------------------
async def delete_acls(services: BrokerServices, frame: RequestFrame) -> Any:
    items = frame.body.filters
    cls = response_class(DELETE_ACLS, frame.api_version)

    def all_failed(code: ErrorCode, message: str) -> Any:
        return build(cls, {"filter_results": [
            {"error_code": code, "error_message": message, "matching_acls": []}
            for _ in items]})

    if not authz.cluster_allowed(services, frame, AclOperation.ALTER):
        return all_failed(authz.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_REFUSED)
    authorizer = _acl_authorizer(services)
    if authorizer is None:
        return all_failed(ErrorCode.security_disabled, NO_AUTHORIZER)
    filters = [_filter(item) for item in items]
    valid = [(index, f) for index, f in enumerate(filters) if not f.is_unknown()]
    matched = await _delete_matching(services, authorizer, valid)
    results = []
    for index, binding_filter in enumerate(filters):
        if binding_filter.is_unknown():
            results.append({"error_code": ErrorCode.invalid_request,
                            "error_message": "The filter contains UNKNOWN elements",
                            "matching_acls": []})
            continue
        results.append({"error_code": ErrorCode.none, "error_message": None,
                        "matching_acls": [_matching(binding, code, message)
                                          for binding, code, message in matched[index]]})
    return build(cls, {"filter_results": results})


async def _delete_matching(
        services: BrokerServices, authorizer: AclAuthorizer,
        filters: Sequence[tuple[int, AclBindingFilter]],
) -> dict[int, list[tuple[AclBinding, ErrorCode, str | None]]]:
    """Remove every ACL a filter matches; per filter index, the bindings removed (or whose
    removal failed, with the error), each under the first filter that matches it."""
    out: dict[int, list[tuple[AclBinding, ErrorCode, str | None]]] = {
        index: [] for index, _ in filters}
    patterns = list(authorizer.patterns())
    for _, binding_filter in filters:
        patterns.extend(binding_filter.pattern.exact_patterns())
    store = services.zk.catalog.acls()
    for pattern in dict.fromkeys(patterns):
        applying = [(index, f) for index, f in filters if f.pattern.matches(pattern)]
        if not applying:
            continue
        removed: dict[AclBinding, int] = {}

        def change(acls: frozenset[StoredAcl], pattern: ResourcePattern = pattern,
                   applying: list[tuple[int, AclBindingFilter]] = applying,
                   removed: dict[AclBinding, int] = removed) -> frozenset[StoredAcl]:
            removed.clear()
            keep = set()
            for stored in acls:
                entry = entry_of(stored)
                index = next((i for i, f in applying if f.entry.matches(entry)), None)
                if index is None:
                    keep.add(stored)
                else:
                    removed[AclBinding(pattern, entry)] = index
            return frozenset(keep)

        res = stored_resource(pattern)
        async with authorizer.updates:  # write and apply as one (acl_sync.py)
            try:
                changed, written = await services.zk.call(store.update, res, change)
            except Exception as exc:
                code, message = _failure(exc)
                for binding, index in removed.items():
                    out[index].append((binding, code, message))
                continue
            authorizer.apply(pattern_of(res), [entry_of(a) for a in written.acls])
        if changed:
            for binding, index in removed.items():
                out[index].append((binding, ErrorCode.none, None))
    return out


def _matching(binding: AclBinding, code: ErrorCode, message: str | None) -> dict[str, Any]:
    pattern, entry = binding.pattern, binding.entry
    return {"error_code": code, "error_message": message,
            "resource_type": int(pattern.resource_type), "resource_name": pattern.name,
            "pattern_type": int(pattern.pattern_type), "principal": entry.principal,
            "host": entry.host, "operation": int(entry.operation),
            "permission_type": int(entry.permission)}
