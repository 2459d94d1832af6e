"""Latency of each transaction-coordinator step, with raw requests and no records.

Run from the repository root with the project's virtualenv::

    python bench/txn_steps.py [--transactions 200] [--partitions 1,3]

One fresh dev cluster (real ZooKeeper + three broker processes on loopback) and one topic with
3 partitions, replication factor 3 and ``min.insync.replicas=2``. Over one connection to the
transaction coordinator of a new transactional id (FindCoordinator key type 1, then
InitProducerId), ``--transactions`` empty transactions per partition count N
(``--partitions``), each AddPartitionsToTxn v3 (N partitions) then EndTxn v3 (commit), one
after the other, each request timed from send to answer. What the steps cost:

* AddPartitionsToTxn: one ZooKeeper write (Empty/CompleteCommit -> Ongoing);
* EndTxn: the PrepareCommit write, one WriteTxnMarkers request per leader (each marker waits
  for acks=all like a produce), then the CompleteCommit write -- the broker answers once the
  transaction completed (coordinator.py).

For scale, the same number of ZooKeeper ``set`` calls from this process (kazoo) on a scratch
znode. Results (p50/p99 in ms per step) are printed as a table on stdout and written as JSON to
``bench/results/txn-steps-<UTC timestamp>.json``. Every loop is bounded by its count and every
request by ``--request-timeout``; the harness stops exactly the processes it started.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode
from measure import BenchmarkError, format_table, log, percentile, run_main, write_results
from produce_consume import machine_info

from loglake.broker.connection import BrokerConnection
from loglake.dev.harness import DevCluster

PARTITIONS = 3
RESULTS_DIR = Path(__file__).resolve().parent / "results"
FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN = 10, 22, 24, 26


def zookeeper_sets(hosts: str, count: int) -> list[float]:
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=20)
    try:
        path = f"/bench-txn-steps-{uuid.uuid4().hex[:8]}"
        client.create(path, b"")
        took = []
        for _ in range(count):
            began = time.perf_counter()
            client.set(path, b"x" * 300)  # about one transaction's JSON document
            took.append(time.perf_counter() - began)
        client.delete(path)
        return took
    finally:
        client.stop()
        client.close()


async def connect_coordinator(dev: DevCluster, transactional_id: str,
                              timeout: float) -> BrokerConnection:
    deadline = time.monotonic() + 60
    host, _, port = dev.bootstrap_servers.split(",")[0].rpartition(":")
    while time.monotonic() < deadline:
        probe = BrokerConnection(host, int(port), client_id="bench", timeout=timeout)
        try:
            answer = await probe.request(FIND_COORDINATOR, 3,
                                         {"key": transactional_id, "key_type": 1})
        finally:
            await probe.close()
        if answer.error_code == ErrorCode.none:
            return BrokerConnection(str(answer.host), int(answer.port), client_id="bench",
                                    timeout=timeout)
        await asyncio.sleep(0.2)
    raise BenchmarkError(f"no transaction coordinator for {transactional_id} within 60 s")


async def measure(dev: DevCluster, topic: str, transactions: int, counts: Sequence[int],
                  timeout: float) -> dict[str, list[float]]:
    transactional_id = f"bench-steps-{uuid.uuid4().hex[:8]}"
    connection = await connect_coordinator(dev, transactional_id, timeout)
    try:
        deadline = time.monotonic() + 60
        while True:
            init = await connection.request(INIT_PRODUCER_ID, 4, {
                "transactional_id": transactional_id,
                "transaction_timeout": datetime.timedelta(seconds=60),
                "producer_id": -1, "producer_epoch": -1})
            if init.error_code == ErrorCode.none:
                break
            if time.monotonic() > deadline:
                raise BenchmarkError(f"InitProducerId: {init.error_code!r}")
            await asyncio.sleep(0.2)
        producer = {"producer_id": init.producer_id, "producer_epoch": init.producer_epoch}
        steps: dict[str, list[float]] = {}
        for count in counts:
            add_body: dict[str, Any] = {
                "v3_and_below_transactional_id": transactional_id,
                "v3_and_below_producer_id": init.producer_id,
                "v3_and_below_producer_epoch": init.producer_epoch,
                "v3_and_below_topics": [{"name": topic, "partitions": list(range(count))}]}
            end_body = {"transactional_id": transactional_id, **producer, "committed": True}
            for _ in range(transactions):
                began = time.perf_counter()
                added = await connection.request(ADD_PARTITIONS, 3, add_body)
                middle = time.perf_counter()
                ended = await connection.request(END_TXN, 3, end_body)
                done = time.perf_counter()
                errors = [p.partition_error_code for t in added.results_by_topic_v3_and_below
                          for p in t.results_by_partition]
                if any(e != ErrorCode.none for e in errors) or ended.error_code != ErrorCode.none:
                    raise BenchmarkError(f"AddPartitionsToTxn {errors}, EndTxn "
                                         f"{ended.error_code!r}")
                steps.setdefault(f"AddPartitionsToTxn ({count} partition(s))", []).append(
                    middle - began)
                steps.setdefault(f"EndTxn commit ({count} partition(s))", []).append(
                    done - middle)
                steps.setdefault(f"whole transaction ({count} partition(s))", []).append(
                    done - began)
        return steps
    finally:
        await connection.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=200)
    parser.add_argument("--partitions", default="1,3",
                        help=f"comma-separated partition counts per transaction (1..{PARTITIONS})")
    parser.add_argument("--request-timeout", type=float, default=30.0)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.partitions.split(",")]
    if args.transactions < 1 or not all(1 <= c <= PARTITIONS for c in counts):
        raise BenchmarkError(f"--transactions >= 1, partition counts in 1..{PARTITIONS}")
    work = Path(tempfile.mkdtemp(prefix="loglake-bench-txn-steps-"))
    try:
        with DevCluster(work / "dev", brokers=3) as dev:
            topic = f"bench-steps-{uuid.uuid4().hex[:8]}"
            dev.create_topic(topic, partitions=PARTITIONS, replication_factor=3,
                             configs={"min.insync.replicas": "2"})
            dev.wait_topic_ready(topic, partitions=PARTITIONS, timeout=60)
            log(f"{args.transactions} ZooKeeper sets, then {args.transactions} empty "
                f"transactions per partition count {counts}")
            steps = {"ZooKeeper set (kazoo, this process)":
                     zookeeper_sets(dev.zookeeper_hosts, args.transactions)}
            steps.update(asyncio.run(measure(dev, topic, args.transactions, counts,
                                             args.request_timeout)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {name: {"p50_ms": percentile(sorted(took), 0.5) * 1000,
                      "p99_ms": percentile(sorted(took), 0.99) * 1000, "count": len(took)}
               for name, took in steps.items()}
    print(format_table(["step", "p50 ms", "p99 ms"],
                       [[name, f"{s['p50_ms']:.2f}", f"{s['p99_ms']:.2f}"]
                        for name, s in summary.items()]))
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    write_results(args.results_dir, f"txn-steps-{stamp}", {
        "machine": machine_info(), "config": {k: str(v) for k, v in vars(args).items()},
        "steps": summary})
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    run_main(main)
