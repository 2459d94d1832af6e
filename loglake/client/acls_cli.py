"""``loglake acls add|list|remove``: Kafka's ACLs, like ``kafka-acls``.

Options as kafka-acls names them::

    loglake acls add    --allow-principal User:alice [--allow-host H] [--deny-principal P]
                        [--deny-host H] --operation Read [--operation Write ...]
                        (--topic T | --group G | --cluster | --transactional-id I) ...
                        [--resource-pattern-type literal|prefixed]
    loglake acls list   [resource options] [--principal P] [--resource-pattern-type
                        any|match|literal|prefixed]
    loglake acls remove [the add options; without principals: every ACL of the resources
                        (of the given operations)]

Resource options repeat and combine (``--topic a --topic b --group g``); ``--topic '*'`` is
every topic. Hosts default to ``*`` when none is given for a kind of principal; operations to
``All``. ``add`` creates every combination of principals, hosts, operations and resources.

Where ACLs go: with ``--zookeeper`` (kafka-acls' ``--authorizer-properties
zookeeper.connect=...``) straight into the cluster's ZooKeeper (catalog/acls.py: brokers pick
the change up from its notification); otherwise through the brokers
(``--bootstrap-server``/``--command-config``, as loglake's other commands): CreateAcls and
DeleteAcls with confluent-kafka's AdminClient, DescribeAcls as a raw request (librdkafka
drops DescribeAcls' top-level error, so a refused listing would look empty). The principal
needs ALTER (add, remove) or DESCRIBE (list) on the cluster. Errors are one ``loglake:
error: ...`` line and exit status 1.

Output of ``list`` (kafka-acls' form; the entry lines start with a space and a tab)::

    Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders,
    patternType=LITERAL)`:
        (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from loglake import addresses
from loglake.broker.security.acl_model import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from loglake.client import security
from loglake.client.errors import ClientError

OPERATIONS = tuple(op for op in AclOperation if op not in (AclOperation.UNKNOWN,
                                                           AclOperation.ANY))
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
CLIENT_ID = "loglake-acls"


@dataclass(frozen=True, order=True)
class AclRow:
    """One ACL, as the CLI speaks of it (Kafka's enum names)."""

    resource_type: str  # TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID
    name: str
    pattern_type: str  # LITERAL, PREFIXED
    principal: str
    host: str
    operation: str  # READ, ..., ALL
    permission: str  # ALLOW, DENY


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
             common: argparse.ArgumentParser) -> None:
    """Add ``acls`` with ``add``, ``list`` and ``remove``."""
    acls = subparsers.add_parser("acls", help="add, list and remove ACLs (like kafka-acls)")
    commands = acls.add_subparsers(dest="acls_command", required=True)
    for name, handler, what in (("add", acls_add, "add ACLs"),
                                ("remove", acls_remove, "remove ACLs"),
                                ("list", acls_list, "list ACLs")):
        parser = commands.add_parser(name, parents=[common], help=what)
        addresses.add_zookeeper_option(parser)
        parser.add_argument("--topic", action="append", default=[], metavar="TOPIC")
        parser.add_argument("--group", action="append", default=[], metavar="GROUP")
        parser.add_argument("--transactional-id", action="append", default=[],
                            metavar="ID", dest="transactional_ids")
        parser.add_argument("--cluster", action="store_true",
                            help="the cluster resource (kafka-cluster)")
        choices = ("any", "match", "literal", "prefixed") if name == "list" else (
            "literal", "prefixed", "any", "match") if name == "remove" else (
            "literal", "prefixed")
        parser.add_argument("--resource-pattern-type", type=str.lower, choices=choices,
                            default="any" if name == "list" else "literal")
        if name == "list":
            parser.add_argument("--principal", action="append", default=[],
                                metavar="PRINCIPAL")
        else:
            parser.add_argument("--allow-principal", action="append", default=[],
                                metavar="PRINCIPAL")
            parser.add_argument("--deny-principal", action="append", default=[],
                                metavar="PRINCIPAL")
            parser.add_argument("--allow-host", action="append", default=[], metavar="HOST")
            parser.add_argument("--deny-host", action="append", default=[], metavar="HOST")
            parser.add_argument("--operation", type=operation, action="append", default=[],
                                metavar="OPERATION",
                                help=f"one of {', '.join(_title(o.name) for o in OPERATIONS)}"
                                " (default All)")
        parser.set_defaults(handler=handler)


# ---- argument parsing (pure) --------------------------------------------------------------
def operation(text: str) -> AclOperation:
    key = text.replace("-", "").replace("_", "").lower()
    for op in OPERATIONS:
        if op.name.replace("_", "").lower() == key:
            return op
    raise argparse.ArgumentTypeError(
        f"unknown operation {text!r}: one of {', '.join(_title(o.name) for o in OPERATIONS)}")


