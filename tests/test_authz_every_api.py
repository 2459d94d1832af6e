"""Every API the broker serves, under the ACL authorizer with default deny: refused (with
Kafka's code) for a principal without ACLs, accepted once the ACLs Kafka's ``KafkaApis`` names
for it exist.

The test iterates over ``loglake.broker.apis.API_TABLE``, so an API added later without a row
in :data:`RULES` fails here until someone states (and checks) its authorization. Each row
names the request (a minimal valid one, raw wire), where its error codes are, the code Kafka
answers without ACLs (None where Kafka checks nothing or filters silently), and the ACLs that
make it pass, each with Kafka's rule as a comment (Kafka 4.0, ``KafkaApis.handle*``). The
APIs that filter instead of refusing (Metadata for all topics, ListGroups, ListTransactions)
are checked in :data:`LISTINGS` too: what the principal may not DESCRIBE is left out.

The client connects over PLAINTEXT: its principal is ``User:ANONYMOUS``. ACLs are written to
ZooKeeper and reach the broker through the change notifications; every step waits for the
broker to show the change (bounded), never a fixed time.
"""

from __future__ import annotations

import dataclasses
import typing
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from loglake.broker.apis import API_TABLE
from loglake.broker.codec import request_class
from loglake.catalog.acls import AclStore
from loglake.dev.harness import DevCluster
from tests.authz_util import (
    AUTHORIZATION_CODES,
    AUTHORIZER,
    CLUSTER,
    Grants,
    eventually,
)
from tests.wire import WireClient

TOPIC_AUTHZ = ErrorCode.topic_authorization_failed
GROUP_AUTHZ = ErrorCode.group_authorization_failed
CLUSTER_AUTHZ = ErrorCode.cluster_authorization_failed
TXN_AUTHZ = ErrorCode.transactional_id_authorization_failed
STEM = f"sweep-{uuid.uuid4().hex[:8]}"
NOBODY = "User:sweep-nobody"


@dataclass(frozen=True)
class Names:
    topic: str = STEM                 # exists, one partition
    victim: str = STEM + "-victim"    # exists; DeleteTopics deletes it
    new: str = STEM + "-new"          # CreateTopics creates it
    group: str = STEM + "-g"
    txn: str = STEM + "-txn"
    # never initialized: kio's reader refuses the -1 start time Kafka (and loglake) answer
    # for an Empty transaction, so DescribeTransactions asks for an unknown id
    described_txn: str = STEM + "-txn-unknown"
    listed_group: str = STEM + "-listed-g"      # has a committed offset
    listed_txn: str = STEM + "-listed-txn"      # has a producer id


N = Names()


@dataclass(frozen=True)
class Rule:
    """One API's authorization: request ``version`` with ``body``, the response's error codes
    by ``codes``, the code without ACLs (``refused``; None: Kafka checks nothing, or filters
    without an error), and the ACLs (resource type, name, operation) that make it pass."""

    version: int
    body: dict[str, Any]
    codes: Callable[[Any], list[int]]
    refused: int | None
    grants: tuple[tuple[str, str, str], ...] = ()


def top(r: Any) -> list[int]:
    return [int(r.error_code)]


def _one_partition(topic: str) -> list[dict[str, Any]]:
    return [{"name": topic, "partition_indexes": [0]}]


