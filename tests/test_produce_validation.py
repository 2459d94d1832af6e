"""Record validation on produce (segments/validation.py, Kafka's LogValidator).

Unit tests build batches with records.encode_batch and corrupt the record layer only (CRC
recomputed, so the batch header stays valid); end-to-end tests send the same bytes with raw
Produce requests (tests/wire.py, chosen API version) to a live broker and check the error code,
``record_errors``/``error_message`` (v8+), that nothing was appended, and that a real client
then produces and consumes normally from offset 0.
"""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import cramjam
import lz4.frame
import pytest
import zstandard
from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from loglake.config import BrokerConfig, TopicConfig
from loglake.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    LoglakeError,
    MessageTooLargeError,
    RecordListTooLargeError,
    TransactionalIdAuthorizationError,
    UnsupportedCompressionTypeError,
)
from loglake.segments import validation
from loglake.segments.batch import HEADER, HEADER_SIZE, LOG_OVERHEAD, compute_crc, parse_batches
from loglake.segments.log import PartitionLog
from loglake.segments.records import (
    Compression,
    Record,
    _write_varint,
    compress,
    decode_batch,
    encode_batch,
    encode_record,
)
from tests.admin_util import create_topic
from tests.clients import consume_messages
from tests.wire import WireClient

NOW = 1_700_000_000_000
CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4,
          Compression.ZSTD]

# ------------------------------------------------------------------------------ builders


def _records(n: int, *, keys: bool = False, headers: bool = False, size: int = 20,
             start: int = NOW) -> list[Record]:
    return [Record(offset=i, timestamp=start + i, key=b"k%d" % i if keys else None,
                   value=b"v%d-" % i + b"x" * size,
                   headers=[("h", b"%d" % i), ("n", None)] if headers else [])
            for i in range(n)]


def _batch(n: int = 3, **kwargs) -> bytes:
    codec = kwargs.pop("compression", Compression.NONE)
    shape = {k: kwargs.pop(k) for k in ("keys", "headers", "size", "start") if k in kwargs}
    return encode_batch(_records(n, **shape), compression=codec, **kwargs)


def _set(batch: bytes | bytearray, fmt: str, offset: int, value: int) -> bytes:
    """Overwrite a header field and recompute the CRC."""
    out = bytearray(batch)
    struct.pack_into(fmt, out, offset, value)
    struct.pack_into(">I", out, 17, compute_crc(out, 0, len(out)))
    return bytes(out)


def _with_body(body: bytes, *, count: int, codec: int = 0, attributes: int | None = None,
               last_offset_delta: int | None = None) -> bytes:
    """A batch around an uncompressed records section ``body`` (compressed with ``codec``),
    declaring ``count`` records; header fields otherwise as a producer writes them."""
    payload = body if codec in (0, 5, 6, 7) else compress(codec, body)
    size = HEADER_SIZE + len(payload)
    out = bytearray(size)
    HEADER.pack_into(out, 0, 0, size - LOG_OVERHEAD, -1, 2, 0,
                     codec if attributes is None else attributes,
                     count - 1 if last_offset_delta is None else last_offset_delta,
                     NOW, NOW + max(count - 1, 0), -1, -1, -1, count)
    out[HEADER_SIZE:] = payload
    struct.pack_into(">I", out, 17, compute_crc(out, 0, size))
    return bytes(out)


def _raw_record(*, attributes: bytes = b"\x00", ts_delta: bytes = b"\x00",
                offset_delta: bytes = b"\x00", key: bytes = b"\x01", value: bytes = b"\x02v",
                headers: bytes = b"\x00", length: bytes | None = None) -> bytes:
    body = attributes + ts_delta + offset_delta + key + value + headers
    if length is None:
        prefix = bytearray()
        _write_varint(prefix, len(body))
        length = bytes(prefix)
    return length + body


def _varint(value: int) -> bytes:
    out = bytearray()
    _write_varint(out, value)
    return bytes(out)


def _good(i: int) -> bytes:
    return encode_record(i, i, None, b"v%d" % i)


def _rules(config: TopicConfig | None = None, now: int = NOW + 1000) -> validation.RecordRules:
    return validation.RecordRules.for_topic(config or TopicConfig(), now, "t-0")


