"""One address for every tool: ``loglake dev up`` prints the connect strings tools take and
records them as the current profile; every command then works without address flags
(flag > environment > profile > a one-line error); read-only commands never create znodes and
name the chroot to try when pointed at the wrong one.

The end-to-end part runs the real ``loglake`` command in subprocesses against a dev cluster it
started itself, with ``LOGLAKE_CONFIG_DIR`` pointed at a temporary directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from loglake import addresses
from loglake.addresses import AddressError, Profile
from loglake.dev import cluster
from loglake.dev.net import free_port_block

pytestmark = pytest.mark.timeout(600)

COMMAND_TIMEOUT_S = 180.0
SPARK_COMMAND_TIMEOUT_S = 400.0


# -- precedence (pure) ---------------------------------------------------------------------------


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"LOGLAKE_CONFIG_DIR": str(tmp_path / "config"), **extra}


def _profile(tmp_path: Path, env: dict[str, str]) -> Profile:
    profile = Profile("127.0.0.1:30001/loglake", "127.0.0.1:30000", str(tmp_path / "dev"))
    addresses.write_profile(profile, env)
    return profile


def test_flag_wins_over_environment_and_profile(tmp_path: Path) -> None:
    env = _env(tmp_path, LOGLAKE_ZOOKEEPER="env:1/x", LOGLAKE_BOOTSTRAP_SERVERS="env:2")
    _profile(tmp_path, env)
    assert addresses.resolve("zookeeper", "flag:1/y", env) == addresses.Resolved(
        "flag:1/y", "flag", "--zookeeper")
    assert addresses.bootstrap_servers("flag:2", env) == "flag:2"


def test_environment_wins_over_profile(tmp_path: Path) -> None:
    env = _env(tmp_path, LOGLAKE_ZOOKEEPER="env:1/x")
    profile = _profile(tmp_path, env)
    assert addresses.resolve("zookeeper", None, env).source == "environment"
    assert addresses.zookeeper(None, env) == "env:1/x"
    # each address on its own: no LOGLAKE_BOOTSTRAP_SERVERS, so the profile's
    assert addresses.resolve("bootstrap", None, env) == addresses.Resolved(
        profile.bootstrap_servers, "profile", str(tmp_path / "config" / "current"))


def test_profile_when_nothing_else(tmp_path: Path) -> None:
    env = _env(tmp_path, LOGLAKE_ZOOKEEPER="  ")  # blank counts as unset
    profile = _profile(tmp_path, env)
    assert addresses.zookeeper(None, env) == profile.zookeeper
    assert addresses.bootstrap_servers("", env) == profile.bootstrap_servers


def test_nothing_is_a_one_line_error_saying_how(tmp_path: Path) -> None:
    env = _env(tmp_path)
    with pytest.raises(AddressError) as caught:
        addresses.zookeeper(None, env)
    text = str(caught.value)
    assert "\n" not in text
    assert "--zookeeper" in text and "LOGLAKE_ZOOKEEPER" in text and "loglake dev up" in text
    with pytest.raises(AddressError, match=r"--bootstrap-server.*LOGLAKE_BOOTSTRAP_SERVERS"):
        addresses.bootstrap_servers(None, env)


def test_unreadable_profile_is_an_error_naming_the_file(tmp_path: Path) -> None:
    env = _env(tmp_path)
    path = addresses.profile_path(env)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(AddressError, match=re.escape(str(path))):
        addresses.zookeeper(None, env)
    assert addresses.zookeeper("flag:1", env) == "flag:1"  # not read when not needed


def test_config_dir_locations(tmp_path: Path) -> None:
    assert addresses.config_dir({"LOGLAKE_CONFIG_DIR": "/a", "XDG_CONFIG_HOME": "/b"}) == \
        Path("/a")
    assert addresses.config_dir({"XDG_CONFIG_HOME": "/b", "HOME": "/h"}) == Path("/b/loglake")
    assert addresses.config_dir({"HOME": "/h"}) == Path("/h/.config/loglake")


def test_clear_profile_only_for_its_own_cluster(tmp_path: Path) -> None:
    env = _env(tmp_path)
    profile = _profile(tmp_path, env)
    assert not addresses.clear_profile(tmp_path / "other", env)
    assert addresses.read_profile(env) == profile
    assert addresses.clear_profile(tmp_path / "dev", env)
    assert addresses.read_profile(env) is None
    assert not addresses.clear_profile(tmp_path / "dev", env)


# -- end to end: the real command against a dev cluster it started --------------------------------


@dataclass(frozen=True)
class Tools:
    """Runs ``loglake`` like a user's shell would after ``loglake dev up``."""

    data: Path
    config: Path
    zookeeper: str
    bootstrap: str
    zookeeper_hosts: str

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in (addresses.ZOOKEEPER_ENV, addresses.BOOTSTRAP_ENV)}
        return {**env, addresses.CONFIG_DIR_ENV: str(self.config), **extra}

    def run(self, *argv: str, stdin: str = "", timeout: float = COMMAND_TIMEOUT_S,
            **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "loglake", *argv], input=stdin,
                              capture_output=True, text=True, timeout=timeout,
                              env=self.env(**env), check=False)

    def ok(self, *argv: str, stdin: str = "", timeout: float = COMMAND_TIMEOUT_S,
           **env: str) -> str:
        done = self.run(*argv, stdin=stdin, timeout=timeout, **env)
        assert done.returncode == 0, f"loglake {' '.join(argv)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tools]:
    root = tmp_path_factory.mktemp("tool-addresses")
    data, config = root / "dev", root / "config"
    first = free_port_block(2)
    starter = Tools(data, config, "", "", "")
    up = starter.run("dev", "up", "--data", str(data), "--base-port", str(first),
                     "--zookeeper-port", str(first + 1),
                     "--broker-config", "zookeeper.session.timeout.ms=6000",
                     "--no-metrics", "--no-console", "--no-registry")  # (ports not reserved)
    try:
        assert up.returncode == 0, up.stderr
        printed = dict(line.split("=", 1) for line in up.stdout.splitlines())
        assert printed == {"bootstrap.servers": f"127.0.0.1:{first}",
                           "zookeeper": f"127.0.0.1:{first + 1}/loglake"}
        yield Tools(data, config, printed["zookeeper"], printed["bootstrap.servers"],
                    f"127.0.0.1:{first + 1}")
    finally:
        down = starter.run("dev", "down", "--data", str(data))
        if down.returncode != 0 and (data / cluster.STATE_FILE).exists():
            cluster.down(data)  # stop what `up` recorded, whatever the CLI said
        assert down.returncode == 0, down.stderr
        assert not (config / addresses.PROFILE_FILE).exists()  # down cleared its profile


