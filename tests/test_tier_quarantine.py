"""A tierer that cannot be poisoned: bytes of a sealed segment that do not decode are quarantined
(tier_quarantine.py, row format in tier_rows.py), never retried forever.

In memory: every kind of damage (failed CRC, a broken record varint, a wrong record count,
garbage under lz4, a damaged length or base offset, junk and stray copies between batches) --
every intact record comes out exactly once at its offset, the damage as quarantined rows in
offset order; a property test over random damage. On local storage: quarantined rows in the
Delta table (counted from file statistics, skipped by tier reads and rewrites, kept by
compaction), tables created before the ``decode_error`` column, the failure log. With a real
broker: a log poisoned on disk before the broker starts is tiered past, retention deletes it,
a consumer from 0 reads every good record (the poison is a gap), the status counts it, and the
broker log does not grow per tier attempt; storage that fails is logged with a count.
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loglake.broker.failure_log import FailureLog
from loglake.catalog.zookeeper import ClusterCatalog
from loglake.client.admin import Admin
from loglake.compaction.rewrite import RewritePlan, rewrite_partition
from loglake.dev.harness import DevCluster, wait_until
from loglake.segments import batch, checkpoint
from loglake.segments.filenames import LOG_SUFFIX, RECOVERY_POINT_CHECKPOINT, parse_segment_name
from loglake.segments.records import Compression, Record, encode_batch
from loglake.segments.storage import Storage
from loglake.segments.tier_quarantine import MAX_RAW_BYTES, segment_rows
from loglake.segments.tier_rows import (
    DECODE_ERROR,
    FILE_SCHEMA,
    STORED_SCHEMA,
    TABLE_SCHEMA,
    batches_to_rows,
    rows_to_batches,
)
from loglake.segments.tiered_table import TieredTable, write_segment_file
from tests.admin_util import create_topic
from tests.clients import poll_message
from tests.tiering_util import SMALL_SEGMENTS, Sent, by_place, produce, wait_local_start

TS = 1_700_000_000_000

# ------------------------------------------------------------------------------ poison kit


def recrc(data: bytearray, position: int = 0, size: int | None = None) -> None:
    """Recompute the CRC of the batch at ``position`` (damage that still passes the CRC)."""
    size = len(data) - position if size is None else size
    data[position + 17 : position + 21] = batch.compute_crc(data, position, size).to_bytes(
        4, "big")


def poison(data: bytearray, header: batch.BatchHeader, kind: str) -> None:
    """Damage the batch ``header`` of ``data`` in place, keeping its size (so a segment's
    indexes stay valid): ``varint`` (first record's length -1, CRC fixed), ``count`` (record
    count + 1, CRC fixed), ``garbage`` (payload overwritten, CRC fixed: under a codec it does
    not decompress), ``crc`` (one byte flipped, CRC left wrong)."""
    body = header.position + batch.HEADER_SIZE
    if kind == "varint":
        assert header.compression == 0
        data[body] = 0x01  # zig-zag -1: a record length below the minimum
        recrc(data, header.position, header.size)
    elif kind == "count":
        data[header.position + 57 : header.position + 61] = (header.record_count + 1).to_bytes(
            4, "big")
        recrc(data, header.position, header.size)
    elif kind == "garbage":
        for i in range(body, header.end_position):
            data[i] = (i * 37 + 11) & 0xFF
        recrc(data, header.position, header.size)
    elif kind == "crc":
        data[header.end_position - 1] ^= 0xFF
    else:
        raise ValueError(kind)


def make_batches(count: int, per: int = 5, *, base: int = 0,
                 codec: Compression = Compression.NONE) -> list[bytes]:
    return [encode_batch([Record(o, TS + o, b"k%d" % (o % 3), b"value-%d" % o,
                                 [("h", b"%d" % o)]) for o in range(start, start + per)],
                         base_offset=start, compression=codec)
            for start in range(base, base + count * per, per)]


def records(rows: pa.Table) -> pa.Table:
    """The record rows (FILE_SCHEMA) of tier rows: quarantined rows left out."""
    if DECODE_ERROR in rows.column_names:
        rows = rows.filter(pc.is_null(rows.column(DECODE_ERROR)))
    return rows.select(FILE_SCHEMA.names)


def quarantined_rows(rows: pa.Table) -> list[dict[str, Any]]:
    return rows.filter(pc.is_valid(rows.column(DECODE_ERROR))).to_pylist()


def assert_tier_invariants(rows: pa.Table, start: int, end: int | None) -> None:
    """Offsets strictly increase, lie in range; quarantined rows are control rows whose
    offset lies in the range they cover."""
    offsets = rows.column("offset").to_pylist()
    assert offsets == sorted(set(offsets)), "offsets must be unique and in order"
    assert all(o >= start and (end is None or o < end) for o in offsets)
    for row in quarantined_rows(rows):
        assert row["is_control"] and row["key"] is None and row["headers"] == []
        assert row["batch_offset"] <= row["offset"] <= row["batch_last_offset"]


# ------------------------------------------------------------------------ in-memory unit


def test_a_clean_segment_is_exactly_what_batches_to_rows_gives() -> None:
    for codec in Compression:
        data = b"".join(make_batches(8, codec=codec))
        result = segment_rows(data, start_offset=7, end_offset=33)
        assert result.quarantined == ()
        assert result.rows.schema == STORED_SCHEMA
        assert records(result.rows).equals(batches_to_rows(data, start_offset=7, end_offset=33))
        assert result.rows.column(DECODE_ERROR).null_count == result.rows.num_rows


@pytest.mark.parametrize("kind, codec, error", [
    ("varint", Compression.NONE, "declares a length below"),
    ("count", Compression.NONE, "declares 6 records but holds 5"),
    ("garbage", Compression.LZ4, "lz4"),
    ("garbage", Compression.GZIP, "gzip"),
    ("garbage", Compression.ZSTD, "zstd"),
    ("garbage", Compression.SNAPPY, ""),
    ("crc", Compression.NONE, "CRC"),
])
def test_one_bad_batch_is_quarantined_and_the_rest_kept(kind: str, codec: Compression,
                                                        error: str) -> None:
    batches = make_batches(10, codec=codec)
    bad = bytearray(batches[4])
    poison(bad, batch.read_header(bytes(bad), verify_crc=False), kind)
    data = b"".join([*batches[:4], bytes(bad), *batches[5:]])
    result = segment_rows(data, end_offset=50, next_offset=50)
    good = batches_to_rows(b"".join(batches[:4] + batches[5:]))
    assert records(result.rows).equals(good)
    assert_tier_invariants(result.rows, 0, 50)
    (row,) = quarantined_rows(result.rows)
    assert (row["offset"], row["batch_offset"], row["batch_last_offset"]) == (20, 20, 24)
    assert row["value"] == bytes(bad), "the raw bytes as stored"
    assert error.lower() in row["decode_error"].lower()
    assert row["timestamp"] == records(result.rows).column("timestamp")[19].as_py(), (
        "a quarantined row borrows its neighbour's timestamp")
    (item,) = result.quarantined
    assert item.framed and item.stored and (item.first_offset, item.last_offset) == (20, 24)
    # the table rows re-encode to exactly the intact batches: the poison is a gap
    assert rows_to_batches(result.rows) == rows_to_batches(good)


def test_damaged_framing_resynchronises_at_the_next_good_batch() -> None:
    batches = make_batches(10)
    longer = bytearray(batches[3])
    longer[8:12] = (len(longer) + 500).to_bytes(4, "big")  # swallows the next batches
    shorter = bytearray(batches[6])
    shorter[8:12] = (40).to_bytes(4, "big")  # below the minimum
    data = b"".join([*batches[:3], bytes(longer), *batches[4:6], bytes(shorter),
                     *batches[7:]])
    result = segment_rows(data, end_offset=50, next_offset=50)
    intact = [b for i, b in enumerate(batches) if i not in (3, 6)]
    assert records(result.rows).equals(batches_to_rows(b"".join(intact)))
    assert_tier_invariants(result.rows, 0, 50)
    assert [(r["offset"], r["batch_last_offset"], r["value"]) for r in
            quarantined_rows(result.rows)] == [(15, 19, bytes(longer)), (30, 34, bytes(shorter))]


def test_damaged_base_offsets_cost_only_their_batch() -> None:
    batches = make_batches(10)
    high = bytearray(batches[2])
    high[0:8] = (12).to_bytes(8, "big")  # 10 -> 12: overlaps the next batch
    huge = bytearray(batches[5])
    huge[0:8] = (2**40).to_bytes(8, "big")  # past the segment
    low = bytearray(batches[8])
    low[0:8] = (3).to_bytes(8, "big")  # before the previous batches
    data = b"".join([*batches[:2], bytes(high), *batches[3:5], bytes(huge), *batches[6:8],
                     bytes(low), batches[9]])
    result = segment_rows(data, end_offset=50, next_offset=50)
    intact = [b for i, b in enumerate(batches) if i not in (2, 5, 8)]
    assert records(result.rows).equals(batches_to_rows(b"".join(intact)))
    assert [(r["offset"], r["batch_last_offset"]) for r in quarantined_rows(result.rows)] == [
        (10, 14), (25, 29), (40, 44)]
    assert_tier_invariants(result.rows, 0, 50)


def test_junk_and_stray_copies_between_adjacent_batches_are_reported_not_stored() -> None:
    batches = make_batches(6)
    data = b"".join([batches[0], b"\x00" * 30, batches[1], batches[1], *batches[2:],
                     b"\x07" * 20])
    result = segment_rows(data, end_offset=30, next_offset=30)
    assert records(result.rows).equals(batches_to_rows(b"".join(batches)))
    assert quarantined_rows(result.rows) == []
    first_copy = len(batches[0]) + 30
    assert [(q.size, q.stored) for q in result.quarantined] == [
        (30, False), (len(batches[1]), False), (20, False)]
    assert result.quarantined[0].position == len(batches[0])
    assert result.quarantined[1].position in (first_copy, first_copy + len(batches[1]))
    assert result.quarantined[2].position == len(data) - 20


def test_records_out_of_their_batch_or_out_of_order_are_quarantined() -> None:
    batches = make_batches(4)
    repeated = encode_batch([Record(o, TS, None, b"x") for o in (5, 6, 6, 7, 8)],
                            base_offset=5, last_offset_delta=4)
    beyond = encode_batch([Record(o, TS, None, b"x") for o in range(10, 15)], base_offset=10,
                          last_offset_delta=2)  # header says [10, 12]; records reach 14
    data = b"".join([batches[0], repeated, beyond, batches[3]])
    result = segment_rows(data, end_offset=20, next_offset=20)
    assert records(result.rows).equals(batches_to_rows(batches[0] + batches[3]))
    assert [(r["offset"], r["batch_last_offset"]) for r in quarantined_rows(result.rows)] == [
        (5, 9), (10, 12)], "each stands for its header's range (13-14: a gap, as after compaction)"
    assert all("out of order" in r["decode_error"] for r in quarantined_rows(result.rows))


def test_an_unreadable_segment_is_one_quarantined_row() -> None:
    junk = bytes(random.Random(7).randrange(256) for _ in range(5000))
    result = segment_rows(junk, base_offset=100, start_offset=100, end_offset=150, next_offset=150,
                          fallback_timestamp_ms=TS)
    (row,) = quarantined_rows(result.rows)
    assert (row["offset"], row["batch_offset"], row["batch_last_offset"]) == (100, 100, 149)
    assert row["value"] == junk
    assert row["timestamp"].timestamp() * 1000 == TS, "no neighbour: the fallback time"


def test_a_range_cuts_quarantined_rows_and_drops_those_outside() -> None:
    batches = make_batches(10)
    early, late = bytearray(batches[1]), bytearray(batches[6])
    poison(early, batch.read_header(bytes(early)), "crc")
    poison(late, batch.read_header(bytes(late)), "crc")
    data = b"".join([batches[0], bytes(early), *batches[2:6], bytes(late), *batches[7:]])
    result = segment_rows(data, start_offset=32, end_offset=50, next_offset=50)
    assert [(r["offset"], r["batch_offset"]) for r in quarantined_rows(result.rows)] == [
        (32, 30)]
    assert [q.first_offset for q in result.quarantined] == [30]
    assert_tier_invariants(result.rows, 32, 50)


def test_huge_unframed_ranges_keep_a_bounded_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    from loglake.segments import tier_quarantine

    monkeypatch.setattr(tier_quarantine, "MAX_RAW_BYTES", 100)
    result = segment_rows(b"\x00" * 1000, end_offset=10)
    (row,) = quarantined_rows(result.rows)
    assert row["value"] == b"\x00" * 100 and "100 of 1000 bytes" in row["decode_error"]
    assert MAX_RAW_BYTES >= 1 << 20, "at least a whole default-sized batch"


_DAMAGE = ["crc", "record", "length", "base", "junk", "copy", "magic"]


@settings(max_examples=int(os.environ.get("LOGLAKE_QUARANTINE_EXAMPLES", "120")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 6), st.sampled_from(list(Compression))), min_size=1,
                max_size=12),
       st.lists(st.tuples(st.integers(0, 100), st.sampled_from(_DAMAGE), st.integers(0, 2**20)),
                max_size=4),
       st.integers(0, 30))
def test_damage_never_costs_an_intact_batch(shape: list[tuple[int, Compression]],
                                            damage: list[tuple[int, str, int]],
                                            start: int) -> None:
    """Whatever is damaged (a CRC-covered byte, a record byte under a recomputed CRC, a
    length, a base offset or magic outside the CRC, junk or stray copies between batches;
    damage far enough apart that the intact
    neighbours tell which offsets are right): no exception; offsets unique, in order, in
    range; every batch whose bytes are intact comes out exactly; the rows re-encode."""
    pieces: list[bytes] = []
    offset = 1000
    for count, codec in shape:
        pieces += make_batches(1, count, base=offset, codec=codec)
        offset += count
    end = offset
    batches = list(range(len(pieces)))  # where the original batches are
    intact = set(batches)
    damaged: set[int] = set()
    for where, kind, salt in damage:
        batch_id = where % len(batches)
        if damaged & set(range(batch_id - 2, batch_id + 3)):
            continue  # damage close together can be truly ambiguous (which batch is right?)
        damaged.add(batch_id)
        index = batches[batch_id]
        if kind in ("junk", "copy"):
            extra = (bytes([salt % 256]) * (1 + salt % 70) if kind == "junk"
                     else pieces[index])
            pieces.insert(index + 1, extra)
            batches = [i if i <= index else i + 1 for i in batches]
            intact = {i if i <= index else i + 1 for i in intact}
            continue
        data = bytearray(pieces[index])
        if kind in ("crc", "record"):
            at = (21 if kind == "crc" else batch.HEADER_SIZE) + salt % (len(data) - 61)
            data[at] ^= 1 + salt % 255
            if kind == "record":  # damage the CRC protects against no more
                recrc(data)
        elif kind == "length":
            data[8:12] = ((salt % 400) - 100 + len(data)).to_bytes(4, "big", signed=True)
        elif kind == "base":
            data[0:8] = (1000 + salt % (end - 1000 + 20) - 10).to_bytes(8, "big", signed=True)
        elif kind == "magic":
            data[16] = salt % 256 if salt % 256 != 2 else 1
        pieces[index] = bytes(data)
        intact.discard(index)
    buf = b"".join(pieces)
    begin = 1000 + start
    result = segment_rows(buf, start_offset=begin, end_offset=end, base_offset=1000,
                          next_offset=end)
    assert_tier_invariants(result.rows, begin, end)
    expected = batches_to_rows(b"".join(pieces[i] for i in sorted(intact)), start_offset=begin,
                               end_offset=end)
    got = records(result.rows)
    expected_offsets = set(expected.column("offset").to_pylist())
    kept = got.filter(pc.is_in(got.column("offset"), pa.array(sorted(expected_offsets),
                                                              pa.int64())))
    assert kept.equals(expected), "every intact batch exactly once"
    assert rows_to_batches(result.rows) == rows_to_batches(got), "quarantined rows: a gap"


# ------------------------------------------------------------------- the table, local storage


@pytest.fixture
def table(tmp_path: Path) -> TieredTable:
    t = TieredTable(Storage.from_url(str(tmp_path / "lake")), "topic")
    t.ensure_created()
    return t


def _poisoned_segment(directory: Path, base: int = 0) -> tuple[Path, bytes]:
    batches = make_batches(10, base=base)
    bad = bytearray(batches[4])
    poison(bad, batch.read_header(bytes(bad)), "varint")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{base:020d}{LOG_SUFFIX}"
    path.write_bytes(b"".join([*batches[:4], bytes(bad), *batches[5:]]))
    return path, bytes(bad)


def test_quarantined_rows_in_the_table(table: TieredTable, tmp_path: Path) -> None:
    path, bad = _poisoned_segment(tmp_path / "seg")
    written = write_segment_file(table.storage, table.topic, 0, path, 0, 50)
    assert written.pending is not None and len(written.quarantined) == 1
    assert table.commit(0, [written.pending], 49, expected_end=None,
                        metadata={"loglake.quarantined": "1"})
    files = table.files(0, refresh=True)
    assert [f.quarantined for f in files] == [1] and table.quarantined(0) == 1
    assert files[0].has_control, "readers keep the is_control filter for this file"
    # tier reads: the quarantined batch is a gap, a fetch inside it gets the next batch
    chunk = table.read_chunk(0, 21)
    assert chunk is not None and chunk.column("offset")[0].as_py() == 25
    assert DECODE_ERROR not in chunk.column_names or chunk.column(DECODE_ERROR).null_count == \
        chunk.num_rows
    # the commit info carries the count
    history = DeltaTable(table.uri).history(1)[0]
    assert history.get("loglake.quarantined") == "1"
    # a plain Delta read sees the row, with its bytes, as a control row
    plain = DeltaTable(table.uri).to_pyarrow_table()
    row = plain.filter(pc.is_valid(plain.column(DECODE_ERROR))).to_pylist()[0]
    assert row["is_control"] and row["value"] == bad and row["offset"] == 20


def _quarantined_table(table: TieredTable, tmp_path: Path) -> None:
    path, _bad = _poisoned_segment(tmp_path / "seg")
    written = write_segment_file(table.storage, table.topic, 0, path, 0, 50)
    assert written.pending is not None
    assert table.commit(0, [written.pending], 49, expected_end=None)
    table.files(0, refresh=True)


def test_format_loglake_tier_ranges_skip_quarantined_rows(table: TieredTable,
                                                         tmp_path: Path) -> None:
    """The tier side of ``format("loglake")`` (a Spark task's read of a table range)."""
    from loglake.streaming.options import parse_options
    from loglake.streaming.ranges import OffsetRange, ReadContext, read_range

    _quarantined_table(table, tmp_path)
    options = parse_options({"zookeeper": "127.0.0.1:1", "subscribe": table.topic,
                             "includeHeaders": "true"}, "batch")
    piece = OffsetRange(table.topic, 0, 0, 50, tuple(f.uri for f in table.files(0)), True)
    rows = pa.Table.from_batches(list(read_range(piece, ReadContext("", table.storage,
                                                                    options))))
    assert rows.column("offset").to_pylist() == [*range(20), *range(25, 50)]
    assert b"value-20" not in rows.column("value").to_pylist()


def test_spark_view_tier_side_skips_quarantined_rows(spark: Any, table: TieredTable,
                                                     tmp_path: Path) -> None:
    """The tier side of a Spark view (native Parquet scan of the snapshot's files)."""
    from loglake.streaming.offsets import TierSnapshot
    from loglake.streaming.sql_views import _tier_frame

    _quarantined_table(table, tmp_path)
    snapshot = TierSnapshot(table.topic, table.uri, table.table().version(), {0: 50},
                            {0: tuple(table.files(0))})
    frame = _tier_frame(spark, table.storage, snapshot, include_headers=True)
    offsets = [row.offset for row in frame.orderBy("offset").select("offset").collect()]
    assert offsets == [*range(20), *range(25, 50)]


def test_a_range_with_no_row_still_moves_the_tiered_end(table: TieredTable,
                                                        tmp_path: Path) -> None:
    directory = tmp_path / "seg"
    directory.mkdir()
    path = directory / f"{0:020d}{LOG_SUFFIX}"
    first = make_batches(2)
    path.write_bytes(first[0] + first[0] + first[1])  # a stray copy: no offset of its own
    written = write_segment_file(table.storage, table.topic, 0, path, 5, 10)
    assert written.pending is not None
    written = write_segment_file(table.storage, table.topic, 0, path, 10, 10)
    assert written.pending is None
    assert table.commit(0, [], 9, expected_end=None)
    assert table.tiered_end(0) == 10 and table.files(0, refresh=True) == []


def test_tables_created_before_decode_error_are_evolved(tmp_path: Path) -> None:
    storage = Storage.from_url(str(tmp_path / "lake"))
    old_file_schema = FILE_SCHEMA
    old_table_schema = pa.schema([TABLE_SCHEMA.field("partition"), *old_file_schema])
    uri = storage.table_uri("legacy")
    DeltaTable.create(uri, schema=old_table_schema, partition_by=["partition"])
    legacy = TieredTable(storage, "legacy")
    # a file as the first release wrote it: FILE_SCHEMA only
    old_rows = batches_to_rows(b"".join(make_batches(4)))
    pending = _write_old_style(legacy, 0, old_rows)
    assert legacy.commit(0, [pending], 19, expected_end=None)
    assert DECODE_ERROR not in [f.name for f in DeltaTable(uri).schema().fields]

    legacy.ensure_created()
    assert DECODE_ERROR in [f.name for f in DeltaTable(uri).schema().fields]
    TieredTable(storage, "legacy").ensure_created()  # idempotent
    path, _bad = _poisoned_segment(tmp_path / "seg", base=20)
    written = write_segment_file(storage, "legacy", 0, path, 20, 70)
    assert written.pending is not None
    assert legacy.commit(0, [written.pending], 69, expected_end=20)
    files = legacy.files(0, refresh=True)
    assert [f.quarantined for f in files] == [0, 1]
    whole = DeltaTable(uri).to_pyarrow_table()
    assert whole.num_rows == 20 + 46
    assert whole.column(DECODE_ERROR).null_count == whole.num_rows - 1
    # re-encoding old and new files for a fetch, and a compaction/optimize rewrite of both
    chunk = legacy.read_chunk(0, 0)
    assert chunk is not None and rows_to_batches(chunk)
    outcome = rewrite_partition(storage, RewritePlan("legacy", 0, tuple(f.uri for f in files),
                                                     cleanable_end=70, now_ms=TS))
    assert outcome.rows_in == 66 and outcome.rows_out >= 1
    rewritten = pads.dataset([storage.path_in_fs(f"{legacy.uri}/{w.path}")
                              for w in outcome.written], format="parquet").to_table()
    kept = rewritten.filter(pc.is_valid(rewritten.column(DECODE_ERROR)))
    assert kept.column("offset").to_pylist() == [40], "compaction keeps the quarantined row"


def _write_old_style(table: TieredTable, partition: int, rows: pa.Table) -> Any:
    """A file without the decode_error column (what write_file wrote before it existed)."""
    import json
    import uuid

    import pyarrow.parquet as pq

    from loglake.segments.tiered_table import PendingFile

    relative = f"partition={partition}/{uuid.uuid4().hex}.parquet"
    path = Path(table.uri) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows, path)
    offsets = rows.column("offset")
    stats = {"numRecords": rows.num_rows,
             "minValues": {"offset": offsets[0].as_py(), "is_control": False},
             "maxValues": {"offset": offsets[-1].as_py(), "is_control": False},
             "nullCount": {"offset": 0}}
    return PendingFile(relative, path.stat().st_size, rows.num_rows, offsets[0].as_py(),
                       offsets[-1].as_py(), json.dumps(stats))


