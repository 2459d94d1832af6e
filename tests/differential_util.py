"""Scenarios for the differential tests (tests/test_differential_*.py): each one runs against a
cluster through what a client sees (raw requests of tests/wire.py, confluent-kafka) and returns
plain observations -- error codes, offsets, timestamps, generations -- never anything that
legitimately differs between two correct brokers (messages, member ids, broker ids, clocks).
The tests run a scenario against a loglake cluster and against the Apache Kafka peer and compare.

A :class:`Target` is what a scenario needs from a cluster: its bootstrap servers and, for the
failover scenario, killing and starting one broker. Requests that only a partition's leader or
the controller answers go to that broker (found through Metadata), as Kafka's clients do.

Every wait is bounded by time and count; loopback only. Not thread-safe except where a scenario
starts its own threads (the group scenario joins two raw members concurrently).
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from loglake.dev.harness import wait_until
from loglake.segments.records import Record, encode_batch
from tests.wire import WireClient

REQUEST_TIMEOUT_S = 30.0
"""Socket timeout of raw requests (a JoinGroup waits for the rebalance: up to the initial
rebalance delay plus the other member's rejoin)."""


class Cluster(Protocol):
    """What both ``loglake.dev.harness.DevCluster`` and ``loglake.dev.kafka_peer.KafkaPeer``
    offer."""

    @property
    def bootstrap_servers(self) -> str: ...

    def kill_broker(self, broker_id: int) -> None: ...

    def start_broker(self, broker_id: int, *, wait: bool = True) -> None: ...


@dataclass(frozen=True)
class Target:
    """A running cluster as a scenario sees it: ``name`` ("loglake" or "kafka") labels the
    observations and failure messages."""

    name: str
    cluster: Cluster

    @property
    def bootstrap_servers(self) -> str:
        return self.cluster.bootstrap_servers


# ----------------------------------------------------------------------------- raw requests


@dataclass(frozen=True)
class Layout:
    """Brokers (id -> "host:port"), the controller and, per asked topic, the partitions'
    leaders, leader epochs and ISRs, from one Metadata request."""

    brokers: dict[int, str]
    controller: int
    leaders: dict[tuple[str, int], int]
    epochs: dict[tuple[str, int], int]
    isrs: dict[tuple[str, int], list[int]]
    topic_errors: dict[str, int]


def connect_any(bootstrap: str) -> WireClient:
    """A raw connection to the first broker of ``bootstrap`` that accepts one (a killed
    broker refuses), as a client's bootstrap does."""
    error: OSError | None = None
    for address in bootstrap.split(","):
        try:
            return WireClient.connect(address, timeout=REQUEST_TIMEOUT_S)
        except OSError as exc:
            error = exc
    assert error is not None, "empty bootstrap servers"
    raise error


def metadata(bootstrap: str, topics: list[str] | None = None) -> Layout:
    with connect_any(bootstrap) as client:
        response = client.request(3, 9, {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False})
    leaders, epochs, isrs, errors = {}, {}, {}, {}
    for topic in response.topics:
        errors[str(topic.name)] = int(topic.error_code)
        for part in topic.partitions:
            key = (str(topic.name), int(part.partition_index))
            leaders[key] = int(part.leader_id)
            epochs[key] = int(part.leader_epoch)
            isrs[key] = sorted(int(b) for b in part.isr_nodes)
    return Layout({int(b.node_id): f"{b.host}:{b.port}" for b in response.brokers},
                  int(response.controller_id), leaders, epochs, isrs, errors)


@contextmanager
def controller_client(target: Target) -> Iterator[WireClient]:
    """A raw connection to the controller (ZooKeeper-mode Kafka answers CreateTopics,
    CreatePartitions and DeleteTopics there only)."""
    layout = wait_until(lambda: _with_controller(target.bootstrap_servers), timeout=30,
                        message=f"{target.name}: no controller in Metadata")
    with WireClient.connect(layout.brokers[layout.controller],
                            timeout=REQUEST_TIMEOUT_S) as client:
        yield client


def _with_controller(bootstrap: str) -> Layout | None:
    layout = metadata(bootstrap)
    return layout if layout.controller in layout.brokers else None


def wait_leader(target: Target, topic: str, partition: int = 0, *, timeout: float = 30.0,
                avoid: int | None = None) -> tuple[Layout, int]:
    """The layout and leader of ``topic``/``partition`` once it has one (other than
    ``avoid``) that is among the live brokers."""
    def ready() -> tuple[Layout, int] | None:
        layout = metadata(target.bootstrap_servers, [topic])
        leader = layout.leaders.get((topic, partition), -1)
        if leader in layout.brokers and leader != avoid:
            return layout, leader
        return None
    return wait_until(ready, timeout=timeout, ignore=(OSError,),
                      message=f"{target.name}: {topic}-{partition} has no leader")


@contextmanager
def leader_client(target: Target, topic: str, partition: int = 0) -> Iterator[WireClient]:
    layout, leader = wait_leader(target, topic, partition)
    with WireClient.connect(layout.brokers[leader], timeout=REQUEST_TIMEOUT_S) as client:
        yield client


def create_topic(target: Target, topic: str, *, partitions: int = 1, replication_factor: int = 1,
                 configs: dict[str, str] | None = None) -> None:
    """Create ``topic`` and wait until every partition has a leader and a full ISR."""
    code = create_topic_code(target, topic, partitions=partitions,
                             replication_factor=replication_factor, configs=configs)
    assert code == ErrorCode.none, f"{target.name}: creating {topic}: {ErrorCode(code).name}"

    def ready() -> bool:
        layout = metadata(target.bootstrap_servers, [topic])
        return all(layout.leaders.get((topic, p), -1) in layout.brokers
                   and len(layout.isrs.get((topic, p), [])) == replication_factor
                   for p in range(partitions))
    wait_until(ready, timeout=30, ignore=(OSError,),
               message=f"{target.name}: {topic} has no leaders or full ISR")
    for partition in range(partitions):  # the leader itself knows it leads (Kafka's brokers
        # learn it from the controller after Metadata elsewhere already shows it)
        with leader_client(target, topic, partition) as client:
            wait_until(lambda: list_offset(client, topic, -1, partition=partition)[0]  # noqa: B023
                       == ErrorCode.none, timeout=30, interval=0.2,
                       message=f"{target.name}: the leader of {topic}-{partition} is not ready")


def create_topic_code(target: Target, topic: str, *, partitions: int = 1,
                      replication_factor: int = 1, configs: dict[str, str] | None = None,
                      validate_only: bool = False) -> int:
    with controller_client(target) as client:
        response = client.request(19, 5, {"topics": [{
            "name": topic, "num_partitions": partitions,
            "replication_factor": replication_factor, "assignments": [],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout": 20000, "validate_only": validate_only})
    return int(response.topics[0].error_code)


def batch(values: list[bytes], *, timestamps: list[int] | None = None,
          keys: list[bytes | None] | None = None) -> bytes:
    """One record batch (no compression, offsets 0..n-1)."""
    now = int(time.time() * 1000)
    stamps = timestamps or [now] * len(values)
    names = keys or [None] * len(values)
    return encode_batch([Record(offset=i, timestamp=stamps[i], key=names[i], value=v)
                         for i, v in enumerate(values)])


def produce_raw(client: WireClient, topic: str, records: bytes, *, partition: int = 0,
                acks: int = -1) -> tuple[int, int]:
    """(error code, base offset) of a Produce v9 of ``records``."""
    response = client.request(0, 9, {"acks": acks, "timeout": 20000, "transactional_id": None,
                                     "topic_data": [{"name": topic, "partition_data": [
                                         {"index": partition, "records": records}]}]})
    part = response.responses[0].partition_responses[0]
    return int(part.error_code), int(part.base_offset)


def list_offset(client: WireClient, topic: str, timestamp: int, *,
                partition: int = 0, version: int = 7) -> tuple[int, int, int]:
    """(error code, offset, timestamp) of a ListOffsets (v7 unless said) for ``timestamp``
    (-1 latest, -2 earliest, -3 max timestamp, -4 earliest local (v8+), -5 latest tiered
    (v9+))."""
    response = client.request(2, version, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition,
                                        "current_leader_epoch": -1,
                                        "timestamp": timestamp}]}]})
    part = response.topics[0].partitions[0]
    return int(part.error_code), int(part.offset), int(part.timestamp)


