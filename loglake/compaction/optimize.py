"""Optimize: bin-pack runs of small adjacent files of a partition into bigger ones.

The tierer writes one file per sealed segment, so topics with small ``segment.bytes`` (or
compaction leaving little behind) collect many small files: every Delta snapshot and every scan
pays per file. Per partition, consecutive files (offset order) smaller than ``small_bytes``
are grouped until a group reaches ``target_bytes``; each group of two or more files is rewritten
as one file (every row kept, same order; rewrite.py) and the partition's groups are replaced in
one Delta commit (common.py: conflicting commits re-plan). Offsets and the compaction cleaned
end are unchanged. Runs in the job's process with pyarrow (I/O bound; no Spark needed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deltalake.exceptions import CommitFailedError, TableNotFoundError

from loglake.compaction.common import (
    COMMIT_ATTEMPTS,
    Cluster,
    Progress,
    backoff,
    commit_replace,
    keep_first_offset,
    offsets_text,
)
from loglake.compaction.rewrite import RewritePlan, rewrite_partition
from loglake.segments.tiered_table import PendingFile, TieredTable, TierFile

SMALL_BYTES = 16 << 20
TARGET_BYTES = 128 << 20


def small_file_groups(files: Sequence[TierFile], *, small_bytes: int = SMALL_BYTES,
                      target_bytes: int = TARGET_BYTES) -> list[list[TierFile]]:
    """Runs of adjacent small files to pack (each of two or more files)."""
    groups: list[list[TierFile]] = []
    current: list[TierFile] = []
    size = 0
    for tier_file in files:
        if tier_file.size >= small_bytes or size + tier_file.size > target_bytes:
            if len(current) > 1:
                groups.append(current)
            current, size = [], 0
            if tier_file.size >= small_bytes:
                continue
        current.append(tier_file)
        size += tier_file.size
    if len(current) > 1:
        groups.append(current)
    return groups


@dataclass
class OptimizeResult:
    topic: str
    partition: int
    files_in: int = 0
    files_out: int = 0
    committed: bool = False
    rows_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0


def optimize_partition(table: TieredTable, partition: int, *, dry_run: bool = False,
                       small_bytes: int = SMALL_BYTES, target_bytes: int = TARGET_BYTES,
                       progress: Progress | None = None) -> OptimizeResult:
    progress = progress or Progress()
    result = OptimizeResult(table.topic, partition)
    for attempt in range(COMMIT_ATTEMPTS):
        try:
            table.table(refresh=True)
        except TableNotFoundError:
            return result
        groups = small_file_groups(table.files(partition), small_bytes=small_bytes,
                                   target_bytes=target_bytes)
        inputs = [f for group in groups for f in group]
        result.files_in = len(inputs)
        if dry_run or not groups:
            verb = "would pack" if groups else "nothing to pack:"
            progress.line(f"optimize {table.topic}-{partition}: {verb} {len(inputs)} small "
                          f"file(s) into {len(groups)}; offsets {offsets_text(inputs)}")
            return result
        written: list[PendingFile] = []
        for group in groups:
            outcome = rewrite_partition(table.storage, RewritePlan(
                table.topic, partition, tuple(f.uri for f in group)))
            written += keep_first_offset(outcome.written, min(f.min_offset for f in group))
        table.table(refresh=True)
        live = {f.uri for f in table.files(partition)}
        if not {f.uri for f in inputs} <= live:
            backoff(attempt)
            continue  # someone replaced them meanwhile: plan again (ours are orphans)
        try:
            commit_replace(table, {partition: inputs}, {partition: written},
                           operation="optimize", metadata={"loglake.partition": str(partition)})
        except CommitFailedError:
            backoff(attempt)
            continue
        result.files_out, result.committed = len(written), True
        result.rows_in = sum(f.num_records for f in inputs)
        result.bytes_in = sum(f.size for f in inputs)
        result.bytes_out = sum(f.size for f in written)
        progress.line(f"optimize {table.topic}-{partition}: packed {len(inputs)} file(s) into "
                      f"{len(written)}; offsets {offsets_text(inputs)}")
        return result
    progress.line(f"optimize {table.topic}-{partition}: conflicting commits; the next run "
                  "retries")
    return result


def run_optimize(cluster: Cluster, *, topic: str | None = None, dry_run: bool = False,
                 small_bytes: int = SMALL_BYTES, target_bytes: int = TARGET_BYTES,
                 progress: Progress | None = None) -> list[OptimizeResult]:
    results = []
    for target in cluster.targets(topic):
        table = TieredTable(cluster.storage, target.topic)
        if not table.exists():
            continue
        done = [optimize_partition(table, partition, dry_run=dry_run,
                                   small_bytes=small_bytes, target_bytes=target_bytes,
                                   progress=progress)
                for partition in cluster.partitions(target.topic)]
        if any(r.committed for r in done):
            cluster.announce(table, "optimize")
        results += done
    return results
