"""Tier row conversion (loglake.segments.tier_rows): Kafka batches <-> Delta table rows.

Everything is checked against a reference built from records.py's record-at-a-time decoder and
encoder (the conversion's previous implementation): the rows must be equal, the re-encoded
batches byte for byte equal, and corrupt input must fail exactly where the reference fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import Callable, Sequence

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loglake.errors import CorruptRecordError, InvalidRecordError, LoglakeError
from loglake.segments import batch, tier_codec, tier_rows
from loglake.segments.records import (
    Compression,
    Record,
    decode_batches,
    decode_records,
    encode_batch,
)
from loglake.segments.tier_rows import (
    FILE_SCHEMA,
    TIMESTAMP_TYPE,
    batches_to_rows,
    iter_batch_groups,
    rows_to_batches,
)

CODECS = list(Compression)
TS = 1_700_000_000_000


# -------------------------------------------------------------------------------- reference


def reference_rows(data: bytes, start_offset: int = 0, end_offset: int | None = None,
                   verify_crc: bool = True) -> pa.Table:
    """Rows as the record-at-a-time implementation built them."""
    columns: dict[str, list[object]] = {name: [] for name in FILE_SCHEMA.names}
    for header in batch.iter_batches(data, verify_crc=verify_crc):
        if header.last_offset < start_offset:
            continue
        if end_offset is not None and header.base_offset >= end_offset:
            break
        records = decode_records(data, header)
        if header.base_offset < start_offset or (
            end_offset is not None and header.last_offset >= end_offset
        ):
            records = [r for r in records if r.offset >= start_offset
                       and (end_offset is None or r.offset < end_offset)]
        columns["offset"] += [r.offset for r in records]
        columns["timestamp"] += [r.timestamp * 1000 for r in records]
        columns["key"] += [r.key for r in records]
        columns["value"] += [r.value for r in records]
        columns["headers"] += [[{"key": k, "value": v} for k, v in r.headers] for r in records]
        for name, value in {
            "timestamp_type": header.timestamp_type, "batch_offset": header.base_offset,
            "batch_last_offset": header.last_offset, "attributes": header.attributes,
            "leader_epoch": header.partition_leader_epoch, "producer_id": header.producer_id,
            "producer_epoch": header.producer_epoch, "base_sequence": header.base_sequence,
            "is_control": header.is_control,
        }.items():
            columns[name] += [value] * len(records)
    arrays = [
        pa.array(columns[f.name], pa.int64()).cast(TIMESTAMP_TYPE) if f.name == "timestamp"
        else pa.array(columns[f.name], f.type)
        for f in FILE_SCHEMA
    ]
    return pa.Table.from_arrays(arrays, schema=FILE_SCHEMA)


def reference_batches(rows: pa.Table) -> list[bytes]:
    """Batches as the record-at-a-time implementation re-encoded them."""
    cols = {name: rows.column(name).to_pylist() for name in FILE_SCHEMA.names}
    timestamps = rows.column("timestamp").cast(pa.int64()).to_pylist()
    out = []
    for start, stop in iter_batch_groups(rows):
        records = [Record(cols["offset"][i], timestamps[i] // 1000, cols["key"][i],
                          cols["value"][i],
                          [(h["key"], h["value"]) for h in cols["headers"][i] or ()])
                   for i in range(start, stop)]
        attributes = cols["attributes"][start]
        log_append = cols["timestamp_type"][start] == batch.LOG_APPEND_TIME
        out.append(encode_batch(
            records, base_offset=cols["batch_offset"][start], compression=attributes & 7,
            timestamp_type=cols["timestamp_type"][start],
            max_timestamp=records[0].timestamp if log_append else None,
            last_offset_delta=cols["batch_last_offset"][start] - cols["batch_offset"][start],
            producer_id=cols["producer_id"][start], producer_epoch=cols["producer_epoch"][start],
            base_sequence=cols["base_sequence"][start],
            partition_leader_epoch=cols["leader_epoch"][start],
            is_transactional=bool(attributes & batch.TRANSACTIONAL_BIT),
            is_control=bool(attributes & batch.CONTROL_BIT),
        ))
    return out


def records_of(data: bytes) -> list[tuple[object, ...]]:
    """Everything a consumer sees of each record, plus its batch's fields."""
    return [(d.base_offset, d.header.last_offset, d.header.attributes, d.producer_id,
             d.producer_epoch, d.base_sequence, d.leader_epoch, d.header.max_timestamp
             if d.timestamp_type else None,
             r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
            for d in decode_batches(data) for r in d.records]


def assert_converts(data: bytes, start: int = 0, end: int | None = None) -> pa.Table:
    """batches_to_rows == the reference; rows_to_batches == the reference, byte for byte;
    the re-encoded batches decode to the same records (all of them when no range cuts)."""
    rows = batches_to_rows(data, start_offset=start, end_offset=end)
    assert rows.schema == FILE_SCHEMA
    expected = reference_rows(data, start, end)
    assert rows.equals(expected), (rows.to_pylist()[:3], expected.to_pylist()[:3])
    encoded = rows_to_batches(rows)
    assert encoded == reference_batches(expected)
    assert batches_to_rows(b"".join(encoded)).equals(rows)
    if start == 0 and end is None:
        assert records_of(b"".join(encoded)) == records_of(data)
    return rows


def payload(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


SAMPLE = [
    Record(0, TS, b"key-0", b"value" * 40, [("trace", b"abc"), ("empty", None)]),
    Record(1, TS + 5, None, b"no key"),
    Record(2, TS - 10, b"tombstone", None),  # timestamps need not increase
    Record(3, TS + 1, b"", b"", [("ключ", b"\x00\xff"), ("", b"")]),
]


# ------------------------------------------------------------------------------ examples


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_round_trip_every_codec(codec: Compression) -> None:
    data = b"".join(
        encode_batch([dataclasses.replace(r, offset=r.offset + 10 * i) for r in SAMPLE],
                     compression=codec, base_offset=10 * i)
        for i in range(3))
    rows = assert_converts(data)
    assert rows.num_rows == 12
    assert set(rows.column("attributes").to_pylist()) == {int(codec)}
    assert [b[22] & 7 for b in rows_to_batches(rows)] == [int(codec)] * 3


def test_mixed_codecs_in_one_segment() -> None:
    data = b"".join(
        encode_batch([Record(i * 4 + j, TS + j, b"k%d" % j, payload(50, i * 4 + j))
                      for j in range(4)], compression=codec)
        for i, codec in enumerate(CODECS * 2))
    assert assert_converts(data).num_rows == 40


def test_headers_with_null_values_and_odd_keys() -> None:
    records = [
        Record(0, TS, b"k", b"v", [("a", None)]),
        Record(1, TS, b"k", b"v", []),
        Record(2, TS, b"k", b"v", [("x", b"1"), ("x", b"2"), ("", None), ("日本", b"\x00")]),
        Record(3, TS, None, None, [("only", b"")]),
        Record(4, TS, b"k", b"v"),
    ]
    rows = assert_converts(encode_batch(records))
    assert rows.column("headers").to_pylist() == [
        [{"key": "a", "value": None}], [],
        [{"key": "x", "value": b"1"}, {"key": "x", "value": b"2"}, {"key": "", "value": None},
         {"key": "日本", "value": b"\x00"}],
        [{"key": "only", "value": b""}], [],
    ]
    assert rows.column("headers").null_count == 0


def test_header_key_invalid_utf8_is_replaced() -> None:
    data = bytearray(encode_batch([Record(0, TS, None, b"v", [("ab", b"1")])]))
    where = bytes(data).index(b"ab")
    data[where] = 0xFF
    data[17:21] = batch.compute_crc(data, 0, len(data)).to_bytes(4, "big")
    rows = assert_converts(bytes(data))
    assert rows.column("headers").to_pylist() == [[{"key": "\ufffdb", "value": b"1"}]]


def test_many_headers_per_record() -> None:
    limit = tier_codec.MAX_VECTOR_HEADERS
    records = [Record(i, TS, None, b"v", [(f"h{j}", bytes([j]) if j % 3 else None)
                                          for j in range(count)])
               for i, count in enumerate([limit + 5, 0, 1, limit, 2])]
    rows = assert_converts(encode_batch(records))
    assert [len(h) for h in rows.column("headers").to_pylist()] == [limit + 5, 0, 1, limit, 2]


def test_null_and_empty_keys_and_values() -> None:
    records = [Record(i, TS, key, value) for i, (key, value) in enumerate(
        [(None, None), (b"", b""), (None, b"x"), (b"x", None), (b"", None), (None, b"")])]
    rows = assert_converts(encode_batch(records))
    assert rows.column("key").to_pylist() == [None, b"", None, b"x", b"", None]
    assert rows.column("value").to_pylist() == [None, b"", b"x", None, None, b""]


def test_all_null_keys_and_values() -> None:
    assert_converts(encode_batch([Record(i, TS, None, None) for i in range(5)]))


def test_large_values_and_long_varints() -> None:
    records = [
        Record(0, TS, payload(20_000, 1), payload(300_000, 2)),  # 3-byte lengths
        Record(1, TS + 10**9, None, b"far future"),  # 5-byte timestamp delta
        Record(2, TS - 10**12, b"k", b"far past"),  # negative delta
        Record(3, 0, None, b"epoch"),
        Record(20_000, TS, None, b"offset delta needs 3 bytes"),
    ]
    assert_converts(encode_batch(records))


def test_negative_timestamps_round_trip() -> None:
    records = [Record(0, -1, None, b"a"), Record(1, -1_000_001, None, b"b"),
               Record(2, 5, None, b"c")]
    rows = assert_converts(encode_batch(records))
    assert rows.column("timestamp").cast(pa.int64()).to_pylist() == [-1000, -1_000_001_000,
                                                                     5000]


def test_sub_millisecond_timestamps_floor_like_python() -> None:
    """Rows written by other tools may carry microseconds; batches get ``us // 1000``."""
    rows = batches_to_rows(encode_batch([Record(i, 0, None, b"v") for i in range(4)]))
    micros = pa.array([-1500, -1000, 999, 1500], pa.int64()).cast(TIMESTAMP_TYPE)
    rows = rows.set_column(FILE_SCHEMA.get_field_index("timestamp"), "timestamp", micros)
    encoded = rows_to_batches(rows)
    assert encoded == reference_batches(rows)
    assert [r[9] for r in records_of(b"".join(encoded))] == [-2, -1, 0, 1]


def test_log_append_time() -> None:
    data = encode_batch(SAMPLE, timestamp_type=batch.LOG_APPEND_TIME, max_timestamp=TS + 999)
    rows = assert_converts(data)
    assert set(rows.column("timestamp").cast(pa.int64()).to_pylist()) == {(TS + 999) * 1000}
    assert set(rows.column("timestamp_type").to_pylist()) == {1}
    (again,) = rows_to_batches(rows)
    header = batch.read_header(again)
    assert header.timestamp_type == 1 and header.max_timestamp == TS + 999


def test_control_and_transactional_batches() -> None:
    data = (
        encode_batch([Record(0, TS, b"k", b"v"), Record(1, TS, b"k", b"w")], producer_id=42,
                     producer_epoch=3, base_sequence=0, is_transactional=True,
                     partition_leader_epoch=7)
        + encode_batch([Record(2, TS, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05")],
                       producer_id=42, producer_epoch=3, is_transactional=True,
                       is_control=True, partition_leader_epoch=7)
    )
    rows = assert_converts(data)
    assert rows.column("is_control").to_pylist() == [False, False, True]
    assert rows.column("producer_id").to_pylist() == [42] * 3
    assert rows.column("leader_epoch").to_pylist() == [7] * 3
    control = batch.read_header(rows_to_batches(rows)[1])
    assert control.is_control and control.is_transactional and control.producer_epoch == 3


def test_offset_range_filtering() -> None:
    data = b"".join(
        encode_batch([Record(b * 10 + i, TS + i, None, b"%d" % (b * 10 + i))
                      for i in range(10)], compression=b % 5)
        for b in range(5))
    for start, end, expected in [
        (0, None, list(range(50))), (15, None, list(range(15, 50))), (0, 25, list(range(25))),
        (13, 17, list(range(13, 17))), (20, 30, list(range(20, 30))), (49, 50, [49]),
        (50, None, []), (7, 7, []), (10, 11, [10]),
    ]:
        rows = assert_converts(data, start, end)
        assert rows.column("offset").to_pylist() == expected
        # a cut batch keeps its original bounds, so re-encoding restores them
        assert all(o // 10 * 10 == b for o, b in zip(
            rows.column("offset").to_pylist(), rows.column("batch_offset").to_pylist(),
            strict=True))


def test_batches_after_compaction_gaps() -> None:
    data = (
        encode_batch([Record(100, TS, b"a", b"1"), Record(105, TS + 1, b"b", b"2")],
                     last_offset_delta=9)
        + encode_batch([Record(200, TS, b"c", b"3")], base_offset=110, last_offset_delta=99)
        + encode_batch([Record(300, TS, b"d", b"4"), Record(309, TS, b"e", None)],
                       compression=Compression.ZSTD)
    )
    rows = assert_converts(data)
    assert rows.column("offset").to_pylist() == [100, 105, 200, 300, 309]
    assert rows.column("batch_last_offset").to_pylist() == [109, 109, 209, 309, 309]
    assert_converts(data, 101, 301)
    (header,) = batch.parse_batches(rows_to_batches(rows)[1], strict=False)
    assert (header.base_offset, header.last_offset, header.record_count) == (110, 209, 1)


def test_empty_batch_left_by_compaction_is_skipped() -> None:
    empty = bytearray(encode_batch([Record(5, TS, b"k", b"v")]))
    body_start = batch.HEADER_SIZE
    del empty[body_start:]
    batch.HEADER.pack_into(empty, 0, 0, len(empty) - batch.LOG_OVERHEAD, 0, 2, 0, 0, 9, TS, TS,
                           -1, -1, -1, 0)
    empty[17:21] = batch.compute_crc(empty, 0, len(empty)).to_bytes(4, "big")
    data = bytes(empty) + encode_batch([Record(10, TS, b"k", b"v")])
    rows = assert_converts(data)
    assert rows.column("offset").to_pylist() == [10]


def test_empty_input() -> None:
    rows = batches_to_rows(b"")
    assert rows.num_rows == 0 and rows.schema == FILE_SCHEMA
    assert rows_to_batches(rows) == []
    assert list(iter_batch_groups(rows)) == []


def test_buffer_types() -> None:
    data = encode_batch(SAMPLE)
    expected = batches_to_rows(data)
    assert batches_to_rows(bytearray(data)).equals(expected)
    assert batches_to_rows(memoryview(data)).equals(expected)


def test_rows_from_parquet_like_inputs() -> None:
    """Chunked tables, record batches, and null header lists (rows written by other tools)."""
    data = b"".join(encode_batch([Record(b * 3 + i, TS, None, b"v") for i in range(3)])
                    for b in range(4))
    rows = batches_to_rows(data)
    expected = rows_to_batches(rows)
    chunked = pa.concat_tables([rows.slice(0, 4), rows.slice(4, 5), rows.slice(9)])
    assert chunked.column("offset").num_chunks == 3
    assert rows_to_batches(chunked) == expected
    assert rows_to_batches(rows.to_batches()[0]) == expected
    assert rows_to_batches(rows.slice(3, 6)) == expected[1:3]
    nulls = rows.set_column(FILE_SCHEMA.get_field_index("headers"), "headers",
                            pa.nulls(rows.num_rows, tier_rows.HEADER_TYPE))
    assert rows_to_batches(nulls) == expected


def test_encoding_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"".join(encode_batch([Record(b * 7 + i, TS + b, b"k", payload(30, b * 7 + i),
                                         [("h", b"%d" % i)] if i % 2 else [])
                                  for i in range(7)], compression=b % 5)
                    for b in range(9))
    rows = batches_to_rows(data)
    whole = rows_to_batches(rows)
    monkeypatch.setattr(tier_rows, "ENCODE_CHUNK_ROWS", 10)
    assert rows_to_batches(rows) == whole == reference_batches(rows)


def test_iter_batch_groups() -> None:
    data = b"".join(encode_batch([Record(b * 10 + i, TS, None, b"v") for i in range(b + 1)],
                                 base_offset=b * 10) for b in range(4))
    assert list(iter_batch_groups(batches_to_rows(data))) == [(0, 1), (1, 3), (3, 6), (6, 10)]


def test_offset_below_its_batch_is_rejected() -> None:
    rows = batches_to_rows(encode_batch(SAMPLE, base_offset=0))
    bad = rows.set_column(FILE_SCHEMA.get_field_index("batch_offset"), "batch_offset",
                          pa.array([2] * rows.num_rows, pa.int64()))
    with pytest.raises(InvalidRecordError, match="below base offset"):
        rows_to_batches(bad)


def test_crc_mismatch_is_corrupt() -> None:
    data = bytearray(encode_batch(SAMPLE))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        batches_to_rows(bytes(data))


def _recrc(data: bytearray) -> bytes:
    data[17:21] = batch.compute_crc(data, 0, len(data)).to_bytes(4, "big")
    return bytes(data)


@pytest.mark.parametrize("count", [len(SAMPLE) - 1, len(SAMPLE) + 1])
def test_wrong_record_count_is_corrupt(count: int) -> None:
    data = bytearray(encode_batch(SAMPLE))
    data[57:61] = count.to_bytes(4, "big")
    with pytest.raises(CorruptRecordError):
        batches_to_rows(_recrc(data))


def test_truncated_record_is_corrupt() -> None:
    data = bytearray(encode_batch(SAMPLE))
    del data[-3:]
    data[8:12] = (len(data) - batch.LOG_OVERHEAD).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError):
        batches_to_rows(_recrc(data))


# ------------------------------------------------------------------------------ properties

@dataclasses.dataclass(frozen=True)
class BatchSpec:
    """One generated batch: records as (offset gap after it, timestamp, key, value, headers)."""

    records: list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]
    codec: Compression
    append_time: int | None  # LogAppendTime maxTimestamp
    transactional: bool
    control: bool
    extra: int  # last offset delta beyond the last record (compaction dropped the tail)
    producer: tuple[int, int, int, int]  # producer id, epoch, base sequence, leader epoch


_header_keys = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
_record = st.tuples(
    st.sampled_from([1, 1, 1, 2, 100, 70_000]),
    st.integers(min_value=-(2**40), max_value=2**45) | st.sampled_from([TS, TS + 1, 0]),
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=200) | st.sampled_from([b"x" * 9000]),
    st.lists(st.tuples(_header_keys, st.none() | st.binary(max_size=10)), max_size=3),
)
_batch = st.builds(
    BatchSpec,
    st.lists(_record, min_size=1, max_size=12),
    st.sampled_from(CODECS),
    st.sampled_from([None, TS + 7]),
    st.booleans(),
    st.booleans(),
    st.sampled_from([0, 0, 3]),
    st.tuples(st.sampled_from([-1, 0, 2**40]), st.sampled_from([-1, 0, 5]),
              st.sampled_from([-1, 0, 2**31 - 1]), st.integers(min_value=0, max_value=9)),
)


