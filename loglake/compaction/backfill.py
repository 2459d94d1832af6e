"""``loglake schemas backfill --topic T``: re-type an existing topic's table.

Files tiered before a topic's sides became typed (or while ``schema.columns.enable`` was off)
hold only the raw ``key``/``value`` bytes. The backfill rewrites each such file with the typed
columns of the topic's typed sides added (segments/tier_typing.py, the tierer's own code: the
same target types, the same error texts), same rows, same offsets, same batches:

1. the typed sides (schemas/typed_sides.py over the topic config and the schema store in
   ZooKeeper); none -> an error naming the subjects to register;
2. per partition, per live file lacking a typed side's columns (in offset order): read it,
   collect the schema ids it carries, snapshot their schemas and the subjects' versions from
   the store, type the rows (unknown ids -> ``<side>_error``), write one new file with the
   first-offset statistic of the old one (compaction's ``keep_first_offset`` rule);
3. evolve the table's schema if the new file's typed columns are wider (a metadata commit,
   segments/tiered_table.py ``TieredTable.evolve``), then ONE replace commit per file
   (common.py ``commit_replace``: remove the old file, add the new; ``loglake.operation =
   backfill``). A conflicting commit (compaction or retention replaced the file meanwhile)
   re-plans the partition; a file gone since is skipped.

Resumable: a file that already has the columns is skipped, so a run that was interrupted (or
a second run) continues where the last one stopped; concurrent tier appends never conflict.
Crash points are those of every replace job (common.py): a new file written but not
committed is an orphan ``vacuum`` removes. Progress: one line per rewritten file and one per
partition; the run is recorded in the job history (``backfill``) like the clean-up jobs.

Driver-side, blocking; not thread-safe (one Cluster).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from loglake import addresses
from loglake.catalog.schemas import SchemaStore
from loglake.compaction.common import (
    COMMIT_ATTEMPTS,
    CleanupError,
    Cluster,
    Progress,
    backoff,
    commit_replace,
    keep_first_offset,
)
from loglake.errors import LoglakeError
from loglake.schemas.schema_set import SchemaSet
from loglake.schemas.typed_sides import typed_sides
from loglake.schemas.wire import schema_ids
from loglake.segments.storage import parse_storage_options
from loglake.segments.tier_rows import conform_rows, side_types, typed_names
from loglake.segments.tier_typing import TierTyping, type_rows
from loglake.segments.tiered_table import TieredTable, TierFile

OPERATION = "backfill"


@dataclass
class BackfillResult:
    """What the backfill did to one partition."""

    topic: str
    partition: int
    files_rewritten: int = 0
    files_skipped: int = 0
    """Files that already had the typed columns."""
    rows: int = 0
    errors: int = 0
    """Typed-side values that did not decode."""
    bytes_in: int = 0
    bytes_out: int = 0
    committed: bool = False
    notes: list[str] = field(default_factory=list)


def _needs(schema: pa.Schema, sides: dict[str, str]) -> bool:
    """Whether a file with ``schema`` lacks the columns of a typed side."""
    return any(typed_names(side)[1] not in schema.names for side in sides)


def _file_schema(table: TieredTable, tier_file: TierFile) -> pa.Schema:
    storage = table.storage
    with storage.pyarrow_filesystem().open_input_file(
            storage.path_in_fs(tier_file.uri)) as source:
        return pq.ParquetFile(source).schema_arrow


def _typing(store: SchemaStore, sides: dict[str, str], rows: pa.Table,
            current: dict[str, pa.DataType]) -> TierTyping:
    """The tierer's typing of ``rows``: the subjects' versions and every id the rows carry
    (ids the store does not know are absent: their records get ``unknown schema id``)."""
    ids: set[int] = set()
    for side in sides:
        ids.update(int(i) for i in schema_ids(rows.column(side)).unique().drop_null().to_pylist())
    schemas = SchemaSet.collect(store, sorted(ids), subjects=sorted(set(sides.values())))
    absent = frozenset(i for i in ids if schemas.schema(i) is None)
    return TierTyping(subjects=sides, schemas=schemas,
                      current={s: current[s] for s in sides if s in current}, absent=absent)


def backfill_partition(table: TieredTable, partition: int, store: SchemaStore,
                       sides: dict[str, str], *, dry_run: bool = False,
                       progress: Progress | None = None) -> BackfillResult:
    """Re-type the files of one partition (module docstring), one commit per file."""
    progress = progress or Progress()
    result = BackfillResult(table.topic, partition)
    name = f"{table.topic}-{partition}"
    attempts = 0
    while attempts < COMMIT_ATTEMPTS:
        try:
            table.table(refresh=True)
        except TableNotFoundError:
            return result
        files = table.files(partition)
        todo = [f for f in files if _needs(_file_schema(table, f), sides)]
        if dry_run or not todo:
            result.files_skipped = len(files) - len(todo)
            verb = "would re-type" if todo else "nothing to re-type:"
            progress.line(f"backfill {name}: {verb} {len(todo)} of {len(files)} file(s)")
            return result
        tier_file = todo[0]
        storage = table.storage
        with storage.pyarrow_filesystem().open_input_file(
                storage.path_in_fs(tier_file.uri)) as source:
            rows = pq.ParquetFile(source).read()
        # the sides being typed get fresh columns; another side's typed columns stay
        kept = [n for n in rows.column_names
                if not any(n in typed_names(side) for side in sides)]
        rows = conform_rows(rows.select(kept))
        current = side_types(table.typed_schema())
        typed = type_rows(rows, _typing(store, sides, rows, current))
        if typed.rows is None:  # cannot happen: every id is known or absent
            raise CleanupError(f"backfill {name}: schema ids {typed.missing_ids} unresolved")
        written = keep_first_offset(
            [table.write_file(partition, typed.rows, first_offset=tier_file.min_offset)],
            tier_file.min_offset)
        try:
            if typed.typed is not None:
                table.evolve(typed.typed)
            table.table(refresh=True)
            if tier_file.uri not in {f.uri for f in table.files(partition)}:
                attempts += 1
                continue  # replaced meanwhile (compaction, retention): plan again
            commit_replace(table, {partition: [tier_file]}, {partition: written},
                           operation=OPERATION,
                           metadata={"loglake.partition": str(partition),
                                     "loglake.typed_errors": str(typed.errors)})
        except CommitFailedError:
            attempts += 1
            backoff(attempts)
            continue
        attempts = 0
        result.committed = True
        result.files_rewritten += 1
        result.rows += tier_file.num_records
        result.errors += typed.errors
        result.bytes_in += tier_file.size
        result.bytes_out += sum(f.size for f in written)
        done = len(files) - len(todo) + 1
        progress.line(f"backfill {name}: file {done}/{len(files)} offsets "
                      f"[{tier_file.min_offset}, {tier_file.max_offset}]: "
                      f"{tier_file.num_records} rows, {typed.errors} not decoded")
    progress.line(f"backfill {name}: conflicting commits; run it again to continue")
    return result


def run_backfill(cluster: Cluster, *, topic: str, dry_run: bool = False,
                 progress: Progress | None = None) -> list[BackfillResult]:
    """Re-type every partition of ``topic``'s table (module docstring); announces the change
    to the brokers when a file was rewritten."""
    progress = progress or Progress()
    target = cluster.targets(topic)[0]
    store = SchemaStore(cluster.catalog.zk)
    sides = typed_sides(topic, target.config,
                        lambda subject: bool(store.versions(subject))).by_side()
    if not sides:
        if not target.config.schema_columns_enable:
            raise LoglakeError(f"topic {topic} has schema.columns.enable=false",
                               hint="set it to true to type its table")
        raise LoglakeError(f"topic {topic} has no schema subject: neither {topic}-value nor "
                           f"{topic}-key exists and no value.schema.subject / "
                           "key.schema.subject is set",
                           hint="register the topic's schema, or set value.schema.subject")
    table = TieredTable(cluster.storage, topic)
    if not table.exists():
        progress.line(f"backfill {topic}: no table yet (nothing tiered)")
        return []
    progress.line(f"backfill {topic}: typing " + ", ".join(
        f"{side} by {subject}" for side, subject in sides.items()))
    results = [backfill_partition(table, partition, store, sides, dry_run=dry_run,
                                  progress=progress)
               for partition in cluster.partitions(topic)]
    if any(r.committed for r in results):
        cluster.announce(table, OPERATION)
    return results


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``backfill`` to the ``schemas`` command group (client/schemas_cli.py)."""
    parser = commands.add_parser(
        "backfill", help="re-type a topic's tiered table: rewrite files tiered before its "
        "schema columns existed (resumable; one commit per file)")
    addresses.add_zookeeper_option(parser)
    parser.add_argument("--topic", required=True, help="the topic whose table to re-type")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would be re-typed; change nothing")
    parser.add_argument("--storage-option", action="append", default=[],
                        metavar="KEY=VALUE", help="object-store option (e.g. credentials)")
    parser.set_defaults(handler=backfill_command)


def backfill_command(args: argparse.Namespace) -> int:
    """``loglake schemas backfill``: the run is recorded in the job history (``backfill``)."""
    from loglake.compaction.metrics import JobMetrics, JobRecorder  # metrics imports us

    with Cluster(addresses.zookeeper(args.zookeeper),
                 storage_options=parse_storage_options(args.storage_option)) as cluster:
        recorder = JobRecorder(JobMetrics(), cluster.catalog.job_runs())
        results = recorder.run(OPERATION, lambda: run_backfill(
            cluster, topic=args.topic, dry_run=args.dry_run), topic=args.topic,
            dry_run=args.dry_run)
    rewritten = sum(r.files_rewritten for r in results)
    errors = sum(r.errors for r in results)
    print(f"backfill {args.topic}: {rewritten} file(s) re-typed, {errors} value(s) did not "
          "decode", file=sys.stdout, flush=True)
    return 0
