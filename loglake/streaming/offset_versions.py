"""Kafka offsets <-> versions of a topic's Delta table, and reading a topic as of offsets.

The mapping (no other Delta or Kafka tool offers it): every commit that moves partition ``p``'s
tiered end carries the Delta app transaction ``(app_id=f"{topic}-{p}", version=last tiered
offset)`` (segments/tiered_table.py; the tierer's appends, and ``DeleteRecords`` when it moves
the end past records it deletes). App transaction versions only grow, commit after commit (the
tierer appends in offset order; clean-up jobs never touch them), so

    tiered_end(p, V) = txn(f"{topic}-{p}") at version V, plus one   (None: nothing tiered)

is non-decreasing in ``V``, and the version *in which offset ``o`` of ``p`` was tiered* is the
first ``V`` with ``tiered_end(p, V) > o``: :func:`version_of_offset` finds it by bisection over
the versions still in the log (one snapshot load per step, ~log2(versions) loads). A timestamp
maps to the first tiered record at or after it (:func:`version_for_timestamp`).

Reading as of offsets (:func:`plan_as_of`; ``spark.read.format("loglake")
.option("loglake.asOfOffsets", '{"0": 1200, "1": 900}')``): the records of each partition
``p`` below ``asOf[p]``, as the table held them at the first version ``V`` in which all of them
were tiered (the maximum over the partitions; time travel: compaction or retention that ran
after ``V`` does not change the result). A partition whose ``asOf`` lies beyond the current
tiered end is read from the current version plus the brokers for the rest (its records are not
all tiered yet; ``V`` is then the current version). Requires only deltalake and pyarrow (the
Python data source reads the files of ``V``): no delta-spark needed. If ``VACUUM`` already
deleted files of ``V``, the read fails with :class:`~loglake.streaming.errors.DataLossError`.

Driver-side, not thread-safe (each call loads snapshots through deltalake).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from loglake.segments.tiered_table import TieredTable, app_id
from loglake.streaming.errors import DataLossError, SourceOptionError
from loglake.streaming.offsets import PartitionOffsets, TierSnapshot, tier_snapshot
from loglake.streaming.options import Subscription, TopicPartition

if TYPE_CHECKING:
    from loglake.streaming.offsets import ClusterView

AS_OF_OPTION = "loglake.asOfOffsets"
"""Batch read option: JSON ``{"<partition>": offset}`` (one subscribed topic) or
``{"<topic>": {"<partition>": offset}}``: read the records below those offsets (module doc)."""


class PinnedTable(TieredTable):
    """A :class:`TieredTable` fixed at one table version (reads only)."""

    def __init__(self, table: TieredTable, version: int) -> None:
        super().__init__(table.storage, table.topic)
        self.version = version
        self._pinned = DeltaTable(table.uri, version=version,
                                  storage_options=table.storage.delta_options())

    def table(self, *, refresh: bool = False) -> DeltaTable:
        return self._pinned


def tiered_end_at(table: TieredTable, partition: int, version: int) -> int | None:
    """One past the last offset of ``partition`` tiered in table version ``version``."""
    found = PinnedTable(table, version).table().transaction_version(
        app_id(table.topic, partition))
    return None if found is None else int(found) + 1


def current_version(table: TieredTable) -> int | None:
    """The newest version of the topic's table (None: nothing was ever tiered)."""
    try:
        return int(table.table(refresh=True).version())
    except TableNotFoundError:
        return None


def version_of_offset(table: TieredTable, partition: int, offset: int) -> int | None:
    """The first table version in which ``offset`` of ``partition`` is tiered (its tiered end
    is past it); None when it is not tiered yet, or nothing of the topic is."""
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    newest = current_version(table)
    if newest is None:
        return None
    end = table.tiered_end(partition, refresh=False)
    if end is None or end <= offset:
        return None
    low, high = 0, newest  # invariant: tiered at high
    while low < high:
        middle = (low + high) // 2
        at = tiered_end_at(table, partition, middle)
        if at is not None and at > offset:
            high = middle
        else:
            low = middle + 1
    return high


def version_for_timestamp(table: TieredTable, partition: int, timestamp_ms: int
                          ) -> tuple[int, int] | None:
    """``(version, offset)``: the first tiered record of ``partition`` with a timestamp at or
    after ``timestamp_ms`` (in the current table) and the version in which it was tiered;
    None when the tier holds no such record."""
    found = table.offset_for_timestamp(partition, timestamp_ms)
    if found is None:
        return None
    offset = found[0]
    version = version_of_offset(table, partition, offset)
    return None if version is None else (version, offset)


