"""The per-segment transaction index (``.txnindex``): Kafka's 34-byte entry format, round trip,
torn tails, the search with its early stop, and that entries follow their segment through
truncation, retention and deletion. Real files in temporary directories."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest

from loglake.config import TopicConfig
from loglake.segments import filenames
from loglake.segments.log import PartitionLog
from loglake.segments.records import Record, encode_batch
from loglake.segments.txn_index import (
    ENTRY_SIZE,
    AbortedTxn,
    TransactionIndex,
    decode_entries,
    encode_entry,
)

T0 = 1_700_000_000_000


def test_entry_is_kafkas_34_byte_big_endian_layout() -> None:
    entry = AbortedTxn(producer_id=7, first_offset=10, last_offset=20, last_stable_offset=21)
    data = encode_entry(entry)
    assert ENTRY_SIZE == len(data) == 34
    assert data == struct.pack(">hqqqq", 0, 7, 10, 20, 21)
    assert decode_entries(data + data[:10]) == [entry]  # a torn tail is dropped


def test_round_trip_torn_tail_and_truncation(tmp_path: Path) -> None:
    index = TransactionIndex.load(tmp_path, 0)
    assert not index.path.exists() and len(index) == 0
    entries = [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10), AbortedTxn(1, 10, 12, 13)]
    for entry in entries:
        index.append(entry)
    with pytest.raises(ValueError):
        index.append(AbortedTxn(3, 0, 12, 13))
    index.flush()
    index.close()
    assert index.path.read_bytes() == b"".join(encode_entry(e) for e in entries)
    with index.path.open("ab") as f:
        f.write(b"\x00\x00\x01")  # a torn write
    loaded = TransactionIndex.load(tmp_path, 0)
    assert loaded.entries == entries
    assert loaded.path.stat().st_size == 3 * ENTRY_SIZE
    assert loaded.contains_marker(9) and not loaded.contains_marker(8)
    loaded.truncate_to(9)  # the marker at 9 and later ones go
    assert loaded.entries == entries[:1]
    loaded.close()
    assert TransactionIndex.load(tmp_path, 0).entries == entries[:1]


def test_collect_overlap_and_early_stop(tmp_path: Path) -> None:
    index = TransactionIndex.load(tmp_path, 0)
    for entry in (AbortedTxn(1, 0, 5, 3), AbortedTxn(2, 3, 9, 10), AbortedTxn(3, 10, 12, 13)):
        index.append(entry)
    assert index.collect(0, 3) == ([AbortedTxn(1, 0, 5, 3)], True)
    assert index.collect(6, 11) == ([AbortedTxn(2, 3, 9, 10), AbortedTxn(3, 10, 12, 13)], True)
    assert index.collect(13, 20) == ([], False)
    index.close()


def _log(directory: Path, **settings: int) -> PartitionLog:
    config = dataclasses.replace(TopicConfig(), **settings)  # type: ignore[arg-type]
    return PartitionLog.open(directory, config)


def _batch(count: int = 1) -> bytes:
    return encode_batch([Record(i, T0, None, b"x" * 100) for i in range(count)])


def _stored(log: PartitionLog) -> dict[int, list[AbortedTxn]]:
    """The entries in each segment's ``.txnindex`` file."""
    found = {}
    for base in log.segments:
        path = filenames.txn_index_file(log.directory, base)
        found[base] = decode_entries(path.read_bytes()) if path.exists() else []
    return found


def _by_segment(log: PartitionLog, entries: list[AbortedTxn]) -> dict[int, list[AbortedTxn]]:
    bounds = [*log.segments[1:], log.log_end_offset]
    return {base: [e for e in entries if base <= e.last_offset < end]
            for base, end in zip(log.segments, bounds, strict=True)}


def test_log_keeps_entries_per_segment_through_truncation_and_deletion(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = _log(directory, segment_bytes=600)
    expected = []
    for i in range(12):  # ~170 B per batch: 3 batches per segment
        result = log.append(_batch())
        if i % 2:
            entry = AbortedTxn(i, result.base_offset - 1, result.base_offset,
                               result.base_offset + 1)
            assert log.add_aborted_txn(entry)
            assert not log.add_aborted_txn(entry)  # a replay adds nothing
            expected.append(entry)
    assert len(log.segments) >= 4
    assert log.aborted_transactions(0, log.log_end_offset) == expected
    assert log.aborted_transactions(4, 6) == [e for e in expected if e.last_offset >= 4
                                              and e.first_offset < 6]
    assert _stored(log) == _by_segment(log, expected)  # each in its marker's segment
    log.truncate_to(8)
    kept = [e for e in expected if e.last_offset < 8]
    assert log.aborted_transactions(0, 100) == kept
    assert _stored(log) == _by_segment(log, kept)
    second_base = log.segments[1]
    log.set_log_start_offset(second_base)
    log.delete_segments_before(second_base)
    assert not filenames.txn_index_file(directory, 0).exists()
    assert log.aborted_transactions(0, 100) == [
        e for e in expected if second_base <= e.last_offset < 8]
    log.close()
    reopened = _log(directory, segment_bytes=600)
    assert reopened.aborted_transactions(0, 100) == [
        e for e in expected if second_base <= e.last_offset < 8]
    reopened.truncate_fully_and_start_at(50)
    assert reopened.aborted_transactions(0, 100) == []
    assert not list(directory.glob("*" + filenames.TXN_INDEX_SUFFIX))
    reopened.close()


def test_orphan_index_and_entries_past_a_recovered_end_are_dropped(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = _log(directory)
    for _ in range(3):
        log.append(_batch())
    log.add_aborted_txn(AbortedTxn(1, 0, 1, 2))
    log.add_aborted_txn(AbortedTxn(2, 2, 2, 3))
    log.close()
    orphan = filenames.txn_index_file(directory, 500)
    orphan.write_bytes(encode_entry(AbortedTxn(9, 500, 501, 502)))
    # cut the last batch in half and make the next open recover
    log_path = filenames.log_file(directory, 0)
    size = log_path.stat().st_size
    with log_path.open("r+b") as f:
        f.truncate(size - 50)
    (directory / filenames.CLEAN_SHUTDOWN_MARKER).unlink()
    reopened = _log(directory)
    assert reopened.log_end_offset == 2
    assert reopened.aborted_transactions(0, 10) == [AbortedTxn(1, 0, 1, 2)]
    assert not orphan.exists()
    reopened.close()
