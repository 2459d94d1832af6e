"""The broker's side of tiered storage, behind one object: :class:`Tierer`.

Its three jobs live in their own modules; this one wires them and runs their schedule:

* tier_writer.py -- the tierer: sealed segments of led partitions into the topic's Delta table
  (crash-safe steps, quarantine of undecodable bytes, back-off), the tiering status in
  ZooKeeper, DeleteRecords in the table;
* local_retention.py -- deleting the oldest local segments of every hosted replica (on tiered
  topics only what the table holds);
* tier_reads.py -- fetches and list-offsets below the local log start, answered from the table;
* tier_schemas.py -- which sides of a topic are typed (schema registry subjects in ZooKeeper)
  and the schema snapshots the tierer's worker decodes them with;
* tier_state.py -- what the three know, one record per topic and per partition (caches of the
  table, never durable: the table is the truth); table_changes.py -- the ZooKeeper watches
  through which clean-up jobs' table changes reach those caches and local retention.

The loop (:meth:`Tierer.run`, one asyncio task per broker) turns every
``remote.log.manager.task.interval.ms`` and when woken (:meth:`Tierer.poke`: a segment rolled):
it watches the tables of every tiered topic with a replica here, tiers each led partition of a
tiered topic (only while the ZooKeeper lease is valid), runs the local retention that is due,
and expires cached table reads every READER_REFRESH_S.

Dependencies (narrow, no broker object): the broker's config values, its ZooKeeper session
(catalog, ``call`` off the loop, lease health, ``run_soon``), the hosted partitions (from the
replica manager), the topic-config lookup, the clock, and whether the broker is stopping.

Thread-safety: event-loop only; nothing here blocks the loop: segment decoding and Parquet
writing run in a spawned worker process, Delta reads and commits in worker threads (one call at
a time per table object; the writer and the reader of a topic use separate objects), ZooKeeper
calls through the session's executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Callable, Mapping

from loglake.broker.failure_log import FailureLog
from loglake.broker.local_retention import LocalRetention
from loglake.broker.metrics.state_counters import StateCounters
from loglake.broker.partition import Partition, Role
from loglake.broker.table_changes import TableChangeWatcher
from loglake.broker.tier_reads import TierReads
from loglake.broker.tier_schemas import TierSchemas
from loglake.broker.tier_state import (
    READER_REFRESH_S,
    BackgroundTasks,
    Key,
    TierState,
    TierZooKeeper,
)
from loglake.broker.tier_writer import TierWriter
from loglake.config import BrokerConfig, TopicConfig
from loglake.segments.storage import Storage

__all__ = ["READER_REFRESH_S", "TierZooKeeper", "Tierer"]

log = logging.getLogger(__name__)


class Tierer:
    """Tiering, local retention and tier reads of one broker (see the module docstring)."""

    def __init__(self, config: BrokerConfig, *, zookeeper: TierZooKeeper,
                 hosted: Callable[[], Mapping[Key, Partition]],
                 topic_config: Callable[[str], TopicConfig | None],
                 clock: Callable[[], float], stopping: Callable[[], bool],
                 counters: StateCounters | None = None) -> None:
        """``hosted`` returns the hosted partitions (the replica manager's), ``topic_config``
        a topic's config (None: unknown), ``clock`` wall-clock seconds (retention ages),
        ``stopping`` whether the broker is shutting down (tiering stops between segments),
        ``counters`` where tier commits and tier fetches are counted (metrics)."""
        self._counters = counters if counters is not None else StateCounters()
        self.storage: Storage | None = (
            Storage.from_url(config.remote_log_storage_url, config.remote_log_storage_options)
            if config.remote_log_storage_url else None
        )
        self._zookeeper = zookeeper
        self._hosted = hosted
        self._topic_config = topic_config
        self._interval_s = config.remote_log_manager_task_interval_ms / 1000
        self._failures = FailureLog(log)
        self._state = TierState(self.storage)
        self._wake: asyncio.Event | None = None
        self._retired: weakref.WeakSet[Partition] = weakref.WeakSet()
        self._in_flight: Partition | None = None
        self._turn_done = asyncio.Event()
        tasks = BackgroundTasks()
        self._tasks = tasks
        self._watcher = TableChangeWatcher(
            self._state, zookeeper=zookeeper, on_change=self._announced,
            failures=self._failures, tasks=tasks)
        self.reads = TierReads(self._state, self._watcher)
        self.retention = LocalRetention(
            self._state, hosted=hosted, tiered=self.tiered, reader=self.reads.table,
            check_interval_s=config.log_retention_check_interval_ms / 1000, clock=clock,
            failures=self._failures)
        self.writer = TierWriter(
            self._state, broker_id=config.broker_id, zookeeper=zookeeper,
            watch=self._watcher.watch, on_change=self._announced, stopping=stopping,
            failures=self._failures, tasks=tasks, counters=self._counters,
            schemas=TierSchemas(zookeeper, topic_config))

    @property
    def state(self) -> TierState:
        """What the tier code knows (read by the metrics collectors on the loop)."""
        return self._state

    def tiered(self, topic: str) -> bool:
        """Whether this broker tiers ``topic`` (storage configured, remote.storage.enable)."""
        config = self._topic_config(topic)
        return self.storage is not None and config is not None and config.remote_storage_enable

    def poke(self) -> None:
        """Wake the tierer (a segment rolled)."""
        if self._wake is not None:
            self._wake.set()

    def close(self) -> None:
        self.writer.close()

    def _announced(self, topic: str) -> None:
        """A change of ``topic``'s table was announced (or made here): forget what was cached
        and check its local segments now (a compaction may have made them stale)."""
        self._state.invalidate(topic)
        self.retention.announce(topic)
        self.poke()

    # ------------------------------------------------------------------ topics
    # A deleted topic's partitions stay hosted until this broker's TopicSync drops them; the
    # tierer must not tier them meanwhile (a tier commit after the table was removed would
    # create it again). Its hosted Partition objects are "retired" (a weak set: a topic
    # created again under the same name gets new objects) and the loop skips them; removal
    # waits for an in-flight tier turn of the topic to end first.

    def forget_topic(self, topic: str) -> None:
        """``topic`` was deleted and this broker drops its replicas (TopicSync): stop tiering
        them, forget caches, progress and the watch; the broker that led a partition of it
        also removes the table once the turn in flight ended, unless the name exists again
        (the broker that answered DeleteTopics removed it already, :meth:`delete_table`; this
        catches a tier commit of the leader that landed after that)."""
        led = self._retire(topic)
        self._forget(topic)
        if led and self.storage is not None:
            self._tasks.spawn(self._remove_if_gone(topic))

    async def delete_table(self, topic: str) -> None:
        """Remove a deleted topic's Delta table (Kafka deletes remote data with the topic), so
        a topic created later under the same name starts empty."""
        self._retire(topic)
        await self._quiesce(topic)
        self._forget(topic)
        await self._remove_table(topic)

    def _forget(self, topic: str) -> None:
        self._state.forget_topic(topic)
        self._counters.forget_topic(topic)
        self._failures.forget(lambda key: _about_topic(key, topic))

    def _retire(self, topic: str) -> bool:
        """Retire the hosted partitions of ``topic``; whether this broker led one."""
        led = False
        for partition in list(self._hosted().values()):
            if partition.topic == topic:
                self._retired.add(partition)
                led = led or partition.role is Role.LEADER
        return led

    async def _quiesce(self, topic: str, timeout_s: float = 60.0) -> None:
        """Wait (bounded) until no tier turn of ``topic`` is in flight."""
        deadline = time.monotonic() + timeout_s
        while self._in_flight is not None and self._in_flight.topic == topic:
            self._turn_done.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._turn_done.wait(),
                                       max(0.0, deadline - time.monotonic()))
            if time.monotonic() >= deadline:
                log.warning("a tier turn of deleted topic %s still runs after %.0f s",
                            topic, timeout_s)
                return

    async def _remove_if_gone(self, topic: str) -> None:
        await self._quiesce(topic)
        try:
            names = await self._zookeeper.call(self._zookeeper.catalog.topic_names)
        except Exception:
            log.warning("could not check whether deleted topic %s exists again; its table "
                        "is left for DeleteTopics' own removal", topic)
            return
        if topic not in names:
            await self._remove_table(topic)

    async def _remove_table(self, topic: str) -> None:
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
        """DeleteRecords in the table (TierWriter.delete_records)."""
        await self.writer.delete_records(partition, offset, tiered=self.tiered(partition.topic))

    # ------------------------------------------------------------------ tier reads
    def known_log_start(self, partition: Partition) -> int:
        return self.reads.known_log_start(partition)

    async def log_start(self, partition: Partition) -> int:
        return await self.reads.log_start(partition)

    async def read(self, partition: Partition, offset: int, max_bytes: int,
                   min_one_batch: bool) -> bytes | None:
        data = await self.reads.read(partition, offset, max_bytes, min_one_batch)
        if data is not None:
            self._counters.tier_fetched(partition.topic)
        return data

    async def offset_for_timestamp(self, partition: Partition,
                                   timestamp_ms: int) -> tuple[int, int] | None:
        return await self.reads.offset_for_timestamp(partition, timestamp_ms)

    def tiered_end(self, partition: Partition) -> int | None:
        """One past the last offset this broker (the leader) tiered of ``partition``, as its
        tier progress knows it (no I/O); None: nothing tiered or not known here."""
        progress = self._state.progress((partition.topic, partition.index))
        return None if progress is None else progress.tiered_end

    # ------------------------------------------------------------------ the loop
    async def run(self) -> None:
        self._wake = asyncio.Event()
        if self.storage is not None:
            with contextlib.suppress(Exception):
                await self._zookeeper.call(self._zookeeper.catalog.publish_storage,
                                           self.storage.url, dict(self.storage.options))
        now = time.monotonic()
        self.retention.start(now)
        self.reads.start(now)
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval_s)
            self._wake.clear()
            if self.storage is not None and self._zookeeper.healthy():
                for partition in list(self._hosted().values()):
                    if self.tiered(partition.topic):  # every replica, read or not
                        self._watcher.watch(partition.topic)
                for partition in list(self._hosted().values()):
                    if (partition.role is Role.LEADER and self.tiered(partition.topic)
                            and partition not in self._retired):
                        self._in_flight = partition
                        try:
                            await self.writer.tier_guarded(partition, self._interval_s)
                        finally:
                            self._in_flight = None
                            self._turn_done.set()
            now = time.monotonic()
            await self.retention.turn(now)
            self.reads.expire(now)


def _about_topic(key: object, topic: str) -> bool:
    """Whether a FailureLog key (``(kind, topic)`` or ``(kind, (topic, partition))``) is
    about ``topic``."""
    if not isinstance(key, tuple) or len(key) != 2:
        return False
    subject = key[1]
    return subject == topic or (isinstance(subject, tuple) and subject[:1] == (topic,))
