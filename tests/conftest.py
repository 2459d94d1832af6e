"""Shared fixtures: one real ZooKeeper and one dev cluster (broker processes) per test session.

- ``zookeeper_hosts`` (session): one ZooKeeper JVM; every cluster started with
  ``DevCluster(..., zookeeper=zookeeper_hosts)`` gets a fresh chroot on it, so clusters never see
  each other's znodes and no test waits for a JVM of its own. Tests that fault ZooKeeper itself
  (stop, kill, pause it) start their own with ``DevCluster(...)`` or ``harness.zookeeper``.
- ``cluster`` (session): one broker on that ZooKeeper; tests share it with unique topic names
  (``topic_name``). Tests that need faults (kill, restart) or special broker settings start
  their own cluster, on the shared ZooKeeper unless they fault ZooKeeper.

Waiting and reading: ``wait_until`` / ``wait_until_async`` (``loglake.dev.harness``) instead of
hand-written deadline loops; ``tests/clients.py`` reads from real clients bounded by count and
time (``consume_messages``, ``read_records``, ``poll_message``) and makes filled topics for group
tests (``topic_with_records``).

Markers (registered here, applied automatically in :func:`pytest_collection_modifyitems`):
``zookeeper`` (the test's module starts ZooKeeper or brokers), ``spark`` (uses the SparkSession),
``s3`` (uses the loopback S3 server), ``slow`` (long fault tests, skipped unless ``--run-slow``).
So ``pytest -m "not spark and not slow"`` is a quick developer run.

Parallel runs (pytest-xdist, ``-n 3 --dist loadgroup`` in CI): session fixtures exist once per
worker. Every test gets an ``xdist_group``: its file (module-scoped clusters start once), or
``spark`` for every file that uses the SparkSession (one Spark JVM for the whole run).
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from loglake.dev.harness import DevCluster, zookeeper

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# tools resolve addresses from the environment and the `loglake dev up` profile
# (loglake/addresses.py): tests never read or write the real home's profile, nor inherit a
# developer's LOGLAKE_ZOOKEEPER / LOGLAKE_BOOTSTRAP_SERVERS, client properties or ZooKeeper
# credentials
_CONFIG_DIR = tempfile.TemporaryDirectory(prefix="loglake-test-config-")
os.environ["LOGLAKE_CONFIG_DIR"] = _CONFIG_DIR.name
for _variable in ("LOGLAKE_ZOOKEEPER", "LOGLAKE_BOOTSTRAP_SERVERS", "LOGLAKE_COMMAND_CONFIG",
                  "LOGLAKE_ZOOKEEPER_SASL_USERNAME", "LOGLAKE_ZOOKEEPER_SASL_PASSWORD",
                  "LOGLAKE_ZOOKEEPER_SASL_JAAS_FILE", "LOGLAKE_ZOOKEEPER_SASL_CLIENTCONFIG"):
    os.environ.pop(_variable, None)

# fixtures of the loopback S3 endpoint (s3_server), the one SparkSession (spark) and the Apache
# Kafka peer (kafka_peer, kafka_jars)
pytest_plugins = ["tests.s3_server", "tests.spark_session", "tests.kafka_peer_plugin"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true",
                     help="also run the long fault-injection tests marked slow (CI does)")


MARKERS = {
    "slow": "long fault-injection tests; skipped unless --run-slow or LOGLAKE_RUN_SLOW=1 "
            "(CI runs them)",
    "zookeeper": "starts real ZooKeeper and/or broker processes (applied automatically)",
    "spark": "uses the session's SparkSession (applied automatically)",
    "s3": "uses the loopback S3 server (applied automatically)",
}

SPARK_GROUP = "spark"
"""xdist group of every file with a Spark test: one worker, one Spark JVM."""

LONGEST_GROUPS_FIRST = (
    SPARK_GROUP, "test_kafka_streams.py", "test_kafka_connect.py", "test_differential_kafka.py",
    "test_java_client.py", "test_replication_matrix.py", "test_group_faults.py",
    "test_replication_faults.py", "test_recovery_no_holes.py", "test_broker_startup_zk.py",
    "test_groups_interop.py", "test_client_groups.py", "test_tool_addresses.py",
    "test_tiering.py", "test_reassignment.py", "test_broker_zookeeper.py", "test_groups_cli.py",
)
"""xdist groups that took longest in CI (about 300 s down to 40 s), handed out first so no long
group starts last on an otherwise idle run (longest-processing-time-first scheduling)."""

_PROCESS_NAMES = ("DevCluster", "zookeeper", "ZooKeeperServer", "cluster", "dev_cluster")
"""Module globals that, when they come from ``loglake.dev``, mean the test module starts
ZooKeeper or brokers itself."""


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


def _uses_processes(item: pytest.Item) -> bool:
    if set(getattr(item, "fixturenames", ())) & {"cluster", "zookeeper_hosts"}:
        return True
    module = getattr(item, "module", None)
    for name in _PROCESS_NAMES:
        value = getattr(module, name, None)
        origin = getattr(value, "__module__", None) or getattr(value, "__name__", "")
        if value is not None and isinstance(origin, str) and origin.startswith("loglake.dev"):
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    spark_files = set()
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "spark" in fixtures:
            item.add_marker(pytest.mark.spark)
            spark_files.add(item.path)
        if "s3_server" in fixtures or "[s3" in item.name:
            item.add_marker(pytest.mark.s3)
        if _uses_processes(item):
            item.add_marker(pytest.mark.zookeeper)
    groups: dict[str, str] = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is None:
            group = SPARK_GROUP if item.path in spark_files else item.path.name
            item.add_marker(pytest.mark.xdist_group(group))
        else:
            group = str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        groups[item.nodeid] = group
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker collects; the first's order rules
        rank = {group: index for index, group in enumerate(LONGEST_GROUPS_FIRST)}
        items.sort(key=lambda item: rank.get(groups[item.nodeid], len(rank)))
    if config.getoption("--run-slow") or os.environ.get("LOGLAKE_RUN_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: pass --run-slow (CI does)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def zookeeper_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Connection string (no chroot) of the session's ZooKeeper; give each cluster its own
    chroot (``DevCluster(..., zookeeper=zookeeper_hosts)`` does)."""
    with zookeeper(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server.hosts


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
            ) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("cluster")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts) as dev:
        yield dev


@pytest.fixture(scope="module")
def group_dev(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
              zookeeper_hosts: str) -> Iterator[DevCluster]:
    """A one-broker cluster per test module for consumer-group tests: no initial rebalance
    delay (``group.initial.rebalance.delay.ms=0``), so a group forms as soon as members join."""
    data = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    with DevCluster(data / "dev", zookeeper=zookeeper_hosts, brokers=1,
                    broker_overrides={"group.initial.rebalance.delay.ms": "0"}) as dev:
        yield dev


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"{base}-{uuid.uuid4().hex[:8]}"


def data_path(cluster: DevCluster) -> Path:
    return cluster.data_dir
