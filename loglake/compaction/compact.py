"""Key compaction of tiered data (``cleanup.policy`` containing ``compact``), computed with Spark.

Kafka's semantics on the table, per partition:

* cleaned end ``C``: the Delta app transaction ``loglake.compact:<topic>-<p>`` (version = the
  first offset not cleaned yet; 0 before the first run). Kept in the Delta log, so checkpoints
  carry it and a second job racing on the partition conflicts;
* cleanable end ``E``: the first offset of the first file holding a record younger than
  ``min.compaction.lag.ms`` (Kafka's first uncleanable segment), else one past the last tiered
  offset. Rows at or above ``E`` are neither read nor changed, and a newer value there does not
  remove an older one below (Kafka builds its offset map from the cleanable section only);
* eligible when the dirty ratio -- rows of files reaching ``C`` or above / all rows below ``E``
  (file granularity) -- exceeds ``min.cleanable.dirty.ratio``, or a dirty file holds a record
  older than ``max.compaction.lag.ms``;
* the rewrite (rewrite.py): for each key the record with the highest offset stays, offsets
  unchanged; null keys and quarantined rows stay; a tombstone goes once its own
  ``timestamp + delete.retention.ms`` has passed (simpler than Kafka's "after the segment was
  cleaned", documented); superseded tombstones go at once;
* transactions: Kafka's cleaner drops the records of aborted transactions and, once a
  transaction's records are gone and ``delete.retention.ms`` passed, its marker. Here neither
  ever enters a table (the tierer tiers committed data only, segments/tier_txn.py): their
  offsets are gaps, which planning (file statistics) and the rewrite handle like compacted
  ones. In tables tiered before, the rewrite drops markers and the records of the aborted
  transactions they close (rewrite.py), and an aborted record never supersedes a committed
  one.

Execution: the driver plans from Delta file statistics; Spark runs one task per eligible
partition (an RDD of one plan per slice) that reads its files with pyarrow
and writes the surviving rows with ``TieredTable.write_file`` (so the files look exactly like
tiered ones: row groups of whole batches, the same Delta statistics), returning the file
metadata; the driver commits each partition in ONE Delta commit through deltalake: removes of
exactly the files the task read, adds of what it wrote, and the new cleaned end ``E``. Why not a
Spark SQL plan (read, window, shuffle, sort, write): Spark here cannot read or write S3 natively
and the values would go through a shuffle; the per-partition task needs only the key column in
memory (Kafka's cleaner is also one thread per partition). Limit: one Kafka partition is one
task, so the largest partition bounds the job's time.

Conflicts: before committing, the driver reloads the table; if a file it read is gone
(retention, optimize or another compaction won) or the cleaned end moved, the result is dropped
(its files are orphans for vacuum) and the partition is planned again in the next round; a
commit rejected by delta-rs for another partition's removal is retried as is. Concurrent tier
appends never conflict.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from deltalake.exceptions import CommitFailedError, TableNotFoundError

from loglake.compaction.common import (
    COMMIT_ATTEMPTS,
    Cluster,
    Progress,
    backoff,
    commit_replace,
    keep_first_offset,
)
from loglake.compaction.progress import SparkProgress
from loglake.compaction.rewrite import RewriteOutcome, RewritePlan, rewrite_partition
from loglake.config import TopicConfig
from loglake.segments.storage import Storage
from loglake.segments.tiered_table import (
    TieredTable,
    TierFile,
    cleaned_end,
    compact_app_id,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROUNDS = 3
"""Plan-rewrite-commit rounds per run (partitions that lost a race go to the next round)."""


@dataclass(frozen=True)
class PartitionPlan:
    """What compaction would do to one partition, and why."""

    partition: int
    files: tuple[TierFile, ...]
    cleaned: int
    cleanable_end: int
    dirty_ratio: float
    eligible: bool
    reason: str


def plan_partition(partition: int, files: Sequence[TierFile], config: TopicConfig, *,
                   cleaned: int, now_ms: int) -> PartitionPlan:
    """Pure planning from file statistics (module docstring)."""
    young = now_ms - config.min_compaction_lag_ms
    cleanable: list[TierFile] = []
    end = cleaned
    for tier_file in files:
        if tier_file.max_timestamp_ms > young:
            end = tier_file.min_offset
            break
        cleanable.append(tier_file)
        end = tier_file.max_offset + 1
    total = sum(f.num_records for f in cleanable)
    dirty_files = [f for f in cleanable if f.max_offset >= cleaned]
    dirty = sum(f.num_records for f in dirty_files)
    ratio = dirty / total if total else 0.0
    overdue = any(f.min_timestamp_ms <= now_ms - config.max_compaction_lag_ms
                  for f in dirty_files)
    if not dirty:
        eligible, reason = False, "nothing dirty"
    elif ratio > config.min_cleanable_dirty_ratio:
        eligible, reason = True, f"dirty ratio {ratio:.2f} > {config.min_cleanable_dirty_ratio}"
    elif overdue:
        eligible, reason = True, "max.compaction.lag.ms passed"
    else:
        eligible, reason = False, (f"dirty ratio {ratio:.2f} <= "
                                   f"{config.min_cleanable_dirty_ratio}")
    return PartitionPlan(partition, tuple(cleanable), cleaned, end, ratio, eligible, reason)


@dataclass
class CompactionResult:
    topic: str
    partition: int
    plan: PartitionPlan
    committed: bool = False
    rows_in: int = 0
    rows_out: int = 0
    files_out: int = 0
    bytes_out: int = 0


def _rewrite_task(storage: Storage, plan_json: str) -> str:
    """Runs in a Spark Python worker: one partition's rewrite; returns the outcome as JSON."""
    return rewrite_partition(storage, RewritePlan.from_json(plan_json)).to_json()


