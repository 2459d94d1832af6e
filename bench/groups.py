"""Consumer-group benchmarks of a three-broker loglake dev cluster: commits, rebalances, and a
3-member group's consume throughput.

Run from the repository root with the project's virtualenv::

    python bench/groups.py [--runs 3] [--commits 2000] [--members 10] [--records 1000000]

Each run starts a fresh dev cluster (real ZooKeeper + three broker processes on loopback,
``group.initial.rebalance.delay.ms=0`` so the first join is not held back 3 s) and measures,
on topics with RF 3 and ``min.insync.replicas=2``:

1. **commit_single**: one confluent-kafka consumer, a stable member of its group on a
   6-partition topic, commits ``--commits`` times synchronously
   (``commit(offsets=[one partition], asynchronous=False)``), cycling over the partitions with
   increasing offsets. commits/s = commits / elapsed.
2. **commit_batch**: the same consumer commits all 6 partitions per request
   (``--commits`` / 6 requests, rounded up). Reported as requests/s and offsets/s. Each request is
   one OffsetCommit, which the coordinator turns into one ZooKeeper multi-op transaction.
3. **rebalance_join**: ``--members`` - 1 consumers (threads, one confluent-kafka consumer each,
   polling every 50 ms, ``range`` assignor, librdkafka's default ``heartbeat.interval.ms`` unless
   ``--heartbeat-interval-ms``) hold a stable assignment of a ``--rebalance-partitions`` topic;
   the clock starts when the last member calls ``subscribe`` and stops when every member's
   on_assign fired after that and the assignments cover every partition exactly once.
4. **rebalance_leave**: that member closes (LeaveGroup); the clock stops when every
   remaining member has been assigned again and the assignments cover every partition.
   Phases 3 and 4 repeat ``--rebalance-cycles`` times per run (a new member each time, after a
   random wait, see :func:`rebalance_phases`); a run reports the median of its cycles.
5. **consume_group**: ``--records`` records of ``--record-size`` bytes are produced (acks=1,
   not timed) to a 6-partition topic; three member processes (``multiprocessing`` spawn, one
   consumer each, ``consume(10000)`` loops, auto commit every 5 s) join the group with their
   partitions paused; once the group holds all 6 partitions and nothing changed for a second,
   all resume at one signal, and the clock runs from the signal until the members together
   consumed every record (exactly ``--records``: a re-delivery fails the run).

Every phase is bounded by ``--phase-timeout``. Progress goes to stderr, tables to stdout, and
JSON to ``bench/results/groups-<UTC timestamp>.json``. Medians over the runs. The harness stops
exactly the processes it started; the script's member processes are joined (then terminated)
before each run's cluster goes down.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import multiprocessing.synchronize
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from measure import (
    BenchmarkError,
    Progress,
    format_table,
    log,
    run_main,
    total_cpu_seconds,
    write_results,
)
from produce_consume import machine_info
from producing import timed_produce

from loglake.dev.harness import DevCluster

BROKERS = 3
REPLICATION_FACTOR = 3
COMMIT_PARTITIONS = 6
CONSUME_PARTITIONS = 6
CONSUME_MEMBERS = 3
ADMIN_TIMEOUT_S = 30.0
RESULTS_DIR = Path(__file__).resolve().parent / "results"
LIBRDKAFKA_HEARTBEAT_INTERVAL_MS = 3000
BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "min.insync.replicas": "2"}


@dataclass(frozen=True)
class GroupBenchConfig:
    """What one invocation measures; every field is a command-line option of the same name."""

    runs: int = 3
    commits: int = 2000
    members: int = 10
    rebalance_partitions: int = 12
    rebalance_cycles: int = 5
    seed: int = 1
    heartbeat_interval_ms: int | None = None
    records: int = 1_000_000
    record_size: int = 100
    phase_timeout: float = 300.0
    work_dir: Path | None = None
    keep_data: bool = False
    results_dir: Path = RESULTS_DIR

    def __post_init__(self) -> None:
        if self.runs < 1 or self.commits < COMMIT_PARTITIONS or self.members < 2:
            raise ValueError("--runs must be >= 1, --commits >= 6, --members >= 2")
        if self.rebalance_cycles < 1 or self.rebalance_partitions < self.members:
            raise ValueError("--rebalance-cycles must be >= 1 and --rebalance-partitions >= "
                             "--members (every member gets a partition)")
        if self.records < CONSUME_MEMBERS or self.record_size < 1:
            raise ValueError("--records must be >= 3 and --record-size >= 1")

    def client_settings(self) -> dict[str, Any]:
        """Consumer settings shared by the rebalance members (librdkafka defaults otherwise)."""
        settings: dict[str, Any] = {"partition.assignment.strategy": "range"}
        if self.heartbeat_interval_ms is not None:
            settings["heartbeat.interval.ms"] = self.heartbeat_interval_ms
        return settings


@dataclass
class RunResult:
    """One run's measurements; rates per second, times in seconds."""

    commit_single_per_s: float = math.nan
    commit_batch_requests_per_s: float = math.nan
    commit_batch_offsets_per_s: float = math.nan
    rebalance_join_s: float = math.nan
    rebalance_leave_s: float = math.nan
    rebalance_join_each_s: list[float] = field(default_factory=list)
    rebalance_leave_each_s: list[float] = field(default_factory=list)
    consume_records_per_s: float = math.nan
    brokers_cpu_s: dict[str, float] = field(default_factory=dict)
    load_average: tuple[float, float, float] = (0.0, 0.0, 0.0)


