"""Produce/consume throughput over SASL_SSL (SCRAM-SHA-512) against PLAINTEXT, same broker,
same run.

Run from the repository root (``./run setup`` first; the project's virtualenv)::

    python bench/security.py [--runs 3] [--records 1000000] [--record-size 100]

One dev cluster (real ZooKeeper + one broker process) serves both listeners for the whole
invocation: ``PLAINTEXT`` on the broker's port and ``SASL_SSL`` on port + 100 (TLS 1.2+ with a
dev CA's certificate, SCRAM-SHA-512 for user ``bench`` whose credential is stored in ZooKeeper
as ``kafka-configs`` does; no authorizer, so the comparison is the transport and its
authentication, not ACL checks). Each run, for each protocol (the order alternates between
runs so neither side always goes first on a warmer broker):

1. **connect**: a new producer until its first Metadata answer (TCP, TLS handshake, SASL
   SCRAM exchange), ``--connects`` times; the median and the minimum over all runs are
   reported (the minimum is the handshake cost; the median also shows a busy broker);
2. **produce**: confluent-kafka, acks=1, no compression, the batching of
   ``bench/produce_consume.py``, to a fresh one-partition topic; timed from the first
   ``produce()`` to the end of ``flush()``; every delivery error fails the run;
3. **consume**: ``kcat -C -o beginning -c <records> -e`` over the same protocol, printing each
   offset; lines counted, last offset checked; timed from starting kcat to its exit;
4. broker CPU seconds (utime + stime from /proc) around each phase.

Results: medians over the runs per protocol and phase, the SASL_SSL / PLAINTEXT ratios (of the
medians, and the median of each run's own ratio: both protocols of a run ran back to back, so
that one is less sensitive to load that changes between runs), as
tables on stdout (progress on stderr) and as JSON in ``bench/results/security-<UTC time>.json``.
Everything runs on loopback; every phase is bounded by ``--phase-timeout``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from measure import (
    BenchmarkError,
    PhaseResult,
    PhaseSummary,
    format_table,
    log,
    read_with_kcat,
    run_main,
    write_results,
)
from producing import ADMIN_TIMEOUT_S, timed_produce

from loglake.broker.security.scram_credentials import store_user_credential
from loglake.catalog.zookeeper import ClusterCatalog
from loglake.dev.certs import ensure_dev_certificates
from loglake.dev.harness import DevCluster

RESULTS_DIR = Path(__file__).resolve().parent / "results"
PROTOCOLS = ("PLAINTEXT", "SASL_SSL")
MECHANISM = "SCRAM-SHA-512"
USER = "bench"
SECURE_PORT_OFFSET = 100
"""The SASL_SSL listener's port: the broker's port + this (``{port:1}`` in dev overrides)."""


@dataclass(frozen=True)
class BenchConfig:
    """What one invocation measures; every field is a command-line option of the same name."""

    runs: int = 3
    records: int = 1_000_000
    record_size: int = 100
    connects: int = 5
    linger_ms: int = 5
    batch_num_messages: int = 10_000
    batch_size: int = 1_000_000
    queue_buffering_max_messages: int = 1_000_000
    phase_timeout: float = 600.0
    work_dir: Path | None = None
    keep_data: bool = False
    results_dir: Path = RESULTS_DIR

    def __post_init__(self) -> None:
        if min(self.runs, self.records, self.record_size, self.connects) < 1:
            raise ValueError("--runs, --records, --record-size and --connects must be >= 1")
        if self.phase_timeout <= 0:
            raise ValueError("--phase-timeout must be positive")


@dataclass(frozen=True)
class Endpoint:
    """How a client reaches the broker over one protocol (librdkafka settings)."""

    protocol: str
    bootstrap: str
    security: dict[str, str]

    def client(self, **settings: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **self.security, **settings}


def broker_overrides(certificates_dir: Path) -> dict[str, str]:
    """Both listeners on one broker; brokers talk PLAINTEXT among themselves (one broker)."""
    certificates = ensure_dev_certificates(certificates_dir)
    return {
        "listeners": "PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{port:1}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": MECHANISM,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certificates.broker),
    }


def endpoints(cluster: DevCluster, ca: Path, password: str) -> dict[str, Endpoint]:
    port = cluster.broker_port(1)
    secure = {"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM,
              "sasl.username": USER, "sasl.password": password, "ssl.ca.location": str(ca)}
    return {"PLAINTEXT": Endpoint("PLAINTEXT", f"127.0.0.1:{port}", {}),
            "SASL_SSL": Endpoint("SASL_SSL", f"127.0.0.1:{port + SECURE_PORT_OFFSET}", secure)}


def create_user(cluster: DevCluster, password: str) -> None:
    """Store ``bench``'s SCRAM-SHA-512 credential in ZooKeeper (as kafka-configs does)."""
    catalog = ClusterCatalog(cluster.zookeeper_connect, mode="tool")
    catalog.start()
    try:
        store_user_credential(catalog.entity_configs(), USER, MECHANISM, password)
    finally:
        catalog.stop()


