"""``loglake schemas ...``: the schema registry from the command line (Confluent's REST API,
through confluent-kafka's ``SchemaRegistryClient``).

* ``schemas list [--prefix P] [--deleted]`` — subject names, one a line.
* ``schemas versions SUBJECT [--deleted]`` — a subject's version numbers, one a line.
* ``schemas get SUBJECT [--version V|latest]`` / ``schemas get --id ID`` — the schema text on
  stdout; ``--format json`` prints ``{"subject", "version", "id", "schemaType", "schema",
  "references"}`` instead.
* ``schemas register SUBJECT FILE|- [--type AVRO|JSON|PROTOBUF] [--reference
  NAME=SUBJECT:VERSION ...] [--normalize]`` — registers (or finds) the schema, prints its id.
  The type defaults from the file name (``.avsc`` AVRO, ``.json`` JSON, ``.proto``
  PROTOBUF), else AVRO.
* ``schemas check SUBJECT FILE|- [--version V|latest | --all-versions] [--type ...]
  [--reference ...]`` — the registry's compatibility verdict under the subject's level: prints
  ``compatible``, or ``incompatible`` and the registry's reasons one a line (stderr); exit
  status 0 compatible, 3 incompatible, 1 error.
* ``schemas delete SUBJECT [--version V] [--permanent]`` — soft delete (or hard, after a
  soft one, as Confluent) a version or the whole subject; prints the deleted version numbers.
* ``schemas config [SUBJECT] [--set LEVEL | --delete]`` — shows (or sets, or removes) the
  global or a subject's compatibility level.

Every command takes ``--registry URL`` (default ``$LOGLAKE_SCHEMA_REGISTRY_URL``, else the
``schema.registry.url`` of the ``--command-config`` file) and ``--command-config FILE`` (client
properties: ``basic.auth.user.info``, ``schema.registry.ssl.ca.location``, ...; default
``$LOGLAKE_COMMAND_CONFIG``, else the file of a secured ``loglake dev up`` when neither
``--registry`` nor the variable names a registry); see
:mod:`loglake.client.schema_registry`. A registry error is one ``loglake: error: ...`` line
with Confluent's error code, status 1.

This module owns the ``schemas`` group's parser; other packages add their subcommands in
:func:`register` (``backfill``: the tiering side's re-typing job) with a
``register(commands)`` function of their own module, imported lazily there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from loglake.client import schema_registry, security
from loglake.client.schema_registry import RegistrySettings, SchemaRegistryRequestError

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")
COMPATIBILITY_LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
                        "FULL", "FULL_TRANSITIVE", "NONE")
EXIT_INCOMPATIBLE = 3
_TYPE_BY_SUFFIX = {".avsc": "AVRO", ".avro": "AVRO", ".json": "JSON", ".proto": "PROTOBUF"}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``schemas`` with ``list``, ``versions``, ``get``, ``register``, ``check``,
    ``delete`` and ``config`` (and the subcommands other packages contribute)."""
    common = argparse.ArgumentParser(add_help=False)
    add_registry_options(common)
    schemas = subparsers.add_parser("schemas", help="schema registry subjects, versions, "
                                    "compatibility")
    commands = schemas.add_subparsers(dest="schemas_command", required=True)

    listing = commands.add_parser("list", parents=[common], help="subject names")
    listing.add_argument("--prefix", default=None, help="only subjects starting with this")
    listing.add_argument("--deleted", action="store_true", help="include soft-deleted ones")
    listing.set_defaults(handler=list_subjects)

    versions = commands.add_parser("versions", parents=[common],
                                   help="a subject's version numbers")
    versions.add_argument("subject")
    versions.add_argument("--deleted", action="store_true", help="include soft-deleted ones")
    versions.set_defaults(handler=list_versions)

    get = commands.add_parser("get", parents=[common], help="a schema by subject version or id")
    get.add_argument("subject", nargs="?")
    get.add_argument("--version", type=_version, default="latest",
                     help="version number or latest (default)")
    get.add_argument("--id", type=_positive_int, default=None, dest="schema_id",
                     help="the schema with this id (instead of a subject)")
    get.add_argument("--format", choices=("text", "json"), default="text")
    get.set_defaults(handler=get_schema)

    reg = commands.add_parser("register", parents=[common],
                              help="register a schema under a subject, print its id")
    _schema_arguments(reg)
    reg.add_argument("--normalize", action="store_true",
                     help="normalize the schema first (equal schemas get one id)")
    reg.set_defaults(handler=register_schema)

    check = commands.add_parser("check", parents=[common],
                                help="is a schema compatible with a subject (exit 3: no)")
    _schema_arguments(check)
    which = check.add_mutually_exclusive_group()
    which.add_argument("--version", type=_version, default="latest",
                       help="check against this version (default latest)")
    which.add_argument("--all-versions", action="store_true",
                       help="check against every version (the registry applies the "
                       "subject's level)")
    check.set_defaults(handler=check_schema)

    delete = commands.add_parser("delete", parents=[common],
                                 help="soft (or --permanent) delete a version or a subject")
    delete.add_argument("subject")
    delete.add_argument("--version", type=_version, default=None,
                        help="only this version (default: the whole subject)")
    delete.add_argument("--permanent", action="store_true",
                        help="hard delete (only after a soft delete, as Confluent)")
    delete.set_defaults(handler=delete_schema)

    config = commands.add_parser("config", parents=[common],
                                 help="show or set the compatibility level")
    config.add_argument("subject", nargs="?", help="a subject (default: the global level)")
    change = config.add_mutually_exclusive_group()
    change.add_argument("--set", choices=COMPATIBILITY_LEVELS, default=None, dest="level",
                        type=str.upper, metavar="LEVEL",
                        help="set the level: " + ", ".join(COMPATIBILITY_LEVELS))
    change.add_argument("--delete", action="store_true",
                        help="remove the subject's (or global) level (back to the default)")
    config.set_defaults(handler=config_command)

    from loglake.compaction import backfill  # the tiering side's re-typing job

    backfill.register(commands)


