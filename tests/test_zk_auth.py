"""ZooKeeper credentials and the znode ACL policy (catalog/zk_auth.py): pure, no ZooKeeper."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.security import Permissions

from loglake.catalog.zk_acls import world_writable
from loglake.catalog.zk_auth import (
    ENV_JAAS_FILE,
    ENV_PASSWORD,
    ENV_USERNAME,
    NO_AUTH,
    ZkAuth,
    acl_for,
    jaas_client_credentials,
    jaas_sections,
    resolve_zk_auth,
    sensitive,
    zk_auth_from_environment,
    zk_auth_from_properties,
)
from loglake.config import BrokerConfig
from loglake.dev.zookeeper import ZooKeeperServer
from loglake.errors import InvalidConfigError

JAAS = """
// Kafka's one JAAS file: the broker's listeners and its ZooKeeper login
KafkaServer {
    org.apache.kafka.common.security.plain.PlainLoginModule required
    username="admin" password="admin-secret"
    user_admin="admin-secret";
};
Client {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    username="kafka"
    password="kafka \\"quoted\\" secret";
};
/* another client section */
Tools { org.apache.zookeeper.server.auth.DigestLoginModule required username="tool"
        password="tool-secret"; };
"""


def _perms(acls: list) -> dict[str, int]:
    return {f"{acl.id.scheme}:{acl.id.id}": acl.perms for acl in acls}


def test_acl_policy_is_kafkas() -> None:
    for path in ("/brokers/topics/t", "/config/topics/t", "/kafka-acl/Topic/t", "/loglake/x",
                 "/consumers/g", "/config/changes/config_change_0000000001", "/config/usersx"):
        assert _perms(acl_for(path)) == {"auth:": Permissions.ALL,
                                         "world:anyone": Permissions.READ}, path
        assert not world_writable(acl_for(path))
    for path in ("/config/users", "/config/users/alice", "/config/users/alice/clients/c",
                 "/config/brokers", "/config/brokers/<default>", "/config/brokers/1"):
        assert sensitive(path)
        assert _perms(acl_for(path)) == {"auth:": Permissions.ALL}, path
    assert not sensitive("/config") and not sensitive("/config/clients/c")


def test_default_is_anonymous_and_open() -> None:
    assert ZkAuth() == NO_AUTH
    assert not NO_AUTH.authenticated and NO_AUTH.sasl_options() is None
    assert NO_AUTH.acl("/brokers/ids/1") is None
    assert zk_auth_from_environment({}) == NO_AUTH
    assert zk_auth_from_properties({}, environ={}) == NO_AUTH
    config = BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "h:1",
                                           "log.dirs": "/tmp/x"})
    assert not config.zookeeper_set_acl and config.zookeeper_sasl_username is None
    assert resolve_zk_auth(username=config.zookeeper_sasl_username,
                           password=config.zookeeper_sasl_password,
                           jaas_file=config.zookeeper_sasl_jaas_file,
                           jaas_section=config.zookeeper_sasl_clientconfig,
                           shared_jaas_file=config.sasl_jaas_file,
                           set_acl=config.zookeeper_set_acl, environ={}) == NO_AUTH


def test_credentials_and_sasl_options() -> None:
    auth = ZkAuth("kafka", "secret", set_acl=True)
    assert "secret" not in repr(auth)
    options = auth.sasl_options()
    assert options == {"mechanism": "DIGEST-MD5", "username": "kafka", "password": "secret"}
    assert auth.sasl_options() is not options  # kazoo adds keys to the dict it gets
    assert auth.acl("/config/users/a") == acl_for("/config/users/a")
    with pytest.raises(InvalidConfigError, match="both"):
        ZkAuth("kafka", None)
    with pytest.raises(InvalidConfigError, match="no ZooKeeper credentials"):
        ZkAuth(set_acl=True)


def test_jaas_parsing() -> None:
    sections = jaas_sections(JAAS)
    assert sorted(sections) == ["Client", "KafkaServer", "Tools"]
    module, options = sections["KafkaServer"][0]
    assert module.endswith("PlainLoginModule") and options["user_admin"] == "admin-secret"
    assert jaas_client_credentials(JAAS) == ("kafka", 'kafka "quoted" secret')
    assert jaas_client_credentials(JAAS, "Tools") == ("tool", "tool-secret")
    with pytest.raises(InvalidConfigError, match="no Nope section"):
        jaas_client_credentials(JAAS, "Nope")
    with pytest.raises(InvalidConfigError, match="no login module with username"):
        jaas_client_credentials("Client { some.Module required; };")


def test_resolution_order(tmp_path: Path) -> None:
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(JAAS)
    server_only = tmp_path / "server.conf"
    server_only.write_text(JAAS.split("Client {")[0])
    env = {ENV_USERNAME: "env-user", ENV_PASSWORD: "env-pw"}
    # explicit credentials win over everything
    assert resolve_zk_auth(username="u", password="p", jaas_file=str(jaas),
                           environ=env) == ZkAuth("u", "p", set_acl=True)
    # a ZooKeeper JAAS file, its named section
    assert resolve_zk_auth(jaas_file=str(jaas), jaas_section="Tools", set_acl=False,
                           environ=env) == ZkAuth("tool", "tool-secret")
    # the broker's sasl.jaas.file counts only when it has the client section (Kafka)
    assert resolve_zk_auth(shared_jaas_file=str(jaas), set_acl=True,
                           environ={}).username == "kafka"
    assert resolve_zk_auth(shared_jaas_file=str(server_only), set_acl=False,
                           environ={}) == NO_AUTH
    # then the environment (tools): user/password, or a JAAS file
    assert resolve_zk_auth(environ=env) == ZkAuth("env-user", "env-pw", set_acl=True)
    assert resolve_zk_auth(environ={ENV_JAAS_FILE: str(jaas)}).username == "kafka"
    with pytest.raises(InvalidConfigError, match="cannot read the JAAS file"):
        resolve_zk_auth(jaas_file=str(tmp_path / "missing.conf"), environ={})
    with pytest.raises(InvalidConfigError, match="no ZooKeeper credentials"):
        resolve_zk_auth(set_acl=True, environ={})


def test_tool_properties_are_case_insensitive_and_set_acls_when_authenticated() -> None:
    auth = zk_auth_from_properties({"ZooKeeper.SASL.Username": "kafka",
                                    "zookeeper.sasl.password": "pw"}, environ={})
    assert auth == ZkAuth("kafka", "pw", set_acl=True)
    auth = zk_auth_from_properties({"zookeeper.sasl.username": "kafka",
                                    "zookeeper.sasl.password": "pw",
                                    "zookeeper.set.acl": "false"}, environ={})
    assert auth == ZkAuth("kafka", "pw", set_acl=False)


def test_broker_settings_parse(tmp_path: Path) -> None:
    config = BrokerConfig.from_properties({
        "broker.id": "1", "zookeeper.connect": "h:1", "log.dirs": str(tmp_path),
        "zookeeper.set.acl": "true", "zookeeper.sasl.username": "kafka",
        "zookeeper.sasl.password": "pw", "zookeeper.sasl.jaas.file": "/x.conf",
        "zookeeper.sasl.clientconfig": "ZkClient"})
    assert config.zookeeper_set_acl
    assert (config.zookeeper_sasl_username, config.zookeeper_sasl_password) == ("kafka", "pw")
    assert config.zookeeper_sasl_jaas_file == "/x.conf"
    assert config.zookeeper_sasl_clientconfig == "ZkClient"


def test_dev_zookeeper_sasl_config(tmp_path: Path) -> None:
    plain = ZooKeeperServer(tmp_path / "a", client_port=1)
    assert "authProvider" not in plain.config_text()
    assert not any("login.config" in arg for arg in plain.command())
    server = ZooKeeperServer(tmp_path / "b", client_port=2,
                             sasl_users={"kafka": 'p"w\\', "tool": "t"}, require_sasl=True,
                             super_user="kafka")
    text = server.config_text()
    assert ("authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
            in text)
    assert "enforce.auth.enabled=true" in text and "enforce.auth.schemes=sasl" in text
    assert "superUser=kafka" in text
    section = jaas_sections(server.jaas_text())["Server"]
    assert section[0][0] == "org.apache.zookeeper.server.auth.DigestLoginModule"
    assert section[0][1] == {"user_kafka": 'p"w\\', "user_tool": "t"}
    assert f"-Djava.security.auth.login.config={server.jaas_path}" in server.command()
    server.write_config()
    assert server.jaas_path.stat().st_mode & 0o077 == 0
    with pytest.raises(ValueError, match="need sasl_users"):
        ZooKeeperServer(tmp_path / "c", client_port=3, require_sasl=True)
