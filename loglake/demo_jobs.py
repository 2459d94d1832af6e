"""The demo's clean-up part: key compaction and retention run as Spark jobs on the tiered log.

Two fresh topics (deleted and recreated each run, so every run shows the effect):

- ``demo.profiles`` (``cleanup.policy=compact``, ``delete.retention.ms=0``): 100 updates for
  each of 200 users, then tombstones for 20 of them. ``loglake compact`` keeps the last record
  per key in the Delta table (offsets unchanged); a consumer from offset 0 then reads about one
  record per live user instead of 20,000, and folding what it reads gives exactly the final
  profiles (deleted users gone): Kafka's guarantee for compacted topics.
- ``demo.events`` (``retention.ms`` = 1 day, ``local.retention.ms=0`` so old offsets are
  served from Delta): 6,000 events stamped over the last two days. ``loglake retention`` drops
  the tiered files whose events are all older than a day; the earliest offset moves forward, a
  consumer asking for offset 0 is reset to it (``auto.offset.reset=earliest``), and Spark counts
  only what is left.

Each check raises RuntimeError when it fails (the demo then exits non-zero).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from loglake.catalog.zookeeper import ClusterCatalog
from loglake.client import Admin, Consumer, Producer
from loglake.compaction.common import Cluster, Progress
from loglake.compaction.compact import run_compaction
from loglake.compaction.retention import run_retention

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PROFILES = "demo.profiles"
EVENTS = "demo.events"
USERS = 200
UPDATES = 100
DELETED = 20
EVENT_COUNT = 6_000
DAY_MS = 86_400_000
SEGMENT_BYTES = 32 * 1024
EVENT_SEGMENT_BYTES = 8 * 1024  # small files, so retention's whole-file steps are fine-grained
TIERED_TIMEOUT_S = 120.0
LOCAL_COPIES_TIMEOUT_S = 120.0
"""Safety bounds of the waits below. Dropping the local copies takes about a second (the
compaction's announcement starts the brokers' check at once; without it, within ~5 s);
tiering, a few seconds. A wait that ends here is a bug in what it waits for."""
PROGRESS_EVERY_S = 5.0
"""A wait prints where it stands this often."""


def run(bootstrap: str, zookeeper: str, spark: SparkSession, *, replicas: int) -> None:
    print("==> clean-up jobs on the tiered log: `loglake compact` and `loglake retention`")
    with Admin(bootstrap) as admin:
        existing = admin.list_topics()
        for topic in (PROFILES, EVENTS):
            if topic in existing:
                admin.delete_topic(topic)
        common = {"segment.bytes": str(SEGMENT_BYTES), "min.insync.replicas": "2"}
        admin.create_topic(PROFILES, partitions=1, replication_factor=replicas, config={
            **common, "cleanup.policy": "compact", "delete.retention.ms": "0"})
        admin.create_topic(EVENTS, partitions=1, replication_factor=replicas, config={
            **common, "segment.bytes": str(EVENT_SEGMENT_BYTES), "retention.ms": str(DAY_MS),
            "local.retention.ms": "0"})
    final = _produce_profiles(bootstrap)
    _produce_events(bootstrap)
    wait_tiered(zookeeper, (PROFILES, EVENTS))
    with Cluster(zookeeper) as cluster:
        _compaction(bootstrap, cluster, spark, final)
        _retention(bootstrap, cluster, spark)


def _produce_profiles(bootstrap: str) -> dict[bytes, bytes]:
    """Every user's updates, then tombstones; returns the final profile per live user."""
    final: dict[bytes, bytes] = {}
    with Producer(bootstrap, compression="lz4", extra={"batch.size": "16384"}) as producer:
        for visit in range(1, UPDATES + 1):
            for user in range(USERS):
                key = b"user-%03d" % user
                value = json.dumps({"user": user, "visits": visit}).encode()
                producer.send(PROFILES, value, key=key)
                final[key] = value
        for user in range(USERS - DELETED, USERS):
            producer.send(PROFILES, None, key=b"user-%03d" % user)
            del final[b"user-%03d" % user]
        producer.flush(60)
    print(f"    {PROFILES}: {USERS * UPDATES:,} profile updates of {USERS} users, then "
          f"{DELETED} users deleted (tombstones)")
    return final


def _produce_events(bootstrap: str) -> None:
    now = int(time.time() * 1000)
    step = 2 * DAY_MS // EVENT_COUNT
    # batches stay below the topic's segment.bytes (larger ones are refused)
    with Producer(bootstrap, compression="lz4", extra={"batch.size": "4096"}) as producer:
        for i in range(EVENT_COUNT):
            stamp = now - 2 * DAY_MS + i * step
            producer.send(EVENTS, json.dumps({"event": i, "at": stamp}).encode(),
                          timestamp_ms=stamp)
        producer.flush(60)
    print(f"    {EVENTS}: {EVENT_COUNT:,} events stamped over the last two days "
          f"(retention.ms = 1 day)")


def wait_until(probe: Callable[[], tuple[bool, str]], *, what: str, timeout: float,
               interval: float = 0.3) -> None:
    """Call ``probe`` (-> done, where it stands) until done; print where it stands every
    PROGRESS_EVERY_S; RuntimeError after ``timeout`` seconds (a safety bound: the demo's
    waits end in seconds)."""
    started = time.monotonic()
    note_at = started + PROGRESS_EVERY_S
    while True:
        done, state = probe()
        if done:
            return
        now = time.monotonic()
        if now - started >= timeout:
            raise RuntimeError(f"{what}: not done after {timeout:g} s ({state}); see the "
                               f"broker logs under the cluster's data directory")
        if now >= note_at:
            print(f"    still {what} after {now - started:.0f} s: {state}", flush=True)
            note_at = now + PROGRESS_EVERY_S
        time.sleep(interval)


