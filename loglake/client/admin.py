"""Cluster administration: topics (create, delete, list, describe, configs, add partitions),
records (delete below an offset), leader elections, partition reassignments and the dynamic
broker configs that throttle them, consumer groups (list, describe, committed offsets, reset,
delete), transactions (list, describe) and partition offset look-ups.

Partition reassignments (AlterPartitionReassignments, ListPartitionReassignments) are sent as
raw Kafka requests (``loglake.client._wire``) to the controller that Metadata names, and the
transaction calls to the brokers as Kafka's AdminClient sends them: ListTransactions to every
live broker (each answers for the transactional ids it coordinates; the answers are merged),
DescribeTransactions to the id's coordinator (FindCoordinator key type 1). confluent-kafka has
no call for these; everything else goes through confluent-kafka.

Every call is bounded by a timeout (the object's ``timeout`` unless the call passes its own):
librdkafka itself would keep retrying an unreachable cluster forever. While waiting on a request
the admin client is polled, so ``error_cb`` (connection failures) and logs are served and a
timeout can report why the cluster did not answer.

``create_topic``, ``delete_topic`` and ``create_partitions`` wait, by default, until cluster
metadata reflects the change (all partitions have a leader / the topic is gone), so a producer or
consumer started right after sees the new state. Not thread-safe: use one ``Admin`` per thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Literal, TypeVar

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ElectionType,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ClusterMetadata,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from confluent_kafka.admin import ConfigEntry as KafkaConfigEntry
from confluent_kafka.admin import ConfigSource as KafkaConfigSource
from kio.schema.errors import ErrorCode

from loglake.client import _wire
from loglake.client._common import (
    DEFAULT_CLIENT_ID,
    ErrorTracker,
    base_config,
    unreachable_error,
)
from loglake.client.errors import BrokerError, ClientError, from_exception, from_kafka_error
from loglake.client.model import (
    ConfigEntry,
    ConfigSource,
    GroupDescription,
    GroupListing,
    GroupMember,
    OffsetQuery,
    PartitionInfo,
    TopicInfo,
    TopicPartitionKey,
    TransactionDescription,
    TransactionListing,
)
from loglake.client.reassignment import PartitionReassignment
from loglake.client.security import SecurityConfig
from loglake.client.security import coerce as coerce_security
from loglake.errors import LoglakeError

T = TypeVar("T")
_ALTER_REASSIGNMENTS = (45, 0)
_LIST_REASSIGNMENTS = (46, 0)
"""(API key, version): v0 is what Kafka 4.0 serves."""
_FIND_COORDINATOR = (10, 3)
_DESCRIBE_TRANSACTIONS = (65, 0)
_LIST_TRANSACTIONS = (66, 0)
"""(API key, version): the first flexible FindCoordinator with one key; the only
DescribeTransactions; ListTransactions without the duration filter (v1) every broker serves."""
_TRANSACTION_COORDINATOR = 1
"""FindCoordinator key type of a transactional id (0 is a consumer group)."""
_RETRY_BACKOFF_S = 0.1

_POLL_INTERVAL_S = 0.05
_METADATA_FIRST_ATTEMPT_S = 1.0
_METADATA_WAIT_STEP_S = 0.1

_SOURCES: dict[int, ConfigSource] = {
    KafkaConfigSource.UNKNOWN_CONFIG.value: "unknown",
    KafkaConfigSource.DYNAMIC_TOPIC_CONFIG.value: "dynamic_topic_config",
    KafkaConfigSource.DYNAMIC_BROKER_CONFIG.value: "dynamic_broker_config",
    KafkaConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value: "dynamic_default_broker_config",
    KafkaConfigSource.STATIC_BROKER_CONFIG.value: "static_broker_config",
    KafkaConfigSource.DEFAULT_CONFIG.value: "default_config",
    KafkaConfigSource.GROUP_CONFIG.value: "group_config",
}

_GROUP_STATES: dict[ConsumerGroupState, str] = {
    ConsumerGroupState.UNKNOWN: "Unknown",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}


class Admin:
    """Administrative operations on a loglake (or any Kafka) cluster.

    >>> with Admin("127.0.0.1:9092") as admin:                      # doctest: +SKIP
    ...     admin.create_topic("orders", partitions=3, config={"retention.ms": "86400000"})
    ...     admin.describe_topic("orders").partitions[0].leader
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        timeout: float = 30.0,
        client_id: str = DEFAULT_CLIENT_ID,
        security: SecurityConfig | Mapping[str, str] | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        """Connect lazily to ``bootstrap_servers``; ``timeout`` (seconds) bounds every call.

        ``security``: how to connect (TLS, SASL) as a :class:`SecurityConfig` or a mapping of
        Kafka client properties (``{"security.protocol": "SASL_SSL", ...}``, Java or
        librdkafka names; :mod:`loglake.client.security`); it applies to the raw requests too.
        ``extra`` is passed to librdkafka unchanged and overrides the SDK's settings.
        """
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.timeout = timeout
        self.security = coerce_security(security)
        self._tracker = ErrorTracker()
        config = base_config(
            bootstrap_servers, client_id=client_id, tracker=self._tracker, extra=extra,
            security=self.security,
        )
        self._bootstrap: str = config["bootstrap.servers"]
        self._client_id = client_id
        self._admin = AdminClient(config)

    # -- context manager -------------------------------------------------------------------

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the client (serves pending callbacks; librdkafka frees the rest on GC)."""
        self._admin.poll(0)

    # -- topics ----------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        *,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
        wait: bool = True,
        timeout: float | None = None,
    ) -> None:
        """Create topic ``name``; with ``wait``, return once every partition has a leader.

        Raises :class:`BrokerError` with the broker's message (``topic_already_exists``,
        ``invalid_config``, ``invalid_replication_factor``, ...) or :class:`ClientError`.
        """
        limit = self._limit(timeout)
        operation = f"create topic {name!r}"
        new_topic = NewTopic(
            name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            config=dict(config or {}),
        )
        futures = self._admin.create_topics(
            [new_topic], request_timeout=limit, operation_timeout=limit
        )
        self._wait(futures[name], operation, limit)
        if wait:
            self._wait_until(
                operation,
                limit,
                lambda info: info is not None
                and len(info.partitions) == partitions
                and all(p.leader >= 0 for p in info.partitions),
                name,
            )

    def delete_topic(self, name: str, *, wait: bool = True, timeout: float | None = None) -> None:
        """Delete topic ``name``; with ``wait``, return once metadata no longer lists it."""
        limit = self._limit(timeout)
        operation = f"delete topic {name!r}"
        futures = self._admin.delete_topics(
            [name], request_timeout=limit, operation_timeout=limit
        )
        self._wait(futures[name], operation, limit)
        if wait:
            self._wait_until(operation, limit, lambda info: info is None, name)

    def create_partitions(
        self,
        topic: str,
        total: int,
        *,
        assignments: Sequence[Sequence[int]] | None = None,
        validate_only: bool = False,
        wait: bool = True,
        timeout: float | None = None,
    ) -> None:
        """Grow ``topic`` to ``total`` partitions (never fewer: ``invalid_partitions``).

        ``assignments``: the replica broker ids of each new partition, in order (default: the
        broker spreads them like at creation). With ``wait``, return once metadata lists every
        partition with a leader. Raises :class:`BrokerError` (``invalid_partitions``,
        ``invalid_replica_assignment``, ``unknown_topic_or_partition``, ...).
        """
        limit = self._limit(timeout)
        operation = f"add partitions to topic {topic!r}"
        request = (NewPartitions(topic, total) if assignments is None else
                   NewPartitions(topic, total, replica_assignment=[list(a) for a in assignments]))
        futures = self._admin.create_partitions(
            [request], validate_only=validate_only, request_timeout=limit,
            operation_timeout=limit,
        )
        self._wait(futures[topic], operation, limit)
        if wait and not validate_only:
            self._wait_until(
                operation, limit,
                lambda info: info is not None and len(info.partitions) >= total
                and all(p.leader >= 0 for p in info.partitions),
                topic,
            )

    def delete_records(
        self,
        topic: str,
        offsets: Mapping[int, int],
        *,
        timeout: float | None = None,
    ) -> dict[int, int]:
        """Delete the records of ``topic`` below ``offsets[partition]`` (-1: below the high
        watermark: everything so far); return each partition's new low watermark (its earliest
        offset). Raises :class:`BrokerError` (``offset_out_of_range`` above the high
        watermark, ``policy_violation`` on a compacted topic, ...)."""
        if not offsets:
            raise ValueError("delete_records needs at least one partition")
        limit = self._limit(timeout)
        operation = f"delete records of topic {topic!r}"
        futures = self._admin.delete_records(
            [TopicPartition(topic, p, o) for p, o in sorted(offsets.items())],
            request_timeout=limit, operation_timeout=limit,
        )
        result: dict[int, int] = {}
        for tp, future in futures.items():
            deleted = self._wait(future, f"{operation}, partition {tp.partition}", limit)
            result[tp.partition] = int(deleted.low_watermark)
        return dict(sorted(result.items()))

    def elect_leaders(
        self,
        election: Literal["preferred", "unclean"] = "preferred",
        partitions: Sequence[TopicPartitionKey] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[TopicPartitionKey, LoglakeError | None]:
        """Elect the preferred (first assigned) replica as leader, or (``unclean``) any live
        replica of partitions without a live leader; ``partitions`` None: every partition.

        Returns, per partition, None when elected or the broker's reason why not (a
        :class:`BrokerError`: ``election_not_needed``, ``preferred_leader_not_available``,
        ``eligible_leaders_not_available``, ...). For all partitions, those that needed no
        election are not listed (Kafka's rule)."""
        if election not in ("preferred", "unclean"):
            raise ValueError(f"election must be 'preferred' or 'unclean', got {election!r}")
        limit = self._limit(timeout)
        kind = ElectionType.PREFERRED if election == "preferred" else ElectionType.UNCLEAN
        operation = f"{election} leader election"
        # confluent-kafka 2.16's binding rejects every keyword argument of elect_leaders (its
        # argument parser lists fewer keywords than formats): librdkafka's default timeouts
        # apply, and _wait bounds the call
        future = self._admin.elect_leaders(
            kind, None if partitions is None else [TopicPartition(t, p) for t, p in partitions])
        found: dict[TopicPartition, Any] = self._wait(future, operation, limit)
        result: dict[TopicPartitionKey, LoglakeError | None] = {}
        for tp, error in found.items():
            where = f"{operation}, {tp.topic}[{tp.partition}]"
            if error is None:
                result[(tp.topic, tp.partition)] = None
            elif isinstance(error, KafkaError):  # what confluent-kafka 2.16 puts there
                result[(tp.topic, tp.partition)] = from_kafka_error(error, where)
            else:
                result[(tp.topic, tp.partition)] = from_exception(error, where)
        return dict(sorted(result.items()))

    def list_topics(self, *, timeout: float | None = None) -> dict[str, TopicInfo]:
        """All topics by name (sorted), with partition leaders, replicas and ISRs."""
        return self._topics("list topics", self._limit(timeout))

    def describe_topic(self, name: str, *, timeout: float | None = None) -> TopicInfo:
        """One topic's partitions; :class:`BrokerError` ``unknown_topic_or_partition`` if absent."""
        operation = f"describe topic {name!r}"
        info = self._describe(name, operation, self._limit(timeout))
        if info is None:
            raise BrokerError(
                f"{operation}: topic does not exist",
                code=ErrorCode.unknown_topic_or_partition,
                hint="list topics with 'loglake topics list'",
            )
        return info

    # -- configs ---------------------------------------------------------------------------

    def describe_config(
        self, topic: str, *, timeout: float | None = None
    ) -> dict[str, ConfigEntry]:
        """Every configuration entry of ``topic`` (value, where it comes from, default or not)."""
        return self._describe_configs(ConfigResource(ResourceType.TOPIC, topic),
                                      f"describe configs of topic {topic!r}", timeout)

    def _describe_configs(self, resource: ConfigResource, operation: str,
                          timeout: float | None) -> dict[str, ConfigEntry]:
        limit = self._limit(timeout)
        futures = self._admin.describe_configs([resource], request_timeout=limit)
        entries: dict[str, KafkaConfigEntry] = self._wait(futures[resource], operation, limit)
        return {
            name: ConfigEntry(
                value=entry.value,
                source=_SOURCES.get(_source_value(entry.source), "unknown"),
                is_default=bool(entry.is_default),
                is_read_only=bool(entry.is_read_only),
                is_sensitive=bool(entry.is_sensitive),
            )
            for name, entry in sorted(entries.items())
        }

    def alter_config(
        self,
        topic: str,
        *,
        set: Mapping[str, str] | None = None,
        delete: Sequence[str] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Incrementally set and/or delete (revert to default) configuration keys of ``topic``."""
        if not set and not delete:
            raise ValueError("alter_config needs at least one key to set or delete")
        if isinstance(delete, str):
            raise TypeError("delete must be a sequence of keys, not a single string")
        overlap = sorted(frozenset(set or {}) & frozenset(delete or ()))
        if overlap:
            raise ValueError(f"keys both set and deleted: {', '.join(overlap)}")
        limit = self._limit(timeout)
        changes = [
            KafkaConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
            for key, value in (set or {}).items()
        ] + [
            KafkaConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)
            for key in (delete or ())
        ]
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=changes)
        futures = self._admin.incremental_alter_configs([resource], request_timeout=limit)
        self._wait(futures[resource], f"alter configs of topic {topic!r}", limit)

    # -- consumer groups -------------------------------------------------------------------

    def list_groups(self, *, timeout: float | None = None) -> list[GroupListing]:
        """Every consumer group the cluster's coordinators know, sorted by id (raises when
        any broker fails to answer; :meth:`list_groups_partial` gives what the others said)."""
        listed, errors = self.list_groups_partial(timeout=timeout)
        for error in errors:
            raise error
        return listed

    def list_groups_partial(self, *, timeout: float | None = None
                            ) -> tuple[list[GroupListing], list[LoglakeError]]:
        """The groups the brokers that answered listed, sorted by id, and one error per
        broker that did not (as Kafka's ``ListConsumerGroupsResult.valid()`` /
        ``errors()``): a dead broker costs its groups, not the whole list."""
        limit = self._limit(timeout)
        future = self._admin.list_consumer_groups(request_timeout=limit)
        result = self._wait(future, "list consumer groups", limit)
        errors = [from_exception(error, "list consumer groups")
                  for error in result.errors or ()]
        return sorted(
            (
                GroupListing(
                    group_id=g.group_id,
                    state=_GROUP_STATES.get(getattr(g, "state", ConsumerGroupState.UNKNOWN),
                                            "Unknown"),
                    is_simple=bool(g.is_simple_consumer_group),
                )
                for g in result.valid or ()
            ),
            key=lambda g: g.group_id,
        ), errors

    def describe_group(self, group_id: str, *, timeout: float | None = None) -> GroupDescription:
        """State, assignor, coordinator and members (with assignments) of ``group_id``.

        A group that never existed is described as ``Dead`` without members, like Kafka does.
        """
        limit = self._limit(timeout)
        futures = self._admin.describe_consumer_groups([group_id], request_timeout=limit)
        found = self._wait(futures[group_id], f"describe group {group_id!r}", limit)
        members = tuple(
            GroupMember(
                member_id=m.member_id,
                client_id=m.client_id,
                host=m.host,
                group_instance_id=m.group_instance_id,
                assignment=tuple(sorted(
                    (tp.topic, tp.partition) for tp in m.assignment.topic_partitions
                )),
            )
            for m in sorted(found.members, key=lambda m: (m.client_id, m.member_id))
        )
        return GroupDescription(
            group_id=group_id,
            state=_GROUP_STATES.get(found.state, "Unknown"),
            assignor=found.partition_assignor or "",
            coordinator=-1 if found.coordinator is None else found.coordinator.id,
            members=members,
        )

    def group_offsets(
        self, group_id: str, *, timeout: float | None = None
    ) -> dict[TopicPartitionKey, int]:
        """The committed offsets of ``group_id`` (next offset to read) by (topic, partition)."""
        limit = self._limit(timeout)
        operation = f"fetch committed offsets of group {group_id!r}"
        futures = self._admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=limit
        )
        found = self._wait(futures[group_id], operation, limit)
        result: dict[TopicPartitionKey, int] = {}
        for tp in found.topic_partitions or ():
            if tp.error is not None:
                raise from_kafka_error(tp.error, f"{operation}, "
                                     f"{tp.topic}[{tp.partition}]")
            if tp.offset >= 0:
                result[(tp.topic, tp.partition)] = tp.offset
        return dict(sorted(result.items()))

    def alter_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartitionKey, int],
        *,
        timeout: float | None = None,
    ) -> None:
        """Set committed offsets of ``group_id`` (the broker refuses while it has members:
        :class:`BrokerError` ``unknown_member_id``/``illegal_generation``)."""
        if not offsets:
            raise ValueError("alter_group_offsets needs at least one partition")
        limit = self._limit(timeout)
        operation = f"alter committed offsets of group {group_id!r}"
        request = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        )
        futures = self._admin.alter_consumer_group_offsets([request], request_timeout=limit)
        found = self._wait(futures[group_id], operation, limit)
        for tp in found.topic_partitions or ():
            if tp.error is not None:
                raise from_kafka_error(tp.error, f"{operation}, "
                                     f"{tp.topic}[{tp.partition}]")

    def delete_group(self, group_id: str, *, timeout: float | None = None) -> None:
        """Delete an empty group and its committed offsets (``non_empty_group`` if it has
        members, ``group_id_not_found`` if it does not exist)."""
        limit = self._limit(timeout)
        futures = self._admin.delete_consumer_groups([group_id], request_timeout=limit)
        self._wait(futures[group_id], f"delete group {group_id!r}", limit)

    # -- transactions ----------------------------------------------------------------------

    def list_transactions(
        self,
        *,
        states: Sequence[str] = (),
        producer_ids: Sequence[int] = (),
        timeout: float | None = None,
    ) -> list[TransactionListing]:
        """Every transactional id the cluster's coordinators know (only those in ``states``,
        of ``producer_ids``, when given), sorted by id: ListTransactions sent to every live
        broker and the answers merged, as Kafka's AdminClient does. A broker still loading its
        transaction state is asked again within the timeout; any other broker error raises
        :class:`BrokerError` (the listing would be incomplete). A state name the brokers do
        not know raises :class:`BrokerError` ``invalid_request`` naming it."""
        limit = self._limit(timeout)
        deadline = time.monotonic() + limit
        operation = "list transactions"
        brokers = self._metadata(operation, limit).brokers
        if not brokers:
            raise ClientError(f"{operation}: the cluster metadata lists no broker",
                              code=ErrorCode.broker_not_available)
        body = {"state_filters": list(states), "producer_id_filters": list(producer_ids)}
        listings: list[TransactionListing] = []
        for broker_id, node in sorted(brokers.items()):
            where = f"{operation} on broker {broker_id}"
            host, port = str(node.host), int(node.port)

            def ask(host: str = host, port: int = port, where: str = where) -> Any:
                response = _wire.request(host, port, *_LIST_TRANSACTIONS, body,
                                         timeout=_left(deadline), client_id=self._client_id,
                                         security=self.security, operation=where)
                _raise_top_level(where, response)  # retried while the broker loads
                return response

            response = self._retrying(deadline, ask)
            unknown = list(getattr(response, "unknown_state_filters", ()) or ())
            if unknown:
                raise BrokerError(f"{operation}: unknown transaction state "
                                  f"{', '.join(map(repr, unknown))}",
                                  code=ErrorCode.invalid_request,
                                  hint="states: Empty, Ongoing, PrepareCommit, PrepareAbort, "
                                  "CompleteCommit, CompleteAbort, PrepareEpochFence, Dead")
            listings.extend(
                TransactionListing(t.transactional_id, int(t.producer_id),
                                   t.transaction_state, int(broker_id))
                for t in response.transaction_states)
        return sorted(listings, key=lambda t: (t.transactional_id, t.coordinator))

    def describe_transaction(
        self, transactional_id: str, *, timeout: float | None = None
    ) -> TransactionDescription:
        """State, producer id and epoch, timeout, start time and partitions of
        ``transactional_id``, from its coordinator (found with FindCoordinator key type 1;
        asked again while the coordinator moves or loads). :class:`BrokerError`
        ``transactional_id_not_found`` for an id the cluster does not know."""
        if not transactional_id:
            raise ValueError("transactional_id must not be empty")
        limit = self._limit(timeout)
        deadline = time.monotonic() + limit
        operation = f"describe transaction {transactional_id!r}"

        def ask() -> Any:
            coordinator = self._transaction_coordinator(transactional_id, deadline, operation)
            response = _wire.request(
                coordinator.host, coordinator.port, *_DESCRIBE_TRANSACTIONS,
                {"transactional_ids": [transactional_id]}, timeout=_left(deadline),
                client_id=self._client_id, security=self.security, operation=operation)
            [state] = response.transaction_states
            error = _partition_error(operation, state.error_code, None)
            if error is not None:
                raise error
            return coordinator.node_id, state

        node_id, state = self._retrying(deadline, ask)
        started = _epoch_ms(state.transaction_start_time)
        return TransactionDescription(
            transactional_id=state.transactional_id,
            state=state.transaction_state,
            producer_id=int(state.producer_id),
            producer_epoch=int(state.producer_epoch),
            timeout_ms=_duration_ms(state.transaction_timeout),
            start_time_ms=started if started is not None and started >= 0 else None,
            partitions=tuple(sorted((t.topic, int(p)) for t in state.topics
                                    for p in t.partitions)),
            coordinator=int(node_id),
        )

    def _transaction_coordinator(self, transactional_id: str, deadline: float,
                                 operation: str) -> Any:
        """FindCoordinator (key type 1) for ``transactional_id``, asked of any live broker."""
        brokers = self._metadata(operation, _left(deadline)).brokers
        node = next(iter(brokers.values()), None)
        if node is None or node.host is None:
            raise ClientError(f"{operation}: the cluster metadata lists no broker",
                              code=ErrorCode.broker_not_available)
        response = _wire.request(
            node.host, node.port, *_FIND_COORDINATOR,
            {"key": transactional_id, "key_type": _TRANSACTION_COORDINATOR},
            timeout=_left(deadline), client_id=self._client_id, security=self.security,
            operation=f"{operation}: find its coordinator")
        _raise_top_level(f"{operation}: find its coordinator", response)
        return response

    def _retrying(self, deadline: float, call: Callable[[], T]) -> T:
        """``call()`` again after a retriable :class:`LoglakeError` (coordinator loading or
        moving, broker restarting) until ``deadline``; the last error is raised then."""
        while True:
            try:
                return call()
            except LoglakeError as exc:
                if not exc.retriable or time.monotonic() + _RETRY_BACKOFF_S >= deadline:
                    raise
            time.sleep(_RETRY_BACKOFF_S)

    def list_offsets(
        self,
        topic: str,
        query: OffsetQuery,
        *,
        partitions: Sequence[int] | None = None,
        timeout: float | None = None,
        isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted",
    ) -> dict[int, int]:
        """Per partition of ``topic`` (all unless ``partitions``): the log start offset
        (``"earliest"``), the log end offset (``"latest"``) or the first offset whose timestamp
        is >= ``query`` ms (the log end offset when every record is older). With
        ``isolation_level="read_committed"`` the end is the last stable offset."""
        limit = self._limit(timeout)
        if partitions is None:
            partitions = [p.partition for p in self.describe_topic(topic, timeout=limit).partitions]
        if query == "earliest":
            spec = OffsetSpec.earliest()
        elif query == "latest":
            spec = OffsetSpec.latest()
        elif isinstance(query, int) and not isinstance(query, bool) and query >= 0:
            spec = OffsetSpec.for_timestamp(query)
        else:
            raise ValueError(f"query must be 'earliest', 'latest' or a timestamp >= 0, "
                             f"got {query!r}")
        operation = f"list offsets ({query}) of topic {topic!r}"
        futures = self._admin.list_offsets(
            {TopicPartition(topic, p): spec for p in partitions}, request_timeout=limit,
            isolation_level=(IsolationLevel.READ_COMMITTED if isolation_level == "read_committed"
                             else IsolationLevel.READ_UNCOMMITTED),
        )
        result: dict[int, int] = {}
        for tp, future in futures.items():
            info = self._wait(future, f"{operation}, partition {tp.partition}", limit)
            result[tp.partition] = info.offset
        if isinstance(query, int) and any(o < 0 for o in result.values()):
            ends = self.list_offsets(topic, "latest", partitions=partitions, timeout=limit,
                                     isolation_level=isolation_level)
            result = {p: ends[p] if o < 0 else o for p, o in result.items()}
        return dict(sorted(result.items()))

    # -- partition reassignment and broker configs ----------------------------------------

    def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartitionKey, Sequence[int] | None],
        *,
        timeout: float | None = None,
    ) -> dict[TopicPartitionKey, LoglakeError | None]:
        """Start moving partitions to new replica lists (``None``: cancel the partition's
        reassignment, back to its original replicas), like Kafka's
        ``alterPartitionReassignments``. Returns once the cluster recorded each move: per
        partition None, or the broker's reason (:class:`BrokerError`:
        ``invalid_replica_assignment``, ``no_reassignment_in_progress``,
        ``unknown_topic_or_partition``). The data moves afterwards; watch it with
        :meth:`list_partition_reassignments`."""
        if not reassignments:
            raise ValueError("alter_partition_reassignments needs at least one partition")
        limit = self._limit(timeout)
        operation = "alter partition reassignments"
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), replicas in sorted(reassignments.items()):
            topics.setdefault(topic, []).append({
                "partition_index": partition,
                "replicas": None if replicas is None else [int(r) for r in replicas]})
        response = self._controller_request(operation, *_ALTER_REASSIGNMENTS, {
            "timeout": int(limit * 1000),
            "topics": [{"name": t, "partitions": p} for t, p in topics.items()]}, limit)
        _raise_top_level(operation, response)
        result: dict[TopicPartitionKey, LoglakeError | None] = {}
        for topic in response.responses:
            for partition in topic.partitions:
                key = (topic.name, partition.partition_index)
                result[key] = _partition_error(f"{operation}, {topic.name}[{key[1]}]",
                                               partition.error_code, partition.error_message)
        return dict(sorted(result.items()))

    def list_partition_reassignments(
        self,
        partitions: Sequence[TopicPartitionKey] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[TopicPartitionKey, PartitionReassignment]:
        """The reassignments in progress (of ``partitions`` only, when given): full replica
        set, replicas being added and removed. Empty once every move completed."""
        limit = self._limit(timeout)
        operation = "list partition reassignments"
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, []).append(partition)
            topics = [{"name": t, "partition_indexes": sorted(p)} for t, p in by_topic.items()]
        response = self._controller_request(operation, *_LIST_REASSIGNMENTS, {
            "timeout": int(limit * 1000), "topics": topics}, limit)
        _raise_top_level(operation, response)
        return dict(sorted(
            ((topic.name, p.partition_index), PartitionReassignment(
                tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas)))
            for topic in response.topics for p in topic.partitions))

    def brokers(self, *, timeout: float | None = None) -> dict[int, str | None]:
        """The live brokers: id -> rack (None without ``broker.rack``), sorted by id."""
        limit = self._limit(timeout)
        future = self._admin.describe_cluster(request_timeout=limit)
        found = self._wait(future, "describe the cluster", limit)
        return {node.id: node.rack for node in sorted(found.nodes, key=lambda n: n.id)}

    def alter_broker_config(
        self,
        broker_id: int,
        *,
        set: Mapping[str, str] | None = None,
        delete: Sequence[str] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Incrementally set and/or delete dynamic configs of broker ``broker_id`` (the
        replication throttle rates ``leader.replication.throttled.rate`` and
        ``follower.replication.throttled.rate``); deleting reverts to the broker's static
        value."""
        if not set and not delete:
            raise ValueError("alter_broker_config needs at least one key to set or delete")
        limit = self._limit(timeout)
        changes = [
            KafkaConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
            for key, value in (set or {}).items()
        ] + [
            KafkaConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)
            for key in (delete or ())
        ]
        resource = ConfigResource(ResourceType.BROKER, str(broker_id), incremental_configs=changes)
        futures = self._admin.incremental_alter_configs([resource], request_timeout=limit)
        self._wait(futures[resource], f"alter configs of broker {broker_id}", limit)

    def describe_broker_config(
        self, broker_id: int, *, timeout: float | None = None
    ) -> dict[str, ConfigEntry]:
        """The configuration entries broker ``broker_id`` reports (value and source)."""
        return self._describe_configs(ConfigResource(ResourceType.BROKER, str(broker_id)),
                                      f"describe configs of broker {broker_id}", timeout)

    def request(self, api_key: int, version: int, body: dict[str, Any], *, operation: str,
                timeout: float | None = None) -> Any:
        """Send one raw request (``body``: the kio request's fields as a dict) to the
        controller, for APIs the SDK does not wrap (ACLs, client quotas, SCRAM users), and
        return the decoded response; the caller checks its error codes."""
        return self._controller_request(operation, api_key, version, body,
                                        self._limit(timeout))

    def broker_request(self, broker_id: int, api_key: int, version: int, body: dict[str, Any],
                       *, operation: str, timeout: float | None = None) -> Any:
        """Send one raw request to broker ``broker_id`` (its address from the cluster
        metadata), e.g. a partition leader, and return the decoded response; the caller checks
        its error codes. A broker the metadata does not list: ClientError
        (BROKER_NOT_AVAILABLE)."""
        limit = self._limit(timeout)
        deadline = time.monotonic() + limit
        node = self._metadata(operation, limit).brokers.get(broker_id)
        if node is None or node.host is None:
            raise ClientError(f"{operation}: broker {broker_id} is not in the cluster metadata",
                              code=ErrorCode.broker_not_available)
        return _wire.request(node.host, node.port, api_key, version, body,
                             timeout=_left(deadline), client_id=self._client_id,
                             security=self.security, operation=operation)

    def _controller_request(self, operation: str, api_key: int, version: int,
                            body: dict[str, Any], limit: float) -> Any:
        """Send one raw request to the controller Metadata names (any broker when it names
        none), bounded by ``limit`` seconds."""
        metadata = self._metadata(operation, limit)
        brokers = metadata.brokers
        node = brokers.get(metadata.controller_id) or next(iter(brokers.values()), None)
        if node is None or node.host is None:
            raise ClientError(f"{operation}: the cluster metadata lists no broker",
                              code=ErrorCode.broker_not_available)
        return _wire.request(node.host, node.port, api_key, version, body, timeout=limit,
                             client_id=self._client_id, security=self.security, operation=operation)

    # -- internals -------------------------------------------------------------------------

    def _limit(self, timeout: float | None) -> float:
        limit = self.timeout if timeout is None else timeout
        if limit <= 0:
            raise ValueError(f"timeout must be positive, got {limit}")
        return limit

    def _wait(self, future: Future[T], operation: str, limit: float) -> T:
        """Poll the client until ``future`` completes or ``limit`` seconds (plus slack) pass."""
        deadline = time.monotonic() + limit + 1.0
        while not future.done():
            if time.monotonic() >= deadline:
                raise unreachable_error(operation, self._bootstrap, limit, self._tracker)
            self._admin.poll(_POLL_INTERVAL_S)
        try:
            return future.result()
        except Exception as exc:
            raise self._map(exc, operation, limit) from exc

    def _map(self, exc: BaseException, operation: str, limit: float) -> Exception:
        self._admin.poll(0)  # serve error_cb so the tracker knows why
        return unreachable_error(
            operation, self._bootstrap, limit, self._tracker, from_exception(exc, operation)
        )

    def _metadata(self, operation: str, limit: float) -> ClusterMetadata:
        """Cluster metadata within ``limit`` s, asked in attempts of growing length: librdkafka
        retries a metadata request on the broker it first picked, and when that broker died
        it waits for it (reconnect backoff up to 10 s) instead of asking a live one; a new
        attempt goes to a broker that is up."""
        deadline = time.monotonic() + limit
        attempt = _METADATA_FIRST_ATTEMPT_S
        while True:
            remaining = deadline - time.monotonic()
            try:
                return self._admin.list_topics(timeout=max(min(attempt, remaining), 0.01))
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                timed_out = isinstance(error, KafkaError) and error.code() == KafkaError._TIMED_OUT
                if not timed_out or time.monotonic() >= deadline:
                    raise self._map(exc, operation, limit) from exc
            except Exception as exc:
                raise self._map(exc, operation, limit) from exc
            attempt *= 2

    def _topics(self, operation: str, limit: float) -> dict[str, TopicInfo]:
        metadata = self._metadata(operation, limit)
        return {
            name: _topic_info(name, topic)
            for name, topic in sorted(metadata.topics.items())
            if not _is_missing(topic.error)
        }

    def _describe(self, name: str, operation: str, limit: float) -> TopicInfo | None:
        """One topic from a Metadata request for all topics, answered by any live broker (so
        it never auto-creates the topic); ``None`` if it does not exist. Not DescribeTopics:
        librdkafka sends that to the controller it last heard of and, when that broker died,
        waits for it until its next metadata refresh (minutes)."""
        return self._topics(operation, limit).get(name)

    def _wait_until(
        self,
        operation: str,
        limit: float,
        ready: Callable[[TopicInfo | None], bool],
        name: str,
    ) -> None:
        """Describe ``name`` until ``ready`` holds, for at most ``limit`` seconds."""
        deadline = time.monotonic() + limit
        while not ready(self._describe(name, operation, limit)):
            if time.monotonic() >= deadline:
                raise ClientError(
                    f"{operation}: the broker accepted the request but metadata did not reflect"
                    f" it within {limit:g} s",
                    code=ErrorCode.request_timed_out,
                )
            time.sleep(_METADATA_WAIT_STEP_S)


