"""CreatePartitions, DeleteRecords and ElectLeaders against real brokers, with real clients.

One 3-broker DevCluster for the module (``auto.leader.rebalance.enable=false``, so only an
ElectLeaders request moves leadership back; a follower that stops fetching leaves the ISR after
5 s); each test leaves every broker running. confluent-kafka's AdminClient, kafka-python's
KafkaAdminClient, aiokafka's AIOKafkaAdminClient, a raw protocol client (to reach a chosen
broker) and the ``loglake`` command all drive the APIs. The last test uses the session's
1-broker ``cluster`` (tiering into the dev storage) and the shared ``spark`` session: records
DeleteRecords removes disappear from the Delta table and from Spark SQL too.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.admin import NewPartitions as AioNewPartitions
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewPartitions
from deltalake import DeltaTable
from kafka import KafkaAdminClient
from kafka.structs import TopicPartition as KafkaPythonTopicPartition
from kio.schema.errors import ErrorCode
from pyspark.sql import SparkSession

from loglake.dev.harness import DevCluster, wait_until
from loglake.segments import checkpoint
from loglake.segments.filenames import LOG_START_OFFSET_CHECKPOINT
from loglake.segments.tiered_table import TieredTable
from loglake.streaming.sql_views import quote_identifier, register_topics
from tests.admin_util import create_topic
from tests.clients import consume_messages
from tests.replication_checks import (
    ZooKeeperView,
    broker_client,
    create_replicated_topic,
    describe,
    replica_dir,
    wait_for_full_isr,
)
from tests.spark_session import SMALL_SEGMENTS, produce_numbered, storage_of, wait_tiered

pytestmark = pytest.mark.timeout(300)

OVERRIDES = {"auto.leader.rebalance.enable": "false", "replica.lag.time.max.ms": "5000"}


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[DevCluster]:
    with DevCluster(tmp_path_factory.mktemp("admin-partitions") / "dev",
                    zookeeper=zookeeper_hosts, brokers=3, broker_overrides=OVERRIDES) as cluster:
        yield cluster


@pytest.fixture
def zk(dev: DevCluster) -> Iterator[ZooKeeperView]:
    with ZooKeeperView(dev.zookeeper_connect) as view:
        yield view


@pytest.fixture(autouse=True)
def all_brokers_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tests of the module cluster leave every broker running (restarted if a test failed)."""
    yield
    if "dev" in request.fixturenames:
        cluster: DevCluster = request.getfixturevalue("dev")
        for broker in (1, 2, 3):
            if not cluster.broker_alive(broker):
                cluster.start_broker(broker)


_ADMINS: list[AdminClient] = []


def admin(bootstrap: str) -> AdminClient:
    """A new AdminClient (librdkafka sends ElectLeaders to the controller it last heard of
    and waits for it when that broker was killed), kept for the module: the futures of an
    AdminClient that was garbage-collected never complete."""
    _ADMINS.append(AdminClient({"bootstrap.servers": bootstrap}))
    return _ADMINS[-1]


def error_of(future: object) -> KafkaError:
    """The KafkaError a confluent-kafka future fails with."""
    with pytest.raises(KafkaException) as caught:
        future.result(timeout=30)  # type: ignore[attr-defined]
    error = caught.value.args[0]
    assert isinstance(error, KafkaError)
    return error


def loglake(*args: str, bootstrap: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loglake", *args, "--bootstrap-server",
                           bootstrap], capture_output=True, text=True, timeout=60, check=False)


def produce_to(bootstrap: str, topic: str, per_partition: dict[int, int], *,
               tag: str = "v") -> None:
    # batches stay below the 8 kB segments of SMALL_SEGMENTS topics
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.size": 4000})
    failures: list[object] = []
    for partition, count in per_partition.items():
        for i in range(count):
            producer.produce(topic, value=f"{tag}-{partition}-{i}".encode(),
                             partition=partition,
                             on_delivery=lambda e, _m: failures.append(e) if e else None)
    assert producer.flush(30) == 0
    assert not failures, failures[:3]


