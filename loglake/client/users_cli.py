"""``loglake users ...``: SCRAM users, like ``kafka-configs --entity-type users
--alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=...]'``.

* ``users create NAME [--mechanism M ...] [--iterations N] [--password P | --password-file F]``
  — create or replace NAME's credentials (both SCRAM mechanisms unless ``--mechanism`` says
  which); without a password option the password is read from standard input (first line).
* ``users delete NAME [--mechanism M ...]`` — remove NAME's credentials (every mechanism by
  default).
* ``users list [--format text|json]`` — users with credentials: ``User  Mechanism
  Iterations`` (tab-separated, header line), never a password or key.

Two ways to reach the cluster, as Kafka's tool: ``--bootstrap-server`` (with
``--command-config`` for a secured listener) sends Describe/AlterUserScramCredentials, the
salting done here so the password never leaves this process (confluent-kafka's AdminClient);
``--zookeeper`` writes ``/config/users/<user>`` directly (before any broker runs, e.g. the
first admin user of a SASL-only cluster). Errors: one ``loglake: error: ...`` line, status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from loglake import addresses
from loglake.broker.security.scram_credentials import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MECHANISM_BY_CODE,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
)
from loglake.client import security
from loglake.errors import LoglakeError

HEADER = ("User", "Mechanism", "Iterations")
TIMEOUT_S = 30.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``users`` with ``create``, ``delete`` and ``list``."""
    common = argparse.ArgumentParser(add_help=False)
    addresses.add_bootstrap_option(common)
    security.add_command_config_option(common)
    common.add_argument("--zookeeper", default=None, metavar="HOST:PORT[/CHROOT]",
                        help="write the credentials in ZooKeeper directly instead of asking "
                        "a broker (as kafka-configs --zookeeper)")
    users = subparsers.add_parser("users", help="create, delete and list SCRAM users")
    commands = users.add_subparsers(dest="users_command", required=True)
    create = commands.add_parser("create", parents=[common],
                                 help="create or replace a user's SCRAM credentials")
    create.add_argument("name")
    _mechanism_option(create)
    create.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                        help=f"PBKDF2 iterations, {MIN_ITERATIONS}-{MAX_ITERATIONS} "
                        f"(default {DEFAULT_ITERATIONS})")
    secret = create.add_mutually_exclusive_group()
    secret.add_argument("--password", default=None,
                        help="the password (visible to other local users: prefer "
                        "--password-file or standard input)")
    secret.add_argument("--password-file", default=None, metavar="FILE",
                        help="read the password from the first line of FILE")
    create.set_defaults(handler=create_user)
    delete = commands.add_parser("delete", parents=[common],
                                 help="remove a user's SCRAM credentials")
    delete.add_argument("name")
    _mechanism_option(delete)
    delete.set_defaults(handler=delete_user)
    listing = commands.add_parser("list", parents=[common], help="users with SCRAM credentials")
    listing.add_argument("--format", choices=("text", "json"), default="text")
    listing.set_defaults(handler=list_users)


def _mechanism_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mechanism", action="append", choices=SCRAM_MECHANISMS, default=[],
                        dest="mechanisms", help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; "
                        "default both)")


def _mechanisms(args: argparse.Namespace) -> list[str]:
    return list(dict.fromkeys(args.mechanisms)) or list(SCRAM_MECHANISMS)


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        text = args.password
    elif args.password_file is not None:
        with open(args.password_file, encoding="utf-8") as handle:
            text = handle.readline().rstrip("\r\n")
    else:
        text = sys.stdin.readline().rstrip("\r\n")
    if not text:
        raise ValueError("the password is empty")
    return text


# ---- commands --------------------------------------------------------------------------------

