"""Apache Kafka 3.9's own command-line tools against a SECURED loglake cluster, run as an operator
runs them: ``--bootstrap-server`` with ``--command-config`` / ``--producer.config`` /
``--consumer.config`` pointing at the Java-form properties ``DevCluster(security="sasl_ssl")``
writes (``client-java.properties``: SASL_SSL, SCRAM-SHA-512 as the admin super user, a PEM
truststore), and as a non-super user made by ``kafka-configs``' SCRAM alter, with ACLs made by
``kafka-acls`` itself.

One secured one-broker cluster (module scope) on the session's ZooKeeper; every test uses its own
user, topic and group names. Each tool is a JVM of the ``kafka`` jar set
(:func:`loglake.dev.kafka_peer.java_command`; ``kafka-topics`` is
``org.apache.kafka.tools.TopicCommand``, the console producer ``kafka.tools.ConsoleProducer``,
the console consumer ``org.apache.kafka.tools.consumer.ConsoleConsumer`` in 3.9). Checked: the
tools' own output (kafka-acls --list equals ``loglake acls list``; kafka-configs --describe shows
the SCRAM mechanisms with their iterations and every quota entity loglake stores, as ``loglake
quotas describe`` does), a console round trip as the non-super user, Kafka's error texts for what
the non-super user may not do, dynamic broker configs through kafka-configs' legacy AlterConfigs,
broker logger levels through kafka-configs, kafka-reassign-partitions' throttle set and
cleared, and a clean "does not support" error from the tools loglake has no API for (client
metrics, delegation tokens). Skipped, saying why, only when the Kafka jars are not fetched.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from loglake.dev import kafka_peer
from loglake.dev.harness import DevCluster
from tests.kafka_peer_plugin import require_kafka_jars

pytestmark = pytest.mark.timeout(300)

FAST_JVM = ("-XX:TieredStopAtLevel=1", "-Xshare:auto")
"""Tools are short-lived: the C1 compiler alone starts them faster."""
TOOL_TIMEOUT_S = 120
ACL_LINE = re.compile(r"\(principal=(?P<principal>.+?), host=(?P<host>[^,]+), "
                      r"operation=(?P<operation>[A-Z_]+), permissionType=(?P<permission>[A-Z]+)\)")
RESOURCE_LINE = re.compile(r"ResourcePattern\(resourceType=(?P<type>[A-Z_]+), name=(?P<name>.*), "
                           r"patternType=(?P<pattern>[A-Z]+)\)")


@dataclass(frozen=True)
class Secured:
    """The module's cluster and the files its tools use."""

    cluster: DevCluster
    admin_java: Path
    """client-java.properties: the admin super user, Java form"""
    work: Path

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers

    def user_properties(self, user: str, password: str) -> Path:
        """Java-form properties logging in as ``user`` (the admin's file with its login
        swapped), as an operator would write for that user."""
        lines = []
        for line in self.admin_java.read_text().splitlines():
            if line.startswith("sasl.jaas.config="):
                line = ("sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                        f'required username="{user}" password="{password}";')
            lines.append(line)
        path = self.work / f"{user}.properties"
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o600)
        return path


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
            ) -> Iterator[Secured]:
    require_kafka_jars()
    data = tmp_path_factory.mktemp("kafka-tools-secured")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    security="sasl_ssl") as dev:
        java = dev.info.java_client_properties
        assert java is not None
        yield Secured(dev, java, data)


def _tool(secured: Secured, main_class: str, *args: str, stdin: str | None = None,
          ) -> subprocess.CompletedProcess[str]:
    command = kafka_peer.java_command(main_class, args, jvm_options=FAST_JVM,
                                      log4j=kafka_peer.tools_log4j(secured.work))
    return subprocess.run(command, input=stdin, capture_output=True, text=True,
                          timeout=TOOL_TIMEOUT_S, check=False)


