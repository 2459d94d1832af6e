"""The loglake SDK: typed Producer, Consumer and Admin over confluent-kafka.

Errors are :class:`loglake.errors.LoglakeError`: :class:`BrokerError` when the broker answered
with a Kafka error code, :class:`ClientError` for client-side failures (timeouts, unreachable
cluster). Both carry ``code``, a :class:`kio.schema.errors.ErrorCode`.
"""

from loglake.client.admin import Admin
from loglake.client.consumer import Consumer
from loglake.client.errors import BrokerError, ClientError
from loglake.client.model import (
    ConfigEntry,
    Header,
    PartitionInfo,
    Record,
    RecordMetadata,
    TopicInfo,
)
from loglake.client.producer import Delivery, Producer

__all__ = [
    "Admin",
    "BrokerError",
    "ClientError",
    "ConfigEntry",
    "Consumer",
    "Delivery",
    "Header",
    "PartitionInfo",
    "Producer",
    "Record",
    "RecordMetadata",
    "TopicInfo",
]
