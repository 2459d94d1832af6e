"""Bad input gets Kafka's error code (or a clean close where the protocol has none), and the
broker keeps serving every other client throughout."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from loglake.segments.records import Record, encode_batch
from tests.admin_util import create_topic
from tests.wire import WireClient


def _alive(cluster) -> None:
    with WireClient.connect(cluster.bootstrap_servers) as client:
        response = client.request(18, 3, {"client_software_name": "t",
                                          "client_software_version": "1"})
        assert response.error_code == ErrorCode.none


def _batch(n: int = 1, **kwargs) -> bytes:
    return encode_batch([Record(offset=i, timestamp=1_700_000_000_000 + i, key=None,
                                value=b"v%d" % i) for i in range(n)], **kwargs)


def _produce(client: WireClient, topic: str, records: bytes, *, acks: int = 1,
             partition: int = 0):
    response = client.request(0, 9, {"acks": acks, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    return response.responses[0].partition_responses[0]


@pytest.mark.parametrize("garbage", [
    b"\x00\x00\x00\x10" + b"\xff" * 16,                   # api key -1
    b"\x00\x00\x00\x08" + b"\x00\x00\x00\x63\x00\x00\x00\x01",  # produce v99
    struct.pack(">i", 2**31 - 1) + b"\x00" * 16,          # 2 GiB length prefix
    struct.pack(">i", -5),                                 # negative length
    b"\x00\x00\x00\x03abc",                                # shorter than a header
    b"\x00\x00\x00\x0c\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xff\xff\x7f",  # metadata truncated
])
def test_garbage_frames_close_connection_broker_survives(cluster, garbage):
    with WireClient.connect(cluster.bootstrap_servers) as client:
        client.send_raw(garbage)
        assert client.is_closed()
    _alive(cluster)


def test_frame_larger_than_socket_request_max_bytes_is_refused(cluster):
    with WireClient.connect(cluster.bootstrap_servers) as client:
        client.send_raw(struct.pack(">i", 104857600 + 1))
        assert client.is_closed()
    _alive(cluster)


def test_unsupported_api_versions_version_answers_with_table(cluster):
    with WireClient.connect(cluster.bootstrap_servers) as client:
        client.send_raw(b"\x00\x00\x00\x0a\x00\x12\x00\x63\x00\x00\x00\x07\x00\x00")
        frame = client.recv_frame()
        response = WireClient.decode_response(18, 0, frame)
        assert response.error_code == ErrorCode.unsupported_version
        keys = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert keys[0] == (3, 12) and keys[1] == (4, 12)


def test_unknown_tagged_fields_are_skipped(cluster):
    with WireClient.connect(cluster.bootstrap_servers) as client:
        # ApiVersions v3 header with an unknown tagged field (tag 5, 2 bytes) in the header
        # and another (tag 9) in the body
        payload = (b"\x00\x12\x00\x03\x00\x00\x00\x2a\x00\x01x" + b"\x01\x05\x02ab"
                   + b"\x02a\x021" + b"\x01\x09\x01z")
        client.send_raw(struct.pack(">i", len(payload)) + payload)
        response = WireClient.decode_response(18, 3, client.recv_frame())
        assert response.error_code == ErrorCode.none


def test_crc_mismatch_is_corrupt_message(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name)
    batch = bytearray(_batch(3))
    batch[-1] ^= 0xFF
    with WireClient.connect(cluster.bootstrap_servers) as client:
        result = _produce(client, topic_name, bytes(batch))
        assert result.error_code == ErrorCode.corrupt_message
        good = _produce(client, topic_name, _batch(2))
        assert good.error_code == ErrorCode.none and good.base_offset == 0


def test_truncated_batch_and_old_magic_rejected(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name)
    batch = _batch(3)
    old_magic = bytearray(batch)
    old_magic[16] = 1
    with WireClient.connect(cluster.bootstrap_servers) as client:
        assert _produce(client, topic_name, batch[:-7]).error_code == ErrorCode.corrupt_message
        assert _produce(client, topic_name, bytes(old_magic)).error_code in (
            ErrorCode.invalid_record, ErrorCode.corrupt_message)
        assert _produce(client, topic_name, batch).base_offset == 0


def test_message_too_large(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name, config={"max.message.bytes": "1000"})
    big = encode_batch([Record(offset=0, timestamp=1, key=None, value=b"x" * 2000)])
    with WireClient.connect(cluster.bootstrap_servers) as client:
        result = _produce(client, topic_name, big)
        assert result.error_code == ErrorCode.message_too_large
        assert "max.message.bytes" in (result.error_message or "")


def test_invalid_acks_and_unknown_topic(cluster, topic_name):
    with WireClient.connect(cluster.bootstrap_servers) as client:
        assert _produce(client, topic_name, _batch()).error_code == (
            ErrorCode.unknown_topic_or_partition)
        create_topic(cluster.bootstrap_servers, topic_name)
        assert _produce(client, topic_name, _batch(), acks=2).error_code == (
            ErrorCode.invalid_required_acks)
        assert _produce(client, topic_name, _batch(), partition=7).error_code == (
            ErrorCode.unknown_topic_or_partition)


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad/name", "spaces here", "ü"])
def test_invalid_topic_names(cluster, name):
    with WireClient.connect(cluster.bootstrap_servers) as client:
        response = client.request(19, 7, {"topics": [
            {"name": name, "num_partitions": 1, "replication_factor": 1}],
            "timeout": 5000})
        assert response.topics[0].error_code == ErrorCode.invalid_topic_exception


def test_fetch_beyond_log_end_is_offset_out_of_range(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name)
    with WireClient.connect(cluster.bootstrap_servers) as client:
        _produce(client, topic_name, _batch(5))
        response = client.request(1, 12, {
            "replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20,
            "session_epoch": -1, "topics": [{"topic": topic_name, "partitions": [
                {"partition": 0, "fetch_offset": 6, "partition_max_bytes": 1 << 20,
                 "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}
            ]}]})
        part = response.responses[0].partitions[0]
        assert part.error_code == ErrorCode.offset_out_of_range
        assert part.high_watermark == 5


def test_long_poll_waits_for_data(cluster, topic_name):
    import threading
    import time

    create_topic(cluster.bootstrap_servers, topic_name)
    fetch = {"replica_id": -1, "max_wait": 5000, "min_bytes": 1, "max_bytes": 1 << 20,
             "session_epoch": -1, "topics": [{"topic": topic_name, "partitions": [
                 {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                  "current_leader_epoch": -1, "log_start_offset": -1,
                  "last_fetched_epoch": -1}]}]}
    with WireClient.connect(cluster.bootstrap_servers) as client:
        started = time.monotonic()
        response = client.request(1, 12, dict(fetch, max_wait=300))
        assert time.monotonic() - started >= 0.25  # waited for max_wait: no data
        assert response.responses[0].partitions[0].records in (b"", None)

        def produce_later():
            time.sleep(0.5)
            with WireClient.connect(cluster.bootstrap_servers) as other:
                _produce(other, topic_name, _batch(1))

        thread = threading.Thread(target=produce_later)
        thread.start()
        started = time.monotonic()
        response = client.request(1, 12, fetch)
        elapsed = time.monotonic() - started
        thread.join()
        assert 0.3 < elapsed < 4.5  # answered by the append, not by max_wait
        assert len(response.responses[0].partitions[0].records) > 0


@pytest.mark.parametrize("validate_only", [False, True])
@pytest.mark.parametrize("partitions", [20_000, 2**31 - 1])
def test_absurd_partition_counts_are_refused_quickly(cluster, topic_name, partitions,
                                                     validate_only):
    with WireClient.connect(cluster.bootstrap_servers) as client:
        response = client.request(19, 7, {"topics": [
            {"name": topic_name, "num_partitions": partitions, "replication_factor": 1}],
            "timeout": 5000, "validate_only": validate_only})
        assert response.topics[0].error_code == ErrorCode.invalid_partitions
        assert "2000" in response.topics[0].error_message
        response = client.request(19, 7, {"topics": [  # the cap itself is allowed
            {"name": topic_name, "num_partitions": 2000, "replication_factor": 1}],
            "timeout": 5000, "validate_only": True})
        assert response.topics[0].error_code == ErrorCode.none
    _alive(cluster)
