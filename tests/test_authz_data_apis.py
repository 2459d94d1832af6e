"""Authorization of the data, group and transaction APIs with the real ACL authorizer on a real
broker: Kafka 4.0's ``KafkaApis`` rules, checked with raw requests (exact codes per entry),
confluent-kafka and kafka-python.

Every client connects over PLAINTEXT, so its principal is ``User:ANONYMOUS``; ACLs are written
to ZooKeeper at Kafka's paths (catalog/acls.py, as ``kafka-acls --authorizer-properties
zookeeper.connect=...`` does) and reach the broker through the change notifications. Each test
uses names of its own, grants what it needs and removes it at its end (cluster ACLs included).
A decision is polled until the broker shows it (:func:`eventually`).

On PLAINTEXT the brokers' own connections are ``User:ANONYMOUS`` too, so where brokers talk to
each other (replica fetches, transaction markers) the test grants ANONYMOUS CLUSTER_ACTION on
the cluster, as an operator grants it to the broker principal (or lists it in super.users).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from loglake.catalog.acls import AclStore
from loglake.dev.harness import DevCluster
from loglake.segments.records import Record, encode_batch
from tests.authz_util import AUTHORIZER as BASE_AUTHORIZER
from tests.authz_util import CLUSTER, Grants, barrier, eventually, wait_allowed
from tests.wire import WireClient

AUTHORIZER = {**BASE_AUTHORIZER, "group.initial.rebalance.delay.ms": "0",
              "auto.create.topics.enable": "true"}
TOPIC_AUTHZ = ErrorCode.topic_authorization_failed
GROUP_AUTHZ = ErrorCode.group_authorization_failed
CLUSTER_AUTHZ = ErrorCode.cluster_authorization_failed
TXN_AUTHZ = ErrorCode.transactional_id_authorization_failed
NONE = ErrorCode.none
OMITTED = -2147483648
READ_DESCRIBE_BITS = (1 << 3) | (1 << 8)


# ------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
            ) -> Iterator[DevCluster]:
    """One broker with the ACL authorizer, no super users, default deny."""
    data = tmp_path_factory.mktemp("authz-data")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=AUTHORIZER) as dev:
        yield dev


@pytest.fixture(scope="module")
def zk(secured: DevCluster) -> Iterator[KazooClient]:
    client = KazooClient(hosts=secured.zookeeper_connect, timeout=10)
    client.start(timeout=20)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture
def grants(secured: DevCluster, zk: KazooClient) -> Iterator[Grants]:
    g = Grants(AclStore(zk))
    try:
        yield g
    finally:
        g.remove_all()
        barrier(g.store, [secured.broker_port(1)])  # the next test starts from no ACLs


@pytest.fixture
def name() -> str:
    """A resource-name stem of this test's own."""
    return f"authz-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def wire(secured: DevCluster) -> Iterator[WireClient]:
    with WireClient.connect(secured.bootstrap_servers) as client:
        yield client


# -------------------------------------------------------------------------------- helpers


def make_topic(secured: DevCluster, grants: Grants, zk: KazooClient, topic: str,
               partitions: int = 1) -> None:
    """``topic`` created with a CREATE grant on exactly it (removed again), and led."""
    grants.allow("Topic", topic, "Create")
    admin = AdminClient({"bootstrap.servers": secured.bootstrap_servers})

    def create() -> int:
        future = admin.create_topics([NewTopic(topic, partitions, 1)],
                                     request_timeout=15)[topic]
        try:
            future.result(20)
        except KafkaException as exc:
            return confluent_error(exc)
        return 0

    eventually(create, lambda code: code in (0, KafkaError.TOPIC_ALREADY_EXISTS),
               f"creating {topic} with CREATE on it")
    grants.revoke("Topic", topic, "Create")
    eventually(lambda: all(zk.exists(f"/brokers/topics/{topic}/partitions/{p}/state")
                           for p in range(partitions)), bool, f"{topic} has partition states")


