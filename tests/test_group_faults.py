"""Consumer-group fault tests (issue 4, "How it is checked"): real ZooKeeper, real brokers, real
confluent-kafka consumers running as separate processes (``tests/group_worker.py``) so a test
can SIGKILL them.

Every test runs its own :class:`~loglake.dev.harness.DevCluster` on 127.0.0.1 with
``zookeeper.session.timeout.ms=6000`` and ``group.initial.rebalance.delay.ms=0``; topics have
RF=3 and ``min.insync.replicas=2`` unless a test says otherwise. Every loop is bounded by count
and time; :class:`WorkerPool` stops exactly the worker processes it started (SIGTERM, then
SIGKILL), the harness exactly the brokers and ZooKeeper it started.

Workers log events with ``time.monotonic()`` (one clock for all processes on Linux), so the
checks can order one worker's assignment against another worker's commit.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    Message,
    Producer,
)
from kazoo.exceptions import NoNodeError

from loglake.broker.groups.coordinator import coordinator_for
from loglake.dev.harness import DevCluster
from loglake.dev.harness import wait_until as harness_wait_until
from tests.clients import consume_messages
from tests.replication_checks import (
    DEFAULT_PRODUCER_CONFIG,
    REPLICATION_OVERRIDES,
    ProducerLoop,
    ZooKeeperView,
    broker_log_tails,
    create_replicated_topic,
    wait_for_full_isr,
)
from tests.wire import WireClient

BROKERS = (1, 2, 3)
GROUP_OVERRIDES: dict[str, str] = {**REPLICATION_OVERRIDES,
                                   "group.initial.rebalance.delay.ms": "0"}
"""Replication settings of issue 3 plus no initial rebalance delay (tests join at once)."""
WORKER_SCRIPT = Path(__file__).with_name("group_worker.py")
STALL_S = 60.0
"""The at-least-once run fails if no new record is processed for this long: every fault it
injects heals within the 6 s session timeout plus a restart, far below this."""

Place = tuple[int, int]
"""(partition, offset) of one record."""


# ------------------------------------------------------------------------------ workers


@dataclass
class WorkerProcess:
    """One run (incarnation) of ``group_worker.py``: its process and event file."""

    name: str
    incarnation: int
    process: subprocess.Popen[bytes]
    events: Path

    @property
    def key(self) -> str:
        return self.events.stem


class WorkerPool:
    """Starts, SIGKILLs and stops ``group_worker.py`` processes; a context manager that stops
    every process it started (SIGTERM, then SIGKILL after ``stop_timeout``).

    Event files are ``<directory>/<name>-<incarnation>.log``. Not thread-safe.
    """

    def __init__(self, bootstrap: str, directory: Path, *, max_seconds: float = 400.0,
                 stop_timeout: float = 20.0) -> None:
        self.bootstrap = bootstrap
        self.directory = directory
        self.max_seconds = max_seconds
        self.stop_timeout = stop_timeout
        self.all: list[WorkerProcess] = []
        self.current: dict[str, WorkerProcess] = {}
        directory.mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def start(self, name: str, *, topic: str, group: str, instance_id: str | None = None,
              session_timeout_ms: int = 6000, batch: int = 200, pause: float = 0.1,
              ) -> WorkerProcess:
        incarnation = sum(1 for w in self.all if w.name == name)
        events = self.directory / f"{name}-{incarnation}.log"
        command = [sys.executable, str(WORKER_SCRIPT), "--bootstrap", self.bootstrap,
                   "--topic", topic, "--group", group, "--out", str(events),
                   "--session-timeout-ms", str(session_timeout_ms), "--batch", str(batch),
                   "--pause", str(pause), "--max-seconds", str(self.max_seconds)]
        if instance_id is not None:
            command += ["--instance-id", instance_id]
        stderr = open(self.directory / f"{name}-{incarnation}.stderr", "wb")  # noqa: SIM115
        try:
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        finally:
            stderr.close()
        worker = WorkerProcess(name, incarnation, process, events)
        self.all.append(worker)
        self.current[name] = worker
        return worker

    def kill(self, name: str) -> WorkerProcess:
        """SIGKILL the current incarnation of ``name``; returns once it is gone."""
        worker = self.current.pop(name)
        worker.process.send_signal(signal.SIGKILL)
        worker.process.wait(timeout=10)
        return worker

    def stop_all(self) -> None:
        running = [w for w in self.all if w.process.poll() is None]
        for worker in running:
            worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for worker in running:
            try:
                worker.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.send_signal(signal.SIGKILL)
                worker.process.wait(timeout=10)
        self.current.clear()

    def stderr_tails(self, *, lines: int = 20) -> str:
        parts = []
        for worker in self.all:
            path = worker.events.with_suffix(".stderr")
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
            if text:
                parts.append(f"--- {path.name} ---\n" + "\n".join(text))
        return "\n".join(parts)


@dataclass(frozen=True)
class Processing:
    """One processing of one record by one worker incarnation (``key``) at time ``t``."""

    t: float
    key: str
    value: str


@dataclass
class EventTail:
    """Incremental reader of every worker event file in ``directory`` (complete lines only).

    ``prefix[p]`` is the length of the contiguous processed prefix of partition ``p``: every
    offset below it was processed at least once.
    """

    directory: Path
    positions: dict[Path, int] = field(default_factory=dict)
    processed: dict[Place, list[Processing]] = field(default_factory=lambda: defaultdict(list))
    assigns: dict[str, list[tuple[float, frozenset[int]]]] = field(
        default_factory=lambda: defaultdict(list))
    revokes: dict[str, list[tuple[float, frozenset[int]]]] = field(
        default_factory=lambda: defaultdict(list))
    commits: list[tuple[float, str, dict[int, int]]] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    offsets_seen: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))
    prefix: dict[int, int] = field(default_factory=lambda: defaultdict(int))

    def poll(self) -> None:
        for path in sorted(self.directory.glob("*.log")):
            position = self.positions.get(path, 0)
            with path.open("rb") as file:
                file.seek(position)
                data = file.read()
            end = data.rfind(b"\n") + 1
            if end == 0:
                continue
            self.positions[path] = position + end
            for line in data[:end].decode("ascii", "replace").splitlines():
                self._line(path.stem, line)

    def _line(self, key: str, line: str) -> None:
        kind, t_text, *rest = line.split(" ")
        t = float(t_text)
        if kind == "P":
            partition, offset = int(rest[0]), int(rest[1])
            self.processed[(partition, offset)].append(
                Processing(t, key, rest[2] if len(rest) > 2 else ""))
            seen = self.offsets_seen[partition]
            seen.add(offset)
            while self.prefix[partition] in seen:
                self.prefix[partition] += 1
        elif kind in ("A", "R"):
            parts = frozenset() if rest[0] == "-" else frozenset(map(int, rest[0].split(",")))
            (self.assigns if kind == "A" else self.revokes)[key].append((t, parts))
        elif kind == "C":
            offsets = {int(p): int(o) for p, o in (item.split(":") for item in rest[0].split(","))}
            self.commits.append((t, key, offsets))
        elif kind == "F":
            self.failures[" ".join(rest)[:80]] += 1
        elif kind == "E" and len(self.errors) < 200:
            self.errors.append(f"{key}: {' '.join(rest)}")

    def distinct(self) -> int:
        return len(self.processed)

    def processed_by(self, key: str) -> int:
        return sum(1 for runs in self.processed.values() for r in runs if r.key == key)

    def last_assignment(self, key: str) -> frozenset[int] | None:
        history = self.assigns.get(key)
        return history[-1][1] if history else None


# ------------------------------------------------------------------------------ cluster helpers


def produce_values(bootstrap: str, topic: str, count: int, *, partitions: int,
                   prefix: str = "v", timeout: float = 180.0) -> dict[Place, str]:
    """Produce ``count`` unique values (idempotent, acks=all), round-robin over ``partitions``;
    returns the acknowledged place of each value. Fails on any delivery error."""
    producer = Producer({"bootstrap.servers": bootstrap, **DEFAULT_PRODUCER_CONFIG})
    acked: dict[Place, str] = {}
    failed: list[str] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        value = (message.value() or b"").decode()
        if error is not None:
            failed.append(f"{value}: {error}")
            return
        partition, offset = message.partition(), message.offset()
        assert partition is not None and offset is not None
        acked[(partition, offset)] = value

    deadline = time.monotonic() + timeout
    index = 0
    while index < count and time.monotonic() < deadline:
        try:
            producer.produce(topic, value=f"{prefix}{index:08d}".encode(),
                             partition=index % partitions, on_delivery=on_delivery)
            index += 1
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(max(1.0, deadline - time.monotonic()))
    assert not failed, f"{len(failed)} deliveries failed, e.g. {failed[:5]}"
    assert index == count and left == 0 and len(acked) == count, (
        f"produced {index}/{count}, {left} unflushed, {len(acked)} acknowledged")
    return acked


def find_coordinator(dev: DevCluster, group: str, *, timeout: float = 60.0,
                     other_than: int | None = None) -> int:
    """The group's coordinator per FindCoordinator v3, asked of each broker in turn (bounded
    retries). Raw requests, not confluent's AdminClient: librdkafka 2.16.0 aborted the whole
    test process (``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0'``)
    when ``describe_consumer_groups``, and once ``list_consumer_group_offsets``, met a dead
    coordinator, which leaves the cluster and the workers running."""
    last: list[str] = []
    return harness_wait_until(
        lambda: _ask_coordinator(dev, group, other_than, last), timeout,
        lambda: f"a coordinator for {group} (other than {other_than}); last answer {last[-1:]}",
        interval=0.5)


def _ask_coordinator(dev: DevCluster, group: str, other_than: int | None,
                     answers: list[str]) -> int | None:
    """FindCoordinator v3 asked of each broker in turn until one names a coordinator (other
    than ``other_than``); None if none did. What each said is appended to ``answers``."""
    for broker in BROKERS[:dev.brokers]:
        try:
            with WireClient("127.0.0.1", dev.broker_port(broker), timeout=5) as client:
                answer = client.request(10, 3, {"key": group, "key_type": 0})
        except OSError as exc:
            answers.append(f"broker {broker}: {exc}")
            continue
        answers.append(f"broker {broker}: error {int(answer.error_code)} node {answer.node_id}")
        if int(answer.error_code) == 0 and int(answer.node_id) != other_than:
            return int(answer.node_id)
    return None


def fetch_committed(dev: DevCluster, group: str, topic: str, partitions: int,
                    *, timeout: float = 60.0) -> dict[int, int]:
    """OffsetFetch v5 from the group's coordinator (raw request, bounded retries; see
    :func:`find_coordinator` for why not confluent's AdminClient). -1 means no offset."""
    last: list[str] = []

    def fetched() -> tuple[dict[int, int]] | None:
        coordinator = _ask_coordinator(dev, group, None, last)
        if coordinator is None:
            return None
        try:
            with WireClient("127.0.0.1", dev.broker_port(coordinator), timeout=10) as client:
                answer = client.request(9, 5, {"group_id": group, "topics": [
                    {"name": topic, "partition_indexes": list(range(partitions))}]})
        except OSError as exc:
            last.append(f"broker {coordinator}: {exc}")
            return None
        errors = [int(answer.error_code)] + [int(p.error_code) for t in answer.topics
                                             for p in t.partitions]
        last.append(f"broker {coordinator}: error codes {errors}")
        if any(errors):
            return None
        return ({int(p.partition_index): int(p.committed_offset)
                 for t in answer.topics for p in t.partitions},)

    [committed] = harness_wait_until(fetched, timeout,
                                     lambda: f"OffsetFetch of {group}: {last[-1:]}", interval=0.5)
    return committed


def zk_committed(zk: ZooKeeperView, group: str, topic: str) -> dict[int, int]:
    """Committed offsets of ``group`` on ``topic`` as stored in ZooKeeper."""
    base = f"/consumers/{group}/offsets/{topic}"
    result: dict[int, int] = {}
    try:  # (offsets may expire, and their znodes vanish, while this reads them)
        children = zk.zk.get_children(base)
    except NoNodeError:
        return result
    for child in children:
        try:
            raw, _ = zk.zk.get(f"{base}/{child}")
        except NoNodeError:
            continue
        result[int(child)] = int(raw)  # Kafka's plain form
    return result


def zk_group_state(zk: ZooKeeperView, group: str) -> dict[str, Any] | None:
    path = f"/consumers/{group}/state"
    if zk.zk.exists(path) is None:
        return None
    raw, _ = zk.zk.get(path)
    state: dict[str, Any] = json.loads(raw)
    return state


def group_summary(zk: ZooKeeperView, group: str) -> str:
    """State, generation and member ids of the group's metadata in ZooKeeper (short)."""
    state = zk_group_state(zk, group)
    if state is None:
        return "no state znode"
    members = [m["member_id"][-12:] for m in state.get("members", [])]
    return f"{state.get('state')} generation {state.get('generation')} members {members}"


def wait_until(what: str, predicate: Any, *, timeout: float, interval: float = 0.25,
               context: Any = None) -> None:
    """Poll ``predicate()`` until true; AssertionError naming ``what`` (and ``context()``)."""
    harness_wait_until(predicate, timeout, lambda: what if context is None
                       else f"{what}\n{context()}", interval=interval)


def wait_stable(tail: EventTail, keys: list[str], partitions: int, zk: ZooKeeperView,
                group: str, *, members: int, timeout: float = 90.0, quiet: float = 3.0,
                ) -> dict[str, Any]:
    """Wait until the workers ``keys`` hold disjoint assignments covering every partition, the
    ZooKeeper group state says Stable with ``members`` members, and no callback fired for
    ``quiet`` seconds. Returns the group state."""
    quiet_since = time.monotonic()
    last_events = -1
    state: dict[str, Any] | None = None

    def stable() -> dict[str, Any] | None:
        nonlocal quiet_since, last_events, state
        tail.poll()
        events = sum(len(v) for v in tail.assigns.values()) + sum(
            len(v) for v in tail.revokes.values())
        if events != last_events:
            last_events, quiet_since = events, time.monotonic()
        held = [tail.last_assignment(k) for k in keys]
        covered = sorted(p for h in held if h is not None for p in h)
        state = zk_group_state(zk, group)
        if (covered == list(range(partitions)) and state is not None
                and state.get("state") == "Stable" and len(state.get("members", [])) == members
                and time.monotonic() - quiet_since >= quiet):
            return state
        return None

    return harness_wait_until(
        stable, timeout, lambda: f"group {group} stable: assignments "
                                 f"{ {k: tail.last_assignment(k) for k in keys} }, state {state}",
        interval=0.25)


# ------------------------------------------------------------------------------ checks


def duplicate_violations(tail: EventTail) -> tuple[int, list[str]]:
    """Check that every re-processing of a record comes from the uncommitted window.

    For each processing of (p, o) after its first one, by incarnation W at time t: let ``a`` be
    W's last on_assign before t that contains p (W only fetches p after that assignment, from
    the committed offset it reads then). Any commit of p to c > o that a worker logged before
    ``a`` had returned before W read the committed offset, so W must have started at >= c > o:
    re-processing o would mean the group handed out a committed position lower than an
    acknowledged commit. Returns (number of re-processings, violations)."""
    commits_by_partition: dict[int, list[tuple[float, int, str]]] = defaultdict(list)
    for t, key, offsets in tail.commits:
        for p, o in offsets.items():
            commits_by_partition[p].append((t, o, key))
    duplicates = 0
    problems: list[str] = []
    for (p, o), runs in tail.processed.items():
        for run in sorted(runs, key=lambda r: r.t)[1:]:
            duplicates += 1
            assigned = [t for t, parts in tail.assigns.get(run.key, [])
                        if t <= run.t and p in parts]
            if not assigned:
                problems.append(f"{p}@{o} processed by {run.key} at {run.t:.3f} without an "
                                "assignment containing the partition")
                continue
            since = assigned[-1]
            covering = [(t, c, key) for t, c, key in commits_by_partition[p]
                        if t < since and c > o]
            if covering and len(problems) < 20:
                problems.append(
                    f"{p}@{o} re-processed by {run.key} (assigned at {since:.3f}) although "
                    f"commit {covering[0][1]} by {covering[0][2]} returned at "
                    f"{covering[0][0]:.3f}")
    return duplicates, problems


def uncommitted_window(tail: EventTail, key: str) -> int:
    """Records incarnation ``key`` processed beyond its own last successful commit, per
    partition, summed: what a SIGKILL of it may cause to be processed again."""
    committed: dict[int, int] = {}
    for _t, who, offsets in tail.commits:
        if who == key:
            for p, o in offsets.items():
                committed[p] = max(committed.get(p, 0), o)
    window = 0
    for (p, o), runs in tail.processed.items():
        if any(r.key == key for r in runs) and o >= committed.get(p, 0):
            window += 1
    return window


@pytest.fixture
def group_cluster(tmp_path: Path,
                  zookeeper_hosts: str) -> Iterator[tuple[DevCluster, ZooKeeperView]]:
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts,
                    brokers=3, broker_overrides=GROUP_OVERRIDES) as dev, \
            ZooKeeperView(dev.zookeeper_connect) as zk:
        zk.wait_controller(timeout=60)  # the harness returns before a controller is elected
        yield dev, zk


