"""RecordBatch v2 header parsing, validation and in-place patching (loglake.segments.batch)."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from loglake.errors import CorruptRecordError, InvalidRecordError, LoglakeError
from loglake.segments import batch
from loglake.segments.records import Compression, Record, decode_batch, encode_batch


def make_batch(
    count: int = 3, *, base_timestamp: int = 1_700_000_000_000, **kwargs: object
) -> bytes:
    records = [
        Record(i, base_timestamp + i, f"k{i}".encode(), f"value-{i}".encode()) for i in range(count)
    ]
    return encode_batch(records, **kwargs)  # type: ignore[arg-type]


def kafka_python_batch(count: int = 3) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=42,
        producer_epoch=1,
        base_sequence=7,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(i, timestamp=1000 + i, key=b"k", value=b"v" * i, headers=[("h", b"x")])
    return bytes(builder.build())


def test_header_fields_of_own_batch() -> None:
    data = make_batch(
        5,
        producer_id=9,
        producer_epoch=3,
        base_sequence=11,
        partition_leader_epoch=4,
        is_transactional=True,
    )
    (header,) = batch.parse_batches(data)
    assert header.position == 0
    assert header.size == len(data)
    assert header.end_position == len(data)
    assert header.magic == 2
    assert header.record_count == 5
    assert header.last_offset_delta == 4
    assert header.next_offset == 5
    assert header.base_timestamp == 1_700_000_000_000
    assert header.max_timestamp == 1_700_000_000_004
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 3, 11)
    assert header.last_sequence == 15
    assert header.partition_leader_epoch == 4
    assert header.is_transactional and not header.is_control
    assert header.timestamp_type == batch.CREATE_TIME
    assert header.compression == 0


def test_kafka_python_batch_parses() -> None:
    data = kafka_python_batch(4)
    (header,) = batch.parse_batches(data)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 1, 7)
    assert header.record_count == 4
    assert header.max_timestamp == 1003


def test_several_batches_back_to_back() -> None:
    data = make_batch(2) + make_batch(3, compression=Compression.GZIP) + kafka_python_batch(1)
    headers = batch.parse_batches(data)
    assert [h.record_count for h in headers] == [2, 3, 1]
    assert headers[1].position == headers[0].size
    assert headers[2].position == headers[0].size + headers[1].size
    assert headers[1].compression == Compression.GZIP


def test_crc_mismatch_is_corrupt() -> None:
    data = bytearray(make_batch())
    data[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        batch.parse_batches(data)


def test_crc_not_checked_when_disabled() -> None:
    data = bytearray(make_batch())
    data[-1] ^= 0x01
    assert list(batch.iter_batches(data, verify_crc=False))


@pytest.mark.parametrize("cut", [1, 11, 12, 30, 60, 61])
def test_truncated_batch_is_corrupt(cut: int) -> None:
    data = make_batch()
    with pytest.raises(CorruptRecordError):
        batch.parse_batches(data[: len(data) - cut] if cut < len(data) else data[:cut])


def test_truncated_second_batch_is_corrupt() -> None:
    data = make_batch() + make_batch()[:40]
    with pytest.raises(CorruptRecordError, match="truncated"):
        batch.parse_batches(data)


def test_too_small_length_is_corrupt() -> None:
    data = bytearray(make_batch())
    struct.pack_into(">i", data, 8, 10)
    with pytest.raises(CorruptRecordError, match="minimum"):
        batch.parse_batches(data)


@pytest.mark.parametrize("magic", [0, 1, 3])
def test_wrong_magic_is_invalid(magic: int) -> None:
    data = bytearray(make_batch())
    data[16] = magic
    with pytest.raises(InvalidRecordError, match="magic"):
        batch.parse_batches(data)


def test_empty_produce_is_invalid() -> None:
    with pytest.raises(InvalidRecordError):
        batch.parse_batches(b"")


def _rewrite(data: bytes, **fields: int) -> bytes:
    """Change header fields and recompute the CRC (a well-formed but invalid batch)."""
    buf = bytearray(data)
    offsets = {"last_offset_delta": (23, ">i"), "record_count": (57, ">i")}
    for name, value in fields.items():
        position, fmt = offsets[name]
        struct.pack_into(fmt, buf, position, value)
    struct.pack_into(">I", buf, 17, batch.compute_crc(buf, 0, len(buf)))
    return bytes(buf)


@pytest.mark.parametrize("count", [0, -1])
def test_non_positive_record_count_is_invalid(count: int) -> None:
    with pytest.raises(InvalidRecordError, match="record count"):
        batch.parse_batches(_rewrite(make_batch(), record_count=count))


def test_inconsistent_last_offset_delta_is_invalid() -> None:
    with pytest.raises(InvalidRecordError, match="lastOffsetDelta"):
        batch.parse_batches(_rewrite(make_batch(3), last_offset_delta=5))
    # on-disk (compacted) batches may have gaps: not strict
    (header,) = batch.parse_batches(_rewrite(make_batch(3), last_offset_delta=5), strict=False)
    assert header.next_offset == 6


def test_patch_offset_and_epoch_keep_crc_valid() -> None:
    data = bytearray(make_batch(2) + make_batch(3))
    headers = batch.parse_batches(data)
    batch.patch_base_offset(data, headers[0].position, 100)
    batch.patch_leader_epoch(data, headers[0].position, 7)
    batch.patch_base_offset(data, headers[1].position, 102)
    patched = batch.parse_batches(data)  # CRC still valid
    assert [h.base_offset for h in patched] == [100, 102]
    assert patched[0].partition_leader_epoch == 7
    decoded = decode_batch(data, headers[1].position)
    assert [r.offset for r in decoded.records] == [102, 103, 104]


def test_log_append_time_rewrite() -> None:
    data = bytearray(kafka_python_batch(3))
    (header,) = batch.parse_batches(data)
    attributes = batch.set_log_append_time(data, 0, header.size, 5_000)
    (rewritten,) = batch.parse_batches(data)  # CRC recomputed
    assert rewritten.attributes == attributes
    assert rewritten.timestamp_type == batch.LOG_APPEND_TIME
    assert rewritten.max_timestamp == 5_000
    assert rewritten.base_timestamp == header.base_timestamp
    decoded = decode_batch(data)
    assert [r.timestamp for r in decoded.records] == [5_000] * 3
    assert all(r.timestamp_type == batch.LOG_APPEND_TIME for r in decoded.records)
    # a real client agrees
    client_view = DefaultRecordBatch(bytes(data))
    assert client_view.validate_crc()
    assert [r.timestamp for r in client_view] == [5_000] * 3


def test_peek_header_reads_only_the_header() -> None:
    data = make_batch(4)
    header = batch.peek_header(data[: batch.HEADER_SIZE], position=123)
    assert header.position == 123 and header.record_count == 4
    with pytest.raises(CorruptRecordError):
        batch.peek_header(data[:40])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_parse_arbitrary_bytes_raises_only_loglake_errors(blob: bytes) -> None:
    with contextlib.suppress(LoglakeError):
        batch.parse_batches(blob)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=400), st.binary(min_size=1, max_size=8))
def test_mutated_valid_batch_raises_only_loglake_errors(where: int, junk: bytes) -> None:
    data = bytearray(make_batch(3) + make_batch(2))
    where %= len(data)
    data[where : where + len(junk)] = junk
    with contextlib.suppress(LoglakeError):
        batch.parse_batches(data)