def batch(count: int = 3, *, transactional: bool = False, pid: int = -1) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([Record(offset=i, timestamp=now, key=b"k%d" % i, value=b"v%d" % i)
                         for i in range(count)], base_offset=0, is_transactional=transactional,
                        producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                        base_sequence=0 if pid >= 0 else -1)


def produce_code(wire: WireClient, topic: str, *, acks: int = 1, records: bytes | None = None,
                 transactional_id: str | None = None, timeout_ms: int = 5000) -> int:
    response = wire.request(0, 9, {
        "acks": acks, "timeout": timeout_ms, "transactional_id": transactional_id,
        "topic_data": [{"name": topic, "partition_data": [
            {"index": 0, "records": records if records is not None else batch()}]}]})
    return int(response.responses[0].partition_responses[0].error_code)


def fetch_code(wire: WireClient, topic: str, *, replica_id: int = -1) -> int:
    response = wire.request(1, 12, {
        "replica_id": replica_id, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": []})
    return int(response.responses[0].partitions[0].error_code)


def list_offsets_code(wire: WireClient, topic: str) -> int:
    response = wire.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    return int(response.topics[0].partitions[0].error_code)


def epoch_code(wire: WireClient, topic: str) -> int:
    response = wire.request(23, 4, {"replica_id": -2, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "leader_epoch": 0}]}]})
    return int(response.topics[0].partitions[0].error_code)


def producers_code(wire: WireClient, topic: str) -> int:
    response = wire.request(61, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
    return int(response.topics[0].partitions[0].error_code)


def metadata(wire: WireClient, topics: list[str] | None, *, auto_create: bool = False,
             version: int = 10, operations: bool = False) -> Any:
    return wire.request(3, version, {
        "topics": None if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": auto_create,
        "include_cluster_authorized_operations": operations,
        "include_topic_authorized_operations": operations})


def offset_commit(wire: WireClient, group: str, topic: str) -> list[int]:
    response = wire.request(8, 8, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]})
    return [int(p.error_code) for t in response.topics for p in t.partitions]


def offset_fetch(wire: WireClient, group: str, topics: list[str] | None) -> Any:
    response = wire.request(9, 8, {"groups": [{
        "group_id": group,
        "topics": None if topics is None else [{"name": t, "partition_indexes": [0]}
                                               for t in topics]}],
        "require_stable": False})
    return response.groups[0]


def coordinator_code(wire: WireClient, key: str, key_type: int) -> int:
    response = wire.request(10, 4, {"key_type": key_type, "coordinator_keys": [key]})
    return int(response.coordinators[0].error_code)


def describe_txn_code(wire: WireClient, txn: str) -> int:
    """DescribeTransactions v0's error code for one id, read from the frame (kio cannot
    decode the start time -1 of an id without an open transaction): correlation id, empty
    header tags, throttle time, array length, then the entry's error code."""
    wire.send_raw(wire.encode(65, 0, {"transactional_ids": [txn]}))
    frame = wire.recv_frame()
    return int.from_bytes(frame[10:12], "big", signed=True)


def confluent_error(exc: KafkaException) -> int:
    return int(exc.args[0].code())


# --------------------------------------------------------------------------------- Produce


