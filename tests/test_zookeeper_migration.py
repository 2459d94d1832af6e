"""``loglake zookeeper-security-migration`` (Kafka's ZkSecurityMigrator) against a real
SASL-enabled ZooKeeper and real broker processes.

The cluster is at step 1 of Kafka's migration: its brokers log in to ZooKeeper but create open
znodes (``zookeeper.set.acl=false``), so everything starts world-writable. ``secure`` must then
leave no znode of the cluster that an anonymous ZooKeeper client can change (nor read under
``/config/users``) while the brokers keep serving; ``unsecure`` must open every znode again.
Bad input gets one error line and exit code 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.security import OPEN_ACL_UNSAFE, Permissions

from loglake.catalog.zk_auth import ENV_PASSWORD, ENV_USERNAME, sensitive
from loglake.catalog.zk_migration import ROOT_PATHS
from loglake.dev.harness import DevCluster, free_port_block
from loglake.dev.zookeeper import ZooKeeperServer
from tests.clients import produce_and_consume
from tests.zk_util import kazoo_client

USER, PASSWORD = "kafka", "kafka-zk-secret"
OTHER, OTHER_PASSWORD = "other", "other-zk-secret"
WALK_LIMIT = 5000
COMMAND_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def sasl_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk-migrate"),
                             client_port=free_port_block(1),
                             sasl_users={USER: PASSWORD, OTHER: OTHER_PASSWORD})
    with server:
        yield server


@pytest.fixture(scope="module")
def open_cluster(tmp_path_factory: pytest.TempPathFactory,
                 sasl_zookeeper: ZooKeeperServer) -> Iterator[DevCluster]:
    """Brokers that log in to ZooKeeper but set no ACLs (Kafka's migration step 1)."""
    overrides = {"zookeeper.sasl.username": USER, "zookeeper.sasl.password": PASSWORD,
                 "zookeeper.set.acl": "false"}
    with DevCluster(tmp_path_factory.mktemp("zk-migrate-cluster"), brokers=2,
                    zookeeper=sasl_zookeeper.hosts, broker_overrides=overrides) as dev:
        yield dev


def _migrate(dev: DevCluster, *args: str, user: str | None = USER,
             password: str | None = PASSWORD) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGLAKE_ZOOKEEPER_SASL")}
    if user is not None and password is not None:
        env.update({ENV_USERNAME: user, ENV_PASSWORD: password})
    return subprocess.run([sys.executable, "-m", "loglake", "zookeeper-security-migration",
                           *args], env=env, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S, check=False)


def _tree(client: KazooClient, chroot: str) -> list[str]:
    """The chroot and every znode under the migration's roots (as the owner sees them)."""
    found, pending = [chroot], [f"{chroot}{root}" for root in ROOT_PATHS]
    while pending and len(found) < WALK_LIMIT:
        path = pending.pop()
        try:
            children = client.get_children(path)
        except NoNodeError:
            continue
        found.append(path)
        pending += [f"{path}/{child}" for child in children]
    assert len(found) < WALK_LIMIT, "the walk did not end"
    return found


def _world(client: KazooClient, path: str) -> int:
    acls, _ = client.get_acls(path)
    return sum(acl.perms for acl in acls if acl.id.scheme == "world")


def _refused(action: object) -> bool:
    try:
        action()  # type: ignore[operator]
    except NoAuthError:
        return True
    return False


def _round_trip(dev: DevCluster, topic: str, count: int) -> None:
    """Create ``topic``, produce ``count`` records, consume and commit them in a group."""
    dev.create_topic(topic, partitions=2, replication_factor=2)
    produce_and_consume(dev.bootstrap_servers, topic, count, commit=True)


def test_secure_then_unsecure(open_cluster: DevCluster, sasl_zookeeper: ZooKeeperServer
                              ) -> None:
    dev = open_cluster
    chroot = dev.chroot
    topic = f"migrate-{uuid.uuid4().hex[:8]}"
    _round_trip(dev, topic, 20)
    owner = kazoo_client(dev.zookeeper_hosts, USER, PASSWORD)
    anonymous = kazoo_client(dev.zookeeper_hosts)
    try:
        owner.create(f"{chroot}/config/users/alice", b'{"version":1,"config":{"SCRAM-SHA-256":'
                     b'"salt=c2FsdA==,stored_key=a2V5,server_key=a2V5,iterations=4096"}}',
                     makepath=True)
        before = _tree(owner, chroot)
        assert len(before) > 30
        # step 1: everything is open (what the migration is for)
        assert all(_world(owner, path) == Permissions.ALL for path in before)

        secured = _migrate(dev, "--zookeeper.acl", "secure", "--zookeeper.connect",
                           dev.zookeeper_connect)
        assert secured.returncode == 0, secured.stderr
        assert "secure: /brokers: " in secured.stdout
        assert "Done: " in secured.stdout and "znodes secured" in secured.stdout

        after = _tree(owner, chroot)
        assert set(before) <= set(after)
        for path in after:
            acls, _ = owner.get_acls(path)
            expected = {("sasl", USER, Permissions.ALL)} | (
                set() if sensitive(path[len(chroot):]) else {("world", "anyone",
                                                              Permissions.READ)})
            assert {(a.id.scheme, a.id.id, a.perms) for a in acls} == expected, path
        # an anonymous client changes nothing and cannot read the credentials
        for path in (f"{chroot}/brokers/topics/{topic}", f"{chroot}/brokers/ids/1",
                     f"{chroot}/consumers/{topic}-g", f"{chroot}/loglake", chroot):
            assert _refused(lambda p=path: anonymous.set(p, b"rewritten")), path
            assert _refused(lambda p=path: anonymous.set_acls(p, OPEN_ACL_UNSAFE)), path
            assert _refused(lambda p=path: anonymous.create(f"{p}/intruder")), path
        assert _refused(lambda: anonymous.delete(f"{chroot}/brokers/topics/{topic}",
                                                 recursive=True))
        assert _refused(lambda: anonymous.get(f"{chroot}/config/users/alice"))
        assert _refused(lambda: anonymous.get_children(f"{chroot}/config/users"))

        # the brokers (same ZooKeeper user) keep working: a new topic, records, offsets
        _round_trip(dev, f"{topic}-after", 10)

        # another ZooKeeper user may not take the znodes over: named, exit code 1
        stolen = _migrate(dev, "--zookeeper.acl", "unsecure", "--zookeeper.connect",
                          dev.zookeeper_connect, user=OTHER, password=OTHER_PASSWORD)
        assert stolen.returncode == 1
        assert stolen.stderr.startswith("loglake: error: ")
        assert "refused the change (NoAuth" in stolen.stderr
        assert _world(owner, f"{chroot}/brokers/topics/{topic}") == Permissions.READ

        opened = _migrate(dev, "--zookeeper.acl", "unsecure", "--zookeeper.connect",
                          dev.zookeeper_connect)
        assert opened.returncode == 0, opened.stderr
        for path in _tree(owner, chroot):
            acls, _ = owner.get_acls(path)
            assert list(acls) == list(OPEN_ACL_UNSAFE), path
        assert b"SCRAM-SHA-256" in anonymous.get(f"{chroot}/config/users/alice")[0]
        probe = f"{chroot}/loglake/anonymous-{uuid.uuid4().hex[:6]}"
        anonymous.create(probe, b"1")
        anonymous.delete(probe)
        _round_trip(dev, f"{topic}-open", 5)
    finally:
        for client in (owner, anonymous):
            client.stop()
            client.close()


def test_bad_input_is_one_error_line(open_cluster: DevCluster, tmp_path: Path) -> None:
    dev = open_cluster
    connect = dev.zookeeper_connect
    cases = [
        (("--zookeeper.acl", "securest", "--zookeeper.connect", connect), USER, PASSWORD,
         "--zookeeper.acl must be secure or unsecure"),
        (("--zookeeper.acl", "secure", "--zookeeper.connect", connect), None, None,
         "no ZooKeeper SASL login configured"),
        (("--zookeeper.acl", "secure", "--zookeeper.connect", connect), USER, "wrong",
         "SASL"),
        (("--zookeeper.acl", "secure", "--zookeeper.connect",
          f"{dev.zookeeper_hosts}/no-such-chroot"), USER, PASSWORD, "no loglake cluster"),
        (("--zookeeper.acl", "secure", "--zookeeper.connect", connect, "--jaas-file",
          str(tmp_path / "missing.jaas")), None, None, "cannot read the JAAS file"),
        (("--zookeeper.acl", "secure", "--zookeeper.connect", connect, "--max-znodes", "3"),
         USER, PASSWORD, "more than 3 znodes"),
    ]
    for args, user, password, message in cases:
        done = _migrate(dev, *args, user=user, password=password)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("loglake: error: "), (args, done.stderr)
        assert message in lines[0], (args, lines[0])
    # a JAAS file is a way to log in too (Kafka's -Djava.security.auth.login.config)
    jaas = tmp_path / "client.jaas"
    jaas.write_text('Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n'
                    f'  username="{USER}"\n  password="{PASSWORD}";\n}};\n')
    done = _migrate(dev, "--zookeeper.acl", "unsecure", "--zookeeper.connect", connect,
                    "--jaas-file", str(jaas), user=None, password=None)
    assert done.returncode == 0, done.stderr
    assert "as sasl:kafka" in done.stdout


def test_missing_layout_roots_are_checked_or_created_secure(
        sasl_zookeeper: ZooKeeperServer) -> None:
    """A chroot with only ``/cluster/id``: ``--enable.path.check`` stops before changing
    anything; without it, ``secure`` creates the layout's roots with the secure ACL (so no one
    can create them open later) and walks Kafka's other roots only where they exist."""
    chroot = f"/bare-{uuid.uuid4().hex[:8]}"
    owner = kazoo_client(sasl_zookeeper.hosts, USER, PASSWORD)
    try:
        owner.create(f"{chroot}/cluster/id", b'{"version":"1","id":"bare"}', makepath=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGLAKE_ZOOKEEPER")}
        env.update({ENV_USERNAME: USER, ENV_PASSWORD: PASSWORD})
        command = [sys.executable, "-m", "loglake", "zookeeper-security-migration",
                   "--zookeeper.acl", "secure", "--zookeeper.connect",
                   sasl_zookeeper.hosts + chroot]
        checked = subprocess.run([*command, "--enable.path.check"], env=env,
                                 capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                                 check=False)
        assert checked.returncode == 1
        assert "Warning: these root paths do not exist in ZooKeeper: /admin, /brokers" in \
            checked.stdout
        assert "--enable.path.check" in checked.stderr
        assert owner.exists(f"{chroot}/brokers") is None
        assert _world(owner, chroot) == Permissions.ALL  # nothing changed

        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S, check=False)
        assert done.returncode == 0, done.stderr
        for path in ("", "/brokers", "/kafka-acl", "/loglake", "/consumers", "/cluster/id"):
            assert _world(owner, chroot + path) == Permissions.READ, path
        acls, _ = owner.get_acls(f"{chroot}/config/users")
        assert {(a.id.scheme, a.id.id) for a in acls} == {("sasl", USER)}
        assert owner.exists(f"{chroot}/feature") is None  # Kafka-only roots: not created
    finally:
        owner.delete(chroot, recursive=True)
        owner.stop()
        owner.close()
