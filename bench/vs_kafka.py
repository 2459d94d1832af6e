"""loglake against Apache Kafka 3.9 on the same box, in the same run, with Kafka's own tools.

Run from the repository root (``./run bench-vs-kafka`` fetches the Kafka jars first)::

    python bench/vs_kafka.py [--runs 3] [--records-100 1000000] [--records-1k 300000]
                             [--rates 10000,50000,100000] [--latency-seconds 15] [--profile]

Clusters: one ZooKeeper; a three-broker loglake dev cluster (``DevCluster``, each broker a
``python -m loglake broker start`` process) and a three-broker Apache Kafka 3.9.2 cluster
(``loglake.dev.kafka_peer.KafkaPeer``, Kafka's defaults, ``-Xmx512m``) on it under separate
chroots, both on loopback, both up for the whole invocation. Both flush like Kafka: to the OS.
The loglake brokers run with the product's defaults (the harness's test-speed settings
``zookeeper.session.timeout.ms`` and ``log.retention.check.interval.ms`` are put back to
Kafka's 18 s and 5 min).

A warm-up produce run per system (``--warmup-records``, not reported) comes first. Phases (every
topic has 3 partitions, one leader per broker, unless stated; a fresh topic per
run and system, deleted afterwards; the two systems alternate which goes first per run):

1. **Produce throughput** with ``org.apache.kafka.tools.ProducerPerformance``
   (``kafka-producer-perf-test``, unthrottled): records of 100 B and 1 KB, ``acks=1`` on
   replication factor 1 and ``acks=all`` on replication factor 3 with ``min.insync.replicas=2``,
   each with the Java client's default batching (``batch.size=16384``, ``linger.ms=5``) and with
   large batches (``batch.size=1048576``, ``linger.ms=50``). After each run the partitions'
   end offsets must add up to the records sent.
2. **Consume throughput** with ``org.apache.kafka.tools.ConsumerPerformance``
   (``kafka-consumer-perf-test``, one consumer in a fresh group) of each acks=1 default-batching
   topic right after it was produced; its ``fetch.nMsg.sec`` (group join time excluded).
3. **Latency at fixed rates**: ``ProducerPerformance --throughput <rate>`` with ``acks=all``,
   RF 3, min.insync 2, 100 B records, ``--latency-seconds`` long: the tool's send-to-ack
   p50/p99/p99.9 (whole milliseconds; measured from the actual send, as Kafka's tool does).
   Plus ``org.apache.kafka.tools.EndToEndLatency`` (one record at a time, produce acks=all then
   consume it back, 1-partition RF 3 topic): p50/p99/p99.9 in whole milliseconds.
4. **CPU seconds per GB**: utime + stime of the three broker processes of each cluster
   (``/proc/<pid>/stat``) summed over each produce and consume phase, divided by the payload
   gigabytes (10^9 B of record values) of that phase.

Results: medians over ``--runs`` per figure, each loglake figure with Kafka's and the ratio
loglake / Kafka, as a table on stdout (progress on stderr), JSON in
``bench/results/vs-kafka-<UTC timestamp>.json``. ``--profile`` then samples the three loglake
brokers with py-spy during one extra (unreported) acks=all default-batching 100 B produce run
and prints where their time goes.

Bounds: every tool run has a timeout (``--phase-timeout``); every loop is bounded by counts. The
script stops exactly the processes it started (the harness and the peer remember pid + start
time; tool JVMs are its own children).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from measure import BenchmarkError, format_table, log, run_main, total_cpu_seconds, write_results
from produce_consume import machine_info
from profiling import PySpyRecorder, summarise

from loglake import jvm
from loglake.dev.harness import DevCluster, zookeeper
from loglake.dev.kafka_peer import KAFKA_VERSION, KafkaPeer, java_command, tools_log4j

PARTITIONS = 3
GB = 1_000_000_000
TOOL_HEAP = "512m"
DEFAULT_BATCHING = {"batch.size": "16384", "linger.ms": "5"}
LARGE_BATCHING = {"batch.size": "1048576", "linger.ms": "50"}
LOGLAKE_BENCH_OVERRIDES = {"zookeeper.session.timeout.ms": "18000",
                           "log.retention.check.interval.ms": "300000"}
PRODUCER_LINE = re.compile(
    r"(?P<sent>\d+) records sent, (?P<rate>[\d.]+) records/sec \([\d.]+ MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99.9th")
E2E_LINE = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+), 99.9th = (\d+)")
SYSTEMS = ("loglake", "kafka")


@dataclass
class System:
    """One cluster under test: how to reach it, its broker pids, how to make topics."""

    name: str
    bootstrap: str
    pids: Callable[[], list[int]]
    create_topic: Callable[..., None]

    def cpu(self) -> float:
        return total_cpu_seconds(self.pids())


@dataclass
class Sample:
    """One measured figure of one run."""

    figure: str
    system: str
    value: float
    extra: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    higher_is_better: bool


def run_tool(command: Sequence[str], *, label: str, timeout: float, log_dir: Path) -> list[str]:
    """Run a tool JVM; echo its stdout lines to stderr as progress; return them. Its stderr
    goes to ``<log_dir>/<label>.log``. BenchmarkError on a timeout or non-zero exit."""
    log_dir.mkdir(parents=True, exist_ok=True)
    err_path = log_dir / f"{label}.log"
    lines: list[str] = []
    with err_path.open("ab") as err, subprocess.Popen(
            list(command), stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
            text=True) as child:
        timer = threading.Timer(timeout, child.kill)
        timer.start()
        try:
            assert child.stdout is not None
            for line in child.stdout:
                line = line.rstrip("\n")
                lines.append(line)
                if len(lines) <= 200 and ("records sent" in line or "Percentiles" in line
                                          or (line[:1].isdigit() and "," in line)):
                    log(f"    [{label}] {line}")
            code = child.wait()
        except BaseException:  # Ctrl-C or an error here: the tool JVM must not outlive us
            child.kill()
            raise
        finally:
            expired = not timer.is_alive() and child.returncode != 0
            timer.cancel()
    if expired:
        raise BenchmarkError(f"{label}: no result within {timeout:g}s (stderr in {err_path})")
    if code != 0:
        raise BenchmarkError(f"{label}: exit code {code} (stderr in {err_path})")
    return lines


def producer_perf(system: System, topic: str, *, records: int, size: int, acks: str,
                  batching: dict[str, str], throughput: int, timeout: float, log_dir: Path,
                  label: str) -> dict[str, float]:
    props = [f"bootstrap.servers={system.bootstrap}", f"acks={acks}",
             *(f"{key}={value}" for key, value in batching.items())]
    command = java_command(
        "org.apache.kafka.tools.ProducerPerformance",
        ["--topic", topic, "--num-records", str(records), "--record-size", str(size),
         "--throughput", str(throughput), "--producer-props", *props],
        heap=TOOL_HEAP, log4j=tools_log4j(log_dir))
    lines = run_tool(command, label=label, timeout=timeout, log_dir=log_dir)
    match = next((m for m in map(PRODUCER_LINE.search, lines) if m), None)
    if match is None or int(match["sent"]) != records:
        raise BenchmarkError(f"{label}: no final result line for {records} records "
                             f"(last: {lines[-1:]})")
    return {"records_per_s": float(match["rate"]), "p50_ms": float(match["p50"]),
            "p99_ms": float(match["p99"]), "p999_ms": float(match["p999"]),
            "avg_ms": float(match["avg"]), "max_ms": float(match["max"])}


def consumer_perf(system: System, topic: str, *, records: int, timeout: float, log_dir: Path,
                  label: str) -> float:
    """Records/s of ``kafka-consumer-perf-test`` (fetch phase, group join excluded)."""
    command = java_command(
        "org.apache.kafka.tools.ConsumerPerformance",
        ["--bootstrap-server", system.bootstrap, "--topic", topic, "--messages", str(records),
         "--group", f"perf-{topic}", "--timeout", "60000", "--hide-header"],
        heap=TOOL_HEAP, log4j=tools_log4j(log_dir))
    lines = run_tool(command, label=label, timeout=timeout, log_dir=log_dir)
    rows = [line.split(",") for line in lines if line.count(",") >= 9]
    if not rows:
        raise BenchmarkError(f"{label}: no result line (got {lines[-3:]})")
    cells = [cell.strip() for cell in rows[-1]]
    consumed, fetch_rate = int(cells[4]), float(cells[9])
    if consumed < records:
        raise BenchmarkError(f"{label}: consumed {consumed} of {records} records")
    return fetch_rate


def end_to_end(system: System, topic: str, *, records: int, size: int, timeout: float,
               log_dir: Path, label: str) -> dict[str, float]:
    command = java_command(
        "org.apache.kafka.tools.EndToEndLatency",
        [system.bootstrap, topic, str(records), "all", str(size)],
        heap=TOOL_HEAP, log4j=tools_log4j(log_dir))
    lines = run_tool(command, label=label, timeout=timeout, log_dir=log_dir)
    match = next((m for m in map(E2E_LINE.search, lines) if m), None)
    if match is None:
        raise BenchmarkError(f"{label}: no percentiles line (got {lines[-3:]})")
    return {"p50_ms": float(match[1]), "p99_ms": float(match[2]), "p999_ms": float(match[3])}


def end_offsets_total(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "vs-kafka-offsets",
                         "enable.auto.commit": False})
    try:
        total = 0
        for partition in range(PARTITIONS):
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                        timeout=30)
            total += high
        return total
    finally:
        consumer.close()


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with contextlib.suppress(Exception):  # best effort: disk space only
        admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)


def ordered(systems: dict[str, System], run: int) -> list[System]:
    """Both systems, alternating which goes first per run (drift and warm caches even out)."""
    order = SYSTEMS if run % 2 == 0 else tuple(reversed(SYSTEMS))
    return [systems[name] for name in order]


def warm_up(systems: dict[str, System], args: argparse.Namespace, log_dir: Path) -> None:
    """One unreported produce run per system, so both brokers' JITs and page caches are warm."""
    if args.warmup_records <= 0:
        return
    for system in systems.values():
        topic = f"warmup-{system.name}"
        system.create_topic(topic, partitions=PARTITIONS, replication_factor=3,
                            configs={"min.insync.replicas": "2"})
        log(f"warm-up on {system.name}: {args.warmup_records:,} records of 100 B, acks=all "
            "(not reported)")
        producer_perf(system, topic, records=args.warmup_records, size=100, acks="all",
                      batching=DEFAULT_BATCHING, throughput=-1, timeout=args.phase_timeout,
                      log_dir=log_dir, label=f"{topic}-produce")
        delete_topic(system.bootstrap, topic)


