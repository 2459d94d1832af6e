"""``loglake dev``: run a local dev cluster (ZooKeeper + brokers) from the command line.

``dev up`` prints the addresses every tool takes (``bootstrap.servers=...``,
``zookeeper=HOST:PORT/loglake``) and makes its cluster the current profile
(:mod:`loglake.addresses`), so later commands need no ``--zookeeper`` / ``--bootstrap-server``.
``dev up --security sasl_ssl`` (:mod:`loglake.dev.secure`) also prints
``security.protocol=SASL_SSL``, ``command.config=DIR/security/client.properties`` (the admin
user; librdkafka form: ``loglake --command-config``, ``kcat -F``) and
``java.command.config=...`` (Kafka's tools), and records the first in the profile, so later
commands on this cluster log in as the admin without ``--command-config``; with its own
ZooKeeper it also secures ZooKeeper (``--no-zookeeper-auth`` leaves it open; see
:mod:`loglake.dev.secure`), prints ``zookeeper.sasl.jaas.file=...`` and records it in the
profile, so tools reaching that ZooKeeper log in with it;
``dev up`` also turns the brokers' metrics on and prints ``metrics=<URL>,...`` (each broker's
``/metrics``, on its port + 2000; ``--no-metrics`` leaves them off);
``dev up`` starts the web console too (``loglake console`` on the base port + 3000, printed as
``console=<URL>``; ``--no-console`` leaves it out);
``dev up`` starts a schema registry too (``loglake registry`` on the base port + 4000, printed as
``schema.registry.url=<URL>``; HTTPS with basic auth as the admin under ``--security``;
``--no-registry`` leaves it out);
``dev down`` removes the profile while it names the cluster it stopped.

Wiring: the main parser calls :func:`register` with its subparsers; every leaf parser sets
``handler`` (``args.handler(args) -> int``, the exit code). Handlers print results to stdout and
errors as one line ``loglake: error: ...`` to stderr, returning 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from loglake import addresses
from loglake.dev import cluster, secure
from loglake.dev.errors import DevError

Handler = Callable[[argparse.Namespace], int]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``dev`` command and its subcommands to the main parser's ``subparsers``."""
    dev = subparsers.add_parser(
        "dev", help="run a local dev cluster (ZooKeeper + brokers)",
        description="Run a local dev cluster: ZooKeeper and broker processes on 127.0.0.1, "
                    "with all data, configs and logs under one directory.")
    commands = dev.add_subparsers(dest="dev_command", metavar="COMMAND", required=True)

    up = commands.add_parser(
        "up", help="start the cluster (reuses existing data)",
        description="Start ZooKeeper and brokers; broker N listens on BASE_PORT+N-1 and "
                    "ZooKeeper on BASE_PORT+1000 unless --zookeeper-port is given.")
    _data_argument(up)
    up.add_argument("--brokers", type=_positive, default=1, metavar="N",
                    help="number of brokers (default: 1)")
    up.add_argument("--base-port", type=_port, default=cluster.DEFAULT_BASE_PORT, metavar="P",
                    help=f"port of broker 1 (default: {cluster.DEFAULT_BASE_PORT})")
    up.add_argument("--zookeepers", type=_positive, default=1, metavar="N",
                    help="ZooKeeper ensemble size (default: 1)")
    up.add_argument("--zookeeper-port", type=_port, default=None, metavar="P",
                    help="first ZooKeeper port (default: base port + 1000)")
    up.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                    type=_key_value, help="extra server.properties line for every broker "
                                          "(repeatable)")
    up.add_argument("--storage", default=None, metavar="URL",
                    help="where brokers tier sealed segments as Delta tables: a path or an "
                         "fsspec URL such as s3://bucket/prefix (default: DIR/lake); object "
                         "store credentials come from the usual AWS_* environment")
    up.add_argument("--timeout", type=float, default=cluster.DEFAULT_START_TIMEOUT_S,
                    metavar="SECONDS", help="how long to wait for each process to be ready")
    up.add_argument("--security", choices=secure.SECURITY_MODES, default=None,
                    help="sasl_ssl: TLS with a generated CA, SCRAM logins, an admin super user "
                         "and the ACL authorizer (default deny); prints the client properties "
                         "file (DIR/security/client.properties) that commands then use")
    up.add_argument("--zookeeper-auth", action=argparse.BooleanOptionalAction, default=None,
                    help="ZooKeeper with SASL (DIGEST-MD5): brokers and tools log in and "
                         "create znodes with Kafka's ACLs (zookeeper.set.acl), so an anonymous "
                         "ZooKeeper client cannot change them (default: on with --security)")
    up.add_argument("--no-metrics", action="store_true",
                    help="do not serve /metrics (by default each broker serves it on its "
                         "port + 2000 and the URLs are printed as metrics=...)")
    up.add_argument("--no-console", action="store_true",
                    help="do not start the web console (by default `loglake console` runs on "
                         "the base port + 3000 and its URL is printed as console=...)")
    up.add_argument("--no-registry", action="store_true",
                    help="do not start the schema registry (by default `loglake registry` "
                         "runs on the base port + 4000 and its URL is printed as "
                         "schema.registry.url=...)")
    up.set_defaults(handler=_up)

    status = commands.add_parser("status", help="show the recorded processes")
    _data_argument(status)
    status.set_defaults(handler=_status)

    down = commands.add_parser("down", help="stop every process of the cluster (keeps data)")
    _data_argument(down)
    down.add_argument("--timeout", type=float, default=cluster.DEFAULT_STOP_TIMEOUT_S,
                      metavar="SECONDS", help="grace period before SIGKILL")
    down.set_defaults(handler=_down)

    for name, help_text, handler in (
        ("start", "start one stopped process again and wait until it answers", _start),
        ("stop", "stop one process gracefully (SIGTERM, SIGKILL after a grace period)", _stop),
        ("kill", "kill one process (SIGKILL)", _kill),
        ("pause", "freeze one process (SIGSTOP)", _pause),
        ("resume", "unfreeze a paused process (SIGCONT)", _resume),
    ):
        sub = commands.add_parser(name, help=help_text)
        _data_argument(sub)
        target = sub.add_mutually_exclusive_group(required=True)
        target.add_argument("--broker", type=_positive, metavar="ID", help="broker id")
        target.add_argument("--zookeeper", type=_positive, metavar="N",
                            help="ZooKeeper member (1 for a single server)")
        sub.set_defaults(handler=handler)