# ------------------------------------------------------------------------ bad-input scenario


def oversized_batches(target: Target, prefix: str) -> dict[str, int]:
    """Produce error codes for batches over ``segment.bytes`` and over ``max.message.bytes``,
    then that a normal batch is still appended at offset 0."""
    seen: dict[str, int] = {}
    segment_topic, message_topic = f"{prefix}-segment", f"{prefix}-message"
    create_topic(target, segment_topic, configs={"segment.bytes": "2000"})
    create_topic(target, message_topic, configs={"max.message.bytes": "1000"})
    big = batch([b"x" * 100] * 30)  # about 3.8 KB
    for name, topic in (("segment.bytes", segment_topic), ("max.message.bytes", message_topic)):
        with leader_client(target, topic) as client:
            seen[f"produce over {name}"] = produce_raw(client, topic, big)[0]
            seen[f"then a small batch over {name}: offset"] = produce_raw(
                client, topic, batch([b"small"]))[1]
            seen[f"latest after refusal ({name})"] = list_offset(client, topic, -1)[1]
    return seen


def unknown_topics_and_partitions(target: Target, prefix: str) -> dict[str, int]:
    """Error codes for unknown topics and partitions on every data and admin API that names
    one, and a partition asked of a broker that is not its leader."""
    seen: dict[str, int] = {}
    missing, known = f"{prefix}-missing", f"{prefix}-known"
    create_topic(target, known)
    layout = metadata(target.bootstrap_servers, [missing])
    seen["metadata unknown topic"] = layout.topic_errors[missing]
    with leader_client(target, known) as client:
        seen["produce unknown topic"] = produce_raw(client, missing, batch([b"v"]))[0]
        seen["produce unknown partition"] = produce_raw(client, known, batch([b"v"]),
                                                        partition=7)[0]
        seen["list offsets unknown topic"] = list_offset(client, missing, -1)[0]
        seen["list offsets unknown partition"] = list_offset(client, known, -1, partition=7)[0]
        fetch = client.request(1, 12, {
            "replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                {"topic": name, "partitions": [{
                    "partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                    "current_leader_epoch": -1, "log_start_offset": -1,
                    "last_fetched_epoch": -1}]}
                for name, partition in ((missing, 0), (known, 7))],
            "forgotten_topics_data": [], "rack_id": ""})
        codes = {str(r.topic): int(r.partitions[0].error_code) for r in fetch.responses}
        seen["fetch unknown topic"] = codes[missing]
        seen["fetch unknown partition"] = codes[known]
    _, leader = wait_leader(target, known)
    other = next(b for b in sorted(layout.brokers) if b != leader)
    with WireClient.connect(layout.brokers[other], timeout=REQUEST_TIMEOUT_S) as client:
        seen["produce to a non-leader"] = produce_raw(client, known, batch([b"v"]))[0]
        seen["list offsets at a non-leader"] = list_offset(client, known, -1)[0]
    with controller_client(target) as client:
        deleted = client.request(20, 4, {"topic_names": [missing], "timeout": 10000})
        seen["delete unknown topic"] = int(deleted.responses[0].error_code)
        grown = client.request(37, 2, {"topics": [{"name": missing, "count": 3,
                                                   "assignments": None}],
                                       "timeout": 10000, "validate_only": False})
        seen["create partitions unknown topic"] = int(grown.results[0].error_code)
    return seen


