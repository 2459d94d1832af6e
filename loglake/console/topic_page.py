"""The page of one topic: ``GET /topics/{name}``.

Parts and their routes:

* partitions (``GET /fragments/topics/{name}/partitions``, polled every 2 s): leader, replicas,
  ISR, log start offset (ListOffsets earliest: the table's first offset once tiered), high
  watermark (ListOffsets latest), last stable offset (latest, read_committed), the leader's
  log end offset (from its metrics endpoint when it publishes one), and the tier/hot boundary
  from the leader's ``/loglake/tiering`` report: offsets below ``tiered_end`` are in the Delta
  table, offsets from ``local_start`` on are in local segments (both, between them).
* message browser (``GET /fragments/topics/{name}/messages`` and the page's own query):
  ``partition`` (default 0), ``offset`` or ``timestamp`` (epoch ms or ISO 8601; the first
  record at or after it), ``limit`` (1..:data:`MAX_LIMIT`), ``format`` (``auto`` / ``text`` /
  ``json`` / ``hex``). Records from ``offset`` up to the high watermark, at most ``limit``;
  ``next`` / ``previous`` links page by ``limit``. Offsets below the log start begin at the
  log start (said on the page); negative offsets, offsets past the high watermark, unknown
  partitions and malformed values are a 400 with the reason.
* produce form (``POST /topics/{name}/produce``): key, value, headers (``name: value`` lines),
  optional partition, tombstone; answers the partition and offset written.
* configs and their alteration (``POST /topics/{name}/config``: ``set`` lines ``key=value``,
  ``delete`` keys), delete (``POST /topics/{name}/delete``, in topics.py).

Everything blocking (SDK, ZooKeeper, metrics) runs in worker threads. A consumer is made per
browse and closed after it (no group: nothing is committed).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from loglake.catalog.zookeeper import TopicMetadata
from loglake.client import Consumer, Record
from loglake.console.cluster_data import log_end_offsets, tier_summary, valid_topic_name
from loglake.console.context import (
    ConsoleContext,
    bad_request,
    blocking,
    console,
    error_response,
    form_value,
    int_param,
    is_fragment,
    render,
)
from loglake.console.topics import done, parse_config_lines
from loglake.errors import LoglakeError, UnknownTopicError

MAX_LIMIT = 500
DEFAULT_LIMIT = 20
MAX_SHOWN_BYTES = 64 * 1024
"""A key, value or header value longer than this is shown cut, with its full length."""
OFFSETS_TIMEOUT_S = 4.0
BROWSE_IDLE_S = 2.0
MAX_HEADERS = 64
MAX_VALUE_CHARS = 1 << 20
Format = Literal["auto", "text", "json", "hex"]
FORMATS: tuple[Format, ...] = ("auto", "text", "json", "hex")


# -- rendering of bytes ----------------------------------------------------------------------


@dataclass
class Shown:
    """Bytes as the page shows them."""

    kind: str  # "null", "json", "text", "hex"
    text: str
    length: int
    cut: bool = False


def show_bytes(data: bytes | None, fmt: Format) -> Shown:
    """``data`` rendered: ``auto`` tries JSON, then UTF-8 text, then hex; ``json`` pretty-prints
    when it parses (else falls back to text/hex, saying so by its kind); ``text`` decodes UTF-8
    with replacement characters; ``hex`` groups bytes by spaces."""
    if data is None:
        return Shown("null", "null", 0)
    length = len(data)
    cut = length > MAX_SHOWN_BYTES
    part = data[:MAX_SHOWN_BYTES]
    if fmt == "hex":
        return Shown("hex", part.hex(" "), length, cut)
    try:
        text = part.decode("utf-8")
    except UnicodeDecodeError:
        if fmt == "text":
            return Shown("text", part.decode("utf-8", "replace"), length, cut)
        if not cut:
            return Shown("hex", part.hex(" "), length, cut)
        text = part.decode("utf-8", "ignore")  # a cut may split a character
    if fmt in ("auto", "json") and not cut:
        try:
            parsed = json.loads(text)
        except ValueError:
            pass
        else:
            if fmt == "json" or isinstance(parsed, (dict, list)):
                return Shown("json", json.dumps(parsed, indent=2, ensure_ascii=False), length)
    return Shown("text", text, length, cut)


# -- parameters ------------------------------------------------------------------------------


def parse_timestamp(raw: str) -> int:
    """Epoch milliseconds, or an ISO 8601 date/time (UTC unless it names a zone) -> ms."""
    text = raw.strip()
    if text.lstrip("-").isdigit():
        value = int_param(text, "timestamp", minimum=0, maximum=10**14)
        assert value is not None
        return value
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"timestamp must be epoch milliseconds or an ISO 8601 date/time, got "
                         f"{raw[:40]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    ms = int(moment.timestamp() * 1000)
    if ms < 0:
        raise ValueError(f"timestamp must not be before 1970, got {raw[:40]!r}")
    return ms


@dataclass
class BrowseQuery:
    partition: int = 0
    offset: int | None = None
    timestamp_ms: int | None = None
    limit: int = DEFAULT_LIMIT
    fmt: Format = "auto"

    @classmethod
    def from_params(cls, params: Any) -> BrowseQuery:
        """From a request's query parameters (ValueError with the reason)."""
        fmt = typing.cast(Format, (params.get("format") or "auto").strip())
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt[:20]!r}")
        raw_ts = params.get("timestamp") or ""
        offset = int_param(params.get("offset"), "offset", minimum=0, maximum=2**63 - 1)
        if offset is not None and raw_ts.strip():
            raise ValueError("give an offset or a timestamp, not both")
        partition = int_param(params.get("partition"), "partition", default=0, minimum=0,
                              maximum=2**31 - 1)
        limit = int_param(params.get("limit"), "limit", default=DEFAULT_LIMIT, minimum=1,
                          maximum=MAX_LIMIT)
        assert partition is not None and limit is not None
        return cls(partition=partition, offset=offset,
                   timestamp_ms=parse_timestamp(raw_ts) if raw_ts.strip() else None,
                   limit=limit, fmt=fmt)


