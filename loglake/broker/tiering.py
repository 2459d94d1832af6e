"""The broker's side of tiered storage: the tierer, local retention, and tier reads.

Tierer (leaders only, one asyncio task per broker): for every partition this broker leads whose
topic has ``remote.storage.enable``, each sealed segment whose records are all below the high
watermark (committed: every ISR member has them, so no failover truncates them) is decoded into
rows and committed to the topic's Delta table (segments/tiered_table.py), oldest first, one
commit per segment. Progress is not kept locally: ``tiered_end`` (one past the last tiered
offset) is the Delta app-transaction version of ``<topic>-<partition>``, re-read on every
leadership change, so a crash or a new leader resumes exactly where the table says. Steps and
what a crash at each leaves::

    1. read the segment (immutable once sealed) from tiered_end, decode -> Arrow rows
    2. write one Parquet file into the table directory        crash: orphan file (harmless)
    3. Delta commit with app txn (<topic>-<p>, last offset)   crash: committed; the next
                                                               leader reads the version
    4. update tiered_end, tiering status in ZooKeeper         (bookkeeping only)

The tierer is woken when a segment rolls or the high watermark moves and also runs every
``remote.log.manager.task.interval.ms``.

Poison: a segment is never retried forever because of its bytes. Batches that do not decode
(failed CRC, malformed records, undecodable compression, wrong record count, unframeable bytes)
are quarantined in step 1 (segments/tier_quarantine.py): committed as quarantined rows with the
raw bytes and the error, so the tiered end moves past them and local retention can delete the
segment. Each quarantined batch is logged once (WARNING, after its commit), counted in the
commit's metadata (``loglake.quarantined``) and in the tiering status (``quarantined``: rows of
the partition's live files, from Delta statistics). Tier reads serve their offsets as a gap
(:meth:`Tierer.read`), as after compaction: librdkafka stalls without an error on a malformed
batch and the Java consumer throws until the application seeks, while the table keeps the
bytes for whoever wants to look (``decode_error IS NOT NULL``).

Failures that are not about the bytes (object store unreachable, a Delta commit that keeps
losing, the worker process dying) are retried with a per-partition back-off (from the task
interval, doubling, at most MAX_BACKOFF_S) and logged by failure_log.FailureLog: the first
failure with its traceback, then one line with a count every failure_log.REPEAT_INTERVAL_S
(5 minutes), one line when it works again; local retention and background checkpoints alike.
The tiering status carries ``failures`` (in a row) and ``last_error`` while tiering fails. A
dead worker process is replaced on the next attempt.

Local retention (every hosted replica): deletes the oldest local segments per
segments/retention.py; on tiered topics only segments already in the table (followers read the
table's tiered_end themselves), and on compacted tiered topics every segment below the
compaction job's cleaned offset (the table holds the compacted copy). When: a full pass at
start-up and every ``log.retention.check.interval.ms``; the replicas of a topic at once when a
change of its table is announced; the replicas of compacted tiered topics also every
READER_REFRESH_S, so a missed announcement (ZooKeeper away when the job announced, a watch that
failed) delays dropping stale copies by seconds, not by the check interval. Schedules are due
times on the monotonic clock, which counts from boot: no fixed value means "now".

Tier reads: consumer fetches below the local log start are answered from the table (one row
group, re-encoded to the original batches, cached per partition), and the earliest offset a
consumer sees is the table's first offset. Clean-up jobs replace and remove files: after each
such commit they announce it in ZooKeeper (``/loglake/table_changes/<topic>``); the broker
watches that znode for every tiered topic it hosts a replica of or has read (set from the loop,
so a fresh replica watches before any read; a watch that fails is set again on the next turn;
setting it counts as an announcement, so one made before is not lost) and drops the topic's
cached row groups and table start, and reloads the snapshot before its next read, so a
consumer that starts after a job finished sees its result. Without announcements (ZooKeeper
away) caches live at most READER_REFRESH_S; a file vacuumed under a stale snapshot makes the
read reload and retry.

DeleteRecords (:meth:`Tierer.delete_records`, on the leader, before its local log start moves):
the partition's rows below the new log start leave the table in one commit
(segments/tier_delete.py), which also moves the tiered end up to it when it is beyond, so no
tier commit in flight brings deleted rows back; the leader forgets what it cached and announces
the change like a clean-up job does.

Thread-safety: the Tierer lives on the broker's event loop; decoding a segment and writing its
Parquet file run in one spawned worker process (off the broker's GIL); Delta work runs in worker
threads, each TieredTable guarded by its own lock (one thread at a time per table object). The
writer and the reader of a topic use separate TieredTable objects.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import concurrent.futures.process
import contextlib
import ctypes
import json
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from loglake.broker.failure_log import FailureLog
from loglake.broker.partition import Partition, Role
from loglake.faults import crash_point
from loglake.segments.batch import peek_header
from loglake.segments.log import SegmentInfo
from loglake.segments.retention import deletable_prefix, local_limits
from loglake.segments.storage import Storage
from loglake.segments.tier_delete import delete_below
from loglake.segments.tier_quarantine import Quarantined
from loglake.segments.tier_rows import rows_to_batches
from loglake.segments.tiered_table import (
    SegmentWrite,
    TieredTable,
    cleaned_end,
    write_segment_file,
)

if TYPE_CHECKING:
    from loglake.broker.broker import Broker

log = logging.getLogger(__name__)

T = TypeVar("T")
Key = tuple[str, int]
STATUS_INTERVAL_S = 1.0
PR_SET_PDEATHSIG = 1
READER_REFRESH_S = 5.0
"""Longest a broker serves tier reads from a cached snapshot, or keeps local segments below a
compaction's cleaned offset, when it missed a table-change announcement (ZooKeeper
unreachable); announced changes apply at once."""
MAX_BACKOFF_S = 30.0
"""Longest wait before tiering a partition again after failures in a row."""
QUARANTINE_LOG_LINES = 5
"""Quarantined batches logged one per line per commit; the rest as one count."""
QUARANTINE_METADATA_ITEMS = 20
"""Quarantined batches described in a commit's ``loglake.quarantined`` metadata."""


