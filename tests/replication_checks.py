"""Checker for replication fault tests: a producer loop, a consumer drain, and replica comparison.

The pass criteria of issue 3 ("How it is checked"), in the words of Kafka's replication system
test, for a producer that sends unique values while faults are injected:

1. enough values were acknowledged (``ProducerLoop.acked``, delivery callback without error);
2. every acknowledged value is consumed (``drain`` reads every partition from offset 0 to the
   high watermark) -- no acknowledged record lost;
3. no value is consumed twice (idempotence holds across failover);
4. the acknowledged ``(partition, offset)`` holds that value (an ack names the record's place);
5. after healing, no offset holds two different values on any replica, and every replica holds
   the committed prefix (``assert_replicas_converged`` decodes the segment files of each broker).

Everything here is bounded by time and count, talks only to 127.0.0.1 brokers of a
:class:`~loglake.dev.harness.DevCluster`, and starts no process. ``ProducerLoop`` and
``ConcurrentConsumer`` own one background thread each; the other helpers run on the caller's
thread. Failure messages say what was checked, on which partition/offset, and give examples.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from loglake.dev.harness import wait_until
from loglake.errors import CorruptRecordError
from loglake.segments.batch import read_header
from loglake.segments.filenames import LOG_SUFFIX, parse_segment_name
from loglake.segments.records import Record, encode_batch, iter_decoded_batches
from tests.wire import WireClient

Place = tuple[int, int]
"""(partition, offset) of one record."""

DEFAULT_PRODUCER_CONFIG: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "message.timeout.ms": 60_000,
    "request.timeout.ms": 15_000,
    "socket.timeout.ms": 10_000,
    "retry.backoff.ms": 100,
    "reconnect.backoff.ms": 100,
    "reconnect.backoff.max.ms": 1_000,
    "topic.metadata.refresh.interval.ms": 2_000,
    "queue.buffering.max.messages": 50_000,
}
"""Issue 3's producer: idempotent, acks=all, bounded delivery timeout, quick reconnects."""


REPLICATION_OVERRIDES: dict[str, str] = {
    "replica.lag.time.max.ms": "5000",
    "zookeeper.session.timeout.ms": "6000",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
}
"""Broker settings of every replication fault test: a lagging follower leaves the ISR after 5 s,
a killed broker's session expires after 6 s."""


def place_of(msg: Message) -> Place:
    """(partition, offset) of a delivered or consumed message."""
    partition, offset = msg.partition(), msg.offset()
    assert partition is not None and offset is not None, f"message without a place: {msg}"
    return partition, offset


def value_of(index: int) -> bytes:
    """The unique value of the ``index``-th message a ``ProducerLoop`` sends."""
    return b"%08d" % index


# ------------------------------------------------------------------------------ cluster state


def create_replicated_topic(
    bootstrap: str, topic: str, *, partitions: int = 3, replication_factor: int = 3,
    min_insync_replicas: int = 2, assignment: Sequence[Sequence[int]] | None = None,
    config: dict[str, str] | None = None, timeout: float = 30.0,
) -> None:
    """Create ``topic`` (RF 3, min.insync.replicas 2 unless told) and wait until every partition
    has a leader and a full ISR."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {"min.insync.replicas": str(min_insync_replicas), **(config or {})}
    if assignment is None:
        new = NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor,
                       config=configs)
    else:
        new = NewTopic(topic, num_partitions=len(assignment),
                       replica_assignment=[list(r) for r in assignment], config=configs)
        partitions, replication_factor = len(assignment), len(assignment[0])
    admin.create_topics([new], operation_timeout=15, request_timeout=20)[topic].result(
        timeout=timeout)
    wait_for_full_isr(bootstrap, topic, range(partitions), replication_factor, timeout=timeout)


@dataclass(frozen=True)
class PartitionView:
    """One partition as Metadata reports it."""

    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: str | None


def describe(bootstrap: str, topic: str, *, timeout: float = 5.0) -> dict[int, PartitionView]:
    """Metadata of ``topic``: partition -> leader, replicas, ISR (raises KafkaException)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(topic, timeout=timeout).topics[topic]
    if meta.error is not None:
        raise KafkaException(meta.error)
    return {
        p: PartitionView(m.leader, tuple(m.replicas), tuple(m.isrs),
                         None if m.error is None else str(m.error))
        for p, m in meta.partitions.items()
    }


