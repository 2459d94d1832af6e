"""``loglake registry --zookeeper HOST:PORT[/chroot] [--host H] [--port P]
[--certfile PEM --keyfile PEM] [--basic-auth]``: serve the Schema Registry REST API.

Schemas live in the cluster's ZooKeeper (:mod:`loglake.catalog.schemas`), so any number of
instances on the same ZooKeeper serve the same ids and versions, and a restarted instance
loses nothing. ``--zookeeper`` resolves as every tool's (:mod:`loglake.addresses`); the
chroot must hold a loglake cluster.

Security: ``--certfile``/``--keyfile`` serve HTTPS (PEM; one file may hold both, as
``loglake dev up --security``'s ``broker.pem`` does); ``--basic-auth`` requires HTTP Basic
credentials of a SCRAM user of the cluster (:mod:`loglake.basic_auth`).

Prints ``schema.registry.url=<URL>`` once it listens; serves until interrupted (SIGINT or
SIGTERM end it cleanly).
"""

from __future__ import annotations

import argparse
import asyncio

from loglake import addresses
from loglake.listen import http_socket

DEFAULT_PORT = 8081


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("registry", help="serve the Schema Registry REST API")
    addresses.add_zookeeper_option(parser)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to listen on (0: any free port; default: {DEFAULT_PORT})")
    parser.add_argument("--certfile", default=None, metavar="PEM",
                        help="serve HTTPS with this certificate chain (PEM)")
    parser.add_argument("--keyfile", default=None, metavar="PEM",
                        help="the private key of --certfile (default: --certfile itself)")
    parser.add_argument("--basic-auth", action="store_true",
                        help="require HTTP Basic credentials of a SCRAM user of the cluster")
    parser.add_argument("--default-compatibility", default="BACKWARD",
                        help="compatibility level while none is set (default: BACKWARD)")
    parser.set_defaults(handler=run_registry)


def run_registry(args: argparse.Namespace) -> int:
    import uvicorn

    from loglake.basic_auth import LoginLimiter, ScramAuthenticator, warn_plaintext_login
    from loglake.catalog.entity_configs import EntityConfigStore
    from loglake.catalog.schemas import SchemaStore
    from loglake.catalog.zookeeper import ClusterCatalog
    from loglake.registry.app import create_app
    from loglake.registry.service import COMPATIBILITY_LEVELS, RegistryService

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be within 0..65535, got {args.port}")
    level = args.default_compatibility.upper()
    if level not in COMPATIBILITY_LEVELS:
        raise ValueError(f"--default-compatibility must be one of "
                         f"{', '.join(COMPATIBILITY_LEVELS)}, got {args.default_compatibility}")
    if args.keyfile and not args.certfile:
        raise ValueError("--keyfile needs --certfile")
    zookeeper = addresses.zookeeper(args.zookeeper)
    catalog = ClusterCatalog(zookeeper, timeout=10.0, mode="tool")
    catalog.start()
    try:
        service = RegistryService(SchemaStore(catalog.zk), default_compatibility=level)
        if args.basic_auth:
            authenticator = ScramAuthenticator(EntityConfigStore(catalog.zk))
            app = create_app(service, authenticate=authenticator.mechanism,
                             cached=authenticator.cached, limiter=LoginLimiter())
        else:
            app = create_app(service)
        sock, where = http_socket(args.host, args.port)
        tls = {} if not args.certfile else {
            "ssl_certfile": args.certfile, "ssl_keyfile": args.keyfile or args.certfile}
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                proxy_headers=False,
                                **tls)
        server = uvicorn.Server(config)
        scheme = "https" if args.certfile else "http"
        print(f"schema.registry.url={scheme}://{where}  (ZooKeeper {zookeeper})",
              flush=True)
        warn_plaintext_login("registry", tls=bool(args.certfile), basic_auth=args.basic_auth)
        try:
            asyncio.run(server.serve(sockets=[sock]))
        finally:
            sock.close()
    finally:
        catalog.stop()
    return 0
