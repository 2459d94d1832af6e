"""Open transactions as partition leaders see them, hanging ones, and aborting one: what Kafka's
``kafka-transactions describe-producers | find-hanging | abort`` do, for the SDK's
:class:`~loglake.client.admin.Admin`.

* :func:`describe_producers` — DescribeProducers (v0, KIP-664) sent to each partition's leader
  (one request per leader): the active producers of each partition with their open
  transaction's first offset (``txn_start_offset``, None when none is open).
* :func:`find_hanging` — Kafka's ``find-hanging`` rule: an open transaction on a partition whose
  producer's last write (``last_timestamp``) is older than ``max_transaction_timeout_ms``
  (Kafka's ``--max-transaction-timeout``, 15 minutes by default, the broker's
  ``transaction.max.timeout.ms``) is a candidate; a candidate is *hanging* when no
  transaction coordinator knows its producer id (ListTransactions filtered by producer id), the
  transactional id is gone, or the coordinator's transaction does not name that partition
  (DescribeTransactions: the coordinator will never write its marker).
* :func:`abort_transaction` — Kafka's ``Admin.abortTransaction``: WriteTxnMarkers (v1) with an
  ABORT marker for the producer id, epoch and coordinator epoch, sent to the partition's
  leader, which writes the marker and so ends the open transaction (the last stable offset
  moves on). The broker requires ALTER or CLUSTER_ACTION on the cluster
  (CLUSTER_AUTHORIZATION_FAILED otherwise); an older producer epoch answers
  INVALID_PRODUCER_EPOCH, an older coordinator epoch TRANSACTION_COORDINATOR_FENCED.

Errors: :class:`~loglake.client.errors.BrokerError` with the partition's error code (``kafka_name``
Kafka's name, e.g. ``CLUSTER_AUTHORIZATION_FAILED``), ClientError for connection failures.
Every call is bounded by ``timeout`` (the admin's by default). Thread-safety: as the Admin it
is given (blocking calls, no state of its own). Uses the Admin's metadata and raw-request
helpers (``_wire``), as its own transaction listing does.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from loglake.client import _wire
from loglake.client.admin import Admin
from loglake.client.errors import BrokerError, ClientError
from loglake.client.model import TransactionDescription

DESCRIBE_PRODUCERS = (61, 0)
WRITE_TXN_MARKERS = (27, 1)
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 15 * 60 * 1000
"""Kafka's ``find-hanging --max-transaction-timeout`` default (15 minutes)."""
MAX_PARTITIONS_PER_REQUEST = 500
"""Partitions per DescribeProducers request (Kafka's tool batches likewise)."""

PartitionKey = tuple[str, int]


