"""ZooKeeper security end to end: a ZooKeeper server of its own with SASL (DIGEST-MD5, JAAS
``Server`` section), brokers that log in and set Kafka's znode ACLs (``zookeeper.set.acl``),
and clients with and without credentials.

What must hold: the brokers work (replication, produce, consume, group offsets); a ZooKeeper
client without credentials can read the layout except ``/config/users`` and ``/config/brokers``
but can neither create, change, delete nor re-ACL any znode of the cluster; the cluster's user
can; another authenticated user cannot change what the cluster's user created; tools take their
credentials from the environment; a wrong password is refused at once with a typed error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError, SessionClosedRequireSaslError
from kazoo.security import OPEN_ACL_UNSAFE, Permissions

from loglake.catalog.zk_auth import (
    ENV_PASSWORD,
    ENV_USERNAME,
    NO_AUTH,
    ZkAuth,
    ZooKeeperAuthenticationError,
    ZooKeeperNoAuthError,
    sensitive,
)
from loglake.catalog.zookeeper import ClusterCatalog
from loglake.dev.harness import DevCluster, free_port_block
from loglake.dev.zookeeper import ZooKeeperServer
from tests.clients import consume_messages
from tests.zk_util import kazoo_client

CLUSTER_USER, CLUSTER_PASSWORD = "kafka", "kafka-zk-secret"
OTHER_USER, OTHER_PASSWORD = "other", "other-zk-secret"
WALK_LIMIT = 5000
"""Most znodes a tree walk visits (the cluster holds a few hundred)."""


@pytest.fixture(scope="module")
def secured_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk-sasl"),
                             client_port=free_port_block(1),
                             sasl_users={CLUSTER_USER: CLUSTER_PASSWORD,
                                         OTHER_USER: OTHER_PASSWORD})
    with server:
        yield server


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory,
                   secured_zookeeper: ZooKeeperServer) -> Iterator[DevCluster]:
    overrides = {"zookeeper.sasl.username": CLUSTER_USER,
                 "zookeeper.sasl.password": CLUSTER_PASSWORD,
                 "zookeeper.set.acl": "true"}
    with DevCluster(tmp_path_factory.mktemp("zk-sasl-cluster"), brokers=2,
                    zookeeper=secured_zookeeper.hosts, broker_overrides=overrides) as dev:
        yield dev


def _walk(client: KazooClient, root: str = "/") -> list[str]:
    """Every znode under ``root`` the client may list (sensitive subtrees: only their root)."""
    found, pending = [], [root]
    while pending and len(found) < WALK_LIMIT:
        path = pending.pop()
        found.append(path)
        try:
            children = client.get_children(path)
        except (NoAuthError, NoNodeError):
            continue
        pending += [f"{path.rstrip('/')}/{child}" for child in children]
    assert len(found) < WALK_LIMIT, "the walk did not end"
    return found


def _refused(action: object) -> bool:
    try:
        action()  # type: ignore[operator]
    except NoAuthError:
        return True
    return False


def _world_perms(client: KazooClient, path: str) -> int:
    acls, _ = client.get_acls(path)
    return sum(acl.perms for acl in acls if acl.id.scheme == "world")


def _produce_and_consume(dev: DevCluster, topic: str, group: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": dev.bootstrap_servers, "acks": "all"})
    for index in range(count):
        producer.produce(topic, value=f"m{index}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": dev.bootstrap_servers, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        messages = consume_messages(consumer, count, timeout=60)
        assert sorted(m.value() for m in messages) == sorted(
            f"m{index}".encode() for index in range(count))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def _cluster_catalog(dev: DevCluster, auth: ZkAuth) -> ClusterCatalog:
    catalog = ClusterCatalog(dev.zookeeper_connect, mode="tool", auth=auth)
    catalog.start()
    return catalog


def test_brokers_work_and_secure_what_they_create(secure_cluster: DevCluster) -> None:
    dev = secure_cluster
    topic = f"zksec-{uuid.uuid4().hex[:8]}"
    dev.create_topic(topic, partitions=2, replication_factor=2)
    _produce_and_consume(dev, topic, f"{topic}-group", 40)

    anonymous = kazoo_client(dev.zookeeper_hosts)
    owner = kazoo_client(dev.zookeeper_hosts, CLUSTER_USER, CLUSTER_PASSWORD)
    try:
        chroot = dev.chroot
        # the dev launcher created the chroot open; the brokers gave it the secure ACL
        assert _world_perms(anonymous, chroot) == Permissions.READ
        for path in ("/brokers/ids/1", "/brokers/ids/2", f"/brokers/topics/{topic}",
                     f"/brokers/topics/{topic}/partitions/1/state", "/controller",
                     "/kafka-acl", "/loglake", f"/consumers/{topic}-group"):
            acls, _ = anonymous.get_acls(chroot + path)
            assert {(acl.id.scheme, acl.id.id, acl.perms) for acl in acls} == {
                ("sasl", CLUSTER_USER, Permissions.ALL),
                ("world", "anyone", Permissions.READ)}, path
        for path in ("/config/users", "/config/brokers"):
            assert _refused(lambda p=path: anonymous.get_acls(chroot + p))  # needs READ
            acls, _ = owner.get_acls(chroot + path)
            assert {(acl.id.scheme, acl.id.id, acl.perms) for acl in acls} == {
                ("sasl", CLUSTER_USER, Permissions.ALL)}, path
    finally:
        for client in (anonymous, owner):
            client.stop()
            client.close()


def test_without_credentials_nothing_changes_and_credentials_stay_hidden(
        secure_cluster: DevCluster) -> None:
    dev = secure_cluster
    topic = f"zksec-{uuid.uuid4().hex[:8]}"
    dev.create_topic(topic, partitions=1, replication_factor=2)
    _produce_and_consume(dev, topic, f"{topic}-group", 5)
    catalog = _cluster_catalog(dev, ZkAuth(CLUSTER_USER, CLUSTER_PASSWORD, set_acl=True))
    try:  # a SCRAM-like user entry, a client quota and a cluster-wide dynamic broker config
        catalog.entity_configs().alter("users/alice", {
            "SCRAM-SHA-256": "salt=c2FsdA==,stored_key=a2V5,server_key=c2Vy,iterations=4096"})
        catalog.entity_configs().alter("clients/app", {"producer_byte_rate": "1048576"})
        catalog.set_broker_config("<default>", {"follower.replication.throttled.rate": "1"})
        catalog.set_broker_config("<default>", {})
    finally:
        catalog.stop()

    chroot = dev.chroot
    owner = kazoo_client(dev.zookeeper_hosts, CLUSTER_USER, CLUSTER_PASSWORD)
    anonymous = kazoo_client(dev.zookeeper_hosts)
    other = kazoo_client(dev.zookeeper_hosts, OTHER_USER, OTHER_PASSWORD)
    try:
        every = _walk(owner, chroot)
        relative = {path[len(chroot):] for path in every}
        for expected in ("/brokers/ids/1", f"/brokers/topics/{topic}/partitions/0/state",
                         "/config/users/alice", "/config/clients/app",
                         "/config/brokers/<default>", f"/config/topics/{topic}",
                         "/kafka-acl", "/loglake/storage", "/controller", "/cluster/id",
                         f"/consumers/{topic}-group"):
            assert expected in relative, expected
        checked = 0
        for path in every:
            inside = path[len(chroot):] or "/"
            data, _ = owner.get(path)
            if sensitive(inside):
                assert _refused(lambda p=path: anonymous.get(p)), path
                assert _refused(lambda p=path: anonymous.get_children(p)), path
            else:
                assert anonymous.get(path)[0] == data, path
            for client in (anonymous, other):
                assert _refused(lambda p=path, c=client: c.set(p, b"rewritten")), path
                assert _refused(lambda p=path, c=client: c.set_acls(p, OPEN_ACL_UNSAFE)), path
                if path != chroot:  # deleting the chroot needs the root's DELETE (and it is
                    # not empty); every other znode's parent is the cluster's
                    assert _refused(lambda p=path, c=client: c.delete(p, recursive=False)), path
                if owner.exists(path).ephemeralOwner == 0:
                    assert _refused(lambda p=path, c=client: c.create(f"{p}/intruder")), path
            checked += 1
        assert checked == len(every) > 30
        assert owner.get(f"{chroot}/brokers/ids/1")[0] != b"rewritten"

        # the cluster's user can do all of it, and reads the credentials
        assert b"stored_key" in owner.get(f"{chroot}/config/users/alice")[0]
        probe = f"{chroot}/loglake/zksec-probe-{uuid.uuid4().hex[:6]}"
        owner.create(probe, b"1")
        owner.set(probe, b"2")
        owner.delete(probe)
    finally:
        for client in (owner, anonymous, other):
            client.stop()
            client.close()


def test_tools_take_credentials_from_the_environment(
        secure_cluster: DevCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = secure_cluster
    topic = f"zksec-{uuid.uuid4().hex[:8]}"
    owner = _cluster_catalog(dev, ZkAuth(CLUSTER_USER, CLUSTER_PASSWORD, set_acl=True))
    try:  # the cluster-wide dynamic broker configs exist (a missing znode reads as none)
        owner.set_broker_config("<default>", owner.broker_config("<default>"))
    finally:
        owner.stop()
    anonymous = _cluster_catalog(dev, NO_AUTH)
    try:
        with pytest.raises(ZooKeeperNoAuthError, match="NoAuth"):
            anonymous.announce_table_change(topic, 3, "OPTIMIZE")  # a clean-up job's write
        with pytest.raises(ZooKeeperNoAuthError):
            anonymous.entity_configs().alter("users/mallory", {"SCRAM-SHA-512": "x"})
        with pytest.raises(ZooKeeperNoAuthError):
            anonymous.broker_config("<default>")
    finally:
        anonymous.stop()

    monkeypatch.setenv(ENV_USERNAME, CLUSTER_USER)
    monkeypatch.setenv(ENV_PASSWORD, CLUSTER_PASSWORD)
    tool = ClusterCatalog(dev.zookeeper_connect, mode="tool")  # no auth given: environment
    tool.start()
    try:
        assert tool.auth == ZkAuth(CLUSTER_USER, CLUSTER_PASSWORD, set_acl=True)
        tool.announce_table_change(topic, 3, "OPTIMIZE")
        assert tool.broker_config("<default>") == {}
    finally:
        tool.stop()
    reader = kazoo_client(dev.zookeeper_hosts)
    try:
        path = f"{dev.chroot}/loglake/table_changes/{topic}"
        assert json.loads(reader.get(path)[0])["operation"] == "OPTIMIZE"
        assert _world_perms(reader, path) == Permissions.READ  # the tool set the ACL
        assert _refused(lambda: reader.set(path, b"{}"))
    finally:
        reader.stop()
        reader.close()


def test_cli_over_zookeeper_needs_the_credentials(secure_cluster: DevCluster) -> None:
    """``loglake acls add --zookeeper`` (kafka-acls --authorizer-properties zookeeper.connect=..
    in Kafka): refused without credentials, done with them in the environment."""
    dev = secure_cluster
    topic = f"zksec-{uuid.uuid4().hex[:8]}"
    command = [sys.executable, "-m", "loglake", "acls", "add", "--zookeeper",
               dev.zookeeper_connect, "--allow-principal", "User:alice", "--operation", "Read",
               "--topic", topic]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGLAKE_ZOOKEEPER_SASL")}
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60,
                             check=False)
    assert refused.returncode != 0
    assert "NoAuth" in refused.stderr + refused.stdout
    env.update({ENV_USERNAME: CLUSTER_USER, ENV_PASSWORD: CLUSTER_PASSWORD})
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    reader = kazoo_client(dev.zookeeper_hosts)
    try:
        path = f"{dev.chroot}/kafka-acl/Topic/{topic}"
        assert b"User:alice" in reader.get(path)[0]
        assert _world_perms(reader, path) == Permissions.READ
    finally:
        reader.stop()
        reader.close()


def test_a_wrong_password_is_refused_at_once(secured_zookeeper: ZooKeeperServer) -> None:
    for wait in (False, True):  # tools give up; brokers (wait) must not wait forever either
        catalog = ClusterCatalog(secured_zookeeper.hosts + "/zksec-wrong", mode="broker",
                                 auth=ZkAuth(CLUSTER_USER, "not-the-password"))
        started = time.monotonic()
        with pytest.raises(ZooKeeperAuthenticationError, match="refused our SASL login"):
            catalog.start(wait=wait)
        assert time.monotonic() - started < 10
        catalog.stop()


def test_without_set_acl_znodes_stay_open(secured_zookeeper: ZooKeeperServer) -> None:
    """The default (and ``zookeeper.set.acl=false`` with credentials): open znodes, as before."""
    chroot = f"/zksec-open-{uuid.uuid4().hex[:8]}"
    for auth in (NO_AUTH, ZkAuth(CLUSTER_USER, CLUSTER_PASSWORD, set_acl=False)):
        catalog = ClusterCatalog(secured_zookeeper.hosts + chroot, auth=auth)
        catalog.start()
        try:
            catalog.set_broker_config("1", {"leader.replication.throttled.rate": "5"})
            for path in ("", "/brokers/ids", "/config/brokers/1"):
                acls, _ = catalog.zk.get_acls(path or "/")
                assert list(acls) == list(OPEN_ACL_UNSAFE), path
            assert catalog.zk.exists("/kafka-acl") is None  # created lazily, as before
        finally:
            catalog.stop()


def test_required_sasl_refuses_anonymous_sessions(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zk", client_port=free_port_block(1),
                             sasl_users={CLUSTER_USER: CLUSTER_PASSWORD}, require_sasl=True)
    with server:
        catalog = ClusterCatalog(server.hosts + "/required",
                                 auth=ZkAuth(CLUSTER_USER, CLUSTER_PASSWORD, set_acl=True))
        catalog.start()
        catalog.stop()
        anonymous = KazooClient(hosts=server.hosts, timeout=5,
                                connection_retry={"max_tries": 1, "delay": 0.1})
        try:
            anonymous.start(timeout=10)
            with pytest.raises(SessionClosedRequireSaslError):
                anonymous.get_children("/required")
        finally:
            anonymous.stop()
            anonymous.close()


def _loglake(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LOGLAKE_ZOOKEEPER_SASL")}
    return subprocess.run([sys.executable, "-m", "loglake", *argv], env={**clean, **env},
                          capture_output=True, text=True, timeout=120, check=False)


def test_secured_dev_cluster_secures_its_zookeeper(tmp_path: Path) -> None:
    """``DevCluster(security="sasl_ssl")`` with its own ZooKeeper (what ``loglake dev up
    --security sasl_ssl`` starts): ZooKeeper authenticates, every znode gets Kafka's ACLs, a raw
    anonymous kazoo client changes nothing; the registry, the CLI (by the environment
    ``tool_env`` gives, or by the dev profile alone) and the harness log in and work."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from loglake import addresses

    with DevCluster(tmp_path / "dev", security="sasl_ssl", registry=True) as dev:
        jaas = dev.info.zookeeper_jaas_file
        assert jaas is not None and Path(jaas).stat().st_mode & 0o077 == 0
        assert f"zookeeper.sasl.jaas.file={jaas}" in dev.info.summary_lines()
        assert "zookeeper.set.acl=true" in (tmp_path / "dev" / "broker-1" /
                                            "server.properties").read_text()
        topic = f"zkdev-{uuid.uuid4().hex[:8]}"
        dev.create_topic(topic, partitions=1)  # the harness's own ZooKeeper client logs in
        producer = Producer(dev.client_config())
        producer.produce(topic, b"v")
        assert producer.flush(30) == 0
        del producer
        # the registry (started by `up`) writes /loglake/schemas logged in
        registry = SchemaRegistryClient(dev.registry_config())
        schema_id = registry.register_schema(f"{topic}-value", Schema('"string"', "AVRO"))

        anonymous = kazoo_client(dev.zookeeper_hosts)
        try:
            chroot = dev.chroot
            targets = [chroot, f"{chroot}/brokers/ids/1", f"{chroot}/brokers/topics/{topic}",
                       f"{chroot}/kafka-acl", f"{chroot}/loglake",
                       f"{chroot}/loglake/schemas/ids/{schema_id}", f"{chroot}/controller"]
            for path in targets:
                acls, _ = anonymous.get_acls(path)
                assert {(a.id.scheme, a.id.id, a.perms) for a in acls} == {
                    ("sasl", "kafka", Permissions.ALL),
                    ("world", "anyone", Permissions.READ)}, path
                assert _refused(lambda p=path: anonymous.set(p, b"rewritten")), path
                assert _refused(lambda p=path: anonymous.set_acls(p, OPEN_ACL_UNSAFE)), path
                if anonymous.exists(path).ephemeralOwner == 0:
                    assert _refused(lambda p=path: anonymous.create(f"{p}/intruder")), path
            assert _refused(lambda: anonymous.delete(f"{chroot}/brokers/topics/{topic}",
                                                     recursive=True))
            assert _refused(lambda: anonymous.get(f"{chroot}/config/users/admin"))
        finally:
            anonymous.stop()
            anonymous.close()

        # tools: refused anonymously, done with the cluster's login from the environment ...
        acl = ["acls", "add", "--zookeeper", dev.zookeeper_connect, "--allow-principal",
               "User:alice", "--operation", "Read", "--topic", topic]
        no_profile = {"LOGLAKE_CONFIG_DIR": str(tmp_path / "no-profile")}
        refused = _loglake(*acl, env=no_profile)
        assert refused.returncode == 1 and "NoAuth" in refused.stderr, refused.stderr
        done = _loglake(*acl, env={**no_profile, **dev.tool_env()})
        assert done.returncode == 0, done.stderr
        # ... or from the profile `loglake dev up` writes (no environment at all)
        config_dir = tmp_path / "config"
        addresses.write_profile(addresses.Profile(
            dev.zookeeper_connect, dev.bootstrap_servers, str(dev.data_dir),
            str(dev.client_properties), jaas), {"LOGLAKE_CONFIG_DIR": str(config_dir)})
        created = _loglake("users", "create", "bob", "--zookeeper", dev.zookeeper_connect,
                           "--password", "bob-secret",
                           env={"LOGLAKE_CONFIG_DIR": str(config_dir)})
        assert created.returncode == 0, created.stderr
        listed = _loglake("acls", "list", "--zookeeper", dev.zookeeper_connect, "--topic",
                          topic, env={"LOGLAKE_CONFIG_DIR": str(config_dir)})
        assert listed.returncode == 0 and "User:alice" in listed.stdout, listed.stderr
        job = ["retention", "--zookeeper", dev.zookeeper_connect, "--topic", topic]
        unrecorded = _loglake(*job, env=no_profile)  # recording is best effort: a warning
        assert "NoAuth" in unrecorded.stderr, unrecorded.stderr
        ran = _loglake(*job, env={"LOGLAKE_CONFIG_DIR": str(config_dir)})  # a clean-up job
        assert ran.returncode == 0, ran.stderr
        owner = kazoo_client(dev.zookeeper_hosts, "kafka",
                       Path(jaas).read_text().split('password="')[1].split('"')[0])
        try:
            assert b"SCRAM-SHA-512" in owner.get(f"{dev.chroot}/config/users/bob")[0]
            acls, _ = owner.get_acls(f"{dev.chroot}/config/users/bob")
            assert {(a.id.scheme, a.id.id) for a in acls} == {("sasl", "kafka")}
            runs = owner.get_children(f"{dev.chroot}/loglake/jobs/runs/retention")
            assert len(runs) == 1, runs  # the anonymous run recorded nothing
        finally:
            owner.stop()
            owner.close()


