"""Vacuum: delete data files that no snapshot of the last ``grace`` still references.

Retention, compaction and optimize only commit remove actions; the files stay on storage so
readers of older snapshots keep working: brokers refresh their snapshot every ~5 s, Spark views
read the file list of the snapshot they were registered with, streaming micro-batches read
theirs. ``vacuum`` deletes a removed file once its remove action is older than the grace
period: ``max(--grace-hours, the topic's file.delete.delay.ms)`` rounded up to whole hours
(delta-rs' granularity). Through delta-rs (``DeltaTable.vacuum``, retention check disabled
because the grace is ours).

Orphans (Parquet written by a tierer or a job that crashed before its commit, never referenced)
are swept too (delta-rs ``full`` mode, by file modification time), but only with a grace of at
least one hour: a tier write in flight is an unreferenced file for a moment and must not be
deleted under it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from deltalake import PostCommitHookProperties
from deltalake.exceptions import TableNotFoundError

from loglake.compaction.common import Cluster, Progress
from loglake.config import TopicConfig
from loglake.segments.tiered_table import TieredTable

DEFAULT_GRACE_HOURS = 1
MS_PER_HOUR = 3_600_000


@dataclass
class VacuumResult:
    topic: str
    deleted: list[str]
    grace_hours: int
    orphans_swept: bool


def grace_hours(config: TopicConfig, minimum_hours: int) -> int:
    return max(minimum_hours, math.ceil(config.file_delete_delay_ms / MS_PER_HOUR))


def vacuum_topic(table: TieredTable, config: TopicConfig, *, grace: int = DEFAULT_GRACE_HOURS,
                 dry_run: bool = False, progress: Progress | None = None
                 ) -> VacuumResult | None:
    progress = progress or Progress()
    hours = grace_hours(config, grace)
    try:
        dt = table.table(refresh=True)
    except TableNotFoundError:
        return None
    full = hours >= 1
    deleted: Sequence[str] = dt.vacuum(
        retention_hours=hours, dry_run=dry_run, enforce_retention_duration=False, full=full,
        post_commithook_properties=PostCommitHookProperties(
            create_checkpoint=False, cleanup_expired_logs=False),
    )
    verb = "would delete" if dry_run else "deleted"
    progress.line(f"vacuum {table.topic}: {verb} {len(deleted)} unreferenced file(s) "
                  f"older than {hours} h" + ("" if full else " (orphans kept: grace < 1 h)"))
    return VacuumResult(table.topic, list(deleted), hours, full)


def run_vacuum(cluster: Cluster, *, topic: str | None = None,
               grace: int = DEFAULT_GRACE_HOURS, dry_run: bool = False,
               progress: Progress | None = None) -> list[VacuumResult]:
    results = []
    for target in cluster.targets(topic):
        result = vacuum_topic(TieredTable(cluster.storage, target.topic), target.config,
                              grace=grace, dry_run=dry_run, progress=progress)
        if result is not None:
            results.append(result)
    return results