# -- reads -----------------------------------------------------------------------------------


@dataclass
class PartitionRow:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start: int | None = None
    high_watermark: int | None = None
    last_stable: int | None = None
    log_end: int | None = None
    tier_start: int | None = None
    tiered_end: int | None = None
    local_start: int | None = None
    tier_lag_records: int | None = None
    tier_lag_seconds: float | None = None
    tier_failures: int = 0
    tier_error: str | None = None


@dataclass
class TopicView:
    name: str
    partitions: list[PartitionRow]
    configs: dict[str, Any]
    tier_status: str
    notes: list[str] = field(default_factory=list)


def _meta(ctx: ConsoleContext, name: str) -> TopicMetadata:
    if not valid_topic_name(name):
        raise ValueError(f"invalid topic name {name[:80]!r}")
    ctx.check_topic_visible(name)
    meta = ctx.catalog().topic(name)
    if meta is None:
        raise UnknownTopicError(f"topic {name!r} does not exist")
    return meta


def topic_view(ctx: ConsoleContext, name: str, *, with_configs: bool) -> TopicView:
    """The partitions (and configs) of ``name`` (blocking)."""
    meta = _meta(ctx, name)
    catalog = ctx.catalog()
    brokers = catalog.brokers()
    status = catalog.tiering_status(name)
    rows = []
    for partition, replicas in sorted(meta.assignment.items()):
        state = catalog.partition_state(name, partition)
        row = PartitionRow(partition, state.leader if state else -1, tuple(replicas),
                           tuple(state.isr) if state else ())
        tier = status.get(partition) or {}
        row.tier_start = tier.get("tier_start")
        row.tiered_end = tier.get("tiered_end")
        row.local_start = tier.get("local_start")
        row.tier_lag_records = tier.get("lag_offsets")
        row.tier_lag_seconds = tier.get("lag_seconds")
        row.tier_failures = int(tier.get("failures") or 0)
        row.tier_error = tier.get("last_error")
        rows.append(row)
    notes: list[str] = []
    admin = ctx.admin()
    live = [r.partition for r in rows if r.leader in brokers]
    if live:
        for attr, query, isolation in (("log_start", "earliest", "read_uncommitted"),
                                       ("high_watermark", "latest", "read_uncommitted"),
                                       ("last_stable", "latest", "read_committed")):
            try:
                found = admin.list_offsets(name, query, partitions=live,  # type: ignore[arg-type]
                                           timeout=OFFSETS_TIMEOUT_S,
                                           isolation_level=isolation)  # type: ignore[arg-type]
            except LoglakeError as exc:
                notes.append(f"offsets ({attr.replace('_', ' ')}): {exc}")
                continue
            for row in rows:
                if row.partition in found:
                    setattr(row, attr, found[row.partition])
    urls = catalog.metrics_urls()
    leaders = {r.leader for r in rows}
    ends = log_end_offsets(url for bid, url in urls.items() if bid in leaders)
    for row in rows:
        row.log_end = ends.get((name, row.partition))
    configs: dict[str, Any] = {}
    if with_configs:
        try:
            configs = dict(admin.describe_config(name, timeout=OFFSETS_TIMEOUT_S))
        except LoglakeError as exc:
            notes.append(f"configs: {exc}")
    word, _, _ = tier_summary(status, len(rows))
    return TopicView(name, rows, configs, word, notes)


