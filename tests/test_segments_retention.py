"""Which local segments retention deletes (segments/retention.py): Kafka's time and size rules,
the tiering bound (KIP-405) and loglake's compaction rule, as pure decisions."""

from __future__ import annotations

from pathlib import Path

from loglake.config import TopicConfig
from loglake.segments.log import SegmentInfo
from loglake.segments.retention import deletable_prefix, local_limits

NOW = 1_000_000


def segments(*specs: tuple[int, int, int]) -> list[SegmentInfo]:
    """(next_offset, size, max_timestamp) per segment, bases chained from 0; the last active."""
    out, base = [], 0
    for i, (next_offset, size, ts) in enumerate(specs):
        out.append(SegmentInfo(base, next_offset, size, ts, Path(f"{base}.log"),
                               i == len(specs) - 1))
        base = next_offset
    return out


LOG = segments((100, 1000, NOW - 5000), (200, 1000, NOW - 3000), (300, 1000, NOW - 1000),
               (350, 500, NOW))


def test_time_and_size_rules_delete_a_prefix_of_sealed_segments():
    assert deletable_prefix(LOG, now_ms=NOW, retention_ms=4000, retention_bytes=-1,
                            tiered_end=None) == 100
    # 3500 bytes: a segment goes while the rest still reaches the limit (Kafka's rule)
    assert deletable_prefix(LOG, now_ms=NOW, retention_ms=-1, retention_bytes=1600,
                            tiered_end=None) == 100
    assert deletable_prefix(LOG, now_ms=NOW, retention_ms=-1, retention_bytes=1500,
                            tiered_end=None) == 200
    assert deletable_prefix(LOG, now_ms=NOW, retention_ms=0, retention_bytes=-1,
                            tiered_end=None) == 300  # never the active segment
    assert deletable_prefix(LOG, now_ms=NOW, retention_ms=-1, retention_bytes=-1,
                            tiered_end=None) is None


def test_tiered_topics_delete_only_what_the_table_holds():
    assert deletable_prefix(LOG, now_ms=NOW, retention_ms=0, retention_bytes=-1,
                            tiered_end=150) == 100
    assert deletable_prefix(LOG, now_ms=NOW, retention_ms=0, retention_bytes=-1,
                            tiered_end=None) == 300
    config = TopicConfig.from_overrides({"retention.ms": "9000", "local.retention.ms": "-2"})
    assert local_limits(config, tiered=True) == (9000, -1)
    config = TopicConfig.from_overrides({"retention.ms": "9000", "local.retention.ms": "10"})
    assert local_limits(config, tiered=True) == (10, -1)
    assert local_limits(config, tiered=False) == (9000, -1)


def test_segments_below_the_compacted_offset_go_whatever_the_limits():
    # nothing expired, but the table compacted offsets below 200: the local copies are stale
    assert deletable_prefix(LOG, now_ms=NOW, retention_ms=-1, retention_bytes=-1,
                            tiered_end=300, cleaned_end=200) == 200
    # a segment only partly below the cleaned offset stays
    assert deletable_prefix(LOG, now_ms=NOW, retention_ms=-1, retention_bytes=-1,
                            tiered_end=300, cleaned_end=150) == 100
    # never beyond what is tiered, never without tiering
    assert deletable_prefix(LOG, now_ms=NOW, retention_ms=-1, retention_bytes=-1,
                            tiered_end=100, cleaned_end=300) == 100
    assert deletable_prefix(LOG, now_ms=NOW, retention_ms=-1, retention_bytes=-1,
                            tiered_end=None, cleaned_end=300) is None