def _configs(secured: Secured, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _tool(secured, "kafka.admin.ConfigCommand", "--bootstrap-server", secured.bootstrap,
                 "--command-config", str(config), *args)


def _acls(secured: Secured, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _tool(secured, "kafka.admin.AclCommand", "--bootstrap-server", secured.bootstrap,
                 "--command-config", str(config), *args)


def _topics(secured: Secured, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _tool(secured, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
                 secured.bootstrap, "--command-config", str(config), *args)


def _groups(secured: Secured, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _tool(secured, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                 "--bootstrap-server", secured.bootstrap, "--command-config", str(config), *args)


def _loglake(secured: Secured, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loglake", *args, "--bootstrap-server", secured.bootstrap,
         "--command-config", str(secured.admin_java)],
        capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _new_user(secured: Secured, prefix: str) -> tuple[str, Path]:
    """A user made as an operator makes one: kafka-configs' SCRAM alter (admin)."""
    user, password = _unique(prefix), uuid.uuid4().hex
    out = _ok(_configs(secured, secured.admin_java, "--entity-type", "users", "--entity-name",
                       user, "--alter", "--add-config", f"SCRAM-SHA-512=[password={password}]"))
    assert out.strip() == f"Completed updating config for user {user}."
    return user, secured.user_properties(user, password)


def _acl_set(text: str) -> set[tuple[str, ...]]:
    """(resource type, name, pattern, principal, host, operation, permission) of every ACL in
    kafka-acls' (and ``loglake acls list``'s) listing."""
    found: set[tuple[str, ...]] = set()
    resource: tuple[str, ...] | None = None
    for line in text.splitlines():
        pattern = RESOURCE_LINE.search(line)
        if pattern is not None:
            resource = (pattern["type"], pattern["name"], pattern["pattern"])
            continue
        acl = ACL_LINE.search(line)
        if acl is not None:
            assert resource is not None, text
            found.add((*resource, acl["principal"], acl["host"], acl["operation"],
                       acl["permission"]))
    return found


# ----------------------------------------------------------------------------- users and ACLs


def test_scram_user_by_kafka_configs_is_described_with_its_iterations(secured: Secured) -> None:
    user, password = _unique("scram"), uuid.uuid4().hex
    _ok(_configs(secured, secured.admin_java, "--entity-type", "users", "--entity-name", user,
                 "--alter", "--add-config",
                 f"SCRAM-SHA-512=[password={password}],"
                 f"SCRAM-SHA-256=[iterations=8192,password={password}]"))
    described = _ok(_configs(secured, secured.admin_java, "--entity-type", "users",
                             "--entity-name", user, "--describe"))
    assert described.strip() == (f"SCRAM credential configs for user-principal '{user}' are "
                                 "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096")
    everyone = _ok(_configs(secured, secured.admin_java, "--entity-type", "users", "--describe"))
    assert ("SCRAM credential configs for user-principal 'admin' are "
            "SCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=4096") in everyone
    # the new user logs in with that password (a describe of its own topics)
    _ok(_topics(secured, secured.user_properties(user, password), "--list"))
    # deleting one mechanism leaves the other
    _ok(_configs(secured, secured.admin_java, "--entity-type", "users", "--entity-name", user,
                 "--alter", "--delete-config", "SCRAM-SHA-256"))
    described = _ok(_configs(secured, secured.admin_java, "--entity-type", "users",
                             "--entity-name", user, "--describe"))
    assert described.strip() == (f"SCRAM credential configs for user-principal '{user}' are "
                                 "SCRAM-SHA-512=iterations=4096")


def test_acls_made_by_kafka_acls_are_what_loglake_lists(secured: Secured) -> None:
    user, _ = _new_user(secured, "acl")
    topic, group, prefix = _unique("acl-topic"), _unique("acl-group"), _unique("acl-pre")
    principal = f"User:{user}"
    added = _ok(_acls(secured, secured.admin_java, "--add", "--allow-principal", principal,
                      "--producer", "--topic", topic))
    assert (f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, "
            "patternType=LITERAL)`") in added
    _ok(_acls(secured, secured.admin_java, "--add", "--allow-principal", principal,
              "--consumer", "--topic", topic, "--group", group))
    _ok(_acls(secured, secured.admin_java, "--add", "--allow-principal", principal,
              "--operation", "Read", "--topic", prefix, "--resource-pattern-type", "prefixed"))
    _ok(_acls(secured, secured.admin_java, "--add", "--deny-principal", principal,
              "--deny-host", "192.0.2.1", "--operation", "Describe", "--cluster"))
    # a certificate's principal (commas in it), on every topic, as kafka-acls spells it
    certificate = f"User:CN={user},O=loglake"
    _ok(_acls(secured, secured.admin_java, "--add", "--allow-principal", certificate,
              "--operation", "All", "--topic", "*"))
    assert _acl_set(_ok(_loglake(secured, "acls", "list", "--principal", certificate))) == {
        ("TOPIC", "*", "LITERAL", certificate, "*", "ALL", "ALLOW")}
    matching = _acl_set(_ok(_acls(secured, secured.admin_java, "--list", "--topic", topic,
                                  "--resource-pattern-type", "match")))
    assert ("TOPIC", "*", "LITERAL", certificate, "*", "ALL", "ALLOW") in matching
    _ok(_acls(secured, secured.admin_java, "--remove", "--force", "--allow-principal",
              certificate, "--operation", "All", "--topic", "*"))
    want = {
        *(("TOPIC", topic, "LITERAL", principal, "*", op, "ALLOW")
          for op in ("CREATE", "DESCRIBE", "WRITE", "READ")),
        ("GROUP", group, "LITERAL", principal, "*", "READ", "ALLOW"),
        ("TOPIC", prefix, "PREFIXED", principal, "*", "READ", "ALLOW"),
        ("CLUSTER", "kafka-cluster", "LITERAL", principal, "192.0.2.1", "DESCRIBE", "DENY"),
    }
    kafka_text = _ok(_acls(secured, secured.admin_java, "--list", "--principal", principal))
    assert _acl_set(kafka_text) == want
    loglake_text = _ok(_loglake(secured, "acls", "list", "--principal", principal))
    assert _acl_set(loglake_text) == want
    # both open with kafka-acls' header line for the principal
    assert [line for line in loglake_text.splitlines() if line.startswith("ACLs for")] == \
        [line for line in kafka_text.splitlines() if line.startswith("ACLs for")] == \
        [f"ACLs for principal `{principal}`"]
    # the same pattern filter in both tools
    topic_view = _acl_set(_ok(_acls(secured, secured.admin_java, "--list", "--topic", topic)))
    assert topic_view == {acl for acl in want if acl[:2] == ("TOPIC", topic)}
    # removed by kafka-acls, gone in loglake's listing
    _ok(_acls(secured, secured.admin_java, "--remove", "--force", "--allow-principal",
              principal, "--operation", "Read", "--topic", prefix,
              "--resource-pattern-type", "prefixed"))
    assert _acl_set(_ok(_loglake(secured, "acls", "list", "--principal", principal))) == \
        {acl for acl in want if acl[1] != prefix}


# --------------------------------------------------------------------- the non-super user


def test_console_round_trip_as_a_non_super_user(secured: Secured) -> None:
    user, config = _new_user(secured, "console")
    topic, group = _unique("console"), _unique("console-group")
    _ok(_topics(secured, secured.admin_java, "--create", "--topic", topic, "--partitions", "2",
                "--replication-factor", "1"))
    principal = f"User:{user}"
    _ok(_acls(secured, secured.admin_java, "--add", "--allow-principal", principal,
              "--producer", "--topic", topic))
    _ok(_acls(secured, secured.admin_java, "--add", "--allow-principal", principal,
              "--consumer", "--topic", topic, "--group", group))
    records = [f"k{i}:value-{i}" for i in range(20)]
    produced = _tool(secured, "kafka.tools.ConsoleProducer", "--bootstrap-server",
                     secured.bootstrap, "--producer.config", str(config), "--topic", topic,
                     "--property", "parse.key=true", "--property", "key.separator=:",
                     "--request-required-acks", "all", stdin="\n".join(records) + "\n")
    _ok(produced)
    assert "ERROR" not in produced.stderr, produced.stderr
    consumed = _ok(_tool(
        secured, "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server",
        secured.bootstrap, "--consumer.config", str(config), "--topic", topic, "--group", group,
        "--from-beginning", "--max-messages", str(len(records)), "--timeout-ms", "60000",
        "--property", "print.key=true", "--property", "key.separator=:"))
    assert sorted(consumed.splitlines()) == sorted(records)
    # the user's committed offsets, described by the user: nothing left to read
    described = _ok(_groups(secured, config, "--describe", "--group", group))
    rows = [line.split() for line in described.splitlines() if line.startswith(group)]
    assert sorted((r[1], r[2]) for r in rows) == [(topic, "0"), (topic, "1")]
    assert sum(int(r[3]) for r in rows) == len(records) and all(r[5] == "0" for r in rows)
    # READ on the group is not DELETE: Kafka's refusal, as kafka-consumer-groups prints it
    refused = _groups(secured, config, "--delete", "--group", group)
    assert (f"* Group '{group}' could not be deleted due to: java.util.concurrent."
            "ExecutionException: org.apache.kafka.common.errors.GroupAuthorizationException: "
            "Group authorization failed.") in refused.stdout + refused.stderr
    assert group in _ok(_groups(secured, config, "--list")).split()


def test_non_super_user_refusals_are_kafkas(secured: Secured) -> None:
    user, config = _new_user(secured, "refused")
    secret = _unique("secret")
    _ok(_topics(secured, secured.admin_java, "--create", "--topic", secret, "--partitions", "1",
                "--replication-factor", "1"))

    created = _topics(secured, config, "--create", "--topic", _unique("mine"), "--partitions",
                      "1", "--replication-factor", "1")
    assert created.returncode == 1
    assert "Error while executing topic command : Authorization failed." in created.stdout
    assert "org.apache.kafka.common.errors.TopicAuthorizationException" in created.stderr

    visible = _unique("visible")
    _ok(_topics(secured, secured.admin_java, "--create", "--topic", visible, "--partitions",
                "1", "--replication-factor", "1"))
    _ok(_acls(secured, secured.admin_java, "--add", "--allow-principal", f"User:{user}",
              "--operation", "Describe", "--topic", visible))
    deleted = _topics(secured, config, "--delete", "--topic", visible)
    assert deleted.returncode == 1
    assert "Error while executing topic command : Topic authorization failed." in deleted.stdout
    assert "org.apache.kafka.common.errors.TopicAuthorizationException" in deleted.stderr

    # a topic the user may not describe is hidden, as Kafka's Metadata hides it: kafka-topics
    # then says it does not exist (Kafka's own text, `Optional[...]` included)
    names = _ok(_topics(secured, config, "--list")).split()
    assert visible in names and secret not in names
    assert secret in _ok(_topics(secured, secured.admin_java, "--list")).split()
    hidden = _topics(secured, config, "--delete", "--topic", secret)
    assert hidden.returncode == 1
    assert (f"Error while executing topic command : Topic 'Optional[{secret}]' does not exist "
            "as expected") in hidden.stdout

    listed = _acls(secured, config, "--list")
    assert listed.returncode == 1
    assert ("org.apache.kafka.common.errors.ClusterAuthorizationException: "
            "Cluster authorization failed.") in listed.stdout + listed.stderr
    for args in (("--entity-type", "users", "--describe"),
                 ("--entity-type", "users", "--entity-name", user, "--alter", "--add-config",
                  "SCRAM-SHA-512=[password=other]"),
                 ("--entity-type", "brokers", "--entity-default", "--alter", "--add-config",
                  "leader.replication.throttled.rate=1000")):
        done = _configs(secured, config, *args)
        assert done.returncode == 1, args
        assert ("ClusterAuthorizationException: Cluster authorization failed."
                in done.stdout + done.stderr), (args, done.stdout, done.stderr)

    produced = _tool(secured, "kafka.tools.ConsoleProducer", "--bootstrap-server",
                     secured.bootstrap, "--producer.config", str(config), "--topic", secret,
                     stdin="nope\n")
    assert ("org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized to "
            f"access topics: [{secret}]") in produced.stderr
    consumed = _tool(secured, "org.apache.kafka.tools.consumer.ConsoleConsumer",
                     "--bootstrap-server", secured.bootstrap, "--consumer.config", str(config),
                     "--topic", secret, "--group", _unique("g"), "--from-beginning",
                     "--max-messages", "1", "--timeout-ms", "30000")
    assert ("org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized to "
            f"access topics: [{secret}]") in consumed.stderr
    assert "Processed a total of 0 messages" in consumed.stderr


# ----------------------------------------------------------------------------------- configs


def test_quotas_of_every_entity_through_kafka_configs(secured: Secured) -> None:
    user, client, ip = _unique("quota-user"), _unique("quota-client"), "192.0.2.7"
    admin = secured.admin_java
    alters = [
        (("--entity-type", "users", "--entity-name", user),
         "producer_byte_rate=1048576,consumer_byte_rate=2097152,request_percentage=50,"
         "controller_mutation_rate=10", f"Completed updating config for user {user}."),
        (("--entity-type", "clients", "--entity-name", client),
         "producer_byte_rate=1000,controller_mutation_rate=5",
         f"Completed updating config for client {client}."),
        (("--entity-type", "users", "--entity-name", user, "--entity-type", "clients",
          "--entity-name", client), "request_percentage=20",
         f"Completed updating config for user {user}."),
        (("--entity-type", "ips", "--entity-name", ip), "connection_creation_rate=50",
         f"Completed updating config for ip {ip}."),
        (("--entity-type", "ips", "--entity-default"), "connection_creation_rate=1000",
         "Completed updating default config for ips in the cluster."),
    ]
    try:
        for entity, config, answer in alters:
            assert _ok(_configs(secured, admin, *entity, "--alter", "--add-config",
                                config)).strip() == answer
        user_text = _ok(_configs(secured, admin, "--entity-type", "users", "--entity-name",
                                 user, "--describe"))
        assert user_text.startswith(f"Quota configs for user-principal '{user}' are ")
        assert set(user_text.strip().split(" are ", 1)[1].split(", ")) == {
            "producer_byte_rate=1048576.0", "consumer_byte_rate=2097152.0",
            "request_percentage=50.0", "controller_mutation_rate=10.0"}
        client_text = _ok(_configs(secured, admin, "--entity-type", "clients", "--entity-name",
                                   client, "--describe"))
        assert client_text.strip() == (f"Quota configs for client-id '{client}' are "
                                       "controller_mutation_rate=5.0, producer_byte_rate=1000.0")
        both = _ok(_configs(secured, admin, "--entity-type", "users", "--entity-name", user,
                            "--entity-type", "clients", "--describe"))
        assert both.strip() == (f"Quota configs for user-principal '{user}', client-id "
                                f"'{client}' are request_percentage=20.0")
        ips = _ok(_configs(secured, admin, "--entity-type", "ips", "--describe"))
        assert f"Quota configs for ip '{ip}' are connection_creation_rate=50.0" in ips
        assert "Quota configs for the default ip are connection_creation_rate=1000.0" in ips
        # what kafka-configs stored is what loglake's own tool shows
        ours = json.loads(_ok(_loglake(secured, "quotas", "describe", "--format", "json")))
        seen = {json.dumps(entry["entity"], sort_keys=True): entry["quotas"] for entry in ours}
        assert seen[json.dumps({"user": user})]["controller_mutation_rate"] == 10.0
        assert seen[json.dumps({"client-id": client, "user": user}, sort_keys=True)] == {
            "request_percentage": 20.0}
        assert seen[json.dumps({"ip": ip})] == {"connection_creation_rate": 50.0}
        # kafka-configs itself refuses a host name that is not an IP
        bad = _configs(secured, admin, "--entity-type", "ips", "--entity-name", "not-an-ip",
                       "--alter", "--add-config", "connection_creation_rate=5")
        assert bad.returncode == 1
        assert "The entity name for ips must be a valid IP" in bad.stdout + bad.stderr
        # an unknown quota key for an ip entity is refused
        wrong = _configs(secured, admin, "--entity-type", "ips", "--entity-name", ip, "--alter",
                         "--add-config", "producer_byte_rate=5")
        assert wrong.returncode == 1
        # deletions, through kafka-configs
        _ok(_configs(secured, admin, "--entity-type", "ips", "--entity-name", ip, "--alter",
                     "--delete-config", "connection_creation_rate"))
        assert ip not in _ok(_configs(secured, admin, "--entity-type", "ips", "--describe"))
    finally:
        _configs(secured, admin, "--entity-type", "ips", "--entity-default", "--alter",
                 "--delete-config", "connection_creation_rate")


def test_topic_configs_through_kafka_configs(secured: Secured) -> None:
    admin = secured.admin_java
    topic = _unique("configs")
    _ok(_topics(secured, admin, "--create", "--topic", topic, "--partitions", "1",
                "--replication-factor", "1"))
    _ok(_configs(secured, admin, "--entity-type", "topics", "--entity-name", topic, "--alter",
                 "--add-config", "retention.ms=3600000,cleanup.policy=compact"))
    described = _ok(_configs(secured, admin, "--entity-type", "topics", "--entity-name", topic,
                             "--describe"))
    assert described.splitlines() == [
        f"Dynamic configs for topic {topic} are:",
        "  cleanup.policy=compact sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact}",
        "  retention.ms=3600000 sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000}"]
    _ok(_configs(secured, admin, "--entity-type", "topics", "--entity-name", topic, "--alter",
                 "--delete-config", "cleanup.policy"))
    assert "cleanup.policy" not in _ok(_configs(
        secured, admin, "--entity-type", "topics", "--entity-name", topic, "--describe"))


def test_dynamic_broker_configs_through_kafka_configs(secured: Secured) -> None:
    """Kafka 3.9's kafka-configs alters broker configs with the legacy AlterConfigs (after
    reading the entity's dynamic set back): loglake's dynamic broker configs (the replication
    throttle rates) per broker and as the cluster default."""
    admin = secured.admin_java
    rate, follower = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
    try:
        done = _ok(_configs(secured, admin, "--entity-type", "brokers", "--entity-name", "1",
                            "--alter", "--add-config", f"{rate}=1000000"))
        assert done.strip() == "Completed updating config for broker 1."
        done = _ok(_configs(secured, admin, "--entity-type", "brokers", "--entity-default",
                            "--alter", "--add-config", f"{rate}=2000000"))
        assert done.strip() == "Completed updating default config for brokers in the cluster."
        one = _ok(_configs(secured, admin, "--entity-type", "brokers", "--entity-name", "1",
                           "--describe"))
        assert one.splitlines() == [
            "Dynamic configs for broker 1 are:",
            f"  {rate}=1000000 sensitive=false synonyms={{DYNAMIC_BROKER_CONFIG:{rate}=1000000,"
            f" DYNAMIC_DEFAULT_BROKER_CONFIG:{rate}=2000000,"
            f" DEFAULT_CONFIG:{rate}=9223372036854775807}}"]
        # a second default key: kafka-configs reads the default's set back and replaces it
        # with that set plus the new key, so the first must be described to survive
        _ok(_configs(secured, admin, "--entity-type", "brokers", "--entity-default", "--alter",
                     "--add-config", f"{follower}=3000000"))
        default = _ok(_configs(secured, admin, "--entity-type", "brokers", "--entity-default",
                               "--describe"))
        assert default.splitlines() == [
            "Default configs for brokers in the cluster are:",
            f"  {follower}=3000000 sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:"
            f"{follower}=3000000, DEFAULT_CONFIG:{follower}=9223372036854775807}}",
            f"  {rate}=2000000 sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:"
            f"{rate}=2000000, DEFAULT_CONFIG:{rate}=9223372036854775807}}"]
        # the broker's own entry removed: the cluster default applies
        _ok(_configs(secured, admin, "--entity-type", "brokers", "--entity-name", "1",
                     "--alter", "--delete-config", rate))
        one = _ok(_configs(secured, admin, "--entity-type", "brokers", "--entity-name", "1",
                           "--describe"))
        assert one.splitlines() == ["Dynamic configs for broker 1 are:"]
        everything = _ok(_configs(secured, admin, "--entity-type", "brokers", "--entity-name",
                                  "1", "--describe", "--all"))
        assert (f"  {rate}=2000000 sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:"
                f"{rate}=2000000, DEFAULT_CONFIG:{rate}=9223372036854775807}}") in everything
        assert "  broker.id=1 sensitive=false synonyms={STATIC_BROKER_CONFIG:broker.id=1}" \
            in everything
        # a config loglake reads only at start: refused as Kafka's preprocess refuses it
        static = _configs(secured, admin, "--entity-type", "brokers", "--entity-name", "1",
                          "--alter", "--add-config", "num.partitions=3")
        assert static.returncode == 1
        assert "InvalidRequestException" in static.stdout + static.stderr
    finally:
        _configs(secured, admin, "--entity-type", "brokers", "--entity-default", "--alter",
                 "--delete-config", f"{rate},{follower}")


def test_broker_logger_levels_through_kafka_configs(secured: Secured) -> None:
    """``kafka-configs --entity-type broker-loggers``: the broker's Python loggers with
    log4j level names, set and unset at run time; Kafka's errors; the admin only."""
    admin, logger = secured.admin_java, "loglake.broker.acceptor"

    def levels(config: Path = admin) -> dict[str, str]:
        text = _ok(_configs(secured, config, "--entity-type", "broker-loggers", "--entity-name",
                            "1", "--describe"))
        assert text.splitlines()[0] == "Dynamic configs for broker-logger 1 are:"
        found = dict(re.findall(r"^  (\S+)=(\S+) sensitive=false synonyms=\{\}$", text,
                                re.MULTILINE))
        assert len(found) == len(text.splitlines()) - 1, text
        return found

    before = levels()
    assert before["root"] in ("INFO", "WARN") and before[logger] == before["root"]
    try:
        done = _ok(_configs(secured, admin, "--entity-type", "broker-loggers", "--entity-name",
                            "1", "--alter", "--add-config", f"{logger}=DEBUG"))
        assert done.strip() == "Completed updating config for broker-logger 1."
        assert levels()[logger] == "DEBUG"
        bad = _configs(secured, admin, "--entity-type", "broker-loggers", "--entity-name", "1",
                       "--alter", "--add-config", f"{logger}=LOUD")
        assert bad.returncode == 1
        assert (f"InvalidConfigurationException: Cannot set the log level of {logger} to LOUD "
                "as it is not a supported log level.") in bad.stdout + bad.stderr
        root = _configs(secured, admin, "--entity-type", "broker-loggers", "--entity-name", "1",
                        "--alter", "--delete-config", "root")
        assert ("InvalidRequestException: Removing the log level of the root logger is not "
                "allowed") in root.stdout + root.stderr
        _ok(_configs(secured, admin, "--entity-type", "broker-loggers", "--entity-name", "1",
                     "--alter", "--delete-config", logger))
        assert levels()[logger] == before["root"]
        _, user_config = _new_user(secured, "loggers")
        refused = _configs(secured, user_config, "--entity-type", "broker-loggers", "--entity-name",
                           "1", "--describe")
        assert refused.returncode == 1
        assert "ClusterAuthorizationException: Cluster authorization failed." in \
            refused.stdout + refused.stderr
    finally:
        _configs(secured, admin, "--entity-type", "broker-loggers", "--entity-name", "1",
                 "--alter", "--delete-config", logger)


def test_reassign_partitions_verify_clears_the_throttles(secured: Secured) -> None:
    """kafka-reassign-partitions --execute --throttle sets the broker rates (incremental
    alter), --verify of a finished plan deletes them together with
    replica.alter.log.dirs.io.max.bytes.per.second, which loglake has no use for."""
    admin = secured.admin_java
    topic = _unique("reassign")
    _ok(_topics(secured, admin, "--create", "--topic", topic, "--partitions", "1",
                "--replication-factor", "1"))
    plan = secured.work / f"{topic}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1]}]}))

    def reassign(*args: str) -> str:
        return _ok(_tool(secured, "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
                         "--bootstrap-server", secured.bootstrap, "--command-config", str(admin),
                         "--reassignment-json-file", str(plan), *args))

    try:
        started = reassign("--execute", "--throttle", "5000000")
        assert "The inter-broker throttle limit was set to 5000000 B/s" in started
        throttled = _ok(_configs(secured, admin, "--entity-type", "brokers", "--entity-name",
                                 "1", "--describe"))
        assert "  leader.replication.throttled.rate=5000000 sensitive=false" in throttled
        verified = reassign("--verify")
        assert f"Reassignment of partition {topic}-0 is completed." in verified
        assert "Clearing broker-level throttles on broker 1" in verified
        assert _ok(_configs(secured, admin, "--entity-type", "brokers", "--entity-name", "1",
                            "--describe")).splitlines() == ["Dynamic configs for broker 1 are:"]
    finally:
        _configs(secured, admin, "--entity-type", "brokers", "--entity-name", "1", "--alter",
                 "--delete-config", "leader.replication.throttled.rate,"
                 "follower.replication.throttled.rate")


# --------------------------------------------------------------------------- the other tools


def test_topic_group_and_cluster_tools(secured: Secured) -> None:
    admin = secured.admin_java
    topic, group = _unique("tools"), _unique("tools-group")
    assert _ok(_topics(secured, admin, "--create", "--topic", topic, "--partitions", "2",
                       "--replication-factor", "1", "--config", "retention.ms=7200000")
               ).strip() == f"Created topic {topic}."
    _ok(_topics(secured, admin, "--alter", "--topic", topic, "--partitions", "3"))
    described = _ok(_topics(secured, admin, "--describe", "--topic", topic)).splitlines()
    assert described[0].startswith(f"Topic: {topic}\tTopicId: ")
    assert "\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=7200000" \
        in described[0]
    assert [line.split("\t")[2] for line in described[1:]] == [
        f"Partition: {p}" for p in range(3)]

    _ok(_tool(secured, "kafka.tools.ConsoleProducer", "--bootstrap-server", secured.bootstrap,
              "--producer.config", str(admin), "--topic", topic,
              stdin="".join(f"v{i}\n" for i in range(9))))
    _ok(_tool(secured, "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server",
              secured.bootstrap, "--consumer.config", str(admin), "--topic", topic,
              "--group", group, "--from-beginning", "--max-messages", "9",
              "--timeout-ms", "60000"))
    assert group in _ok(_groups(secured, admin, "--list")).split()
    state = _ok(_groups(secured, admin, "--describe", "--group", group, "--state"))
    assert re.search(rf"^{re.escape(group)}\s+127\.0\.0\.1:\d+\s+\(1\)\s+Empty\s+0$", state,
                     re.MULTILINE), state
    reset = _ok(_groups(secured, admin, "--reset-offsets", "--group", group, "--topic", topic,
                        "--to-earliest", "--execute"))
    assert reset.count(topic) == 3
    lagging = _ok(_groups(secured, admin, "--describe", "--group", group))
    rows = [line.split() for line in lagging.splitlines() if line.startswith(group)]
    assert len(rows) == 3 and all(r[3] == "0" for r in rows)
    assert sum(int(r[5]) for r in rows) == 9
    deleted = _ok(_groups(secured, admin, "--delete", "--group", group))
    assert f"Deletion of requested consumer groups ('{group}') was successful." in deleted

    versions = _ok(_tool(secured, "kafka.admin.BrokerApiVersionsCommand", "--bootstrap-server",
                         secured.bootstrap, "--command-config", str(admin)))
    assert re.search(r"^127\.0\.0\.1:\d+ \(id: 1 rack: null\) -> \($", versions, re.MULTILINE)
    for line in ("Produce(0): 3 to ", "SaslAuthenticate(36): 0 to 2 [usable: 2]",
                 "DescribeUserScramCredentials(50): 0 [usable: 0]",
                 "CreateDelegationToken(38): UNSUPPORTED"):
        assert line in versions, line

    log_dirs = _ok(_tool(secured, "org.apache.kafka.tools.LogDirsCommand", "--bootstrap-server",
                         secured.bootstrap, "--command-config", str(admin), "--describe",
                         "--topic-list", topic))
    answer = json.loads(log_dirs.splitlines()[-1])
    [broker] = answer["brokers"]
    assert broker["broker"] == 1
    partitions = {p["partition"]: p for d in broker["logDirs"] for p in d["partitions"]}
    assert set(partitions) == {f"{topic}-{p}" for p in range(3)}
    assert sum(p["size"] for p in partitions.values()) > 0

    assert _ok(_topics(secured, admin, "--delete", "--topic", topic)) == ""
    assert topic not in _ok(_topics(secured, admin, "--list")).split()


def test_offsets_records_perf_and_cluster_tools(secured: Secured) -> None:
    admin = secured.admin_java
    user, config = _new_user(secured, "perf")
    topic = _unique("perf")
    _ok(_topics(secured, admin, "--create", "--topic", topic, "--partitions", "2",
                "--replication-factor", "1"))
    _ok(_acls(secured, admin, "--add", "--allow-principal", f"User:{user}", "--producer",
              "--topic", topic, "--idempotent"))
    perf = _ok(_tool(secured, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                     "--num-records", "1000", "--record-size", "100", "--throughput", "-1",
                     "--producer.config", str(config), "--producer-props",
                     f"bootstrap.servers={secured.bootstrap}", "acks=all",
                     "enable.idempotence=true"))
    assert re.search(r"^1000 records sent, ", perf, re.MULTILINE), perf

    def offsets(*args: str) -> dict[str, int]:
        out = _ok(_tool(secured, "org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server",
                        secured.bootstrap, "--command-config", str(admin), "--topic", topic,
                        *args))
        return {line.rsplit(":", 1)[0]: int(line.rsplit(":", 1)[1])
                for line in out.splitlines()}

    ends = offsets()
    assert set(ends) == {f"{topic}:0", f"{topic}:1"} and sum(ends.values()) == 1000
    full = max(ends, key=lambda key: ends[key])
    plan = secured.work / f"{topic}-delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": int(full.rsplit(":", 1)[1]), "offset": 10}]}))
    deleted = _ok(_tool(secured, "org.apache.kafka.tools.DeleteRecordsCommand",
                        "--bootstrap-server", secured.bootstrap, "--command-config", str(admin),
                        "--offset-json-file", str(plan)))
    assert f"partition: {full.replace(':', '-')}\tlow_watermark: 10" in deleted
    assert offsets("--time", "-2")[full] == 10

    elected = _tool(secured, "org.apache.kafka.tools.LeaderElectionCommand",
                    "--bootstrap-server", secured.bootstrap, "--admin.config", str(admin),
                    "--election-type", "preferred", "--topic", topic, "--partition", "0")
    assert elected.returncode == 0, elected.stdout + elected.stderr
    assert f"Valid replica already elected for partitions {topic}-0" in elected.stdout
    cluster_id = _ok(_tool(secured, "org.apache.kafka.tools.ClusterTool", "cluster-id",
                           "--bootstrap-server", secured.bootstrap, "--config", str(admin)))
    assert re.fullmatch(r"Cluster ID: \S+\n", cluster_id)
    listed = _ok(_tool(secured, "org.apache.kafka.tools.TransactionsCommand",
                       "--bootstrap-server", secured.bootstrap, "--command-config", str(admin),
                       "list"))
    assert listed.split()[:4] == ["TransactionalId", "Coordinator", "ProducerId",
                                   "TransactionState"]


