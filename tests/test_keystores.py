"""Kafka's keystores and truststores (PEM, PKCS12, JKS) and KIP-651 inline PEM
(:mod:`loglake.keystores`), in-process and on real brokers and clients.

In-process: the type sniffing, every store type read into the same PEM material (stores made
with ``cryptography`` and pyjks's writer), the one-line errors (naming the setting, never the
password), the client settings' translation for librdkafka.

Real processes (stores made with the JDK's ``keytool`` from the test CA; skipped when there is
no ``keytool``): a 2-broker cluster configured ONLY with ``.jks`` keystore + truststore and
``ssl.client.auth=required`` replicates over its SSL inter-broker listener and serves
confluent-kafka and the Java client with the clients' own JKS and PKCS12 stores; a broker with
PKCS12 stores (types not set: sniffed) and a listener with inline PEM settings; every bad store
setting stops ``loglake broker start`` with one line (no traceback, no password); ``loglake
topics list --command-config`` with a wrong truststore password prints one line, exit 1.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jks
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    NoEncryption,
    PrivateFormat,
    pkcs12,
)

from loglake import jvm, keystores
from loglake.client.security import SecurityConfig, SecurityConfigError
from loglake.dev.harness import DevCluster
from loglake.errors import InvalidConfigError
from tests.java_interop import interop_jar
from tests.tls_util import Identity, TlsFiles, make_tls_files

__all__ = ["interop_jar"]  # the fixture, imported for pytest

STORE_PW, KEY_PW, TRUST_PW = "store-secret-1", "key-secret-2", "trust-secret-3"
SECRETS = (STORE_PW, KEY_PW, TRUST_PW, "wrong-secret-9")
SSL_OFFSET, INLINE_OFFSET = 100, 200
COUNT = 10


# ---- stores made in-process ---------------------------------------------------------------------

def _der(identity: Identity) -> tuple[bytes, bytes]:
    return (identity.private_key.private_bytes(Encoding.DER, PrivateFormat.PKCS8,
                                               NoEncryption()),
            identity.certificate.public_bytes(Encoding.DER))


def _jks_keystore(identity: Identity, files: TlsFiles, store_pw: str, key_pw: str) -> bytes:
    key, cert = _der(identity)
    entry = jks.PrivateKeyEntry.new(
        "me", [cert, files.ca.certificate.public_bytes(Encoding.DER)], key)
    entry.encrypt(key_pw)
    return jks.KeyStore.new("jks", [entry]).saves(store_pw)


def _jks_truststore(files: TlsFiles, store_pw: str) -> bytes:
    entry = jks.TrustedCertEntry.new("ca", files.ca.certificate.public_bytes(Encoding.DER))
    return jks.KeyStore.new("jks", [entry]).saves(store_pw)


def _p12(identity: Identity, files: TlsFiles, password: str | None) -> bytes:
    encryption = (BestAvailableEncryption(password.encode()) if password else NoEncryption())
    return pkcs12.serialize_key_and_certificates(
        b"me", identity.private_key, identity.certificate, [files.ca.certificate], encryption)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def test_store_type_is_sniffed_from_the_content(tls: TlsFiles) -> None:
    assert keystores.sniff_type(_jks_truststore(tls, "x")) == keystores.JKS
    assert keystores.sniff_type(b"\xce\xce\xce\xce\x00\x00\x00\x02") == keystores.JCEKS
    assert keystores.sniff_type(tls.client.keystore.read_bytes()) == keystores.PEM
    assert keystores.sniff_type(b"Bag Attributes\n-----BEGIN CERTIFICATE-----\n") == "PEM"
    assert keystores.sniff_type(_p12(tls.client, tls, "x")) == keystores.PKCS12


def test_every_store_type_reads_to_the_same_material(tls: TlsFiles, tmp_path: Path) -> None:
    expected = keystores.read_keystore(str(tls.client.keystore), "PEM", None, None)
    assert expected.key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    assert expected.chain_pem.count(b"BEGIN CERTIFICATE") == 2  # leaf, then the CA
    full = keystores.read_keystore(str(tls.client.keystore), None, None, None)
    assert full == expected
    jks_path = _write(tmp_path / "c.jks", _jks_keystore(tls.client, tls, STORE_PW, KEY_PW))
    p12_path = _write(tmp_path / "c.p12", _p12(tls.client, tls, STORE_PW))
    for path, kind in ((jks_path, "JKS"), (jks_path, None), (p12_path, "pkcs12"),
                       (p12_path, None)):
        material = keystores.read_keystore(path, kind, STORE_PW, KEY_PW)
        assert material == full, (path, kind)
    # JKS without ssl.key.password: the store password is tried (Kafka's behaviour)
    same = _write(tmp_path / "same.jks", _jks_keystore(tls.client, tls, STORE_PW, STORE_PW))
    assert keystores.read_keystore(same, None, STORE_PW, None) == full
    # inline PEM (KIP-651), as a .properties file hands it over: one line, spaces
    one_line = " ".join(tls.client.key.read_text().split())
    chain = " ".join(tls.client.cert.read_text().split())
    assert keystores.keystore_from_pem(one_line, chain, None) == full
    ca_bundle = tls.ca.certificate.public_bytes(Encoding.PEM)
    for truststore, kind, password in (
            (_write(tmp_path / "t.jks", _jks_truststore(tls, TRUST_PW)), None, TRUST_PW),
            (str(tmp_path / "t.jks"), "JKS", None),  # no password: no integrity check (Java)
            (str(tls.ca.cert), None, None), (p12_path, "PKCS12", STORE_PW)):
        bundle = keystores.read_truststore(truststore, kind, password)
        assert ca_bundle in bundle, truststore
    assert keystores.truststore_from_pem(" ".join(tls.ca.cert.read_text().split())) == ca_bundle


def test_load_into_leaves_no_key_file(tls: TlsFiles, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    keystores.load_into(context, keystores.read_keystore(
        _write(tmp_path / "c.jks", _jks_keystore(tls.client, tls, STORE_PW, KEY_PW)),
        None, STORE_PW, KEY_PW))
    assert list(scratch.iterdir()) == []


def _bad_inputs(tls: TlsFiles, d: Path) -> list[tuple[str, dict[str, Any], str]]:
    """(case, read_keystore/read_truststore arguments, expected words)."""
    client_jks = _write(d / "c.jks", _jks_keystore(tls.client, tls, STORE_PW, KEY_PW))
    trust_jks = _write(d / "t.jks", _jks_truststore(tls, TRUST_PW))
    client_p12 = _write(d / "c.p12", _p12(tls.client, tls, STORE_PW))
    empty_jks = _write(d / "empty.jks", jks.KeyStore.new("jks", []).saves(TRUST_PW))
    return [
        ("jks wrong store password", dict(location=client_jks, store_password="wrong-secret-9",
                                          key_password=KEY_PW), "wrong ssl.keystore.password"),
        ("jks wrong key password", dict(location=client_jks, store_password=STORE_PW,
                                        key_password="wrong-secret-9"),
         "wrong ssl.key.password"),
        ("jks no key password", dict(location=client_jks, store_password=STORE_PW,
                                     key_password=None), "wrong ssl.key.password"),
        ("jks without password", dict(location=client_jks, store_password=None,
                                      key_password=KEY_PW), "needs ssl.keystore.password"),
        ("p12 wrong password", dict(location=client_p12, store_password="wrong-secret-9",
                                    key_password=None), "wrong ssl.keystore.password"),
        ("keystore without key", dict(location=trust_jks, store_password=TRUST_PW,
                                      key_password=None), "no private key entry"),
        ("pem keystore without key", dict(location=str(tls.ca.cert), store_password=None,
                                          key_password=None), "holds no PEM private key"),
        ("unknown type", dict(location=client_jks, store_type="BKS", store_password=STORE_PW,
                              key_password=None), "unknown store type 'BKS'"),
        ("missing file", dict(location=str(d / "nope.jks"), store_password=STORE_PW,
                              key_password=None), "does not exist"),
        ("truststore wrong password", dict(truststore=trust_jks,
                                           store_password="wrong-secret-9"),
         "wrong ssl.truststore.password"),
        ("truststore without certificates", dict(truststore=empty_jks,
                                                 store_password=TRUST_PW),
         "holds no certificates"),
    ]


def test_bad_stores_give_one_line_naming_the_setting(tls: TlsFiles, tmp_path: Path) -> None:
    for case, args, words in _bad_inputs(tls, tmp_path):
        args = dict(args)
        with pytest.raises(InvalidConfigError) as caught:
            if "truststore" in args:
                keystores.read_truststore(args.pop("truststore"), args.get("store_type"),
                                          args["store_password"], where="listener SSL")
            else:
                keystores.read_keystore(args["location"], args.get("store_type"),
                                        args["store_password"], args["key_password"],
                                        where="listener SSL")
        message = str(caught.value)
        assert words in message and "\n" not in message, (case, message)
        assert "(listener SSL)" in message, (case, message)
        assert ("ssl.keystore" in message or "ssl.truststore" in message), (case, message)
        assert not any(secret in message for secret in SECRETS), (case, message)
    with pytest.raises(InvalidConfigError, match=r"wrong ssl\.key\.password"):
        keystores.keystore_from_pem(
            tls.client.private_key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8,
                                                 BestAvailableEncryption(KEY_PW.encode())),
            tls.client.cert.read_bytes(), "wrong-secret-9")
    with pytest.raises(InvalidConfigError, match="does not belong"):
        keystores.keystore_from_pem(tls.broker.key.read_bytes(), tls.client.cert.read_bytes(),
                                    None)
    with pytest.raises(InvalidConfigError, match=r"ssl\.truststore\.certificates: holds no"):
        keystores.truststore_from_pem("not a certificate")


def test_client_settings_translate_jks_and_pkcs12_for_librdkafka(tls: TlsFiles,
                                                                 tmp_path: Path) -> None:
    client_jks = _write(tmp_path / "c.jks", _jks_keystore(tls.client, tls, STORE_PW, KEY_PW))
    trust_jks = _write(tmp_path / "t.jks", _jks_truststore(tls, TRUST_PW))
    config = SecurityConfig.from_properties({
        "security.protocol": "SSL", "ssl.truststore.location": trust_jks,
        "ssl.truststore.password": TRUST_PW, "ssl.keystore.location": client_jks,
        "ssl.keystore.password": STORE_PW, "ssl.key.password": KEY_PW})
    assert not any(secret in repr(config) for secret in SECRETS)
    rdkafka = config.librdkafka()
    assert "ssl.ca.location" not in rdkafka and "ssl.keystore.location" not in rdkafka
    assert rdkafka["ssl.ca.pem"].startswith("-----BEGIN CERTIFICATE-----")
    assert rdkafka["ssl.key.pem"].startswith("-----BEGIN PRIVATE KEY-----")
    assert "ssl.key.password" not in rdkafka
    Producer({"bootstrap.servers": "127.0.0.1:9", **rdkafka})  # librdkafka loads it all
    assert config.ssl_context() is not None
    typed = SecurityConfig.from_properties({
        "security.protocol": "SSL", "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": _write(tmp_path / "t.p12", _p12(tls.client, tls, TRUST_PW)),
        "ssl.truststore.password": TRUST_PW})
    assert "BEGIN CERTIFICATE" in typed.librdkafka()["ssl.ca.pem"]
    wrong = SecurityConfig.from_properties({
        "security.protocol": "SSL", "ssl.truststore.location": trust_jks,
        "ssl.truststore.password": "wrong-secret-9"})
    for use in (wrong.librdkafka, wrong.ssl_context):
        with pytest.raises(SecurityConfigError, match=r"wrong ssl\.truststore\.password"
                           ) as caught:
            use()
        assert "wrong-secret-9" not in str(caught.value)


# ---- stores made by keytool, real brokers and clients -------------------------------------------

def _keytool() -> str:
    for candidate in (shutil.which("keytool"),
                      os.path.join(os.environ.get("JAVA_HOME", ""), "bin", "keytool")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("no JDK keytool (Java 17's keytool makes the JKS/PKCS12 stores)")


def _run_keytool(*args: str) -> None:
    done = subprocess.run([_keytool(), *args], capture_output=True, text=True, timeout=120,
                          check=False, env={**os.environ, "JAVA_TOOL_OPTIONS": "-Xmx64m"})
    assert done.returncode == 0, done.stdout + done.stderr


@dataclass(frozen=True)
class Stores:
    """keytool-made stores: ``<name>.jks`` and ``<name>.p12`` keystores of the broker and the
    client, and ``trust.jks`` / ``trust.p12`` truststores holding the CA."""

    directory: Path
    tls: TlsFiles

    def path(self, name: str) -> Path:
        return self.directory / name


def _keytool_keystore(identity: Identity, tls: TlsFiles, directory: Path, name: str) -> None:
    source = directory / f"{name}.source.p12"
    source.write_bytes(_p12(identity, tls, "source-pw"))
    _run_keytool("-importkeystore", "-noprompt", "-srckeystore", str(source),
                 "-srcstoretype", "PKCS12", "-srcstorepass", "source-pw",
                 "-destkeystore", str(directory / f"{name}.jks"), "-deststoretype", "JKS",
                 "-deststorepass", STORE_PW, "-destkeypass", KEY_PW)
    _run_keytool("-importkeystore", "-noprompt", "-srckeystore", str(source),
                 "-srcstoretype", "PKCS12", "-srcstorepass", "source-pw",
                 "-destkeystore", str(directory / f"{name}.p12"), "-deststoretype", "PKCS12",
                 "-deststorepass", STORE_PW)
    _run_keytool("-importkeystore", "-noprompt", "-srckeystore", str(source),
                 "-srcstoretype", "PKCS12", "-srcstorepass", "source-pw",
                 "-destkeystore", str(directory / f"{name}.jceks"), "-deststoretype", "JCEKS",
                 "-deststorepass", STORE_PW, "-destkeypass", KEY_PW)
    source.unlink()


@pytest.fixture(scope="module")
def stores(tls: TlsFiles, tmp_path_factory: pytest.TempPathFactory) -> Stores:
    directory = tmp_path_factory.mktemp("stores")
    _keytool_keystore(tls.broker, tls, directory, "broker")
    _keytool_keystore(tls.client, tls, directory, "client")
    for kind, suffix in (("JKS", "jks"), ("PKCS12", "p12")):
        _run_keytool("-importcert", "-noprompt", "-alias", "ca", "-file", str(tls.ca.cert),
                     "-keystore", str(directory / f"trust.{suffix}"), "-storetype", kind,
                     "-storepass", TRUST_PW)
    result = Stores(directory, tls)
    assert keystores.sniff_type(result.path("broker.jks").read_bytes()) == keystores.JKS
    assert keystores.sniff_type(result.path("broker.p12").read_bytes()) == keystores.PKCS12
    return result


def test_keytool_stores_read_to_the_pem_material(stores: Stores, tls: TlsFiles) -> None:
    """The JDK's own JKS, JCEKS and PKCS12 (Java 17: PBES2/AES, HmacSHA256) stores."""
    expected = keystores.read_keystore(str(tls.client.keystore), None, None, None)
    for name in ("client.jks", "client.jceks", "client.p12"):
        material = keystores.read_keystore(str(stores.path(name)), None, STORE_PW, KEY_PW)
        assert material == expected, name
    ca = tls.ca.certificate.public_bytes(Encoding.PEM)
    for name in ("trust.jks", "trust.p12"):
        assert keystores.read_truststore(str(stores.path(name)), None, TRUST_PW) == ca, name