def partition_leader(bootstrap: str, topic: str, partition: int, *,
                     timeout: float = 30.0) -> int:
    """The leader of ``topic``-``partition`` per Metadata, waiting (bounded) while there is none."""
    def led() -> PartitionView | None:
        view = describe(bootstrap, topic).get(partition)
        return view if view is not None and view.leader >= 0 and view.error is None else None

    found = wait_until(led, timeout, f"{topic}-{partition} has no leader", interval=0.2,
                       ignore=(KafkaException,))
    return found.leader


def wait_for_full_isr(bootstrap: str, topic: str, partitions: Iterable[int], replicas: int = 3,
                      *, timeout: float = 60.0) -> dict[int, PartitionView]:
    """Poll Metadata until every partition has a leader and ``replicas`` ISR members."""
    wanted = list(partitions)
    last: dict[str, object] = {}

    def full() -> dict[int, PartitionView] | None:
        views = last["metadata"] = describe(bootstrap, topic)
        if all(p in views and views[p].leader >= 0 and len(views[p].isr) == replicas
               for p in wanted):
            return views
        return None

    return wait_until(full, timeout, lambda: f"ISR of {topic} partitions {wanted} not back to "
                      f"{replicas} members; last metadata: {last.get('metadata')}",
                      interval=0.25, ignore=(KafkaException,))


class ZooKeeperView:
    """Read-only view of the cluster's ZooKeeper state (connect to ``dev.zookeeper_connect``,
    i.e. under the brokers' chroot). A context manager; thread-safe like kazoo."""

    def __init__(self, connect: str, *, timeout: float = 15.0) -> None:
        self.zk = KazooClient(hosts=connect, timeout=timeout)
        self.zk.start(timeout=timeout)

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    def __enter__(self) -> ZooKeeperView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def controller(self) -> int | None:
        """``brokerid`` of ``/controller``, None while there is no controller."""
        try:
            raw, _ = self.zk.get("/controller")
        except NoNodeError:
            return None
        return int(json.loads(raw)["brokerid"])

    def wait_controller(self, *, timeout: float = 30.0, other_than: int | None = None) -> int:
        def elected() -> tuple[int] | None:
            current = self.controller()
            return (current,) if current is not None and current != other_than else None

        return wait_until(elected, timeout, f"no controller (other than {other_than})")[0]

    def registered(self, broker_id: int) -> bool:
        """Whether ``/brokers/ids/<id>`` exists (the broker's ZooKeeper session is alive)."""
        return self.zk.exists(f"/brokers/ids/{broker_id}") is not None

    def wait_unregistered(self, broker_id: int, *, timeout: float = 30.0) -> None:
        wait_until(lambda: not self.registered(broker_id), timeout,
                   f"/brokers/ids/{broker_id} still exists after the kill")

    def partition_state(self, topic: str, partition: int) -> dict[str, Any] | None:
        """JSON of ``/brokers/topics/<t>/partitions/<p>/state`` (leader, leader_epoch, isr)."""
        try:
            raw, _ = self.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        except NoNodeError:
            return None
        state: dict[str, Any] = json.loads(raw)
        return state

    def wait_state(self, topic: str, partition: int, predicate: Callable[[dict[str, Any]], bool],
                   *, timeout: float = 30.0, what: str = "condition") -> dict[str, Any]:
        last: dict[str, object] = {}

        def reached() -> dict[str, Any] | None:
            state = last["state"] = self.partition_state(topic, partition)
            return state if state is not None and predicate(state) else None

        return wait_until(reached, timeout, lambda: f"{topic}-{partition}: {what} not reached; "
                          f"last state {last.get('state')}", interval=0.05)


