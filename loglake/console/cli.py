"""``loglake console [--zookeeper HOST:PORT[/chroot]] [--bootstrap-server ...] [--host H]
[--port P] [--command-config FILE]``: serve the web console until interrupted.

``--zookeeper`` / ``--bootstrap-server`` resolve as every tool's (:mod:`loglake.addresses`:
flag, environment, the profile of ``loglake dev up``); without ``--bootstrap-server`` the
console reads the registered brokers from ZooKeeper. It listens on loopback by default
(``--host 127.0.0.1``); the console has no login of its own, so expose it only behind
something that authenticates. Prints ``console: http://HOST:PORT/`` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio

from loglake import addresses
from loglake.client.security import add_command_config_option
from loglake.listen import http_socket

DEFAULT_PORT = 8080


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("console", help="serve the web console")
    addresses.add_zookeeper_option(parser)
    parser.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT[,...]",
                        help="Kafka bootstrap servers (default: the brokers registered in "
                        "ZooKeeper)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on "
                        "(default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to listen on (0: any free port; default: {DEFAULT_PORT})")
    add_command_config_option(parser)
    parser.set_defaults(handler=run_console)


def run_console(args: argparse.Namespace) -> int:
    import uvicorn

    from loglake.client.security import command_config_path
    from loglake.console.app import create_app

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be within 0..65535, got {args.port}")
    zookeeper = addresses.zookeeper(args.zookeeper)
    from_profile = (args.bootstrap_server is None
                    and addresses.resolve("zookeeper", args.zookeeper).source == "profile")
    command_config = command_config_path(args.command_config,
                                         bootstrap_from_profile=from_profile)
    app = create_app(zookeeper, bootstrap=args.bootstrap_server, command_config=command_config)
    sock, where = http_socket(args.host, args.port)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    print(f"console: http://{where}/  (ZooKeeper {zookeeper})", flush=True)
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        sock.close()
    return 0
