"""Typed values the SDK hands out: records, delivery reports, topic and config descriptions.

All are frozen dataclasses built from confluent-kafka objects at the SDK boundary, so callers
never see librdkafka types.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

Header = tuple[str, bytes | None]
"""One record header: name and value (``None`` is a header with a null value)."""

HeadersInput = Mapping[str, bytes | str | None] | Iterable[tuple[str, bytes | str | None]]
"""Headers as accepted by ``send``: a mapping or a sequence of pairs (repeated names allowed)."""

Acks = Literal["0", "1", "all"]
Compression = Literal["none", "gzip", "snappy", "lz4", "zstd"]
StartPosition = Literal["earliest", "latest"] | int

ConfigSource = Literal[
    "unknown",
    "dynamic_topic_config",
    "dynamic_broker_config",
    "dynamic_default_broker_config",
    "static_broker_config",
    "default_config",
    "group_config",
]

ACKS_VALUES: tuple[Acks, ...] = ("0", "1", "all")
COMPRESSION_VALUES: tuple[Compression, ...] = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True)
class Record:
    """One consumed record.

    ``timestamp_ms`` is milliseconds since the epoch (``None`` if the broker sent none);
    ``headers`` keeps wire order and repeated names.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


@dataclass(frozen=True)
class RecordMetadata:
    """Where a produced record landed, as acknowledged by the partition leader.

    With ``acks="0"`` the leader does not answer, so ``offset`` is -1.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None


@dataclass(frozen=True)
class PartitionInfo:
    """One partition as the cluster metadata describes it (broker ids; leader -1 = none)."""

    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicInfo:
    """A topic and its partitions, ordered by partition id."""

    name: str
    partitions: tuple[PartitionInfo, ...]

    @property
    def replication_factor(self) -> int:
        """Replica count of the first partition (0 for a topic without partitions)."""
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclass(frozen=True)
class ConfigEntry:
    """One topic configuration value as DescribeConfigs reports it."""

    value: str | None
    source: ConfigSource
    is_default: bool
    is_read_only: bool = False
    is_sensitive: bool = False


def normalize_headers(headers: HeadersInput | None) -> list[tuple[str, bytes | None]]:
    """Headers as a list of ``(name, bytes | None)``; ``str`` values are encoded as UTF-8."""
    if headers is None:
        return []
    pairs: Iterable[tuple[str, bytes | str | None]] = (
        headers.items() if isinstance(headers, Mapping) else headers
    )
    result: list[tuple[str, bytes | None]] = []
    for name, value in pairs:
        if not isinstance(name, str):
            raise TypeError(f"header name must be str, got {type(name).__name__}")
        result.append((name, to_bytes(value, what=f"header {name!r}")))
    return result


def to_bytes(value: bytes | bytearray | memoryview | str | None, *, what: str) -> bytes | None:
    """``value`` as bytes: ``str`` is UTF-8 encoded, ``None`` stays ``None``."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"{what} must be bytes, str or None, got {type(value).__name__}")


def headers_from_wire(
    headers: Mapping[str, bytes | str | None] | Sequence[tuple[str, bytes | str | None]] | None,
) -> list[Header]:
    """Headers of a confluent-kafka ``Message`` as a fresh list (``None`` → empty)."""
    if not headers:
        return []
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return [(name, to_bytes(value, what=f"header {name!r}")) for name, value in pairs]


TopicPartitionKey = tuple[str, int]
"""A ``(topic, partition)`` pair, as rebalance callbacks and offset maps use it."""

IsolationLevel = Literal["read_committed", "read_uncommitted"]
"""What a consumer reads: only records of committed transactions (up to the last stable
offset; librdkafka's default, not the Java client's) or everything up to the high watermark."""

ISOLATION_LEVELS: tuple[IsolationLevel, ...] = ("read_committed", "read_uncommitted")


@dataclass(frozen=True)
class GroupMetadata:
    """A consumer's group identity (group id, generation, member id) as a transactional
    producer's ``send_offsets_to_transaction`` needs it; from :meth:`Consumer.group_metadata`.
    ``handle`` is librdkafka's opaque object."""

    group_id: str
    handle: object = field(repr=False, compare=False)

OffsetQuery = Literal["earliest", "latest"] | int
"""What :meth:`Admin.list_offsets` looks up: log start, log end, or the first offset whose
timestamp (ms since the epoch) is at or after the given value."""


@dataclass(frozen=True)
class GroupListing:
    """One consumer group as ``ListGroups`` reports it (``state`` like ``"Stable"``)."""

    group_id: str
    state: str
    is_simple: bool


@dataclass(frozen=True)
class GroupMember:
    """One member of a consumer group and the partitions assigned to it."""

    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None
    assignment: tuple[TopicPartitionKey, ...]


@dataclass(frozen=True)
class GroupDescription:
    """A consumer group: state (``Empty``, ``PreparingRebalance``, ``CompletingRebalance``,
    ``Stable``, ``Dead``), the assignor chosen, the coordinating broker id and the members."""

    group_id: str
    state: str
    assignor: str
    coordinator: int
    members: tuple[GroupMember, ...]

    @property
    def is_empty(self) -> bool:
        """No member is connected (``Empty`` or ``Dead``): offsets may be changed."""
        return not self.members and self.state in ("Empty", "Dead", "Unknown")


TRANSACTION_STATES: tuple[str, ...] = (
    "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
    "Dead", "PrepareEpochFence",
)
"""The transaction coordinator's states, as ListTransactions and DescribeTransactions name
them (Kafka's ``TransactionState``)."""


@dataclass(frozen=True)
class TransactionListing:
    """One transactional id as ListTransactions reports it, with the broker that answered
    (its transaction coordinator)."""

    transactional_id: str
    producer_id: int
    state: str
    coordinator: int


@dataclass(frozen=True)
class TransactionDescription:
    """A transactional id as its coordinator describes it (DescribeTransactions).

    ``start_time_ms`` is when the open transaction began (ms since the epoch; ``None`` when no
    transaction is open); ``partitions`` are the ``(topic, partition)`` pairs it added, the
    consumer-offsets partitions of ``send_offsets_to_transaction`` included."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int | None
    partitions: tuple[TopicPartitionKey, ...]
    coordinator: int
