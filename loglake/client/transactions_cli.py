"""``loglake transactions ...``: list and describe transactional ids, like Kafka's
``kafka-transactions``.

* ``transactions list [--state S ...] [--producer-id P ...] [--format text|json]`` — every
  transactional id the cluster's transaction coordinators know (ListTransactions sent to every
  live broker, merged): ``TransactionalId  Coordinator  ProducerId  TransactionState``, sorted
  by id. ``--state`` (repeatable, any letter case: ``ongoing`` is ``Ongoing``) keeps only ids in
  those states.
* ``transactions describe TRANSACTIONAL_ID [--format text|json]`` — asked of the id's
  coordinator: ``CoordinatorId  TransactionalId  ProducerId  ProducerEpoch
  TransactionState  TransactionTimeoutMs  CurrentTransactionStartTimeMs
  TransactionDurationMs  TopicPartitions`` (start time and duration ``None`` when no
  transaction is open; partitions as ``topic-partition`` joined by commas).

Text output is tab-separated with a header line (Kafka's column names); ``--format json`` writes
one JSON document. Errors are one ``loglake: error: ...`` line and exit status 1 (an unknown id:
``transactional_id_not_found``).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from typing import Any

from loglake import addresses
from loglake.client import security
from loglake.client.admin import Admin
from loglake.client.model import TRANSACTION_STATES, TransactionDescription, TransactionListing

LIST_HEADER = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADER = (
    "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
    "TopicPartitions",
)


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
) -> None:
    """Add ``transactions`` with ``list`` and ``describe``; ``common`` carries the connection
    options."""
    transactions = subparsers.add_parser("transactions",
                                         help="list and describe transactional ids")
    commands = transactions.add_subparsers(dest="transactions_command", required=True)

    listing = commands.add_parser("list", parents=[common],
                                  help="transactional ids with their state and coordinator")
    listing.add_argument("--state", type=transaction_state, action="append", default=[],
                         metavar="STATE", dest="states",
                         help=f"only ids in this state (repeatable): "
                         f"{', '.join(TRANSACTION_STATES)}")
    listing.add_argument("--producer-id", type=_non_negative_int, action="append", default=[],
                         metavar="ID", dest="producer_ids",
                         help="only ids of this producer id (repeatable)")
    listing.add_argument("--format", choices=("text", "json"), default="text")
    listing.set_defaults(handler=transactions_list)

    describe = commands.add_parser("describe", parents=[common],
                                   help="one transactional id, from its coordinator")
    describe.add_argument("transactional_id", metavar="TRANSACTIONAL_ID")
    describe.add_argument("--format", choices=("text", "json"), default="text")
    describe.set_defaults(handler=transactions_describe)


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(addresses.bootstrap_servers(args.bootstrap_server),
                 timeout=args.request_timeout_ms / 1000, security=security.from_args(args))


def transactions_list(args: argparse.Namespace) -> int:
    """``loglake transactions list``."""
    with _admin(args) as admin:
        found = admin.list_transactions(states=args.states, producer_ids=args.producer_ids)
    print(list_output(found, args.format))
    return 0


def transactions_describe(args: argparse.Namespace) -> int:
    """``loglake transactions describe TRANSACTIONAL_ID``."""
    if not args.transactional_id.strip():
        raise ValueError("the transactional id must not be empty")
    with _admin(args) as admin:
        found = admin.describe_transaction(args.transactional_id)
    print(describe_output(found, args.format, now_ms=int(time.time() * 1000)))
    return 0


def list_output(found: list[TransactionListing], style: str) -> str:
    """What ``transactions list`` prints for ``found``."""
    if style == "json":
        return json.dumps([asdict(t) for t in found], indent=2)
    rows = [LIST_HEADER] + [
        (t.transactional_id, str(t.coordinator), str(t.producer_id), t.state) for t in found]
    return "\n".join("\t".join(row) for row in rows)


def describe_output(found: TransactionDescription, style: str, *, now_ms: int) -> str:
    """What ``transactions describe`` prints for ``found`` (durations measured to ``now_ms``)."""
    duration = None if found.start_time_ms is None else max(0, now_ms - found.start_time_ms)
    if style == "json":
        document: dict[str, Any] = asdict(found)
        document["partitions"] = [{"topic": t, "partition": p} for t, p in found.partitions]
        document["duration_ms"] = duration
        return json.dumps(document, indent=2)
    row = (
        str(found.coordinator), found.transactional_id, str(found.producer_id),
        str(found.producer_epoch), found.state, str(found.timeout_ms),
        _or_none(found.start_time_ms), _or_none(duration),
        ",".join(f"{t}-{p}" for t, p in found.partitions),
    )
    return "\t".join(DESCRIBE_HEADER) + "\n" + "\t".join(row)


def transaction_state(text: str) -> str:
    """A state name in Kafka's spelling, whatever the letter case; argparse error otherwise."""
    by_lower = {s.lower(): s for s in TRANSACTION_STATES}
    state = by_lower.get(text.strip().lower())
    if state is None:
        raise argparse.ArgumentTypeError(
            f"unknown transaction state {text!r} (one of {', '.join(TRANSACTION_STATES)})")
    return state


def _or_none(value: int | None) -> str:
    return "None" if value is None else str(value)


def _non_negative_int(text: str) -> int:
    number = int(text)
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return number
