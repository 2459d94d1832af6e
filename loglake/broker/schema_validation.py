"""Broker-side schema validation (Confluent's ``confluent.value.schema.validation`` /
``confluent.key.schema.validation`` topic configs): a produce whose values (keys) do not carry
a schema id registered under the topic's subject is refused.

Rule, per partition of a Produce request, when the topic's config turns a side on:

* the side's subject is ``value.schema.subject`` (``key.schema.subject``) when set, else the
  TopicNameStrategy name ``<topic>-value`` (``<topic>-key``);
* every record's value (key) must be framed (Confluent's wire format: magic byte 0, then a
  big-endian int32 schema id, see :mod:`loglake.schemas.wire`) with an id that some live (not
  soft-deleted) version of that subject uses; the payload itself is not decoded;
* a null value (a tombstone) and a null key pass (nothing to validate);
* one bad record refuses the whole partition's batch: INVALID_RECORD (87) with
  ``record_errors`` (index in the batch and what is wrong, at most :data:`MAX_RECORD_ERRORS`)
  and an ``error_message`` naming the topic-partition, the subject and the first problem.
  Other partitions of the request, and topics without validation, are unaffected.

Cost: off (the default) costs two attribute reads per partition in
:meth:`SchemaValidation.enabled`. On, the batch's records are decoded once more here.

Subject ids come from ZooKeeper (:class:`~loglake.catalog.schemas.SchemaStore`) through the
broker's ZooKeeper executor (``call``), never on the event loop, and are cached per subject:

* a cached set younger than :data:`FRESH_S` is used as is;
* an older one is still used (the produce does not wait) and a refresh starts in the
  background;
* an id missing from the cached set makes the produce wait for a refresh (one read per subject
  at a time, shared by every waiting produce, at most one every :data:`RETRY_UNKNOWN_S`), so a
  schema registered a moment ago is accepted at once, and a producer sending unknown ids does
  not turn into a ZooKeeper read per request;
* the first produce to a subject waits for its first read; when ZooKeeper cannot answer and
  nothing is cached the partition answers REQUEST_TIMED_OUT (retriable: the producer retries).

Thread-safety: event-loop thread only (the ZooKeeper reads run in ``call``'s executor).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from loglake.config import TopicConfig
from loglake.errors import InvalidRecordError, LoglakeError, RecordError
from loglake.schemas import wire
from loglake.schemas.typed_sides import configured_subject
from loglake.segments.batch import iter_batches
from loglake.segments.records import decode_records

log = logging.getLogger(__name__)

Side = Literal["key", "value"]
FRESH_S = 1.0
"""A subject's cached ids are refreshed in the background once older than this."""
RETRY_UNKNOWN_S = 0.25
"""An unknown id makes the produce wait for a new read at most this often per subject."""
MAX_RECORD_ERRORS = 20
"""At most this many ``record_errors`` per refused partition (the message counts them all)."""

SubjectReader = Callable[[str], Awaitable[frozenset[int]]]
"""Reads a subject's live schema ids (off the event loop)."""


def validated_sides(config: TopicConfig) -> tuple[Side, ...]:
    """The sides ``config`` turns validation on for (``()``: off)."""
    sides: list[Side] = []
    if config.confluent_key_schema_validation:
        sides.append("key")
    if config.confluent_value_schema_validation:
        sides.append("value")
    return tuple(sides)


def framing_problem(data: bytes | None, ids: frozenset[int], side: Side,
                    subject: str) -> str | None:
    """What is wrong with one record's key or value (None: it passes). Pure."""
    if data is None:
        return None
    schema_id = wire.schema_id_of(data)
    if schema_id is None:
        if data and data[0] != wire.MAGIC_BYTE:
            return (f"{side} is not framed with a schema id (magic byte 0x{data[0]:02x}, "
                    f"expected 0x00)")
        return f"{side} of {len(data)} bytes is too short for the schema id framing"
    if schema_id not in ids:
        return f"{side} schema id {schema_id} is not registered under subject {subject!r}"
    return None


@dataclass
class _Subject:
    ids: frozenset[int] = frozenset()
    loaded_at: float | None = None  # monotonic; None: never read
    reading: asyncio.Task[frozenset[int]] | None = None
    forced_at: float = float("-inf")  # the last read an unknown id waited for


