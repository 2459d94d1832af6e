"""DescribeProducers (v0, key 61, KIP-664): the active producers of partitions, as a replica
knows them. Decode, one call per partition, encode.

Each partition is answered by any broker hosting a replica, leader or follower, as Kafka (its
admin client asks the leader unless told a broker id, as ``kafka-transactions find-hanging
--broker-id`` does), from the partition's producer state
(``ReplicaManager.producer_summaries``): producer id and epoch, last sequence and timestamp,
the coordinator epoch of its last marker, and the first offset of its open transaction (-1 when
none). A broker without a replica answers NOT_LEADER_OR_FOLLOWER, an unknown partition
UNKNOWN_TOPIC_OR_PARTITION, an offline replica
KAFKA_STORAGE_ERROR; each with an ``error_message``. As Kafka, the topic needs READ
(handlers/authz.py): a refused topic's partitions answer TOPIC_AUTHORIZATION_FAILED and are not
looked at. Event loop only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.broker.handlers import authz
from loglake.broker.security.acl_model import AclOperation, ResourceType
from loglake.errors import LoglakeError

if TYPE_CHECKING:
    from loglake.broker.services import BrokerServices


async def describe_producers(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    topics = []
    for topic in request.topics:
        partitions = []
        readable = authz.allowed(services, frame, AclOperation.READ, ResourceType.TOPIC,
                                 topic.name)
        for index in topic.partition_indexes:
            entry: dict[str, Any] = {"partition_index": index, "error_code": ErrorCode.none,
                                     "error_message": None, "active_producers": []}
            if not readable:
                entry.update(error_code=authz.TOPIC_AUTHORIZATION_FAILED,
                             error_message="Topic authorization failed.")
                partitions.append(entry)
                continue
            try:
                summaries = services.replicas.producer_summaries(topic.name, index)
            except LoglakeError as exc:
                entry.update(error_code=exc.code, error_message=exc.message)
            else:
                entry["active_producers"] = [
                    {"producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
                     "last_sequence": s.last_sequence, "last_timestamp": s.last_timestamp,
                     "coordinator_epoch": s.coordinator_epoch,
                     "current_txn_start_offset": s.current_txn_start_offset}
                    for s in summaries]
            partitions.append(entry)
        topics.append({"name": topic.name, "partitions": partitions})
    return build(response_class(61, frame.api_version), {"topics": topics})