def _root_children(hosts: str) -> set[str]:
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=20)
    try:
        return set(client.get_children("/"))
    finally:
        client.stop()
        client.close()


def test_every_tool_works_without_address_flags(tools: Tools) -> None:
    profile = addresses.read_profile({addresses.CONFIG_DIR_ENV: str(tools.config)})
    assert profile == Profile(tools.zookeeper, tools.bootstrap, str(tools.data))
    status = tools.ok("dev", "status", "--data", str(tools.data))
    assert f"zookeeper={tools.zookeeper}" in status.splitlines()

    tools.ok("topics", "create", "t1", "--partitions", "2")
    tools.ok("produce", "t1", stdin="a\nb\nc\n")
    assert "t1" in tools.ok("topics", "list").split()
    consumed = tools.ok("consume", "t1", "--group", "g1", "--from-beginning",
                        "--max-messages", "3")
    assert sorted(consumed.split()) == ["a", "b", "c"]
    assert "g1" in tools.ok("groups", "list").split()
    assert "Topic: t1\tPartition: 1" in tools.ok("tiering", "status", "t1")
    tools.ok("compact", "--dry-run")
    rows = tools.ok("sql", "SELECT count(*) AS n FROM t1", "--format", "csv",
                    timeout=SPARK_COMMAND_TIMEOUT_S)
    assert rows.splitlines() == ["n", "3"]


def test_every_tool_works_with_the_printed_addresses(tools: Tools, tmp_path: Path) -> None:
    empty = str(tmp_path / "no-profile")  # no profile: only the flags can say where
    zk, bootstrap = ("--zookeeper", tools.zookeeper), ("--bootstrap-server", tools.bootstrap)
    tools.ok("topics", "create", "t2", *bootstrap, LOGLAKE_CONFIG_DIR=empty)
    assert "t2" in tools.ok("topics", "list", *bootstrap, LOGLAKE_CONFIG_DIR=empty).split()
    tools.ok("groups", "list", *bootstrap, LOGLAKE_CONFIG_DIR=empty)
    assert "Topic: t2" in tools.ok("tiering", "status", "t2", *zk, LOGLAKE_CONFIG_DIR=empty)
    tools.ok("compact", "--dry-run", *zk, LOGLAKE_CONFIG_DIR=empty)
    # and from the environment
    assert "t2" in tools.ok("topics", "list", LOGLAKE_CONFIG_DIR=empty,
                            LOGLAKE_BOOTSTRAP_SERVERS=tools.bootstrap).split()
    tools.ok("tiering", "status", LOGLAKE_CONFIG_DIR=empty, LOGLAKE_ZOOKEEPER=tools.zookeeper)


def test_no_address_anywhere_is_one_line(tools: Tools, tmp_path: Path) -> None:
    empty = str(tmp_path / "no-profile")
    for argv, flag in ((("topics", "list"), "--bootstrap-server"),
                       (("groups", "list"), "--bootstrap-server"),
                       (("tiering", "status"), "--zookeeper"),
                       (("compact", "--dry-run"), "--zookeeper"),
                       (("sql", "SELECT 1"), "--zookeeper")):
        done = tools.run(*argv, LOGLAKE_CONFIG_DIR=empty)
        assert done.returncode == 1, done
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("loglake: error: no ")
        assert flag in done.stderr and "loglake dev up" in done.stderr


def test_wrong_chroot_names_the_right_one_and_creates_nothing(tools: Tools) -> None:
    before = _root_children(tools.zookeeper_hosts)
    assert before == {"loglake", "zookeeper"}
    for connect in (tools.zookeeper_hosts, tools.zookeeper_hosts + "/elsewhere"):
        for argv in (("tiering", "status", "t1"), ("compact", "--dry-run"),
                     ("retention", "--dry-run"), ("sql", "SELECT count(*) FROM t1")):
            done = tools.run(*argv, "--zookeeper", connect)
            assert done.returncode == 1, done
            assert done.stderr.count("\n") == 1, done.stderr
            assert f"did you mean {tools.zookeeper}?" in done.stderr, done.stderr
    assert _root_children(tools.zookeeper_hosts) == before
