"""Kafka's connection limits on a real broker process, probed with real sockets.

Broker ``limits`` (one process), listeners: PLAINTEXT (``{port}``, inter-broker), LIMITED
(``+100``, ``listener.name.limited.max.connections=2``) and RATED (``+200``,
``listener.name.rated.max.connection.creation.rate=2``), with ``max.connections.per.ip=40``,
``max.connections.per.ip.overrides=127.0.0.2:3`` and ``quota.window.num=2`` (so a burst of
connections is throttled after ~2, not after Kafka's default 20). Clients pick their source
address inside 127.0.0.0/8 to be a different "IP".

Broker ``wide`` (one process), ``max.connections=4``, listeners PLAINTEXT (inter-broker, so
protected) and EXTERNAL (``+100``).

Each check: the refused or waiting connection, and that the others (and other listeners) are
served meanwhile.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import pytest

from loglake.dev.harness import DevCluster, wait_until
from tests.wire import WireClient

LIMITED, RATED, EXTERNAL = 100, 200, 100


class SourcedWire(WireClient):
    """A WireClient whose socket is bound to a chosen loopback source address."""

    def __init__(self, port: int, source: str = "127.0.0.1", timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                             source_address=(source, 0))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation_id = 0


@pytest.fixture(scope="module")
def limits(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
           ) -> Iterator[DevCluster]:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:{port},LIMITED://127.0.0.1:{port:1},"
                     "RATED://127.0.0.1:{port:2}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,LIMITED:PLAINTEXT,"
                                          "RATED:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.name.limited.max.connections": "2",
        "listener.name.rated.max.connection.creation.rate": "2",
        "max.connections.per.ip": "40",
        "max.connections.per.ip.overrides": "127.0.0.2:3",
        "quota.window.num": "2",
        "quota.window.size.seconds": "1",
    }
    data = tmp_path_factory.mktemp("limits")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as dev:
        yield dev


@contextlib.contextmanager
def _open(port: int, count: int, source: str = "127.0.0.1", timeout: float = 10.0
          ) -> Iterator[list[SourcedWire]]:
    wires: list[SourcedWire] = []
    try:
        for _ in range(count):
            wires.append(SourcedWire(port, source, timeout))
        yield wires
    finally:
        for wire in wires:
            wire.close()


def test_per_ip_override_closes_the_connection_over_the_limit(limits: DevCluster) -> None:
    port = limits.broker_port(1)
    with _open(port, 3, "127.0.0.2") as wires:
        assert all(wire.served() for wire in wires)
        with _open(port, 1, "127.0.0.2") as (extra,):
            assert extra.is_closed(timeout=10)  # closed at once, never served
        assert all(wire.served() for wire in wires)  # the others keep working
        with _open(port, 1, "127.0.0.5") as (other_ip,):  # another IP is not affected
            assert other_ip.served()
        wires[0].close()

        def slot_freed() -> bool:
            with _open(port, 1, "127.0.0.2") as (again,):
                return again.served()

        wait_until(slot_freed, 20, "a connection once one of the three closed")


def test_per_ip_default_counts_every_listener(limits: DevCluster) -> None:
    """max.connections.per.ip=40 over all listeners: 2 on LIMITED + 38 on PLAINTEXT fill it,
    the 41st (on PLAINTEXT) is closed at once."""
    port = limits.broker_port(1)
    with _open(port + LIMITED, 2, "127.0.0.3") as limited, _open(port, 38, "127.0.0.3") as plain:
        assert limited[-1].served() and plain[0].served() and plain[-1].served()
        with _open(port, 1, "127.0.0.3") as (over,):
            assert over.is_closed(timeout=10)
        assert plain[-1].served()


def test_listener_max_connections_blocks_accepts_until_one_closes(limits: DevCluster) -> None:
    port = limits.broker_port(1) + LIMITED
    with _open(port, 2, "127.0.0.6") as wires:
        assert all(wire.served() for wire in wires)
        with _open(port, 1, "127.0.0.6", timeout=2.0) as (waiting,):
            # TCP connects (the kernel's backlog), but the broker does not accept it yet
            assert not waiting.served()
            assert not waiting.is_closed(timeout=1.0)
            with _open(limits.broker_port(1), 1, "127.0.0.6") as (plain,):
                assert plain.served()  # other listeners keep accepting
            wires[0].close()
            waiting.sock.settimeout(20)
            # its ApiVersions was sent while waiting: the answer arrives once accepted
            size = int.from_bytes(waiting._read(4), "big")
            assert size > 0
            waiting._read(size)
            assert waiting.served()


def test_listener_creation_rate_delays_accepts(limits: DevCluster) -> None:
    """12 connections at 2/s after a burst of 2: about 5 s; the unlimited listener: fast."""
    def connect_all(port: int) -> float:
        started = time.monotonic()
        with _open(port, 12, "127.0.0.7", timeout=30) as wires:
            assert all(wire.served() for wire in wires)
        return time.monotonic() - started

    unlimited = connect_all(limits.broker_port(1))
    rated = connect_all(limits.broker_port(1) + RATED)
    assert rated >= 3.0, (rated, unlimited)
    assert rated < 30
    assert unlimited < rated


def test_ip_connection_rate_quota_closes_new_connections(limits: DevCluster) -> None:
    """KIP-612: an ip entity's connection_creation_rate (set with AlterClientQuotas) closes
    connections from that IP over the rate; other IPs are served; removing it lifts it."""
    port = limits.broker_port(1)

    def alter(remove: bool) -> None:
        with WireClient("127.0.0.1", port) as admin:
            response = admin.request(49, 1, {"entries": [{
                "entity": [{"entity_type": "ip", "entity_name": "127.0.0.8"}],
                "ops": [{"key": "connection_creation_rate", "value": 1.0,
                         "remove": remove}]}], "validate_only": False})
            assert [entry.error_code for entry in response.entries] == [0], response

    alter(remove=False)
    try:
        def throttled() -> bool:
            refused = 0
            with _open(port, 8, "127.0.0.8", timeout=3) as wires:
                refused = sum(not wire.served() for wire in wires)
            return refused >= 4

        wait_until(throttled, 30, "connections from 127.0.0.8 refused by its rate quota")
        with _open(port, 3, "127.0.0.9") as others:
            assert all(wire.served() for wire in others)
    finally:
        alter(remove=True)

    def lifted() -> bool:
        with _open(port, 8, "127.0.0.8", timeout=5) as wires:
            return all(wire.served() for wire in wires)

    wait_until(lifted, 30, "the quota removed: every connection served")


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
         ) -> Iterator[DevCluster]:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:{port},EXTERNAL://127.0.0.1:{port:1}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "max.connections": "4",
    }
    data = tmp_path_factory.mktemp("wide")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as dev:
        yield dev


def test_max_connections_blocks_and_the_inter_broker_listener_is_protected(
        wide: DevCluster) -> None:
    external = wide.broker_port(1) + EXTERNAL
    with _open(external, 4) as wires:
        assert all(wire.served() for wire in wires)
        with _open(external, 1, timeout=2.0) as (waiting,):
            assert not waiting.served()  # broker-wide limit: not accepted
            for wire in wires[1:]:
                wire.served()  # wires[0] is now the least recently active
            with _open(wide.broker_port(1), 1) as (inter,):
                assert inter.served()  # the protected listener is still served ...
                assert wires[0].is_closed(timeout=10)  # ... and the least active is closed
                assert all(wire.served() for wire in wires[1:])
                assert not waiting.served()  # still 4 open: it keeps waiting
            waiting.sock.settimeout(20)
            size = int.from_bytes(waiting._read(4), "big")  # accepted once `inter` closed
            waiting._read(size)
            assert waiting.served()


# ---------------------------------------------------------------- the decisions, in process
def test_quota_decisions_in_process() -> None:
    from loglake.broker.connection_quotas import (
        ConnectionLimits,
        ConnectionQuotas,
        ConnectionThrottled,
        TooManyConnections,
    )

    now = [0]
    limits = ConnectionLimits(max_connections=2, listener_max_connections={"EXT": 5},
                              max_connections_per_ip=10, per_ip_overrides={"10.0.0.1": 1},
                              max_connection_creation_rate=2, protected_listener="INTERNAL",
                              window_ms=1000, samples=2)
    quotas = ConnectionQuotas(limits, ip_rate=lambda ip: 1.0 if ip == "10.0.0.9" else None,
                              clock_ms=lambda: now[0])
    first = quotas.admit("EXT", "::ffff:10.0.0.1")  # IPv4-mapped: the same IP
    with pytest.raises(TooManyConnections):
        quotas.admit("EXT", "10.0.0.1")
    assert quotas.per_ip == {"10.0.0.1": 1} and quotas.total == 1
    second = quotas.admit("EXT", "10.0.0.2")
    assert not quotas.slot_available("EXT")  # broker-wide limit
    assert quotas.slot_available("INTERNAL")  # protected
    second.close = lambda: None
    third = quotas.admit("INTERNAL", "10.0.0.3")
    first.close = lambda: None
    first.last_active = 0.0
    assert quotas.close_excess() == 1 and first.close is None  # the least active EXT one
    for slot in (first, second, third):
        slot.release()
        slot.release()  # once only
    assert quotas.total == 0 and quotas.per_ip == {} and quotas.slot_available("EXT")
    # broker-wide creation rate 2/s over 2 windows of 1 s: the burst allowance is 2
    assert [quotas.creation_throttle_ms("EXT") for _ in range(2)] == [0, 0]
    assert quotas.creation_throttle_ms("EXT") > 0
    assert quotas.creation_throttle_ms("INTERNAL") == 0  # protected: broker rate not applied
    # the IP quota: 1/s with a burst of 1, refused connections count too
    quotas.admit("EXT", "10.0.0.9").release()
    with pytest.raises(ConnectionThrottled) as refused:
        quotas.admit("EXT", "10.0.0.9")
    assert 0 < refused.value.throttle_ms <= 1000
    assert quotas.total == 0
