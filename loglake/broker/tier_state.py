"""What the broker's tier code knows, one record per thing: :class:`TopicTier` per topic,
:class:`PartitionTier` per partition, both held by one :class:`TierState`.

Nothing here is durable: the table is the truth (the tiered end is the Delta app-transaction
version of ``<topic>-<partition>``, segments/tiered_table.py), and everything below is a cache
of it or a schedule, rebuilt after a restart or a leadership change. A crash loses nothing.

Invalidation (:meth:`TierState.invalidate`): when a clean-up job announces a change of a
topic's table, or the periodic reload is due, the topic's reader reloads its snapshot before
its next read, its generation moves on (a read that started before does not cache its result),
and its partitions forget their cached row group, table start and quarantined count.
:meth:`TierState.forget_topic` drops both records of a deleted topic.

Thread-safety: event-loop thread only, except the TieredTable inside a :class:`GuardedTable`,
which runs in worker threads one call at a time under its lock.
"""

from __future__ import annotations

import asyncio
import bisect
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from loglake.catalog.zookeeper import ClusterCatalog
from loglake.segments.storage import Storage
from loglake.segments.tiered_table import TieredTable

T = TypeVar("T")
Key = tuple[str, int]
"""(topic, partition index)."""

READER_REFRESH_S = 5.0
"""Longest a broker serves tier reads from a cached snapshot, or keeps local segments below a
compaction's cleaned offset, when it missed a table-change announcement (ZooKeeper
unreachable); announced changes apply at once."""


class TierZooKeeper(Protocol):
    """What the tier code uses of the broker's ZooKeeper session."""

    @property
    def catalog(self) -> ClusterCatalog: ...

    async def call(self, func: Callable[..., T], *args: Any) -> T:
        """``func(*args)`` off the event loop (it talks to ZooKeeper)."""
        ...

    def healthy(self) -> bool:
        """Whether the broker holds a valid ZooKeeper lease."""
        ...

    def run_soon(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` on the event loop (callable from kazoo's threads)."""
        ...


@dataclass
class TierProgress:
    """What the tierer knows of one led partition (reset at each leadership change)."""

    leader_epoch: int
    tiered_end: int | None  # app txn version + 1 as last read from / committed to the table
    quarantined: int | None = None  # quarantined rows in the live files (None: reload)
    last_status: dict[str, Any] = field(default_factory=dict)
    last_status_s: float = 0.0


@dataclass
class TierChunk:
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


class GuardedTable:
    """A TieredTable with a lock, used from worker threads one call at a time."""

    def __init__(self, table: TieredTable) -> None:
        self.table = table
        self.lock = threading.Lock()

    async def call(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        def locked() -> T:
            with self.lock:
                return func(*args, **kwargs)

        return await asyncio.to_thread(locked)


@dataclass
class PartitionTier:
    """What the tier code knows of one partition with a replica here."""

    progress: TierProgress | None = None  # leaders: what the tierer read or committed
    start: int | None = None  # the table's first offset of the partition (None: no rows)
    start_known: bool = False  # ``start`` was read (and not invalidated since)
    chunk: TierChunk | None = None  # the last row group a tier read decoded
    retry_at: float = 0.0  # time.monotonic() before which tiering backs off after failures

    def set_start(self, start: int | None) -> None:
        self.start, self.start_known = start, True

    def forget_cached(self) -> None:
        """The table's files were replaced or removed: what was read of them is stale."""
        self.chunk = None
        self.start, self.start_known = None, False
        if self.progress is not None:
            self.progress.quarantined = None  # count again


@dataclass
class TopicTier:
    """What the tier code knows of one topic's table."""

    writer: GuardedTable | None = None  # the tierer's table object
    reader: GuardedTable | None = None  # tier reads' and local retention's table object
    stale: bool = False  # the reader reloads its snapshot before its next read
    generation: int = 0  # table changes seen (a read caches only if none came meanwhile)
    watch_token: object | None = None  # set while table changes are watched
    created: bool = False  # this broker saw the table exist
    checkpointing: bool = False  # a background Delta checkpoint runs
    commits: int = 0  # tier commits (a checkpoint is due every 10)
    table_version: int | None = None  # after this broker's last tier commit (metrics)
    table_files: int = 0  # live data files then
    table_bytes: int = 0  # their bytes


class TierState:
    """The records of every topic and partition the tier code has seen (see the module)."""

    def __init__(self, storage: Storage | None) -> None:
        self.storage = storage
        self.topics: dict[str, TopicTier] = {}
        self.partitions: dict[Key, PartitionTier] = {}

    def topic(self, name: str) -> TopicTier:
        tier = self.topics.get(name)
        if tier is None:
            tier = self.topics[name] = TopicTier()
        return tier

    def partition(self, key: Key) -> PartitionTier:
        tier = self.partitions.get(key)
        if tier is None:
            tier = self.partitions[key] = PartitionTier()
        return tier

    def progress(self, key: Key) -> TierProgress | None:
        tier = self.partitions.get(key)
        return None if tier is None else tier.progress

    def start(self, key: Key) -> int | None:
        """The cached table start of a partition (None: unknown or no rows)."""
        tier = self.partitions.get(key)
        return None if tier is None else tier.start

    def generation(self, topic: str) -> int:
        tier = self.topics.get(topic)
        return 0 if tier is None else tier.generation

    def writer(self, topic: str) -> GuardedTable:
        tier = self.topic(topic)
        if tier.writer is None:
            tier.writer = GuardedTable(TieredTable(self._storage(), topic))
        return tier.writer

    def reader(self, topic: str) -> GuardedTable:
        """The topic's reader table object (callers watch table changes first)."""
        tier = self.topic(topic)
        if tier.reader is None:
            tier.reader = GuardedTable(TieredTable(self._storage(), topic))
        return tier.reader

    def invalidate(self, topic: str) -> None:
        """Forget what was cached of ``topic``'s table (see the module)."""
        tier = self.topic(topic)
        tier.stale = True
        tier.generation += 1
        for (name, _index), partition in self.partitions.items():
            if name == topic:
                partition.forget_cached()

    def cached_topics(self) -> set[str]:
        """Topics with a reader or a cached table start (the periodic reload's)."""
        return ({topic for (topic, _index), tier in self.partitions.items() if tier.start_known}
                | {topic for topic, tier in self.topics.items() if tier.reader is not None})

    def forget_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)
        for key in [key for key in self.partitions if key[0] == topic]:
            del self.partitions[key]

    def _storage(self) -> Storage:
        assert self.storage is not None
        return self.storage


class BackgroundTasks:
    """Tasks started and not awaited (a reference is kept until each one ends)."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[None]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
