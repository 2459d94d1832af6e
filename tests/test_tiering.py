"""Tiering to Delta Lake with real brokers: exactly-once tiering (also across crashes and
failover), local retention, fetches and ListOffsets below the local log served from the table
(confluent-kafka and kcat), backfill, opt-out, topic deletion, and the same on S3."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable

from loglake.client.admin import Admin
from loglake.dev.harness import DevCluster, wait_until
from loglake.segments.storage import Storage
from loglake.segments.tiered_table import TieredTable
from tests.admin_util import create_topic
from tests.replication_checks import (
    REPLICATION_OVERRIDES,
    ProducerLoop,
    create_replicated_topic,
    partition_leader,
)
from tests.tiering_util import (
    SMALL_SEGMENTS,
    as_sent,
    by_place,
    consume,
    produce,
    table_rows,
    wait_local_start,
    wait_tiered,
)
from tests.wire import WireClient

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


def assert_table_matches(storage: str | Storage, topic: str, partition: int,
                         expected: dict[tuple[int, int], object], *, up_to: int) -> None:
    """The table holds offsets [0, up_to) of ``partition`` exactly once, each equal to what the
    log held there."""
    rows = table_rows(storage, topic, partition)
    offsets = rows.column("offset").to_pylist()
    assert offsets[:up_to] == list(range(up_to)), (
        f"{topic}-{partition}: table offsets not contiguous/unique from 0: "
        f"{len(offsets)} rows, {len(set(offsets))} distinct, first {offsets[:5]}")
    for record in as_sent(rows, partition)[:up_to]:
        assert expected[(partition, record.offset)] == record, (
            f"{topic}-{partition}@{record.offset}: table row differs from the log")


def test_sealed_segments_are_tiered_once_and_match_the_log(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name, partitions=2, config=SMALL_SEGMENTS)
    sent = produce(cluster.bootstrap_servers, topic_name, 3000)
    ends = wait_tiered(cluster.storage_url, topic_name, (0, 1), at_least=500)
    expected = by_place(sent)
    for partition, end in ends.items():
        assert_table_matches(cluster.storage_url, topic_name, partition, expected, up_to=end)
    # a plain Delta table: deltalake reads it without loglake
    storage = Storage.from_url(cluster.storage_url)
    uri = storage.table_uri(topic_name)
    snapshot = DeltaTable(uri)
    plain = snapshot.to_pyarrow_table(filesystem=storage.pyarrow_filesystem(uri))
    versions = [snapshot.transaction_version(f"{topic_name}-{p}") for p in (0, 1)]
    assert plain.num_rows == sum(v + 1 for v in versions if v is not None)
    assert set(plain.column("partition").to_pylist()) == {0, 1}


def test_consumers_read_tiered_history_byte_identical(cluster, topic_name):
    """Local retention deletes tiered segments; a consumer from offset 0 gets every record
    back (keys, values, headers, timestamps), whatever codec the producers used."""
    create_topic(cluster.bootstrap_servers, topic_name, partitions=2,
                 config={**SMALL_SEGMENTS, "local.retention.ms": "0"})
    sent: list = []
    for i, codec in enumerate(("none", "gzip", "snappy", "lz4", "zstd")):
        sent += produce(cluster.bootstrap_servers, topic_name, 700, start=i * 700,
                        config={"compression.type": codec})
    starts = wait_local_start(cluster.zookeeper_connect, topic_name, (0, 1), above=500)
    low, _high = _watermarks(cluster.bootstrap_servers, topic_name, 0)
    assert low == 0, "earliest offset must be the table's first offset, not the local start"
    got = consume(cluster.bootstrap_servers, topic_name, (0, 1), expected=len(sent))
    assert sorted(got, key=lambda r: (r.partition, r.offset)) == sorted(
        sent, key=lambda r: (r.partition, r.offset))
    assert all(starts[p] > 0 for p in (0, 1))

    # kcat (librdkafka's CLI) from the beginning of partition 0: same records
    assert KCAT is not None
    out = subprocess.run(
        [KCAT, "-b", cluster.bootstrap_servers, "-C", "-t", topic_name, "-p", "0", "-o",
         "beginning", "-e", "-J", "-D", "\n"], capture_output=True, text=True, timeout=120,
        check=True).stdout
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    expected = {r.offset: r for r in sent if r.partition == 0}
    assert [r["offset"] for r in records] == sorted(expected)
    for record in records[:starts[0] + 50]:
        want = expected[record["offset"]]
        assert record["ts"] == want.timestamp
        assert (record["key"] is None) == (want.key is None)
        if want.key is not None:
            assert record["key"] == want.key.decode()


def test_list_offsets_by_time_reaches_into_the_table(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name, config={
        **SMALL_SEGMENTS, "local.retention.ms": "0"})
    sent = produce(cluster.bootstrap_servers, topic_name, 2000)
    wait_local_start(cluster.zookeeper_connect, topic_name, (0,), above=300)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "t"})
    try:
        target = sent[120]
        found = consumer.offsets_for_times(
            [TopicPartition(topic_name, 0, target.timestamp)], timeout=15)
        assert found[0].offset == target.offset
    finally:
        consumer.close()


def test_list_offsets_earliest_local_and_latest_tiered(cluster, topic_name):
    """ListOffsets v8's EARLIEST_LOCAL (-4) is the local log start, v9's LATEST_TIERED (-5)
    the last tiered offset (Kafka's KIP-405 / KIP-1005 answers); EARLIEST (-2) stays the
    table's first offset."""
    create_topic(cluster.bootstrap_servers, topic_name, config={
        **SMALL_SEGMENTS, "local.retention.ms": "0"})
    produce(cluster.bootstrap_servers, topic_name, 2000)
    wait_local_start(cluster.zookeeper_connect, topic_name, (0,), above=300)
    with WireClient.connect(cluster.bootstrap_servers) as client:
        def offset(timestamp: int, version: int = 9) -> int:
            wanted = {"partition_index": 0, "timestamp": timestamp, "current_leader_epoch": -1}
            response = client.request(2, version, {
                "replica_id": -1, "isolation_level": 0,
                "topics": [{"name": topic_name, "partitions": [wanted]}]})
            part = response.topics[0].partitions[0]
            assert part.error_code == 0, (timestamp, part.error_code)
            return int(part.offset)
        earliest, local, tiered = offset(-2), offset(-4, version=8), offset(-5)
    table_end = TieredTable(Storage.from_url(cluster.storage_url), topic_name).tiered_end(0)
    assert earliest == 0
    assert 300 < local < 2000
    assert local - 1 <= tiered < (table_end or 0), (local, tiered, table_end)


def test_backfill_when_tiering_is_enabled_later(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name,
                 config={**SMALL_SEGMENTS, "remote.storage.enable": "false"})
    sent = produce(cluster.bootstrap_servers, topic_name, 1500)
    time.sleep(2)
    table = TieredTable(Storage.from_url(cluster.storage_url), topic_name)
    assert not table.exists(), "a topic with remote.storage.enable=false must not be tiered"
    with Admin(cluster.bootstrap_servers) as admin:
        admin.alter_config(topic_name, set={"remote.storage.enable": "true"})
    ends = wait_tiered(cluster.storage_url, topic_name, (0,), at_least=500)
    assert_table_matches(cluster.storage_url, topic_name, 0, by_place(sent), up_to=ends[0])


def test_local_retention_without_tiering_follows_retention_bytes(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name, config={
        **SMALL_SEGMENTS, "remote.storage.enable": "false", "retention.bytes": "100000"})
    produce(cluster.bootstrap_servers, topic_name, 4000)
    low, high = wait_until(
        lambda: (marks := _watermarks(cluster.bootstrap_servers, topic_name, 0))[0] > 0
        and marks, 30, "the local log start to move past 0", interval=0.3)
    assert low > 0 and high == 4000


def test_deleting_a_topic_deletes_its_table(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name, config=SMALL_SEGMENTS)
    produce(cluster.bootstrap_servers, topic_name, 1000)
    wait_tiered(cluster.storage_url, topic_name, (0,), at_least=100)
    with Admin(cluster.bootstrap_servers) as admin:
        admin.delete_topic(topic_name)
    table_dir = Path(Storage.from_url(cluster.storage_url).table_uri(topic_name))
    wait_until(lambda: not table_dir.exists(), 15, f"{table_dir} deleted", interval=0.2)


def test_deleted_topic_table_stays_deleted_while_tiering_catches_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zookeeper_hosts: str) -> None:
    """DeleteTopics while the leader still has sealed segments to tier: the table is removed
    and the tierer does not create it again before the broker drops the deleted partitions
    (they are retired at once; a tier turn in flight ends before the removal)."""
    hold, keep = tmp_path / "hold", tmp_path / "keep"
    hold.touch()
    keep.touch()  # the broker keeps the deleted replicas (as a slow watch would) until removed
    monkeypatch.setenv("LOGLAKE_HOLD_AT", f"tier-before-write={hold},topic-drop={keep}")
    topic = "deleted-while-tiering"
    with DevCluster(tmp_path / "c", zookeeper=zookeeper_hosts, brokers=1) as dev:
        create_topic(dev.bootstrap_servers, topic, partitions=1, config=SMALL_SEGMENTS)
        produce(dev.bootstrap_servers, topic, 6000)  # ~30 sealed segments held back
        hold.unlink()
        wait_tiered(dev.storage_url, topic, (0,), at_least=1)
        # the DeleteTopics answer only (the SDK's Admin would also wait for metadata to drop
        # the topic, which the hold postpones)
        admin = AdminClient({"bootstrap.servers": dev.bootstrap_servers})
        deleted = admin.delete_topics([topic], operation_timeout=30, request_timeout=40)
        deleted[topic].result(timeout=45)
        table_dir = Path(Storage.from_url(dev.storage_url).table_uri(topic))
        wait_until(lambda: not table_dir.exists(), 30, f"{table_dir} deleted", interval=0.1)
        for _ in range(40):  # 4 s: pending segments would have been tiered by now
            assert not table_dir.exists(), "a tier commit re-created the deleted topic's table"
            time.sleep(0.1)
        keep.unlink()  # the broker drops the replicas now; the table stays gone
        wait_until(lambda: not any(dev.data_dir.glob(f"**/{topic}-0")), 30,
                   "the deleted partition's directory removed")
        assert not table_dir.exists()


