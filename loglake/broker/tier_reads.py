"""Serving fetches and list-offsets below the local log start from the topic's Delta table.

A consumer fetch below the local log start is answered from the table: one row group, read
and re-encoded to the original batches (segments/tier_rows.py), cached per partition
(:class:`~loglake.broker.tier_state.TierChunk`). The earliest offset a consumer sees is the
table's first offset of the partition when that is below the local log start.

Quarantined rows (bytes the tierer could not decode, segments/tier_quarantine.py) and rows
compacted away are a gap: a fetch in a gap gets the next batch, as Kafka serves a compacted log;
a fetch past the table's last batch but at or above its start gets the local log's first
batches (the table's tail was quarantined rows, aborted records or markers). librdkafka
stalls without an error on a malformed batch and the Java consumer throws until the
application seeks, hence a gap, while the table keeps the bytes for whoever wants to look
(``decode_error IS NOT NULL``).

Isolation levels: the table holds committed data only (the tierer tiers below the last stable
offset and leaves out aborted records and transaction markers, broker/tier_writer.py and
segments/tier_txn.py), so a fetch answered here serves read_uncommitted and read_committed
consumers alike: committed records only, with no ``aborted_transactions`` (the replica manager
answers an empty list to read_committed ones: a list naming a transaction whose ABORT marker is
not in the answer would make the Java consumer and librdkafka skip that producer's later
committed batches). Offsets may have gaps where aborted records and markers were; consumers
skip gaps as in a compacted log. The rebuilt batches keep their original attributes, the
transactional bit included: consumers accept transactional batches that no aborted
transaction names (read_committed ones deliver them, as Kafka does for committed ones), and
read_uncommitted ones ignore the bit. A read_uncommitted consumer therefore sees aborted
records only while they are in local segments (Kafka's remote segments keep them: a deliberate
difference, the table is for committed data). The one answer taken from the local log here
(the table's tail is a gap, :meth:`TierReads._after_tier`) follows the same rule: it stops at
the last stable offset and leaves out the batches of aborted transactions (markers stay, so
the consumer moves past them).

Freshness: the table is watched for change announcements before anything is cached
(table_changes.py); an announcement or the periodic reload (every READER_REFRESH_S, in case an
announcement was missed) drops what was cached, and a read that raced with a change does not
cache its result. A file vacuumed under a stale snapshot makes the read reload and retry.

Thread-safety: event-loop only; Delta and Parquet work runs in worker threads on the topic's
reader table (one call at a time), and re-encoding rows runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging

import pyarrow as pa

from loglake.broker.metrics.request_timing import remote_time
from loglake.broker.partition import Partition
from loglake.broker.table_changes import TableChangeWatcher
from loglake.broker.tier_state import READER_REFRESH_S, GuardedTable, TierChunk, TierState
from loglake.segments.batch import iter_batches, peek_header
from loglake.segments.tier_rows import rows_to_batches
from loglake.segments.tier_txn import without_aborted_batches
from loglake.segments.tiered_table import TieredTable

log = logging.getLogger(__name__)

LOCAL_CHUNKS_MAX = 64
"""Most chunks of aborted records :func:`committed_local_read` skips in one answer."""


class TierReads:
    """Tier reads of one broker (see the module)."""

    def __init__(self, state: TierState, watcher: TableChangeWatcher) -> None:
        self._state = state
        self._watcher = watcher
        self._next_refresh = 0.0  # time.monotonic() of the next periodic reload

    def table(self, topic: str) -> GuardedTable:
        """The topic's reader table object, its changes watched."""
        self._watcher.watch(topic)
        return self._state.reader(topic)

    def start(self, now: float) -> None:
        """Schedule the periodic reload from ``now`` (time.monotonic())."""
        self._next_refresh = now

    def expire(self, now: float) -> None:
        """The periodic reload: every READER_REFRESH_S, forget what was cached of every table
        read (in case an announcement of a clean-up job was missed)."""
        if now < self._next_refresh:
            return
        self._next_refresh = now + READER_REFRESH_S
        for topic in self._state.cached_topics():
            self._state.invalidate(topic)

    @remote_time  # table reads are the request's remote time, as Kafka's remote fetches
    async def tier_start(self, partition: Partition) -> int | None:
        """The first offset the table holds for this partition (None: none)."""
        if self._state.storage is None:
            return None
        key = (partition.topic, partition.index)
        cached = self._state.start(key)
        if cached is not None:
            return cached
        reader = self.table(partition.topic)
        generation = self._state.generation(partition.topic)
        start = await reader.call(_refreshed_start, reader.table, partition.index)
        if self._state.generation(partition.topic) == generation:
            self._state.partition(key).set_start(start)
        return start

    def known_log_start(self, partition: Partition) -> int:
        """:meth:`log_start` from what is cached (no I/O), for responses' log_start_offset."""
        tier = self._state.start((partition.topic, partition.index))
        local = partition.log_start_offset
        return local if tier is None else min(tier, local)

    async def log_start(self, partition: Partition) -> int:
        """The earliest offset consumers see: the table's first offset when it is below the
        local log start, else the local log start."""
        if partition.log_start_offset > 0:
            await self.tier_start(partition)  # (re)loads the cached table start
        return self.known_log_start(partition)

    @remote_time
    async def read(self, partition: Partition, offset: int, max_bytes: int,
                   min_one_batch: bool) -> bytes | None:
        """Batches from the table starting with the one holding ``offset`` (or the next one
        after a gap), whole, at most ``max_bytes`` (the first one whole when
        ``min_one_batch``), from one row group. None when the table holds nothing at or after
        ``offset``."""
        key = (partition.topic, partition.index)
        cached = self._state.partitions.get(key)
        chunk = None if cached is None else cached.chunk
        if chunk is None or not chunk.covers(offset):
            reader = self.table(partition.topic)
            generation = self._state.generation(partition.topic)
            rows = None
            topic = self._state.topic(partition.topic)
            if topic.stale:
                topic.stale = False
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
            chunk = TierChunk([(h.base_offset, h.last_offset, data)
                               for h, data in zip(headers, batches, strict=True)])
            if self._state.generation(partition.topic) == generation:
                self._state.partition(key).chunk = chunk  # (not if the table changed meanwhile)
        return chunk.slice(offset, max_bytes, min_one_batch)

    async def _after_tier(self, partition: Partition, offset: int, max_bytes: int,
                          min_one_batch: bool) -> bytes | None:
        """A fetch at ``offset`` below the local log start that the table holds no batch at or
        after: when the table covers ``offset`` (its tail is quarantined rows, aborted records
        or markers: a gap to consumers), the answer is the local log's first committed batches
        (:func:`committed_local_read`), as a fetch in a gap gets the next batch; else None (out
        of range)."""
        start = await self.tier_start(partition)
        if start is None or offset < start or offset >= partition.log_start_offset:
            return None
        return committed_local_read(partition, max_bytes, min_one_batch)

    @remote_time
    async def offset_for_timestamp(self, partition: Partition,
                                   timestamp_ms: int) -> tuple[int, int] | None:
        """ListOffsets by time over the tiered offsets below the local log start."""
        if self._state.storage is None:
            return None
        reader = self.table(partition.topic)
        hit = await reader.call(reader.table.offset_for_timestamp, partition.index,
                                timestamp_ms)
        if hit is not None and hit[0] < partition.log_start_offset:
            return hit
        return None


