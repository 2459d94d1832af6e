"""The loglake SDK: typed Producer, Consumer and Admin over confluent-kafka.

Errors are :class:`loglake.errors.LoglakeError`: :class:`BrokerError` when the broker answered
with a Kafka error code, :class:`ClientError` for client-side failures (timeouts, unreachable
cluster). Both carry ``code``, a :class:`kio.schema.errors.ErrorCode`. Each client takes
``security=`` (a :class:`SecurityConfig` or a mapping of Kafka client properties) for TLS and
SASL. :class:`SchemaProducer` / :class:`SchemaConsumer` add a schema registry (Avro, JSON
Schema, Protobuf with confluent-kafka's serializers; :mod:`loglake.client.schema_serde`).
"""

from loglake.client.admin import Admin
from loglake.client.consumer import AssignmentStrategy, Consumer, RebalanceCallback
from loglake.client.errors import BrokerError, ClientError
from loglake.client.model import (
    ConfigEntry,
    GroupDescription,
    GroupListing,
    GroupMember,
    Header,
    PartitionInfo,
    Record,
    RecordMetadata,
    TopicInfo,
    TopicPartitionKey,
)
from loglake.client.producer import Delivery, Producer
from loglake.client.schema_serde import SchemaConsumer, SchemaProducer, SchemaRecord
from loglake.client.security import SecurityConfig

__all__ = [
    "Admin",
    "AssignmentStrategy",
    "BrokerError",
    "ClientError",
    "ConfigEntry",
    "Consumer",
    "Delivery",
    "GroupDescription",
    "GroupListing",
    "GroupMember",
    "Header",
    "PartitionInfo",
    "Producer",
    "RebalanceCallback",
    "Record",
    "RecordMetadata",
    "SchemaConsumer",
    "SchemaProducer",
    "SchemaRecord",
    "SecurityConfig",
    "TopicInfo",
    "TopicPartitionKey",
]