def _validate(batch: bytes, config: TopicConfig | None = None, now: int = NOW + 1000) -> int:
    header = parse_batches(batch)[0]
    return validation.validate_batch(batch, header, _rules(config, now))


def _both_paths(batch: bytes, config: TopicConfig | None = None,
                now: int = NOW + 1000) -> tuple[object, object]:
    """The outcome (max timestamp, or error type + record errors) of the Python loop and of
    the vectorised path forced on."""
    outcomes = []
    saved = validation.VECTOR_MIN_RECORDS
    for threshold in (1 << 40, 0):
        validation.VECTOR_MIN_RECORDS = threshold
        try:
            outcomes.append(_validate(batch, config, now))
        except LoglakeError as exc:
            outcomes.append((type(exc), getattr(exc, "record_errors", ())))
        finally:
            validation.VECTOR_MIN_RECORDS = saved
    return outcomes[0], outcomes[1]


def _vector_accepts(batch: bytes, now: int = NOW + 1000) -> bool:
    """The vectorised path decides on its own (no hand-over to the loop)."""
    header = parse_batches(batch)[0]
    data: bytes | bytearray = batch
    start, end = HEADER_SIZE, len(batch)
    if header.compression:
        data = validation._decompress(header.compression, memoryview(batch)[HEADER_SIZE:],
                                      1 << 30, "")
        start, end = 0, len(data)
    return validation._vector_check(data, start, end, header.record_count,
                                    header.base_timestamp, _rules(now=now)) is not None


# (name, bad batch, error class, expected record index or None) for the record-structure
# classes; each is refused by both paths with the same answer
MALFORMED: list[tuple[str, bytes, type[LoglakeError], int | None]] = [
    ("count-above-records", _with_body(_good(0) + _good(1), count=3), InvalidRecordError, 2),
    ("count-below-records", _with_body(_good(0) + _good(1) + _good(2), count=2,
                                       last_offset_delta=1), InvalidRecordError, 1),
    ("overlong-length-varint", _with_body(b"\xff" * 11, count=1), InvalidRecordError, 0),
    ("overlong-offset-varint", _with_body(
        _raw_record(offset_delta=b"\x80\x80\x80\x80\x80\x00"), count=1), InvalidRecordError, 0),
    ("varint-over-32-bits", _with_body(
        _raw_record(key=b"\x81\x80\x80\x80\x70"), count=1), InvalidRecordError, 0),
    ("overlong-timestamp-varint", _with_body(
        _raw_record(ts_delta=b"\xff" * 10 + b"\x01"), count=1), InvalidRecordError, 0),
    ("record-length-past-batch", _with_body(_good(0) + _raw_record(length=_varint(500)),
                                            count=2), InvalidRecordError, 1),
    ("record-length-too-small", _with_body(_raw_record(length=_varint(3)) + b"\x00" * 3,
                                           count=1), InvalidRecordError, 0),
    ("fields-shorter-than-length", _with_body(
        _raw_record(length=_varint(9)) + b"\x00\x00", count=1), InvalidRecordError, 0),
    ("key-length-past-record", _with_body(_raw_record(key=_varint(300)), count=1),
     InvalidRecordError, 0),
    ("key-length-below-minus-one", _with_body(_raw_record(key=_varint(-2)), count=1),
     InvalidRecordError, 0),
    ("value-length-below-minus-one", _with_body(_good(0) + _raw_record(
        offset_delta=b"\x02", value=_varint(-5)), count=2), InvalidRecordError, 1),
    ("header-count-absurd", _with_body(_raw_record(headers=_varint(2**31 - 1)), count=1),
     InvalidRecordError, 0),
    ("header-count-negative", _with_body(_raw_record(headers=_varint(-1)), count=1),
     InvalidRecordError, 0),
    ("header-key-length-negative", _with_body(
        _raw_record(headers=_varint(1) + _varint(-1) + _varint(-1)), count=1),
     InvalidRecordError, 0),
    ("header-value-past-record", _with_body(
        _raw_record(headers=_varint(1) + _varint(1) + b"k" + _varint(40)), count=1),
     InvalidRecordError, 0),
    ("offset-deltas-gap", _with_body(_good(0) + _good(2), count=2), InvalidRecordError, 1),
    ("offset-deltas-backwards", _with_body(_good(1) + _good(0), count=2),
     InvalidRecordError, 0),
]


