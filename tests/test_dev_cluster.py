"""loglake.dev.cluster, .cli and .harness with real ZooKeeper and broker processes."""

from __future__ import annotations

import argparse
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kazoo.client import KazooClient

from loglake.dev import cli, cluster, net
from loglake.dev.errors import ClusterStateError, StartupError
from loglake.dev.harness import DevCluster, free_port_block, wait_until


def _run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="loglake")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return int(args.handler(args))


@pytest.fixture
def kazoo() -> Iterator[list[KazooClient]]:
    clients: list[KazooClient] = []
    yield clients
    for client in clients:
        client.stop()
        client.close()


def _connect(clients: list[KazooClient], hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=15)
    clients.append(client)
    return client


# -- without brokers ----------------------------------------------------------------------------


def test_broker_properties_contract(tmp_path: Path) -> None:
    text = cluster.broker_properties(tmp_path, 2, 9093, "127.0.0.1:10092/loglake",
                                     {"num.partitions": "3", "listeners": "PLAINTEXT://x:1"})
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == ["broker.id=2", "listeners=PLAINTEXT://x:1",
                     f"log.dirs={tmp_path}/broker-2/data",
                     "zookeeper.connect=127.0.0.1:10092/loglake",
                     f"remote.log.storage.url={tmp_path}/lake", "num.partitions=3"]


def test_cluster_info_output_lines(tmp_path: Path) -> None:
    info = cluster.ClusterInfo(tmp_path, (9092, 9093), (10092,))
    assert info.summary_lines() == ["bootstrap.servers=127.0.0.1:9092,127.0.0.1:9093",
                                    "zookeeper=127.0.0.1:10092/loglake"]
    assert info.zookeeper_connect == "127.0.0.1:10092/loglake"


