"""Crash and corruption cases for every on-disk structure of a partition log: the .log (torn
tail, garbage, flipped bytes), .index/.timeindex (missing, wrong size, out of order, pointing past
the log), and the checkpoint files (recovery point, log start offset, leader epochs)."""

from __future__ import annotations

import dataclasses
import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loglake.config import TopicConfig
from loglake.segments import filenames
from loglake.segments.log import PartitionLog
from loglake.segments.records import Compression, Record, decode_batches, encode_batch

T0 = 1_700_000_000_000
SETTINGS = {"segment_bytes": 1500, "index_interval_bytes": 120}


def make_batch(count: int, first_timestamp: int) -> bytes:
    records = [
        Record(i, first_timestamp + i, f"k{i}".encode(), b"value-" * 5) for i in range(count)
    ]
    return encode_batch(records, compression=Compression.GZIP if count % 2 else 0)


def open_log(directory: Path, **settings: object) -> PartitionLog:
    config = dataclasses.replace(TopicConfig(), **{**SETTINGS, **settings})  # type: ignore[arg-type]
    return PartitionLog.open(directory / "topic-0", config, clock=lambda: T0 / 1000)


def fill(log: PartitionLog, batches: int, *, epoch: int = 0) -> list[int]:
    """Append ``batches`` batches of 2 records; returns their base offsets."""
    return [
        log.append(make_batch(2, T0 + log.log_end_offset), leader_epoch=epoch).base_offset
        for _ in range(batches)
    ]


def offsets(log: PartitionLog) -> list[int]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        batches = decode_batches(log.read(offset, 1 << 20))
        out.extend(r.offset for b in batches for r in b.records)
        offset = batches[-1].header.next_offset
    return out


def crash(log: PartitionLog) -> None:
    """Simulate the process dying: drop the object without close() (no flush, no marker)."""
    for segment in log._segments:
        if segment._fd is not None:
            os.close(segment._fd)
            segment._fd = None


def segment_path(log: PartitionLog, base: int, suffix: str = filenames.LOG_SUFFIX) -> Path:
    return log.directory / (filenames.offset_name(base) + suffix)


def batch_positions(log: PartitionLog, base: int) -> list[int]:
    return [h.position for h in log.batch_headers(base) if h.base_offset >= base]


def assert_healthy(log: PartitionLog, expected_end: int) -> None:
    """The log reads back contiguously, lookups work, and appends continue at the end."""
    assert log.log_end_offset == expected_end
    assert offsets(log) == list(range(log.log_start_offset, expected_end))
    if expected_end:
        assert log.offset_for_timestamp(T0 + expected_end - 1) == (
            expected_end - 1,
            T0 + expected_end - 1,
        )
    assert log.append(make_batch(1, T0)).base_offset == expected_end
    assert offsets(log)[-1] == expected_end


# --------------------------------------------------------------------------------- the .log


@pytest.mark.parametrize("clean", [True, False], ids=["after-close", "after-crash"])
def test_torn_tail_truncated_to_last_good_batch(tmp_path: Path, clean: bool) -> None:
    log = open_log(tmp_path)
    fill(log, 30)
    last_base = log.segments[-1]
    positions = batch_positions(log, last_base)
    log.close() if clean else crash(log)
    path = segment_path(log, last_base)
    os.truncate(path, positions[-1] + 30)  # cut inside the last batch
    reopened = open_log(tmp_path)
    assert path.stat().st_size == positions[-1]
    assert_healthy(reopened, 58)
    reopened.close()


@pytest.mark.parametrize("clean", [True, False], ids=["after-close", "after-crash"])
@pytest.mark.parametrize("garbage", [b"\x00" * 7, b"\xff" * 100, os.urandom(333)])
def test_garbage_after_last_batch_truncated(tmp_path: Path, clean: bool, garbage: bytes) -> None:
    log = open_log(tmp_path)
    fill(log, 12)
    log.close() if clean else crash(log)
    path = segment_path(log, log.segments[-1])
    size = path.stat().st_size
    with path.open("ab") as handle:
        handle.write(garbage)
    reopened = open_log(tmp_path)
    assert path.stat().st_size == size
    assert_healthy(reopened, 24)
    reopened.close()