CREATE_TOPICS_CASES: dict[str, dict[str, Any]] = {
    "valid, validate only": {"validate_only": True},
    "invalid name": {"topic": "bad/name"},
    "name of 250 characters": {"topic": "n" * 250},
    "zero partitions": {"partitions": 0},
    "-2 partitions": {"partitions": -2},
    "replication factor 0": {"replication_factor": 0},
    "replication factor above brokers": {"replication_factor": 4},
    "unknown config": {"configs": {"no.such.config": "1"}},
    "retention.ms not a number": {"configs": {"retention.ms": "abc"}},
    "cleanup.policy unknown": {"configs": {"cleanup.policy": "bogus"}},
    "min.insync.replicas 0": {"configs": {"min.insync.replicas": "0"}},
    "segment.bytes 1": {"configs": {"segment.bytes": "1"}},
    "max.message.bytes negative": {"configs": {"max.message.bytes": "-1"}},
    "compression.type unknown": {"configs": {"compression.type": "brotli"}},
    "message.timestamp.type unknown": {"configs": {"message.timestamp.type": "Sometime"}},
}
"""CreateTopics requests with bad input (and one valid validate-only), by what is wrong."""


def create_topics_errors(target: Target, prefix: str) -> dict[str, int]:
    seen: dict[str, int] = {}
    for index, (name, case) in enumerate(CREATE_TOPICS_CASES.items()):
        topic = case.get("topic", f"{prefix}-c{index}")
        seen[name] = create_topic_code(
            target, topic, partitions=case.get("partitions", 1),
            replication_factor=case.get("replication_factor", 1),
            configs=case.get("configs"), validate_only=case.get("validate_only", False))
    seen["the validate-only topic exists afterwards"] = int(
        metadata(target.bootstrap_servers, [f"{prefix}-c0"]).topic_errors[f"{prefix}-c0"])
    existing = f"{prefix}-exists"
    create_topic(target, existing)
    seen["already exists"] = create_topic_code(target, existing)
    with controller_client(target) as client:
        def grow(count: int) -> int:
            response = client.request(37, 2, {"topics": [
                {"name": existing, "count": count, "assignments": None}],
                "timeout": 10000, "validate_only": True})
            return int(response.results[0].error_code)
        seen["create partitions: same count"] = grow(1)
        seen["create partitions: fewer"] = grow(0)
        seen["create partitions: more (validate only)"] = grow(2)
    return seen


ALTER_CASES: dict[str, tuple[str, str | None]] = {
    "unknown config": ("no.such.config", "1"),
    "retention.ms not a number": ("retention.ms", "abc"),
    "cleanup.policy unknown": ("cleanup.policy", "bogus"),
    "min.insync.replicas 0": ("min.insync.replicas", "0"),
    "segment.bytes 1": ("segment.bytes", "1"),
    "valid retention.ms": ("retention.ms", "3600000"),
}
"""(config, value) pairs set on a topic through IncrementalAlterConfigs and AlterConfigs."""


