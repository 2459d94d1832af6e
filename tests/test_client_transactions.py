"""The SDK's transactions against the real session ``cluster``: a committed transaction is seen
by read_committed consumers, an aborted one only by read_uncommitted ones; the
``transaction()`` context aborts on an exception; ``run_transform`` copies a topic exactly once
with the group's offsets in step; ``loglake transactions list|describe`` and ``loglake consume
--isolation-level`` as subprocesses."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from loglake.client import Admin, Consumer, Producer
from loglake.client.model import Record
from loglake.client.transform import Output, run_transform
from loglake.dev.harness import DevCluster
from tests.admin_util import create_topic

pytestmark = pytest.mark.timeout(180)


def _read(bootstrap: str, topic: str, isolation: str, expected: int) -> list[Record]:
    with Consumer(bootstrap, isolation_level=isolation) as consumer:  # type: ignore[arg-type]
        consumer.assign(topic, start="earliest")
        return sorted(consumer.consume(expected + 1, timeout=4.0),
                      key=lambda r: (r.partition, r.offset))


def _values(records: list[Record]) -> list[bytes]:
    return sorted(r.value or b"" for r in records)


def _loglake(*args: str, bootstrap: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "loglake", *args, "--bootstrap-server",
                           bootstrap], capture_output=True, timeout=90, check=False)


def test_commit_is_seen_by_read_committed_and_abort_is_not(cluster: DevCluster,
                                                           topic_name: str) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, topic_name, 2)
    producer = Producer(bootstrap, transactional_id=f"sdk-{uuid.uuid4().hex[:8]}")
    with producer.transaction():
        for i in range(10):
            producer.send(topic_name, f"c{i}", partition=i % 2)
    producer.begin_transaction()
    for i in range(5):
        producer.send(topic_name, f"a{i}", partition=i % 2)
    producer.flush()  # the aborted records are in the log: read_uncommitted sees them
    producer.abort_transaction()
    with pytest.raises(RuntimeError, match="boom"), producer.transaction():
        producer.send(topic_name, "never", partition=0)
        raise RuntimeError("boom")

    committed = _read(bootstrap, topic_name, "read_committed", 10)
    assert _values(committed) == sorted(f"c{i}".encode() for i in range(10))
    everything = _values(_read(bootstrap, topic_name, "read_uncommitted", 16))
    assert set(f"a{i}".encode() for i in range(5)) <= set(everything)
    assert len([v for v in everything if v.startswith(b"c")]) == 10


def test_run_transform_copies_exactly_once_with_offsets(cluster: DevCluster,
                                                        topic_name: str) -> None:
    bootstrap = cluster.bootstrap_servers
    source, dest = f"in.{topic_name}", f"out.{topic_name}"
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, dest, 2)
    with Producer(bootstrap) as producer:
        for i in range(200):
            producer.send(source, str(i), key=f"k{i}", partition=i % 2)
    group = f"transform-{uuid.uuid4().hex[:8]}"
    stats = run_transform(bootstrap, source, dest,
                          lambda r: Output(b"x" + (r.value or b""), key=r.key),
                          group_id=group, transactional_id=f"{group}-0", max_batch=50,
                          max_records=200, idle_timeout_s=20)
    assert stats.records_in == 200 and stats.records_out == 200 and stats.aborts == 0
    assert 4 <= stats.transactions <= 200
    out = _read(bootstrap, dest, "read_committed", 200)
    assert _values(out) == sorted(b"x" + str(i).encode() for i in range(200))
    with Admin(bootstrap) as admin:
        assert admin.group_offsets(group) == {(source, 0): 100, (source, 1): 100}
    # a second run finds nothing new past the committed offsets
    again = run_transform(bootstrap, source, dest, lambda r: r.value or b"", group_id=group,
                          transactional_id=f"{group}-0", idle_timeout_s=3)
    assert again.records_in == 0


def test_transactions_list_and_describe_commands(cluster: DevCluster, topic_name: str) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, topic_name, 2)
    transactional_id = f"cli-{uuid.uuid4().hex[:8]}"
    producer = Producer(bootstrap, transactional_id=transactional_id)
    producer.begin_transaction()
    producer.send(topic_name, "open", partition=1)
    producer.flush()  # the partition is added to the transaction: Ongoing

    listed = _loglake("transactions", "list", "--state", "ongoing", bootstrap=bootstrap)
    assert listed.returncode == 0, listed.stderr.decode()
    lines = listed.stdout.decode().splitlines()
    assert lines[0].split("\t") == ["TransactionalId", "Coordinator", "ProducerId",
                                    "TransactionState"]
    mine = [line.split("\t") for line in lines[1:] if line.startswith(transactional_id + "\t")]
    assert len(mine) == 1 and mine[0][3] == "Ongoing"

    described = _loglake("transactions", "describe", transactional_id, bootstrap=bootstrap)
    assert described.returncode == 0, described.stderr.decode()
    header, row = described.stdout.decode().splitlines()
    fields = dict(zip(header.split("\t"), row.split("\t"), strict=True))
    assert fields["TransactionState"] == "Ongoing"
    assert fields["TransactionalId"] == transactional_id
    assert fields["ProducerId"] == mine[0][2]
    assert fields["TopicPartitions"] == f"{topic_name}-1"
    assert fields["CurrentTransactionStartTimeMs"] != "None"

    # read_committed stops before the open transaction; read_uncommitted prints it
    committed = _loglake("consume", topic_name, "--from-beginning", "--timeout-ms", "1500",
                         bootstrap=bootstrap)
    assert committed.returncode == 0 and committed.stdout == b""
    uncommitted = _loglake("consume", topic_name, "--from-beginning", "--timeout-ms", "1500",
                           "--isolation-level", "read_uncommitted", bootstrap=bootstrap)
    assert uncommitted.returncode == 0 and uncommitted.stdout == b"open\n"

    producer.commit_transaction()
    with Admin(bootstrap) as admin:
        assert admin.describe_transaction(transactional_id).state == "CompleteCommit"
    after = _loglake("consume", topic_name, "--from-beginning", "--timeout-ms", "1500",
                     bootstrap=bootstrap)
    assert after.stdout == b"open\n"

    unknown = _loglake("transactions", "describe", "no-such-id", bootstrap=bootstrap)
    assert unknown.returncode == 1
    [line] = unknown.stderr.decode().splitlines()
    assert line.startswith("loglake: error: ") and "transactional_id_not_found" in line


def test_run_transform_failure_leaves_only_committed_batches(cluster: DevCluster,
                                                             topic_name: str) -> None:
    """``func`` raising mid-batch aborts that batch: the output holds exactly the committed
    batches, the group's offsets stop right after them, and a rerun completes the copy once."""
    bootstrap = cluster.bootstrap_servers
    source, dest = f"in.{topic_name}", f"out.{topic_name}"
    create_topic(bootstrap, source, 1)
    create_topic(bootstrap, dest, 1)
    with Producer(bootstrap) as producer:
        for i in range(100):
            producer.send(source, str(i), partition=0)
    group = f"failing-{uuid.uuid4().hex[:8]}"

    def failing(record: Record) -> bytes:
        if record.offset == 75:
            raise ValueError("bad record")
        return record.value or b""

    with pytest.raises(ValueError, match="bad record"):
        run_transform(bootstrap, source, dest, failing, group_id=group,
                      transactional_id=group, max_batch=25, idle_timeout_s=20)
    with Admin(bootstrap) as admin:
        committed = admin.group_offsets(group)[(source, 0)]
    assert committed <= 75
    written = _values(_read(bootstrap, dest, "read_committed", 100))
    assert written == sorted(str(i).encode() for i in range(committed))
    stats = run_transform(bootstrap, source, dest, lambda r: r.value or b"", group_id=group,
                          transactional_id=group, idle_timeout_s=3)
    assert stats.records_in == 100 - committed
    assert _values(_read(bootstrap, dest, "read_committed", 100)) == sorted(
        str(i).encode() for i in range(100))


def test_list_merges_every_coordinator(tmp_path: Path, zookeeper_hosts: str) -> None:
    """With 3 brokers the transactional ids spread over several coordinators; the listing
    holds every id once, each with the coordinator that describes it."""
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts, brokers=3) as cluster:
        bootstrap = cluster.bootstrap_servers
        with Admin(bootstrap) as admin:
            admin.create_topic("merged", partitions=3, replication_factor=3)
        ids = [f"merge-{i}-{uuid.uuid4().hex[:6]}" for i in range(12)]
        for transactional_id in ids:
            producer = Producer(bootstrap, transactional_id=transactional_id)
            with producer.transaction():
                producer.send("merged", transactional_id)
        with Admin(bootstrap) as admin:
            listed = {t.transactional_id: t for t in admin.list_transactions()}
            assert set(ids) <= set(listed)
            coordinators = {admin.describe_transaction(i).coordinator: i for i in ids}
            for transactional_id in ids:
                assert listed[transactional_id].state == "CompleteCommit"
                assert listed[transactional_id].coordinator == admin.describe_transaction(
                    transactional_id).coordinator
        assert len(coordinators) >= 2, "12 ids should not all land on one coordinator"
