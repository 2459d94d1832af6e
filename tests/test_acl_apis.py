"""CreateAcls, DescribeAcls and DeleteAcls (handlers/acls.py) against real brokers with the ACL
authorizer on: confluent-kafka's AdminClient, kafka-python's KafkaAdminClient and raw requests;
Kafka's paths in ZooKeeper; CLUSTER ALTER/DESCRIBE checks; propagation to every broker; and
SECURITY_DISABLED without an authorizer.

The cluster has no super users: its connections are PLAINTEXT, so every client is
``User:ANONYMOUS``, which the module fixture grants ALL on the cluster (ACLs written through
``ClusterCatalog.acls()``, as kafka-acls --authorizer-properties zookeeper.connect does).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpResourceType
from kafka.errors import ClusterAuthorizationFailedError, SecurityDisabledError
from kio.schema.errors import ErrorCode

from loglake.catalog.acls import StoredAcl, StoredResource
from loglake.catalog.zookeeper import ClusterCatalog
from loglake.dev.harness import DevCluster, wait_until
from tests.wire import WireClient

AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
ANON = "User:ANONYMOUS"
WAIT_S = 30.0
PROPAGATION_S = 5.0
"""An ACL change reaches every broker within this (the watch fires in milliseconds)."""


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
        ) -> Iterator[DevCluster]:
    data: Path = tmp_path_factory.mktemp("acl-apis")
    with DevCluster(data / "dev", brokers=2, zookeeper=zookeeper_hosts,
                    broker_overrides=AUTHORIZER) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def catalog(dev: DevCluster) -> Iterator[ClusterCatalog]:
    cat = ClusterCatalog(dev.zookeeper_connect, mode="tool")
    cat.start()
    cat.acls().add("cluster", "kafka-cluster", principal=ANON, operation="all")
    try:
        for broker_id in (1, 2):  # the grant reached both brokers
            _wait_broker_sees(dev, broker_id, lambda _: True, "DescribeAcls allowed")
        yield cat
    finally:
        cat.stop()


@pytest.fixture
def admin(dev: DevCluster, catalog: ClusterCatalog) -> AdminClient:
    return AdminClient({"bootstrap.servers": dev.bootstrap_servers})


def _bootstrap(dev: DevCluster, broker_id: int) -> str:
    return f"127.0.0.1:{dev.broker_port(broker_id)}"


def _all(futures: dict) -> dict:
    return {key: future.result(timeout=30) for key, future in futures.items()}


def _wait_broker_sees(dev: DevCluster, broker_id: int, predicate, what: str) -> None:
    """Poll DescribeAcls (ANY filter) on one broker until ``predicate(resources)``."""
    def seen() -> bool:
        with WireClient.connect(_bootstrap(dev, broker_id)) as client:
            response = client.request(29, 3, _any_filter())
        return response.error_code == ErrorCode.none and predicate(list(response.resources))

    wait_until(seen, WAIT_S, what, interval=0.05)


def _any_filter(**overrides: object) -> dict:
    body: dict = {"resource_type_filter": 1, "resource_name_filter": None,
                  "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                  "operation": 1, "permission_type": 1}
    body.update(overrides)
    return body


# ---------------------------------------------------------------------- confluent-kafka
def test_create_describe_delete_with_confluent(admin: AdminClient,
                                               catalog: ClusterCatalog) -> None:
    bindings = [
        AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice",
                   "*", AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:bob",
                   "10.0.0.1", AclOperation.WRITE, AclPermissionType.DENY),
        AclBinding(ResourceType.GROUP, "app-", ResourcePatternType.PREFIXED, "User:alice",
                   "*", AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:*", "*",
                   AclOperation.DESCRIBE, AclPermissionType.ALLOW),
    ]
    assert all(v is None for v in _all(admin.create_acls(bindings)).values())
    try:
        # stored at Kafka's paths
        store = catalog.acls()
        assert StoredAcl("User:bob", "10.0.0.1", "Write", "Deny") in store.get(
            StoredResource("Topic", "orders")).acls
        assert store.get(StoredResource("Group", "app-", "PREFIXED")).acls == {
            StoredAcl("User:alice", "*", "Read", "Allow")}
        # describe: everything, one exact resource, MATCH
        everything = admin.describe_acls(AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
            AclPermissionType.ANY)).result(timeout=30)
        assert set(bindings) <= set(everything)
        exact = admin.describe_acls(AclBindingFilter(
            ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, None, None,
            AclOperation.ANY, AclPermissionType.ANY)).result(timeout=30)
        assert set(exact) == set(bindings[:2])
        match = admin.describe_acls(AclBindingFilter(
            ResourceType.TOPIC, "orders", ResourcePatternType.MATCH, None, None,
            AclOperation.ANY, AclPermissionType.ANY)).result(timeout=30)
        assert set(match) == {bindings[0], bindings[1], bindings[3]}
        groups = admin.describe_acls(AclBindingFilter(
            ResourceType.GROUP, "app-orders", ResourcePatternType.MATCH, "User:alice", None,
            AclOperation.READ, AclPermissionType.ALLOW)).result(timeout=30)
        assert groups == [bindings[2]]
        # delete by principal: only alice's, reported under the filter
        deleted = _all(admin.delete_acls([AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None,
            AclOperation.ANY, AclPermissionType.ANY)]))
        assert set(next(iter(deleted.values()))) == {bindings[0], bindings[2]}
        assert store.get(StoredResource("Group", "app-", "PREFIXED")).version == -1  # gone
        left = admin.describe_acls(AclBindingFilter(
            ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
            AclPermissionType.ANY)).result(timeout=30)
        assert set(left) == {bindings[1], bindings[3]}
    finally:
        _all(admin.delete_acls([AclBindingFilter(
            ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
            AclPermissionType.ANY)]))


def test_deny_on_cluster_refuses_the_acl_apis(admin: AdminClient,
                                              catalog: ClusterCatalog, dev: DevCluster) -> None:
    """Create/DeleteAcls need ALTER on the cluster, DescribeAcls DESCRIBE; a DENY beats the
    fixture's ALLOW ALL."""
    store = catalog.acls()
    for op in ("alter", "describe"):
        store.add("cluster", "kafka-cluster", principal=ANON, operation=op, permission="deny")
    try:
        for broker_id in (1, 2):
            wait_until(lambda b=broker_id: _describe_code(dev, b)
                       == ErrorCode.cluster_authorization_failed, 10, "DescribeAcls refused")
        # librdkafka drops DescribeAcls' top-level error (it yields no bindings);
        # kafka-python reports it
        assert admin.describe_acls(AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
            AclOperation.ANY, AclPermissionType.ANY)).result(timeout=30) == []
        kp = KafkaAdminClient(bootstrap_servers=dev.bootstrap_servers)
        try:
            with pytest.raises(ClusterAuthorizationFailedError):
                kp.describe_acls(ACLFilter(
                    None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                    ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY)))
        finally:
            kp.close()
        binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL,
                             "User:x", "*", AclOperation.READ, AclPermissionType.ALLOW)
        with pytest.raises(KafkaException) as info:
            _all(admin.create_acls([binding]))
        assert info.value.args[0].code() == 31
        with WireClient.connect(dev.bootstrap_servers) as client:
            response = client.request(31, 3, {"filters": [_any_filter()]})
        assert [r.error_code for r in response.filter_results] == [
            ErrorCode.cluster_authorization_failed]
        assert store.get(StoredResource("Topic", "t")).version == -1
    finally:
        for op in ("alter", "describe"):
            store.remove("cluster", "kafka-cluster", principal=ANON, operation=op,
                         permission="deny")
        for broker_id in (1, 2):
            wait_until(lambda b=broker_id: _describe_code(dev, b) == ErrorCode.none, WAIT_S,
                       "DescribeAcls allowed again")


