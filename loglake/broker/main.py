"""``loglake broker start``: run one broker process until SIGTERM/SIGINT.

Start-up waits for ZooKeeper as long as it takes (see :meth:`Broker.start`); a SIGTERM during
that wait ends the process cleanly. Shutdown on SIGTERM is orderly: stop accepting, close
connections, close every log (flush, recovery point, clean-shutdown marker), close the ZooKeeper
session (the ephemeral broker znode disappears at once instead of after the session timeout).
A start-up failure (e.g. another live broker holds our broker.id) closes what was opened and
exits with status 1 and a one-line message.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from pathlib import Path

from loglake.broker.broker import Broker
from loglake.broker.server import KafkaServer
from loglake.config import BrokerConfig, read_properties

log = logging.getLogger("loglake.broker")


async def run(config: BrokerConfig) -> None:
    broker = Broker(config)
    server = KafkaServer(broker.services, request_metrics=broker.metrics.requests,
                         connection_metrics=broker.metrics.connections)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    starting = asyncio.ensure_future(broker.start())
    stop_requested = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, stop_requested}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        log.info("broker %d: stop requested during start-up", config.broker_id)
        broker.stopping = True  # ends the start-up waits (they poll it)
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await starting
        await broker.stop()
        log.info("broker %d stopped", config.broker_id)
        return
    stop_requested.cancel()
    if starting.exception() is not None:
        with contextlib.suppress(Exception):
            await broker.stop()
        starting.result()  # raises: main reports it (LoglakeError: one line, exit status 1)
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
