"""The transactional data path on a live broker: hand-built transactional batches sent with a
raw Produce, COMMIT/ABORT markers written with WriteTxnMarkers (the project's wire client, as
the transaction coordinator will send them), then confluent-kafka consumers with
``isolation.level`` read_committed and read_uncommitted, ListOffsets per isolation level, a raw
read_committed Fetch (last stable offset, aborted transactions) and DescribeProducers.

Full client transactions (InitProducerId with a transactional id, AddPartitionsToTxn, EndTxn)
are the coordinator's and are tested end to end elsewhere; here the test plays the coordinator.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from kio.schema.errors import ErrorCode

from loglake.client import _wire
from loglake.dev.harness import DevCluster
from loglake.segments.batch import iter_batches
from loglake.segments.records import Record, encode_batch
from tests.admin_util import create_topic

TXN_ID = "datapath-txn"


def _call(cluster: DevCluster, api_key: int, version: int, body: dict[str, Any]) -> Any:
    host, _, port = cluster.bootstrap_servers.split(",")[0].rpartition(":")
    return _wire.request(host, int(port), api_key, version, body, timeout=20.0,
                         client_id="txn-datapath-test", operation=f"api {api_key}")


def _init_producer(cluster: DevCluster) -> tuple[int, int]:
    response = _call(cluster, 22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                      "producer_id": -1, "producer_epoch": -1})
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch


def _produce(cluster: DevCluster, topic: str, pid: int, epoch: int, seq: int,
             values: list[bytes]) -> Any:
    now = int(time.time() * 1000)
    records = encode_batch([Record(i, now, None, v) for i, v in enumerate(values)],
                           producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           is_transactional=True)
    response = _call(cluster, 0, 9, {"transactional_id": TXN_ID, "acks": -1, "timeout": 10000,
                                     "topic_data": [{"name": topic, "partition_data": [
                                         {"index": 0, "records": records}]}]})
    return response.responses[0].partition_responses[0]


def _markers(cluster: DevCluster, pid: int, epoch: int, commit: bool,
             topics: dict[str, list[int]], *, coordinator_epoch: int = 0) -> dict[Any, Any]:
    response = _call(cluster, 27, 1, {"markers": [{
        "producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
        "coordinator_epoch": coordinator_epoch,
        "topics": [{"name": name, "partition_indexes": indexes}
                   for name, indexes in topics.items()]}]})
    (marker,) = response.markers
    assert marker.producer_id == pid
    return {(t.name, p.partition_index): p.error_code
            for t in marker.topics for p in t.partitions}


def _latest(cluster: DevCluster, topic: str, isolation: int) -> int:
    response = _call(cluster, 2, 7, {"replica_id": -1, "isolation_level": isolation,
                                     "topics": [{"name": topic, "partitions": [
                                         {"partition_index": 0, "timestamp": -1,
                                          "current_leader_epoch": -1}]}]})
    partition = response.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    return int(partition.offset)


def _values(cluster: DevCluster, topic: str, isolation: str) -> list[bytes]:
    """Every record value a confluent-kafka consumer with ``isolation`` reads up to the end of
    the partition (its EOF: the LSO for read_committed, the high watermark otherwise)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "group.id": f"g-{uuid.uuid4().hex[:8]}", "isolation.level": isolation,
                         "enable.partition.eof": True, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                return values
            values.append(msg.value())
        raise AssertionError(f"{isolation}: no end of partition within 30 s ({values})")
    finally:
        consumer.close()


def _data_offsets(records: bytes) -> list[int]:
    out: list[int] = []
    for header in iter_batches(records, verify_crc=False):
        if not header.is_control:
            out.extend(range(header.base_offset, header.next_offset))
    return out