def test_a_dev_cluster_secured_later_is_migrated_and_stays_secured(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A dev cluster first run open, then ``up`` with ``--security``: ``up`` warns that the
    old znodes stay open, the migration tool secures them while the brokers serve, and a later
    ``up`` without ``--security`` keeps ZooKeeper's authentication (its znodes' ACLs need it)."""
    data = tmp_path / "dev"
    early = f"early-{uuid.uuid4().hex[:6]}"
    with DevCluster(data) as dev:
        assert dev.info.zookeeper_jaas_file is None
        dev.create_topic(early)
    capfd.readouterr()
    with DevCluster(data, security="sasl_ssl") as dev:
        assert "zookeeper-security-migration --zookeeper.acl secure" in capfd.readouterr().err
        path = f"{dev.chroot}/brokers/topics/{early}"
        anonymous = kazoo_client(dev.zookeeper_hosts)
        try:
            assert _world_perms(anonymous, path) == Permissions.ALL  # created open
            migrated = _loglake("zookeeper-security-migration", "--zookeeper.acl", "secure",
                                "--zookeeper.connect", dev.zookeeper_connect,
                                env=dev.tool_env())
            assert migrated.returncode == 0, migrated.stderr
            assert _refused(lambda: anonymous.set(path, b"rewritten"))
            assert _refused(lambda: anonymous.delete(path, recursive=True))
        finally:
            anonymous.stop()
            anonymous.close()
        producer = Producer(dev.client_config())
        producer.produce(early, b"after the migration")
        assert producer.flush(30) == 0
        del producer
    with DevCluster(data) as dev:  # no --security: ZooKeeper stays secured
        assert dev.info.zookeeper_jaas_file is not None
        later = f"later-{uuid.uuid4().hex[:6]}"
        dev.create_topic(later)
        anonymous = kazoo_client(dev.zookeeper_hosts)
        try:
            for topic in (early, later):
                path = f"{dev.chroot}/brokers/topics/{topic}"
                assert _refused(lambda p=path: anonymous.set(p, b"rewritten")), topic
        finally:
            anonymous.stop()
            anonymous.close()


def test_tools_find_the_login_in_the_environment_else_the_profile(tmp_path: Path) -> None:
    """:func:`zk_auth_for_connect` (what ``ClusterCatalog`` uses without a ``ZkAuth``): the
    environment wins; else the profile's JAAS file, only for the profile's ZooKeeper hosts."""
    from loglake import addresses
    from loglake.catalog.zk_auth import ENV_JAAS_FILE, zk_auth_for_connect
    from loglake.errors import InvalidConfigError

    jaas = tmp_path / "zk.jaas"
    jaas.write_text('Client { org.apache.zookeeper.server.auth.DigestLoginModule required '
                    'username="kafka" password="from-profile"; };\n')
    env = {addresses.CONFIG_DIR_ENV: str(tmp_path / "config")}
    assert zk_auth_for_connect("127.0.0.1:2181/loglake", env) == NO_AUTH  # no profile
    addresses.write_profile(addresses.Profile("127.0.0.1:2181/loglake", "127.0.0.1:9092",
                                              str(tmp_path), None, str(jaas)), env)
    for connect in ("127.0.0.1:2181/loglake", "127.0.0.1:2181", "127.0.0.1:2181/other"):
        assert zk_auth_for_connect(connect, env) == ZkAuth("kafka", "from-profile",
                                                           set_acl=True), connect
    assert zk_auth_for_connect("127.0.0.1:2182/loglake", env) == NO_AUTH  # another ZooKeeper
    assert zk_auth_for_connect("127.0.0.1:2181/loglake", {
        **env, ENV_USERNAME: "tool", ENV_PASSWORD: "from-env"}) == ZkAuth(
            "tool", "from-env", set_acl=True)
    with pytest.raises(InvalidConfigError, match="cannot read the JAAS file"):
        zk_auth_for_connect("127.0.0.1:2181", {**env, ENV_JAAS_FILE: str(tmp_path / "none")})
    addresses.profile_path(env).write_text("{not json")
    assert zk_auth_for_connect("127.0.0.1:2181/loglake", env) == NO_AUTH