def throughput_phase(systems: dict[str, System], args: argparse.Namespace, log_dir: Path,
                     samples: list[Sample]) -> None:
    scenarios = [(size, acks, batching)
                 for size in (100, 1024) for acks in ("1", "all")
                 for batching in ("default", "large")]
    for index, (size, acks, batching) in enumerate(scenarios, start=1):
        records = args.records_100 if size == 100 else args.records_1k
        rf = 1 if acks == "1" else 3
        configs = {} if rf == 1 else {"min.insync.replicas": "2"}
        key = f"produce {size}B acks={acks} rf={rf} {batching}"
        for run in range(args.runs):
            for system in ordered(systems, run):
                topic = f"perf-{size}-{acks}-{batching}-{run}-{system.name}".replace("all", "a")
                system.create_topic(topic, partitions=PARTITIONS, replication_factor=rf,
                                    configs=configs)
                log(f"[{index}/{len(scenarios)}] {key}: run {run + 1}/{args.runs} on "
                    f"{system.name}, {records:,} records")
                cpu_before = system.cpu()
                result = producer_perf(
                    system, topic, records=records, size=size, acks=acks,
                    batching=DEFAULT_BATCHING if batching == "default" else LARGE_BATCHING,
                    throughput=-1, timeout=args.phase_timeout, log_dir=log_dir,
                    label=f"{topic}-produce")
                cpu = system.cpu() - cpu_before
                stored = end_offsets_total(system.bootstrap, topic)
                if stored != records:
                    raise BenchmarkError(f"{system.name} {topic}: {stored} records stored, "
                                         f"{records} sent")
                samples.append(Sample(key, system.name, result["records_per_s"],
                                      {"cpu_s_per_gb": cpu / (records * size / GB)}))
                if acks == "1" and batching == "default":
                    consume_key = f"consume {size}B"
                    cpu_before = system.cpu()
                    rate = consumer_perf(system, topic, records=records,
                                         timeout=args.phase_timeout, log_dir=log_dir,
                                         label=f"{topic}-consume")
                    cpu = system.cpu() - cpu_before
                    samples.append(Sample(consume_key, system.name, rate,
                                          {"cpu_s_per_gb": cpu / (records * size / GB)}))
                delete_topic(system.bootstrap, topic)