def test_flipped_byte_after_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=10_000)
    fill(log, 5)
    log.flush()
    log.write_checkpoints()  # recovery point 10
    fill(log, 5)
    positions = batch_positions(log, 0)
    crash(log)
    path = segment_path(log, 0)
    with path.open("r+b") as handle:  # flip a byte inside the 8th batch (offsets 14-15)
        handle.seek(positions[7] + 40)
        byte = handle.read(1)
        handle.seek(positions[7] + 40)
        handle.write(bytes([byte[0] ^ 0x20]))
    reopened = open_log(tmp_path, segment_bytes=10_000)
    assert path.stat().st_size == positions[7]
    assert reopened.recovery_point == 14
    assert_healthy(reopened, 14)
    reopened.close()


def test_corruption_in_middle_segment_drops_later_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 40, epoch=1)
    bases = log.segments
    assert len(bases) >= 4
    victim = bases[1]
    positions = batch_positions(log, victim)
    crash(log)  # never flushed: recovery from offset 0
    with segment_path(log, victim).open("r+b") as handle:
        handle.seek(positions[2] + 30)
        handle.write(b"\xde\xad")
    reopened = open_log(tmp_path)
    assert reopened.segments == bases[:2]
    for base in bases[2:]:
        assert not segment_path(log, base).exists()
        assert not segment_path(log, base, filenames.INDEX_SUFFIX).exists()
    assert reopened.leader_epoch_cache.entries == [(1, 0)]
    assert_healthy(reopened, victim + 4)
    reopened.close()


def test_flipped_byte_in_sealed_segment_found_after_clean_shutdown(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 40)
    bases = log.segments
    positions = batch_positions(log, bases[1])
    log.close()
    # Unlike Kafka, opening a log verifies every batch's CRC even after a clean shutdown: a bit
    # flip in an old, sealed segment cuts the log there and drops every later segment (no hole)
    path = segment_path(log, bases[1])
    data = bytearray(path.read_bytes())
    data[positions[1] + 70] ^= 0x01
    path.write_bytes(data)
    reopened = open_log(tmp_path)
    assert reopened.segments == bases[:2]
    assert reopened.log_end_offset == bases[1] + 2
    damage = reopened.recovery_damage
    assert damage is not None and damage.truncated_at == bases[1] + 2
    assert damage.dropped_segments == bases[2:]
    for base in bases[2:]:
        assert not segment_path(log, base).exists()
    assert_healthy(reopened, bases[1] + 2)
    reopened.close()
    again = open_log(tmp_path)
    assert again.recovery_damage is None
    again.close()


@pytest.mark.parametrize("clean", [True, False], ids=["after-close", "after-crash"])
@pytest.mark.parametrize("damage", ["truncate-tail", "flip", "garbage-tail", "delete-log"])
def test_damaged_sealed_segment_never_leaves_a_hole(tmp_path: Path, clean: bool,
                                                     damage: str) -> None:
    log = open_log(tmp_path)
    fill(log, 40, epoch=3)
    log.flush()
    log.write_checkpoints()
    bases = log.segments
    assert len(bases) >= 4
    victim = bases[1]
    positions = batch_positions(log, victim)
    log.close() if clean else crash(log)
    path = segment_path(log, victim)
    size = path.stat().st_size
    if damage == "truncate-tail":
        os.truncate(path, size - 20)
    elif damage == "flip":
        data = bytearray(path.read_bytes())
        data[positions[-1] + 65] ^= 0x40
        path.write_bytes(data)
    elif damage == "garbage-tail":
        with path.open("ab") as handle:
            handle.write(b"\x00\x01" * 40)
    else:
        path.unlink()
    reopened = open_log(tmp_path)
    got = offsets(reopened)
    assert got == list(range(0, reopened.log_end_offset))  # contiguous: no hole
    assert reopened.recovery_damage is not None
    assert reopened.leader_epoch_cache.entries == [(3, 0)]
    if damage == "garbage-tail":  # its batches were whole: only the garbage goes
        assert reopened.log_end_offset == 80
        assert reopened.recovery_damage.dropped_segments == []
    else:
        assert reopened.log_end_offset < bases[2]
        assert reopened.log_end_offset == (victim if damage == "delete-log"
                                           else reopened.recovery_damage.truncated_at)
        assert reopened.recovery_damage.dropped_segments == bases[2:]
        for base in bases[2:]:
            assert not segment_path(log, base).exists()
    assert_healthy(reopened, reopened.log_end_offset)
    reopened.close()


