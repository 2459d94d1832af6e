"""Transactional produce throughput against the same producers without transactions.

Run from the repository root with the project's virtualenv::

    python bench/transactions.py [--runs 3] [--records 100000] [--sizes 100,1000]
                                 [--producers 1,4]

One fresh dev cluster (real ZooKeeper + three broker processes on loopback); every topic has
replication factor 3, ``min.insync.replicas=2`` and 3 partitions. For each transaction size S
(``--sizes``, records per transaction), each producer count P (``--producers``) and each run,
three phases on new topics, in rotating order so no mode always runs first. A phase starts P
confluent-kafka producers (acks=all, idempotent, ``linger.ms`` 5), each in its own thread, which
together produce ``--records`` records of ``--record-size`` bytes (``records / P`` each):

* ``txn``: transactional producers (each its own transactional id, initialised before the clock
  starts); ``records / S`` transactions of S records in all (records round-robin over the
  partitions), each ``begin_transaction`` .. ``commit_transaction``;
* ``flush``: the same producers without a transactional id, ``flush()`` after every S records
  (the same synchronisation points as the commits, without markers and coordinator);
* ``stream``: the same producers without transactions and without intermediate flushes.

Several producers matter because a transaction coordinator's throughput, like Kafka's, comes
from concurrent transactions: one producer waits for each commit before it begins the next.

Measured per phase: the wall time from the first ``produce()`` until the last producer's last
commit (or flush) returned; the duration of every ``commit_transaction()`` (``flush()`` in
``flush`` mode) call, whose p50/p99 over all producers is the *commit latency*; and the CPU time
(utime + stime from ``/proc``) of the three broker processes over the phase, per record sent.
After each phase the partitions' read_committed end offsets must cover every record sent (a
transaction adds one marker offset per partition it touched). Results: medians over the runs per
(S, P, mode), plus the ratio of records/s to ``stream`` and ``flush`` with the same S and P,
printed as a table on stdout (progress on stderr) and written as JSON to
``bench/results/transactions-<UTC timestamp>.json``.

Every loop is bounded by the record count and ``--phase-timeout``; the harness stops exactly
the processes it started.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from measure import (
    BenchmarkError,
    Progress,
    format_table,
    log,
    percentile,
    run_main,
    total_cpu_seconds,
    write_results,
)
from produce_consume import machine_info

from loglake.dev.harness import DevCluster

PARTITIONS = 3
BROKERS = 3
MODES = ("txn", "flush", "stream")
RESULTS_DIR = Path(__file__).resolve().parent / "results"
FIELDS = ("records_per_s", "transactions_per_s", "commit_p50_ms", "commit_p99_ms",
          "broker_cpu_us_per_record")


def create_topic(dev: DevCluster, label: str) -> str:
    topic = f"bench-{label}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": dev.bootstrap_servers})
    futures = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS,
                                            replication_factor=3,
                                            config={"min.insync.replicas": "2"})])
    futures[topic].result(timeout=60)
    dev.wait_topic_ready(topic, partitions=PARTITIONS, timeout=60)
    return topic


def broker_pids(dev: DevCluster) -> list[int]:
    pids = [process.pid for process in dev.status()
            if process.role == "broker" and process.alive]
    if len(pids) != BROKERS:
        raise BenchmarkError(f"{len(pids)} of {BROKERS} brokers are running")
    return pids


def committed_end(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-txn-check",
                         "isolation.level": "read_committed"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                                  cached=False)[1]
                   for p in range(PARTITIONS))
    finally:
        consumer.close()


class Worker(threading.Thread):
    """One producer of a phase: ``transactions`` rounds of ``size`` records; records the
    duration of every commit (or flush). Failures are kept in ``error`` for the main thread."""

    def __init__(self, producer: Producer, mode: str, topic: str, size: int,
                 transactions: int, payload: bytes, start: threading.Event,
                 deadline: float, progress: list[int]) -> None:
        super().__init__(daemon=True)
        self.producer, self.mode, self.topic, self.size = producer, mode, topic, size
        self.transactions, self.payload, self.start_event = transactions, payload, start
        self.deadline, self.progress = deadline, progress
        self.commit_seconds: list[float] = []
        self.error: BaseException | None = None
        self.finished = 0.0

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # handed to the main thread
            self.error = exc

    def _run(self) -> None:
        producer, size = self.producer, self.size
        self.start_event.wait()
        sent = 0
        for _ in range(self.transactions):
            if time.monotonic() > self.deadline:
                raise BenchmarkError(f"{self.mode} S={size}: not done in time")
            if self.mode == "txn":
                producer.begin_transaction()
            for i in range(size):
                producer.produce(self.topic, value=self.payload,
                                 partition=(sent + i) % PARTITIONS)
            sent += size
            if self.mode == "txn":
                began = time.monotonic()
                producer.commit_transaction(60)
                self.commit_seconds.append(time.monotonic() - began)
            elif self.mode == "flush":
                began = time.monotonic()
                if producer.flush(60):
                    raise BenchmarkError(f"flush S={size}: flush left records undelivered")
                self.commit_seconds.append(time.monotonic() - began)
            else:
                producer.poll(0)
            self.progress[0] += size  # one writer per slot: no lock needed for a progress line
        if producer.flush(60):
            raise BenchmarkError(f"{self.mode} S={size}: records left undelivered")
        self.finished = time.monotonic()


def run_phase(dev: DevCluster, mode: str, size: int, producers: int, records: int,
              payload: bytes, timeout: float) -> dict[str, float]:
    topic = create_topic(dev, f"{mode}-{size}-{producers}")
    settings: dict[str, Any] = {"bootstrap.servers": dev.bootstrap_servers, "acks": "all",
                                "enable.idempotence": True, "linger.ms": 5,
                                "compression.type": "none", "batch.num.messages": 10_000,
                                "queue.buffering.max.messages": 1_000_000}
    clients = []
    for _ in range(producers):
        config = dict(settings)
        if mode == "txn":
            config["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
        client = Producer(config)
        if mode == "txn":
            client.init_transactions(30)
        clients.append(client)
    transactions = records // size // producers
    start = threading.Event()
    deadline = time.monotonic() + timeout
    slots = [[0] for _ in clients]
    workers = [Worker(client, mode, topic, size, transactions, payload, start, deadline, slot)
               for client, slot in zip(clients, slots, strict=True)]
    for worker in workers:
        worker.start()
    pids = broker_pids(dev)
    progress = Progress(f"{mode} S={size} P={producers}", transactions * size * producers)
    cpu_before = total_cpu_seconds(pids)
    started = time.monotonic()
    start.set()
    while any(worker.is_alive() for worker in workers):
        if time.monotonic() > deadline + 120:
            raise BenchmarkError(f"{mode} S={size} P={producers}: workers hang")
        time.sleep(0.05)
        progress.update(sum(slot[0] for slot in slots))
    cpu = total_cpu_seconds(pids) - cpu_before
    for worker in workers:
        if worker.error is not None:
            raise BenchmarkError(f"{mode} S={size} P={producers}: {worker.error!r}")
    elapsed = max(worker.finished for worker in workers) - started
    sent = transactions * size * producers
    end = committed_end(dev.bootstrap_servers, topic)
    if end < sent:
        raise BenchmarkError(f"{mode} S={size} P={producers}: read_committed end {end} < "
                             f"{sent} sent")
    commits = sorted(s for worker in workers for s in worker.commit_seconds)
    return {"seconds": elapsed, "records": sent, "records_per_s": sent / elapsed,
            "transactions_per_s": transactions * producers / elapsed,
            "commit_p50_ms": percentile(commits, 0.5) * 1000 if commits else 0.0,
            "commit_p99_ms": percentile(commits, 0.99) * 1000 if commits else 0.0,
            "broker_cpu_us_per_record": cpu / sent * 1e6}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--producers", default="1,4",
                        help="comma-separated producer counts (parallel producers per phase)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="comma-separated subset of txn,flush,stream (ratios need all)")
    parser.add_argument("--phase-timeout", type=float, default=600.0)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    counts = [int(p) for p in args.producers.split(",")]
    modes = tuple(m for m in MODES if m in args.modes.split(","))
    if args.runs < 1 or min(sizes) < 1 or min(counts) < 1 or not modes \
            or args.records < max(sizes) * max(counts):
        raise BenchmarkError("--runs >= 1, sizes >= 1, producers >= 1, a known mode, "
                             "--records >= the largest size times the most producers")
    payload = b"x" * args.record_size
    work = Path(tempfile.mkdtemp(prefix="loglake-bench-txn-"))
    results: dict[str, list[dict[str, float]]] = {}
    try:
        with DevCluster(work / "dev", brokers=BROKERS) as dev:
            for run in range(args.runs):
                for size in sizes:
                    for producers in counts:
                        shift = run % len(modes)
                        for mode in modes[shift:] + modes[:shift]:
                            log(f"run {run + 1}/{args.runs}: {mode}, {size} records/"
                                f"transaction, {producers} producer(s)")
                            result = run_phase(dev, mode, size, producers, args.records,
                                               payload, args.phase_timeout)
                            results.setdefault(f"{size}/{producers}/{mode}", []).append(result)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {key: {f: statistics.median(r[f] for r in runs) for f in FIELDS}
               for key, runs in results.items()}
    def ratio(key: str, other: str) -> str:
        size_producers = key.rsplit("/", 1)[0]
        base = medians.get(f"{size_producers}/{other}")
        return (f"{medians[key]['records_per_s'] / base['records_per_s']:.2f}"
                if base else "-")

    rows: list[list[str]] = []
    for key, median in medians.items():
        size_text, producers_text, mode = key.split("/")
        timed = mode != "stream"
        rows.append([size_text, producers_text, mode, f"{median['records_per_s']:,.0f}",
                     f"{median['transactions_per_s']:,.1f}" if timed else "-",
                     f"{median['commit_p50_ms']:.1f}" if timed else "-",
                     f"{median['commit_p99_ms']:.1f}" if timed else "-",
                     f"{median['broker_cpu_us_per_record']:.1f}",
                     ratio(key, "stream"), ratio(key, "flush")])
    print(format_table(["records/txn", "producers", "mode", "records/s", "txn (or flush)/s",
                        "commit p50 ms", "commit p99 ms", "broker CPU us/record",
                        "vs stream", "vs flush"], rows))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = write_results(args.results_dir, f"transactions-{stamp}", {
        "started": datetime.now(UTC).isoformat(), "machine": machine_info(),
        "config": {k: str(v) for k, v in vars(args).items()},
        "runs": results, "medians": medians})
    log(f"results: {path}")  # write_results also says where on stdout
    return 0


if __name__ == "__main__":
    run_main(main)
