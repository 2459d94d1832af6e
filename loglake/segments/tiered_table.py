"""One topic's Delta table on object storage: the cold tier (``<storage>/topics/<topic>``).

Layout: a Delta table partitioned by the Kafka ``partition`` column (schema in tier_rows.py), so
retention and compaction jobs replace files of one partition without touching another
partition's appends. Data files are written by us with pyarrow::

    partition=<p>/<first offset:020d>-<last offset:020d>-<uuid>.parquet

Each row group holds whole Kafka batches (never a batch split across row groups), so a fetch
re-encodes batches from one row group at a time.

Committed data only: the tierer writes a segment only once it lies below the partition's last
stable offset, and :func:`write_segment_file` leaves out the records of aborted transactions
and every transaction marker (tier_txn.py); their offsets are a gap, as after compaction.
Tables tiered before that may still hold markers (``is_control`` rows, which every reader
skips).

Quarantine (tier_quarantine.py, row format in tier_rows.py): bytes of a sealed segment that do
not decode are committed as quarantined rows (``decode_error`` set, raw bytes in ``value``,
``is_control`` true), so tiering moves past them and the table stays contiguous. The column
``decode_error`` was added after the first release: :meth:`TieredTable.ensure_created` adds it
(nullable, Delta schema evolution through deltalake) to tables created without it, and every
reader takes it as null in files written before. Each file's Delta statistics count its
quarantined rows (``numRecords - nullCount.decode_error``: :attr:`TierFile.quarantined`). Tier
reads (:meth:`TieredTable.read_chunk`) never return quarantined rows: consumers see their
offsets as a gap. A commit whose segment range holds no row at all (every batch outside the
range, or only bytes standing for no offset) still moves the app transaction, with no file.

Typed columns (tier_rows.py; segments/tier_typing.py decodes them in the worker): a file of
a typed topic holds ``<side>_typed`` / ``<side>_schema_id`` / ``<side>_error`` after the stored
columns. deltalake's ``create_write_transaction`` commits add actions but never changes the
table's metaData, so a file whose typed columns are wider than the table's schema (the side
became typed, or a new schema version added fields) is preceded by a metadata-only commit:
:meth:`TieredTable.evolve` (``alter.add_columns`` with the typed columns, which delta-rs merges
into the schema: new columns and new nested struct fields appended, nullable; existing field
types never change -- a type conflict raises, and the worker's ``side_type`` merge already
turned such records into ``<side>_error`` rows). Steps and crash points of a typed tier commit::

    1. evolve: metadata commit widening the schema  crash: a wider schema and no new rows --
                                                    harmless (every older file reads the new
                                                    columns and fields as null); the retry
                                                    finds the schema wide enough, skips 1
    2. data commit (app transaction, below)         as for untyped commits

A concurrent writer whose snapshot predates step 1 loses its commit to delta-rs's "metadata
changed" conflict and retries (tier commits retry, clean-up jobs re-plan). Schemas only widen,
so a file written against an older, narrower table type stays readable by name (delta-spark,
deltalake, pyarrow: missing nested fields are null). Rewrites (clean-up jobs, DeleteRecords)
keep the typed columns, cast to the table's newest type (tier_rows.conform_rows).

Exactly-once tiering: every commit that adds rows of partition ``p`` carries the Delta app
transaction ``(app_id=f"{topic}-{p}", version=last tiered offset)``. A writer first reads that
version, writes Parquet, then commits; delta-rs rejects a commit whose app id changed since the
snapshot it read (``CommitFailedError``: concurrent transaction), so two leaders racing on the
same partition cannot both commit, and a retry after a crash sees the version and skips the
rows already committed. Crash points:

1. after the Parquet file is written, before the commit: an orphan file no snapshot references
   (vacuum removes it); the rows are tiered again on the next attempt;
2. after the commit, before the caller's bookkeeping: the app transaction version records the
   progress, so the next attempt starts after it.

Thread-safety: a TieredTable may be used from one thread at a time (the broker runs it in worker
threads, one task per table at a time); delta-rs and pyarrow release the GIL for I/O.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, Transaction
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from deltalake.schema import Field, PrimitiveType, Schema
from deltalake.transaction import AddAction

if TYPE_CHECKING:
    from deltalake._internal import RemoveAction

from loglake.segments import filenames
from loglake.segments.storage import Storage
from loglake.segments.tier_quarantine import Quarantined, segment_rows
from loglake.segments.tier_rows import (
    DECODE_ERROR,
    FILE_SCHEMA,
    PARTITION_COLUMN,
    SIDES,
    STORED_SCHEMA,
    TABLE_SCHEMA,
    conform_rows,
    records_only,
    typed_names,
    typed_schema,
)
from loglake.segments.tier_txn import AbortedRange, committed_rows
from loglake.segments.tier_typing import TierTyping, type_rows

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 20
ROW_GROUP_ROWS = 65_536
"""Target rows per Parquet row group (cut at batch boundaries; a fetch decodes one)."""
_FOOTER_CACHE = 256
CHECKPOINT_EVERY = 20
"""Tier commits do not write Delta checkpoints themselves (that would stall the commit that
happens to hit the interval); the broker writes one in the background every this many versions
(Delta's default interval is 100): every commit replays the log since the last checkpoint, so a
long tail of JSON commits makes each commit slower."""


@dataclass(frozen=True, slots=True)
class TierFile:
    """One live data file of a partition, from the Delta snapshot's add actions."""

    uri: str
    size: int
    num_records: int
    min_offset: int
    max_offset: int
    min_timestamp_ms: int
    max_timestamp_ms: int
    has_control: bool = True
    """False when the file's statistics show no transaction markers and no quarantined rows
    (readers skip the ``is_control`` filter)."""
    quarantined: int = 0
    """Quarantined rows in the file (from its statistics; 0 for files written before them)."""


@dataclass(frozen=True, slots=True)
class PendingFile:
    """A Parquet file written into the table directory but not committed yet."""

    path: str  # relative to the table root
    size: int
    num_records: int
    first_offset: int
    last_offset: int
    stats: str


@dataclass(frozen=True, slots=True)
class SegmentWrite:
    """What :func:`write_segment_file` did with one segment range (picklable)."""

    pending: PendingFile | None
    """The file to commit; None when the range holds no row (commit the offsets without)."""
    quarantined: tuple[Quarantined, ...]
    """The range's bad batches and unframed byte ranges (empty for a clean segment)."""
    aborted_records: int = 0
    """Records of aborted transactions left out (tier_txn.py)."""
    markers: int = 0
    """Transaction markers (control records) left out."""
    typed: pa.Schema | None = None
    """The typed columns of the file (tier_rows.typed_schema): the table's schema must hold
    them before the commit (:meth:`TieredTable.commit` ``typed=``). None: an untyped file."""
    missing_ids: tuple[int, ...] = ()
    """Schema ids the records carry that the worker was not given: nothing was written
    (``pending`` None); the caller looks them up and calls again (segments/tier_typing.py)."""
    typed_errors: int = 0
    """Typed-side values of the file that did not decode (``<side>_error`` set)."""


def app_id(topic: str, partition: int) -> str:
    """The app transaction whose version is the partition's last tiered offset."""
    return f"{topic}-{partition}"


def compact_app_id(topic: str, partition: int) -> str:
    """The app transaction whose version is one past the partition's last compacted offset
    (written by the compaction job's commits)."""
    return f"loglake.compact:{topic}-{partition}"


def cleaned_end(table: TieredTable, partition: int) -> int:
    """One past the last offset compaction cleaned in the snapshot ``table`` holds (0: none)."""
    version = table.table().transaction_version(compact_app_id(table.topic, partition))
    return 0 if version is None else int(version)


def _iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class TieredTable:
    """Reads and appends to one topic's Delta table (see the module docstring)."""

    def __init__(self, storage: Storage, topic: str) -> None:
        self.storage = storage
        self.topic = topic
        self.uri = storage.table_uri(topic)
        self._dt: DeltaTable | None = None
        self._files: dict[int, list[TierFile]] | None = None
        self._files_version = -1
        self._footers: OrderedDict[str, pq.FileMetaData] = OrderedDict()

    # ------------------------------------------------------------------ snapshot
    def exists(self) -> bool:
        if self._dt is not None:
            return True
        return DeltaTable.is_deltatable(self.uri, storage_options=self.storage.delta_options())

    def table(self, *, refresh: bool = False) -> DeltaTable:
        """The Delta table, loaded once and brought up to date when ``refresh``
        (TableNotFoundError if nobody tiered this topic yet)."""
        if self._dt is None:
            self._dt = DeltaTable(self.uri, storage_options=self.storage.delta_options())
        elif refresh:
            self._dt.update_incremental()
        return self._dt

    def ensure_created(self) -> DeltaTable:
        """Create the table if missing, or add ``decode_error`` to a table created before it
        existed (idempotent; racing creators all end up with the same table)."""
        options = self.storage.delta_options()
        for _ in range(5):
            try:
                dt = self.table(refresh=True)
            except TableNotFoundError:
                pass
            else:
                if DECODE_ERROR in [field.name for field in dt.schema().fields]:
                    return dt
                try:  # one metadata commit; concurrent writers retry theirs (CommitFailed)
                    dt.alter.add_columns([Field(DECODE_ERROR, PrimitiveType("string"),
                                                nullable=True)])
                    log.info("added column %s to %s", DECODE_ERROR, self.uri)
                except Exception as exc:  # another broker evolved it first: reload
                    log.info("evolving %s: %s; reloading the table", self.uri, exc)
                    time.sleep(0.1)
                continue
            try:
                DeltaTable.create(
                    self.uri, schema=TABLE_SCHEMA, partition_by=[PARTITION_COLUMN],
                    mode="ignore", name=self.topic,
                    description=f"loglake topic {self.topic}", storage_options=options,
                )
            except Exception as exc:  # a concurrent creator won the race: load theirs
                log.info("creating %s: %s; loading the existing table", self.uri, exc)
                time.sleep(0.1)
        return self.table(refresh=True)

    def typed_schema(self, *, refresh: bool = False) -> pa.Schema:
        """The typed columns of the table's schema (tier_rows.typed_schema; empty: untyped or
        no table yet)."""
        try:
            dt = self.table(refresh=refresh)
        except TableNotFoundError:
            return pa.schema([])
        return typed_schema(pa.schema(dt.schema().to_arrow()))

    def evolve(self, typed: pa.Schema) -> bool:
        """Make the table's schema hold the typed columns ``typed`` (module docstring: a
        metadata-only commit merging them in; nothing when it holds them already). Returns
        whether it committed. Raises when a column's type cannot merge with the table's."""
        for attempt in range(COMMIT_ATTEMPTS):
            # schemas only widen: a snapshot that already covers ``typed`` proves it (no log
            # read); otherwise a stale snapshot's alter loses its race and the retry reloads
            current = self.typed_schema(refresh=attempt > 0)
            if _covers(current, typed):
                return False
            try:
                self.table().alter.add_columns(list(Schema.from_arrow(typed).fields))
                log.info("%s: schema evolved to hold %s", self.uri,
                         ", ".join(f"{f.name} {f.type}" for f in typed))
                return True
            except CommitFailedError as exc:  # a concurrent commit: reload and look again
                log.info("evolving %s lost a race (%s); retrying", self.uri, exc)
                time.sleep(min(0.05 * (attempt + 1), 0.5))
        raise CommitFailedError(f"could not evolve the schema of {self.uri} after "
                                f"{COMMIT_ATTEMPTS} attempts")

    def tiered_end(self, partition: int, *, refresh: bool = True) -> int | None:
        """One past the last offset tiered for ``partition`` (None: nothing tiered yet)."""
        try:
            version = self.table(refresh=refresh).transaction_version(app_id(self.topic, partition))
        except TableNotFoundError:
            return None
        return None if version is None else int(version) + 1

    def files(self, partition: int, *, refresh: bool = False) -> list[TierFile]:
        """Live data files of ``partition`` ordered by first offset."""
        try:
            dt = self.table(refresh=refresh)
        except TableNotFoundError:
            return []
        if self._files is None or self._files_version != dt.version():
            self._files = self._load_files(dt)
            self._files_version = dt.version()
        return self._files.get(partition, [])

    def _load_files(self, dt: DeltaTable) -> dict[int, list[TierFile]]:
        actions = pa.table(dt.get_add_actions(flatten=True))
        by_partition: dict[int, list[TierFile]] = {}
        if actions.num_rows == 0:
            return by_partition
        min_ts = actions.column("min.timestamp").cast(pa.int64()).to_pylist()
        max_ts = actions.column("max.timestamp").cast(pa.int64()).to_pylist()
        control = (actions.column("max.is_control").to_pylist()
                   if "max.is_control" in actions.column_names else [None] * actions.num_rows)
        valid_column = f"null_count.{DECODE_ERROR}"  # records: decode_error is null
        valid: list[int | None] = (actions.column(valid_column).to_pylist()
                                   if valid_column in actions.column_names
                                   else [None] * actions.num_rows)
        for i, row in enumerate(actions.select([
            "path", "size_bytes", "num_records", "min.offset", "max.offset",
            f"partition.{PARTITION_COLUMN}",
        ]).to_pylist()):
            by_partition.setdefault(int(row[f"partition.{PARTITION_COLUMN}"]), []).append(
                TierFile(
                    f"{self.uri}/{row['path']}", int(row["size_bytes"]),
                    int(row["num_records"]), int(row["min.offset"]), int(row["max.offset"]),
                    (min_ts[i] or 0) // 1000, (max_ts[i] or 0) // 1000,
                    control[i] is not False,
                    _quarantined_rows(int(row["num_records"]), valid[i]),
                )
            )
        for files in by_partition.values():
            files.sort(key=lambda f: f.min_offset)
        return by_partition

    def checkpoint_if_due(self, every: int = CHECKPOINT_EVERY) -> bool:
        """Write a Delta checkpoint of the newest version if the last one is ``every`` or more
        versions old (checkpoints are immutable files of one version: safe next to writers)."""
        dt = self.table(refresh=True)
        version = dt.version()
        last = _last_checkpoint_version(self.storage, self.uri)
        if version - last < every:
            return False
        dt.create_checkpoint()
        return True

    def start_offset(self, partition: int) -> int | None:
        """The first offset the tier holds for ``partition`` (None when it holds none)."""
        files = self.files(partition)
        return files[0].min_offset if files else None

    # ------------------------------------------------------------------ writing
    def write_file(self, partition: int, rows: pa.Table, *,
                   first_offset: int | None = None) -> PendingFile:
        """Write ``rows`` (FILE_SCHEMA or STORED_SCHEMA, ordered by offset, whole batches) as
        one Parquet file (STORED_SCHEMA) under the partition's directory; row groups are cut at
        batch boundaries. ``first_offset`` (at most the first row's): the offset the file's
        ``minValues.offset`` statistic says it starts at, when offsets before its first row
        hold nothing (aborted records, markers): a partition's earliest offset is its first
        file's statistic, and must not move past offsets that were simply left out."""
        if rows.num_rows == 0:
            raise ValueError("no rows to tier")
        rows = conform_rows(rows)  # typed columns, if any, kept after the stored ones
        offsets = rows.column("offset")
        first, last = offsets[0].as_py(), offsets[-1].as_py()
        starts_at = first if first_offset is None else min(first, first_offset)
        relative = (f"{PARTITION_COLUMN}={partition}/"
                    f"{first:020d}-{last:020d}-{uuid.uuid4().hex}.parquet")
        fs = self.storage.pyarrow_filesystem()
        uri = f"{self.uri}/{relative}"
        path = self.storage.path_in_fs(uri)
        self.storage.make_parent_dirs(uri)
        with fs.open_output_stream(path) as sink, pq.ParquetWriter(
            sink, rows.schema, compression="zstd", write_statistics=True,
        ) as writer:
            for start, stop in _row_groups(rows.column("batch_offset")):
                writer.write_table(rows.slice(start, stop - start), row_group_size=stop - start)
        size = fs.get_file_info(path).size
        timestamps = rows.column("timestamp").cast(pa.int64())
        ts_min, ts_max = pc.min(timestamps).as_py(), pc.max(timestamps).as_py()
        batch_offsets = rows.column("batch_offset")
        control = rows.column("is_control")
        stats = {
            "numRecords": rows.num_rows,
            "minValues": {"offset": starts_at, "timestamp": _iso(ts_min),
                          "batch_offset": batch_offsets[0].as_py(),
                          "is_control": bool(pc.min(control).as_py())},
            "maxValues": {"offset": last, "timestamp": _iso(ts_max),
                          "batch_offset": batch_offsets[-1].as_py(),
                          "is_control": bool(pc.max(control).as_py())},
            "nullCount": {"offset": 0, "timestamp": 0, "batch_offset": 0, "is_control": 0,
                          "key": rows.column("key").null_count,
                          "value": rows.column("value").null_count,
                          DECODE_ERROR: rows.column(DECODE_ERROR).null_count,
                          **{name: rows.column(name).null_count
                             for side in SIDES for name in typed_names(side)[1:]
                             if name in rows.column_names}},
        }
        return PendingFile(relative, int(size or 0), rows.num_rows, starts_at, last,
                           json.dumps(stats))

    def commit(self, partition: int, files: Sequence[PendingFile], last_offset: int,
               *, expected_end: int | None, metadata: Mapping[str, str] | None = None,
               typed: pa.Schema | None = None) -> bool:
        """Commit ``files`` as the rows of ``partition`` up to ``last_offset``, if the tiered
        end is still ``expected_end`` (what the caller read before writing them). ``files``
        may be empty (the offsets hold no row); ``metadata`` goes into the commit's info;
        ``typed``: the files' typed columns, which the table's schema is evolved to hold first
        (:meth:`evolve`, module docstring).

        Returns False, committing nothing, when another writer already moved the partition's
        tiered end (its commit holds these rows). Retries commits that lost a race to writers
        of other partitions."""
        actions: list[AddAction | RemoveAction] = [
            AddAction(f.path, f.size, {PARTITION_COLUMN: str(partition)},
                      int(time.time() * 1000), True, f.stats)
            for f in files
        ]
        properties = CommitProperties(
            app_transactions=[Transaction(app_id(self.topic, partition), last_offset)],
            custom_metadata={"loglake.operation": "tier", "loglake.partition": str(partition),
                             "loglake.last_offset": str(last_offset), **(metadata or {}),
                             # shown by delta-spark's DESCRIBE HISTORY (column userMetadata)
                             "userMetadata": f"loglake tier partition={partition} "
                                             f"last_offset={last_offset}"},
        )
        for attempt in range(COMMIT_ATTEMPTS):
            if self.tiered_end(partition, refresh=True) != expected_end:
                return False
            if typed is not None and len(typed) and files:
                self.evolve(typed)
            try:
                self.table().create_write_transaction(
                    actions, "append", TABLE_SCHEMA, partition_by=[PARTITION_COLUMN],
                    commit_properties=properties,
                    post_commithook_properties=PostCommitHookProperties(
                        create_checkpoint=False, cleanup_expired_logs=False),
                )
                return True
            except CommitFailedError as exc:
                log.info("tier commit of %s-%d lost a race (%s); retrying", self.topic,
                         partition, exc)
                time.sleep(min(0.05 * (attempt + 1), 0.5))
        raise CommitFailedError(
            f"could not commit tiered rows of {self.topic}-{partition} after "
            f"{COMMIT_ATTEMPTS} attempts"
        )

    # ------------------------------------------------------------------ reading
    def _footer(self, uri: str) -> pq.FileMetaData:
        meta = self._footers.get(uri)
        if meta is None:
            fs = self.storage.pyarrow_filesystem()
            with fs.open_input_file(self.storage.path_in_fs(uri)) as source:
                meta = pq.ParquetFile(source).metadata
            self._footers[uri] = meta
            if len(self._footers) > _FOOTER_CACHE:
                self._footers.popitem(last=False)
        else:
            self._footers.move_to_end(uri)
        return meta

    def read_chunk(self, partition: int, offset: int) -> pa.Table | None:
        """The rows of the first row group holding a batch with an offset >= ``offset``, from
        that batch on (whole batches, quarantined rows left out); None when the tier holds no
        batch at or after it."""
        fs = self.storage.pyarrow_filesystem()
        for tier_file in self.files(partition):
            if tier_file.max_offset < offset:
                continue
            meta = self._footer(tier_file.uri)
            offset_column = FILE_SCHEMA.get_field_index("offset")
            for index in range(meta.num_row_groups):
                stats = meta.row_group(index).column(offset_column).statistics
                if stats is not None and stats.has_min_max and stats.max < offset:
                    continue
                stored = [name for name in meta.schema.to_arrow_schema().names
                          if name in _STORED_NAMES]  # not the typed columns: not served
                with fs.open_input_file(self.storage.path_in_fs(tier_file.uri)) as source:
                    rows = pq.ParquetFile(source, metadata=meta).read_row_group(
                        index, columns=stored)
                mask = pc.greater_equal(rows.column("batch_last_offset"), offset)
                rows = records_only(rows.filter(mask))
                if rows.num_rows:
                    return rows
        return None

    def quarantined(self, partition: int) -> int:
        """Quarantined rows in the live files of ``partition`` (from file statistics)."""
        return sum(f.quarantined for f in self.files(partition))

    def read_rows(self, partition: int, start: int, end: int | None = None,
                  *, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """Rows of ``partition`` with ``start <= offset < end``, in offset order."""
        files = [f.uri for f in self.files(partition)
                 if f.max_offset >= start and (end is None or f.min_offset < end)]
        if not files:
            return
        dataset = pads.dataset(
            [self.storage.path_in_fs(uri) for uri in files], schema=FILE_SCHEMA,
            format="parquet", filesystem=self.storage.pyarrow_filesystem(),
        )
        condition = pc.field("offset") >= start
        if end is not None:
            condition = condition & (pc.field("offset") < end)
        yield from dataset.to_batches(columns=list(columns) if columns else None,
                                      filter=condition)

    def offset_for_timestamp(self, partition: int, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp_ms)`` of the first tiered record with timestamp >=
        ``timestamp_ms`` (ListOffsets by time below the local log)."""
        for tier_file in self.files(partition):
            if tier_file.max_timestamp_ms < timestamp_ms:
                continue
            for batch in self.read_rows(partition, tier_file.min_offset,
                                        tier_file.max_offset + 1,
                                        columns=["offset", "timestamp"]):
                ts = batch.column("timestamp").cast(pa.int64())
                hits = pc.indices_nonzero(pc.greater_equal(ts, timestamp_ms * 1000))
                if len(hits):
                    i = hits[0].as_py()
                    return batch.column("offset")[i].as_py(), ts[i].as_py() // 1000
        return None


_STORED_NAMES = frozenset(STORED_SCHEMA.names)


def _covers(current: pa.Schema, wanted: pa.Schema) -> bool:
    """Whether the typed columns ``current`` hold every column and nested field of ``wanted``
    (with the same types)."""
    for field in wanted:
        index = current.get_field_index(field.name)
        if index < 0 or not _type_covers(current.field(index).type, field.type):
            return False
    return True


def _type_covers(have: pa.DataType, want: pa.DataType) -> bool:
    if pa.types.is_struct(have) and pa.types.is_struct(want):
        names = [have.field(i).name for i in range(have.num_fields)]
        for i in range(want.num_fields):
            child = want.field(i)
            if child.name not in names or not _type_covers(
                    have.field(names.index(child.name)).type, child.type):
                return False
        return True
    if pa.types.is_list(have) and pa.types.is_list(want):
        return _type_covers(have.value_type, want.value_type)
    if pa.types.is_map(have) and pa.types.is_map(want):
        return (_type_covers(have.key_type, want.key_type)
                and _type_covers(have.item_type, want.item_type))
    return bool(have == want)


def _quarantined_rows(num_records: int, decode_error_nulls: int | None) -> int:
    """Quarantined rows of a file from its statistics (no statistic: a file from before
    quarantine existed, or one whose writer did not count: none)."""
    return 0 if decode_error_nulls is None else max(0, num_records - int(decode_error_nulls))


def _last_checkpoint_version(storage: Storage, uri: str) -> int:
    """The version in ``_delta_log/_last_checkpoint`` (-1 when there is none)."""
    path = storage.path_in_fs(f"{uri}/_delta_log/_last_checkpoint")
    try:
        with storage.pyarrow_filesystem().open_input_stream(path) as source:
            return int(json.loads(source.read())["version"])
    except (OSError, ValueError, KeyError):
        return -1


def write_segment_file(storage: Storage, topic: str, partition: int, path: Path, start: int,
                       end: int, aborted: Sequence[AbortedRange] = (),
                       typing: TierTyping | None = None) -> SegmentWrite:
    """Decode the records in ``[start, end)`` of a sealed segment file (CRC-checked; what does
    not decode is quarantined, tier_quarantine.py), drop the records of the ``aborted``
    transactions and every transaction marker (tier_txn.py: the table holds committed data
    only), and write the rest as one uncommitted Parquet file of the topic's table. (The
    brokers run this in a worker process.) ``typing``: the topic's typed sides
    (tier_typing.py): the file gets their typed columns, or, when the records carry schema
    ids ``typing`` lacks, nothing is written and :attr:`SegmentWrite.missing_ids` names them."""
    data = path.read_bytes()
    parsed = filenames.parse_segment_name(path.name)
    result = segment_rows(data, start_offset=start, end_offset=end,
                          base_offset=parsed[0] if parsed is not None else 0, next_offset=end,
                          fallback_timestamp_ms=int(path.stat().st_mtime * 1000))
    committed = committed_rows(result.rows, aborted)
    rows = committed.rows
    typed: pa.Schema | None = None
    typed_errors = 0
    if typing is not None and rows.num_rows:
        outcome = type_rows(rows, typing)
        if outcome.rows is None:
            return SegmentWrite(None, result.quarantined, committed.aborted_records,
                                committed.markers, missing_ids=outcome.missing_ids)
        rows, typed, typed_errors = outcome.rows, outcome.typed, outcome.errors
    pending = (TieredTable(storage, topic).write_file(partition, rows, first_offset=start)
               if rows.num_rows else None)
    return SegmentWrite(pending, result.quarantined, committed.aborted_records,
                        committed.markers, typed=typed, typed_errors=typed_errors)


def _row_groups(batch_offsets: pa.ChunkedArray) -> Iterator[tuple[int, int]]:
    """Cut ``[0, n)`` into runs of about ROW_GROUP_ROWS rows at batch boundaries."""
    values = batch_offsets.to_pylist()
    n = len(values)
    start = 0
    while start < n:
        stop = min(start + ROW_GROUP_ROWS, n)
        while stop < n and values[stop] == values[stop - 1]:
            stop += 1
        yield start, stop
        start = stop