class SchemaValidation:
    """The broker's validator (see the module): ``enabled(config)`` then ``await
    check(topic, index, config, records)``, which raises InvalidRecordError to refuse."""

    def __init__(self, read_ids: SubjectReader, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read_ids = read_ids
        self._clock = clock
        self._subjects: dict[str, _Subject] = {}

    @classmethod
    def over_store(cls, call: Callable[..., Awaitable[Any]], store: Any) -> SchemaValidation:
        """A validator reading ``store`` (a :class:`~loglake.catalog.schemas.SchemaStore`)
        through ``call`` (the ZooKeeper session's executor: ``ZkSession.call``)."""

        async def read_ids(subject: str) -> frozenset[int]:
            versions = await call(store.versions, subject)
            return frozenset(v.id for v in versions if not v.deleted)

        return cls(read_ids)

    @staticmethod
    def enabled(config: TopicConfig) -> bool:
        """Does ``config`` validate any side? (The only cost when validation is off.)"""
        return config.confluent_value_schema_validation or config.confluent_key_schema_validation

    async def check(self, topic: str, index: int, config: TopicConfig,
                    records: bytes) -> None:
        """Refuse (InvalidRecordError) ``records`` for ``topic``-``index`` unless every
        validated side of every record passes; ZooKeeperUnavailableError (retriable) when the
        subject's ids cannot be read and none are cached."""
        sides = validated_sides(config)
        if not sides:
            return
        subjects = {side: configured_subject(topic, config, side) for side in sides}
        known = {side: await self._ids(subjects[side]) for side in sides}
        errors = self._problems(records, sides, subjects, known)
        if errors and any(self._worth_rereading(subjects[s]) for s in sides):
            # an id registered a moment ago: read the subjects again and look once more
            known = {side: await self._ids(subjects[side], force=True) for side in sides}
            errors = self._problems(records, sides, subjects, known)
        if errors:
            first_index, first = errors[0]
            raise InvalidRecordError(
                f"Schema validation refused {topic}-{index}: {len(errors)} record(s) do not "
                f"carry a schema id of their subject; first, record {first_index}: {first}",
                hint="produce with the registry's serializer (Confluent framing) and a schema "
                     "registered under the subject",
                record_errors=tuple(errors[:MAX_RECORD_ERRORS]))

    def forget(self, subject: str | None = None) -> None:
        """Drop the cached ids of ``subject`` (None: all)."""
        if subject is None:
            self._subjects.clear()
        else:
            self._subjects.pop(subject, None)

    # ------------------------------------------------------------------ internals
    @staticmethod
    def _problems(records: bytes, sides: tuple[Side, ...], subjects: dict[Side, str],
                  known: dict[Side, frozenset[int]]) -> list[RecordError]:
        errors: list[RecordError] = []
        for header in iter_batches(records):
            if header.is_control:
                continue
            for position, record in enumerate(decode_records(records, header)):
                for side in sides:
                    data = record.value if side == "value" else record.key
                    problem = framing_problem(data, known[side], side, subjects[side])
                    if problem is not None:
                        errors.append((position, problem))
                        break
        return errors

    def _worth_rereading(self, subject: str) -> bool:
        state = self._subjects.get(subject)
        return state is None or self._clock() - state.forced_at >= RETRY_UNKNOWN_S

    async def _ids(self, subject: str, *, force: bool = False) -> frozenset[int]:
        state = self._subjects.setdefault(subject, _Subject())
        now = self._clock()
        if force and now - state.forced_at >= RETRY_UNKNOWN_S:
            state.forced_at = now
            return await self._read(subject, state)
        if state.loaded_at is None:
            return await self._read(subject, state)
        if now - state.loaded_at >= FRESH_S and state.reading is None:
            self._start_read(subject, state)  # stale-while-revalidate
        if force and state.reading is not None:
            with contextlib.suppress(LoglakeError):
                return await asyncio.shield(state.reading)
        return state.ids

    async def _read(self, subject: str, state: _Subject) -> frozenset[int]:
        if state.reading is None:
            self._start_read(subject, state)
        assert state.reading is not None
        try:
            return await asyncio.shield(state.reading)
        except LoglakeError:
            if state.loaded_at is None:
                raise
            return state.ids  # ZooKeeper is away: keep validating with what we know

    def _start_read(self, subject: str, state: _Subject) -> None:
        started = self._clock()

        async def read() -> frozenset[int]:
            try:
                ids = await self._read_ids(subject)
            except LoglakeError as exc:
                log.warning("schema validation: cannot read subject %s: %s", subject, exc)
                raise
            finally:
                state.reading = None
            state.ids = ids
            state.loaded_at = started
            return ids

        task = asyncio.get_running_loop().create_task(read(), name=f"schema-ids {subject}")
        task.add_done_callback(_consume_exception)
        state.reading = task


def _consume_exception(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()