def committed_local_read(partition: Partition, max_bytes: int, min_one_batch: bool) -> bytes:
    """Batches from the local log start below the last stable offset, without those of aborted
    transactions (markers stay): an answer that needs no ``aborted_transactions`` list, as
    the table's. Reads on while a whole chunk was aborted records (the aborted transaction's
    marker, kept, ends such a run); after LOCAL_CHUNKS_MAX such chunks the answer is empty and
    the consumer asks again (tiering those segments soon answers it from the table)."""
    position = partition.log_start_offset
    stable = partition.last_stable_offset
    for _ in range(LOCAL_CHUNKS_MAX):
        if position >= stable:
            return b""
        data = partition.log.read(position, max_bytes, max_offset=stable,
                                  min_one_batch=min_one_batch)
        if not data:
            return b""
        headers = list(iter_batches(data, verify_crc=False))
        end = headers[-1].next_offset
        aborted = [(t.producer_id, t.first_offset, t.last_offset)
                   for t in partition.aborted_transactions(position, end)]
        kept = without_aborted_batches(data, aborted)
        if kept:
            return kept
        position = end
    return b""


def _refreshed_start(table: TieredTable, partition: int) -> int | None:
    table.files(partition, refresh=True)
    return table.start_offset(partition)


def _refreshed_chunk(table: TieredTable, partition: int, offset: int) -> pa.Table | None:
    table.files(partition, refresh=True)
    return table.read_chunk(partition, offset)