# ---------------------------------------------------------------------------------- producer


@dataclass
class ProducerStats:
    sent: int = 0
    acked: dict[bytes, Place] = field(default_factory=dict)
    acked_per_partition: Counter[int] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    fatal: str | None = None
    errors: list[str] = field(default_factory=list)


class ProducerLoop:
    """Background producer of unique values ``value_of(i)`` to ``topic``, round-robin over
    ``partitions``, at most ``rate`` messages/s, until ``max_messages`` were sent,
    ``max_seconds`` passed, or :meth:`stop` is called; then flushes (bounded).

    ``acked`` maps each acknowledged value to the (partition, offset) its delivery report gave.
    Read results after :meth:`stop`; while running, only ``acked_count`` is safe to poll.
    """

    def __init__(
        self, bootstrap: str, topic: str, *, partitions: int = 3, rate: float = 1000.0,
        max_messages: int = 500_000, max_seconds: float = 240.0, flush_seconds: float = 70.0,
        config: dict[str, Any] | None = None, first_index: int = 0,
    ) -> None:
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.max_messages = max_messages
        self.max_seconds = max_seconds
        self.flush_seconds = flush_seconds
        self.first_index = first_index
        self.config = {"bootstrap.servers": bootstrap, **DEFAULT_PRODUCER_CONFIG,
                       **(config or {})}
        self.stats = ProducerStats()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{topic}", daemon=True)
        self.unflushed = 0

    def start(self) -> ProducerLoop:
        self._thread.start()
        return self

    def __enter__(self) -> ProducerLoop:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def acked_count(self) -> int:
        with self._lock:
            return len(self.stats.acked)

    @property
    def acked(self) -> dict[bytes, Place]:
        with self._lock:
            return dict(self.stats.acked)

    def wait_acked(self, count: int, *, timeout: float) -> None:
        """Block until ``count`` values are acknowledged (AssertionError after ``timeout``)."""

        def reached() -> bool:
            if self.acked_count >= count:
                return True
            assert self._thread.is_alive(), (
                f"the producer stopped at {self.acked_count} of {count} wanted "
                f"acknowledgements; {self.summary()}")
            return False

        wait_until(reached, timeout, lambda: f"only {self.acked_count} of {count} wanted "
                                             f"acknowledgements; {self.summary()}")

    def wait_progress(self, more: int, *, timeout: float) -> None:
        """Block until ``more`` further values are acknowledged from now."""
        self.wait_acked(self.acked_count + more, timeout=timeout)

    def wait_each_partition_progress(self, more: int, *, timeout: float) -> None:
        """Block until every partition got ``more`` further acknowledgements from now (so a
        partition whose leader was hit has failed over and takes writes again)."""
        with self._lock:
            wanted = {p: self.stats.acked_per_partition[p] + more
                      for p in range(self.partitions)}
        behind: dict[int, int] = {}

        def all_progressed() -> bool:
            nonlocal behind
            with self._lock:
                behind = {p: self.stats.acked_per_partition[p] for p, n in wanted.items()
                          if self.stats.acked_per_partition[p] < n}
            assert not behind or self._thread.is_alive(), (
                f"the producer stopped with partitions {behind} (acks so far) short of "
                f"{wanted}; {self.summary()}")
            return not behind

        wait_until(all_progressed, timeout,
                   lambda: f"partitions {behind} (acks so far) did not get {more} more "
                           f"acknowledgements (wanted {wanted}); {self.summary()}")

    def stop(self, *, timeout: float | None = None) -> ProducerStats:
        self._stop.set()
        self._thread.join(self.flush_seconds + 10 if timeout is None else timeout)
        if self._thread.is_alive():
            raise AssertionError(f"producer thread did not finish; {self.summary()}")
        return self.stats

    def summary(self) -> str:
        with self._lock:
            stats = self.stats
            return (f"sent={stats.sent} acked={len(stats.acked)} failed={dict(stats.failed)} "
                    f"unflushed={self.unflushed} fatal={stats.fatal} "
                    f"errors={stats.errors[:5]}")

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        with self._lock:
            if err is None:
                value = msg.value()
                assert value is not None
                previous = self.stats.acked.get(value)
                if previous is not None:  # the same message reported twice: a client bug
                    self.stats.errors.append(f"value {value!r} acknowledged twice")
                place = place_of(msg)
                if previous is None:
                    self.stats.acked_per_partition[place[0]] += 1
                self.stats.acked[value] = place
            else:
                self.stats.failed[err.name()] += 1

    def _on_error(self, err: KafkaError) -> None:
        with self._lock:
            if err.fatal():
                self.stats.fatal = str(err)
            if len(self.stats.errors) < 100:
                self.stats.errors.append(str(err))

    def _run(self) -> None:
        producer = Producer({**self.config, "error_cb": self._on_error})
        started = time.monotonic()
        deadline = started + self.max_seconds
        index = self.first_index
        count = 0
        while (not self._stop.is_set() and count < self.max_messages
               and time.monotonic() < deadline and self.stats.fatal is None):
            due = started + count / self.rate
            pause = due - time.monotonic()
            if pause > 0:
                producer.poll(min(pause, 0.05))
                continue
            try:
                producer.produce(self.topic, value=value_of(index),
                                 partition=count % self.partitions, on_delivery=self._on_delivery)
            except BufferError:
                producer.poll(0.05)
                continue
            with self._lock:
                self.stats.sent += 1
            index += 1
            count += 1
            producer.poll(0)
        self.unflushed = producer.flush(self.flush_seconds)


