"""Shared fixtures: one real dev cluster (ZooKeeper + broker processes) per test session.

Tests that need faults (kill, restart) or special broker settings start their own cluster with
:class:`loglake.dev.harness.DevCluster`; everything else shares ``cluster`` and uses unique topic
names (``topic_name`` fixture).
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from loglake.dev.harness import DevCluster

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# tools resolve addresses from the environment and the `loglake dev up` profile
# (loglake/addresses.py): tests never read or write the real home's profile, nor inherit a
# developer's LOGLAKE_ZOOKEEPER / LOGLAKE_BOOTSTRAP_SERVERS
_CONFIG_DIR = tempfile.TemporaryDirectory(prefix="loglake-test-config-")
os.environ["LOGLAKE_CONFIG_DIR"] = _CONFIG_DIR.name
for _variable in ("LOGLAKE_ZOOKEEPER", "LOGLAKE_BOOTSTRAP_SERVERS"):
    os.environ.pop(_variable, None)

# fixtures of the loopback S3 endpoint (s3_server) and the one SparkSession (spark)
pytest_plugins = ["tests.s3_server", "tests.spark_session"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true",
                     help="also run the long fault-injection tests marked slow (CI does)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: long fault-injection tests; skipped unless "
                            "--run-slow or LOGLAKE_RUN_SLOW=1 (CI runs them)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow") or os.environ.get("LOGLAKE_RUN_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: pass --run-slow (CI does)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("cluster")
    with DevCluster(data / "dev", brokers=1) as dev:
        yield dev


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"{base}-{uuid.uuid4().hex[:8]}"


def data_path(cluster: DevCluster) -> Path:
    return cluster.data_dir
