"""loglake.dev.zookeeper: a real ZooKeeper JVM, reached with kazoo."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from loglake.dev import net, process
from loglake.dev.errors import MissingDependencyError, StartupError
from loglake.dev.harness import free_port_block, zookeeper
from loglake.dev.zookeeper import CLASSPATH_ENV, ZooKeeperServer, ensemble_peers


def _client(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=15)
    return client


@pytest.fixture
def servers() -> Iterator[list[ZooKeeperServer]]:
    """ZooKeeper servers a test started; stopped (only those) afterwards."""
    started: list[ZooKeeperServer] = []
    yield started
    for server in started:
        server.kill()


def test_start_write_stop_restart_keeps_data(tmp_path: Path,
                                             servers: list[ZooKeeperServer]) -> None:
    port = free_port_block(1)
    server = ZooKeeperServer(tmp_path / "zk", client_port=port)
    servers.append(server)
    server.start(timeout=30)
    handle = server.handle
    assert handle is not None and process.is_alive(handle)
    assert net.four_letter_word(port, "ruok") == "imok"

    client = _client(server.hosts)
    try:
        client.create("/loglake/probe", b"hello", makepath=True)
        assert client.get("/loglake/probe")[0] == b"hello"
    finally:
        client.stop()
        client.close()

    server.stop(grace=10)
    assert server.handle is None and not process.is_alive(handle)
    assert not net.zookeeper_is_serving(port)

    again = ZooKeeperServer(tmp_path / "zk", client_port=port)
    servers.append(again)
    again.start(timeout=30)
    client = _client(again.hosts)
    try:
        assert client.get("/loglake/probe")[0] == b"hello"
    finally:
        client.stop()
        client.close()
    again.stop()
    assert "tickTime=2000" in (tmp_path / "zk" / "conf" / "zoo.cfg").read_text()
    assert "4lw.commands.whitelist=ruok,stat,srvr" in again.config_text()
    assert (tmp_path / "zk" / "zookeeper.log").stat().st_size > 0  # our log4j config works


def test_harness_zookeeper_context_manager(tmp_path: Path) -> None:
    with zookeeper(tmp_path / "zk") as server:
        handle = server.handle
        assert handle is not None
        assert net.zookeeper_is_serving(server.client_port)
    assert not process.is_alive(handle)


def test_missing_jars_give_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    missing = tmp_path / "no-such-dir" / "zookeeper.jar"
    monkeypatch.setenv(CLASSPATH_ENV, str(missing))
    server = ZooKeeperServer(tmp_path / "zk", client_port=free_port_block(1))
    with pytest.raises(MissingDependencyError) as caught:
        server.start(timeout=5)
    line = caught.value.one_line()
    assert "\n" not in line
    assert str(missing) in line and "apt-get install zookeeper" in line
    assert server.handle is None and not (tmp_path / "zk").exists()


def test_missing_java_gives_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    with pytest.raises(MissingDependencyError, match="default-jre-headless"):
        ZooKeeperServer(tmp_path / "zk", client_port=free_port_block(1)).start(timeout=5)
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingDependencyError, match="java not found on PATH"):
        ZooKeeperServer(tmp_path / "zk", client_port=free_port_block(1)).start(timeout=5)


def test_refuses_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind((net.LOOPBACK, 0))
        sock.listen()
        port = sock.getsockname()[1]
        server = ZooKeeperServer(tmp_path / "zk", client_port=port)
        with pytest.raises(StartupError, match=f"port {port} is in use"):
            server.start(timeout=5)
        assert server.handle is None


def test_early_exit_reports_the_log_tail(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zk", client_port=free_port_block(1),
                             jvm_options=["-XX:+NoSuchJvmOption"])
    with pytest.raises(StartupError) as caught:
        server.start(timeout=30)
    assert "exited during startup with exit code 1" in str(caught.value)
    assert "NoSuchJvmOption" in str(caught.value)  # the JVM's complaint, from the log tail
    line = caught.value.one_line()
    assert "\n" not in line and str(tmp_path / "zk" / "zookeeper.log") in line
    assert server.handle is None


def test_three_node_ensemble(tmp_path: Path, servers: list[ZooKeeperServer]) -> None:
    peers = ensemble_peers(free_port_block(9), 3)
    for peer in peers:
        server = ZooKeeperServer(tmp_path / f"zk{peer.server_id}", client_port=peer.client_port,
                                 server_id=peer.server_id, peers=peers)
        servers.append(server)
        server.start(wait=False)
    for server in servers:
        server.wait_until_serving(timeout=60)
    assert (tmp_path / "zk2" / "data" / "myid").read_text() == "2\n"
    modes = sorted(
        (net.four_letter_word(peer.client_port, "srvr") or "").split("Mode: ")[1].split()[0]
        for peer in peers)
    assert modes == ["follower", "follower", "leader"]

    writer, reader = _client(servers[0].hosts), _client(servers[2].hosts)
    try:
        writer.create("/replicated", b"x")
        reader.sync("/replicated")
        assert reader.get("/replicated")[0] == b"x"
    finally:
        for client in (writer, reader):
            client.stop()
            client.close()

    servers[0].stop()  # quorum of two survives
    client = _client(",".join(server.hosts for server in servers[1:]))
    try:
        assert client.get("/replicated")[0] == b"x"
    finally:
        client.stop()
        client.close()