def test_failure_log_logs_once_then_a_count(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    failures = FailureLog(logging.getLogger("t"), interval_s=60, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="t")
    for _ in range(100):  # a failure every half second for 50 s
        failures.failed(("tier", ("t", 0)), "tiering t-0", OSError("store unreachable"))
        now[0] += 0.5
    assert failures.failures(("tier", ("t", 0))) == 100
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is not None
    for _ in range(40):
        failures.failed(("tier", ("t", 0)), "tiering t-0", OSError("store unreachable"))
        now[0] += 0.5
    assert len(caplog.records) == 2 and caplog.records[1].exc_info is None
    assert ("still failing: 120 more failure(s) in the last 60 s, 121 since"
            in caplog.records[1].getMessage())
    failures.succeeded(("tier", ("t", 0)), "tiering t-0")
    assert "works again after 140 failure(s)" in caplog.records[2].getMessage()
    assert failures.failures(("tier", ("t", 0))) == 0 and failures.last_error(("x",)) is None


# ------------------------------------------------------------------------- a real broker


def _sealed_segments(directory: Path) -> list[Path]:
    logs = sorted(p for p in directory.iterdir()
                  if (parsed := parse_segment_name(p.name)) and parsed[1] == LOG_SUFFIX)
    return logs[:-1]  # the last one is active


def _poison_on_disk(directory: Path) -> list[tuple[str, int, int, bytes]]:
    """Damage four batches of the sealed segments in place, as data written before produce
    validation existed (CRCs valid, sizes kept, so indexes stay valid and a restart's checks
    pass): a broken varint, a wrong count, garbage under lz4, and a broken varint in the very
    last sealed batch (the table then ends in a quarantined row). Returns
    ``(kind, base, last, bytes)`` of each. (A failed CRC is a bit flip that recovery may cut
    at restart; the in-memory and table tests above cover it.)"""
    sealed = _sealed_segments(directory)
    plan: list[tuple[Path, int, str]] = []
    plain = [(p, h) for p in sealed for h in batch.iter_batches(p.read_bytes())
             if h.compression == 0]
    lz4 = [(p, h) for p in sealed for h in batch.iter_batches(p.read_bytes())
           if h.compression == 3]
    assert len(plain) > 40 and len(lz4) > 5, "the produced data has both kinds of batches"
    plan.append((plain[3][0], plain[3][1].position, "varint"))
    plan.append((plain[40][0], plain[40][1].position, "count"))
    plan.append((lz4[2][0], lz4[2][1].position, "garbage"))
    last_path = sealed[-1]
    last_header = list(batch.iter_batches(last_path.read_bytes()))[-1]
    assert last_header.compression == 0
    plan.append((last_path, last_header.position, "varint"))
    done = []
    for path, position, kind in plan:
        data = bytearray(path.read_bytes())
        header = batch.read_header(bytes(data), position)
        poison(data, header, kind)
        path.write_bytes(bytes(data))
        done.append((kind, header.base_offset, header.last_offset,
                     bytes(data[header.position : header.end_position])))
    return done


def _table_rows(storage: Storage, topic: str) -> pa.Table:
    table = TieredTable(storage, topic)
    files = [storage.path_in_fs(f.uri) for f in table.files(0, refresh=True)]
    rows = pads.dataset(files, schema=STORED_SCHEMA, format="parquet",
                        filesystem=storage.pyarrow_filesystem()).to_table()
    return rows.sort_by("offset")


def _consume_all(bootstrap: str, topic: str, *, expected: int, high: int,
                 timeout: float = 90) -> tuple[list[Sent], list[str]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"q-{topic}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "check.crcs": True, "max.partition.fetch.bytes": 50_000})
    got: list[Sent] = []
    errors: list[str] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])

        def read_to_end() -> bool:
            eof = False
            for msg in consumer.consume(1000, 0.5):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        eof = msg.offset() >= high
                    else:
                        errors.append(error.str())
                    continue
                got.append(Sent.of(msg))
            return eof and len(got) >= expected

        wait_until(read_to_end, timeout,
                   lambda: f"{topic}-0: {len(got)} of {expected} records up to offset {high}, "
                           f"errors {errors[:3]}", interval=0)
    finally:
        consumer.close()
    return got, errors


