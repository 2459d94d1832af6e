"""The table of supported APIs: key, version range, handler. ApiVersions advertises exactly this.

The baseline is Kafka 4.0's (KIP-896: versions older than Kafka 2.1's were removed), and every
ceiling is Kafka 4.0's where the handlers implement every field and rule of that version.
Versions outside a row's range are answered as broker/server.py describes (UNSUPPORTED_VERSION
in a response the client can parse, else a closed connection, as Kafka does).

Where we differ from Kafka 4.0, and why:

* ListOffsets serves v0 (Kafka 4.0: 1-10): LinkedIn Burrow and sarama clients configured for
  Kafka before 0.10.1 ask for end offsets with it; it is implemented in full (``old_style_offsets``,
  ``max_num_offsets``; handlers/fetch.py). A client that negotiates never picks v0 while v1+ is
  offered, so the lower floor changes nothing for others. Its ceiling is 9: v8 lists the local
  log start (EARLIEST_LOCAL, -4; KIP-405), v9 the last tiered offset (LATEST_TIERED, -5;
  KIP-1005), as Kafka 3.9 serves them; v10 takes a timeout for remote reads (KIP-1075): not
  implemented yet.
* Fetch stops at v12 (Kafka 4.0: 4-17): v13 replaces topic names by topic ids in requests and
  responses (with UNKNOWN_TOPIC_ID/INCONSISTENT_TOPIC_ID rules), v15 moves the replica id into
  ReplicaState (KIP-903), v16 adds KIP-951's leader hints, v17 the replica directory id.
* TxnOffsetCommit stops at v3 (Kafka 4.0: 0-5): v4 belongs to transaction version 2 (KIP-890
  part 2: the coordinator adds the group to the transaction itself, no AddOffsetsToTxn), v5
  adds the TRANSACTION_ABORTABLE answer; clients negotiate v3 and send AddOffsetsToTxn first.
* AddPartitionsToTxn stops at v3 (Kafka 4.0: 0-5): v4+ is the broker-to-broker batched form
  of KIP-890 (partition leaders verifying transactions), which this coordinator does not take.
  EndTxn stops at v4 (Kafka 4.0: 0-5): v5 belongs to transaction version 2 (KIP-890 part 2: an
  epoch bump at every end, returned in the response). InitProducerId v5, AddOffsetsToTxn v4 and
  EndTxn v4 only allow the TRANSACTION_ABORTABLE code, which this coordinator never answers:
  they are answered as their previous versions, as Kafka does.
* The other rows equal Kafka 4.0's, for the APIs this broker has (Produce v10+ with KIP-951
  leader hints: handlers/leader_hints.py). DescribeConfigs v0 and DescribeLogDirs v0, which
  Kafka 4.0 removed, are not served, but their senders get a v0 response carrying
  UNSUPPORTED_VERSION (broker/legacy_schemas.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loglake.broker.handlers import (
    acls,
    admin,
    client_quotas,
    cluster_admin,
    describe_producers,
    fetch,
    groups,
    leader_hints,
    metadata,
    partition_admin,
    produce,
    reassignment,
    sasl,
    scram_users,
    transactions,
    txn_markers,
)

if TYPE_CHECKING:
    from loglake.broker.codec import RequestFrame
    from loglake.broker.services import BrokerServices

Handler = Callable[["BrokerServices", "RequestFrame"], Awaitable[Any]]
"""A request handler: the decoded request in, the response body out; it uses only what
:class:`~loglake.broker.services.BrokerServices` holds."""


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
        Api(0, "Produce", 3, 12, leader_hints.produce),
        Api(1, "Fetch", 4, 12, fetch.fetch),
        Api(2, "ListOffsets", 0, 9, fetch.list_offsets),
        Api(3, "Metadata", 0, 13, metadata.metadata),
        Api(8, "OffsetCommit", 2, 9, groups.offset_commit),
        Api(9, "OffsetFetch", 1, 9, groups.offset_fetch),
        Api(10, "FindCoordinator", 0, 6, groups.find_coordinator),
        Api(11, "JoinGroup", 2, 9, groups.join_group),
        Api(12, "Heartbeat", 0, 4, groups.heartbeat),
        Api(13, "LeaveGroup", 0, 5, groups.leave_group),
        Api(14, "SyncGroup", 0, 5, groups.sync_group),
        Api(15, "DescribeGroups", 0, 6, groups.describe_groups),
        Api(16, "ListGroups", 0, 5, groups.list_groups),
        Api(17, "SaslHandshake", 0, 1, sasl.sasl_handshake),
        Api(18, "ApiVersions", 0, 4, metadata.api_versions),
        Api(19, "CreateTopics", 2, 7, admin.create_topics),
        Api(20, "DeleteTopics", 1, 6, admin.delete_topics),
        Api(21, "DeleteRecords", 0, 2, partition_admin.delete_records),
        Api(22, "InitProducerId", 0, 5, produce.init_producer_id),
        Api(23, "OffsetForLeaderEpoch", 2, 4, fetch.offset_for_leader_epoch),
        Api(24, "AddPartitionsToTxn", 0, 3, transactions.add_partitions_to_txn),
        Api(25, "AddOffsetsToTxn", 0, 4, transactions.add_offsets_to_txn),
        Api(26, "EndTxn", 0, 4, transactions.end_txn),
        Api(27, "WriteTxnMarkers", 1, 1, txn_markers.write_txn_markers),
        Api(28, "TxnOffsetCommit", 0, 3, groups.txn_offset_commit),
        Api(29, "DescribeAcls", 1, 3, acls.describe_acls),
        Api(30, "CreateAcls", 1, 3, acls.create_acls),
        Api(31, "DeleteAcls", 1, 3, acls.delete_acls),
        Api(32, "DescribeConfigs", 1, 4, admin.describe_configs),
        Api(33, "AlterConfigs", 0, 2, cluster_admin.alter_configs),
        Api(35, "DescribeLogDirs", 1, 4, cluster_admin.describe_log_dirs),
        Api(36, "SaslAuthenticate", 0, 2, sasl.sasl_authenticate),
        Api(37, "CreatePartitions", 0, 3, partition_admin.create_partitions),
        Api(42, "DeleteGroups", 0, 2, groups.delete_groups),
        Api(43, "ElectLeaders", 0, 2, partition_admin.elect_leaders),
        Api(44, "IncrementalAlterConfigs", 0, 1, admin.incremental_alter_configs),
        Api(45, "AlterPartitionReassignments", 0, 0,
            reassignment.alter_partition_reassignments),
        Api(46, "ListPartitionReassignments", 0, 0, reassignment.list_partition_reassignments),
        Api(47, "OffsetDelete", 0, 0, groups.offset_delete),
        Api(48, "DescribeClientQuotas", 0, 1, client_quotas.describe_client_quotas),
        Api(49, "AlterClientQuotas", 0, 1, client_quotas.alter_client_quotas),
        Api(50, "DescribeUserScramCredentials", 0, 0,
            scram_users.describe_user_scram_credentials),
        Api(51, "AlterUserScramCredentials", 0, 0, scram_users.alter_user_scram_credentials),
        Api(60, "DescribeCluster", 0, 2, cluster_admin.describe_cluster),
        Api(65, "DescribeTransactions", 0, 0, transactions.describe_transactions),
        Api(66, "ListTransactions", 0, 1, transactions.list_transactions),
        Api(61, "DescribeProducers", 0, 0, describe_producers.describe_producers),
    )
}
