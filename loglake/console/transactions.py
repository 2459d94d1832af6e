"""Transactions: the transactional ids the coordinators know, the transactions open on
partitions, hanging ones highlighted, and aborting a hanging one.

Routes:

* ``GET /transactions`` (page) and ``GET /fragments/transactions`` (its tables, polled every
  2 s). ``?max_transaction_timeout=MINUTES`` (0..10080, default 15: Kafka's
  ``kafka-transactions find-hanging --max-transaction-timeout``) is how long a partition's open
  transaction may go without a write before it can count as hanging.
* ``POST /transactions/abort`` (form fields ``topic``, ``partition``, ``producer_id``,
  ``producer_epoch``, ``coordinator_epoch``): Kafka's ``kafka-transactions abort`` — an ABORT
  marker written by the partition's leader (WriteTxnMarkers). Answers a status fragment; a
  refusal gets its HTTP status with Kafka's error name (CLUSTER_AUTHORIZATION_FAILED: 403),
  bad fields a 400.

What the tables show:

* **Transactional ids** — ListTransactions on every broker, merged; ids in a state with an open
  transaction (Ongoing, PrepareCommit, PrepareAbort, PrepareEpochFence) described by their
  coordinator (DescribeTransactions; at most ``MAX_DESCRIBED``): producer id and epoch, state,
  start time, duration, timeout and partitions. An Ongoing transaction open longer than its
  timeout is highlighted *overdue* (the coordinator aborts such a transaction on its next
  expiry check; one that stays overdue is stuck).
* **Open transactions on partitions** — DescribeProducers on every partition of every topic
  (at most ``MAX_PARTITIONS``, internal topics left out), the producers with an open
  transaction: partition, producer id and epoch, coordinator epoch, first offset, last write.
  *Hanging* is Kafka's ``find-hanging`` rule (:mod:`loglake.client.hanging_transactions`): no
  write for longer than the max transaction timeout, and no coordinator expects to end it (its
  producer id is unknown, or the coordinator's transaction does not name the partition). Only
  hanging ones get an abort button (aborting a live transaction would break its producer).

Threads: :func:`snapshot` and the abort block (SDK round trips) and run in a worker thread.
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from loglake.client import hanging_transactions as txns
from loglake.client.admin import Admin
from loglake.client.errors import BrokerError
from loglake.client.model import TransactionDescription, TransactionListing
from loglake.console.context import (
    ConsoleContext,
    blocking,
    console,
    error_response,
    form_value,
    int_param,
    render,
)
from loglake.errors import LoglakeError

MAX_DESCRIBED = 100
"""Transactional ids described per refresh (the rest are listed without their details)."""
MAX_PARTITIONS = 2000
"""Partitions whose producers are described per refresh."""
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
"""Coordinator states with a transaction in progress (described)."""
DEFAULT_MAX_TIMEOUT_MIN = txns.DEFAULT_MAX_TRANSACTION_TIMEOUT_MS // 60_000
MAX_TIMEOUT_MIN = 7 * 24 * 60
INTERNAL_PREFIX = "__"
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class TransactionRow:
    """One transactional id: its listing and, when described, its coordinator's view."""

    listing: TransactionListing
    description: TransactionDescription | None
    overdue: bool
    duration_ms: int | None


@dataclass(frozen=True)
class OpenRow:
    """A transaction open on a partition, with the transactional id that owns its producer id
    (None: no coordinator knows it) and whether it is hanging."""

    txn: txns.OpenTransaction
    transactional_id: str | None
    hanging: bool
    idle_ms: int


@dataclass(frozen=True)
class TransactionsView:
    transactions: list[TransactionRow]
    open: list[OpenRow]
    now_ms: int
    max_timeout_min: int
    partitions_searched: int
    partitions_left_out: int
    errors: list[str]

    @property
    def hanging(self) -> int:
        return sum(1 for row in self.open if row.hanging)

    @property
    def overdue(self) -> int:
        return sum(1 for row in self.transactions if row.overdue)


def transaction_row(listing: TransactionListing, description: TransactionDescription | None,
                    now_ms: int) -> TransactionRow:
    """A listed id with its description (pure): overdue when Ongoing past its timeout."""
    duration = None
    overdue = False
    if description is not None and description.start_time_ms is not None:
        duration = max(0, now_ms - description.start_time_ms)
        overdue = description.state == "Ongoing" and duration > description.timeout_ms
    return TransactionRow(listing, description, overdue, duration)


def open_rows(open_txns: list[txns.OpenTransaction], transactional_ids: dict[int, str],
              descriptions: dict[str, TransactionDescription | None], *, now_ms: int,
              max_timeout_ms: int) -> list[OpenRow]:
    """Every open transaction with Kafka's hanging verdict (pure)."""
    candidates = [t for t in open_txns if t.open_ms(now_ms) > max_timeout_ms]
    hanging = {id(t) for t in txns.hanging(candidates, transactional_ids, descriptions)}
    return [OpenRow(t, transactional_ids.get(t.producer.producer_id), id(t) in hanging,
                    t.open_ms(now_ms)) for t in open_txns]