def test_produce_needs_write_on_the_topic(secured: DevCluster, zk: KazooClient, grants: Grants,
                                          wire: WireClient, name: str) -> None:
    make_topic(secured, grants, zk, name)
    assert produce_code(wire, name) == TOPIC_AUTHZ  # default deny

    reports: list[Any] = []
    producer = Producer({"bootstrap.servers": secured.bootstrap_servers,
                         "message.timeout.ms": 5000})
    producer.produce(name, b"refused", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(15)
    assert reports and reports[0] is not None
    assert reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    grants.allow("Topic", name, "Write")
    eventually(lambda: produce_code(wire, name), lambda code: code == NONE, "WRITE granted")
    # a new producer: librdkafka keeps a topic's authorization error until its next refresh
    producer = Producer({"bootstrap.servers": secured.bootstrap_servers,
                         "message.timeout.ms": 5000})
    assert _produce_one(producer, name) is None

    grants.deny("Topic", name, "Write")  # DENY beats ALLOW
    eventually(lambda: produce_code(wire, name), lambda code: code == TOPIC_AUTHZ,
               "DENY over ALLOW")


def test_produce_acks_0_to_a_refused_topic_closes_the_connection(
        secured: DevCluster, zk: KazooClient, grants: Grants, wire: WireClient,
        name: str) -> None:
    make_topic(secured, grants, zk, name)
    wire.send_raw(wire.encode(0, 9, {"acks": 0, "timeout": 5000, "topic_data": [
        {"name": name, "partition_data": [{"index": 0, "records": batch()}]}]}))
    assert wire.is_closed()


def test_transactional_produce_needs_write_on_the_transactional_id(
        secured: DevCluster, zk: KazooClient, grants: Grants, wire: WireClient,
        name: str) -> None:
    make_topic(secured, grants, zk, name)
    grants.allow("Topic", name, "Write")
    txn = batch(transactional=True, pid=1234)
    eventually(lambda: produce_code(wire, name, records=txn, transactional_id=name + "-txn"),
               lambda code: code == TXN_AUTHZ, "transactional batch without WRITE on the id")
    grants.allow("TransactionalId", name + "-txn", "Write")
    # now past authorization: the producer state answers (no such transaction yet)
    code = eventually(
        lambda: produce_code(wire, name, records=txn, transactional_id=name + "-txn"),
        lambda code: code != TXN_AUTHZ, "WRITE on the transactional id")
    assert code != TOPIC_AUTHZ


# ----------------------------------------------------- Fetch, ListOffsets, OffsetForLeaderEpoch


def test_fetch_list_offsets_epochs_and_producers_by_operation(
        secured: DevCluster, zk: KazooClient, grants: Grants, wire: WireClient,
        name: str) -> None:
    make_topic(secured, grants, zk, name)
    assert fetch_code(wire, name) == TOPIC_AUTHZ
    assert list_offsets_code(wire, name) == TOPIC_AUTHZ
    assert epoch_code(wire, name) == TOPIC_AUTHZ
    assert producers_code(wire, name) == TOPIC_AUTHZ

    grants.allow("Topic", name, "Describe")
    eventually(lambda: list_offsets_code(wire, name), lambda c: c == NONE, "DESCRIBE granted")
    assert epoch_code(wire, name) == NONE
    assert fetch_code(wire, name) == TOPIC_AUTHZ  # DESCRIBE does not allow READ
    assert producers_code(wire, name) == TOPIC_AUTHZ

    grants.allow("Topic", name, "Read")
    eventually(lambda: fetch_code(wire, name), lambda c: c == NONE, "READ granted")
    assert producers_code(wire, name) == NONE
    # a follower's fetch (replica id >= 0) needs CLUSTER_ACTION, READ is not enough
    assert fetch_code(wire, name, replica_id=7) == TOPIC_AUTHZ


def test_consumer_needs_read_on_topic_and_group(secured: DevCluster, zk: KazooClient,
                                                grants: Grants, name: str) -> None:
    make_topic(secured, grants, zk, name)
    grants.allow("Topic", name, "Write")

    def produce_fresh() -> Any:  # a new client each try: no cached authorization error
        return _produce_one(Producer({"bootstrap.servers": secured.bootstrap_servers}), name)

    eventually(produce_fresh, lambda err: err is None, "produce")

    def consume(group: str) -> tuple[int | None, list[bytes]]:
        consumer = Consumer({"bootstrap.servers": secured.bootstrap_servers,
                             "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        try:
            consumer.subscribe([name])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                error = msg.error()
                if error is not None:
                    return error.code(), []
                return None, [msg.value() or b""]
            return None, []
        finally:
            consumer.close()

    group = name + "-group"
    grants.allow("Topic", name, "Read")
    eventually(lambda: consume(group),  # READ on the topic, none on the group
               lambda r: r == (KafkaError.GROUP_AUTHORIZATION_FAILED, []),
               "READ on the topic only")
    grants.allow("Group", group, "Read")
    eventually(lambda: consume(group), lambda r: r[1] == [b"first"],
               "READ on topic and group")


def _produce_one(producer: Producer, topic: str) -> Any:
    """The delivery error of one record (None: written). librdkafka refuses at once, raising,
    while the topic's cached metadata still says TOPIC_AUTHORIZATION_FAILED: that is returned
    as the error too, so a wait for a grant can retry."""
    reports: list[Any] = []
    try:
        producer.produce(topic, b"first", on_delivery=lambda err, msg: reports.append(err))
    except KafkaException as exc:
        return exc.args[0] if exc.args else exc
    producer.flush(10)
    return reports[0] if reports else "no report"


# --------------------------------------------------------------------------------- Metadata


def test_metadata_hides_topics_without_describe(secured: DevCluster, zk: KazooClient,
                                                grants: Grants, wire: WireClient,
                                                name: str) -> None:
    make_topic(secured, grants, zk, name)
    named = metadata(wire, [name]).topics[0]
    assert (named.error_code, list(named.partitions)) == (TOPIC_AUTHZ, [])
    assert name not in {t.name for t in metadata(wire, None).topics}
    kp = KafkaConsumer(bootstrap_servers=secured.bootstrap_servers)
    try:
        assert name not in kp.topics()
        grants.allow("Topic", name, "Read")
        listed = eventually(lambda: metadata(wire, None, operations=True).topics,
                            lambda topics: name in {t.name for t in topics}, "DESCRIBE implied")
        entry = next(t for t in listed if t.name == name)
        assert entry.error_code == NONE and len(entry.partitions) == 1
        # READ implies DESCRIBE: the bitfield names exactly those two
        assert entry.topic_authorized_operations == READ_DESCRIBE_BITS
        assert eventually(lambda: name in kp.topics(), bool,
                          "kafka-python sees the topic")
    finally:
        kp.close()
    # without the operations asked: the schema's "not requested" value
    assert metadata(wire, [name]).topics[0].topic_authorized_operations == OMITTED


def test_metadata_cluster_operations_need_describe_on_the_cluster(
        grants: Grants, wire: WireClient) -> None:
    assert metadata(wire, [], operations=True).cluster_authorized_operations == 0
    grants.allow("Cluster", CLUSTER, "Describe")
    bits = eventually(lambda: metadata(wire, [], operations=True).cluster_authorized_operations,
                      lambda value: value != 0, "DESCRIBE on the cluster")
    assert bits == 1 << 8
    assert metadata(wire, []).cluster_authorized_operations == OMITTED


def test_metadata_auto_creation_needs_create(zk: KazooClient, grants: Grants, wire: WireClient,
                                             name: str) -> None:
    topic = name + "-auto"
    # not even DESCRIBE: refused, not created
    assert metadata(wire, [topic], auto_create=True).topics[0].error_code == TOPIC_AUTHZ
    grants.allow("Topic", name, "Describe", pattern_type="PREFIXED")
    eventually(lambda: metadata(wire, [topic]).topics[0].error_code,
               lambda code: code == ErrorCode.unknown_topic_or_partition, "DESCRIBE granted")
    assert metadata(wire, [topic], auto_create=True).topics[0].error_code == TOPIC_AUTHZ
    assert not zk.exists(f"/brokers/topics/{topic}")
    grants.allow("Topic", name, "Create", pattern_type="PREFIXED")
    eventually(lambda: metadata(wire, [topic], auto_create=True).topics[0].error_code,
               lambda code: code != TOPIC_AUTHZ, "CREATE on the topic prefix")
    assert zk.exists(f"/brokers/topics/{topic}")


# ------------------------------------------------------------------------------- group APIs


def test_group_apis_refuse_without_group_acls(wire: WireClient, name: str) -> None:
    group = name + "-g"
    assert coordinator_code(wire, group, 0) == GROUP_AUTHZ
    assert coordinator_code(wire, name + "-txn", 1) == TXN_AUTHZ
    join = wire.request(11, 5, {"group_id": group, "session_timeout": 10000,
                                "rebalance_timeout": 10000, "member_id": "",
                                "protocol_type": "consumer",
                                "protocols": [{"name": "range", "metadata": b""}]})
    assert join.error_code == GROUP_AUTHZ
    sync = wire.request(14, 3, {"group_id": group, "generation_id": 1, "member_id": "m",
                                "assignments": []})
    assert sync.error_code == GROUP_AUTHZ
    beat = wire.request(12, 3, {"group_id": group, "generation_id": 1, "member_id": "m"})
    assert beat.error_code == GROUP_AUTHZ
    leave = wire.request(13, 3, {"group_id": group, "members": [{"member_id": "m"}]})
    assert leave.error_code == GROUP_AUTHZ
    assert offset_commit(wire, group, name) == [GROUP_AUTHZ]
    assert offset_fetch(wire, group, [name]).error_code == GROUP_AUTHZ
    described = wire.request(15, 5, {"groups": [group], "include_authorized_operations": True})
    assert described.groups[0].error_code == GROUP_AUTHZ
    deleted = wire.request(42, 2, {"groups_names": [group]})
    assert deleted.results[0].error_code == GROUP_AUTHZ
    offsets_deleted = wire.request(47, 0, {"group_id": group, "topics": [
        {"name": name, "partitions": [{"partition_index": 0}]}]})
    assert offsets_deleted.error_code == GROUP_AUTHZ


def test_group_offsets_need_topic_acls_too(secured: DevCluster, zk: KazooClient,
                                           grants: Grants, wire: WireClient,
                                           name: str) -> None:
    make_topic(secured, grants, zk, name)
    group = name + "-g"
    grants.allow("Group", group, "Read")  # implies DESCRIBE on the group
    eventually(lambda: offset_commit(wire, group, name), lambda codes: codes == [TOPIC_AUTHZ],
               "READ on the group, none on the topic")
    fetched = offset_fetch(wire, group, [name])
    assert fetched.error_code == NONE
    assert [(p.error_code, p.committed_offset) for p in fetched.topics[0].partitions] == [
        (TOPIC_AUTHZ, -1)]

    grants.allow("Topic", name, "Read")
    eventually(lambda: offset_commit(wire, group, name), lambda codes: codes == [NONE],
               "READ on the topic")
    fetched = offset_fetch(wire, group, None)  # all partitions
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in fetched.topics] == [
        (name, [1])]
    grants.revoke("Topic", name, "Read")
    grants.allow("Topic", name, "Write")  # keeps DESCRIBE on the topic, no READ
    fetched = eventually(lambda: offset_fetch(wire, group, None), lambda g: bool(g.topics),
                         "DESCRIBE on the topic still lists its offsets")
    grants.revoke("Topic", name, "Write")
    eventually(lambda: offset_fetch(wire, group, None).topics, lambda topics: not topics,
               "an all-partitions fetch hides topics without DESCRIBE")

    # DescribeGroups with the group's authorized operations; ListGroups filters
    described = wire.request(15, 5, {"groups": [group], "include_authorized_operations": True})
    assert described.groups[0].error_code == NONE
    assert described.groups[0].authorized_operations == READ_DESCRIBE_BITS
    listed = wire.request(16, 4, {"states_filter": []})
    assert group in {g.group_id for g in listed.groups}
    grants.revoke("Group", group, "Read")
    eventually(lambda: {g.group_id for g in wire.request(16, 4, {"states_filter": []}).groups},
               lambda groups: group not in groups, "ListGroups hides the group")
    grants.allow("Cluster", CLUSTER, "Describe")
    eventually(lambda: {g.group_id for g in wire.request(16, 4, {"states_filter": []}).groups},
               lambda groups: group in groups, "DESCRIBE on the cluster lists every group")

    # OffsetDelete: DELETE on the group, then READ on the topic per partition
    grants.allow("Group", group, "Delete")
    answer = eventually(
        lambda: wire.request(47, 0, {"group_id": group, "topics": [
            {"name": name, "partitions": [{"partition_index": 0}]}]}),
        lambda r: r.error_code == NONE, "DELETE on the group")
    assert [p.error_code for t in answer.topics for p in t.partitions] == [TOPIC_AUTHZ]
    deleted = wire.request(42, 2, {"groups_names": [group]})
    assert deleted.results[0].error_code != GROUP_AUTHZ


# ------------------------------------------------------------------------ transaction APIs


def test_transaction_apis_need_write_on_the_transactional_id(
        secured: DevCluster, zk: KazooClient, grants: Grants, wire: WireClient,
        name: str) -> None:
    make_topic(secured, grants, zk, name)
    txn, group = name + "-txn", name + "-g"
    init = wire.request(22, 4, {"transactional_id": txn, "transaction_timeout": 60000,
                                "producer_id": -1, "producer_epoch": -1})
    assert init.error_code == TXN_AUTHZ

    def add_partitions(topics: list[str]) -> list[int]:
        response = wire.request(24, 3, {
            "v3_and_below_transactional_id": txn, "v3_and_below_producer_id": 1,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": t, "partitions": [0]} for t in topics]})
        return [int(p.partition_error_code) for t in response.results_by_topic_v3_and_below
                for p in t.results_by_partition]

    assert add_partitions([name]) == [TXN_AUTHZ]
    add_offsets = {"transactional_id": txn, "producer_id": 1, "producer_epoch": 0,
                   "group_id": group}
    assert wire.request(25, 3, add_offsets).error_code == TXN_AUTHZ
    end = {"transactional_id": txn, "producer_id": 1, "producer_epoch": 0, "committed": True}
    assert wire.request(26, 3, end).error_code == TXN_AUTHZ
    commit = {"transactional_id": txn, "group_id": group, "producer_id": 1,
              "producer_epoch": 0, "topics": [{"name": name, "partitions": [
                  {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]}

    def txn_commit_codes() -> list[int]:
        response = wire.request(28, 3, commit)
        return [int(p.error_code) for t in response.topics for p in t.partitions]

    assert txn_commit_codes() == [TXN_AUTHZ]
    assert describe_txn_code(wire, txn) == TXN_AUTHZ

    grants.allow("TransactionalId", txn, "Write")
    eventually(lambda: wire.request(22, 4, {
        "transactional_id": txn, "transaction_timeout": 60000, "producer_id": -1,
        "producer_epoch": -1}).error_code, lambda code: code == NONE, "WRITE on the id")
    # authorization before existence: a missing topic without WRITE is refused too
    assert add_partitions([name, name + "-missing"]) == [TOPIC_AUTHZ, TOPIC_AUTHZ]
    grants.allow("Topic", name + "-missing", "Write")
    eventually(lambda: add_partitions([name, name + "-missing"]),
               lambda codes: codes == [TOPIC_AUTHZ, ErrorCode.unknown_topic_or_partition],
               "WRITE on the missing topic")
    grants.allow("Topic", name, "Write")
    eventually(lambda: add_partitions([name, name + "-missing"]),
               lambda codes: codes == [ErrorCode.operation_not_attempted,
                                       ErrorCode.unknown_topic_or_partition],
               "WRITE on both: only the missing one fails, nothing is added")
    assert wire.request(25, 3, add_offsets).error_code == GROUP_AUTHZ
    assert txn_commit_codes() == [GROUP_AUTHZ]
    grants.allow("Group", group, "Read")
    eventually(txn_commit_codes, lambda codes: codes == [TOPIC_AUTHZ], "READ on the group")
    assert wire.request(26, 3, end).error_code not in (TXN_AUTHZ, GROUP_AUTHZ)
    assert describe_txn_code(wire, txn) == NONE  # WRITE implies DESCRIBE
    listed = wire.request(66, 1, {"state_filters": [], "producer_id_filters": []})
    assert txn in {s.transactional_id for s in listed.transaction_states}
    grants.revoke("TransactionalId", txn, "Write")
    eventually(lambda: {s.transactional_id for s in wire.request(
        66, 1, {"state_filters": [], "producer_id_filters": []}).transaction_states},
        lambda ids: txn not in ids, "ListTransactions hides ids without DESCRIBE")


def test_idempotent_init_producer_id_needs_idempotent_write_or_write_on_a_topic(
        secured: DevCluster, zk: KazooClient, grants: Grants, wire: WireClient,
        name: str) -> None:
    make_topic(secured, grants, zk, name)

    def init_code() -> int:
        return int(wire.request(22, 4, {"transactional_id": None, "transaction_timeout": 0,
                                        "producer_id": -1, "producer_epoch": -1}).error_code)

    grants.deny("Topic", "*", "Write")  # no WRITE on any topic, whatever other tests granted
    eventually(init_code, lambda code: code == CLUSTER_AUTHZ, "no IDEMPOTENT_WRITE, no WRITE")
    grants.allow("Cluster", CLUSTER, "IdempotentWrite")
    eventually(init_code, lambda code: code == NONE, "IDEMPOTENT_WRITE on the cluster")
    grants.revoke("Cluster", CLUSTER, "IdempotentWrite")
    eventually(init_code, lambda code: code == CLUSTER_AUTHZ, "IDEMPOTENT_WRITE revoked")
    grants.revoke("Topic", "*", "Write", permission="Deny")
    grants.allow("Topic", name, "Write")
    eventually(init_code, lambda code: code == NONE, "KIP-679: WRITE on some topic")

    # an idempotent confluent-kafka producer with WRITE on the topic only
    producer = Producer({"bootstrap.servers": secured.bootstrap_servers,
                         "enable.idempotence": True})
    eventually(lambda: _produce_one(producer, name), lambda err: err is None,
               "idempotent produce with WRITE on the topic")


def test_write_txn_markers_need_cluster_action(secured: DevCluster, zk: KazooClient,
                                               grants: Grants, wire: WireClient,
                                               name: str) -> None:
    make_topic(secured, grants, zk, name)
    markers = {"markers": [{"producer_id": 99, "producer_epoch": 0, "transaction_result": True,
                            "coordinator_epoch": 0,
                            "topics": [{"name": name, "partition_indexes": [0]}]}]}

    def codes() -> list[int]:
        response = wire.request(27, 1, markers)
        return [int(p.error_code) for m in response.markers for t in m.topics
                for p in t.partitions]

    assert codes() == [CLUSTER_AUTHZ]
    grants.allow("Cluster", CLUSTER, "ClusterAction")
    eventually(codes, lambda c: c != [CLUSTER_AUTHZ], "CLUSTER_ACTION on the cluster")


def test_transactional_producer_end_to_end(secured: DevCluster, zk: KazooClient,
                                           grants: Grants, name: str) -> None:
    make_topic(secured, grants, zk, name)
    txn = name + "-txn"
    config = {"bootstrap.servers": secured.bootstrap_servers, "transactional.id": txn,
              "transaction.timeout.ms": 10000}
    producer = Producer(config)
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(10)
    assert confluent_error(refused.value) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    grants.allow("TransactionalId", txn, "Write")
    grants.allow("Topic", name, "Write")
    grants.allow("Cluster", CLUSTER, "ClusterAction")  # the coordinator's markers (broker)
    port = [secured.broker_port(1)]
    wait_allowed(port, "TransactionalId", txn, "Write")
    wait_allowed(port, "Topic", name, "Write")
    wait_allowed(port, "Cluster", CLUSTER, "ClusterAction")
    producer = Producer(config)
    producer.init_transactions(15)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(name, b"txn-%d" % i)
    producer.commit_transaction(15)

    group = name + "-g"
    grants.allow("Topic", name, "Read")
    grants.allow("Group", group, "Read")
    wait_allowed(port, "Group", group, "Read")  # after the topic's grant: both are there
    consumer = Consumer({"bootstrap.servers": secured.bootstrap_servers, "group.id": group,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    try:
        consumer.subscribe([name])
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(values) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                values.append(msg.value() or b"")
        assert values == [b"txn-%d" % i for i in range(5)]
    finally:
        consumer.close()
