"""Replicated produce throughput and acks=all latency of a three-broker loglake dev cluster.

Run from the repository root with the project's virtualenv::

    python bench/replication.py [--runs 3] [--records 1000000] [--latency-seconds 20]

What it measures (every topic has replication factor 3 and ``min.insync.replicas=2``):

1. **Throughput.** Each run starts a fresh dev cluster (real ZooKeeper + three
   ``python -m loglake broker start`` processes on loopback). For each partition count
   (``--partitions``, default 1 and 3) and each ``acks`` setting (``all`` and ``1``) it creates
   a new topic, waits until every partition has a leader and a full ISR (3 replicas), then
   produces ``--records`` records of ``--record-size`` bytes with a batching-tuned
   confluent-kafka producer. The clock runs from the first ``produce()`` until ``flush()``
   returns with nothing left; every delivery error fails the run, and the partitions' high
   watermarks must add up to the records sent. Records go to the partitions round-robin in
   chunks of :data:`producing.PRODUCE_CHUNK`. The three partitions of a 3-partition topic have three
   different leaders (the broker assigns leaders round-robin; the script checks it).
2. **Broker CPU.** utime + stime of the three broker processes (``/proc/<pid>/stat``, pids from
   the cluster's state file), summed, read right before and after each timed phase.
3. **Latency.** After the runs, a fresh cluster; for each partition count an open-loop producer
   (acks=all, ``linger.ms`` = ``--latency-linger-ms``, at most ``--latency-max-in-flight``
   requests in flight per connection) sends at ``--latency-fraction`` (20 %) of that layout's
   median acks=all throughput, or at each of the fixed ``--latency-rate`` values. Record *i*
   has the fixed intended send time ``start + i / rate``; its latency is measured from that
   intended time to its delivery callback, so a stalled producer or broker cannot hide its own
   delay (no coordinated omission). The pacing loop sleeps at most ``--latency-tick-us`` between
   wake-ups, sends every record that is due, and serves delivery callbacks with ``poll(0)`` on
   each wake-up, so the latencies have a resolution of about one tick. The first
   ``--latency-warmup-seconds`` are sent at the same rate but not counted.

Results: medians per (partitions, acks) over the runs and the latency percentiles, printed as
tables on stdout (progress goes to stderr) and written as JSON to
``bench/results/replication-<UTC timestamp>.json``. ``--profile`` adds one run (not part of
any result) with py-spy sampling all three brokers during the acks=all throughput and latency
phases; raw profiles go to ``bench/results/replication-profile-<timestamp>/``.

Every loop is bounded by a record count and by ``--phase-timeout``. The harness stops exactly
the processes it started; the script starts no others except py-spy, which it stops itself.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import shutil
import statistics
import struct
import sys
import tempfile
import time
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from measure import (
    BenchmarkError,
    PhaseResult,
    PhaseSummary,
    Progress,
    format_table,
    log,
    percentile,
    run_main,
    total_cpu_seconds,
    write_results,
)
from produce_consume import machine_info
from producing import ADMIN_TIMEOUT_S, timed_produce
from profiling import ProfileSummary, PySpyRecorder, summarise

from loglake.dev.harness import DevCluster

BROKERS = 3
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
ACKS_ALL_TARGET = 150_000
"""records/s the acks=all throughput must reach (median; the best partition layout counts)."""
P99_TARGET_MS = 10.0
"""p99 produce latency (acks=all, at 20 % of the max acks=all rate) must be at most this."""
ISR_TIMEOUT_S = 60.0
FLUSH_TIMEOUT_S = 30.0
"""How long the latency phase waits for the last deliveries after its last send."""
SEQUENCE = struct.Struct(">Q")
"""The latency phase writes each record's sequence number into the first 8 value bytes."""
RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class ReplicationBenchConfig:
    """What one invocation measures; every field is a command-line option of the same name."""

    runs: int = 3
    records: int = 1_000_000
    record_size: int = 100
    partitions: tuple[int, ...] = (1, 3)
    acks: tuple[str, ...] = ("all", "1")
    linger_ms: int = 5
    batch_num_messages: int = 10_000
    batch_size: int = 1_000_000
    queue_buffering_max_messages: int = 1_000_000
    latency_seconds: float = 20.0
    latency_warmup_seconds: float = 2.0
    latency_fraction: float = 0.2
    latency_rates: tuple[float, ...] = ()
    latency_linger_ms: int = 1
    latency_max_in_flight: int = 5
    latency_tick_us: int = 200
    phase_timeout: float = 600.0
    work_dir: Path | None = None
    keep_data: bool = False
    profile: bool = False
    profile_records: int | None = None
    results_dir: Path = RESULTS_DIR
    broker_options: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.runs < 0 or self.records < 1 or self.record_size < SEQUENCE.size:
            raise ValueError(f"--runs must be >= 0, --records >= 1, --record-size >= "
                             f"{SEQUENCE.size}")
        if self.runs == 0 and not self.latency_rates:
            raise ValueError("--runs 0 (latency only) needs fixed rates (--latency-rate)")
        if not self.partitions or min(self.partitions) < 1:
            raise ValueError("--partitions must list counts >= 1")
        if not set(self.acks) <= {"all", "1"} or "all" not in self.acks:
            raise ValueError("--acks must list 'all' (needed for the latency rate) and may add 1")
        if self.latency_seconds <= 0 or self.latency_warmup_seconds < 0:
            raise ValueError("--latency-seconds must be > 0, --latency-warmup-seconds >= 0")
        if not 0 < self.latency_fraction <= 1 or min(self.latency_rates, default=1) <= 0:
            raise ValueError("--latency-fraction must be in (0, 1], --latency-rate values > 0")
        if self.latency_tick_us < 1 or self.latency_max_in_flight < 1 \
                or self.phase_timeout <= 0:
            raise ValueError("--latency-tick-us and --latency-max-in-flight must be >= 1, "
                             "--phase-timeout > 0")

    def throughput_settings(self, bootstrap_servers: str, acks: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": bootstrap_servers,
            "acks": acks,
            "compression.type": "none",
            "enable.idempotence": False,
            "linger.ms": self.linger_ms,
            "batch.num.messages": self.batch_num_messages,
            "batch.size": self.batch_size,
            "queue.buffering.max.messages": self.queue_buffering_max_messages,
            "delivery.report.only.error": True,
        }

    def latency_settings(self, bootstrap_servers: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": bootstrap_servers,
            "acks": "all",
            "compression.type": "none",
            "enable.idempotence": False,
            "linger.ms": self.latency_linger_ms,
            "max.in.flight.requests.per.connection": self.latency_max_in_flight,
            "queue.buffering.max.messages": self.queue_buffering_max_messages,
        }

    def broker_overrides(self) -> dict[str, str]:
        return dict(option.split("=", 1) for option in self.broker_options)