def test_write_durably_replaces_atomically(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    cluster.write_durably(target, "one")
    cluster.write_durably(target, "two")
    assert target.read_text() == "two"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["state.json"]


def test_free_port_block_is_free() -> None:
    first = free_port_block(5)
    assert all(net.port_is_free(port) for port in range(first, first + 5))


def test_status_and_down_without_cluster(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nothing-here"
    with pytest.raises(ClusterStateError, match="no dev cluster recorded"):
        cluster.status(missing)
    with pytest.raises(ClusterStateError, match="no dev cluster recorded"):
        cluster.down(missing)
    assert not missing.exists()  # down on a typo does not create directories
    assert _run_cli("dev", "down", "--data", str(missing)) == 1
    err = capsys.readouterr().err
    assert err.startswith("loglake: error: no dev cluster recorded") and err.count("\n") == 1


def test_up_refuses_busy_ports_and_starts_nothing(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind((net.LOOPBACK, 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(StartupError, match=f"ports already in use: {port}"):
            cluster.up(tmp_path / "c", base_port=port, zookeeper_port=free_port_block(1))
        assert not (tmp_path / "c" / cluster.STATE_FILE).exists()
        assert _run_cli("dev", "up", "--data", str(tmp_path / "c"), "--base-port",
                        str(port)) == 1
    err = capsys.readouterr().err
    assert err.startswith("loglake: error: ports already in use") and err.count("\n") == 1


@pytest.mark.parametrize("zookeepers", [1, 3])
def test_failed_broker_start_reports_log_and_cleans_up(tmp_path: Path, zookeepers: int) -> None:
    """ZooKeeper (a single server or an ensemble) comes up, the broker rejects its config."""
    ports = free_port_block(1 + 3 * zookeepers)
    data = tmp_path / "c"
    with pytest.raises(StartupError) as caught:
        cluster.up(data, base_port=ports, zookeeper_port=ports + 1, zookeepers=zookeepers,
                   timeout=60, broker_overrides={"no.such.broker.setting": "1"})
    message = str(caught.value)
    assert "broker 1" in message and "exited during startup" in message
    assert "--- last lines of" in message and str(data / "logs" / "broker-1.log") in message
    assert not (data / cluster.STATE_FILE).exists()
    zk_ports = range(ports + 1, ports + 1 + 3 * zookeepers, 3)
    freed = time.monotonic() + 15  # ZooKeeper was stopped again (its JVM may take a moment)
    while not all(net.port_is_free(port) for port in zk_ports):
        assert time.monotonic() < freed, f"ZooKeeper ports {list(zk_ports)} still in use"
        time.sleep(0.2)
    assert "zookeeper.connect=" + ",".join(f"127.0.0.1:{port}" for port in zk_ports) + \
        "/loglake" in (data / "broker-1" / "server.properties").read_text()
    assert "no.such.broker.setting=1" in (data / "broker-1" / "server.properties").read_text()


# -- end to end ---------------------------------------------------------------------------------


def _running(pid: int) -> bool:
    """The process exists and has not exited (an exited, not yet reaped one is a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_harness_faults_and_persistence(tmp_path: Path, kazoo: list[KazooClient]) -> None:
    data = tmp_path / "cluster"
    with DevCluster(data, brokers=2) as dev:
        assert [(s.role, s.id, s.alive) for s in dev.status()] == [
            ("zookeeper", 1, True), ("broker", 1, True), ("broker", 2, True)]
        assert dev.bootstrap_servers == (f"127.0.0.1:{dev.base_port},"
                                         f"127.0.0.1:{dev.base_port + 1}")
        assert dev.zookeeper_connect == f"127.0.0.1:{dev.zookeeper_port}/loglake"
        state = json.loads((data / cluster.STATE_FILE).read_text())
        assert {entry["role"] for entry in state["processes"]} == {"zookeeper", "broker"}
        assert all(entry["start_time"] > 0 for entry in state["processes"])
        _connect(kazoo, dev.zookeeper_hosts).create("/persisted", b"yes")

        with pytest.raises(ClusterStateError, match="already running"):
            cluster.up(data, base_port=dev.base_port, zookeeper_port=dev.zookeeper_port)

        dev.kill_broker(2)
        assert [s.alive for s in dev.status()] == [True, True, False]
        assert not net.kafka_api_versions_ok(dev.broker_port(2))
        dev.restart_broker(2)
        assert net.kafka_api_versions_ok(dev.broker_port(2))

        dev.pause_broker(1)
        assert dev.status()[1].paused
        assert not net.kafka_api_versions_ok(dev.broker_port(1), timeout=0.5)
        dev.resume_broker(1)
        wait_until(lambda: net.kafka_api_versions_ok(dev.broker_port(1)), 10,
                   "the resumed broker answers ApiVersions")

        dev.pause_broker(2)  # cleanup must handle a paused process
        pids = [s.pid for s in dev.status()]
        assert dev.broker_log(1) != ""
        for client in kazoo:
            client.stop()
    assert not (data / cluster.STATE_FILE).exists()
    # an exited process may wait a moment for its reaper
    wait_until(lambda: not [pid for pid in pids if _running(pid)], 10,
               lambda: f"processes {[pid for pid in pids if _running(pid)]} gone")

    # the data survives down/up
    with DevCluster(data, brokers=1) as again:
        client = _connect(kazoo, again.zookeeper_hosts)
        assert client.get("/persisted")[0] == b"yes"
        assert client.exists("/loglake") is not None


def test_cli_up_status_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "cli")
    first = free_port_block(2, also=(cluster.METRICS_PORT_OFFSET, cluster.CONSOLE_PORT_OFFSET,
                                     cluster.REGISTRY_PORT_OFFSET))
    try:
        assert _run_cli("dev", "up", "--data", data, "--base-port", str(first),
                        "--zookeeper-port", str(first + 1),
                        "--broker-config", "zookeeper.session.timeout.ms=4000") == 0
        metrics_url = f"http://127.0.0.1:{first + cluster.METRICS_PORT_OFFSET}/metrics"
        assert capsys.readouterr().out.splitlines() == [
            f"bootstrap.servers=127.0.0.1:{first}", f"zookeeper=127.0.0.1:{first + 1}/loglake",
            f"metrics={metrics_url}",
            f"console=http://127.0.0.1:{first + cluster.CONSOLE_PORT_OFFSET}/",
            f"schema.registry.url=http://127.0.0.1:{first + cluster.REGISTRY_PORT_OFFSET}"]
        scraped = httpx.get(metrics_url, timeout=10)  # dev up turns metrics on
        assert "kafka_server_brokertopicmetrics_messagesin_total" in scraped.text
        overview = httpx.get(f"http://127.0.0.1:{first + cluster.CONSOLE_PORT_OFFSET}/"
                             "overview/live", timeout=30)  # and starts the console
        assert 'id="broker-1" data-health="healthy"' in overview.text
        assert _run_cli("dev", "kill", "--data", data, "--broker", "1") == 0
        assert _run_cli("dev", "status", "--data", data) == 0
        rows = capsys.readouterr().out.splitlines()
        assert rows[1].split()[0::4] == ["zookeeper", "running"]
        assert rows[2].split()[0::4] == ["broker", "stopped"]
        assert rows[3].split()[0::4] == ["console", "running"]
        assert rows[4].split()[0::4] == ["registry", "running"]  # and the schema registry
        assert _run_cli("dev", "start", "--data", data, "--broker", "1") == 0
        assert _run_cli("dev", "start", "--data", data, "--broker", "1") == 1
        assert "already running" in capsys.readouterr().err
    finally:
        assert _run_cli("dev", "down", "--data", data) == 0
    assert _run_cli("dev", "status", "--data", data) == 1