@pytest.mark.parametrize("point", ["tier-after-write", "tier-after-commit"])
def test_tiering_is_exactly_once_across_a_crash(tmp_path, monkeypatch, point, zookeeper_hosts: str):
    """SIGKILL the broker between Parquet write and Delta commit, and between the commit and
    its bookkeeping: after a restart the table holds every sealed record exactly once."""
    topic = "crashy"
    monkeypatch.setenv("LOGLAKE_CRASH_AT", point)
    with DevCluster(tmp_path / "c", zookeeper=zookeeper_hosts, brokers=1) as dev:
        # produce with tiering off (every record acknowledged), then switch it on: the broker
        # dies at the crash point on its first tiering attempt
        create_topic(dev.bootstrap_servers, topic, partitions=1,
                     config={**SMALL_SEGMENTS, "remote.storage.enable": "false"})
        sent = produce(dev.bootstrap_servers, topic, 1500)  # rolls a few segments
        with Admin(dev.bootstrap_servers) as admin:
            admin.alter_config(topic, set={"remote.storage.enable": "true"})
        wait_until(lambda: not _broker_alive(dev), 30, f"the broker did not crash at {point}",
                   interval=0.2)
        storage = Storage.from_url(dev.storage_url)
        table_dir = Path(storage.table_uri(topic))
        files_on_disk = list(table_dir.rglob("*.parquet"))
        assert files_on_disk, "the crash came after a Parquet file was written"
        monkeypatch.delenv("LOGLAKE_CRASH_AT")
        dev.start_broker(1)
        sent += produce(dev.bootstrap_servers, topic, 1500, start=1500)
        ends = wait_tiered(storage, topic, (0,), at_least=1000)
        log = by_place(consume(dev.bootstrap_servers, topic, (0,), expected=len(sent)))
        assert len(log) == len(sent)
        assert_table_matches(storage, topic, 0, log, up_to=ends[0])
        live = {Path(f.uri).name for f in TieredTable(storage, topic).files(0)}
        orphans = [f for f in files_on_disk if f.name not in live]
        if point == "tier-after-write":
            assert orphans, "the uncommitted file of the crashed attempt stays unreferenced"