def consume_all(bootstrap: str, topic: str, partitions: list[int], expected: int, *,
                start: int = OFFSET_BEGINNING, timeout: float = 30.0,
                reset: str = "earliest") -> dict[int, list[int]]:
    """Offsets read per partition (assigned from ``start``) until ``expected`` records."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                         "enable.auto.commit": False, "auto.offset.reset": reset})
    got: dict[int, list[int]] = {p: [] for p in partitions}
    try:
        consumer.assign([TopicPartition(topic, p, start) for p in partitions])
        for msg in consume_messages(consumer, expected, timeout=timeout, batch=500,
                                    errors="skip", what=f"records of {topic}"):
            got[msg.partition()].append(msg.offset())
    finally:
        consumer.close()
    return got


def wait_leader(bootstrap: str, topic: str, partition: int, predicate: object, *,
                timeout: float = 40.0) -> int:
    last: dict[str, int] = {}

    def matches() -> tuple[int] | None:
        leader = last["leader"] = describe(bootstrap, topic)[partition].leader
        return (leader,) if predicate(leader) else None  # type: ignore[operator]

    return wait_until(matches, timeout, lambda: f"{topic}-{partition}: leader "
                      f"{last.get('leader')}", interval=0.2)[0]


# ---------------------------------------------------------------------------- CreatePartitions


def test_create_partitions_then_produce_and_consume_everywhere(dev: DevCluster) -> None:
    bootstrap = dev.bootstrap_servers
    topic = "grow"
    create_replicated_topic(bootstrap, topic, partitions=2, min_insync_replicas=1)
    # a producer that exists before the topic grows finds the new partitions in Metadata
    early = Producer({"bootstrap.servers": bootstrap, "topic.metadata.refresh.interval.ms": 500,
                      "acks": "all"})
    early.produce(topic, value=b"before")
    assert early.flush(30) == 0

    client = admin(bootstrap)
    client.create_partitions([NewPartitions(topic, 4)], validate_only=True)[topic].result(30)
    assert sorted(describe(bootstrap, topic)) == [0, 1]  # validated only
    for count, code in ((1, KafkaError.INVALID_PARTITIONS), (2, KafkaError.INVALID_PARTITIONS)):
        error = error_of(client.create_partitions([NewPartitions(topic, count)])[topic])
        assert error.code() == code, error
    assert "Topic already has 2 partitions" in error.str()
    wrong = client.create_partitions([NewPartitions(topic, 4, replica_assignment=[[1, 2, 3]])])
    assert error_of(wrong[topic]).code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    unknown = client.create_partitions([NewPartitions(topic, 3, replica_assignment=[[1, 2, 9]])])
    assert "Unknown broker(s) in replica assignment: 9." in error_of(unknown[topic]).str()
    missing = client.create_partitions([NewPartitions("no-such-topic", 3)])
    assert error_of(missing["no-such-topic"]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    started = time.monotonic()
    client.create_partitions([NewPartitions(topic, 4)], operation_timeout=20)[topic].result(30)
    views = wait_for_full_isr(bootstrap, topic, range(4), 3, timeout=30)
    print(f"CreatePartitions 2 -> 4 on 3 brokers: full ISR after "
          f"{time.monotonic() - started:.2f} s")
    assert Counter(v.leader for v in views.values()).keys() == {1, 2, 3}  # leaders spread

    kafka_python = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        kafka_python.create_partitions({topic: {"count": 5, "assignments": [[3, 1, 2]]}})
    finally:
        kafka_python.close()

    async def aiokafka_grow() -> None:
        client = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await client.start()
        try:
            await client.create_partitions({topic: AioNewPartitions(total_count=6)})
        finally:
            await client.close()

    asyncio.run(aiokafka_grow())
    grown = loglake("topics", "alter", topic, "--partitions", "7", bootstrap=bootstrap)
    assert grown.returncode == 0, grown.stderr
    assert "has 7 partitions" in grown.stdout
    shrink = loglake("topics", "alter", topic, "--partitions", "3", bootstrap=bootstrap)
    assert shrink.returncode == 1 and "INVALID_PARTITIONS" in shrink.stderr, shrink.stderr
    views = wait_for_full_isr(bootstrap, topic, range(7), 3, timeout=30)
    assert views[4].replicas == (3, 1, 2)
    for partition in range(7):  # every broker hosts a replica of every new partition
        for broker in (1, 2, 3):
            assert replica_dir(dev.data_dir, broker, topic, partition).is_dir()

    produce_to(bootstrap, topic, dict.fromkeys(range(7), 10))
    time.sleep(1.5)  # past the early producer's metadata refresh interval
    for i in range(300):  # keyed: hashed over the partitions its Metadata lists
        early.produce(topic, key=b"k%d" % i, value=b"late")
    assert early.flush(30) == 0
    got = consume_all(bootstrap, topic, list(range(7)), 371)
    assert sum(map(len, got.values())) == 371
    assert all(len(got[p]) >= 10 for p in range(7))
    assert sum(len(got[p]) - 10 for p in range(2, 7)) > 0, got  # the early producer found them

    # a group consumer subscribed to the topic is assigned all 7 partitions
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "grow-group",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        read = consume_messages(consumer, 371, timeout=30, batch=500, errors="skip",
                                what="the group consumer's records")
        assert {tp.partition for tp in consumer.assignment()} == set(range(7))
        assert len(read) == 371
    finally:
        consumer.close()


# ---------------------------------------------------------------------------- DeleteRecords


def test_delete_records_with_every_client(dev: DevCluster, zk: ZooKeeperView) -> None:
    bootstrap = dev.bootstrap_servers
    topic = "trim"
    create_replicated_topic(bootstrap, topic, partitions=3, min_insync_replicas=2)
    produce_to(bootstrap, topic, dict.fromkeys(range(3), 100))
    client = admin(bootstrap)

    started = time.monotonic()
    futures = client.delete_records([TopicPartition(topic, 0, 30)], operation_timeout=20)
    assert futures[TopicPartition(topic, 0, 30)].result(30).low_watermark == 30
    print(f"DeleteRecords on 3 replicas: {time.monotonic() - started:.2f} s")
    above = client.delete_records([TopicPartition(topic, 0, 101)])
    assert error_of(next(iter(above.values()))).code() == KafkaError.OFFSET_OUT_OF_RANGE

    kafka_python = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        answer = kafka_python.delete_records({KafkaPythonTopicPartition(topic, 1): 40})
        assert answer[KafkaPythonTopicPartition(topic, 1)]["low_watermark"] == 40, answer
    finally:
        kafka_python.close()

    async def aiokafka_delete() -> dict[AioTopicPartition, int]:
        client = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await client.start()
        try:
            return await client.delete_records(
                {AioTopicPartition(topic, 2): RecordsToDelete(before_offset=-1)},
                timeout_ms=20000)
        finally:
            await client.close()

    assert asyncio.run(aiokafka_delete()) == {AioTopicPartition(topic, 2): 100}  # -1: the HW

    # consumers: from the beginning, and from below the start (auto.offset.reset)
    got = consume_all(bootstrap, topic, [0, 1], 130)
    assert got == {0: list(range(30, 100)), 1: list(range(40, 100))}
    below = consume_all(bootstrap, topic, [0], 70, start=5)
    assert below[0][0] == 30
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        assert probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (30, 100)
        assert probe.get_watermark_offsets(TopicPartition(topic, 2), timeout=10) == (100, 100)
    finally:
        probe.close()

    # every replica moved its log start (the followers from their fetches)
    def starts() -> dict[int, int | None]:
        return {b: checkpoint.read_offset(replica_dir(dev.data_dir, b, topic, 0)
                                          / LOG_START_OFFSET_CHECKPOINT) for b in (1, 2, 3)}

    wait_until(lambda: set(starts().values()) == {30}, 20,
               lambda: f"every replica's log start at 30: {starts()}", interval=0.2)

    # the CLI; then a follower that becomes leader serves from the new start too
    cli = loglake("topics", "delete-records", topic, "--partition", "0", "--offset", "60",
                  bootstrap=bootstrap)
    assert cli.returncode == 0, cli.stderr
    assert "Partition: 0\tLow watermark: 60" in cli.stdout
    leader = int(zk.partition_state(topic, 0)["leader"])  # type: ignore[index]
    dev.stop_broker(leader)
    try:
        wait_leader(bootstrap, topic, 0, lambda new: new >= 0 and new != leader)
        assert consume_all(bootstrap, topic, [0], 40)[0] == list(range(60, 100))
    finally:
        dev.start_broker(leader)


def test_delete_records_refusals(dev: DevCluster, zk: ZooKeeperView) -> None:
    bootstrap = dev.bootstrap_servers
    topic = "trim-refused"
    create_replicated_topic(bootstrap, topic, partitions=1, min_insync_replicas=1)
    produce_to(bootstrap, topic, {0: 10})
    leader = int(zk.partition_state(topic, 0)["leader"])  # type: ignore[index]
    follower = next(b for b in (1, 2, 3) if b != leader)
    body = {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 5},
                                                      {"partition_index": 7, "offset": 1}]}],
            "timeout": 5000}
    with broker_client(dev, follower) as wire:
        answer = wire.request(21, 2, body).topics[0].partitions
    assert [(p.partition_index, p.error_code, p.low_watermark) for p in answer] == [
        (0, ErrorCode.not_leader_or_follower, -1), (7, ErrorCode.unknown_topic_or_partition, -1)]
    with broker_client(dev, leader) as wire:
        answer = wire.request(21, 0, {**body, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "offset": -7}]}]}).topics[0].partitions
    assert answer[0].error_code == ErrorCode.offset_out_of_range

    compacted = "trim-compacted"
    create_replicated_topic(bootstrap, compacted, partitions=1, min_insync_replicas=1,
                            config={"cleanup.policy": "compact"})

    def refusal() -> int | None:  # every broker's metadata may not name the leader yet
        future = admin(bootstrap).delete_records([TopicPartition(compacted, 0, 0)])
        code = error_of(next(iter(future.values()))).code()
        return None if code == KafkaError._NOENT else code

    assert wait_until(refusal, timeout=30, message="a DeleteRecords answer") \
        == KafkaError.POLICY_VIOLATION


# ---------------------------------------------------------------------------- ElectLeaders


def test_preferred_election_after_the_preferred_leader_came_back(
        dev: DevCluster, zk: ZooKeeperView) -> None:
    bootstrap = dev.bootstrap_servers
    topic = "prefer"
    create_replicated_topic(bootstrap, topic, assignment=[[1, 2, 3], [1, 3, 2], [2, 3, 1]],
                            min_insync_replicas=1)
    produce_to(bootstrap, topic, dict.fromkeys(range(3), 20))
    dev.kill_broker(1)
    try:
        for partition in (0, 1):
            wait_leader(bootstrap, topic, partition, lambda leader: leader in (2, 3))
        refused = admin(bootstrap).elect_leaders(ElectionType.PREFERRED,
                                                 [TopicPartition(topic, 0)]).result(30)
        assert [e.code() for e in refused.values()] == [  # type: ignore[union-attr]
            KafkaError.PREFERRED_LEADER_NOT_AVAILABLE]
    finally:
        dev.start_broker(1)
    wait_for_full_isr(bootstrap, topic, range(3), 3, timeout=60)
    time.sleep(1.0)
    assert {describe(bootstrap, topic)[p].leader for p in (0, 1)} <= {2, 3}  # no rebalance

    started = time.monotonic()
    result = admin(bootstrap).elect_leaders(ElectionType.PREFERRED,
                                            [TopicPartition(topic, 0)]).result(30)
    assert list(result.values()) == [None]
    print(f"preferred election: {time.monotonic() - started:.2f} s")
    assert describe(bootstrap, topic)[0].leader == 1  # metadata shows it once answered

    # a broker that is not the controller performs it too (raw request to it)
    controller = zk.controller()
    other = next(b for b in (1, 2, 3) if b != controller)
    with broker_client(dev, other) as wire:
        answer = wire.request(43, 2, {"election_type": 0, "timeout": 30000, "topic_partitions": [
            {"topic": topic, "partitions": [1, 2, 9]}]})
    assert answer.error_code == ErrorCode.none
    outcome = {r.partition_id: r.error_code for r in answer.replica_election_results[0]
               .partition_result}
    assert outcome == {1: ErrorCode.none, 2: ErrorCode.election_not_needed,
                       9: ErrorCode.unknown_topic_or_partition}
    assert describe(bootstrap, topic)[1].leader == 1

    everything = admin(bootstrap).elect_leaders(ElectionType.PREFERRED, None).result(30)
    assert not {tp for tp in everything if tp.topic == topic}  # none needed: none listed
    kafka_python = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        response = kafka_python.elect_leaders(0, {topic: [0]}, raise_errors=False)
        codes = [p[1] for t in response.replica_election_results for p in t[1]]
        assert codes == [ErrorCode.election_not_needed.value], response
    finally:
        kafka_python.close()
    cli = loglake("partitions", "elect", "--type", "preferred", "--topic", topic,
                  bootstrap=bootstrap)
    assert cli.returncode == 0, cli.stderr
    assert f"Valid replica already elected for partitions {topic}-0, {topic}-1, {topic}-2" \
        in cli.stdout


def test_unclean_election_of_an_out_of_sync_replica(dev: DevCluster, zk: ZooKeeperView) -> None:
    bootstrap = dev.bootstrap_servers
    topic = "unclean"
    create_replicated_topic(bootstrap, topic, assignment=[[2, 3]], min_insync_replicas=1)
    produce_to(bootstrap, topic, {0: 10})
    dev.stop_broker(3)  # leaves the ISR
    zk.wait_state(topic, 0, lambda s: s["isr"] == [2], what="ISR [2]")
    produce_to(bootstrap, topic, {0: 5}, tag="only-on-2")
    dev.kill_broker(2)
    try:
        zk.wait_state(topic, 0, lambda s: s["leader"] == -1, timeout=40, what="offline")
        nobody = admin(bootstrap).elect_leaders(ElectionType.UNCLEAN,
                                                [TopicPartition(topic, 0)]).result(30)
        assert [e.code() for e in nobody.values()] == [  # type: ignore[union-attr]
            KafkaError.ELIGIBLE_LEADERS_NOT_AVAILABLE]
        dev.start_broker(3)
        time.sleep(2.0)
        assert zk.partition_state(topic, 0)["leader"] == -1  # type: ignore[index]
        cli = loglake("partitions", "elect", "--type", "unclean", "--topic", topic,
                      bootstrap=bootstrap)
        assert cli.returncode == 0, cli.stderr
        assert f"Successfully completed leader election (UNCLEAN) for partitions {topic}-0" \
            in cli.stdout
        state = zk.partition_state(topic, 0)
        assert state is not None and (state["leader"], state["isr"]) == (3, [3])
        again = admin(bootstrap).elect_leaders(ElectionType.UNCLEAN,
                                               [TopicPartition(topic, 0)]).result(30)
        assert [e.code() for e in again.values()] == [  # type: ignore[union-attr]
            KafkaError.ELECTION_NOT_NEEDED]
        assert consume_all(bootstrap, topic, [0], 10)[0] == list(range(10))
    finally:
        dev.start_broker(2)
    wait_for_full_isr(bootstrap, topic, [0], 2, timeout=60)  # 2 truncated and caught up


# ---------------------------------------------------------------------------- tier and Spark


def settled_tiered_end(table: TieredTable, partition: int, *, timeout: float = 30.0) -> int:
    """The partition's tiered end once it stopped moving for a second (every sealed segment
    tiered)."""
    last, since = table.tiered_end(partition), time.monotonic()

    def settled() -> tuple[int] | None:
        nonlocal last, since
        now = table.tiered_end(partition)
        if now != last:
            last, since = now, time.monotonic()
        elif last is not None and time.monotonic() - since >= 1.0:
            return (last,)
        return None

    [end] = wait_until(settled, timeout, lambda: f"tiered end of partition {partition} still "
                                                 f"moving: {last}", interval=0.25)
    return end


def test_delete_records_reaches_the_table_and_spark_sql(
        spark: SparkSession, cluster: DevCluster, topic_name: str) -> None:
    """Partition 0 is cut inside its tiered rows, partition 1 above its tiered end; then the
    topic grows by a partition, which is tiered and shows in the view too."""
    bootstrap = cluster.bootstrap_servers
    topic = f"trim.{topic_name}"
    create_topic(bootstrap, topic, 2, SMALL_SEGMENTS)
    produce_numbered(bootstrap, topic, 0, 3000, partitions=2)
    ends = wait_tiered(cluster.zookeeper_connect, topic, {0: 600, 1: 600})
    table = TieredTable(storage_of(cluster.zookeeper_connect), topic)
    middle = next(f for f in table.files(0, refresh=True) if f.max_offset >= ends[0] // 2)
    inside = (middle.min_offset + middle.max_offset) // 2 + 1  # inside a tiered file
    tiered_1 = settled_tiered_end(table, 1)  # the active segment stays local
    above = (tiered_1 + 1500) // 2 + 1  # below the high watermark (1500), above the tier
    assert tiered_1 < above < 1500

    low = admin(bootstrap).delete_records(
        [TopicPartition(topic, 0, inside), TopicPartition(topic, 1, above)],
        operation_timeout=30)
    assert {tp.partition: f.result(30).low_watermark for tp, f in low.items()} == {
        0: inside, 1: above}

    rows = DeltaTable(table.uri).to_pyarrow_table(columns=["partition", "offset"]).to_pylist()
    assert min(r["offset"] for r in rows if r["partition"] == 0) == inside
    assert not [r for r in rows if r["partition"] == 1 and r["offset"] < above]
    fresh = TieredTable(table.storage, topic)
    assert (fresh.tiered_end(1) or 0) >= above  # tiering resumes at the new start

    got = consume_all(bootstrap, topic, [0, 1], 1500 - inside + 1500 - above)
    assert got[0] == list(range(inside, 1500)) and got[1] == list(range(above, 1500))

    # a partition added now is tiered and read like the others
    grow = admin(bootstrap).create_partitions([NewPartitions(topic, 3)], operation_timeout=20)
    grow[topic].result(30)
    produce_to(bootstrap, topic, {2: 900})
    wait_tiered(cluster.zookeeper_connect, topic, {2: 300})

    register_topics(spark, zookeeper=cluster.zookeeper_connect, topics=[topic])
    result = spark.sql(f"SELECT partition, min(offset) AS first, count(*) AS n "
                       f"FROM {quote_identifier(topic)} GROUP BY partition "
                       f"ORDER BY partition").collect()
    assert [(r.partition, r.first, r.n) for r in result] == [
        (0, inside, 1500 - inside), (1, above, 1500 - above), (2, 0, 900)]
    values = spark.sql(f"SELECT CAST(value AS STRING) AS v FROM {quote_identifier(topic)} "
                       f"WHERE partition = 0 ORDER BY offset LIMIT 1").first()
    assert values is not None and int(values.v) == 2 * inside  # value i at offset i // 2
    assert Path(table.uri).is_dir()
