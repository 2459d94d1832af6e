"""CreatePartitions, DeleteRecords, ElectLeaders: the admin APIs that grow and repair topics.

* **CreatePartitions** (:func:`create_partitions`): a topic's partition count only grows
  (INVALID_PARTITIONS otherwise). New partitions continue the topic's rack-aware round-robin
  (topics.assign_replicas) with partition 0's replication factor, or take the request's manual
  assignments (INVALID_REPLICA_ASSIGNMENT for a wrong count, duplicate or unknown brokers, or
  another replication factor: Kafka's checks and messages). ``validate_only`` checks without
  writing. The assignment znode (version-checked) and the new partitions' state znodes are
  written in one ZooKeeper transaction (ClusterCatalog.add_partitions); a concurrent change
  makes it read and decide again. Every broker learns of the new partitions through its watch
  on the assignment (TopicSync.reconcile), opens its replicas and watches their states; producers
  and consumers see them in Metadata. At most MAX_PARTITIONS_PER_TOPIC per topic, as at
  creation.
* **DeleteRecords** (:func:`delete_records`): semantics in broker/record_deletion.py.
* **ElectLeaders** (:func:`elect_leaders`): preferred or unclean elections, run by
  Controller.elect_leaders with version-checked writes on whichever broker receives it; with
  ``topic_partitions`` null every partition is considered and, as Kafka does, only partitions
  where something happened (elected, or an error other than ELECTION_NOT_NEEDED) are listed.

Authorization (Kafka's ``KafkaApis`` rules, through handlers/authz.py): CreatePartitions needs
ALTER on each topic (after the duplicate check; TOPIC_AUTHORIZATION_FAILED "The topic
authorization is failed."), DeleteRecords DELETE on each topic (its partitions answer
TOPIC_AUTHORIZATION_FAILED, low watermark -1, before any existence check), ElectLeaders ALTER on
the cluster (else CLUSTER_AUTHORIZATION_FAILED at the top and on every partition named).

Handlers run on the broker's event loop; ZooKeeper calls go through the session's
executor (``services.zk.call``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake.broker import election, record_deletion
from loglake.broker.codec import RequestFrame, build, response_class
from loglake.broker.handlers import authz
from loglake.broker.handlers.admin import MAX_PARTITIONS_PER_TOPIC
from loglake.broker.quotas.controller_mutation import UNBOUNDED, MutationQuota
from loglake.broker.quotas.enforcement import controller_mutation_quota, with_mutation_throttle
from loglake.broker.security.acl_model import AclOperation, ResourceType
from loglake.broker.topics import assign_replicas
from loglake.catalog.zookeeper import StaleStateError
from loglake.errors import (
    ElectionNotNeededError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    LoglakeError,
    UnknownTopicError,
)

if TYPE_CHECKING:
    from loglake.broker.services import BrokerServices

log = logging.getLogger(__name__)
Assignment = dict[int, tuple[int, ...]]
GROW_ATTEMPTS = 5
"""Reads of a topic's assignment per CreatePartitions topic before a conflict is reported."""
METADATA_WAIT_S = 5.0
"""Longest CreatePartitions waits (within its timeout) for this broker's metadata to list the
new partitions with their states, so a client's next Metadata request sees them."""


# ---------------------------------------------------------------------------- CreatePartitions