# ------------------------------------------------------------------------------ raw requests


NOT_LEADER_OR_FOLLOWER = 6
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20


def broker_client(dev: Any, broker_id: int, *, timeout: float = 15.0) -> WireClient:
    """A raw protocol connection to one broker of a DevCluster (127.0.0.1 only)."""
    return WireClient("127.0.0.1", dev.broker_port(broker_id), timeout=timeout)


def produce_request(topic: str, partition: int, values: Sequence[bytes], *, acks: int,
                    timeout_ms: int = 10_000) -> dict[str, Any]:
    """A Produce v9 body with one non-idempotent batch holding ``values``."""
    now = int(time.time() * 1000)
    records = [Record(offset=i, timestamp=now, key=None, value=v) for i, v in enumerate(values)]
    return {"acks": acks, "timeout": timeout_ms, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition,
                                            "records": encode_batch(records)}]}]}


def raw_produce(client: WireClient, topic: str, partition: int, values: Sequence[bytes], *,
                acks: int, timeout_ms: int = 10_000) -> tuple[int, int]:
    """Send one batch with Produce v9; returns (error code, base offset)."""
    response = client.request(0, 9, produce_request(topic, partition, values, acks=acks,
                                                    timeout_ms=timeout_ms))
    part = response.responses[0].partition_responses[0]
    return int(part.error_code), int(part.base_offset)


def produce_until_ok(dev: Any, zk: ZooKeeperView, topic: str, partition: int,
                     values: Sequence[bytes], *, acks: int, timeout: float = 60.0,
                     ) -> dict[bytes, Place]:
    """Send ``values`` as one batch to the partition's current leader (per ZooKeeper), retrying
    on errors until acknowledged or ``timeout``; returns value -> acknowledged place. Retries
    may duplicate the batch (it is not idempotent): only the acknowledged copy is returned."""
    outcomes: list[str] = []

    def acknowledged() -> dict[bytes, Place] | None:
        state = zk.partition_state(topic, partition)
        leader = -1 if state is None else int(state["leader"])
        if leader < 0:
            return None
        try:
            with broker_client(dev, leader) as client:
                error, base = raw_produce(client, topic, partition, values, acks=acks)
        except OSError as exc:
            outcomes.append(f"broker {leader}: {exc}")
            return None
        if error == 0:
            return {v: (partition, base + i) for i, v in enumerate(values)}
        outcomes.append(f"broker {leader}: error {error}")
        return None

    return wait_until(acknowledged, timeout,
                      lambda: f"produce to {topic}-{partition} (acks={acks}) acknowledged; "
                              f"last outcomes {outcomes[-5:]}", interval=0.5)


