"""Kafka's ACL binding filters (``ResourcePatternFilter``, ``AccessControlEntryFilter``,
``AclBindingFilter``): what DescribeAcls and DeleteAcls select, with Kafka's matching rules.

* Resource filter: type ANY matches every type; pattern type ANY matches LITERAL and PREFIXED
  patterns by exact name; MATCH matches every pattern that would apply to a resource of that
  name (the LITERAL name, the LITERAL ``*``, and each PREFIXED pattern the name starts with);
  LITERAL/PREFIXED match that pattern type by exact name; a null (None) name matches every name.
* Entry filter: a None principal/host matches any; operation and permission ANY match any.
* A filter with an UNKNOWN element is invalid (INVALID_REQUEST).

Immutable values, pure functions: any thread.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeVar

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


@dataclass(frozen=True)
class ResourcePatternFilter:
    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    def is_unknown(self) -> bool:
        return (self.resource_type is ResourceType.UNKNOWN
                or self.pattern_type is PatternType.UNKNOWN)

    def matches(self, pattern: ResourcePattern) -> bool:
        """Kafka's ``ResourcePatternFilter.matches``."""
        if self.resource_type is not ResourceType.ANY and \
                self.resource_type is not pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and \
                self.pattern_type is not pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type is PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD
        if pattern.pattern_type is PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False

    def indefinite_field(self) -> str | None:
        """Why this filter may match more than one pattern (Kafka's
        ``findIndefiniteField``), or None."""
        if self.resource_type is ResourceType.ANY:
            return "Resource type is ANY."
        if self.resource_type is ResourceType.UNKNOWN:
            return "Resource type is UNKNOWN."
        if self.name is None:
            return "Resource name is NULL."
        if self.pattern_type is PatternType.MATCH:
            return "Resource pattern type is MATCH."
        if self.pattern_type is PatternType.UNKNOWN:
            return "Resource pattern type is UNKNOWN."
        return None

    def exact_patterns(self) -> list[ResourcePattern]:
        """The patterns a filter that matches at most one name names directly (Kafka's
        ``filterToResources``): LITERAL/PREFIXED itself, ANY both."""
        if self.indefinite_field() is not None or self.name is None:
            return []
        if self.pattern_type is PatternType.ANY:
            return [ResourcePattern(self.resource_type, self.name, PatternType.LITERAL),
                    ResourcePattern(self.resource_type, self.name, PatternType.PREFIXED)]
        if self.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            return [ResourcePattern(self.resource_type, self.name, self.pattern_type)]
        return []


@dataclass(frozen=True)
class AccessControlEntryFilter:
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermissionType

    def is_unknown(self) -> bool:
        return (self.operation is AclOperation.UNKNOWN
                or self.permission is AclPermissionType.UNKNOWN)

    def matches(self, entry: AccessControlEntry) -> bool:
        """Kafka's ``AccessControlEntryFilter.matches``."""
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation is not entry.operation:
            return False
        return self.permission is AclPermissionType.ANY or self.permission is entry.permission


@dataclass(frozen=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter
    entry: AccessControlEntryFilter

    def is_unknown(self) -> bool:
        return self.pattern.is_unknown() or self.entry.is_unknown()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)


ANY_FILTER = AclBindingFilter(
    ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY),
    AccessControlEntryFilter(None, None, AclOperation.ANY, AclPermissionType.ANY))
"""Matches every binding."""


E = TypeVar("E", bound=enum.IntEnum)


def enum_or_unknown(enum_type: type[E], code: int) -> E:
    """``enum_type(code)``, or its UNKNOWN member for a code Kafka does not define (Kafka's
    ``fromCode``)."""
    try:
        return enum_type(code)
    except ValueError:
        return enum_type["UNKNOWN"]
