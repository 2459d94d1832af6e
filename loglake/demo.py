"""``loglake demo``: the main job on the embedded default, end to end, in about a minute.

Starts a local ZooKeeper and three brokers (``loglake dev up``), creates a replicated topic
(RF=3, min.insync.replicas=2), produces sample traffic with the SDK (keyed, with headers,
idempotent, acks=all), SIGKILLs the leader of a partition and keeps producing while the cluster
fails over, restarts the killed broker and waits until it is back in sync, consumes everything
back, checks that every record arrived exactly once and in order per partition; then waits for
the tierer to move the sealed segments into the topic's Delta table and runs a Spark SQL query
over the topic, whose rows come partly from the Delta table and partly from the brokers' hot
tail, checking that it sees every record exactly once; last, runs the clean-up jobs and shows
their effect (loglake/demo_jobs.py: compaction of a profiles topic, retention of an events topic).
Between the failover and the query it shows transactions (loglake/demo_txn.py: atomic writes
over three partitions, aborts, a fenced zombie, read_committed vs read_uncommitted counts).
It prints what happened and shuts everything down (``loglake dev down``) even when a step
fails. Data stays in ``--data`` so a second run shows the log growing across restarts.
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path
from typing import TYPE_CHECKING

from loglake import demo_jobs, demo_schemas, demo_txn
from loglake.catalog.zookeeper import ClusterCatalog
from loglake.client import Admin, BrokerError, Consumer, Producer
from loglake.client.model import TopicInfo
from loglake.dev import cluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TOPIC = "demo.clicks"
PARTITIONS = 3
BROKERS = 3
# a short session timeout so the demo's failover takes seconds (the broker default is 18 s)
SEGMENT_BYTES = 64 * 1024  # small, so segments seal (and are tiered) within the demo
DEMO_BROKER_SETTINGS = {"zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": "6000"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="run the end-to-end demo on a local cluster")
    parser.add_argument("--data", type=Path, default=Path("demo-data"),
                        help="cluster data directory (default: ./demo-data)")
    parser.add_argument("--base-port", type=int, default=19092,
                        help="first broker port (ZooKeeper uses a port derived from it)")
    parser.add_argument("--records", type=int, default=10_000,
                        help="records to produce before and again during the failover")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    print(f"==> starting ZooKeeper and {BROKERS} brokers in {args.data}")
    info = cluster.up(args.data, brokers=BROKERS, base_port=args.base_port,
                      broker_overrides=DEMO_BROKER_SETTINGS, registry=True)
    for line in info.summary_lines():
        print(f"    {line}")
    try:
        _scenario(args.data, info.bootstrap_servers, args.records)
        demo_txn.run(info.bootstrap_servers, replicas=BROKERS)
        status = _wait_tiering(info.zookeeper_connect)
        from loglake.streaming.sql_cli import quiet_session

        spark = quiet_session("local[2]")
        try:
            _tiered_query(info.zookeeper_connect, spark, status)
            demo_jobs.run(info.bootstrap_servers, info.zookeeper_connect, spark,
                          replicas=BROKERS)
            if info.registry_url is not None:
                demo_schemas.run(info.bootstrap_servers, info.zookeeper_connect,
                                 info.registry_url, spark, replicas=BROKERS)
        finally:
            spark.stop()
    finally:
        print("==> shutting the cluster down")
        cluster.down(args.data)
    print("==> demo finished")
    return 0


def _show(info: TopicInfo) -> None:
    for p in info.partitions:
        print(f"    partition {p.partition}: leader {p.leader}, replicas {list(p.replicas)}, "
              f"isr {list(p.isr)}")


def _produce(bootstrap: str, first: int, count: int) -> float:
    started = time.monotonic()
    # batches stay below the demo topic's small segment.bytes (larger ones are refused)
    with Producer(bootstrap, compression="lz4", extra={"batch.size": "16384"}) as producer:
        for i in range(first, first + count):
            producer.send(TOPIC, f'{{"click": {i}, "page": "/p/{i % 17}"}}'.encode(),
                          key=f"user-{i % 50}".encode(), headers=[("source", b"demo")])
        producer.flush(60)
    return time.monotonic() - started


def _scenario(data: Path, bootstrap: str, count: int) -> None:
    with Admin(bootstrap) as admin:
        try:
            admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=BROKERS,
                               config={"min.insync.replicas": "2",
                                       "segment.bytes": str(SEGMENT_BYTES)})
            print(f"==> created topic {TOPIC}: {PARTITIONS} partitions, replication factor "
                  f"{BROKERS}, min.insync.replicas 2")
        except BrokerError as exc:
            if "already exists" not in str(exc):
                raise
            print(f"==> topic {TOPIC} already exists (data kept from an earlier run)")
        _wait_for_full_isr(admin, timeout=30)
        _show(admin.describe_topic(TOPIC))
        with Consumer(bootstrap) as probe:
            before = {p: probe.watermarks(TOPIC, p)[1] for p in range(PARTITIONS)}

        elapsed = _produce(bootstrap, 0, count)
        print(f"==> produced {count} records with the SDK (acks=all, idempotent, lz4) in "
              f"{elapsed:.2f} s ({count / max(elapsed, 1e-9):,.0f} records/s)")

        victim = admin.describe_topic(TOPIC).partitions[0].leader
        print(f"==> SIGKILL broker {victim}, the leader of partition 0, and keep producing")
        cluster.kill_broker(data, victim)
        elapsed = _produce(bootstrap, count, count)
        print(f"==> produced {count} more records during the failover in {elapsed:.2f} s")
        _show(admin.describe_topic(TOPIC))

        print(f"==> restarting broker {victim}; waiting until it is back in every ISR")
        cluster.start_broker(data, victim)
        _wait_for_full_isr(admin, timeout=60)
        _show(admin.describe_topic(TOPIC))

    total = 2 * count
    per_partition: dict[int, list[int]] = collections.defaultdict(list)
    clicks: list[int] = []
    first = None
    with Consumer(bootstrap) as consumer:
        for partition in range(PARTITIONS):
            consumer.assign(TOPIC, [partition], start=before[partition])
            for record in consumer.consume(timeout=3.0):
                per_partition[partition].append(record.offset)
                clicks.append(int((record.value or b"").split(b":")[1].split(b",")[0]))
                first = first or record
    print(f"==> consumed {len(clicks)} new records back")
    for partition in range(PARTITIONS):
        offsets = per_partition[partition]
        span = f"offsets {offsets[0]}..{offsets[-1]}" if offsets else "no new records"
        print(f"    partition {partition}: {len(offsets):>6} records, {span}")
    if first is not None:
        print(f"    first record: key={first.key!r} value={first.value!r} "
              f"headers={first.headers}")
    in_order = all(o == sorted(o) for o in per_partition.values())
    exactly_once = sorted(clicks) == list(range(total))
    print(f"==> every acknowledged record exactly once across the kill: {exactly_once}; "
          f"order kept per partition: {in_order}")
    if not (exactly_once and in_order):
        raise RuntimeError("demo check failed: records lost, duplicated or reordered")


def _wait_for_full_isr(admin: Admin, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = admin.describe_topic(TOPIC)
        if all(len(p.isr) == BROKERS and p.leader >= 0 for p in info.partitions):
            return
        time.sleep(0.5)
    raise RuntimeError(f"{TOPIC} did not reach a full ISR within {timeout:g} s")


def _wait_tiering(zookeeper: str) -> dict[int, dict[str, object]]:
    """Wait for the tierer to tier every sealed segment; the tiering status per partition."""
    print("==> waiting for the tierer to move sealed segments into the Delta table")
    catalog = ClusterCatalog(zookeeper)
    catalog.start()
    status: dict[int, dict[str, object]] = {}

    def probe() -> tuple[bool, str]:
        nonlocal status
        status = catalog.tiering_status(TOPIC)
        lag = sum(int(s.get("lag_offsets") or 0) for s in status.values())  # type: ignore[call-overload]
        return len(status) == PARTITIONS and all(
            s.get("tiered_end") and s.get("lag_offsets") == 0 for s in status.values()), \
            f"{len(status)} of {PARTITIONS} partitions reported, {lag} sealed offsets to go"

    try:
        storage = catalog.storage()
        demo_jobs.wait_until(probe, what="waiting for the tierer",
                             timeout=demo_jobs.TIERED_TIMEOUT_S, interval=0.5)
    finally:
        catalog.stop()
    print(f"    Delta tables under {storage[0] if storage else '?'}")
    for partition in range(PARTITIONS):
        entry = status.get(partition, {})
        tiered, high = entry.get("tiered_end") or 0, entry.get("high_watermark") or 0
        print(f"    partition {partition}: offsets [0, {tiered}) in Delta, "
              f"[{tiered}, {high}) only on the brokers")
    return status


def _tiered_query(zookeeper: str, spark: SparkSession,
                  status: dict[int, dict[str, object]]) -> None:
    """Count the topic with Spark SQL (Delta history + hot tail)."""
    print("==> Spark SQL over the topic: one view = Delta history (native Parquet) + hot tail")
    from loglake.streaming.sql_views import register_topics

    register_topics(spark, zookeeper=zookeeper, topics=[TOPIC])
    query = (f"SELECT partition, count(*) AS records, count(DISTINCT offset) AS distinct, "
             f"min(offset) AS first, max(offset) AS last FROM `{TOPIC}` "
             f"GROUP BY partition ORDER BY partition")
    print(f"    {query}")
    rows = spark.sql(query).collect()
    complete = True
    for row in rows:
        high = int(status.get(row["partition"], {}).get("high_watermark") or 0)  # type: ignore[call-overload]
        ok = row["records"] == row["distinct"] == row["last"] + 1 == high
        complete = complete and ok
        print(f"    partition {row['partition']}: {row['records']:>6} records, offsets "
              f"{row['first']}..{row['last']}, {row['distinct']} distinct")
    print(f"==> Spark saw every record of the topic exactly once across tier and tail: "
          f"{complete and len(rows) == PARTITIONS}")
    if not (complete and len(rows) == PARTITIONS):
        raise RuntimeError("demo check failed: the Spark SQL view misses or repeats records")
