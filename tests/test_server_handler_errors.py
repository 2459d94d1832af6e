"""A handler that raises is answered with UNKNOWN_SERVER_ERROR on every entry of the request
(Kafka's ``KafkaApis.handleError``), not with a closed connection; in-process."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from loglake.broker.apis import API_TABLE
from loglake.broker.codec import FrameError, decode_request
from loglake.broker.server import KafkaServer
from tests.wire import WireClient


def _frame(api_key: int, version: int, body: dict) -> object:
    raw = WireClient.__new__(WireClient)
    raw.correlation_id = 0
    data = raw.encode(api_key, version, body)[4:]
    return decode_request(data, api_key, version)


def test_delete_topics_failure_answers_unknown_server_error() -> None:
    frame = _frame(20, 6, {"topics": [{"name": "a"}, {"name": "b"}], "timeout_ms": 1000})
    body = KafkaServer._handler_error(API_TABLE[20], 6, frame, RuntimeError("boom"))
    assert [(r.name, r.error_code) for r in body.responses] == [
        ("a", ErrorCode.unknown_server_error), ("b", ErrorCode.unknown_server_error)]
    assert "RuntimeError: boom" in body.responses[0].error_message


def test_produce_failure_answers_each_partition() -> None:
    frame = _frame(0, 9, {"acks": 1, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b""},
                                         {"index": 1, "records": b""}]}]})
    body = KafkaServer._handler_error(API_TABLE[0], 9, frame, OSError("disk"))
    codes = [p.error_code for p in body.responses[0].partition_responses]
    assert codes == [ErrorCode.unknown_server_error] * 2


def test_produce_with_acks_0_closes() -> None:
    frame = _frame(0, 9, {"acks": 0, "timeout": 1000, "topic_data": []})
    with pytest.raises(FrameError):
        KafkaServer._handler_error(API_TABLE[0], 9, frame, OSError("disk"))