def test_empty_log_file_and_empty_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    crash(log)
    reopened = open_log(tmp_path)
    assert reopened.segments == [0]
    assert_healthy(reopened, 0)
    reopened.close()


# ----------------------------------------------------------------------------- the indexes


@pytest.mark.parametrize("suffix", [filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX])
def test_deleted_index_rebuilt(tmp_path: Path, suffix: str) -> None:
    log = open_log(tmp_path)
    fill(log, 30)
    bases = log.segments
    log.close()
    before = {b: segment_path(log, b, suffix).read_bytes() for b in bases}
    for base in bases:
        segment_path(log, base, suffix).unlink()
    reopened = open_log(tmp_path)
    for base in bases[:-1]:  # sealed segments: byte-identical rebuild
        assert segment_path(log, base, suffix).read_bytes() == before[base]
    assert segment_path(log, bases[-1], suffix).exists()
    assert_healthy(reopened, 60)
    for target in range(0, 60, 7):
        assert reopened.offset_for_timestamp(T0 + target) == (target, T0 + target)
    reopened.close()


def _index_corruptions() -> list[tuple[str, str, bytes | None]]:
    return [
        ("index-wrong-size", filenames.INDEX_SUFFIX, b"\x00\x00\x00\x01\x00"),
        ("index-garbage", filenames.INDEX_SUFFIX, os.urandom(64)),
        (
            "index-out-of-order",
            filenames.INDEX_SUFFIX,
            struct.pack(">II", 9, 500) + struct.pack(">II", 3, 900),
        ),
        ("index-past-log", filenames.INDEX_SUFFIX, struct.pack(">II", 1, 10**6)),
        ("index-wrong-batch", filenames.INDEX_SUFFIX, struct.pack(">II", 7, 0)),
        ("timeindex-wrong-size", filenames.TIME_INDEX_SUFFIX, b"\x01" * 13),
        (
            "timeindex-out-of-order",
            filenames.TIME_INDEX_SUFFIX,
            struct.pack(">qI", T0 + 5, 4) + struct.pack(">qI", T0 + 1, 6),
        ),
        ("timeindex-past-log", filenames.TIME_INDEX_SUFFIX, struct.pack(">qI", T0, 10**6)),
        ("index-torn-entry", filenames.INDEX_SUFFIX, None),
    ]


@pytest.mark.parametrize(
    ("suffix", "content"),
    [pytest.param(s, c, id=name) for name, s, c in _index_corruptions()],
)
def test_corrupt_index_rebuilt(tmp_path: Path, suffix: str, content: bytes | None) -> None:
    log = open_log(tmp_path)
    fill(log, 30)
    bases = log.segments
    log.close()
    good = {b: segment_path(log, b, suffix).read_bytes() for b in bases}
    for base in bases:
        path = segment_path(log, base, suffix)
        path.write_bytes(good[base][:-3] if content is None else content)
    reopened = open_log(tmp_path)
    for base in bases[:-1]:
        assert segment_path(log, base, suffix).read_bytes() == good[base]
    assert_healthy(reopened, 60)
    reopened.close()