@dataclass
class ShownRecord:
    partition: int
    offset: int
    timestamp_ms: int | None
    key: Shown
    value: Shown
    headers: list[tuple[str, Shown]]


@dataclass
class Page:
    query: BrowseQuery
    start: int
    log_start: int
    high_watermark: int
    records: list[ShownRecord]
    notes: list[str] = field(default_factory=list)

    @property
    def next_offset(self) -> int | None:
        if not self.records:
            return None
        following = self.records[-1].offset + 1
        return following if following < self.high_watermark else None

    @property
    def previous_offset(self) -> int | None:
        if self.start <= self.log_start:
            return None
        return max(self.log_start, self.start - self.query.limit)


def browse(ctx: ConsoleContext, name: str, query: BrowseQuery) -> Page:
    """The records of one page of the browser (blocking). ValueError for an offset past the
    end or an unknown partition."""
    meta = _meta(ctx, name)
    if query.partition not in meta.assignment:
        raise ValueError(f"topic {name!r} has no partition {query.partition} (partitions: "
                         f"0..{len(meta.assignment) - 1})")
    consumer = Consumer(ctx.bootstrap(), security=ctx.client_security(),
                        client_id="loglake-console", isolation_level="read_committed",
                        request_timeout_s=OFFSETS_TIMEOUT_S,
                        fetch_max_wait_ms=100)
    try:
        low, high = consumer.watermarks(name, query.partition, timeout=OFFSETS_TIMEOUT_S)
        notes: list[str] = []
        if query.timestamp_ms is not None:
            found = consumer.offsets_for_times(name, query.timestamp_ms,
                                               partitions=[query.partition],
                                               timeout=OFFSETS_TIMEOUT_S)
            at = found.get(query.partition)
            if at is None:
                notes.append("no record at or after that time")
            start = high if at is None else at
        elif query.offset is None:
            start = max(low, high - query.limit)
        else:
            start = query.offset
        if start > high:
            raise ValueError(f"offset {start} is past the end of {name}[{query.partition}] "
                             f"(high watermark {high}; offsets {low}..{max(low, high - 1)})")
        if start < low:
            notes.append(f"offset {start} is below the log start {low}: starting there")
            start = low
        records: list[Record] = []
        if start < high:
            consumer.assign(name, [query.partition], start=start, timeout=OFFSETS_TIMEOUT_S)
            deadline = time.monotonic() + max(BROWSE_IDLE_S * 3, 6.0)
            for record in consumer.consume(query.limit, timeout=BROWSE_IDLE_S):
                records.append(record)
                if record.offset >= high - 1 or time.monotonic() > deadline:
                    break
        shown = [ShownRecord(r.partition, r.offset, r.timestamp_ms,
                             show_bytes(r.key, query.fmt), show_bytes(r.value, query.fmt),
                             [(hk, show_bytes(hv, query.fmt)) for hk, hv in r.headers])
                 for r in records]
        return Page(query, start, low, high, shown, notes)
    finally:
        with contextlib.suppress(Exception):
            consumer.close()


# -- handlers --------------------------------------------------------------------------------


async def page(request: Request) -> Response:
    ctx = console(request)
    name = request.path_params["name"]
    view = await blocking(topic_view, ctx, name, with_configs=True)
    browse_error: str | None = None
    result: Page | None = None
    try:
        query = BrowseQuery.from_params(request.query_params)
        result = await blocking(browse, ctx, name, query)
    except (LoglakeError, ValueError) as exc:
        if request.query_params:
            return error_response(exc, request, doing=f"browse {name!r}")
        browse_error = str(exc)
        query = BrowseQuery()
    return render(request, "topic.html", view=view, page=result, query=query,
                  browse_error=browse_error, formats=FORMATS, max_limit=MAX_LIMIT)


async def partitions(request: Request) -> Response:
    view = await blocking(topic_view, console(request), request.path_params["name"],
                          with_configs=False)
    return render(request, "topic_partitions.html", view=view)