def _jks_broker_settings(stores: Stores) -> dict[str, str]:
    return {
        "ssl.keystore.type": "JKS", "ssl.keystore.location": str(stores.path("broker.jks")),
        "ssl.keystore.password": STORE_PW, "ssl.key.password": KEY_PW,
        "ssl.truststore.type": "JKS", "ssl.truststore.location": str(stores.path("trust.jks")),
        "ssl.truststore.password": TRUST_PW, "ssl.client.auth": "required",
    }


def _client_properties(stores: Stores, kind: str, path: Path, **changes: str) -> Path:
    """A Java-style client.properties with the client's own ``kind`` (jks/p12) stores."""
    props = {"security.protocol": "SSL",
             "ssl.truststore.location": str(stores.path(f"trust.{kind}")),
             "ssl.truststore.password": TRUST_PW,
             "ssl.keystore.location": str(stores.path(f"client.{kind}")),
             "ssl.keystore.password": STORE_PW}
    if kind == "jks":
        props["ssl.key.password"] = KEY_PW
    else:
        props.update({"ssl.keystore.type": "PKCS12", "ssl.truststore.type": "PKCS12"})
    props.update(changes)
    path.write_text("".join(f"{key}={value}\n" for key, value in props.items()))
    path.chmod(0o600)
    return path


