"""Kafka Connect runs unchanged on loglake: a distributed worker (Apache Kafka 3.9.2's
``ConnectDistributed``) keeps its config/offset/status topics on loglake (compacted, created by
the worker), with ``exactly.once.source.support=enabled``, and moves lines from a file to a file
through a loglake topic with the FileStream source and sink connectors (created through the REST
API on loopback).

Faults: the worker is restarted (stopped while lines are still arriving, started again) and a
broker is SIGKILLed and restarted while lines arrive. Checked: the sink file holds every input
line exactly once, in order (the data topic has one partition), and the worker's own topics are
compacted on the cluster.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from loglake import jvm
from loglake.dev.harness import DevCluster, wait_until
from tests.connect_util import ConnectWorker

LINES_PER_PHASE = 2000
PHASES = 4
START_TIMEOUT_S = 180.0
FLOW_TIMEOUT_S = 180.0
KILLED_BROKER = 2


@pytest.fixture
def connect_cluster(tmp_path: Path, zookeeper_hosts: str) -> Iterator[DevCluster]:
    if not jvm.available("kafka"):
        pytest.skip("the kafka jar set is not fetched (python -m loglake.jvm fetch kafka; "
                    "./run test does it): Kafka Connect runs from it")
    with DevCluster(tmp_path / "dev", brokers=3, zookeeper=zookeeper_hosts,
                    broker_overrides={"group.initial.rebalance.delay.ms": "0"}) as dev:
        yield dev


def append_lines(path: Path, start: int, count: int) -> None:
    with open(path, "a") as file:
        file.writelines(f"line-{index:06d}\n" for index in range(start, start + count))


def sink_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def wait_sink(path: Path, count: int, worker: ConnectWorker) -> None:
    wait_until(lambda: len(sink_lines(path)) >= count, FLOW_TIMEOUT_S,
               lambda: f"{count} lines in the sink file (has {len(sink_lines(path))}); worker "
               f"log tail:\n{worker.log_tail()}", interval=0.5)


@pytest.mark.slow
def test_file_source_to_file_sink_exactly_once_across_worker_and_broker_restarts(
        connect_cluster: DevCluster, tmp_path: Path) -> None:
    prefix = f"connect-{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}-data"
    connect_cluster.create_topic(topic, partitions=1, replication_factor=3,
                                 configs={"min.insync.replicas": "2"}, timeout=60)
    source_file, sink_file = tmp_path / "input.txt", tmp_path / "output.txt"
    source_file.touch()
    worker = ConnectWorker(tmp_path / "worker", bootstrap=connect_cluster.bootstrap_servers,
                           group=f"{prefix}-workers", topics_prefix=prefix)
    try:
        worker.start()
        worker.wait_ready(timeout=START_TIMEOUT_S)
        worker.put_connector("file-source", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "file": str(source_file), "topic": topic, "tasks.max": "1",
            "exactly.once.support": "required", "transaction.boundary": "poll",
        }, timeout=START_TIMEOUT_S)
        worker.put_connector("file-sink", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "file": str(sink_file), "topics": topic, "tasks.max": "1",
        }, timeout=START_TIMEOUT_S)
        for name in ("file-source", "file-sink"):
            worker.wait_connector_running(name, timeout=START_TIMEOUT_S)

        append_lines(source_file, 0, LINES_PER_PHASE)
        wait_sink(sink_file, LINES_PER_PHASE, worker)

        # the worker restarts while the next lines arrive
        append_lines(source_file, LINES_PER_PHASE, LINES_PER_PHASE)
        worker.stop()
        worker.start()
        worker.wait_ready(timeout=START_TIMEOUT_S)
        for name in ("file-source", "file-sink"):
            worker.wait_connector_running(name, timeout=START_TIMEOUT_S)

        # a broker dies while lines arrive, and comes back
        append_lines(source_file, 2 * LINES_PER_PHASE, LINES_PER_PHASE)
        connect_cluster.kill_broker(KILLED_BROKER)
        append_lines(source_file, 3 * LINES_PER_PHASE, LINES_PER_PHASE)
        wait_sink(sink_file, 3 * LINES_PER_PHASE, worker)
        connect_cluster.start_broker(KILLED_BROKER)

        total = PHASES * LINES_PER_PHASE
        wait_sink(sink_file, total, worker)
        # settle: a duplicate would arrive after the last original line
        worker.stop()
        expected = [f"line-{index:06d}" for index in range(total)]
        got = sink_lines(sink_file)
        duplicates = len(got) - len(set(got))
        missing = sorted(set(expected) - set(got))
        assert not missing and duplicates == 0, (
            f"sink file: {len(got)} lines for {total} input lines, {duplicates} duplicated, "
            f"{len(missing)} missing (first {missing[:5]})")
        assert got == expected, "sink file lines out of order"
    finally:
        worker.stop()

    admin = AdminClient({"bootstrap.servers": connect_cluster.bootstrap_servers})
    for suffix in ("configs", "offsets", "status"):
        resource = ConfigResource("topic", f"{prefix}-{suffix}")
        configs = admin.describe_configs([resource])[resource].result(timeout=30)
        assert configs["cleanup.policy"].value == "compact", f"{prefix}-{suffix}"
