"""What handlers ask before acting: :class:`Authorizer`.

Handlers call ``services.authorizer.authorize(frame.session, operation, resource_type, name)``
for each resource a request touches, as Kafka's ``KafkaApis`` does, and answer Kafka's
*_AUTHORIZATION_FAILED codes for refused ones. Without ``authorizer.class.name`` the broker uses
:class:`AllowAllAuthorizer` (Kafka without an authorizer: everything is allowed);
with it, the ACL authorizer (ACLs in ZooKeeper, ``super.users``,
``allow.everyone.if.no.acl.found``).

Implementations answer from memory (no I/O): they are called on the event loop.
"""

from __future__ import annotations

from typing import Protocol

from loglake.broker.security.acl_model import AclOperation, ResourceType
from loglake.broker.security.session import Session


class Authorizer(Protocol):
    @property
    def enabled(self) -> bool:
        """False when every request is allowed (no authorizer configured)."""
        ...

    def authorize(self, session: Session, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """May ``session`` perform ``operation`` on the resource (implied operations,
        wildcard and prefixed ACLs, DENY over ALLOW, super users included)."""
        ...

    def authorize_by_resource_type(self, session: Session, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """May ``session`` perform ``operation`` on at least one resource of the type
        (Kafka's ``authorizeByResourceType``, KIP-679: idempotent producers with WRITE on
        some topic need no IDEMPOTENT_WRITE)."""
        ...


class AllowAllAuthorizer:
    """No authorizer configured: every request is allowed."""

    enabled = False

    def authorize(self, session: Session, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        return True

    def authorize_by_resource_type(self, session: Session, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        return True
