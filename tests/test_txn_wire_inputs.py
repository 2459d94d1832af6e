"""Bad and adversarial transactional inputs on the wire, against a live broker (the
``cluster`` fixture): Fetch / ListOffsets with an isolation level other than 0 and 1, a
transactional batch without a producer id, several batches for one partition in one Produce
request (Kafka: exactly one), a plain batch in an open transaction, a control
batch from a client with a garbage key and value, a marker for a producer the partition never
saw, WriteTxnMarkers for a partition that does not exist, and a read_committed Fetch over many
aborted transactions. The broker answers Kafka's code and keeps serving."""

from __future__ import annotations

import struct
import time
from typing import Any

from crc32c import crc32c
from kio.schema.errors import ErrorCode

from loglake.segments.records import Record, encode_batch
from tests.admin_util import create_topic
from tests.wire import WireClient


def _produce(client: WireClient, topic: str, records: bytes, *,
             transactional_id: str | None = "wire-txn") -> Any:
    response = client.request(0, 9, {"transactional_id": transactional_id, "acks": -1,
                                     "timeout": 10000, "topic_data": [{"name": topic,
                                     "partition_data": [{"index": 0, "records": records}]}]})
    return response.responses[0].partition_responses[0]


def _batch(pid: int, seq: int, count: int = 1, *, txn: bool = True) -> bytes:
    now = int(time.time() * 1000)  # record time far from the markers' would roll segments
    return encode_batch([Record(i, now, None, b"v%d" % i) for i in range(count)],
                        producer_id=pid, producer_epoch=0, base_sequence=seq,
                        is_transactional=txn)


def _marker(client: WireClient, topic: str, pid: int, commit: bool) -> int:
    response = client.request(27, 1, {"markers": [{
        "producer_id": pid, "producer_epoch": 0, "transaction_result": commit,
        "coordinator_epoch": 0, "topics": [{"name": topic, "partition_indexes": [0]}]}]})
    return int(response.markers[0].topics[0].partitions[0].error_code)


def _fetch(client: WireClient, topic: str, version: int, isolation: int,
           offset: int = 0) -> Any:
    return client.request(1, version, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 50 << 20,
        "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": 0, "fetch_offset": offset, "partition_max_bytes": 50 << 20,
            "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}]}],
        "forgotten_topics_data": [], "rack_id": ""})


def test_unknown_isolation_levels_fail_as_in_kafka(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name)
    with WireClient.connect(cluster.bootstrap_servers) as client:
        for isolation in (2, -1, 127):
            old = _fetch(client, topic_name, 4, isolation)
            assert old.responses[0].partitions[0].error_code == ErrorCode.unknown_server_error
            new = _fetch(client, topic_name, 11, isolation)
            assert new.error_code == ErrorCode.unknown_server_error
            assert new.responses[0].partitions[0].error_code == ErrorCode.unknown_server_error
            offsets = client.request(2, 4, {"replica_id": -1, "isolation_level": isolation,
                                            "topics": [{"name": topic_name, "partitions": [
                                                {"partition_index": 0, "timestamp": -1,
                                                 "current_leader_epoch": -1}]}]})
            assert (offsets.topics[0].partitions[0].error_code
                    == ErrorCode.unknown_server_error)
        ok = _fetch(client, topic_name, 11, 1)
        assert ok.error_code == ErrorCode.none
        assert ok.responses[0].partitions[0].error_code == ErrorCode.none


def test_bad_transactional_produce_inputs(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name)
    with WireClient.connect(cluster.bootstrap_servers) as client:
        pids = []
        for _ in range(2):
            init = client.request(22, 4, {"transactional_id": None,
                                          "transaction_timeout": 60000, "producer_id": -1,
                                          "producer_epoch": -1})
            pids.append(init.producer_id)
        a, b = pids
        # a transactional batch without a producer id
        no_pid = _produce(client, topic_name, _batch(-1, -1))
        assert no_pid.error_code == ErrorCode.invalid_record
        # a control batch from a client, key and value garbage
        control = bytearray(_batch(a, 0))
        attributes_at = 8 + 4 + 4 + 1 + 4  # base offset, length, leader epoch, magic, crc
        struct.pack_into(">h", control, attributes_at,
                         struct.unpack_from(">h", control, attributes_at)[0] | 0x30)
        struct.pack_into(">I", control, 17, crc32c(bytes(control[21:])))
        assert _produce(client, topic_name, bytes(control)).error_code == (
            ErrorCode.invalid_record)
        # two producers, several batches, for one partition of one request: Kafka's Produce
        # v3+ takes exactly one batch per partition (INVALID_RECORD), nothing is appended
        mixed = _batch(a, 0, 2) + _batch(b, 0) + _batch(a, 2) + _batch(b, 1, 3)
        assert _produce(client, topic_name, mixed).error_code == ErrorCode.invalid_record
        assert _produce(client, topic_name, _batch(a, 0, 2)).base_offset == 0
        assert _produce(client, topic_name, _batch(b, 0)).base_offset == 2
        # the open transaction refuses a plain batch of its producer
        refused = _produce(client, topic_name, _batch(a, 2, txn=False))
        assert refused.error_code == ErrorCode.invalid_txn_state
        # a marker for a producer this partition never saw: appended, no transaction closed
        assert _marker(client, topic_name, 987_654, commit=False) == ErrorCode.none
        # markers for a partition that does not exist
        missing = client.request(27, 1, {"markers": [{
            "producer_id": a, "producer_epoch": 0, "transaction_result": True,
            "coordinator_epoch": 0, "topics": [{"name": topic_name, "partition_indexes": [7]},
                                               {"name": "no-such-topic-x",
                                                "partition_indexes": [0]}]}]})
        codes = {(t.name, p.partition_index): p.error_code
                 for t in missing.markers[0].topics for p in t.partitions}
        assert set(codes.values()) == {ErrorCode.unknown_topic_or_partition}
        assert _marker(client, topic_name, a, commit=False) == ErrorCode.none
        assert _marker(client, topic_name, b, commit=True) == ErrorCode.none
        fetched = _fetch(client, topic_name, 11, 1)
        partition = fetched.responses[0].partitions[0]
        assert partition.last_stable_offset == partition.high_watermark
        assert [(t.producer_id, t.first_offset) for t in partition.aborted_transactions] == [
            (a, 0)]


def test_read_committed_fetch_over_many_aborted_transactions(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name)
    count = 300
    with WireClient.connect(cluster.bootstrap_servers) as client:
        init = client.request(22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                      "producer_id": -1, "producer_epoch": -1})
        pid = init.producer_id
        for i in range(count):
            assert _produce(client, topic_name, _batch(pid, i)).error_code == ErrorCode.none
            assert _marker(client, topic_name, pid, commit=i % 3 == 0) == ErrorCode.none
        started = time.perf_counter()
        fetched = _fetch(client, topic_name, 11, 1)
        elapsed = time.perf_counter() - started
        partition = fetched.responses[0].partitions[0]
        aborted = partition.aborted_transactions
        assert partition.error_code == ErrorCode.none, partition
        assert partition.last_stable_offset == partition.high_watermark == 2 * count
        assert len(partition.records) > 0
        assert len(aborted) == count - count // 3
        assert [t.first_offset for t in aborted] == [
            2 * i for i in range(count) if i % 3 != 0]
        assert elapsed < 5.0
        print(f"read_committed fetch with {len(aborted)} aborted transactions in range: "
              f"{elapsed * 1000:.1f} ms")
