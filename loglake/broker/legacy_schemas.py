"""Schemas of request versions that Kafka 4.0 removed (KIP-896) and kio therefore lacks.

kio generates its classes from Kafka 4.x's message JSON, where ``validVersions`` starts at the
KIP-896 baseline, so it cannot read or write these versions. The classes below are written in
kio's own form (frozen dataclasses whose fields carry ``kafka_type`` metadata, the class
variables kio's reader and writer look at), from the message JSON of Kafka 3.9, so kio's
native reader and writer, the request bounds check (broker/request_bounds.py) and
:func:`loglake.broker.codec.build` work on them unchanged. ``codec.request_class`` and
``codec.response_class`` consult :data:`LEGACY_REQUESTS` / :data:`LEGACY_RESPONSES` first.

Which versions, and why:

* ListOffsets v0 (request and response): served. LinkedIn Burrow (Debian's package, and any
  sarama client configured with ``Version`` below 0.10.1) asks for end offsets with it. The
  response carries ``old_style_offsets``, an array of offsets (see
  ``loglake.broker.handlers.fetch.list_offsets_v0``).
* DescribeConfigs v0 (request and response): not served (KIP-896 removed it), but answered with
  UNSUPPORTED_VERSION in each resource of a v0 response, which the sender can parse: sarama
  configured with ``Version`` below 1.1.0 (its default before 1.40) sends it, and an EOF told
  its users nothing.
* DescribeLogDirs v0: not served either, answered the same way (a v0 result for our log
  directory carrying UNSUPPORTED_VERSION); its format is exactly v1's (Kafka: "Version 1 is the
  same as version 0"), so kio's v1 classes are used.

Thread-safety: immutable module-level data.

No ``from __future__ import annotations`` here: kio reads the field annotations as types.
"""

from dataclasses import dataclass, field
from typing import Any, ClassVar

from kio.schema.describe_log_dirs.v1 import request as describe_log_dirs_v1_request
from kio.schema.describe_log_dirs.v1 import response as describe_log_dirs_v1_response
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

# ---------------------------------------------------------------------------- ListOffsets v0


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsPartitionV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    timestamp: i64 = field(metadata={"kafka_type": "int64"})
    max_num_offsets: i32 = field(metadata={"kafka_type": "int32"}, default=i32(1))


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsTopicV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata={"kafka_type": "string"})
    partitions: tuple[ListOffsetsPartitionV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    replica_id: i32 = field(metadata={"kafka_type": "int32"})
    topics: tuple[ListOffsetsTopicV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsPartitionResponseV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    old_style_offsets: tuple[i64, ...] = field(metadata={"kafka_type": "int64"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsTopicResponseV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata={"kafka_type": "string"})
    partitions: tuple[ListOffsetsPartitionResponseV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topics: tuple[ListOffsetsTopicResponseV0, ...]


# ------------------------------------------------------------------------ DescribeConfigs v0


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResourceV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(32)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    resource_type: i8 = field(metadata={"kafka_type": "int8"})
    resource_name: str = field(metadata={"kafka_type": "string"})
    configuration_keys: tuple[str, ...] | None = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(32)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    resources: tuple[DescribeConfigsResourceV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResourceResultV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(32)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata={"kafka_type": "string"})
    value: str | None = field(metadata={"kafka_type": "string"})
    read_only: bool = field(metadata={"kafka_type": "bool"})
    is_default: bool = field(metadata={"kafka_type": "bool"})
    is_sensitive: bool = field(metadata={"kafka_type": "bool"})


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResultV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(32)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"})
    resource_type: i8 = field(metadata={"kafka_type": "int8"})
    resource_name: str = field(metadata={"kafka_type": "string"})
    configs: tuple[DescribeConfigsResourceResultV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(32)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    results: tuple[DescribeConfigsResultV0, ...]


LEGACY_REQUESTS: dict[tuple[int, int], type[Any]] = {
    (2, 0): ListOffsetsRequest,
    (32, 0): DescribeConfigsRequest,
    (35, 0): describe_log_dirs_v1_request.DescribeLogDirsRequest,
}
"""(API key, version) → request class, for versions kio does not have."""

LEGACY_RESPONSES: dict[tuple[int, int], type[Any]] = {
    (2, 0): ListOffsetsResponse,
    (32, 0): DescribeConfigsResponse,
    (35, 0): describe_log_dirs_v1_response.DescribeLogDirsResponse,
}
"""(API key, version) → response class, for versions kio does not have."""
