"""Offset and time indexes (loglake.segments.index) and checkpoint files."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from loglake.segments import checkpoint, filenames
from loglake.segments.index import CorruptIndexError, OffsetIndex, TimeIndex


def test_offset_index_append_lookup_reload(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex.create(path, 100, 1024)
    assert index.lookup(150) == (100, 0)
    for i in range(1, 6):
        index.append(100 + 10 * i, 1000 * i)
    assert index.lookup(99) == (100, 0)
    assert index.lookup(110) == (110, 1000)
    assert index.lookup(119) == (110, 1000)
    assert index.lookup(1_000_000) == (150, 5000)
    assert index.last_entry() == (150, 5000)
    index.close()
    assert path.stat().st_size == 5 * 8
    assert struct.unpack(">II", path.read_bytes()[:8]) == (10, 1000)  # Kafka's layout
    reloaded = OffsetIndex.load(path, 100, 1024)
    assert reloaded.lookup(135) == (130, 3000)
    reloaded.truncate_to(130)
    assert reloaded.last_entry() == (120, 2000)
    assert path.stat().st_size == 2 * 8
    reloaded.truncate_to_position(2000)
    assert reloaded.last_entry() == (110, 1000)
    reloaded.close()


def test_offset_index_rejects_out_of_order_append(tmp_path: Path) -> None:
    index = OffsetIndex.create(tmp_path / "x.index", 0, 1024)
    index.append(5, 100)
    with pytest.raises(ValueError):
        index.append(5, 200)
    with pytest.raises(ValueError):
        index.append(6, 100)
    index.close()


def test_offset_index_full(tmp_path: Path) -> None:
    index = OffsetIndex.create(tmp_path / "x.index", 0, 8 * 3)
    for i in range(3):
        assert not index.is_full
        index.append(i + 1, (i + 1) * 10)
    assert index.is_full
    index.close()


def test_time_index_semantics(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.timeindex"
    index = TimeIndex.create(path, 0, 1024)
    assert index.lookup(5) == (-1, 0)
    index.maybe_append(100, 0)
    index.maybe_append(100, 4)  # not larger: ignored
    index.maybe_append(90, 5)  # smaller: ignored
    index.maybe_append(200, 8)
    assert len(index) == 2
    assert index.lookup(99) == (-1, 0)
    assert index.lookup(150) == (100, 0)
    assert index.lookup(500) == (200, 8)
    index.close()
    assert struct.unpack(">qI", path.read_bytes()[12:]) == (200, 8)
    reloaded = TimeIndex.load(path, 0, 1024)
    reloaded.truncate_to(8)
    assert reloaded.last_entry() == (100, 0)
    reloaded.close()


@pytest.mark.parametrize(
    "content",
    [
        b"\x00" * 7,  # not a multiple of the entry size
        struct.pack(">II", 5, 100) + struct.pack(">II", 4, 200),  # offsets go back
        struct.pack(">II", 5, 100) + struct.pack(">II", 6, 50),  # positions go back
        struct.pack(">II", 5, 100) * 2,  # duplicate
    ],
)
def test_corrupt_offset_index_detected(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(content)
    with pytest.raises(CorruptIndexError):
        OffsetIndex.load(path, 0, 1024)


@pytest.mark.parametrize(
    "content",
    [b"\x01" * 13, struct.pack(">qI", 50, 1) + struct.pack(">qI", 40, 2)],
)
def test_corrupt_time_index_detected(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.timeindex"
    path.write_bytes(content)
    with pytest.raises(CorruptIndexError):
        TimeIndex.load(path, 0, 1024)


def test_file_names() -> None:
    directory = Path("p")
    assert filenames.log_file(directory, 42).name == "00000000000000000042.log"
    assert filenames.index_file(directory, 42).name == "00000000000000000042.index"
    assert filenames.time_index_file(directory, 42).name == "00000000000000000042.timeindex"
    assert filenames.parse_segment_name("00000000000000000042.timeindex") == (42, ".timeindex")
    assert filenames.parse_segment_name("42.log") is None
    assert filenames.parse_segment_name("leader-epoch-checkpoint") is None
    assert filenames.is_leftover("00000000000000000042.log.deleted")
    assert filenames.is_deleted_directory(filenames.deleted_directory(Path("t-0")).name)


def test_offset_checkpoint_round_trip_and_corruption(tmp_path: Path) -> None:
    path = tmp_path / filenames.RECOVERY_POINT_CHECKPOINT
    assert checkpoint.read_offset(path) is None
    checkpoint.write_offset(path, 1234)
    assert path.read_text() == "0\n1\n1234\n"
    assert checkpoint.read_offset(path) == 1234
    assert not filenames.temp_file(path).exists()
    for garbage in (
        b"",
        b"0\n1\n",
        b"0\n2\n5\n",
        b"1\n1\n5\n",
        b"0\n1\n-5\n",
        b"\xff\xfe",
        b"0\n1\n5",
    ):
        path.write_bytes(garbage)
        assert checkpoint.read_offset(path) is None, garbage
