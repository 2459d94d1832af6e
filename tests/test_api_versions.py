"""The version table against Kafka 4.0's (KIP-896), what ApiVersions advertises, how versions
outside the table are answered, and ListOffsets v0 (kept for Burrow) on a real broker.

Unsupported versions: a response of the requested version carrying UNSUPPORTED_VERSION where a
schema exists (the connection stays usable), a closed connection where none does (as Kafka
closes for every unsupported version but ApiVersions').
"""

from __future__ import annotations

import dataclasses
import os
import struct
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka import KafkaAdminClient
from kio.index import KioIndexError
from kio.schema.errors import ErrorCode

from loglake.broker.apis import API_TABLE
from loglake.broker.codec import request_class, response_class
from loglake.dev.harness import wait_until
from tests.admin_util import create_topic
from tests.wire import WireClient

KAFKA_4_0 = {
    0: (3, 12), 1: (4, 17), 2: (1, 10), 3: (0, 13), 8: (2, 9), 9: (1, 9), 10: (0, 6),
    11: (2, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 18: (0, 4),
    19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 5), 23: (2, 4), 32: (1, 4), 33: (0, 2),
    35: (1, 4), 37: (0, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 0), 46: (0, 0),
    47: (0, 0), 60: (0, 2), 28: (0, 5), 27: (1, 1), 61: (0, 0),
    24: (0, 5), 25: (0, 4), 26: (0, 5), 65: (0, 0), 66: (0, 1),
    17: (0, 1), 36: (0, 2), 50: (0, 0), 51: (0, 0),
    29: (1, 3), 30: (1, 3), 31: (1, 3), 48: (0, 1), 49: (0, 1),
}
"""``validVersions`` of Kafka 4.0.0's request schemas (clients/src/main/resources/common/
message/*Request.json in the kafka-clients 4.0.0 jar), for the APIs this broker may serve."""

DOCUMENTED_DIFFERENCES = {
    1: (4, 12),  # Fetch: v13+ address topics by id
    2: (0, 9),   # ListOffsets: v0 kept for Burrow; v10 (remote-read timeout) not yet
    28: (0, 3),  # TxnOffsetCommit: v4+ need transaction version 2 (KIP-890)
    24: (0, 3),  # AddPartitionsToTxn: v4+ is the broker-to-broker form (KIP-890)
    26: (0, 4),  # EndTxn: v5 needs transaction version 2 (KIP-890)
}
"""Where broker/apis.py says, and explains, that we differ from Kafka 4.0."""


def _alive(bootstrap: str) -> None:
    with WireClient.connect(bootstrap) as client:
        response = client.request(18, 3, {"client_software_name": "t",
                                          "client_software_version": "1"})
        assert response.error_code == ErrorCode.none


def _error_codes(entity: Any) -> list[ErrorCode]:
    """Every error code anywhere in a decoded response."""
    found: list[ErrorCode] = []
    if isinstance(entity, ErrorCode):
        return [entity]
    if isinstance(entity, tuple):
        for item in entity:
            found += _error_codes(item)
    elif dataclasses.is_dataclass(entity):
        for field in dataclasses.fields(entity):
            found += _error_codes(getattr(entity, field.name))
    return found


# ------------------------------------------------------------------------------- the table


def test_table_is_kafka_4_0_except_where_documented() -> None:
    for key, api in API_TABLE.items():
        assert key in KAFKA_4_0, f"{api.name} is not a Kafka 4.0 broker API"
        expected = DOCUMENTED_DIFFERENCES.get(key, KAFKA_4_0[key])
        assert (api.min_version, api.max_version) == expected, api.name


def test_documented_ceilings_are_below_kafka_and_floors_not_above() -> None:
    for key, (low, high) in DOCUMENTED_DIFFERENCES.items():
        kafka_low, kafka_high = KAFKA_4_0[key]
        assert low <= kafka_low and high <= kafka_high


def test_every_served_version_has_request_and_response_schemas() -> None:
    for api in API_TABLE.values():
        for version in range(api.min_version, api.max_version + 1):
            assert request_class(api.key, version).__name__.endswith("Request")
            assert response_class(api.key, version).__name__.endswith("Response")


def test_api_versions_advertises_exactly_the_table(cluster) -> None:
    expected = {api.key: (api.min_version, api.max_version) for api in API_TABLE.values()}
    with WireClient.connect(cluster.bootstrap_servers) as client:
        for version in (0, 3, 4):
            response = client.request(18, version, {"client_software_name": "t",
                                                    "client_software_version": "1"})
            assert response.error_code == ErrorCode.none
            got = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            assert got == expected


