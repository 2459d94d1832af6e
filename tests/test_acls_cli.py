"""``loglake acls add|list|remove`` (client/acls_cli.py) against a real broker with the ACL
authorizer: through ZooKeeper (``--zookeeper``) and through the brokers
(``--bootstrap-server``: confluent-kafka's AdminClient, a raw DescribeAcls), in kafka-acls'
output form; the brokers apply what the ZooKeeper mode writes.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from loglake.catalog.acls import StoredAcl, StoredResource
from loglake.catalog.zookeeper import ClusterCatalog
from loglake.cli import main
from loglake.client.acls_cli import AclRow, RowFilter, list_output, operation, rows
from loglake.dev.harness import DevCluster, wait_until

AUTHORIZER = {"authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer"}


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
        ) -> Iterator[DevCluster]:
    data: Path = tmp_path_factory.mktemp("acls-cli")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=AUTHORIZER) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def catalog(dev: DevCluster) -> Iterator[ClusterCatalog]:
    cat = ClusterCatalog(dev.zookeeper_connect, mode="tool")
    cat.start()
    try:
        yield cat
    finally:
        cat.stop()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["acls", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_zookeeper_mode_grants_what_the_broker_then_enforces(
        dev: DevCluster, catalog: ClusterCatalog, capsys: pytest.CaptureFixture[str]) -> None:
    zk = ["--zookeeper", dev.zookeeper_connect]
    bootstrap = ["--bootstrap-server", dev.bootstrap_servers]
    # no ACL yet: listing through the broker is refused (DESCRIBE on the cluster)
    code, _, err = run(capsys, "list", *bootstrap)
    assert code == 1 and "CLUSTER_AUTHORIZATION_FAILED" in err.upper()
    code, out, _ = run(capsys, "add", *zk, "--cluster", "--allow-principal",
                       "User:ANONYMOUS", "--operation", "Alter", "--operation", "describe")
    assert code == 0
    assert "Added (principal=User:ANONYMOUS, host=*, operation=ALTER, permissionType=ALLOW)" \
        " for ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)" \
        in out
    assert catalog.acls().get(StoredResource("Cluster", "kafka-cluster")).acls == {
        StoredAcl("User:ANONYMOUS", "*", "Alter", "Allow"),
        StoredAcl("User:ANONYMOUS", "*", "Describe", "Allow")}

    def listed() -> str | None:
        code, out, _ = run(capsys, "list", *bootstrap)
        return out if code == 0 else None

    out = wait_until(listed, 10, "the broker applied the ZooKeeper write")
    assert "Current ACLs for resource `ResourcePattern(resourceType=CLUSTER, " \
        "name=kafka-cluster, patternType=LITERAL)`" in out


def test_broker_mode_add_list_remove(dev: DevCluster, catalog: ClusterCatalog,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    catalog.acls().add("cluster", "kafka-cluster", principal="User:ANONYMOUS",
                       operation="all")
    bootstrap = ["--bootstrap-server", dev.bootstrap_servers]
    wait_until(lambda: run(capsys, "list", *bootstrap)[0] == 0, 10, "cluster ACL applied")
    code, _, err = run(capsys, "add", *bootstrap, "--topic", "orders", "--topic", "audit",
                       "--allow-principal", "User:alice", "--allow-host", "127.0.0.1",
                       "--operation", "Read", "--operation", "Write")
    assert code == 0, err
    code, _, err = run(capsys, "add", *bootstrap, "--group", "app-",
                       "--resource-pattern-type", "prefixed", "--deny-principal", "User:bob",
                       "--operation", "read")
    assert code == 0, err
    assert len(catalog.acls().get(StoredResource("Topic", "orders")).acls) == 2
    assert catalog.acls().get(StoredResource("Group", "app-", "PREFIXED")).acls == {
        StoredAcl("User:bob", "*", "Read", "Deny")}

    code, out, _ = run(capsys, "list", *bootstrap, "--topic", "orders")
    assert code == 0
    assert out.splitlines()[:3] == [
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, "
        "patternType=LITERAL)`: ",
        " \t(principal=User:alice, host=127.0.0.1, operation=READ, permissionType=ALLOW) ",
        " \t(principal=User:alice, host=127.0.0.1, operation=WRITE, permissionType=ALLOW) "]
    code, out, _ = run(capsys, "list", *bootstrap, "--group", "app-orders",
                       "--resource-pattern-type", "match")
    assert "name=app-, patternType=PREFIXED" in out and "User:bob" in out
    code, out, _ = run(capsys, "list", *bootstrap, "--principal", "User:bob")
    assert "User:alice" not in out and "User:bob" in out
    assert out.splitlines()[0] == "ACLs for principal `User:bob`"  # as kafka-acls prints

    # exact entries, then everything of a resource
    code, out, _ = run(capsys, "remove", *bootstrap, "--topic", "orders", "--allow-principal",
                       "User:alice", "--allow-host", "127.0.0.1", "--operation", "write")
    assert code == 0 and out.count("Removed") == 1
    assert catalog.acls().get(StoredResource("Topic", "orders")).acls == {
        StoredAcl("User:alice", "127.0.0.1", "Read", "Allow")}
    code, out, _ = run(capsys, "remove", *bootstrap, "--topic", "orders", "--topic", "audit")
    assert code == 0 and out.count("Removed") == 3
    assert catalog.acls().get(StoredResource("Topic", "audit")).version == -1
    # through ZooKeeper too
    code, out, _ = run(capsys, "remove", "--zookeeper", dev.zookeeper_connect, "--group",
                       "app-", "--resource-pattern-type", "prefixed")
    assert code == 0 and "User:bob" in out
    code, out, _ = run(capsys, "list", "--zookeeper", dev.zookeeper_connect, "--group", "app-")
    assert out == ""


def test_bad_arguments_are_one_error_line(dev: DevCluster,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    zk = ["--zookeeper", dev.zookeeper_connect]
    code, _, err = run(capsys, "add", *zk, "--allow-principal", "User:a")
    assert code == 1 and "name a resource" in err
    code, _, err = run(capsys, "add", *zk, "--topic", "t")
    assert code == 1 and "principal" in err
    code, _, err = run(capsys, "add", *zk, "--topic", "t", "--allow-principal", "alice")
    assert code == 1 and "User:<name>" in err
    with pytest.raises(SystemExit):
        main(["acls", "add", *zk, "--topic", "t", "--allow-principal", "User:a",
              "--operation", "frobnicate"])


# ---- pure parts -----------------------------------------------------------------------------
def _args(**kwargs: object) -> argparse.Namespace:
    base: dict[str, object] = {
        "topic": [], "group": [], "transactional_ids": [], "cluster": False,
        "resource_pattern_type": "literal", "allow_principal": [], "deny_principal": [],
        "allow_host": [], "deny_host": [], "operation": []}
    base.update(kwargs)
    return argparse.Namespace(**base)


def test_rows_are_the_cross_product() -> None:
    got = rows(_args(topic=["a", "b"], allow_principal=["User:x", "User:y"],
                     operation=[operation("read"), operation("DESCRIBE_CONFIGS")],
                     deny_principal=["User:z"], cluster=True))
    assert len(got) == 2 * 2 * 3 + 1 * 2 * 3  # principals x operations x resources
    assert AclRow("CLUSTER", "kafka-cluster", "LITERAL", "User:z", "*", "READ", "DENY") in got
    assert rows(_args(group=["g"], allow_principal=["User:x"]))[0].operation == "ALL"
    assert AclRow("TOPIC", "b", "LITERAL", "User:y", "*", "DESCRIBE_CONFIGS", "ALLOW") in got


def test_row_filter_matches_like_kafka() -> None:
    prefixed = AclRow("TOPIC", "app-", "PREFIXED", "User:a", "*", "READ", "ALLOW")
    wildcard = AclRow("TOPIC", "*", "LITERAL", "User:a", "*", "READ", "ALLOW")
    assert RowFilter("TOPIC", "app-x", "MATCH").matches(prefixed)
    assert RowFilter("TOPIC", "app-x", "MATCH").matches(wildcard)
    assert not RowFilter("TOPIC", "app-x", "ANY").matches(prefixed)
    assert RowFilter("TOPIC", "app-", "ANY").matches(prefixed)
    assert not RowFilter("GROUP", None, "ANY").matches(prefixed)
    assert not RowFilter(None, None, "ANY", principal="User:b").matches(prefixed)
    assert list_output([]) == ""