def test_broker_tiers_past_a_log_poisoned_before_it_started(tmp_path: Path,
                                                            zookeeper_hosts: str) -> None:
    topic = "poisoned"
    with DevCluster(tmp_path / "c", zookeeper=zookeeper_hosts, brokers=1) as dev:
        create_topic(dev.bootstrap_servers, topic, partitions=1,
                     config={**SMALL_SEGMENTS, "remote.storage.enable": "false"})
        small = {"batch.num.messages": 20}
        sent = produce(dev.bootstrap_servers, topic, 1300, config=small)
        sent += produce(dev.bootstrap_servers, topic, 2500, start=1300,
                        config={**small, "compression.type": "lz4"})
        sent += produce(dev.bootstrap_servers, topic, 700, start=3800, config=small)
        dev.stop_broker(1)
        directory = dev.data_dir / "broker-1" / "data" / f"{topic}-0"
        poisoned = _poison_on_disk(directory)
        active = parse_segment_name(
            sorted(p.name for p in directory.iterdir() if p.name.endswith(LOG_SUFFIX))[-1])
        assert active is not None
        tier_end = active[0]  # the active segment's base: everything below is sealed
        # the damage lies below the recovery point (sealed segments were flushed when they
        # rolled): a restart trusts those bytes, as Kafka does; only the tierer decodes them
        checkpoint.write_offset(directory / RECOVERY_POINT_CHECKPOINT, tier_end)
        dev.start_broker(1)
        log_before = len(dev.broker_log(1))

        with Admin(dev.bootstrap_servers) as admin:
            admin.alter_config(topic, set={"remote.storage.enable": "true",
                                           "local.retention.ms": "0"})
        storage = Storage.from_url(dev.storage_url)
        starts = wait_local_start(dev.zookeeper_connect, topic, (0,), above=tier_end - 1,
                                  timeout=90)
        assert starts[0] == tier_end, "retention deleted every tiered segment, poison and all"
        assert TieredTable(storage, topic).tiered_end(0) == tier_end

        # the table: every good record exactly once at its offset, each poison one row
        rows = _table_rows(storage, topic)
        bad_offsets = {o for _k, base, last, _b in poisoned for o in range(base, last + 1)}
        expected = {key: r for key, r in by_place(sent).items()
                    if key[1] < tier_end and key[1] not in bad_offsets}
        good = rows.filter(pc.is_null(rows.column(DECODE_ERROR)))
        assert good.column("offset").to_pylist() == sorted(o for _p, o in expected)
        timestamps = good.column("timestamp").cast(pa.int64()).to_pylist()
        for i, row in enumerate(good.select(["offset", "key", "value", "headers"]).to_pylist()):
            assert expected[(0, row["offset"])] == Sent(
                0, row["offset"], row["key"], row["value"],
                tuple((h["key"], h["value"]) for h in row["headers"]), timestamps[i] // 1000)
        bad_rows = quarantined_rows(rows)
        assert [(r["offset"], r["batch_last_offset"], r["value"]) for r in bad_rows] == [
            (base, last, raw) for _kind, base, last, raw in sorted(poisoned, key=lambda p: p[1])]
        assert all(r["is_control"] for r in bad_rows)

        # the status counts the quarantined batches; the CLI shows it
        status = _wait_status(dev.zookeeper_connect, topic, lambda s: s.get("quarantined") == 4)
        assert status["failures"] == 0 and status["last_error"] is None
        from loglake.cli import main
        out = _cli_status(main, topic, dev.zookeeper_connect)
        assert "\tQuarantined: 4" in out and "Failures" not in out

        # a consumer from offset 0 (CRCs checked) reads every good record; at each poison it
        # sees a gap in the offsets, no error (the table keeps the bytes)
        high = sent[-1].offset + 1
        got, errors = _consume_all(dev.bootstrap_servers, topic,
                                   expected=len(sent) - len(bad_offsets), high=high)
        assert errors == []
        assert [r.offset for r in got] == sorted(o for _p, o in by_place(sent)
                                                 if o not in bad_offsets)
        assert by_place(got) == {k: v for k, v in by_place(sent).items()
                                 if k[1] not in bad_offsets}
        # a consumer placed on a poisoned offset gets the next good batch (for the table's
        # last batch: the local log's first)
        for _kind, base, last, _raw in poisoned:
            assert _first_offset_from(dev.bootstrap_servers, topic, base) == last + 1

        # the log: one line per quarantined batch, no traceback; quiet across tier intervals
        text = dev.broker_log(1)[log_before:]
        assert len(re.findall(r"quarantined (batch|unframed)", text)) == 4
        assert "Traceback" not in text and "failed" not in text
        size = len(dev.broker_log(1))
        time.sleep(4)  # 8 tier intervals of 0.5 s
        assert len(dev.broker_log(1)) - size < 2000


def _first_offset_from(bootstrap: str, topic: str, offset: int, timeout: float = 30) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"at-{offset}",
                         "enable.auto.commit": False, "auto.offset.reset": "error"})
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])
        msg = poll_message(consumer, timeout=timeout, what=f"a record of {topic}-0 at {offset}")
        assert msg.error() is None, msg.error()
        return int(msg.offset())
    finally:
        consumer.close()


