"""Which sides of a tiered topic are typed, and the schemas the tier worker decodes them with.

Per topic (:meth:`TierSchemas.typing`): the typed sides follow the decided rule (schemas/
typed_sides.py ``typed_sides``: ``schema.columns.enable`` and a subject -- ``value.schema.subject``
or ``<topic>-value`` when it exists; keys likewise), read from the schema store in ZooKeeper
(catalog/schemas.py) off the event loop. The worker process gets a :class:`TierTyping`: the
subjects, a picklable ``SchemaSet`` holding every version of them (soft-deleted ones too) with
their references, and the table's current typed types.

Ids the records carry that the set lacks: the worker cannot know them before decoding, so it
reports them instead of writing (``SegmentWrite.missing_ids``, segments/tier_typing.py) and the
tierer calls :meth:`TierSchemas.resolve`, which reads them from the store: found ones join the
set, the rest are marked ``absent`` for this segment only, and the worker runs again (at most
:data:`RESOLVE_ROUNDS` runs; a segment never waits on an id). Absent ids decode as
``<side>_error = "unknown schema id N"``. Nothing negative is cached: an id registered after a
failed lookup is found by the next segment that carries it.

Caches: schemas by id forever (an id's content never changes, catalog/schemas.py), bounded;
subject versions for :data:`SUBJECT_REFRESH_S` (a subject created or evolved reaches the tierer
within that time); references by subject version likewise.

Thread-safety: the public coroutines run on the event loop; the store is read in the
ZooKeeper session's executor (``TierZooKeeper.call``), and the caches are touched only there,
under a lock.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence

import pyarrow as pa

from loglake.broker.tier_state import TierZooKeeper
from loglake.catalog.schemas import SchemaStore
from loglake.config import TopicConfig
from loglake.schemas.model import RegisteredSchema, SchemaReference, SubjectVersion
from loglake.schemas.schema_set import SchemaSet
from loglake.schemas.typed_sides import typed_sides
from loglake.segments.tier_typing import TierTyping

SUBJECT_REFRESH_S = 2.0
"""Longest the tierer uses a cached list of a subject's versions."""
MAX_CACHED_SCHEMAS = 10_000
"""Schemas kept by id (least recently used dropped beyond)."""
RESOLVE_ROUNDS = 2
"""Worker runs of one segment at most: the second one has every id found or absent."""


class _CachedStore:
    """The schema store with the caches of the module docstring (executor threads only)."""

    def __init__(self, store: Callable[[], SchemaStore], clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._by_id: OrderedDict[int, RegisteredSchema] = OrderedDict()
        self._versions: dict[str, tuple[float, list[SubjectVersion]]] = {}
        self._refs: dict[tuple[str, int], tuple[float, RegisteredSchema | None]] = {}

    def schema(self, schema_id: int) -> RegisteredSchema | None:
        with self._lock:
            found = self._by_id.get(schema_id)
            if found is not None:
                self._by_id.move_to_end(schema_id)
                return found
        found = self._store().schema(schema_id)
        if found is not None:
            with self._lock:
                self._by_id[schema_id] = found
                while len(self._by_id) > MAX_CACHED_SCHEMAS:
                    self._by_id.popitem(last=False)
        return found

    def versions(self, subject: str) -> list[SubjectVersion]:
        now = self._clock()
        with self._lock:
            cached = self._versions.get(subject)
        if cached is not None and now - cached[0] < SUBJECT_REFRESH_S:
            return list(cached[1])
        versions = self._store().versions(subject)
        with self._lock:
            self._versions[subject] = (now, list(versions))
        return list(versions)

    def referenced(self, reference: SchemaReference) -> RegisteredSchema | None:
        key = (reference.subject, int(reference.version))
        now = self._clock()
        with self._lock:
            cached = self._refs.get(key)
        if cached is not None and now - cached[0] < SUBJECT_REFRESH_S:
            return cached[1]
        found = self._store().referenced(reference)
        with self._lock:
            self._refs[key] = (now, found)
        return found


class TierSchemas:
    """Typed sides and schema snapshots for the tierer (see the module docstring)."""

    def __init__(self, zookeeper: TierZooKeeper,
                 topic_config: Callable[[str], TopicConfig | None], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._zookeeper = zookeeper
        self._topic_config = topic_config
        self._store: SchemaStore | None = None
        self._cache = _CachedStore(self._schema_store, clock)

    def _schema_store(self) -> SchemaStore:
        if self._store is None:
            self._store = SchemaStore(self._zookeeper.catalog.zk)
        return self._store

    async def typing(self, topic: str,
                     current: Callable[[], Awaitable[Mapping[str, pa.DataType]]]
                     ) -> TierTyping | None:
        """What the worker needs to type ``topic``'s rows (None: no side is typed);
        ``current``: reads the table's ``<side>_typed`` types (tier_rows.side_types), called
        only when a side is typed."""
        config = self._topic_config(topic)
        if config is None or not config.schema_columns_enable:
            return None
        found = await self._zookeeper.call(self._subjects, topic, config)
        if found is None:
            return None
        subjects, schemas = found
        types = await current()
        return TierTyping(subjects=subjects, schemas=schemas,
                          current={side: types[side] for side in subjects if side in types})

    def _subjects(self, topic: str, config: TopicConfig
                  ) -> tuple[dict[str, str], SchemaSet] | None:
        """The typed sides' subjects and a snapshot of their schemas (None: none typed)."""
        subjects = typed_sides(
            topic, config, lambda subject: bool(self._cache.versions(subject))).by_side()
        if not subjects:
            return None
        return subjects, SchemaSet.collect(self._cache, subjects=sorted(set(subjects.values())))

    async def resolve(self, typing: TierTyping, missing: Sequence[int]) -> TierTyping:
        """``typing`` with the ``missing`` ids the store knows added and the others marked
        absent: a worker run with the result reports no missing id for the same rows."""
        found = await self._zookeeper.call(self._collect, sorted(set(missing)))
        absent = {int(i) for i in missing if found.schema(int(i)) is None}
        return typing.with_schemas(found, absent)

    def _collect(self, ids: list[int]) -> SchemaSet:
        return SchemaSet.collect(self._cache, ids)