def create_user(args: argparse.Namespace) -> int:
    password = _password(args)
    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        raise ValueError(f"--iterations must be within [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
    mechanisms = _mechanisms(args)
    if args.zookeeper is not None:
        from loglake.broker.security.scram_credentials import store_user_credential

        with _entity_configs(args) as store:
            for mechanism in mechanisms:
                store_user_credential(store, args.name, mechanism, password, args.iterations)
    else:
        from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion

        _Brokers(args).alter([UserScramCredentialUpsertion(
            args.name, ScramCredentialInfo(_mechanism_enum(m), args.iterations),
            password.encode("utf-8")) for m in mechanisms])
    print(f"created SCRAM credentials of {args.name}: {', '.join(mechanisms)}")
    return 0


def delete_user(args: argparse.Namespace) -> int:
    mechanisms = _mechanisms(args)
    if args.zookeeper is not None:
        from loglake.broker.security.scram_credentials import (
            delete_user_credential,
            user_credentials,
        )

        with _entity_configs(args) as store:
            present = [m for m in mechanisms if m in user_credentials(store, args.name)]
            if not present:
                raise ValueError(f"{args.name} has no SCRAM credentials "
                                 f"({', '.join(mechanisms)})")
            for mechanism in present:
                delete_user_credential(store, args.name, mechanism)
        mechanisms = present
    else:
        from confluent_kafka.admin import UserScramCredentialDeletion

        brokers = _Brokers(args)
        described = brokers.describe([args.name])
        present = [m for m in mechanisms if m in {row[1] for row in described}]
        if not present:
            raise ValueError(f"{args.name} has no SCRAM credentials ({', '.join(mechanisms)})")
        brokers.alter([UserScramCredentialDeletion(args.name, _mechanism_enum(m))
                      for m in present])
        mechanisms = present
    print(f"deleted SCRAM credentials of {args.name}: {', '.join(mechanisms)}")
    return 0


def list_users(args: argparse.Namespace) -> int:
    if args.zookeeper is not None:
        from loglake.broker.security.scram_credentials import user_credentials
        from loglake.catalog.entity_configs import USERS, desanitize

        rows: list[tuple[str, str, int]] = []
        with _entity_configs(args) as store:
            for path in store.entities(USERS):
                user = desanitize(path.split("/", 1)[1])
                rows += [(user, mechanism, credential.iterations) for mechanism, credential
                         in sorted(user_credentials(store, user).items())]
    else:
        rows = _Brokers(args).describe(None)
    rows.sort()
    if args.format == "json":
        print(json.dumps([dict(zip(("user", "mechanism", "iterations"), row, strict=True))
                          for row in rows]))
    else:
        print("\t".join(HEADER))
        for row in rows:
            print("\t".join(map(str, row)))
    return 0


# ---- through a broker ------------------------------------------------------------------------

class _Brokers:
    """One AdminClient for a whole command. librdkafka's log lines go to Python logging
    (``loglake.client.librdkafka``, silent unless logging is configured), not to stderr: by
    default librdkafka prints them there, e.g. the ``BGQUEUE ... Purging 1 unserved events
    from background queue`` notice when a client is destroyed with an admin result event still
    queued (``users delete`` used to make a second client), or a connection failure per
    retry. Connection errors are remembered and named in the one error line instead."""

    def __init__(self, args: argparse.Namespace) -> None:
        from confluent_kafka.admin import AdminClient

        from loglake.client._common import ErrorTracker, base_config

        self.tracker = ErrorTracker()
        self.admin: Any = AdminClient(base_config(
            addresses.bootstrap_servers(args.bootstrap_server), client_id="loglake-users",
            tracker=self.tracker, extra=None, security=security.from_args(args)))

    def alter(self, alterations: Sequence[Any]) -> None:
        for future in self.admin.alter_user_scram_credentials(list(alterations)).values():
            self.result(future)

    def describe(self, users: list[str] | None) -> list[tuple[str, str, int]]:
        if users is None:
            described = self.result(self.admin.describe_user_scram_credentials())
        else:
            described = {user: self.result(future, missing_ok=True) for user, future
                         in self.admin.describe_user_scram_credentials(users).items()}
        rows = []
        for user, description in described.items():
            for info in getattr(description, "scram_credential_infos", None) or ():
                rows.append((user, MECHANISM_BY_CODE[int(info.mechanism.value)],
                             info.iterations))
        return rows

    def result(self, future: Any, *, missing_ok: bool = False) -> Any:
        from confluent_kafka import KafkaError, KafkaException

        try:
            return future.result(timeout=TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            name = getattr(error, "name", lambda: "")()
            if missing_ok and name == "RESOURCE_NOT_FOUND":
                return None
            message = (str(error.str()) if error is not None and hasattr(error, "str")
                       else str(exc))
            if getattr(error, "code", lambda: None)() in (KafkaError._TRANSPORT,
                                                          KafkaError._TIMED_OUT):
                message += self.tracker.describe()
            raise LoglakeError(message) from None
        except TimeoutError:
            raise LoglakeError(f"no answer within {TIMEOUT_S:g} s"
                               f"{self.tracker.describe()}") from None


def _mechanism_enum(mechanism: str) -> Any:
    from confluent_kafka.admin import ScramMechanism

    return ScramMechanism.SCRAM_SHA_256 if mechanism == "SCRAM-SHA-256" else \
        ScramMechanism.SCRAM_SHA_512


# ---- through ZooKeeper -----------------------------------------------------------------------

@contextlib.contextmanager
def _entity_configs(args: argparse.Namespace) -> Iterator[Any]:
    """The cluster's entity config store over a tool ZooKeeper session."""
    from loglake.catalog.zookeeper import ClusterCatalog  # the --zookeeper mode only

    catalog = ClusterCatalog(addresses.zookeeper(args.zookeeper), timeout=10.0, mode="tool")
    catalog.start()
    try:
        yield catalog.entity_configs()
    finally:
        catalog.stop()