async def messages(request: Request) -> Response:
    name = request.path_params["name"]
    try:
        query = BrowseQuery.from_params(request.query_params)
        result = await blocking(browse, console(request), name, query)
    except (LoglakeError, ValueError) as exc:
        return error_response(exc, request, doing=f"browse {name!r}")
    return render(request, "topic_messages.html", page=result, name=name)


def parse_headers(text: str) -> list[tuple[str, str]]:
    """``name: value`` (or ``name=value``) lines -> header pairs (ValueError on a bad line)."""
    headers = []
    for line in text.splitlines():
        if not line.strip():
            continue
        for separator in (":", "="):
            key, sep, value = line.partition(separator)
            if sep and key.strip():
                headers.append((key.strip(), value.strip()))
                break
        else:
            raise ValueError(f"header line {line[:80]!r} is not 'name: value'")
    if len(headers) > MAX_HEADERS:
        raise ValueError(f"at most {MAX_HEADERS} headers, got {len(headers)}")
    return headers


async def produce(request: Request) -> Response:
    ctx = console(request)
    name = request.path_params["name"]
    try:
        form = await request.form(max_files=0, max_fields=10, max_part_size=MAX_VALUE_CHARS)
        key = form_value(form, "key", max_length=MAX_VALUE_CHARS)
        raw_value = form.get("value", "")
        if not isinstance(raw_value, str) or len(raw_value) > MAX_VALUE_CHARS:
            raise ValueError(f"value must be text of at most {MAX_VALUE_CHARS} characters")
        headers = parse_headers(form_value(form, "headers", max_length=64 * 1024))
        partition = int_param(form_value(form, "partition"), "partition", minimum=0,
                              maximum=2**31 - 1)
        tombstone = form_value(form, "tombstone") in ("on", "true", "1")
    except ValueError as exc:
        return bad_request(str(exc), request)

    def call() -> Any:
        meta = _meta(ctx, name)
        if partition is not None and partition not in meta.assignment:
            raise ValueError(f"topic {name!r} has no partition {partition} (partitions: "
                             f"0..{len(meta.assignment) - 1})")
        producer = ctx.producer()
        delivery = producer.send(name, None if tombstone else raw_value, key=key or None,
                                 headers=headers or None, partition=partition)
        producer.flush(OFFSETS_TIMEOUT_S * 2)
        return delivery.result(timeout=OFFSETS_TIMEOUT_S * 2)

    try:
        written = await blocking(call)
    except (LoglakeError, ValueError) as exc:
        return error_response(exc, request, doing=f"produce to {name!r}")
    message = (f"Produced to {name} partition {written.partition} at offset "
               f"{written.offset}.")
    if is_fragment(request):
        return HTMLResponse(
            f'<div class="notice" role="status" data-partition="{int(written.partition)}" '
            f'data-offset="{int(written.offset)}">{message} '
            f'<a href="/topics/{name}?partition={int(written.partition)}&amp;offset='
            f'{int(written.offset)}">Show it</a></div>')
    return done(request, message,
                f"/topics/{name}?partition={written.partition}&offset={written.offset}")


async def alter_config(request: Request) -> Response:
    ctx = console(request)
    name = request.path_params["name"]
    try:
        form = await request.form(max_files=0, max_fields=5, max_part_size=64 * 1024)
        updates = parse_config_lines(form_value(form, "set", max_length=64 * 1024))
        removed = [k for k in form_value(form, "delete", max_length=16 * 1024)
                   .replace(",", " ").split() if k]
        if not updates and not removed:
            raise ValueError("give at least one key=value to set or one key to delete")
    except ValueError as exc:
        return bad_request(str(exc), request)

    def call() -> None:
        _meta(ctx, name)
        ctx.admin().alter_config(name, set=updates or None, delete=removed or None,
                                 timeout=OFFSETS_TIMEOUT_S * 2)

    try:
        await blocking(call)
    except (LoglakeError, ValueError) as exc:
        return error_response(exc, request, doing=f"alter configs of {name!r}")
    changed = [*(f"{k}={v}" for k, v in updates.items()), *(f"{k} (default)" for k in removed)]
    return done(request, f"Updated {name}: {', '.join(changed)}.", f"/topics/{name}")


ROUTES: list[BaseRoute] = [
    Route("/topics/{name}", page, methods=["GET"]),
    Route("/fragments/topics/{name}/partitions", partitions, methods=["GET"]),
    Route("/fragments/topics/{name}/messages", messages, methods=["GET"]),
    Route("/topics/{name}/produce", produce, methods=["POST"]),
    Route("/topics/{name}/config", alter_config, methods=["POST"]),
]
