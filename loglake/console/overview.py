"""Cluster overview: ``/`` (page) and ``/overview/live`` (the fragment it polls every 2 s).

What a broker's health means here: **registered** (its ephemeral ``/brokers/ids/<id>`` znode
exists), **answering** (an ApiVersions request to its client endpoint is answered within
:data:`PROBE_TIMEOUT_S`), **metrics reachable** (a GET of the URL its metrics listener
published under ``/loglake/metrics/<id>`` answers 200 within the same bound; "n/a" when the
broker publishes none). Healthy = registered and answering and (metrics reachable or n/a).
A broker that was seen registered, or that a topic's assignment names, but is not registered
now, is listed as *not registered* (so a killed broker stays on the page, unhealthy, after its
session expired).

With a login (``--basic-auth``) the topic, partition, offline and under-replicated counts cover
the topics the user's Metadata lists (the brokers and the controller are in everyone's
Metadata, so they are listed for everyone).

Threads: :func:`snapshot` blocks (ZooKeeper reads, one probe thread per broker) and runs in a
worker thread; the set of brokers seen is kept in ``ctx.extras["overview.seen"]`` under the
GIL (a dict replaced, never mutated while read).
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field

import httpx
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

import loglake
from loglake.catalog.zookeeper import BrokerInfo
from loglake.client import _wire
from loglake.client.security import SecurityConfig
from loglake.console.context import ConsoleContext, blocking, client_endpoint, console, render

PROBE_TIMEOUT_S = 2.0
API_VERSIONS = (18, 0)
PRODUCE, FETCH = 0, 1


@dataclass
class BrokerHealth:
    """One row of the brokers table."""

    broker_id: int
    registered: bool
    host: str = "-"
    port: int = -1
    rack: str | None = None
    listeners: list[str] = field(default_factory=list)
    answering: bool = False
    answer_error: str | None = None
    api_count: int = 0
    produce_versions: str = "-"
    fetch_versions: str = "-"
    metrics_url: str | None = None
    metrics_ok: bool | None = None  # None: no metrics listener published
    metrics_error: str | None = None

    @property
    def healthy(self) -> bool:
        return self.registered and self.answering and self.metrics_ok is not False


@dataclass
class Overview:
    """What the overview shows."""

    brokers: list[BrokerHealth]
    controller: int
    topics: int
    partitions: int
    offline: int
    under_replicated: int
    console_version: str = loglake.__version__


def _probe(row: BrokerHealth, security: SecurityConfig) -> None:
    if row.registered:
        try:
            response = _wire.request(row.host, row.port, *API_VERSIONS, {},
                                     timeout=PROBE_TIMEOUT_S, client_id="loglake-console",
                                     operation="health check", security=security)
            versions = {int(k.api_key): (int(k.min_version), int(k.max_version))
                        for k in response.api_keys}
            row.answering = int(getattr(response.error_code, "value", response.error_code)) == 0
            row.api_count = len(versions)
            row.produce_versions = "v{}-{}".format(*versions.get(PRODUCE, ("?", "?")))
            row.fetch_versions = "v{}-{}".format(*versions.get(FETCH, ("?", "?")))
        except Exception as exc:  # any failure means "not answering"; say why
            row.answer_error = str(exc) or type(exc).__name__
    if row.metrics_url:
        url = row.metrics_url.rstrip("/")
        url = url if url.endswith("/metrics") else url + "/metrics"
        row.metrics_url = url
        try:
            got = httpx.get(url, timeout=PROBE_TIMEOUT_S)
            row.metrics_ok = got.status_code == 200
            if not row.metrics_ok:
                row.metrics_error = f"HTTP {got.status_code}"
        except httpx.HTTPError as exc:
            row.metrics_ok = False
            row.metrics_error = str(exc) or type(exc).__name__


def snapshot(ctx: ConsoleContext) -> Overview:
    """Read the cluster state and probe every broker (blocking)."""
    catalog = ctx.catalog()
    registered = catalog.brokers()
    controller = catalog.controller_id()
    states = catalog.all_partition_states()
    visible = ctx.visible_topics()
    if visible is not None:  # a logged-in user counts the topics their Metadata lists
        states = {key: value for key, value in states.items() if key[0] in visible}
    urls = catalog.metrics_urls()
    seen: dict[int, BrokerInfo] = dict(ctx.extras.get("overview.seen", {}))
    seen.update(registered)
    ctx.extras["overview.seen"] = seen
    named = {b for replicas, _ in states.values() for b in replicas}
    rows: list[BrokerHealth] = []
    for broker_id in sorted(set(seen) | named):
        info = registered.get(broker_id) or seen.get(broker_id)
        row = BrokerHealth(broker_id, registered=broker_id in registered)
        if info is not None:
            endpoint = client_endpoint(info, ctx.security)
            row.host, row.port, row.rack = endpoint[0], endpoint[1], info.rack
            row.listeners = [str(e) for e in info.all_endpoints]
        row.metrics_url = urls.get(broker_id) if row.registered else None
        rows.append(row)
    workers = max(1, min(len(rows), 16))
    with concurrent.futures.ThreadPoolExecutor(workers, "console-probe") as pool:
        list(pool.map(lambda r: _probe(r, ctx.security), rows))
    offline = sum(1 for _, state in states.values() if state.leader < 0
                  or state.leader not in registered)
    under = sum(1 for replicas, state in states.values() if len(state.isr) < len(replicas))
    return Overview(brokers=rows, controller=controller,
                    topics=len({topic for topic, _ in states}), partitions=len(states),
                    offline=offline, under_replicated=under)


async def page(request: Request) -> Response:
    data = await blocking(snapshot, console(request))
    return render(request, "overview.html", data=data)


async def live(request: Request) -> Response:
    data = await blocking(snapshot, console(request))
    return render(request, "overview_live.html", data=data)


ROUTES: list[BaseRoute] = [
    Route("/", page, methods=["GET"]),
    Route("/overview/live", live, methods=["GET"]),
]
