"""Record decoding/encoding for every codec (loglake.segments.records), cross-checked with
kafka-python's real RecordBatch builder and reader."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import cramjam
import kafka.codec
import kafka.record.default_records as kafka_records
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from loglake.errors import CorruptRecordError, LoglakeError
from loglake.segments import batch
from loglake.segments.records import (
    XERIAL_MAGIC,
    Compression,
    Record,
    compress,
    decode_batch,
    decode_batches,
    decompress,
    encode_batch,
    iter_records,
)

CODECS = list(Compression)

SAMPLE = [
    Record(0, 1_700_000_000_000, b"key-0", b"value" * 40, [("trace", b"abc"), ("empty", None)]),
    Record(1, 1_700_000_000_005, None, b"no key"),
    Record(2, 1_699_999_999_990, b"tombstone", None),  # timestamps need not increase
    Record(3, 1_700_000_000_001, b"", b"", [("ключ", b"\x00\xff")]),
]


class _SnappyShim:
    """python-snappy's API over cramjam, so kafka-python's own xerial framing code runs."""

    @staticmethod
    def compress(data: bytes) -> bytes:
        return bytes(cramjam.snappy.compress_raw(data))

    @staticmethod
    def decompress(data: bytes) -> bytes:
        return bytes(cramjam.snappy.decompress_raw(data))


@pytest.fixture
def kafka_codecs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Give kafka-python snappy/lz4/zstd (it only ships gzip without optional packages)."""
    monkeypatch.setattr(kafka.codec, "snappy", _SnappyShim)
    monkeypatch.setattr(kafka.codec, "lz4", object())
    monkeypatch.setattr(kafka.codec, "zstd", object())
    monkeypatch.setattr(kafka_records, "lz4_encode", lambda d: bytes(cramjam.lz4.compress(d)))
    monkeypatch.setattr(kafka_records, "lz4_decode", lambda d: bytes(cramjam.lz4.decompress(d)))
    monkeypatch.setattr(kafka_records, "zstd_encode", lambda d: bytes(cramjam.zstd.compress(d)))
    monkeypatch.setattr(kafka_records, "zstd_decode", lambda d: bytes(cramjam.zstd.decompress(d)))
    yield


def kafka_python_encode(records: list[Record], codec: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 22,
    )
    for record in records:
        builder.append(
            record.offset,
            timestamp=record.timestamp,
            key=record.key,
            value=record.value,
            headers=list(record.headers),
        )
    return bytes(builder.build())


def assert_same_records(decoded: list[Record], expected: list[Record]) -> None:
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in expected
    ]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_own_encoder_round_trip(codec: Compression) -> None:
    data = encode_batch(SAMPLE, compression=codec, base_offset=0)
    decoded = decode_batch(data)
    assert decoded.compression == codec
    assert decoded.header.record_count == len(SAMPLE)
    assert decoded.header.base_timestamp == SAMPLE[0].timestamp
    assert decoded.header.max_timestamp == max(r.timestamp for r in SAMPLE)
    assert_same_records(decoded.records, SAMPLE)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_decode_kafka_python_batches(codec: Compression, kafka_codecs: None) -> None:
    data = kafka_python_encode(SAMPLE, codec)
    if codec == Compression.SNAPPY:
        assert data[batch.HEADER_SIZE :].startswith(XERIAL_MAGIC)  # the Java-client framing
    decoded = decode_batch(data)
    assert decoded.compression == codec
    assert_same_records(decoded.records, SAMPLE)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_reads_own_batches(codec: Compression, kafka_codecs: None) -> None:
    shifted = [dataclasses.replace(r, offset=r.offset + 10) for r in SAMPLE]
    data = encode_batch(shifted, compression=codec)
    client = DefaultRecordBatch(bytearray(data))
    assert client.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in client]
    assert got == [(r.offset + 10, r.timestamp, r.key, r.value, r.headers) for r in SAMPLE]


def test_raw_snappy_as_librdkafka_writes() -> None:
    body = encode_batch(SAMPLE)[batch.HEADER_SIZE :]
    raw = bytes(cramjam.snappy.compress_raw(body))
    assert decompress(Compression.SNAPPY, raw) == body
    assert decompress(Compression.SNAPPY, compress(Compression.SNAPPY, body)) == body


