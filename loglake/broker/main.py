"""``loglake broker start``: run one broker process until SIGTERM/SIGINT.

Shutdown on SIGTERM is orderly: stop accepting, close connections, close every log (flush,
recovery point, clean-shutdown marker), close the ZooKeeper session (the ephemeral broker znode
disappears at once instead of after the session timeout).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from loglake.broker.broker import Broker
from loglake.broker.server import KafkaServer
from loglake.config import BrokerConfig, read_properties

log = logging.getLogger("loglake.broker")


async def run(config: BrokerConfig) -> None:
    broker = Broker(config)
    server = KafkaServer(broker)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await broker.start()
    await server.start()
    log.info("broker %d started (cluster %s)", config.broker_id, broker.cluster_id)
    await stop.wait()
    log.info("broker %d shutting down", config.broker_id)
    await server.stop()
    await broker.stop()
    log.info("broker %d stopped", config.broker_id)


def register(subparsers: argparse._SubParsersAction) -> None:
    broker = subparsers.add_parser("broker", help="run a broker process")
    commands = broker.add_subparsers(dest="broker_command", required=True)
    start = commands.add_parser("start", help="start a broker in the foreground")
    start.add_argument("--config", type=Path, help="server.properties file")
    start.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="set or replace a server.properties entry")
    start.set_defaults(handler=_start)


def _start(args: argparse.Namespace) -> int:
    props = read_properties(args.config) if args.config else {}
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--override expects KEY=VALUE, got {item!r}")
        props[key.strip()] = value.strip()
    config = BrokerConfig.from_properties(props)
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s broker-{config.broker_id} %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    asyncio.run(run(config))
    return 0
