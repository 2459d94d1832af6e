"""Retention of tiered data (``cleanup.policy`` containing ``delete``), Kafka's rules on files.

Kafka deletes whole segments from the start of the log; here the unit is a tiered Parquet file
(whole-file granularity, so a file is dropped only when every record in it may go):

* time: the leading files whose largest record timestamp (Delta file statistics) is older than
  ``now - retention.ms`` (``-1``: never);
* size: the oldest files while the partition, without them, still holds at least
  ``retention.bytes`` (Parquet bytes of the table's files; the brokers' hot tail is not counted;
  ``-1``: no limit).

Only a prefix of each partition goes (the first file that must stay stops the scan, as Kafka's
``deletableSegments`` does), so retention never opens a gap in the middle of a log. Only the
table is touched: records not tiered yet live on the brokers, which apply local retention
themselves. Brokers derive the earliest offset from the table's remaining files (their cached
first offsets expire every ~5 s): ListOffsets(earliest) moves up and a consumer below it gets
OFFSET_OUT_OF_RANGE and resets per ``auto.offset.reset``.

One commit per table (remove actions for every partition's dropped files); a conflicting
commit (compaction or another retention job removed files meanwhile) makes the job reload and
plan again. Files are deleted from storage later, by ``vacuum``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from deltalake.exceptions import CommitFailedError, TableNotFoundError

from loglake.compaction.common import (
    COMMIT_ATTEMPTS,
    CleanupError,
    Cluster,
    Progress,
    backoff,
    commit_replace,
    offsets_text,
)
from loglake.config import TopicConfig
from loglake.segments.retention import expired_count
from loglake.segments.tiered_table import TieredTable, TierFile


def expired_prefix(files: Sequence[TierFile], config: TopicConfig, *, now_ms: int
                   ) -> list[TierFile]:
    """The leading files of one partition (ordered by offset) that retention drops (the same
    rules as the brokers' local retention, on files instead of segments)."""
    count = expired_count([(f.max_timestamp_ms, f.size) for f in files], now_ms=now_ms,
                          retention_ms=config.retention_ms,
                          retention_bytes=config.retention_bytes)
    return list(files[:count])


@dataclass
class RetentionResult:
    topic: str
    removed: dict[int, list[TierFile]] = field(default_factory=dict)
    earliest: dict[int, int | None] = field(default_factory=dict)
    committed: bool = False


def retain_topic(table: TieredTable, config: TopicConfig, partitions: Sequence[int], *,
                 dry_run: bool = False, progress: Progress | None = None,
                 clock: Callable[[], float] = time.time) -> RetentionResult:
    """Apply retention to one topic's table in one commit (see the module docstring)."""
    progress = progress or Progress()
    result = RetentionResult(table.topic)
    if "delete" not in config.cleanup_policy:
        return result
    for attempt in range(COMMIT_ATTEMPTS):
        now_ms = int(clock() * 1000)
        try:
            table.table(refresh=True)
        except TableNotFoundError:
            return result
        removed: dict[int, list[TierFile]] = {}
        earliest: dict[int, int | None] = {}
        for partition in partitions:
            files = table.files(partition)
            drop = expired_prefix(files, config, now_ms=now_ms)
            if drop:
                removed[partition] = drop
            rest = files[len(drop):]
            earliest[partition] = rest[0].min_offset if rest else None
        result.removed, result.earliest = removed, earliest
        if not removed or dry_run:
            break
        try:
            commit_replace(table, removed, {}, operation="retention",
                           metadata={"loglake.partitions": ",".join(map(str, removed))})
            result.committed = True
            break
        except CommitFailedError as exc:
            progress.line(f"retention {table.topic}: concurrent commit ({exc}); re-planning")
            backoff(attempt)
    else:
        raise CleanupError(f"retention of {table.topic}: {COMMIT_ATTEMPTS} conflicting "
                           "commits in a row", hint="run the job again")
    verb = "would remove" if dry_run else "removed"
    for partition in partitions:
        files = result.removed.get(partition, [])
        progress.line(
            f"retention {table.topic}-{partition}: {verb} {len(files)} file(s), "
            f"{sum(f.num_records for f in files)} records, offsets {offsets_text(files)}, "
            f"{sum(f.size for f in files)} bytes; earliest tiered offset "
            f"{result.earliest.get(partition)}")
    return result


def run_retention(cluster: Cluster, *, topic: str | None = None, dry_run: bool = False,
                  progress: Progress | None = None,
                  clock: Callable[[], float] = time.time) -> list[RetentionResult]:
    """Retention over every topic with ``delete`` in its cleanup.policy (or ``topic``)."""
    results = []
    for target in cluster.targets(topic):
        if "delete" not in target.config.cleanup_policy:
            continue
        table = TieredTable(cluster.storage, target.topic)
        result = retain_topic(table, target.config, cluster.partitions(target.topic),
                              dry_run=dry_run, progress=progress, clock=clock)
        if result.committed:
            cluster.announce(table, "retention")
        results.append(result)
    return results