def add_registry_options(parser: argparse.ArgumentParser) -> None:
    """``--registry URL`` and ``--command-config FILE``."""
    parser.add_argument(
        "--registry", default=None, metavar="URL",
        help=f"schema registry URL (default ${schema_registry.REGISTRY_URL_ENV}, else "
        "schema.registry.url of the --command-config file)")
    security.add_command_config_option(parser)


def settings_from_args(args: argparse.Namespace) -> RegistrySettings:
    """The registry of a command: ``--registry`` and the ``--command-config`` file (flag,
    ``$LOGLAKE_COMMAND_CONFIG``, else the dev profile's)."""
    url = getattr(args, "registry", None)
    from_profile = not url and not os.environ.get(schema_registry.REGISTRY_URL_ENV, "").strip()
    path = security.command_config_path(getattr(args, "command_config", None),
                                        bootstrap_from_profile=from_profile)
    return RegistrySettings.load(path, url=url)


# -- handlers ----------------------------------------------------------------------------------


def list_subjects(args: argparse.Namespace) -> int:
    names = _call(args, "listing subjects",
                  lambda c: c.get_subjects(subject_prefix=args.prefix, deleted=args.deleted))
    for name in names:
        print(name, file=sys.stdout)
    return 0


def list_versions(args: argparse.Namespace) -> int:
    numbers = _call(args, f"listing the versions of {args.subject!r}",
                    lambda c: c.get_versions(args.subject, deleted=args.deleted))
    for number in numbers:
        print(number, file=sys.stdout)
    return 0


def get_schema(args: argparse.Namespace) -> int:
    if args.schema_id is not None:
        if args.subject is not None:
            raise ValueError("give a subject or --id, not both")
        schema = _call(args, f"getting schema id {args.schema_id}",
                       lambda c: c.get_schema(args.schema_id))
        document: dict[str, Any] = {"id": args.schema_id}
    elif args.subject is None:
        raise ValueError("give a subject or --id")
    else:
        registered = _call(args, f"getting {args.subject!r} version {args.version}",
                           lambda c: c.get_version(args.subject, args.version))
        schema = registered.schema
        document = {"subject": registered.subject, "version": registered.version,
                    "id": registered.schema_id}
    if args.format == "text":
        print(schema.schema_str, file=sys.stdout)
        return 0
    document.update({"schemaType": schema.schema_type or "AVRO", "schema": schema.schema_str,
                     "references": [{"name": r.name, "subject": r.subject,
                                     "version": r.version} for r in schema.references or ()]})
    print(json.dumps(document), file=sys.stdout)
    return 0


def register_schema(args: argparse.Namespace) -> int:
    schema = _schema_of(args)
    schema_id = _call(args, f"registering a schema under {args.subject!r}",
                      lambda c: c.register_schema(args.subject, schema,
                                                  normalize_schemas=args.normalize))
    print(schema_id, file=sys.stdout)
    return 0


