"""In-process checks of the SDK's transaction pieces: the mapping of librdkafka's transaction
error flags to typed errors, the transactional Producer's argument checks, the CLI's output and
state parsing, and the consume-transform-produce helper's batch bookkeeping."""

from __future__ import annotations

import argparse
import json

import pytest
from confluent_kafka import KafkaError, KafkaException
from kio.schema.errors import ErrorCode

from loglake.client import transactions_cli
from loglake.client.consumer import Consumer
from loglake.client.errors import (
    AbortableTransactionError,
    FatalTransactionError,
    TransactionError,
    transaction_error,
    transaction_exception,
)
from loglake.client.model import Record, TransactionDescription, TransactionListing
from loglake.client.producer import Producer
from loglake.client.transform import Output, _next_offsets, _outputs


def test_fatal_flag_wins_and_maps_to_fatal_error() -> None:
    error = KafkaError(KafkaError.PRODUCER_FENCED, "fenced by a newer instance", fatal=True,
                       txn_requires_abort=True)
    mapped = transaction_error(error, "commit transaction")
    assert isinstance(mapped, FatalTransactionError)
    assert mapped.code == ErrorCode.producer_fenced
    assert mapped.kafka_name == "PRODUCER_FENCED"
    assert "commit transaction: fenced by a newer instance" in str(mapped)
    assert not mapped.retriable


def test_abortable_flag_maps_to_abortable_error() -> None:
    error = KafkaError(KafkaError._MSG_TIMED_OUT, "delivery failed", txn_requires_abort=True)
    mapped = transaction_exception(KafkaException(error), "commit transaction")
    assert isinstance(mapped, AbortableTransactionError)
    assert mapped.code == ErrorCode.request_timed_out


def test_retriable_flag_is_kept_on_plain_transaction_error() -> None:
    mapped = transaction_error(KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True),
                               "commit transaction")
    assert type(mapped) is TransactionError
    assert mapped.retriable
    state = transaction_error(KafkaError(KafkaError._STATE, "no transaction"), "commit")
    assert type(state) is TransactionError and not state.retriable


def test_transactional_producer_argument_checks() -> None:
    with pytest.raises(ValueError, match="needs acks='all' and idempotence"):
        Producer("127.0.0.1:1", acks="1", transactional_id="t")
    with pytest.raises(ValueError, match="must not exceed transaction_timeout_ms"):
        Producer("127.0.0.1:1", transactional_id="t", delivery_timeout_ms=20_000,
                 transaction_timeout_ms=10_000)
    with pytest.raises(ValueError, match="must not be empty"):
        Producer("127.0.0.1:1", transactional_id="")
    plain = Producer("127.0.0.1:1")
    with pytest.raises(ValueError, match="has no transactional_id"):
        plain.begin_transaction()


def test_consumer_isolation_level_is_checked() -> None:
    with pytest.raises(ValueError, match="isolation_level must be one of"):
        Consumer("127.0.0.1:1", isolation_level="dirty")  # type: ignore[arg-type]
    consumer = Consumer("127.0.0.1:1")
    try:
        assert consumer.isolation_level == "read_committed"
        with pytest.raises(ValueError, match="needs a group_id"):
            consumer.group_metadata()
    finally:
        consumer.close()


def test_state_names_parse_in_any_case_and_refuse_unknown_ones() -> None:
    assert transactions_cli.transaction_state("ongoing") == "Ongoing"
    assert transactions_cli.transaction_state("PREPARECOMMIT") == "PrepareCommit"
    with pytest.raises(argparse.ArgumentTypeError, match="unknown transaction state 'open'"):
        transactions_cli.transaction_state("open")


def test_list_and_describe_output() -> None:
    listing = [TransactionListing("app-1", 4000, "Ongoing", 2)]
    assert transactions_cli.list_output(listing, "text").splitlines() == [
        "TransactionalId\tCoordinator\tProducerId\tTransactionState",
        "app-1\t2\t4000\tOngoing"]
    assert json.loads(transactions_cli.list_output(listing, "json")) == [
        {"transactional_id": "app-1", "producer_id": 4000, "state": "Ongoing",
         "coordinator": 2}]
    described = TransactionDescription("app-1", "Ongoing", 4000, 3, 60000, 1_000,
                                       (("out", 0), ("out", 2)), 2)
    header, row = transactions_cli.describe_output(described, "text", now_ms=1_500).split("\n")
    assert header.split("\t")[0] == "CoordinatorId"
    assert row.split("\t") == ["2", "app-1", "4000", "3", "Ongoing", "60000", "1000", "500",
                               "out-0,out-2"]
    idle = TransactionDescription("app-1", "Empty", 4000, 3, 60000, None, (), 2)
    assert transactions_cli.describe_output(idle, "text", now_ms=9).split("\t")[-3:] == [
        "None", "None", ""]


def _record(partition: int, offset: int) -> Record:
    return Record("in", partition, offset, None, b"k", b"v")


def test_transform_outputs_and_next_offsets() -> None:
    record = _record(0, 5)
    assert _outputs(None, record) == []
    assert _outputs(b"x", record) == [Output(b"x", key=b"k")]
    assert _outputs(["a", Output(b"b", key=None)], record) == [
        Output("a", key=b"k"), Output(b"b", key=None)]
    with pytest.raises(TypeError, match="must be Output, bytes or str"):
        _outputs([1], record)  # type: ignore[list-item]
    assert _next_offsets([_record(0, 5), _record(1, 2), _record(0, 7)]) == {
        ("in", 0): 8, ("in", 1): 3}


def test_flush_failure_without_a_cause_is_the_fatal_error_reported_before() -> None:
    """confluent-kafka sometimes fails poll/flush with a bare SystemError ("returned NULL
    without setting an exception") after a fatal error: the fatal error error_cb reported
    (the tracker's) is what the caller gets; without one the SystemError stays as it is."""
    from loglake.client._common import ErrorTracker
    from loglake.client.errors import FatalTransactionError
    from loglake.client.producer import _typed

    bare = SystemError("<method 'flush' of 'cimpl.Producer' objects> returned NULL")
    tracker = ErrorTracker()
    assert _typed(bare, "flush", tracker) is bare
    tracker(KafkaError(KafkaError._TRANSPORT, "broker down"))
    assert tracker.fatal is None and _typed(bare, "flush", tracker) is bare
    tracker(KafkaError(KafkaError.INVALID_PRODUCER_EPOCH, "fenced", fatal=True))
    typed = _typed(bare, "flush", tracker)
    assert isinstance(typed, FatalTransactionError) and "fenced" in str(typed)