# -- cluster ------------------------------------------------------------------------------------


def broker_pids(cluster: DevCluster) -> list[int]:
    pids = [p.pid for p in cluster.status() if p.role == "broker" and p.alive]
    if len(pids) != BROKERS:
        raise BenchmarkError(f"{len(pids)} of {BROKERS} brokers are running")
    return pids


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic`` (RF 3) and wait until every partition has a leader and a full ISR."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=REPLICATION_FACTOR)
    deadline = time.monotonic() + ADMIN_TIMEOUT_S * 2
    while True:  # the controller may still be getting elected right after start
        try:
            admin.create_topics([new], operation_timeout=ADMIN_TIMEOUT_S)[topic].result(
                timeout=ADMIN_TIMEOUT_S)
            break
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise BenchmarkError(f"cannot create topic {topic}: {exc}") from exc
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                break
            time.sleep(1)
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions and all(
                p.leader >= 0 and len(p.isrs) == REPLICATION_FACTOR
                for p in meta.partitions.values()):
            return
        time.sleep(0.2)
    raise BenchmarkError(f"topic {topic} has no leader and full ISR everywhere in time")


def wait_assigned(consumer: Consumer, partitions: int, timeout: float) -> None:
    """Poll ``consumer`` until it holds ``partitions`` partitions (a stable single member)."""
    deadline = time.monotonic() + timeout
    while len(consumer.assignment()) < partitions:
        if time.monotonic() > deadline:
            raise BenchmarkError(f"consumer not assigned {partitions} partitions in time "
                                 f"(has {consumer.assignment()})")
        consumer.poll(0.1)


# -- commits ------------------------------------------------------------------------------------


