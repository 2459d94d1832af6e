"""The broker's Prometheus endpoint (``metrics.listener``) against a real broker process, and
the recording logic in process.

Live: a one-broker cluster with ``metrics.listener=http://127.0.0.1:0``; the scrape URL is read
from ``/loglake/metrics/<id>``; every scrape is parsed by prometheus_client's text parser.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loglake.broker.metrics.loop_histogram import HistogramCells
from loglake.broker.metrics.registry import BrokerMetrics
from loglake.broker.metrics.request_timing import RequestTiming, remote_begin, remote_end
from loglake.catalog.zookeeper import ClusterCatalog
from loglake.client import Admin
from loglake.config import BrokerConfig
from loglake.dev import cluster
from loglake.dev.harness import DevCluster, wait_until
from loglake.errors import InvalidConfigError
from tests.admin_util import create_topic
from tests.tiering_util import SMALL_SEGMENTS, produce, wait_local_start

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """Every sample of one scrape, parsed (a parse error fails the test)."""
    response = httpx.get(url, timeout=10)
    assert response.status_code == 200, response.text
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def metrics_urls(dev: DevCluster) -> dict[int, str]:
    catalog = ClusterCatalog(dev.zookeeper_connect, mode="tool")
    catalog.start()
    try:
        return catalog.metrics_urls()
    finally:
        catalog.stop()


def broker_metrics_url(dev: DevCluster, broker: int = 1) -> str:
    """``broker``'s metrics URL, once it has published it in ZooKeeper (waits 30 s at most)."""
    urls: dict[int, str] = {}

    def published() -> bool:
        urls.update(metrics_urls(dev))
        return broker in urls

    wait_until(published, 30, f"broker {broker}'s metrics URL in ZooKeeper")
    return urls[broker]


@pytest.fixture(scope="module")
def metrics_dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
                ) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("metrics")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides={"metrics.listener": "http://127.0.0.1:0"}) as dev:
        yield dev


@pytest.fixture(scope="module")
def metrics_url(metrics_dev: DevCluster) -> str:
    url = broker_metrics_url(metrics_dev)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    return url


def _produce(dev: DevCluster, topic: str, count: int, partitions: int = 1) -> None:
    producer = Producer({"bootstrap.servers": dev.bootstrap_servers, "linger.ms": 5,
                         "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=f"value-{i}".encode(), key=str(i).encode(),
                         partition=i % partitions)
    assert producer.flush(30) == 0


def test_scrape_parses_and_has_every_family(metrics_url: str) -> None:
    samples = scrape(metrics_url)
    names = {name for name, _ in samples}
    for expected in (
        "kafka_server_brokertopicmetrics_messagesin_total",
        "kafka_server_brokertopicmetrics_bytesout_total",
        "kafka_server_brokertopicmetrics_failedfetchrequests_total",
        "kafka_network_requestmetrics_requests_total",
        "kafka_network_requestmetrics_totaltimems_bucket",
        "kafka_network_requestmetrics_requestqueuetimems_count",
        "kafka_network_requestmetrics_localtimems_sum",
        "kafka_network_requestmetrics_remotetimems_count",
        "kafka_network_requestmetrics_responsesendtimems_count",
        "loglake_event_loop_lag_seconds",
        "loglake_event_loop_delay_seconds_count",
        "loglake_zookeeper_session_state",
        "loglake_zookeeper_request_seconds_count",
        "process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
    ):
        assert expected in names, expected
    assert value(samples, "loglake_zookeeper_session_state", state="connected") == 1
    assert value(samples, "loglake_zookeeper_session_state", state="lost") == 0
    assert value(samples, "loglake_zookeeper_request_seconds_count") > 0
    assert value(samples, "process_resident_memory_bytes") > 10_000_000
    assert all("broker" not in dict(labels) for _, labels in samples)  # Prometheus adds it


def test_messages_in_grows_by_exactly_the_records_produced(
        metrics_dev: DevCluster, metrics_url: str) -> None:
    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    metrics_dev.create_topic(topic, partitions=3)
    before = scrape(metrics_url)
    count = 1237
    _produce(metrics_dev, topic, count, partitions=3)
    after = scrape(metrics_url)
    name = "kafka_server_brokertopicmetrics_messagesin_total"
    assert value(after, name, topic=topic) == count
    assert value(after, name) - value(before, name) == count  # all topics
    assert value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) > count
    produce_requests = value(after, "kafka_server_brokertopicmetrics_totalproducerequests_total",
                             topic=topic)
    assert produce_requests >= 3  # one per partition of each request
    assert value(after, "kafka_server_brokertopicmetrics_failedproducerequests_total",
                 topic=topic) == 0

    def requests(samples: Samples, api: str) -> float:
        return sum(v for (n, labels), v in samples.items()
                   if n == "kafka_network_requestmetrics_requests_total"
                   and dict(labels)["request"] == api)

    grown = requests(after, "Produce") - requests(before, "Produce")
    assert grown >= 1
    for phase in ("totaltimems", "requestqueuetimems", "localtimems", "remotetimems",
                  "responsesendtimems"):
        count_name = f"kafka_network_requestmetrics_{phase}_count"
        assert (value(after, count_name, request="Produce")
                - value(before, count_name, request="Produce")) == grown, phase
    inf = ("kafka_network_requestmetrics_totaltimems_bucket")
    assert value(after, inf, request="Produce", le="+Inf") == value(
        after, "kafka_network_requestmetrics_totaltimems_count", request="Produce")
    assert value(after, "kafka_network_requestmetrics_errors_total", request="Produce",
                 error="NONE") >= produce_requests