def _describe_code(dev: DevCluster, broker_id: int) -> ErrorCode:
    with WireClient.connect(_bootstrap(dev, broker_id)) as client:
        return client.request(29, 3, _any_filter()).error_code


def test_an_acl_reaches_every_broker_within_moments(dev: DevCluster,
                                                     catalog: ClusterCatalog) -> None:
    with WireClient.connect(_bootstrap(dev, 1)) as client:
        started = time.monotonic()
        response = client.request(30, 3, {"creations": [{
            "resource_type": 2, "resource_name": "propagated", "resource_pattern_type": 3,
            "principal": "User:carol", "host": "*", "operation": 3, "permission_type": 3}]})
    assert [r.error_code for r in response.results] == [ErrorCode.none]
    try:
        _wait_broker_sees(dev, 2, lambda rs: any(r.resource_name == "propagated" for r in rs),
                          "broker 2 lists the new ACL")
        # milliseconds on an idle box; the bound leaves room for CI under load
        assert time.monotonic() - started < PROPAGATION_S
        # written by a tool straight into ZooKeeper: both brokers see it too
        catalog.acls().add("topic", "by-tool", principal="User:carol", operation="write")
        for broker_id in (1, 2):
            _wait_broker_sees(
                dev, broker_id, lambda rs: any(r.resource_name == "by-tool" for r in rs),
                f"broker {broker_id} lists the ACL written to ZooKeeper")
    finally:
        with WireClient.connect(_bootstrap(dev, 2)) as client:
            response = client.request(31, 3, {"filters": [_any_filter(
                resource_type_filter=2, principal_filter="User:carol")]})
        assert len(response.filter_results[0].matching_acls) == 2
    for broker_id in (1, 2):
        _wait_broker_sees(dev, broker_id,
                          lambda rs: not any(r.resource_name in ("propagated", "by-tool")
                                             for r in rs), "deleted everywhere")


