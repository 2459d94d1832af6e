"""Authorization as handlers ask for it: the one place that calls ``services.authorizer``.

Kafka's ``AuthHelper`` for loglake's handlers. Every handler that authorizes goes through these
functions (never ``services.authorizer`` directly), so the audit lines are written in one place:

* :func:`allowed` / :func:`cluster_allowed`: may the request's session (``frame.session``: its
  principal and client host) perform ``operation`` on one resource, named LITERALly (the
  authorizer matches LITERAL, ``*`` and PREFIXED ACLs, DENY over ALLOW, super users).
* :func:`filter_authorized` / :func:`partition_authorized`: the same for many names at once
  (Kafka's ``filterByAuthorized``/``partitionSeqByAuthorized``; a name asked several times is
  decided once).
* :func:`allowed_by_resource_type`: may the session perform ``operation`` on some resource of
  the type (KIP-679: an idempotent producer with WRITE on any topic needs no IDEMPOTENT_WRITE).
* :func:`authorized_operations`: Kafka's authorized-operations bitfield (``1 << op.code`` for
  each operation Kafka supports on the resource type that the session may do); handlers answer
  :data:`AUTHORIZED_OPERATIONS_OMITTED` (Kafka's schema default, ``Integer.MIN_VALUE``) when the
  request did not ask for it.
* :func:`authorization_error`: the *_AUTHORIZATION_FAILED code for a resource type;
  :func:`error_response`: a whole request refused with one code on every entry.

Without an authorizer (``services.authorizer.enabled`` False) everything is allowed and no line
is logged, exactly as Kafka without ``authorizer.class.name``.

Audit lines go to the ``loglake.authorizer`` logger (Kafka's ``kafka.authorizer.logger``):
denied decisions at INFO, allowed ones at DEBUG, each only when the caller's ``log_if_denied`` /
``log_if_allowed`` says so (Kafka does not log denials of filtered listings, e.g. the topics a
Metadata request for all topics hides, nor the probes behind authorized-operations bitfields).
Format::

    Principal = User:alice is Denied operation = Read from host = 127.0.0.1 on resource =
    Topic:LITERAL:orders for request = Fetch with resourceRefCount = 1

Pure and synchronous: the authorizer answers from memory. Event loop only (like the handlers).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from loglake.broker.codec import build, response_class
from loglake.broker.error_responses import error_body
from loglake.broker.security.acl_model import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from loglake.broker.codec import RequestFrame
    from loglake.broker.security.authorizer import Authorizer

__all__ = [
    "AUTHORIZED_OPERATIONS_OMITTED", "CLUSTER_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
    "SUPPORTED_OPERATIONS", "TOPIC_AUTHORIZATION_FAILED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "WithAuthorizer", "allowed",
    "allowed_by_resource_type",
    "authorization_error", "authorized_operations", "authorizer_enabled", "cluster_allowed",
    "error_response", "filter_authorized", "partition_authorized",
]

T = TypeVar("T")


class WithAuthorizer(Protocol):
    """What these helpers use of the services: :class:`~loglake.broker.services.BrokerServices`
    or a handler module's narrower services protocol that names ``authorizer``."""

    @property
    def authorizer(self) -> Authorizer: ...


audit_log = logging.getLogger("loglake.authorizer")

TOPIC_AUTHORIZATION_FAILED = ErrorCode.topic_authorization_failed
GROUP_AUTHORIZATION_FAILED = ErrorCode.group_authorization_failed
CLUSTER_AUTHORIZATION_FAILED = ErrorCode.cluster_authorization_failed
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = ErrorCode.transactional_id_authorization_failed

AUTHORIZED_OPERATIONS_OMITTED = -(2 ** 31)
"""The authorized-operations value when the request did not ask (Kafka's schema default)."""

_Op = AclOperation
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_Op.READ, _Op.WRITE, _Op.CREATE, _Op.DESCRIBE, _Op.DELETE, _Op.ALTER,
                         _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS),
    ResourceType.GROUP: (_Op.READ, _Op.DESCRIBE, _Op.DELETE, _Op.DESCRIBE_CONFIGS,
                         _Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (_Op.CREATE, _Op.CLUSTER_ACTION, _Op.DESCRIBE_CONFIGS,
                           _Op.ALTER_CONFIGS, _Op.IDEMPOTENT_WRITE, _Op.ALTER, _Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_Op.DESCRIBE, _Op.WRITE),
    ResourceType.DELEGATION_TOKEN: (_Op.DESCRIBE,),
    ResourceType.USER: (_Op.CREATE_TOKENS, _Op.DESCRIBE_TOKENS),
}
"""The operations Kafka reports in authorized-operations bitfields, per resource type
(Kafka 4.0's ``AclEntry.supportedOperations``)."""

_ERRORS = {
    ResourceType.TOPIC: TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: CLUSTER_AUTHORIZATION_FAILED,
    ResourceType.TRANSACTIONAL_ID: TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ResourceType.DELEGATION_TOKEN: ErrorCode.delegation_token_authorization_failed,
}


def authorization_error(resource_type: ResourceType) -> ErrorCode:
    """The code a refusal on ``resource_type`` answers (Kafka's ``AclEntry.authorizationError``)."""
    try:
        return _ERRORS[resource_type]
    except KeyError:
        raise ValueError(f"no authorization error for {resource_type.name}") from None