def test_fetches_count_bytes_out_and_failures(metrics_dev: DevCluster, metrics_url: str) -> None:
    topic = f"metrics-fetch-{uuid.uuid4().hex[:8]}"
    metrics_dev.create_topic(topic, partitions=1)
    _produce(metrics_dev, topic, 50)
    before = scrape(metrics_url)
    consumer = Consumer({"bootstrap.servers": metrics_dev.bootstrap_servers,
                         "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                         "auto.offset.reset": "error"})
    try:
        consumer.assign([TopicPartition(topic, 0, 1_000_000)])  # out of range: an error answer
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is not None:
                break
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = 0
        while got < 50 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got += 1
        assert got == 50
    finally:
        consumer.close()
    after = scrape(metrics_url)
    assert value(after, "kafka_server_brokertopicmetrics_failedfetchrequests_total",
                 topic=topic) >= 1
    assert value(after, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) > 50 * 7
    assert value(after, "kafka_server_brokertopicmetrics_totalfetchrequests_total") > value(
        before, "kafka_server_brokertopicmetrics_totalfetchrequests_total")
    assert value(after, "kafka_network_requestmetrics_errors_total", request="Fetch",
                 error="OFFSET_OUT_OF_RANGE") >= 1


def test_deleted_topic_drops_its_traffic_counters(metrics_dev: DevCluster,
                                                  metrics_url: str) -> None:
    """Kafka's BrokerTopicStats.removeMetrics: a deleted topic's per-topic samples go; the
    all-topics ones keep what was counted."""
    topic = f"metrics-gone-{uuid.uuid4().hex[:8]}"
    metrics_dev.create_topic(topic, partitions=1)
    _produce(metrics_dev, topic, 20)
    name = "kafka_server_brokertopicmetrics_messagesin_total"
    before = scrape(metrics_url)
    assert value(before, name, topic=topic) == 20
    with Admin(metrics_dev.bootstrap_servers) as admin:
        admin.delete_topic(topic)

    def dropped() -> bool:
        return not any(dict(labels).get("topic") == topic for _, labels in scrape(metrics_url))

    wait_until(dropped, 30, f"the samples of deleted topic {topic} to go")
    assert value(scrape(metrics_url), name) >= value(before, name)  # all topics: kept


def test_tier_reads_count_as_remote_time(metrics_dev: DevCluster, metrics_url: str) -> None:
    """ListOffsets by time below the local log start reads the Delta table: remote time (as
    Kafka's remote-storage reads), where a local ListOffsets has none."""
    topic = f"metrics-tier-{uuid.uuid4().hex[:8]}"
    create_topic(metrics_dev.bootstrap_servers, topic,
                 config={**SMALL_SEGMENTS, "local.retention.ms": "0"})
    sent = produce(metrics_dev.bootstrap_servers, topic, 2000)
    wait_local_start(metrics_dev.zookeeper_connect, topic, (0,), above=300)
    remote_sum = "kafka_network_requestmetrics_remotetimems_sum"
    before = value(scrape(metrics_url), remote_sum, request="ListOffsets")
    consumer = Consumer({"bootstrap.servers": metrics_dev.bootstrap_servers, "group.id": "t"})
    try:
        for target in (sent[10], sent[120], sent[200]):
            found = consumer.offsets_for_times(
                [TopicPartition(topic, 0, target.timestamp)], timeout=15)
            assert found[0].offset == target.offset
    finally:
        consumer.close()
    after = value(scrape(metrics_url), remote_sum, request="ListOffsets")
    assert after > before


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/nope", 404), ("GET", "/metrics/../../etc/passwd", 404),
    ("GET", "/metrics?name[]=x", 400), ("GET", "/metrics?%ff%fe=1", 400),
    ("GET", "/metrics?" + "a=1&" * 3000, 400), ("POST", "/metrics", 405),
    ("DELETE", "/", 405), ("GET", "/favicon.ico", 404),
])
def test_bad_requests_get_a_message_never_a_traceback(
        metrics_url: str, method: str, path: str, status: int) -> None:
    base = metrics_url.removesuffix("/metrics")
    response = httpx.request(method, base + path, timeout=10)
    assert response.status_code == status
    assert response.text.strip() and len(response.text) < 500
    assert "Traceback" not in response.text
    scrape(metrics_url)  # still serving


