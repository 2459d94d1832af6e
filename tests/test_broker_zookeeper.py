"""ZooKeeper holds the cluster's state in Kafka's layout; a broker registers ephemerally and a
SIGTERM closes everything cleanly (logs marked clean, broker znode gone at once)."""

from __future__ import annotations

import json
import time

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kazoo.client import KazooClient

from loglake.dev.harness import DevCluster, wait_until
from loglake.segments.filenames import CLEAN_SHUTDOWN_MARKER
from tests.admin_util import create_topic


def _zk(dev: DevCluster) -> KazooClient:
    client = KazooClient(hosts=dev.zookeeper_connect)
    client.start(timeout=10)
    return client


def test_layout_registration_and_clean_shutdown(tmp_path, zookeeper_hosts: str):
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts) as dev:
        create_topic(dev.bootstrap_servers, "laid-out", partitions=2,
                     config={"retention.ms": "1000000"})
        admin = AdminClient({"bootstrap.servers": dev.bootstrap_servers})
        resource = ConfigResource(ConfigResource.Type.TOPIC, "laid-out", incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(10)
        zk = _zk(dev)
        try:
            broker = json.loads(zk.get("/brokers/ids/1")[0])
            assert broker["port"] == dev.broker_port(1)
            assert zk.get("/brokers/ids/1")[1].ephemeralOwner != 0
            assignment = json.loads(zk.get("/brokers/topics/laid-out")[0])
            assert assignment["partitions"] == {"0": [1], "1": [1]}
            assert len(assignment["topic_id"]) == 36
            state = json.loads(zk.get("/brokers/topics/laid-out/partitions/1/state")[0])
            assert (state["leader"], state["leader_epoch"], state["isr"]) == (1, 0, [1])
            config = json.loads(zk.get("/config/topics/laid-out")[0])["config"]
            assert config == {"retention.ms": "1000000", "cleanup.policy": "compact"}
            assert json.loads(zk.get("/controller")[0])["brokerid"] == 1
            assert zk.exists("/cluster/id")

            started = time.monotonic()
            dev.stop_broker(1)  # SIGTERM
            assert zk.exists("/brokers/ids/1") is None  # session closed, not expired
            assert time.monotonic() - started < 10
            for partition in (0, 1):
                directory = dev.data_dir / "broker-1" / "data" / f"laid-out-{partition}"
                assert (directory / CLEAN_SHUTDOWN_MARKER).exists()
            dev.start_broker(1)
            wait_until(lambda: zk.exists("/brokers/ids/1"), 10, "broker 1 registered again")
        finally:
            zk.stop()
        # state in ZooKeeper survived: the restarted broker serves the topic with its config
        meta = admin.list_topics(timeout=10)
        assert len(meta.topics["laid-out"].partitions) == 2
        resource = ConfigResource(ConfigResource.Type.TOPIC, "laid-out")
        configs = admin.describe_configs([resource])[resource].result(10)
        assert configs["cleanup.policy"].value == "compact"
        assert configs["retention.ms"].value == "1000000"
