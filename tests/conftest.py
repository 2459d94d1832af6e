"""Shared fixtures: one real dev cluster (ZooKeeper + broker processes) per test session.

Tests that need faults (kill, restart) or special broker settings start their own cluster with
:class:`loglake.dev.harness.DevCluster`; everything else shares ``cluster`` and uses unique topic
names (``topic_name`` fixture).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from loglake.dev.harness import DevCluster

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


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