@dataclass
class _Progress:
    """What the tierer knows of one led partition (reset at each leadership change)."""

    leader_epoch: int
    tiered_end: int | None  # app txn version + 1 as last read from / committed to the table
    quarantined: int | None = None  # quarantined rows in the live files (None: reload)
    last_status: dict[str, Any] = field(default_factory=dict)
    last_status_s: float = 0.0


@dataclass
class _Chunk:
    """Re-encoded batches of one tier row group: (base offset, last offset, bytes)."""

    batches: list[tuple[int, int, bytes]]

    def __post_init__(self) -> None:
        self._lasts = [last for _base, last, _data in self.batches]

    def covers(self, offset: int) -> bool:
        return bool(self.batches) and self.batches[0][0] <= offset <= self.batches[-1][1]

    def slice(self, offset: int, max_bytes: int, min_one: bool) -> bytes:
        out: list[bytes] = []
        size = 0
        for _base, _last, data in self.batches[bisect.bisect_left(self._lasts, offset):]:
            if size + len(data) > max_bytes and (out or not min_one):
                break
            out.append(data)
            size += len(data)
        return b"".join(out)


class _Guarded:
    """A TieredTable with a lock, used from worker threads one call at a time."""

    def __init__(self, table: TieredTable) -> None:
        self.table = table
        self.lock = threading.Lock()

    async def call(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        def locked() -> T:
            with self.lock:
                return func(*args, **kwargs)

        return await asyncio.to_thread(locked)


class Tierer:
    """Tiering, local retention and tier reads of one broker (see the module docstring)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        config = broker.config
        self.storage: Storage | None = (
            Storage.from_url(config.remote_log_storage_url, config.remote_log_storage_options)
            if config.remote_log_storage_url else None
        )
        self._writers: dict[str, _Guarded] = {}
        self._readers: dict[str, _Guarded] = {}
        self._progress: dict[Key, _Progress] = {}
        self._chunks: dict[Key, _Chunk] = {}
        self._starts: dict[Key, int | None] = {}  # tier start per partition, last seen
        self._wake: asyncio.Event | None = None
        # when the next periodic steps are due (time.monotonic(); set when run() starts: the
        # monotonic clock counts from boot, so no fixed value means "at once")
        self._next_retention = 0.0  # full local retention pass
        self._next_cleaned_check = 0.0  # compacted tiered topics (missed announcements)
        self._next_reader_refresh = 0.0
        self._retention_topics: set[str] = set()  # announced: their replicas are checked now
        self._stale: set[str] = set()  # topics whose reader reloads its snapshot before a read
        self._watched: dict[str, object] = {}  # topics watched for table changes -> token
        self._changes: dict[str, int] = {}  # table changes seen per topic (cache generations)
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._created: set[str] = set()  # topics whose table this broker saw exist
        self._checkpointing: set[str] = set()
        self._commits: dict[str, int] = {}  # tier commits per topic (checkpoint checks)
        self._tasks: set[asyncio.Future[None]] = set()
        self._failures = FailureLog(log)
        self._retry_at: dict[Key, float] = {}  # partitions backing off after failures

    # ------------------------------------------------------------------ helpers
    def tiered(self, topic: str) -> bool:
        config = self.broker.topic_configs.get(topic)
        return self.storage is not None and config is not None and config.remote_storage_enable

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
        self._commits[topic] = self._commits.get(topic, 0) + 1
        if self.storage is None or topic in self._checkpointing or self._commits[topic] % 10:
            return
        table = TieredTable(self.storage, topic)
        self._checkpointing.add(topic)

        async def checkpoint() -> None:
            what = f"Delta checkpoint of {topic}"
            try:
                await asyncio.to_thread(table.checkpoint_if_due)
                self._failures.succeeded(("checkpoint", topic), what)
            except Exception as exc:
                self._failures.failed(("checkpoint", topic), what, exc)
            finally:
                self._checkpointing.discard(topic)

        self._tasks.add(asyncio.ensure_future(checkpoint()))
        for task in [t for t in self._tasks if t.done()]:
            self._tasks.discard(task)

    def _writer(self, topic: str) -> _Guarded:
        return self._table(self._writers, topic)

    def _reader(self, topic: str) -> _Guarded:
        self._watch_changes(topic)
        return self._table(self._readers, topic)

    def _watch_changes(self, topic: str) -> None:
        """Start watching the topic's table-change announcements (once per topic; registered
        off the event loop: it talks to ZooKeeper). Called before anything of the table is
        cached."""
        if topic in self._watched:
            return
        token = self._watched[topic] = object()

        def changed() -> None:
            self.broker.run_soon(lambda: self._table_changed(topic, announced=True))

        def watch() -> None:
            self.broker.catalog.watch_table_changes(
                topic, changed, alive=lambda: self._watched.get(topic) is token)

        async def register() -> None:
            what = f"watching table changes of {topic} (meanwhile: reloads every " \
                   f"{READER_REFRESH_S:g} s)"
            try:
                await asyncio.to_thread(watch)
            except Exception as exc:
                if self._watched.get(topic) is token:
                    del self._watched[topic]  # the tierer's loop tries again
                self._failures.failed(("watch", topic), what, exc)
            else:
                self._failures.succeeded(("watch", topic), what)

        self._tasks.add(asyncio.ensure_future(register()))

    def _table_changed(self, topic: str, *, announced: bool = False) -> None:
        """A clean-up job replaced or removed files of ``topic`` (``announced``) or the
        periodic reload is due: forget what was cached."""
        self._stale.add(topic)
        self._changes[topic] = self._changes.get(topic, 0) + 1
        if announced:  # a compaction may have made local segments stale: check them now
            self._retention_topics.add(topic)
            self.poke()
        for key in [k for k in self._chunks if k[0] == topic]:
            del self._chunks[key]
        for key in [k for k in self._starts if k[0] == topic]:
            del self._starts[key]
        for key, progress in self._progress.items():
            if key[0] == topic:
                progress.quarantined = None  # files were replaced or removed: count again

    def _table(self, tables: dict[str, _Guarded], topic: str) -> _Guarded:
        assert self.storage is not None
        if topic not in tables:
            tables[topic] = _Guarded(TieredTable(self.storage, topic))
        return tables[topic]

    def poke(self) -> None:
        """Wake the tierer (a segment rolled or the high watermark moved)."""
        if self._wake is not None:
            self._wake.set()

    def forget_topic(self, topic: str) -> None:
        self._writers.pop(topic, None)
        self._readers.pop(topic, None)
        self._stale.discard(topic)
        self._changes.pop(topic, None)
        self._watched.pop(topic, None)
        self._created.discard(topic)
        for key in [k for k in self._progress if k[0] == topic]:
            del self._progress[key]
        for key in [k for k in self._chunks if k[0] == topic]:
            del self._chunks[key]
        for key in [k for k in self._starts if k[0] == topic]:
            del self._starts[key]
        for key in [k for k in self._retry_at if k[0] == topic]:
            del self._retry_at[key]
        self._failures.forget(lambda k: _about_topic(k, topic))

    async def delete_table(self, topic: str) -> None:
        """Remove a deleted topic's Delta table (Kafka deletes remote data with the topic), so
        a topic created later under the same name starts empty."""
        self.forget_topic(topic)
        if self.storage is None:
            return
        storage = self.storage
        uri = storage.table_uri(topic)

        def remove() -> None:
            fs = storage.filesystem()
            path = storage.path_in_fs(uri)
            if fs.exists(path):
                fs.rm(path, recursive=True)

        try:
            await asyncio.to_thread(remove)
        except Exception:
            log.exception("could not delete the tiered table of %s at %s", topic, uri)

    async def delete_records(self, partition: Partition, offset: int) -> None:
        """DeleteRecords: remove ``partition``'s rows below ``offset`` from the table (see the
        module docstring); a no-op without storage, or without a table when the topic is not
        tiered. Raises what the storage raises (the caller answers KAFKA_STORAGE_ERROR)."""
        if self.storage is None:
            return
        topic = partition.topic
        writer = self._writer(topic)
        result = await writer.call(delete_below, writer.table, partition.index, offset,
                                   create=self.tiered(topic))
        if result.version is None:
            return
        if self.tiered(topic):
            self._created.add(topic)
        self._progress.pop((topic, partition.index), None)  # the tiered end is read again
        self._table_changed(topic, announced=True)
        log.info("%s: DeleteRecords below %d removed %d row(s) from the table (%d file(s) "
                 "removed, %d rewritten; version %d)", partition.name, offset,
                 result.removed_rows, result.removed_files, result.rewritten_files,
                 result.version)
        try:
            await self.broker.zk_call(self.broker.catalog.announce_table_change, topic,
                                      result.version, "delete_records")
        except Exception as exc:  # other brokers reload within READER_REFRESH_S
            log.warning("could not announce DeleteRecords on %s to the other brokers: %s",
                        partition.name, exc)

    # ------------------------------------------------------------------ the loop
    async def run(self) -> None:
        self._wake = asyncio.Event()
        if self.storage is not None:
            with contextlib.suppress(Exception):
                await self.broker.zk_call(self.broker.catalog.publish_storage,
                                          self.storage.url, dict(self.storage.options))
        interval = self.broker.config.remote_log_manager_task_interval_ms / 1000
        check = self.broker.config.log_retention_check_interval_ms / 1000
        self._next_retention = self._next_cleaned_check = self._next_reader_refresh = \
            time.monotonic()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), interval)
            self._wake.clear()
            if self.storage is not None and self.broker.zk_healthy():
                for partition in list(self.broker.partitions.values()):
                    if self.tiered(partition.topic):  # every replica, read or not
                        self._watch_changes(partition.topic)
                for partition in list(self.broker.partitions.values()):
                    if partition.role is Role.LEADER and self.tiered(partition.topic):
                        await self._tier_guarded(partition, interval)
            now = time.monotonic()
            if now >= self._next_retention:
                self._next_retention = now + check
                self._retention_topics.clear()
                await self._retention_pass()
            else:
                topics, self._retention_topics = self._retention_topics, set()
                if now >= self._next_cleaned_check:  # announcements may have been missed
                    topics |= self._compacted_tiered_topics()
                if topics:
                    await self._retention_pass(topics)
            if now >= self._next_cleaned_check:
                self._next_cleaned_check = now + READER_REFRESH_S
            if now >= self._next_reader_refresh:
                # in case an announcement of a clean-up job was missed
                self._next_reader_refresh = now + READER_REFRESH_S
                for topic in {topic for topic, _ in self._starts} | set(self._readers):
                    self._table_changed(topic)

    def _compacted_tiered_topics(self) -> set[str]:
        """Topics with a replica here whose cleanup.policy compacts the tiered table."""
        return {partition.topic for partition in self.broker.partitions.values()
                if "compact" in partition.config.cleanup_policy
                and self.tiered(partition.topic)}

    async def _tier_guarded(self, partition: Partition, interval: float) -> None:
        """Tier one partition unless it is backing off; failures are counted, logged without
        a traceback per attempt, reported in the status, and delay the next attempt."""
        key = (partition.topic, partition.index)
        if time.monotonic() < self._retry_at.get(key, 0.0):
            return
        what = f"tiering {partition.name}"
        try:
            await self._tier_partition(partition)
        except Exception as exc:
            failures = self._failures.failed(("tier", key), what, exc)
            delay = min(max(interval, 0.1) * 2 ** min(failures - 1, 16), MAX_BACKOFF_S)
            self._retry_at[key] = time.monotonic() + delay
            # the status shows the failure (before any progress was read: with nothing else)
            progress = self._progress.get(key) or _Progress(partition.leader_epoch, None)
            with contextlib.suppress(Exception):
                await self._report(partition, progress)
            return
        self._retry_at.pop(key, None)
        self._failures.succeeded(("tier", key), what)

    async def _load_progress(self, partition: Partition) -> _Progress:
        key = (partition.topic, partition.index)
        progress = self._progress.get(key)
        if progress is None or progress.leader_epoch != partition.leader_epoch:
            self._watch_changes(partition.topic)
            writer = self._writer(partition.topic)
            end = await writer.call(writer.table.tiered_end, partition.index)
            start = await writer.call(writer.table.start_offset, partition.index)
            quarantined = await writer.call(writer.table.quarantined, partition.index)
            self._starts[key] = start
            progress = _Progress(partition.leader_epoch, end, quarantined)
            self._progress[key] = progress
        return progress

    async def _tier_partition(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        known = self._progress.get(key)
        if (known is not None and known.leader_epoch == partition.leader_epoch
                and _next_sealed(partition, max(known.tiered_end or 0,
                                                partition.log_start_offset)) is None):
            await self._report(partition, known)
            return  # nothing to tier: no Delta round trip
        progress = await self._load_progress(partition)
        writer = self._writer(partition.topic)
        if partition.topic not in self._created:
            await writer.call(writer.table.ensure_created)
            self._created.add(partition.topic)
        storage = self.storage
        assert storage is not None
        while partition.role is Role.LEADER and not self.broker.stopping:
            begin = max(progress.tiered_end or 0, partition.log_start_offset)
            segment = _next_sealed(partition, begin)
            if segment is None:
                break
            written: SegmentWrite = await self._in_worker(
                write_segment_file, storage, partition.topic, partition.index,
                segment.log_path, begin, segment.next_offset)
            pending = written.pending
            last_offset = segment.next_offset - 1
            crash_point("tier-after-write")
            if (partition.role is not Role.LEADER
                    or partition.leader_epoch != progress.leader_epoch):
                break  # leadership moved while writing: the new leader tiers it
            committed = await writer.call(
                writer.table.commit, partition.index, [] if pending is None else [pending],
                last_offset, expected_end=progress.tiered_end,
                metadata=_quarantine_metadata(written.quarantined))
            crash_point("tier-after-commit")
            if committed:
                self._checkpoint_soon(partition.topic)
                if progress.tiered_end is None and pending is not None:  # first tier commit
                    self._starts[key] = pending.first_offset
                progress.tiered_end = last_offset + 1
                stored = sum(1 for q in written.quarantined if q.stored)
                if progress.quarantined is not None:
                    progress.quarantined += stored
                log.info("%s: tiered offsets [%d, %d] (%d rows, %d quarantined)",
                         partition.name, begin, last_offset,
                         0 if pending is None else pending.num_records, stored)
                _log_quarantined(partition.name, segment, written.quarantined)
            else:
                progress.tiered_end = await writer.call(writer.table.tiered_end, partition.index)
                log.info("%s: another writer tiered up to %s", partition.name,
                         progress.tiered_end)
        await self._report(partition, progress)

    async def _report(self, partition: Partition, progress: _Progress) -> None:
        """Publish tiering lag (offsets and seconds behind) for tools: at once when the tiered
        end moved, otherwise at most once a second."""
        tiered_end = progress.tiered_end or partition.log_start_offset
        untiered = [s for s in partition.log.segment_infos()
                    if not s.active and s.next_offset > tiered_end]
        lag_seconds = 0.0
        if untiered:
            with contextlib.suppress(OSError):
                lag_seconds = max(0.0, time.time() - untiered[0].log_path.stat().st_mtime)
        if progress.quarantined is None and self.storage is not None:
            with contextlib.suppress(Exception):  # recounted after a clean-up job's change
                writer = self._writer(partition.topic)
                progress.quarantined = await writer.call(_refreshed_quarantined, writer.table,
                                                         partition.index)
        failing = ("tier", (partition.topic, partition.index))
        status = {
            "tiered_end": progress.tiered_end,
            "tier_start": self._starts.get((partition.topic, partition.index)),
            "local_start": partition.log_start_offset,
            "high_watermark": partition.high_watermark,
            "lag_offsets": max(0, untiered[-1].next_offset - tiered_end) if untiered else 0,
            "lag_seconds": round(lag_seconds, 3),
            "quarantined": progress.quarantined,
            "failures": self._failures.failures(failing),
            "last_error": self._failures.last_error(failing),
            "leader": self.broker.config.broker_id,
        }
        now = time.monotonic()
        moved = status["tiered_end"] != progress.last_status.get("tiered_end")
        if status == progress.last_status or (
                not moved and now - progress.last_status_s < STATUS_INTERVAL_S):
            return
        progress.last_status, progress.last_status_s = status, now
        with contextlib.suppress(Exception):
            await self.broker.zk_call(self.broker.catalog.set_tiering_status, partition.topic,
                                      partition.index, {**status, "updated_ms":
                                                        int(time.time() * 1000)})

    # ------------------------------------------------------------------ local retention
    async def _retention_pass(self, topics: set[str] | None = None) -> None:
        """Local retention of every hosted replica (of ``topics`` only, when given)."""
        now_ms = int(self.broker.clock() * 1000)
        refreshed: set[str] = set()  # topics whose snapshot this pass brought up to date
        for key, partition in list(self.broker.partitions.items()):
            if topics is not None and partition.topic not in topics:
                continue
            try:
                tiered = self.tiered(partition.topic)
                tiered_end: int | None = None
                compacted = 0
                if tiered:
                    progress = self._progress.get(key)
                    if partition.role is Role.LEADER and progress is not None:
                        tiered_end = progress.tiered_end
                    else:
                        reader = self._reader(partition.topic)
                        tiered_end = await reader.call(
                            reader.table.tiered_end, partition.index,
                            refresh=partition.topic not in refreshed)
                        refreshed.add(partition.topic)
                    if tiered_end is None:
                        continue  # nothing tiered yet: keep everything
                    if "compact" in partition.config.cleanup_policy:
                        reader = self._reader(partition.topic)
                        compacted = await reader.call(_cleaned_end, reader.table,
                                                      partition.index,
                                                      partition.topic not in refreshed)
                        refreshed.add(partition.topic)
                retention_ms, retention_bytes = local_limits(partition.config, tiered=tiered)
                if self.broker.partitions.get(key) is not partition:
                    continue
                new_start = deletable_prefix(
                    partition.log.segment_infos(), now_ms=now_ms, retention_ms=retention_ms,
                    retention_bytes=retention_bytes, tiered_end=tiered_end,
                    cleaned_end=compacted,
                )
                if new_start is not None and new_start <= partition.high_watermark:
                    deleted = partition.log.delete_segments_before(new_start)
                    if deleted:
                        log.info("%s: local retention deleted %d segment(s); local log now "
                                 "starts at %d", partition.name, deleted,
                                 partition.log_start_offset)
            except Exception as exc:
                self._failures.failed(("retention", key), f"local retention of {partition.name}",
                                      exc)
            else:
                self._failures.succeeded(("retention", key),
                                         f"local retention of {partition.name}")

    # ------------------------------------------------------------------ tier reads
    async def tier_start(self, partition: Partition) -> int | None:
        """The first offset the table holds for this partition (None: none)."""
        if self.storage is None:
            return None
        key = (partition.topic, partition.index)
        if self._starts.get(key) is not None:
            return self._starts[key]
        reader = self._reader(partition.topic)
        generation = self._changes.get(partition.topic, 0)
        start = await reader.call(_refreshed_start, reader.table, partition.index)
        if self._changes.get(partition.topic, 0) == generation:
            self._starts[key] = start
        return start

    def known_log_start(self, partition: Partition) -> int:
        """:meth:`log_start` from what is cached (no I/O), for responses' log_start_offset."""
        tier = self._starts.get((partition.topic, partition.index))
        local = partition.log_start_offset
        return local if tier is None else min(tier, local)

    async def log_start(self, partition: Partition) -> int:
        """The earliest offset consumers see: the table's first offset when it is below the
        local log start, else the local log start."""
        if partition.log_start_offset > 0:
            await self.tier_start(partition)  # (re)loads the cached table start
        return self.known_log_start(partition)

    async def read(self, partition: Partition, offset: int, max_bytes: int,
                   min_one_batch: bool) -> bytes | None:
        """Batches from the table starting with the one holding ``offset`` (or the next one
        after a gap), whole, at most ``max_bytes`` (the first one whole when
        ``min_one_batch``), from one row group. None when the table holds nothing at or after
        ``offset``."""
        key = (partition.topic, partition.index)
        chunk = self._chunks.get(key)
        if chunk is None or not chunk.covers(offset):
            reader = self._reader(partition.topic)
            generation = self._changes.get(partition.topic, 0)
            rows = None
            if partition.topic in self._stale:
                self._stale.discard(partition.topic)
            else:
                try:
                    rows = await reader.call(reader.table.read_chunk, partition.index, offset)
                except OSError:  # e.g. vacuumed under an old snapshot: reload and retry below
                    log.info("tier file of %s gone; reloading the snapshot", partition.name)
            if rows is None:  # the snapshot is stale or may miss newer files
                rows = await reader.call(_refreshed_chunk, reader.table, partition.index, offset)
            if rows is None:
                return await self._after_tier(partition, offset, max_bytes, min_one_batch)
            batches = await asyncio.to_thread(rows_to_batches, rows)
            headers = [peek_header(data) for data in batches]
            chunk = _Chunk([(h.base_offset, h.last_offset, data)
                            for h, data in zip(headers, batches, strict=True)])
            if self._changes.get(partition.topic, 0) == generation:
                self._chunks[key] = chunk  # (not if the table changed while reading)
        return chunk.slice(offset, max_bytes, min_one_batch)

    async def _after_tier(self, partition: Partition, offset: int, max_bytes: int,
                          min_one_batch: bool) -> bytes | None:
        """A fetch at ``offset`` below the local log start that the table holds no batch at or
        after: when the table covers ``offset`` (its tail is quarantined rows, a gap to
        consumers), the answer is the local log's first batches, as a fetch in a gap gets the
        next batch; else None (out of range)."""
        start = await self.tier_start(partition)
        if start is None or offset < start or offset >= partition.log_start_offset:
            return None
        return partition.read(partition.log_start_offset, max_bytes,
                              min_one_batch=min_one_batch)

    async def offset_for_timestamp(self, partition: Partition,
                                   timestamp_ms: int) -> tuple[int, int] | None:
        """ListOffsets by time over the tiered offsets below the local log start."""
        if self.storage is None:
            return None
        reader = self._reader(partition.topic)
        hit = await reader.call(reader.table.offset_for_timestamp, partition.index,
                                timestamp_ms)
        if hit is not None and hit[0] < partition.log_start_offset:
            return hit
        return None


