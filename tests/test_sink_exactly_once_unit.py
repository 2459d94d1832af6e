"""In-process checks of the exactly-once sink's pure parts: the deliveryGuarantee option, the
task identity (transactional id and marker group stable across attempts and restarts, distinct
per query, topic and partition), the marker decision and the marker topic of a task."""

from __future__ import annotations

import pyarrow as pa
import pytest

from loglake.streaming import exactly_once
from loglake.streaming.errors import SourceOptionError
from loglake.streaming.exactly_once import TaskIdentity, is_done, peek_topic, stream_sink_id
from loglake.streaming.options import parse_options

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_delivery_guarantee_option() -> None:
    assert parse_options(BASE, "write").delivery_guarantee == "at-least-once"
    chosen = parse_options({**BASE, "DeliveryGuarantee": " Exactly-Once "}, "write")
    assert chosen.delivery_guarantee == "exactly-once"
    with pytest.raises(SourceOptionError, match="'deliveryGuarantee' must be at-least-once or "
                       "exactly-once"):
        parse_options({**BASE, "deliveryGuarantee": "twice"}, "write")
    with pytest.raises(SourceOptionError, match="only for writes"):
        parse_options({**BASE, "subscribe": "t", "deliveryGuarantee": "exactly-once"}, "batch")


def test_exactly_once_refuses_settings_it_owns() -> None:
    options = parse_options({**BASE, "deliveryGuarantee": "exactly-once",
                             "kafka.transactional.id": "mine"}, "write")
    with pytest.raises(SourceOptionError, match=r"'kafka.transactional.id' cannot be set"):
        exactly_once.check_options(options)


def test_identity_is_stable_and_distinct() -> None:
    query = "02334690-c4b1-436a-8632-1d33a23aa7f8"
    first = stream_sink_id(query, "out")
    assert first == stream_sink_id(query, "out")  # a restart from the checkpoint
    assert len(first) == 16 and int(first, 16) >= 0
    assert first != stream_sink_id(query, "other")
    assert first != stream_sink_id("another-query", "out")
    task = TaskIdentity(first, 3, 41)
    assert task.transactional_id == f"loglake-sink-{first}-3"
    assert task.marker_group == task.transactional_id
    assert task.marker_offset == 42
    # every batch of a partition shares the transactional id (so init_transactions fences)
    assert TaskIdentity(first, 3, 42).transactional_id == task.transactional_id
    assert TaskIdentity(first, 4, 41).transactional_id != task.transactional_id
    assert exactly_once.batch_sink_id() != exactly_once.batch_sink_id()


def test_marker_decision() -> None:
    assert not is_done(None, 0)  # nothing committed yet
    assert is_done(1, 0)  # batch 0 committed: offset 1
    assert not is_done(5, 5)  # batch 4 committed, batch 5 not yet
    assert is_done(6, 5)


def test_marker_topic_of_a_task() -> None:
    with_option = parse_options({**BASE, "topic": "out"}, "write")
    assert peek_topic(iter(()), with_option)[0] == "out"
    columns = parse_options(BASE, "write")
    empty = pa.RecordBatch.from_pydict({"value": pa.array([], pa.binary()),
                                        "topic": pa.array([], pa.string())})
    rows = pa.RecordBatch.from_pydict({"value": [b"1", b"2"], "topic": ["t1", "t2"]})
    topic, batches = peek_topic(iter([empty, rows]), columns)
    assert topic == "t1"
    assert [b.num_rows for b in batches] == [2]  # the peeked batch is not lost
    assert peek_topic(iter([empty]), columns)[0] is None
    nulls = pa.RecordBatch.from_pydict({"value": [b"1"], "topic": pa.array([None], pa.string())})
    with pytest.raises(SourceOptionError, match="null topic"):
        peek_topic(iter([nulls]), columns)
