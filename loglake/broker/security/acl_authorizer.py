"""The ACL authorizer (Kafka's ``AclAuthorizer``): decisions from an in-memory copy of the
ACLs stored in ZooKeeper (``catalog/acls.py``), kept current by ``acl_sync.py``.

Rules (Kafka's, for a LITERAL resource name asked by a session):

1. A principal listed in ``super.users`` may do everything.
2. The ACLs that apply to resource ``type:name`` are those on the LITERAL name, on the
   LITERAL ``*`` of the type, and on every PREFIXED pattern the name starts with. Without any
   (for any principal), the answer is ``allow.everyone.if.no.acl.found`` (default false).
3. An ACL matches the session when its principal is the session's or ``User:*``, its host the
   client's IP address or ``*``, and its operation the one asked or ALL.
4. A matching DENY refuses (DENY beats ALLOW); otherwise a matching ALLOW permits, where
   ALLOW of READ, WRITE, DELETE or ALTER implies DESCRIBE, and ALLOW of ALTER_CONFIGS implies
   DESCRIBE_CONFIGS. Otherwise refused.

:meth:`AclAuthorizer.authorize_by_resource_type` is Kafka's ``authorizeByResourceType``
(KIP-679): may the session do the operation on *some* resource of the type (no implied
operations; a DENY on the LITERAL ``*`` refuses all; an ALLOW counts unless a DENY covers it:
the same LITERAL name or a PREFIXED deny that is a prefix of it).

Audit lines are written by the caller (``broker/handlers/authz.py``); this module logs its
cache changes only.

Thread-safety: event loop only (the cache is replaced by ``apply``/``replace_all`` on the loop;
decisions never block). Whoever reads ACLs from ZooKeeper (or writes them) and then applies
what it read holds :attr:`AclAuthorizer.updates` from the read (write) to the apply, as Kafka's
AclAuthorizer holds its lock: otherwise a slower reader could apply an older set over a newer
one (until the next notification).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from loglake.broker.security.acl_filters import AclBindingFilter
from loglake.broker.security.acl_model import (
    WILDCARD,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from loglake.broker.security.principal import USER_TYPE, KafkaPrincipal
from loglake.broker.security.session import Session

if TYPE_CHECKING:
    from loglake.config import BrokerConfig

log = logging.getLogger(__name__)

WILDCARD_PRINCIPAL = f"{USER_TYPE}:{WILDCARD}"

_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ,
                                      AclOperation.WRITE, AclOperation.DELETE,
                                      AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS,
                                              AclOperation.ALTER_CONFIGS}),
}


def allowing_operations(operation: AclOperation) -> frozenset[AclOperation]:
    """The operations whose ALLOW permits ``operation`` (besides ALL)."""
    return _IMPLIED_BY.get(operation, frozenset({operation}))


def parse_super_users(text: str) -> frozenset[KafkaPrincipal]:
    """``super.users``: ``User:admin;User:broker`` (semicolon-separated principals)."""
    return frozenset(KafkaPrincipal.parse(part) for part in text.split(";") if part.strip())


class AclAuthorizer:
    """Kafka's ACL authorizer over an in-memory ACL cache (see the module docstring)."""

    enabled = True

    def __init__(self, *, super_users: Iterable[KafkaPrincipal] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._prefix_lengths: dict[ResourceType, set[int]] = {}
        self.updates = asyncio.Lock()
        """Held from a ZooKeeper read or write of ACLs to the :meth:`apply` of its result."""

    @classmethod
    def from_config(cls, config: BrokerConfig) -> AclAuthorizer:
        return cls(super_users=parse_super_users(config.super_users),
                   allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found)

    # ---- the cache
    def apply(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """``pattern``'s ACL set is now ``entries`` (empty: none)."""
        new = frozenset(entries)
        if new:
            self._acls[pattern] = new
        else:
            self._acls.pop(pattern, None)
        if pattern.pattern_type is PatternType.PREFIXED:
            self._prefix_lengths[pattern.resource_type] = {
                len(p.name) for p in self._acls
                if p.pattern_type is PatternType.PREFIXED
                and p.resource_type is pattern.resource_type}

    def replace_all(self, acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> None:
        """Replace the whole cache (start-up load)."""
        self._acls = {}
        self._prefix_lengths = {}
        for pattern, entries in acls.items():
            self.apply(pattern, entries)

    def acls(self, binding_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """Every cached binding the filter matches (all without one), sorted by resource."""
        out = []
        for pattern in sorted(self._acls, key=_pattern_order):
            for entry in sorted(self._acls[pattern], key=_entry_order):
                binding = AclBinding(pattern, entry)
                if binding_filter is None or binding_filter.matches(binding):
                    out.append(binding)
        return out

    def patterns(self) -> list[ResourcePattern]:
        return list(self._acls)

    def entries(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acls.get(pattern, frozenset())

    # ---- decisions
    def is_super_user(self, principal: KafkaPrincipal) -> bool:
        return principal in self.super_users

    def matching_acls(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """The ACLs that apply to the LITERAL resource ``resource_type:name`` (rule 2)."""
        found: list[AccessControlEntry] = []
        acls = self._acls
        for pattern in (ResourcePattern(resource_type, name, PatternType.LITERAL),
                        ResourcePattern(resource_type, WILDCARD, PatternType.LITERAL)):
            found.extend(acls.get(pattern, ()))
        for length in self._prefix_lengths.get(resource_type, ()):
            if length <= len(name):
                found.extend(acls.get(
                    ResourcePattern(resource_type, name[:length], PatternType.PREFIXED), ()))
        return found

    def authorize(self, session: Session, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        principal = session.principal
        if principal in self.super_users:
            return True
        acls = self.matching_acls(resource_type, name)
        if not acls:
            return self.allow_everyone_if_no_acl_found
        who = (str(principal), WILDCARD_PRINCIPAL)
        hosts = (session.client_host, WILDCARD)
        applying = [entry for entry in acls if entry.principal in who and entry.host in hosts]
        for entry in applying:
            if entry.permission is AclPermissionType.DENY and \
                    entry.operation in (operation, AclOperation.ALL):
                return False
        allowing = allowing_operations(operation)
        return any(entry.permission is AclPermissionType.ALLOW
                   and (entry.operation in allowing or entry.operation is AclOperation.ALL)
                   for entry in applying)

    def authorize_by_resource_type(self, session: Session, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise ValueError(f"authorize_by_resource_type: operation {operation.name} is not "
                             f"a concrete operation")
        if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise ValueError(f"authorize_by_resource_type: resource type "
                             f"{resource_type.name} is not a concrete type")
        principal = session.principal
        if principal in self.super_users:
            return True
        who = (str(principal), WILDCARD_PRINCIPAL)
        hosts = (session.client_host, WILDCARD)
        ops = (operation, AclOperation.ALL)

        def names(pattern_type: PatternType, permission: AclPermissionType) -> set[str]:
            return {pattern.name for pattern, entries in self._acls.items()
                    if pattern.resource_type is resource_type
                    and pattern.pattern_type is pattern_type
                    and any(e.permission is permission and e.principal in who
                            and e.host in hosts and e.operation in ops for e in entries)}

        deny_literals = names(PatternType.LITERAL, AclPermissionType.DENY)
        if WILDCARD in deny_literals:
            return False
        if self.allow_everyone_if_no_acl_found:
            return True
        deny_prefixes = names(PatternType.PREFIXED, AclPermissionType.DENY)
        allow_literals = names(PatternType.LITERAL, AclPermissionType.ALLOW)
        allow_prefixes = names(PatternType.PREFIXED, AclPermissionType.ALLOW)
        if not deny_literals and not deny_prefixes:
            return bool(allow_literals or allow_prefixes)

        def dominated(name: str) -> bool:
            return any(name[:i] in deny_prefixes for i in range(1, len(name) + 1))

        return (any(not dominated(prefix) for prefix in allow_prefixes)
                or any(literal == WILDCARD
                       or (literal not in deny_literals and not dominated(literal))
                       for literal in allow_literals))


def _pattern_order(pattern: ResourcePattern) -> tuple[int, int, str]:
    return int(pattern.resource_type), int(pattern.pattern_type), pattern.name


def _entry_order(entry: AccessControlEntry) -> tuple[str, str, int, int]:
    return entry.principal, entry.host, int(entry.operation), int(entry.permission)
