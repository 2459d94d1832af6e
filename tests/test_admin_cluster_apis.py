"""DescribeCluster, DescribeLogDirs and AlterConfigs on a real two-broker cluster, through
confluent-kafka's AdminClient, kafka-python's KafkaAdminClient, aiokafka's admin client, KafkaJS
(installed with npm into a temporary directory; skipped without node/npm) and raw wire requests
(tests/wire.py)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KafkaConfigResource
from kafka.admin import ConfigResourceType
from kio.schema.errors import ErrorCode

from loglake.dev.harness import DevCluster, wait_until
from loglake.segments.records import Record, encode_batch
from tests.wire import WireClient

RACK = "rack-a"
pytestmark = pytest.mark.filterwarnings(
    "ignore:alter_configs has been deprecated:DeprecationWarning")  # the API under test


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("cluster-apis")
    with DevCluster(data / "dev", zookeeper=zookeeper_hosts,
                    brokers=2, broker_overrides={"broker.rack": RACK}) as dev:
        yield dev


@pytest.fixture
def admin(pair: DevCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": pair.bootstrap_servers})


def _create(admin: AdminClient, topic: str, partitions: int = 2, replicas: int = 2,
            config: dict[str, str] | None = None) -> None:
    futures = admin.create_topics([NewTopic(topic, partitions, replicas, config=config or {})],
                                  operation_timeout=10, request_timeout=15)
    futures[topic].result(timeout=20)


def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, b"record-%d" % i, partition=0)
    assert producer.flush(15) == 0


def _wire(pair: DevCluster, broker_id: int) -> WireClient:
    return WireClient("127.0.0.1", pair.broker_port(broker_id))


def _overrides(admin: AdminClient, topic: str) -> dict[str, str]:
    resource = ConfigResource("topic", topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=10)
    return {name: entry.value for name, entry in entries.items()
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


# ---------------------------------------------------------------------------- DescribeCluster


def test_describe_cluster_confluent(pair: DevCluster, admin: AdminClient) -> None:
    described = admin.describe_cluster(include_authorized_operations=True).result(timeout=10)
    metadata = admin.list_topics(timeout=10)
    assert described.cluster_id == metadata.cluster_id and described.cluster_id
    assert sorted(node.id for node in described.nodes) == [1, 2]
    assert {node.rack for node in described.nodes} == {RACK}
    assert {node.port for node in described.nodes} == {pair.broker_port(1), pair.broker_port(2)}
    assert described.controller.id == metadata.controller_id
    assert {op.name for op in described.authorized_operations} == {
        "CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE"}


def test_describe_cluster_kafka_python(pair: DevCluster, admin: AdminClient) -> None:
    client = KafkaAdminClient(bootstrap_servers=pair.bootstrap_servers)
    try:
        described = client.describe_cluster()
    finally:
        client.close()
    assert described["cluster_id"] == admin.list_topics(timeout=10).cluster_id
    assert described["controller_id"] in (1, 2)
    assert [(b["broker_id"], b["rack"]) for b in described["brokers"]] == [(1, RACK), (2, RACK)]


def test_describe_cluster_aiokafka(pair: DevCluster) -> None:
    async def run() -> dict[str, Any]:
        client = AIOKafkaAdminClient(bootstrap_servers=pair.bootstrap_servers)
        await client.start()
        try:
            return await client.describe_cluster()
        finally:
            await client.close()

    described = asyncio.run(run())
    assert sorted(b["node_id"] for b in described["brokers"]) == [1, 2]
    assert described["controller_id"] in (1, 2)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster_every_version_on_the_wire(pair: DevCluster, version: int) -> None:
    with _wire(pair, 2) as client:
        response = client.request(60, version, {"include_cluster_authorized_operations": False,
                                                "endpoint_type": 1})
    assert response.error_code == ErrorCode.none and response.error_message is None
    assert [(b.broker_id, b.rack) for b in response.brokers] == [(1, RACK), (2, RACK)]
    assert response.controller_id in (1, 2)
    assert response.cluster_authorized_operations == -2147483648
    if version >= 2:
        assert not any(b.is_fenced for b in response.brokers)


def test_describe_cluster_endpoint_types(pair: DevCluster) -> None:
    with _wire(pair, 1) as client:
        controllers = client.request(60, 1, {"endpoint_type": 2})
        unknown = client.request(60, 2, {"endpoint_type": 7})
    assert controllers.error_code == ErrorCode.mismatched_endpoint_type
    assert "CONTROLLER" in controllers.error_message and controllers.brokers == ()
    assert unknown.error_code == ErrorCode.unsupported_endpoint_type


# ---------------------------------------------------------------------------- DescribeLogDirs


def test_describe_log_dirs_kafka_python(pair: DevCluster, admin: AdminClient,
                                        topic_name: str) -> None:
    _create(admin, topic_name)
    _produce(pair.bootstrap_servers, topic_name, 20)
    client = KafkaAdminClient(bootstrap_servers=pair.bootstrap_servers)
    try:
        def sizes_agree() -> bool:
            answer = client.describe_log_dirs({topic_name: [0, 1]})
            sizes = {b["broker"]: _partitions(b, topic_name) for b in answer}
            return sizes[1][0]["partition_size"] == sizes[2][0]["partition_size"] > 0
        wait_until(sizes_agree, 10, "the follower to hold the leader's log")
        answer = client.describe_log_dirs({topic_name: [0, 1]})
    finally:
        client.close()
    assert sorted(b["broker"] for b in answer) == [1, 2]
    for broker in answer:
        (log_dir,) = broker["log_dirs"]
        assert log_dir["error_code"] == 0
        assert log_dir["log_dir"] == str(pair.data_dir / f"broker-{broker['broker']}" / "data")
        partitions = _partitions(broker, topic_name)
        assert sorted(partitions) == [0, 1]
        on_disk = sum(p.stat().st_size
                      for p in (pair.data_dir / f"broker-{broker['broker']}" / "data"
                                / f"{topic_name}-0").glob("*.log"))
        assert partitions[0]["partition_size"] == on_disk
        assert partitions[1]["partition_size"] == 0
        assert all(p["offset_lag"] == 0 and p["is_future_key"] is False
                   for p in partitions.values())
        usage = shutil.disk_usage(log_dir["log_dir"])
        assert log_dir["total_bytes"] == usage.total
        assert abs(log_dir["usable_bytes"] - usage.free) < 256 * 1024 * 1024


def _partitions(broker: dict[str, Any], topic: str) -> dict[int, dict[str, Any]]:
    (log_dir,) = broker["log_dirs"]
    return {p["partition_index"]: p for t in log_dir["topics"] if t["name"] == topic
            for p in t["partitions"]}


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_log_dirs_every_version_on_the_wire(pair: DevCluster, admin: AdminClient,
                                                     topic_name: str, version: int) -> None:
    _create(admin, topic_name, partitions=3)
    with _wire(pair, 1) as client:
        # CreateTopics answers once the controller has assigned leaders; broker 1 opens its
        # replicas when its LeaderAndIsr arrives, which a loaded box may deliver a moment later
        def hosted() -> set[int]:
            (logdir,) = client.request(35, version, {"topics": None}).results
            return {p.partition_index for t in logdir.topics if t.name == topic_name
                    for p in t.partitions}
        wait_until(lambda: hosted() == {0, 1, 2}, 20, "broker 1 to host the three partitions")
        every = client.request(35, version, {"topics": None})
        some = client.request(35, version, {"topics": [
            {"topic": topic_name, "partitions": [2, 9]}, {"topic": "absent", "partitions": [0]}]})
    (result,) = every.results
    assert result.error_code == ErrorCode.none
    assert {p.partition_index for t in result.topics if t.name == topic_name
            for p in t.partitions} == {0, 1, 2}
    (filtered,) = some.results
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in filtered.topics] == [
        (topic_name, [2])]
    if version >= 3:
        assert every.error_code == ErrorCode.none
    if version >= 4:
        assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes


# ------------------------------------------------------------------------------- AlterConfigs


def test_alter_configs_replaces_the_whole_override_set(pair: DevCluster, admin: AdminClient,
                                                       topic_name: str) -> None:
    _create(admin, topic_name, config={"retention.ms": "3600000", "cleanup.policy": "compact"})
    assert _overrides(admin, topic_name) == {"retention.ms": "3600000",
                                             "cleanup.policy": "compact"}
    resource = ConfigResource("topic", topic_name, set_config={"segment.ms": "120000"})
    admin.alter_configs([resource])[resource].result(timeout=10)
    assert _overrides(admin, topic_name) == {"segment.ms": "120000"}
    # the other broker applies the same set (through its ZooKeeper watch)
    with _wire(pair, 2) as client:
        def on_broker_2() -> bool:
            response = client.request(32, 4, {"resources": [
                {"resource_type": 2, "resource_name": topic_name,
                 "configuration_keys": ["segment.ms", "retention.ms"]}]})
            values = {c.name: (c.value, c.config_source) for c in response.results[0].configs}
            return values == {"segment.ms": ("120000", 1), "retention.ms": ("604800000", 5)}
        wait_until(on_broker_2, 10, "broker 2 to apply the new overrides")
    empty = ConfigResource("topic", topic_name, set_config={})
    admin.alter_configs([empty])[empty].result(timeout=10)
    assert _overrides(admin, topic_name) == {}


def test_alter_configs_validate_only_and_errors(admin: AdminClient, topic_name: str) -> None:
    _create(admin, topic_name, config={"retention.ms": "3600000"})
    check = ConfigResource("topic", topic_name, set_config={"retention.ms": "1000"})
    admin.alter_configs([check], validate_only=True)[check].result(timeout=10)
    assert _overrides(admin, topic_name) == {"retention.ms": "3600000"}
    cases = {
        "bad-value": (ConfigResource("topic", topic_name, set_config={"retention.ms": "soon"}),
                      "INVALID_CONFIG"),
        "unknown-key": (ConfigResource("topic", topic_name, set_config={"no.such": "1"}),
                        "INVALID_CONFIG"),
        "unknown-topic": (ConfigResource("topic", topic_name + "-absent",
                                         set_config={"retention.ms": "1"}),
                          "UNKNOWN_TOPIC_OR_PART"),
        "broker": (ConfigResource("broker", "1", set_config={"num.partitions": "3"}),
                   "INVALID_REQUEST"),
    }
    for name, (resource, code) in cases.items():
        with pytest.raises(KafkaException) as caught:
            admin.alter_configs([resource])[resource].result(timeout=10)
        assert caught.value.args[0].name() == code, name
    assert _overrides(admin, topic_name) == {"retention.ms": "3600000"}


@pytest.mark.parametrize("version", [0, 1, 2])
def test_alter_configs_request_checks_on_the_wire(pair: DevCluster, admin: AdminClient,
                                                  topic_name: str, version: int) -> None:
    _create(admin, topic_name)

    def resource(name: str, configs: list[tuple[str, str | None]], kind: int = 2) -> dict:
        return {"resource_type": kind, "resource_name": name,
                "configs": [{"name": k, "value": v} for k, v in configs]}

    with _wire(pair, 1) as client:
        response = client.request(33, version, {"validate_only": False, "resources": [
            resource(topic_name, [("retention.ms", "1000")]),
            resource("twice", []), resource("twice", []),
            resource(topic_name + "-b", [("a", "1"), ("a", "2")]),
            resource(topic_name + "-c", [("retention.ms", None)]),
            resource("x", [], kind=8),
            resource("x", [], kind=99),
            resource("", [("retention.ms", "1")]),
        ]})
    answers = [(r.resource_name, r.error_code) for r in response.responses]
    assert answers == [
        (topic_name, ErrorCode.none),
        ("twice", ErrorCode.invalid_request), ("twice", ErrorCode.invalid_request),
        (topic_name + "-b", ErrorCode.invalid_request),
        (topic_name + "-c", ErrorCode.invalid_request),
        ("x", ErrorCode.invalid_request), ("x", ErrorCode.invalid_request),
        ("", ErrorCode.invalid_request),
    ]
    messages = [r.error_message for r in response.responses]
    assert messages[1] == "Each resource must appear at most once."
    assert messages[3] == "Error due to duplicate config keys"
    assert messages[4] == "Null value not supported for : retention.ms"
    assert _overrides(admin, topic_name) == {"retention.ms": "1000"}


def test_alter_configs_kafka_python(pair: DevCluster, admin: AdminClient,
                                    topic_name: str) -> None:
    _create(admin, topic_name, config={"cleanup.policy": "compact"})
    client = KafkaAdminClient(bootstrap_servers=pair.bootstrap_servers)
    try:
        client.alter_configs([KafkaConfigResource(ConfigResourceType.TOPIC, topic_name,
                                                  configs={"retention.ms": "7200000"})],
                             incremental=False)
    finally:
        client.close()
    # kafka-python's non-incremental path reads the topic's dynamic keys and sends them along
    # (AlterConfigs resets any key it does not name), so the compact policy survives
    assert _overrides(admin, topic_name) == {"retention.ms": "7200000",
                                             "cleanup.policy": "compact"}


def test_alter_configs_aiokafka(pair: DevCluster, admin: AdminClient, topic_name: str) -> None:
    _create(admin, topic_name)

    async def run() -> list[Any]:
        client = AIOKafkaAdminClient(bootstrap_servers=pair.bootstrap_servers)
        await client.start()
        try:
            return await client.alter_configs([AioConfigResource(
                AioConfigResourceType.TOPIC, topic_name, configs={"max.message.bytes": "2048"})])
        finally:
            await client.close()

    responses = asyncio.run(run())
    assert all(code == 0 for r in responses for code, *_ in r.resources)
    assert _overrides(admin, topic_name) == {"max.message.bytes": "2048"}


# ------------------------------------------------------------------------------------ KafkaJS

KAFKAJS_VERSION = "2.2.4"
KAFKAJS_SCRIPT = Path(__file__).parent / "kafkajs" / "admin_check.js"


@pytest.fixture(scope="module")
def kafkajs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """KafkaJS installed with npm into a temporary directory (skipped without node/npm)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for the KafkaJS test")
    prefix = tmp_path_factory.mktemp("kafkajs")
    try:
        subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                        f"kafkajs@{KAFKAJS_VERSION}"], check=True, capture_output=True,
                       timeout=180)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"kafkajs could not be installed: {exc}")
    return prefix / "node_modules"


