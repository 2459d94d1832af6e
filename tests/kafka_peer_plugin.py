"""Pytest plugin: the Apache Kafka peer (``loglake.dev.kafka_peer``) as fixtures.

- ``kafka_peer`` (session): a 3-broker Apache Kafka 3.9 cluster on the session's ZooKeeper
  (``zookeeper_hosts``) under its own chroot; ``kafka_peer.bootstrap_servers``,
  ``kafka_peer.create_topic(...)``. Tests share it with unique topic names (``topic_name``),
  like the ``cluster`` fixture; tests that kill or restart Kafka brokers start their own
  ``KafkaPeer(tmp_path / "kafka", zookeeper=zookeeper_hosts)`` instead.
- ``kafka_jars`` (session): the folder of the ``kafka`` jar set, for tests that run Kafka's
  tools, Streams or Connect (``loglake.dev.kafka_peer.java_command``).

Both skip the test, saying why, only when the ``kafka`` jar set is not fetched
(``loglake.jvm.available("kafka")`` is false); ``./run test`` fetches it, so CI runs them.
tests/conftest.py registers this module in ``pytest_plugins``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loglake import jvm
from loglake.dev.kafka_peer import KafkaPeer

SKIP_REASON = ("the Apache Kafka jars are not fetched (run `python -m loglake.jvm fetch kafka`; "
               "./run test does)")


def require_kafka_jars() -> None:
    """Skip the calling test when the ``kafka`` jar set is absent."""
    if not jvm.available("kafka"):
        pytest.skip(SKIP_REASON)


@pytest.fixture(scope="session")
def kafka_jars() -> Path:
    require_kafka_jars()
    return jvm.set_dir("kafka")


@pytest.fixture(scope="session")
def kafka_peer(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
               ) -> Iterator[KafkaPeer]:
    require_kafka_jars()
    with KafkaPeer(tmp_path_factory.mktemp("kafka-peer"), zookeeper=zookeeper_hosts,
                   brokers=3) as peer:
        yield peer