def _title(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(resource type, name) of every resource option."""
    out = [("TOPIC", t) for t in args.topic] + [("GROUP", g) for g in args.group]
    out += [("TRANSACTIONAL_ID", t) for t in args.transactional_ids]
    if args.cluster:
        out.append(("CLUSTER", CLUSTER_NAME))
    return out


def _principal(text: str) -> str:
    kind, sep, name = text.strip().partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"a principal looks like User:<name>, got {text!r}")
    return text.strip()


def rows(args: argparse.Namespace) -> list[AclRow]:
    """Every ACL ``add``/``remove`` names: principals x hosts x operations x resources."""
    targets = resources(args)
    if not targets:
        raise ValueError("name a resource: --topic, --group, --transactional-id or --cluster")
    ops = [op.name for op in args.operation] or ["ALL"]
    pattern = args.resource_pattern_type.upper()
    out = []
    for permission, principals, hosts in (
            ("ALLOW", args.allow_principal, args.allow_host),
            ("DENY", args.deny_principal, args.deny_host)):
        if hosts and not principals:
            raise ValueError(f"--{permission.lower()}-host needs a "
                             f"--{permission.lower()}-principal")
        for principal, host, op, (rtype, name) in itertools.product(
                [_principal(p) for p in principals], hosts or ["*"], ops, targets):
            out.append(AclRow(rtype, name, pattern, principal, host, op, permission))
    return out


# ---- commands ------------------------------------------------------------------------------
def acls_add(args: argparse.Namespace) -> int:
    """``loglake acls add``."""
    wanted = rows(args)
    if not wanted:
        raise ValueError("name a principal: --allow-principal or --deny-principal")
    if args.resource_pattern_type not in ("literal", "prefixed"):
        raise ValueError("ACLs are added for a literal or prefixed resource pattern")
    if args.zookeeper is not None:
        _zookeeper_add(args, wanted)
    else:
        _broker_add(args, wanted)
    for row in wanted:
        print(f"Added {_entry(row)} for {_row_pattern(row)}")
    return 0


def acls_remove(args: argparse.Namespace) -> int:
    """``loglake acls remove``."""
    removed = (_zookeeper_remove(args) if args.zookeeper is not None
               else _broker_remove(args))
    for row in sorted(removed):
        print(f"Removed {_entry(row)} from {_row_pattern(row)}")
    if not removed:
        print("No ACL matched.")
    return 0


def acls_list(args: argparse.Namespace) -> int:
    """``loglake acls list``."""
    found = list(_zookeeper_list(args) if args.zookeeper is not None else _broker_list(args))
    if not args.principal:
        print(list_output(found), end="")
        return 0
    for principal in dict.fromkeys(_principal(p) for p in args.principal):
        # kafka-acls --list --principal P: a header line, then P's ACLs grouped by resource
        print(f"ACLs for principal `{principal}`")
        print(list_output(row for row in found if row.principal == principal), end="")
    return 0


def list_output(found: Iterable[AclRow]) -> str:
    grouped: dict[tuple[str, str, str], list[AclRow]] = {}
    for row in sorted(found):
        grouped.setdefault((row.resource_type, row.name, row.pattern_type), []).append(row)
    lines = []
    for (rtype, name, pattern), entries in grouped.items():
        lines.append(f"Current ACLs for resource `{_pattern(rtype, name, pattern)}`: ")
        lines.extend(f" \t{_entry(row)} " for row in entries)
        lines.append("")
    return "\n".join(lines) + ("\n" if lines else "")


def _pattern(rtype: str, name: str, pattern: str) -> str:
    return f"ResourcePattern(resourceType={rtype}, name={name}, patternType={pattern})"


def _row_pattern(row: AclRow) -> str:
    return _pattern(row.resource_type, row.name, row.pattern_type)


def _entry(row: AclRow) -> str:
    return (f"(principal={row.principal}, host={row.host}, operation={row.operation}, "
            f"permissionType={row.permission})")


# ---- filters (list / remove) --------------------------------------------------------------
@dataclass(frozen=True)
class RowFilter:
    """What ``list``/``remove`` select (Kafka's binding filter, as enum names; None: any)."""

    resource_type: str | None
    name: str | None
    pattern_type: str  # ANY, MATCH, LITERAL, PREFIXED
    principal: str | None = None
    host: str | None = None
    operation: str | None = None
    permission: str | None = None

    def matches(self, row: AclRow) -> bool:
        if self.resource_type is not None and self.resource_type != row.resource_type:
            return False
        if self.pattern_type not in ("ANY", "MATCH") and self.pattern_type != row.pattern_type:
            return False
        if self.name is not None:
            if self.pattern_type in ("ANY", row.pattern_type):
                if self.name != row.name:
                    return False
            elif row.pattern_type == "LITERAL":
                if row.name not in (self.name, "*"):
                    return False
            elif not self.name.startswith(row.name):
                return False
        return all(want is None or want == got for want, got in (
            (self.principal, row.principal), (self.host, row.host),
            (self.operation, row.operation), (self.permission, row.permission)))


def list_filters(args: argparse.Namespace) -> list[RowFilter]:
    pattern = args.resource_pattern_type.upper()
    targets: list[tuple[str | None, str | None]] = list(resources(args)) or [(None, None)]
    principals: list[str | None] = [_principal(p) for p in args.principal] or [None]
    return [RowFilter(rtype, name, pattern, principal)
            for (rtype, name), principal in itertools.product(targets, principals)]


def remove_filters(args: argparse.Namespace) -> list[RowFilter]:
    """Exact entries when principals are given, else every ACL of the resources (of the given
    operations)."""
    if args.allow_principal or args.deny_principal:
        return [RowFilter(r.resource_type, r.name, r.pattern_type, r.principal, r.host,
                          r.operation, r.permission) for r in rows(args)]
    targets = resources(args)
    if not targets:
        raise ValueError("name a resource: --topic, --group, --transactional-id or --cluster")
    ops: list[str | None] = [op.name for op in args.operation] or [None]
    pattern = args.resource_pattern_type.upper()
    return [RowFilter(rtype, name, pattern, operation=op)
            for (rtype, name), op in itertools.product(targets, ops)]


# ---- through ZooKeeper --------------------------------------------------------------------
def _store(args: argparse.Namespace) -> tuple[Any, Any]:
    from loglake.catalog.zookeeper import ClusterCatalog  # the --zookeeper mode only

    catalog = ClusterCatalog(addresses.zookeeper(args.zookeeper), timeout=10.0, mode="tool")
    catalog.start()
    return catalog, catalog.acls()


def _zookeeper_add(args: argparse.Namespace, wanted: list[AclRow]) -> None:
    from loglake.catalog import acls as stored

    catalog, store = _store(args)
    try:
        by_resource: dict[Any, list[Any]] = {}
        for row in wanted:
            res = stored.resource(row.resource_type, row.name, row.pattern_type)
            by_resource.setdefault(res, []).append(
                stored.acl(row.principal, row.operation, permission=row.permission,
                           host=row.host))
        for res, entries in by_resource.items():
            store.add_many(res, entries)
    finally:
        catalog.stop()


def _zookeeper_rows(store: Any) -> list[AclRow]:
    from loglake.catalog.acls import enum_name

    return [AclRow(enum_name(res.resource_type), res.name, res.pattern_type, entry.principal,
                   entry.host, enum_name(entry.operation), enum_name(entry.permission))
            for res, entry in store.bindings()]


def _zookeeper_list(args: argparse.Namespace) -> list[AclRow]:
    filters = list_filters(args)
    catalog, store = _store(args)
    try:
        return [row for row in _zookeeper_rows(store) if any(f.matches(row) for f in filters)]
    finally:
        catalog.stop()


def _zookeeper_remove(args: argparse.Namespace) -> list[AclRow]:
    from loglake.catalog.acls import enum_name

    filters = remove_filters(args)
    catalog, store = _store(args)
    removed: list[AclRow] = []
    try:
        for res in store.resources():
            def keep(entry: Any, res: Any = res) -> bool:
                row = AclRow(enum_name(res.resource_type), res.name, res.pattern_type,
                             entry.principal, entry.host, enum_name(entry.operation),
                             enum_name(entry.permission))
                return not any(f.matches(row) for f in filters)

            for entry in store.remove_matching(res, keep):
                removed.append(AclRow(enum_name(res.resource_type), res.name,
                                      res.pattern_type, entry.principal, entry.host,
                                      enum_name(entry.operation), enum_name(entry.permission)))
    finally:
        catalog.stop()
    return removed


# ---- through the brokers ------------------------------------------------------------------
def _admin_client(args: argparse.Namespace) -> Any:
    from confluent_kafka.admin import AdminClient

    from loglake.client._common import ErrorTracker, base_config

    config = base_config(addresses.bootstrap_servers(args.bootstrap_server),
                         client_id=CLIENT_ID, tracker=ErrorTracker(), extra=None,
                         security=security.from_args(args))
    return AdminClient(config)


def _timeout(args: argparse.Namespace) -> float:
    return float(args.request_timeout_ms) / 1000


def _binding(row: AclRow) -> Any:
    from confluent_kafka.admin import AclBinding
    from confluent_kafka.admin import AclOperation as CkOperation
    from confluent_kafka.admin import AclPermissionType as CkPermission
    from confluent_kafka.admin import ResourcePatternType as CkPattern
    from confluent_kafka.admin import ResourceType as CkResource

    return AclBinding(CkResource[_CK_RESOURCE.get(row.resource_type, row.resource_type)], row.name,
                      CkPattern[row.pattern_type], row.principal, row.host,
                      CkOperation[row.operation], CkPermission[row.permission])


_CK_RESOURCE = {"CLUSTER": "BROKER"}
"""confluent-kafka calls Kafka's CLUSTER resource type BROKER (same code, 4)."""


def _broker_add(args: argparse.Namespace, wanted: list[AclRow]) -> None:
    admin = _admin_client(args)
    futures = admin.create_acls([_binding(row) for row in wanted],
                                request_timeout=_timeout(args))
    for binding, future in futures.items():
        _result(future, f"adding {binding}", _timeout(args))


def _broker_remove(args: argparse.Namespace) -> list[AclRow]:
    from confluent_kafka.admin import AclBindingFilter
    from confluent_kafka.admin import AclOperation as CkOperation
    from confluent_kafka.admin import AclPermissionType as CkPermission
    from confluent_kafka.admin import ResourcePatternType as CkPattern
    from confluent_kafka.admin import ResourceType as CkResource

    def ck_filter(f: RowFilter) -> Any:
        rtype = f.resource_type or "ANY"
        # confluent-kafka's annotations say str, but None is its "any" (as Kafka's null)
        return AclBindingFilter(
            CkResource[_CK_RESOURCE.get(rtype, rtype)], f.name,  # type: ignore[arg-type]
            CkPattern[f.pattern_type], f.principal, f.host,  # type: ignore[arg-type]
            CkOperation[f.operation or "ANY"], CkPermission[f.permission or "ANY"])

    filters = [ck_filter(f) for f in remove_filters(args)]
    admin = _admin_client(args)
    futures = admin.delete_acls(filters, request_timeout=_timeout(args))
    removed: set[AclRow] = set()
    for binding_filter, future in futures.items():
        for binding in _result(future, f"removing {binding_filter}", _timeout(args)):
            removed.add(AclRow(ResourceType(int(binding.restype.value)).name, binding.name,
                               binding.resource_pattern_type.name, binding.principal,
                               binding.host, binding.operation.name,
                               binding.permission_type.name))
    return sorted(removed)


def _result(future: Any, what: str, timeout: float) -> Any:
    from confluent_kafka import KafkaException

    try:
        return future.result(timeout=timeout)
    except KafkaException as exc:
        error = exc.args[0]
        raise ClientError(f"{what}: {error.str()}",
                          code=_error_code(error.code())) from None
    except TimeoutError:
        raise ClientError(f"{what}: no answer within {timeout:g} s",
                          code=ErrorCode.request_timed_out) from None


def _error_code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.unknown_server_error


def _broker_list(args: argparse.Namespace) -> list[AclRow]:
    from loglake.client import _wire

    secured = security.from_args(args)
    first = addresses.bootstrap_servers(args.bootstrap_server).split(",")[0].strip()
    host, _, port = first.rpartition(":")
    found: set[AclRow] = set()
    for f in list_filters(args):
        response = _wire.request(host.strip("[]"), int(port), DESCRIBE_ACLS, 3, {
            "resource_type_filter": int(ResourceType[f.resource_type or "ANY"]),
            "resource_name_filter": f.name,
            "pattern_type_filter": int(PatternType[f.pattern_type]),
            "principal_filter": f.principal, "host_filter": None,
            "operation": int(AclOperation.ANY), "permission_type": int(AclPermissionType.ANY),
        }, timeout=_timeout(args), client_id=CLIENT_ID, operation="listing ACLs",
            security=secured)
        if response.error_code != ErrorCode.none:
            detail = f": {response.error_message}" if response.error_message else ""
            raise ClientError(f"listing ACLs: {response.error_code.name}{detail}",
                              code=response.error_code)
        for resource in response.resources:
            for acl in resource.acls:
                found.add(AclRow(ResourceType(resource.resource_type).name,
                                 resource.resource_name,
                                 PatternType(resource.pattern_type).name, acl.principal,
                                 acl.host, AclOperation(acl.operation).name,
                                 AclPermissionType(acl.permission_type).name))
    return sorted(found)

