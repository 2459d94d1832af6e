"""The tierer: sealed segments of led partitions into the topic's Delta table, and its progress.

For every partition this broker leads whose topic has ``remote.storage.enable``, each sealed
segment whose records are all below the last stable offset (LSO: below the high watermark, so
every ISR member has them and no failover truncates them, and below the first offset of any
open transaction, so every transaction with a record in the segment has its COMMIT or ABORT
marker) is decoded into rows and committed to the topic's Delta table
(segments/tiered_table.py), oldest first, one commit per segment. A sealed segment that reaches
past the LSO waits whole until the LSO passes its end (as Kafka's RemoteLogManager copies only
segments below the LSO; an open transaction holds it at most ``transaction.timeout.ms``, after
which the coordinator aborts it): the tiered end moves by whole segments as before (or to a
DeleteRecords offset), so the app transaction below, tier reads (which serve only below the
local log start) and local retention (which deletes only segments wholly below the tiered end)
need no other rule, and a segment holding an open transaction stays local.

Committed data only: before a segment range ``[begin, end)`` goes to the worker process, the
partition's aborted transactions overlapping it are taken on the loop
(``Partition.aborted_transactions``, in memory) and passed along; the worker drops their
records and every control batch (segments/tier_txn.py). Offsets of the kept rows are
unchanged, so the dropped ones are a gap; a range left with no row still moves the tiered end
(a commit with no file). Each commit counts what it dropped in its metadata
(``loglake.aborted_records``, ``loglake.markers``). Progress is not kept locally:
``tiered_end`` (one past the last tiered offset) is the Delta app-transaction version of
``<topic>-<partition>``, re-read on every leadership change, so a crash or a new leader resumes
exactly where the table says. Steps and what a crash at each leaves::

    1. read the segment (immutable once sealed) from tiered_end, decode -> Arrow rows
    2. write one Parquet file into the table directory        crash: orphan file (harmless)
    3. Delta commit with app txn (<topic>-<p>, last offset)   crash: committed; the next
                                                               leader reads the version
    4. update tiered_end, tiering status in ZooKeeper         (bookkeeping only)

Typed topics (schemas issue; broker/tier_schemas.py, segments/tier_typing.py): when a side of
the topic is typed, step 1 also decodes each value (key) by its schema id into the typed
columns, with a schema snapshot from the broker; ids the snapshot lacks come back from the
worker unwritten, are looked up in the store, and the worker runs once more (unknown ids then
decode as errors: a segment never waits on an id). A record that does not decode keeps its raw
bytes and gets ``<side>_error``; it never stops tiering. Step 3 is preceded by a metadata-only
commit when the file's typed columns are wider than the table's schema (Delta schema
evolution, segments/tiered_table.py ``TieredTable.evolve``: a crash between the two leaves a
wider schema and no rows -- harmless). Each commit counts undecoded values in its metadata
(``loglake.typed_errors``).

Every 10th tier commit of a topic writes a Delta checkpoint in the background (its own table
object, so tier commits never wait for it).

Poison: a segment is never retried forever because of its bytes. Batches that do not decode
(failed CRC, malformed records, undecodable compression, wrong record count, unframeable bytes)
are quarantined in step 1 (segments/tier_quarantine.py): committed as quarantined rows with the
raw bytes and the error, so the tiered end moves past them and local retention can delete the
segment. Each quarantined batch is logged once (WARNING, after its commit), counted in the
commit's metadata (``loglake.quarantined``) and in the tiering status (``quarantined``: rows of
the partition's live files, from Delta statistics). Tier reads serve their offsets as a gap
(tier_reads.py).

Failures that are not about the bytes (object store unreachable, a Delta commit that keeps
losing, the worker process dying) are retried with a per-partition back-off (from the task
interval, doubling, at most MAX_BACKOFF_S) and logged by failure_log.FailureLog: the first
failure with its traceback, then one line with a count every failure_log.REPEAT_INTERVAL_S
(5 minutes), one line when it works again. The tiering status carries ``failures`` (in a row)
and ``last_error`` while tiering fails. A dead worker process is replaced on the next attempt.

Tiering status (``/loglake/tiering/<topic>/<partition>``, catalog/zookeeper.py, read by the
tiering status command): tiered end, table start, local start, high watermark, lag in offsets
and seconds, quarantined rows, failures; published at once when the tiered end moved, otherwise
at most once every STATUS_INTERVAL_S.

Metrics (broker/metrics/state_counters.py, collectors.py): each landed tier commit is counted
per topic with the duration of its Delta commit (step 3), and the table's version, live files
and bytes are read from the writer's snapshot afterwards (a worker thread) into the topic's
``TopicTier`` for the scrape. The hold point ``tier-before-write`` (loglake/faults.py) lets a
test keep sealed segments untiered.

DeleteRecords (:meth:`TierWriter.delete_records`, on the leader, before its local log start
moves): the partition's rows below the new log start leave the table in one commit
(segments/tier_delete.py), which also moves the tiered end up to it when it is beyond, so no
tier commit in flight brings deleted rows back; the leader forgets what it cached and announces
the change like a clean-up job does.

Thread-safety: event-loop only; decoding a segment and writing its Parquet file run in one
spawned worker process (off the broker's GIL: decoding is pure-Python CPU work); Delta work
runs in worker threads on the topic's writer table (one call at a time); ZooKeeper writes go
through the session's ``call``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import concurrent.futures.process
import contextlib
import ctypes
import json
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from loglake.broker.failure_log import FailureLog
from loglake.broker.metrics.state_counters import StateCounters
from loglake.broker.partition import Partition, Role
from loglake.broker.tier_schemas import RESOLVE_ROUNDS, TierSchemas
from loglake.broker.tier_state import BackgroundTasks, TierProgress, TierState, TierZooKeeper
from loglake.errors import LoglakeError
from loglake.faults import crash_point, held
from loglake.segments.log import SegmentInfo
from loglake.segments.tier_delete import delete_below
from loglake.segments.tier_quarantine import Quarantined
from loglake.segments.tier_rows import side_types
from loglake.segments.tier_typing import TierTyping
from loglake.segments.tiered_table import SegmentWrite, TieredTable, write_segment_file

log = logging.getLogger(__name__)

T = TypeVar("T")
STATUS_INTERVAL_S = 1.0
"""Shortest time between two tiering-status writes of a partition whose tiered end did not
move."""
PR_SET_PDEATHSIG = 1
MAX_BACKOFF_S = 30.0
"""Longest wait before tiering a partition again after failures in a row."""
QUARANTINE_LOG_LINES = 5
"""Quarantined batches logged one per line per commit; the rest as one count."""
QUARANTINE_METADATA_ITEMS = 20
"""Quarantined batches described in a commit's ``loglake.quarantined`` metadata."""
CHECKPOINT_EVERY_COMMITS = 10
"""A Delta checkpoint is written after every this many tier commits of a topic."""