def latency_phase(systems: dict[str, System], args: argparse.Namespace, log_dir: Path,
                  samples: list[Sample]) -> None:
    for rate in args.rates:
        records = rate * args.latency_seconds
        for run in range(args.runs):
            for system in ordered(systems, run):
                topic = f"lat-{rate}-{run}-{system.name}"
                system.create_topic(topic, partitions=PARTITIONS, replication_factor=3,
                                    configs={"min.insync.replicas": "2"})
                log(f"latency {rate:,} records/s acks=all: run {run + 1}/{args.runs} on "
                    f"{system.name} ({args.latency_seconds} s)")
                result = producer_perf(
                    system, topic, records=records, size=100, acks="all",
                    batching=DEFAULT_BATCHING, throughput=rate,
                    timeout=args.phase_timeout + args.latency_seconds, log_dir=log_dir,
                    label=f"{topic}-produce")
                achieved = result["records_per_s"]
                for name in ("p50_ms", "p99_ms", "p999_ms"):
                    samples.append(Sample(f"latency {rate // 1000}k/s {name[:-3]}",
                                          system.name, result[name], {"achieved": achieved}))
                delete_topic(system.bootstrap, topic)
    for run in range(args.runs):
        for system in ordered(systems, run):
            topic = f"e2e-{run}-{system.name}"
            system.create_topic(topic, partitions=1, replication_factor=3,
                                configs={"min.insync.replicas": "2"})
            log(f"end-to-end latency acks=all: run {run + 1}/{args.runs} on {system.name} "
                f"({args.e2e_records:,} records, one at a time)")
            result = end_to_end(system, topic, records=args.e2e_records, size=100,
                                timeout=args.phase_timeout, log_dir=log_dir,
                                label=f"{topic}-e2e")
            for name in ("p50_ms", "p99_ms", "p999_ms"):
                samples.append(Sample(f"end-to-end {name[:-3]}", system.name, result[name]))
            delete_topic(system.bootstrap, topic)