def wait_tiered(zookeeper: str, topics: tuple[str, ...], *, partitions: int = 1,
                timeout: float = TIERED_TIMEOUT_S) -> None:
    """Until every sealed segment of partitions ``0 .. partitions-1`` of ``topics`` is in Delta
    (the hot tail stays on brokers)."""
    catalog = ClusterCatalog(zookeeper)
    catalog.start()

    def probe() -> tuple[bool, str]:
        status = {(topic, p): catalog.tiering_status(topic).get(p, {})
                  for topic in topics for p in range(partitions)}
        state = ", ".join(f"{topic}-{p} tiered up to {s.get('tiered_end') or 0}, "
                          f"{s.get('lag_offsets', '?')} sealed offsets to go"
                          for (topic, p), s in status.items())
        return all(s.get("tiered_end") and s.get("lag_offsets") == 0
                   for s in status.values()), state

    try:
        wait_until(probe, what="waiting for the tierer", timeout=timeout)
    finally:
        catalog.stop()


Row = tuple[int, bytes | None, bytes | None]
"""(offset, key, value)"""


def _read_all(bootstrap: str, topic: str, *, start: int = 0) -> tuple[list[Row], int, int]:
    """``(records, log start, high watermark)`` of partition 0, read from ``start``."""
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        low, high = consumer.watermarks(topic, 0)
        consumer.assign(topic, [0], start=start)
        records = []
        for record in consumer.consume(timeout=3.0):
            records.append((record.offset, record.key, record.value))
            if record.offset >= high - 1:
                break
    return records, low, high


def _wait_local_start(cluster: Cluster, offset: int,
                      timeout: float = LOCAL_COPIES_TIMEOUT_S) -> int:
    """Until the leader of ``demo.profiles`` reports a local log start >= ``offset``."""
    start = 0

    def probe() -> tuple[bool, str]:
        nonlocal start
        start = int(cluster.catalog.tiering_status(PROFILES).get(0, {}).get("local_start") or 0)
        return start >= offset, f"local log of {PROFILES}-0 starts at {start}, table " \
                                f"compacted below {offset}"

    wait_until(probe, what="waiting for the brokers to drop their local copies", timeout=timeout)
    return start


def _wait_earliest(bootstrap: str, offset: int, timeout: float = LOCAL_COPIES_TIMEOUT_S) -> None:
    """Until ListOffsets(earliest) of ``demo.events`` reaches ``offset``: the table's new
    first offset, once the brokers dropped their cached table start and, prompted by the
    job's announcement, their local copies (``local.retention.ms=0``: all that is tiered)."""
    with Consumer(bootstrap) as consumer:
        def probe() -> tuple[bool, str]:
            low, _ = consumer.watermarks(EVENTS, 0)
            return low >= offset, f"earliest offset of {EVENTS}-0 is {low}, the table " \
                                  f"starts at {offset}"

        wait_until(probe, what="waiting for the brokers to follow the retention job",
                   timeout=timeout, interval=0.5)


def _compaction(bootstrap: str, cluster: Cluster, spark: SparkSession,
                final: dict[bytes, bytes]) -> None:
    before, _, high = _read_all(bootstrap, PROFILES)
    print(f"==> loglake compact --topic {PROFILES}")
    [result] = run_compaction(cluster, spark=lambda: spark, topic=PROFILES,
                              progress=Progress(prefix="    "))
    local_start = _wait_local_start(cluster, result.plan.cleanable_end)
    print(f"    the brokers dropped their local copies below offset {local_start} (the table "
          f"holds the compacted records); the hot tail stays as produced")
    after, _, _ = _read_all(bootstrap, PROFILES)
    state: dict[bytes, bytes] = {}
    for _offset, key, value in after:
        if key is None:
            continue
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    keys = [key for _, key, _ in after]
    print(f"    a consumer from offset 0 now reads {len(after):,} records instead of "
          f"{len(before):,}; offsets kept (last {after[-1][0] if after else '-'}, high "
          f"watermark {high}); {len(set(keys))} distinct users")
    print(f"    folding them gives the final profile of all {len(final)} live users, the "
          f"{DELETED} deleted ones gone: {state == final}")
    if state != final or len(after) >= len(before) or len(before) != high:
        raise RuntimeError("demo check failed: compaction lost or kept the wrong records")


def _retention(bootstrap: str, cluster: Cluster, spark: SparkSession) -> None:
    from loglake.streaming.sql_views import register_topics

    with Consumer(bootstrap) as probe:
        low_before, high = probe.watermarks(EVENTS, 0)
    print(f"==> loglake retention --topic {EVENTS}")
    [result] = run_retention(cluster, topic=EVENTS, progress=Progress(prefix="    "))
    _wait_earliest(bootstrap, result.earliest.get(0) or 0)
    records, low, _ = _read_all(bootstrap, EVENTS, start=0)
    register_topics(spark, zookeeper=cluster.zookeeper, topics=[EVENTS])
    count, oldest = spark.sql(
        f"SELECT count(*), min(timestamp) FROM `{EVENTS}`").collect()[0]
    print(f"    earliest offset {low_before} -> {low}; a consumer asking for offset 0 starts "
          f"at {records[0][0] if records else '-'} (auto.offset.reset=earliest)")
    print(f"    Spark SQL: {count:,} of {EVENT_COUNT:,} events left, the oldest from {oldest} "
          f"(UTC)")
    # only whole files of events older than a day go: the first half of the offsets at most
    first = records[0][0] if records else -1
    if not (0 < low <= EVENT_COUNT // 2 and first == low and count == high - low):
        raise RuntimeError("demo check failed: retention did not move the earliest offset")