def _confluent_roundtrip(bootstrap: str, properties: Path, topic: str) -> list[bytes]:
    security = SecurityConfig.load(properties).librdkafka()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **security})
    values = [f"{topic}-{i}".encode() for i in range(COUNT)]
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", **security})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < COUNT and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value() or b"")
    finally:
        consumer.close()
    assert sorted(got) == sorted(values)
    return got


def _java_roundtrip(jar: Path, bootstrap: str, properties: Path, topic: str) -> None:
    import json

    classpath = f"{jar}{os.pathsep}{jvm.set_dir('kafka')}{os.sep}*"
    command = ["java", "-Xmx256m", "-cp", classpath, "loglake.interop.SecureClients",
               "roundtrip", "--bootstrap", bootstrap, f"config={properties}", f"topic={topic}",
               f"count={COUNT}", f"group=g-{uuid.uuid4().hex[:8]}", "timeout_s=60"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, f"exit {done.returncode}: {done.stderr[-3000:]}"
    result = json.loads(lines[-1])
    assert result["ok"] is True and result["produced"] == COUNT, result
    assert len(result["values"]) == COUNT, result


def _create_topic(bootstrap: str, topic: str, replicas: int, min_isr: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=replicas,
                                  config={"min.insync.replicas": str(min_isr)})],
                        operation_timeout=30)[topic].result(timeout=60)
    deadline = time.monotonic() + 90
    while True:
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        if len(partitions) == 2 and all(len(p.isrs) == replicas for p in partitions.values()):
            return
        assert time.monotonic() < deadline, f"ISR of {topic} did not fill: {partitions}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def jks_cluster(stores: Stores, zookeeper_hosts: str, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[DevCluster]:
    """Two brokers with ONLY .jks stores, client auth required, replicating over SSL."""
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{port:1}",
        "inter.broker.listener.name": "SSL",
        **_jks_broker_settings(stores),
    }
    with DevCluster(tmp_path_factory.mktemp("jks") / "dev", brokers=2,
                    zookeeper=zookeeper_hosts, broker_overrides=overrides) as dev:
        yield dev