class TierWriter:
    """The tierer of one broker (see the module)."""

    def __init__(self, state: TierState, *, broker_id: int, zookeeper: TierZooKeeper,
                 watch: Callable[[str], None], on_change: Callable[[str], None],
                 stopping: Callable[[], bool], failures: FailureLog,
                 tasks: BackgroundTasks, counters: StateCounters | None = None,
                 schemas: TierSchemas | None = None) -> None:
        """``schemas``: typed sides and schema snapshots (None: every topic tiers raw)."""
        self._state = state
        self._schemas = schemas
        self._counters = counters if counters is not None else StateCounters()
        self._broker_id = broker_id
        self._zookeeper = zookeeper
        self._watch = watch  # start watching a topic's table changes
        self._on_change = on_change  # this broker changed a topic's table (DeleteRecords)
        self._stopping = stopping
        self._failures = failures
        self._tasks = tasks
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    # ------------------------------------------------------------------ worker process
    def _worker(self) -> concurrent.futures.ProcessPoolExecutor:
        """The process that decodes segments and writes Parquet, off the broker's GIL (decoding
        is pure-Python CPU work; in a thread it would stall request handling)."""
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                initializer=_die_with_parent, initargs=(os.getpid(),))
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def _in_worker(self, func: Callable[..., T], *args: Any) -> T:
        """``func(*args)`` in the worker process; a worker that died (killed, out of memory)
        is replaced by the next call instead of failing every call after."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._worker(), func, *args)
        except concurrent.futures.process.BrokenProcessPool:
            self.close()
            raise

    def _checkpoint_soon(self, topic: str) -> None:
        """Write a Delta checkpoint in the background when one is due (one task per topic, on
        its own table object, so tier commits never wait for it)."""
        tier = self._state.topic(topic)
        tier.commits += 1
        storage = self._state.storage
        if storage is None or tier.checkpointing or tier.commits % CHECKPOINT_EVERY_COMMITS:
            return
        table = TieredTable(storage, topic)
        tier.checkpointing = True

        async def checkpoint() -> None:
            what = f"Delta checkpoint of {topic}"
            try:
                await asyncio.to_thread(table.checkpoint_if_due)
                self._failures.succeeded(("checkpoint", topic), what)
            except Exception as exc:
                self._failures.failed(("checkpoint", topic), what, exc)
            finally:
                tier.checkpointing = False

        self._tasks.spawn(checkpoint())

    # ------------------------------------------------------------------ tiering
    async def tier_guarded(self, partition: Partition, interval: float) -> None:
        """Tier one partition unless it is backing off; failures are counted, logged without
        a traceback per attempt, reported in the status, and delay the next attempt."""
        key = (partition.topic, partition.index)
        if time.monotonic() < self._state.partition(key).retry_at:
            return
        what = f"tiering {partition.name}"
        try:
            await self._tier_partition(partition)
        except Exception as exc:
            failures = self._failures.failed(("tier", key), what, exc)
            delay = min(max(interval, 0.1) * 2 ** min(failures - 1, 16), MAX_BACKOFF_S)
            self._state.partition(key).retry_at = time.monotonic() + delay
            # the status shows the failure (before any progress was read: with nothing else)
            progress = self._state.progress(key) or TierProgress(partition.leader_epoch, None)
            with contextlib.suppress(Exception):
                await self._report(partition, progress)
            return
        self._state.partition(key).retry_at = 0.0
        self._failures.succeeded(("tier", key), what)

    async def _load_progress(self, partition: Partition) -> TierProgress:
        key = (partition.topic, partition.index)
        progress = self._state.progress(key)
        if progress is None or progress.leader_epoch != partition.leader_epoch:
            self._watch(partition.topic)
            writer = self._state.writer(partition.topic)
            end = await writer.call(writer.table.tiered_end, partition.index)
            start = await writer.call(writer.table.start_offset, partition.index)
            quarantined = await writer.call(writer.table.quarantined, partition.index)
            tier = self._state.partition(key)
            tier.set_start(start)
            progress = tier.progress = TierProgress(partition.leader_epoch, end, quarantined)
        return progress

    async def _tier_partition(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        known = self._state.progress(key)
        if (known is not None and known.leader_epoch == partition.leader_epoch
                and _next_sealed(partition, max(known.tiered_end or 0,
                                                partition.log_start_offset)) is None):
            await self._report(partition, known)
            return  # nothing to tier: no Delta round trip
        progress = await self._load_progress(partition)
        writer = self._state.writer(partition.topic)
        if not self._state.topic(partition.topic).created:
            await writer.call(writer.table.ensure_created)
            self._state.topic(partition.topic).created = True
        storage = self._state.storage
        assert storage is not None
        while partition.role is Role.LEADER and not self._stopping():
            begin = max(progress.tiered_end or 0, partition.log_start_offset)
            segment = _next_sealed(partition, begin)
            if segment is None or held("tier-before-write"):  # held: a test (faults.py)
                break
            aborted = [(txn.producer_id, txn.first_offset, txn.last_offset)
                       for txn in partition.aborted_transactions(begin, segment.next_offset)]
            typing = await self._typing(partition.topic)
            for _round in range(RESOLVE_ROUNDS):
                written: SegmentWrite = await self._in_worker(
                    write_segment_file, storage, partition.topic, partition.index,
                    segment.log_path, begin, segment.next_offset, aborted, typing)
                if not written.missing_ids or typing is None or self._schemas is None:
                    break
                typing = await self._schemas.resolve(typing, written.missing_ids)
            if written.missing_ids:  # resolve marks every id found or absent: not reached
                raise LoglakeError(f"{partition.name}: schema ids {list(written.missing_ids)} "
                                   "still missing after looking them up")
            pending = written.pending
            last_offset = segment.next_offset - 1
            crash_point("tier-after-write")
            if (partition.role is not Role.LEADER
                    or partition.leader_epoch != progress.leader_epoch):
                break  # leadership moved while writing: the new leader tiers it
            commit_started = time.monotonic()
            committed = await writer.call(
                writer.table.commit, partition.index, [] if pending is None else [pending],
                last_offset, expected_end=progress.tiered_end,
                metadata=_commit_metadata(written), typed=written.typed)
            crash_point("tier-after-commit")
            if committed:
                self._counters.tier_committed(partition.topic, time.monotonic() - commit_started)
                await self._record_table_stats(partition.topic)
                self._checkpoint_soon(partition.topic)
                if progress.tiered_end is None and pending is not None:  # first tier commit
                    self._state.partition(key).set_start(pending.first_offset)
                progress.tiered_end = last_offset + 1
                stored = sum(1 for q in written.quarantined if q.stored)
                if progress.quarantined is not None:
                    progress.quarantined += stored
                log.info("%s: tiered offsets [%d, %d] (%d rows, %d quarantined, %d typed "
                         "values not decoded; left out: %d aborted records, %d markers)",
                         partition.name, begin, last_offset,
                         0 if pending is None else pending.num_records, stored,
                         written.typed_errors, written.aborted_records, written.markers)
                _log_quarantined(partition.name, segment, written.quarantined)
            else:
                progress.tiered_end = await writer.call(writer.table.tiered_end, partition.index)
                log.info("%s: another writer tiered up to %s", partition.name,
                         progress.tiered_end)
        await self._report(partition, progress)

    async def _typing(self, topic: str) -> TierTyping | None:
        """How the worker types ``topic``'s rows (None: no side is typed); the table's
        current typed types come from the writer's snapshot (a worker thread), read only for
        a typed topic."""
        if self._schemas is None:
            return None
        writer = self._state.writer(topic)

        async def current() -> dict[str, pa.DataType]:
            return side_types(await writer.call(writer.table.typed_schema))

        return await self._schemas.typing(topic, current)

    async def _record_table_stats(self, topic: str) -> None:
        """Remember the table's version, live files and bytes after a tier commit (read from
        the writer's snapshot in a worker thread; the metrics report them at scrape time)."""
        writer = self._state.writer(topic)
        try:
            version, files, size = await writer.call(_table_stats, writer.table)
        except Exception as exc:  # statistics only: tiering goes on
            log.debug("table statistics of %s: %s", topic, exc)
            return
        tier = self._state.topic(topic)
        tier.table_version, tier.table_files, tier.table_bytes = version, files, size

    async def _report(self, partition: Partition, progress: TierProgress) -> None:
        """Publish tiering lag (offsets and seconds behind) for tools: at once when the tiered
        end moved, otherwise at most once every STATUS_INTERVAL_S."""
        key = (partition.topic, partition.index)
        tiered_end = progress.tiered_end or partition.log_start_offset
        untiered = [s for s in partition.log.segment_infos()
                    if not s.active and s.next_offset > tiered_end]
        lag_seconds = 0.0
        if untiered:
            with contextlib.suppress(OSError):
                lag_seconds = max(0.0, time.time() - untiered[0].log_path.stat().st_mtime)
        if progress.quarantined is None and self._state.storage is not None:
            with contextlib.suppress(Exception):  # recounted after a clean-up job's change
                writer = self._state.writer(partition.topic)
                progress.quarantined = await writer.call(_refreshed_quarantined, writer.table,
                                                         partition.index)
        failing = ("tier", key)
        status = {
            "tiered_end": progress.tiered_end,
            "tier_start": self._state.start(key),
            "local_start": partition.log_start_offset,
            "high_watermark": partition.high_watermark,
            "lag_offsets": max(0, untiered[-1].next_offset - tiered_end) if untiered else 0,
            "lag_seconds": round(lag_seconds, 3),
            "quarantined": progress.quarantined,
            "failures": self._failures.failures(failing),
            "last_error": self._failures.last_error(failing),
            "leader": self._broker_id,
        }
        now = time.monotonic()
        moved = status["tiered_end"] != progress.last_status.get("tiered_end")
        if status == progress.last_status or (
                not moved and now - progress.last_status_s < STATUS_INTERVAL_S):
            return
        progress.last_status, progress.last_status_s = status, now
        with contextlib.suppress(Exception):
            await self._zookeeper.call(self._zookeeper.catalog.set_tiering_status,
                                       partition.topic, partition.index,
                                       {**status, "updated_ms": int(time.time() * 1000)})

    # ------------------------------------------------------------------ DeleteRecords
    async def delete_records(self, partition: Partition, offset: int, *, tiered: bool) -> None:
        """DeleteRecords: remove ``partition``'s rows below ``offset`` from the table (see the
        module docstring); a no-op without storage, or without a table when the topic is not
        ``tiered``. Raises what the storage raises (the caller answers KAFKA_STORAGE_ERROR)."""
        if self._state.storage is None:
            return
        topic = partition.topic
        writer = self._state.writer(topic)
        result = await writer.call(delete_below, writer.table, partition.index, offset,
                                   create=tiered)
        if result.version is None:
            return
        if tiered:
            self._state.topic(topic).created = True
        tier = self._state.partitions.get((topic, partition.index))
        if tier is not None:
            tier.progress = None  # the tiered end is read again
        self._on_change(topic)
        log.info("%s: DeleteRecords below %d removed %d row(s) from the table (%d file(s) "
                 "removed, %d rewritten; version %d)", partition.name, offset,
                 result.removed_rows, result.removed_files, result.rewritten_files,
                 result.version)
        try:
            await self._zookeeper.call(self._zookeeper.catalog.announce_table_change, topic,
                                       result.version, "delete_records")
        except Exception as exc:  # other brokers reload within READER_REFRESH_S
            log.warning("could not announce DeleteRecords on %s to the other brokers: %s",
                        partition.name, exc)