def _die_with_parent(parent: int) -> None:
    """Tier worker start-up: the kernel SIGKILLs the worker when the broker dies (even by
    SIGKILL), so no orphan outlives it (Linux prctl PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the broker died before prctl took effect
        os._exit(0)


def _about_topic(key: object, topic: str) -> bool:
    """Whether a FailureLog key (``(kind, topic)`` or ``(kind, (topic, partition))``) is
    about ``topic``."""
    if not isinstance(key, tuple) or len(key) != 2:
        return False
    subject = key[1]
    return subject == topic or (isinstance(subject, tuple) and subject[:1] == (topic,))


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


def _refreshed_quarantined(table: TieredTable, partition: int) -> int:
    table.files(partition, refresh=True)
    return table.quarantined(partition)


def _refreshed_start(table: TieredTable, partition: int) -> int | None:
    table.files(partition, refresh=True)
    return table.start_offset(partition)


def _cleaned_end(table: TieredTable, partition: int, refresh: bool) -> int:
    table.table(refresh=refresh)
    return cleaned_end(table, partition)


def _refreshed_chunk(table: TieredTable, partition: int, offset: int) -> pa.Table | None:
    table.files(partition, refresh=True)
    return table.read_chunk(partition, offset)


def _next_sealed(partition: Partition, begin: int) -> SegmentInfo | None:
    """The oldest sealed segment holding offsets >= ``begin``, if all of them are committed."""
    for segment in partition.log.segment_infos():
        if segment.active:
            return None
        if segment.next_offset <= begin:
            continue
        return segment if segment.next_offset <= partition.high_watermark else None
    return None