def _ssl_bootstrap(dev: DevCluster, offset: int = SSL_OFFSET) -> str:
    return f"127.0.0.1:{dev.broker_port(1) + offset}"


@pytest.mark.parametrize("kind", ["jks", "p12"])
def test_jks_cluster_replicates_over_ssl_and_serves_confluent(
        jks_cluster: DevCluster, stores: Stores, tmp_path: Path, kind: str) -> None:
    """acks=all with min.insync.replicas=2 succeeds only when the follower fetched over the
    SSL inter-broker listener (the brokers' JKS keystores are their client certificates)."""
    topic = f"jks-{kind}-{uuid.uuid4().hex[:8]}"
    _create_topic(jks_cluster.bootstrap_servers, topic, replicas=2, min_isr=2)
    properties = _client_properties(stores, kind, tmp_path / f"{kind}.properties")
    _confluent_roundtrip(_ssl_bootstrap(jks_cluster), properties, topic)


@pytest.mark.parametrize("kind", ["jks", "p12"])
def test_jks_cluster_serves_the_java_client(jks_cluster: DevCluster, stores: Stores,
                                            interop_jar: Path, tmp_path: Path,
                                            kind: str) -> None:
    topic = f"jks-java-{kind}-{uuid.uuid4().hex[:8]}"
    _create_topic(jks_cluster.bootstrap_servers, topic, replicas=2)
    properties = _client_properties(stores, kind, tmp_path / f"java-{kind}.properties")
    _java_roundtrip(interop_jar, _ssl_bootstrap(jks_cluster), properties, topic)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loglake", *args], capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, "LOGLAKE_COMMAND_CONFIG": ""})