RULES: dict[int, Rule] = {
    # handleProduceRequest: WRITE on each topic (TOPIC_AUTHORIZATION_FAILED per partition)
    0: Rule(9, {"acks": 1, "timeout": 5000, "topic_data": [
        {"name": N.topic, "partition_data": [{"index": 0, "records": None}]}]},
        lambda r: [int(p.error_code) for t in r.responses for p in t.partition_responses],
        TOPIC_AUTHZ, (("Topic", N.topic, "Write"),)),
    # handleFetchRequest (consumer): READ on each topic
    1: Rule(12, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                 "topics": [{"topic": N.topic, "partitions": [
                     {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]},
            lambda r: [int(p.error_code) for t in r.responses for p in t.partitions],
            TOPIC_AUTHZ, (("Topic", N.topic, "Read"),)),
    # handleListOffsetRequest: DESCRIBE on each topic
    2: Rule(7, {"replica_id": -1, "topics": [{"name": N.topic, "partitions": [
        {"partition_index": 0, "timestamp": -1}]}]},
        lambda r: [int(p.error_code) for t in r.topics for p in t.partitions],
        TOPIC_AUTHZ, (("Topic", N.topic, "Describe"),)),
    # handleTopicMetadataRequest: DESCRIBE per topic; a named topic without it answers
    # TOPIC_AUTHORIZATION_FAILED (the all-topics list hides it)
    3: Rule(9, {"topics": [{"name": N.topic}], "allow_auto_topic_creation": False},
            lambda r: [int(t.error_code) for t in r.topics],
            TOPIC_AUTHZ, (("Topic", N.topic, "Describe"),)),
    # handleOffsetCommitRequest: READ on the group, then READ on each topic
    8: Rule(8, {"group_id": N.group, "generation_id_or_member_epoch": -1, "member_id": "",
                "topics": [{"name": N.topic, "partitions": [
                    {"partition_index": 0, "committed_offset": 0}]}]},
            lambda r: [int(p.error_code) for t in r.topics for p in t.partitions],
            GROUP_AUTHZ, (("Group", N.group, "Read"), ("Topic", N.topic, "Read"))),
    # handleOffsetFetchRequest: DESCRIBE on the group; topics filtered by DESCRIBE
    9: Rule(8, {"groups": [{"group_id": N.group, "topics": [
        {"name": N.topic, "partition_indexes": [0]}]}]},
        lambda r: [int(g.error_code) for g in r.groups]
        + [int(p.error_code) for g in r.groups for t in g.topics for p in t.partitions],
        GROUP_AUTHZ, (("Group", N.group, "Describe"), ("Topic", N.topic, "Describe"))),
    # handleFindCoordinatorRequest: DESCRIBE on the group (DESCRIBE on a transactional id)
    10: Rule(4, {"key_type": 0, "coordinator_keys": [N.group]},
             lambda r: [int(c.error_code) for c in r.coordinators],
             GROUP_AUTHZ, (("Group", N.group, "Describe"),)),
    # handleJoinGroupRequest: READ on the group
    11: Rule(5, {"group_id": N.group, "session_timeout": 10000,
                 "rebalance_timeout": 10000, "member_id": "", "protocol_type": "consumer",
                 "protocols": [{"name": "range", "metadata": b""}]},
             top, GROUP_AUTHZ, (("Group", N.group, "Read"),)),
    # handleHeartbeatRequest: READ on the group
    12: Rule(3, {"group_id": N.group, "generation_id": 1, "member_id": "m"},
             top, GROUP_AUTHZ, (("Group", N.group, "Read"),)),
    # handleLeaveGroupRequest: READ on the group
    13: Rule(3, {"group_id": N.group, "members": [{"member_id": "m"}]},
             top, GROUP_AUTHZ, (("Group", N.group, "Read"),)),
    # handleSyncGroupRequest: READ on the group
    14: Rule(3, {"group_id": N.group, "generation_id": 1, "member_id": "m",
                 "assignments": []},
             top, GROUP_AUTHZ, (("Group", N.group, "Read"),)),
    # handleDescribeGroupsRequest: DESCRIBE on each group
    15: Rule(5, {"groups": [N.group], "include_authorized_operations": True},
             lambda r: [int(g.error_code) for g in r.groups],
             GROUP_AUTHZ, (("Group", N.group, "Describe"),)),
    # handleListGroupsRequest: DESCRIBE on the cluster lists all, else the groups with
    # DESCRIBE are listed: never an error
    16: Rule(4, {"states_filter": []}, top, None, (("Cluster", CLUSTER, "Describe"),)),
    # handleSaslHandshakeRequest: no authorization (on a PLAINTEXT listener: ILLEGAL_SASL_STATE)
    17: Rule(1, {"mechanism": "PLAIN"}, top, None),
    # handleApiVersionsRequest: no authorization
    18: Rule(3, {"client_software_name": "sweep", "client_software_version": "1"},
             top, None),
    # handleCreateTopicsRequest: CREATE on the cluster or on the topic
    19: Rule(7, {"timeout": 15000, "validate_only": True, "topics": [
        {"name": N.new, "num_partitions": 1, "replication_factor": 1}]},
        lambda r: [int(t.error_code) for t in r.topics],
        TOPIC_AUTHZ, (("Topic", N.new, "Create"),)),
    # handleDeleteTopicsRequest: DELETE on each topic
    20: Rule(6, {"timeout": 15000, "topics": [{"name": N.victim}]},
             lambda r: [int(t.error_code) for t in r.responses],
             TOPIC_AUTHZ, (("Topic", N.victim, "Delete"),)),
    # handleDeleteRecordsRequest: DELETE on each topic
    21: Rule(2, {"timeout": 15000, "topics": [{"name": N.topic, "partitions": [
        {"partition_index": 0, "offset": 0}]}]},
        lambda r: [int(p.error_code) for t in r.topics for p in t.partitions],
        TOPIC_AUTHZ, (("Topic", N.topic, "Delete"),)),
    # handleInitProducerIdRequest: WRITE on the transactional id (without one:
    # IDEMPOTENT_WRITE on the cluster or WRITE on some topic, KIP-679)
    22: Rule(4, {"transactional_id": N.txn, "transaction_timeout": 60000,
                 "producer_id": -1, "producer_epoch": -1},
             top, TXN_AUTHZ, (("TransactionalId", N.txn, "Write"),)),
    # handleOffsetForLeaderEpochRequest (client): DESCRIBE on each topic
    23: Rule(4, {"replica_id": -1, "topics": [{"topic": N.topic, "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
        lambda r: [int(p.error_code) for t in r.topics for p in t.partitions],
        TOPIC_AUTHZ, (("Topic", N.topic, "Describe"),)),
    # handleAddPartitionsToTxnRequest: WRITE on the transactional id, then WRITE on each topic
    24: Rule(3, {"v3_and_below_transactional_id": N.txn, "v3_and_below_producer_id": 1,
                 "v3_and_below_producer_epoch": 0,
                 "v3_and_below_topics": [{"name": N.topic, "partitions": [0]}]},
             lambda r: [int(p.partition_error_code) for t in r.results_by_topic_v3_and_below
                        for p in t.results_by_partition],
             TXN_AUTHZ, (("TransactionalId", N.txn, "Write"), ("Topic", N.topic, "Write"))),
    # handleAddOffsetsToTxnRequest: WRITE on the transactional id, then READ on the group
    25: Rule(3, {"transactional_id": N.txn, "producer_id": 1, "producer_epoch": 0,
                 "group_id": N.group},
             top, TXN_AUTHZ, (("TransactionalId", N.txn, "Write"), ("Group", N.group, "Read"))),
    # handleEndTxnRequest: WRITE on the transactional id
    26: Rule(3, {"transactional_id": N.txn, "producer_id": 1, "producer_epoch": 0,
                 "committed": False},
             top, TXN_AUTHZ, (("TransactionalId", N.txn, "Write"),)),
    # handleWriteTxnMarkersRequest: CLUSTER_ACTION on the cluster (brokers only)
    27: Rule(1, {"markers": [{"producer_id": 1, "producer_epoch": 0,
                              "transaction_result": False, "coordinator_epoch": 0,
                              "topics": _one_partition(N.topic)}]},
             lambda r: [int(p.error_code) for m in r.markers for t in m.topics
                        for p in t.partitions],
             CLUSTER_AUTHZ, (("Cluster", CLUSTER, "ClusterAction"),)),
    # handleTxnOffsetCommitRequest: WRITE on the transactional id, READ on the group, READ on
    # each topic
    28: Rule(3, {"transactional_id": N.txn, "group_id": N.group, "producer_id": 1,
                 "producer_epoch": 0, "generation_id": -1, "member_id": "",
                 "topics": [{"name": N.topic, "partitions": [
                     {"partition_index": 0, "committed_offset": 0}]}]},
             lambda r: [int(p.error_code) for t in r.topics for p in t.partitions],
             TXN_AUTHZ, (("TransactionalId", N.txn, "Write"), ("Group", N.group, "Read"),
                         ("Topic", N.topic, "Read"))),
    # handleDescribeAcls (AclApis): DESCRIBE on the cluster
    29: Rule(3, {"resource_type_filter": 2, "resource_name_filter": N.topic,
                 "pattern_type_filter": 3, "principal_filter": NOBODY, "host_filter": None,
                 "operation": 1, "permission_type": 1},
             top, CLUSTER_AUTHZ, (("Cluster", CLUSTER, "Describe"),)),
    # handleCreateAcls (AclApis): ALTER on the cluster
    30: Rule(3, {"creations": [{"resource_type": 2, "resource_name": N.topic,
                                "resource_pattern_type": 3, "principal": NOBODY, "host": "*",
                                "operation": 3, "permission_type": 3}]},
             lambda r: [int(c.error_code) for c in r.results],
             CLUSTER_AUTHZ, (("Cluster", CLUSTER, "Alter"),)),
    # handleDeleteAcls (AclApis): ALTER on the cluster
    31: Rule(3, {"filters": [{"resource_type_filter": 2, "resource_name_filter": N.topic,
                              "pattern_type_filter": 3, "principal_filter": NOBODY,
                              "host_filter": None, "operation": 1, "permission_type": 1}]},
             lambda r: [int(f.error_code) for f in r.filter_results],
             CLUSTER_AUTHZ, (("Cluster", CLUSTER, "Alter"),)),
    # handleDescribeConfigsRequest: DESCRIBE_CONFIGS on the topic (the cluster for brokers)
    32: Rule(4, {"resources": [{"resource_type": 2, "resource_name": N.topic,
                                "configuration_keys": None}]},
             lambda r: [int(x.error_code) for x in r.results],
             TOPIC_AUTHZ, (("Topic", N.topic, "DescribeConfigs"),)),
    # handleAlterConfigsRequest: ALTER_CONFIGS on the topic (the cluster for brokers)
    33: Rule(2, {"validate_only": True, "resources": [
        {"resource_type": 2, "resource_name": N.topic,
         "configs": [{"name": "retention.ms", "value": "3600000"}]}]},
        lambda r: [int(x.error_code) for x in r.responses],
        TOPIC_AUTHZ, (("Topic", N.topic, "AlterConfigs"),)),
    # handleDescribeLogDirsRequest: DESCRIBE on the cluster
    35: Rule(4, {"topics": None}, top, CLUSTER_AUTHZ, (("Cluster", CLUSTER, "Describe"),)),
    # handleSaslAuthenticateRequest: no authorization (on a PLAINTEXT listener:
    # ILLEGAL_SASL_STATE)
    36: Rule(2, {"auth_bytes": b"\x00a\x00b"}, top, None),
    # handleCreatePartitionsRequest: ALTER on each topic
    37: Rule(3, {"timeout": 15000, "validate_only": True, "topics": [
        {"name": N.topic, "count": 2, "assignments": None}]},
        lambda r: [int(x.error_code) for x in r.results],
        TOPIC_AUTHZ, (("Topic", N.topic, "Alter"),)),
    # handleDeleteGroupsRequest: DELETE on each group
    42: Rule(2, {"groups_names": [N.group]},
             lambda r: [int(g.error_code) for g in r.results],
             GROUP_AUTHZ, (("Group", N.group, "Delete"),)),
    # handleElectLeaders: ALTER on the cluster
    43: Rule(2, {"election_type": 0, "timeout": 15000, "topic_partitions": [
        {"topic": N.topic, "partitions": [0]}]},
        lambda r: [int(r.error_code)] + [int(p.error_code) for t in r.replica_election_results
                                         for p in t.partition_result],
        CLUSTER_AUTHZ, (("Cluster", CLUSTER, "Alter"),)),
    # handleIncrementalAlterConfigsRequest: ALTER_CONFIGS on the topic
    44: Rule(1, {"validate_only": True, "resources": [
        {"resource_type": 2, "resource_name": N.topic, "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "3600000"}]}]},
        lambda r: [int(x.error_code) for x in r.responses],
        TOPIC_AUTHZ, (("Topic", N.topic, "AlterConfigs"),)),
    # handleAlterPartitionReassignmentsRequest: ALTER on the cluster
    45: Rule(0, {"timeout": 15000, "topics": []}, top, CLUSTER_AUTHZ,
             (("Cluster", CLUSTER, "Alter"),)),
    # handleListPartitionReassignmentsRequest: DESCRIBE on the cluster
    46: Rule(0, {"timeout": 15000, "topics": None}, top, CLUSTER_AUTHZ,
             (("Cluster", CLUSTER, "Describe"),)),
    # handleOffsetDeleteRequest: DELETE on the group, then READ on each topic
    47: Rule(0, {"group_id": N.group, "topics": [
        {"name": N.topic, "partitions": [{"partition_index": 0}]}]},
        top, GROUP_AUTHZ, (("Group", N.group, "Delete"), ("Topic", N.topic, "Read"))),
    # handleDescribeClientQuotasRequest: DESCRIBE_CONFIGS on the cluster
    48: Rule(1, {"components": [], "strict": False}, top, CLUSTER_AUTHZ,
             (("Cluster", CLUSTER, "DescribeConfigs"),)),
    # handleAlterClientQuotasRequest: ALTER_CONFIGS on the cluster
    49: Rule(1, {"validate_only": True, "entries": [
        {"entity": [{"entity_type": "user", "entity_name": "sweep-nobody"}],
         "ops": [{"key": "producer_byte_rate", "value": 1048576.0, "remove": False}]}]},
        lambda r: [int(e.error_code) for e in r.entries],
        CLUSTER_AUTHZ, (("Cluster", CLUSTER, "AlterConfigs"),)),
    # handleDescribeUserScramCredentialsRequest: DESCRIBE on the cluster
    50: Rule(0, {"users": None}, top, CLUSTER_AUTHZ, (("Cluster", CLUSTER, "Describe"),)),
    # handleAlterUserScramCredentialsRequest: ALTER on the cluster
    51: Rule(0, {"deletions": [{"name": "sweep-nobody", "mechanism": 1}], "upsertions": []},
             lambda r: [int(x.error_code) for x in r.results],
             CLUSTER_AUTHZ, (("Cluster", CLUSTER, "Alter"),)),
    # handleDescribeCluster: no authorization (the authorized-operations bitfield needs
    # DESCRIBE on the cluster)
    60: Rule(0, {"include_cluster_authorized_operations": False}, top, None),
    # handleDescribeProducersRequest: READ on each topic
    61: Rule(0, {"topics": _one_partition(N.topic)},
             lambda r: [int(p.error_code) for t in r.topics for p in t.partitions],
             TOPIC_AUTHZ, (("Topic", N.topic, "Read"),)),
    # handleDescribeTransactionsRequest: DESCRIBE on each transactional id
    65: Rule(0, {"transactional_ids": [N.described_txn]},
             lambda r: [int(s.error_code) for s in r.transaction_states],
             TXN_AUTHZ, (("TransactionalId", N.described_txn, "Describe"),)),
    # handleListTransactionsRequest: the transactional ids with DESCRIBE are listed, never an
    # error
    66: Rule(1, {"state_filters": [], "producer_id_filters": []}, top, None,
             (("TransactionalId", N.txn, "Describe"),)),
}


@dataclass(frozen=True)
class Listing:
    """An API that lists only what the principal may DESCRIBE (Kafka filters, no error):
    ``name`` is left out of ``names(response)`` without ``grants`` and listed with them."""

    version: int
    body: dict[str, Any]
    names: Callable[[Any], set[str]]
    name: str
    grants: tuple[tuple[str, str, str], ...]


LISTINGS: dict[int, Listing] = {
    # handleTopicMetadataRequest: all topics: those without DESCRIBE are left out
    3: Listing(9, {"topics": None, "allow_auto_topic_creation": False},
               lambda r: {t.name for t in r.topics}, N.topic,
               (("Topic", N.topic, "Describe"),)),
    # handleListGroupsRequest: without DESCRIBE on the cluster, the groups with DESCRIBE
    16: Listing(4, {"states_filter": []}, lambda r: {g.group_id for g in r.groups},
                N.listed_group, (("Group", N.listed_group, "Describe"),)),
    # handleListTransactionsRequest: the transactional ids with DESCRIBE
    66: Listing(1, {"state_filters": [], "producer_id_filters": []},
                lambda r: {t.transactional_id for t in r.transaction_states}, N.listed_txn,
                (("TransactionalId", N.listed_txn, "Describe"),)),
}


# ------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
            ) -> Iterator[DevCluster]:
    """One broker with the ACL authorizer, no super users, default deny; N.topic and
    N.victim exist."""
    data = tmp_path_factory.mktemp("authz-every-api")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=AUTHORIZER) as dev:
        client = KazooClient(hosts=dev.zookeeper_connect, timeout=10)
        client.start(timeout=20)
        try:
            grants = Grants(AclStore(client))
            grants.allow("Cluster", CLUSTER, "Create")
            with WireClient.connect(dev.bootstrap_servers) as wire:
                for topic in (N.topic, N.victim):
                    eventually(lambda topic=topic: wire.request(19, 7, {  # type: ignore[misc]
                        "timeout": 15000, "topics": [
                            {"name": topic, "num_partitions": 1, "replication_factor": 1}]}
                    ).topics[0].error_code, lambda code: code == ErrorCode.none,
                        f"creating {topic}")
                grants.allow("Group", N.listed_group, "Read")
                grants.allow("Topic", N.topic, "Read")
                grants.allow("TransactionalId", N.listed_txn, "Write")
                eventually(lambda: wire.request(8, 8, {
                    "group_id": N.listed_group, "generation_id_or_member_epoch": -1,
                    "member_id": "", "topics": [{"name": N.topic, "partitions": [
                        {"partition_index": 0, "committed_offset": 0}]}]}
                ).topics[0].partitions[0].error_code, lambda code: code == ErrorCode.none,
                    f"an offset of {N.listed_group}")
                eventually(lambda: wire.request(22, 4, {
                    "transactional_id": N.listed_txn, "transaction_timeout": 60000,
                    "producer_id": -1, "producer_epoch": -1}).error_code,
                    lambda code: code == ErrorCode.none, f"a producer id for {N.listed_txn}")
            grants.remove_all()  # each test waits for its refusal (bounded)
        finally:
            client.stop()
            client.close()
        yield dev


@pytest.fixture(scope="module")
def store(secured: DevCluster) -> Iterator[AclStore]:
    client = KazooClient(hosts=secured.zookeeper_connect, timeout=10)
    client.start(timeout=20)
    try:
        yield AclStore(client)
    finally:
        client.stop()
        client.close()


# ---------------------------------------------------------------------------------- tests


def test_every_served_api_has_a_rule() -> None:
    """A new API in the table must come with its authorization rule here."""
    assert sorted(set(API_TABLE) - set(RULES)) == []
    assert sorted(set(RULES) - set(API_TABLE)) == []


def _unknown_fields(cls: Any, body: dict[str, Any], path: str) -> list[str]:
    """Keys of ``body`` (recursively) that request entity ``cls`` lacks (the codec's ``build``
    drops them silently, which would make a rule test something else than it says)."""
    fields = {f.name for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    out = []
    for key, value in body.items():
        if key not in fields:
            out.append(f"{path}.{key}")
            continue
        nested = [a for a in (hints[key], *typing.get_args(hints[key]))
                  if dataclasses.is_dataclass(a)]
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, dict) and nested:
                out.extend(_unknown_fields(nested[0], item, f"{path}.{key}"))
    return out


def test_rule_bodies_name_real_fields() -> None:
    unknown = [field for key, rule in RULES.items()
               for field in _unknown_fields(request_class(key, rule.version), rule.body,
                                            API_TABLE[key].name)]
    assert unknown == []


@pytest.mark.parametrize("api_key", sorted(API_TABLE))
def test_api_refused_without_acls_and_allowed_with_them(
        secured: DevCluster, store: AclStore, api_key: int) -> None:
    api = API_TABLE[api_key]
    rule = RULES.get(api_key)
    assert rule is not None, f"{api.name} (key {api_key}) has no authorization rule here"
    assert api.supports(rule.version)
    grants = Grants(store)
    try:
        with WireClient.connect(secured.bootstrap_servers, timeout=20) as wire:
            def codes() -> list[int]:
                return rule.codes(wire.request(api_key, rule.version, rule.body))

            if rule.refused is None:
                # no authorization (or silent filtering): never an authorization error
                answer = codes()
                assert not AUTHORIZATION_CODES & set(answer), (api.name, answer)
            else:
                # an earlier test's revocations may still be on their way: bounded wait
                eventually(codes, lambda c: rule.refused in c,
                           f"{api.name} refused with {ErrorCode(rule.refused).name}")
            for resource_type, name, operation in rule.grants:
                grants.allow(resource_type, name, operation)
            eventually(codes, lambda c: not AUTHORIZATION_CODES & set(c),
                       f"{api.name} allowed with {rule.grants}")
    finally:
        grants.remove_all()
        if api_key == 30:  # the ACL CreateAcls wrote
            store.remove("Topic", N.topic, principal=NOBODY, operation="Read",
                         )


@pytest.mark.parametrize("api_key", sorted(LISTINGS))
def test_listing_hides_what_the_principal_may_not_describe(
        secured: DevCluster, store: AclStore, api_key: int) -> None:
    listing = LISTINGS[api_key]
    grants = Grants(store)
    try:
        with WireClient.connect(secured.bootstrap_servers, timeout=20) as wire:
            def names() -> set[str]:
                response = wire.request(api_key, listing.version, listing.body)
                assert int(getattr(response, "error_code", 0)) == ErrorCode.none
                return listing.names(response)

            eventually(names, lambda listed: listing.name not in listed,
                       f"{API_TABLE[api_key].name} hides {listing.name}")
            for resource_type, name, operation in listing.grants:
                grants.allow(resource_type, name, operation)
            eventually(names, lambda listed: listing.name in listed,
                       f"{API_TABLE[api_key].name} lists {listing.name} with DESCRIBE")
    finally:
        grants.remove_all()
