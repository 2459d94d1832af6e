"""TieredTable on local storage: commits with app transactions, stale writers, reads by offset
and time, background checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

from loglake.segments.records import Record, encode_batch
from loglake.segments.storage import Storage
from loglake.segments.tier_rows import batches_to_rows
from loglake.segments.tiered_table import TieredTable


def _rows(first: int, count: int, batch: int = 10):
    data = b"".join(
        encode_batch([Record(o, 1_000_000 + o, b"k%d" % o, b"v%d" % o)
                      for o in range(start, min(start + batch, first + count))])
        for start in range(first, first + count, batch))
    return batches_to_rows(data)


@pytest.fixture
def table(tmp_path: Path) -> TieredTable:
    t = TieredTable(Storage.from_url(str(tmp_path / "lake")), "topic")
    t.ensure_created()
    return t


def test_commits_advance_the_tiered_end_and_refuse_stale_writers(table: TieredTable) -> None:
    assert table.tiered_end(0) is None
    first = table.write_file(0, _rows(0, 100))
    assert table.commit(0, [first], 99, expected_end=None)
    assert table.tiered_end(0) == 100
    # a writer that read the old end (e.g. a deposed leader) commits nothing
    stale = table.write_file(0, _rows(0, 100))
    assert not table.commit(0, [stale], 99, expected_end=None)
    assert table.tiered_end(0) == 100
    assert [f.num_records for f in table.files(0, refresh=True)] == [100]
    # other partitions are independent
    other = table.write_file(1, _rows(0, 5))
    assert table.commit(1, [other], 4, expected_end=None)
    assert (table.tiered_end(0), table.tiered_end(1)) == (100, 5)


def test_reads_by_offset_and_time(table: TieredTable) -> None:
    for start in range(0, 300, 100):
        pending = table.write_file(0, _rows(start, 100))
        assert table.commit(0, [pending], start + 99,
                            expected_end=None if start == 0 else start)
    table.files(0, refresh=True)
    assert table.start_offset(0) == 0
    chunk = table.read_chunk(0, 155)
    assert chunk is not None
    offsets = chunk.column("offset").to_pylist()
    assert offsets[0] == 150 and 155 in offsets  # from the batch holding 155, whole batches
    assert table.read_chunk(0, 300) is None
    rows = [b for batch in table.read_rows(0, 95, 105) for b in batch.column("offset").to_pylist()]
    assert rows == list(range(95, 105))
    assert table.offset_for_timestamp(0, 1_000_000 + 250) == (250, 1_000_000 + 250)
    assert table.offset_for_timestamp(0, 9_999_999) is None


def test_checkpoint_when_due(table: TieredTable) -> None:
    end = None
    for start in range(0, 50, 2):
        pending = table.write_file(0, _rows(start, 2))
        assert table.commit(0, [pending], start + 1, expected_end=end)
        end = start + 2
    assert table.checkpoint_if_due(every=20)
    assert not table.checkpoint_if_due(every=20)
    log_dir = Path(table.uri) / "_delta_log"
    assert (log_dir / "_last_checkpoint").exists()
    fresh = TieredTable(table.storage, table.topic)
    assert fresh.tiered_end(0) == 50