def _segment(specs: Sequence[BatchSpec], base: int) -> bytes:
    out = []
    offset = base
    for spec in specs:
        records = []
        for gap, timestamp, key, value, headers in spec.records:
            records.append(Record(offset, timestamp, key, value, headers))
            offset += gap
        producer_id, producer_epoch, sequence, epoch = spec.producer
        out.append(encode_batch(
            records, base_offset=records[0].offset, compression=spec.codec,
            timestamp_type=0 if spec.append_time is None else batch.LOG_APPEND_TIME,
            max_timestamp=spec.append_time,
            last_offset_delta=records[-1].offset - records[0].offset + spec.extra,
            producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=sequence,
            partition_leader_epoch=epoch, is_transactional=spec.transactional,
            is_control=spec.control,
        ))
        offset = records[-1].offset + spec.extra + 1
    return b"".join(out)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_batch, min_size=1, max_size=5), st.integers(min_value=0, max_value=2**40))
def test_round_trip_property(specs: list[BatchSpec], base: int) -> None:
    """rows_to_batches(batches_to_rows(x)) decodes to the same records as x."""
    data = _segment(specs, base)
    rows = batches_to_rows(data)
    again = b"".join(rows_to_batches(rows))
    assert records_of(again) == records_of(data)
    assert rows.equals(reference_rows(data))
    assert batches_to_rows(again).equals(rows)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_batch, min_size=1, max_size=4), st.integers(min_value=0, max_value=60),
       st.integers(min_value=0, max_value=60))
