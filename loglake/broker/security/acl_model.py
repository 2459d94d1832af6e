"""Kafka's ACL model: resource types, pattern types, operations and permissions, with Kafka's
wire codes (``org.apache.kafka.common.acl`` / ``resource``) and the names Kafka writes in
ZooKeeper (``Topic``, ``Read``, ``Allow``, ...).

An ACL binding is (resource pattern, entry): the pattern is (resource type, name, pattern type),
the entry (principal, host, operation, permission). Immutable values: any thread.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @property
    def zk_name(self) -> str:
        """Kafka's name in ZooKeeper paths: ``Topic``, ``Group``, ``Cluster``,
        ``TransactionalId``, ``DelegationToken``, ``User``."""
        return _ZK_NAMES[self]


_ZK_NAMES = {
    ResourceType.UNKNOWN: "Unknown", ResourceType.ANY: "Any", ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken", ResourceType.USER: "User",
}


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14

    @property
    def zk_name(self) -> str:
        """Kafka's JSON name: ``Read``, ``DescribeConfigs``, ``ClusterAction``, ..."""
        return "".join(part.capitalize() for part in self.name.split("_"))


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3

    @property
    def zk_name(self) -> str:
        return self.name.capitalize()


CLUSTER_NAME = "kafka-cluster"
"""The name of the one cluster resource (Kafka's ``Resource.CLUSTER_NAME``)."""
WILDCARD = "*"
"""A LITERAL name or host matching every name or host."""


@dataclass(frozen=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType


@dataclass(frozen=True)
class AccessControlEntry:
    principal: str
    """``User:alice``, or ``User:*`` for every principal."""
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry
