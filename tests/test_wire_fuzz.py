"""Hostile frames against a live broker process: it stays up, keeps serving, and its memory stays
bounded.

* Fuzz: Hypothesis builds requests of every API key and version the broker advertises (kio's
  writer over random entities), then sets lengths/counts/varints out of range, truncates them,
  or splices random bytes in (tests/request_strategies.py). Each frame goes on a fresh
  connection; after each batch the broker process must be alive, answer a produce and a fetch
  within 2 s, and its resident memory (VmRSS of its pid) must stay under a bound. Short by
  default (300 frames); thousands under ``--run-slow``.
* Connection byte caps: many connections each park a partial large frame; the broker closes the
  ones over ``queued.max.request.bytes`` (the stalest first), its RSS stays bounded, and a
  normal client produces and fetches meanwhile.
* Null arrays: OffsetFetch v2+ with null topics answers every committed offset, DescribeConfigs
  with null configuration keys every config (Kafka semantics); a null where the schema has none
  (ListOffsets v1 topics, OffsetFetch v1 topics) closes the connection as Kafka's parser does,
  and the broker logs no handler failure.

The broker runs with small caps (16 MiB frames, 32 MiB request budget) so the cap test is quick.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from loglake.dev.harness import DevCluster, wait_until
from loglake.segments.records import Record, encode_batch
from tests.admin_util import create_topic
from tests.request_strategies import damaged_frames
from tests.wire import WireClient

FRAME_MAX = 16 << 20
BUDGET = 32 << 20
READ_AHEAD = 256 << 10
RSS_ALLOWANCE_MB = 160  # over the warmed-up baseline; an unbounded allocation is gigabytes
ALIVE_TOPIC = "fuzz-alive"
BATCH = 20


class LiveBroker:
    """The module's one-broker cluster: its pid, and what a healthy broker must still do."""

    def __init__(self, cluster: DevCluster) -> None:
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap_servers
        host, _, port = self.bootstrap.split(",")[0].rpartition(":")
        self.address = (host, int(port))
        self.pid = next(s.pid for s in cluster.status() if s.role == "broker")
        self.baseline_mb = 0

    def rss_mb(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
        raise AssertionError(f"no VmRSS for broker pid {self.pid}")

    def alive(self) -> bool:
        try:
            state = Path(f"/proc/{self.pid}/status").read_text()
        except FileNotFoundError:
            return False
        return "State:\tZ" not in state

    def assert_healthy(self, context: str = "") -> None:
        assert self.alive(), f"broker process {self.pid} died {context}\n" + self.log_tail()
        started = time.monotonic()
        produce_and_fetch(self.bootstrap, ALIVE_TOPIC, timeout=2.0)
        took = time.monotonic() - started
        assert took < 2.0, f"produce + fetch took {took:.2f} s {context}"
        rss = self.rss_mb()
        assert rss < self.baseline_mb + RSS_ALLOWANCE_MB, (
            f"broker RSS {rss} MiB > baseline {self.baseline_mb} + {RSS_ALLOWANCE_MB} {context}")

    def log_tail(self) -> str:
        return self.cluster.broker_log(1)[-4000:]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[LiveBroker]:
    data = tmp_path_factory.mktemp("wire-fuzz")
    with DevCluster(data / "dev", zookeeper=zookeeper_hosts, brokers=1, broker_overrides={
        "socket.request.max.bytes": str(FRAME_MAX),
        "queued.max.request.bytes": str(BUDGET),
        "queued.max.request.bytes.per.connection": str(READ_AHEAD),
    }) as dev:
        broker = LiveBroker(dev)
        create_topic(broker.bootstrap, ALIVE_TOPIC)
        for _ in range(3):  # warm up: schemas, partition, first requests
            produce_and_fetch(broker.bootstrap, ALIVE_TOPIC, timeout=10.0)
        broker.baseline_mb = broker.rss_mb()
        yield broker


def produce_and_fetch(bootstrap: str, topic: str, *, timeout: float) -> None:
    """Produce one record (acks=1) and fetch it back, each on the same new connection."""
    value = os.urandom(8).hex().encode()
    batch = encode_batch([Record(offset=0, timestamp=int(time.time() * 1000), key=None,
                                 value=value)])
    with WireClient.connect(bootstrap, timeout=timeout) as client:
        produced = client.request(0, 9, {"acks": 1, "timeout": int(timeout * 1000),
                                         "topic_data": [{"name": topic, "partition_data": [
                                             {"index": 0, "records": batch}]}]})
        part = produced.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.none, part
        fetched = client.request(1, 12, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": part.base_offset, "partition_max_bytes": 1 << 20,
                 "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}
            ]}]})
        records = fetched.responses[0].partitions[0].records or b""
        assert value in records, "the produced record did not come back"


def _send_batch(live: LiveBroker, cases: list[tuple[int, int, bytes, str]]) -> None:
    """Each frame on a fresh connection; then give the broker a moment and close them all."""
    sockets = []
    try:
        for _key, _version, frame, _what in cases:
            sock = socket.create_connection(live.address, timeout=5)
            sockets.append(sock)
            with contextlib.suppress(OSError):  # already closed by the broker: fine
                sock.sendall(struct.pack(">i", len(frame)) + frame)
        deadline = time.monotonic() + 0.5
        for sock in sockets:  # read whatever comes (answer or close) for a short while
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            with contextlib.suppress(OSError):
                sock.recv(65536)
    finally:
        for sock in sockets:
            sock.close()


def _fuzz(live: LiveBroker, batches: int) -> None:
    done = [0]
    peak = [live.rss_mb()]

    @settings(max_examples=batches, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(cases=st.lists(damaged_frames(), min_size=BATCH, max_size=BATCH))
    def batch(cases: list[tuple[int, int, bytes, str]]) -> None:
        _send_batch(live, cases)
        done[0] += len(cases)
        described = "; ".join(f"{k}v{v}: {what}" for k, v, _f, what in cases)
        live.assert_healthy(f"after batch of {described}")
        peak[0] = max(peak[0], live.rss_mb())

    batch()
    assert done[0] == batches * BATCH
    print(f"{done[0]} fuzzed frames; broker RSS {live.baseline_mb} MiB warmed up, "
          f"{peak[0]} MiB at most")


def test_fuzzed_frames_for_every_api_version_leave_the_broker_serving(live: LiveBroker) -> None:
    started = time.monotonic()
    _fuzz(live, batches=15)
    assert time.monotonic() - started < 120


@pytest.mark.slow
def test_fuzzed_frames_long_run(live: LiveBroker) -> None:
    _fuzz(live, batches=250)


def test_the_reported_frame_is_refused_and_the_broker_serves(live: LiveBroker) -> None:
    with WireClient.connect(live.bootstrap) as client:
        client.send_raw(bytes.fromhex("000000140003000c00000007000466757a7a00ffffffff0f"))
        assert client.is_closed()
    live.assert_healthy("after the Metadata v12 frame of 2**32 topics")


# --------------------------------------------------------------------------------------------
# connection byte caps


def _closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_partial_frames_over_the_budget_are_closed_and_clients_still_served(
        live: LiveBroker) -> None:
    # 80 connections each announce a 12 MiB Produce and send 3 MiB of it: 240 MiB would be
    # held (over the RSS allowance) without the 32 MiB budget
    connections, sent = 80, 3 << 20
    parked: list[socket.socket] = []
    body = struct.pack(">hhih", 0, 9, 1, 0) + b"\0" * (sent - 10)
    try:
        for _ in range(connections):
            sock = socket.create_connection(live.address, timeout=5)
            parked.append(sock)
            with contextlib.suppress(OSError):  # closed by the broker while sending: fine
                sock.sendall(struct.pack(">i", 12 << 20) + body)
        live.assert_healthy(f"with {connections} parked partial frames")
        # each survivor holds its 3 MiB plus the chunk reserved for what comes next
        survivors = BUDGET // sent
        closed = [0]

        def enough_closed() -> bool:
            closed[0] = sum(_closed(s) for s in parked)
            return closed[0] >= connections - survivors

        wait_until(enough_closed, 10, lambda: f"only {closed[0]} of {connections} closed",
                   interval=0.2)
        assert "request memory full" in live.cluster.broker_log(1)
    finally:
        for sock in parked:
            sock.close()
    live.assert_healthy("after the parked connections left")


def test_a_large_frame_sent_in_full_is_served_while_others_are_parked(
        live: LiveBroker) -> None:
    parked: list[socket.socket] = []
    try:
        for _ in range(40):
            sock = socket.create_connection(live.address, timeout=5)
            sock.sendall(struct.pack(">i", 12 << 20) + b"\0" * (1 << 19))
            parked.append(sock)
        value = b"v" * (4 << 20)  # a 4 MiB record: read in chunks, each reserved
        batch = encode_batch([Record(offset=0, timestamp=int(time.time() * 1000), key=None,
                                     value=value)])
        with WireClient.connect(live.bootstrap, timeout=10) as client:
            produced = client.request(0, 9, {"acks": 1, "timeout": 5000, "topic_data": [
                {"name": ALIVE_TOPIC, "partition_data": [{"index": 0, "records": batch}]}]})
        assert produced.responses[0].partition_responses[0].error_code in (
            ErrorCode.none, ErrorCode.message_too_large)
    finally:
        for sock in parked:
            sock.close()
    live.assert_healthy("after a 4 MiB produce among parked connections")


def test_pipelined_requests_beyond_the_read_ahead_are_all_answered(live: LiveBroker) -> None:
    # 30 Produce requests of 64 KiB written at once: 2 MiB, over seven times the read-ahead; the
    # broker reads them as it answers them, in order
    count = 30
    with WireClient.connect(live.bootstrap, timeout=10) as client:
        frames = b"".join(client.encode(0, 9, {
            "acks": 1, "timeout": 5000, "topic_data": [{"name": ALIVE_TOPIC, "partition_data": [
                {"index": 0, "records": encode_batch([Record(
                    offset=0, timestamp=int(time.time() * 1000), key=None,
                    value=b"%d" % i + b"p" * (64 << 10))])}]}]}) for i in range(count))
        assert len(frames) > 7 * READ_AHEAD
        client.send_raw(frames)
        offsets = []
        for _ in range(count):
            response = WireClient.decode_response(0, 9, client.recv_frame())
            part = response.responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.none
            offsets.append(part.base_offset)
    assert offsets == sorted(offsets) and len(set(offsets)) == count


# --------------------------------------------------------------------------------------------
# null arrays


def _raw(live: LiveBroker, payload: bytes) -> WireClient:
    client = WireClient(*live.address)
    client.send_raw(struct.pack(">i", len(payload)) + payload)
    return client


def _commit(live: LiveBroker, group: str) -> None:
    with WireClient.connect(live.bootstrap) as client:
        response = client.request(8, 2, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "retention_time_ms": -1, "topics": [{"name": ALIVE_TOPIC, "partitions": [
                {"partition_index": 0, "committed_offset": 3, "committed_metadata": "m"}]}]})
        assert response.topics[0].partitions[0].error_code == ErrorCode.none


@pytest.mark.parametrize("version", [2, 5, 7])
def test_offset_fetch_null_topics_answers_every_committed_offset(
        live: LiveBroker, version: int) -> None:
    group = f"null-topics-{version}"
    _commit(live, group)
    with WireClient.connect(live.bootstrap) as client:
        body: dict[str, Any] = {"group_id": group, "topics": None}
        if version >= 7:
            body["require_stable"] = False
        response = client.request(9, version, body)
    assert response.error_code == ErrorCode.none
    assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
            for t in response.topics] == [(ALIVE_TOPIC, [(0, 3)])]


def test_offset_fetch_v8_null_group_topics_answers_every_committed_offset(
        live: LiveBroker) -> None:
    _commit(live, "null-topics-8")
    with WireClient.connect(live.bootstrap) as client:
        response = client.request(9, 8, {"groups": [{"group_id": "null-topics-8",
                                                     "topics": None}], "require_stable": False})
    group = response.groups[0]
    assert group.error_code == ErrorCode.none
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in group.topics] == [
        (ALIVE_TOPIC, [3])]


def test_describe_configs_null_keys_answers_every_config(live: LiveBroker) -> None:
    with WireClient.connect(live.bootstrap) as client:
        response = client.request(32, 4, {"resources": [
            {"resource_type": 2, "resource_name": ALIVE_TOPIC, "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False})
    result = response.results[0]
    assert result.error_code == ErrorCode.none
    assert {"retention.ms", "cleanup.policy"} <= {c.name for c in result.configs}


@pytest.mark.parametrize(("what", "payload"), ids=["list-offsets-v1", "offset-fetch-v1",
                                                    "offset-fetch-v2-partitions"], argvalues=[
    # ListOffsets v1: replica_id -1, topics null
    ("ListOffsetsRequest.topics", struct.pack(">hhih", 2, 1, 7, 0) + struct.pack(">ii", -1, -1)),
    # OffsetFetch v1: group "g", topics null (nullable only from v2)
    ("OffsetFetchRequest.topics", struct.pack(">hhih", 9, 1, 7, 0) + b"\x00\x01g"
     + struct.pack(">i", -1)),
    # OffsetFetch v2: one topic whose partition_indexes is null
    ("OffsetFetchRequestTopic.partition_indexes", struct.pack(">hhih", 9, 2, 7, 0)
     + b"\x00\x01g" + struct.pack(">i", 1) + b"\x00\x01t" + struct.pack(">i", -1)),
])
def test_null_where_the_schema_has_none_closes_cleanly(
        live: LiveBroker, what: str, payload: bytes) -> None:
    before = len(live.cluster.broker_log(1))
    with _raw(live, payload) as client:
        assert client.is_closed()
    log = live.cluster.broker_log(1)[before:]
    assert f"{what}: null where the schema has no null" in log
    assert "handler failed" not in log and "Traceback" not in log
    live.assert_healthy(f"after a null {what}")
