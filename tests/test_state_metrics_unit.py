"""In-process checks of the state-metrics logic (issue 16): ISR change counting, the offline
partition rule, a deleted topic's tier series, and the ``LOGLAKE_HOLD_AT`` hold points.
The same metrics against a real cluster: tests/test_state_metrics.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.metrics.collectors import offline_partitions
from loglake.broker.metrics.state_counters import StateCounters
from loglake.catalog.zookeeper import PartitionState
from loglake.faults import HOLD_ENV, held


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_isr_changes_count_shrinks_and_expands_once_per_write() -> None:
    registry = CollectorRegistry()
    counters = StateCounters(registry)
    counters.isr_changed((1, 2, 3), (1, 2))  # shrink
    counters.isr_changed((1, 2), (1, 2, 3))  # expand
    counters.isr_changed((1, 2, 3), (1, 3, 4))  # both in one write
    counters.isr_changed((1, 2), (2, 1))  # same set: neither
    found = samples(registry)
    assert found[("kafka_server_replicamanager_isrshrinks_total", ())] == 2
    assert found[("kafka_server_replicamanager_isrexpands_total", ())] == 2


def test_a_deleted_topic_leaves_no_tier_series() -> None:
    registry = CollectorRegistry()
    counters = StateCounters(registry)
    counters.tier_committed("a", 0.02)
    counters.tier_committed("b", 0.5)
    counters.tier_fetched("a")
    counters.forget_topic("a")
    counters.forget_topic("never-seen")  # no error
    found = samples(registry)
    assert ("loglake_tier_commits_total", (("topic", "a"),)) not in found
    assert ("loglake_tier_fetches_total", (("topic", "a"),)) not in found
    assert found[("loglake_tier_commits_total", (("topic", "b"),))] == 1
    assert found[("loglake_tier_commit_seconds_count", ())] == 2  # latency is not per topic


def test_offline_partitions_are_those_without_a_live_leader() -> None:
    metadata = MetadataCache()
    metadata.topics = {"t": object(), "u": object()}  # type: ignore[dict-item]
    metadata.live_brokers = {1: object(), 2: object()}  # type: ignore[dict-item]
    metadata.partition_states = {
        ("t", 0): PartitionState(1, 0, (1, 2)),  # live leader
        ("t", 1): PartitionState(-1, 3, (3,)),  # no leader
        ("u", 0): PartitionState(3, 1, (3,)),  # leader not live
        ("gone", 0): PartitionState(-1, 0, ()),  # topic no longer known: not counted
    }
    assert offline_partitions(metadata) == 2


def test_hold_points_hold_while_their_file_exists(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    hold = tmp_path / "hold"
    monkeypatch.delenv(HOLD_ENV, raising=False)
    assert not held("tier-before-write")
    monkeypatch.setenv(HOLD_ENV, f"other=/nonexistent,tier-before-write={hold}")
    assert not held("tier-before-write")  # no file yet
    hold.touch()
    assert held("tier-before-write")
    assert not held("other")
    assert not held("tier")  # whole names only
    hold.unlink()
    assert not held("tier-before-write")
