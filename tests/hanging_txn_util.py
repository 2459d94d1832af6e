"""Transactions for the tests of find-hanging/abort (the CLI, the console's Transactions page):
a hanging one made by hand, a live one of a real producer, and what read_committed reads.

A hanging transaction is Kafka's find-hanging case: a transactional batch stamped an hour ago,
written by a producer id that never asked a coordinator (so no coordinator will end it), holds
read_committed consumers back at its first offset.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from loglake.client import Admin
from loglake.dev.harness import DevCluster
from loglake.segments.records import Record, encode_batch
from tests.wire import WireClient

HOUR_MS = 3_600_000


def write_hanging(cluster: DevCluster, topic: str, producer_id: int) -> None:
    """Three transactional records in partition 0 of ``topic``, stamped an hour ago by
    ``producer_id`` (which never asked a coordinator), written to the partition's leader with
    acks=all: an open transaction nobody ends."""
    old = int(time.time() * 1000) - HOUR_MS
    batch = encode_batch([Record(offset=i, timestamp=old, key=b"k", value=b"hanging-%d" % i)
                          for i in range(3)], base_offset=0, is_transactional=True,
                         producer_id=producer_id, producer_epoch=0, base_sequence=0)
    with Admin(cluster.bootstrap_servers) as admin:
        leader = admin.describe_topic(topic).partitions[0].leader
    with WireClient("127.0.0.1", cluster.broker_port(leader)) as wire:
        response = wire.request(0, 9, {
            "acks": -1, "timeout": 10000, "transactional_id": f"ghost-{producer_id}",
            "topic_data": [{"name": topic, "partition_data": [{"index": 0,
                                                                "records": batch}]}]})
    assert response.responses[0].partition_responses[0].error_code == 0


def open_transaction(cluster: DevCluster, topic: str, transactional_id: str,
                     value: bytes = b"in-flight") -> Producer:
    """A real transactional producer (60 s transaction timeout) with an open transaction that
    wrote ``value`` to partition 0 of ``topic``; the caller commits or aborts it."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value, partition=0)
    producer.flush(30)
    return producer


def committed_values(cluster: DevCluster, topic: str, *, wait_s: float,
                     want: int | None = None) -> list[bytes]:
    """What a read_committed consumer gets from partition 0 of ``topic`` from offset 0 within
    ``wait_s`` (stops early once it has ``want`` records, when given)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "group.id": f"rc-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and (want is None or len(values) < want):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value() or b"")
    finally:
        consumer.close()
    return values
