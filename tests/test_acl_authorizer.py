"""The ACL authorizer's rules against Kafka's AclAuthorizer semantics (pure, in memory): super
users, DENY over ALLOW, LITERAL / ``*`` / PREFIXED patterns, hosts and ``User:*``, implied
operations, ``allow.everyone.if.no.acl.found``, ``authorize_by_resource_type`` (KIP-679), and
the binding filters DescribeAcls/DeleteAcls use. Cases follow Kafka's AuthorizerTest and
BaseAuthorizerTest.
"""

from __future__ import annotations

import pytest

from loglake.broker.security.acl_authorizer import (
    AclAuthorizer,
    allowing_operations,
    parse_super_users,
)
from loglake.broker.security.acl_filters import (
    ANY_FILTER,
    AccessControlEntryFilter,
    AclBindingFilter,
    ResourcePatternFilter,
)
from loglake.broker.security.acl_model import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from loglake.broker.security.principal import KafkaPrincipal
from loglake.broker.security.session import Session

Op = AclOperation
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TXN = ResourceType.TRANSACTIONAL_ID
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED
HOST1 = "192.168.1.1"
HOST2 = "192.168.1.2"


def ctx(user: str, host: str = HOST1) -> Session:
    return Session(client_host=host, principal=KafkaPrincipal.user(user))


def ace(user: str, op: AclOperation, permission: AclPermissionType = ALLOW,
        host: str = "*") -> AccessControlEntry:
    return AccessControlEntry(f"User:{user}", host, op, permission)


def add(auth: AclAuthorizer, pattern: ResourcePattern, *entries: AccessControlEntry) -> None:
    auth.apply(pattern, auth.entries(pattern) | set(entries))


def remove(auth: AclAuthorizer, pattern: ResourcePattern, *entries: AccessControlEntry) -> None:
    auth.apply(pattern, auth.entries(pattern) - set(entries))


def topic(name: str, pattern_type: PatternType = LITERAL) -> ResourcePattern:
    return ResourcePattern(TOPIC, name, pattern_type)


@pytest.fixture
def auth() -> AclAuthorizer:
    return AclAuthorizer(super_users=parse_super_users("User:superuser1; User:superuser2"))


# ---- authorize -------------------------------------------------------------------------------
def test_topic_acl_hosts_and_principals(auth: AclAuthorizer) -> None:
    """Kafka's testTopicAcl."""
    t = topic("orders")
    add(auth, t,
        ace("rob", Op.READ, host=HOST1), ace("rob", Op.READ, host=HOST2),
        ace("batman", Op.WRITE, host=HOST2), ace("rob", Op.WRITE, DENY, host=HOST1),
        ace("*", Op.DESCRIBE, host="*"), ace("batman", Op.ALTER, DENY, host="*"),
        ace("*", Op.WRITE, host=HOST2))
    assert auth.authorize(ctx("rob", HOST1), Op.READ, TOPIC, "orders")
    assert auth.authorize(ctx("rob", HOST2), Op.READ, TOPIC, "orders")
    assert not auth.authorize(ctx("rob", HOST1), Op.WRITE, TOPIC, "orders")  # denied host1
    assert auth.authorize(ctx("rob", HOST2), Op.WRITE, TOPIC, "orders")  # User:* on host2
    assert auth.authorize(ctx("batman", HOST2), Op.WRITE, TOPIC, "orders")
    assert not auth.authorize(ctx("batman", HOST1), Op.READ, TOPIC, "orders")
    assert auth.authorize(ctx("somebody", "10.0.0.9"), Op.DESCRIBE, TOPIC, "orders")
    assert not auth.authorize(ctx("batman", HOST2), Op.ALTER, TOPIC, "orders")
    assert not auth.authorize(ctx("rob", HOST1), Op.READ, TOPIC, "other")  # no ACLs: deny


def test_deny_takes_precedence(auth: AclAuthorizer) -> None:
    t = topic("t")
    add(auth, t, ace("alice", Op.ALL, host=HOST1), ace("alice", Op.ALL, DENY, host=HOST1))
    assert not auth.authorize(ctx("alice"), Op.READ, TOPIC, "t")


