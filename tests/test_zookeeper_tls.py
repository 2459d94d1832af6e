"""TLS between brokers/tools and ZooKeeper (Kafka's KIP-515 ``zookeeper.ssl.*`` settings), end to
end: real ZooKeeper servers (Debian's 3.8) with a ``secureClientPort``, real broker processes,
real tools, plus in-process checks of the settings.

Two ZooKeeper servers (module scope):

* ``trusted``: certificate for 127.0.0.1/localhost from the test CA, ``ssl.clientAuth=want``
  (a client certificate is asked for, not required) and ZooKeeper's x509 provider;
* ``misnamed``: certificate naming only ``zookeeper.invalid``, ``ssl.clientAuth=need``.

What must hold: brokers with only ``zookeeper.ssl.client.enable`` + a truststore form a cluster
over TLS and serve produce/consume; with a client certificate and ``zookeeper.set.acl=true`` the
znodes carry the ``x509:<DN>`` identity's ACL and neither an anonymous plaintext nor an
anonymous TLS client nor another certificate can change them; a tool reads ``/config/users``
only with the brokers' certificate (``LOGLAKE_ZOOKEEPER_TLS_CONFIG_FILE``), the migrator takes
``--zk-tls-config-file``; a broker whose truststore does not trust ZooKeeper stops with one line
naming the setting; host-name verification follows the setting; bad settings are one line.
"""

from __future__ import annotations

import os
import re
import shutil
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    load_pem_private_key,
    pkcs12,
)
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import CREATOR_ALL_ACL, Permissions

from loglake.catalog import zk_tls
from loglake.catalog.zk_auth import ZkAuth, zk_auth_from_properties
from loglake.catalog.zk_tls import ZkTls, resolve_zk_tls, start_client
from loglake.dev import certs, net
from loglake.dev.harness import DevCluster, free_port_block
from loglake.dev.zookeeper import ZooKeeperServer, ZooKeeperTls
from loglake.errors import InvalidConfigError
from tests.clients import produce_and_consume

NETTY = "org.apache.zookeeper.ClientCnxnSocketNetty"
BROKER_DN = "CN=kafka-broker,O=loglake dev"


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca: Path
    other_ca: Path
    broker: Path
    intruder: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("zk-tls-pki")
    ca = certs.make_ca("zk tls test CA")
    other = certs.make_ca("some other CA")
    (directory / "ca.pem").write_bytes(ca.chain_pem())
    (directory / "other-ca.pem").write_bytes(other.chain_pem())
    (directory / "zookeeper.pem").write_bytes(
        certs.issue(ca, "zookeeper", client=False).keystore_pem())
    (directory / "zookeeper-misnamed.pem").write_bytes(
        certs.issue(ca, "zookeeper", client=False, dns_names=("zookeeper.invalid",),
                    ip_addresses=()).keystore_pem())
    certs.write_private(directory / "broker.pem",
                        certs.issue(ca, "kafka-broker", server=False).keystore_pem())
    certs.write_private(directory / "intruder.pem",
                        certs.issue(ca, "intruder", server=False).keystore_pem())
    return Pki(directory, directory / "ca.pem", directory / "other-ca.pem",
               directory / "broker.pem", directory / "intruder.pem")


def _zookeeper(directory: Path, pki: Pki, keystore: str, client_auth: str) -> ZooKeeperServer:
    port = free_port_block(2)
    return ZooKeeperServer(directory, client_port=port, tls=ZooKeeperTls(
        port + 1, pki.directory / keystore, pki.ca, client_auth))


