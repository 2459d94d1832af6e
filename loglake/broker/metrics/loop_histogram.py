"""Histograms and counters recorded on the event loop thread, exported at scrape time.

prometheus_client's ``Histogram.observe`` takes a lock and walks every bucket; these take
neither: one ``bisect`` and two additions. They are safe only because every write and every
scrape run on the broker's event loop thread (the ``/metrics`` endpoint is served there too,
see http.py), so a scrape never sees a half-made observation.

Format: ``LabelledHistogram.families()`` yields one ``HistogramMetricFamily`` with
cumulative ``le`` buckets (``+Inf`` last), ``_sum`` and ``_count``, as the text format wants.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client.core import HistogramMetricFamily, Metric

LATENCY_MS_BUCKETS: tuple[float, ...] = (
    0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0,
    10000.0, 30000.0)
"""Upper bounds (ms) of request latency buckets; ``+Inf`` is implicit."""
SECONDS_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (s) for ZooKeeper calls and event-loop lag; ``+Inf`` is implicit."""


class HistogramCells:
    """One label set's buckets: ``counts[i]`` observations in ``(bounds[i-1], bounds[i]]``,
    the last cell above every bound."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs, ``+Inf`` last."""
        result: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            result.append((_float_text(bound), running))
        running += self.counts[-1]
        result.append(("+Inf", running))
        return result


class LabelledHistogram:
    """A histogram family keyed by a tuple of label values (loop thread only)."""

    __slots__ = ("bounds", "cells", "documentation", "label_names", "name")

    def __init__(self, name: str, documentation: str, label_names: Sequence[str],
                 bounds: Sequence[float]) -> None:
        self.name = name
        self.documentation = documentation
        self.label_names = list(label_names)
        self.bounds = tuple(bounds)
        self.cells: dict[tuple[str, ...], HistogramCells] = {}

    def cell(self, labels: tuple[str, ...]) -> HistogramCells:
        """The cells of ``labels`` (created on first use); keep it to observe cheaply."""
        cells = self.cells.get(labels)
        if cells is None:
            cells = self.cells[labels] = HistogramCells(self.bounds)
        return cells

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        self.cell(labels).observe(value)

    def families(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.label_names)
        for labels, cells in list(self.cells.items()):
            family.add_metric(list(labels), cells.buckets(), cells.total)
        yield family


def _float_text(value: float) -> str:
    return repr(float(value))
