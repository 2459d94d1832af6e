"""The console's lag sampler (loglake/console/sampler.py): bounded ticks, chart data, probes
that fail, and the sampling task itself (in-process, no cluster)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from loglake.console import sampler
from loglake.console.sampler import Key, Sampler, SeriesStore, chart


def test_store_keeps_the_last_ticks_only() -> None:
    store = SeriesStore(capacity=3)
    for t in range(5):
        store.record(t, {("tier", "a"): float(t)})
    assert [tick.t_ms for tick in store.ticks()] == [2, 3, 4]
    assert store.latest(("tier", "a")) == 4.0
    assert store.latest(("tier", "b")) is None


def test_store_bounds_series_per_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sampler, "MAX_SERIES", 4)
    store = SeriesStore()
    store.record(1, {("group", "g", "t", p): 1.0 for p in range(10)})
    tick = store.latest_tick()
    assert tick is not None
    assert sorted(tick.values) == [("group", "g", "t", p) for p in range(4)]


def test_chart_aligns_series_sums_shared_labels_and_leaves_gaps() -> None:
    store = SeriesStore()
    store.record(1000, {("group", "g", "t", 0): 5, ("group", "g", "t", 1): 7,
                        ("group", "other", "t", 0): 100})
    store.record(2000, {("group", "g", "t", 1): 3})
    per_partition = chart(store, lambda k: f"{k[2]}[{k[3]}]" if k[1] == "g" else None)
    assert per_partition.labels == [1000, 2000]
    assert per_partition.datasets == [{"label": "t[0]", "data": [5, None]},
                                      {"label": "t[1]", "data": [7, 3]}]
    total = chart(store, lambda k: "total" if k[1] == "g" else None)
    assert total.datasets == [{"label": "total", "data": [12, 3]}]


def test_chart_keeps_the_largest_series() -> None:
    store = SeriesStore()
    store.record(1, {("tier", f"t{i}"): float(i) for i in range(30)})
    data = chart(store, lambda k: str(k[1]), max_datasets=5)
    assert data.truncated == 25
    assert sorted(d["label"] for d in data.datasets) == ["t25", "t26", "t27", "t28", "t29"]


def test_a_failing_probe_does_not_stop_the_others() -> None:
    calls = {"n": 0}

    def good() -> Mapping[Key, float]:
        calls["n"] += 1
        return {("tier", "a"): float(calls["n"])}

    def bad() -> Mapping[Key, float]:
        raise RuntimeError("cluster unreachable")

    s = Sampler(interval_s=0.05)
    s.add_probe("good", good)
    s.add_probe("bad", bad)

    async def run() -> None:
        s.start()
        for _ in range(200):
            if len(s.store) >= 3:
                break
            await asyncio.sleep(0.02)
        await s.stop()

    asyncio.run(run())
    assert len(s.store) >= 3
    values = [tick.values[("tier", "a")] for tick in s.store.ticks()]
    assert values == sorted(values) and values[0] == 1.0
    assert s.errors == {"bad": "cluster unreachable"}


def test_poke_samples_before_the_interval_ends() -> None:
    s = Sampler(interval_s=60.0)
    s.add_probe("one", lambda: {("tier", "a"): 1.0})

    async def run() -> int:
        s.start()
        for _ in range(100):
            if len(s.store) >= 1:
                break
            await asyncio.sleep(0.02)
        s.poke()
        for _ in range(100):
            if len(s.store) >= 2:
                break
            await asyncio.sleep(0.02)
        await s.stop()
        return len(s.store)

    assert asyncio.run(run()) == 2
