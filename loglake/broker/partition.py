"""One partition hosted by this broker: its log, idempotent-producer state and fetch waiters.

The high watermark is the offset below which records are visible to consumers. With a single
replica (this issue) it equals the log end offset after every append; replication will move it
to the minimum log end offset of the in-sync replicas.

Thread-safety: everything here runs on the broker's event loop thread; no locks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from loglake.broker.producer_state import ProducerStateTable
from loglake.config import TopicConfig
from loglake.errors import OutOfOrderSequenceError
from loglake.segments.batch import parse_batches
from loglake.segments.log import PartitionLog


class AppendOutcome:
    """What a produce to this partition answers: base offset, append time, log start."""

    __slots__ = ("base_offset", "log_append_time_ms", "log_start_offset")

    def __init__(self, base_offset: int, log_append_time_ms: int, log_start_offset: int):
        self.base_offset = base_offset
        self.log_append_time_ms = log_append_time_ms
        self.log_start_offset = log_start_offset


class Partition:
    def __init__(
        self,
        topic: str,
        index: int,
        directory: Path,
        config: TopicConfig,
        *,
        leader_epoch: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.topic = topic
        self.index = index
        self.config = config
        self.leader_epoch = leader_epoch
        self.log = PartitionLog.open(directory, config, clock=clock)
        self.producers = ProducerStateTable()
        self._waiters: set[asyncio.Future[None]] = set()
        self._rebuild_producer_state()

    def _rebuild_producer_state(self) -> None:
        for header in self.log.batch_headers(self.log.log_start_offset):
            self.producers.record_batch(header)

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def append(self, records: bytes) -> AppendOutcome:
        """Validate idempotence, append, wake fetchers. Raises LoglakeError subclasses."""
        headers = parse_batches(records)
        duplicates = [self.producers.check_batch(h) for h in headers]
        if any(d is not None for d in duplicates):
            if all(d is not None for d in duplicates):
                first = duplicates[0]
                assert first is not None
                return AppendOutcome(first, -1, self.log.log_start_offset)
            raise OutOfOrderSequenceError(
                "Request mixes duplicate and new batches of an idempotent producer."
            )
        result = self.log.append(records, leader_epoch=self.leader_epoch, headers=headers)
        for header in result.batches:
            self.producers.record_batch(header)
        self._wake()
        return AppendOutcome(result.base_offset, result.log_append_time_ms,
                             result.log_start_offset)

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool) -> bytes:
        """Committed batches from ``offset`` (below the high watermark), size-limited."""
        return self.log.read(offset, max_bytes, max_offset=self.high_watermark,
                             min_one_batch=min_one_batch)

    def waiter(self) -> asyncio.Future[None]:
        """A future completed at the next append (used by long-polling fetches)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(future)
        future.add_done_callback(self._waiters.discard)
        return future

    def _wake(self) -> None:
        for future in list(self._waiters):
            if not future.done():
                future.set_result(None)

    def update_config(self, config: TopicConfig) -> None:
        self.config = config
        self.log.update_config(config)

    def close(self) -> None:
        self._wake()
        self.log.close()