def phase_name(partitions: int, acks: str) -> str:
    return f"p{partitions}_acks_{acks}"


# -- cluster ------------------------------------------------------------------------------------


def broker_pids(cluster: DevCluster) -> dict[int, int]:
    """Broker id -> pid of every live broker, from the cluster's state file."""
    pids = {process.id: process.pid for process in cluster.status()
            if process.role == "broker" and process.alive}
    if len(pids) != BROKERS:
        raise BenchmarkError(f"{len(pids)} of {BROKERS} brokers of the dev cluster in "
                             f"{cluster.data_dir} are running")
    return pids


def create_topic(bootstrap_servers: str, topic: str, partitions: int) -> dict[int, int]:
    """Create ``topic`` (RF 3, min ISR 2); wait for a leader and a full ISR on every partition.

    Returns partition -> leader broker id.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=REPLICATION_FACTOR,
                   config={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)})
    futures = admin.create_topics([new], operation_timeout=ADMIN_TIMEOUT_S)
    futures[topic].result(timeout=ADMIN_TIMEOUT_S)
    deadline = time.monotonic() + ISR_TIMEOUT_S
    state = "not in the metadata"
    while time.monotonic() < deadline:
        metadata = admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics.get(topic)
        if metadata is not None and metadata.error is None \
                and len(metadata.partitions) == partitions:
            described = metadata.partitions.values()
            state = ", ".join(f"p{p.id}: leader {p.leader} isr {sorted(p.isrs)}"
                              for p in described)
            if all(p.leader >= 0 and len(p.isrs) == REPLICATION_FACTOR for p in described):
                return {p.id: p.leader for p in described}
        time.sleep(0.1)
    raise BenchmarkError(f"topic {topic} has no leader and full ISR on every partition "
                         f"{ISR_TIMEOUT_S:g} s after creation ({state})")


def high_watermarks(bootstrap_servers: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "bench-check",
                         "enable.auto.commit": False})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                               timeout=ADMIN_TIMEOUT_S)[1]
                for partition in range(partitions)]
    finally:
        consumer.close()


# -- throughput ---------------------------------------------------------------------------------


def produce_throughput(config: ReplicationBenchConfig, bootstrap_servers: str, topic: str,
                       partitions: int, acks: str, pids: Sequence[int],
                       payload: bytes) -> PhaseResult:
    """Produce ``config.records`` copies of ``payload``; time first produce .. flush done."""
    total = config.records
    result = timed_produce(config.throughput_settings(bootstrap_servers, acks), topic, payload,
                           total, label=f"produce {partitions}p acks={acks}", pids=pids,
                           phase_timeout=config.phase_timeout, partitions=partitions)
    # acks=1 is answered before the followers copy the records, so the high watermark (the
    # ISR's minimum log end) may trail for a moment; acks=all must already be complete
    check_deadline = time.monotonic() + ISR_TIMEOUT_S
    while (stored := sum(high_watermarks(bootstrap_servers, topic, partitions))) != total:
        if acks == "all" or stored > total or time.monotonic() > check_deadline:
            raise BenchmarkError(f"{topic}: high watermarks add up to {stored}, expected "
                                 f"{total}")
        time.sleep(0.2)
    return result


# -- latency ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatencyResult:
    """One open-loop latency phase. Latencies in milliseconds; ``send_lag`` is intended send
    time -> ``produce()`` call (the client's own pacing delay, part of ``latency``)."""

    partitions: int
    target_rate: float
    achieved_rate: float
    seconds: float
    records: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    mean_ms: float
    send_lag_p99_ms: float
    send_lag_max_ms: float
    cpu_s_per_million: float


def open_loop_latency(config: ReplicationBenchConfig, bootstrap_servers: str, topic: str,
                      partitions: int, rate: float, pids: Sequence[int],
                      payload: bytes) -> LatencyResult:
    """Send at ``rate`` records/s on a fixed schedule; latency = intended time -> callback."""
    warm = int(rate * config.latency_warmup_seconds)
    total = warm + int(rate * config.latency_seconds)
    interval = 1.0 / rate
    tick = config.latency_tick_us / 1e6
    latencies = array("d", [math.nan]) * total
    send_lag = array("d", [0.0]) * total
    errors: list[KafkaError] = []
    start = 0.0  # set just before the first send; the callback reads it

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        now = time.perf_counter()
        if error is not None:
            errors.append(error)
            return
        value = message.value()
        if value is None:
            return
        sequence = SEQUENCE.unpack_from(value)[0]
        latencies[sequence] = now - (start + sequence * interval)

    producer = Producer({**config.latency_settings(bootstrap_servers),
                         "on_delivery": on_delivery})
    producer.list_topics(topic, timeout=ADMIN_TIMEOUT_S)  # connect + metadata, not timed
    produce, poll, pack = producer.produce, producer.poll, SEQUENCE.pack_into
    buffer = bytearray(payload)
    progress = Progress(f"latency {partitions}p at {rate:,.0f} rec/s", total, interval=2.0)
    sent = 0
    start = time.perf_counter()
    deadline = start + config.latency_warmup_seconds + config.latency_seconds \
        + config.phase_timeout
    cpu_before: float | None = None
    measured_from = start + warm * interval
    while sent < total:
        now = time.perf_counter()
        if now > deadline or errors:
            break
        if cpu_before is None and now >= measured_from:
            cpu_before = total_cpu_seconds(pids)
        due = min(total, int((now - start) * rate) + 1)
        while sent < due:
            pack(buffer, 0, sent)
            produce(topic, bytes(buffer), partition=sent % partitions)
            send_lag[sent] = now - (start + sent * interval)
            sent += 1
        poll(0)
        progress.update(sent)
        wait = start + sent * interval - time.perf_counter()
        if wait > 0:
            time.sleep(min(wait, tick))
    finished_sending = time.perf_counter()
    flush_deadline = finished_sending + FLUSH_TIMEOUT_S
    while producer.flush(0.1) > 0 and not errors and time.perf_counter() < flush_deadline:
        pass
    cpu = total_cpu_seconds(pids) - (cpu_before or 0.0)
    progress.update(sent, force=True)
    if errors:
        raise BenchmarkError(f"latency phase: {len(errors)} delivery errors, first: {errors[0]}")
    if sent != total:
        raise BenchmarkError(f"latency phase sent {sent} of {total} records before the deadline")
    measured = latencies[warm:]
    undelivered = sum(1 for value in measured if math.isnan(value))
    if undelivered or len(producer):
        raise BenchmarkError(f"latency phase: {undelivered} records undelivered "
                             f"{FLUSH_TIMEOUT_S:g} s after the last send")
    ordered = sorted(measured)
    lags = sorted(send_lag[warm:])
    span = finished_sending - measured_from
    return LatencyResult(
        partitions=partitions,
        target_rate=rate,
        achieved_rate=len(measured) / span,
        seconds=span,
        records=len(measured),
        p50_ms=percentile(ordered, 0.50) * 1000,
        p99_ms=percentile(ordered, 0.99) * 1000,
        p999_ms=percentile(ordered, 0.999) * 1000,
        max_ms=ordered[-1] * 1000,
        mean_ms=statistics.fmean(ordered) * 1000,
        send_lag_p99_ms=percentile(lags, 0.99) * 1000,
        send_lag_max_ms=lags[-1] * 1000,
        cpu_s_per_million=cpu / len(measured) * 1_000_000,
    )


# -- runs ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def maybe_profile(pids: dict[int, int], directory: Path | None, phase: str) -> Iterator[None]:
    """py-spy on every broker for the block, one raw file per broker (nothing if no dir)."""
    if directory is None:
        yield
        return
    with contextlib.ExitStack() as stack:
        for broker_id, pid in sorted(pids.items()):
            stack.enter_context(PySpyRecorder(pid, directory / f"{phase}-broker-{broker_id}.txt"))
        yield


def start_cluster(config: ReplicationBenchConfig, directory: Path) -> DevCluster:
    log(f"  starting a {BROKERS}-broker dev cluster in {directory}")
    return DevCluster(directory, brokers=BROKERS,
                      broker_overrides=config.broker_overrides() or None)


def throughput_run(config: ReplicationBenchConfig, run_dir: Path, payload: bytes, label: str,
                   *, profile_dir: Path | None = None) -> dict[str, PhaseResult]:
    """One fresh cluster; one new topic per (partitions, acks); every throughput phase."""
    results: dict[str, PhaseResult] = {}
    with start_cluster(config, run_dir / "cluster") as cluster:
        pids = broker_pids(cluster)
        bootstrap = cluster.bootstrap_servers
        log(f"  broker pids {pids} at {bootstrap}")
        for partitions in config.partitions:
            for acks in config.acks:
                name = phase_name(partitions, acks)
                topic = f"bench-{label}-{name}".replace("_", "-")
                leaders = create_topic(bootstrap, topic, partitions)
                if partitions == BROKERS and len(set(leaders.values())) != BROKERS:
                    log(f"  note: leaders of {topic} are {leaders}, not one per broker")
                profiling = profile_dir if acks == "all" else None
                with maybe_profile(pids, profiling, f"throughput-{partitions}p"):
                    result = produce_throughput(config, bootstrap, topic, partitions, acks,
                                                list(pids.values()), payload)
                log(f"  {name}: {result.records_per_s:,.0f} rec/s, brokers' CPU "
                    f"{result.cpu_seconds:.2f} s (leaders {leaders})")
                results[name] = result
    return results


def latency_phases(config: ReplicationBenchConfig, run_dir: Path, payload: bytes,
                   rates: Sequence[tuple[int, float]], *,
                   profile_dir: Path | None = None) -> list[LatencyResult]:
    """One fresh cluster; one topic per partition count; an open-loop latency phase for each
    (partitions, rate) of ``rates``, in order."""
    results: list[LatencyResult] = []
    with start_cluster(config, run_dir / "cluster") as cluster:
        pids = broker_pids(cluster)
        bootstrap = cluster.bootstrap_servers
        log(f"  broker pids {pids} at {bootstrap}")
        leaders_of: dict[int, dict[int, int]] = {}
        for partitions, rate in rates:
            topic = f"bench-latency-p{partitions}"
            if partitions not in leaders_of:
                leaders_of[partitions] = create_topic(bootstrap, topic, partitions)
            leaders = leaders_of[partitions]
            with maybe_profile(pids, profile_dir, f"latency-{partitions}p"):
                result = open_loop_latency(config, bootstrap, topic, partitions, rate,
                                           list(pids.values()), payload)
            log(f"  latency {partitions}p at {rate:,.0f} rec/s: p50 {result.p50_ms:.2f} ms, "
                f"p99 {result.p99_ms:.2f} ms, p99.9 {result.p999_ms:.2f} ms, max "
                f"{result.max_ms:.2f} ms (leaders {leaders})")
            results.append(result)
    return results


# -- reporting ----------------------------------------------------------------------------------


def merged_profile(directory: Path, phase: str) -> ProfileSummary | None:
    """All brokers' raw profiles of ``phase`` in one summary (the raw format concatenates)."""
    parts = sorted(directory.glob(f"{phase}-broker-*.txt"))
    if not parts:
        return None
    merged = directory / f"{phase}-all-brokers.txt"
    merged.write_text("".join(part.read_text(errors="replace") for part in parts))
    return summarise(merged, top=15)


def report(config: ReplicationBenchConfig, summaries: dict[str, PhaseSummary],
           latencies: Sequence[LatencyResult], profiles: dict[str, ProfileSummary],
           runs: list[dict[str, PhaseResult]], machine: dict[str, Any],
           started: datetime) -> dict[str, Any]:
    print(f"\nloglake replication, {BROKERS} brokers, RF {REPLICATION_FACTOR}, min ISR "
          f"{MIN_INSYNC_REPLICAS}, {config.records:,} records of {config.record_size} B, median "
          f"of {config.runs} runs ({machine['cpus']} CPUs, {machine['cpu_model']})\n")
    rows: list[list[str]] = []
    for name, summary in summaries.items():
        partitions, acks = name.split("_acks_")
        cpu = summary.cpu_s_per_million
        rows.append([partitions.removeprefix("p"), acks, f"{summary.records_per_s:,.0f}",
                     f"{summary.mb_per_s:,.1f}", "-" if cpu is None else f"{cpu:.2f}",
                     ", ".join(f"{value:,.0f}" for value in summary.all_records_per_s)])
    if rows:
        print(format_table(["partitions", "acks", "records/s", "MB/s",
                            "brokers' CPU s / M records", "each run (records/s)"], rows))
    print(f"\nproduce latency, acks=all, linger.ms={config.latency_linger_ms}, "
          f"max.in.flight={config.latency_max_in_flight}, open loop, from the intended send "
          f"time, {config.latency_seconds:g} s measured\n")
    print(format_table(
        ["partitions", "rate (records/s)", "achieved", "p50 ms", "p99 ms", "p99.9 ms", "max ms",
         "client send lag p99 / max ms", "brokers' CPU s / M records"],
        [[str(r.partitions), f"{r.target_rate:,.0f}", f"{r.achieved_rate:,.0f}",
          f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}", f"{r.p999_ms:.2f}", f"{r.max_ms:.2f}",
          f"{r.send_lag_p99_ms:.2f} / {r.send_lag_max_ms:.2f}", f"{r.cpu_s_per_million:.2f}"]
         for r in latencies]))
    targets: dict[str, tuple[float, str, bool, str]] = {}
    if summaries:
        best_all = max(summary.records_per_s for name, summary in summaries.items()
                       if name.endswith("_acks_all"))
        targets["acks=all throughput (best layout), records/s"] = (
            best_all, f">= {ACKS_ALL_TARGET:,}", best_all >= ACKS_ALL_TARGET, f"{best_all:,.0f}")
    if latencies and not config.latency_rates:  # the target is defined at the fraction's rate
        worst_p99 = max(r.p99_ms for r in latencies)
        targets[f"produce p99 at {config.latency_fraction:.0%} of the layout's acks=all "
                "throughput, ms (worst layout)"] = (
            worst_p99, f"<= {P99_TARGET_MS:g}", worst_p99 <= P99_TARGET_MS, f"{worst_p99:.2f}")
    if targets:
        print()
        print(format_table(["target", "needed", "measured", "met"],
                           [[name, needed, shown, "yes" if met else "NO"]
                            for name, (_, needed, met, shown) in targets.items()]))
    for phase, profile in profiles.items():
        print(f"\npy-spy --gil, all {BROKERS} brokers during {phase} ({profile.total_samples} "
              "samples), top functions by own samples:\n")
        print(format_table(["function", "file", "% own", "samples"],
                           [[e.function, e.file, f"{e.percent:.1f}", str(e.samples)]
                            for e in profile.own]))
        print("\nby inclusive samples (without the common root frames):\n")
        print(format_table(["function", "file", "% inclusive"],
                           [[e.function, e.file, f"{e.percent:.1f}"] for e in profile.inclusive]))
    return {
        "started": started.isoformat(),
        "command": " ".join([sys.executable, *sys.argv]),
        "config": {key: str(value) if isinstance(value, Path) else value
                   for key, value in asdict(config).items()},
        "machine": machine,
        "medians": {name: asdict(summary) for name, summary in summaries.items()},
        "latency": [asdict(result) for result in latencies],
        "targets": {name: {"needed": needed, "measured": value, "met": met}
                    for name, (value, needed, met, _) in targets.items()},
        "runs": [{name: result.to_json() for name, result in run.items()} for run in runs],
        "profiles": {phase: asdict(summary) for phase, summary in profiles.items()},
    }