def high_watermark(client: WireClient, topic: str, partition: int) -> tuple[int, int]:
    """ListOffsets latest as a consumer sees it: (error code, high watermark)."""
    response = client.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1,
                                        "current_leader_epoch": -1}]}]})
    part = response.topics[0].partitions[0]
    return int(part.error_code), int(part.offset)


# ------------------------------------------------------------------------------------ drain


@dataclass
class Drained:
    """What a consumer read: per partition, (offset, value) in delivery order."""

    records: dict[int, list[tuple[int, bytes]]]
    high_watermarks: dict[int, int]

    def by_place(self) -> dict[Place, bytes]:
        return {(p, o): v for p, recs in self.records.items() for o, v in recs}

    def values(self) -> list[bytes]:
        return [v for recs in self.records.values() for _, v in recs]


def _consumer(bootstrap: str, name: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"replication-check-{name}",
                     "enable.auto.commit": False, "enable.partition.eof": False,
                     "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
                     "reconnect.backoff.max.ms": 1000,
                     "topic.metadata.refresh.interval.ms": 2000})


def drain(bootstrap: str, topic: str, partitions: Iterable[int], *,
          timeout: float = 60.0) -> Drained:
    """Consume every partition from offset 0 up to its high watermark (read once, at the start).

    Checks on the way that offsets are strictly increasing per partition. Fails if the high
    watermark is not reached within ``timeout``.
    """
    wanted = list(partitions)
    consumer = _consumer(bootstrap, f"drain-{topic}")
    try:
        high: dict[int, int] = {}
        for p in wanted:
            low_mark, high_mark = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=15, cached=False)
            assert low_mark == 0, f"{topic}-{p}: log start offset {low_mark}, expected 0"
            high[p] = high_mark
        records: dict[int, list[tuple[int, bytes]]] = {p: [] for p in wanted}
        pending = {p for p in wanted if high[p] > 0}
        if pending:
            consumer.assign([TopicPartition(topic, p, 0) for p in pending])

        def drained() -> bool:
            for msg in consumer.consume(1000, 0.5):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consumer error while draining {topic}: {error}")
                (p, offset), value = place_of(msg), msg.value()
                got = records[p]
                assert not got or offset > got[-1][0], (
                    f"{topic}-{p}: offset {offset} delivered after {got[-1][0]} "
                    "(offsets must strictly increase)")
                assert value is not None, f"{topic}-{p}@{offset}: null value"
                got.append((offset, value))
                if offset + 1 >= high[p]:
                    pending.discard(p)
            return not pending

        if pending:

            def reached() -> dict[int, int]:
                return {p: records[p][-1][0] + 1 if records[p] else 0 for p in pending}

            wait_until(drained, timeout, lambda: f"drain of {topic} to reach the high "
                                                 f"watermarks {high}; reached {reached()}",
                       interval=0)
        return Drained(records, high)
    finally:
        consumer.close()


class ConcurrentConsumer:
    """Consumes ``topic`` from offset 0 on a background thread while faults happen, recording
    every delivered (partition, offset, value); violations of per-partition offset
    monotonicity are collected in ``violations``. Bounded by ``max_seconds``."""

    def __init__(self, bootstrap: str, topic: str, partitions: Iterable[int], *,
                 max_seconds: float = 300.0) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = list(partitions)
        self.max_seconds = max_seconds
        self.seen: dict[Place, bytes] = {}
        self.last: dict[int, int] = {}
        self.violations: list[str] = []
        self.errors: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"consumer-{topic}", daemon=True)

    def __enter__(self) -> ConcurrentConsumer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        consumer = _consumer(self.bootstrap, f"concurrent-{self.topic}")
        try:
            consumer.assign([TopicPartition(self.topic, p, 0) for p in self.partitions])
            deadline = time.monotonic() + self.max_seconds
            while not self._stop.is_set() and time.monotonic() < deadline:
                for msg in consumer.consume(500, 0.2):
                    error = msg.error()
                    if error is not None:
                        self.errors[error.name()] += 1
                        continue
                    (p, offset), value = place_of(msg), msg.value()
                    previous = self.last.get(p, -1)
                    if offset <= previous and len(self.violations) < 20:
                        self.violations.append(
                            f"{self.topic}-{p}: offset {offset} delivered after {previous}")
                    self.last[p] = max(previous, offset)
                    if value is not None:
                        self.seen[(p, offset)] = value
        finally:
            consumer.close()