def test_tools_for_apis_loglake_lacks_fail_cleanly(secured: Secured) -> None:
    admin = secured.admin_java
    metrics = _tool(secured, "org.apache.kafka.tools.ClientMetricsCommand", "--bootstrap-server",
                    secured.bootstrap, "--command-config", str(admin), "--list")
    assert metrics.returncode == 1
    assert ("Error while executing client metrics command : The node does not support "
            "LIST_CLIENT_METRICS_RESOURCES") in metrics.stdout
    tokens = _tool(secured, "org.apache.kafka.tools.DelegationTokenCommand",
                   "--bootstrap-server", secured.bootstrap, "--command-config", str(admin),
                   "--create", "--max-life-time-period", "-1", "--renewer-principal",
                   "User:admin")
    assert tokens.returncode == 1
    assert ("UnsupportedVersionException: The node does not support CREATE_DELEGATION_TOKEN"
            in tokens.stdout + tokens.stderr)
    quorum = _tool(secured, "org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server",
                   secured.bootstrap, "--command-config", str(admin), "describe", "--status")
    assert quorum.returncode == 1
    assert ("UnsupportedVersionException: The node does not support DESCRIBE_QUORUM"
            in quorum.stdout + quorum.stderr)
    # no feature flags are advertised: kafka-features has nothing to describe
    features = _tool(secured, "org.apache.kafka.tools.FeatureCommand", "--bootstrap-server",
                     secured.bootstrap, "--command-config", str(admin), "describe")
    assert (features.returncode, features.stdout) == (0, "")
    # the broker is still there for the next tool
    _ok(_topics(secured, admin, "--list"))
