"""Tiering: how far each topic's Delta table trails its log, in records and seconds, over time.

Routes: ``GET /tiering`` (page), ``GET /fragments/tiering`` (its tables, polled every 2 s),
``GET /charts/tiering`` (the lag-seconds chart's data: one line per topic, the largest lag of
its partitions, from the sampler; JSON in Chart.js's form; no cluster call without a login).
With a login, the tables and the chart show only the topics the user's Metadata lists (the
sampler runs as the console's own account; its lines are filtered before they are sent).

Where the numbers come from (:func:`snapshot`, blocking):

* the partition leaders' metrics endpoints (``/loglake/metrics/<id>``, scraped in parallel,
  :data:`SCRAPE_TIMEOUT_S` each): ``loglake_tier_lag_records`` / ``loglake_tier_lag_seconds``
  per partition (computed at scrape time: live), ``loglake_tier_table_version`` / ``_files`` /
  ``_bytes`` and ``loglake_tier_commits_total`` per topic (the newest of the brokers that lead
  a partition of it);
* for partitions no endpoint reports (metrics off, broker down), the status the leader last
  wrote in ZooKeeper (``/loglake/tiering/<topic>/<p>``: the same lag rule); its
  ``lag_seconds`` was true when written, so the age of the report is added while records are
  pending. The ``source`` column says which one a row shows.

"Last commit" is when the console saw the table version (or the tiered end offsets) of a topic
move, from the sampler's ticks: the console does not read the Delta log (it is a tool without
storage credentials). ``-`` until it saw one since it started.

Sampling (the probe registered with :mod:`loglake.console.sampler`): per tick one
:func:`snapshot`; series ``("tier", topic)`` -> the topic's largest lag in seconds.

Threads: :func:`snapshot` blocks (ZooKeeper reads, HTTP scrapes) and runs in worker threads;
the "last commit" memory is a dict in ``ctx.extras`` replaced (never mutated) by the sampler's
probe, read by handlers (GIL-atomic reference swap).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from loglake.console.context import (
    CHART_ANSWER_MAX_AGE_S,
    ConsoleContext,
    blocking,
    console,
    render,
)
from loglake.console.sampler import Key, chart, sampler_of

SCRAPE_TIMEOUT_S = 2.0
MAX_SCRAPE_BYTES = 64 << 20
PARTITION_METRICS = ("loglake_tier_lag_records", "loglake_tier_lag_seconds")
TOPIC_METRICS = ("loglake_tier_table_version", "loglake_tier_table_files",
                 "loglake_tier_table_bytes", "loglake_tier_commits")
COMMITS_KEY = "tiering.commits"


@dataclass
class PartitionTier:
    """One partition's tiering state."""

    partition: int
    leader: int | None = None
    tier_start: int | None = None
    tiered_end: int | None = None
    local_start: int | None = None
    high_watermark: int | None = None
    lag_records: float | None = None
    lag_seconds: float | None = None
    quarantined: int | None = None
    failures: int = 0
    last_error: str | None = None
    reported_ms: int | None = None
    source: str = "-"


@dataclass
class TopicTier:
    """One topic's row: its partitions and the table's statistics."""

    topic: str
    partitions: list[PartitionTier] = field(default_factory=list)
    table_version: float | None = None
    table_files: float | None = None
    table_bytes: float | None = None
    commits: float | None = None
    last_commit_ms: int | None = None

    @property
    def lag_records(self) -> float | None:
        known = [p.lag_records for p in self.partitions if p.lag_records is not None]
        return sum(known) if known else None

    @property
    def lag_seconds(self) -> float | None:
        known = [p.lag_seconds for p in self.partitions if p.lag_seconds is not None]
        return max(known) if known else None

    @property
    def tiered_end_total(self) -> int:
        return sum(p.tiered_end or 0 for p in self.partitions)

    @property
    def failing(self) -> bool:
        return any(p.failures for p in self.partitions)


@dataclass
class TieringView:
    storage: str | None
    topics: list[TopicTier]
    scrape_errors: dict[int, str]
    taken_ms: int