def check_schema(args: argparse.Namespace) -> int:
    schema = _schema_of(args)
    version = "" if args.all_versions else f"/{args.version}"
    path = f"compatibility/subjects/{_quote(args.subject)}/versions{version}?verbose=true"
    answer = _call(args, f"checking a schema against {args.subject!r}",
                   lambda c: c._rest_client.post(path, body=schema.to_dict()))
    if answer.get("is_compatible"):
        print("compatible", file=sys.stdout)
        return 0
    print("incompatible", file=sys.stdout)
    for message in answer.get("messages") or ():
        print(f"  {message}", file=sys.stderr)
    return EXIT_INCOMPATIBLE


def delete_schema(args: argparse.Namespace) -> int:
    if args.version is None:
        deleted = _call(args, f"deleting subject {args.subject!r}",
                        lambda c: c.delete_subject(args.subject, permanent=args.permanent))
    else:
        what = f"deleting {args.subject!r} version {args.version}"
        number = args.version if args.version != "latest" else _call(
            args, what, lambda c: c.get_version(args.subject, "latest").version)
        deleted = [_call(args, what, lambda c: c.delete_version(
            args.subject, number, permanent=args.permanent))]
    for number in deleted:
        print(number, file=sys.stdout)
    return 0


def config_command(args: argparse.Namespace) -> int:
    where = f"subject {args.subject!r}" if args.subject else "the global config"
    if args.level is not None:
        level = _call(args, f"setting the compatibility of {where}",
                      lambda c: c.set_compatibility(args.subject, args.level))
    elif args.delete:
        level = _call(args, f"deleting the compatibility of {where}",
                      lambda c: c.delete_config(args.subject))
    else:
        level = _call(args, f"getting the compatibility of {where}",
                      lambda c: c.get_compatibility(args.subject))
    print(_level_name(level), file=sys.stdout)
    return 0


def _level_name(answer: Any) -> str:
    """The level in whichever shape the registry client returns it (a string, an enum, a
    ``{"compatibility": ...}`` mapping, a ServerConfig)."""
    if isinstance(answer, dict):
        answer = answer.get("compatibility") or answer.get("compatibilityLevel") or ""
    answer = getattr(answer, "compatibility", None) or getattr(
        answer, "compatibility_level", None) or answer
    return str(getattr(answer, "value", answer))


# -- helpers -----------------------------------------------------------------------------------


def _schema_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("subject")
    parser.add_argument("file", metavar="FILE", help="the schema file, - for standard input")
    parser.add_argument("--type", choices=SCHEMA_TYPES, type=str.upper, default=None,
                        dest="schema_type",
                        help="AVRO, JSON or PROTOBUF (default: from the file name, else AVRO)")
    parser.add_argument("--reference", type=_reference, action="append", default=[],
                        dest="references", metavar="NAME=SUBJECT:VERSION",
                        help="a referenced schema (Avro named type, JSON $ref, Protobuf import "
                        "path); repeatable")


def _schema_of(args: argparse.Namespace) -> Any:
    from confluent_kafka.schema_registry import Schema

    text = sys.stdin.read() if args.file == "-" else _read(args.file)
    schema_type = args.schema_type or _TYPE_BY_SUFFIX.get(Path(args.file).suffix.lower(),
                                                          "AVRO")
    return Schema(text, schema_type, references=list(args.references))


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read schema file {path}: {exc}") from None


def _call(args: argparse.Namespace, what: str, action: Any) -> Any:
    registry = schema_registry.client(settings_from_args(args))
    try:
        return action(registry)
    except SchemaRegistryRequestError:
        raise
    except Exception as exc:  # the registry client raises its own and transport errors
        raise schema_registry.request_error(exc, what) from None


def _quote(subject: str) -> str:
    from urllib.parse import quote

    return quote(subject, safe="")


def _version(text: str) -> int | str:
    if text.strip().lower() in ("latest", "-1"):
        return "latest"
    return _at_least_one(text, "not a version", "a version is >= 1 or latest")


def _positive_int(text: str) -> int:
    return _at_least_one(text, "not a number", "must be >= 1")


def _at_least_one(text: str, not_int: str, too_small: str) -> int:
    """``text`` as an int >= 1; else argparse's error ``<not_int>: 'text'`` or
    ``<too_small>, not N``."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{not_int}: {text!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{too_small}, not {number}")
    return number


def _reference(text: str) -> Any:
    from confluent_kafka.schema_registry import SchemaReference

    name, sep, rest = text.partition("=")
    subject, sep2, version = rest.rpartition(":")
    if not sep or not sep2 or not name or not subject:
        raise argparse.ArgumentTypeError(f"a reference is NAME=SUBJECT:VERSION, not {text!r}")
    try:
        number = int(version)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a version in {text!r}") from None
    return SchemaReference(name, subject, number)
