"""Listener, TLS and principal-mapping logic in process: config parsing and cross-checks,
``ssl.principal.mapping.rules``, Kafka's ``/brokers/ids`` JSON, per-listener advertising, the
inter-broker client security, dev-cluster port placeholders, and a real TLS handshake against
the broker's server context."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.security import tls
from loglake.broker.security.client_security import client_security_from_config, jaas_options
from loglake.broker.security.listeners import advertised_endpoints, listener_specs, tls_principal
from loglake.broker.security.principal import ANONYMOUS, KafkaPrincipal
from loglake.broker.security.principal_mapping import NoMatchingRuleError, PrincipalMapper
from loglake.catalog.zookeeper import BrokerEndpoint, BrokerInfo
from loglake.config import BrokerConfig, ListenerAddress
from loglake.dev.cluster import broker_properties, listener_port_offsets
from loglake.errors import InvalidConfigError
from tests.tls_util import TlsFiles, broker_ssl_settings, make_tls_files

REQUIRED = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def _config(**props: str) -> BrokerConfig:
    return BrokerConfig.from_properties({**REQUIRED, **props})


# ---- config ----------------------------------------------------------------------------------

def test_default_is_one_plaintext_listener() -> None:
    config = _config()
    assert config.effective_listeners == (ListenerAddress("PLAINTEXT", "127.0.0.1", 9092),)
    assert config.inter_broker_listener == "PLAINTEXT"
    assert config.security_protocol("PLAINTEXT") == "PLAINTEXT"


def test_named_listeners_and_per_listener_settings() -> None:
    config = _config(**{
        "listeners": "CLIENT://127.0.0.1:9093,internal://:9094",
        "advertised.listeners": "CLIENT://example.test:19093",
        "listener.security.protocol.map": "CLIENT:SSL,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.client.auth": "requested",
        "listener.name.client.ssl.client.auth": "required",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": "x required;"})
    assert [a.name for a in config.effective_listeners] == ["CLIENT", "INTERNAL"]
    assert (config.host, config.port) == ("127.0.0.1", 9093)
    assert [str(a) for a in config.effective_advertised_listeners] == [
        "CLIENT://example.test:19093", "INTERNAL://127.0.0.1:9094"]
    assert config.for_listener("CLIENT").ssl_client_auth == "required"
    assert config.for_listener("INTERNAL").ssl_client_auth == "requested"
    assert config.listener_setting("INTERNAL", "scram-sha-512.sasl.jaas.config") == "x required;"
    assert config.security_protocol("internal") == "SASL_SSL"


@pytest.mark.parametrize(("props", "message"), [
    ({"listeners": "A://h:1,A://h:2"}, "each listener name must appear once"),
    ({"listeners": "PLAINTEXT://h:1,SSL://h:1"}, "its own port"),
    ({"listeners": "FOO://h:1"}, "No security protocol defined for listener FOO"),
    ({"advertised.listeners": "SSL://h:1"}, "not in listeners"),
    ({"listeners": "PLAINTEXT://0.0.0.0:1"}, "nonroutable"),
    ({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "SSL"},
     "Only one of"),
    ({"listeners": "SSL://h:1"}, "inter.broker.listener.name must be a listener"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "unknown security protocol"),
    ({"ssl.enabled.protocols": "TLSv1.1,TLSv1.2"}, "TLS 1.0 and 1.1 are refused"),
    ({"ssl.client.auth": "maybe"}, "not one of"),
    ({"ssl.keystore.type": "BKS"}, "not one of"),
    ({"listener.name.plaintext.ssl.client.auth": "maybe"}, "listener.name.plaintext"),
])
def test_listener_config_refusals(props: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        _config(**props)


def test_tls_listener_needs_a_keystore(files: TlsFiles) -> None:
    config = _config(listeners="PLAINTEXT://h:1,SSL://h:2")
    with pytest.raises(InvalidConfigError, match=r"ssl\.keystore\.location is not set"):
        listener_specs(config)
    bad = _config(listeners="PLAINTEXT://h:1,SSL://h:2",
                  **{"ssl.keystore.location": str(files.ca.cert)})
    with pytest.raises(InvalidConfigError, match="not a PEM file with a private key"):
        listener_specs(bad)


# ---- principal mapping -----------------------------------------------------------------------

def test_mapping_rules_as_kafka() -> None:
    mapper = PrincipalMapper.parse(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,DEFAULT")
    assert mapper.name("CN=kafka1,OU=ServiceUsers,O=Org,C=US") == "kafka1"
    assert mapper.name("CN=Duke,OU=JavaSoft,O=Sun,L=Cupertino,ST=CA,C=US") == "duke@javasoft"
    assert mapper.name("OU=x,CN=adam.smith,O=y") == "ADAM.SMITH"
    assert mapper.name("OU=nothing") == "OU=nothing"
    only = PrincipalMapper.parse("RULE:^CN=(.*)$/$1/")
    with pytest.raises(NoMatchingRuleError):
        only.name("OU=x")
    assert PrincipalMapper.parse("DEFAULT").name("CN=a,O=b") == "CN=a,O=b"
    escaped = PrincipalMapper.parse(r"RULE:^CN=(.*)\/(.*)$/$2\/$1/")
    assert escaped.name("CN=a/b") == "b/a"
    with pytest.raises(InvalidConfigError):
        PrincipalMapper.parse("RULE:^CN=(.*)$")


# ---- registration and advertising ------------------------------------------------------------

def test_broker_json_round_trip_and_old_form() -> None:
    config = _config(**{"listeners": "PLAINTEXT://127.0.0.1:1,SSL://127.0.0.1:2",
                        "advertised.listeners": "SSL://broker.test:20"})
    endpoints = advertised_endpoints(config)
    info = BrokerInfo(1, endpoints[0].host, endpoints[0].port, "r1", endpoints=endpoints)
    data = info.to_json()
    assert data["endpoints"] == ["PLAINTEXT://127.0.0.1:1", "SSL://broker.test:20"]
    assert data["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}
    assert (data["host"], data["port"]) == ("127.0.0.1", 1)
    again = BrokerInfo.from_json(1, data, 5)
    assert again.endpoints == endpoints and again.rack == "r1"
    tls_only = BrokerInfo(2, "h", 9, endpoints=(BrokerEndpoint("SSL", "h", 9, "SSL"),))
    assert (tls_only.to_json()["host"], tls_only.to_json()["port"]) == (None, -1)
    old = BrokerInfo.from_json(3, {"host": "o", "port": 7, "version": 4})
    assert old.endpoint("PLAINTEXT") == BrokerEndpoint("PLAINTEXT", "o", 7, "PLAINTEXT")
    assert old.endpoint("SSL") is None


def test_metadata_answers_the_listeners_endpoints_and_leaves_out_brokers_without_it() -> None:
    cache = MetadataCache()
    both = (BrokerEndpoint("PLAINTEXT", "a", 1, "PLAINTEXT"), BrokerEndpoint("SSL", "a", 2, "SSL"))
    cache.live_brokers = {1: BrokerInfo(1, "a", 1, endpoints=both),
                          2: BrokerInfo(2, "b", 3, endpoints=both[:1])}
    assert [(b.broker_id, e.port) for b, e in cache.listener_brokers("SSL")] == [(1, 2)]
    assert [(b.broker_id, e.port) for b, e in cache.listener_brokers("PLAINTEXT")] == [
        (1, 1), (2, 1)]
    assert cache.endpoint(2, "SSL") is None
    assert cache.endpoint(9, "PLAINTEXT") is None


# ---- inter-broker client security --------------------------------------------------------------

def test_inter_broker_security(files: TlsFiles) -> None:
    assert client_security_from_config(_config()).ssl_context is None
    config = _config(**{
        "listeners": "PLAINTEXT://127.0.0.1:1,INTERNAL://127.0.0.1:2",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config":
            'org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="broker" password="p\\"w";',
        **broker_ssl_settings(files)})
    security = client_security_from_config(config)
    assert (security.security_protocol, security.sasl_mechanism, security.sasl_username,
            security.sasl_password) == ("SASL_SSL", "SCRAM-SHA-512", "broker", 'p"w')
    assert security.ssl_context is not None and security.ssl_context.check_hostname
    missing = _config(**{**{k: v for k, v in config.listener_settings.items()
                            if "jaas" not in k},
                         "listeners": "PLAINTEXT://127.0.0.1:1,INTERNAL://127.0.0.1:2",
                         "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
                         "inter.broker.listener.name": "INTERNAL",
                         "sasl.mechanism.inter.broker.protocol": "PLAIN"})
    with pytest.raises(InvalidConfigError, match="no username/password"):
        client_security_from_config(missing)
    assert jaas_options('M required a=b c="d e";') == {"a": "b", "c": "d e"}


# ---- dev cluster placeholders ------------------------------------------------------------------

def test_dev_broker_override_placeholders() -> None:
    overrides = {"listeners": "PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{port:1}",
                 "x": "broker-{id}"}
    text = broker_properties(Path("/d"), 2, 9001, "zk", overrides)
    assert "listeners=PLAINTEXT://127.0.0.1:9001,SSL://127.0.0.1:9101" in text
    assert "x=broker-2" in text
    assert listener_port_offsets(overrides) == (100,)
    assert listener_port_offsets(None) == ()


# ---- a real handshake against the broker's TLS context ------------------------------------------

def _handshake_principal(server: ssl.SSLContext, client: ssl.SSLContext,
                         mapper: PrincipalMapper) -> KafkaPrincipal | Exception:
    async def run() -> KafkaPrincipal | Exception:
        result: asyncio.Future[KafkaPrincipal | Exception] = (
            asyncio.get_running_loop().create_future())

        async def on_connection(reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:
            try:
                result.set_result(tls_principal(writer.get_extra_info("ssl_object"), mapper))
            except Exception as exc:
                result.set_result(exc)
            writer.close()

        listening = await asyncio.start_server(on_connection, "127.0.0.1", 0, ssl=server)
        port = listening.sockets[0].getsockname()[1]
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client,
                                                      server_hostname="127.0.0.1")
            value = await asyncio.wait_for(result, 10)
            writer.close()
            return value
        finally:
            listening.close()
    return asyncio.run(run())


@pytest.mark.parametrize(("client_auth", "identity", "expected"), [
    ("required", "client", KafkaPrincipal.user("alice")),
    ("requested", "client", KafkaPrincipal.user("alice")),
    ("requested", None, ANONYMOUS),
    ("none", "client", ANONYMOUS),
])
def test_tls_principal_from_the_client_certificate(files: TlsFiles, client_auth: str,
                                                   identity: str | None,
                                                   expected: KafkaPrincipal) -> None:
    config = _config(**{"listeners": "SSL://127.0.0.1:1", "inter.broker.listener.name": "SSL",
                        **broker_ssl_settings(files, client_auth=client_auth)})
    client = ssl.create_default_context(cafile=str(files.ca.cert))
    if identity:
        client.load_cert_chain(files.directory / f"{identity}.keystore.pem")
    mapper = PrincipalMapper.parse("RULE:^CN=([^,]+),.*$/$1/L")
    assert _handshake_principal(tls.server_context(config, "SSL"), client, mapper) == expected


def test_unmapped_certificate_is_an_authentication_failure(files: TlsFiles) -> None:
    config = _config(**{"listeners": "SSL://127.0.0.1:1", "inter.broker.listener.name": "SSL",
                        **broker_ssl_settings(files, client_auth="required")})
    client = ssl.create_default_context(cafile=str(files.ca.cert))
    client.load_cert_chain(files.client.keystore)
    result = _handshake_principal(tls.server_context(config, "SSL"), client,
                                  PrincipalMapper.parse("RULE:^CN=bob,.*$/bob/"))
    assert isinstance(result, NoMatchingRuleError)


def test_subject_in_javas_rfc2253_form() -> None:
    """Kafka maps ``X500Principal.getName()``: keywords CN, C, L, ST, O, OU, STREET, DC, UID;
    any other attribute as its OID with the DER value in hex (checked against Java's output
    for the same subject)."""
    from cryptography import x509 as x509_
    from cryptography.x509.oid import NameOID

    from loglake.broker.security.listeners import java_rfc2253

    subject = x509_.Name([
        x509_.NameAttribute(NameOID.COUNTRY_NAME, "US"),
        x509_.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme, Inc"),
        x509_.NameAttribute(NameOID.COMMON_NAME, "alice"),
        x509_.NameAttribute(NameOID.EMAIL_ADDRESS, "alice@acme.io"),
        x509_.NameAttribute(NameOID.SERIAL_NUMBER, "42"),
    ])
    parsed = x509_.Name.from_rfc4514_string(subject.rfc4514_string())  # round trip
    for name in (subject, parsed):
        assert java_rfc2253(name) == (
            "2.5.4.5=#13023432,1.2.840.113549.1.9.1=#160d616c6963654061636d652e696f,"
            "CN=alice,O=Acme\\, Inc,C=US")
    long_ou = x509_.Name([x509_.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "u" * 300),
                          x509_.NameAttribute(NameOID.EMAIL_ADDRESS, "e" * 200)])
    assert java_rfc2253(long_ou) == ("1.2.840.113549.1.9.1=#1681c8" + "65" * 200
                                     + ",OU=" + "u" * 300)
    assert PrincipalMapper.parse(
        r"RULE:^1\.2\.840\.113549\.1\.9\.1=#16[0-9a-f]+,CN=([^,]+),.*$/$1/").name(
            java_rfc2253(subject).split(",", 1)[1]) == "alice"