def parse_as_of(raw: str, subscription: Subscription | None) -> PartitionOffsets:
    """The :data:`AS_OF_OPTION` value as ``{(topic, p): offset}``. The short form
    ``{"0": 1200}`` needs exactly one subscribed topic."""
    try:
        data: Any = json.loads(raw)
    except ValueError as exc:
        raise SourceOptionError(f"option {AS_OF_OPTION!r} is not valid JSON: {exc}") from None
    example = '{"0": 1200, "1": 900} or {"topic": {"0": 1200}}'
    if not isinstance(data, dict) or not data:
        raise SourceOptionError(f"option {AS_OF_OPTION!r} must be a JSON object like "
                                f"{example}, got {raw!r}")
    if all(isinstance(v, dict) for v in data.values()):
        nested = {str(t): parts for t, parts in data.items()}
    elif not any(isinstance(v, dict) for v in data.values()):
        topics = _single_topic(subscription)
        nested = {topics: data}
    else:
        raise SourceOptionError(f"option {AS_OF_OPTION!r} mixes the two forms: {example}")
    result: PartitionOffsets = {}
    for topic, parts in nested.items():
        for partition, offset in parts.items():
            if not str(partition).isdigit() or not isinstance(offset, int) or isinstance(
                    offset, bool) or offset < 0:
                raise SourceOptionError(
                    f"option {AS_OF_OPTION!r}: {topic}-{partition} needs a partition number and "
                    f"an offset >= 0, got {partition!r}: {offset!r}")
            result[(topic, int(partition))] = offset
    return result


def _single_topic(subscription: Subscription | None) -> str:
    if subscription is not None and subscription.kind == "subscribe" and len(
            subscription.topics) == 1:
        return subscription.topics[0]
    if subscription is not None and subscription.kind == "assign":
        topics = {t for t, _ in subscription.assignment}
        if len(topics) == 1:
            return next(iter(topics))
    raise SourceOptionError(
        f"option {AS_OF_OPTION!r} without topic names needs exactly one subscribed topic",
        hint='name the topics: {"topic": {"0": 1200}}')


def plan_as_of(view: ClusterView, partitions: list[TopicPartition],
               as_of: Mapping[TopicPartition, int]
               ) -> tuple[PartitionOffsets, PartitionOffsets, dict[str, TierSnapshot | None]]:
    """``(starts, ends, snapshots)`` for :func:`~loglake.streaming.ranges.plan_ranges`: each
    partition read from its first record to ``as_of`` in the version the module docstring
    describes, the part beyond that version's tiered end from the brokers."""
    missing = sorted(set(partitions) - set(as_of))
    if missing:
        listed = ", ".join(f"{t}-{p}" for t, p in missing)
        raise SourceOptionError(f"option {AS_OF_OPTION!r} must give every partition read; "
                                f"missing {listed}")
    storage = view.storage()
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    snapshots: dict[str, TierSnapshot | None] = {}
    starts: PartitionOffsets = {}
    for topic, numbers in sorted(by_topic.items()):
        snapshot = None
        if storage is not None:
            table = TieredTable(storage, topic)
            version = _as_of_version(table, {p: as_of[(topic, p)] for p in numbers})
            if version is not None:
                snapshot = tier_snapshot(PinnedTable(table, version), numbers)
                if snapshot is not None:
                    _check_files_exist(table, snapshot)
        snapshots[topic] = snapshot
        for p in numbers:
            files = snapshot.files.get(p, ()) if snapshot is not None else ()
            if files:
                starts[(topic, p)] = files[0].min_offset
    ends = {tp: as_of[tp] for tp in partitions}
    # the rest comes from the brokers: from their earliest offset (nothing tiered at V) or from
    # V's tiered end (which, being the current version there, the brokers still hold)
    hot = [tp for tp in partitions if tp not in starts]
    if hot:
        earliest = view.list_offsets(hot, "earliest")
        starts.update({tp: earliest.get(tp, 0) for tp in hot})
    for (topic, p), start in list(starts.items()):
        snapshot = snapshots.get(topic)
        tiered = snapshot.ends.get(p) if snapshot is not None else None
        if tiered is not None and not snapshot.files.get(p):  # type: ignore[union-attr]
            starts[(topic, p)] = max(start, tiered)  # V holds nothing of p below its end
    starts = {tp: min(o, ends[tp]) for tp, o in starts.items()}
    return starts, ends, snapshots


def _as_of_version(table: TieredTable, as_of: Mapping[int, int]) -> int | None:
    """The first version holding every record below ``as_of`` (current version for a
    partition not fully tiered yet); None when nothing of the topic is tiered."""
    newest = current_version(table)
    if newest is None:
        return None
    needed = 0
    for partition, offset in as_of.items():
        if offset <= 0:
            continue
        version = version_of_offset(table, partition, offset - 1)
        needed = max(needed, newest if version is None else version)
    return needed


def _check_files_exist(table: TieredTable, snapshot: TierSnapshot) -> None:
    """Fail at planning, not in a task, when VACUUM deleted files of the pinned version."""
    from pyarrow.fs import FileType

    uris = [f.uri for files in snapshot.files.values() for f in files]
    if not uris:
        return
    infos = table.storage.pyarrow_filesystem().get_file_info(
        [table.storage.path_in_fs(uri) for uri in uris])
    gone = [uri for uri, info in zip(uris, infos, strict=True) if info.type == FileType.NotFound]
    if gone:
        raise DataLossError(
            f"{table.topic}: version {snapshot.version} of its table, which holds the records "
            f"below the requested offsets, lost {len(gone)} data file(s) to VACUUM "
            f"(e.g. {gone[0]})",
            hint="read without loglake.asOfOffsets (endingOffsets reads the current version)")