def authorizer_enabled(services: WithAuthorizer) -> bool:
    """True when an authorizer is configured (some requests may be refused)."""
    return bool(services.authorizer.enabled)


def allowed(services: WithAuthorizer, frame: RequestFrame, operation: AclOperation,
            resource_type: ResourceType, name: str, *, log_if_allowed: bool = True,
            log_if_denied: bool = True, ref_count: int = 1) -> bool:
    """May the request's session perform ``operation`` on the resource ``resource_type:name``
    (Kafka's ``AuthHelper.authorize``)."""
    authorizer = services.authorizer
    if not authorizer.enabled:
        return True
    ok = bool(authorizer.authorize(frame.session, operation, resource_type, name))
    _audit(frame, ok, operation, resource_type, name, ref_count,
           log_if_allowed=log_if_allowed, log_if_denied=log_if_denied)
    return ok


def cluster_allowed(services: WithAuthorizer, frame: RequestFrame, operation: AclOperation, *,
                    log_if_allowed: bool = True, log_if_denied: bool = True) -> bool:
    """:func:`allowed` on the cluster resource (``kafka-cluster``)."""
    return allowed(services, frame, operation, ResourceType.CLUSTER, CLUSTER_NAME,
                   log_if_allowed=log_if_allowed, log_if_denied=log_if_denied)


def allowed_by_resource_type(services: WithAuthorizer, frame: RequestFrame,
                             operation: AclOperation, resource_type: ResourceType) -> bool:
    """May the session perform ``operation`` on at least one resource of ``resource_type``
    (Kafka's ``authorizeByResourceType``, KIP-679). Not audited (Kafka does not either)."""
    authorizer = services.authorizer
    if not authorizer.enabled:
        return True
    return bool(authorizer.authorize_by_resource_type(frame.session, operation, resource_type))


def filter_authorized(services: WithAuthorizer, frame: RequestFrame, operation: AclOperation,
                      resource_type: ResourceType, names: Iterable[str], *,
                      log_if_allowed: bool = True, log_if_denied: bool = True) -> set[str]:
    """The names among ``names`` the session may perform ``operation`` on; each distinct name
    is decided (and audited) once, with its count as ``resourceRefCount``."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    if not services.authorizer.enabled:
        return set(counts)
    return {name for name, count in counts.items()
            if allowed(services, frame, operation, resource_type, name, ref_count=count,
                       log_if_allowed=log_if_allowed, log_if_denied=log_if_denied)}


def partition_authorized(services: WithAuthorizer, frame: RequestFrame,
                         operation: AclOperation, resource_type: ResourceType,
                         items: Sequence[T], name_of: Callable[[T], str], *,
                         log_if_allowed: bool = True,
                         log_if_denied: bool = True) -> tuple[list[T], list[T]]:
    """``items`` split into (authorized, unauthorized), order kept (Kafka's
    ``partitionSeqByAuthorized``)."""
    if not services.authorizer.enabled:
        return list(items), []
    ok = filter_authorized(services, frame, operation, resource_type,
                           (name_of(item) for item in items),
                           log_if_allowed=log_if_allowed, log_if_denied=log_if_denied)
    yes: list[T] = []
    no: list[T] = []
    for item in items:
        (yes if name_of(item) in ok else no).append(item)
    return yes, no


def authorized_operations(services: WithAuthorizer, frame: RequestFrame,
                          resource_type: ResourceType, name: str) -> int:
    """Kafka's authorized-operations bitfield for the resource: ``1 << op`` for each operation
    of :data:`SUPPORTED_OPERATIONS` the session may perform (all of them without an authorizer).
    The probes are not audited."""
    ops = SUPPORTED_OPERATIONS[resource_type]
    authorizer = services.authorizer
    if authorizer.enabled:
        ops = tuple(op for op in ops
                    if authorizer.authorize(frame.session, op, resource_type, name))
    bits = 0
    for op in ops:
        bits |= 1 << int(op)
    return bits


def error_response(frame: RequestFrame, error: ErrorCode, message: str = "") -> Any:
    """The response to ``frame`` with ``error`` on every entry it names (Kafka's
    ``getErrorResponse``: a request refused as a whole, e.g. a transactional Produce whose
    transactional id is not authorized)."""
    body = error_body(frame.api_key, frame.api_version, frame.body, error, message)
    if body is None:
        raise ValueError(f"no error response for API {frame.api_key}")
    return build(response_class(frame.api_key, frame.api_version), body)


def _audit(frame: RequestFrame, ok: bool, operation: AclOperation,
           resource_type: ResourceType, name: str, ref_count: int, *,
           log_if_allowed: bool, log_if_denied: bool) -> None:
    if ok:
        if not (log_if_allowed and audit_log.isEnabledFor(logging.DEBUG)):
            return
        level = logging.DEBUG
    else:
        if not (log_if_denied and audit_log.isEnabledFor(logging.INFO)):
            return
        level = logging.INFO
    session = frame.session
    audit_log.log(
        level,
        "Principal = %s is %s operation = %s from host = %s on resource = %s:LITERAL:%s "
        "for request = %s with resourceRefCount = %d",
        session.principal, "Allowed" if ok else "Denied", operation.zk_name,
        session.client_host, resource_type.zk_name, name, _request_name(frame), ref_count)


def _request_name(frame: RequestFrame) -> str:
    body = frame.body
    if body is None:
        return f"api {frame.api_key}"
    return type(body).__name__.removesuffix("Request")
