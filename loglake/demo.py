"""``loglake demo``: the main job on the embedded default, end to end, in about ten seconds.

Starts a local ZooKeeper and broker (``loglake dev up``), creates a topic, produces sample
traffic with the SDK (keyed, with headers, idempotent, acks=all), consumes it back, checks that
every record arrived exactly once and in order per partition, prints what happened, and shuts
everything down (``loglake dev down``) even when a step fails. Data stays in ``--data`` so a
second run shows the log growing across restarts.
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path

from loglake.client import Admin, BrokerError, Consumer, Producer
from loglake.dev import cluster

TOPIC = "demo.clicks"
PARTITIONS = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="run the end-to-end demo on a local cluster")
    parser.add_argument("--data", type=Path, default=Path("demo-data"),
                        help="cluster data directory (default: ./demo-data)")
    parser.add_argument("--base-port", type=int, default=19092,
                        help="first broker port (ZooKeeper uses a port derived from it)")
    parser.add_argument("--records", type=int, default=10_000, help="records to produce")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    print(f"==> starting ZooKeeper and a broker in {args.data}")
    info = cluster.up(args.data, brokers=1, base_port=args.base_port)
    for line in info.summary_lines():
        print(f"    {line}")
    try:
        _traffic(info.bootstrap_servers, args.records)
    finally:
        print("==> shutting the cluster down")
        cluster.down(args.data)
    print("==> demo finished")
    return 0


def _traffic(bootstrap: str, count: int) -> None:
    with Admin(bootstrap) as admin:
        try:
            admin.create_topic(TOPIC, partitions=PARTITIONS,
                               config={"segment.bytes": str(256 * 1024)})
            print(f"==> created topic {TOPIC} with {PARTITIONS} partitions")
        except BrokerError as exc:
            if "already exists" not in str(exc):
                raise
            print(f"==> topic {TOPIC} already exists (data kept from an earlier run)")
    with Consumer(bootstrap) as probe:
        before = {p: probe.watermarks(TOPIC, p)[1] for p in range(PARTITIONS)}

    started = time.monotonic()
    with Producer(bootstrap, compression="lz4") as producer:
        for i in range(count):
            producer.send(TOPIC, f'{{"click": {i}, "page": "/p/{i % 17}"}}'.encode(),
                          key=f"user-{i % 50}".encode(), headers=[("source", b"demo")])
        producer.flush(30)
    elapsed = time.monotonic() - started
    print(f"==> produced {count} records with the SDK (acks=all, idempotent, lz4) "
          f"in {elapsed:.2f} s ({count / max(elapsed, 1e-9):,.0f} records/s)")

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
    exactly_once = sorted(clicks) == list(range(count))
    print(f"==> every record exactly once: {exactly_once}; order kept per partition: {in_order}")
    if not (exactly_once and in_order):
        raise RuntimeError("demo check failed: records lost, duplicated or reordered")
