"""PartitionLog behavior on real files: append, validation, rolling, reads, timestamps, flush,
leader epochs, truncation and retention (loglake.segments.log)."""

from __future__ import annotations

import dataclasses
import random
import threading
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch

from loglake.config import TopicConfig
from loglake.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
)
from loglake.segments import batch, checkpoint, filenames
from loglake.segments.log import OffsetOutOfRangeError, PartitionLog
from loglake.segments.records import Compression, Record, decode_batches, encode_batch

T0 = 1_700_000_000_000


class FakeClock:
    """Injected clock (seconds, like time.time)."""

    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000

    def advance(self, ms: int) -> None:
        self.ms += ms


def make_batch(
    count: int = 1,
    *,
    timestamps: list[int] | None = None,
    value_size: int = 20,
    compression: Compression = Compression.NONE,
    tag: str = "",
) -> bytes:
    stamps = timestamps or [T0 + i for i in range(count)]
    records = [
        Record(
            i, stamps[i], f"{tag}k{i}".encode(), (f"{tag}v{i}-".encode() * value_size)[:value_size]
        )
        for i in range(len(stamps))
    ]
    return encode_batch(records, compression=compression)


def open_log(directory: Path, clock: FakeClock | None = None, **settings: object) -> PartitionLog:
    config = dataclasses.replace(TopicConfig(), **settings)  # type: ignore[arg-type]
    return PartitionLog.open(directory / "topic-0", config, clock=clock or FakeClock())


def all_records(log: PartitionLog, start: int | None = None) -> list[Record]:
    """Every record from ``start`` (default: log start) by repeated reads."""
    offset = log.log_start_offset if start is None else start
    out: list[Record] = []
    while offset < log.log_end_offset:
        data = log.read(offset, 4096)
        assert data, offset
        for decoded in decode_batches(data):
            out.extend(r for r in decoded.records if r.offset >= offset)
        offset = decoded.header.next_offset
    return out


# --------------------------------------------------------------------------------- appends


