"""``loglake transactions ...``: list and describe transactional ids, describe producers, find
and abort hanging transactions, like Kafka's ``kafka-transactions``.

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

  ``--transactional-id ID`` is accepted too (Kafka's spelling).
* ``transactions describe-producers --topic T --partition P [--broker-id B]`` — DescribeProducers
  asked of the leader (or broker ``B``, any replica): ``ProducerId  ProducerEpoch
  LatestCoordinatorEpoch  LastSequence  LastTimestamp  CurrentTransactionStartOffset``.
* ``transactions find-hanging (--broker-id B | --topic T [--partition P])
  [--max-transaction-timeout MIN]`` — Kafka's ``find-hanging``
  (:mod:`loglake.client.hanging_transactions`): open transactions whose producer last wrote
  more than ``MIN`` minutes ago (default 15) that no coordinator will end: ``Topic  Partition
  ProducerId  ProducerEpoch  CoordinatorEpoch  StartOffset  LastTimestamp  Duration(min)``.
  ``--broker-id`` alone searches every partition with a replica on that broker and asks that
  broker; with ``--topic`` too, that topic's partitions on it. Finding some is not an error
  (exit status 0, as Kafka).
* ``transactions abort --topic T --partition P (--start-offset O | --producer-id ID
  --producer-epoch E --coordinator-epoch C)`` — Kafka's ``abort``: an ABORT marker written by
  the partition's leader. ``--start-offset`` looks the producer up by DescribeProducers (the
  one whose open transaction starts at ``O``); the explicit form takes a negative coordinator
  epoch as 0, as Kafka does (DescribeProducers shows -1 before any marker). Needs ALTER on the
  cluster. Prints nothing on stdout (as Kafka), a summary line on stderr.

Text output is tab-separated with a header line (Kafka's column names); ``--format json`` writes
one JSON document. Errors are one ``loglake: error: ...`` line and exit status 1 (an unknown id:
``transactional_id_not_found``; an offset with no open transaction: Kafka's "Could not find any
open transactions starting at offset ..."); malformed options are argparse's usage line and
exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from typing import Any

from loglake import addresses
from loglake.client import hanging_transactions as txns
from loglake.client import security
from loglake.client.admin import Admin
from loglake.client.model import TRANSACTION_STATES, TransactionDescription, TransactionListing

LIST_HEADER = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADER = (
    "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
    "TopicPartitions",
)
PRODUCERS_HEADER = (
    "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
    "CurrentTransactionStartOffset",
)
HANGING_HEADER = (
    "Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
    "LastTimestamp", "Duration(min)",
)
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = txns.DEFAULT_MAX_TRANSACTION_TIMEOUT_MS // 60_000
MAX_TRANSACTION_TIMEOUT_MIN = 2**31 - 1
"""Kafka takes an Integer of minutes."""


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
    describe.add_argument("transactional_id", metavar="TRANSACTIONAL_ID", nargs="?")
    describe.add_argument("--transactional-id", dest="transactional_id_option", metavar="ID",
                          help="the transactional id (Kafka's spelling of the argument)")
    describe.add_argument("--format", choices=("text", "json"), default="text")
    describe.set_defaults(handler=transactions_describe)

    producers = commands.add_parser("describe-producers", parents=[common],
                                    help="active producers of a partition (DescribeProducers)")
    producers.add_argument("--topic", required=True, type=_topic_name)
    producers.add_argument("--partition", required=True, type=_non_negative_int32)
    producers.add_argument("--broker-id", type=_non_negative_int32, metavar="ID",
                           help="ask this broker (any replica) instead of the leader")
    producers.add_argument("--format", choices=("text", "json"), default="text")
    producers.set_defaults(handler=transactions_describe_producers)

    find = commands.add_parser("find-hanging", parents=[common],
                               help="open transactions no coordinator will end")
    find.add_argument("--broker-id", type=_non_negative_int32, metavar="ID",
                      help="search the partitions with a replica on this broker, asking it")
    find.add_argument("--topic", type=_topic_name,
                      help="search this topic (required with --partition)")
    find.add_argument("--partition", type=_non_negative_int32)
    find.add_argument("--max-transaction-timeout", type=_timeout_minutes,
                      default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN, metavar="MIN",
                      help="only transactions whose producer last wrote more than this many "
                      f"minutes ago (default {DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN})")
    find.add_argument("--format", choices=("text", "json"), default="text")
    find.set_defaults(handler=transactions_find_hanging)

    abort = commands.add_parser("abort", parents=[common],
                                help="abort a hanging transaction (needs ALTER on the cluster)")
    abort.add_argument("--topic", required=True, type=_topic_name)
    abort.add_argument("--partition", required=True, type=_non_negative_int32)
    abort.add_argument("--start-offset", type=_non_negative_int, metavar="OFFSET",
                       help="the first offset of the transaction to abort (its producer is "
                       "looked up by DescribeProducers)")
    abort.add_argument("--producer-id", type=_non_negative_int, metavar="ID")
    abort.add_argument("--producer-epoch", type=_epoch, metavar="EPOCH")
    abort.add_argument("--coordinator-epoch", type=_int32, metavar="EPOCH",
                       help="negative is taken as 0, as Kafka")
    abort.set_defaults(handler=transactions_abort)


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
    if args.transactional_id is not None and args.transactional_id_option is not None:
        raise ValueError("give the transactional id once (positional or --transactional-id)")
    transactional_id = args.transactional_id if args.transactional_id is not None \
        else args.transactional_id_option
    if transactional_id is None:
        raise ValueError("the transactional id is required (TRANSACTIONAL_ID or "
                         "--transactional-id)")
    if not transactional_id.strip():
        raise ValueError("the transactional id must not be empty")
    with _admin(args) as admin:
        found = admin.describe_transaction(transactional_id)
    print(describe_output(found, args.format, now_ms=int(time.time() * 1000)))
    return 0


def transactions_describe_producers(args: argparse.Namespace) -> int:
    """``loglake transactions describe-producers``."""
    key = (args.topic, args.partition)
    with _admin(args) as admin:
        states = txns.describe_producers(admin, [key], broker_id=args.broker_id)
    print(producers_output(states.get(key, []), args.format))
    return 0


def transactions_find_hanging(args: argparse.Namespace) -> int:
    """``loglake transactions find-hanging``: Kafka's option rules, then
    :func:`~loglake.client.hanging_transactions.find_hanging`."""
    if args.topic is None and args.broker_id is None:
        raise ValueError("find-hanging requires either --topic or --broker-id to limit the "
                         "scope of the search")
    if args.partition is not None and args.topic is None:
        raise ValueError("the --partition argument requires --topic to be provided")
    with _admin(args) as admin:
        partitions = txns.partitions_to_search(admin, topic=args.topic,
                                               partition=args.partition,
                                               broker_id=args.broker_id)
        found = txns.find_hanging(
            admin, partitions, broker_id=args.broker_id,
            max_transaction_timeout_ms=args.max_transaction_timeout * 60_000)
    print(hanging_output(found, args.format, now_ms=int(time.time() * 1000)))
    return 0


def transactions_abort(args: argparse.Namespace) -> int:
    """``loglake transactions abort``: the transaction named by its start offset (looked up) or
    by producer id, epoch and coordinator epoch, as Kafka's tool."""
    explicit = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if args.start_offset is None and args.producer_id is None:
        raise ValueError("the transaction to abort must be identified either with "
                         "--start-offset or with --producer-id, --producer-epoch and "
                         "--coordinator-epoch")
    if args.start_offset is not None and any(v is not None for v in explicit):
        raise ValueError("give either --start-offset or --producer-id/--producer-epoch/"
                         "--coordinator-epoch, not both")
    topic, partition = args.topic, args.partition
    with _admin(args) as admin:
        if args.start_offset is None:
            if args.producer_epoch is None:
                raise ValueError("missing required argument --producer-epoch")
            if args.coordinator_epoch is None:
                raise ValueError("missing required argument --coordinator-epoch")
            producer_id, producer_epoch = args.producer_id, args.producer_epoch
            coordinator_epoch = max(args.coordinator_epoch, 0)
        else:
            try:
                state = txns.open_transaction_at(admin, topic, partition, args.start_offset)
            except LookupError as exc:
                raise ValueError(str(exc)) from None
            producer_id, producer_epoch = state.producer_id, state.producer_epoch
            coordinator_epoch = state.coordinator_epoch or 0
        txns.abort_transaction(admin, topic, partition, producer_id=producer_id,
                               producer_epoch=producer_epoch,
                               coordinator_epoch=coordinator_epoch)
    print(f"aborted the transaction of producer {producer_id} (epoch {producer_epoch}, "
          f"coordinator epoch {coordinator_epoch}) on {topic}-{partition}", file=sys.stderr)
    return 0


