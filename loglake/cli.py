"""The ``loglake`` command. Each command group registers itself; errors print one line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from loglake.errors import LoglakeError


def build_parser() -> argparse.ArgumentParser:
    from loglake import demo
    from loglake.broker import main as broker_main
    from loglake.catalog import tiering_cli, zk_migration
    from loglake.client import cli as client_cli
    from loglake.client import schemas_cli, users_cli
    from loglake.compaction import cli as compaction_cli
    from loglake.console import cli as console_cli
    from loglake.dev import cli as dev_cli
    from loglake.registry import cli as registry_cli
    from loglake.streaming import sql_cli

    parser = argparse.ArgumentParser(prog="loglake", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for module in (demo, dev_cli, client_cli, users_cli, tiering_cli, sql_cli, compaction_cli,
                   console_cli, broker_main, schemas_cli, registry_cli, zk_migration):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (LoglakeError, OSError, ValueError) as exc:
        print(f"loglake: error: {exc}", file=sys.stderr)
        return 1
