"""Bad input on the authentication side, over real sockets against a broker process.

One broker with three listeners: PLAINTEXT (the harness), SASL_PLAINTEXT (+100) with PLAIN and
SCRAM, SSL (+200). Each case sends what no well-behaved client sends -- malformed SCRAM
client-first/final messages, channel-binding flags, extensions, an unknown user, a tampered
proof, proofs for the wrong salt or iteration count, a stored credential under Kafka's minimum
iterations, PLAIN tokens without NULs or with empty parts, binary garbage, truncated frames,
SASL requests out of order, huge tokens, many half-open TLS handshakes, a client that stops in
the middle of a TLS handshake -- and checks Kafka's error code or a clean close. After every
case a good client (a SCRAM login followed by Metadata, and a TLS client) is served
(:func:`_good_clients`), so one connection's garbage never costs another's service.

Also: Metadata and FindCoordinator on a listener that only one of two brokers has
(LISTENER_NOT_FOUND, COORDINATOR_NOT_AVAILABLE), and ``loglake users create`` printing one
clean line.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import random
import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from loglake.broker.security.sasl_client import sasl_client_authenticate
from loglake.broker.security.scram_credentials import (
    credential_from_salted_password,
    hash_name,
    salted_password,
    store_user_credential,
)
from loglake.catalog.entity_configs import EntityConfigStore, entity_path
from loglake.dev.harness import DevCluster
from tests.tls_util import TlsFiles, broker_ssl_settings, make_tls_files
from tests.wire import WireClient

GOOD_USER, GOOD_PASSWORD = "carol", "carol-scram"
PLAIN_USER, PLAIN_PASSWORD = "alice", "alice-plain"
WEAK_USER = "weak"
AUTH_TIMEOUT_MS = 3000
MAX_RECEIVE = 4096
HALF_OPEN = 40
HANDSHAKE_TIMEOUT_S = 10.0  # broker/server.py's TLS_HANDSHAKE_TIMEOUT_S


class Hostile:
    def __init__(self, dev: DevCluster, tls: TlsFiles) -> None:
        self.dev = dev
        self.tls = tls
        self.sasl_port = dev.broker_port(1) + 100
        self.ssl_port = dev.broker_port(1) + 200


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[Hostile]:
    data = tmp_path_factory.mktemp("hostile")
    tls = make_tls_files(data / "tls")
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{PLAIN_USER}="{PLAIN_PASSWORD}";')
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{port:1},"
                     "SSL://127.0.0.1:{port:2}",
        "listener.security.protocol.map":
            "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "sasl.server.authentication.timeout.ms": str(AUTH_TIMEOUT_MS),
        "sasl.server.max.receive.size": str(MAX_RECEIVE),
        "connection.failed.authentication.delay.ms": "100",
        **broker_ssl_settings(tls, listener="SSL"),
    }
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as dev:
        zk = KazooClient(hosts=dev.zookeeper_connect, timeout=10)
        zk.start(timeout=10)
        try:
            store = EntityConfigStore(zk)
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                store_user_credential(store, GOOD_USER, mechanism, GOOD_PASSWORD)
            # under Kafka's minimum of 4096 iterations (written by hand: our tools refuse it)
            salt = os.urandom(16)
            weak = credential_from_salted_password(
                "SCRAM-SHA-256", salt, salted_password("SCRAM-SHA-256", "weak-pw", salt, 1024),
                1024)
            store.alter(entity_path(user=WEAK_USER), {"SCRAM-SHA-256": weak.to_string()})
        finally:
            zk.stop()
            zk.close()
        yield Hostile(dev, tls)


# ----------------------------------------------------------------------------- helpers

def _sasl(h: Hostile) -> WireClient:
    return WireClient("127.0.0.1", h.sasl_port)


def _tls_context(h: Hostile) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(h.tls.ca.cert))
    context.check_hostname = False
    return context


def _good_clients(h: Hostile) -> None:
    """A SCRAM login + Metadata on the SASL listener and ApiVersions over TLS succeed."""
    with _sasl(h) as wire:
        async def request(api_key: int, version: int, body: dict[str, Any]) -> Any:
            return wire.request(api_key, version, body)

        asyncio.run(sasl_client_authenticate(request, "SCRAM-SHA-512", GOOD_USER,
                                             GOOD_PASSWORD))
        metadata = wire.request(3, 12, {"topics": None})
        assert [b.node_id for b in metadata.brokers] == [1]
    with socket.create_connection(("127.0.0.1", h.ssl_port), timeout=10) as raw, \
            _tls_context(h).wrap_socket(raw) as tls:
        wire = WireClient.__new__(WireClient)
        wire.sock, wire.correlation_id = tls, 0
        versions = wire.request(18, 3, {"client_software_name": "t",
                                        "client_software_version": "1"})
        assert versions.error_code == ErrorCode.none


def _handshake(wire: WireClient, mechanism: str) -> None:
    assert wire.request(17, 1, {"mechanism": mechanism}).error_code == ErrorCode.none


def _authenticate(wire: WireClient, token: bytes) -> Any:
    return wire.request(36, 2, {"auth_bytes": token})


def _refused_then_closed(response: Any, code: ErrorCode, wire: WireClient) -> None:
    assert response.error_code == code, response
    assert wire.is_closed(timeout=5.0)  # one attempt per connection, then a clean close


GENERIC = "due to invalid credentials with SASL mechanism"


# ---------------------------------------------------------------- SCRAM client-first

@pytest.mark.parametrize("first", [
    b"n,,r=abc,n=carol", b"n,,n=carol", b"n,,n=carol,r=", b"n,,n=,r=abc",
    b"n,,n=car=ol,r=abc", b"y,,n=carol,r=abc", b"p=tls-unique,,n=carol,r=abc",
    b"n,,n=carol,r=abc,tokenauth=true", b"n,,n=carol,r=abc,x", b"\xff\x00garbage", b"",
    b"n,,n=nobody-at-all,r=abc",  # an unknown user: the same answer
], ids=["order", "no-nonce", "empty-nonce", "empty-user", "bare-equals", "flag-y", "flag-p",
        "tokenauth", "bad-extension", "binary", "empty", "unknown-user"])
def test_scram_client_first_refused(hostile: Hostile, first: bytes) -> None:
    with _sasl(hostile) as wire:
        _handshake(wire, "SCRAM-SHA-256")
        response = _authenticate(wire, first)
        assert GENERIC in (response.error_message or ""), response
        assert b"carol" not in (response.error_message or "").encode()
        _refused_then_closed(response, ErrorCode.sasl_authentication_failed, wire)
    _good_clients(hostile)


def test_scram_extensions_are_accepted(hostile: Hostile) -> None:
    with _sasl(hostile) as wire:
        _handshake(wire, "SCRAM-SHA-256")
        response = _authenticate(wire, b"n,,n=carol,r=abcdef,foo=bar")
        assert response.error_code == ErrorCode.none
        assert bytes(response.auth_bytes).startswith(b"r=abcdef")


def test_scram_authzid_mismatch_says_so(hostile: Hostile) -> None:
    with _sasl(hostile) as wire:
        _handshake(wire, "SCRAM-SHA-256")
        response = _authenticate(wire, b"n,a=admin,n=carol,r=abc")
        assert "authorization id" in (response.error_message or "")
        _refused_then_closed(response, ErrorCode.sasl_authentication_failed, wire)


def test_scram_credential_under_minimum_iterations_refused(hostile: Hostile) -> None:
    with _sasl(hostile) as wire:
        _handshake(wire, "SCRAM-SHA-256")
        response = _authenticate(wire, b"n,,n=weak,r=abc")
        _refused_then_closed(response, ErrorCode.sasl_authentication_failed, wire)
    _good_clients(hostile)


# ---------------------------------------------------------------- SCRAM client-final

def _final(server_first: str, password: str, nonce: str | None = None, *,
           salt: bytes | None = None, iterations: int | None = None,
           channel: str = "biws", bare: str = "n=carol,r=cnonce") -> str:
    """A client-final message for SCRAM-SHA-256 (RFC 5802), optionally computed with another
    nonce, salt or iteration count than the server sent."""
    fields = dict(part.split("=", 1) for part in server_first.split(","))
    salted = salted_password("SCRAM-SHA-256", password,
                             salt if salt is not None else base64.b64decode(fields["s"]),
                             iterations if iterations is not None else int(fields["i"]))
    name = hash_name("SCRAM-SHA-256")
    client_key = hmac.new(salted, b"Client Key", name).digest()
    stored_key = hashlib.new(name, client_key).digest()
    without_proof = f"c={channel},r={nonce if nonce is not None else fields['r']}"
    signature = hmac.new(stored_key, f"{bare},{server_first},{without_proof}".encode(),
                         name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


FINALS: dict[str, Callable[[str], str]] = {
    "correct": lambda sf: _final(sf, GOOD_PASSWORD),
    "wrong-password": lambda sf: _final(sf, "nope"),
    "wrong-nonce": lambda sf: _final(sf, GOOD_PASSWORD, nonce="cnonce-other"),
    "client-nonce-only": lambda sf: _final(sf, GOOD_PASSWORD, nonce="cnonce"),
    "wrong-salt": lambda sf: _final(sf, GOOD_PASSWORD, salt=b"0123456789abcdef"),
    "wrong-iterations": lambda sf: _final(sf, GOOD_PASSWORD, iterations=4097),
    "channel-binding-y": lambda sf: _final(sf, GOOD_PASSWORD, channel="eSws"),
    "tampered-proof": lambda sf: _final(sf, GOOD_PASSWORD)[:-8] + "AAAAAA==",
    "proof-bad-base64": lambda sf: _final(sf, GOOD_PASSWORD)[:-4] + "!!!!",
    "short-proof": lambda sf: _final(sf, GOOD_PASSWORD).rsplit(",p=", 1)[0] + ",p=AAAA",
    "no-proof": lambda sf: _final(sf, GOOD_PASSWORD).rsplit(",p=", 1)[0],
    "extra-attribute": lambda sf: _final(sf, GOOD_PASSWORD).replace(",p=", ",junk,p="),
    "binary": lambda sf: "\udcff",
}


@pytest.mark.parametrize("case", list(FINALS))
def test_scram_client_final(hostile: Hostile, case: str) -> None:
    with _sasl(hostile) as wire:
        _handshake(wire, "SCRAM-SHA-256")
        first = _authenticate(wire, b"n,,n=carol,r=cnonce")
        assert first.error_code == ErrorCode.none
        server_first = bytes(first.auth_bytes).decode()
        token = FINALS[case](server_first).encode("utf-8", "surrogateescape")
        response = _authenticate(wire, token)
        if case == "correct":
            assert response.error_code == ErrorCode.none
            assert bytes(response.auth_bytes).startswith(b"v=")
            assert wire.request(3, 12, {"topics": None}).brokers
            return
        assert GENERIC in (response.error_message or ""), response
        _refused_then_closed(response, ErrorCode.sasl_authentication_failed, wire)
    _good_clients(hostile)


# ---------------------------------------------------------------------------- PLAIN

@pytest.mark.parametrize("token", [
    b"alice-plain", b"\x00alice", b"\x00\x00alice-plain", b"\x00alice\x00",
    b"\x00alice\x00alice-plain\x00extra", b"bob\x00alice\x00alice-plain", b"\x00\x00",
    b"\x00alice\x00\xff\xfe\xfd", b"",
], ids=["no-nul", "one-nul", "empty-user", "empty-password", "four-parts", "other-authzid",
        "all-empty", "binary-password", "empty"])
def test_plain_bad_tokens(hostile: Hostile, token: bytes) -> None:
    with _sasl(hostile) as wire:
        _handshake(wire, "PLAIN")
        response = _authenticate(wire, token)
        _refused_then_closed(response, ErrorCode.sasl_authentication_failed, wire)
    _good_clients(hostile)


# ---------------------------------------------------------------------- frames, order

def test_binary_garbage_closes(hostile: Hostile) -> None:
    rng = random.Random(15)
    for port in (hostile.sasl_port, hostile.dev.broker_port(1)):
        for _ in range(5):
            payload = bytes(rng.randrange(256) for _ in range(rng.randrange(8, 200)))
            with WireClient("127.0.0.1", port) as wire:
                wire.send_raw(struct.pack(">i", len(payload)) + payload)
                assert wire.is_closed()
    with _sasl(hostile) as wire:  # a negative size, then a size below a header's
        wire.send_raw(struct.pack(">i", -5))
        assert wire.is_closed()
    with _sasl(hostile) as wire:
        wire.send_raw(struct.pack(">i", 3) + b"abc")
        assert wire.is_closed()
    _good_clients(hostile)


def test_truncated_frames(hostile: Hostile) -> None:
    with _sasl(hostile) as wire:  # half a handshake, then the client goes away
        frame = wire.encode(17, 1, {"mechanism": "PLAIN"})
        wire.send_raw(frame[:len(frame) // 2])
    with _sasl(hostile) as wire:  # half a token frame, then silence: the time limit closes it
        _handshake(wire, "PLAIN")
        frame = wire.encode(36, 2, {"auth_bytes": b"\x00alice\x00alice-plain"})
        wire.send_raw(frame[:-5])
        started = time.monotonic()
        assert wire.is_closed(timeout=AUTH_TIMEOUT_MS / 1000 + 5)
        assert time.monotonic() - started < AUTH_TIMEOUT_MS / 1000 + 3
    with _sasl(hostile) as wire:  # a frame whose body is shorter than its fields say
        frame = wire.encode(36, 2, {"auth_bytes": b"x" * 100})
        body = frame[4:-60]
        _handshake(wire, "PLAIN")
        wire.send_raw(struct.pack(">i", len(body)) + body)
        assert wire.is_closed()
    _good_clients(hostile)


def test_authenticate_before_handshake(hostile: Hostile) -> None:
    """Kafka's SaslServerAuthenticator reads only ApiVersions and SaslHandshake before the
    handshake: SaslAuthenticate closes the connection without an answer."""
    with _sasl(hostile) as wire, pytest.raises(ConnectionError):
        _authenticate(wire, b"\x00alice\x00alice-plain")
    _good_clients(hostile)


def test_second_handshake_mid_exchange(hostile: Hostile) -> None:
    with _sasl(hostile) as wire:
        _handshake(wire, "SCRAM-SHA-256")
        assert _authenticate(wire, b"n,,n=carol,r=abc").error_code == ErrorCode.none
        response = wire.request(17, 1, {"mechanism": "PLAIN"})
        _refused_then_closed(response, ErrorCode.illegal_sasl_state, wire)
    _good_clients(hostile)


def test_handshake_v0_and_unknown_mechanism(hostile: Hostile) -> None:
    """SaslHandshake v0 as Kafka 3.9 serves it: raw size-prefixed tokens follow (PLAIN: an
    empty raw answer on success, a close without an answer on failure)."""
    plain = f"\x00{PLAIN_USER}\x00{PLAIN_PASSWORD}".encode()
    with _sasl(hostile) as wire:
        assert wire.request(17, 0, {"mechanism": "PLAIN"}).error_code == ErrorCode.none
        wire.send_raw(struct.pack(">i", len(plain)) + plain)
        assert wire.recv_frame() == b""
        assert wire.request(3, 12, {"topics": None}).brokers
    with _sasl(hostile) as wire:
        assert wire.request(17, 0, {"mechanism": "PLAIN"}).error_code == ErrorCode.none
        bad = plain + b"-wrong"
        wire.send_raw(struct.pack(">i", len(bad)) + bad)
        with pytest.raises(ConnectionError):
            wire.recv_frame()
    with _sasl(hostile) as wire:  # a tiny raw token (under a Kafka header's 8 bytes) is read
        assert wire.request(17, 0, {"mechanism": "PLAIN"}).error_code == ErrorCode.none
        wire.send_raw(struct.pack(">i", 3) + b"\x00a\x00")
        with pytest.raises(ConnectionError):
            wire.recv_frame()
    with _sasl(hostile) as wire:
        response = wire.request(17, 1, {"mechanism": "X" * 300})
        _refused_then_closed(response, ErrorCode.unsupported_sasl_mechanism, wire)
    _good_clients(hostile)


@pytest.mark.parametrize("size", [MAX_RECEIVE + 1, 1 << 20])
def test_huge_tokens_close(hostile: Hostile, size: int) -> None:
    with _sasl(hostile) as wire:
        _handshake(wire, "PLAIN")
        wire.send_raw(wire.encode(36, 2, {"auth_bytes": b"\x00alice\x00" + b"x" * size}))
        assert wire.is_closed()
    with _sasl(hostile) as wire:  # announced huge, never sent: closed unread, at once
        wire.send_raw(struct.pack(">i", 100 << 20) + b"\x00\x24\x00\x02")
        started = time.monotonic()
        assert wire.is_closed()
        assert time.monotonic() - started < AUTH_TIMEOUT_MS / 1000 / 2, (
            "an over-limit frame before authentication must close the connection before its "
            "body is read, not at the authentication time limit")
    _good_clients(hostile)


# ------------------------------------------------------------------------------- TLS

def test_many_half_open_tls_handshakes(hostile: Hostile) -> None:
    """HALF_OPEN connections that never finish (or never start) their handshake: a good
    client is served meanwhile, and the broker drops them after its handshake time limit."""
    socks: list[socket.socket] = []
    try:
        for index in range(HALF_OPEN):
            sock = socket.create_connection(("127.0.0.1", hostile.ssl_port), timeout=10)
            if index % 2:  # half of them send a ClientHello, then nothing
                incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
                tls = _tls_context(hostile).wrap_bio(incoming, outgoing)
                with pytest.raises(ssl.SSLWantReadError):
                    tls.do_handshake()
                sock.sendall(outgoing.read())
            socks.append(sock)
        started = time.monotonic()
        _good_clients(hostile)
        assert time.monotonic() - started < 5
        for sock in socks:
            sock.settimeout(max(0.1, started + HANDSHAKE_TIMEOUT_S + 10 - time.monotonic()))
            try:
                while sock.recv(65536):  # the ServerHello, then EOF
                    pass
            except ConnectionResetError:
                pass
        assert time.monotonic() - started < HANDSHAKE_TIMEOUT_S + 10
    finally:
        for sock in socks:
            sock.close()
    _good_clients(hostile)


def test_client_stops_mid_tls_handshake(hostile: Hostile) -> None:
    """A ClientHello cut in half, then the client disconnects; another sends a full one and
    disconnects after the ServerHello: the broker shrugs both off."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = _tls_context(hostile).wrap_bio(incoming, outgoing)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    with socket.create_connection(("127.0.0.1", hostile.ssl_port), timeout=10) as sock:
        sock.sendall(hello[:len(hello) // 2])
    with socket.create_connection(("127.0.0.1", hostile.ssl_port), timeout=10) as sock:
        sock.sendall(hello)
        assert sock.recv(5)  # the server answered; leave mid-handshake
    with socket.create_connection(("127.0.0.1", hostile.ssl_port), timeout=10) as sock:
        sock.sendall(b"\x16\x03\x01\xff\xff" + os.urandom(64))  # a record of garbage
        sock.settimeout(10)
        try:
            data = sock.recv(1024)
        except ConnectionResetError:
            data = b""
        assert data == b"" or data[:1] == b"\x15"  # EOF or a TLS alert, then EOF
    _good_clients(hostile)


# ----------------------------------------------------------------------- users CLI

def _users(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loglake", "users", *args], input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_users_cli_output_is_one_clean_line(hostile: Hostile) -> None:
    """No librdkafka log line on stderr (the BGQUEUE purge notice of a destroyed client, or a
    connection failure per retry): one line of output, or one error line."""
    user = f"quiet-{uuid.uuid4().hex[:6]}"
    bootstrap = ["--bootstrap-server", hostile.dev.bootstrap_servers]
    created = _users("create", user, "--mechanism", "SCRAM-SHA-256", *bootstrap,
                     stdin="pw-quiet\n")
    assert (created.returncode, created.stderr) == (0, "")
    assert created.stdout.splitlines() == [f"created SCRAM credentials of {user}: SCRAM-SHA-256"]
    with _sasl(hostile) as wire:
        async def request(api_key: int, version: int, body: dict[str, Any]) -> Any:
            return wire.request(api_key, version, body)

        asyncio.run(sasl_client_authenticate(request, "SCRAM-SHA-256", user, "pw-quiet"))
    for _ in range(3):  # the notice came at random from the first of delete's two clients
        deleted = _users("delete", user, *bootstrap)
        assert deleted.stderr in ("", f"loglake: error: {user} has no SCRAM credentials "
                                      "(SCRAM-SHA-256, SCRAM-SHA-512)\n"), deleted.stderr
    assert deleted.stdout == ""  # (deleted by the first round)
    listed = _users("list", *bootstrap)
    assert (listed.returncode, listed.stderr) == (0, "")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nobody = probe.getsockname()[1]
    refused = _users("create", "x", "--password", "p", "--bootstrap-server",
                     f"127.0.0.1:{nobody}")
    assert refused.returncode == 1 and refused.stdout == ""
    lines = refused.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("loglake: error:"), refused.stderr


# ------------------------------------------------- a listener only one broker has

@pytest.fixture(scope="module")
def half_listener(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
                  ) -> Iterator[tuple[DevCluster, int]]:
    """Broker 1 (the harness's) with PLAINTEXT and EXTERNAL (+100); broker 2, started here,
    with PLAINTEXT only. Yields the cluster and broker 2's port."""
    data = tmp_path_factory.mktemp("half-listener")
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:{port},EXTERNAL://127.0.0.1:{port:1}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
    }
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as dev:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        config = data / "broker-2.properties"
        text = (dev.data_dir / "broker-1" / "server.properties").read_text()
        lines = [line for line in text.splitlines() if not line.startswith(
            ("broker.id=", "listeners=", "log.dirs=", "listener.security.protocol.map="))]
        lines += ["broker.id=2", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                  f"log.dirs={data / 'broker-2-data'}",
                  "listener.security.protocol.map=PLAINTEXT:PLAINTEXT"]
        config.write_text("\n".join(lines) + "\n")
        with open(data / "broker-2.log", "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "loglake", "broker", "start", "--config", str(config)],
                stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                assert process.poll() is None, (data / "broker-2.log").read_text()[-2000:]
                try:
                    with WireClient.connect(dev.bootstrap_servers) as wire:
                        brokers = wire.request(3, 12, {"topics": None}).brokers
                    if {b.node_id for b in brokers} == {1, 2}:
                        break
                except OSError:
                    pass
                time.sleep(0.3)
            else:
                pytest.fail("broker 2 did not register")
            yield dev, port
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def test_metadata_leader_without_the_clients_listener(
        half_listener: tuple[DevCluster, int]) -> None:
    dev, _ = half_listener
    topic = f"half-{uuid.uuid4().hex[:6]}"
    with WireClient.connect(dev.bootstrap_servers) as wire:
        created = wire.request(19, 5, {"topics": [{
            "name": topic, "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": 0, "broker_ids": [1]},
                            {"partition_index": 1, "broker_ids": [2]}],
            "configs": []}], "timeout_ms": 30000, "validate_only": False})
        assert created.topics[0].error_code == ErrorCode.none, created
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            inside = wire.request(3, 12, {"topics": [{"name": topic, "topic_id": None}]})
            leaders = {p.partition_index: p.leader_id for p in inside.topics[0].partitions}
            if leaders == {0: 1, 1: 2}:
                break
            time.sleep(0.3)
        assert leaders == {0: 1, 1: 2}
    external = f"127.0.0.1:{dev.broker_port(1) + 100}"
    with WireClient.connect(external) as wire:
        for version, code in ((12, ErrorCode.listener_not_found),
                              (6, ErrorCode.listener_not_found),
                              (5, ErrorCode.leader_not_available)):
            body: dict[str, Any] = {"topics": [{"name": topic}]}
            if version >= 10:
                body["topics"][0]["topic_id"] = None
            outside = wire.request(3, version, body)
            assert [b.node_id for b in outside.brokers] == [1]  # broker 2 is left out
            assert outside.brokers[0].port == dev.broker_port(1) + 100
            partitions = {p.partition_index: p for p in outside.topics[0].partitions}
            assert partitions[0].error_code == ErrorCode.none
            assert partitions[0].leader_id == 1
            assert partitions[1].error_code == code, (version, partitions[1])
            assert partitions[1].leader_id == -1  # Kafka: NO_LEADER_ID
            assert list(partitions[1].replica_nodes) == [2]


def test_find_coordinator_without_the_clients_listener(
        half_listener: tuple[DevCluster, int]) -> None:
    dev, _ = half_listener
    by_node: dict[int, str] = {}
    with WireClient.connect(dev.bootstrap_servers) as wire:
        for index in range(200):
            group = f"g-{index}"
            answer = wire.request(10, 4, {"key_type": 0, "coordinator_keys": [group]})
            entry = answer.coordinators[0]
            if entry.error_code == ErrorCode.none:
                by_node.setdefault(entry.node_id, group)
            if len(by_node) == 2:
                break
            if entry.error_code != ErrorCode.none:
                time.sleep(0.2)  # __consumer_offsets being created
    assert set(by_node) == {1, 2}, by_node
    with WireClient.connect(f"127.0.0.1:{dev.broker_port(1) + 100}") as wire:
        answer = wire.request(10, 4, {"key_type": 0, "coordinator_keys": [by_node[1],
                                                                          by_node[2]]})
        mine, theirs = answer.coordinators
        assert mine.error_code == ErrorCode.none and mine.node_id == 1
        assert mine.port == dev.broker_port(1) + 100
        assert theirs.error_code == ErrorCode.coordinator_not_available
        assert theirs.node_id == -1
        legacy = wire.request(10, 3, {"key": by_node[2], "key_type": 0})
        assert legacy.error_code == ErrorCode.coordinator_not_available

