"""Transaction markers: WriteTxnMarkers v1 from the coordinator to partition leaders and group
coordinators (Kafka's ``TransactionMarkerChannelManager``), retried until every one is written.

For one transaction at PrepareCommit/PrepareAbort (:meth:`MarkerSender.send`):

* each data partition of the transaction gets a marker at its current leader (the metadata
  cache's partition state, re-read at every round); a partition whose topic no longer exists is
  done (Kafka skips deleted partitions);
* each group added by AddOffsetsToTxn gets an entry for topic ``__consumer_offsets``, partition
  ``offsets_partition_for(group)``, sent to the group's coordinator (the group coordinator then
  commits or drops the transaction's pending offsets);
* the targets of one broker travel in one request (one marker entry), carrying the producer id,
  the producer epoch of the decision, the outcome and the coordinator epoch of our takeover;
* per target: NONE is done; INVALID_PRODUCER_EPOCH is done too (the producer moved on to a
  newer epoch, whose own transaction the marker must not touch); TRANSACTION_COORDINATOR_FENCED
  raises :class:`CoordinatorFencedError` (a newer coordinator owns the id and completes it); any
  other error (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION while the leader moves,
  NOT_ENOUGH_REPLICAS, NOT_COORDINATOR, a connection error, ...) is retried with backoff after
  the destination is looked up again, until ``still_owner()`` says the coordinator lost the id
  (:class:`MarkersAbandonedError`; the next coordinator re-sends them).

Connections: one :class:`~loglake.broker.connection.BrokerConnection` per destination broker
(the replica fetcher's connection code), one request in flight on it at a time (a lock);
requests to different brokers run concurrently. Runs on the broker's event loop; not
thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.serial.errors import SerialError

from loglake.broker.connection import BrokerConnection, InterBrokerLink
from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.metrics.transaction_metrics import MarkerCounts
from loglake.errors import LoglakeError
from loglake.faults import crash_point

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 1
OFFSETS_TOPIC = "__consumer_offsets"
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0
REQUEST_TIMEOUT_S = 30.0

Target = tuple[str, int]
"""(topic, partition) of a marker: a data partition or (``__consumer_offsets``, p)."""


class CoordinatorFencedError(LoglakeError):
    """A partition saw a newer coordinator epoch for this producer: we are deposed."""

    code = ErrorCode.transaction_coordinator_fenced


class MarkersAbandonedError(LoglakeError):
    """The coordinator stopped owning the transaction before its markers were written."""

    code = ErrorCode.not_coordinator


@dataclass(frozen=True)
class MarkerOrder:
    """What to write: the decision of one transaction."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: frozenset[Target]
    groups: frozenset[str]


