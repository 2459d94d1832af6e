"""Which local segments retention may delete: a pure decision over segment snapshots.

Kafka's rules (``UnifiedLog.deleteOldSegments``), applied to the sealed segments only (the
active segment is never deleted here), oldest first, as one prefix:

* time: a segment whose largest timestamp is older than ``now - retention_ms`` (-1: never);
* size: the oldest segments while the partition stays above ``retention_bytes`` without them
  (-1: no limit);
* tiering (KIP-405): when the topic is tiered, only segments wholly below ``tiered_end`` (one
  past the last offset committed to the Delta table) may go, and the limits are the
  ``local.retention.*`` ones (-2 means "use retention.*");
* compaction (loglake): when the compaction job cleaned the tiered copy up to ``cleaned_end``,
  the local segments wholly below it are stale copies of records the table has compacted
  away: they go whatever the limits, so consumers read the compacted copy.

Pure functions, thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence

from loglake.config import TopicConfig
from loglake.segments.log import SegmentInfo


def local_limits(config: TopicConfig, *, tiered: bool) -> tuple[int, int]:
    """``(retention_ms, retention_bytes)`` that govern the local log."""
    if not tiered:
        return config.retention_ms, config.retention_bytes
    ms = config.retention_ms if config.local_retention_ms == -2 else config.local_retention_ms
    size = (config.retention_bytes if config.local_retention_bytes == -2
            else config.local_retention_bytes)
    return ms, size


def expired_count(
    units: Sequence[tuple[int, int]],
    *,
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
    total_bytes: int | None = None,
) -> int:
    """How many leading ``units`` (``(max_timestamp_ms, size_bytes)`` of segments or tiered
    files, oldest first) Kafka's time and size rules delete: a prefix, the longer of the two.
    ``total_bytes`` is the size the limit applies to (default: the units' sum)."""
    by_time = 0
    if retention_ms >= 0:
        while by_time < len(units) and units[by_time][0] < now_ms - retention_ms:
            by_time += 1
    by_size = 0
    if retention_bytes >= 0:
        total = sum(size for _, size in units) if total_bytes is None else total_bytes
        excess = total - retention_bytes
        while by_size < len(units) and excess >= units[by_size][1]:
            excess -= units[by_size][1]
            by_size += 1
    return max(by_time, by_size)


def deletable_prefix(
    segments: Sequence[SegmentInfo],
    *,
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
    tiered_end: int | None,
    cleaned_end: int = 0,
) -> int | None:
    """The new local start offset (base offset of the first segment kept) if retention
    deletes any segment, else None. ``tiered_end`` None means the topic is not tiered;
    ``cleaned_end`` (tiered topics) is where the table's compaction reached."""
    sealed = [s for s in segments if not s.active]
    eligible = len(sealed)
    if tiered_end is not None:
        eligible = 0
        while eligible < len(sealed) and sealed[eligible].next_offset <= tiered_end:
            eligible += 1
    count = expired_count(
        [(s.max_timestamp, s.size_bytes) for s in sealed[:eligible]], now_ms=now_ms,
        retention_ms=retention_ms, retention_bytes=retention_bytes,
        total_bytes=sum(s.size_bytes for s in segments),
    )
    if tiered_end is not None:
        while count < eligible and sealed[count].next_offset <= cleaned_end:
            count += 1
    if count == 0:
        return None
    return segments[count].base_offset