def snapshot(ctx: ConsoleContext, max_timeout_min: int) -> TransactionsView:
    """Both tables (blocking; a part that fails is reported in ``errors``, the rest shown)."""
    admin = ctx.admin()
    now_ms = int(time.time() * 1000)
    errors: list[str] = []
    listings: list[TransactionListing] = []
    try:
        listings = admin.list_transactions()
    except LoglakeError as exc:
        errors.append(f"list transactions: {exc}")
    open_txns: list[txns.OpenTransaction] = []
    keys, left_out = _partitions(admin)
    refused: dict[tuple[str, int], BrokerError] = {}
    try:
        open_txns = txns.open_transactions(txns.describe_producers(admin, keys,
                                                                   refused=refused))
    except LoglakeError as exc:
        errors.append(f"describe producers: {exc}")
    if refused:  # e.g. topics the (logged-in) user may describe but not read
        (key, first), count = next(iter(refused.items())), len(refused)
        errors.append(f"describe producers: {count} partition(s) refused, e.g. "
                      f"{key[0]}-{key[1]}: {first}")
    transactional_ids = {t.producer_id: t.transactional_id for t in listings}
    wanted = {transactional_ids[t.producer.producer_id] for t in open_txns
              if t.producer.producer_id in transactional_ids}
    to_describe = sorted(wanted) + sorted(
        t.transactional_id for t in listings
        if t.state in OPEN_STATES and t.transactional_id not in wanted)
    descriptions: dict[str, TransactionDescription | None] = {}
    for transactional_id in to_describe[:MAX_DESCRIBED]:
        try:
            descriptions[transactional_id] = admin.describe_transaction(transactional_id)
        except BrokerError as exc:
            if exc.code != ErrorCode.transactional_id_not_found:
                errors.append(f"describe {transactional_id!r}: {exc}")
            descriptions[transactional_id] = None
    rows = [transaction_row(t, descriptions.get(t.transactional_id), now_ms) for t in listings]
    # an id that was not described (beyond MAX_DESCRIBED, or failed) is not evidence of a
    # hanging transaction: only ids described as gone or not naming the partition are
    undescribed = {pid for pid, tid in transactional_ids.items() if tid not in descriptions}
    opened = open_rows(open_txns, transactional_ids, descriptions, now_ms=now_ms,
                       max_timeout_ms=max_timeout_min * 60_000)
    opened = [row if row.txn.producer.producer_id not in undescribed
              else OpenRow(row.txn, row.transactional_id, False, row.idle_ms) for row in opened]
    return TransactionsView(rows, opened, now_ms, max_timeout_min, len(keys), left_out, errors)


def _partitions(admin: Admin) -> tuple[list[tuple[str, int]], int]:
    """Every partition of every non-internal topic with a leader, at most MAX_PARTITIONS
    (sorted), and how many were left out."""
    keys = [(name, p.partition) for name, info in admin.list_topics().items()
            if not name.startswith(INTERNAL_PREFIX)
            for p in info.partitions if p.leader >= 0]
    keys.sort()
    return keys[:MAX_PARTITIONS], max(0, len(keys) - MAX_PARTITIONS)


def _max_timeout(request: Request) -> int:
    value = int_param(request.query_params.get("max_transaction_timeout"),
                      "max_transaction_timeout", default=DEFAULT_MAX_TIMEOUT_MIN, minimum=0,
                      maximum=MAX_TIMEOUT_MIN)
    assert value is not None
    return value


async def page(request: Request) -> Response:
    minutes = _max_timeout(request)
    view = await blocking(snapshot, console(request), minutes)
    return render(request, "transactions.html", view=view)


async def live(request: Request) -> Response:
    minutes = _max_timeout(request)
    view = await blocking(snapshot, console(request), minutes)
    return render(request, "transactions_live.html", view=view)


@dataclass(frozen=True)
class AbortSpec:
    """What the abort form names (Kafka's AbortTransactionSpec)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


def parse_abort(form: Mapping[str, Any]) -> AbortSpec:
    """The abort form (ValueError with a clear message)."""
    topic = form_value(form, "topic", max_length=300)
    if not topic:
        raise ValueError("name the topic of the transaction to abort")

    def number(name: str, maximum: int, default: int | None = None) -> int:
        value = int_param(form_value(form, name, max_length=40), name, default=default,
                          minimum=0, maximum=maximum)
        if value is None:
            raise ValueError(f"{name} is required")
        return value

    return AbortSpec(topic, number("partition", INT32_MAX), number("producer_id", INT64_MAX),
                     number("producer_epoch", 32767),
                     number("coordinator_epoch", INT32_MAX, default=0))


async def abort(request: Request) -> Response:
    form = await request.form(max_files=0, max_fields=20, max_part_size=64 * 1024)
    spec = parse_abort(form)
    ctx = console(request)

    def call() -> None:
        txns.abort_transaction(ctx.admin(), spec.topic, spec.partition,
                               producer_id=spec.producer_id,
                               producer_epoch=spec.producer_epoch,
                               coordinator_epoch=spec.coordinator_epoch)

    try:
        await blocking(call)
    except LoglakeError as exc:  # the message names the operation and Kafka's error name
        return error_response(exc, None)
    text = (f"Aborted the transaction of producer {spec.producer_id} (epoch "
            f"{spec.producer_epoch}) on {spec.topic}-{spec.partition}.")
    return HTMLResponse(f'<div class="notice" role="status">{html.escape(text)}</div>')


ROUTES: list[BaseRoute] = [
    Route("/transactions", page, methods=["GET"]),
    Route("/fragments/transactions", live, methods=["GET"]),
    Route("/transactions/abort", abort, methods=["POST"]),
]