def plan_added_partitions(
    existing: Mapping[int, tuple[int, ...]], count: int,
    manual: Sequence[Sequence[int]] | None, brokers: Mapping[int, str | None],
) -> Assignment:
    """The assignment of the partitions that grow a topic from ``existing`` to ``count``
    (pure). ``manual``: the request's assignments of the new partitions (None: automatic over
    ``brokers``, broker id -> rack). Raises InvalidPartitionsError,
    InvalidReplicaAssignmentError or InvalidReplicationFactorError."""
    current = len(existing)
    if count < current:
        raise InvalidPartitionsError(
            f"The number of partitions for a topic can only be increased. Topic currently has "
            f"{current} partitions, {count} would not be an increase.")
    if count == current:
        raise InvalidPartitionsError(f"Topic already has {current} partitions.")
    if count > MAX_PARTITIONS_PER_TOPIC:
        raise InvalidPartitionsError(
            f"Number of partitions {count} is above {MAX_PARTITIONS_PER_TOPIC}, the most one "
            "topic can have here (new partition states are created in one ZooKeeper "
            "transaction, which must stay under ZooKeeper's 1 MiB request limit).")
    first = min(existing)
    factor = len(existing[first])
    added = count - current
    if manual is None:
        return assign_replicas(brokers, added, factor, first_partition=current,
                               partition0_leader=existing[first][0])
    if len(manual) != added:
        raise InvalidReplicaAssignmentError(
            f"Increasing the number of partitions by {added} but {len(manual)} assignments "
            "provided.")
    result: Assignment = {}
    for index, replicas in enumerate(manual, start=current):
        listed = ", ".join(str(r) for r in replicas)
        if not replicas:
            raise InvalidReplicaAssignmentError(
                f"Cannot have replication factor of 0 for partition id {index}.")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"Duplicate brokers not allowed in replica assignment: {listed} for partition "
                f"id {index}.")
        unknown = sorted(set(replicas) - set(brokers))
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"Unknown broker(s) in replica assignment: "
                f"{', '.join(str(b) for b in unknown)}.")
        if len(replicas) != factor:
            raise InvalidReplicaAssignmentError(
                f"Inconsistent replication factor between partitions, partition {first} has "
                f"{factor} while partitions [{index}] have replication factors "
                f"[{len(replicas)}], respectively.")
        result[index] = tuple(replicas)
    return result


async def grow_topic(services: BrokerServices, name: str, count: int,
                     manual: Sequence[Sequence[int]] | None, *,
                     validate_only: bool = False,
                     mutation_quota: MutationQuota = UNBOUNDED) -> Assignment:
    """Validate and (unless ``validate_only``) add partitions to ``name`` so it has ``count``;
    the new partitions' assignment back. A topic this broker's metadata does not know is not
    looked up. Raises LoglakeError subclasses."""
    if name not in services.metadata.topics:
        raise UnknownTopicError(f"The topic '{name}' does not exist.")
    recorded = False
    for _ in range(GROW_ATTEMPTS):
        found = await services.zk.call(services.zk.catalog.topic_assignment, name)
        if found is None:
            raise UnknownTopicError(f"The topic '{name}' does not exist.")
        existing, version = found
        registered = await services.zk.call(services.zk.catalog.brokers)
        additions = plan_added_partitions(existing, count, manual,
                                          {b: info.rack for b, info in registered.items()})
        if validate_only:
            return additions
        if not recorded:  # KIP-599, once per topic: may raise THROTTLING_QUOTA_EXCEEDED
            mutation_quota.record(len(additions))
            recorded = True
        try:
            await services.zk.call(services.zk.catalog.add_partitions, name, additions, version)
        except StaleStateError:
            continue
        try:  # at once here; the assignment watch brings it to every broker anyway
            await services.topic_admin.reconcile_after_change()
        except Exception as exc:
            log.warning("reconciling after adding partitions to %s failed: %s", name, exc)
        return additions
    raise InvalidRequestError(f"The partitions of '{name}' kept changing concurrently.",
                              hint="retry the request")


async def _await_metadata(services: BrokerServices, added: Mapping[str, Sequence[int]],
                          timeout_s: float) -> None:
    """Wait (bounded) until this broker's metadata lists the ``added`` partitions."""
    deadline = time.monotonic() + min(max(timeout_s, 0.0), METADATA_WAIT_S)

    def listed(name: str, partitions: Sequence[int]) -> bool:
        meta = services.metadata.topics.get(name)
        return meta is not None and all(
            p in meta.assignment and (name, p) in services.metadata.partition_states
            for p in partitions)

    while time.monotonic() < deadline:
        if all(listed(name, partitions) for name, partitions in added.items()):
            return
        await asyncio.sleep(0.02)


