"""One LogSegment on real files (loglake.segments.segment): append, lookups, truncation,
recovery."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from loglake.segments import batch, filenames
from loglake.segments.records import Record, encode_batch
from loglake.segments.segment import LogSegment

BASE = 1000


def write_batches(segment: LogSegment, specs: list[tuple[int, list[int]]]) -> list[int]:
    """Append batches given as (base offset, record timestamps); returns their positions."""
    positions = []
    for base, stamps in specs:
        data = encode_batch([Record(base + i, t, b"k", b"v" * 30) for i, t in enumerate(stamps)])
        (header,) = batch.parse_batches(data)
        positions.append(segment.size)
        stored = dataclasses.replace(header, position=segment.size)
        segment.append(data, [stored])
    return positions


def new_segment(tmp_path: Path, interval: int = 100) -> LogSegment:
    return LogSegment.create(
        tmp_path, BASE, index_interval_bytes=interval, max_index_bytes=4096, now_ms=0
    )


def test_append_translate_and_timestamps(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    specs = [(BASE + 3 * i, [50 + i, 40 + i, 60 - i]) for i in range(20)]  # ts not monotonic
    positions = write_batches(segment, specs)
    assert segment.next_offset == BASE + 60
    assert len(segment.offset_index) > 3
    for offset in range(BASE, BASE + 60):
        header = segment.translate_offset(offset)
        assert header is not None
        assert header.base_offset <= offset <= header.last_offset
        assert header.position == positions[(offset - BASE) // 3]
    assert segment.translate_offset(BASE + 60) is None
    assert segment.max_timestamp == 69 and segment.offset_of_max_timestamp == BASE + 57
    assert segment.find_offset_by_timestamp(60, BASE) == (BASE + 2, 60)
    assert segment.find_offset_by_timestamp(61, BASE) == (BASE + 33, 61)
    assert segment.find_offset_by_timestamp(60, BASE + 5) == (BASE + 30, 60)
    assert segment.find_offset_by_timestamp(70, BASE) is None
    assert segment.first_batch_timestamp() == 60
    segment.close()


def test_reopen_without_recovery_and_truncate(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    write_batches(segment, [(BASE + 2 * i, [i, i + 1]) for i in range(30)])
    segment.close()
    reopened, truncated = LogSegment.open(
        tmp_path, BASE, index_interval_bytes=100, max_index_bytes=4096, now_ms=0, recover=False
    )
    assert truncated == 0
    assert (reopened.next_offset, reopened.max_timestamp) == (BASE + 60, 30)
    removed = reopened.truncate_to(BASE + 31)  # inside the batch at BASE + 30
    assert removed > 0
    assert reopened.next_offset == BASE + 30 and reopened.max_timestamp == 15
    assert reopened.offset_index.last_entry()[0] < BASE + 30
    assert reopened.truncate_to(BASE + 30) == 0
    reopened.close()


def test_recover_truncates_at_first_bad_batch(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    positions = write_batches(segment, [(BASE + i, [i]) for i in range(10)])
    segment.close()
    log_path = filenames.log_file(tmp_path, BASE)
    data = bytearray(log_path.read_bytes())
    data[positions[6] + 50] ^= 0xFF
    log_path.write_bytes(data)
    seen: list[int] = []
    reopened, truncated = LogSegment.open(
        tmp_path,
        BASE,
        index_interval_bytes=100,
        max_index_bytes=4096,
        now_ms=0,
        recover=True,
        on_recovered_batch=lambda h: seen.append(h.base_offset),
    )
    assert truncated == len(data) - positions[6]
    assert seen == [BASE + i for i in range(6)]
    assert reopened.next_offset == BASE + 6 and reopened.size == positions[6]
    reopened.close()


def test_create_refuses_to_overwrite(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    write_batches(segment, [(BASE, [1])])
    segment.close()
    with pytest.raises(FileExistsError):
        new_segment(tmp_path)


def test_delete_removes_files(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    write_batches(segment, [(BASE, [1])])
    segment.delete()
    assert list(tmp_path.iterdir()) == []