def _data_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, required=True, metavar="DIR",
                        help="cluster directory (data, configs, logs, state)")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port: {value}")
    return value


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _fail(message: str) -> int:
    print(f"loglake: error: {message}", file=sys.stderr)
    return 1


def _guarded(handler: Handler) -> Handler:
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except DevError as exc:
            return _fail(exc.one_line())
        except (OSError, ValueError) as exc:
            return _fail(" ".join(str(exc).split()))
        except KeyboardInterrupt:
            return _fail("interrupted")

    run.__doc__ = handler.__doc__
    return run


def _overrides(args: argparse.Namespace) -> dict[str, str] | None:
    overrides = dict(args.broker_config)
    if args.storage:
        overrides["remote.log.storage.url"] = args.storage
    return overrides or None


@_guarded
def _up(args: argparse.Namespace) -> int:
    info = cluster.up(args.data, brokers=args.brokers, base_port=args.base_port,
                      zookeeper_port=args.zookeeper_port, zookeepers=args.zookeepers,
                      broker_overrides=_overrides(args), timeout=args.timeout,
                      security=args.security, metrics=not args.no_metrics,
                      console=not args.no_console, registry=not args.no_registry,
                      zookeeper_auth=args.zookeeper_auth)
    for line in info.summary_lines():
        print(line)
    command_config = None if info.client_properties is None else str(info.client_properties)
    try:
        path = addresses.write_profile(addresses.Profile(
            info.zookeeper_connect, info.bootstrap_servers, str(info.data_dir),
            command_config, info.zookeeper_jaas_file))
    except OSError as exc:  # the cluster runs; only the convenience is missing
        print(f"loglake: warning: could not record this cluster as the current profile "
              f"({exc}); pass the addresses above to commands", file=sys.stderr)
        return 0
    print(f"loglake: commands without --zookeeper/--bootstrap-server now use this cluster "
          f"({path})", file=sys.stderr)
    return 0


@_guarded
def _status(args: argparse.Namespace) -> int:
    rows = cluster.status(args.data)
    print(f"{'ROLE':<10} {'ID':>3} {'PID':>8} {'PORT':>6}  STATE")
    for row in rows:
        print(f"{row.role:<10} {row.id:>3} {row.pid:>8} {row.port:>6}  "
              f"{'paused' if row.paused else 'running' if row.alive else 'stopped'}")
    for line in cluster.info(args.data).summary_lines():
        print(line)
    return 0


@_guarded
def _down(args: argparse.Namespace) -> int:
    cluster.down(args.data, timeout=args.timeout)
    addresses.clear_profile(args.data)
    return 0


def _target(args: argparse.Namespace) -> tuple[cluster.Role, int]:
    return ("broker", args.broker) if args.broker is not None else ("zookeeper", args.zookeeper)


@_guarded
def _start(args: argparse.Namespace) -> int:
    cluster.start_process(args.data, *_target(args))
    return 0


@_guarded
def _stop(args: argparse.Namespace) -> int:
    cluster.stop_process(args.data, *_target(args))
    return 0


@_guarded
def _kill(args: argparse.Namespace) -> int:
    cluster.kill_process(args.data, *_target(args))
    return 0


@_guarded
def _pause(args: argparse.Namespace) -> int:
    cluster.pause_process(args.data, *_target(args))
    return 0


@_guarded
def _resume(args: argparse.Namespace) -> int:
    cluster.resume_process(args.data, *_target(args))
    return 0
