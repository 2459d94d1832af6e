"""DeleteRecords on the cold tier: a partition's rows below its new log start leave the table.

Kafka's DeleteRecords moves a partition's log start offset to ``O``; every record below ``O`` is
gone for every reader. For the part of the log that lives in the topic's Delta table,
:func:`delete_below` makes the table itself hold no row of the partition below ``O``, so no
reader needs to know about the deletion (consumers through the brokers' tier reads, Spark views
reading the Parquet files natively, ``format("loglake")``, deltalake or any other Delta reader):

1. files of the partition whose every offset is below ``O``: removed;
2. the file that holds ``O`` and lower offsets (one at most: a partition's files do not
   overlap): rewritten without the rows below ``O`` (a new file; the batch holding ``O`` keeps
   its rows from ``O`` on and its original base offset, as compaction leaves batches with gaps,
   so fetches re-encode it as before);
3. when ``O`` is beyond the partition's tiered end (records not tiered yet), the tiering app
   transaction ``<topic>-<p>`` moves to ``O - 1``: whoever tiers the partition next (this
   leader, or a new one whose local log still starts lower) starts at ``O``, and a tier commit
   of lower offsets that is in flight loses (its expected tiered end changed; delta-rs rejects
   a commit whose app transaction moved meanwhile) instead of bringing deleted rows back.

All of it is ONE Delta commit (remove + add actions, the app transaction, commit info
``loglake.operation = delete_records``). A concurrent commit that conflicts (a clean-up job that
removed the same files, a tier commit of the same partition when step 3 applies) makes it
reload the snapshot and plan again; a tier commit of other offsets does not conflict. Crash
points: before the commit the rewritten file is an orphan no snapshot references (vacuum
removes it) and nothing changed; after it, the deletion is complete (the caller announces it
to the brokers, who drop cached snapshots; without the announcement within READER_REFRESH_S).
Removed files stay on storage until ``vacuum``, as after retention.

Runs in a worker thread of the broker with the topic's table object (its lock held by the
caller); blocking I/O.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, PostCommitHookProperties, Transaction
from deltalake._internal import RemoveAction
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from deltalake.transaction import AddAction

from loglake.segments.tier_rows import PARTITION_COLUMN, TABLE_SCHEMA, conform_rows
from loglake.segments.tiered_table import PendingFile, TieredTable, TierFile, app_id

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 10
"""Plans of one deletion before it gives up (each lost to a conflicting concurrent commit)."""
OPERATION = "delete_records"


@dataclass(frozen=True)
class DeletePlan:
    """What :func:`delete_below` changes in one partition (pure: computed from a file list)."""

    remove: tuple[TierFile, ...]
    """Files wholly below the new log start."""
    rewrite: TierFile | None
    """The file holding offsets on both sides of the new log start."""
    move_tiered_end: bool
    """The new log start is beyond the tiered end: the tiering app transaction moves to it."""

    @property
    def empty(self) -> bool:
        return not self.remove and self.rewrite is None and not self.move_tiered_end


@dataclass(frozen=True)
class DeleteResult:
    """What :func:`delete_below` committed (``version`` None: nothing was to change)."""

    version: int | None
    removed_files: int = 0
    rewritten_files: int = 0
    removed_rows: int = 0


def plan_delete(files: list[TierFile], tiered_end: int | None, offset: int) -> DeletePlan:
    """The changes that leave no row below ``offset`` among ``files`` (one partition's live
    files, ordered by first offset) and a tiered end of at least ``offset``."""
    remove = tuple(f for f in files if f.max_offset < offset)
    straddling = [f for f in files if f.min_offset < offset <= f.max_offset]
    return DeletePlan(remove, straddling[0] if straddling else None,
                      offset > 0 and (tiered_end is None or tiered_end < offset))


def delete_below(table: TieredTable, partition: int, offset: int, *,
                 create: bool) -> DeleteResult:
    """Delete ``partition``'s rows below ``offset`` from ``table`` (see the module docstring).

    ``create``: the topic is tiered, so a missing table is created to hold the moved tiered
    end (otherwise a missing table means there is nothing to delete). Raises
    CommitFailedError after COMMIT_ATTEMPTS conflicting commits in a row."""
    for attempt in range(COMMIT_ATTEMPTS):
        try:
            table.table(refresh=True)
        except TableNotFoundError:
            if not create:
                return DeleteResult(None)
            table.ensure_created()
        files = table.files(partition)
        plan = plan_delete(files, table.tiered_end(partition, refresh=False), offset)
        if plan.empty:
            return DeleteResult(None)
        written = _rewrite(table, partition, plan.rewrite, offset)
        try:
            version = _commit(table, partition, offset, plan, written)
        except CommitFailedError as exc:
            log.info("DeleteRecords on %s-%d lost a race (%s); planning again", table.topic,
                     partition, exc)
            time.sleep(min(0.05 * (attempt + 1), 0.5))
            continue
        kept = written.num_records if written is not None else 0
        removed = sum(f.num_records for f in plan.remove)
        if plan.rewrite is not None:
            removed += plan.rewrite.num_records - kept
        return DeleteResult(version, len(plan.remove), int(plan.rewrite is not None), removed)
    raise CommitFailedError(f"DeleteRecords on {table.topic}-{partition}: {COMMIT_ATTEMPTS} "
                            "conflicting commits in a row")


def _rewrite(table: TieredTable, partition: int, tier_file: TierFile | None,
             offset: int) -> PendingFile | None:
    """``tier_file``'s rows at or above ``offset`` as a new, uncommitted file (None: none)."""
    if tier_file is None:
        return None
    storage = table.storage
    rows = pq.read_table(storage.path_in_fs(tier_file.uri),
                         filesystem=storage.pyarrow_filesystem())
    rows = conform_rows(rows.filter(pc.greater_equal(rows.column("offset"), offset)),
                        table.typed_schema())  # typed columns kept, as the table types them
    return table.write_file(partition, rows) if rows.num_rows else None