@pytest.mark.parametrize(("creation", "message"), [
    ({"resource_type": 4, "resource_name": "other-cluster"}, "CLUSTER resource"),
    ({"resource_name": ""}, "empty"),
    ({"resource_name": "a/b"}, "invalid resource name"),
    ({"resource_type": 1}, "resourceType"),
    ({"resource_type": 0}, "resourceType"),
    ({"resource_pattern_type": 2}, "patternType"),
    ({"resource_pattern_type": 1}, "patternType"),
    ({"operation": 1}, "operation"),
    ({"operation": 99}, "operation"),
    ({"permission_type": 1}, "permissionType"),
    ({"principal": "alice"}, "principal"),
])
def test_invalid_creations_answer_invalid_request(dev: DevCluster, catalog: ClusterCatalog,
                                                  creation: dict, message: str) -> None:
    good = {"resource_type": 2, "resource_name": "valid-one", "resource_pattern_type": 3,
            "principal": "User:dave", "host": "*", "operation": 3, "permission_type": 3}
    with WireClient.connect(dev.bootstrap_servers) as client:
        response = client.request(30, 2, {"creations": [{**good, **creation}, good]})
        bad, ok = response.results
        assert bad.error_code == ErrorCode.invalid_request
        assert message in (bad.error_message or "")
        assert ok.error_code == ErrorCode.none  # the valid one in the same request is created
        client.request(31, 2, {"filters": [_any_filter(principal_filter="User:dave")]})


def test_unknown_filters_answer_invalid_request(dev: DevCluster,
                                                catalog: ClusterCatalog) -> None:
    with WireClient.connect(dev.bootstrap_servers) as client:
        described = client.request(29, 1, _any_filter(resource_type_filter=0))
        assert described.error_code == ErrorCode.invalid_request
        deleted = client.request(31, 1, {"filters": [_any_filter(operation=0),
                                                     _any_filter(principal_filter="User:no")]})
        assert [r.error_code for r in deleted.filter_results] == [ErrorCode.invalid_request,
                                                                  ErrorCode.none]


# ---------------------------------------------------------------------- kafka-python
def test_kafka_python_admin(dev: DevCluster, catalog: ClusterCatalog) -> None:
    client = KafkaAdminClient(bootstrap_servers=dev.bootstrap_servers,
                              request_timeout_ms=30000)
    try:
        acl = ACL("User:erin", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                  ResourcePattern(KpResourceType.TRANSACTIONAL_ID, "tx-",
                                  ACLResourcePatternType.PREFIXED))
        result = client.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        found, error = client.describe_acls(ACLFilter(
            "User:erin", None, ACLOperation.ANY, ACLPermissionType.ANY,
            ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY)))
        assert error.errno == 0
        assert [(a.principal, a.operation, a.resource_pattern.resource_name) for a in found] \
            == [("User:erin", ACLOperation.WRITE, "tx-")]
        assert catalog.acls().get(StoredResource("TransactionalId", "tx-", "PREFIXED")).acls \
            == {StoredAcl("User:erin", "*", "Write", "Allow")}
        deleted = client.delete_acls([ACLFilter(
            None, None, ACLOperation.ANY, ACLPermissionType.ANY,
            ResourcePatternFilter(KpResourceType.TRANSACTIONAL_ID, "tx-orders",
                                  ACLResourcePatternType.MATCH))])
        ((_, matched, error),) = deleted
        assert error.errno == 0 and [m.principal for m in matched] == ["User:erin"]
    finally:
        client.close()


# ---------------------------------------------------------------------- no authorizer
def test_security_disabled_without_an_authorizer(cluster: DevCluster) -> None:
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        with pytest.raises(SecurityDisabledError):
            kp.describe_acls(ACLFilter(
                None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY)))
    finally:
        kp.close()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    with pytest.raises(KafkaException) as info:
        _all(admin.create_acls([AclBinding(
            ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:a", "*",
            AclOperation.READ, AclPermissionType.ALLOW)]))
    assert info.value.args[0].code() == 54  # SECURITY_DISABLED
    with WireClient.connect(cluster.bootstrap_servers) as client:
        deleted = client.request(31, 3, {"filters": [_any_filter()]})
    assert deleted.filter_results[0].error_code == ErrorCode.security_disabled
