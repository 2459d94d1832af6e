"""Bad input against what round 1 of issue 15 added, as an outside tester sends it, over real
sockets against a real broker process (and, for the CLI, real ``loglake`` processes).

Broker ``hostile`` (one process), listeners PLAINTEXT (``{port}``) and SASL_PLAINTEXT (+100,
PLAIN from a JAAS file and SCRAM), ``sasl.server.max.receive.size=4096``,
``sasl.server.authentication.timeout.ms=3000``, ``max.connections.per.ip.overrides=127.0.0.2:3``
and a one-second quota window so IP connection-rate quotas bite after a couple of connections.
Clients pick their source address inside 127.0.0.0/8 to be another "IP".

- SaslHandshake v0, then hostile unframed tokens: an announced size over the limit (closed
  before the body is read), negative, zero, truncated then silent, binary garbage, a Kafka
  request frame where a token belongs, a token dripped a byte at a time (closed at the
  authentication time limit, not kept open by the trickle), a SCRAM exchange with a garbage
  client-final.
- Connection floods (bounded counts, loopback): past ``max.connections.per.ip`` from one
  address and past an IP ``connection_creation_rate`` quota set through AlterClientQuotas.
- CreateTopics / CreatePartitions at every version with a ``controller_mutation_rate`` quota on
  the client id: partition counts of 2^31-1, negative, zero, a replication factor of 32767,
  10 kB names, names with path separators; a CreateTopics frame with a null (size -1) name.
- AlterClientQuotas with a 1 MB ip entity name and 2000 entries in one request.
- Two fixes found here: CreatePartitions answers a topic named twice once (Kafka's results
  are a map); DeleteTopics v6 entries with both a name and an id, or neither, are
  INVALID_REQUEST.
- The console with ``--basic-auth`` (a one-broker SASL_SSL cluster, plain HTTP): malformed,
  non-UTF-8 and huge Authorization headers, hostile quota and abort forms and bodies, odd
  schema subjects -- a 4xx with a message (or a close for a huge header), never a traceback.
- CLI: ``loglake quotas alter --ip ...`` and ``loglake zookeeper-security-migration`` with bad
  input print one ``loglake: error:`` line and exit non-zero.

After every case a good client is served (:func:`_good_clients`): a SCRAM login + Metadata on
the SASL listener and ApiVersions on the plaintext one, so one connection's garbage never costs
another's service. Every loop is bounded by count and time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kio.schema.errors import ErrorCode

from loglake.broker.security.sasl_client import sasl_client_authenticate
from loglake.client.security import read_properties
from loglake.dev.harness import DevCluster, wait_until
from tests.browser_util import ConsoleProcess
from tests.wire import WireClient
from tests.zk_util import store_scram_users

USER, PASSWORD = "mallory-ok", "scram-pw"
PLAIN_USER, PLAIN_PASSWORD = "pat", "pat-plain"
AUTH_TIMEOUT_S = 3.0
MAX_RECEIVE = 4096
PER_IP_LIMITED = "127.0.0.2"
RATE_LIMITED = "127.0.0.3"
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, ALTER_QUOTAS = 19, 20, 37, 49
MUTATION_CLIENT = "hostile-mutator"


class SourcedWire(WireClient):
    """A WireClient whose socket is bound to a chosen loopback source address."""

    def __init__(self, port: int, source: str = "127.0.0.1", timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                             source_address=(source, 0))
        self.correlation_id = 0


class Hostile:
    def __init__(self, dev: DevCluster) -> None:
        self.dev = dev
        self.port = dev.broker_port(1)
        self.sasl_port = self.port + 100


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[Hostile]:
    data = tmp_path_factory.mktemp("hostile2")
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{PLAIN_USER}="{PLAIN_PASSWORD}";')
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{port:1}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "sasl.server.authentication.timeout.ms": str(int(AUTH_TIMEOUT_S * 1000)),
        "sasl.server.max.receive.size": str(MAX_RECEIVE),
        "connection.failed.authentication.delay.ms": "100",
        "max.connections.per.ip.overrides": f"{PER_IP_LIMITED}:3",
        "quota.window.num": "2",
        "quota.window.size.seconds": "1",
        "controller.quota.window.num": "1",
        "controller.quota.window.size.seconds": "1",
    }
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as dev:
        store_scram_users(dev.zookeeper_connect, {USER: PASSWORD})
        yield Hostile(dev)


def _good_clients(h: Hostile) -> None:
    """A SCRAM login + Metadata on the SASL listener, ApiVersions on PLAINTEXT: served."""
    with WireClient("127.0.0.1", h.sasl_port) as wire:
        async def request(api_key: int, version: int, body: dict[str, Any]) -> Any:
            return wire.request(api_key, version, body)

        asyncio.run(sasl_client_authenticate(request, "SCRAM-SHA-256", USER, PASSWORD))
        assert [b.node_id for b in wire.request(3, 12, {"topics": None}).brokers] == [1]
    with WireClient("127.0.0.1", h.port) as wire:
        assert wire.served()


def _v0(h: Hostile, mechanism: str) -> WireClient:
    wire = WireClient("127.0.0.1", h.sasl_port)
    assert wire.request(17, 0, {"mechanism": mechanism}).error_code == ErrorCode.none
    return wire


def _closed_unanswered(wire: WireClient, within: float) -> None:
    """The broker closes ``wire`` without sending anything, within ``within`` seconds."""
    started = time.monotonic()
    wire.sock.settimeout(within + 5)
    try:
        data = wire.sock.recv(1024)
    except ConnectionResetError:
        data = b""
    assert data == b"", f"the broker answered {data[:40]!r} to a bad unframed token"
    assert time.monotonic() - started < within, "closed, but only after the time limit"


# ------------------------------------------------- SaslHandshake v0, unframed tokens

V0_CASES: dict[str, tuple[str, bytes]] = {
    "over the limit, unsent": ("PLAIN", struct.pack(">i", MAX_RECEIVE + 1)),
    "100 MB, unsent": ("PLAIN", struct.pack(">i", 100 << 20) + b"\x00pat"),
    "negative size": ("PLAIN", struct.pack(">i", -1)),
    "most negative size": ("SCRAM-SHA-256", struct.pack(">i", -(2 ** 31))),
    "zero size": ("PLAIN", struct.pack(">i", 0)),
    "zero size scram": ("SCRAM-SHA-256", struct.pack(">i", 0)),
    "garbage": ("PLAIN", struct.pack(">i", 64) + bytes(range(64))),
    "garbage scram": ("SCRAM-SHA-256", struct.pack(">i", 56) + bytes(range(200, 256))),
    "not utf-8 scram": ("SCRAM-SHA-256", struct.pack(">i", 12) + b"n,,n=\xff\xfe,r=ab"),
}


@pytest.mark.parametrize("case", list(V0_CASES))
def test_v0_hostile_unframed_tokens(hostile: Hostile, case: str) -> None:
    mechanism, payload = V0_CASES[case]
    with _v0(hostile, mechanism) as wire:
        wire.send_raw(payload)
        _closed_unanswered(wire, AUTH_TIMEOUT_S / 2)
    _good_clients(hostile)


def test_v0_kafka_request_where_a_token_belongs(hostile: Hostile) -> None:
    """A client that speaks framed SaslAuthenticate after a v0 handshake: its frame is read as
    a raw token, fails, and the connection closes without an answer."""
    with _v0(hostile, "PLAIN") as wire:
        wire.send_raw(wire.encode(36, 2, {"auth_bytes": f"\x00{PLAIN_USER}\x00{PLAIN_PASSWORD}"
                                                        .encode()}))
        _closed_unanswered(wire, AUTH_TIMEOUT_S / 2)
    _good_clients(hostile)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_v0_truncated_then_silent(hostile: Hostile, mechanism: str) -> None:
    with _v0(hostile, mechanism) as wire:
        wire.send_raw(struct.pack(">i", 50) + b"n,,n=mallory")
        _closed_unanswered(wire, AUTH_TIMEOUT_S + 3)
    _good_clients(hostile)


def test_v0_never_ending_token(hostile: Hostile) -> None:
    """A token announced at the limit and dripped a byte every 100 ms: the authentication
    time limit closes it; the drip does not extend it."""
    with _v0(hostile, "PLAIN") as wire:
        wire.send_raw(struct.pack(">i", MAX_RECEIVE))
        started = time.monotonic()
        closed = False
        for _ in range(int((AUTH_TIMEOUT_S + 5) / 0.1)):
            try:
                wire.send_raw(b"x")
            except OSError:
                closed = True
                break
            if wire.is_closed(timeout=0.1):
                closed = True
                break
        assert closed, "a dripped token kept the connection open past the time limit"
        assert time.monotonic() - started < AUTH_TIMEOUT_S + 3
    _good_clients(hostile)


def test_v0_scram_garbage_final_and_a_good_v0_login(hostile: Hostile) -> None:
    with _v0(hostile, "SCRAM-SHA-256") as wire:
        first = b"n,,n=" + USER.encode() + b",r=abcdef"
        wire.send_raw(struct.pack(">i", len(first)) + first)
        assert wire.recv_frame().startswith(b"r=abcdef")  # the raw server-first
        final = b"c=\x00\x01p=!!"
        wire.send_raw(struct.pack(">i", len(final)) + final)
        _closed_unanswered(wire, AUTH_TIMEOUT_S / 2)
    with _v0(hostile, "PLAIN") as wire:  # and the well-formed v0 login works
        plain = f"\x00{PLAIN_USER}\x00{PLAIN_PASSWORD}".encode()
        wire.send_raw(struct.pack(">i", len(plain)) + plain)
        assert wire.recv_frame() == b""
        assert wire.request(3, 12, {"topics": None}).brokers
    _good_clients(hostile)


# ------------------------------------------------------------------ connection floods

FLOOD = 40


@contextlib.contextmanager
def _flood(port: int, source: str, count: int) -> Iterator[list[SourcedWire]]:
    wires: list[SourcedWire] = []
    try:
        for _ in range(count):
            with contextlib.suppress(OSError):
                wires.append(SourcedWire(port, source, timeout=5.0))
        yield wires
    finally:
        for wire in wires:
            wire.close()


def test_flood_past_max_connections_per_ip(hostile: Hostile) -> None:
    """FLOOD connections from an address limited to 3: at most 3 are served, the rest are
    closed at once; another address is served meanwhile; the slots free again afterwards."""
    with _flood(hostile.port, PER_IP_LIMITED, FLOOD) as wires:
        served = [wire for wire in wires if wire.served()]
        assert 1 <= len(served) <= 3, len(served)
        _good_clients(hostile)
    def again() -> bool:
        with SourcedWire(hostile.port, PER_IP_LIMITED) as wire:
            return wire.served()
    wait_until(again, 30, "a connection from the limited address after the flood")


def test_flood_past_an_ip_connection_rate_quota(hostile: Hostile) -> None:
    """connection_creation_rate=1 for one address (AlterClientQuotas): of FLOOD connections
    opened at once most are closed; other addresses are served; removing the quota lifts it."""
    def set_rate(remove: bool) -> None:
        with WireClient("127.0.0.1", hostile.port) as wire:
            response = wire.request(ALTER_QUOTAS, 1, {"entries": [{
                "entity": [{"entity_type": "ip", "entity_name": RATE_LIMITED}],
                "ops": [{"key": "connection_creation_rate", "value": 1.0, "remove": remove}]}],
                "validate_only": False})
            assert [e.error_code for e in response.entries] == [ErrorCode.none]

    set_rate(remove=False)
    try:
        def limited() -> bool:
            with _flood(hostile.port, RATE_LIMITED, 10) as wires:
                return sum(w.served() for w in wires) < 10
        wait_until(limited, 30, "the IP connection rate quota applies")
        with _flood(hostile.port, RATE_LIMITED, FLOOD) as wires:
            served = sum(wire.served() for wire in wires)
            assert served < FLOOD // 2, served
            _good_clients(hostile)
    finally:
        set_rate(remove=True)

    def lifted() -> bool:
        with _flood(hostile.port, RATE_LIMITED, 10) as wires:
            return all(w.served() for w in wires)
    wait_until(lifted, 30, "the removed quota no longer applies")


# ------------------------------------------------ topic mutations with a mutation quota

def _mutator(h: Hostile) -> WireClient:
    wire = WireClient("127.0.0.1", h.port, timeout=30)
    wire.client_id = MUTATION_CLIENT
    return wire


@pytest.fixture(scope="module")
def mutation_quota(hostile: Hostile) -> None:
    with WireClient("127.0.0.1", hostile.port) as wire:
        response = wire.request(ALTER_QUOTAS, 1, {"entries": [{
            "entity": [{"entity_type": "client-id", "entity_name": MUTATION_CLIENT}],
            "ops": [{"key": "controller_mutation_rate", "value": 5.0, "remove": False}]}],
            "validate_only": False})
        assert [e.error_code for e in response.entries] == [ErrorCode.none]


def _topics(h: Hostile) -> set[str]:
    with WireClient("127.0.0.1", h.port) as wire:
        return {t.name for t in wire.request(3, 12, {"topics": None}).topics}


BAD_TOPICS: dict[str, tuple[str, int, int]] = {
    "2^31-1 partitions": ("huge", 2 ** 31 - 1, 1),
    "2001 partitions": ("many", 2001, 1),
    "negative partitions": ("neg", -5, 1),
    "zero partitions": ("zero", 0, 1),
    "replication 32767": ("rf", 1, 32767),
    "replication -7": ("rfneg", 1, -7),
    "10 kB name": ("x" * 10_000, 1, 1),
    "path name": ("../etc", 1, 1),
    "slash name": ("a/b", 1, 1),
}


@pytest.mark.parametrize("version", range(2, 8))
def test_create_topics_bad_counts_and_names(hostile: Hostile, mutation_quota: None,
                                            version: int) -> None:
    run = uuid.uuid4().hex[:6]
    body = {"topics": [{"name": name if len(name) > 20 or "/" in name or ".." in name
                        else f"{name}-{run}", "num_partitions": count,
                        "replication_factor": factor, "assignments": [], "configs": []}
                       for name, count, factor in BAD_TOPICS.values()],
            "timeout_ms": 10_000, "validate_only": False}
    started = time.monotonic()
    with _mutator(hostile) as wire:
        response = wire.request(CREATE_TOPICS, version, body)
    assert time.monotonic() - started < 20
    codes = {case: int(t.error_code) for case, t in zip(BAD_TOPICS, response.topics,
                                                           strict=True)}
    assert all(code != ErrorCode.none for code in codes.values()), codes
    assert codes["2^31-1 partitions"] in (ErrorCode.invalid_partitions,
                                          ErrorCode.throttling_quota_exceeded), codes
    assert codes["10 kB name"] == ErrorCode.invalid_topic_exception
    assert codes["path name"] == ErrorCode.invalid_topic_exception
    assert not {t for t in _topics(hostile) if run in t}
    _good_clients(hostile)


@pytest.mark.parametrize("version", range(0, 4))
def test_create_partitions_bad_counts(hostile: Hostile, mutation_quota: None,
                                      version: int) -> None:
    topic = f"grow-{uuid.uuid4().hex[:6]}"
    with WireClient("127.0.0.1", hostile.port, timeout=30) as wire:
        created = wire.request(CREATE_TOPICS, 7, {"topics": [{
            "name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
            "configs": []}], "timeout_ms": 10_000, "validate_only": False})
        assert created.topics[0].error_code == ErrorCode.none
    for count in (2 ** 31 - 1, -1, 0, 1, 2001):
        started = time.monotonic()
        with _mutator(hostile) as wire:
            response = wire.request(CREATE_PARTITIONS, version, {"topics": [
                {"name": topic, "count": count, "assignments": None}],
                "timeout_ms": 10_000, "validate_only": False})
        assert time.monotonic() - started < 20
        assert response.results[0].error_code in (
            ErrorCode.invalid_partitions, ErrorCode.throttling_quota_exceeded), (count, response)
    with WireClient("127.0.0.1", hostile.port) as wire:
        metadata = wire.request(3, 12, {"topics": [{"name": topic, "topic_id": None}]})
        assert len(metadata.topics[0].partitions) == 1
    _good_clients(hostile)


def _null_name_create_topics(wire: WireClient) -> bytes:
    """CreateTopics v4 (not flexible) for one topic whose name's size is -1 (null), which the
    schema does not allow."""
    frame = wire.encode(CREATE_TOPICS, 4, {"topics": [{
        "name": "NULLNAME", "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": []}], "timeout_ms": 1000, "validate_only": False})
    body = frame[4:]
    marker = struct.pack(">h", 8) + b"NULLNAME"
    assert body.count(marker) == 1
    body = body.replace(marker, struct.pack(">h", -1))
    return struct.pack(">i", len(body)) + body


def test_create_topics_null_name_frame(hostile: Hostile, mutation_quota: None) -> None:
    with _mutator(hostile) as wire:
        wire.send_raw(_null_name_create_topics(wire))
        try:
            response = wire.decode_response(CREATE_TOPICS, 4, wire.recv_frame())
        except ConnectionError:
            response = None  # a frame the schema cannot read: closed, as Kafka does
        if response is not None:
            assert response.topics[0].error_code != ErrorCode.none, response
    _good_clients(hostile)


def test_create_partitions_repeated_topic_answered_once(hostile: Hostile) -> None:
    """Kafka answers a topic named twice in one CreatePartitions once (INVALID_REQUEST): its
    results are a map by name (loglake answered each entry)."""
    with WireClient("127.0.0.1", hostile.port, timeout=30) as wire:
        for version in range(0, 4):
            response = wire.request(CREATE_PARTITIONS, version, {"topics": [
                {"name": "twice", "count": 3, "assignments": None},
                {"name": "twice", "count": 4, "assignments": None}],
                "timeout_ms": 10_000, "validate_only": False})
            assert [(r.name, r.error_code) for r in response.results] == [
                ("twice", ErrorCode.invalid_request)], (version, response)


def test_delete_topics_v6_name_and_id_or_neither(hostile: Hostile) -> None:
    """DeleteTopics v6: an entry with both a name and an id, or neither, is INVALID_REQUEST
    (Kafka 4.0's ControllerApis; loglake answered UNKNOWN_TOPIC_ID and ignored the name); the
    named topic is not deleted."""
    topic = f"keep-{uuid.uuid4().hex[:6]}"
    with WireClient("127.0.0.1", hostile.port, timeout=30) as wire:
        created = wire.request(CREATE_TOPICS, 7, {"topics": [{
            "name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
            "configs": []}], "timeout_ms": 10_000, "validate_only": False})
        topic_id = created.topics[0].topic_id
        response = wire.request(DELETE_TOPICS, 6, {"topics": [
            {"name": topic, "topic_id": topic_id},
            {"name": None, "topic_id": uuid.UUID(int=0)}], "timeout_ms": 10_000})
        assert [r.error_code for r in response.responses] == [ErrorCode.invalid_request] * 2
        assert topic in _topics(hostile)
        by_id = wire.request(DELETE_TOPICS, 6, {"topics": [
            {"name": None, "topic_id": topic_id}], "timeout_ms": 10_000})
        assert [(r.name, r.error_code) for r in by_id.responses] == [(topic, ErrorCode.none)]


# ------------------------------------------------------------- AlterClientQuotas, large

def test_alter_client_quotas_oversized(hostile: Hostile) -> None:
    with WireClient("127.0.0.1", hostile.port, timeout=60) as wire:
        big = wire.request(ALTER_QUOTAS, 1, {"entries": [{
            "entity": [{"entity_type": "ip", "entity_name": "1" * (1 << 20)}],
            "ops": [{"key": "connection_creation_rate", "value": 5.0, "remove": False}]}],
            "validate_only": False})
        assert [e.error_code for e in big.entries] == [ErrorCode.invalid_request]
        many = wire.request(ALTER_QUOTAS, 0, {"entries": [{
            "entity": [{"entity_type": "ip", "entity_name": f"10.9.{i // 256}.{i % 256}"}],
            "ops": [{"key": "connection_creation_rate", "value": 5.0, "remove": False},
                     {"key": "producer_byte_rate", "value": 5.0, "remove": False}]}
            for i in range(2000)], "validate_only": True})
        assert len(many.entries) == 2000
        assert {e.error_code for e in many.entries} == {ErrorCode.invalid_request}
    _good_clients(hostile)


# ------------------------------------------------------------------------------ CLI

def _loglake(*args: str, env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loglake", *args], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL, env=env)


def _one_error_line(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode != 0 and result.stdout == "", result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("loglake: error:"), result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize("args,needle", [
    (["--ip", "localhost", "--add", "connection_creation_rate=5"], "localhost"),
    (["--ip", "1.2.3.4", "--add", "connection_creation_rate=abc"], "abc"),
    (["--ip", "1.2.3.4", "--add", "connection_creation_rate=1.5"], "connection_creation_rate"),
    (["--ip", "1.2.3.4", "--add", "producer_byte_rate=5"], "producer_byte_rate"),
    (["--ip", "1.2.3.4", "--user", "u", "--add", "connection_creation_rate=5"], "IP"),
    (["--ip", "", "--add", "connection_creation_rate=5"], "ip"),
    (["--ip", "1.2.3.4", "--add", "connection_creation_rate"], "connection_creation_rate"),
])
def test_quotas_cli_bad_ip_input(hostile: Hostile, args: list[str], needle: str) -> None:
    result = _loglake("quotas", "alter", "--bootstrap-server", hostile.dev.bootstrap_servers,
                      *args)
    _one_error_line(result, needle)


# ----------------------------------------------------------------- HTTP: the console

class LoggedConsole:
    def __init__(self, url: str, admin: tuple[str, str], process: ConsoleProcess) -> None:
        self.url = url
        self.admin = admin
        self.process = process

    def client(self, auth: tuple[str, str] | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.url, auth=auth, timeout=30.0)


@pytest.fixture(scope="module")
def logged_console(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
                   ) -> Iterator[LoggedConsole]:
    """A one-broker SASL_SSL cluster and ``loglake console --basic-auth`` (plain HTTP)."""
    data = tmp_path_factory.mktemp("hostile-console")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    security="sasl_ssl") as dev:
        props = read_properties(str(dev.client_properties))
        process = ConsoleProcess(dev.zookeeper_connect, data / "console", extra_args=(
            "--basic-auth", "--command-config", str(dev.client_properties)))
        with process:
            yield LoggedConsole(process.url, (props["sasl.username"], props["sasl.password"]),
                                process)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


HOSTILE_AUTHORIZATION: dict[str, bytes] = {
    "scheme only": b"Basic",
    "bearer": b"Bearer abc.def.ghi",
    "not base64": b"Basic %%%%",
    "base64 without colon": f"Basic {_b64(b'nocolon')}".encode(),
    "empty user": f"Basic {_b64(b':pw')}".encode(),
    "non-utf-8 user": f"Basic {_b64(bytes([0xff, 0xfe]) + b':pw')}".encode(),
    "non-utf-8 password": f"Basic {_b64(b'admin:' + bytes([0xc3, 0x28]))}".encode(),
    "nul bytes": b"Basic " + _b64(b"ad\x00min:p\x00w").encode(),
    "latin-1 header bytes": b"Basic \xe9\xe9\xe9",
    "10 kB user": f"Basic {_b64(b'u' * 10_000 + b':pw')}".encode(),
    "two schemes": f"Basic {_b64(b'a:b')}, Basic {_b64(b'c:d')}".encode(),
    "lower-case scheme, wrong password": f"basic {_b64(b'admin:nope')}".encode(),
}


def _no_traceback(response: Any) -> None:
    assert "Traceback" not in response.text and "File \"" not in response.text, response.text


def test_console_hostile_authorization_headers(logged_console: LoggedConsole) -> None:
    for name, header in HOSTILE_AUTHORIZATION.items():
        with httpx.Client(base_url=logged_console.url, timeout=30.0) as http:
            got = http.get("/topics", headers=[(b"Authorization", header)])
        assert got.status_code in (400, 401, 429), (name, got.status_code, got.text[:200])
        assert got.text.strip(), name  # a message, not an empty body
        _no_traceback(got)
    with logged_console.client(logged_console.admin) as http:
        assert http.get("/topics").status_code == 200


@pytest.mark.parametrize("size", [16 * 1024, 100 * 1024, 1024 * 1024])
def test_console_huge_headers(logged_console: LoggedConsole, size: int) -> None:
    """A huge Authorization header or cookie: a 4xx or a closed connection, never a 5xx; the
    console keeps serving."""
    with httpx.Client(base_url=logged_console.url, timeout=30.0) as http:
        for headers in ({"Authorization": "Basic " + "A" * size}, {"Cookie": "c=" + "x" * size}):
            try:
                got = http.get("/topics", headers=headers)
            except httpx.HTTPError:
                continue  # the server closed the connection: acceptable for a huge header
            assert 400 <= got.status_code < 500, (got.status_code, got.text[:200])
            _no_traceback(got)
    with logged_console.client(logged_console.admin) as http:
        assert http.get("/healthz").text == "ok"
        assert http.get("/topics").status_code == 200


QUOTA_FORMS: dict[str, dict[str, str]] = {
    "nothing": {},
    "no entity": {"key": "producer_byte_rate", "value": "5"},
    "unknown key": {"user": "u", "key": "no.such.key", "value": "5"},
    "ip key on a user": {"user": "u", "key": "connection_creation_rate", "value": "5"},
    "nan": {"user": "u", "key": "producer_byte_rate", "value": "nan"},
    "inf": {"user": "u", "key": "producer_byte_rate", "value": "1e400"},
    "negative": {"user": "u", "key": "producer_byte_rate", "value": "-1"},
    "fractional byte rate": {"user": "u", "key": "producer_byte_rate", "value": "1.5"},
    "huge byte rate": {"user": "u", "key": "producer_byte_rate", "value": "1e30"},
    "10 kB user": {"user": "u" * 10_000, "key": "producer_byte_rate", "value": "5"},
    "10 kB value": {"user": "u", "key": "producer_byte_rate", "value": "9" * 10_000},
    "unicode user": {"user": "\u00fc\u2603\U0001f600", "key": "producer_byte_rate",
                     "value": "abc"},
}

ABORT_FORMS: dict[str, dict[str, str]] = {
    "nothing": {},
    "no partition": {"topic": "t", "producer_id": "1", "producer_epoch": "0"},
    "negative partition": {"topic": "t", "partition": "-1", "producer_id": "1",
                           "producer_epoch": "0"},
    "partition over INT32": {"topic": "t", "partition": str(2 ** 31), "producer_id": "1",
                             "producer_epoch": "0"},
    "epoch over INT16": {"topic": "t", "partition": "0", "producer_id": "1",
                         "producer_epoch": "40000"},
    "producer id text": {"topic": "t", "partition": "0", "producer_id": "x1",
                         "producer_epoch": "0"},
    "10 kB topic": {"topic": "t" * 10_000, "partition": "0", "producer_id": "1",
                    "producer_epoch": "0"},
    "unknown topic": {"topic": f"nope-{uuid.uuid4().hex[:6]}", "partition": "0",
                      "producer_id": "1", "producer_epoch": "0"},
    "topic with slash": {"topic": "a/../b", "partition": "0", "producer_id": "1",
                         "producer_epoch": "0"},
}


@pytest.mark.parametrize("form", list(QUOTA_FORMS))
def test_console_quota_form_hostile(logged_console: LoggedConsole, form: str) -> None:
    with logged_console.client(logged_console.admin) as http:
        got = http.post("/actions/quotas/alter", data=QUOTA_FORMS[form],
                        headers={"HX-Request": "true"})
        assert 400 <= got.status_code < 500, (form, got.status_code, got.text[:300])
        assert got.text.strip()
        _no_traceback(got)
        assert http.get("/healthz").text == "ok"


@pytest.mark.parametrize("form", list(ABORT_FORMS))
def test_console_abort_form_hostile(logged_console: LoggedConsole, form: str) -> None:
    with logged_console.client(logged_console.admin) as http:
        got = http.post("/transactions/abort", data=ABORT_FORMS[form],
                        headers={"HX-Request": "true"})
        assert 400 <= got.status_code < 500, (form, got.status_code, got.text[:300])
        assert got.text.strip()
        _no_traceback(got)


def test_console_form_bodies_hostile(logged_console: LoggedConsole) -> None:
    """Bodies no browser sends: a 2 MB field, 100 fields, a file upload, a broken multipart
    body, a JSON body -- 4xx each."""
    with logged_console.client(logged_console.admin) as http:
        for path in ("/actions/quotas/alter", "/transactions/abort"):
            cases: list[dict[str, Any]] = [
                {"data": {"user": "u", "key": "producer_byte_rate", "value": "1" * (2 << 20)}},
                {"data": {f"f{i}": "x" for i in range(100)}},
                {"files": {"user": ("x.bin", b"\x00" * 1000)}},
                {"content": b"--b\r\nbroken", "headers": {
                    "Content-Type": "multipart/form-data; boundary=b"}},
                {"content": b'{"user": "u"}', "headers": {"Content-Type": "application/json"}},
                {"content": b"user=%ff%fe&key=%zz", "headers": {
                    "Content-Type": "application/x-www-form-urlencoded"}},
            ]
            for case in cases:
                got = http.post(path, **case)
                assert 400 <= got.status_code < 500, (path, got.status_code, got.text[:300])
                _no_traceback(got)
        assert http.get("/healthz").text == "ok"


@pytest.mark.parametrize("subject", [
    "/", "%2F", "a%2Fb", "..", "%2e%2e", "\u00fc\u2603\U0001f600", "x" * 10_000, "%00",
    "a b", "%ff%fe", "<script>alert(1)</script>",
])
def test_console_schemas_odd_subjects(logged_console: LoggedConsole, subject: str) -> None:
    with logged_console.client(logged_console.admin) as http:
        for suffix in ("", "?version=abc", "?version=-1", f"?version={2 ** 63}"):
            got = http.get(f"/schemas/subjects/{subject}{suffix}")
            assert got.status_code in (200, 400, 404, 414, 431), (subject[:40], suffix,
                                                                  got.status_code)
            _no_traceback(got)
            assert "<script>alert(1)</script>" not in got.text
        assert http.get("/schemas").status_code == 200


@pytest.mark.parametrize("args,needle", [
    (["--zookeeper.acl", "bogus"], "secure or unsecure"),
    (["--zookeeper.acl", "secure", "--max-znodes", "-5"], "--max-znodes"),
    (["--zookeeper.acl", "secure", "--jaas-file", "/nonexistent/jaas.conf"], "JAAS"),
    (["--zookeeper.acl", "secure", "--zookeeper.connect", "127.0.0.1:1"], ""),
])
def test_zookeeper_migration_cli_bad_input(args: list[str], needle: str) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LOGLAKE_ZOOKEEPER")}
    env["LOGLAKE_ZOOKEEPER"] = "127.0.0.1:1"
    _one_error_line(_loglake("zookeeper-security-migration", *args, env=env), needle)
