"""Connection and authentication metrics (Kafka's socket-server-metrics under Strimzi's names)
against a known number of good, failed and re-authenticated logins on a real broker process.

One broker: PLAINTEXT (``{port}``) and SASL_PLAINTEXT (``+100``, PLAIN users from an inline
JAAS entry, ``connections.max.reauth.ms`` on so a client may re-authenticate),
``max.connections.per.ip.overrides=127.0.0.2:1``, the metrics endpoint on.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from loglake.broker.security.sasl_client import sasl_client_authenticate
from loglake.dev.harness import DevCluster, wait_until
from loglake.errors import SaslAuthenticationError
from tests.test_broker_metrics import Samples, broker_metrics_url, scrape, value
from tests.wire import WireClient

SASL = 100
P = "kafka_server_socket_server_metrics_"


@pytest.fixture(scope="module")
def sasl_metrics(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
                 ) -> Iterator[tuple[DevCluster, str]]:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{port:1}",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required '
            'user_alice="alice-secret";',
        "connections.max.reauth.ms": "600000",
        "connection.failed.authentication.delay.ms": "0",
        "max.connections.per.ip.overrides": "127.0.0.2:1",
        "metrics.listener": "http://127.0.0.1:0",
    }
    data = tmp_path_factory.mktemp("security-metrics")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as dev:
        yield dev, broker_metrics_url(dev)


def _login(wire: WireClient, password: str) -> None:
    async def request(api_key: int, version: int, body: dict[str, Any]) -> Any:
        return wire.request(api_key, version, body)

    asyncio.run(sasl_client_authenticate(request, "PLAIN", "alice", password))


def _delta(before: Samples, after: Samples, name: str, listener: str) -> float:
    labels = {"listener": listener, "networkProcessor": "0"}
    return value(after, P + name, **labels) - value(before, P + name, **labels)


def test_authentication_and_connection_counts(sasl_metrics: tuple[DevCluster, str]) -> None:
    dev, url = sasl_metrics
    port = dev.broker_port(1) + SASL
    before = scrape(url)
    good = [WireClient("127.0.0.1", port) for _ in range(3)]
    for wire in good:
        _login(wire, "alice-secret")
        assert wire.request(3, 12, {"topics": None}).brokers  # served after the login
    _login(good[0], "alice-secret")  # KIP-368 re-authentication on the same connection
    for _ in range(2):
        with WireClient("127.0.0.1", port) as bad, pytest.raises(SaslAuthenticationError):
            _login(bad, "wrong")
    with WireClient("127.0.0.1", dev.broker_port(1)) as plain:
        assert plain.request(18, 3, {"client_software_name": "t",
                                     "client_software_version": "1"}).error_code == 0
        during = scrape(url)
    assert _delta(before, during, "successful_authentication_total", "SASL_PLAINTEXT") == 3
    assert _delta(before, during, "failed_authentication_total", "SASL_PLAINTEXT") == 2
    assert _delta(before, during, "successful_reauthentication_total", "SASL_PLAINTEXT") == 1
    assert _delta(before, during, "failed_reauthentication_total", "SASL_PLAINTEXT") == 0
    assert _delta(before, during, "connection_creation_total", "SASL_PLAINTEXT") == 5
    assert _delta(before, during, "connection_count", "SASL_PLAINTEXT") == 3  # 3 good open
    assert _delta(before, during, "successful_authentication_total", "PLAINTEXT") >= 1
    for wire in good:
        wire.close()

    def all_closed() -> bool:
        after = scrape(url)
        return (_delta(before, after, "connection_close_total", "SASL_PLAINTEXT") == 5
                and _delta(before, after, "connection_count", "SASL_PLAINTEXT") == 0)

    wait_until(all_closed, 20, "the SASL connections counted as closed")


def test_rejected_connections_are_counted(sasl_metrics: tuple[DevCluster, str]) -> None:
    dev, url = sasl_metrics
    before = scrape(url)
    labels = {"listener": "PLAINTEXT", "reason": "max_connections_per_ip"}
    first = socket.create_connection(("127.0.0.1", dev.broker_port(1)), timeout=10,
                                     source_address=("127.0.0.2", 0))
    second = socket.create_connection(("127.0.0.1", dev.broker_port(1)), timeout=10,
                                      source_address=("127.0.0.2", 0))
    try:
        assert second.recv(1) == b""  # over 127.0.0.2's limit of 1: closed at once

        def counted() -> bool:
            after = scrape(url)
            return (value(after, "loglake_connections_rejected_total", **labels)
                    - value(before, "loglake_connections_rejected_total", **labels)) == 1

        wait_until(counted, 20, "the refused connection counted")
    finally:
        first.close()
        second.close()
