"""The table of supported APIs: key, version range, handler. ApiVersions advertises exactly this.

Version floors: Produce v3+ and Fetch v4+ (RecordBatch v2 only, like Kafka 4.0). Ceilings are the
highest versions whose every field the handlers implement (Fetch stops at v12, before topic
ids replace names in v13).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loglake.broker.handlers import admin, fetch, groups, metadata, produce

if TYPE_CHECKING:
    from loglake.broker.broker import Broker
    from loglake.broker.codec import RequestFrame

Handler = Callable[["Broker", "RequestFrame"], Awaitable[Any]]


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


API_TABLE: dict[int, Api] = {
    api.key: api
    for api in (
        Api(0, "Produce", 3, 9, produce.produce),
        Api(1, "Fetch", 4, 12, fetch.fetch),
        Api(2, "ListOffsets", 1, 7, fetch.list_offsets),
        Api(3, "Metadata", 0, 12, metadata.metadata),
        Api(8, "OffsetCommit", 2, 9, groups.offset_commit),
        Api(9, "OffsetFetch", 1, 9, groups.offset_fetch),
        Api(10, "FindCoordinator", 0, 4, groups.find_coordinator),
        Api(11, "JoinGroup", 0, 9, groups.join_group),
        Api(12, "Heartbeat", 0, 4, groups.heartbeat),
        Api(13, "LeaveGroup", 0, 5, groups.leave_group),
        Api(14, "SyncGroup", 0, 5, groups.sync_group),
        Api(15, "DescribeGroups", 0, 5, groups.describe_groups),
        Api(16, "ListGroups", 0, 5, groups.list_groups),
        Api(18, "ApiVersions", 0, 3, metadata.api_versions),
        Api(19, "CreateTopics", 2, 7, admin.create_topics),
        Api(20, "DeleteTopics", 1, 6, admin.delete_topics),
        Api(22, "InitProducerId", 0, 4, produce.init_producer_id),
        Api(23, "OffsetForLeaderEpoch", 2, 4, fetch.offset_for_leader_epoch),
        Api(32, "DescribeConfigs", 1, 4, admin.describe_configs),
        Api(42, "DeleteGroups", 0, 2, groups.delete_groups),
        Api(44, "IncrementalAlterConfigs", 0, 1, admin.incremental_alter_configs),
        Api(47, "OffsetDelete", 0, 0, groups.offset_delete),
    )
}