def test_large_xerial_payload_spans_blocks() -> None:
    payload = bytes(range(256)) * 1000  # > 32 KiB: several xerial blocks
    framed = compress(Compression.SNAPPY, payload)
    assert framed.startswith(XERIAL_MAGIC)
    assert decompress(Compression.SNAPPY, framed) == payload


def test_batch_level_fields() -> None:
    data = encode_batch(
        [dataclasses.replace(r, offset=r.offset + 50) for r in SAMPLE[:2]],
        producer_id=77,
        producer_epoch=2,
        base_sequence=5,
        partition_leader_epoch=3,
        is_transactional=True,
        is_control=True,
    )
    decoded = decode_batch(data)
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == (77, 2, 5)
    assert decoded.leader_epoch == 3
    assert decoded.is_transactional and decoded.is_control
    assert decoded.base_offset == 50
    assert [r.offset for r in decoded.records] == [50, 51]


def test_offset_gaps_and_explicit_last_offset_delta() -> None:
    records = [Record(100, 1, b"a", b"1"), Record(105, 2, b"b", b"2")]
    data = encode_batch(records, last_offset_delta=9)
    (header,) = batch.parse_batches(data, strict=False)
    assert header.base_offset == 100 and header.next_offset == 110
    assert [r.offset for r in decode_batch(data).records] == [100, 105]


def test_log_append_time_batch_uses_max_timestamp() -> None:
    data = encode_batch(SAMPLE, timestamp_type=batch.LOG_APPEND_TIME, max_timestamp=123)
    records = decode_batch(data).records
    assert {r.timestamp for r in records} == {123}
    assert {r.timestamp_type for r in records} == {1}


def test_iter_records_and_decode_batches() -> None:
    data = encode_batch(SAMPLE[:2]) + encode_batch(SAMPLE[2:], compression=Compression.ZSTD)
    assert [b.header.record_count for b in decode_batches(data)] == [2, 2]
    assert [r.offset for r in iter_records(data)] == [0, 1, 2, 3]


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name)
def test_garbage_compressed_payload_is_corrupt(codec: Compression) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\x82SNAPPY\x00 this is not compressed data at all")


def test_record_count_larger_than_records_is_corrupt() -> None:
    data = bytearray(encode_batch(SAMPLE))
    data[57:61] = (len(SAMPLE) + 1).to_bytes(4, "big")
    data[17:21] = batch.compute_crc(data, 0, len(data)).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError):
        decode_batch(data)


# ------------------------------------------------------------------------------ properties

_header_keys = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
_records = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=1000),  # offset gap
        st.integers(min_value=-1, max_value=2**45),  # timestamp
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=200),
        st.lists(st.tuples(_header_keys, st.none() | st.binary(max_size=10)), max_size=3),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(_records, st.sampled_from(CODECS), st.integers(min_value=0, max_value=2**40))
def test_encode_decode_round_trip(
    specs: list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    codec: Compression,
    base: int,
) -> None:
    records = []
    offset = base
    for gap, timestamp, key, value, headers in specs:
        offset += gap
        records.append(Record(offset, timestamp, key, value, headers))
    data = encode_batch(records, compression=codec)
    assert_same_records(decode_batch(data).records, records)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_decode_arbitrary_bytes_raises_only_loglake_errors(blob: bytes) -> None:
    with contextlib.suppress(LoglakeError):
        decode_batches(blob)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=200))
def test_decompress_arbitrary_bytes_raises_only_loglake_errors(
    codec: Compression, blob: bytes
) -> None:
    with contextlib.suppress(LoglakeError):
        decompress(codec, blob)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(CODECS),
    st.integers(min_value=0, max_value=10_000),
    st.binary(min_size=1, max_size=6),
)
def test_corrupted_records_section_raises_only_loglake_errors(
    codec: Compression, where: int, junk: bytes
) -> None:
    data = bytearray(encode_batch(SAMPLE, compression=codec))
    where = batch.HEADER_SIZE + where % (len(data) - batch.HEADER_SIZE)
    data[where : where + len(junk)] = junk
    with contextlib.suppress(LoglakeError):  # the records decoder itself must hold up
        decode_batch(data, verify_crc=False)