def test_kafka_python_sees_the_table(cluster) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        versions = admin.api_versions()
    finally:
        admin.close()
    served = {api.key: (api.min_version, api.max_version) for api in API_TABLE.values()}
    assert {key: tuple(pair) for key, pair in versions.items()} == served


# --------------------------------------------------------------- versions outside the table


def _topic_body(key: int, topic: str) -> dict[str, Any]:
    """A small request naming ``topic`` (fields a version lacks are dropped by build)."""
    tid = uuid.uuid4()
    bodies: dict[int, dict[str, Any]] = {
        0: {"acks": 1, "timeout": 5000, "topic_data": [
            {"name": topic, "topic_id": tid, "partition_data": [{"index": 0, "records": None}]}]},
        1: {"max_wait": 100, "min_bytes": 1, "max_bytes": 1024, "replica_id": -1, "topics": [
            {"topic": topic, "topic_id": tid, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}]},
        2: {"replica_id": -1, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "timestamp": -1}]}]},
        8: {"group_id": "g", "topics": [{"name": topic, "topic_id": tid, "partitions": [
            {"partition_index": 0, "committed_offset": 1}]}]},
        9: {"groups": [{"group_id": "g", "topics": None}]},
        11: {"group_id": "g", "session_timeout": 10_000, "rebalance_timeout": 10_000,
             "member_id": "", "protocol_type": "consumer", "protocols": []},
        22: {"transactional_id": None, "transaction_timeout": 1000},
        27: {"markers": [{"producer_id": 1, "producer_epoch": 0, "transaction_result": True,
                          "coordinator_epoch": 0,
                          "topics": [{"name": topic, "partition_indexes": [0]}]}]},
        28: {"transactional_id": "t", "group_id": "g", "producer_id": 1, "producer_epoch": 0,
             "topics": [{"name": topic, "partitions": [
                 {"partition_index": 0, "committed_offset": 1, "committed_metadata": None}]}]},
        32: {"resources": [{"resource_type": 2, "resource_name": topic,
                            "configuration_keys": None}]},
        35: {"topics": None},
    }
    return bodies.get(key, {})


def _outside_with_schema() -> list[tuple[int, int]]:
    cases = []
    for api in API_TABLE.values():
        if api.key == 18:
            continue
        for version in [*range(0, api.min_version), *range(api.max_version + 1, 20)]:
            try:
                request_class(api.key, version)
                response_class(api.key, version)
            except KioIndexError:
                continue
            cases.append((api.key, version))
    return cases


OUTSIDE = _outside_with_schema()


def test_outside_cases_cover_the_interesting_versions() -> None:
    for case in [(0, 13), (1, 13), (1, 17), (2, 10), (11, 0), (11, 1), (32, 0), (35, 0)]:
        assert case in OUTSIDE


@pytest.mark.parametrize(("api_key", "version"), OUTSIDE,
                         ids=[f"{API_TABLE[k].name}-v{v}" for k, v in OUTSIDE])
def test_unsupported_version_is_answered_in_that_version(cluster, api_key, version) -> None:
    topic = "some-topic"
    with WireClient.connect(cluster.bootstrap_servers) as client:
        response = client.request(api_key, version, _topic_body(api_key, topic))
        codes = _error_codes(response)
        assert ErrorCode.unsupported_version in codes
        assert set(codes) <= {ErrorCode.unsupported_version, ErrorCode.none}
        # the same connection still serves supported versions
        again = client.request(18, 3, {"client_software_name": "t",
                                       "client_software_version": "1"})
        assert again.error_code == ErrorCode.none


def test_unsupported_version_echoes_partitions(cluster) -> None:
    with WireClient.connect(cluster.bootstrap_servers) as client:
        response = client.request(8, 10, _topic_body(8, "echoed"))
        partition = response.topics[0].partitions[0]
        assert (partition.partition_index, partition.error_code) == (
            0, ErrorCode.unsupported_version)
        offsets = client.request(2, 10, _topic_body(2, "echoed"))
        assert offsets.topics[0].name == "echoed"
        assert offsets.topics[0].partitions[0].error_code == ErrorCode.unsupported_version
        fetch = client.request(1, 12, {"max_wait": 0, "topics": []})  # served: v12
        assert fetch.error_code == ErrorCode.none
        old_fetch = client.request(1, 13, _topic_body(1, "echoed"))
        assert old_fetch.error_code == ErrorCode.unsupported_version
        assert old_fetch.responses == ()  # v13+: only the top-level code, as in Kafka