def broker_pid(cluster: DevCluster) -> int:
    for process in cluster.status():
        if process.role == "broker" and process.id == 1 and process.alive:
            return process.pid
    raise BenchmarkError(f"broker 1 of the dev cluster in {cluster.data_dir} is not running")


def create_topic(endpoint: Endpoint, topic: str) -> None:
    """Create ``topic`` (one partition) and wait until it has a leader."""
    admin = AdminClient(endpoint.client())
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)],
                                  operation_timeout=ADMIN_TIMEOUT_S)
    futures[topic].result(timeout=ADMIN_TIMEOUT_S)
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while True:
        found = admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics.get(topic)
        if found is not None and found.error is None and found.partitions \
                and found.partitions[0].leader >= 0:
            return
        if time.monotonic() >= deadline:
            raise BenchmarkError(f"topic {topic} has no leader {ADMIN_TIMEOUT_S:g} s after "
                                 "creation")
        time.sleep(0.1)


def connect_seconds(endpoint: Endpoint, count: int) -> list[float]:
    """Seconds from a new producer to its first Metadata answer, ``count`` times."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        producer = Producer(endpoint.client())
        producer.list_topics(timeout=ADMIN_TIMEOUT_S)  # raises KafkaException on failure
        times.append(time.perf_counter() - started)
        producer.flush(1)
        del producer
    return times


def producer_settings(config: BenchConfig, endpoint: Endpoint) -> dict[str, Any]:
    return endpoint.client(**{
        "acks": "1", "compression.type": "none", "enable.idempotence": False,
        "linger.ms": config.linger_ms, "batch.num.messages": config.batch_num_messages,
        "batch.size": config.batch_size,
        "queue.buffering.max.messages": config.queue_buffering_max_messages,
        "delivery.report.only.error": True})


def kcat_consume(config: BenchConfig, endpoint: Endpoint, topic: str, pid: int,
                 stderr_path: Path) -> PhaseResult:
    """Read ``topic``'s partition 0 from the beginning with kcat; count and check offsets."""
    binary = shutil.which("kcat")
    if binary is None:
        raise BenchmarkError("kcat not found on PATH (Debian package kcat; ./run setup does)")
    command = [binary, "-C", "-b", endpoint.bootstrap, "-t", topic, "-p", "0",
               "-o", "beginning", "-c", str(config.records), "-e", "-q", "-f", "%o\n"]
    for key, value in endpoint.security.items():
        command += ["-X", f"{'sasl.mechanisms' if key == 'sasl.mechanism' else key}={value}"]
    return read_with_kcat(command, f"{endpoint.protocol} consume (kcat)", config.records,
                          config.record_size, config.phase_timeout, pid, stderr_path)


@dataclass
class ProtocolRun:
    """One protocol's phases in one run."""

    produce: PhaseResult
    consume: PhaseResult
    connect_s: list[float]