def test_kafkajs_admin(pair: DevCluster, admin: AdminClient, kafkajs: Path,
                       topic_name: str) -> None:
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run([node, str(KAFKAJS_SCRIPT), pair.bootstrap_servers, topic_name],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NODE_PATH": str(kafkajs)})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["cluster"]["clusterId"] == admin.list_topics(timeout=10).cluster_id
    assert sorted(b["nodeId"] for b in seen["cluster"]["brokers"]) == [1, 2]
    assert seen["cluster"]["controller"] in (1, 2)
    assert seen["created"] is True
    # AlterConfigs replaced the override set: cleanup.policy went back to its default
    assert seen["configs"]["retention.ms"] == {"value": "3600000", "isDefault": False}
    assert seen["configs"]["cleanup.policy"]["value"] == "delete"
    assert _overrides(admin, topic_name) == {"retention.ms": "3600000"}
    assert [(o["partition"], o["offset"]) for o in seen["offsets"]] == [(0, "2")]


# ------------------------------------------------------------- Produce v10-v12 (KIP-951 hints)


def test_produce_v10_to_a_follower_names_the_leader(pair: DevCluster, admin: AdminClient,
                                                    topic_name: str) -> None:
    futures = admin.create_topics([NewTopic(topic_name, num_partitions=1,
                                           replica_assignment=[[1]])],
                                  operation_timeout=10, request_timeout=15)
    futures[topic_name].result(timeout=20)
    batch = encode_batch([Record(offset=0, timestamp=int(time.time() * 1000), key=None,
                                 value=b"v")])

    def produce(broker: int, version: int) -> Any:
        with _wire(pair, broker) as client:
            return client.request(0, version, {"acks": 1, "timeout": 5000, "topic_data": [
                {"name": topic_name, "partition_data": [{"index": 0, "records": batch}]}]})

    def listed_on_broker_2() -> Any:  # broker 2 learns of the topic through its watch
        with _wire(pair, 2) as client:
            topic = client.request(3, 12, {"topics": [{"name": topic_name}]}).topics[0]
        return topic if topic.partitions and topic.partitions[0].leader_id == 1 else None

    state = wait_until(listed_on_broker_2, 10, "broker 2's metadata to list the new topic")
    epoch = state.partitions[0].leader_epoch
    # the leader opens its replica when its LeaderAndIsr arrives (a loaded box: a moment later)
    wait_until(lambda: produce(1, 12).responses[0].partition_responses[0].error_code
               == ErrorCode.none, 20, "broker 1 to accept produce for the new partition")
    for version in (10, 11, 12):
        wrong = produce(2, version)
        answer = wrong.responses[0].partition_responses[0]
        assert answer.error_code == ErrorCode.not_leader_or_follower
        assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (1, epoch)
        assert [(n.node_id, n.host, n.port, n.rack) for n in wrong.node_endpoints] == [
            (1, "127.0.0.1", pair.broker_port(1), RACK)]
        right = produce(1, version)
        ok = right.responses[0].partition_responses[0]
        assert ok.error_code == ErrorCode.none and right.node_endpoints == ()
        assert (ok.current_leader.leader_id, ok.current_leader.leader_epoch) == (-1, -1)
    old = produce(2, 9).responses[0].partition_responses[0]
    assert old.error_code == ErrorCode.not_leader_or_follower  # v9 has no place for hints