# ------------------------------------------------------------------------------ tests


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_at_least_once_under_consumer_and_coordinator_kills(
    group_cluster: tuple[DevCluster, ZooKeeperView], tmp_path: Path,
) -> None:
    """100,000 unique records on 6 partitions (RF=3); 3 worker processes in one group commit
    synchronously after each processed batch while a worker is SIGKILLed and restarted, then the
    group's coordinator broker is SIGKILLed and restarted, then another worker is SIGKILLed and
    restarted.

    Invariants:

    * at least once: every acknowledged record is processed, with its produced value;
    * committed position never ahead of processing: every ZooKeeper sample of
      ``/consumers/<group>/offsets/<topic>/<p>`` (taken before reading the workers' files, which
      a worker writes before it commits) is <= the contiguous processed prefix of ``p``;
    * duplicates only from the uncommitted window: see :func:`duplicate_violations` (a record
      is re-processed only if no commit past it had returned before the re-processing
      worker's assignment);
    * liveness: some record is processed at least every ``STALL_S`` seconds. Each fault heals
      within the 6 s session timeout plus a restart: the coordinator must expire a SIGKILLed
      member's session even while a rebalance waits for it to rejoin (as Kafka's does), not
      hold the rebalance for the rebalance timeout (librdkafka's max.poll.interval.ms, 300 s).
      The coordinator kill also makes the members' own 6 s session timers fire, so they rejoin
      under new member ids and their old ids must expire the same way.
    """
    dev, zk = group_cluster
    topic, group, total, partitions = "alo", "alo-group", 100_000, 6
    bootstrap = dev.bootstrap_servers
    create_replicated_topic(bootstrap, topic, partitions=partitions)
    produced = produce_values(bootstrap, topic, total, partitions=partitions)
    ends = Counter(p for p, _ in produced)
    tail = EventTail(tmp_path / "workers")
    faults: list[str] = []
    samples = 0
    with WorkerPool(bootstrap, tmp_path / "workers") as pool:

        def context() -> str:
            return (f"faults {faults}; prefix {dict(tail.prefix)}; commit failures "
                    f"{dict(tail.failures)}; errors {tail.errors[-10:]}\n{pool.stderr_tails()}"
                    f"\n{broker_log_tails(dev, BROKERS)}")

        for name in ("w0", "w1", "w2"):
            pool.start(name, topic=topic, group=group, batch=200, pause=0.15)
        restart_worker_at: dict[str, float] = {}
        broker_down: int | None = None
        plan = [(10_000, "worker w0"), (35_000, "coordinator"), (65_000, "worker w1")]
        deadline = time.monotonic() + 420
        progress_at, progress = time.monotonic(), 0
        while tail.distinct() < total and time.monotonic() < deadline:
            committed = zk_committed(zk, group, topic)  # first ZooKeeper, then the files
            tail.poll()
            samples += 1
            if tail.distinct() > progress:
                progress_at, progress = time.monotonic(), tail.distinct()
            assert time.monotonic() - progress_at < STALL_S, (
                f"no new record processed for {STALL_S:.0f}s ({progress} of {total} so far; "
                f"group {group_summary(zk, group)}); {context()}")
            ahead = {p: (c, tail.prefix[p]) for p, c in committed.items() if c > tail.prefix[p]}
            assert not ahead, (f"committed offset ahead of processing (partition: (committed, "
                               f"processed prefix)): {ahead}; {context()}")
            now = time.monotonic()
            for name, due in list(restart_worker_at.items()):
                if now >= due:
                    pool.start(name, topic=topic, group=group, batch=200, pause=0.15)
                    del restart_worker_at[name]
            if broker_down is not None and not zk.registered(broker_down):
                dev.start_broker(broker_down)
                faults.append(f"restarted broker {broker_down} at {time.monotonic():.1f}")
                broker_down = None
            if plan and tail.distinct() >= plan[0][0]:
                _, what = plan.pop(0)
                if what.startswith("worker"):
                    name = what.split()[1]
                    killed = pool.kill(name)
                    tail.poll()
                    faults.append(f"SIGKILL {killed.key} at {time.monotonic():.1f} "
                                  f"(uncommitted window {uncommitted_window(tail, killed.key)})")
                    restart_worker_at[name] = time.monotonic() + 2
                else:
                    coordinator = find_coordinator(dev, group)
                    assert coordinator == coordinator_for(group, BROKERS), (
                        f"FindCoordinator says {coordinator}, rendezvous hashing says "
                        f"{coordinator_for(group, BROKERS)}")
                    dev.kill_broker(coordinator)
                    broker_down = coordinator
                    faults.append(f"SIGKILL coordinator broker {coordinator} at "
                                  f"{time.monotonic():.1f}")
            time.sleep(0.5)
        if broker_down is not None:
            wait_until(f"broker {broker_down} unregistered",
                       lambda: not zk.registered(broker_down), timeout=30)
            dev.start_broker(broker_down)
        assert not plan, f"faults not injected: {plan}; {context()}"
        missing = [place for place in produced if place not in tail.processed]
        assert not missing, (f"{len(missing)} of {total} records never processed, e.g. "
                             f"{sorted(missing)[:10]}; {context()}")
        # workers commit their last batches; committed must stay <= processed meanwhile
        time.sleep(3)
        committed = zk_committed(zk, group, topic)
        tail.poll()
    tail.poll()
    wrong = [(place, produced[place], runs[0].value) for place, runs in tail.processed.items()
             if produced.get(place) != runs[0].value or len({r.value for r in runs}) > 1]
    assert not wrong, f"records processed with wrong values, e.g. {wrong[:5]}"
    final_ahead = {p: c for p, c in committed.items() if c > min(tail.prefix[p], ends[p])}
    assert not final_ahead, f"final committed offsets {committed} ahead of processing {tail.prefix}"
    duplicates, problems = duplicate_violations(tail)
    assert not problems, ("records re-processed although a commit past them had returned "
                          f"before the re-processing assignment: {problems}; {context()}")
    print(f"at-least-once: {total} records, {duplicates} re-processings, {samples} ZooKeeper "
          f"samples, {len(tail.commits)} commits ok, failures {dict(tail.failures)}; "
          f"faults {faults}; final committed {committed}")