def test_describe_configs_v0_gets_a_v0_answer(cluster, topic_name) -> None:
    create_topic(cluster.bootstrap_servers, topic_name)
    with WireClient.connect(cluster.bootstrap_servers) as client:
        response = client.request(32, 0, _topic_body(32, topic_name))
        (result,) = response.results
        assert result.error_code == ErrorCode.unsupported_version
        assert result.resource_name == topic_name
        assert "DescribeConfigs v1-v4" in result.error_message
        (log_dirs,) = client.request(35, 0, {"topics": None}).results
        assert log_dirs.error_code == ErrorCode.unsupported_version


@pytest.mark.parametrize("frame", [
    struct.pack(">hhi", 0, 2, 7) + b"\x00\x01x" + b"\x00" * 10,   # Produce v2: no schema
    struct.pack(">hhi", 1, 3, 7) + b"\x00\x01x" + b"\x00" * 10,   # Fetch v3: no schema
    struct.pack(">hhi", 3, 99, 7) + b"\x00\x01x" + b"\x00" * 10,  # Metadata v99
    struct.pack(">hhi", 2, 10, 7) + b"\x00\x01x" + b"\xff" * 3,   # ListOffsets v10, bad body
], ids=["produce-v2", "fetch-v3", "metadata-v99", "undecodable-body"])
def test_unsupported_version_without_a_parseable_answer_closes(cluster, frame) -> None:
    with WireClient.connect(cluster.bootstrap_servers) as client:
        client.send_raw(struct.pack(">i", len(frame)) + frame)
        assert client.is_closed()
    _alive(cluster.bootstrap_servers)


def test_produce_acks_0_at_unsupported_version_closes(cluster) -> None:
    body = _topic_body(0, "t")
    body["acks"] = 0
    with WireClient.connect(cluster.bootstrap_servers) as client:
        client.send_raw(client.encode(0, 13, body))
        assert client.is_closed()
    _alive(cluster.bootstrap_servers)


def test_refusals_are_logged_once_with_the_served_range(cluster) -> None:
    with WireClient.connect(cluster.bootstrap_servers) as client:
        for _ in range(3):
            client.request(11, 1, _topic_body(11, "t"))
    needle = "JoinGroup v1 is not supported: this broker serves JoinGroup v2-v9"
    wait_until(lambda: needle in cluster.broker_log(1), 5, f"{needle!r} in the broker log")
    assert "'wire-test'" in cluster.broker_log(1)


# -------------------------------------------------------------------- other raised ceilings


def test_find_coordinator_v6_share_key_is_invalid_request(cluster) -> None:
    with WireClient.connect(cluster.bootstrap_servers) as client:
        response = client.request(10, 6, {"key_type": 2, "coordinator_keys": ["g:t:0"]})
        assert response.coordinators[0].error_code == ErrorCode.invalid_request
        group = client.request(10, 6, {"key_type": 0, "coordinator_keys": ["g"]})
        assert group.coordinators[0].error_code == ErrorCode.none


def test_describe_groups_v6_unknown_group_is_group_id_not_found(cluster) -> None:
    group = f"nobody-{uuid.uuid4().hex[:6]}"
    with WireClient.connect(cluster.bootstrap_servers) as client:
        coordinator = client.request(10, 3, {"key": group, "key_type": 0})
    with WireClient("127.0.0.1", coordinator.port) as client:
        new = client.request(15, 6, {"groups": [group]}).groups[0]
        assert new.error_code == ErrorCode.group_id_not_found
        assert new.group_state == "Dead" and group in (new.error_message or "")
        old = client.request(15, 5, {"groups": [group]}).groups[0]
        assert (old.error_code, old.group_state) == (ErrorCode.none, "Dead")


def test_metadata_v13_and_authorized_operations(cluster, topic_name) -> None:
    create_topic(cluster.bootstrap_servers, topic_name)
    with WireClient.connect(cluster.bootstrap_servers) as client:
        v13 = client.request(3, 13, {"topics": [{"name": topic_name}],
                                     "include_topic_authorized_operations": True})
        assert v13.error_code == ErrorCode.none
        assert v13.topics[0].topic_authorized_operations == 3576
        v10 = client.request(3, 10, {"topics": None,
                                     "include_cluster_authorized_operations": True})
        assert v10.cluster_authorized_operations == 8096
        plain = client.request(3, 10, {"topics": None})
        assert plain.cluster_authorized_operations == -2147483648


