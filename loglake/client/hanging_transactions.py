"""Open transactions as partition replicas see them, hanging ones, and aborting one: what Kafka's
``kafka-transactions describe-producers | find-hanging | abort`` do, for the SDK's
:class:`~loglake.client.admin.Admin`.

* :func:`describe_producers` — DescribeProducers (v0, KIP-664) sent to each partition's leader
  (one request per leader), or to one given broker for all of them (Kafka's
  ``DescribeProducersOptions.brokerId``: any replica answers, followers included): the active
  producers of each partition with their open transaction's first offset
  (``txn_start_offset``, None when none is open).
* :func:`partitions_to_search` — the partitions ``find-hanging`` looks at: one partition, a
  topic's, or every topic's (internal ones too), kept to those with a replica on ``broker_id``
  when given (Kafka's ``collectTopicPartitionsToSearch``).
* :func:`find_hanging` — Kafka's ``find-hanging`` rule: an open transaction on a partition whose
  producer's last write (``last_timestamp``) is older than ``max_transaction_timeout_ms``
  (Kafka's ``--max-transaction-timeout``, 15 minutes by default, the broker's
  ``transaction.max.timeout.ms``) is a candidate; a candidate is *hanging* when no
  transaction coordinator knows its producer id (ListTransactions filtered by producer id), the
  transactional id is gone, or the coordinator's transaction does not name that partition
  (DescribeTransactions: the coordinator will never write its marker).
* :func:`open_transaction_at` — the producer whose open transaction starts at an offset
  (``kafka-transactions abort --start-offset``), from the leader's DescribeProducers.
* :func:`abort_transaction` — Kafka's ``Admin.abortTransaction``: WriteTxnMarkers (v1) with an
  ABORT marker for the producer id, epoch and coordinator epoch, sent to the partition's
  leader, which writes the marker and so ends the open transaction (the last stable offset
  moves on). The broker requires ALTER or CLUSTER_ACTION on the cluster
  (CLUSTER_AUTHORIZATION_FAILED otherwise); an older producer epoch answers
  INVALID_PRODUCER_EPOCH, an older coordinator epoch TRANSACTION_COORDINATOR_FENCED.

Errors: :class:`~loglake.client.errors.BrokerError` with the partition's error code (``kafka_name``
Kafka's name, e.g. ``CLUSTER_AUTHORIZATION_FAILED``), ClientError for connection failures.
Every call is bounded by ``timeout`` (the admin's by default). Thread-safety: as the Admin it
is given (blocking calls, no state of its own). Uses only the Admin's public methods
(``list_topics`` for leaders and replicas, ``broker_request`` for the raw requests).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from loglake.client.admin import Admin
from loglake.client.errors import BrokerError
from loglake.client.model import TopicInfo, TransactionDescription

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


def partitions_to_search(admin: Admin, *, topic: str | None = None,
                         partition: int | None = None, broker_id: int | None = None,
                         timeout: float | None = None) -> list[PartitionKey]:
    """Kafka's ``find-hanging`` scope: ``topic``-``partition`` as given (not looked up), else
    the partitions of ``topic`` (UNKNOWN_TOPIC_OR_PARTITION when it does not exist), else of
    every topic; with ``broker_id``, only partitions with a replica on that broker."""
    if partition is not None and topic is None:
        raise ValueError("a partition needs its topic")
    if topic is not None and partition is not None:
        return [(topic, partition)]
    topics = admin.list_topics(timeout=timeout)
    if topic is not None:
        if topic not in topics:
            raise BrokerError(f"find hanging transactions: UNKNOWN_TOPIC_OR_PARTITION (topic "
                              f"{topic!r} does not exist)",
                              code=ErrorCode.unknown_topic_or_partition,
                              kafka_name="UNKNOWN_TOPIC_OR_PARTITION")
        topics = {topic: topics[topic]}
    return [(name, p.partition) for name, info in sorted(topics.items())
            for p in info.partitions if broker_id is None or broker_id in p.replicas]


def describe_producers(admin: Admin, partitions: Iterable[PartitionKey], *,
                       broker_id: int | None = None, timeout: float | None = None,
                       refused: dict[PartitionKey, BrokerError] | None = None,
                       ) -> dict[PartitionKey, list[ProducerState]]:
    """The active producers of ``partitions``, each asked of its leader (or all of
    ``broker_id``). A partition without a leader, or one the broker refuses (e.g.
    TOPIC_AUTHORIZATION_FAILED without READ, NOT_LEADER_OR_FOLLOWER from a broker without a
    replica), raises :class:`BrokerError` naming it; with ``refused`` given, its error goes
    there instead and the other partitions are answered."""
    deadline = time.monotonic() + _limit(admin, timeout)
    operation = "describe producers"
    keys = sorted(set(partitions))
    by_broker: dict[int, list[PartitionKey]] = defaultdict(list)
    if broker_id is not None:
        by_broker[broker_id] = keys
    elif keys:
        topics = admin.list_topics(timeout=_left(deadline))
        for topic, partition in keys:
            leader = _leader(topics, topic, partition)
            if leader is None:
                raise BrokerError(f"{operation}: UNKNOWN_TOPIC_OR_PARTITION ({topic}-"
                                  f"{partition} has no leader: unknown, or offline)",
                                  code=ErrorCode.unknown_topic_or_partition,
                                  kafka_name="UNKNOWN_TOPIC_OR_PARTITION")
            by_broker[leader].append((topic, partition))
    found: dict[PartitionKey, list[ProducerState]] = {}
    for broker, owned in sorted(by_broker.items()):
        for start in range(0, len(owned), MAX_PARTITIONS_PER_REQUEST):
            batch = owned[start:start + MAX_PARTITIONS_PER_REQUEST]
            found.update(_describe_on(admin, broker, batch, deadline,
                                      f"{operation} on broker {broker}", refused))
    return found


def _leader(topics: dict[str, TopicInfo], topic: str, partition: int) -> int | None:
    described = topics.get(topic)
    if described is None:
        return None
    for info in described.partitions:
        if info.partition == partition:
            return info.leader if info.leader >= 0 else None
    return None


def _describe_on(admin: Admin, broker: int, keys: Sequence[PartitionKey],
                 deadline: float, where: str,
                 refused: dict[PartitionKey, BrokerError] | None,
                 ) -> dict[PartitionKey, list[ProducerState]]:
    topics: dict[str, list[int]] = defaultdict(list)
    for topic, partition in keys:
        topics[topic].append(partition)
    body = {"topics": [{"name": t, "partition_indexes": p} for t, p in topics.items()]}
    response = admin.broker_request(broker, *DESCRIBE_PRODUCERS, body, operation=where,
                                    timeout=_left(deadline))
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
            found[key] = [_producer(p) for p in entry.active_producers]
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
                 broker_id: int | None = None, now_ms: int | None = None,
                 timeout: float | None = None) -> list[OpenTransaction]:
    """The hanging transactions among ``partitions`` (Kafka's ``find-hanging``; see the
    module); producer states from the leaders, or all from ``broker_id``."""
    if max_transaction_timeout_ms < 0:
        raise ValueError("max_transaction_timeout_ms must be >= 0")
    states = describe_producers(admin, partitions, broker_id=broker_id, timeout=timeout)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    candidates = [t for t in open_transactions(states)
                  if t.open_ms(now) > max_transaction_timeout_ms]
    if not candidates:
        return []
    producer_ids = sorted({t.producer.producer_id for t in candidates})
    listings = admin.list_transactions(producer_ids=producer_ids, timeout=timeout)
    transactional_ids = {t.producer_id: t.transactional_id for t in listings
                         if t.producer_id in producer_ids}
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


def open_transaction_at(admin: Admin, topic: str, partition: int, start_offset: int, *,
                        timeout: float | None = None) -> ProducerState:
    """The producer whose transaction open on ``topic``-``partition`` starts at
    ``start_offset``, from the leader's DescribeProducers; LookupError when none does (Kafka's
    ``abort --start-offset``)."""
    states = describe_producers(admin, [(topic, partition)], timeout=timeout)
    for producer in states.get((topic, partition), []):
        if producer.txn_start_offset == start_offset:
            return producer
    raise LookupError(f"Could not find any open transactions starting at offset "
                      f"{start_offset} on partition {topic}-{partition}")


def abort_transaction(admin: Admin, topic: str, partition: int, *, producer_id: int,
                      producer_epoch: int, coordinator_epoch: int,
                      timeout: float | None = None) -> None:
    """Write an ABORT marker for ``producer_id`` on ``topic``-``partition`` through its leader
    (Kafka's ``Admin.abortTransaction``; see the module for the errors)."""
    if producer_id < 0 or producer_epoch < 0 or coordinator_epoch < 0 or partition < 0:
        raise ValueError("partition, producer id, producer epoch and coordinator epoch must "
                         "be >= 0")
    deadline = time.monotonic() + _limit(admin, timeout)
    operation = f"abort the transaction of producer {producer_id} on {topic}-{partition}"
    leader = _leader(admin.list_topics(timeout=_left(deadline)), topic, partition)
    if leader is None:
        raise BrokerError(f"{operation}: UNKNOWN_TOPIC_OR_PARTITION (the partition has no "
                          "leader: unknown, or offline)",
                          code=ErrorCode.unknown_topic_or_partition,
                          kafka_name="UNKNOWN_TOPIC_OR_PARTITION")
    body = {"markers": [{
        "producer_id": producer_id, "producer_epoch": producer_epoch,
        "transaction_result": False, "coordinator_epoch": coordinator_epoch,
        "topics": [{"name": topic, "partition_indexes": [partition]}]}]}
    response = admin.broker_request(leader, *WRITE_TXN_MARKERS, body, operation=operation,
                                    timeout=_left(deadline))
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
                          code=code, kafka_name=code.name.upper())


def _limit(admin: Admin, timeout: float | None) -> float:
    limit = admin.timeout if timeout is None else timeout
    if limit <= 0:
        raise ValueError(f"timeout must be positive, got {limit}")
    return limit


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.05)