# ------------------------------------------------------------------------------- pass criteria


def assert_no_loss_no_duplicates(acked: dict[bytes, Place], drained: Drained, *,
                                 min_acked: int = 5_000) -> None:
    """Criteria 1-4: enough acks; every acked value consumed exactly once, at its acked place;
    no value consumed twice."""
    assert len(acked) > min_acked, f"only {len(acked)} values acknowledged (need > {min_acked})"
    counts = Counter(drained.values())
    duplicates = [v for v, n in counts.items() if n > 1]
    assert not duplicates, (
        f"{len(duplicates)} values consumed more than once, e.g. {sorted(duplicates)[:5]}")
    by_place = drained.by_place()
    lost = [v for v in acked if v not in counts]
    misplaced = [(v, place, by_place.get(place)) for v, place in acked.items()
                 if v in counts and by_place.get(place) != v]
    assert not lost, (
        f"{len(lost)} of {len(acked)} acknowledged values were not consumed, e.g. "
        f"{[(v, acked[v], by_place.get(acked[v])) for v in sorted(lost)[:5]]} "
        "(value, acked place, value now at that place)")
    assert not misplaced, (
        f"{len(misplaced)} acknowledged values are not at the offset their ack named, e.g. "
        f"{misplaced[:5]} (value, acked place, value found there)")


def replica_dir(data_dir: Path, broker_id: int, topic: str, partition: int) -> Path:
    return Path(data_dir) / f"broker-{broker_id}" / "data" / f"{topic}-{partition}"


def read_replica(directory: Path) -> dict[int, bytes | None]:
    """offset -> value of every data record in a replica's segment files (control batches
    skipped). A torn batch at the very end of the newest segment (a write in progress) ends the
    read; an offset seen twice within one replica is an error."""
    logs = sorted((parsed[0], path) for path in directory.glob("*" + LOG_SUFFIX)
                  if (parsed := parse_segment_name(path.name)) is not None)
    out: dict[int, bytes | None] = {}
    for number, (base, path) in enumerate(logs):
        data = path.read_bytes()
        try:
            for batch in iter_decoded_batches(data):
                if batch.is_control:
                    continue
                for record in batch.records:
                    assert record.offset not in out, (
                        f"{path}: offset {record.offset} appears twice in one replica")
                    assert record.offset >= base, (
                        f"{path}: offset {record.offset} below the segment base {base}")
                    out[record.offset] = record.value
        except CorruptRecordError:
            if number != len(logs) - 1:
                raise
    return out


def log_end_offset(directory: Path) -> int:
    """Next offset after the last complete batch in a replica's newest non-empty segment
    (headers only; cheap enough to poll). 0 for an empty log."""
    logs = sorted((parsed[0], path) for path in directory.glob("*" + LOG_SUFFIX)
                  if (parsed := parse_segment_name(path.name)) is not None)
    for base, path in reversed(logs):
        data = path.read_bytes()
        position, end = 0, None
        while position < len(data):
            try:
                header = read_header(data, position, verify_crc=False)
            except CorruptRecordError:
                break
            end = header.next_offset
            position += header.size
        if end is not None:
            return end
        if base > 0 and not data:
            return base
    return 0