@pytest.mark.timeout(600)
def test_static_members_ride_out_rolling_bounce(
    group_cluster: tuple[DevCluster, ZooKeeperView], tmp_path: Path,
) -> None:
    """3 static members (``group.instance.id``, session.timeout.ms=30000) on a 6-partition RF=3
    topic while every broker is stopped (SIGTERM) and started again, one at a time, each back in
    every ISR before the next, with a producer running throughout.

    Invariants: no rebalance (no on_assign/on_revoke/on_lost after the initial, stable
    assignment; the generation in ``/consumers/<group>/state`` is unchanged; the assignment is
    the same), and consumption continues: every value acknowledged during the bounce is
    processed."""
    dev, zk = group_cluster
    topic, group, partitions = "static", "static-group", 6
    bootstrap = dev.bootstrap_servers
    create_replicated_topic(bootstrap, topic, partitions=partitions)
    tail = EventTail(tmp_path / "workers")
    with WorkerPool(bootstrap, tmp_path / "workers") as pool, \
            ProducerLoop(bootstrap, topic, partitions=partitions, rate=200,
                         max_seconds=400) as producer:
        keys = [pool.start(f"s{i}", topic=topic, group=group, instance_id=f"static-{i}",
                           session_timeout_ms=30_000, batch=100, pause=0.05).key
                for i in range(3)]
        before = wait_stable(tail, keys, partitions, zk, group, members=3)
        callbacks_before = {k: (len(tail.assigns[k]), len(tail.revokes[k])) for k in keys}
        assignment_before = {k: tail.last_assignment(k) for k in keys}
        coordinators = []
        for broker in BROKERS:
            coordinators.append(find_coordinator(dev, group))
            dev.stop_broker(broker)
            dev.start_broker(broker)
            wait_for_full_isr(bootstrap, topic, range(partitions), 3, timeout=120)
        coordinators.append(find_coordinator(dev, group))
        producer.wait_progress(400, timeout=60)
        acked = producer.stop().acked
        expected = {(p, o) for p, o in acked.values()}

        def all_processed() -> bool:
            tail.poll()
            return expected <= tail.processed.keys()

        wait_until("every value acknowledged during the bounce processed", all_processed,
                   timeout=120, context=lambda: f"{pool.stderr_tails()}\n"
                   f"{broker_log_tails(dev, BROKERS)}")
        time.sleep(3)  # a late rebalance would show up here
        tail.poll()
        after = zk_group_state(zk, group)
    callbacks_after = {k: (len(tail.assigns[k]), len(tail.revokes[k])) for k in keys}
    lost = {k: tail.assigns.get(k) for k in keys if any(
        line.startswith("L ") for line in (tmp_path / "workers" / f"{k}.log").read_text()
        .splitlines())}
    assert callbacks_after == callbacks_before and not lost, (
        f"rebalance callbacks fired during the bounce: (assigns, revokes) before "
        f"{callbacks_before}, after {callbacks_after}; on_lost {lost}; coordinators "
        f"{coordinators}")
    assert after is not None and after["generation"] == before["generation"], (
        f"generation changed from {before['generation']} to "
        f"{None if after is None else after['generation']} during the rolling bounce")
    assert {k: tail.last_assignment(k) for k in keys} == assignment_before
    print(f"static bounce: generation {before['generation']}, coordinators {coordinators}, "
          f"{len(expected)} values acknowledged during the bounce, all processed")