# ---------------------------------------------------------------------------- ListOffsets v0


def _list_offsets_v0(bootstrap: str, topic: str, partitions: list[tuple[int, int, int]], *,
                     replica_id: int = -1) -> Any:
    with WireClient.connect(bootstrap) as client:
        response = client.request(2, 0, {"replica_id": replica_id, "topics": [
            {"name": topic, "partitions": [
                {"partition_index": p, "timestamp": ts, "max_num_offsets": n}
                for p, ts, n in partitions]}]})
    return response.topics[0].partitions


def _produce_batches(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, b"value-%d" % i, partition=0)
        producer.flush(10)  # one batch each: with a tiny segment.bytes, one segment each


def _segment_files(cluster, topic: str) -> list[Path]:
    directory = cluster.data_dir / "broker-1" / "data" / f"{topic}-0"
    return sorted(directory.glob("*.log"))


def test_list_offsets_v0_latest_and_earliest(cluster, topic_name) -> None:
    create_topic(cluster.bootstrap_servers, topic_name)
    _produce_batches(cluster.bootstrap_servers, topic_name, 3)
    latest, earliest, many = _list_offsets_v0(
        cluster.bootstrap_servers, topic_name, [(0, -1, 1), (0, -2, 1), (0, -1, 10)])
    assert (latest.error_code, latest.old_style_offsets) == (ErrorCode.none, (3,))
    assert earliest.old_style_offsets == (0,)
    assert many.old_style_offsets == (3, 0)  # log end, then the one segment's base


def test_list_offsets_v0_offsets_array_over_segments(cluster, topic_name) -> None:
    create_topic(cluster.bootstrap_servers, topic_name, config={"segment.bytes": "100"})
    _produce_batches(cluster.bootstrap_servers, topic_name, 5)
    files = _segment_files(cluster, topic_name)
    bases = [int(f.stem) for f in files]
    assert bases == [0, 1, 2, 3, 4]
    base_time = int(time.time()) - 10_000
    for i, path in enumerate(files):  # segment i last modified at base_time + 1000 i
        os.utime(path, (base_time + 1000 * i, base_time + 1000 * i))
    ms = base_time * 1000
    answers = _list_offsets_v0(cluster.bootstrap_servers, topic_name, [
        (0, -1, 3),                 # latest: log end 5, then the newest segments
        (0, -2, 3),                 # earliest: only the first
        (0, ms + 2_500_000, 2),     # segments modified by then: 2, then 1
        (0, ms - 1, 5),             # before every segment: nothing
        (0, ms + 99_000_000, 100),  # after all: from the log end back to the start
        (0, -3, 1),                 # v0 knows only -1 and -2
    ])
    assert [a.old_style_offsets for a in answers[:5]] == [
        (5, 4, 3), (0,), (2, 1), (), (5, 4, 3, 2, 1, 0)]
    assert answers[5].error_code == ErrorCode.unsupported_version


def test_list_offsets_v0_errors_per_partition(cluster, topic_name) -> None:
    create_topic(cluster.bootstrap_servers, topic_name)
    answers = _list_offsets_v0(cluster.bootstrap_servers, topic_name, [(0, -1, 1), (7, -1, 1)])
    assert answers[0].old_style_offsets == (0,)
    assert answers[1].error_code == ErrorCode.unknown_topic_or_partition
    missing = _list_offsets_v0(cluster.bootstrap_servers, "no-such-topic-x", [(0, -1, 1)])
    assert missing[0].error_code == ErrorCode.unknown_topic_or_partition


def test_list_offsets_v0_consumer_never_sees_past_the_high_watermark(cluster,
                                                                     topic_name) -> None:
    create_topic(cluster.bootstrap_servers, topic_name)
    _produce_batches(cluster.bootstrap_servers, topic_name, 2)
    (consumer,) = _list_offsets_v0(cluster.bootstrap_servers, topic_name, [(0, -1, 5)])
    (debug,) = _list_offsets_v0(cluster.bootstrap_servers, topic_name, [(0, -1, 5)],
                                replica_id=-2)
    # one replica: the high watermark is the log end, so both agree
    assert consumer.old_style_offsets == debug.old_style_offsets == (2, 0)
