"""Client security settings (loglake/client/security.py): Kafka client properties (Java and
librdkafka names) -> librdkafka settings and Python TLS contexts; the properties file reader;
JAAS values; --command-config resolution. In-process: no broker (the end-to-end tests over
SASL_SSL are in test_client_security_e2e.py)."""

from __future__ import annotations

import argparse
import pickle
import ssl
from pathlib import Path

import pytest
from confluent_kafka import Producer as KafkaProducer

from loglake import addresses
from loglake.client import security
from loglake.client.security import (
    SecurityConfig,
    SecurityConfigError,
    parse_jaas_config,
    parse_properties,
)
from loglake.dev.certs import ensure_dev_certificates

SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              'username="alice" password="al\\"ice-secret";')


def test_properties_file_syntax() -> None:
    text = "\n".join([
        "# comment", "! also a comment", "",
        "security.protocol=SASL_SSL",
        "sasl.mechanism : SCRAM-SHA-512",
        "ssl.ca.location   /tmp/ca.pem",
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\",
        '    username="bob" \\',
        '    password="pw";',
        "key\\=with\\:escapes=tab\\there \\u0041",
        "empty=",
    ])
    props = parse_properties(text)
    assert props["security.protocol"] == "SASL_SSL"
    assert props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert props["ssl.ca.location"] == "/tmp/ca.pem"
    assert props["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" '
        'password="pw";')
    assert props["key=with:escapes"] == "tab\there A"
    assert props["empty"] == ""


def test_jaas_values() -> None:
    jaas = parse_jaas_config(SCRAM_JAAS)
    assert jaas.login_module == "org.apache.kafka.common.security.scram.ScramLoginModule"
    assert jaas.flag == "required"
    assert dict(jaas.options) == {"username": "alice", "password": 'al"ice-secret'}
    unquoted = parse_jaas_config("a.B required user=x;")
    assert dict(unquoted.options) == {"user": "x"}
    for bad in ("username=x;", "a.B required username=\"x\"", "a.B required username=\"x\"; x"):
        with pytest.raises(SecurityConfigError):
            parse_jaas_config(bad)


def test_java_sasl_ssl_properties_translate_to_librdkafka() -> None:
    config = SecurityConfig.from_properties({
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": SCRAM_JAAS,
        "ssl.truststore.location": "/certs/ca.pem",
        "ssl.truststore.type": "PEM",
        "ssl.endpoint.identification.algorithm": "",
        "request.timeout.ms": "5000",
        "key.serializer": "org.apache.kafka.common.serialization.StringSerializer",
    })
    assert config.librdkafka() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": 'al"ice-secret',
        "ssl.ca.location": "/certs/ca.pem",
        "ssl.endpoint.identification.algorithm": "none",
        "request.timeout.ms": "5000",
    }
    assert "ice-secret" not in repr(config)
    assert pickle.loads(pickle.dumps(config)) == config


def test_librdkafka_names_and_plain_login_module() -> None:
    simple = SecurityConfig.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
        "sasl.username": "u", "sasl.password": "p"})
    assert simple.librdkafka() == {"security.protocol": "SASL_PLAINTEXT",
                                   "sasl.mechanism": "PLAIN", "sasl.username": "u",
                                   "sasl.password": "p"}
    inferred = SecurityConfig.from_properties({
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                            'required username="u" password="p";'})
    assert inferred.sasl_mechanism == "PLAIN"
    assert SecurityConfig.from_properties({}).librdkafka() == {}


@pytest.mark.parametrize("props, words", [
    ({"security.protocol": "TLS"}, "security.protocol"),
    ({"security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": "p"},
     "needs sasl.mechanism"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI",
      "sasl.username": "u", "sasl.password": "p"}, "not supported"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}, "user name"),
    ({"security.protocol": "SASL_SSL", "sasl.jaas.config": SCRAM_JAAS}, "SCRAM-SHA-256"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
      "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"},
     "not supported"),
    ({"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"},
     "security.protocol is PLAINTEXT"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u",
      "sasl.password": "p", "ssl.ca.location": "ca.pem"}, "TLS settings"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "t.bks",
      "ssl.truststore.type": "BKS"}, "ssl.truststore.type: unknown store type 'BKS'"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "k.bks",
      "ssl.keystore.type": "BKS"}, "ssl.keystore.type: unknown store type 'BKS'"),
    ({"security.protocol": "SSL", "ssl.certificate.location": "c.pem"}, "ssl.key.location"),
])
def test_unusable_settings_are_refused_with_the_reason(props: dict[str, str], words: str
                                                       ) -> None:
    with pytest.raises(SecurityConfigError, match=words):
        SecurityConfig.from_properties(props)


def test_keystores(tmp_path: Path) -> None:
    pem = SecurityConfig.from_properties({
        "security.protocol": "SSL", "ssl.keystore.type": "PEM",
        "ssl.keystore.location": "/c/client.pem", "ssl.key.password": "kp"})
    assert pem.librdkafka()["ssl.certificate.location"] == "/c/client.pem"
    assert pem.librdkafka()["ssl.key.location"] == "/c/client.pem"
    assert pem.librdkafka()["ssl.key.password"] == "kp"
    pkcs12 = SecurityConfig.from_properties({
        "security.protocol": "SSL", "ssl.keystore.location": "/c/client.p12",
        "ssl.keystore.password": "sp"})
    assert pkcs12.librdkafka()["ssl.keystore.location"] == "/c/client.p12"
    assert pkcs12.librdkafka()["ssl.keystore.password"] == "sp"
    inline = SecurityConfig.from_properties({
        "security.protocol": "SSL", "ssl.truststore.certificates": "CA PEM",
        "ssl.keystore.certificate.chain": "CHAIN", "ssl.keystore.key": "KEY"})
    assert {k: v for k, v in inline.librdkafka().items() if k.endswith(".pem")} == {
        "ssl.ca.pem": "CA PEM", "ssl.certificate.pem": "CHAIN", "ssl.key.pem": "KEY"}