@pytest.fixture(scope="module")
def trusted(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[ZooKeeperServer]:
    with _zookeeper(tmp_path_factory.mktemp("zk-tls-want"), pki, "zookeeper.pem",
                    "want") as server:
        yield server


@pytest.fixture(scope="module")
def misnamed(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[ZooKeeperServer]:
    with _zookeeper(tmp_path_factory.mktemp("zk-tls-need"), pki, "zookeeper-misnamed.pem",
                    "need") as server:
        yield server


def _tls_settings(pki: Pki, keystore: Path | None = None, /, **more: str) -> dict[str, str]:
    settings = {"zookeeper.ssl.client.enable": "true", "zookeeper.clientCnxnSocket": NETTY,
                "zookeeper.ssl.truststore.location": str(pki.ca)}
    if keystore is not None:
        settings["zookeeper.ssl.keystore.location"] = str(keystore)
    settings.update(more)
    return settings


def _tls_client(hosts: str, tls: ZkTls | None) -> KazooClient:
    """A started kazoo client (TLS through our handler when ``tls``), anonymous otherwise."""
    client = KazooClient(hosts=hosts, timeout=10,
                         connection_retry={"max_tries": 3, "delay": 0.2},
                         **({"handler": tls.handler()} if tls is not None else {}))
    start_client(client, 20)
    return client


def _cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer,
             brokers: int, settings: dict[str, str]) -> DevCluster:
    chroot = f"/zktls-{uuid.uuid4().hex[:8]}"
    overrides = {**settings, "zookeeper.connect": zookeeper.tls_hosts + chroot}
    return DevCluster(tmp_path_factory.mktemp("zk-tls-cluster"), brokers=brokers,
                      zookeeper=zookeeper.hosts, chroot=chroot, broker_overrides=overrides)


@pytest.fixture(scope="module")
def server_auth_cluster(tmp_path_factory: pytest.TempPathFactory, pki: Pki,
                        trusted: ZooKeeperServer) -> Iterator[DevCluster]:
    with _cluster(tmp_path_factory, trusted, 2, _tls_settings(pki)) as dev:
        yield dev


@pytest.fixture(scope="module")
def mtls_cluster(tmp_path_factory: pytest.TempPathFactory, pki: Pki,
                 trusted: ZooKeeperServer) -> Iterator[DevCluster]:
    settings = _tls_settings(pki, pki.broker, **{"zookeeper.set.acl": "true"})
    with _cluster(tmp_path_factory, trusted, 1, settings) as dev:
        yield dev


def _produce_and_consume(dev: DevCluster, topic: str, count: int) -> None:
    produce_and_consume(dev.bootstrap_servers, topic, count)


def _loglake(*argv: str, env: dict[str, str], timeout: float = 90
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loglake", *argv], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **env})


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("loglake: error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


# ---- end to end ---------------------------------------------------------------------------------
def test_brokers_over_server_auth_tls_form_a_cluster_and_serve(
        server_auth_cluster: DevCluster, trusted: ZooKeeperServer) -> None:
    dev = server_auth_cluster
    assert dev.zookeeper_connect.startswith(trusted.hosts)  # the harness: plaintext port
    topic = f"zktls-{uuid.uuid4().hex[:8]}"
    dev.create_topic(topic, partitions=2, replication_factor=2)  # a controller, ISR 2
    _produce_and_consume(dev, topic, 30)
    # the brokers' only ZooKeeper address is the TLS port, which a plaintext client cannot use
    plain = KazooClient(hosts=trusted.tls_hosts, timeout=5,
                        connection_retry={"max_tries": 1, "delay": 0.1})
    with pytest.raises(KazooTimeoutError):
        plain.start(timeout=4)
    plain.close()


def test_mtls_set_acl_znodes_belong_to_the_x509_identity(
        mtls_cluster: DevCluster, trusted: ZooKeeperServer, pki: Pki) -> None:
    dev = mtls_cluster
    topic = f"zkx509-{uuid.uuid4().hex[:8]}"
    dev.create_topic(topic, partitions=1, replication_factor=1)
    _produce_and_consume(dev, topic, 5)
    chroot = dev.chroot
    anonymous_tls = _tls_client(trusted.tls_hosts, resolve_zk_tls(_tls_settings(pki)))
    intruder = _tls_client(trusted.tls_hosts, resolve_zk_tls(_tls_settings(pki, pki.intruder)))
    anonymous_plain = _tls_client(trusted.hosts, None)
    try:
        for path in ("/brokers/ids/1", f"/brokers/topics/{topic}", "/controller", "/loglake",
                     "/kafka-acl"):
            acls, _ = anonymous_tls.get_acls(chroot + path)
            assert {(a.id.scheme, a.id.id, a.perms) for a in acls} == {
                ("x509", BROKER_DN, Permissions.ALL), ("world", "anyone", Permissions.READ)}, path
        owner = _tls_client(trusted.tls_hosts, resolve_zk_tls(_tls_settings(pki, pki.broker)))
        try:  # no world access at all to the credentials (not even to their ACL)
            acls, _ = owner.get_acls(chroot + "/config/users")
        finally:
            owner.stop()
            owner.close()
        assert {(a.id.scheme, a.id.id) for a in acls} == {("x509", BROKER_DN)}
        target = f"{chroot}/brokers/topics/{topic}"
        for client in (anonymous_tls, intruder, anonymous_plain):
            with pytest.raises(NoAuthError):
                client.set(target, b'{"version":1,"partitions":{}}')
            with pytest.raises(NoAuthError):
                client.create(f"{target}/stray", b"")
            with pytest.raises(NoAuthError):
                client.delete(f"{chroot}/controller")
            with pytest.raises(NoAuthError):
                client.get_children(f"{chroot}/config/users")
        after = f"{topic}-after"  # the brokers still write ZooKeeper and serve
        dev.create_topic(after, partitions=1, replication_factor=1)
        _produce_and_consume(dev, after, 5)
    finally:
        for client in (anonymous_tls, intruder, anonymous_plain):
            client.stop()
            client.close()


def test_tools_over_tls_with_the_brokers_certificate(
        mtls_cluster: DevCluster, trusted: ZooKeeperServer, pki: Pki, tmp_path: Path) -> None:
    dev = mtls_cluster
    connect = trusted.tls_hosts + dev.chroot
    with_cert = tmp_path / "zk-tls.properties"
    with_cert.write_text("".join(f"{key}={value}\n" for key, value in
                                 _tls_settings(pki, pki.broker).items())
                         + "some.other.key=ignored\n")
    no_cert = tmp_path / "zk-tls-anonymous.properties"
    no_cert.write_text("".join(f"{key}={value}\n" for key, value in _tls_settings(pki).items()))
    env = {"LOGLAKE_ZOOKEEPER_TLS_CONFIG_FILE": str(with_cert)}
    listed = _loglake("users", "create", "zk-tls-user", "--password", "pw-123456",
                      "--zookeeper", connect, env=env)
    assert listed.returncode == 0, listed.stderr
    listed = _loglake("users", "list", "--zookeeper", connect, env=env)
    assert listed.returncode == 0 and "zk-tls-user" in listed.stdout, listed.stderr
    refused = _loglake("users", "list", "--zookeeper", connect,
                       env={"LOGLAKE_ZOOKEEPER_TLS_CONFIG_FILE": str(no_cert)})
    assert "NoAuth" in _one_line_error(refused)
    # Kafka's migrator: --zk-tls-config-file, the certificate is the login
    migrated = _loglake("zookeeper-security-migration", "--zookeeper.acl", "secure",
                        "--zookeeper.connect", connect, "--zk-tls-config-file", str(with_cert),
                        env={})
    assert migrated.returncode == 0, migrated.stderr
    assert "as x509" in migrated.stdout and "Done:" in migrated.stdout, migrated.stdout
    refused = _loglake("zookeeper-security-migration", "--zookeeper.acl", "secure",
                       "--zookeeper.connect", connect, "--zk-tls-config-file", str(no_cert),
                       env={})
    assert "nor a TLS client certificate" in _one_line_error(refused)


def _broker_start(tmp_path: Path, zookeeper: str, settings: dict[str, str]
                  ) -> subprocess.CompletedProcess[str]:
    port = free_port_block(1)
    properties = {"broker.id": "7", "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                  "log.dirs": str(tmp_path / "data"), "zookeeper.connect": zookeeper,
                  "remote.log.storage.url": str(tmp_path / "tier"), **settings}
    config = tmp_path / "server.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
    return _loglake("broker", "start", "--config", str(config), env={}, timeout=120)


def test_a_broker_that_does_not_trust_zookeeper_stops_with_one_line(
        trusted: ZooKeeperServer, pki: Pki, tmp_path: Path) -> None:
    started = time.monotonic()
    result = _broker_start(tmp_path, trusted.tls_hosts + "/untrusted", _tls_settings(
        pki, **{"zookeeper.ssl.truststore.location": str(pki.other_ca)}))
    line = _one_line_error(result)
    assert "zookeeper.ssl.truststore.location" in line and "not trusted" in line, line
    assert time.monotonic() - started < 110


def test_a_bad_setting_stops_the_broker_with_one_line(
        trusted: ZooKeeperServer, pki: Pki, tmp_path: Path) -> None:
    result = _broker_start(tmp_path, trusted.tls_hosts, _tls_settings(
        pki, **{"zookeeper.ssl.crl.enable": "true"}))
    assert "zookeeper.ssl.crl.enable" in _one_line_error(result)


def test_host_name_verification_follows_the_setting(misnamed: ZooKeeperServer,
                                                    pki: Pki) -> None:
    hosts = misnamed.tls_hosts
    with pytest.raises(InvalidConfigError,
                       match=re.escape("zookeeper.ssl.endpoint.identification.algorithm")):
        _tls_client(hosts, resolve_zk_tls(_tls_settings(pki, pki.broker)))
    off = resolve_zk_tls(_tls_settings(
        pki, pki.broker, **{"zookeeper.ssl.endpoint.identification.algorithm": ""}))
    client = _tls_client(hosts, off)  # host names not checked; the CA still is
    try:
        client.create("/verified-off", b"x")
        assert client.get("/verified-off")[0] == b"x"
    finally:
        client.stop()
        client.close()
    untrusted = resolve_zk_tls(_tls_settings(
        pki, pki.broker, **{"zookeeper.ssl.endpoint.identification.algorithm": "",
                            "zookeeper.ssl.truststore.location": str(pki.other_ca)}))
    with pytest.raises(InvalidConfigError, match="not trusted"):
        _tls_client(hosts, untrusted)


def test_the_address_connected_to_also_counts_as_zookeeper_checks_it(
        tmp_path: Path, pki: Pki) -> None:
    """ZooKeeper's ZKTrustManager accepts a certificate naming the address connected to: a
    certificate for 127.0.0.1 only serves ``localhost:<port>``."""
    ca = certs.make_ca("ip-only CA")
    (tmp_path / "ca.pem").write_bytes(ca.chain_pem())
    (tmp_path / "zk.pem").write_bytes(certs.issue(
        ca, "zookeeper", client=False, dns_names=(), ip_addresses=("127.0.0.1",)
    ).keystore_pem())
    port = free_port_block(2)
    server = ZooKeeperServer(tmp_path / "zk", client_port=port, tls=ZooKeeperTls(
        port + 1, tmp_path / "zk.pem", tmp_path / "ca.pem", "want"))
    with server:
        tls = resolve_zk_tls(_tls_settings(
            pki, **{"zookeeper.ssl.truststore.location": str(tmp_path / "ca.pem")}))
        client = _tls_client(f"localhost:{port + 1}", tls)
        try:
            assert client.get("/")[1] is not None
        finally:
            client.stop()
            client.close()


def test_ssl_client_auth_need_refuses_a_client_without_certificate(
        misnamed: ZooKeeperServer, pki: Pki) -> None:
    no_cert = resolve_zk_tls(_tls_settings(
        pki, **{"zookeeper.ssl.endpoint.identification.algorithm": ""}))
    with pytest.raises(InvalidConfigError, match=re.escape("zookeeper.ssl.keystore.location")):
        _tls_client(misnamed.tls_hosts, no_cert)


def test_pkcs12_keystore_and_protocol_versions(trusted: ZooKeeperServer, pki: Pki,
                                               tmp_path: Path) -> None:
    ca = certs.make_ca("p12 CA")
    issued = certs.issue(ca, "p12-client", server=False)
    store = tmp_path / "client.p12"
    store.write_bytes(pkcs12.serialize_key_and_certificates(
        b"client", issued.key, issued.certificate, None, BestAvailableEncryption(b"p12-pass")))
    tls = resolve_zk_tls(_tls_settings(
        pki, store, **{"zookeeper.ssl.keystore.password": "p12-pass",
                       "zookeeper.ssl.protocol": "TLSv1.3"}))
    assert tls is not None and tls.minimum == tls.maximum == ssl.TLSVersion.TLSv1_3
    # the server wants a certificate but does not trust this one's CA: refused at handshake
    with pytest.raises(InvalidConfigError):
        _tls_client(trusted.tls_hosts, tls)
    # ZooKeeper 3.8 speaks TLSv1.2 only (its ssl.protocol default): a TLSv1.3-only client is
    # refused naming the protocol settings; TLSv1.2 + TLSv1.3 is served
    with pytest.raises(InvalidConfigError, match=re.escape("zookeeper.ssl.protocol")):
        _tls_client(trusted.tls_hosts, resolve_zk_tls(_tls_settings(
            pki, **{"zookeeper.ssl.enabled.protocols": "TLSv1.3"})))
    client = _tls_client(trusted.tls_hosts, resolve_zk_tls(_tls_settings(
        pki, **{"zookeeper.ssl.enabled.protocols": "TLSv1.2,TLSv1.3"})))
    client.stop()
    client.close()


# ---- settings, in process -----------------------------------------------------------------------
def test_disabled_means_plaintext_exactly_as_before(pki: Pki) -> None:
    assert resolve_zk_tls({}) is None
    assert resolve_zk_tls({"zookeeper.ssl.client.enable": "false",
                           "zookeeper.ssl.truststore.location": "/nonexistent"}) is None
    assert zk_auth_from_properties({}, environ={}) == ZkAuth()
    assert "handler" not in ZkAuth().kazoo_kwargs()


@pytest.mark.parametrize(("extra", "message"), [
    ({"zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNIO"},
     "cannot speak TLS"),
    ({"zookeeper.clientCnxnSocket": "com.example.Socket"}, "unknown class"),
    ({"zookeeper.ssl.crl.enable": "true"}, "zookeeper.ssl.crl.enable=true is not supported"),
    ({"zookeeper.ssl.ocsp.enable": "true"}, "zookeeper.ssl.ocsp.enable=true is not supported"),
    ({"zookeeper.ssl.crl.enable": "maybe"}, "must be true or false"),
    ({"zookeeper.ssl.protocol": "TLSv1.1"}, "zookeeper.ssl.protocol: TLSv1.1"),
    ({"zookeeper.ssl.enabled.protocols": "TLSv1.2,SSLv3"}, "zookeeper.ssl.enabled.protocols"),
    ({"zookeeper.ssl.endpoint.identification.algorithm": "LDAPS"}, "is not supported"),
    ({"zookeeper.ssl.cipher.suites": "TLS_FOO_WITH_BAR_SHA"}, "TLS_FOO_WITH_BAR_SHA"),
    ({"zookeeper.ssl.truststore.location": "/nonexistent/ca.pem"},
     "zookeeper.ssl.truststore.location"),
    ({"zookeeper.ssl.truststore.type": "BCFKS"}, "BCFKS"),
    ({"zookeeper.ssl.keystore.location": "/nonexistent/k.pem"},
     "zookeeper.ssl.keystore.location"),
])
def test_bad_settings_are_one_line(pki: Pki, extra: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(message)) as raised:
        resolve_zk_tls(_tls_settings(pki, **extra))
    assert "\n" not in str(raised.value)


def test_encrypted_pem_key_needs_the_keystore_password(pki: Pki, tmp_path: Path) -> None:
    ca = certs.make_ca("enc CA")
    issued = certs.issue(ca, "enc", server=False)
    store = tmp_path / "enc.pem"
    store.write_bytes(issued.keystore_pem(b"right-secret"))
    settings = _tls_settings(pki, store)
    with pytest.raises(InvalidConfigError) as raised:
        resolve_zk_tls({**settings, "zookeeper.ssl.keystore.password": "wrong-secret"})
    assert "zookeeper.ssl.keystore" in str(raised.value)
    assert "secret" not in str(raised.value)
    tls = resolve_zk_tls({**settings, "zookeeper.ssl.keystore.password": "right-secret"})
    assert tls is not None and tls.client_auth and tls.key_pem is not None


def test_cipher_suites_map_to_openssl_names(pki: Pki) -> None:
    tls = resolve_zk_tls(_tls_settings(pki, **{
        "zookeeper.ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, "
                                       "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,"
                                       "TLS_AES_256_GCM_SHA384"}))
    assert tls is not None
    assert tls.ciphers == "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-CHACHA20-POLY1305"


def test_set_acl_needs_a_login_sasl_or_a_client_certificate(pki: Pki) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape("zookeeper.ssl.keystore.location")):
        zk_auth_from_properties({**_tls_settings(pki), "zookeeper.set.acl": "true"},
                                environ={})
    with_cert = zk_auth_from_properties(
        {**_tls_settings(pki, pki.broker), "zookeeper.set.acl": "true"}, environ={})
    assert with_cert.set_acl and with_cert.authenticated and with_cert.username is None
    assert "handler" in with_cert.kazoo_kwargs()
    # Kafka's zkTlsClientAuthEnabled also needs zookeeper.clientCnxnSocket
    settings = _tls_settings(pki, pki.broker)
    del settings["zookeeper.clientCnxnSocket"]
    with pytest.raises(InvalidConfigError, match=re.escape("set.acl")):
        zk_auth_from_properties({**settings, "zookeeper.set.acl": "true"}, environ={})


def test_tool_properties_file_keeps_only_zookeeper_tls_keys(tmp_path: Path) -> None:
    path = tmp_path / "zk.properties"
    path.write_text("# comment\nzookeeper.ssl.client.enable=true\n"
                    "zookeeper.ssl.truststore.location : /x/ca.pem\nbootstrap.servers=x:1\n")
    assert zk_tls.read_properties(str(path)) == {
        "zookeeper.ssl.client.enable": "true", "zookeeper.ssl.truststore.location": "/x/ca.pem"}
    with pytest.raises(InvalidConfigError, match="LOGLAKE_ZOOKEEPER_TLS_CONFIG_FILE"):
        zk_tls.zk_tls_from_environment({"LOGLAKE_ZOOKEEPER_TLS_CONFIG_FILE": "/nonexistent"})


def _keytool(*args: str) -> None:
    found = [c for c in (shutil.which("keytool"),
                         os.path.join(os.environ.get("JAVA_HOME", ""), "bin", "keytool"))
             if c and os.access(c, os.X_OK)]
    if not found:
        pytest.skip("no JDK keytool (it makes the JKS stores)")
    done = subprocess.run([found[0], *args], capture_output=True, text=True, timeout=120,
                          check=False, env={**os.environ, "JAVA_TOOL_OPTIONS": "-Xmx64m"})
    assert done.returncode == 0, done.stdout + done.stderr


def test_jks_stores_made_by_keytool(trusted: ZooKeeperServer, pki: Pki, tmp_path: Path) -> None:
    """Kafka operators' usual stores: a JKS keystore (ZooKeeper: key password = store password)
    and a JKS truststore, types unset (decided by the .jks extension, as ZooKeeper does)."""
    pem = pki.broker.read_bytes()
    key = load_pem_private_key(pem, None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)  # the dev CA's keys are P-256
    chain = x509.load_pem_x509_certificates(pem)
    source = tmp_path / "source.p12"
    source.write_bytes(pkcs12.serialize_key_and_certificates(
        b"broker", key, chain[0], chain[1:], BestAvailableEncryption(b"source-pw")))
    _keytool("-importkeystore", "-noprompt", "-srckeystore", str(source), "-srcstoretype",
             "PKCS12", "-srcstorepass", "source-pw", "-destkeystore", str(tmp_path / "zk.jks"),
             "-deststoretype", "JKS", "-deststorepass", "zk-store-pw", "-destkeypass",
             "zk-store-pw")
    _keytool("-importcert", "-noprompt", "-alias", "ca", "-file", str(pki.ca), "-keystore",
             str(tmp_path / "trust.jks"), "-storetype", "JKS", "-storepass", "trust-pw")
    settings = _tls_settings(pki, tmp_path / "zk.jks", **{
        "zookeeper.ssl.keystore.password": "zk-store-pw",
        "zookeeper.ssl.truststore.location": str(tmp_path / "trust.jks"),
        "zookeeper.ssl.truststore.password": "trust-pw"})
    client = _tls_client(trusted.tls_hosts, resolve_zk_tls(settings))
    try:
        path = f"/jks-{uuid.uuid4().hex[:8]}"
        client.create(path, b"", acl=CREATOR_ALL_ACL)
        acls, _ = client.get_acls(path)
        assert {(a.id.scheme, a.id.id) for a in acls} == {("x509", BROKER_DN)}
    finally:
        client.stop()
        client.close()
    for name in ("zookeeper.ssl.keystore.password", "zookeeper.ssl.truststore.password"):
        with pytest.raises(InvalidConfigError, match=re.escape(name)) as raised:
            resolve_zk_tls({**settings, name: "not-the-password"})
        assert "not-the-password" not in str(raised.value) and "\n" not in str(raised.value)


def test_brokers_reconnect_over_tls_after_a_zookeeper_restart(
        tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> None:
    """A running broker's reconnections go through the same TLS handler: ZooKeeper stopped and
    started again on the same data (within the session timeout) is reached again, and the
    broker serves and writes ZooKeeper afterwards."""
    server = _zookeeper(tmp_path_factory.mktemp("zk-tls-restart"), pki, "zookeeper.pem", "need")
    assert server.tls is not None
    tls_port = server.tls.port
    with server, _cluster(tmp_path_factory, server, 1, _tls_settings(pki, pki.broker)) as dev:
        first = f"zkre-{uuid.uuid4().hex[:8]}"
        dev.create_topic(first, partitions=1, replication_factor=1)
        server.stop()
        freed = time.monotonic() + 60  # connections the JVM left closing may hold a port
        while not all(net.port_is_free(port) for port in (server.client_port, tls_port)):
            assert time.monotonic() < freed, "ZooKeeper's ports were not released"
            time.sleep(0.2)
        server.start()
        second = f"{first}-after"
        deadline = time.monotonic() + 90
        for _attempt in range(200):  # the broker reconnects with kazoo's back-off
            try:
                dev.create_topic(second, partitions=1, replication_factor=1, timeout=15)
                break
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    dev.wait_topic_ready(second, partitions=1)
                    break
                assert time.monotonic() < deadline, exc
                time.sleep(0.5)
        _produce_and_consume(dev, second, 5)
        logs = (dev.data_dir / "logs").glob("broker-*.log")
        assert not any("TLS certificate" in path.read_text() for path in logs)