def _die_with_parent(parent: int) -> None:
    """Tier worker start-up: the kernel SIGKILLs the worker when the broker dies (even by
    SIGKILL), so no orphan outlives it (Linux prctl PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the broker died before prctl took effect
        os._exit(0)


def _commit_metadata(written: SegmentWrite) -> dict[str, str] | None:
    """The commit metadata of a tier commit: quarantined batches, aborted records and markers
    left out (None: nothing to say)."""
    metadata = dict(_quarantine_metadata(written.quarantined) or {})
    if written.typed is not None:
        metadata["loglake.typed_errors"] = str(written.typed_errors)
    if written.aborted_records or written.markers:
        metadata["loglake.aborted_records"] = str(written.aborted_records)
        metadata["loglake.markers"] = str(written.markers)
    return metadata or None


def _quarantine_metadata(quarantined: Sequence[Quarantined]) -> dict[str, str] | None:
    """The commit metadata of a tier commit that quarantined batches (None: it did not)."""
    if not quarantined:
        return None
    items = [{"first_offset": q.first_offset, "last_offset": q.last_offset,
              "position": q.position, "size": q.size, "framed": q.framed,
              "stored": q.stored, "error": q.error[:500]}
             for q in quarantined[:QUARANTINE_METADATA_ITEMS]]
    return {"loglake.quarantined": str(sum(1 for q in quarantined if q.stored)),
            "loglake.quarantine": json.dumps({"count": len(quarantined), "items": items})}


def _log_quarantined(name: str, segment: SegmentInfo,
                     quarantined: Sequence[Quarantined]) -> None:
    """One WARNING per quarantined batch of a committed segment (at most
    QUARANTINE_LOG_LINES, then a count): logged once, after the commit that stored them."""
    for item in quarantined[:QUARANTINE_LOG_LINES]:
        log.warning("%s: quarantined %s in segment %s; tiering goes on past it (consumers see "
                    "a gap; the table keeps the bytes)", name, item.describe(),
                    segment.log_path.name)
    if len(quarantined) > QUARANTINE_LOG_LINES:
        log.warning("%s: quarantined %d more bad batch(es) or byte range(s) in segment %s",
                    name, len(quarantined) - QUARANTINE_LOG_LINES, segment.log_path.name)


def _table_stats(table: TieredTable) -> tuple[int, int, int]:
    """(version, live data files, their bytes) of the table's newest snapshot."""
    dt = table.table(refresh=True)
    actions = pa.table(dt.get_add_actions(flatten=True))
    size = pc.sum(actions.column("size_bytes")).as_py() if actions.num_rows else 0
    return dt.version(), actions.num_rows, int(size or 0)


def _refreshed_quarantined(table: TieredTable, partition: int) -> int:
    table.files(partition, refresh=True)
    return table.quarantined(partition)


def _next_sealed(partition: Partition, begin: int) -> SegmentInfo | None:
    """The oldest sealed segment holding offsets >= ``begin``, if all of them are below the
    last stable offset (replicated, and no open transaction among them)."""
    stable = partition.last_stable_offset
    for segment in partition.log.segment_infos():
        if segment.active:
            return None
        if segment.next_offset <= begin:
            continue
        return segment if segment.next_offset <= stable else None
    return None