def _is_missing(error: KafkaError | None) -> bool:
    return error is not None and error.code() in (
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
    )


def _topic_info(name: str, topic: Any) -> TopicInfo:
    # Other topic-level errors (leader_not_available while a topic is being created) leave the
    # partitions as the broker reported them; a missing leader shows as -1.
    partitions = tuple(
        PartitionInfo(
            partition=p.id,
            leader=p.leader,
            replicas=tuple(p.replicas),
            isr=tuple(p.isrs),
        )
        for _, p in sorted(topic.partitions.items())
    )
    return TopicInfo(name=name, partitions=partitions)


def _partition_error(where: str, code: ErrorCode, message: str | None) -> BrokerError | None:
    if code == ErrorCode.none:
        return None
    return BrokerError(f"{where}: {message or code.name}", code=code, kafka_name=code.name.upper())


def _raise_top_level(operation: str, response: Any) -> None:
    error = _partition_error(operation, response.error_code,
                             getattr(response, "error_message", None))
    if error is not None:
        raise error


def _left(deadline: float) -> float:
    """Seconds until ``deadline`` (at least a little, so a last attempt can still answer)."""
    return max(deadline - time.monotonic(), 0.05)


def _epoch_ms(value: Any) -> int | None:
    """kio's datetime (or an int of ms) as ms since the epoch."""
    if value is None:
        return None
    if isinstance(value, int):
        return value
    return round(value.timestamp() * 1000)


def _duration_ms(value: Any) -> int:
    """kio's timedelta (or an int of ms) as ms."""
    if isinstance(value, int):
        return value
    return round(value.total_seconds() * 1000)


def _source_value(source: Any) -> int:
    return int(source.value if isinstance(source, KafkaConfigSource) else source)
