"""Local retention: deleting the oldest local segments of every replica this broker hosts.

What goes (segments/retention.py decides): segments past ``retention.ms``/``retention.bytes``
(``local.retention.*`` on tiered topics); on tiered topics only segments already in the table
(leaders know their tiered end from the tierer, followers read the table's), nothing before the
first tier commit; on compacted tiered topics also every segment below the compaction job's
cleaned offset (the table holds the compacted copy); never past the high watermark.
Deleting moves the local log start (segments/log.py: checkpoint first, then the files).

When: a full pass at start-up and every ``log.retention.check.interval.ms``; the replicas of a
topic at once when a change of its table is announced (:meth:`LocalRetention.announce`,
table_changes.py); the replicas of compacted tiered topics also every READER_REFRESH_S, so a
missed announcement (ZooKeeper away when the job announced, a watch that failed) delays
dropping stale copies by seconds, not by the check interval. Schedules are due times on the
monotonic clock, which counts from boot: no fixed value means "now".

Failures (an unreachable object store, an I/O error) are logged per partition by the
FailureLog (first with a traceback, then counts) and the partition is tried again next pass.

Thread-safety: event-loop only; table reads run in worker threads (tier_state.GuardedTable),
segment deletion on the loop (renames and unlinks of a few files).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from loglake.broker.failure_log import FailureLog
from loglake.broker.partition import Partition, Role
from loglake.broker.tier_state import READER_REFRESH_S, GuardedTable, Key, TierState
from loglake.segments.retention import deletable_prefix, local_limits
from loglake.segments.tiered_table import TieredTable, cleaned_end

log = logging.getLogger(__name__)


class LocalRetention:
    """Local retention of one broker's replicas (see the module)."""

    def __init__(self, state: TierState, *, hosted: Callable[[], Mapping[Key, Partition]],
                 tiered: Callable[[str], bool], reader: Callable[[str], GuardedTable],
                 check_interval_s: float, clock: Callable[[], float],
                 failures: FailureLog) -> None:
        self._state = state
        self._hosted = hosted
        self._tiered = tiered
        self._reader = reader  # the topic's reader table, its changes watched
        self._check_interval_s = check_interval_s
        self._clock = clock
        self._failures = failures
        self._announced: set[str] = set()  # topics whose replicas are checked on the next turn
        self._next_full = 0.0  # time.monotonic() of the next full pass
        self._next_cleaned_check = 0.0  # ... of compacted tiered topics (missed announcements)

    def start(self, now: float) -> None:
        """Schedule from ``now`` (time.monotonic()): the first turn runs a full pass."""
        self._next_full = self._next_cleaned_check = now

    def announce(self, topic: str) -> None:
        """A change of ``topic``'s table was announced: check its replicas on the next turn."""
        self._announced.add(topic)

    async def turn(self, now: float) -> None:
        """Run what is due at ``now`` (time.monotonic()): a full pass, or the replicas of the
        announced topics and, every READER_REFRESH_S, of the compacted tiered topics."""
        if now >= self._next_full:
            self._next_full = now + self._check_interval_s
            self._announced.clear()
            await self.run_pass()
        else:
            topics, self._announced = self._announced, set()
            if now >= self._next_cleaned_check:  # announcements may have been missed
                topics |= self._compacted_tiered_topics()
            if topics:
                await self.run_pass(topics)
        if now >= self._next_cleaned_check:
            self._next_cleaned_check = now + READER_REFRESH_S

    def _compacted_tiered_topics(self) -> set[str]:
        """Topics with a replica here whose cleanup.policy compacts the tiered table."""
        return {partition.topic for partition in self._hosted().values()
                if "compact" in partition.config.cleanup_policy
                and self._tiered(partition.topic)}

    async def run_pass(self, topics: set[str] | None = None) -> None:
        """Local retention of every hosted replica (of ``topics`` only, when given)."""
        now_ms = int(self._clock() * 1000)
        refreshed: set[str] = set()  # topics whose snapshot this pass brought up to date
        for key, partition in list(self._hosted().items()):
            if topics is not None and partition.topic not in topics:
                continue
            try:
                tiered = self._tiered(partition.topic)
                tiered_end: int | None = None
                compacted = 0
                if tiered:
                    progress = self._state.progress(key)
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
                if self._hosted().get(key) is not partition:
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


def _cleaned_end(table: TieredTable, partition: int, refresh: bool) -> int:
    table.table(refresh=refresh)
    return cleaned_end(table, partition)