def test_cli_with_jks_command_config(jks_cluster: DevCluster, stores: Stores,
                                     tmp_path: Path) -> None:
    topic = f"jks-cli-{uuid.uuid4().hex[:8]}"
    _create_topic(jks_cluster.bootstrap_servers, topic, replicas=2)
    good = _client_properties(stores, "jks", tmp_path / "good.properties")
    done = _cli("topics", "list", "--bootstrap-server", _ssl_bootstrap(jks_cluster),
                "--command-config", str(good))
    assert done.returncode == 0 and topic in done.stdout, done.stderr
    bad = _client_properties(stores, "jks", tmp_path / "bad.properties",
                             **{"ssl.truststore.password": "wrong-secret-9"})
    done = _cli("topics", "list", "--bootstrap-server", _ssl_bootstrap(jks_cluster),
                "--command-config", str(bad))
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "wrong ssl.truststore.password" in lines[0], done.stderr
    assert "ssl.truststore.location" in lines[0] and "wrong-secret-9" not in done.stderr


def _pem_one_line_value(pem: bytes) -> str:
    """A PEM value as an operator writes it in server.properties: continuation lines."""
    return " \\\n    ".join(pem.decode().split())


def test_pkcs12_broker_and_inline_pem_listener(stores: Stores, tls: TlsFiles,
                                               zookeeper_hosts: str, tmp_path: Path) -> None:
    """PKCS12 stores WITHOUT their types (sniffed) on listener SSL; an INLINE listener with
    KIP-651 settings (encrypted key + ssl.key.password, inline truststore). Both require client
    certificates; clients use PEM there and their PKCS12 stores here."""
    encrypted_key = tls.broker.private_key.private_bytes(
        Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(b"inline-pw"))
    overrides = {
        "listeners": ("PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{port:1},"
                      "INLINE://127.0.0.1:{port:2}"),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,INLINE:SSL",
        "listener.name.ssl.ssl.keystore.location": str(stores.path("broker.p12")),
        "listener.name.ssl.ssl.keystore.password": STORE_PW,
        "listener.name.ssl.ssl.truststore.location": str(stores.path("trust.p12")),
        "listener.name.ssl.ssl.truststore.password": TRUST_PW,
        "ssl.client.auth": "required",
        "listener.name.inline.ssl.keystore.key": _pem_one_line_value(encrypted_key),
        "listener.name.inline.ssl.keystore.certificate.chain": _pem_one_line_value(
            tls.broker.cert.read_bytes()),
        "listener.name.inline.ssl.key.password": "inline-pw",
        "listener.name.inline.ssl.truststore.certificates": _pem_one_line_value(
            tls.ca.cert.read_bytes()),
    }
    with DevCluster(tmp_path / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as dev:
        topic = f"p12-{uuid.uuid4().hex[:8]}"
        _create_topic(dev.bootstrap_servers, topic, replicas=1)
        p12 = _client_properties(stores, "p12", tmp_path / "p12.properties")
        _confluent_roundtrip(_ssl_bootstrap(dev), p12, topic)
        pem = tmp_path / "pem.properties"
        pem.write_text(f"security.protocol=SSL\nssl.truststore.location={tls.ca.cert}\n"
                       f"ssl.keystore.location={tls.client.keystore}\n")
        inline_topic = f"inline-{uuid.uuid4().hex[:8]}"
        _create_topic(dev.bootstrap_servers, inline_topic, replicas=1)
        _confluent_roundtrip(_ssl_bootstrap(dev, INLINE_OFFSET), pem, inline_topic)
        no_cert = tmp_path / "nocert.properties"
        no_cert.write_text(f"security.protocol=SSL\nssl.truststore.location={tls.ca.cert}\n")
        producer = Producer({"bootstrap.servers": _ssl_bootstrap(dev, INLINE_OFFSET),
                             "message.timeout.ms": "5000",
                             **SecurityConfig.load(no_cert).librdkafka()})
        outcomes: list[Any] = []
        producer.produce(topic, b"refused", on_delivery=lambda err, _msg: outcomes.append(err))
        producer.flush(30)
        assert len(outcomes) == 1 and outcomes[0] is not None, (
            f"client auth required: a client without a certificate was served: {outcomes}")


def _broker_start_error(zookeeper_hosts: str, tmp_path: Path, settings: dict[str, str]
                        ) -> subprocess.CompletedProcess[str]:
    overrides = {
        "broker.id": "7", "zookeeper.connect": f"{zookeeper_hosts}/ks-bad-{uuid.uuid4().hex[:8]}",
        "log.dirs": str(tmp_path / "data"), "remote.log.storage.url": str(tmp_path / "tier"),
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", **settings}
    command = [sys.executable, "-m", "loglake", "broker", "start"]
    for key, value in overrides.items():
        command += ["--override", f"{key}={value}"]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_bad_stores_stop_the_broker_with_one_line(stores: Stores, tls: TlsFiles,
                                                  zookeeper_hosts: str, tmp_path: Path) -> None:
    good = _jks_broker_settings(stores)
    empty = _write(tmp_path / "empty.jks", jks.KeyStore.new("jks", []).saves(TRUST_PW))
    cases = [
        ({"ssl.keystore.password": "wrong-secret-9"}, "wrong ssl.keystore.password"),
        ({"ssl.key.password": "wrong-secret-9"}, "wrong ssl.key.password"),
        ({"ssl.keystore.location": str(stores.path("trust.jks")),
          "ssl.keystore.password": TRUST_PW}, "no private key entry"),
        ({"ssl.truststore.location": empty}, "holds no certificates"),
        ({"ssl.truststore.password": "wrong-secret-9"}, "wrong ssl.truststore.password"),
        ({"ssl.keystore.type": "BKS"}, "ssl.keystore.type"),
        ({"ssl.keystore.location": str(tmp_path / "missing.jks")}, "does not exist"),
        ({"ssl.keystore.type": "PKCS12", "ssl.keystore.password": "wrong-secret-9",
          "ssl.keystore.location": str(stores.path("broker.p12"))},
         "wrong ssl.keystore.password"),
    ]
    for number, (changes, words) in enumerate(cases):
        done = _broker_start_error(zookeeper_hosts, tmp_path / f"case-{number}",
                                   {**good, **changes})
        assert done.returncode == 1, (changes, done.stderr[-2000:])
        assert "Traceback" not in done.stderr, (changes, done.stderr[-3000:])
        errors = [line for line in done.stderr.splitlines() if line.startswith("loglake: error")]
        assert len(errors) == 1 and words in errors[0], (changes, done.stderr[-2000:])
        assert "listener SSL" in errors[0] or "ssl.keystore.type" in errors[0], errors
        assert not any(secret in done.stderr for secret in SECRETS), errors
