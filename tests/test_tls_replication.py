"""Three brokers replicating over an SSL (``ssl.client.auth=required``) or SASL_SSL (PLAIN)
inter-broker listener (``inter.broker.listener.name``): followers fetch and the ISR fills over
TLS, and every established connection to an INTERNAL port comes from the brokers themselves
(clients use PLAINTEXT)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from loglake.dev.harness import DevCluster
from tests.tls_util import broker_ssl_settings, make_tls_files

INTERNAL_OFFSET = 100


def _established_local_ports() -> set[int]:
    """Local ports of ESTABLISHED IPv4 TCP connections on this host (/proc/net/tcp)."""
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "01":
            ports.add(int(fields[1].split(":")[1], 16))
    return ports


JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret";')


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_replication_over_ssl_inter_broker_listener(tmp_path: Path, zookeeper_hosts: str,
                                                    protocol: str) -> None:
    """SSL: brokers present their certificates (client auth required); SASL_SSL: TLS plus a
    SASL PLAIN login as the broker user (sasl.mechanism.inter.broker.protocol)."""
    files = make_tls_files(tmp_path / "tls")
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{port:1}",
        "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,INTERNAL:{protocol}",
        "inter.broker.listener.name": "INTERNAL",
        **broker_ssl_settings(files, client_auth="required" if protocol == "SSL" else "none",
                              listener="INTERNAL"),
    }
    if protocol == "SASL_SSL":
        overrides.update({"sasl.enabled.mechanisms": "PLAIN",
                          "sasl.mechanism.inter.broker.protocol": "PLAIN",
                          "listener.name.internal.plain.sasl.jaas.config": JAAS})
    topic = f"tls-replicated-{uuid.uuid4().hex[:8]}"
    with DevCluster(tmp_path / "dev", brokers=3, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as dev:
        admin = AdminClient({"bootstrap.servers": dev.bootstrap_servers})
        admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3,
                                      config={"min.insync.replicas": "2"})],
                            operation_timeout=15)[topic].result(timeout=30)
        deadline = time.monotonic() + 60
        while True:
            partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
            if len(partitions) == 3 and all(len(p.isrs) == 3 for p in partitions.values()):
                break
            assert time.monotonic() < deadline, "ISR did not fill over the SSL listener"
            time.sleep(0.5)
        producer = Producer({"bootstrap.servers": dev.bootstrap_servers, "acks": "all"})
        for i in range(300):
            producer.produce(topic, f"r{i}".encode(), partition=i % 3)
        assert producer.flush(30) == 0
        internal_ports = {dev.broker_port(b) + INTERNAL_OFFSET for b in (1, 2, 3)}
        assert internal_ports & _established_local_ports(), "no follower connected over TLS"
        # acks=all with min.insync.replicas=2 succeeded: the followers have the data
        consumer = Consumer({"bootstrap.servers": dev.bootstrap_servers,
                             "group.id": f"g-{uuid.uuid4().hex[:6]}",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        values = set()
        for _ in range(400):
            if len(values) == 300:
                break
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.add(message.value())
        consumer.close()
        assert values == {f"r{i}".encode() for i in range(300)}
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        assert all(len(p.isrs) == 3 for p in partitions.values())