def test_deny_of_one_operation_leaves_the_others(auth: AclAuthorizer) -> None:
    add(auth, topic("t"), ace("alice", Op.ALL), ace("alice", Op.WRITE, DENY))
    assert auth.authorize(ctx("alice"), Op.READ, TOPIC, "t")
    assert not auth.authorize(ctx("alice"), Op.WRITE, TOPIC, "t")
    # a DENY of READ does not deny the DESCRIBE it would have implied
    add(auth, topic("u"), ace("alice", Op.READ), ace("alice", Op.READ, DENY))
    add(auth, topic("u"), ace("alice", Op.DESCRIBE))
    assert auth.authorize(ctx("alice"), Op.DESCRIBE, TOPIC, "u")


def test_allow_all_access(auth: AclAuthorizer) -> None:
    add(auth, topic("t"), ace("*", Op.ALL))
    assert auth.authorize(ctx("random", "192.0.4.4"), Op.READ, TOPIC, "t")


def test_super_users_have_access_despite_deny_all(auth: AclAuthorizer) -> None:
    add(auth, topic("t"), ace("*", Op.ALL, DENY))
    add(auth, ResourcePattern(CLUSTER, "*", LITERAL), ace("*", Op.ALL, DENY))
    assert auth.authorize(ctx("superuser1"), Op.READ, TOPIC, "t")
    assert auth.authorize(ctx("superuser2"), Op.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert not auth.authorize(ctx("superuser3"), Op.READ, TOPIC, "t")


def test_super_users_compare_type_and_name() -> None:
    auth = AclAuthorizer(super_users=parse_super_users("Group:admins"))
    assert not auth.authorize(ctx("admins"), Op.READ, TOPIC, "t")
    assert auth.authorize(Session(principal=KafkaPrincipal("Group", "admins")), Op.READ,
                          TOPIC, "t")


def test_super_users_whitespace_and_empty() -> None:
    assert parse_super_users(" User:a ;User:b;; ") == {KafkaPrincipal.user("a"),
                                                      KafkaPrincipal.user("b")}
    assert parse_super_users("") == frozenset()


def test_wildcard_resource_and_principal(auth: AclAuthorizer) -> None:
    """Kafka's testWildCardAcls."""
    add(auth, topic("*"), ace("alice", Op.READ, host=HOST1))
    assert auth.authorize(ctx("alice"), Op.READ, TOPIC, "anything")
    assert not auth.authorize(ctx("alice", HOST2), Op.READ, TOPIC, "anything")
    add(auth, topic("*"), ace("*", Op.WRITE, host=HOST1))
    assert auth.authorize(ctx("bob"), Op.WRITE, TOPIC, "anything")
    add(auth, topic("*"), ace("*", Op.WRITE, DENY, host=HOST1))
    assert not auth.authorize(ctx("alice"), Op.WRITE, TOPIC, "anything")
    # the literal "*" of topics says nothing about groups
    assert not auth.authorize(ctx("alice"), Op.READ, GROUP, "anything")


def test_no_acl_found_denies_by_default(auth: AclAuthorizer) -> None:
    assert not auth.authorize(ctx("alice"), Op.READ, TOPIC, "t")
    assert not auth.authorize(ctx("alice"), Op.CREATE, CLUSTER, "kafka-cluster")


def test_allow_everyone_if_no_acl_found() -> None:
    auth = AclAuthorizer(allow_everyone_if_no_acl_found=True)
    assert auth.authorize(ctx("alice"), Op.READ, TOPIC, "t")
    # any ACL on the resource (even another principal's) switches the default off
    add(auth, topic("t"), ace("bob", Op.READ))
    assert not auth.authorize(ctx("alice"), Op.READ, TOPIC, "t")
    # a prefixed ACL covering the name counts too
    add(auth, topic("pre", PREFIXED), ace("bob", Op.READ))
    assert not auth.authorize(ctx("alice"), Op.READ, TOPIC, "prefix-topic")
    assert auth.authorize(ctx("alice"), Op.READ, TOPIC, "other")


@pytest.mark.parametrize(("granted", "implied"), [
    (Op.ALL, {op for op in AclOperation if op not in (Op.UNKNOWN, Op.ANY, Op.ALL)}),
    (Op.READ, {Op.READ, Op.DESCRIBE}),
    (Op.WRITE, {Op.WRITE, Op.DESCRIBE}),
    (Op.DELETE, {Op.DELETE, Op.DESCRIBE}),
    (Op.ALTER, {Op.ALTER, Op.DESCRIBE}),
    (Op.DESCRIBE, {Op.DESCRIBE}),
    (Op.CREATE, {Op.CREATE}),
    (Op.ALTER_CONFIGS, {Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}),
    (Op.DESCRIBE_CONFIGS, {Op.DESCRIBE_CONFIGS}),
    (Op.CLUSTER_ACTION, {Op.CLUSTER_ACTION}),
    (Op.IDEMPOTENT_WRITE, {Op.IDEMPOTENT_WRITE}),
])
def test_implications_of_allow(granted: AclOperation, implied: set[AclOperation]) -> None:
    """Kafka's testAclInheritance / testImplicationsOfAllow."""
    auth = AclAuthorizer()
    add(auth, ResourcePattern(CLUSTER, "kafka-cluster", LITERAL), ace("alice", granted))
    concrete = [op for op in AclOperation if op not in (Op.UNKNOWN, Op.ANY, Op.ALL)]
    for op in concrete:
        assert auth.authorize(ctx("alice"), op, CLUSTER, "kafka-cluster") == (op in implied), op


@pytest.mark.parametrize(("denied", "denies"), [
    (Op.ALL, {op for op in AclOperation if op not in (Op.UNKNOWN, Op.ANY, Op.ALL)}),
    (Op.READ, {Op.READ}),
    (Op.ALTER_CONFIGS, {Op.ALTER_CONFIGS}),
])
def test_implications_of_deny(denied: AclOperation, denies: set[AclOperation]) -> None:
    """Kafka's testImplicationsOfDeny: a DENY implies nothing but itself (ALL: everything)."""
    auth = AclAuthorizer()
    pattern = ResourcePattern(CLUSTER, "kafka-cluster", LITERAL)
    add(auth, pattern, ace("alice", Op.ALL), ace("alice", denied, DENY))
    for op in (op for op in AclOperation if op not in (Op.UNKNOWN, Op.ANY, Op.ALL)):
        assert auth.authorize(ctx("alice"), op, CLUSTER, "kafka-cluster") == (op not in denies)


def test_implied_operations_table() -> None:
    assert allowing_operations(Op.DESCRIBE) == {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE,
                                                 Op.ALTER}
    assert allowing_operations(Op.DESCRIBE_CONFIGS) == {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    assert allowing_operations(Op.WRITE) == {Op.WRITE}


def test_prefixed_resources(auth: AclAuthorizer) -> None:
    """Kafka's testAuthorizeWithPrefixedResource / testAccessAllowedIfAllowAclExistsOnPrefixed."""
    add(auth, topic("a_other", LITERAL), ace("alice", Op.READ))
    add(auth, topic("a_other", PREFIXED), ace("alice", Op.READ))
    add(auth, topic("foo-", PREFIXED), ace("alice", Op.READ))
    add(auth, topic("foo-bar", LITERAL), ace("bob", Op.READ))
    assert auth.authorize(ctx("alice"), Op.READ, TOPIC, "foo-bar")
    assert auth.authorize(ctx("alice"), Op.READ, TOPIC, "foo-")
    assert not auth.authorize(ctx("alice"), Op.READ, TOPIC, "foo")
    assert not auth.authorize(ctx("alice"), Op.READ, TOPIC, "fo")
    assert not auth.authorize(ctx("alice"), Op.READ, GROUP, "foo-bar")  # other type


def test_prefixed_deny_beats_literal_allow(auth: AclAuthorizer) -> None:
    add(auth, topic("secret-orders"), ace("alice", Op.READ))
    add(auth, topic("secret-", PREFIXED), ace("alice", Op.READ, DENY))
    assert not auth.authorize(ctx("alice"), Op.READ, TOPIC, "secret-orders")
    remove(auth, topic("secret-", PREFIXED), ace("alice", Op.READ, DENY))
    assert auth.authorize(ctx("alice"), Op.READ, TOPIC, "secret-orders")


def test_single_character_prefixes_and_names(auth: AclAuthorizer) -> None:
    """Kafka's testSingleCharacterResourceAcls."""
    add(auth, topic("f"), ace("alice", Op.READ))
    assert auth.authorize(ctx("alice"), Op.READ, TOPIC, "f")
    assert not auth.authorize(ctx("alice"), Op.READ, TOPIC, "foo")
    add(auth, topic("_", PREFIXED), ace("alice", Op.READ))
    assert auth.authorize(ctx("alice"), Op.READ, TOPIC, "_foo")
    assert auth.authorize(ctx("alice"), Op.READ, TOPIC, "_")
    assert not auth.authorize(ctx("alice"), Op.READ, TOPIC, "foo_")


def test_removing_acls_restores_the_default(auth: AclAuthorizer) -> None:
    t = topic("t")
    add(auth, t, ace("alice", Op.READ))
    remove(auth, t, ace("alice", Op.READ))
    assert auth.patterns() == []
    assert not auth.authorize(ctx("alice"), Op.READ, TOPIC, "t")
    add(auth, topic("p", PREFIXED), ace("alice", Op.READ))
    remove(auth, topic("p", PREFIXED), ace("alice", Op.READ))
    assert not auth.authorize(ctx("alice"), Op.READ, TOPIC, "pq")


def test_principal_types_must_match(auth: AclAuthorizer) -> None:
    """Kafka's testAllowAccessWithCustomPrincipal: ``User:*`` is the only wildcard."""
    add(auth, topic("t"), AccessControlEntry("Group:admins", "*", Op.READ, ALLOW))
    assert not auth.authorize(ctx("admins"), Op.READ, TOPIC, "t")
    assert auth.authorize(Session(principal=KafkaPrincipal("Group", "admins")), Op.READ,
                          TOPIC, "t")


def test_replace_all(auth: AclAuthorizer) -> None:
    add(auth, topic("old"), ace("alice", Op.READ))
    auth.replace_all({topic("new", PREFIXED): [ace("alice", Op.READ)]})
    assert not auth.authorize(ctx("alice"), Op.READ, TOPIC, "old")
    assert auth.authorize(ctx("alice"), Op.READ, TOPIC, "newer")


# ---- authorize_by_resource_type (KIP-679) -------------------------------------------------
def test_by_type_multiple_add_and_remove(auth: AclAuthorizer) -> None:
    t = topic("sb1")
    allow, deny = ace("user1", Op.READ, host=HOST1), ace("user1", Op.READ, DENY, host=HOST1)
    u1 = ctx("user1")
    for _ in range(3):
        assert not auth.authorize_by_resource_type(u1, Op.READ, TOPIC)
        add(auth, t, allow)
        assert auth.authorize_by_resource_type(u1, Op.READ, TOPIC)
        add(auth, t, deny)
        assert not auth.authorize_by_resource_type(u1, Op.READ, TOPIC)
        remove(auth, t, deny)
        assert auth.authorize_by_resource_type(u1, Op.READ, TOPIC)
        remove(auth, t, allow)


def test_by_type_unrelated_deny_does_not_dominate(auth: AclAuthorizer) -> None:
    r1, r2 = topic("sb1"), topic("sb2")
    r3 = ResourcePattern(GROUP, "s", PREFIXED)
    add(auth, r1, ace("user1", Op.READ, DENY, HOST1), ace("user2", Op.READ, DENY, HOST1),
        ace("user1", Op.WRITE, DENY, HOST2), ace("user2", Op.READ, DENY, HOST2),
        ace("user1", Op.READ, ALLOW, HOST2))
    add(auth, r2, ace("user1", Op.READ, DENY, HOST2))
    add(auth, r3, ace("user1", Op.READ, DENY, HOST2))
    assert not auth.authorize_by_resource_type(ctx("user1", HOST1), Op.READ, TOPIC)
    assert not auth.authorize_by_resource_type(ctx("user1", HOST1), Op.READ, GROUP)
    assert not auth.authorize_by_resource_type(ctx("user1", HOST1), Op.READ, TXN)
    assert not auth.authorize_by_resource_type(ctx("user1", HOST1), Op.READ, CLUSTER)
    assert auth.authorize_by_resource_type(ctx("user1", HOST2), Op.READ, TOPIC)


def test_by_type_prefixed_deny_dominates(auth: AclAuthorizer) -> None:
    allow, deny = ace("user1", Op.READ, host=HOST1), ace("user1", Op.READ, DENY, host=HOST1)
    u1 = ctx("user1")

    def group(name: str) -> ResourcePattern:
        return ResourcePattern(GROUP, name, PREFIXED)

    add(auth, group("abcde"), allow)
    assert auth.authorize_by_resource_type(u1, Op.READ, GROUP)
    add(auth, group("abcd"), deny)
    assert not auth.authorize_by_resource_type(u1, Op.READ, GROUP)
    add(auth, group("abc"), allow)
    assert auth.authorize_by_resource_type(u1, Op.READ, GROUP)
    add(auth, group("a"), deny)
    assert not auth.authorize_by_resource_type(u1, Op.READ, GROUP)
    add(auth, group("ab"), allow)
    assert not auth.authorize_by_resource_type(u1, Op.READ, GROUP)


def test_by_type_wildcard_deny_dominates(auth: AclAuthorizer) -> None:
    allow, deny = ace("user1", Op.WRITE, host=HOST1), ace("user1", Op.WRITE, DENY, host=HOST1)
    u1 = ctx("user1")
    add(auth, ResourcePattern(GROUP, "hello", PREFIXED), allow)
    assert auth.authorize_by_resource_type(u1, Op.WRITE, GROUP)
    add(auth, ResourcePattern(GROUP, "*", LITERAL), deny)
    assert not auth.authorize_by_resource_type(u1, Op.WRITE, GROUP)
    add(auth, ResourcePattern(GROUP, "*", LITERAL), allow)
    add(auth, ResourcePattern(GROUP, "aloha", LITERAL), allow)
    assert not auth.authorize_by_resource_type(u1, Op.WRITE, GROUP)


def test_by_type_all_operation_host_and_principal(auth: AclAuthorizer) -> None:
    u1 = ctx("user1")
    add(auth, topic("sb1"), ace("user1", Op.WRITE, DENY, HOST1), ace("user1", Op.ALL, ALLOW,
                                                                    HOST1))
    assert auth.authorize_by_resource_type(u1, Op.READ, TOPIC)
    add(auth, topic("sb1"), ace("user1", Op.ALL, DENY, HOST1))
    assert not auth.authorize_by_resource_type(u1, Op.READ, TOPIC)
    auth.replace_all({})
    add(auth, topic("sb2"), ace("*", Op.READ, ALLOW, "*"))
    assert auth.authorize_by_resource_type(ctx("user2", HOST2), Op.READ, TOPIC)
    add(auth, topic("sb2"), ace("*", Op.READ, DENY, HOST2))
    assert not auth.authorize_by_resource_type(ctx("user2", HOST2), Op.READ, TOPIC)
    assert auth.authorize_by_resource_type(ctx("user2", HOST1), Op.READ, TOPIC)


def test_by_type_no_implied_operations(auth: AclAuthorizer) -> None:
    """authorizeByResourceType matches the operation or ALL only (no DESCRIBE from READ)."""
    add(auth, topic("t"), ace("alice", Op.READ))
    assert not auth.authorize_by_resource_type(ctx("alice"), Op.DESCRIBE, TOPIC)


def test_by_type_super_user_and_allow_everyone(auth: AclAuthorizer) -> None:
    for rtype in (TOPIC, CLUSTER, GROUP, TXN):
        add(auth, ResourcePattern(rtype, "*", LITERAL), ace("*", Op.ALL, DENY))
        assert auth.authorize_by_resource_type(ctx("superuser1"), Op.READ, rtype)
    open_auth = AclAuthorizer(allow_everyone_if_no_acl_found=True)
    assert open_auth.authorize_by_resource_type(ctx("alice"), Op.WRITE, TOPIC)
    add(open_auth, topic("*"), ace("alice", Op.WRITE, DENY))
    assert not open_auth.authorize_by_resource_type(ctx("alice"), Op.WRITE, TOPIC)


def test_by_type_refuses_non_concrete_arguments(auth: AclAuthorizer) -> None:
    with pytest.raises(ValueError):
        auth.authorize_by_resource_type(ctx("a"), Op.ANY, TOPIC)
    with pytest.raises(ValueError):
        auth.authorize_by_resource_type(ctx("a"), Op.READ, ResourceType.ANY)


# ---- filters (DescribeAcls / DeleteAcls) -------------------------------------------------
def flt(rtype: ResourceType = ResourceType.ANY, name: str | None = None,
        pattern: PatternType = PatternType.ANY, principal: str | None = None,
        host: str | None = None, op: AclOperation = Op.ANY,
        permission: AclPermissionType = AclPermissionType.ANY) -> AclBindingFilter:
    return AclBindingFilter(ResourcePatternFilter(rtype, name, pattern),
                            AccessControlEntryFilter(principal, host, op, permission))


def test_filters_select_like_kafka(auth: AclAuthorizer) -> None:
    """Kafka's testAclsFilter."""
    lit = topic("foo-bar")
    pre = topic("foo-", PREFIXED)
    wild = topic("*")
    grp = ResourcePattern(GROUP, "foo-bar", LITERAL)
    add(auth, lit, ace("alice", Op.READ), ace("bob", Op.WRITE, DENY, HOST1))
    add(auth, pre, ace("alice", Op.WRITE))
    add(auth, wild, ace("carol", Op.DESCRIBE))
    add(auth, grp, ace("alice", Op.READ))

    def patterns(f: AclBindingFilter) -> set[ResourcePattern]:
        return {b.pattern for b in auth.acls(f)}

    assert len(auth.acls(ANY_FILTER)) == 5
    assert patterns(flt(TOPIC)) == {lit, pre, wild}
    assert patterns(flt(TOPIC, "foo-bar")) == {lit}  # ANY: exact names only
    assert patterns(flt(TOPIC, "foo-bar", PatternType.MATCH)) == {lit, pre, wild}
    assert patterns(flt(TOPIC, "foo-bar", LITERAL)) == {lit}
    assert patterns(flt(TOPIC, "foo-", PREFIXED)) == {pre}
    assert patterns(flt(TOPIC, "zzz", PatternType.MATCH)) == {wild}
    assert patterns(flt(name="foo-bar")) == {lit, grp}
    assert [b.entry for b in auth.acls(flt(principal="User:bob"))] == [
        ace("bob", Op.WRITE, DENY, HOST1)]
    assert len(auth.acls(flt(host=HOST1))) == 1
    assert len(auth.acls(flt(op=Op.READ))) == 2
    assert len(auth.acls(flt(permission=DENY))) == 1


def test_filter_indefinite_fields() -> None:
    assert flt(TOPIC, "t", LITERAL).pattern.indefinite_field() is None
    assert flt(TOPIC, "t", PatternType.MATCH).pattern.indefinite_field() is not None
    assert flt(TOPIC, None, LITERAL).pattern.indefinite_field() is not None
    assert flt(ResourceType.ANY, "t", LITERAL).pattern.indefinite_field() is not None
    assert flt(TOPIC, "t").pattern.exact_patterns() == [topic("t"), topic("t", PREFIXED)]
    assert flt(ResourceType.UNKNOWN).is_unknown()
    assert flt(op=Op.UNKNOWN).is_unknown()
    assert not flt().is_unknown()


def test_acls_listing_is_sorted(auth: AclAuthorizer) -> None:
    add(auth, topic("b"), ace("x", Op.READ))
    add(auth, topic("a"), ace("y", Op.READ), ace("x", Op.READ))
    assert [(b.pattern.name, b.entry.principal) for b in auth.acls()] == [
        ("a", "User:x"), ("a", "User:y"), ("b", "User:x")]
    assert auth.acls()[0] == AclBinding(topic("a"), ace("x", Op.READ))