def _commit(table: TieredTable, partition: int, offset: int, plan: DeletePlan,
            written: PendingFile | None) -> int:
    """One commit of ``plan`` on the snapshot ``table`` holds; the new table version."""
    now_ms = int(time.time() * 1000)
    doomed = [*plan.remove, *([plan.rewrite] if plan.rewrite is not None else [])]
    actions: list[AddAction | RemoveAction] = [
        RemoveAction(_relative(table, f), True, now_ms, f.size,
                     {PARTITION_COLUMN: str(partition)}) for f in doomed]
    if written is not None:
        actions.append(AddAction(written.path, written.size,
                                 {PARTITION_COLUMN: str(partition)}, now_ms, True,
                                 written.stats))
    transactions = ([Transaction(app_id(table.topic, partition), offset - 1)]
                    if plan.move_tiered_end else [])
    table.table().create_write_transaction(
        actions, "append", TABLE_SCHEMA, partition_by=[PARTITION_COLUMN],
        commit_properties=CommitProperties(
            app_transactions=transactions,
            custom_metadata={"loglake.operation": OPERATION,
                             "loglake.partition": str(partition),
                             "loglake.log_start": str(offset),
                             "userMetadata": f"loglake {OPERATION} partition={partition} "
                                             f"log_start={offset}"}),
        post_commithook_properties=PostCommitHookProperties(
            create_checkpoint=False, cleanup_expired_logs=False),
    )
    return int(table.table(refresh=True).version())


def _relative(table: TieredTable, tier_file: TierFile) -> str:
    """A live file's path relative to the table root (as remove actions name it)."""
    prefix = table.uri + "/"
    if not tier_file.uri.startswith(prefix):
        raise ValueError(f"{tier_file.uri} is not under table {table.uri}")
    return tier_file.uri[len(prefix):]