@pytest.mark.slow
def test_tiering_survives_leader_failover(tmp_path, zookeeper_hosts: str):
    """3 brokers, RF 3: kill the leader while it tiers; the new leader continues from the
    table's app-transaction version; every sealed record is in the table exactly once."""
    topic = "failover"
    with DevCluster(tmp_path / "c", zookeeper=zookeeper_hosts,
                    brokers=3, broker_overrides=REPLICATION_OVERRIDES) as dev:
        create_replicated_topic(dev.bootstrap_servers, topic, partitions=1,
                                config=SMALL_SEGMENTS)
        with ProducerLoop(dev.bootstrap_servers, topic, partitions=1, rate=1500,
                          max_seconds=90, config={"batch.size": 16000}) as loop:
            loop.wait_acked(2000, timeout=60)
            wait_tiered(dev.storage_url, topic, (0,), at_least=200)
            leader = partition_leader(dev.bootstrap_servers, topic, 0)
            dev.kill_broker(leader)
            loop.wait_progress(2000, timeout=90)
            dev.start_broker(leader)
            loop.wait_progress(1000, timeout=60)
        acked = loop.acked
        ends = wait_tiered(dev.storage_url, topic, (0,), at_least=len(acked) // 2, timeout=60)
        log = by_place(consume(dev.bootstrap_servers, topic, (0,), expected=len(acked)))
        assert {value for value, _place in acked.items()} <= {r.value for r in log.values()}
        assert_table_matches(dev.storage_url, topic, 0, log, up_to=ends[0])


def test_tiering_and_tier_reads_on_s3(tmp_path, monkeypatch, s3_server, zookeeper_hosts: str):
    """The same tiering and read path against an S3 endpoint on loopback."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    url = s3_server.url(f"lake-{os.getpid()}-{time.monotonic_ns()}")
    topic = "s3topic"
    with DevCluster(tmp_path / "c", zookeeper=zookeeper_hosts, brokers=1, storage=url) as dev:
        create_topic(dev.bootstrap_servers, topic, partitions=1,
                     config={**SMALL_SEGMENTS, "local.retention.ms": "0"})
        sent = produce(dev.bootstrap_servers, topic, 1500)
        storage = Storage.from_url(url)
        ends = wait_tiered(storage, topic, (0,), at_least=500)
        wait_local_start(dev.zookeeper_connect, topic, (0,), above=300)
        got = consume(dev.bootstrap_servers, topic, (0,), expected=len(sent))
        assert sorted(got, key=lambda r: r.offset) == sorted(sent, key=lambda r: r.offset)
        assert_table_matches(storage, topic, 0, by_place(sent), up_to=ends[0])


def _broker_alive(dev: DevCluster) -> bool:
    return any(s.alive for s in dev.status() if s.role == "broker" and s.id == 1)


def _watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=15,
                                                   cached=False)
        return int(low), int(high)
    finally:
        consumer.close()


def test_tiering_status_cli_reports_lag(cluster, topic_name, capsys):
    from loglake.cli import main

    create_topic(cluster.bootstrap_servers, topic_name, config=SMALL_SEGMENTS)
    produce(cluster.bootstrap_servers, topic_name, 1500)
    wait_tiered(cluster.storage_url, topic_name, (0,), at_least=500)

    def status_with_tiered_end() -> str:
        assert main(["tiering", "status", topic_name,
                     "--zookeeper", cluster.zookeeper_connect]) == 0
        out = capsys.readouterr().out
        return out if re.search(r"TieredEnd: \d+", out) else ""

    out = wait_until(status_with_tiered_end, 15, "a TieredEnd in the tiering status",
                     interval=0.5)
    assert f"Storage: {cluster.storage_url}" in out
    assert "Partition: 0\tLeader: 1\tTierStart: 0\tTieredEnd: " in out
    assert "LagOffsets: 0" in out
    assert main(["tiering", "status", "no-such-topic",
                 "--zookeeper", cluster.zookeeper_connect]) == 1