@dataclass(frozen=True)
class ProducerState:
    """One active producer of a partition, as its leader answers DescribeProducers."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int | None
    txn_start_offset: int | None


@dataclass(frozen=True)
class OpenTransaction:
    """A transaction open on ``topic``-``partition`` (``producer.txn_start_offset`` set)."""

    topic: str
    partition: int
    producer: ProducerState

    def open_ms(self, now_ms: int) -> int:
        """Time since the producer's last write (Kafka's "duration" of find-hanging)."""
        return max(0, now_ms - self.producer.last_timestamp_ms)


def describe_producers(admin: Admin, partitions: Iterable[PartitionKey], *,
                       timeout: float | None = None,
                       refused: dict[PartitionKey, BrokerError] | None = None,
                       ) -> dict[PartitionKey, list[ProducerState]]:
    """The active producers of ``partitions``, each asked of its leader. A partition without a
    leader, or one its leader refuses (e.g. TOPIC_AUTHORIZATION_FAILED without READ), raises
    :class:`BrokerError` naming it; with ``refused`` given, its error goes there instead and
    the other partitions are answered."""
    limit = admin._limit(timeout)
    deadline = time.monotonic() + limit
    operation = "describe producers"
    metadata = admin._metadata(operation, limit)
    by_leader: dict[int, list[PartitionKey]] = defaultdict(list)
    for topic, partition in sorted(set(partitions)):
        described = metadata.topics.get(topic)
        info = None if described is None else described.partitions.get(partition)
        if info is None or info.leader < 0:
            raise BrokerError(f"{operation}: UNKNOWN_TOPIC_OR_PARTITION ({topic}-{partition} "
                              "has no leader: unknown, or offline)",
                              code=ErrorCode.unknown_topic_or_partition,
                              kafka_name="UNKNOWN_TOPIC_OR_PARTITION")
        by_leader[int(info.leader)].append((topic, partition))
    found: dict[PartitionKey, list[ProducerState]] = {}
    for leader, keys in sorted(by_leader.items()):
        node = metadata.brokers.get(leader)
        if node is None:
            raise ClientError(f"{operation}: leader {leader} is not in the cluster metadata",
                              code=ErrorCode.broker_not_available)
        for start in range(0, len(keys), MAX_PARTITIONS_PER_REQUEST):
            batch = keys[start:start + MAX_PARTITIONS_PER_REQUEST]
            found.update(_describe_on(admin, str(node.host), int(node.port), batch, deadline,
                                      f"{operation} on broker {leader}", refused))
    return found


def _describe_on(admin: Admin, host: str, port: int, keys: Sequence[PartitionKey],
                 deadline: float, where: str,
                 refused: dict[PartitionKey, BrokerError] | None,
                 ) -> dict[PartitionKey, list[ProducerState]]:
    topics: dict[str, list[int]] = defaultdict(list)
    for topic, partition in keys:
        topics[topic].append(partition)
    body = {"topics": [{"name": t, "partition_indexes": p} for t, p in topics.items()]}
    response = _wire.request(host, port, *DESCRIBE_PRODUCERS, body,
                             timeout=_left(deadline), client_id=admin._client_id,
                             security=admin.security, operation=where)
    found: dict[PartitionKey, list[ProducerState]] = {}
    for topic in response.topics:
        for entry in topic.partitions:
            key = (topic.name, int(entry.partition_index))
            try:
                _raise(f"{where}: {topic.name}-{entry.partition_index}", entry.error_code,
                       entry.error_message)
            except BrokerError as exc:
                if refused is None:
                    raise
                refused[key] = exc
                continue
            found[(topic.name, int(entry.partition_index))] = [
                _producer(p) for p in entry.active_producers]
    return found


def open_transactions(states: dict[PartitionKey, list[ProducerState]]) -> list[OpenTransaction]:
    """Every producer with an open transaction, per partition (pure)."""
    return [OpenTransaction(topic, partition, producer)
            for (topic, partition), producers in sorted(states.items())
            for producer in producers if producer.txn_start_offset is not None]


def hanging(candidates: Sequence[OpenTransaction], transactional_ids: dict[int, str],
            descriptions: dict[str, TransactionDescription | None]) -> list[OpenTransaction]:
    """Kafka's ``filterHangingTransactions`` (pure): ``transactional_ids`` maps the producer
    ids the coordinators know to their transactional id; ``descriptions`` holds None for an id
    the coordinator no longer knows."""
    out = []
    for candidate in candidates:
        transactional_id = transactional_ids.get(candidate.producer.producer_id)
        description = None if transactional_id is None else descriptions.get(transactional_id)
        if description is None or (candidate.topic, candidate.partition) not in \
                description.partitions:
            out.append(candidate)
    return out


def find_hanging(admin: Admin, partitions: Iterable[PartitionKey], *,
                 max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
                 now_ms: int | None = None,
                 timeout: float | None = None) -> list[OpenTransaction]:
    """The hanging transactions among ``partitions`` (Kafka's ``find-hanging``; see the
    module)."""
    if max_transaction_timeout_ms < 0:
        raise ValueError("max_transaction_timeout_ms must be >= 0")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    states = describe_producers(admin, partitions, timeout=timeout)
    candidates = [t for t in open_transactions(states)
                  if t.open_ms(now) > max_transaction_timeout_ms]
    if not candidates:
        return []
    producer_ids = sorted({t.producer.producer_id for t in candidates})
    listings = admin.list_transactions(producer_ids=producer_ids, timeout=timeout)
    transactional_ids = {t.producer_id: t.transactional_id for t in listings}
    descriptions: dict[str, TransactionDescription | None] = {}
    for transactional_id in sorted(set(transactional_ids.values())):
        try:
            descriptions[transactional_id] = admin.describe_transaction(
                transactional_id, timeout=timeout)
        except BrokerError as exc:
            if exc.code != ErrorCode.transactional_id_not_found:
                raise
            descriptions[transactional_id] = None
    return hanging(candidates, transactional_ids, descriptions)


def abort_transaction(admin: Admin, topic: str, partition: int, *, producer_id: int,
                      producer_epoch: int, coordinator_epoch: int,
                      timeout: float | None = None) -> None:
    """Write an ABORT marker for ``producer_id`` on ``topic``-``partition`` through its leader
    (Kafka's ``Admin.abortTransaction``; see the module for the errors)."""
    if producer_id < 0 or producer_epoch < 0 or coordinator_epoch < 0 or partition < 0:
        raise ValueError("partition, producer id, producer epoch and coordinator epoch must "
                         "be >= 0")
    limit = admin._limit(timeout)
    deadline = time.monotonic() + limit
    operation = f"abort the transaction of producer {producer_id} on {topic}-{partition}"
    metadata = admin._metadata(operation, limit)
    described = metadata.topics.get(topic)
    info = None if described is None else described.partitions.get(partition)
    node = None if info is None else metadata.brokers.get(int(info.leader))
    if node is None:
        raise BrokerError(f"{operation}: UNKNOWN_TOPIC_OR_PARTITION (the partition has no "
                          "leader: unknown, or offline)",
                          code=ErrorCode.unknown_topic_or_partition,
                          kafka_name="UNKNOWN_TOPIC_OR_PARTITION")
    body = {"markers": [{
        "producer_id": producer_id, "producer_epoch": producer_epoch,
        "transaction_result": False, "coordinator_epoch": coordinator_epoch,
        "topics": [{"name": topic, "partition_indexes": [partition]}]}]}
    response = _wire.request(str(node.host), int(node.port), *WRITE_TXN_MARKERS, body,
                             timeout=_left(deadline), client_id=admin._client_id,
                             security=admin.security, operation=operation)
    for marker in response.markers:
        for answered in marker.topics:
            for entry in answered.partitions:
                _raise(operation, entry.error_code, None)


def _producer(state: Any) -> ProducerState:
    coordinator_epoch = int(state.coordinator_epoch)
    start = int(state.current_txn_start_offset)
    return ProducerState(
        producer_id=int(state.producer_id), producer_epoch=int(state.producer_epoch),
        last_sequence=int(state.last_sequence), last_timestamp_ms=int(state.last_timestamp),
        coordinator_epoch=coordinator_epoch if coordinator_epoch >= 0 else None,
        txn_start_offset=start if start >= 0 else None)


def _raise(where: str, code: ErrorCode, message: str | None) -> None:
    if code != ErrorCode.none:
        raise BrokerError(f"{where}: {code.name.upper()}" + (f" ({message})" if message else ""),
                         code=code,
                          kafka_name=code.name.upper())


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.05)