# ---- metrics scraping ------------------------------------------------------------------------

@dataclass
class Scraped:
    """The tier metrics of one broker's endpoint."""

    partitions: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)
    topics: dict[str, dict[str, float]] = field(default_factory=dict)


def parse_tier_metrics(text: str) -> Scraped:
    """The ``loglake_tier_*`` samples of a Prometheus text exposition (ValueError if it does
    not parse)."""
    out = Scraped()
    for family in text_string_to_metric_families(text):
        if family.name not in PARTITION_METRICS and family.name not in TOPIC_METRICS:
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            topic = sample.labels.get("topic")
            if topic is None:
                continue
            if family.name in PARTITION_METRICS:
                try:
                    partition = int(sample.labels.get("partition", ""))
                except ValueError:
                    continue
                out.partitions.setdefault((topic, partition), {})[family.name] = sample.value
            else:
                out.topics.setdefault(topic, {})[family.name] = sample.value
    return out


def scrape(url: str) -> Scraped:
    """GET ``url`` (``/metrics`` appended when missing) and parse its tier metrics."""
    url = url.rstrip("/")
    url = url if url.endswith("/metrics") else url + "/metrics"
    response = httpx.get(url, timeout=SCRAPE_TIMEOUT_S)
    if response.status_code != 200:
        raise ValueError(f"{url} answered HTTP {response.status_code}")
    if len(response.content) > MAX_SCRAPE_BYTES:
        raise ValueError(f"{url} answered more than {MAX_SCRAPE_BYTES} bytes")
    return parse_tier_metrics(response.text)


def _scrape_all(urls: dict[int, str]) -> tuple[dict[int, Scraped], dict[int, str]]:
    if not urls:
        return {}, {}
    found: dict[int, Scraped] = {}
    errors: dict[int, str] = {}
    with concurrent.futures.ThreadPoolExecutor(min(len(urls), 16), "console-scrape") as pool:
        futures = {bid: pool.submit(scrape, url) for bid, url in urls.items()}
        for bid, future in futures.items():
            try:
                found[bid] = future.result()
            except (httpx.HTTPError, ValueError) as exc:
                errors[bid] = str(exc) or type(exc).__name__
    return found, errors


# ---- the snapshot (blocking) -----------------------------------------------------------------

def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def merge(topic: str, partitions: list[int], zk_status: dict[int, dict[str, Any]],
          scraped: dict[int, Scraped], *, now_ms: int) -> TopicTier:
    """One topic's row from the ZooKeeper statuses and the scraped metrics (pure)."""
    row = TopicTier(topic)
    for partition in partitions:
        status = zk_status.get(partition) or {}
        tier = PartitionTier(
            partition, leader=_int(status.get("leader")),
            tier_start=_int(status.get("tier_start")), tiered_end=_int(status.get("tiered_end")),
            local_start=_int(status.get("local_start")),
            high_watermark=_int(status.get("high_watermark")),
            quarantined=_int(status.get("quarantined")),
            failures=_int(status.get("failures")) or 0,
            last_error=str(status["last_error"]) if status.get("last_error") else None,
            reported_ms=_int(status.get("updated_ms")))
        live = None
        for found in scraped.values():
            if (topic, partition) in found.partitions:
                live = found.partitions[(topic, partition)]
                break
        if live is not None:
            tier.lag_records = live.get("loglake_tier_lag_records")
            tier.lag_seconds = live.get("loglake_tier_lag_seconds")
            tier.source = "metrics"
        elif status:
            tier.lag_records = status.get("lag_offsets")
            seconds = status.get("lag_seconds")
            if isinstance(seconds, int | float):
                if tier.lag_records and tier.reported_ms:
                    seconds += max(0.0, (now_ms - tier.reported_ms) / 1000)
                tier.lag_seconds = float(seconds)
            tier.source = "zookeeper"
        row.partitions.append(tier)
    for found in scraped.values():
        stats = found.topics.get(topic)
        if not stats:
            continue
        version = stats.get("loglake_tier_table_version")
        if version is not None and (row.table_version is None or version > row.table_version):
            row.table_version = version
            row.table_files = stats.get("loglake_tier_table_files")
            row.table_bytes = stats.get("loglake_tier_table_bytes")
        commits = stats.get("loglake_tier_commits")
        if commits is not None:
            row.commits = (row.commits or 0.0) + commits
    return row


