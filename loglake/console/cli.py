"""``loglake console [--zookeeper HOST:PORT[/chroot]] [--bootstrap-server ...] [--host H]
[--port P] [--command-config FILE] [--basic-auth [--max-login-failures N]
[--max-login-failures-per-user N] [--login-failure-window SECONDS]] [--certfile PEM
[--keyfile PEM]]``: serve the web console
until interrupted.

``--zookeeper`` / ``--bootstrap-server`` resolve as every tool's (:mod:`loglake.addresses`:
flag, environment, the profile of ``loglake dev up``); without ``--bootstrap-server`` the
console reads the registered brokers from ZooKeeper. It listens on loopback by default
(``--host 127.0.0.1``). Without ``--basic-auth`` the console has no login: whoever reaches it
acts with the ``--command-config`` account (and changes ACLs in ZooKeeper), so expose it only
behind something that authenticates. With ``--basic-auth`` every page asks for the name and
password of a SCRAM user of the cluster and the console acts as that user (SASL SCRAM to the
brokers, which apply their ACLs; :mod:`loglake.console.login`); failed logins are limited per
client address (``--max-login-failures`` within ``--login-failure-window``) and per user name
(``--max-login-failures-per-user``): HTTP 429 with ``Retry-After``. ``--certfile`` (PEM
certificate chain, with the key unless ``--keyfile``) serves HTTPS. Prints
``console: http(s)://HOST:PORT/`` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from loglake import addresses
from loglake.basic_auth import (
    FAILURE_WINDOW_S,
    MAX_FAILURES_PER_ADDRESS,
    MAX_FAILURES_PER_USER,
    LoginLimits,
    warn_plaintext_login,
)
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
    parser.add_argument("--basic-auth", action="store_true",
                        help="require HTTP Basic logins of the cluster's SCRAM users and act "
                        "as the logged-in user towards the brokers")
    parser.add_argument("--max-login-failures", type=int, default=MAX_FAILURES_PER_ADDRESS,
                        metavar="N", help="with --basic-auth: failed logins allowed per client "
                        "address within --login-failure-window before further attempts get "
                        f"HTTP 429 (default: {MAX_FAILURES_PER_ADDRESS})")
    parser.add_argument("--max-login-failures-per-user", type=int,
                        default=MAX_FAILURES_PER_USER, metavar="N",
                        help="with --basic-auth: failed logins allowed per user name (from any "
                        f"address) within the window (default: {MAX_FAILURES_PER_USER})")
    parser.add_argument("--login-failure-window", type=float, default=FAILURE_WINDOW_S,
                        metavar="SECONDS", help="the window of --max-login-failures "
                        f"(default: {FAILURE_WINDOW_S:g})")
    parser.add_argument("--certfile", default=None, metavar="PEM",
                        help="serve HTTPS with this certificate chain (PEM)")
    parser.add_argument("--keyfile", default=None, metavar="PEM",
                        help="the private key of --certfile (default: in --certfile)")
    parser.set_defaults(handler=run_console)


def run_console(args: argparse.Namespace) -> int:
    import uvicorn

    from loglake.client.security import command_config_path
    from loglake.console.app import create_app

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be within 0..65535, got {args.port}")
    if args.keyfile and not args.certfile:
        raise ValueError("--keyfile needs --certfile")
    for path in (args.certfile, args.keyfile):
        if path and not os.path.isfile(path):
            raise ValueError(f"no such file: {path}")
    limits = LoginLimits(per_address=args.max_login_failures,
                         per_user=args.max_login_failures_per_user,
                         window_s=args.login_failure_window)
    zookeeper = addresses.zookeeper(args.zookeeper)
    from_profile = (args.bootstrap_server is None
                    and addresses.resolve("zookeeper", args.zookeeper).source == "profile")
    command_config = command_config_path(args.command_config,
                                         bootstrap_from_profile=from_profile)
    app = create_app(zookeeper, bootstrap=args.bootstrap_server, command_config=command_config,
                     basic_auth=args.basic_auth, login_limits=limits)
    sock, where = http_socket(args.host, args.port)
    tls = {} if not args.certfile else {
        "ssl_certfile": args.certfile, "ssl_keyfile": args.keyfile or args.certfile}
    # proxy_headers off: a client's address is its TCP peer (the login limits count failures
    # per address; uvicorn would otherwise take X-Forwarded-For from any loopback client)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            proxy_headers=False, **tls)
    server = uvicorn.Server(config)
    scheme = "https" if args.certfile else "http"
    login = ", login: SCRAM users" if args.basic_auth else ""
    print(f"console: {scheme}://{where}/  (ZooKeeper {zookeeper}{login})", flush=True)
    warn_plaintext_login("console", tls=bool(args.certfile), basic_auth=args.basic_auth)
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        sock.close()
    return 0
