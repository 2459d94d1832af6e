"""FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
ListGroups, DescribeGroups, DeleteGroups, OffsetDelete, TxnOffsetCommit: wire shapes around the
coordinator.

Each handler maps :class:`GroupError` (and other LoglakeErrors) to the response's error code at
the level the protocol has one (per response, per group, per partition). OffsetFetch with
``require_stable`` (v7+) answers UNSTABLE_OFFSET_COMMIT (offset -1) for a partition with pending
transactional offsets, per partition in every version, as Kafka's coordinator does; the client
retries until the transaction ends.

Authorization (Kafka 4.0's ``KafkaApis``, through handlers/authz.py), checked before the
coordinator is asked:

* FindCoordinator: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) or transactional id
  (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), per key; a share key (v6+) CLUSTER_ACTION.
* JoinGroup, SyncGroup, Heartbeat, LeaveGroup: READ on the group (GROUP_AUTHORIZATION_FAILED).
* OffsetCommit: READ on the group (every partition GROUP_AUTHORIZATION_FAILED), then READ on
  each topic (its partitions TOPIC_AUTHORIZATION_FAILED, not committed). TxnOffsetCommit first
  WRITE on the transactional id (every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then
  the same.
* OffsetFetch: DESCRIBE on each group (the group's error GROUP_AUTHORIZATION_FAILED, no
  topics); named topics without DESCRIBE answer TOPIC_AUTHORIZATION_FAILED (offset -1); an
  all-partitions fetch leaves such topics out.
* ListGroups: everything with DESCRIBE on the cluster, else only the groups the principal may
  DESCRIBE. DescribeGroups: DESCRIBE on each group; ``authorized_operations`` (v3+) when asked.
* DeleteGroups: DELETE on each group. OffsetDelete: DELETE on the group (top-level
  GROUP_AUTHORIZATION_FAILED), then READ on each topic (TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.broker.groups.coordinator import GroupError
from loglake.broker.groups.group import GroupState
from loglake.broker.handlers import authz
from loglake.broker.security.acl_model import AclOperation, ResourceType
from loglake.errors import LoglakeError

if TYPE_CHECKING:
    from loglake.broker.services import BrokerServices

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


def _group_allowed(services: BrokerServices, frame: RequestFrame, operation: AclOperation,
                   group_id: str) -> bool:
    return authz.allowed(services, frame, operation, ResourceType.GROUP, group_id)


def _coordinator_refusal(services: BrokerServices, frame: RequestFrame, key_type: int,
                         key: str) -> ErrorCode | None:
    """FindCoordinator's authorization answer for one key, None when allowed."""
    if key_type == KEY_TYPE_GROUP and not _group_allowed(services, frame,
                                                         AclOperation.DESCRIBE, key):
        return authz.GROUP_AUTHORIZATION_FAILED
    if key_type == KEY_TYPE_TRANSACTION and not authz.allowed(
            services, frame, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if key_type == KEY_TYPE_SHARE and frame.api_version >= 6 and not authz.cluster_allowed(
            services, frame, AclOperation.CLUSTER_ACTION):
        return authz.CLUSTER_AUTHORIZATION_FAILED
    return None


async def find_coordinator(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    keys = list(getattr(request, "coordinator_keys", ()) or [request.key])
    key_type = getattr(request, "key_type", KEY_TYPE_GROUP)
    coordinators = []
    for key in keys:
        entry: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1}
        node = (services.groups.coordinator_for(key) if key_type == KEY_TYPE_GROUP
                else services.transactions.coordinator_for(key)
                if key_type == KEY_TYPE_TRANSACTION else -1)
        info = services.metadata.endpoint(node, frame.session.listener)
        refusal = _coordinator_refusal(services, frame, key_type, key)
        if refusal is not None:
            entry.update(error_code=refusal, error_message=None)
        elif key_type == KEY_TYPE_SHARE:  # Kafka without a share coordinator (KIP-932)
            entry.update(error_code=ErrorCode.invalid_request,
                         error_message="Share groups are not supported by this broker.")
        elif key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
            entry.update(error_code=ErrorCode.invalid_request,
                         error_message=f"Unknown coordinator key type {key_type}.")
        elif info is None:
            entry.update(error_code=ErrorCode.coordinator_not_available,
                         error_message="No live broker can coordinate this key.")
        else:
            entry.update(error_code=ErrorCode.none, error_message=None, node_id=node,
                         host=info.host, port=info.port)
        coordinators.append(entry)
    cls = response_class(10, frame.api_version)
    if frame.api_version >= 4:
        return build(cls, {"coordinators": coordinators})
    first = dict(coordinators[0])
    first.pop("key")
    return build(cls, first)


async def join_group(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    session = _ms(request.session_timeout)
    rebalance = _ms(getattr(request, "rebalance_timeout", request.session_timeout))
    cls = response_class(11, frame.api_version)
    if not _group_allowed(services, frame, AclOperation.READ, request.group_id):
        return build(cls, {"error_code": authz.GROUP_AUTHORIZATION_FAILED, "generation_id": -1,
                           "member_id": ""})
    try:
        result = await services.groups.join(
            request.group_id, member_id=request.member_id,
            instance_id=getattr(request, "group_instance_id", None),
            client_id=frame.client_id or "", client_host=frame.client_host,
            session_timeout_ms=session, rebalance_timeout_ms=rebalance,
            protocol_type=request.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
            require_known_member=frame.api_version >= 4,
        )
    except GroupError as exc:
        return build(cls, {"error_code": exc.code, "generation_id": -1, "leader": "",
                           "member_id": exc.member_id, "protocol_name": None})
    except LoglakeError as exc:
        return build(cls, {"error_code": exc.code, "generation_id": -1, "member_id": ""})
    except TimeoutError:
        return build(cls, {"error_code": ErrorCode.rebalance_in_progress, "generation_id": -1,
                           "member_id": request.member_id})
    if frame.api_version < 7:
        result.setdefault("protocol_name", result.get("protocol_name") or "")
    return build(cls, result)


async def sync_group(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    cls = response_class(14, frame.api_version)
    if not _group_allowed(services, frame, AclOperation.READ, request.group_id):
        return build(cls, {"error_code": authz.GROUP_AUTHORIZATION_FAILED, "assignment": b""})
    try:
        result = await services.groups.sync(
            request.group_id, generation=request.generation_id, member_id=request.member_id,
            instance_id=getattr(request, "group_instance_id", None),
            protocol_type=getattr(request, "protocol_type", None),
            protocol_name=getattr(request, "protocol_name", None),
            assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
        )
    except LoglakeError as exc:
        return build(cls, {"error_code": exc.code, "assignment": b""})
    except TimeoutError:
        return build(cls, {"error_code": ErrorCode.rebalance_in_progress, "assignment": b""})
    return build(cls, result)


async def heartbeat(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    if not _group_allowed(services, frame, AclOperation.READ, request.group_id):
        return build(response_class(12, frame.api_version),
                     {"error_code": authz.GROUP_AUTHORIZATION_FAILED})
    error = ErrorCode.none
    try:
        await services.groups.heartbeat(request.group_id, generation=request.generation_id,
                                        member_id=request.member_id,
                                        instance_id=getattr(request, "group_instance_id", None))
    except LoglakeError as exc:
        error = exc.code
    return build(response_class(12, frame.api_version), {"error_code": error})


async def leave_group(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    cls = response_class(13, frame.api_version)
    if not _group_allowed(services, frame, AclOperation.READ, request.group_id):
        return build(cls, {"error_code": authz.GROUP_AUTHORIZATION_FAILED, "members": []})
    if hasattr(request, "members"):
        identities = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        identities = [(request.member_id, None)]
    try:
        errors = await services.groups.leave(request.group_id, identities)
    except LoglakeError as exc:
        return build(cls, {"error_code": exc.code, "members": []})
    members = [{"member_id": m, "group_instance_id": i, "error_code": e}
               for (m, i), e in zip(identities, errors, strict=True)]
    top = errors[0] if frame.api_version < 3 else ErrorCode.none
    return build(cls, {"error_code": top, "members": members})


def _requested_offsets(request: Any) -> dict[tuple[str, int], tuple[int, int, str | None]]:
    """(topic, partition) -> (offset, leader epoch, metadata) of an OffsetCommit or
    TxnOffsetCommit request."""
    return {
        (topic.name, p.partition_index): (p.committed_offset,
                                          getattr(p, "committed_leader_epoch", -1),
                                          p.committed_metadata)
        for topic in request.topics for p in topic.partitions
    }


def _commit_response(api_key: int, version: int,
                     errors: dict[tuple[str, int], ErrorCode]) -> Any:
    """An OffsetCommit / TxnOffsetCommit response: one error code per partition."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), error in errors.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
    return build(response_class(api_key, version), {
        "topics": [{"name": t, "partitions": p} for t, p in topics.items()]})


def _commit_refusals(services: BrokerServices, frame: RequestFrame,
                     offsets: dict[tuple[str, int], Any]) -> dict[tuple[str, int], ErrorCode]:
    """The partitions of an (Txn)OffsetCommit refused before the coordinator is asked: the
    whole request without READ on the group, else the topics without READ."""
    request = frame.body
    if not _group_allowed(services, frame, AclOperation.READ, request.group_id):
        return dict.fromkeys(offsets, authz.GROUP_AUTHORIZATION_FAILED)
    readable = authz.filter_authorized(services, frame, AclOperation.READ, ResourceType.TOPIC,
                                       (topic.name for topic in request.topics))
    return {tp: authz.TOPIC_AUTHORIZATION_FAILED for tp in offsets if tp[0] not in readable}


def _merged(offsets: dict[tuple[str, int], Any], refused: dict[tuple[str, int], ErrorCode],
            errors: dict[tuple[str, int], ErrorCode]) -> dict[tuple[str, int], ErrorCode]:
    """Per-partition answers in request order: refusals, then the coordinator's."""
    return {tp: refused[tp] if tp in refused else errors[tp] for tp in offsets}


async def offset_commit(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    offsets = _requested_offsets(request)
    refused = _commit_refusals(services, frame, offsets)
    allowed = {tp: v for tp, v in offsets.items() if tp not in refused}
    errors: dict[tuple[str, int], ErrorCode] = {}
    if allowed:
        try:
            errors = await services.groups.commit(
                request.group_id, generation=request.generation_id_or_member_epoch,
                member_id=request.member_id,
                instance_id=getattr(request, "group_instance_id", None), offsets=allowed,
            )
        except LoglakeError as exc:
            errors = dict.fromkeys(allowed, exc.code)
    return _commit_response(8, frame.api_version, _merged(offsets, refused, errors))


async def txn_offset_commit(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    offsets = _requested_offsets(request)
    if not authz.allowed(services, frame, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                         request.transactional_id):
        refused = dict.fromkeys(offsets, authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    else:
        refused = _commit_refusals(services, frame, offsets)
    allowed = {tp: v for tp, v in offsets.items() if tp not in refused}
    errors: dict[tuple[str, int], ErrorCode] = {}
    if allowed:
        try:
            errors = await services.groups.txn_commit(
                request.group_id, producer_id=request.producer_id,
                producer_epoch=request.producer_epoch,
                generation=getattr(request, "generation_id", -1),
                member_id=getattr(request, "member_id", ""),
                instance_id=getattr(request, "group_instance_id", None), offsets=allowed,
            )
        except LoglakeError as exc:
            errors = dict.fromkeys(allowed, exc.code)
    return _commit_response(28, frame.api_version, _merged(offsets, refused, errors))


async def offset_fetch(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    cls = response_class(9, frame.api_version)
    stable = bool(getattr(request, "require_stable", False))
    if frame.api_version >= 8:
        groups = [await _fetch_group(services, frame, g.group_id, g.topics, batched=True,
                                     require_stable=stable)
                  for g in request.groups]
        return build(cls, {"groups": groups})
    result = await _fetch_group(services, frame, request.group_id, request.topics,
                                batched=False, require_stable=stable)
    return build(cls, result)


async def _fetch_group(services: BrokerServices, frame: RequestFrame, group_id: str,
                       wanted: Any, *, batched: bool, require_stable: bool) -> dict[str, Any]:
    if not _group_allowed(services, frame, AclOperation.DESCRIBE, group_id):
        refused: dict[str, Any] = {"error_code": authz.GROUP_AUTHORIZATION_FAILED, "topics": []}
        if batched:
            refused["group_id"] = group_id
        return refused
    unstable: set[tuple[str, int]] = set()
    try:
        committed = await services.groups.committed(group_id)
        if require_stable:
            unstable = await services.groups.unstable_partitions(group_id)
        error = ErrorCode.none
    except LoglakeError as exc:
        committed, error = {}, exc.code
    if wanted is None:
        keys: list[tuple[str, int]] = sorted(committed)
        described = authz.filter_authorized(services, frame, AclOperation.DESCRIBE,
                                            ResourceType.TOPIC, (t for t, _ in keys))
        keys = [(t, p) for t, p in keys if t in described]
    else:
        keys = [(t.name, p) for t in wanted for p in t.partition_indexes]
        described = authz.filter_authorized(services, frame, AclOperation.DESCRIBE,
                                            ResourceType.TOPIC, (t.name for t in wanted))
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, partition in keys:
        if topic not in described:
            topics.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": -1,
                "committed_leader_epoch": -1, "metadata": "",
                "error_code": authz.TOPIC_AUTHORIZATION_FAILED})
            continue
        if (topic, partition) in unstable:
            topics.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": -1,
                "committed_leader_epoch": -1, "metadata": "",
                "error_code": ErrorCode.unstable_offset_commit})
            continue
        offset = committed.get((topic, partition))
        topics.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": offset.offset if offset else -1,
            "committed_leader_epoch": offset.leader_epoch if offset else -1,
            "metadata": offset.metadata if offset else "",
            "error_code": ErrorCode.none,
        })
    result: dict[str, Any] = {"error_code": error, "topics": [
        {"name": t, "partitions": p} for t, p in topics.items()]}
    if batched:
        result["group_id"] = group_id
    return result


async def list_groups(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    everything = authz.cluster_allowed(services, frame, AclOperation.DESCRIBE,
                                       log_if_denied=False)
    groups = []
    for group in await services.groups.list_groups():
        state = group.state.value
        if states and state.lower() not in states:
            continue
        if not everything and not authz.allowed(services, frame, AclOperation.DESCRIBE,
                                                ResourceType.GROUP, group.group_id,
                                                log_if_denied=False):
            continue
        groups.append({"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                       "group_state": state, "group_type": "classic"})
    return build(response_class(16, frame.api_version), {"groups": groups})


async def describe_groups(services: BrokerServices, frame: RequestFrame) -> Any:
    results = []
    with_operations = bool(getattr(frame.body, "include_authorized_operations", False))
    for group_id in frame.body.groups:
        if not _group_allowed(services, frame, AclOperation.DESCRIBE, group_id):
            results.append({"error_code": authz.GROUP_AUTHORIZATION_FAILED,
                            "group_id": group_id, "group_state": "", "protocol_type": "",
                            "protocol_data": "", "members": []})
            continue
        try:
            group = await services.groups.describe(group_id)
        except LoglakeError as exc:
            results.append({"error_code": exc.code, "group_id": group_id, "group_state": "",
                            "protocol_type": "", "protocol_data": "", "members": []})
            continue
        stable = group.state is GroupState.STABLE
        unknown = (group.zk_version < 0 and not group.members
                   and not services.groups.offsets.get(group_id))
        if unknown and frame.api_version >= 6:  # KIP-1043
            results.append({"error_code": ErrorCode.group_id_not_found, "group_id": group_id,
                            "error_message": f"Group {group_id} not found.",
                            "group_state": "Dead", "protocol_type": "", "protocol_data": "",
                            "members": []})
            continue
        results.append({
            "error_code": ErrorCode.none, "group_id": group_id,
            "group_state": "Dead" if unknown else group.state.value,
            "protocol_type": group.protocol_type or "", "protocol_data": group.protocol or "",
            "authorized_operations": authz.authorized_operations(
                services, frame, ResourceType.GROUP, group_id)
            if with_operations else authz.AUTHORIZED_OPERATIONS_OMITTED,
            "members": [{
                "member_id": m.member_id, "group_instance_id": m.group_instance_id,
                "client_id": m.client_id, "client_host": m.client_host,
                "member_metadata": m.metadata_for(group.protocol or ""),
                "member_assignment": m.assignment if stable else b"",
            } for m in group.members.values()],
        })
    return build(response_class(15, frame.api_version), {"groups": results})


async def delete_groups(services: BrokerServices, frame: RequestFrame) -> Any:
    results = []
    for group_id in frame.body.groups_names:
        if not _group_allowed(services, frame, AclOperation.DELETE, group_id):
            results.append({"group_id": group_id,
                            "error_code": authz.GROUP_AUTHORIZATION_FAILED})
            continue
        try:
            await services.groups.delete_group(group_id)
            error = ErrorCode.none
        except LoglakeError as exc:
            error = exc.code
        results.append({"group_id": group_id, "error_code": error})
    return build(response_class(42, frame.api_version), {"results": results})


async def offset_delete(services: BrokerServices, frame: RequestFrame) -> Any:
    request = frame.body
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    cls = response_class(47, frame.api_version)
    if not _group_allowed(services, frame, AclOperation.DELETE, request.group_id):
        return build(cls, {"error_code": authz.GROUP_AUTHORIZATION_FAILED, "topics": []})
    readable = authz.filter_authorized(services, frame, AclOperation.READ, ResourceType.TOPIC,
                                       (t.name for t in request.topics))
    allowed = [tp for tp in wanted if tp[0] in readable]
    try:  # asked even with nothing left, as Kafka: the group's own errors still answer
        errors = await services.groups.delete_offsets(request.group_id, allowed)
    except LoglakeError as exc:
        return build(cls, {"error_code": exc.code, "topics": []})
    merged = {tp: errors.get(tp, ErrorCode.none) if tp[0] in readable
              else authz.TOPIC_AUTHORIZATION_FAILED for tp in wanted}
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), error in merged.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
    return build(cls, {"error_code": ErrorCode.none, "topics": [
        {"name": t, "partitions": p} for t, p in topics.items()]})