# ---------------------------------------------------------------------------- unit tests


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("n", [1, 100, 1000])
def test_valid_batches_pass_both_paths(codec, n):
    batch = _batch(n, compression=codec, keys=n % 2 == 0, headers=n == 100)
    python, vector = _both_paths(batch)
    assert python == vector == NOW + n - 1
    assert _vector_accepts(batch)


@pytest.mark.parametrize(("name", "batch", "error", "index"), MALFORMED,
                         ids=[m[0] for m in MALFORMED])
def test_malformed_records_are_refused_with_record_index(name, batch, error, index):
    with pytest.raises(error) as caught:
        _validate(batch)
    assert caught.value.record_errors[0][0] == index
    assert caught.value.code == ErrorCode.invalid_record


@pytest.mark.parametrize(("name", "batch", "error", "index"), MALFORMED,
                         ids=[m[0] for m in MALFORMED])
def test_vector_path_agrees_on_malformed(name, batch, error, index):
    python, vector = _both_paths(batch)
    assert python == vector
    assert isinstance(python, tuple) and python[0] is error


@pytest.mark.parametrize("codec", CODECS[1:])
def test_malformed_under_every_codec(codec):
    batch = _with_body(_good(0) + _good(2), count=2, codec=codec)
    with pytest.raises(InvalidRecordError):
        _validate(batch)


@pytest.mark.parametrize("codec", CODECS[1:])
def test_garbage_under_real_codec_is_corrupt(codec):
    batch = _with_body(b"\x00" * 5, count=1, codec=0, attributes=codec)
    with pytest.raises(CorruptRecordError) as caught:
        _validate(batch)
    assert caught.value.code == ErrorCode.corrupt_message


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_is_unsupported_compression(codec):
    batch = _with_body(_good(0), count=1, codec=codec)
    with pytest.raises(UnsupportedCompressionTypeError) as caught:
        _validate(batch)
    assert caught.value.code == ErrorCode.unsupported_compression_type


@pytest.mark.parametrize("codec", CODECS[1:])
def test_decompression_bomb_refused_with_bounded_memory(codec):
    limit_config = TopicConfig(max_message_bytes=10_000)
    limit = 10_000 * validation.MAX_DECOMPRESSION_RATIO
    # one record whose value is 50 MB of zeros: compresses to a few KB (snappy: ~2.4 MB)
    value = bytes(50_000_000)
    body = encode_record(0, 0, None, value)
    batch = _with_body(body, count=1, codec=codec)
    del value, body
    tracemalloc.start()
    try:
        with pytest.raises(MessageTooLargeError):
            _validate(batch, limit_config)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * limit + 65536


def test_compacted_topic_refuses_records_without_key():
    config = TopicConfig(cleanup_policy=("compact",))
    records = [Record(offset=i, timestamp=NOW, key=None if i in (1, 3) else b"k",
                      value=b"v") for i in range(4)]
    with pytest.raises(InvalidRecordError) as caught:
        _validate(encode_batch(records), config)
    assert [i for i, _ in caught.value.record_errors] == [1, 3]
    assert "Compacted topic cannot accept message without key" in caught.value.message
    many = encode_batch([Record(offset=i, timestamp=NOW, key=None if i == 900 else b"k",
                                value=b"v") for i in range(1000)])
    python, vector = _both_paths(many, config)
    assert python == vector and [i for i, _ in python[1]] == [900]
    assert _validate(_batch(5, keys=True), config) == NOW + 4