def alter_configs_errors(target: Target, prefix: str) -> dict[str, int]:
    seen: dict[str, int] = {}
    topic = f"{prefix}-alter"
    create_topic(target, topic)
    with connect_any(target.bootstrap_servers) as client:
        for name, (key, value) in ALTER_CASES.items():
            incremental = client.request(44, 1, {"resources": [{
                "resource_type": 2, "resource_name": topic,
                "configs": [{"name": key, "config_operation": 0, "value": value}]}],
                "validate_only": True})
            seen[f"incremental: {name}"] = int(incremental.responses[0].error_code)
            legacy = client.request(33, 1, {"resources": [{
                "resource_type": 2, "resource_name": topic,
                "configs": [{"name": key, "value": value}]}], "validate_only": True})
            seen[f"legacy: {name}"] = int(legacy.responses[0].error_code)
        unknown = client.request(44, 1, {"resources": [{
            "resource_type": 2, "resource_name": f"{prefix}-missing",
            "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}]}],
            "validate_only": False})
        seen["incremental: unknown topic"] = int(unknown.responses[0].error_code)
        described = client.request(32, 1, {"resources": [{
            "resource_type": 2, "resource_name": f"{prefix}-missing",
            "configuration_keys": None}], "include_synonyms": False})
        seen["describe configs: unknown topic"] = int(described.results[0].error_code)
    return seen


# ---------------------------------------------------------------------- ListOffsets scenario


TIMESTAMP_STEPS = (0, 2000, 1000, 4000, 3000, 4000, 500)
"""Record timestamps (ms after the scenario's base) in offset order: out of order, a repeated
maximum and a late small one, in two batches (offsets 0-3 and 4-6)."""


def list_offsets_by_time(target: Target, prefix: str) -> dict[str, tuple[int, int, int]]:
    """ListOffsets (error, offset, timestamp) for earliest, latest, max timestamp and times
    before, between, at and after the records' timestamps."""
    topic = f"{prefix}-times"
    create_topic(target, topic)
    base = int(time.time() * 1000) - 600_000
    stamps = [base + step for step in TIMESTAMP_STEPS]
    seen: dict[str, tuple[int, int, int]] = {}
    with leader_client(target, topic) as client:
        seen["empty: earliest"] = list_offset(client, topic, -2)
        seen["empty: latest"] = list_offset(client, topic, -1)
        seen["empty: max timestamp"] = _relative(list_offset(client, topic, -3), base)
        seen["empty: by time"] = _relative(list_offset(client, topic, base), base)
        seen["empty: earliest local (v8)"] = list_offset(client, topic, -4, version=8)
        seen["empty: latest tiered (v9)"] = list_offset(client, topic, -5, version=9)
        for first, last in ((0, 4), (4, 7)):
            code, _ = produce_raw(client, topic, batch(
                [b"v%d" % i for i in range(first, last)], timestamps=stamps[first:last]))
            assert code == ErrorCode.none, f"{target.name}: produce {ErrorCode(code).name}"
        seen["earliest"] = list_offset(client, topic, -2)
        seen["latest"] = list_offset(client, topic, -1)
        seen["max timestamp"] = _relative(list_offset(client, topic, -3), base)
        # nothing tiered on either (Kafka: no remote storage; loglake: no sealed segment)
        seen["earliest local (v8)"] = list_offset(client, topic, -4, version=8)
        seen["latest tiered (v9)"] = list_offset(client, topic, -5, version=9)
        for step in (-1000, 0, 1, 1000, 1500, 2000, 3500, 4000, 4001):
            seen[f"time base{step:+d}"] = _relative(list_offset(client, topic, base + step),
                                                    base)
    return seen


def _relative(answer: tuple[int, int, int], base: int) -> tuple[int, int, int]:
    code, offset, stamp = answer
    return code, offset, stamp - base if stamp >= 0 else stamp


# -------------------------------------------------------------------------- group scenario


def subscription(topic: str) -> bytes:
    """ConsumerProtocol subscription v0 of ``topic`` (no user data): what a consumer sends
    as its protocol metadata. (Kafka's coordinator parses it when the rebalance completes; a
    JoinGroup with metadata it cannot parse never gets its answer.)"""
    name = topic.encode()
    return struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", -1)


@dataclass
class Member:
    """A raw group member on its own connection (JoinGroup blocks during a rebalance)."""

    client: WireClient
    group: str
    member_id: str = ""
    generation: int = -1

    def join(self, topic: str) -> dict[str, Any]:
        """JoinGroup v5 (a new member first gets MEMBER_ID_REQUIRED and its id, then joins)."""
        steps = []
        for _ in range(3):
            response = self.client.request(11, 5, {
                "group_id": self.group, "session_timeout": 30000, "rebalance_timeout": 20000,
                "member_id": self.member_id, "group_instance_id": None,
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": subscription(topic)}]})
            steps.append(int(response.error_code))
            if response.error_code == ErrorCode.member_id_required:
                self.member_id = str(response.member_id)
                continue
            break
        self.generation = int(response.generation_id)
        self.member_id = str(response.member_id) or self.member_id
        return {"errors": steps, "generation": self.generation,
                "leader": response.leader == self.member_id,
                "protocol": response.protocol_name,
                "members seen": len(response.members)}

    def sync(self, assignments: dict[str, bytes]) -> tuple[int, bytes]:
        response = self.client.request(14, 3, {
            "group_id": self.group, "generation_id": self.generation,
            "member_id": self.member_id, "group_instance_id": None,
            "assignments": [{"member_id": m, "assignment": a} for m, a in assignments.items()]})
        return int(response.error_code), bytes(response.assignment)

    def heartbeat(self, generation: int | None = None, member_id: str | None = None) -> int:
        response = self.client.request(12, 3, {
            "group_id": self.group,
            "generation_id": self.generation if generation is None else generation,
            "member_id": self.member_id if member_id is None else member_id,
            "group_instance_id": None})
        return int(response.error_code)

    def leave(self) -> int:
        response = self.client.request(13, 3, {"group_id": self.group, "members": [
            {"member_id": self.member_id, "group_instance_id": None}]})
        return int(response.error_code)


def _coordinator(target: Target, group: str) -> str:
    """The address of ``group``'s coordinator once it answers DescribeGroups for the group
    twice in a row, 0.5 s apart (a fresh Kafka cluster creates ``__consumer_offsets`` on the
    first FindCoordinator, and a JoinGroup that races the loading of the group's partition
    can wait forever there)."""
    def ready() -> str | None:
        with connect_any(target.bootstrap_servers) as client:
            response = client.request(10, 2, {"key": group, "key_type": 0})
        if response.error_code != ErrorCode.none:
            return None
        address = f"{response.host}:{response.port}"
        with WireClient.connect(address, timeout=REQUEST_TIMEOUT_S) as client:
            for check in range(2):
                described = client.request(15, 5, {"groups": [group],
                                                   "include_authorized_operations": False})
                if described.groups[0].error_code != ErrorCode.none:
                    return None
                if check == 0:
                    time.sleep(0.5)
        return address
    return wait_until(ready, timeout=60, interval=0.5, ignore=(OSError,),
                      message=f"{target.name}: no ready coordinator for {group}")


def _in_thread(call: Callable[[], Any]) -> Callable[[], Any]:
    """Start ``call`` in a thread; the returned function joins it (bounded) and gives its
    result or raises its exception."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc
    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def result() -> Any:
        thread.join(REQUEST_TIMEOUT_S * 2)
        assert not thread.is_alive(), "a group request did not return"
        if "error" in box:
            raise box["error"]
        return box["value"]
    return result


def group_rebalances(target: Target, prefix: str) -> list[tuple[str, Any]]:
    """Two raw members through join, sync, a second member's arrival (rebalance), stale
    generations, an unknown member, a leave and the survivor's rejoin: what each sees."""
    topic, group = f"{prefix}-grouped", f"{prefix}-group"
    create_topic(target, topic, partitions=2)
    address = _coordinator(target, group)
    seen: list[tuple[str, Any]] = []
    with WireClient.connect(address, timeout=REQUEST_TIMEOUT_S) as a_client, \
            WireClient.connect(address, timeout=REQUEST_TIMEOUT_S) as b_client:
        a, b = Member(a_client, group), Member(b_client, group)
        seen.append(("a joins alone", a.join(topic)))
        seen.append(("a syncs", a.sync({a.member_id: b"all-to-a"})))
        seen.append(("a heartbeats", a.heartbeat()))
        b_joined = _in_thread(lambda: b.join(topic))
        seen.append(("a heartbeats while b joins", wait_until(
            lambda: (code := a.heartbeat()) != ErrorCode.none and code, timeout=30,
            message=f"{target.name}: no rebalance announced to a")))
        seen.append(("a rejoins", a.join(topic)))
        seen.append(("b joined", b_joined()))
        seen.append(("same generation", a.generation == b.generation))
        b_synced = _in_thread(lambda: b.sync({}))
        seen.append(("a (leader) syncs", a.sync({a.member_id: b"p0", b.member_id: b"p1"})))
        seen.append(("b syncs", b_synced()))
        seen.append(("a heartbeats", a.heartbeat()))
        seen.append(("a heartbeats a stale generation", a.heartbeat(generation=a.generation - 1)))
        seen.append(("an unknown member heartbeats", a.heartbeat(member_id="nobody")))
        seen.append(("a syncs a stale generation",
                     Member(a_client, group, a.member_id, a.generation - 1).sync({})[0]))
        seen.append(("a leaves", a.leave()))
        seen.append(("b heartbeats after a left", wait_until(
            lambda: (code := b.heartbeat()) != ErrorCode.none and code, timeout=30,
            message=f"{target.name}: no rebalance announced to b")))
        seen.append(("b rejoins alone", b.join(topic)))
        seen.append(("b syncs", b.sync({b.member_id: b"all-to-b"})))
        seen.append(("a heartbeats after leaving", a.heartbeat()))
        seen.append(("b leaves", b.leave()))
    return seen


# ----------------------------------------------------------------------- failover scenario


def _produce_acked(bootstrap: str, topic: str, values: list[bytes], *,
                   timeout: float = 90.0) -> list[int]:
    """Offsets of ``values`` produced with an idempotent acks=all producer, in send order."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, "message.timeout.ms": int(timeout * 1000)})
    offsets: dict[bytes, int] = {}
    errors: list[Any] = []

    def report(error: Any, msg: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            offsets[msg.value()] = msg.offset()
    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=report)
    assert producer.flush(timeout + 10) == 0, "records not delivered in time"
    assert not errors, errors[:3]
    return [offsets[v] for v in values]


def _read_all(bootstrap: str, topic: str, count: int, *, timeout: float = 60.0
              ) -> list[tuple[int, bytes | None]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes | None]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(count - len(got), timeout=0.5):
                if msg.error() is None:
                    got.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return got


def _committed(bootstrap: str, group: str, topic: str, offset: int | None = None) -> int:
    """Commit ``offset`` for ``group`` (when given), then read the group's committed offset."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        if offset is not None:
            wait_until(lambda: consumer.commit(
                offsets=[TopicPartition(topic, 0, offset)], asynchronous=False) or True,
                timeout=60, ignore=(KafkaException,), message=f"commit for {group}")
        answer = wait_until(lambda: consumer.committed([TopicPartition(topic, 0)], timeout=10),
                            timeout=60, ignore=(KafkaException,),
                            message=f"committed offsets of {group}")
        return int(answer[0].offset)
    finally:
        consumer.close()


FAILOVER_RECORDS = 50


def leader_failover(target: Target, prefix: str) -> dict[str, Any]:
    """RF 3, min.insync.replicas 2: acks=all records and a committed group offset, SIGKILL of
    the leader, more acks=all records; offsets, watermarks, leader epochs and the group offset
    as clients see them, then the killed broker's return to the ISR."""
    topic, group = f"{prefix}-failover", f"{prefix}-failover-group"
    create_topic(target, topic, replication_factor=3, configs={"min.insync.replicas": "2"})
    bootstrap = target.bootstrap_servers
    seen: dict[str, Any] = {}
    before = _produce_acked(bootstrap, topic, [b"before-%d" % i for i in range(FAILOVER_RECORDS)])
    seen["offsets acked before"] = before
    seen["group offset committed"] = _committed(bootstrap, group, topic, 30)
    layout, old = wait_leader(target, topic)
    old_epoch = layout.epochs[(topic, 0)]
    target.cluster.kill_broker(old)
    layout, new = wait_leader(target, topic, avoid=old, timeout=60)
    # how much the epoch grows is not fixed (Kafka: 1, or 2 when the killed broker was also
    # the controller and the new one elects again): that it grows is
    seen["leader epoch grew on failover"] = layout.epochs[(topic, 0)] > old_epoch
    failover_epoch = layout.epochs[(topic, 0)]
    after = _produce_acked(bootstrap, topic, [b"after-%d" % i for i in range(FAILOVER_RECORDS)])
    seen["offsets acked after"] = after
    with WireClient.connect(layout.brokers[new], timeout=REQUEST_TIMEOUT_S) as client:
        seen["new leader: earliest"] = list_offset(client, topic, -2)
        seen["new leader: latest"] = list_offset(client, topic, -1)
    got = _read_all(bootstrap, topic, 2 * FAILOVER_RECORDS)
    seen["records read"] = [offset for offset, _ in got]
    seen["values in order"] = [value for _, value in got] == [
        *(b"before-%d" % i for i in range(FAILOVER_RECORDS)),
        *(b"after-%d" % i for i in range(FAILOVER_RECORDS))]
    seen["group offset after failover"] = _committed(bootstrap, group, topic)
    target.cluster.start_broker(old)
    seen["killed broker back in the ISR"] = bool(wait_until(
        lambda: len(metadata(bootstrap, [topic]).isrs[(topic, 0)]) == 3, timeout=90,
        ignore=(OSError, KeyError), message=f"{target.name}: broker {old} not back in the ISR"))
    final = metadata(bootstrap, [topic])
    seen["leader epoch kept when the killed broker returns"] = (
        final.epochs[(topic, 0)] == failover_epoch)
    return seen


# ----------------------------------------------------------------------- data-path scenario


def _fetch(client: WireClient, topic: str, offset: int, *, epoch: int = -1) -> tuple[int, int]:
    """(error code, high watermark) of a consumer Fetch v12 at ``offset``."""
    response = client.request(1, 12, {
        "replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
            {"topic": topic, "partitions": [{
                "partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
                "current_leader_epoch": epoch, "log_start_offset": -1,
                "last_fetched_epoch": -1}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    part = response.responses[0].partitions[0]
    return int(part.error_code), int(part.high_watermark)


def _delete_records(client: WireClient, topic: str, offset: int) -> tuple[int, int]:
    response = client.request(21, 2, {"topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "offset": offset}]}], "timeout": 10000})
    part = response.topics[0].partitions[0]
    return int(part.error_code), int(part.low_watermark)


def _end_for_epoch(client: WireClient, topic: str, epoch: int) -> tuple[int, int, int]:
    response = client.request(23, 4, {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": epoch}]}]})
    part = response.topics[0].partitions[0]
    return int(part.error_code), int(part.leader_epoch), int(part.end_offset)


def data_path_errors(target: Target, prefix: str) -> dict[str, Any]:
    """Produce/Fetch/ListOffsets/OffsetForLeaderEpoch/DeleteRecords answers around the edges:
    bad acks, offsets past the end, a leader epoch from the future, deleting records, a record
    without key on a compacted topic, idempotent duplicates and sequence gaps, LogAppendTime."""
    topic, compacted, appended = (f"{prefix}-data", f"{prefix}-compacted",
                                  f"{prefix}-append-time")
    create_topic(target, topic)
    create_topic(target, compacted, configs={"cleanup.policy": "compact"})
    create_topic(target, appended, configs={"message.timestamp.type": "LogAppendTime"})
    seen: dict[str, Any] = {}
    with leader_client(target, topic) as client:
        seen["produce 5"] = produce_raw(client, topic, batch([b"v%d" % i for i in range(5)]))
        seen["produce acks=2"] = produce_raw(client, topic, batch([b"x"]), acks=2)[0]
        seen["fetch at the end"] = _fetch(client, topic, 5)
        seen["fetch past the end"], seen["fetch past the end: high watermark"] = _fetch(
            client, topic, 6)
        seen["fetch at -1"] = _fetch(client, topic, -1)[0]
        seen["fetch with a future leader epoch"] = _fetch(client, topic, 0, epoch=7)[0]
        seen["list offsets with a future leader epoch"] = client.request(2, 7, {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "current_leader_epoch": 7, "timestamp": -1}]}]}
        ).topics[0].partitions[0].error_code
        seen["end offset for epoch 0"] = _end_for_epoch(client, topic, 0)
        seen["end offset for a future epoch"] = _end_for_epoch(client, topic, 9)
        seen["delete records below 3"] = _delete_records(client, topic, 3)
        seen["delete records past the end"] = _delete_records(client, topic, 99)
        seen["earliest after delete"] = list_offset(client, topic, -2)
        seen["fetch below the log start"] = _fetch(client, topic, 1)[0]
        seen["delete records to the high watermark (-1)"] = _delete_records(client, topic, -1)
        seen["earliest after deleting all"] = list_offset(client, topic, -2)
        seen["latest after deleting all"] = list_offset(client, topic, -1)
        def init_producer_id() -> Any:  # Kafka answers COORDINATOR_LOAD_IN_PROGRESS (14)
            # until its broker has a block of producer ids: a client retries
            answer = client.request(22, 4, {"transactional_id": None,
                                            "transaction_timeout": 60000,
                                            "producer_id": -1, "producer_epoch": -1})
            return answer if answer.error_code != ErrorCode.coordinator_load_in_progress else None
        pid = wait_until(init_producer_id, timeout=30, interval=0.2,
                         message=f"{target.name}: InitProducerId")
        seen["init producer id"] = int(pid.error_code)

        def idempotent(sequence: int, count: int = 2) -> tuple[int, int]:
            records = encode_batch(
                [Record(offset=i, timestamp=int(time.time() * 1000), key=None,
                        value=b"i%d" % (sequence + i)) for i in range(count)],
                producer_id=int(pid.producer_id), producer_epoch=int(pid.producer_epoch),
                base_sequence=sequence)
            return produce_raw(client, topic, records)
        seen["idempotent seq 0"] = idempotent(0)
        seen["idempotent seq 0 again (duplicate)"] = idempotent(0)
        seen["idempotent seq 5 (gap)"] = idempotent(5)
        seen["idempotent seq 2 (next)"] = idempotent(2)
    with leader_client(target, compacted) as client:
        seen["compacted topic, record without key"] = produce_raw(
            client, compacted, batch([b"no key"]))[0]
        seen["compacted topic, keyed record"] = produce_raw(
            client, compacted, batch([b"value"], keys=[b"key"]))[0]
    with leader_client(target, appended) as client:
        response = client.request(0, 9, {"acks": -1, "timeout": 20000, "transactional_id": None,
                                         "topic_data": [{"name": appended, "partition_data": [
                                             {"index": 0, "records": batch(
                                                 [b"a"], timestamps=[1000])}]}]})
        part = response.responses[0].partition_responses[0]
        stamp = part.log_append_time  # kio: a datetime, None for -1
        millis = -1 if stamp is None else int(stamp.timestamp() * 1000) if hasattr(
            stamp, "timestamp") else int(stamp)
        seen["LogAppendTime: produce answers the append time"] = (int(part.error_code),
                                                                  millis > 1000)
        code, offset, stamp = list_offset(client, appended, -3)
        seen["LogAppendTime: max timestamp is the append time"] = (code, offset, stamp > 1000)
    return seen


def group_admin_errors(target: Target, prefix: str) -> dict[str, Any]:
    """OffsetCommit/OffsetFetch/DescribeGroups/DeleteGroups/ListGroups on unknown, empty and
    active groups, and commits for unknown topics and partitions."""
    topic, group, missing = f"{prefix}-offsets", f"{prefix}-offsets-group", f"{prefix}-nogroup"
    create_topic(target, topic)
    address = _coordinator(target, group)
    elsewhere = next(a for a in metadata(target.bootstrap_servers).brokers.values()
                     if a != address)
    seen: dict[str, Any] = {}
    with WireClient.connect(_coordinator(target, missing), timeout=REQUEST_TIMEOUT_S) as client:
        unknown = client.request(9, 8, {"groups": [{"group_id": missing, "topics": [
            {"name": topic, "partition_indexes": [0]}]}], "require_stable": False}).groups[0]
        seen["offset fetch, unknown group"] = (int(unknown.error_code), [
            (int(p.committed_offset), int(p.error_code))
            for t in unknown.topics for p in t.partitions])
        described = client.request(15, 5, {"groups": [missing],
                                           "include_authorized_operations": False}).groups[0]
        seen["describe groups, unknown group"] = (int(described.error_code),
                                                  str(described.group_state))
        deleted = client.request(42, 2, {"groups_names": [missing]}).results[0]
        seen["delete groups, unknown group"] = int(deleted.error_code)
    with WireClient.connect(elsewhere, timeout=REQUEST_TIMEOUT_S) as client:
        wrong = client.request(9, 8, {"groups": [{"group_id": group, "topics": None}],
                                      "require_stable": False}).groups[0]
        seen["offset fetch at a broker that is not the coordinator"] = int(wrong.error_code)
        wrong_join = client.request(11, 5, {
            "group_id": group, "session_timeout": 30000, "rebalance_timeout": 20000,
            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription(topic)}]})
        seen["join at a broker that is not the coordinator"] = int(wrong_join.error_code)
    with WireClient.connect(address, timeout=REQUEST_TIMEOUT_S) as client:
        def commit(name: str, partition: int, offset: int) -> int:
            response = client.request(8, 8, {
                "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "topics": [{"name": name, "partitions": [
                    {"partition_index": partition, "committed_offset": offset,
                     "committed_leader_epoch": -1, "committed_metadata": "m"}]}]})
            return int(response.topics[0].partitions[0].error_code)

        def fetch(group_id: str) -> tuple[int, list[tuple[int, int]]]:
            response = client.request(9, 8, {"groups": [{"group_id": group_id, "topics": [
                {"name": topic, "partition_indexes": [0, 3]}]}], "require_stable": False})
            answer = response.groups[0]
            return int(answer.error_code), [
                (int(p.committed_offset), int(p.error_code))
                for t in answer.topics for p in t.partitions]
        seen["commit (simple consumer)"] = commit(topic, 0, 4)
        seen["commit to an unknown partition"] = commit(topic, 3, 1)
        seen["commit to an unknown topic"] = commit(f"{prefix}-missing", 0, 1)
        seen["offset fetch"] = fetch(group)
        described = client.request(15, 5, {"groups": [group],
                                           "include_authorized_operations": False})
        seen["describe groups"] = [(int(g.error_code), str(g.group_state),
                                    str(g.protocol_type), len(g.members))
                                   for g in described.groups]
        listed = client.request(16, 4, {"states_filter": []})
        seen["list groups: the simple group"] = [
            (str(g.protocol_type), str(g.group_state)) for g in listed.groups
            if g.group_id == group]
        deleted = client.request(42, 2, {"groups_names": [group]})
        seen["delete groups"] = [int(r.error_code) for r in deleted.results]
        seen["offset fetch after delete"] = fetch(group)
    return seen


def _join_raw(client: WireClient, group: str, *, member_id: str = "",
              protocols: tuple[str, ...] = ("range",), protocol_type: str = "consumer",
              session_timeout: int = 30000, instance: str | None = None,
              topic: str = "t") -> Any:
    return client.request(11, 5, {
        "group_id": group, "session_timeout": session_timeout, "rebalance_timeout": 20000,
        "member_id": member_id, "group_instance_id": instance, "protocol_type": protocol_type,
        "protocols": [{"name": name, "metadata": subscription(topic)} for name in protocols]})


def group_protocols_and_static_members(target: Target, prefix: str) -> list[tuple[str, Any]]:
    """Protocol choice among members' assignors, inconsistent protocols and protocol types,
    session timeouts out of the broker's bounds, and a static member (``group.instance.id``)
    rejoining with a new member id: the old id is fenced."""
    topic, group, static_group = f"{prefix}-proto", f"{prefix}-proto-group", f"{prefix}-static"
    create_topic(target, topic)
    address = _coordinator(target, group)
    seen: list[tuple[str, Any]] = []
    with WireClient.connect(address, timeout=REQUEST_TIMEOUT_S) as a_client, \
            WireClient.connect(address, timeout=REQUEST_TIMEOUT_S) as b_client:
        a, b = Member(a_client, group), Member(b_client, group)
        first = _join_raw(a_client, group, protocols=("range", "roundrobin"), topic=topic)
        a.member_id = str(first.member_id)
        joined = _join_raw(a_client, group, member_id=a.member_id,
                           protocols=("range", "roundrobin"), topic=topic)
        a.generation = int(joined.generation_id)
        seen.append(("a alone: protocol", (int(joined.error_code), joined.protocol_name)))
        seen.append(("a syncs", a.sync({a.member_id: b""})[0]))

        def b_joins() -> Any:
            answer = _join_raw(b_client, group, protocols=("roundrobin",), topic=topic)
            return _join_raw(b_client, group, member_id=str(answer.member_id),
                             protocols=("roundrobin",), topic=topic)
        b_joined = _in_thread(b_joins)
        wait_until(lambda: a.heartbeat() == ErrorCode.rebalance_in_progress, timeout=30,
                   message=f"{target.name}: no rebalance announced to a")
        rejoined = _join_raw(a_client, group, member_id=a.member_id,
                             protocols=("range", "roundrobin"), topic=topic)
        answer = b_joined()
        b.member_id, b.generation = str(answer.member_id), int(answer.generation_id)
        a.generation = int(rejoined.generation_id)
        seen.append(("a and b: protocols", (rejoined.protocol_name, answer.protocol_name,
                                            a.generation == b.generation)))
        b_synced = _in_thread(lambda: b.sync({}))
        seen.append(("a syncs", a.sync({a.member_id: b"", b.member_id: b""})[0]))
        seen.append(("b syncs", b_synced()[0]))
        with WireClient.connect(address, timeout=REQUEST_TIMEOUT_S) as c_client:
            seen.append(("a member with no common assignor", int(_join_raw(
                c_client, group, protocols=("sticky",), topic=topic).error_code)))
            seen.append(("a member of another protocol type", int(_join_raw(
                c_client, group, protocol_type="connect", topic=topic).error_code)))
        for name, timeout_ms in (("below the minimum", 1000), ("above the maximum", 3_600_000)):
            other = f"{group}-{timeout_ms}"
            with WireClient.connect(_coordinator(target, other),
                                    timeout=REQUEST_TIMEOUT_S) as c_client:
                seen.append((f"session timeout {name}", int(_join_raw(
                    c_client, other, session_timeout=timeout_ms, topic=topic).error_code)))
        seen.append(("a leaves", a.leave()))
        seen.append(("b leaves", b.leave()))
    static_address = _coordinator(target, static_group)
    with WireClient.connect(static_address, timeout=REQUEST_TIMEOUT_S) as client:
        joined = _join_raw(client, static_group, instance="instance-1", topic=topic)
        old_id, generation = str(joined.member_id), int(joined.generation_id)
        seen.append(("static member joins at once", (int(joined.error_code), generation)))
        static = Member(client, static_group, old_id, generation)
        seen.append(("static member syncs", static.sync({old_id: b""})[0]))
        again = _join_raw(client, static_group, instance="instance-1", topic=topic)
        new_id = str(again.member_id)
        seen.append(("static member rejoins with no id", (int(again.error_code),
                                                          new_id != old_id,
                                                          int(again.generation_id))))
        fenced = client.request(12, 3, {"group_id": static_group, "generation_id": generation,
                                        "member_id": old_id, "group_instance_id": "instance-1"})
        seen.append(("the old member id heartbeats", int(fenced.error_code)))
        left = client.request(13, 3, {"group_id": static_group, "members": [
            {"member_id": new_id, "group_instance_id": "instance-1"}]})
        seen.append(("static member leaves", (int(left.error_code),
                                              [int(m.error_code) for m in left.members])))
    return seen


# -------------------------------------------------------------------- transactions scenario


def _list_offset_isolated(client: WireClient, topic: str, timestamp: int,
                          isolation_level: int) -> int:
    response = client.request(2, 7, {"replica_id": -1, "isolation_level": isolation_level,
                                     "topics": [{"name": topic, "partitions": [
                                         {"partition_index": 0, "current_leader_epoch": -1,
                                          "timestamp": timestamp}]}]})
    return int(response.topics[0].partitions[0].offset)


def _read_isolated(bootstrap: str, topic: str, isolation: str, until: int
                   ) -> list[tuple[int, bytes | None]]:
    """(offset, value) a consumer with ``isolation`` reads from 0 until its position reaches
    ``until`` (markers and aborted records skipped by the client count as consumed)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes | None]] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(100, timeout=0.3):
                if msg.error() is None:
                    got.append((msg.offset(), msg.value()))
            position = consumer.position([TopicPartition(topic, 0)])[0].offset
            if position >= until:
                break
    finally:
        consumer.close()
    return got


def transactions(target: Target, prefix: str) -> dict[str, Any]:
    """A transactional producer: records of an open transaction (LSO vs high watermark at
    both isolation levels), an abort, a commit; what read_committed and read_uncommitted
    consumers read and which offsets the markers take."""
    from confluent_kafka import Producer

    topic = f"{prefix}-txn"
    create_topic(target, topic, replication_factor=3, configs={"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": target.bootstrap_servers,
                         "transactional.id": f"{prefix}-txn-id", "linger.ms": 5,
                         "transaction.timeout.ms": 60000})
    seen: dict[str, Any] = {}
    producer.init_transactions(60)

    def send(values: list[bytes]) -> None:
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value, partition=0)
        assert producer.flush(30) == 0
    with leader_client(target, topic) as client:
        send([b"open-%d" % i for i in range(3)])
        seen["open: latest read_uncommitted / read_committed"] = (
            _list_offset_isolated(client, topic, -1, 0),
            _list_offset_isolated(client, topic, -1, 1))
        producer.abort_transaction(30)
        send([b"committed-%d" % i for i in range(2)])
        producer.commit_transaction(30)

        def settled() -> tuple[int, int] | None:
            ends = (_list_offset_isolated(client, topic, -1, 0),
                    _list_offset_isolated(client, topic, -1, 1))
            return ends if ends[0] == ends[1] else None
        seen["after abort and commit: latest at both levels"] = wait_until(
            settled, timeout=30, message=f"{target.name}: the LSO did not reach the end")
    end = seen["after abort and commit: latest at both levels"][0]
    seen["read_committed reads"] = _read_isolated(target.bootstrap_servers, topic,
                                                  "read_committed", end)
    seen["read_uncommitted reads"] = _read_isolated(target.bootstrap_servers, topic,
                                                    "read_uncommitted", end)
    return seen
