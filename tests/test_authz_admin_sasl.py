"""Admin API authorization with distinct SASL principals: one broker with the ACL authorizer, a
SASL_PLAINTEXT listener (PLAIN users ``admin``, ``alice``, ``bob``; ``admin`` a super user) and a
PLAINTEXT listener for the harness and the brokers' own traffic (``User:ANONYMOUS``, also a
super user here). ACLs name one principal or ``User:*``; what one user is granted another is
not. Clients: confluent-kafka's AdminClient and kafka-python's KafkaAdminClient over SASL, and
loglake's raw request path (client/_wire.py, SASL included) for APIs the clients lack.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kafka import KafkaAdminClient
from kio.schema.errors import ErrorCode

from loglake.catalog.acls import AclStore
from loglake.client import _wire
from loglake.client.security import SecurityConfig
from loglake.dev.harness import DevCluster
from tests.authz_util import (
    PLAIN_USERS,
    acl_store,
    eventually,
    granted,
    plain_sasl_overrides,
)

USERS = PLAIN_USERS
TOPIC_AUTHZ = KafkaError.TOPIC_AUTHORIZATION_FAILED
CLUSTER_AUTHZ = KafkaError.CLUSTER_AUTHORIZATION_FAILED


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[DevCluster]:
    overrides = {**plain_sasl_overrides()}
    data = tmp_path_factory.mktemp("authz-admin-sasl")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def store(dev: DevCluster) -> Iterator[AclStore]:
    with acl_store(dev.zookeeper_connect) as zk_store:
        yield zk_store


@pytest.fixture
def acls(store: AclStore) -> Iterator[Callable[..., None]]:
    """``acls(resource_type, name, operation, principal=..., permission=..., ...)``: an ACL
    removed at the end of the test."""
    with granted(store) as add:
        yield add


def _port(dev: DevCluster) -> int:
    return dev.broker_port(1) + 100


def _conf(dev: DevCluster, user: str) -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{_port(dev)}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user]}


def admin_for(dev: DevCluster, user: str) -> AdminClient:
    return AdminClient(_conf(dev, user))


def raw(dev: DevCluster, user: str, api_key: int, version: int, body: dict[str, Any]) -> Any:
    security = SecurityConfig.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.username": user, "sasl.password": USERS[user]})
    return _wire.request("127.0.0.1", _port(dev), api_key, version, body, timeout=15,
                         client_id=f"authz-{user}", operation="test", security=security)


def outcome(future: Any, timeout: float = 20.0) -> int:
    try:
        future.result(timeout)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return 0


def create(admin: AdminClient, name: str) -> int:
    return outcome(admin.create_topics([NewTopic(name, 1, 1)], request_timeout=15)[name])


def test_super_user_over_sasl_needs_no_acl(dev: DevCluster) -> None:
    admin = admin_for(dev, "admin")
    name = f"super-{uuid.uuid4().hex[:8]}"
    assert create(admin, name) == 0
    assert outcome(admin.create_partitions([NewPartitions(name, 2)],
                                           request_timeout=15)[name]) == 0
    broker = ConfigResource(ConfigResource.Type.BROKER, "1")
    assert outcome(admin.describe_configs([broker], request_timeout=15)[broker]) == 0
    assert raw(dev, "admin", 35, 4, {"topics": None}).error_code == ErrorCode.none
    assert outcome(admin.delete_topics([name], request_timeout=15)[name]) == 0


def test_acls_name_one_principal(dev: DevCluster, acls: Callable[..., None]) -> None:
    prefix = f"alice-{uuid.uuid4().hex[:8]}-"
    alice, bob = admin_for(dev, "alice"), admin_for(dev, "bob")
    assert create(alice, prefix + "a") == TOPIC_AUTHZ
    acls("Topic", prefix, "Create", principal="User:alice", pattern_type="PREFIXED")
    eventually(lambda: create(alice, prefix + "a"), lambda c: c == 0, "alice's CREATE")
    assert create(bob, prefix + "b") == TOPIC_AUTHZ  # alice's grant is not bob's
    kp = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{_port(dev)}",
                          security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                          sasl_plain_username="bob", sasl_plain_password=USERS["bob"])
    try:
        answer = kp.delete_topics([prefix + "a"], raise_errors=False)
        assert [t["error_code"] for t in answer["topics"]] == [
            ErrorCode.topic_authorization_failed]
        acls("Topic", prefix, "Delete", principal="User:bob", pattern_type="PREFIXED")
        answer = eventually(lambda: kp.delete_topics([prefix + "a"], raise_errors=False),
                            lambda a: a["topics"][0]["error_code"] == 0, "bob's DELETE")
    finally:
        kp.close()


def test_wildcard_principal_and_deny_for_one(dev: DevCluster,
                                             acls: Callable[..., None]) -> None:
    alice, bob = admin_for(dev, "alice"), admin_for(dev, "bob")

    def log_dirs(user: str) -> Any:
        return raw(dev, user, 35, 4, {"topics": None}).error_code

    eventually(lambda: log_dirs("alice"), lambda c: c == ErrorCode.cluster_authorization_failed,
               "no cluster DESCRIBE")
    acls("Cluster", "kafka-cluster", "Describe", principal="User:*")
    eventually(lambda: log_dirs("alice"), lambda c: c == ErrorCode.none, "User:* DESCRIBE")
    assert log_dirs("bob") == ErrorCode.none
    acls("Cluster", "kafka-cluster", "Describe", principal="User:bob", permission="Deny")
    eventually(lambda: log_dirs("bob"), lambda c: c == ErrorCode.cluster_authorization_failed,
               "bob's DENY over User:*")
    assert log_dirs("alice") == ErrorCode.none
    ops = {user: admin.describe_cluster(include_authorized_operations=True,
                                        request_timeout=15).result(20).authorized_operations
           for user, admin in (("alice", alice), ("bob", bob))}
    assert [op.name for op in ops["alice"]] == ["DESCRIBE"]
    assert not ops["bob"]


def test_scram_credential_apis_need_cluster_describe_and_alter(
        dev: DevCluster, acls: Callable[..., None]) -> None:
    """DescribeUserScramCredentials needs DESCRIBE, AlterUserScramCredentials ALTER on the
    cluster (Kafka's KafkaApis); refusals answer CLUSTER_AUTHORIZATION_FAILED."""
    if 50 not in _served_apis(dev):
        pytest.skip("DescribeUserScramCredentials is not served yet")
    def describe() -> Any:  # raw: confluent-kafka 2.16 crashes on a refused describe
        return raw(dev, "alice", 50, 0, {"users": [{"name": "carol"}]}).error_code

    def alter() -> Any:
        answer = raw(dev, "alice", 51, 0, {"deletions": [], "upsertions": [
            {"name": "carol", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16,
             "salted_password": b"p" * 32}]})
        return answer.results[0].error_code

    # (an earlier test's cluster ACLs may take a moment to be gone)
    eventually(describe, lambda c: c == ErrorCode.cluster_authorization_failed, "no DESCRIBE")
    eventually(alter, lambda c: c == ErrorCode.cluster_authorization_failed, "no ALTER")
    acls("Cluster", "kafka-cluster", "Describe", principal="User:alice")
    eventually(describe, lambda c: c == ErrorCode.none, "alice's cluster DESCRIBE")
    assert alter() == ErrorCode.cluster_authorization_failed
    acls("Cluster", "kafka-cluster", "Alter", principal="User:alice")
    eventually(alter, lambda c: c == ErrorCode.none, "alice's cluster ALTER")


def test_client_quota_apis_need_cluster_describe_configs_and_alter_configs(
        dev: DevCluster, acls: Callable[..., None]) -> None:
    """DescribeClientQuotas needs DESCRIBE_CONFIGS, AlterClientQuotas ALTER_CONFIGS on the
    cluster (Kafka's KafkaApis); refusals answer CLUSTER_AUTHORIZATION_FAILED."""
    if 48 not in _served_apis(dev):
        pytest.skip("DescribeClientQuotas is not served yet")

    def describe() -> Any:
        return raw(dev, "alice", 48, 1, {"components": [], "strict": False}).error_code

    def alter() -> Any:
        answer = raw(dev, "alice", 49, 1, {"entries": [{
            "entity": [{"entity_type": "user", "entity_name": "carol"}],
            "ops": [{"key": "producer_byte_rate", "value": 1048576.0, "remove": False}]}],
            "validate_only": True})
        return answer.entries[0].error_code

    eventually(describe, lambda c: c == ErrorCode.cluster_authorization_failed,
               "no DESCRIBE_CONFIGS")
    eventually(alter, lambda c: c == ErrorCode.cluster_authorization_failed, "no ALTER_CONFIGS")
    acls("Cluster", "kafka-cluster", "DescribeConfigs", principal="User:alice")
    eventually(describe, lambda c: c == ErrorCode.none, "alice's DESCRIBE_CONFIGS")
    assert alter() == ErrorCode.cluster_authorization_failed
    acls("Cluster", "kafka-cluster", "AlterConfigs", principal="User:alice")
    eventually(alter, lambda c: c == ErrorCode.none, "alice's ALTER_CONFIGS")


def _served_apis(dev: DevCluster) -> set[int]:
    answer = raw(dev, "admin", 18, 3, {"client_software_name": "test",
                                       "client_software_version": "1"})
    return {api.api_key for api in answer.api_keys}
