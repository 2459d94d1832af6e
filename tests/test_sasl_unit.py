"""SASL server mechanisms, listener settings and the pre-authentication gate, in process (no
broker): PLAIN and SCRAM exchanges against scramp's client, JAAS parsing, the gate's rules."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import scramp

from loglake.broker.security import sasl_gate
from loglake.broker.security.sasl_mechanisms import (
    IllegalSaslState,
    PlainExchange,
    SaslFailure,
    ScramExchange,
)
from loglake.broker.security.sasl_settings import listener_settings, parse_jaas_sections
from loglake.broker.security.scram_credentials import (
    SCRAM_MECHANISMS,
    make_credential,
    parse_credential,
)
from loglake.broker.security.session import SASL_PLAINTEXT, Session
from loglake.config import BrokerConfig
from loglake.errors import InvalidConfigError

USERS = {"alice": "alice-secret", "admin": "admin-secret"}


# ------------------------------------------------------------------------------------ PLAIN

def test_plain_accepts_a_configured_user() -> None:
    exchange = PlainExchange(USERS)
    assert exchange.evaluate(b"\x00alice\x00alice-secret") == b""
    assert exchange.complete and exchange.username == "alice"
    with pytest.raises(IllegalSaslState):
        exchange.evaluate(b"\x00alice\x00alice-secret")


def test_plain_authzid_equal_to_the_user_is_fine() -> None:
    exchange = PlainExchange(USERS)
    exchange.evaluate(b"alice\x00alice\x00alice-secret")
    assert exchange.username == "alice"


@pytest.mark.parametrize("token", [
    b"\x00alice\x00wrong",         # wrong password
    b"\x00mallory\x00alice-secret",  # unknown user
    b"\x00\x00alice-secret",       # no user
    b"\x00alice\x00",              # no password
    b"admin\x00alice\x00alice-secret",  # another authorization id
    b"alice-secret",               # not PLAIN's form
    b"\x00alice\x00\xff\xfe",      # not UTF-8
])
def test_plain_refusals(token: bytes) -> None:
    exchange = PlainExchange(USERS)
    with pytest.raises(SaslFailure):
        exchange.evaluate(token)
    assert not exchange.complete


def test_plain_failures_do_not_say_whether_the_user_exists() -> None:
    messages = []
    for token in (b"\x00alice\x00wrong", b"\x00mallory\x00wrong"):
        with pytest.raises(SaslFailure) as info:
            PlainExchange(USERS).evaluate(token)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


# ------------------------------------------------------------------------------------ SCRAM

def _scram_login(mechanism: str, user: str, password: str, stored_password: str | None
                 ) -> ScramExchange:
    credential = (parse_credential(make_credential(mechanism, stored_password))
                  if stored_password is not None else None)
    client = scramp.ScramClient([mechanism], user, password)
    exchange = ScramExchange(mechanism)
    assert exchange.client_first(client.get_client_first().encode()) == user
    client.set_server_first(exchange.server_first(credential).decode())
    server_final = exchange.client_final(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # the client checks the server's proof
    return exchange


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_scram_login(mechanism: str) -> None:
    exchange = _scram_login(mechanism, "alice", "pw", "pw")
    assert exchange.complete and exchange.username == "alice"


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_scram_wrong_password(mechanism: str) -> None:
    with pytest.raises(SaslFailure):
        _scram_login(mechanism, "alice", "wrong", "pw")


def test_scram_unknown_user() -> None:
    with pytest.raises(SaslFailure):
        _scram_login("SCRAM-SHA-256", "nobody", "pw", None)


def test_scram_user_name_escapes_and_authzid() -> None:
    exchange = ScramExchange("SCRAM-SHA-256")
    assert exchange.client_first(b"n,,n=a=2Cb=3Dc,r=abcdef") == "a,b=c"
    other = ScramExchange("SCRAM-SHA-256")
    other.client_first(b"n,a=admin,n=alice,r=abcdef")
    with pytest.raises(SaslFailure):  # refused once alice's credential is known (as Kafka)
        other.server_first(parse_credential(make_credential("SCRAM-SHA-256", "pw")))
    with pytest.raises(SaslFailure):
        ScramExchange("SCRAM-SHA-256").client_first(b"p=tls-unique,,n=alice,r=abc")
    with pytest.raises(SaslFailure):
        ScramExchange("SCRAM-SHA-256").client_first(b"garbage")


def test_scram_out_of_order() -> None:
    exchange = ScramExchange("SCRAM-SHA-512")
    with pytest.raises(IllegalSaslState):
        exchange.client_final(b"c=biws,r=x,p=AA==")


def test_scram_tampered_nonce_fails() -> None:
    credential = parse_credential(make_credential("SCRAM-SHA-256", "pw"))
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "pw")
    exchange = ScramExchange("SCRAM-SHA-256")
    exchange.client_first(client.get_client_first().encode())
    client.set_server_first(exchange.server_first(credential).decode())
    final = client.get_client_final()
    tampered = final.replace(",r=", ",r=X", 1)
    with pytest.raises(SaslFailure):
        exchange.client_final(tampered.encode())


# ---------------------------------------------------------------------------- settings

JAAS_FILE = """
// the broker's JAAS file
KafkaServer {
    org.apache.kafka.common.security.plain.PlainLoginModule required
    username="admin" password="admin-secret"
    user_admin="admin-secret"
    user_alice="alice-secret";
};
sasl_internal.KafkaServer {
    org.apache.kafka.common.security.plain.PlainLoginModule required
    user_broker="b-secret";
};
Client { org.apache.zookeeper.server.auth.DigestLoginModule required username="zk"; };
"""


def _config(**extra: str) -> BrokerConfig:
    props = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:1",
             "listeners": "SASL_PLAINTEXT://127.0.0.1:9092,SASL_INTERNAL://127.0.0.1:9093",
             "listener.security.protocol.map":
                 "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_INTERNAL:SASL_PLAINTEXT",
             "inter.broker.listener.name": "SASL_INTERNAL",
             "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"}
    props.update(extra)
    return BrokerConfig.from_properties(props)


def test_jaas_sections() -> None:
    sections = parse_jaas_sections(JAAS_FILE)
    assert set(sections) == {"KafkaServer", "sasl_internal.KafkaServer", "Client"}


def test_plain_users_from_a_jaas_file_per_listener(tmp_path: Path) -> None:
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(JAAS_FILE)
    config = _config(**{"sasl.jaas.file": str(jaas)})
    assert listener_settings(config, "SASL_PLAINTEXT").plain_users == USERS
    assert listener_settings(config, "SASL_INTERNAL").plain_users == {"broker": "b-secret"}


def test_inline_listener_jaas_wins() -> None:
    entry = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
             'username="admin" password="x" user_bob="bob \\"quoted\\"";')
    config = _config(**{"listener.name.sasl_plaintext.plain.sasl.jaas.config": entry,
                        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
                        "listener.name.sasl_plaintext.connections.max.reauth.ms": "5000"})
    settings = listener_settings(config, "SASL_PLAINTEXT")
    assert settings.plain_users == {"bob": 'bob "quoted"'}
    assert settings.mechanisms == ("PLAIN",)
    assert settings.max_reauth_ms == 5000
    other = listener_settings(config, "SASL_INTERNAL")
    assert other.mechanisms == ("PLAIN", "SCRAM-SHA-256") and other.max_reauth_ms == 0


def test_unknown_mechanism_is_refused_at_load() -> None:
    with pytest.raises(InvalidConfigError, match="GSSAPI"):
        _config(**{"sasl.enabled.mechanisms": "GSSAPI"})


# -------------------------------------------------------------------------------- the gate

def _sasl_session(config: BrokerConfig) -> Session:
    session = Session.for_listener("SASL_PLAINTEXT", SASL_PLAINTEXT, "127.0.0.1")
    sasl_gate.connection_state(session, config)
    return session


def test_gate_before_authentication() -> None:
    session = _sasl_session(_config())
    assert not session.authenticated
    assert sasl_gate.admit(session, 18, 0.0, 50) is None   # ApiVersions
    assert sasl_gate.admit(session, 17, 0.0, 50) is None   # SaslHandshake
    # SaslAuthenticate before the handshake closes the connection, as Kafka's authenticator
    assert sasl_gate.admit(session, 36, 0.0, 50) == "SaslAuthenticate before SaslHandshake"
    for api_key in (0, 1, 3, 19):                           # Produce, Fetch, Metadata, ...
        assert sasl_gate.admit(session, api_key, 0.0, 50) is not None
    sasl_gate.connection_state(session).stage = sasl_gate.AUTHENTICATE
    assert sasl_gate.admit(session, 36, 0.0, 50) is None   # SaslAuthenticate after it
    assert "sasl.server.max.receive.size" in (sasl_gate.admit(session, 36, 0.0, 524289) or "")
    assert sasl_gate.admit(session, 18, 0.0, 50) is not None  # no ApiVersions mid-exchange


def test_gate_plaintext_is_untouched() -> None:
    session = Session()
    assert sasl_gate.admit(session, 0, 0.0, 10**8) is None


def test_gate_after_authentication_and_expiry() -> None:
    session = _sasl_session(_config())
    session.authenticated = True
    sasl_gate.connection_state(session).stage = sasl_gate.COMPLETE
    assert sasl_gate.admit(session, 0, 10.0, 10**6) is None
    session.expires_at = 20.0
    assert sasl_gate.admit(session, 0, 19.9) is None
    assert sasl_gate.admit(session, 0, 20.0) is not None    # expired: closed
    assert sasl_gate.admit(session, 17, 20.0) is None       # re-authentication may begin


def test_gate_failed_connection_serves_nothing_and_is_closed() -> None:
    async def scenario() -> int:
        session = _sasl_session(_config())
        closed = []
        session.close_connection = lambda: closed.append(1)
        sasl_gate.fail(session, "bad password")
        assert sasl_gate.admit(session, 18, 0.0) is not None
        assert sasl_gate.admit(session, 36, 0.0) is not None
        await asyncio.sleep(sasl_gate.FAILED_CLOSE_DELAY_S + 0.3)
        return len(closed)

    assert asyncio.run(scenario()) == 1


def test_authentication_time_limit() -> None:
    async def scenario() -> tuple[int, int]:
        config = _config(**{"sasl.server.authentication.timeout.ms": "200"})
        slow = Session.for_listener("SASL_PLAINTEXT", SASL_PLAINTEXT, "127.0.0.1")
        quick = Session.for_listener("SASL_PLAINTEXT", SASL_PLAINTEXT, "127.0.0.1")
        closed: dict[str, int] = {"slow": 0, "quick": 0}
        slow.close_connection = lambda: closed.__setitem__("slow", 1)
        quick.close_connection = lambda: closed.__setitem__("quick", 1)
        sasl_gate.on_connect(slow, config)
        sasl_gate.on_connect(quick, config)
        quick.authenticated = True
        sasl_gate.authenticated(quick)
        await asyncio.sleep(0.5)
        return closed["slow"], closed["quick"]

    assert asyncio.run(scenario()) == (1, 0)


def _manual_client_final(mechanism: str, password: str, client_first_bare: str,
                         server_first: str, nonce: str) -> str:
    """A client-final message computed by hand (RFC 5802) for an arbitrary nonce."""
    import base64
    import hashlib
    import hmac as hmac_

    from loglake.broker.security.scram_credentials import hash_name, salted_password

    fields = dict(part.split("=", 1) for part in server_first.split(","))
    salted = salted_password(mechanism, password, base64.b64decode(fields["s"]),
                             int(fields["i"]))
    name = hash_name(mechanism)
    client_key = hmac_.new(salted, b"Client Key", name).digest()
    stored_key = hashlib.new(name, client_key).digest()
    without_proof = f"c=biws,r={nonce}"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac_.new(stored_key, auth, name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


def test_scram_accepts_librdkafka_2_0_repeated_client_nonce() -> None:
    """librdkafka 2.0.x (kcat 1.7.1) sends r=<client nonce><server-first nonce>; Kafka only
    checks that the nonce ends with the server-first one, so it logs in there: so here."""
    credential = parse_credential(make_credential("SCRAM-SHA-256", "pw"))
    exchange = ScramExchange("SCRAM-SHA-256")
    exchange.client_first(b"n,,n=carol,r=cnonce123")
    server_first = exchange.server_first(credential).decode()
    full_nonce = server_first.split(",")[0][2:]
    final = _manual_client_final("SCRAM-SHA-256", "pw", "n=carol,r=cnonce123", server_first,
                                 "cnonce123" + full_nonce)
    assert exchange.client_final(final.encode()).startswith(b"v=")
    assert exchange.complete
    other = ScramExchange("SCRAM-SHA-256")
    other.client_first(b"n,,n=carol,r=cnonce123")
    server_first = other.server_first(credential).decode()
    forged = _manual_client_final("SCRAM-SHA-256", "pw", "n=carol,r=cnonce123", server_first,
                                  "cnonce123" + "someone-elses-nonce")
    with pytest.raises(SaslFailure, match="nonce"):
        other.client_final(forged.encode())


# ------------------------------------------------------------- SCRAM message grammar (Kafka's)

@pytest.mark.parametrize("first", [
    b"y,,n=carol,r=abc",                  # channel binding "y": refused as Kafka does
    b"p=tls-unique,,n=carol,r=abc",       # channel binding requested
    b"n,,r=abc,n=carol",                  # attributes out of order
    b"n,,n=carol",                        # no nonce
    b"n,,n=,r=abc",                       # empty user
    b"n,,n=car=ol,r=abc",                 # a bare "=" in the name
    b"n,,n=carol,r=a,b",                  # "b" is not an extension (no "=")
    b"n,,n=carol,r=abc,1x=y",             # extension names are letters
    b"n,,n=carol,r=abc,tokenauth=true",   # delegation tokens are not issued
    b"n,,n=carol,r=ab\x7f",               # nonce not printable
    b"n,n=carol,r=abc",                   # no authzid field
    b"\xff\xfe",
])
def test_scram_client_first_grammar_refusals(first: bytes) -> None:
    exchange = ScramExchange("SCRAM-SHA-256")
    with pytest.raises(SaslFailure) as info:
        exchange.client_first(first)
    assert not info.value.public  # the client is told only "invalid credentials"
    with pytest.raises(IllegalSaslState):  # a failure ends the exchange
        exchange.client_first(b"n,,n=carol,r=abc")


def test_scram_client_first_extensions_and_reserved_are_read() -> None:
    assert ScramExchange("SCRAM-SHA-256").client_first(b"n,,n=carol,r=abc,foo=bar") == "carol"
    assert ScramExchange("SCRAM-SHA-256").client_first(b"n,,m=x,n=carol,r=abc") == "carol"
    assert ScramExchange("SCRAM-SHA-256").client_first(b"n,a=carol,n=carol,r=abc") == "carol"
    credential = parse_credential(make_credential("SCRAM-SHA-256", "pw"))
    mismatch = ScramExchange("SCRAM-SHA-256")
    mismatch.client_first(b"n,a=admin,n=carol,r=abc")
    with pytest.raises(SaslFailure) as info:
        mismatch.server_first(credential)
    assert info.value.public  # Kafka's SaslAuthenticationException: its text is sent
    unknown = ScramExchange("SCRAM-SHA-256")
    unknown.client_first(b"n,a=admin,n=nobody,r=abc")
    with pytest.raises(SaslFailure) as info:
        unknown.server_first(None)
    assert not info.value.public  # an unknown user first: the generic answer, as Kafka


def _server_first_for(password: str) -> tuple[ScramExchange, str]:
    credential = parse_credential(make_credential("SCRAM-SHA-256", password))
    exchange = ScramExchange("SCRAM-SHA-256")
    exchange.client_first(b"n,,n=carol,r=cnonce")
    return exchange, exchange.server_first(credential).decode()


@pytest.mark.parametrize("mutate", [
    lambda f: f.replace("c=biws", "c=eSws"),        # channel binding "y,," after "n,,"
    lambda f: f.replace("c=biws", "c=bi!s"),        # bad base64
    lambda f: f.replace(",p=", ",p=!"),             # bad proof base64
    lambda f: f.rsplit(",p=", 1)[0],                # no proof
    lambda f: f[:-6] + "AAAA==",                    # tampered proof
    lambda f: f.replace(",p=", ",x,p="),            # an attribute that is no extension
    lambda f: "r=" + f.split("r=", 1)[1],           # no channel binding attribute
])
def test_scram_client_final_refusals(mutate: Any) -> None:
    exchange, server_first = _server_first_for("pw")
    nonce = server_first.split(",")[0][2:]
    final = _manual_client_final("SCRAM-SHA-256", "pw", "n=carol,r=cnonce", server_first, nonce)
    assert mutate(final) != final
    with pytest.raises(SaslFailure) as info:
        exchange.client_final(mutate(final).encode())
    assert not info.value.public and not exchange.complete


def test_scram_client_final_extensions_are_signed() -> None:
    exchange, server_first = _server_first_for("pw")
    nonce = server_first.split(",")[0][2:]
    final = _manual_client_final("SCRAM-SHA-256", "pw", "n=carol,r=cnonce", server_first,
                                 nonce + ",ext=1")  # an extension inside without-proof
    assert exchange.client_final(final.encode()).startswith(b"v=")


def test_broker_client_refuses_a_server_asking_few_iterations() -> None:
    """Kafka's ScramSaslClient refuses a server-first with i < 4096 (a weak or hostile
    server); the inter-broker client does too, before any PBKDF2 runs."""
    from types import SimpleNamespace

    from kio.schema.errors import ErrorCode

    from loglake.broker.security.sasl_client import sasl_client_authenticate
    from loglake.errors import SaslAuthenticationError

    async def server(api_key: int, version: int, body: dict[str, Any]) -> Any:
        if api_key == 17:
            return SimpleNamespace(error_code=ErrorCode.none, mechanisms=["SCRAM-SHA-256"])
        nonce = bytes(body["auth_bytes"]).split(b"r=", 1)[1]
        return SimpleNamespace(error_code=ErrorCode.none, error_message=None,
                               auth_bytes=b"r=" + nonce + b"x,s=c2FsdA==,i=1")

    with pytest.raises(SaslAuthenticationError, match="less than the minimum 4096"):
        asyncio.run(sasl_client_authenticate(server, "SCRAM-SHA-256", "broker", "pw"))
