"""Counters of broker state changes, recorded where the change happens (issue 16).

What is counted here (everything else about the broker's state is read at scrape time by the
collectors in collectors.py, with no cost between scrapes):

* ``kafka_server_replicamanager_isrshrinks_total`` / ``..._isrexpands_total``: ISR writes of
  partitions this broker leads that removed / added replicas (isr_manager.py; one write that
  does both counts once in each, as Kafka's ``Partition`` marks both meters);
* ``loglake_tier_commits_total{topic}``: tier commits of segments that landed (tier_writer.py);
* ``loglake_tier_commit_seconds``: how long the Delta commit step of a tier commit took (step 3
  of tier_writer.py's protocol: from asking delta-rs to commit until it answered, lost races
  retried inside included; the Parquet encoding before it is not part of it);
* ``loglake_tier_fetches_total{topic}``: fetches of a partition answered from the table
  (tier_reads.py: one per partition of a Fetch request that was served below the local log
  start, whatever the row count).

Names follow the Strimzi JMX-exporter conventions where Kafka has the metric (``IsrShrinksPerSec``
-> ``kafka_server_replicamanager_isrshrinks_total``) and carry the ``loglake_`` prefix otherwise.
No broker-id label: Prometheus adds ``instance``.

A :class:`StateCounters` built without a registry records into a private one nobody scrapes,
so parts built in tests without metrics record all the same (no ``if`` at the recording
sites). Recording is a dict lookup and a lock-protected add (prometheus_client), microseconds;
it happens once per ISR change, tier commit or tier fetch, never per record.

Thread-safety: prometheus_client's metric objects are thread-safe; here they are recorded from
the event loop only.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Histogram

TIER_COMMIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Buckets (seconds) of ``loglake_tier_commit_seconds``: a Delta commit on local files takes
milliseconds, on object storage tens to hundreds of milliseconds; lost races add retries."""


class StateCounters:
    """The counters of broker state changes (see the module)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self.isr_shrinks = Counter(
            "kafka_server_replicamanager_isrshrinks", "ISR shrinks of partitions this broker "
            "leads (ISR writes that removed replicas)", registry=registry)
        self.isr_expands = Counter(
            "kafka_server_replicamanager_isrexpands", "ISR expansions of partitions this "
            "broker leads (ISR writes that added replicas)", registry=registry)
        self.tier_commits = Counter(
            "loglake_tier_commits", "Tier commits (sealed segments committed to the topic's "
            "Delta table by this broker)", ["topic"], registry=registry)
        self.tier_commit_seconds = Histogram(
            "loglake_tier_commit_seconds", "Duration of the Delta commit step of a tier commit",
            buckets=TIER_COMMIT_BUCKETS, registry=registry)
        self.tier_fetches = Counter(
            "loglake_tier_fetches", "Fetches of a partition answered from the topic's Delta "
            "table (below the local log start)", ["topic"], registry=registry)

    def isr_changed(self, old: tuple[int, ...] | list[int],
                    new: tuple[int, ...] | list[int]) -> None:
        """An ISR write of a led partition landed: count a shrink and/or an expansion."""
        before, after = set(old), set(new)
        if before - after:
            self.isr_shrinks.inc()
        if after - before:
            self.isr_expands.inc()

    def tier_committed(self, topic: str, seconds: float) -> None:
        """A tier commit of ``topic`` landed after its Delta commit took ``seconds``."""
        self.tier_commits.labels(topic).inc()
        self.tier_commit_seconds.observe(seconds)

    def tier_fetched(self, topic: str) -> None:
        """A fetch of a partition of ``topic`` was answered from the table."""
        self.tier_fetches.labels(topic).inc()

    def forget_topic(self, topic: str) -> None:
        """``topic`` was deleted: drop its labelled series (as Kafka removes a deleted topic's
        metrics)."""
        for counter in (self.tier_commits, self.tier_fetches):
            with contextlib.suppress(KeyError):  # never recorded
                counter.remove(topic)