class MarkerSender:
    def __init__(self, *, broker_id: int, metadata: MetadataCache,
                 group_coordinator_for: Callable[[str], int],
                 offsets_partition_for: Callable[[str], int],
                 link: InterBrokerLink | None = None) -> None:
        """``metadata``: leaders and broker addresses; ``group_coordinator_for(group)``: the
        broker coordinating a group (-1: none); ``offsets_partition_for(group)``: the
        ``__consumer_offsets`` partition of a group; ``link``: how to reach other brokers
        (their inter-broker listener, with its security)."""
        self.link = link or InterBrokerLink()
        self.broker_id = broker_id
        self.metadata = metadata
        self.group_coordinator_for = group_coordinator_for
        self.offsets_partition_for = offsets_partition_for
        self._connections: dict[int, BrokerConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._closing: set[asyncio.Future[None]] = set()
        self.counts = MarkerCounts()  # for the metrics (broker/metrics/transaction_metrics.py)
        self._tokens = itertools.count()

    async def close(self) -> None:
        for connection in self._connections.values():
            await connection.close()
        self._connections.clear()

    async def send(self, order: MarkerOrder, *, still_owner: Callable[[], bool],
                   crash_at: str | None = None) -> None:
        """Write every marker of ``order`` (see the module docstring); returns once all are
        written. Raises CoordinatorFencedError or MarkersAbandonedError. ``crash_at``: a crash
        point (loglake/faults.py) reached when the first destination acknowledged its markers
        (the others may still be in flight or not sent)."""
        token = next(self._tokens)
        try:
            await self._send(order, token, still_owner, crash_at)
        finally:
            self.counts.done(token)

    async def _send(self, order: MarkerOrder, token: int, still_owner: Callable[[], bool],
                    crash_at: str | None) -> None:
        # one entry per data partition, and per group (two groups may share an offsets
        # partition yet have different coordinators)
        pending: set[tuple[Target, str | None]] = {(tp, None) for tp in order.partitions}
        pending |= {((OFFSETS_TOPIC, self.offsets_partition_for(g)), g) for g in order.groups}
        backoff = FIRST_BACKOFF_S
        while pending:
            if not still_owner():
                raise MarkersAbandonedError(
                    f"producer {order.producer_id}: {len(pending)} marker(s) left to the next "
                    f"coordinator")
            by_broker: dict[int, set[tuple[Target, str | None]]] = {}
            for key in list(pending):
                broker = self._destination(*key)
                if broker is None:  # the topic is gone: nothing to mark
                    pending.discard(key)
                elif broker >= 0:
                    by_broker.setdefault(broker, set()).add(key)
            unknown = len(pending) - sum(map(len, by_broker.values()))
            self.counts.round(token, len(pending), unknown)
            brokers = list(by_broker)
            results = await asyncio.gather(*(
                self._send_to(broker, order, {target for target, _ in by_broker[broker]},
                              crash_at)
                for broker in brokers))
            for broker, written in zip(brokers, results, strict=True):
                done = {key for key in by_broker[broker] if key[0] in written}
                pending -= done
                self.counts.acknowledged(order.commit, len(done))
            self.counts.round(token, len(pending), unknown)
            if pending:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _destination(self, target: Target, group: str | None) -> int | None:
        """The broker to send ``target``'s marker to; -1 if unknown now (retry); None if the
        partition no longer exists."""
        if group is not None:
            broker = self.group_coordinator_for(group)
        else:
            topic, partition = target
            meta = self.metadata.topics.get(topic)
            if meta is None:
                return None
            if partition not in meta.assignment:
                return None
            state = self.metadata.partition_states.get(target)
            broker = state.leader if state is not None else -1
        return broker if broker in self.metadata.live_brokers else -1

    async def _send_to(self, broker: int, order: MarkerOrder, targets: Iterable[Target],
                       crash_at: str | None = None) -> list[Target]:
        """One WriteTxnMarkers request; returns the targets written."""
        topics: dict[str, list[int]] = {}
        for topic, partition in targets:
            topics.setdefault(topic, []).append(partition)
        body = {"markers": [{
            "producer_id": order.producer_id, "producer_epoch": order.producer_epoch,
            "transaction_result": order.commit, "coordinator_epoch": order.coordinator_epoch,
            "topics": [{"name": name, "partition_indexes": sorted(parts)}
                       for name, parts in sorted(topics.items())]}]}
        lock = self._locks.setdefault(broker, asyncio.Lock())
        async with lock:
            try:
                connection = await self._connect(broker)
                if connection is None:
                    return []
                response = await connection.request(WRITE_TXN_MARKERS,
                                                    WRITE_TXN_MARKERS_VERSION, body)
            except (OSError, ConnectionError, asyncio.IncompleteReadError, TimeoutError,
                    SerialError, ValueError, KeyError) as exc:
                log.info("transaction markers to broker %d: %r; retrying", broker, exc)
                await self._drop(broker)
                return []
            except asyncio.CancelledError:  # a half-read answer would poison the connection
                dropped = self._connections.pop(broker, None)
                if dropped is not None:
                    closing = asyncio.ensure_future(dropped.close())
                    self._closing.add(closing)
                    closing.add_done_callback(self._closing.discard)
                raise
        written: list[Target] = []
        for marker in response.markers:
            for topic in marker.topics:
                for part in topic.partitions:
                    target = (str(topic.name), int(part.partition_index))
                    error = ErrorCode(part.error_code)
                    if error in (ErrorCode.none, ErrorCode.invalid_producer_epoch):
                        if error is not ErrorCode.none:
                            log.info("marker of producer %d on %s-%d: %s (the producer moved "
                                     "on); done", order.producer_id, *target, error.name)
                        written.append(target)
                    elif error is ErrorCode.transaction_coordinator_fenced:
                        raise CoordinatorFencedError(
                            f"{target[0]}-{target[1]} knows a newer coordinator of producer "
                            f"{order.producer_id}")
                    else:
                        log.log(logging.DEBUG if error.retriable else logging.WARNING,
                                "marker of producer %d on %s-%d at broker %d: %s; retrying",
                                order.producer_id, *target, broker, error.name)
        if written and crash_at is not None:
            crash_point(crash_at)
        return written

    async def _connect(self, broker: int) -> BrokerConnection | None:
        connection = self._connections.get(broker)
        info = self.metadata.live_brokers.get(broker)
        if info is None:
            await self._drop(broker)
            return None
        if connection is not None and connection.connected and \
                (connection.host, connection.port) == self.link.address(info):
            return connection
        await self._drop(broker)
        connection = self.link.connection(info, client_id=f"txn-coordinator-{self.broker_id}",
                                          timeout=REQUEST_TIMEOUT_S)
        if connection is None:
            return None
        await connection.connect()
        self._connections[broker] = connection
        return connection

    async def _drop(self, broker: int) -> None:
        connection = self._connections.pop(broker, None)
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()