async def create_partitions(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    timeout_s = request.timeout.total_seconds()
    counts: dict[str, int] = {}
    for topic in request.topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    alterable = authz.filter_authorized(
        services, frame, AclOperation.ALTER, ResourceType.TOPIC,
        (topic.name for topic in request.topics if counts[topic.name] == 1))
    results = []
    quota = controller_mutation_quota(services.quotas, frame)
    added: dict[str, list[int]] = {}
    duplicates_answered: set[str] = set()
    for topic in request.topics:
        result: dict[str, Any] = {"name": topic.name, "error_code": ErrorCode.none,
                                  "error_message": None}
        try:
            if counts[topic.name] > 1:
                if topic.name in duplicates_answered:
                    continue  # Kafka answers a repeated topic once (its results are a map)
                duplicates_answered.add(topic.name)
                raise InvalidRequestError("Duplicate topic in request.")
            if topic.name not in alterable:
                result.update(error_code=authz.TOPIC_AUTHORIZATION_FAILED,
                              error_message="The topic authorization is failed.")
                results.append(result)
                continue
            manual = (None if topic.assignments is None
                      else [tuple(a.broker_ids) for a in topic.assignments])
            additions = await grow_topic(services, topic.name, topic.count, manual,
                                         validate_only=request.validate_only,
                                         mutation_quota=quota)
            if not request.validate_only:
                added[topic.name] = sorted(additions)
        except LoglakeError as exc:
            result.update(error_code=exc.code, error_message=exc.message)
        results.append(result)
    if added:
        await _await_metadata(services, added, timeout_s)
    return with_mutation_throttle(
        quota, frame, build(response_class(37, frame.api_version), {"results": results}))


# ---------------------------------------------------------------------------- DeleteRecords


async def delete_records(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    deletable = authz.filter_authorized(services, frame, AclOperation.DELETE,
                                        ResourceType.TOPIC, (t.name for t in request.topics))
    wanted: dict[tuple[str, int], int] = {}
    refused: dict[tuple[str, int], LoglakeError] = {}
    for topic in request.topics:
        for partition in topic.partitions:
            key = (topic.name, partition.partition_index)
            if topic.name in deletable:
                wanted[key] = partition.offset
            else:
                refused[key] = LoglakeError("Topic authorization failed.",
                                            code=authz.TOPIC_AUTHORIZATION_FAILED)
    results: dict[tuple[str, int], int | LoglakeError] = {**refused}
    results |= await record_deletion.delete_records(
        wanted, request.timeout.total_seconds(), replicas=services.replicas,
        tier=services.tierer, metadata=services.metadata)
    topics = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            outcome = results[(topic.name, partition.partition_index)]
            if isinstance(outcome, LoglakeError):
                partitions.append({"partition_index": partition.partition_index,
                                   "low_watermark": -1, "error_code": outcome.code})
            else:
                partitions.append({"partition_index": partition.partition_index,
                                   "low_watermark": outcome, "error_code": ErrorCode.none})
        topics.append({"name": topic.name, "partitions": partitions})
    return build(response_class(21, frame.api_version), {"topics": topics})


# ---------------------------------------------------------------------------- ElectLeaders


async def elect_leaders(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    election_type = getattr(request, "election_type", election.PREFERRED)
    wanted = (None if request.topic_partitions is None
              else [(t.topic, p) for t in request.topic_partitions for p in t.partitions])
    cls = response_class(43, frame.api_version)
    if not authz.cluster_allowed(services, frame, AclOperation.ALTER):
        code = authz.CLUSTER_AUTHORIZATION_FAILED
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for topic, partition in wanted or ():
            by_topic.setdefault(topic, []).append(
                {"partition_id": partition, "error_code": code, "error_message": None})
        return build(cls, {"error_code": code, "replica_election_results": [
            {"topic": topic, "partition_result": partitions}
            for topic, partitions in by_topic.items()]})
    if election_type not in (election.PREFERRED, election.UNCLEAN):
        error = InvalidRequestError(f"Unknown election type {election_type}.")
        return build(cls, {"error_code": error.code, "replica_election_results":
                           _election_results(dict.fromkeys(wanted or (), error))})
    try:
        results = await services.controller.elect_leaders(wanted, election_type)
    except LoglakeError as exc:  # ZooKeeper unavailable: every partition says so
        return build(cls, {"error_code": exc.code, "replica_election_results":
                           _election_results(dict.fromkeys(wanted or (), exc))})
    results = await services.controller.await_elected(results, request.timeout.total_seconds())
    if wanted is None:
        results = {key: outcome for key, outcome in results.items()
                   if not isinstance(outcome, ElectionNotNeededError)}
    return build(cls, {"error_code": ErrorCode.none,
                       "replica_election_results": _election_results(results)})


def _election_results(
    results: Mapping[tuple[str, int], object],
) -> list[dict[str, Any]]:
    """Response entries of ElectLeaders outcomes (an error, or anything else: elected)."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), outcome in results.items():
        error = outcome if isinstance(outcome, LoglakeError) else None
        by_topic.setdefault(topic, []).append({
            "partition_id": partition,
            "error_code": ErrorCode.none if error is None else error.code,
            "error_message": None if error is None else error.message,
        })
    return [{"topic": topic, "partition_result": partitions}
            for topic, partitions in by_topic.items()]