def test_librdkafka_accepts_the_translation_and_python_tls_loads_it(tmp_path: Path) -> None:
    """The translated settings of real files make a librdkafka client (it loads the CA and the
    client key at construction and refuses bad files), and a Python TLS context."""
    certs = ensure_dev_certificates(tmp_path / "certs")
    config = SecurityConfig.from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": SCRAM_JAAS, "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca), "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.client)})
    KafkaProducer({"bootstrap.servers": "127.0.0.1:9", **config.librdkafka()})
    context = config.ssl_context()
    assert context is not None and context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    missing = SecurityConfig.from_properties({"security.protocol": "SSL",
                                              "ssl.ca.location": str(tmp_path / "nope.pem")})
    with pytest.raises(SecurityConfigError, match="cannot set up TLS"):
        missing.ssl_context()
    assert SecurityConfig().ssl_context() is None


def test_pkcs12_keystore_loads_into_python_tls(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

    from loglake.dev.certs import issue, make_ca

    ca = make_ca()
    client = issue(ca, "client", server=False)
    path = tmp_path / "client.p12"
    path.write_bytes(pkcs12.serialize_key_and_certificates(
        b"client", client.key, client.certificate, [ca.certificate],
        BestAvailableEncryption(b"store-pw")))
    (tmp_path / "ca.pem").write_bytes(ca.chain_pem())
    config = SecurityConfig.from_properties({
        "security.protocol": "SSL", "ssl.truststore.location": str(tmp_path / "ca.pem"),
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(path),
        "ssl.keystore.password": "store-pw"})
    assert config.ssl_context() is not None
    wrong = SecurityConfig.from_properties({**{
        "security.protocol": "SSL", "ssl.keystore.location": str(path),
        "ssl.keystore.password": "wrong"}})
    with pytest.raises(SecurityConfigError):
        wrong.ssl_context()


def test_command_config_resolution(tmp_path: Path) -> None:
    """Flag, then $LOGLAKE_COMMAND_CONFIG, then the dev profile's file, the latter only when
    the brokers come from the profile too."""
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                     "sasl.username=admin\nsasl.password=pw\n")
    env = {addresses.CONFIG_DIR_ENV: str(tmp_path / "config")}
    addresses.write_profile(addresses.Profile("127.0.0.1:1/loglake", "127.0.0.1:2",
                                              str(tmp_path), str(props)), env)
    assert addresses.read_profile(env) is not None
    assert addresses.read_profile(env).command_config == str(props)  # type: ignore[union-attr]

    def args(**values: str | None) -> argparse.Namespace:
        return argparse.Namespace(**{"bootstrap_server": None, "command_config": None,
                                     **values})

    assert security.from_args(args(), env).sasl_username == "admin"
    assert security.from_args(args(bootstrap_server="10.0.0.1:9092"), env) == SecurityConfig()
    other = tmp_path / "other.properties"
    other.write_text("security.protocol=SSL\n")
    assert security.from_args(args(command_config=str(other)), env).protocol == "SSL"
    assert security.from_args(args(bootstrap_server="h:1"),
                              {**env, security.COMMAND_CONFIG_ENV: str(other)}).protocol == "SSL"
    with pytest.raises(SecurityConfigError, match="cannot read the client properties"):
        security.from_args(args(command_config=str(tmp_path / "missing")), env)


def test_profile_without_command_config_reads_as_before(tmp_path: Path) -> None:
    env = {addresses.CONFIG_DIR_ENV: str(tmp_path)}
    addresses.write_profile(addresses.Profile("z:1/loglake", "b:2", str(tmp_path)), env)
    assert "command_config" not in addresses.profile_path(env).read_text()
    profile = addresses.read_profile(env)
    assert profile is not None and profile.command_config is None


def test_spark_kafka_options_carry_the_security_settings(tmp_path: Path) -> None:
    """format("loglake") takes Spark's Kafka option names; the security ones become
    ``options.security`` (what every Kafka client of the query is built with), the rest stay
    librdkafka pass-through."""
    from loglake.streaming.errors import SourceOptionError
    from loglake.streaming.options import parse_options

    options = parse_options({
        "kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": SCRAM_JAAS, "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/c/ca.pem", "kafka.fetch.min.bytes": "1",
    }, "batch")
    assert options.security.sasl_username == "alice"
    assert options.security.librdkafka()["ssl.ca.location"] == "/c/ca.pem"
    assert dict(options.kafka) == {"fetch.min.bytes": "1"}
    assert pickle.loads(pickle.dumps(options)) == options
    assert "ice-secret" not in repr(options)
    assert parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"},
                         "batch").security == SecurityConfig()
    with pytest.raises(SourceOptionError, match=r"kafka.\* security options: .*mechanism"):
        parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                       "kafka.security.protocol": "SASL_SSL", "kafka.sasl.username": "u",
                       "kafka.sasl.password": "p"}, "write")