def commit_phases(config: GroupBenchConfig, bootstrap: str, topic: str, group: str,
                  ) -> tuple[float, float, float]:
    """Returns (single commits/s, batched requests/s, batched offsets/s)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        wait_assigned(consumer, COMMIT_PARTITIONS, config.phase_timeout)
        progress = Progress("commit_single", config.commits)
        deadline = time.monotonic() + config.phase_timeout
        started = time.perf_counter()
        for index in range(config.commits):
            partition = index % COMMIT_PARTITIONS
            consumer.commit(offsets=[TopicPartition(topic, partition, index + 1)],
                            asynchronous=False)
            progress.update(index + 1)
            if time.monotonic() > deadline:
                raise BenchmarkError(f"commit_single: only {index + 1} commits in time")
        single = config.commits / (time.perf_counter() - started)
        requests = math.ceil(config.commits / COMMIT_PARTITIONS)
        base = config.commits + 1
        progress = Progress("commit_batch (requests)", requests)
        started = time.perf_counter()
        for index in range(requests):
            consumer.commit(offsets=[TopicPartition(topic, p, base + index)
                                     for p in range(COMMIT_PARTITIONS)], asynchronous=False)
            progress.update(index + 1)
            if time.monotonic() > deadline:
                raise BenchmarkError(f"commit_batch: only {index + 1} requests in time")
        elapsed = time.perf_counter() - started
        committed = consumer.committed([TopicPartition(topic, p) for p in
                                        range(COMMIT_PARTITIONS)], timeout=ADMIN_TIMEOUT_S)
        wanted = base + requests - 1
        if any(tp.offset != wanted for tp in committed):
            raise BenchmarkError(f"committed offsets {committed} are not {wanted} everywhere")
        return single, requests / elapsed, requests * COMMIT_PARTITIONS / elapsed
    finally:
        consumer.close()


# -- rebalances ---------------------------------------------------------------------------------


class Member:
    """One group member on its own thread; ``assigned`` holds (monotonic time, partitions) of
    every on_assign. Polls every 50 ms until :meth:`stop` or ``max_seconds``."""

    def __init__(self, index: int, bootstrap: str, topic: str, group: str,
                 settings: dict[str, Any], max_seconds: float) -> None:
        self.index = index
        self.topic = topic
        self.assigned: list[tuple[float, frozenset[int]]] = []
        self.lock = threading.Lock()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "enable.auto.commit": False, **settings})
        self.max_seconds = max_seconds
        self.subscribed_at = math.nan
        self._subscribe = threading.Event()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"member-{index}", daemon=True)
        self.thread.start()

    def subscribe(self) -> float:
        self._subscribe.set()
        while math.isnan(self.subscribed_at) and self.thread.is_alive():
            time.sleep(0.001)
        return self.subscribed_at

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self.lock:
            self.assigned.append((time.monotonic(), frozenset(tp.partition for tp in partitions)))

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        try:
            while not self._subscribe.wait(0.05):
                if self._stop.is_set() or time.monotonic() > deadline:
                    return
            self.subscribed_at = time.monotonic()
            self.consumer.subscribe([self.topic], on_assign=self._on_assign)
            while not self._stop.is_set() and time.monotonic() < deadline:
                self.consumer.poll(0.05)
        finally:
            self.consumer.close()  # LeaveGroup

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)

    def assignment_since(self, t: float) -> frozenset[int] | None:
        with self.lock:
            later = [parts for at, parts in self.assigned if at >= t]
            return later[-1] if later else None

    def last_assign_time(self) -> float:
        with self.lock:
            return self.assigned[-1][0] if self.assigned else math.nan


def wait_rebalanced(members: Sequence[Member], since: float, partitions: int,
                    timeout: float, label: str) -> float:
    """Seconds from ``since`` until every member was assigned after ``since`` and the
    assignments cover each partition exactly once (the latest on_assign's time counts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held = [m.assignment_since(since) for m in members]
        if all(h is not None for h in held):
            covered = sorted(p for h in held if h is not None for p in h)
            if covered == list(range(partitions)):
                return max(m.last_assign_time() for m in members) - since
        time.sleep(0.005)
    raise BenchmarkError(f"{label}: group not rebalanced within {timeout:g} s: "
                         f"{[m.assignment_since(since) for m in members]}")


def rebalance_phases(config: GroupBenchConfig, bootstrap: str, topic: str, group: str,
                     rng: random.Random) -> tuple[list[float], list[float]]:
    """``config.rebalance_cycles`` times: a member joins a stable group of
    ``config.members - 1`` (join time), then leaves again (leave time). Before each event the
    script waits a random 0.5 s + U(0, heartbeat interval), so the event does not always fall
    at the same point of the members' heartbeat cycle (they heartbeat in step: they all got
    their assignment at the same moment)."""
    settings = config.client_settings()
    heartbeat_s = (config.heartbeat_interval_ms or LIBRDKAFKA_HEARTBEAT_INTERVAL_MS) / 1000
    stable = [Member(i, bootstrap, topic, group, settings, config.phase_timeout * 3)
              for i in range(config.members - 1)]
    joins: list[float] = []
    leaves: list[float] = []
    try:
        start = time.monotonic()
        for member in stable:
            member.subscribe()
        wait_rebalanced(stable, start, config.rebalance_partitions, config.phase_timeout,
                        "initial members")
        log(f"  {len(stable)} members stable")
        for cycle in range(config.rebalance_cycles):
            extra = Member(len(stable) + cycle, bootstrap, topic, group, settings,
                           config.phase_timeout * 3)
            try:
                time.sleep(0.5 + rng.uniform(0, heartbeat_s))
                joined_at = extra.subscribe()
                joins.append(wait_rebalanced([*stable, extra], joined_at,
                                             config.rebalance_partitions, config.phase_timeout,
                                             "join"))
                time.sleep(0.5 + rng.uniform(0, heartbeat_s))
                left_at = time.monotonic()
            finally:
                extra.stop()
            leaves.append(wait_rebalanced(stable, left_at, config.rebalance_partitions,
                                          config.phase_timeout, "leave"))
            log(f"  cycle {cycle + 1}/{config.rebalance_cycles}: join {joins[-1]:.3f} s, "
                f"leave {leaves[-1]:.3f} s")
        return joins, leaves
    finally:
        for member in stable:
            member.stop()


# -- consume ------------------------------------------------------------------------------------


def produce(config: GroupBenchConfig, bootstrap: str, topic: str) -> None:
    """``config.records`` records round-robin over the partitions, chunk by chunk (acks=1; the
    timing is not reported)."""
    payload = bytes(i % 251 for i in range(config.record_size))
    timed_produce({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                   "batch.num.messages": 10_000, "batch.size": 1_000_000,
                   "queue.buffering.max.messages": 1_000_000,
                   "delivery.report.only.error": True},
                  topic, payload, config.records, label="produce (untimed)", pids=[],
                  phase_timeout=config.phase_timeout, partitions=CONSUME_PARTITIONS)


def consume_member(bootstrap: str, topic: str, group: str, slot: int, count: Any,
                   assigned: Any, go: multiprocessing.synchronize.Event,
                   stop: multiprocessing.synchronize.Event, max_seconds: float) -> None:
    """A member process: subscribe, take each assignment *paused* (recording its size in
    ``assigned[slot]``), resume everything once ``go`` is set, then count consumed records
    into ``count`` until ``stop`` or ``max_seconds``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": True})

    def on_assign(member: Consumer, partitions: list[TopicPartition]) -> None:
        member.assign(partitions)
        if not go.is_set():
            member.pause(partitions)
        assigned[slot] = len(partitions)

    try:
        consumer.subscribe([topic], on_assign=on_assign)
        deadline = time.monotonic() + max_seconds
        while not go.is_set() and time.monotonic() < deadline:
            consumer.poll(0.05)
        consumer.resume(consumer.assignment())
        while not stop.is_set() and time.monotonic() < deadline:
            got = sum(1 for m in consumer.consume(10_000, 0.2) if m.error() is None)
            if got:
                with count.get_lock():
                    count.value += got
    finally:
        consumer.close()


def consume_phase(config: GroupBenchConfig, bootstrap: str, topic: str, group: str) -> float:
    """records/s of a formed 3-member group: the members join with their partitions paused;
    once the group holds all partitions (and nothing changed for a second) every member
    resumes at the same signal, and the clock runs until they consumed ``config.records``."""
    context = multiprocessing.get_context("spawn")
    count = context.Value("q", 0)
    assigned = context.Array("i", CONSUME_MEMBERS)
    go, stop = context.Event(), context.Event()
    processes = [context.Process(target=consume_member, name=f"consume-member-{i}", args=(
        bootstrap, topic, group, i, count, assigned, go, stop, config.phase_timeout))
        for i in range(CONSUME_MEMBERS)]
    for process in processes:
        process.start()
    try:
        deadline = time.monotonic() + config.phase_timeout
        formed_since = math.nan
        while math.isnan(formed_since) or time.monotonic() - formed_since < 1.0:
            sizes = [int(assigned[i]) for i in range(CONSUME_MEMBERS)]
            formed = sum(sizes) == CONSUME_PARTITIONS and min(sizes) > 0
            formed_since = (formed_since if formed and not math.isnan(formed_since)
                            else time.monotonic() if formed else math.nan)
            if time.monotonic() > deadline or not all(p.is_alive() for p in processes):
                raise BenchmarkError(f"consume: group not formed in time (assigned {sizes})")
            time.sleep(0.05)
        log(f"  group formed: partitions per member {sizes}")
        progress = Progress("consume_group", config.records)
        started = time.monotonic()
        go.set()
        while count.value < config.records:
            if time.monotonic() > deadline or not any(p.is_alive() for p in processes):
                raise BenchmarkError(f"consume: {count.value} of {config.records} in time")
            progress.update(count.value)
            time.sleep(0.001)
        elapsed = time.monotonic() - started
        progress.update(count.value, force=True)
        if count.value != config.records:
            raise BenchmarkError(f"consume: {count.value} records for {config.records} "
                                 "(a rebalance re-delivered records)")
        return config.records / elapsed
    finally:
        stop.set()
        for process in processes:
            process.join(30)
            if process.is_alive():
                process.terminate()
                process.join(10)


# -- runs ---------------------------------------------------------------------------------------


def one_run(config: GroupBenchConfig, run_dir: Path, index: int) -> RunResult:
    result = RunResult(load_average=os.getloadavg())
    log(f"  starting a {BROKERS}-broker dev cluster in {run_dir}")
    with DevCluster(run_dir / "cluster", brokers=BROKERS,
                    broker_overrides=BROKER_OVERRIDES) as cluster:
        bootstrap = cluster.bootstrap_servers
        pids = broker_pids(cluster)
        create_topic(bootstrap, "commits", COMMIT_PARTITIONS)
        create_topic(bootstrap, "rebalance", config.rebalance_partitions)
        create_topic(bootstrap, "consume", CONSUME_PARTITIONS)

        cpu = total_cpu_seconds(pids)
        single, batch_requests, batch_offsets = commit_phases(
            config, bootstrap, "commits", f"commit-{index}")
        result.brokers_cpu_s["commits"] = total_cpu_seconds(pids) - cpu
        result.commit_single_per_s = single
        result.commit_batch_requests_per_s = batch_requests
        result.commit_batch_offsets_per_s = batch_offsets
        log(f"  commit_single {single:,.0f}/s, commit_batch {batch_requests:,.0f} requests/s "
            f"({batch_offsets:,.0f} offsets/s)")

        cpu = total_cpu_seconds(pids)
        joins, leaves = rebalance_phases(config, bootstrap, "rebalance", f"rebalance-{index}",
                                         random.Random(config.seed * 1000 + index))
        result.rebalance_join_each_s, result.rebalance_leave_each_s = joins, leaves
        result.rebalance_join_s = statistics.median(joins)
        result.rebalance_leave_s = statistics.median(leaves)
        result.brokers_cpu_s["rebalance"] = total_cpu_seconds(pids) - cpu

        produce(config, bootstrap, "consume")
        cpu = total_cpu_seconds(pids)
        result.consume_records_per_s = consume_phase(config, bootstrap, "consume",
                                                     f"consume-{index}")
        result.brokers_cpu_s["consume"] = total_cpu_seconds(pids) - cpu
        log(f"  consume_group {result.consume_records_per_s:,.0f} records/s")
    return result


METRICS: list[tuple[str, str, str]] = [
    ("commit_single_per_s", "commits/s, 1 partition per synchronous commit", ",.0f"),
    ("commit_batch_requests_per_s", "commit requests/s, 6 partitions each", ",.0f"),
    ("commit_batch_offsets_per_s", "partition offsets/s in 6-partition commits", ",.0f"),
    ("rebalance_join_s", "rebalance after the 10th member subscribes, s (median of cycles)",
     ".3f"),
    ("rebalance_leave_s", "rebalance after one of 10 members leaves, s (median of cycles)",
     ".3f"),
    ("consume_records_per_s", "3-member group consume, records/s", ",.0f"),
]


def report(config: GroupBenchConfig, runs: list[RunResult], machine: dict[str, Any],
           started: datetime) -> dict[str, Any]:
    medians = {key: statistics.median(getattr(r, key) for r in runs) for key, _, _ in METRICS}
    print(f"\nloglake consumer groups, {BROKERS} brokers, RF {REPLICATION_FACTOR}, median of "
          f"{len(runs)} runs ({machine['cpus']} CPUs, {machine['cpu_model']})\n")
    rows = [[label.replace("10th", f"{config.members}th").replace("of 10", f"of {config.members}"),
             format(medians[key], spec), ", ".join(format(getattr(r, key), spec) for r in runs)]
            for key, label, spec in METRICS]
    print(format_table(["metric", "median", "each run"], rows))
    loads = ", ".join("/".join(f"{x:.1f}" for x in r.load_average) for r in runs)
    print(f"\nload average (1/5/15 min) at the start of each run: {loads}")
    return {
        "started": started.isoformat(),
        "command": " ".join(["python", *sys.argv]),
        "config": {key: str(value) if isinstance(value, Path) else value
                   for key, value in asdict(config).items()},
        "machine": machine,
        "medians": medians,
        "runs": [asdict(r) for r in runs],
    }


def parse_args(argv: Sequence[str] | None = None) -> GroupBenchConfig:
    defaults = GroupBenchConfig()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=defaults.runs,
                        help="runs (fresh clusters) to take the median of (default: %(default)s)")
    parser.add_argument("--commits", type=int, default=defaults.commits,
                        help="single-partition commits; the batched phase commits the same "
                             "number of offsets (default: %(default)s)")
    parser.add_argument("--members", type=int, default=defaults.members,
                        help="group size in the rebalance phases (default: %(default)s)")
    parser.add_argument("--rebalance-partitions", type=int,
                        default=defaults.rebalance_partitions,
                        help="partitions of the rebalance topic (default: %(default)s)")
    parser.add_argument("--rebalance-cycles", type=int, default=defaults.rebalance_cycles,
                        help="join/leave cycles per run; a run reports their median "
                             "(default: %(default)s)")
    parser.add_argument("--seed", type=int, default=defaults.seed,
                        help="seed of the random waits before rebalance events "
                             "(default: %(default)s)")
    parser.add_argument("--heartbeat-interval-ms", type=int, default=None,
                        help="heartbeat.interval.ms of the rebalance members (default: "
                             "librdkafka's, 3000)")
    parser.add_argument("--records", type=int, default=defaults.records,
                        help="records consumed by the 3-member group (default: %(default)s)")
    parser.add_argument("--record-size", type=int, default=defaults.record_size,
                        help="value bytes per record, null key (default: %(default)s)")
    parser.add_argument("--phase-timeout", type=float, default=defaults.phase_timeout,
                        help="seconds any one phase may take (default: %(default)s)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="parent of the temporary directory (default: the system's)")
    parser.add_argument("--keep-data", action="store_true",
                        help="keep the temporary directory (cluster logs, segments)")
    parser.add_argument("--results-dir", type=Path, default=defaults.results_dir,
                        help="where the JSON results go (default: bench/results)")
    args = parser.parse_args(argv)
    return GroupBenchConfig(
        runs=args.runs, commits=args.commits, members=args.members,
        rebalance_partitions=args.rebalance_partitions,
        rebalance_cycles=args.rebalance_cycles, seed=args.seed,
        heartbeat_interval_ms=args.heartbeat_interval_ms, records=args.records,
        record_size=args.record_size, phase_timeout=args.phase_timeout, work_dir=args.work_dir,
        keep_data=args.keep_data, results_dir=args.results_dir)


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    started = datetime.now(UTC)
    stamp = f"{started:%Y%m%dT%H%M%SZ}"
    machine = machine_info()
    if config.work_dir is not None:
        config.work_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="loglake-bench-groups-", dir=config.work_dir))
    log(f"loglake group bench: {config.runs} runs; {config.commits} commits, "
        f"{config.members} members, {config.records:,} records of {config.record_size} B; "
        f"working in {work}")
    runs: list[RunResult] = []
    try:
        for index in range(1, config.runs + 1):
            log(f"run {index}/{config.runs} (load average {os.getloadavg()})")
            runs.append(one_run(config, work / f"run-{index}", index))
            if not config.keep_data:
                shutil.rmtree(work / f"run-{index}", ignore_errors=True)
    finally:
        if config.keep_data:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    document = report(config, runs, machine, started)
    write_results(config.results_dir, f"groups-{stamp}", document)
    return 0


if __name__ == "__main__":
    run_main(main, also=(ValueError,))