# -- main ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> ReplicationBenchConfig:
    defaults = ReplicationBenchConfig()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=defaults.runs,
                        help="throughput runs to take the median of; 0 with --latency-rate "
                             "measures latency only (default: %(default)s)")
    parser.add_argument("--records", type=int, default=defaults.records,
                        help="records per throughput phase (default: %(default)s)")
    parser.add_argument("--record-size", type=int, default=defaults.record_size,
                        help="value bytes per record, null key (default: %(default)s)")
    parser.add_argument("--partitions", type=int, nargs="+", default=list(defaults.partitions),
                        help="partition counts to measure (default: 1 3)")
    parser.add_argument("--acks", nargs="+", default=list(defaults.acks), choices=["all", "1"],
                        help="acks settings for the throughput phases (default: all 1)")
    parser.add_argument("--linger-ms", type=int, default=defaults.linger_ms,
                        help="throughput producer linger.ms (default: %(default)s)")
    parser.add_argument("--batch-num-messages", type=int, default=defaults.batch_num_messages,
                        help="throughput producer batch.num.messages (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size,
                        help="throughput producer batch.size in bytes (default: %(default)s)")
    parser.add_argument("--queue-buffering-max-messages", type=int,
                        default=defaults.queue_buffering_max_messages,
                        help="producer queue.buffering.max.messages (default: %(default)s)")
    parser.add_argument("--latency-seconds", type=float, default=defaults.latency_seconds,
                        help="measured seconds per latency phase (default: %(default)s)")
    parser.add_argument("--latency-warmup-seconds", type=float,
                        default=defaults.latency_warmup_seconds,
                        help="seconds sent first and not counted (default: %(default)s)")
    parser.add_argument("--latency-fraction", type=float, default=defaults.latency_fraction,
                        help="latency rate as a share of the layout's median acks=all "
                             "throughput (default: %(default)s)")
    parser.add_argument("--latency-rate", type=float, nargs="+", default=None,
                        help="fixed latency rates in records/s instead of the fraction "
                             "(each is measured, per partition count)")
    parser.add_argument("--latency-linger-ms", type=int, default=defaults.latency_linger_ms,
                        help="latency producer linger.ms (default: %(default)s)")
    parser.add_argument("--latency-max-in-flight", type=int,
                        default=defaults.latency_max_in_flight,
                        help="latency producer max.in.flight.requests.per.connection "
                             "(default: %(default)s, as the Java producer's; librdkafka's own "
                             "default is 1000000)")
    parser.add_argument("--latency-tick-us", type=int, default=defaults.latency_tick_us,
                        help="longest sleep of the pacing loop in µs (default: %(default)s)")
    parser.add_argument("--phase-timeout", type=float, default=defaults.phase_timeout,
                        help="seconds any one phase may take (default: %(default)s)")
    parser.add_argument("--broker-option", action="append", default=[], metavar="KEY=VALUE",
                        help="extra broker setting for all three brokers, repeatable")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="parent of the temporary directory (default: the system's)")
    parser.add_argument("--keep-data", action="store_true",
                        help="keep the temporary directory (cluster logs, segments)")
    parser.add_argument("--profile", action="store_true",
                        help="one extra run with py-spy on all brokers (not in the results)")
    parser.add_argument("--profile-records", type=int, default=None,
                        help="records per throughput phase in the profiled run "
                             "(default: --records)")
    parser.add_argument("--results-dir", type=Path, default=defaults.results_dir,
                        help="where the JSON results go (default: bench/results)")
    args = parser.parse_args(argv)
    for option in args.broker_option:
        if "=" not in option:
            parser.error(f"--broker-option {option!r} is not KEY=VALUE")
    return ReplicationBenchConfig(
        runs=args.runs, records=args.records, record_size=args.record_size,
        partitions=tuple(dict.fromkeys(args.partitions)), acks=tuple(dict.fromkeys(args.acks)),
        linger_ms=args.linger_ms, batch_num_messages=args.batch_num_messages,
        batch_size=args.batch_size,
        queue_buffering_max_messages=args.queue_buffering_max_messages,
        latency_seconds=args.latency_seconds,
        latency_warmup_seconds=args.latency_warmup_seconds,
        latency_fraction=args.latency_fraction, latency_rates=tuple(args.latency_rate or ()),
        latency_linger_ms=args.latency_linger_ms, latency_tick_us=args.latency_tick_us,
        latency_max_in_flight=args.latency_max_in_flight,
        phase_timeout=args.phase_timeout, work_dir=args.work_dir, keep_data=args.keep_data,
        profile=args.profile, profile_records=args.profile_records,
        results_dir=args.results_dir, broker_options=tuple(args.broker_option))


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    started = datetime.now(UTC)
    stamp = f"{started:%Y%m%dT%H%M%SZ}"
    machine = machine_info()
    payload = bytes(index % 251 for index in range(config.record_size))
    if config.work_dir is not None:
        config.work_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="loglake-bench-replication-", dir=config.work_dir))
    log(f"loglake replication bench: {config.runs} runs x {config.records:,} records of "
        f"{config.record_size} B, partitions {list(config.partitions)}, acks "
        f"{list(config.acks)}; working in {work}")
    runs: list[dict[str, PhaseResult]] = []
    profiles: dict[str, ProfileSummary] = {}
    try:
        for index in range(1, config.runs + 1):
            log(f"throughput run {index}/{config.runs}")
            run_dir = work / f"run-{index}"
            runs.append(throughput_run(config, run_dir, payload, f"r{index}"))
            if not config.keep_data:
                shutil.rmtree(run_dir, ignore_errors=True)
        summaries = {name: PhaseSummary.of(name, [run[name] for run in runs])
                     for name in (runs[0] if runs else {})}
        rates = [(partitions, rate) for partitions in config.partitions
                 for rate in config.latency_rates or [
                     config.latency_fraction
                     * summaries[phase_name(partitions, "all")].records_per_s]]
        log("latency (fresh cluster)")
        latencies = latency_phases(config, work / "latency", payload, rates)
        if config.profile:
            log("profiled run (py-spy on all brokers; not part of the results)")
            profile_dir = config.results_dir / f"replication-profile-{stamp}"
            profile_dir.mkdir(parents=True, exist_ok=True)
            profiled = replace(config, records=config.profile_records or config.records,
                               acks=("all",))
            throughput_run(profiled, work / "profile", payload, "profile",
                           profile_dir=profile_dir)
            latency_phases(profiled, work / "profile-latency", payload, rates,
                           profile_dir=profile_dir)
            for partitions in config.partitions:
                for kind in ("throughput", "latency"):
                    phase = f"{kind}-{partitions}p"
                    summary = merged_profile(profile_dir, phase)
                    if summary is not None:
                        profiles[phase] = summary
            log(f"  raw py-spy profiles in {profile_dir}")
    finally:
        if config.keep_data:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    document = report(config, summaries, latencies, profiles, runs, machine, started)
    write_results(config.results_dir, f"replication-{stamp}", document)
    return 0


if __name__ == "__main__":
    run_main(main)