def test_endpoint_is_off_by_default(request: pytest.FixtureRequest) -> None:
    plain: DevCluster = request.getfixturevalue("cluster")  # the shared default cluster
    assert BrokerConfig.from_properties(
        {"broker.id": "1", "zookeeper.connect": "x", "log.dirs": "/tmp/x"}).metrics_listener is None
    assert metrics_urls(plain) == {}
    assert "metrics endpoint listening" not in plain.broker_log(1)


# ---------------------------------------------------------------- in process
def test_metrics_listener_setting() -> None:
    props = {"broker.id": "1", "zookeeper.connect": "x", "log.dirs": "/tmp/x"}
    parsed = BrokerConfig.from_properties({**props, "metrics.listener": "http://127.0.0.1:9404"})
    assert parsed.metrics_listener == ("127.0.0.1", 9404)
    for bad in ("http://127.0.0.1", "127.0.0.1:port", "http://h:1/metrics", "http://h:70000"):
        with pytest.raises(InvalidConfigError, match=r"metrics\.listener"):
            BrokerConfig.from_properties({**props, "metrics.listener": bad})


def test_histogram_cells_are_cumulative() -> None:
    cells = HistogramCells((1.0, 10.0))
    for observed in (0.5, 1.0, 5.0, 50.0):
        cells.observe(observed)
    assert cells.buckets() == [("1.0", 2), ("10.0", 3), ("+Inf", 4)]
    assert cells.total == 56.5


def test_all_topics_counts_survive_a_deleted_topic() -> None:
    metrics = BrokerMetrics(process_metrics=False)
    metrics.topics.appended("a", 10, 100)
    metrics.topics.forget_topic("a")
    text = generate_latest(metrics.registry).decode()
    assert "kafka_server_brokertopicmetrics_messagesin_total 10.0" in text
    assert 'topic="a"' not in text


def test_remote_time_is_the_union_of_parallel_waits() -> None:
    """Two partitions of one request wait 0.2 s in parallel: remote ~0.2 s, not 0.4 s; the
    handler's own busy time is local."""
    metrics = BrokerMetrics(process_metrics=False)

    async def wait(seconds: float) -> None:
        remote = remote_begin()
        try:
            await asyncio.sleep(seconds)
        finally:
            remote_end(remote)

    async def request() -> RequestTiming:
        timing = RequestTiming()
        timing.start(0, "Produce", 9)
        time.sleep(0.05)  # the handler's own work
        await asyncio.gather(wait(0.2), wait(0.2))
        timing.finish(None)
        timing.record(metrics.requests)
        return timing

    timing = asyncio.run(request())
    assert timing.remote is not None and 0.19 <= timing.remote.seconds < 0.35
    assert remote_begin() is None  # outside a request nothing is tracked
    text = generate_latest(metrics.registry).decode()
    assert 'kafka_network_requestmetrics_requests_total{request="Produce",version="9"} 1.0' in text
    local = [line for line in text.splitlines()
             if line.startswith('kafka_network_requestmetrics_localtimems_sum')]
    assert local and 45 <= float(local[0].split()[-1]) < 150


def test_a_failing_collector_costs_only_its_own_families(tmp_path: Path) -> None:
    metrics = BrokerMetrics(process_metrics=False)

    class Broken:
        def collect(self) -> Iterator[object]:
            raise RuntimeError("boom")

    metrics.register_collector(Broken())  # type: ignore[arg-type]
    text = generate_latest(metrics.registry).decode()
    assert "kafka_server_brokertopicmetrics_messagesin_total" in text


def test_dev_cluster_info_prints_metrics_urls(tmp_path: Path) -> None:
    info = cluster.ClusterInfo(tmp_path, (9092, 9093), (10092,), metrics=True)
    assert info.summary_lines()[-1] == (
        "metrics=http://127.0.0.1:11092/metrics,http://127.0.0.1:11093/metrics")
    assert cluster.ClusterInfo(tmp_path, (9092,), (10092,)).metrics_urls == ()