def producers_output(found: list[txns.ProducerState], style: str) -> str:
    """What ``transactions describe-producers`` prints (Kafka's columns; -1 / None for an
    unknown coordinator epoch / no open transaction, as Kafka)."""
    if style == "json":
        return json.dumps([asdict(p) for p in found], indent=2)
    rows = [PRODUCERS_HEADER] + [
        (str(p.producer_id), str(p.producer_epoch),
         str(-1 if p.coordinator_epoch is None else p.coordinator_epoch),
         str(p.last_sequence), str(p.last_timestamp_ms), _or_none(p.txn_start_offset))
        for p in found]
    return "\n".join("\t".join(row) for row in rows)


def hanging_output(found: list[txns.OpenTransaction], style: str, *, now_ms: int) -> str:
    """What ``transactions find-hanging`` prints (Kafka's columns; the duration in whole
    minutes since the producer's last write)."""
    if style == "json":
        return json.dumps([{"topic": t.topic, "partition": t.partition, **asdict(t.producer),
                            "duration_ms": t.open_ms(now_ms)} for t in found], indent=2)
    rows = [HANGING_HEADER] + [
        (t.topic, str(t.partition), str(t.producer.producer_id),
         str(t.producer.producer_epoch),
         str(-1 if t.producer.coordinator_epoch is None else t.producer.coordinator_epoch),
         str(-1 if t.producer.txn_start_offset is None else t.producer.txn_start_offset),
         str(t.producer.last_timestamp_ms), str(t.open_ms(now_ms) // 60_000))
        for t in found]
    return "\n".join("\t".join(row) for row in rows)


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
    return _int_in(text, 0, 2**63 - 1)


def _non_negative_int32(text: str) -> int:
    """A partition or broker id: Kafka's int32, never negative."""
    return _int_in(text, 0, 2**31 - 1)


def _int_in(text: str, low: int, high: int) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not low <= number <= high:
        raise argparse.ArgumentTypeError(f"expected an integer from {low} to {high}, got "
                                         f"{text!r}")
    return number


def _epoch(text: str) -> int:
    """A producer epoch: Kafka's short, never negative."""
    return _int_in(text, 0, 2**15 - 1)


def _int32(text: str) -> int:
    return _int_in(text, -(2**31), 2**31 - 1)


def _timeout_minutes(text: str) -> int:
    return _int_in(text, 0, MAX_TRANSACTION_TIMEOUT_MIN)


def _topic_name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the topic name must not be empty")
    return text