def snapshot(ctx: ConsoleContext) -> TieringView:
    """Every topic's tiering state (blocking; see the module)."""
    catalog = ctx.catalog()
    now_ms = int(time.time() * 1000)
    storage = catalog.storage()
    urls = catalog.metrics_urls()
    scraped, errors = _scrape_all(urls)
    visible = ctx.visible_topics()  # a logged-in user sees the topics their Metadata lists
    topics = []
    for name in sorted(catalog.topic_names()):
        if visible is not None and name not in visible:
            continue
        meta = catalog.topic(name)
        if meta is None:
            continue
        topics.append(merge(name, sorted(meta.assignment), catalog.tiering_status(name),
                            scraped, now_ms=now_ms))
    commits: dict[str, int] = ctx.extras.get(COMMITS_KEY, {}).get("seen", {})
    for row in topics:
        row.last_commit_ms = commits.get(row.topic)
    return TieringView(storage[0] if storage else None, topics, errors, now_ms)


def observe_commits(previous: dict[str, Any], view: TieringView) -> dict[str, Any]:
    """The "last commit" memory after ``view`` (pure): per topic the (table version, tiered
    ends) last seen and when they last moved."""
    marks: dict[str, tuple[float | None, int]] = dict(previous.get("marks", {}))
    seen: dict[str, int] = dict(previous.get("seen", {}))
    for row in view.topics:
        mark = (row.table_version, row.tiered_end_total)
        before = marks.get(row.topic)
        if before is not None and before != mark:
            seen[row.topic] = view.taken_ms
        marks[row.topic] = mark
    names = {row.topic for row in view.topics}
    return {"marks": {k: v for k, v in marks.items() if k in names},
            "seen": {k: v for k, v in seen.items() if k in names}}


def sample(ctx: ConsoleContext) -> dict[Key, float]:
    """The sampler's probe: each topic's largest lag in seconds (blocking)."""
    view = snapshot(ctx)
    ctx.extras[COMMITS_KEY] = observe_commits(ctx.extras.get(COMMITS_KEY, {}), view)
    return {("tier", row.topic): row.lag_seconds for row in view.topics
            if row.lag_seconds is not None}


# ---- handlers --------------------------------------------------------------------------------

async def page(request: Request) -> Response:
    view = await blocking(snapshot, console(request))
    return render(request, "tiering.html", view=view)


async def live(request: Request) -> Response:
    view = await blocking(snapshot, console(request))
    return render(request, "tiering_live.html", view=view)


def _topic_label(visible: set[str] | None) -> Callable[[Key], str | None]:
    def label(key: Key) -> str | None:
        if len(key) == 2 and key[0] == "tier" and (visible is None or str(key[1]) in visible):
            return str(key[1])
        return None
    return label


async def lag_json(request: Request) -> Response:
    """The chart's data from the sampler (the console's own account): a logged-in user gets
    the lines of the topics their Metadata lists (an answer of the last seconds reused)."""
    ctx = console(request)
    visible = None
    if ctx.login() is not None:
        visible = await blocking(lambda: ctx.visible_topics(max_age_s=CHART_ANSWER_MAX_AGE_S))
    data = chart(sampler_of(ctx).store, _topic_label(visible))
    return JSONResponse(data.to_json())


async def start(ctx: ConsoleContext) -> None:
    """Lifespan hook: register the tier-lag probe with the sampler."""
    sampler_of(ctx).add_probe("tiering", lambda: sample(ctx))


ROUTES: list[BaseRoute] = [
    Route("/tiering", page, methods=["GET"]),
    Route("/fragments/tiering", live, methods=["GET"]),
    Route("/charts/tiering", lag_json, methods=["GET"]),
]