def test_timestamps_outside_before_after_are_invalid_timestamp():
    config = TopicConfig(message_timestamp_before_max_ms=1000,
                         message_timestamp_after_max_ms=500)
    now = NOW + 5000
    records = [Record(offset=0, timestamp=now - 1000, key=None, value=b"ok"),
               Record(offset=1, timestamp=now - 1001, key=None, value=b"old"),
               Record(offset=2, timestamp=-1, key=None, value=b"no timestamp"),
               Record(offset=3, timestamp=now + 501, key=None, value=b"future")]
    with pytest.raises(InvalidTimestampError) as caught:
        _validate(encode_batch(records), config, now)
    assert [i for i, _ in caught.value.record_errors] == [1, 3]
    assert caught.value.code == ErrorCode.invalid_timestamp
    # the deprecated difference.max.ms applies where before/after are not set
    old = TopicConfig(message_timestamp_difference_max_ms=100)
    with pytest.raises(InvalidTimestampError):
        _validate(_batch(1, start=now - 200), old, now)
    assert _validate(_batch(1, start=now - 50), old, now) == now - 50
    # LogAppendTime topics ignore producer timestamps
    assert _validate(_batch(1, start=0), TopicConfig(
        message_timestamp_type="LogAppendTime", message_timestamp_before_max_ms=1), now) == 0


def test_timestamps_checked_by_vector_path_too():
    config = TopicConfig(message_timestamp_before_max_ms=10_000)
    batch = _batch(1000, start=NOW - 20_000)
    python, vector = _both_paths(batch, config, NOW)
    assert python == vector and python[0] is InvalidTimestampError
    assert len(python[1]) == 1000  # every record is older than now - 10 s


def test_batch_level_rules():
    good = _batch(2)
    with pytest.raises(InvalidRecordError, match="baseOffset"):
        _validate(_rebase(good, 5))
    with pytest.raises(InvalidRecordError, match="control"):
        _validate(_set(good, ">h", 21, 0x20))
    with pytest.raises(InvalidTimestampError) as caught:
        _validate(_set(good, ">h", 21, 0x08))
    assert [i for i, _ in caught.value.record_errors] == [0, 1]
    with pytest.raises(InvalidRecordError, match="sequence"):
        _validate(_set(good, ">q", 43, 7))  # producer id 7, base sequence -1


def _rebase(batch: bytes, base_offset: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">q", out, 0, base_offset)  # outside the CRC
    return bytes(out)


def test_request_level_rules():
    one, two = _batch(1), _batch(1) + _batch(1)
    validation.check_produce_records(one, 9)
    with pytest.raises(InvalidRecordError, match="exactly one record batch"):
        validation.check_produce_records(two, 3)
    with pytest.raises(InvalidRecordError, match="magic"):
        validation.check_produce_records(_set(one, ">b", 16, 1), 9)
    with pytest.raises(TransactionalIdAuthorizationError):
        validation.check_produce_records(_set(one, ">h", 21, 0x10), 9)
    zstd = _batch(1, compression=Compression.ZSTD)
    for version in (3, 4, 5, 6):
        with pytest.raises(UnsupportedCompressionTypeError):
            validation.check_produce_records(zstd, version)
    validation.check_produce_records(zstd, 7)


def test_log_append_corrects_max_timestamp_and_refuses_oversized(tmp_path: Path):
    log = PartitionLog.open(tmp_path / "t-0", TopicConfig(segment_bytes=1000),
                            clock=lambda: (NOW + 10_000) / 1000)
    try:
        lying = _set(_batch(3), ">q", 35, NOW + 99_999)  # maxTimestamp not the records' max
        result = log.append(lying)
        assert result.batches[0].max_timestamp == NOW + 2
        stored = decode_batch(log.read(0, 1 << 20))
        assert stored.header.max_timestamp == NOW + 2
        with pytest.raises(RecordListTooLargeError) as caught:
            log.append(_batch(20, size=100))
        assert caught.value.code == ErrorCode.record_list_too_large
        with pytest.raises(InvalidRecordError):
            log.append(_with_body(_good(0) + _good(2), count=2))
        assert log.log_end_offset == 3
    finally:
        log.close()


@settings(max_examples=150, deadline=None)
@given(flips=st.lists(st.tuples(st.integers(0, 10**9), st.integers(1, 255)), min_size=1,
                      max_size=3),
       codec=st.sampled_from(CODECS), shape=st.sampled_from(["plain", "keys", "headers"]))