def summarise_samples(samples: list[Sample]) -> list[dict[str, Any]]:
    """Per figure: median over runs for each system, the ratio loglake / Kafka."""
    figures: list[str] = []
    for sample in samples:
        if sample.figure not in figures:
            figures.append(sample.figure)
    rows = []
    for figure in figures:
        row: dict[str, Any] = {"figure": figure}
        for system in SYSTEMS:
            mine = [s for s in samples if s.figure == figure and s.system == system]
            row[system] = statistics.median(s.value for s in mine) if mine else None
            row[f"{system}_runs"] = [s.value for s in mine]
            cpu = [s.extra["cpu_s_per_gb"] for s in mine if "cpu_s_per_gb" in s.extra]
            row[f"{system}_cpu_s_per_gb"] = statistics.median(cpu) if cpu else None
            achieved = [s.extra["achieved"] for s in mine if "achieved" in s.extra]
            row[f"{system}_achieved"] = statistics.median(achieved) if achieved else None
        row["ratio"] = (row["loglake"] / row["kafka"]
                        if row["loglake"] is not None and row["kafka"] else None)
        rows.append(row)
    return rows


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def print_tables(rows: list[dict[str, Any]]) -> None:
    throughput = [r for r in rows if r["figure"].startswith(("produce", "consume"))]
    latency = [r for r in rows if not r["figure"].startswith(("produce", "consume"))]
    print("\nThroughput (records/s, median) and brokers' CPU s per GB of payload")
    print(format_table(
        ["figure", "loglake", "kafka", "loglake/kafka", "loglake CPU s/GB", "kafka CPU s/GB",
         "CPU ratio"],
        [[r["figure"], _fmt(r["loglake"]), _fmt(r["kafka"]), _fmt(r["ratio"], 2),
          _fmt(r["loglake_cpu_s_per_gb"], 1), _fmt(r["kafka_cpu_s_per_gb"], 1),
          _fmt(r["loglake_cpu_s_per_gb"] / r["kafka_cpu_s_per_gb"]
               if r["loglake_cpu_s_per_gb"] and r["kafka_cpu_s_per_gb"] else None, 2)]
         for r in throughput]))
    print("\nLatency, acks=all (ms, median over runs; lower is better)")
    print(format_table(
        ["figure", "loglake", "kafka", "loglake/kafka", "achieved loglake / kafka (rec/s)"],
        [[r["figure"], _fmt(r["loglake"], 1), _fmt(r["kafka"], 1), _fmt(r["ratio"], 2),
          f"{_fmt(r['loglake_achieved'])} / {_fmt(r['kafka_achieved'])}"
          if r["loglake_achieved"] else "-"]
         for r in latency]))