# ------------------------------------------------------------------------- checkpoint files


@pytest.mark.parametrize("content", [b"", b"0\n1\nxyz\n", b"\x00\xff", b"0\n1\n999999\n"])
def test_corrupt_recovery_point_checkpoint(tmp_path: Path, content: bytes) -> None:
    log = open_log(tmp_path)
    fill(log, 30)
    crash(log)
    (log.directory / filenames.RECOVERY_POINT_CHECKPOINT).write_bytes(content)
    reopened = open_log(tmp_path)
    assert_healthy(reopened, 60)
    assert reopened.recovery_point == 60
    reopened.close()


def test_corrupt_log_start_checkpoint(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 30)
    log.delete_segments_before(log.segments[2])
    start = log.log_start_offset
    assert start > 0
    log.close()
    (log.directory / filenames.LOG_START_OFFSET_CHECKPOINT).write_bytes(b"\x00garbage")
    reopened = open_log(tmp_path)
    assert reopened.log_start_offset == start  # the first segment's base
    assert_healthy(reopened, 60)
    reopened.close()


def test_log_start_checkpoint_beyond_log_end(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 3)
    log.close()
    (log.directory / filenames.LOG_START_OFFSET_CHECKPOINT).write_text("0\n1\n500\n")
    reopened = open_log(tmp_path)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (500, 500)
    assert reopened.segments == [500]
    reopened.close()


@pytest.mark.parametrize("content", [None, b"0\n2\n1 0\n", b"0\n1\nx y\n", b"0\n2\n3 10\n2 20\n"])
def test_corrupt_leader_epoch_checkpoint_rebuilt(tmp_path: Path, content: bytes | None) -> None:
    log = open_log(tmp_path)
    fill(log, 5, epoch=1)
    fill(log, 5, epoch=4)
    fill(log, 5, epoch=9)
    entries = log.leader_epoch_cache.entries
    assert entries == [(1, 0), (4, 10), (9, 20)]
    log.close()
    path = log.directory / filenames.LEADER_EPOCH_CHECKPOINT
    if content is None:
        path.unlink()
    else:
        path.write_bytes(content)
    reopened = open_log(tmp_path)
    assert reopened.leader_epoch_cache.entries == entries
    assert path.read_text() == "0\n3\n1 0\n4 10\n9 20\n"
    reopened.close()


def test_leftovers_of_interrupted_writes_and_deletes_removed(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 30)
    bases = log.segments
    log.close()
    directory = log.directory
    # crash during a durable checkpoint write (step 1) and during segment deletion (steps 2-3)
    (directory / (filenames.RECOVERY_POINT_CHECKPOINT + filenames.TEMP_SUFFIX)).write_text("0\n")
    first_log = segment_path(log, bases[0])
    first_log.rename(filenames.deleted_file(first_log))  # .log renamed, indexes not yet
    reopened = open_log(tmp_path)
    names = {p.name for p in directory.iterdir()}
    assert not any(filenames.is_leftover(name) for name in names)
    assert filenames.index_file(directory, bases[0]).name not in names  # orphan index gone
    assert reopened.segments == bases[1:]
    assert reopened.log_start_offset == bases[1]
    assert_healthy(reopened, 60)
    reopened.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=6), st.binary(min_size=1, max_size=400))
def test_arbitrary_tail_bytes_never_break_open(good_batches: int, tail: bytes) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        log = open_log(directory)
        fill(log, good_batches)
        crash(log)
        path = segment_path(log, 0)
        with path.open("ab") as handle:
            handle.write(tail)
        reopened = open_log(directory)
        assert reopened.log_end_offset == 2 * good_batches
        assert path.stat().st_size == sum(len(make_batch(2, 0)) for _ in range(good_batches))
        reopened.close()