def test_failing_storage_is_logged_with_a_count_and_reported(tmp_path: Path,
                                                             zookeeper_hosts: str) -> None:
    """Tiering that keeps failing (here: the table's partition directory is a file) logs one
    traceback, backs off, shows in the status, and resumes once the storage works."""
    topic = "blocked"
    with DevCluster(tmp_path / "c", zookeeper=zookeeper_hosts, brokers=1) as dev:
        storage = Storage.from_url(dev.storage_url)
        table = TieredTable(storage, topic)
        create_topic(dev.bootstrap_servers, topic, partitions=1,
                     config={**SMALL_SEGMENTS, "remote.storage.enable": "false"})
        produce(dev.bootstrap_servers, topic, 2000, config={"batch.num.messages": 50})
        table.ensure_created()
        blocker = Path(table.uri) / "partition=0"
        blocker.write_text("not a directory")
        log_before = len(dev.broker_log(1))
        with Admin(dev.bootstrap_servers) as admin:
            admin.alter_config(topic, set={"remote.storage.enable": "true"})
        status = _wait_status(dev.zookeeper_connect, topic,
                              lambda s: (s.get("failures") or 0) >= 3, timeout=60)
        assert status["last_error"] and status["tiered_end"] is None
        from loglake.cli import main
        assert "\tFailures: " in _cli_status(main, topic, dev.zookeeper_connect)
        size = len(dev.broker_log(1))
        time.sleep(5)  # ten tier intervals: attempts back off, and none writes a line
        assert len(dev.broker_log(1)) == size
        text = dev.broker_log(1)[log_before:]
        assert text.count(f"tiering {topic}-0 failed") == 1
        assert text.count("FileExistsError: [Errno 17]") == 3, (
            "one traceback (of the worker's error, chained) for the whole streak")
        blocker.unlink()
        ends = _wait_tiered_end(storage, topic, timeout=90)
        assert ends > 0
        # logged once the tier pass ends, after the commit
        wait_until(lambda: f"tiering {topic}-0 works again after"
                   in dev.broker_log(1)[log_before:], 15, "the 'works again' line", interval=0.2)
        text = dev.broker_log(1)[log_before:]
        assert f"tiering {topic}-0 works again after" in text
        assert text.count(f"tiering {topic}-0 failed") == 1


def _wait_status(zookeeper: str, topic: str, done: Any, timeout: float = 60) -> dict[str, Any]:
    catalog = ClusterCatalog(zookeeper)
    catalog.start()
    try:
        last: dict[str, Any] = {}

        def matched() -> dict[str, Any] | None:
            status = last["status"] = catalog.tiering_status(topic).get(0, {})
            return status if done(status) else None

        return wait_until(matched, timeout, lambda: f"tiering status of {topic} never matched: "
                          f"{last.get('status')}", interval=0.3)
    finally:
        catalog.stop()


def _cli_status(main: Any, topic: str, zookeeper: str) -> str:
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["tiering", "status", topic, "--zookeeper", zookeeper]) == 0
    return out.getvalue()


def _wait_tiered_end(storage: Storage, topic: str, timeout: float) -> int:
    return wait_until(lambda: TieredTable(storage, topic).tiered_end(0), timeout,
                      f"{topic} was never tiered", interval=0.3, ignore=(Exception,))

