"""State metrics against known workloads on a real 3-broker cluster (issue 16): what the
``/metrics`` endpoints say about partitions, logs, the controller, consumer lag and tiering is
compared with what the cluster says (Kafka's Metadata through confluent-kafka, the Delta table)
and with what the test did (records produced, a follower killed, tiering held back).

Every broker runs ``metrics.listener=http://127.0.0.1:0``; the scrape URLs come from
``/loglake/metrics/<id>``. Tiering is held back through the ``tier-before-write`` hold point
(``LOGLAKE_HOLD_AT``, loglake/faults.py) while a file of this module exists.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from deltalake import DeltaTable
from prometheus_client.parser import text_string_to_metric_families

from loglake.catalog.zookeeper import ClusterCatalog
from loglake.dev.harness import DevCluster, wait_until
from loglake.segments.storage import Storage

BROKERS = (1, 2, 3)
LAG_TIME_MS = 2000
"""``replica.lag.time.max.ms`` of the cluster: a dead follower leaves the ISR after this."""
Samples = dict[str, list[tuple[dict[str, str], float]]]


@pytest.fixture(scope="module")
def hold_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hold") / "tier-before-write"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str,
        hold_file: Path) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("state-metrics")
    with pytest.MonkeyPatch.context() as patch:
        # brokers (also restarted ones) hold tiering back while the file exists
        patch.setenv("LOGLAKE_HOLD_AT", f"tier-before-write={hold_file}")
        with DevCluster(data / "dev", brokers=len(BROKERS), zookeeper=zookeeper_hosts,
                        broker_overrides={
                            "metrics.listener": "http://127.0.0.1:0",
                            "replica.lag.time.max.ms": str(LAG_TIME_MS),
                            "group.initial.rebalance.delay.ms": "0",
                            "auto.leader.rebalance.enable": "false",
                        }) as cluster:
            yield cluster


@pytest.fixture(scope="module")
def catalog(dev: DevCluster) -> Iterator[ClusterCatalog]:
    cat = ClusterCatalog(dev.zookeeper_connect, mode="tool")
    cat.start()
    try:
        yield cat
    finally:
        cat.stop()


@pytest.fixture(scope="module")
def admin(dev: DevCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": dev.bootstrap_servers})


# ---------------------------------------------------------------------------------- helpers
def urls(catalog: ClusterCatalog) -> dict[int, str]:
    """Broker id -> scrape URL, once every live broker published its own."""
    return wait_until(lambda: (found := catalog.metrics_urls()) and set(found) >= set(BROKERS)
                      and found, 30, "every broker publishes its metrics URL")


def scrape(url: str) -> Samples:
    """The endpoint's samples by sample name (the text format parses without error)."""
    response = httpx.get(url, timeout=10)
    response.raise_for_status()
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The value of the one sample of ``name`` whose labels include ``labels`` (None: none)."""
    found = [v for have, v in samples.get(name, []) if all(have.get(k) == w
                                                          for k, w in labels.items())]
    assert len(found) <= 1, f"{name}{labels}: {len(found)} samples"
    return found[0] if found else None


def scrape_broker(catalog: ClusterCatalog, broker: int) -> Samples:
    url = wait_until(lambda: catalog.metrics_urls().get(broker), 60,
                     f"broker {broker} publishes its metrics URL")
    return scrape(url)


def create(admin: AdminClient, name: str, assignment: list[list[int]],
           config: dict[str, str] | None = None) -> None:
    futures = admin.create_topics([NewTopic(name, num_partitions=len(assignment),
                                            replica_assignment=assignment,
                                            config=config or {})], operation_timeout=10,
                                  request_timeout=15)
    futures[name].result(timeout=30)

    def ready() -> bool:
        topic = admin.list_topics(name, timeout=10).topics[name]
        return topic.error is None and len(topic.partitions) == len(assignment) and all(
            p.leader >= 0 and len(p.isrs) == len(p.replicas)
            for p in topic.partitions.values())

    wait_until(ready, 30, f"{name} has leaders and full ISRs", ignore=(Exception,))


def produce(dev: DevCluster, topic: str, counts: dict[int, int], *, size: int = 100) -> None:
    producer = Producer({"bootstrap.servers": dev.bootstrap_servers, "acks": "all",
                         "linger.ms": 5, "batch.size": 16000})
    for partition, count in counts.items():
        for i in range(count):
            while True:
                try:
                    producer.produce(topic, b"v" * size, key=b"%d" % i, partition=partition)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
    assert producer.flush(60) == 0


def cluster_view(admin: AdminClient) -> dict[tuple[str, int], tuple[int, list[int]]]:
    """(topic, partition) -> (leader, replicas) as Metadata says."""
    view = {}
    for name, topic in admin.list_topics(timeout=10).topics.items():
        for index, partition in topic.partitions.items():
            view[(name, index)] = (partition.leader, list(partition.replicas))
    return view


def controller(catalog: ClusterCatalog) -> int:
    """The broker whose activecontrollercount is 1 (exactly one)."""
    def find() -> int | None:
        active = [b for b in BROKERS if value(scrape_broker(catalog, b),
                  "kafka_controller_kafkacontroller_activecontrollercount") == 1]
        return active[0] if len(active) == 1 else None
    return wait_until(find, 30, "exactly one broker reports an active controller")


# ---------------------------------------------------------------------------------- tests
def test_counts_and_log_offsets_match_the_cluster(dev, catalog, admin):
    topic = f"counts-{uuid.uuid4().hex[:8]}"
    create(admin, topic, [[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    counts = {0: 10, 1: 25, 2: 40}
    produce(dev, topic, counts)
    urls(catalog)

    def matches() -> bool:
        view = cluster_view(admin)
        for broker in BROKERS:
            samples = scrape_broker(catalog, broker)
            leaders = sum(1 for leader, _ in view.values() if leader == broker)
            hosted = sum(1 for _, replicas in view.values() if broker in replicas)
            assert value(samples, "kafka_server_replicamanager_leadercount") == leaders
            assert value(samples, "kafka_server_replicamanager_partitioncount") == hosted
            assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
            assert value(samples, "kafka_server_replicamanager_underminisrpartitioncount") == 0
            for partition, count in counts.items():  # every replica has every record
                labels = {"topic": topic, "partition": str(partition)}
                assert value(samples, "kafka_log_log_logendoffset", **labels) == count
                assert value(samples, "kafka_log_log_logstartoffset", **labels) == 0
                assert value(samples, "kafka_log_log_numlogsegments", **labels) == 1
                assert (value(samples, "kafka_log_log_size", **labels) or 0) > count * 100
        return True

    wait_until(matches, 30, "replica, leader and log metrics match the cluster",
               ignore=(AssertionError,))
    controller(catalog)
    assert sum(value(scrape_broker(catalog, b),
                     "kafka_controller_kafkacontroller_offlinepartitionscount") or 0
               for b in BROKERS) == 0


def test_dead_follower_is_under_replicated_then_recovers(dev, catalog, admin):
    active = controller(catalog)
    follower = next(b for b in BROKERS if b != active)
    leader = next(b for b in BROKERS if b != follower)
    third = next(b for b in BROKERS if b not in (leader, follower))
    topic = f"urp-{uuid.uuid4().hex[:8]}"
    solo = f"solo-{uuid.uuid4().hex[:8]}"  # its only replica dies: offline
    create(admin, topic, [[leader, follower, third]], {"min.insync.replicas": "3"})
    create(admin, solo, [[follower]])
    produce(dev, topic, {0: 20})
    view = cluster_view(admin)
    expected_urp = sum(1 for led, replicas in view.values()
                       if led == leader and follower in replicas)
    expected_offline = sum(1 for _, replicas in view.values() if replicas == [follower])
    before = scrape_broker(catalog, leader)
    shrinks = value(before, "kafka_server_replicamanager_isrshrinks_total") or 0
    expands = value(before, "kafka_server_replicamanager_isrexpands_total") or 0
    assert value(before, "kafka_server_replicamanager_underreplicatedpartitions") == 0

    dev.kill_broker(follower)
    killed = time.monotonic()
    wait_until(lambda: value(scrape_broker(catalog, leader),
                             "kafka_server_replicamanager_underreplicatedpartitions")
               == expected_urp, LAG_TIME_MS / 1000 + 10,
               f"broker {leader} reports {expected_urp} under-replicated partition(s)")
    took = time.monotonic() - killed
    # the ISR check runs every 0.5 s; a loaded box may add scheduling delay on top
    assert took < LAG_TIME_MS / 1000 + 5, f"under-replicated after {took:.1f} s"
    after = scrape_broker(catalog, leader)
    assert value(after, "kafka_server_replicamanager_underminisrpartitioncount") >= 1
    assert (value(after, "kafka_server_replicamanager_isrshrinks_total") or 0) > shrinks
    # the controller finds the dead broker's only replica offline (after its session expires)
    wait_until(lambda: value(scrape_broker(catalog, active),
                             "kafka_controller_kafkacontroller_offlinepartitionscount")
               == expected_offline, 30, f"{expected_offline} offline partition(s)")

    dev.start_broker(follower)
    for broker in BROKERS:
        wait_until(lambda b=broker: value(scrape_broker(catalog, b),
                                          "kafka_server_replicamanager_underreplicatedpartitions")
                   == 0, 60, f"broker {broker}: no under-replicated partition after restart")
    final = scrape_broker(catalog, leader)
    assert (value(final, "kafka_server_replicamanager_isrexpands_total") or 0) > expands
    assert value(final, "kafka_server_replicamanager_underminisrpartitioncount") == 0
    wait_until(lambda: value(scrape_broker(catalog, active),
                             "kafka_controller_kafkacontroller_offlinepartitionscount") == 0,
               30, "no offline partition after restart")


def test_lag_of_a_group_that_stopped_consuming(dev, catalog, admin):
    topic = f"lag-{uuid.uuid4().hex[:8]}"
    group = f"group-{uuid.uuid4().hex[:8]}"
    create(admin, topic, [[1, 2, 3]])
    produce(dev, topic, {0: 30})
    consumer = Consumer({"bootstrap.servers": dev.bootstrap_servers, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        read = 0
        deadline = time.monotonic() + 60
        while read < 30 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                read += 1
        assert read == 30
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    produce(dev, topic, {0: 17})  # the group has stopped: its lag is what came since
    labels = {"consumergroup": group, "topic": topic, "partition": "0"}

    def on_coordinator() -> list[int]:
        found = []
        for broker in BROKERS:
            samples = scrape_broker(catalog, broker)
            lag = value(samples, "kafka_consumergroup_lag", **labels)
            if lag is not None:
                assert lag == 17, f"broker {broker}: lag {lag}"
                assert value(samples, "kafka_consumergroup_current_offset", **labels) == 30
                found.append(broker)
        return found

    coordinators = wait_until(on_coordinator, 30, f"lag of {group} reported",
                              ignore=(AssertionError,))
    assert len(coordinators) == 1, f"lag reported by brokers {coordinators}"


def test_tier_lag_rises_while_tiering_is_held_and_falls_after(dev, catalog, admin, hold_file):
    topic = f"tier-{uuid.uuid4().hex[:8]}"
    hold_file.touch()
    try:
        create(admin, topic, [[1]], {"segment.bytes": "40000", "local.retention.ms": "0"})
        produce(dev, topic, {0: 2000})
        labels = {"topic": topic, "partition": "0"}

        def pending() -> tuple[float, float] | None:
            samples = scrape_broker(catalog, 1)
            records = value(samples, "loglake_tier_lag_records", **labels)
            seconds = value(samples, "loglake_tier_lag_seconds", **labels)
            end = value(samples, "kafka_log_log_logendoffset", **labels)
            if records and seconds is not None and end is not None and records > end / 2:
                assert records < end  # the active segment is not pending
                return records, seconds
            return None

        records, first = wait_until(pending, 30, "tier lag of the held partition")
        later = wait_until(lambda: (found := pending()) and found[1] >= first + 1.0 and found,
                           15, "tier lag in seconds rises while tiering is held")
        assert later[0] == records  # nothing was tiered meanwhile
        assert value(scrape_broker(catalog, 1), "loglake_tier_commits_total", topic=topic) in (
            None, 0)
    finally:
        hold_file.unlink(missing_ok=True)

    def caught_up() -> Samples | None:
        samples = scrape_broker(catalog, 1)
        done = (value(samples, "loglake_tier_lag_records", **labels) == 0
                and value(samples, "loglake_tier_lag_seconds", **labels) == 0)
        return samples if done else None

    samples = wait_until(caught_up, 60, "tier lag falls to 0 once tiering is released")
    commits = value(samples, "loglake_tier_commits_total", topic=topic)
    assert commits is not None and commits >= 2
    assert (value(samples, "loglake_tier_commit_seconds_count") or 0) >= commits
    # the table statistics are the table's
    storage = Storage.from_url(dev.storage_url)
    table = DeltaTable(storage.table_uri(topic))
    table.update_incremental()
    samples = scrape_broker(catalog, 1)
    assert value(samples, "loglake_tier_table_version", topic=topic) == table.version()
    actions = pa.table(table.get_add_actions(flatten=True))
    assert value(samples, "loglake_tier_table_files", topic=topic) == actions.num_rows > 0
    assert value(samples, "loglake_tier_table_bytes", topic=topic) == sum(
        actions.column("size_bytes").to_pylist())
    # local retention removes tiered segments: reading from 0 is then served from the table
    wait_until(lambda: value(scrape_broker(catalog, 1), "kafka_log_log_numlogsegments",
                             **labels) == 1, 30, "local retention removes tiered segments")
    consumer = Consumer({"bootstrap.servers": dev.bootstrap_servers,
                         "group.id": f"reader-{topic}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        read = 0
        while read < 2000 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                read += 1
        assert read == 2000
    finally:
        consumer.close()
    assert (value(scrape_broker(catalog, 1), "loglake_tier_fetches_total", topic=topic)
            or 0) > 0
