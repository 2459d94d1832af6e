"""``loglake tiering status [TOPIC] [--zookeeper HOST:PORT[/chroot]]``: tiering lag per partition.

``--zookeeper`` is resolved by :mod:`loglake.addresses` (flag, ``$LOGLAKE_ZOOKEEPER``, the
profile of ``loglake dev up``); the catalog is opened as a tool, so nothing is created in
ZooKeeper, and a chroot without a cluster is one error line naming the chroot to try.

Reads what partition leaders publish in ZooKeeper (``/loglake/tiering/<topic>/<p>``, see
catalog/zookeeper.py): the table's first offset and tiered end, the local log start, the high
watermark, and the lag: sealed offsets not yet in the Delta table and the age in seconds of the
oldest such segment; ``Quarantined``: batches the tierer could not decode and kept as
quarantined rows (broker/tier_writer.py; their offsets are a gap to consumers); while tiering
fails, ``Failures`` (in a row) and ``LastError``. One line per partition, like
``kafka-topics --describe``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from loglake import addresses
from loglake.catalog.zookeeper import ClusterCatalog, NoClusterError
from loglake.errors import LoglakeError, UnknownTopicError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tiering = subparsers.add_parser("tiering", help="tiered storage status of topics")
    commands = tiering.add_subparsers(dest="tiering_command", required=True)
    status = commands.add_parser("status", help="tiering lag per partition")
    status.add_argument("topic", nargs="?", help="one topic (default: all)")
    addresses.add_zookeeper_option(status)
    status.set_defaults(handler=tiering_status)


def tiering_status(args: argparse.Namespace) -> int:
    zookeeper = addresses.zookeeper(args.zookeeper)
    catalog = ClusterCatalog(zookeeper, timeout=10.0, mode="tool")
    try:
        catalog.start()
    except NoClusterError:
        catalog.stop()
        raise
    except Exception as exc:
        catalog.stop()
        raise LoglakeError(f"cannot reach ZooKeeper at {zookeeper}: {exc}") from None
    try:
        storage = catalog.storage()
        names = [args.topic] if args.topic else sorted(catalog.topic_names())
        if args.topic and catalog.topic(args.topic) is None:
            raise UnknownTopicError(f"Topic '{args.topic}' does not exist.")
        print(f"Storage: {storage[0] if storage else 'none (no broker tiers)'}")
        for name in names:
            meta = catalog.topic(name)
            if meta is None:
                continue
            status = catalog.tiering_status(name)
            for partition in sorted(meta.assignment):
                print(status_line(name, partition, status.get(partition)))
    finally:
        catalog.stop()
    return 0


def status_line(topic: str, partition: int, status: dict[str, Any] | None) -> str:
    """One partition's line of ``tiering status``."""
    if status is None:
        return f"Topic: {topic}\tPartition: {partition}\tnot tiered yet"

    def show(key: str) -> str:
        value = status.get(key)
        return "-" if value is None else str(value)

    failing = ""
    if status.get("failures"):
        failing = f"\tFailures: {status['failures']}\tLastError: {show('last_error')}"
    age = ""
    if status.get("updated_ms"):
        age = f"\tReported: {max(0.0, time.time() - status['updated_ms'] / 1000):.0f}s ago"
    return (
        f"Topic: {topic}\tPartition: {partition}\tLeader: {show('leader')}\t"
        f"TierStart: {show('tier_start')}\tTieredEnd: {show('tiered_end')}\t"
        f"LocalStart: {show('local_start')}\tHighWatermark: {show('high_watermark')}\t"
        f"LagOffsets: {show('lag_offsets')}\tLagSeconds: {show('lag_seconds')}\t"
        f"Quarantined: {show('quarantined')}{failing}{age}"
    )
