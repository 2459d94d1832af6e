"""Reads of cluster state the topic pages share (all blocking: call from a worker thread).

* :func:`log_sizes` — bytes of every hosted replica, from a DescribeLogDirs (v1, all topics)
  sent to each registered broker; a broker that does not answer within
  :data:`PROBE_TIMEOUT_S` is left out (its replicas show no size).
* :func:`log_end_offsets` — ``kafka_log_log_logendoffset`` of the partitions a broker leads,
  read from its metrics endpoint when it publishes one (the SDK has no call for a leader's log
  end offset; the high watermark comes from ListOffsets).
* :func:`topic_rows` — one :class:`TopicRow` per topic for the topics list: partitions, RF,
  size (sum of the leaders' replica sizes), retention and clean-up policy (the topic's
  overrides, else the broker default named), tier status from ``/loglake/tiering``.

Thread-safety: no shared state; each call opens its own sockets.
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from loglake.catalog.zookeeper import BrokerInfo, ClusterCatalog
from loglake.client import _wire
from loglake.client.security import SecurityConfig
from loglake.console.context import ConsoleContext, client_endpoint

PROBE_TIMEOUT_S = 2.0
DESCRIBE_LOG_DIRS = (35, 1)
TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
"""Kafka's legal topic names (``Topic.validate``); ``.`` and ``..`` are refused separately."""


def valid_topic_name(name: str) -> bool:
    return bool(TOPIC_NAME.match(name)) and name not in (".", "..")


def _sizes_of(info: BrokerInfo, security: SecurityConfig) -> dict[tuple[str, int], int]:
    host, port = client_endpoint(info, security)
    try:
        response = _wire.request(host, port, *DESCRIBE_LOG_DIRS, {"topics": None},
                                 timeout=PROBE_TIMEOUT_S, client_id="loglake-console",
                                 operation="describe log dirs", security=security)
    except Exception:  # an unreachable broker shows no sizes; its health says why
        return {}
    sizes: dict[tuple[str, int], int] = {}
    for result in getattr(response, "results", ()):
        for topic in result.topics or ():
            for partition in topic.partitions:
                key = (str(topic.name), int(partition.partition_index))
                sizes[key] = sizes.get(key, 0) + int(partition.partition_size)
    return sizes


def log_sizes(brokers: dict[int, BrokerInfo],
              security: SecurityConfig) -> dict[int, dict[tuple[str, int], int]]:
    """Broker id -> (topic, partition) -> bytes of its replica."""
    if not brokers:
        return {}
    with concurrent.futures.ThreadPoolExecutor(min(len(brokers), 16), "console-logdirs") as pool:
        futures = {bid: pool.submit(_sizes_of, info, security) for bid, info in brokers.items()}
        return {bid: future.result() for bid, future in futures.items()}


def _metric_values(url: str, name: str) -> dict[tuple[str, int], float]:
    url = url.rstrip("/")
    url = url if url.endswith("/metrics") else url + "/metrics"
    try:
        text = httpx.get(url, timeout=PROBE_TIMEOUT_S).text
        families = list(text_string_to_metric_families(text))
    except (httpx.HTTPError, ValueError):
        return {}
    values: dict[tuple[str, int], float] = {}
    for family in families:
        if family.name != name:
            continue
        for sample in family.samples:
            labels = sample.labels
            if "topic" in labels and str(labels.get("partition", "")).isdigit():
                values[(labels["topic"], int(labels["partition"]))] = float(sample.value)
    return values


def log_end_offsets(urls: Iterable[str]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the log end offset the given brokers' metrics report."""
    merged: dict[tuple[str, int], int] = {}
    chosen = list(urls)
    if not chosen:
        return merged
    with concurrent.futures.ThreadPoolExecutor(min(len(chosen), 16), "console-metrics") as pool:
        for values in pool.map(lambda u: _metric_values(u, "kafka_log_log_logendoffset"),
                               chosen):
            for key, value in values.items():
                merged[key] = max(merged.get(key, 0), int(value))
    return merged


@dataclass
class TopicRow:
    """One line of the topics list."""

    name: str
    partitions: int
    replication_factor: int
    size_bytes: int | None
    retention_ms: str
    retention_bytes: str
    cleanup_policy: str
    tier_status: str
    tier_lag_records: int | None
    tier_lag_seconds: float | None
    offline: int
    under_replicated: int


def tier_summary(status: dict[int, dict[str, Any]], partitions: int
                 ) -> tuple[str, int | None, float | None]:
    """(status word, records pending, age in seconds of the oldest pending) of a topic."""
    if not status:
        return "not tiered yet", None, None
    lag = sum(int(s.get("lag_offsets") or 0) for s in status.values())
    seconds = max((float(s.get("lag_seconds") or 0) for s in status.values()), default=0.0)
    failing = any(s.get("failures") for s in status.values())
    if failing:
        word = "failing"
    elif len(status) < partitions:
        word = f"tiering ({len(status)}/{partitions} partitions reported)"
    elif lag:
        word = "tiering"
    else:
        word = "up to date"
    return word, lag, seconds


def topic_rows(ctx: ConsoleContext) -> list[TopicRow]:
    """Every topic of the cluster (a logged-in user's: those their Metadata lists), sorted by
    name (blocking)."""
    catalog: ClusterCatalog = ctx.catalog()
    visible = ctx.visible_topics()
    brokers = catalog.brokers()
    sizes = log_sizes(brokers, ctx.security)
    rows = []
    for name in sorted(catalog.topic_names()):
        if visible is not None and name not in visible:
            continue
        meta = catalog.topic(name)
        if meta is None:  # deleted meanwhile
            continue
        config = catalog.topic_config(name)
        size = 0
        known = False
        offline = under = 0
        for partition, replicas in sorted(meta.assignment.items()):
            state = catalog.partition_state(name, partition)
            if state is None or state.leader < 0 or state.leader not in brokers:
                offline += 1
                continue
            if len(state.isr) < len(replicas):
                under += 1
            replica_size = sizes.get(state.leader, {}).get((name, partition))
            if replica_size is not None:
                size += replica_size
                known = True
        word, lag, seconds = tier_summary(catalog.tiering_status(name), len(meta.assignment))
        rows.append(TopicRow(
            name=name, partitions=len(meta.assignment),
            replication_factor=max((len(r) for r in meta.assignment.values()), default=0),
            size_bytes=size if known else None,
            retention_ms=config.get("retention.ms", "default"),
            retention_bytes=config.get("retention.bytes", "default"),
            cleanup_policy=config.get("cleanup.policy", "default (delete)"),
            tier_status=word, tier_lag_records=lag, tier_lag_seconds=seconds,
            offline=offline, under_replicated=under))
    return rows
