"""The SASL handlers driven by loglake's own SASL client, in process: requests are built and
decoded with the real codec and handled by handlers/sasl.py with a connection Session; SCRAM
credentials come from an in-memory stand-in of the entity config store (the live tests with
real clients and ZooKeeper are in test_sasl_e2e.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, request_class
from loglake.broker.handlers import sasl
from loglake.broker.security import sasl_gate
from loglake.broker.security.sasl_client import sasl_client_authenticate
from loglake.broker.security.scram_credentials import store_user_credential
from loglake.broker.security.session import SASL_PLAINTEXT, Session
from loglake.config import BrokerConfig
from loglake.errors import SaslAuthenticationError

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret" user_bob="bob-secret";')


class MemoryEntityConfigs:
    def __init__(self) -> None:
        self.configs: dict[str, dict[str, str]] = {}

    def get(self, path: str) -> dict[str, str]:
        return dict(self.configs.get(path, {}))

    def alter(self, path: str, updates: Mapping[str, str | None]) -> dict[str, str]:
        config = self.configs.setdefault(path, {})
        for key, value in updates.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        return dict(config)


@dataclass
class FakeCatalog:
    store: MemoryEntityConfigs
    connected: bool = True
    """False: as a catalog that lost its ZooKeeper connection (logins use the cache)."""

    def entity_configs(self) -> MemoryEntityConfigs:
        return self.store


@dataclass
class FakeZk:
    catalog: FakeCatalog

    async def call(self, func: Any, *args: Any) -> Any:
        return func(*args)


@dataclass
class FakeServices:
    config: BrokerConfig
    zk: FakeZk
    store: MemoryEntityConfigs = field(default_factory=MemoryEntityConfigs)


def _services(**extra: str) -> FakeServices:
    props = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:1",
             "listeners": "SASL_PLAINTEXT://127.0.0.1:9092",
             "inter.broker.listener.name": "SASL_PLAINTEXT",
             "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
             "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
             "connection.failed.authentication.delay.ms": "0"}
    props.update(extra)
    store = MemoryEntityConfigs()
    store_user_credential(store, "alice", "SCRAM-SHA-256", "scram-256-pw")
    store_user_credential(store, "alice", "SCRAM-SHA-512", "scram-512-pw", 8192)
    return FakeServices(BrokerConfig.from_properties(props), FakeZk(FakeCatalog(store)), store)


class Connection:
    """One client connection: the gate, then the SASL handlers, as broker/server.py does."""

    def __init__(self, services: FakeServices) -> None:
        self.services = services
        self.session = Session.for_listener("SASL_PLAINTEXT", SASL_PLAINTEXT, "127.0.0.1")
        self.closed = False
        self.session.close_connection = self._close
        self.versions = {17: 1, 36: 2}

    def _close(self) -> None:
        self.closed = True

    async def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        version = min(version, self.versions[api_key])
        reason = sasl_gate.admit(self.session, api_key, time.monotonic(), 100)
        if reason is not None:
            raise ConnectionError(reason)
        frame = RequestFrame(api_key, version, 1, "test",
                             build(request_class(api_key, version), body),
                             session=self.session)
        handler = sasl.sasl_handshake if api_key == 17 else sasl.sasl_authenticate
        return await handler(self.services, frame)  # type: ignore[arg-type]


def _login(connection: Connection, mechanism: str, user: str, password: str) -> None:
    asyncio.run(sasl_client_authenticate(connection.request, mechanism, user, password))


@pytest.mark.parametrize(("mechanism", "password"), [
    ("PLAIN", "alice-secret"), ("SCRAM-SHA-256", "scram-256-pw"),
    ("SCRAM-SHA-512", "scram-512-pw")])
def test_login_sets_the_principal(mechanism: str, password: str) -> None:
    connection = Connection(_services())
    assert sasl_gate.admit(connection.session, 3, 0.0) is not None  # Metadata refused first
    _login(connection, mechanism, "alice", password)
    session = connection.session
    assert session.authenticated and str(session.principal) == "User:alice"
    assert session.sasl_mechanism == mechanism and session.expires_at is None
    assert sasl_gate.admit(session, 3, time.monotonic()) is None  # now served


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("PLAIN", "alice", "wrong"), ("PLAIN", "mallory", "x"),
    ("SCRAM-SHA-256", "alice", "wrong"), ("SCRAM-SHA-256", "mallory", "x"),
    ("SCRAM-SHA-512", "alice", "scram-256-pw")])
def test_bad_credentials_fail_and_the_connection_serves_nothing_more(
        mechanism: str, user: str, password: str) -> None:
    connection = Connection(_services())
    with pytest.raises(SaslAuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
        _login(connection, mechanism, user, password)
    assert not connection.session.authenticated
    assert sasl_gate.admit(connection.session, 18, time.monotonic()) is not None


def test_a_disconnected_broker_logs_in_from_the_credential_cache() -> None:
    """While the catalog is disconnected no read is attempted (it would wait for the
    reconnection): the cache the config sync fed answers, a user not in it is unknown."""
    services = _services()
    feed = sasl.CredentialCacheFeed(services.zk.catalog)
    feed.load_all({"alice": services.store.get("users/alice")})
    services.zk.catalog.connected = False

    def unreadable(*_: object) -> None:
        raise AssertionError("ZooKeeper read while disconnected")

    services.store.get = unreadable  # type: ignore[method-assign,assignment]
    connection = Connection(services)
    _login(connection, "SCRAM-SHA-512", "alice", "scram-512-pw")
    assert str(connection.session.principal) == "User:alice"
    with pytest.raises(SaslAuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
        _login(Connection(services), "SCRAM-SHA-256", "bob", "x")


def test_unsupported_mechanism() -> None:
    connection = Connection(_services(**{
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512"}))
    with pytest.raises(SaslAuthenticationError, match=r"UNSUPPORTED_SASL_MECHANISM.*SCRAM-SHA-512"):
        _login(connection, "PLAIN", "alice", "alice-secret")


def test_authenticate_before_handshake_is_illegal() -> None:
    """The gate closes it unanswered (Kafka); a handler reached anyway answers
    ILLEGAL_SASL_STATE and the connection serves nothing more."""
    connection = Connection(_services())
    with pytest.raises(ConnectionError, match="SaslAuthenticate before SaslHandshake"):
        asyncio.run(connection.request(36, 2, {"auth_bytes": b"\x00a\x00b"}))
    frame = RequestFrame(36, 2, 1, "test", build(request_class(36, 2), {"auth_bytes": b"x"}),
                         session=connection.session)
    response = asyncio.run(sasl.sasl_authenticate(connection.services, frame))  # type: ignore[arg-type]
    assert response.error_code == ErrorCode.illegal_sasl_state
    assert sasl_gate.admit(connection.session, 17, 0.0) is not None


def test_second_handshake_mid_exchange_is_illegal() -> None:
    connection = Connection(_services())
    first = asyncio.run(connection.request(17, 1, {"mechanism": "PLAIN"}))
    assert first.error_code == ErrorCode.none
    assert set(first.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    again = asyncio.run(connection.request(17, 1, {"mechanism": "PLAIN"}))
    assert again.error_code == ErrorCode.illegal_sasl_state


def test_handshake_v0_switches_to_unframed_tokens() -> None:
    """SaslHandshake v0 (Kafka 3.9): raw tokens follow, answered raw and size-prefixed."""
    connection = Connection(_services())
    response = asyncio.run(connection.request(17, 0, {"mechanism": "PLAIN"}))
    assert response.error_code == ErrorCode.none
    assert sasl_gate.expects_unframed_token(connection.session)
    answer = asyncio.run(sasl.sasl_unframed_token(
        connection.services, connection.session, b"\x00alice\x00alice-secret"))  # type: ignore[arg-type]
    assert answer == b"\x00\x00\x00\x00"
    assert connection.session.authenticated
    assert not sasl_gate.expects_unframed_token(connection.session)


def test_failure_answer_is_delayed() -> None:
    connection = Connection(_services(**{"connection.failed.authentication.delay.ms": "300"}))
    started = time.monotonic()
    with pytest.raises(SaslAuthenticationError):
        _login(connection, "PLAIN", "alice", "wrong")
    assert time.monotonic() - started >= 0.3


def test_reauthentication_keeps_the_session_and_renews_its_lifetime() -> None:
    services = _services(**{"connections.max.reauth.ms": "60000"})
    connection = Connection(services)
    _login(connection, "SCRAM-SHA-256", "alice", "scram-256-pw")
    session = connection.session
    assert session.expires_at is not None
    first_expiry = session.expires_at
    assert sasl_gate.admit(session, 0, first_expiry + 1) is not None  # expired: closed
    time.sleep(0.01)
    _login(connection, "SCRAM-SHA-256", "alice", "scram-256-pw")  # re-authenticate
    assert session.expires_at is not None and session.expires_at > first_expiry
    assert str(session.principal) == "User:alice"


def test_session_lifetime_in_the_response() -> None:
    connection = Connection(_services(**{"connections.max.reauth.ms": "5000"}))

    async def scenario() -> Any:
        await connection.request(17, 1, {"mechanism": "PLAIN"})
        return await connection.request(36, 2, {"auth_bytes": b"\x00bob\x00bob-secret"})

    response = asyncio.run(scenario())
    assert response.error_code == ErrorCode.none
    assert response.session_lifetime.total_seconds() == 5.0


def test_reauthentication_cannot_change_the_principal_or_mechanism() -> None:
    services = _services(**{"connections.max.reauth.ms": "60000"})
    connection = Connection(services)
    _login(connection, "PLAIN", "alice", "alice-secret")
    with pytest.raises(SaslAuthenticationError, match="Cannot change principals"):
        _login(connection, "PLAIN", "bob", "bob-secret")
    assert str(connection.session.principal) == "User:alice"
    assert sasl_gate.admit(connection.session, 0, time.monotonic()) is not None

    other = Connection(services)
    _login(other, "PLAIN", "alice", "alice-secret")
    with pytest.raises(SaslAuthenticationError, match="UNSUPPORTED_SASL_MECHANISM"):
        _login(other, "SCRAM-SHA-256", "alice", "scram-256-pw")


def test_no_reauthentication_for_v0_clients() -> None:
    """A client that only sent SaslAuthenticate v0 cannot read a lifetime: a later handshake
    is answered ILLEGAL_SASL_STATE (Kafka's KafkaApis), and the session still expires."""
    services = _services(**{"connections.max.reauth.ms": "60000"})
    connection = Connection(services)
    connection.versions[36] = 0
    _login(connection, "PLAIN", "alice", "alice-secret")
    with pytest.raises(SaslAuthenticationError, match="ILLEGAL_SASL_STATE"):
        _login(connection, "PLAIN", "alice", "alice-secret")
    assert connection.session.expires_at is not None


def test_plaintext_connection_answers_illegal_state() -> None:
    services = _services()
    session = Session()
    frame = RequestFrame(17, 1, 1, "t", build(request_class(17, 1), {"mechanism": "PLAIN"}),
                         session=session)
    response = asyncio.run(sasl.sasl_handshake(services, frame))  # type: ignore[arg-type]
    assert response.error_code == ErrorCode.illegal_sasl_state


def test_handshake_v0_scram_exchange_unframed() -> None:
    """SCRAM after SaslHandshake v0: client-first, client-final as raw tokens; the raw
    server-first and server-final answers; a bad proof closes (FrameError), unanswered."""
    from scramp import ScramClient

    from loglake.broker.codec import FrameError

    for password, ok in (("scram-512-pw", True), ("wrong", False)):
        connection = Connection(_services())
        assert asyncio.run(connection.request(
            17, 0, {"mechanism": "SCRAM-SHA-512"})).error_code == ErrorCode.none
        client = ScramClient(["SCRAM-SHA-512"], "alice", password)

        async def exchange(client: ScramClient = client,
                           connection: Connection = connection) -> None:
            services, session = connection.services, connection.session
            first = await sasl.sasl_unframed_token(
                services, session, client.get_client_first().encode())  # type: ignore[arg-type]
            client.set_server_first(first[4:].decode())
            final = await sasl.sasl_unframed_token(
                services, session, client.get_client_final().encode())  # type: ignore[arg-type]
            client.set_server_final(final[4:].decode())

        if ok:
            asyncio.run(exchange())
            assert connection.session.authenticated
            assert str(connection.session.principal) == "User:alice"
        else:
            with pytest.raises(FrameError):
                asyncio.run(exchange())
            assert not connection.session.authenticated
            assert sasl_gate.admit(connection.session, 3, 0.0) is not None