def profile_loglake(dev: DevCluster, system: System, args: argparse.Namespace, log_dir: Path,
                    output: Path) -> list[dict[str, Any]]:
    """One extra acks=all 100 B produce run on loglake with py-spy on each broker."""
    topic = "profile-100-a"
    system.create_topic(topic, partitions=PARTITIONS, replication_factor=3,
                        configs={"min.insync.replicas": "2"})
    pids = system.pids()
    output.mkdir(parents=True, exist_ok=True)
    log(f"profiling loglake brokers {pids} during an acks=all 100 B produce run")
    with contextlib.ExitStack() as stack:
        recorders = [stack.enter_context(PySpyRecorder(pid, output / f"broker-{pid}.txt"))
                     for pid in pids]
        producer_perf(system, topic, records=args.records_100, size=100, acks="all",
                      batching=DEFAULT_BATCHING, throughput=-1, timeout=args.phase_timeout,
                      log_dir=log_dir, label=f"{topic}-produce")
    summaries = []
    for pid, recorder in zip(pids, recorders, strict=True):
        summary = summarise(recorder.output)
        summaries.append({"pid": pid, **asdict(summary)})
        print(f"\npy-spy, loglake broker pid {pid} ({summary.total_samples} samples, GIL held)")
        for entry in summary.own[:10]:
            print(f"  {entry.percent:5.1f}% own        {entry.function} ({entry.file})")
        for entry in summary.inclusive[:10]:
            print(f"  {entry.percent:5.1f}% inclusive  {entry.function} ({entry.file})")
    delete_topic(system.bootstrap, topic)
    return summaries


@contextlib.contextmanager
def clusters(base: Path) -> Iterator[tuple[DevCluster, KafkaPeer, dict[str, System]]]:
    with zookeeper(base / "zk") as zk:
        log("starting a 3-broker loglake cluster and a 3-broker Apache Kafka "
            f"{KAFKA_VERSION} cluster on one ZooKeeper")
        with DevCluster(base / "loglake", brokers=3, zookeeper=zk.hosts,
                        broker_overrides=LOGLAKE_BENCH_OVERRIDES) as dev, \
                KafkaPeer(base / "kafka", zookeeper=zk.hosts, brokers=3) as peer:
            systems = {
                "loglake": System("loglake", dev.bootstrap_servers,
                                  lambda: [s.pid for s in dev.status()
                                           if s.role == "broker" and s.alive],
                                  dev.create_topic),
                "kafka": System("kafka", peer.bootstrap_servers, peer.pids, peer.create_topic),
            }
            yield dev, peer, systems


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records-100", type=int, default=1_000_000,
                        help="records per 100 B produce run")
    parser.add_argument("--records-1k", type=int, default=300_000,
                        help="records per 1 KB produce run")
    parser.add_argument("--rates", type=lambda text: [int(x) for x in text.split(",")],
                        default=[10_000, 50_000, 100_000])
    parser.add_argument("--latency-seconds", type=int, default=15)
    parser.add_argument("--warmup-records", type=int, default=200_000)
    parser.add_argument("--e2e-records", type=int, default=3000)
    parser.add_argument("--phase-timeout", type=float, default=300.0)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--results-dir", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    if args.runs < 1 or args.records_100 < 1 or args.records_1k < 1:
        parser.error("--runs and record counts must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not jvm.available("kafka"):
        raise BenchmarkError("the Apache Kafka jars are not fetched: run "
                             "`python -m loglake.jvm fetch kafka` (./run bench-vs-kafka does)")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    started = time.monotonic()
    samples: list[Sample] = []
    profile: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="loglake-vs-kafka-") as tmp:
        base = Path(tmp)
        log_dir = base / "tools"
        with clusters(base) as (dev, _peer, systems):
            warm_up(systems, args, log_dir)
            if not args.skip_throughput:
                throughput_phase(systems, args, log_dir, samples)
            if not args.skip_latency:
                latency_phase(systems, args, log_dir, samples)
            rows = summarise_samples(samples)
            print_tables(rows)  # before profiling: a failing profile must not lose them
            if args.profile:
                profile = profile_loglake(dev, systems["loglake"], args, log_dir,
                                          args.results_dir / f"vs-kafka-profile-{stamp}")
    command = "python bench/vs_kafka.py " + " ".join(sys.argv[1:] if argv is None else argv)
    write_results(args.results_dir, f"vs-kafka-{stamp}", {
        "command": command.strip(), "machine": machine_info(), "kafka_version": KAFKA_VERSION,
        "runs": args.runs, "records_100": args.records_100, "records_1k": args.records_1k,
        "rates": args.rates, "latency_seconds": args.latency_seconds,
        "elapsed_s": round(time.monotonic() - started, 1),
        "figures": rows, "samples": [asdict(s) for s in samples], "profile": profile})
    return 0


if __name__ == "__main__":
    run_main(main)
