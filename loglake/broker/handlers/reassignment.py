"""AlterPartitionReassignments (45) and ListPartitionReassignments (46), KIP-455.

* **AlterPartitionReassignments** (:func:`alter_partition_reassignments`): per partition, the
  target replicas, or null to cancel a reassignment in progress. The decisions and writes are
  Controller.alter_reassignments' (broker/election.py says the rules); the answer comes once the
  reassignment is *recorded* in ZooKeeper, not when it completes, as in Kafka. Errors per
  partition: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT (empty, duplicate, negative,
  or a new replica on a broker that is not alive), NO_REASSIGNMENT_IN_PROGRESS (cancelling
  nothing); a partition named twice in one request takes its last entry. ZooKeeper trouble
  answers the top-level error (REQUEST_TIMED_OUT, retriable) with every partition carrying it.
  Served on any broker (decisions are version-checked), so a client that sends it to the
  controller Metadata names, as Kafka's clients do, is served there.
* **ListPartitionReassignments** (:func:`list_partition_reassignments`): the partitions being
  reassigned, with the full replica set and the replicas being added and removed, read from the
  topic znodes; null topics lists every one, otherwise only the named partitions that are
  moving (others, and unknown topics, are left out, as in Kafka).

Both need the cluster: ALTER for AlterPartitionReassignments, DESCRIBE for
ListPartitionReassignments; a refused request answers CLUSTER_AUTHORIZATION_FAILED at the top
and on every partition it names (Kafka's ``authorizeClusterOperation`` and the requests'
``getErrorResponse``).

Only v0 of each is served: Kafka 4.0's ceiling (v1 of AlterPartitionReassignments, KIP-860's
``allow_replication_factor_change``, came with Kafka 4.1).

Handlers translate requests and responses only; runs on the event loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.broker.handlers import authz
from loglake.broker.security.acl_model import AclOperation
from loglake.catalog.zookeeper import TopicReplicaAssignments
from loglake.errors import LoglakeError

if TYPE_CHECKING:
    from loglake.broker.services import BrokerServices

ALTER_KEY = 45
LIST_KEY = 46


async def alter_partition_reassignments(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    cls = response_class(ALTER_KEY, frame.api_version)
    if not authz.cluster_allowed(services, frame, AclOperation.ALTER):
        code, message = authz.CLUSTER_AUTHORIZATION_FAILED, _refusal(frame)
        return build(cls, {
            "throttle_time": 0, "error_code": code, "error_message": message,
            "responses": [{"name": topic.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": code,
                 "error_message": message} for p in topic.partitions]}
                for topic in request.topics]})
    wanted: dict[tuple[str, int], tuple[int, ...] | None] = {}
    for topic in request.topics:
        for partition in topic.partitions:
            wanted[(topic.name, partition.partition_index)] = (
                None if partition.replicas is None else tuple(int(r) for r in partition.replicas))
    try:
        results: dict[tuple[str, int], LoglakeError | None] = (
            await services.controller.alter_reassignments(wanted))
        top: LoglakeError | None = None
    except LoglakeError as exc:  # ZooKeeper unavailable: every partition says so
        results = dict.fromkeys(wanted, exc)
        top = exc
    responses = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            error = results.get((topic.name, partition.partition_index))
            partitions.append({
                "partition_index": partition.partition_index,
                "error_code": ErrorCode.none if error is None else error.code,
                "error_message": None if error is None else error.message,
            })
        responses.append({"name": topic.name, "partitions": partitions})
    return build(cls, {
        "throttle_time": 0,
        "error_code": ErrorCode.none if top is None else top.code,
        "error_message": None if top is None else top.message,
        "responses": responses,
    })


async def list_partition_reassignments(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    cls = response_class(LIST_KEY, frame.api_version)
    if not authz.cluster_allowed(services, frame, AclOperation.DESCRIBE):
        return build(cls, {
            "throttle_time": 0, "error_code": authz.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": _refusal(frame),
            "topics": [{"name": topic.name, "partitions": [
                {"partition_index": index, "replicas": [], "adding_replicas": [],
                 "removing_replicas": []} for index in topic.partition_indexes]}
                for topic in request.topics or ()]})
    found: dict[str, TopicReplicaAssignments] = {}
    wanted: dict[str, set[int]] | None = None
    try:
        if request.topics is None:
            found = await services.zk.call(services.zk.catalog.ongoing_reassignments)
        else:
            wanted = {}
            for topic in request.topics:
                wanted.setdefault(topic.name, set()).update(topic.partition_indexes)
                if topic.name not in found:
                    assignments = await services.zk.call(services.zk.catalog.replica_assignments,
                                                         topic.name)
                    if assignments is not None:
                        found[topic.name] = assignments
    except LoglakeError as exc:
        return build(cls, {"throttle_time": 0, "error_code": exc.code,
                           "error_message": exc.message, "topics": []})
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                       "topics": ongoing_topics(found, wanted)})


def _refusal(frame: RequestFrame) -> str:
    """Kafka's message for a request refused by ``authorizeClusterOperation``."""
    return f"Request {type(frame.body).__name__.removesuffix('Request')} is not authorized."


def ongoing_topics(found: dict[str, TopicReplicaAssignments],
                   wanted: dict[str, set[int]] | None) -> list[dict[str, Any]]:
    """The response's topics: partitions being reassigned (of ``wanted``, when given)."""
    topics = []
    for name, assignments in sorted(found.items()):
        partitions = [
            {"partition_index": index, "replicas": list(a.replicas),
             "adding_replicas": list(a.adding), "removing_replicas": list(a.removing)}
            for index, a in assignments.partitions.items()
            if a.reassigning and (wanted is None or index in wanted.get(name, ()))
        ]
        if partitions:
            topics.append({"name": name, "partitions": partitions})
    return topics