def test_append_assigns_offsets_and_patches_header(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.append(make_batch(3), leader_epoch=5)
    assert (first.base_offset, first.last_offset) == (0, 2)
    assert first.log_append_time_ms == -1 and first.log_start_offset == 0
    request = make_batch(2) + make_batch(4, compression=Compression.LZ4)
    second = log.append(request, leader_epoch=5)
    assert (second.base_offset, second.last_offset) == (3, 8)
    assert [h.base_offset for h in second.batches] == [3, 5]
    assert second.batches[0].position == first.batches[0].size
    assert log.log_end_offset == 9
    data = log.read(0, 1 << 20)
    stored = batch.parse_batches(data, strict=False)  # CRCs still valid
    assert [h.base_offset for h in stored] == [0, 3, 5]
    assert {h.partition_leader_epoch for h in stored} == {5}
    assert stored[1:] == second.batches
    assert [r.offset for r in all_records(log)] == list(range(9))
    log.close()


def test_records_bytes_are_stored_verbatim(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch(2))
    produced = make_batch(3, compression=Compression.GZIP)
    result = log.append(produced, leader_epoch=2)
    stored = log.read(result.base_offset, 1 << 20)
    assert stored[16:] == produced[16:]  # from magic on: identical
    assert stored[:8] == (2).to_bytes(8, "big")
    assert stored[12:16] == (2).to_bytes(4, "big")
    log.close()


def test_failed_validation_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_message_bytes=300)
    log.append(make_batch(1))
    size = log.size_bytes
    bad_crc = bytearray(make_batch(1))
    bad_crc[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append(make_batch(1) + bytes(bad_crc))
    with pytest.raises(MessageTooLargeError):
        log.append(make_batch(1) + make_batch(20, value_size=100))
    wrong_magic = bytearray(make_batch(1))
    wrong_magic[16] = 1
    with pytest.raises(InvalidRecordError):
        log.append(bytes(wrong_magic))
    with pytest.raises(CorruptRecordError):
        log.append(make_batch(1)[:-3])
    assert log.log_end_offset == 1 and log.size_bytes == size
    assert log.append(make_batch(1)).base_offset == 1
    log.close()


def test_append_with_pre_parsed_headers(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    request = make_batch(2) + make_batch(3)
    result = log.append(request, headers=batch.parse_batches(request))
    assert (result.base_offset, result.last_offset) == (0, 4)
    with pytest.raises(InvalidRecordError):
        log.append(request, headers=[])
    log.close()


def test_create_time_bounds(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(
        tmp_path,
        clock,
        message_timestamp_before_max_ms=1000,
        message_timestamp_after_max_ms=500,
    )
    log.append(make_batch(timestamps=[T0 - 1000, T0 + 500]))
    with pytest.raises(InvalidTimestampError):
        log.append(make_batch(timestamps=[T0, T0 - 1001]))  # second record too old
    with pytest.raises(InvalidTimestampError):
        log.append(make_batch(timestamps=[T0 + 501], compression=Compression.ZSTD))
    assert log.log_end_offset == 2
    log.close()


def test_log_append_time(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    clock.advance(1234)
    result = log.append(make_batch(3, timestamps=[5, 6, 7], compression=Compression.SNAPPY))
    assert result.log_append_time_ms == T0 + 1234
    assert result.batches[0].timestamp_type == batch.LOG_APPEND_TIME
    data = log.read(0, 1 << 20)
    (decoded,) = decode_batches(data)  # verifies the recomputed CRC
    assert decoded.header == result.batches[0]
    assert [r.timestamp for r in decoded.records] == [T0 + 1234] * 3
    assert DefaultRecordBatch(bytearray(data)).validate_crc()
    assert log.offset_for_timestamp(T0) == (0, T0 + 1234)
    assert log.max_timestamp() == (T0 + 1234, 0)
    log.close()


def test_append_as_follower_keeps_offsets_and_epochs(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    leader.append(make_batch(2), leader_epoch=1)
    leader.append(make_batch(3), leader_epoch=3)
    follower = open_log(tmp_path / "follower")
    result = follower.append_as_follower(leader.read(0, 1 << 20))
    assert (result.base_offset, result.last_offset) == (0, 4)
    assert follower.log_end_offset == 5
    assert follower.leader_epoch_cache.entries == [(1, 0), (3, 2)]
    assert follower.read(0, 1 << 20) == leader.read(0, 1 << 20)
    with pytest.raises(InvalidRecordError):
        follower.append_as_follower(leader.read(2, 1 << 20))
    leader.close()
    follower.close()


# --------------------------------------------------------------------------------- rolling


def test_roll_on_segment_bytes(tmp_path: Path) -> None:
    one = len(make_batch(1))
    log = open_log(tmp_path, segment_bytes=one * 3 + 10)
    for _ in range(10):
        log.append(make_batch(1))
    assert log.segments == [0, 3, 6, 9]
    infos = log.segment_infos()
    assert [i.size_bytes for i in infos] == [one * 3] * 3 + [one]
    assert [i.active for i in infos] == [False, False, False, True]
    assert [r.offset for r in all_records(log)] == list(range(10))
    # a request with several batches goes into one segment
    log.append(make_batch(1) + make_batch(1) + make_batch(1))
    assert log.segments == [0, 3, 6, 9, 10]
    log.close()
    reopened = open_log(tmp_path, segment_bytes=one * 3 + 10)
    assert reopened.segments == [0, 3, 6, 9, 10]
    assert [r.offset for r in all_records(reopened)] == list(range(13))
    reopened.close()


def test_roll_on_segment_ms_by_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path, clock, segment_ms=1000, message_timestamp_type="LogAppendTime")
    clock.advance(5000)  # an empty segment never rolls
    log.append(make_batch(1))
    clock.advance(900)
    log.append(make_batch(1))
    assert log.segments == [0]
    clock.advance(200)
    log.append(make_batch(1))
    assert log.segments == [0, 2]
    log.close()


def test_roll_on_segment_ms_by_record_time(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path, clock, segment_ms=1000)
    log.append(make_batch(timestamps=[T0]))
    log.append(make_batch(timestamps=[T0 + 1000]))
    assert log.segments == [0]
    log.append(make_batch(timestamps=[T0 + 1001]))  # Kafka: record time since first batch
    assert log.segments == [0, 2]
    log.close()


def test_explicit_roll_and_index_full_roll(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=0, segment_index_bytes=8 * 3)
    log.roll()  # empty active segment: no-op
    assert log.segments == [0]
    for _ in range(6):
        log.append(make_batch(1))
    assert len(log.segments) > 1  # the offset index filled up
    log.roll()
    assert log.segments[-1] == 6
    assert [r.offset for r in all_records(log)] == list(range(6))
    log.close()


# ----------------------------------------------------------------------------------- reads


def test_read_limits_kip74(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    sizes = []
    for count in (3, 2, 4):
        sizes.append(log.append(make_batch(count, value_size=50)).batches[0].size)
    # offset inside a batch returns the whole batch
    assert batch.parse_batches(log.read(1, 1 << 20), strict=False)[0].base_offset == 0
    # at least one whole batch even if larger than max_bytes
    assert len(log.read(0, 10)) == sizes[0]
    assert log.read(0, 10, min_one_batch=False) == b""
    assert len(log.read(0, 0)) == sizes[0]
    # whole batches only, up to max_bytes
    assert len(log.read(0, sizes[0] + sizes[1] + sizes[2] - 1)) == sizes[0] + sizes[1]
    assert len(log.read(0, 1 << 20)) == sum(sizes)
    # never batches at or above max_offset
    assert len(log.read(0, 1 << 20, max_offset=5)) == sizes[0] + sizes[1]
    assert len(log.read(0, 1 << 20, max_offset=4)) == sizes[0] + sizes[1]
    assert len(log.read(0, 1 << 20, max_offset=3)) == sizes[0]
    assert log.read(0, 1 << 20, max_offset=0) == b""
    assert log.read(4, 1 << 20, max_offset=3) == b""
    # range
    assert log.read(9, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(10, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    log.close()


def test_random_reads_match_brute_force(tmp_path: Path) -> None:
    rng = random.Random(7)
    log = open_log(tmp_path, segment_bytes=3000, index_interval_bytes=200)
    for i in range(120):
        log.append(make_batch(rng.randint(1, 4), value_size=rng.randint(1, 60), tag=str(i)))
    expected = {r.offset: r for r in all_records(log)}
    assert len(expected) == log.log_end_offset
    for _ in range(200):
        offset = rng.randrange(log.log_end_offset)
        data = log.read(offset, rng.randint(1, 2000))
        decoded = decode_batches(data)
        assert decoded[0].header.base_offset <= offset <= decoded[0].header.last_offset
        for b in decoded:
            for record in b.records:
                assert expected[record.offset] == record
    log.close()


def test_offset_for_timestamp_and_max_timestamp(tmp_path: Path) -> None:
    rng = random.Random(3)
    log = open_log(tmp_path, segment_bytes=2500, index_interval_bytes=150)
    assert log.offset_for_timestamp(0) is None and log.max_timestamp() is None
    for _ in range(80):
        count = rng.randint(1, 3)
        stamps = [T0 + rng.randint(0, 5000) for _ in range(count)]
        codec = rng.choice(list(Compression))
        log.append(make_batch(timestamps=stamps, compression=codec))
    records = all_records(log)
    assert len(log.segments) > 3
    for target in [T0 - 1, T0, *(T0 + rng.randint(0, 5100) for _ in range(60)), T0 + 5000]:
        matches = [r for r in records if r.timestamp >= target]
        expected = (matches[0].offset, matches[0].timestamp) if matches else None
        assert log.offset_for_timestamp(target) == expected, target
    assert log.offset_for_timestamp(T0 + 5001) is None
    top = max(r.timestamp for r in records)
    first_top = next(r for r in records if r.timestamp == top)
    assert log.max_timestamp() == (top, first_top.offset)
    log.close()
    reopened = open_log(tmp_path, segment_bytes=2500, index_interval_bytes=150)
    assert reopened.max_timestamp() == (top, first_top.offset)
    assert reopened.offset_for_timestamp(T0 + 2500) == log_offset_for(records, T0 + 2500)
    reopened.close()


def log_offset_for(records: list[Record], target: int) -> tuple[int, int] | None:
    for record in records:
        if record.timestamp >= target:
            return record.offset, record.timestamp
    return None


def test_batch_headers(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400, index_interval_bytes=50)
    for _ in range(20):
        log.append(make_batch(2))
    headers = list(log.batch_headers())
    assert [h.base_offset for h in headers] == list(range(0, 40, 2))
    assert [h.base_offset for h in log.batch_headers(25)] == list(range(24, 40, 2))
    log.close()


# ----------------------------------------------------------------------------- durability


def test_flush_policy_messages(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_messages=3)
    log.append(make_batch(1))
    log.append(make_batch(1))
    assert log.recovery_point == 0
    log.append(make_batch(1))
    assert log.recovery_point == 3
    log.append(make_batch(5))
    assert log.recovery_point == 8
    log.close()


def test_flush_policy_default_never_and_ms(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "default", clock)
    log.append(make_batch(4))
    clock.advance(10**9)
    log.flush_if_due()
    assert log.recovery_point == 0  # like Kafka: leave it to the OS
    log.close()
    assert (
        checkpoint.read_offset(
            tmp_path / "default" / "topic-0" / filenames.RECOVERY_POINT_CHECKPOINT
        )
        == 4
    )

    timed = open_log(tmp_path / "timed", clock, flush_ms=1000)
    timed.append(make_batch(2))
    clock.advance(999)
    timed.flush_if_due()
    assert timed.recovery_point == 0
    clock.advance(1)
    timed.flush_if_due()
    assert timed.recovery_point == 2
    timed.close()


def test_rolled_segment_flushed_by_scheduler(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path, clock)
    log.append(make_batch(3))
    log.roll()
    log.append(make_batch(1))
    log.flush_if_due()
    assert log.recovery_point == 3
    log.close()


def test_planned_flush_runs_in_a_worker_thread_and_counts_once_done(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path, clock)
    log.append(make_batch(3))
    log.roll()
    log.append(make_batch(1))
    job = log.prepare_flush()
    assert job is not None and job.target == 3
    assert log.recovery_point == 0  # nothing counts before the fsyncs ran
    worker = threading.Thread(target=job.run)
    worker.start()
    log.append(make_batch(2))  # the loop keeps appending meanwhile
    worker.join(10)
    log.complete_flush(job)
    assert log.recovery_point == 3
    assert log.prepare_flush() is None  # the roll's flush is done; flush.ms never due
    log.close()


def test_flush_planned_before_a_truncation_does_not_advance_the_recovery_point(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    log = open_log(tmp_path, clock, flush_ms=1000)
    log.append(make_batch(5))
    clock.advance(1000)
    job = log.prepare_flush()
    assert job is not None and job.target == 5
    log.truncate_to(2)
    log.append(make_batch(3))  # offsets 2..4 again, not fsynced by the job
    job.run()
    log.complete_flush(job)
    assert log.recovery_point <= 2
    log.close()


def test_flush_planned_before_retention_skips_the_deleted_segment(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path, clock)
    log.append(make_batch(3))
    log.roll()
    log.append(make_batch(2))
    log.roll()
    job = log.prepare_flush()
    assert job is not None and len(job.segments) == 2
    assert log.delete_segments_before(3) == 1  # retention removes the first planned segment
    job.run()  # the other one is still fsynced; the deleted one's files are gone
    log.complete_flush(job)
    assert log.recovery_point == 5
    log.close()


def test_close_waits_for_a_flush_in_progress(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch(3))
    holding, release = threading.Event(), threading.Event()

    def flushing() -> None:  # a worker in the middle of the log's fsyncs
        with log.io_lock:
            holding.set()
            release.wait(10)

    worker = threading.Thread(target=flushing)
    worker.start()
    assert holding.wait(10)
    closed = threading.Event()
    closer = threading.Thread(target=lambda: (log.close(), closed.set()))
    closer.start()
    assert not closed.wait(0.3)  # blocked on the io_lock
    release.set()
    assert closed.wait(10)
    worker.join(10)
    closer.join(10)


def test_close_writes_checkpoints_and_marker(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch(3))
    directory = log.directory
    assert not (directory / filenames.CLEAN_SHUTDOWN_MARKER).exists()
    log.close()
    assert (directory / filenames.CLEAN_SHUTDOWN_MARKER).exists()
    assert checkpoint.read_offset(directory / filenames.RECOVERY_POINT_CHECKPOINT) == 3
    assert checkpoint.read_offset(directory / filenames.LOG_START_OFFSET_CHECKPOINT) == 0
    reopened = open_log(tmp_path)
    assert reopened.had_clean_shutdown
    assert not (directory / filenames.CLEAN_SHUTDOWN_MARKER).exists()
    reopened.close()


# ---------------------------------------------------------------------------- leader epochs


def test_leader_epoch_cache(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    cache = log.leader_epoch_cache
    assert cache.latest_epoch() is None
    assert cache.end_offset_for(0) == (-1, -1)
    log.append(make_batch(2), leader_epoch=1)
    log.append(make_batch(2), leader_epoch=1)
    log.append(make_batch(3), leader_epoch=3)
    log.append(make_batch(1), leader_epoch=6)
    assert cache.entries == [(1, 0), (3, 4), (6, 7)]
    assert cache.latest_epoch() == 6
    assert cache.end_offset_for(6) == (6, 8)  # latest epoch: the log end
    assert cache.end_offset_for(3) == (3, 7)
    assert cache.end_offset_for(1) == (1, 4)
    assert cache.end_offset_for(0) == (0, 0)  # below every epoch
    assert cache.end_offset_for(4) == (3, 7)  # unknown epoch: the one below, next start
    assert cache.end_offset_for(7) == (-1, -1)
    assert cache.end_offset_for(-1) == (-1, -1)
    path = log.directory / filenames.LEADER_EPOCH_CHECKPOINT
    assert path.read_text() == "0\n3\n1 0\n3 4\n6 7\n"
    log.truncate_to(5)
    assert log.log_end_offset == 4  # the batch holding offset 5 starts at 4
    assert cache.entries == [(1, 0)]
    assert cache.end_offset_for(1) == (1, 4)
    log.close()
    reopened = open_log(tmp_path)
    assert reopened.leader_epoch_cache.entries == [(1, 0)]
    reopened.close()


def test_leader_epoch_assign_kafka_semantics(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    cache = log.leader_epoch_cache
    assert cache.assign(2, 10)
    assert not cache.assign(2, 12)  # same epoch, later offset: no change
    assert cache.assign(4, 20)
    assert cache.assign(3, 15)  # diverged: drops epoch 4
    assert cache.entries == [(2, 10), (3, 15)]
    assert cache.assign(5, 12)  # start offset before epoch 3's: drops it
    assert cache.entries == [(2, 10), (5, 12)]
    cache.truncate_from_start(11)
    assert cache.entries == [(2, 11), (5, 12)]
    log.close()


# ------------------------------------------------------------------- truncation, retention


def test_truncate_to_then_append(tmp_path: Path) -> None:
    one = len(make_batch(2))
    log = open_log(tmp_path, segment_bytes=one * 2)
    for _ in range(6):
        log.append(make_batch(2))
    assert log.segments == [0, 4, 8]
    log.truncate_to(6)
    assert log.log_end_offset == 6 and log.segments == [0, 4]
    log.truncate_to(4)
    assert log.log_end_offset == 4 and log.segments == [0, 4]
    assert log.append(make_batch(1)).base_offset == 4
    log.truncate_to(100)  # beyond the end: no-op
    assert [r.offset for r in all_records(log)] == list(range(5))
    log.close()
    reopened = open_log(tmp_path, segment_bytes=one * 2)
    assert reopened.log_end_offset == 5
    assert reopened.append(make_batch(1)).base_offset == 5
    reopened.close()


def test_truncate_fully(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch(3), leader_epoch=2)
    log.truncate_fully_and_start_at(50)
    assert (log.log_start_offset, log.log_end_offset, log.segments) == (50, 50, [50])
    assert log.leader_epoch_cache.entries == []
    assert log.append(make_batch(1)).base_offset == 50
    log.close()


def test_retention_and_log_start_offset(tmp_path: Path) -> None:
    one = len(make_batch(2))
    log = open_log(tmp_path, segment_bytes=one * 2)
    for epoch in range(6):
        log.append(make_batch(2), leader_epoch=epoch)
    assert log.segments == [0, 4, 8]
    assert log.delete_segments_before(5) == 1  # only [0, 4) is wholly below 5
    assert log.segments == [4, 8] and log.log_start_offset == 4
    assert log.leader_epoch_cache.entries[0] == (2, 4)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    log.set_log_start_offset(6)
    assert log.log_start_offset == 6
    with pytest.raises(OffsetOutOfRangeError):
        log.read(5, 100)
    assert [r.offset for r in all_records(log)] == [6, 7, 8, 9, 10, 11]
    with pytest.raises(OffsetOutOfRangeError):
        log.set_log_start_offset(13)
    remaining = sorted(p.name for p in log.directory.glob("*.log"))
    assert remaining == [filenames.log_file(log.directory, b).name for b in (4, 8)]
    log.close()
    reopened = open_log(tmp_path, segment_bytes=one * 2)
    assert reopened.log_start_offset == 6
    # everything: the active segment is rolled first and deleted too
    assert reopened.delete_segments_before(12) == 2
    assert reopened.segments == [12] and reopened.log_start_offset == 12
    assert reopened.read(12, 100) == b""
    assert reopened.append(make_batch(1)).base_offset == 12
    reopened.close()


def test_update_config_and_size(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch(1))
    log.update_config(dataclasses.replace(log.config, segment_bytes=10_000, max_message_bytes=50))
    with pytest.raises(MessageTooLargeError):
        log.append(make_batch(1))
    assert log.size_bytes == len(make_batch(1))
    log.close()


def test_delete_removes_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch(2))
    directory = log.directory
    log.delete()
    assert not directory.exists()
    assert list(tmp_path.iterdir()) == []
