"""``loglake transactions find-hanging | abort | describe-producers`` against real brokers, and
Apache Kafka's own ``kafka-transactions`` tool (``org.apache.kafka.tools.TransactionsCommand``
from the kafka jar set) against the same loglake brokers.

A two-broker cluster of its own (module scope; topics with two replicas, so one broker is a
follower). A hanging transaction is manufactured by tests/hanging_txn_util.py: a
transactional batch stamped an hour ago, written by a producer id no coordinator knows, holds
read_committed consumers back at its first offset. Checked, each through the CLI as a
subprocess: find-hanging finds it (by topic, by topic and partition, by ``--broker-id`` of the
follower: DescribeProducers answered by a follower, as Kafka), not with a max transaction
timeout above its age, not a live transaction the coordinator knows; abort by start offset and
by producer id/epoch/coordinator epoch ends it and a read_committed consumer then gets the
records after it; bad input is one ``loglake: error:`` line with exit status 1 (argparse's 2 for
malformed values). Kafka's tool finds and aborts such a transaction on loglake brokers too
(wire compatibility of DescribeProducers, ListTransactions and WriteTxnMarkers).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from loglake import jvm
from loglake.client import Admin, transactions_cli
from loglake.client import hanging_transactions as txns
from loglake.dev import kafka_peer
from loglake.dev.harness import DevCluster, wait_until
from tests.hanging_txn_util import committed_values, open_transaction, write_hanging

pytestmark = pytest.mark.timeout(300)

HEADER = "\t".join(transactions_cli.HANGING_HEADER)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
         ) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("txn-cli")
    with DevCluster(data / "dev", brokers=2, zookeeper=zookeeper_hosts) as dev:
        yield dev


def _loglake(cluster: DevCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loglake", "transactions", *args,
                           "--bootstrap-server", cluster.bootstrap_servers],
                          capture_output=True, text=True, timeout=90, check=False)


def _topic(cluster: DevCluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=1, replication_factor=2)
    return name


def _leader(cluster: DevCluster, topic: str) -> int:
    with Admin(cluster.bootstrap_servers) as admin:
        return admin.describe_topic(topic).partitions[0].leader


def _hanging_topic(cluster: DevCluster, prefix: str) -> tuple[str, int]:
    """A topic whose partition 0 holds a hanging transaction at offset 0, then b"after"."""
    topic = _topic(cluster, prefix)
    producer_id = 900_000_000 + uuid.uuid4().int % 1_000_000
    write_hanging(cluster, topic, producer_id)
    plain = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    plain.produce(topic, b"after", partition=0)
    assert plain.flush(30) == 0
    return topic, producer_id


def _rows(output: str) -> list[dict[str, str]]:
    lines = output.splitlines()
    assert lines and lines[0] == HEADER, output
    names = lines[0].split("\t")
    return [dict(zip(names, line.split("\t"), strict=True)) for line in lines[1:]]


def test_find_hanging_then_abort_by_start_offset(pair: DevCluster) -> None:
    topic, producer_id = _hanging_topic(pair, "hang")
    # read_committed consumers are held back at the hanging transaction's first offset
    assert committed_values(pair, topic, want=1, wait_s=2) == []

    found = _loglake(pair, "find-hanging", "--topic", topic)
    assert found.returncode == 0, found.stderr
    [row] = _rows(found.stdout)
    assert row["Topic"] == topic and row["Partition"] == "0"
    assert row["ProducerId"] == str(producer_id) and row["ProducerEpoch"] == "0"
    assert row["CoordinatorEpoch"] == "-1" and row["StartOffset"] == "0"
    assert 59 <= int(row["Duration(min)"]) <= 70
    by_partition = _loglake(pair, "find-hanging", "--topic", topic, "--partition", "0")
    assert _rows(by_partition.stdout) == [row]
    # an hour old: not past a two-hour max transaction timeout
    relaxed = _loglake(pair, "find-hanging", "--topic", topic, "--max-transaction-timeout",
                       "120")
    assert relaxed.returncode == 0 and _rows(relaxed.stdout) == []
    # --broker-id: every partition with a replica there, asked of that broker (here the
    # follower: DescribeProducers is answered by any replica, as Kafka)
    follower = 2 if _leader(pair, topic) == 1 else 1
    on_follower = _loglake(pair, "find-hanging", "--broker-id", str(follower))
    assert on_follower.returncode == 0, on_follower.stderr
    assert row in _rows(on_follower.stdout)

    producers = _loglake(pair, "describe-producers", "--topic", topic, "--partition", "0")
    assert producers.returncode == 0, producers.stderr
    lines = producers.stdout.splitlines()
    assert lines[0].split("\t") == list(transactions_cli.PRODUCERS_HEADER)
    assert any(line.startswith(f"{producer_id}\t0\t-1\t2\t") and line.endswith("\t0")
               for line in lines[1:]), producers.stdout

    aborted = _loglake(pair, "abort", "--topic", topic, "--partition", "0",
                       "--start-offset", "0")
    assert aborted.returncode == 0, aborted.stderr
    assert aborted.stdout == "" and f"producer {producer_id}" in aborted.stderr
    assert _rows(_loglake(pair, "find-hanging", "--topic", topic).stdout) == []
    assert committed_values(pair, topic, want=1, wait_s=30) == [b"after"]
    # the same offset again: nothing open there any more
    again = _loglake(pair, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert again.returncode == 1
    assert again.stderr.strip() == ("loglake: error: Could not find any open transactions "
                                    f"starting at offset 0 on partition {topic}-0")


def test_abort_by_producer_id_and_epochs(pair: DevCluster) -> None:
    topic, producer_id = _hanging_topic(pair, "hang-pid")
    # a coordinator epoch of -1 (as DescribeProducers shows before any marker) is taken as 0
    aborted = _loglake(pair, "abort", "--topic", topic, "--partition", "0", "--producer-id",
                       str(producer_id), "--producer-epoch", "0", "--coordinator-epoch", "-1")
    assert aborted.returncode == 0, aborted.stderr
    assert committed_values(pair, topic, want=1, wait_s=30) == [b"after"]
    with Admin(pair.bootstrap_servers) as admin:
        assert txns.find_hanging(admin, [(topic, 0)], max_transaction_timeout_ms=0) == []


def test_a_live_transaction_is_open_but_not_hanging(pair: DevCluster) -> None:
    topic = _topic(pair, "live")
    transactional_id = f"live-{uuid.uuid4().hex[:8]}"
    producer = open_transaction(pair, topic, transactional_id)
    try:
        with Admin(pair.bootstrap_servers) as admin:
            wait_until(lambda: txns.open_transactions(
                txns.describe_producers(admin, [(topic, 0)])), 30, "the open transaction")
        time.sleep(0.01)  # its last write strictly older than a 0-minute max timeout
        found = _loglake(pair, "find-hanging", "--topic", topic, "--max-transaction-timeout",
                         "0")
        assert found.returncode == 0, found.stderr
        assert _rows(found.stdout) == []  # its coordinator names the partition
        # Kafka's spelling of describe's argument
        described = _loglake(pair, "describe", "--transactional-id", transactional_id)
        assert described.returncode == 0, described.stderr
        assert "\tOngoing\t" in described.stdout and f"{topic}-0" in described.stdout
    finally:
        producer.abort_transaction(30)


@pytest.mark.parametrize(("args", "status", "message"), [
    (("find-hanging",), 1, "find-hanging requires either --topic or --broker-id"),
    (("find-hanging", "--partition", "0"), 1, "requires either --topic or --broker-id"),
    (("find-hanging", "--broker-id", "1", "--partition", "0"), 1,
     "the --partition argument requires --topic"),
    (("find-hanging", "--topic", "no-such-topic-txncli"), 1, "UNKNOWN_TOPIC_OR_PARTITION"),
    (("find-hanging", "--topic", "t", "--partition", "x"), 2, "expected an integer"),
    (("find-hanging", "--topic", "t", "--max-transaction-timeout", "-1"), 2,
     "expected an integer from 0"),
    (("find-hanging", "--topic", ""), 2, "must not be empty"),
    (("abort", "--topic", "t", "--partition", "0"), 1,
     "must be identified either with --start-offset"),
    (("abort", "--topic", "t", "--partition", "0", "--producer-id", "5"), 1,
     "missing required argument --producer-epoch"),
    (("abort", "--topic", "t", "--partition", "0", "--producer-id", "5", "--producer-epoch",
      "0"), 1, "missing required argument --coordinator-epoch"),
    (("abort", "--topic", "t", "--partition", "0", "--start-offset", "0", "--producer-id",
      "5"), 1, "not both"),
    (("abort", "--topic", "t", "--partition", "0", "--producer-id", "5", "--producer-epoch",
      "40000", "--coordinator-epoch", "0"), 2, "from 0 to 32767"),
    (("abort", "--topic", "no-such-topic-txncli", "--partition", "0", "--producer-id", "5",
      "--producer-epoch", "0", "--coordinator-epoch", "0"), 1, "UNKNOWN_TOPIC_OR_PARTITION"),
    (("abort", "--partition", "0", "--start-offset", "0"), 2, "--topic"),
    (("describe-producers", "--topic", "no-such-topic-txncli", "--partition", "0"), 1,
     "UNKNOWN_TOPIC_OR_PARTITION"),
    (("describe",), 1, "the transactional id is required"),
    (("describe", "a", "--transactional-id", "b"), 1, "give the transactional id once"),
])
def test_bad_input_is_one_line(pair: DevCluster, args: tuple[str, ...], status: int,
                               message: str) -> None:
    done = _loglake(pair, *args)
    assert done.returncode == status, (done.stdout, done.stderr)
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""
    if status == 1:
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("loglake: error: ")


def test_output_formats() -> None:
    producer = txns.ProducerState(producer_id=7, producer_epoch=3, last_sequence=9,
                                  last_timestamp_ms=1_000, coordinator_epoch=None,
                                  txn_start_offset=42)
    found = [txns.OpenTransaction("t", 2, producer)]
    text = transactions_cli.hanging_output(found, "text", now_ms=1_000 + 61 * 60_000)
    assert text.splitlines() == [HEADER, "t\t2\t7\t3\t-1\t42\t1000\t61"]
    assert transactions_cli.hanging_output([], "text", now_ms=0) == HEADER
    done = transactions_cli.producers_output(
        [txns.ProducerState(7, 3, 9, 1_000, 4, None)], "text")
    assert done.splitlines()[1] == "7\t3\t4\t9\t1000\tNone"


# ------------------------------------------------------- Apache Kafka's kafka-transactions


def _kafka_tool(cluster: DevCluster, work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = kafka_peer.java_command(
        "org.apache.kafka.tools.TransactionsCommand",
        ["--bootstrap-server", cluster.bootstrap_servers, *args],
        log4j=kafka_peer.tools_log4j(work))
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_kafkas_tool_finds_and_aborts_on_loglake(pair: DevCluster, tmp_path: Path) -> None:
    if not jvm.available("kafka"):
        pytest.skip("the Apache Kafka jars are not fetched (run `python -m loglake.jvm fetch "
                    "kafka`; ./run test does)")
    topic, producer_id = _hanging_topic(pair, "hang-kafka")
    follower = 2 if _leader(pair, topic) == 1 else 1

    found = _kafka_tool(pair, tmp_path, "find-hanging", "--topic", topic)
    assert found.returncode == 0, found.stderr
    header, *rows = [line.split() for line in found.stdout.splitlines()]
    assert header == list(transactions_cli.HANGING_HEADER)
    assert [(r[0], r[1], r[2], r[5]) for r in rows] == [(topic, "0", str(producer_id), "0")]
    on_follower = _kafka_tool(pair, tmp_path, "find-hanging", "--broker-id", str(follower))
    assert on_follower.returncode == 0, on_follower.stderr
    assert str(producer_id) in on_follower.stdout

    aborted = _kafka_tool(pair, tmp_path, "abort", "--topic", topic, "--partition", "0",
                          "--start-offset", "0")
    assert aborted.returncode == 0, aborted.stderr
    assert committed_values(pair, topic, want=1, wait_s=30) == [b"after"]
    after = _kafka_tool(pair, tmp_path, "find-hanging", "--topic", topic)
    assert after.returncode == 0 and after.stdout.split() == list(
        transactions_cli.HANGING_HEADER)