@pytest.mark.timeout(600)
def test_group_survives_coordinator_kill(
    group_cluster: tuple[DevCluster, ZooKeeperView], tmp_path: Path,
) -> None:
    """SIGKILL the coordinator of a stable 3-member group, later restart it (the group moves
    back: rendezvous placement).

    Invariants: a new coordinator (another broker) is found; the committed offsets it serves
    (OffsetFetch) are the ones committed before the kill; the members keep consuming and
    committing records produced after the kill; the coordinator document's promise holds: the
    group moves without a rebalance (same generation in ZooKeeper, no further callbacks)."""
    dev, zk = group_cluster
    topic, group, partitions = "move", "move-group", 6
    bootstrap = dev.bootstrap_servers
    create_replicated_topic(bootstrap, topic, partitions=partitions)
    produced = produce_values(bootstrap, topic, 3000, partitions=partitions, prefix="a")
    ends = Counter(p for p, _ in produced)
    tail = EventTail(tmp_path / "workers")
    with WorkerPool(bootstrap, tmp_path / "workers") as pool:

        def context() -> str:
            return (f"commit failures {dict(tail.failures)}; errors {tail.errors[-10:]}\n"
                    f"{pool.stderr_tails()}\n{broker_log_tails(dev, BROKERS)}")

        keys = [pool.start(f"m{i}", topic=topic, group=group, session_timeout_ms=30_000,
                           batch=100, pause=0.05).key for i in range(3)]

        def caught_up(wanted: Counter[int]) -> bool:
            tail.poll()
            return zk_committed(zk, group, topic) == dict(wanted)

        wait_until("all 3000 records processed and committed", lambda: caught_up(ends),
                   timeout=120, context=context)
        before = wait_stable(tail, keys, partitions, zk, group, members=3)
        callbacks_before = {k: (len(tail.assigns[k]), len(tail.revokes[k])) for k in keys}
        old = find_coordinator(dev, group)
        dev.kill_broker(old)
        killed_at = time.monotonic()
        new = find_coordinator(dev, group, other_than=old, timeout=60)
        moved_after = time.monotonic() - killed_at
        survived = fetch_committed(dev, group, topic, partitions)
        assert survived == dict(ends), (
            f"offsets served by the new coordinator {new}: {survived}, committed before the "
            f"kill: {dict(ends)}")
        more = produce_values(bootstrap, topic, 3000, partitions=partitions, prefix="b")
        ends_after_kill = Counter(p for p, _ in (*produced, *more))
        wait_until("records produced after the coordinator kill processed and committed",
                   lambda: caught_up(ends_after_kill), timeout=120, context=context)
        wait_until(f"broker {old} unregistered", lambda: not zk.registered(old), timeout=30)
        dev.start_broker(old)
        back = find_coordinator(dev, group, other_than=new, timeout=60)
        last = produce_values(bootstrap, topic, 3000, partitions=partitions, prefix="c")
        ends_final = Counter(p for p, _ in (*produced, *more, *last))
        wait_until("records produced after the coordinator came back processed and committed",
                   lambda: caught_up(ends_final), timeout=120, context=context)
        after = zk_group_state(zk, group)
        tail.poll()
    callbacks_after = {k: (len(tail.assigns[k]), len(tail.revokes[k])) for k in keys}
    assert back == old, f"the group did not move back to broker {old} (now {back})"
    assert callbacks_after == callbacks_before, (
        f"the coordinator move caused a rebalance: (assigns, revokes) before "
        f"{callbacks_before}, after {callbacks_after}")
    assert after is not None and after["generation"] == before["generation"], (
        f"generation {before['generation']} -> {None if after is None else after['generation']}")
    print(f"coordinator move: {old} -> {new} after {moved_after:.1f}s -> {back}; "
          f"commit failures {dict(tail.failures)}")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_offsets_of_empty_group_expire(tmp_path: Path, zookeeper_hosts: str) -> None:
    """With ``offsets.retention.minutes=1`` and a 1 s check interval, the offsets of a group
    whose last member left disappear from ZooKeeper about a minute after the group became
    empty (not before 55 s), while a group with an active member (which committed once, at the
    start) keeps its offsets, in ZooKeeper and through OffsetFetch."""
    overrides = {**GROUP_OVERRIDES, "offsets.retention.minutes": "1",
                 "offsets.retention.check.interval.ms": "1000"}
    topic = "expiry"
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts,
                    brokers=1, broker_overrides=overrides) as dev, \
            ZooKeeperView(dev.zookeeper_connect) as zk, \
            WorkerPool(dev.bootstrap_servers, tmp_path / "workers") as pool:
        bootstrap = dev.bootstrap_servers
        zk.wait_controller(timeout=60)
        create_replicated_topic(bootstrap, topic, partitions=1, replication_factor=1,
                                min_insync_replicas=1)
        produce_values(bootstrap, topic, 100, partitions=1)
        pool.start("active", topic=topic, group="active", session_timeout_ms=30_000)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "leaving",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe([topic])
            got = consume_messages(consumer, 100, timeout=60, batch=100, poll=1.0,
                                   errors="skip", what="the leaving group's records")
            assert len(got) == 100, f"the leaving group consumed {len(got)} of 100 records"
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        empty_at = time.monotonic()
        assert zk_committed(zk, "leaving", topic) == {0: 100}
        wait_until("the active group committed", lambda: zk_committed(zk, "active", topic)
                   == {0: 100}, timeout=60)

        def leaving_expired() -> bool:
            assert zk_committed(zk, "active", topic) == {0: 100}, (
                "the active group's offsets disappeared")
            return not zk_committed(zk, "leaving", topic)

        harness_wait_until(
            leaving_expired, empty_at + 150 - time.monotonic(),
            lambda: f"offsets of the empty group to expire\n{dev.broker_log(1)[-3000:]}",
            interval=1)
        expired_after = time.monotonic() - empty_at
        assert expired_after >= 55, f"offsets expired after only {expired_after:.0f}s"
        time.sleep(5)  # five more expiry checks
        assert zk_committed(zk, "active", topic) == {0: 100}
        assert fetch_committed(dev, "active", topic, 1) == {0: 100}
        assert fetch_committed(dev, "leaving", topic, 1) == {0: -1}
        assert pool.current["active"].process.poll() is None, "the active member exited"
    print(f"offset expiry: empty group's offsets gone after {expired_after:.0f}s")