def test_vector_and_python_paths_agree_on_random_corruption(flips, codec, shape):
    """Flip bytes of the (uncompressed) records section of a 750-record batch: both paths give
    the same answer, and the vectorised one never accepts what the loop refuses."""
    records = _records(750, keys=shape == "keys", headers=shape == "headers", size=3)
    body = bytearray(encode_batch(records)[HEADER_SIZE:])
    for position, xor in flips:
        body[position % len(body)] ^= xor
    batch = _with_body(bytes(body), count=750, codec=int(codec))
    python, vector = _both_paths(batch)
    assert python == vector


# ----------------------------------------------------------------------- live broker (e2e)


def _produce_raw(client: WireClient, topic: str, records: bytes, *, version: int = 9,
                 partition: int = 0):
    response = client.request(0, version, {"acks": 1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    return response.responses[0].partition_responses[0]


def _latest_offset(client: WireClient, topic: str, partition: int = 0) -> int:
    response = client.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition,
                                        "current_leader_epoch": -1, "timestamp": -1}]}]})
    part = response.topics[0].partitions[0]
    assert part.error_code == ErrorCode.none
    return int(part.offset)


def _produce_and_consume(bootstrap: str, topic: str, *, keyed: bool = False) -> None:
    """A real client produces 3 records and reads them back from offset 0."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(3):
        producer.produce(topic, key=b"k%d" % i if keyed else None, value=b"good-%d" % i,
                         partition=0)
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "validation-unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        got = consume_messages(consumer, 3, timeout=20, batch=100, what=f"records of {topic}")
    finally:
        consumer.close()
    assert [(m.offset(), m.value()) for m in got] == [(i, b"good-%d" % i) for i in range(3)]


def _bomb() -> bytes:
    return _with_body(encode_record(0, 0, None, bytes(20_000_000)), count=1,
                      codec=int(Compression.ZSTD))


# (name, records, produce version, topic config, error code, record index or None)
E2E: list[tuple[str, bytes, int, dict[str, str], ErrorCode, int | None]] = [
    *[(name, batch, 9, {}, ErrorCode.invalid_record, index)
      for name, batch, _, index in MALFORMED],
    ("two-batches", _batch(1) + _batch(1), 9, {}, ErrorCode.invalid_record, None),
    ("control-batch", _set(_batch(1), ">h", 21, 0x20), 9, {}, ErrorCode.invalid_record, None),
    ("transactional-batch", _set(_batch(1), ">h", 21, 0x10), 9, {},
     ErrorCode.transactional_id_authorization_failed, None),
    ("codec-5", _with_body(_good(0), count=1, codec=5), 9, {},
     ErrorCode.unsupported_compression_type, None),
    ("codec-7", _with_body(_good(0), count=1, codec=7), 9, {},
     ErrorCode.unsupported_compression_type, None),
    ("garbage-lz4", _with_body(b"\x00" * 9, count=1, attributes=3), 9, {},
     ErrorCode.corrupt_message, None),
    ("garbage-gzip", _with_body(b"\x1f\x8b" + b"\x00" * 9, count=1, attributes=1), 9, {},
     ErrorCode.corrupt_message, None),
    ("zstd-bomb", _bomb(), 9, {"max.message.bytes": "100000"}, ErrorCode.message_too_large,
     None),
    ("zstd-on-v6", _batch(2, compression=Compression.ZSTD), 6, {},
     ErrorCode.unsupported_compression_type, None),
    ("zstd-on-v3", _batch(2, compression=Compression.ZSTD), 3, {},
     ErrorCode.unsupported_compression_type, None),
    ("malformed-on-v7", _with_body(_good(0) + _good(2), count=2), 7, {},
     ErrorCode.invalid_record, None),
    ("no-key-compacted", _batch(2), 9, {"cleanup.policy": "compact"},
     ErrorCode.invalid_record, 0),
    ("timestamp-too-old", _batch(2, start=1000), 9,
     {"message.timestamp.before.max.ms": "3600000"}, ErrorCode.invalid_timestamp, 0),
    ("timestamp-difference", _batch(2, start=4_000_000_000_000), 9,
     {"message.timestamp.difference.max.ms": "3600000"}, ErrorCode.invalid_timestamp, 0),
    ("log-append-time-bit", _set(_batch(2), ">h", 21, 0x08), 9, {},
     ErrorCode.invalid_timestamp, 0),
    ("segment-bytes", _batch(30, size=100), 9, {"segment.bytes": "2000"},
     ErrorCode.record_list_too_large, None),
    ("base-offset-not-zero", _rebase(_batch(2), 7), 9, {}, ErrorCode.invalid_record, None),
]


@pytest.mark.parametrize(("name", "records", "version", "config", "code", "index"), E2E,
                         ids=[e[0] for e in E2E])
def test_refused_on_live_broker_then_good_batch_flows(cluster, topic_name, name, records,
                                                     version, config, code, index):
    create_topic(cluster.bootstrap_servers, topic_name, config=config)
    with WireClient.connect(cluster.bootstrap_servers) as client:
        result = _produce_raw(client, topic_name, records, version=version)
        assert result.error_code == code, result.error_message
        assert result.base_offset == -1
        if version >= 8:
            assert result.error_message
            if index is not None:
                assert result.record_errors[0].batch_index == index
                assert result.record_errors[0].batch_index_error_message
        assert _latest_offset(client, topic_name) == 0
    _produce_and_consume(cluster.bootstrap_servers, topic_name,
                         keyed=config.get("cleanup.policy") == "compact")


def test_other_partitions_of_the_request_are_unaffected(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name, partitions=2)
    bad = _with_body(_good(0) + _good(2), count=2)
    with WireClient.connect(cluster.bootstrap_servers) as client:
        response = client.request(0, 9, {"acks": 1, "timeout": 5000, "topic_data": [
            {"name": topic_name, "partition_data": [{"index": 0, "records": bad},
                                                    {"index": 1, "records": _batch(4)}]}]})
        parts = {p.index: p for p in response.responses[0].partition_responses}
        assert parts[0].error_code == ErrorCode.invalid_record
        assert parts[1].error_code == ErrorCode.none and parts[1].base_offset == 0
        assert _latest_offset(client, topic_name, 0) == 0
        assert _latest_offset(client, topic_name, 1) == 4


def test_producer_max_timestamp_is_corrected_on_live_broker(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name)
    lying = _set(_batch(3), ">q", 35, NOW + 10**9)
    with WireClient.connect(cluster.bootstrap_servers) as client:
        assert _produce_raw(client, topic_name, lying).error_code == ErrorCode.none
        response = client.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0,
                                                 "current_leader_epoch": -1,
                                                 "timestamp": -3}]}]})  # MAX_TIMESTAMP
        part = response.topics[0].partitions[0]
        assert (part.offset, part.timestamp) == (2, NOW + 2)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_confluent_batches_of_every_codec_pass_validation(cluster, topic_name, codec):
    create_topic(cluster.bootstrap_servers, topic_name,
                 config={"cleanup.policy": "compact", "message.timestamp.before.max.ms":
                         "3600000", "message.timestamp.after.max.ms": "3600000"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "compression.type": codec, "linger.ms": 20,
                         "enable.idempotence": True})
    n = 2000  # big batches take the vectorised path
    for i in range(n):
        producer.produce(topic_name, key=b"key-%d" % (i % 50), value=b"value-%d" % i,
                         headers=[("h", b"%d" % i)] if i % 7 == 0 else None, partition=0)
    assert producer.flush(20) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "group.id": "validation-unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    try:
        got = consume_messages(consumer, n, timeout=30, batch=5000,
                               what=f"records of {topic_name}")
    finally:
        consumer.close()
    assert [m.offset() for m in got] == list(range(n))


def test_snappy_xerial_and_bounded_decompression_helpers():
    data = b"abc" * 50_000
    framed = compress(Compression.SNAPPY, data)  # xerial framing, like the Java client
    assert bytes(validation._decompress(2, memoryview(framed), len(data), "")) == data
    with pytest.raises(MessageTooLargeError):
        validation._decompress(2, memoryview(framed), len(data) - 1, "")
    raw = bytes(cramjam.snappy.compress_raw(data))  # librdkafka's raw blocks
    assert bytes(validation._decompress(2, memoryview(raw), len(data), "")) == data


def test_timestamp_limits_from_broker_properties():
    broker = BrokerConfig.from_properties({
        "broker.id": "1", "zookeeper.connect": "127.0.0.1:2181",
        "log.message.timestamp.difference.max.ms": "60000",
        "log.message.timestamp.after.max.ms": "1000"})
    config = broker.topic_config()
    assert (config.timestamp_before_max_ms, config.timestamp_after_max_ms) == (60000, 1000)
    topic = broker.topic_config({"message.timestamp.before.max.ms": "5"})
    assert (topic.timestamp_before_max_ms, topic.timestamp_after_max_ms) == (5, 1000)


def test_records_validated_before_the_idempotence_check(cluster, topic_name):
    """Kafka's order: a malformed batch of an idempotent producer is INVALID_RECORD even when
    its sequence is a duplicate or a gap, and leaves the producer's state alone."""
    create_topic(cluster.bootstrap_servers, topic_name)
    with WireClient.connect(cluster.bootstrap_servers) as client:
        init = client.request(22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                      "producer_id": -1, "producer_epoch": -1})
        pid, epoch = init.producer_id, init.producer_epoch

        def batch(seq: int, *, malformed: bool = False) -> bytes:
            records = _records(2)
            if malformed:
                records[1] = Record(offset=2, timestamp=NOW, key=None, value=b"gap")
            return encode_batch(records, base_offset=0, last_offset_delta=1, producer_id=pid,
                                producer_epoch=epoch, base_sequence=seq)

        assert _produce_raw(client, topic_name, batch(0)).error_code == ErrorCode.none
        for seq in (0, 7):  # a duplicate's sequence, then a gap
            result = _produce_raw(client, topic_name, batch(seq, malformed=True))
            assert result.error_code == ErrorCode.invalid_record
        good = _produce_raw(client, topic_name, batch(2))
        assert (good.error_code, good.base_offset) == (ErrorCode.none, 2)
        assert _latest_offset(client, topic_name) == 4


