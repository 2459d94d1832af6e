"""Transaction coordinator metrics (broker/metrics/transaction_metrics.py) against a real broker
process with ``metrics.listener``, driven by real confluent-kafka transactional producers.

Checked: a committed transaction over two partitions adds exactly 2 commit markers, an aborted
one over one partition 1 abort marker; an Ongoing transaction shows in the per-state gauge and,
left past its timeout, is aborted by the coordinator (timed-out aborts + 1, its abort marker
counted); the state partition load time is a number after the first takeover (avg <= max); no
marker is left pending. The recorders' windows and sums are checked in process.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from loglake.broker.metrics.transaction_metrics import LoadTimes, MarkerCounts
from loglake.dev.harness import DevCluster, wait_until
from tests.test_broker_metrics import broker_metrics_url, scrape, value

COMMIT = "loglake_transaction_markers_written_total"
STATES = "loglake_transaction_coordinator_transactions"
TIMED_OUT = "loglake_transaction_coordinator_timed_out_aborts_total"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("txn-metrics")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts, broker_overrides={
            "metrics.listener": "http://127.0.0.1:0",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def url(dev: DevCluster) -> str:
    return broker_metrics_url(dev)


def _producer(dev: DevCluster, timeout_ms: int = 60000) -> Producer:
    producer = Producer({"bootstrap.servers": dev.bootstrap_servers,
                         "transactional.id": f"m-{uuid.uuid4().hex[:8]}",
                         "transaction.timeout.ms": timeout_ms})
    producer.init_transactions(30)
    return producer


def test_markers_states_timeouts_and_load_time(dev: DevCluster, url: str) -> None:
    topic = f"txn-metrics-{uuid.uuid4().hex[:8]}"
    dev.create_topic(topic, partitions=2)
    producer = _producer(dev)
    before = scrape(url)
    producer.begin_transaction()
    producer.produce(topic, b"a", partition=0)
    producer.produce(topic, b"b", partition=1)
    producer.commit_transaction(30)
    wait_until(lambda: value(scrape(url), COMMIT, result="commit")
               - value(before, COMMIT, result="commit") >= 2, 20, "2 commit markers")
    after = scrape(url)
    assert value(after, COMMIT, result="commit") - value(before, COMMIT, result="commit") == 2
    assert value(after, STATES, state="CompleteCommit") >= 1
    load_max = value(after, "kafka_server_transactioncoordinatormetrics_partition_load_time_max")
    load_avg = value(after, "kafka_server_transactioncoordinatormetrics_partition_load_time_avg")
    assert not math.isnan(load_max) and 0 <= load_avg <= load_max  # the takeover just now

    producer.begin_transaction()
    producer.produce(topic, b"c", partition=0)
    producer.flush(30)  # written, so the partition is in the transaction
    producer.abort_transaction(30)
    wait_until(lambda: value(scrape(url), COMMIT, result="abort")
               - value(after, COMMIT, result="abort") >= 1, 20, "1 abort marker")
    assert value(scrape(url), COMMIT, result="abort") - value(after, COMMIT,
                                                              result="abort") == 1

    # an Ongoing transaction, left past its 1 s timeout: the coordinator aborts it
    stuck = _producer(dev, timeout_ms=1000)
    base = scrape(url)
    stuck.begin_transaction()
    stuck.produce(topic, b"never committed", partition=1)
    stuck.flush(30)
    wait_until(lambda: value(scrape(url), TIMED_OUT) - value(base, TIMED_OUT) >= 1, 30,
               "the coordinator to abort the timed-out transaction")
    final = scrape(url)
    assert value(final, TIMED_OUT) - value(base, TIMED_OUT) == 1
    wait_until(lambda: value(scrape(url), COMMIT, result="abort")
               - value(base, COMMIT, result="abort") >= 1, 20, "its abort marker")
    end = scrape(url)
    assert value(end, "loglake_transaction_markers_pending") == 0
    assert value(end, "kafka_coordinator_transaction_transactionmarkerchannelmanager_"
                      "unknowndestinationqueuesize") == 0
    for state in ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                  "CompleteAbort", "Dead", "PrepareEpochFence"):
        assert (STATES, (("state", state),)) in end, state
    assert sum(v for (n, _), v in end.items() if n == STATES) >= 2  # the two ids


def test_ongoing_transaction_is_counted_per_state(dev: DevCluster, url: str) -> None:
    topic = f"txn-open-{uuid.uuid4().hex[:8]}"
    dev.create_topic(topic, partitions=1)
    producer = _producer(dev)
    before = value(scrape(url), STATES, state="Ongoing")
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    producer.flush(30)
    wait_until(lambda: value(scrape(url), STATES, state="Ongoing") == before + 1, 20,
               "the Ongoing transaction in the per-state gauge")
    producer.commit_transaction(30)
    wait_until(lambda: value(scrape(url), STATES, state="Ongoing") == before, 20,
               "the committed transaction to leave Ongoing")


def test_load_times_window_and_marker_counts() -> None:
    now = [1000.0]
    loads = LoadTimes(clock=lambda: now[0])
    assert all(math.isnan(v) for v in loads.avg_max())
    loads.record(10.0)
    now[0] += 30
    loads.record(30.0)
    assert loads.avg_max() == (20.0, 30.0)
    now[0] += 45  # the first load is older than the 60 s window
    assert loads.avg_max() == (30.0, 30.0)
    now[0] += 100
    assert all(math.isnan(v) for v in loads.avg_max())

    counts = MarkerCounts()
    counts.round(1, 3, 1)
    counts.round(2, 2, 0)
    assert (counts.pending, counts.unknown_destination) == (5, 1)
    counts.round(1, 1, 0)
    counts.acknowledged(True, 2)
    counts.done(2)
    assert (counts.pending, counts.unknown_destination) == (1, 0)
    counts.acknowledged(False, 1)
    counts.done(1)
    assert counts.pending == 0 and counts.written == {"commit": 2, "abort": 1}