def test_offset_range_property(specs: list[BatchSpec], skip: int, take: int) -> None:
    data = _segment(specs, 1000)
    offsets = reference_rows(data).column("offset").to_pylist()
    start = offsets[min(skip, len(offsets) - 1)] + skip % 2
    assert_converts(data, start, start + take)


def _outcome(call: Callable[[], pa.Table]) -> pa.Table | str:
    try:
        return call()
    except LoglakeError as exc:
        return type(exc).__name__
    except (ValueError, OverflowError):  # out-of-range values the reference ran into
        return "out of range"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_batch, min_size=1, max_size=3), st.integers(min_value=0),
       st.binary(min_size=1, max_size=4), st.booleans(), st.booleans())
def test_corrupt_data_fails_like_the_reference(
    specs: list[BatchSpec], where: int, junk: bytes, in_records: bool, cut: bool
) -> None:
    """Junk written into a records section (or anywhere: batch headers too), CRC not checked:
    the conversion fails exactly when the record-at-a-time decoder does, with a
    CorruptRecordError where that ran into out-of-range values; otherwise it returns the
    same rows."""
    specs = [dataclasses.replace(s, codec=Compression.NONE) for s in specs]
    data = bytearray(_segment(specs, 0))
    if in_records:
        sections = list(batch.iter_batches(bytes(data), verify_crc=False))
        target = sections[where % len(sections)]
        body = target.position + batch.HEADER_SIZE
        at = body + (where // len(sections)) % (target.end_position - body)
        piece = junk[: target.end_position - at]
    else:
        at = where % len(data)
        piece = junk
    data[at : at + len(piece)] = piece
    corrupted = bytes(data)
    start, end = (3, 3 + where % 50) if cut else (0, None)
    expected = _outcome(lambda: reference_rows(corrupted, start, end, verify_crc=False))
    got = _outcome(lambda: batches_to_rows(corrupted, start_offset=start, end_offset=end,
                                           verify_crc=False))
    if isinstance(expected, pa.Table) and got == "CorruptRecordError":
        # the one deliberate difference: a batch whose offsets or timestamps do not fit 64
        # bits fails the conversion even when the range would drop its records
        assert _has_out_of_range_record(corrupted)
    elif isinstance(expected, pa.Table):
        assert isinstance(got, pa.Table) and got.equals(expected)
    else:
        assert got == ("CorruptRecordError" if expected == "out of range" else expected)


def _has_out_of_range_record(data: bytes) -> bool:
    limit = 2**63
    for header in batch.iter_batches(data, verify_crc=False):
        if header.last_offset >= limit:
            return True
        with contextlib.suppress(LoglakeError):
            for record in decode_records(data, header):
                if not (-limit <= record.offset < limit and -limit <= record.timestamp < limit):
                    return True
    return False


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.booleans())
def test_arbitrary_bytes_raise_only_loglake_errors(blob: bytes, verify_crc: bool) -> None:
    with contextlib.suppress(LoglakeError):
        batches_to_rows(blob, verify_crc=verify_crc)