def _run_tasks(spark: SparkSession, storage: Storage, plans: list[RewritePlan],
               out: TextIO | None = None) -> list[RewriteOutcome]:
    """One Spark task per plan: rewrite and return the written files' metadata. (An RDD of
    plans: ``mapInArrow`` would need pandas on the workers, and plans are a handful of
    strings.)"""
    rdd = spark.sparkContext.parallelize([p.to_json() for p in plans], len(plans))
    label = f"compact {plans[0].topic}: rewriting {len(plans)} partition(s)"
    with SparkProgress(spark.sparkContext, label, out=out):
        outcomes = rdd.map(functools.partial(_rewrite_task, storage)).collect()
    return [RewriteOutcome.from_json(text) for text in outcomes]


def compact_topic(table: TieredTable, config: TopicConfig, partitions: Sequence[int], *,
                  spark: Callable[[], SparkSession], dry_run: bool = False,
                  progress: Progress | None = None,
                  clock: Callable[[], float] = time.time) -> list[CompactionResult]:
    """Compact the eligible partitions of one topic (module docstring)."""
    progress = progress or Progress()
    if "compact" not in config.cleanup_policy:
        return []
    results: dict[int, CompactionResult] = {}
    pending = list(partitions)
    for _round in range(ROUNDS):
        if not pending:
            break
        now_ms = int(clock() * 1000)
        try:
            table.table(refresh=True)
        except TableNotFoundError:
            return []
        plans: dict[int, PartitionPlan] = {}
        for partition in pending:
            plan = plan_partition(partition, table.files(partition), config,
                                  cleaned=cleaned_end(table, partition), now_ms=now_ms)
            results[partition] = CompactionResult(table.topic, partition, plan)
            if dry_run or not plan.eligible:
                verb = "would compact" if plan.eligible else "skip"
                progress.line(
                    f"compact {table.topic}-{partition}: {verb}: {plan.reason}; "
                    f"{len(plan.files)} file(s), {sum(f.num_records for f in plan.files)} "
                    f"records below offset {plan.cleanable_end} (cleaned up to {plan.cleaned})")
            else:
                plans[partition] = plan
        if not plans:
            break
        outcomes = _run_tasks(spark(), table.storage, out=progress.out, plans=[
            RewritePlan(table.topic, p, tuple(f.uri for f in plan.files), plan.cleanable_end,
                        now_ms, config.delete_retention_ms)
            for p, plan in plans.items()])
        pending = []
        for outcome in outcomes:
            plan = plans[outcome.partition]
            result = results[outcome.partition]
            if _commit(table, plan, outcome, progress):
                result.committed = True
                result.rows_in, result.rows_out = outcome.rows_in, outcome.rows_out
                result.files_out = len(outcome.written)
                result.bytes_out = sum(f.size for f in outcome.written)
                progress.line(
                    f"compact {table.topic}-{outcome.partition}: {outcome.rows_in} -> "
                    f"{outcome.rows_out} records in {len(plan.files)} -> "
                    f"{len(outcome.written)} file(s); cleaned up to {plan.cleanable_end}")
            else:
                pending.append(outcome.partition)
    for partition in pending:
        progress.line(f"compact {table.topic}-{partition}: gave up after {ROUNDS} rounds of "
                      "conflicting commits; the next run retries")
    return [results[p] for p in sorted(results)]


def _commit(table: TieredTable, plan: PartitionPlan, outcome: RewriteOutcome,
            progress: Progress) -> bool:
    """Replace the plan's files by the outcome's; False when the plan went stale."""
    wanted = {f.uri for f in plan.files}
    for attempt in range(COMMIT_ATTEMPTS):
        table.table(refresh=True)
        live = {f.uri for f in table.files(plan.partition)}
        if not wanted <= live or cleaned_end(table, plan.partition) != plan.cleaned:
            progress.line(f"compact {table.topic}-{plan.partition}: files changed under the "
                          "job; planning again")
            return False
        try:
            commit_replace(
                table, {plan.partition: plan.files},
                {plan.partition: keep_first_offset(outcome.written, plan.files[0].min_offset)},
                operation="compact",
                metadata={"loglake.partition": str(plan.partition),
                          "loglake.cleaned_end": str(plan.cleanable_end)},
                app_transactions=[(compact_app_id(table.topic, plan.partition),
                                   plan.cleanable_end)])
            return True
        except CommitFailedError:
            backoff(attempt)
    return False


def run_compaction(cluster: Cluster, *, spark: Callable[[], SparkSession],
                   topic: str | None = None, dry_run: bool = False,
                   progress: Progress | None = None,
                   clock: Callable[[], float] = time.time) -> list[CompactionResult]:
    """Compaction over every topic with ``compact`` in its cleanup.policy (or ``topic``)."""
    results: list[CompactionResult] = []
    for target in cluster.targets(topic):
        if "compact" not in target.config.cleanup_policy:
            continue
        table = TieredTable(cluster.storage, target.topic)
        done = compact_topic(table, target.config, cluster.partitions(target.topic),
                             spark=spark, dry_run=dry_run, progress=progress, clock=clock)
        if any(r.committed for r in done):
            cluster.announce(table, "compact")
        results += done
    return results