def find_divergence(replicas: dict[int, dict[int, bytes | None]]) -> list[str]:
    """Offsets where two replicas hold different values: ``broker:value`` per offset."""
    conflicts: list[str] = []
    offsets = sorted(set().union(*(r.keys() for r in replicas.values())))
    for offset in offsets:
        held = {b: r[offset] for b, r in replicas.items() if offset in r}
        if len(set(held.values())) > 1:
            conflicts.append(f"offset {offset}: {held}")
            if len(conflicts) >= 10:
                break
    return conflicts


def assert_replicas_converged(
    data_dir: Path, topic: str, partitions: Iterable[int], brokers: Sequence[int], *,
    drained: Drained | None = None, timeout: float = 30.0,
) -> dict[int, dict[int, dict[int, bytes | None]]]:
    """Criterion 5, after healing (all brokers up and a full ISR; see ``wait_for_full_isr``):

    * no offset holds two different values on two replicas (checked on every read);
    * every replica holds every offset below the high watermark, with the values the consumer
      saw (``drained``) -- a follower may still be fetching, so this part is polled for
      ``timeout`` seconds;
    * offsets 0 .. end are contiguous on each replica (idempotent, uncompacted topics);
    * all replicas end at the same offset (with no producer running, a follower in a full ISR
      can only differ from the leader while it is still fetching or truncating; an extra tail
      on one replica is a divergence that was never truncated).

    Returns partition -> broker -> offset -> value of the last read.
    """
    wanted = list(partitions)
    result: dict[int, dict[int, dict[int, bytes | None]]] = {}
    problems: dict[int, list[str]] = {}

    def converged() -> bool:
        for p in [p for p in wanted if p not in result]:
            replicas = {b: read_replica(replica_dir(data_dir, b, topic, p)) for b in brokers}
            conflicts = find_divergence(replicas)
            assert not conflicts, (
                f"{topic}-{p}: replicas hold different values at the same offset: {conflicts}")
            problems[p] = []
            for b, log in replicas.items():
                end = max(log, default=-1) + 1
                if sorted(log) != list(range(end)):
                    missing = sorted(set(range(end)) - set(log))[:5]
                    problems[p].append(f"broker {b} has gaps below {end}, e.g. {missing}")
                if drained is not None:
                    high = drained.high_watermarks[p]
                    if end < high:
                        problems[p].append(f"broker {b} ends at {end} < high watermark {high}")
                    else:
                        wrong = [(o, log.get(o), v) for o, v in drained.records[p]
                                 if log.get(o) != v]
                        assert not wrong, (
                            f"{topic}-{p}: broker {b} disagrees with what consumers read, e.g. "
                            f"{wrong[:5]} (offset, on disk, consumed)")
            ends = {b: max(log, default=-1) + 1 for b, log in replicas.items()}
            if len(set(ends.values())) > 1:
                problems[p].append(f"replicas end at different offsets {ends}")
            if not problems[p]:
                result[p] = replicas
                del problems[p]
        return len(result) == len(wanted)

    wait_until(converged, timeout, lambda: f"{topic}: replicas to converge: {problems}",
               interval=0.5)
    return result


def broker_log_tails(dev: Any, brokers: Iterable[int], *, lines: int = 40) -> str:
    """The last ``lines`` lines of each broker's log, for failure messages (fetcher reconnect
    chatter left out, so the tail shows state changes)."""
    parts = []
    for b in brokers:
        kept = [line for line in dev.broker_log(b).splitlines() if "reconnecting" not in line]
        tail = kept[-lines:]
        parts.append(f"--- broker-{b}.log (last {len(tail)} lines) ---\n" + "\n".join(tail))
    return "\n".join(parts)


@contextlib.contextmanager
def broker_logs_on_failure(dev: Any, brokers: Iterable[int] = (1, 2, 3)) -> Iterator[None]:
    """Re-raise any failure inside the block with the brokers' log tails attached."""
    try:
        yield
    except Exception as exc:
        raise AssertionError(f"{type(exc).__name__}: {exc}\n"
                             f"{broker_log_tails(dev, brokers)}") from exc
