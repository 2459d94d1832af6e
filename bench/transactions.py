"""Transactional produce throughput against the same producer without transactions.

Run from the repository root with the project's virtualenv::

    python bench/transactions.py [--runs 3] [--records 100000] [--sizes 100,1000]

One fresh dev cluster (real ZooKeeper + three broker processes on loopback); every topic has
replication factor 3, ``min.insync.replicas=2`` and 3 partitions. For each transaction size S
(``--sizes``, records per transaction) and each run, three phases on new topics, in rotating
order so no mode always runs first, each producing ``--records`` records of ``--record-size``
bytes with confluent-kafka (acks=all, idempotent, ``linger.ms`` 5):

* ``txn``: a transactional producer; ``records / S`` transactions of S records each (records
  round-robin over the partitions), each ``begin_transaction`` .. ``commit_transaction``;
* ``flush``: the same producer settings without a transactional id, ``flush()`` after every S
  records (the same synchronisation points as the commits, without markers and coordinator);
* ``stream``: the same producer without transactions and without intermediate flushes.

The clock runs from the first ``produce()`` until the last commit (or flush) returns. After each
phase the partitions' read_committed end offsets must cover every record sent (a transaction
adds one marker offset per partition it touched). Results: medians per (S, mode) in records/s
and transactions/s, plus the ratio to ``stream`` and ``flush`` of the same S, printed as a table
on stdout (progress on stderr) and written as JSON to
``bench/results/transactions-<UTC timestamp>.json``.

Every loop is bounded by the record count and ``--phase-timeout``; the harness stops exactly
the processes it started.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from measure import BenchmarkError, Progress, format_table, log, run_main, write_results
from produce_consume import machine_info

from loglake.dev.harness import DevCluster

PARTITIONS = 3
MODES = ("txn", "flush", "stream")
RESULTS_DIR = Path(__file__).resolve().parent / "results"


def create_topic(dev: DevCluster, label: str) -> str:
    topic = f"bench-{label}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": dev.bootstrap_servers})
    futures = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS,
                                            replication_factor=3,
                                            config={"min.insync.replicas": "2"})])
    futures[topic].result(timeout=60)
    dev.wait_topic_ready(topic, partitions=PARTITIONS, timeout=60)
    return topic


def committed_end(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-txn-check",
                         "isolation.level": "read_committed"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                                  cached=False)[1]
                   for p in range(PARTITIONS))
    finally:
        consumer.close()


def run_phase(dev: DevCluster, mode: str, size: int, records: int, payload: bytes,
              timeout: float) -> dict[str, float]:
    topic = create_topic(dev, f"{mode}-{size}")
    settings: dict[str, Any] = {"bootstrap.servers": dev.bootstrap_servers, "acks": "all",
                                "enable.idempotence": True, "linger.ms": 5,
                                "compression.type": "none", "batch.num.messages": 10_000,
                                "queue.buffering.max.messages": 1_000_000}
    if mode == "txn":
        settings["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    producer = Producer(settings)
    if mode == "txn":
        producer.init_transactions(30)
    transactions = records // size
    progress = Progress(f"{mode} S={size}", records)
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    sent = 0
    for _ in range(transactions):
        if time.monotonic() > deadline:
            raise BenchmarkError(f"{mode} S={size}: not done within {timeout:g}s")
        if mode == "txn":
            producer.begin_transaction()
        for i in range(size):
            producer.produce(topic, value=payload, partition=(sent + i) % PARTITIONS)
        sent += size
        if mode == "txn":
            producer.commit_transaction(60)
        elif mode == "flush":
            if producer.flush(60):
                raise BenchmarkError(f"{mode} S={size}: flush left records undelivered")
        else:
            producer.poll(0)
        progress.update(sent)
    if producer.flush(60):
        raise BenchmarkError(f"{mode} S={size}: records left undelivered")
    elapsed = time.monotonic() - started
    end = committed_end(dev.bootstrap_servers, topic)
    if end < sent:
        raise BenchmarkError(f"{mode} S={size}: read_committed end {end} < {sent} sent")
    return {"seconds": elapsed, "records_per_s": sent / elapsed,
            "transactions_per_s": transactions / elapsed}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--phase-timeout", type=float, default=600.0)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.runs < 1 or min(sizes) < 1 or args.records < max(sizes):
        raise BenchmarkError("--runs >= 1, sizes >= 1, --records >= the largest size")
    payload = b"x" * args.record_size
    work = Path(tempfile.mkdtemp(prefix="loglake-bench-txn-"))
    results: dict[str, list[dict[str, float]]] = {}
    try:
        with DevCluster(work / "dev", brokers=3) as dev:
            for run in range(args.runs):
                for size in sizes:
                    order = MODES[run % 3:] + MODES[:run % 3]
                    for mode in order:
                        log(f"run {run + 1}/{args.runs}: {mode}, {size} records/transaction")
                        result = run_phase(dev, mode, size, args.records, payload,
                                           args.phase_timeout)
                        results.setdefault(f"{size}/{mode}", []).append(result)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    medians: dict[str, dict[str, float]] = {}
    for key, runs in results.items():
        medians[key] = {field: statistics.median(r[field] for r in runs)
                        for field in ("records_per_s", "transactions_per_s")}
    for key, median in medians.items():
        size, mode = key.split("/")
        stream = medians[f"{size}/stream"]["records_per_s"]
        flush = medians[f"{size}/flush"]["records_per_s"]
        rows.append([size, mode, f"{median['records_per_s']:,.0f}",
                     f"{median['transactions_per_s']:,.1f}" if mode != "stream" else "-",
                     f"{median['records_per_s'] / stream:.2f}",
                     f"{median['records_per_s'] / flush:.2f}"])
    print(format_table(["records/txn", "mode", "records/s", "txn (or flush)/s",
                        "vs stream", "vs flush"], rows))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = write_results(args.results_dir, f"transactions-{stamp}", {
        "started": datetime.now(UTC).isoformat(), "machine": machine_info(),
        "config": {k: str(v) for k, v in vars(args).items()},
        "runs": results, "medians": medians})
    log(f"results: {path}")  # write_results also says where on stdout
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    run_main(main)
