"""``loglake quotas describe|alter``: client quotas per user and/or client id, like
``kafka-configs --entity-type users|clients`` (DescribeClientQuotas / AlterClientQuotas sent to
the first bootstrap broker, with ``--bootstrap-server``/``--command-config`` security as
loglake's other commands).

::

    loglake quotas describe [--user U | --user-default] [--client-id C | --client-default]
                            [--ip IP | --ip-default] [--format text|json]
    loglake quotas alter    (--user U | --user-default) and/or (--client-id C | --client-default)
                            | (--ip IP | --ip-default)
                            [--add-config k=v[,k=v...]] [--delete-config k[,k...]]
                            [--validate-only]

Keys of users and client ids: ``producer_byte_rate`` and ``consumer_byte_rate`` (bytes per
second, integers), ``request_percentage`` (percent of one request-handling thread) and
``controller_mutation_rate`` (partitions created or deleted per second, KIP-599). Key of IP
entities (an IP address, not a host name, or the default; ``kafka-configs --entity-type
ips``): ``connection_creation_rate`` (new connections per second, an integer, KIP-612).
``describe`` without entity options lists every entity with quotas; with options, exactly the
named entity (kafka-configs' "contains only" filter). Text output, one line per entity
(kafka-configs' form)::

    Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1048576.0

The principal needs DESCRIBE_CONFIGS (describe) or ALTER_CONFIGS (alter) on the cluster. A
refusal or invalid value is one ``loglake: error: ...`` line (the broker's message) and exit
status 1.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kio.schema.errors import ErrorCode

from loglake import addresses
from loglake.client import _wire, security
from loglake.client.errors import BrokerError

DESCRIBE_CLIENT_QUOTAS = (48, 1)
ALTER_CLIENT_QUOTAS = (49, 1)
CLIENT_ID = "loglake-quotas"
USER = "user"
CLIENT = "client-id"
IP = "ip"
MATCH_EXACT, MATCH_DEFAULT = 0, 1


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
) -> None:
    """Add ``quotas`` with ``describe`` and ``alter``; ``common`` carries the connection
    options."""
    quotas = subparsers.add_parser("quotas", help="describe and alter client quotas")
    commands = quotas.add_subparsers(dest="quotas_command", required=True)
    describe = commands.add_parser("describe", parents=[common],
                                   help="quotas of one entity, or of every entity")
    _entity_options(describe)
    describe.add_argument("--format", choices=("text", "json"), default="text")
    describe.set_defaults(handler=quotas_describe)
    alter = commands.add_parser("alter", parents=[common], help="set or remove quotas")
    _entity_options(alter)
    alter.add_argument("--add-config", default="", metavar="K=V[,K=V...]",
                       help="quotas to set: producer_byte_rate, consumer_byte_rate, "
                       "request_percentage, controller_mutation_rate (users/client ids); "
                       "connection_creation_rate (IPs)")
    alter.add_argument("--delete-config", default="", metavar="K[,K...]",
                       help="quotas to remove")
    alter.add_argument("--validate-only", action="store_true",
                       help="let the broker check the change without making it")
    alter.set_defaults(handler=quotas_alter)


def _entity_options(parser: argparse.ArgumentParser) -> None:
    user = parser.add_mutually_exclusive_group()
    user.add_argument("--user", metavar="USER", help="a user principal's name")
    user.add_argument("--user-default", action="store_true",
                      help="the default user entity (<default>)")
    client = parser.add_mutually_exclusive_group()
    client.add_argument("--client-id", metavar="CLIENT_ID", help="a client id")
    client.add_argument("--client-default", action="store_true",
                        help="the default client-id entity (<default>)")
    ip = parser.add_mutually_exclusive_group()
    ip.add_argument("--ip", metavar="IP", help="an IP address (connection_creation_rate)")
    ip.add_argument("--ip-default", action="store_true",
                    help="the default IP entity (<default>)")


def entity_of(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """The entity the options name: (type, name or None for the default), user first."""
    entity: list[tuple[str, str | None]] = []
    if args.user is not None or args.user_default:
        entity.append((USER, None if args.user_default else args.user))
    if args.client_id is not None or args.client_default:
        entity.append((CLIENT, None if args.client_default else args.client_id))
    if args.ip is not None or args.ip_default:
        if entity:
            raise ValueError("an IP entity cannot be combined with --user/--client-id")
        entity.append((IP, None if args.ip_default else args.ip))
    return entity


def parse_add_config(text: str) -> list[tuple[str, float]]:
    """``k=v,k=v`` -> [(k, v)]; raises ValueError naming the bad item."""
    out: list[tuple[str, float]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--add-config: expected key=value, got {item!r}")
        try:
            out.append((key.strip(), float(value)))
        except ValueError:
            raise ValueError(f"--add-config: {key.strip()} needs a number, got "
                             f"{value!r}") from None
    return out


def _request(args: argparse.Namespace, api: tuple[int, int], body: dict[str, Any],
             operation: str) -> Any:
    first = addresses.bootstrap_servers(args.bootstrap_server).split(",")[0].strip()
    host, _, port = first.rpartition(":")
    return _wire.request(host.strip("[]"), int(port), *api, body,
                         timeout=args.request_timeout_ms / 1000, client_id=CLIENT_ID,
                         operation=operation, security=security.from_args(args))


def quotas_describe(args: argparse.Namespace) -> int:
    """``loglake quotas describe``."""
    entity = entity_of(args)
    components = [{"entity_type": kind, "match_type": MATCH_DEFAULT if name is None
                   else MATCH_EXACT, "match": name} for kind, name in entity]
    response = _request(args, DESCRIBE_CLIENT_QUOTAS,
                        {"components": components, "strict": bool(entity)},
                        "describing client quotas")
    if response.error_code != ErrorCode.none:
        raise BrokerError(f"describing client quotas: {response.error_code.name}: "
                          f"{response.error_message or ''}".rstrip(": "),
                          code=response.error_code)
    found = [([(e.entity_type, e.entity_name) for e in entry.entity],
              {v.key: v.value for v in entry.values}) for entry in response.entries or ()]
    print(describe_output(found, args.format))
    return 0


def describe_output(found: list[tuple[list[tuple[str, str | None]], dict[str, float]]],
                    style: str) -> str:
    if style == "json":
        return json.dumps([{"entity": dict(entity), "quotas": values}
                           for entity, values in found], indent=2)
    return "\n".join(
        f"Quota configs for {_entity_text(entity)} are "
        + ", ".join(f"{key}={value!r}" for key, value in sorted(values.items()))
        for entity, values in found)


def _entity_text(entity: list[tuple[str, str | None]]) -> str:
    names = {USER: "user-principal", CLIENT: "client-id", IP: "ip"}
    return ", ".join(f"the default {names.get(kind, kind)}" if name is None
                     else f"{names.get(kind, kind)} '{name}'" for kind, name in entity)


def quotas_alter(args: argparse.Namespace) -> int:
    """``loglake quotas alter``."""
    entity = entity_of(args)
    if not entity:
        raise ValueError("name the entity: --user/--user-default and/or "
                         "--client-id/--client-default, or --ip/--ip-default")
    ops = [{"key": key, "value": value, "remove": False}
           for key, value in parse_add_config(args.add_config)]
    ops += [{"key": key.strip(), "value": 0.0, "remove": True}
            for key in args.delete_config.split(",") if key.strip()]
    if not ops:
        raise ValueError("nothing to change: give --add-config and/or --delete-config")
    body = {"entries": [{"entity": [{"entity_type": kind, "entity_name": name}
                                    for kind, name in entity], "ops": ops}],
            "validate_only": bool(args.validate_only)}
    response = _request(args, ALTER_CLIENT_QUOTAS, body, "altering client quotas")
    for entry in response.entries:
        if entry.error_code != ErrorCode.none:
            raise BrokerError(f"altering the quotas of {_entity_text(entity)}: "
                              f"{entry.error_code.name}: {entry.error_message or ''}"
                              .rstrip(": "), code=entry.error_code)
    verb = "Validated" if args.validate_only else "Completed updating"
    print(f"{verb} quota configs for {_entity_text(entity)}.")
    return 0
