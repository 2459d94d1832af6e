"""A sampled rate with an upper bound: Kafka's ``Rate`` over a ``WindowedSum`` with a ``Quota``
(``org.apache.kafka.common.metrics``), and the throttle time of ``QuotaUtils``.

Samples: at most ``samples + 1`` windows of ``window_ms`` each (Kafka keeps one extra for the
sample overlapping the monitored span). A value goes into the current sample; a sample older
than ``window_ms`` is complete and the next record starts a new one, recycling the oldest.
Samples whose last event is ``samples * window_ms`` old or more are reset when measured.

Rate = sum of the samples / elapsed, where elapsed = now - the oldest sample's start, but at
least ``samples - 1`` full windows (so one early burst is not divided by a few milliseconds:
a client may send up to ``bound * (samples - 1) * window`` at once before being throttled,
exactly as in Kafka) and at least 1 ms.

Throttle time (``QuotaUtils.throttleTime``): when the measured rate O exceeds the bound T over
a window W, the delay X that brings O * W / (W + X) down to T: X = (O - T) / T * W, rounded to
milliseconds. The request quota caps it at one window (``boundedThrottleTime``).

Times are integer milliseconds from any monotonic origin (the caller's clock). Not thread-safe:
event loop only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Sample:
    start_ms: int
    last_event_ms: int
    value: float = 0.0
    events: int = 0

    def reset(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.last_event_ms = now_ms
        self.value = 0.0
        self.events = 0


class SampledRate:
    """Kafka's ``Rate(WindowedSum)`` per second with an optional upper bound (see module)."""

    __slots__ = ("_current", "_samples", "bound", "samples", "window_ms")

    def __init__(self, *, samples: int, window_ms: int, bound: float | None = None) -> None:
        if samples < 1 or window_ms < 1:
            raise ValueError("a sampled rate needs at least one sample of at least 1 ms")
        self.samples = samples
        self.window_ms = window_ms
        self.bound = bound
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        """Add ``value`` at ``now_ms`` (negative values un-record, as Kafka's
        ``unrecordQuotaSensor`` does)."""
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.events += 1
        sample.last_event_ms = now_ms

    def measure(self, now_ms: int) -> float:
        """The rate per second now."""
        self._purge(now_ms)
        total = sum(sample.value for sample in self._samples)
        return total / (self.window_size_ms(now_ms) / 1000.0)

    def window_size_ms(self, now_ms: int) -> int:
        """Kafka's ``Rate.windowSize``: elapsed since the oldest live sample, at least
        ``samples - 1`` full windows and 1 ms."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self._samples), default=now_ms)
        elapsed = now_ms - oldest
        full_windows = elapsed // self.window_ms
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window_ms
        return max(elapsed, 1)

    def throttle_ms(self, now_ms: int, *, max_ms: int | None = None) -> int:
        """0 while the rate is within the bound (or there is none); else the delay that brings
        it back to the bound (``QuotaUtils.throttleTime``), capped at ``max_ms``."""
        bound = self.bound
        if bound is None:
            return 0
        rate = self.measure(now_ms)
        if rate <= bound:
            return 0
        delay = round((rate - bound) / bound * self.window_size_ms(now_ms))
        return delay if max_ms is None else min(delay, max_ms)

    def max_value_in_window(self) -> float | None:
        """Kafka's ``getMaxValueInQuotaWindow``: the most that may be recorded at once without
        a certain throttle (None: no bound)."""
        if self.bound is None:
            return None
        return self.bound * (self.samples - 1) * self.window_ms / 1000.0

    def last_event_ms(self) -> int | None:
        return max((s.last_event_ms for s in self._samples), default=None)

    # ---- samples
    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % (self.samples + 1)
        if self._current >= len(self._samples):
            sample = _Sample(now_ms, now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample

    def _purge(self, now_ms: int) -> None:
        expire_age = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire_age:
                sample.reset(now_ms)


class WindowedAvg:
    """Kafka's ``Avg`` stat over the last ``samples * window_ms``: the mean of the values
    recorded in that span (NaN with none), e.g. a quota's ``throttle-time``. Keeps at most
    ``max_kept`` values (the oldest are dropped first)."""

    __slots__ = ("_values", "max_kept", "span_ms")

    def __init__(self, *, samples: int, window_ms: int, max_kept: int = 1000) -> None:
        self.span_ms = samples * window_ms
        self.max_kept = max_kept
        self._values: list[tuple[int, float]] = []

    def record(self, value: float, now_ms: int) -> None:
        self._values.append((now_ms, value))
        if len(self._values) > self.max_kept:
            del self._values[: len(self._values) - self.max_kept]

    def measure(self, now_ms: int) -> float:
        horizon = now_ms - self.span_ms
        self._values = [(t, v) for t, v in self._values if t > horizon]
        if not self._values:
            return float("nan")
        return sum(v for _, v in self._values) / len(self._values)