def run_protocol(config: BenchConfig, endpoint: Endpoint, topic: str, pid: int,
                 payload: bytes, run_dir: Path) -> ProtocolRun:
    connects = connect_seconds(endpoint, config.connects)
    log(f"  {endpoint.protocol} connect + first metadata: "
        f"{statistics.median(connects) * 1000:.1f} ms (median of {len(connects)})")
    create_topic(endpoint, topic)
    produced = timed_produce(producer_settings(config, endpoint), topic, payload,
                             config.records, label=f"{endpoint.protocol} produce", pids=[pid],
                             phase_timeout=config.phase_timeout)
    log(f"  {endpoint.protocol} produce: {produced.records_per_s:,.0f} rec/s, "
        f"broker CPU {produced.cpu_seconds:.2f} s")
    consumed = kcat_consume(config, endpoint, topic, pid,
                            run_dir / f"kcat-{endpoint.protocol}.stderr")
    log(f"  {endpoint.protocol} consume: {consumed.records_per_s:,.0f} rec/s, "
        f"broker CPU {consumed.cpu_seconds:.2f} s")
    return ProtocolRun(produced, consumed, connects)


# -- reporting ----------------------------------------------------------------------------------


def report(config: BenchConfig, runs: list[dict[str, ProtocolRun]], started: datetime
           ) -> dict[str, Any]:
    summaries = {(protocol, phase): PhaseSummary.of(
        f"{protocol}_{phase}", [getattr(run[protocol], phase) for run in runs])
        for protocol in PROTOCOLS for phase in ("produce", "consume")}
    connects = {protocol: [value * 1000 for run in runs for value in run[protocol].connect_s]
                for protocol in PROTOCOLS}
    connect_ms = {protocol: statistics.median(values) for protocol, values in connects.items()}
    connect_min_ms = {protocol: min(values) for protocol, values in connects.items()}
    rows = []
    for (protocol, phase), summary in summaries.items():
        cpu = summary.cpu_s_per_million
        rows.append([phase, protocol, f"{summary.records_per_s:,.0f}",
                     f"{summary.mb_per_s:,.1f}", "-" if cpu is None else f"{cpu:.2f}",
                     ", ".join(f"{value:,.0f}" for value in summary.all_records_per_s)])
    cpus = os.cpu_count()
    load = os.getloadavg()
    print(f"\nloglake over SASL_SSL ({MECHANISM}) vs PLAINTEXT, one broker, "
          f"{config.records:,} records of {config.record_size} B, median of {config.runs} "
          f"runs ({cpus} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}: "
          "other processes on the machine show up as run-to-run spread)\n")
    print(format_table(["phase", "protocol", "records/s", "MB/s", "broker CPU s / M records",
                        "each run (records/s)"], rows))
    ratios = {phase: summaries[("SASL_SSL", phase)].records_per_s
              / summaries[("PLAINTEXT", phase)].records_per_s for phase in ("produce", "consume")}
    paired = {phase: statistics.median(
        getattr(run["SASL_SSL"], phase).records_per_s
        / getattr(run["PLAINTEXT"], phase).records_per_s for run in runs)
        for phase in ("produce", "consume")}
    cpu_ratios = {}
    for phase in ("produce", "consume"):
        secure = summaries[("SASL_SSL", phase)].cpu_s_per_million
        plain = summaries[("PLAINTEXT", phase)].cpu_s_per_million
        cpu_ratios[phase] = secure / plain if secure and plain else None
    print()
    print(format_table(
        ["phase", "SASL_SSL / PLAINTEXT (records/s, of medians)",
         "median of per-run ratios", "SASL_SSL / PLAINTEXT (broker CPU per record)"],
        [[phase, f"{ratios[phase]:.2f}x", f"{paired[phase]:.2f}x",
          "-" if cpu_ratios[phase] is None else f"{cpu_ratios[phase]:.2f}x"]
         for phase in ("produce", "consume")]))
    print()
    print(format_table(["protocol", "connect + first Metadata: median ms", "min ms"],
                       [[protocol, f"{connect_ms[protocol]:.1f}",
                         f"{connect_min_ms[protocol]:.1f}"] for protocol in PROTOCOLS]))
    return {
        "started": started.isoformat(),
        "config": {key: str(value) if isinstance(value, Path) else value
                   for key, value in asdict(config).items()},
        "machine": {"cpus": cpus, "load_average": load,
                    "librdkafka": confluent_kafka.libversion()[0]},
        "mechanism": MECHANISM,
        "medians": {f"{protocol}_{phase}": asdict(summary)
                    for (protocol, phase), summary in summaries.items()},
        "ratios_records_per_s": ratios,
        "ratios_records_per_s_paired_median": paired,
        "ratios_broker_cpu": cpu_ratios,
        "connect_ms_median": connect_ms,
        "connect_ms_min": connect_min_ms,
        "runs": [{protocol: {"produce": result.produce.to_json(),
                             "consume": result.consume.to_json(),
                             "connect_s": result.connect_s}
                  for protocol, result in run.items()} for run in runs],
    }