def test_commit_and_abort_markers_decide_what_read_committed_consumers_see(
        cluster: DevCluster, topic_name: str) -> None:
    create_topic(cluster.bootstrap_servers, topic_name)
    pid, epoch = _init_producer(cluster)
    part = {topic_name: [0]}

    first = _produce(cluster, topic_name, pid, epoch, 0, [b"a0", b"a1", b"a2"])  # 0-2
    assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
    assert (_latest(cluster, topic_name, 1), _latest(cluster, topic_name, 0)) == (0, 3)
    assert _values(cluster, topic_name, "read_committed") == []
    assert _markers(cluster, pid, epoch, True, part) == {(topic_name, 0): ErrorCode.none}  # 3

    assert _produce(cluster, topic_name, pid, epoch, 3, [b"b0", b"b1", b"b2"]).base_offset == 4
    assert _markers(cluster, pid, epoch, False, part,  # 7: ABORT
                    coordinator_epoch=5) == {(topic_name, 0): ErrorCode.none}
    assert _produce(cluster, topic_name, pid, epoch, 6, [b"c0", b"c1"]).base_offset == 8
    assert _markers(cluster, pid, epoch, True, part,
                    coordinator_epoch=5) == {(topic_name, 0): ErrorCode.none}  # 10
    assert (_latest(cluster, topic_name, 1), _latest(cluster, topic_name, 0)) == (11, 11)

    assert _values(cluster, topic_name, "read_committed") == [b"a0", b"a1", b"a2", b"c0", b"c1"]
    assert _values(cluster, topic_name, "read_uncommitted") == [
        b"a0", b"a1", b"a2", b"b0", b"b1", b"b2", b"c0", b"c1"]

    # an open transaction holds the LSO: ListOffsets, Fetch and DescribeProducers show it
    assert _produce(cluster, topic_name, pid, epoch, 8, [b"d0"]).base_offset == 11
    assert (_latest(cluster, topic_name, 1), _latest(cluster, topic_name, 0)) == (11, 12)
    fetch = _call(cluster, 1, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 0,
                                   "max_bytes": 1 << 20, "isolation_level": 1,
                                   "topics": [{"topic": topic_name, "partitions": [
                                       {"partition": 0, "fetch_offset": 0,
                                        "partition_max_bytes": 1 << 20}]}]})
    entry = fetch.responses[0].partitions[0]
    assert (entry.error_code, entry.high_watermark, entry.last_stable_offset) == (
        ErrorCode.none, 12, 11)
    assert [(a.producer_id, a.first_offset) for a in entry.aborted_transactions] == [(pid, 4)]
    assert _data_offsets(bytes(entry.records)) == [0, 1, 2, 4, 5, 6, 8, 9]
    uncommitted = _call(cluster, 1, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 0,
                                         "max_bytes": 1 << 20, "isolation_level": 0,
                                         "topics": [{"topic": topic_name, "partitions": [
                                             {"partition": 0, "fetch_offset": 0,
                                              "partition_max_bytes": 1 << 20}]}]})
    plain = uncommitted.responses[0].partitions[0]
    assert plain.last_stable_offset == 11 and plain.aborted_transactions is None

    described = _call(cluster, 61, 0, {"topics": [{"name": topic_name,
                                                   "partition_indexes": [0, 5]}]})
    ((ours, missing),) = [t.partitions for t in described.topics]
    assert ours.error_code == ErrorCode.none
    (producer,) = ours.active_producers
    assert (producer.producer_id, producer.producer_epoch, producer.last_sequence,
            producer.coordinator_epoch, producer.current_txn_start_offset) == (
        pid, epoch, 8, 5, 11)
    assert missing.error_code == ErrorCode.unknown_topic_or_partition

    # a stale coordinator epoch is fenced; an unknown partition is named; the group entry
    # goes to the group coordinator (nothing pending: done)
    fenced = _markers(cluster, pid, epoch, True, {topic_name: [0, 3], "__consumer_offsets": [7]},
                      coordinator_epoch=4)
    assert fenced == {(topic_name, 0): ErrorCode.transaction_coordinator_fenced,
                      (topic_name, 3): ErrorCode.unknown_topic_or_partition,
                      ("__consumer_offsets", 7): ErrorCode.none}
    assert _latest(cluster, topic_name, 1) == 11
    assert _markers(cluster, pid, epoch, False, part, coordinator_epoch=5) == {
        (topic_name, 0): ErrorCode.none}
    assert (_latest(cluster, topic_name, 1), _latest(cluster, topic_name, 0)) == (13, 13)
    assert _values(cluster, topic_name, "read_committed") == [b"a0", b"a1", b"a2", b"c0", b"c1"]


def test_transactional_batch_needs_the_requests_transactional_id(
        cluster: DevCluster, topic_name: str) -> None:
    create_topic(cluster.bootstrap_servers, topic_name)
    pid, epoch = _init_producer(cluster)
    records = encode_batch([Record(0, int(time.time() * 1000), None, b"x")], producer_id=pid,
                           producer_epoch=epoch, base_sequence=0, is_transactional=True)
    response = _call(cluster, 0, 9, {"transactional_id": None, "acks": 1, "timeout": 5000,
                                     "topic_data": [{"name": topic_name, "partition_data": [
                                         {"index": 0, "records": records}]}]})
    partition = response.responses[0].partition_responses[0]
    assert partition.error_code == ErrorCode.transactional_id_authorization_failed
