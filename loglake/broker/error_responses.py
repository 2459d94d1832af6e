"""Error responses that echo a request: every topic, partition, group or resource it named
carries the same error code (Kafka's ``AbstractRequest.getErrorResponse`` per request type).

Used by the network layer to answer a request of an API version we do not serve with
UNSUPPORTED_VERSION (see broker/server.py for when). Each builder returns the plain dict that
:func:`loglake.broker.codec.build` turns into the response class of the *requested* version,
the only version the client can parse; ``build`` drops the fields that version lacks, so one
builder serves every version of its API. Rules, as in Kafka:

* where the response has a top-level ``error_code`` it is set;
* where errors live per partition, group or resource, the request's entries are echoed, each
  with the error (so a client that never looks at a top-level code still sees it);
* Fetch v13+ carries only the top-level error, no partitions (Kafka's FetchRequest does the same);
* a response with no place for an error at all (none of ours) is not built: ``None``.

Pure functions; no broker state is read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

ErrorBody = Callable[[Any, int, ErrorCode, str], dict[str, Any] | None]


def _topic_key(topic: Any, *, name: str = "name") -> dict[str, Any]:
    """The identifying fields of a request topic entry (its name and/or its topic id)."""
    key: dict[str, Any] = {}
    if hasattr(topic, name):
        key[name] = getattr(topic, name)
    if hasattr(topic, "topic_id"):
        key["topic_id"] = topic.topic_id
    return key


def _produce(request: Any, version: int, error: ErrorCode, message: str) -> dict[str, Any]:
    return {"responses": [
        {**_topic_key(topic), "partition_responses": [
            {"index": p.index, "error_code": error, "base_offset": -1, "log_append_time": None,
             "log_start_offset": -1, "error_message": message}
            for p in topic.partition_data]}
        for topic in request.topic_data]}


def _fetch(request: Any, version: int, error: ErrorCode, message: str) -> dict[str, Any]:
    body: dict[str, Any] = {"error_code": error, "session_id": 0, "responses": []}
    if version < 13:  # the client may not look at the top-level code: say it per partition
        body["responses"] = [
            {**_topic_key(topic, name="topic"), "partitions": [
                {"partition_index": p.partition, "error_code": error, "high_watermark": -1,
                 "last_stable_offset": -1, "log_start_offset": -1, "records": None}
                for p in topic.partitions]}
            for topic in request.topics]
    return body


def _list_offsets(request: Any, version: int, error: ErrorCode, message: str) -> dict[str, Any]:
    return {"topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": error, "timestamp": -1,
             "offset": -1, "leader_epoch": -1, "old_style_offsets": []}
            for p in topic.partitions]}
        for topic in request.topics]}


def _metadata(request: Any, version: int, error: ErrorCode, message: str) -> dict[str, Any]:
    topics = request.topics or ()
    return {"error_code": error, "controller_id": -1, "brokers": [], "topics": [
        {**_topic_key(topic), "error_code": error, "partitions": []} for topic in topics]}


def _offset_commit(request: Any, version: int, error: ErrorCode, message: str) -> dict[str, Any]:
    return {"topics": [
        {**_topic_key(topic), "partitions": [
            {"partition_index": p.partition_index, "error_code": error}
            for p in topic.partitions]}
        for topic in request.topics]}


def _offset_fetch(request: Any, version: int, error: ErrorCode, message: str) -> dict[str, Any]:
    if hasattr(request, "groups"):  # v8+: one entry per group
        return {"groups": [{"group_id": group.group_id, "error_code": error, "topics": []}
                           for group in request.groups]}
    return {"error_code": error, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": index, "committed_offset": -1, "metadata": "",
             "error_code": error} for index in topic.partition_indexes]}
        for topic in request.topics or ()]}


def _find_coordinator(request: Any, version: int, error: ErrorCode,
                      message: str) -> dict[str, Any]:
    keys = getattr(request, "coordinator_keys", None)
    if keys is None:
        return {"error_code": error, "error_message": message, "node_id": -1, "host": "",
                "port": -1}
    return {"coordinators": [{"key": key, "node_id": -1, "host": "", "port": -1,
                              "error_code": error, "error_message": message} for key in keys]}


def _describe_groups(request: Any, version: int, error: ErrorCode,
                     message: str) -> dict[str, Any]:
    return {"groups": [{"group_id": group_id, "error_code": error, "error_message": message,
                        "group_state": "", "protocol_type": "", "protocol_data": "",
                        "members": []} for group_id in request.groups]}


def _create_topics(request: Any, version: int, error: ErrorCode, message: str) -> dict[str, Any]:
    return {"topics": [{"name": topic.name, "error_code": error, "error_message": message,
                        "num_partitions": -1, "replication_factor": -1, "configs": None}
                       for topic in request.topics]}


def _delete_topics(request: Any, version: int, error: ErrorCode, message: str) -> dict[str, Any]:
    if hasattr(request, "topics"):
        entries = [_topic_key(topic) for topic in request.topics]
    else:
        entries = [{"name": name} for name in request.topic_names]
    return {"responses": [{**entry, "error_code": error, "error_message": message}
                          for entry in entries]}


def _offset_for_leader_epoch(request: Any, version: int, error: ErrorCode,
                             message: str) -> dict[str, Any]:
    return {"topics": [
        {"topic": topic.topic, "partitions": [
            {"partition": p.partition, "error_code": error, "leader_epoch": -1,
             "end_offset": -1} for p in topic.partitions]}
        for topic in request.topics]}


def _describe_configs(request: Any, version: int, error: ErrorCode,
                      message: str) -> dict[str, Any]:
    return {"results": [{"error_code": error, "error_message": message,
                         "resource_type": r.resource_type, "resource_name": r.resource_name,
                         "configs": []} for r in request.resources]}


def _alter_configs(request: Any, version: int, error: ErrorCode, message: str) -> dict[str, Any]:
    return {"responses": [{"error_code": error, "error_message": message,
                           "resource_type": r.resource_type, "resource_name": r.resource_name}
                          for r in request.resources]}


def _describe_log_dirs(request: Any, version: int, error: ErrorCode,
                       message: str) -> dict[str, Any]:
    # v0-2 have no top-level code: one result (no directory named) carries the error
    return {"error_code": error,
            "results": [{"error_code": error, "log_dir": "", "topics": []}]}


def _delete_groups(request: Any, version: int, error: ErrorCode, message: str) -> dict[str, Any]:
    return {"results": [{"group_id": group_id, "error_code": error}
                        for group_id in request.groups_names]}


def _join_group(request: Any, version: int, error: ErrorCode, message: str) -> dict[str, Any]:
    return {"error_code": error, "generation_id": -1, "member_id": request.member_id or "",
            "leader": "", "members": []}


def _init_producer_id(request: Any, version: int, error: ErrorCode,
                      message: str) -> dict[str, Any]:
    return {"error_code": error, "producer_id": -1, "producer_epoch": -1}


def _offset_delete(request: Any, version: int, error: ErrorCode, message: str) -> dict[str, Any]:
    return {"error_code": error, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": error}
            for p in topic.partitions]}
        for topic in request.topics]}


def _alter_partition_reassignments(request: Any, version: int, error: ErrorCode,
                                   message: str) -> dict[str, Any]:
    return {"error_code": error, "error_message": message, "responses": [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": error, "error_message": message}
            for p in topic.partitions]}
        for topic in request.topics]}


def _write_txn_markers(request: Any, version: int, error: ErrorCode,
                       message: str) -> dict[str, Any]:
    return {"markers": [
        {"producer_id": marker.producer_id, "topics": [
            {"name": topic.name, "partitions": [
                {"partition_index": index, "error_code": error}
                for index in topic.partition_indexes]}
            for topic in marker.topics]}
        for marker in request.markers]}


def _describe_producers(request: Any, version: int, error: ErrorCode,
                        message: str) -> dict[str, Any]:
    return {"topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": index, "error_code": error, "error_message": message,
             "active_producers": []} for index in topic.partition_indexes]}
        for topic in request.topics]}


def _top_level(request: Any, version: int, error: ErrorCode, message: str) -> dict[str, Any]:
    return {"error_code": error, "error_message": message}


def _describe_client_quotas(request: Any, version: int, error: ErrorCode,
                            message: str) -> dict[str, Any]:
    return {"error_code": error, "error_message": message, "entries": None}


def _alter_client_quotas(request: Any, version: int, error: ErrorCode,
                         message: str) -> dict[str, Any]:
    return {"entries": [
        {"error_code": error, "error_message": message, "entity": [
            {"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity]}
        for entry in request.entries]}


ERROR_BODIES: dict[int, ErrorBody] = {
    0: _produce,
    1: _fetch,
    2: _list_offsets,
    3: _metadata,
    8: _offset_commit,
    9: _offset_fetch,
    10: _find_coordinator,
    11: _join_group,
    12: _top_level,  # Heartbeat
    13: _top_level,  # LeaveGroup (members echoed only on success)
    14: _top_level,  # SyncGroup
    15: _describe_groups,
    16: _top_level,  # ListGroups
    19: _create_topics,
    20: _delete_topics,
    22: _init_producer_id,
    23: _offset_for_leader_epoch,
    24: _top_level,  # AddPartitionsToTxn: v4+ (the versions we refuse) has a top-level code
    25: _top_level,  # AddOffsetsToTxn
    26: _top_level,  # EndTxn
    28: _offset_commit,  # TxnOffsetCommit: the same request and response shapes
    27: _write_txn_markers,
    32: _describe_configs,
    33: _alter_configs,
    35: _describe_log_dirs,
    42: _delete_groups,
    44: _alter_configs,  # IncrementalAlterConfigs: the same response shape
    45: _alter_partition_reassignments,
    46: _top_level,  # ListPartitionReassignments
    47: _offset_delete,
    48: _describe_client_quotas,
    49: _alter_client_quotas,
    60: _top_level,  # DescribeCluster
    61: _describe_producers,
    66: _top_level,  # ListTransactions
}
"""API key → builder of its error response body. APIs missing here get no error response."""


def error_body(api_key: int, version: int, request: Any, error: ErrorCode,
               message: str) -> dict[str, Any] | None:
    """The body of ``api_key``'s response echoing ``request`` with ``error``, or None if we
    have no builder for that API."""
    builder = ERROR_BODIES.get(api_key)
    if builder is None:
        return None
    return builder(request, version, error, message)