# -- main ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> BenchConfig:
    defaults = BenchConfig()
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=defaults.runs,
                        help="runs to take the median of (default: %(default)s)")
    parser.add_argument("--records", type=int, default=defaults.records,
                        help="records per phase and protocol (default: %(default)s)")
    parser.add_argument("--record-size", type=int, default=defaults.record_size,
                        help="value bytes per record, null key (default: %(default)s)")
    parser.add_argument("--connects", type=int, default=defaults.connects,
                        help="connections timed per protocol and run (default: %(default)s)")
    parser.add_argument("--linger-ms", type=int, default=defaults.linger_ms,
                        help="producer linger.ms (default: %(default)s)")
    parser.add_argument("--batch-num-messages", type=int, default=defaults.batch_num_messages,
                        help="producer batch.num.messages (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size,
                        help="producer batch.size in bytes (default: %(default)s)")
    parser.add_argument("--queue-buffering-max-messages", type=int,
                        default=defaults.queue_buffering_max_messages,
                        help="producer queue.buffering.max.messages (default: %(default)s)")
    parser.add_argument("--phase-timeout", type=float, default=defaults.phase_timeout,
                        help="seconds any one phase may take (default: %(default)s)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="parent of the temporary directory (default: the system's)")
    parser.add_argument("--keep-data", action="store_true",
                        help="keep the temporary directory (cluster logs, segments)")
    parser.add_argument("--results-dir", type=Path, default=defaults.results_dir,
                        help="where the JSON results go (default: bench/results)")
    args = parser.parse_args(argv)
    return BenchConfig(
        runs=args.runs, records=args.records, record_size=args.record_size,
        connects=args.connects, linger_ms=args.linger_ms,
        batch_num_messages=args.batch_num_messages, batch_size=args.batch_size,
        queue_buffering_max_messages=args.queue_buffering_max_messages,
        phase_timeout=args.phase_timeout, work_dir=args.work_dir, keep_data=args.keep_data,
        results_dir=args.results_dir)


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    started = datetime.now(UTC)
    payload = bytes(index % 251 for index in range(config.record_size))
    work = Path(tempfile.mkdtemp(prefix="loglake-bench-security-", dir=config.work_dir))
    log(f"loglake security bench: {config.runs} runs x {config.records:,} records of "
        f"{config.record_size} B per protocol; working in {work}")
    runs: list[dict[str, ProtocolRun]] = []
    password = secrets.token_urlsafe(18)
    try:
        overrides = broker_overrides(work / "certs")
        log(f"  starting a dev cluster in {work / 'cluster'} (PLAINTEXT + SASL_SSL listeners)")
        with DevCluster(work / "cluster", brokers=1, broker_overrides=overrides) as cluster:
            create_user(cluster, password)
            pid = broker_pid(cluster)
            reach = endpoints(cluster, work / "certs" / "ca.pem", password)
            log(f"  broker pid {pid}: PLAINTEXT {reach['PLAINTEXT'].bootstrap}, SASL_SSL "
                f"{reach['SASL_SSL'].bootstrap}")
            for index in range(1, config.runs + 1):
                order = PROTOCOLS if index % 2 else tuple(reversed(PROTOCOLS))
                log(f"run {index}/{config.runs} ({' then '.join(order)})")
                run_dir = work / f"run-{index}"
                run_dir.mkdir(parents=True, exist_ok=True)
                runs.append({protocol: run_protocol(
                    config, reach[protocol], f"bench-{protocol.lower()}-{index}", pid, payload,
                    run_dir) for protocol in order})
    finally:
        if config.keep_data:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    document = report(config, runs, started)
    write_results(config.results_dir, f"security-{started:%Y%m%dT%H%M%SZ}", document)
    return 0


if __name__ == "__main__":
    run_main(main, also=(confluent_kafka.KafkaException,))