def test_vector_path_works_in_chunks(monkeypatch):
    monkeypatch.setattr(validation, "VECTOR_CHUNK_RECORDS", 300)
    batch = _batch(1000, keys=True)
    assert _both_paths(batch) == (NOW + 999, NOW + 999)
    records = _records(1000)
    records[650] = Record(offset=651, timestamp=NOW, key=None, value=records[650].value)
    bad_batch = encode_batch(records, base_offset=0, last_offset_delta=999)
    python, vector = _both_paths(bad_batch)
    assert python == vector and python[1][0][0] == 650


@pytest.mark.parametrize(("n", "step"), [(1000, 100), (1000, -50), (9000, 1), (600, 40_000)])
def test_vector_path_reads_three_byte_and_longer_varints(n, step):
    """Offset deltas past 8191 and timestamp deltas of seconds take three bytes (and minutes
    four): both paths read them alike."""
    records = [Record(offset=i, timestamp=NOW + i * step, key=None, value=b"v%d" % i)
               for i in range(n)]
    batch = encode_batch(records)
    expected = max(r.timestamp for r in records)
    assert _both_paths(batch, now=NOW) == (expected, expected)
    assert _vector_accepts(batch, now=NOW)


@pytest.mark.parametrize("size", [1, 100, 500_000])
def test_frame_headers_bound_the_output_buffer(size):
    """lz4/zstd block headers (and gzip's ISIZE) give an upper bound of the decompressed size,
    so one output buffer suffices whatever options the producer's library used."""
    data = (b"record %d " % size) * (size // 10 + 1)
    streams = [
        (3, lz4.frame.compress(data)),
        (3, lz4.frame.compress(data, store_size=False, block_checksum=True,
                               content_checksum=True)),
        (3, bytes(cramjam.lz4.compress(data))),
        (4, bytes(cramjam.zstd.compress(data))),
        (4, zstandard.ZstdCompressor(write_content_size=False, write_checksum=True)
         .compress(data)),
        (1, bytes(cramjam.gzip.compress(data))),
    ]
    for codec, stream in streams:
        bound = validation._size_hint(codec, memoryview(stream))
        assert bound is not None and bound >= len(data)
        assert bytes(validation._decompress(codec, memoryview(stream), 1 << 30, "")) == data
