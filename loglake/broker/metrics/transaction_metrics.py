"""The transaction coordinator's metrics: Kafka's own, named as Strimzi's JMX-exporter rules
would name them, and loglake's.

Kafka's (the rules Strimzi ships have no line for these MBeans; the names are what its rules for
the same kinds of MBean produce — ``raft-metrics`` attributes and the generic ``name=...><>Value``
gauge rule):

* ``kafka_server_transactioncoordinatormetrics_partition_load_time_max`` and ``..._avg``
  (gauges, ms) — Kafka's ``kafka.server:type=transaction-coordinator-metrics``
  ``partition-load-time-max/avg``;
* ``kafka_coordinator_transaction_transactionmarkerchannelmanager_unknowndestinationqueuesize``
  (gauge) — Kafka's ``TransactionMarkerChannelManager`` ``UnknownDestinationQueueSize``:
  markers whose partition has no live leader (or group no live coordinator) now.

The load times are over the last ``LOAD_WINDOW_S`` (Kafka's sensor: 2 samples of
``metrics.sample.window.ms`` = 30 s); with no load in that window both are NaN, as Kafka's
Avg/Max report no samples. A load is the takeover of one transaction state partition: claim,
coordinator-epoch bump, reading every id from ZooKeeper.

loglake's:

* ``loglake_transaction_coordinator_transactions{state}`` — transactional ids this broker
  coordinates, per state (Kafka's state names; every state is exported, 0 included);
* ``loglake_transaction_coordinator_timed_out_aborts_total`` — Ongoing transactions this
  coordinator aborted because they outlived ``transaction.timeout.ms``;
* ``loglake_transaction_markers_written_total{result}`` — transaction markers (``commit`` /
  ``abort``) the coordinator's marker sender had acknowledged by partition leaders and group
  coordinators;
* ``loglake_transaction_markers_pending`` — markers of in-flight completions not yet
  acknowledged.

Kafka's ``LogAppendRetryQueueSize`` has no counterpart: a completion whose ZooKeeper write fails
is not queued for a retry here, the next coordinator of the state partition completes it.

Recording (:class:`LoadTimes`, :class:`MarkerCounts`) and collection run on the broker's event
loop thread only; no locks.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

LOAD_WINDOW_S = 60.0
"""Load times kept for the avg/max (Kafka: 2 samples of 30 s)."""
MAX_LOADS_KEPT = 1000
TRANSACTION_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                      "CompleteAbort", "Dead", "PrepareEpochFence")
"""Kafka's TransactionState names (every one is exported)."""
KAFKA_COORDINATOR = "kafka_server_transactioncoordinatormetrics_"
KAFKA_MARKER_CHANNEL = "kafka_coordinator_transaction_transactionmarkerchannelmanager_"


class LoadTimes:
    """The durations of state-partition loads, kept for ``LOAD_WINDOW_S``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._loads: deque[tuple[float, float]] = deque(maxlen=MAX_LOADS_KEPT)

    def record(self, milliseconds: float) -> None:
        self._loads.append((self._clock(), milliseconds))

    def window(self) -> list[float]:
        """The durations (ms) recorded within the window, oldest first."""
        since = self._clock() - LOAD_WINDOW_S
        while self._loads and self._loads[0][0] < since:
            self._loads.popleft()
        return [ms for _, ms in self._loads]

    def avg_max(self) -> tuple[float, float]:
        """(avg, max) over the window; NaN for both without a load."""
        loads = self.window()
        if not loads:
            return math.nan, math.nan
        return sum(loads) / len(loads), max(loads)


class MarkerCounts:
    """What the marker sender reports: markers acknowledged, per result, and the pending /
    unknown-destination markers of each in-flight completion (by a token the sender picks)."""

    def __init__(self) -> None:
        self.written = {"commit": 0, "abort": 0}
        self._in_flight: dict[int, tuple[int, int]] = {}

    def round(self, token: int, pending: int, unknown_destination: int) -> None:
        """A completion's round: ``pending`` markers not written yet, of which
        ``unknown_destination`` have no live leader/coordinator to go to."""
        self._in_flight[token] = (pending, unknown_destination)

    def acknowledged(self, commit: bool, count: int) -> None:
        self.written["commit" if commit else "abort"] += count

    def done(self, token: int) -> None:
        self._in_flight.pop(token, None)

    @property
    def pending(self) -> int:
        return sum(p for p, _ in self._in_flight.values())

    @property
    def unknown_destination(self) -> int:
        return sum(u for _, u in self._in_flight.values())


class CoordinatorState(Protocol):
    """What the collector reads of the transaction coordinator."""

    load_times: LoadTimes
    timed_out_aborts: int

    def state_counts(self) -> Mapping[str, int]: ...


class TransactionCollector:
    """Collects the families of the module from the coordinator and its marker counts."""

    def __init__(self, coordinator: CoordinatorState, markers: MarkerCounts) -> None:
        self._coordinator = coordinator
        self._markers = markers

    def collect(self) -> Iterator[Metric]:
        avg, top = self._coordinator.load_times.avg_max()
        yield _gauge(KAFKA_COORDINATOR + "partition_load_time_max",
                     "Longest transaction state partition load in the last 60 s (ms).", top)
        yield _gauge(KAFKA_COORDINATOR + "partition_load_time_avg",
                     "Average transaction state partition load in the last 60 s (ms).", avg)
        yield _gauge(KAFKA_MARKER_CHANNEL + "unknowndestinationqueuesize",
                     "Transaction markers waiting for a live destination broker.",
                     self._markers.unknown_destination)
        counts = self._coordinator.state_counts()
        states = GaugeMetricFamily("loglake_transaction_coordinator_transactions",
                                   "Transactional ids this broker coordinates, per state.",
                                   labels=["state"])
        for state in _states(counts):
            states.add_metric([state], counts.get(state, 0))
        yield states
        aborts = CounterMetricFamily(
            "loglake_transaction_coordinator_timed_out_aborts",
            "Ongoing transactions aborted because they outlived transaction.timeout.ms.")
        aborts.add_metric([], self._coordinator.timed_out_aborts)
        yield aborts
        written = CounterMetricFamily(
            "loglake_transaction_markers_written",
            "Transaction markers acknowledged by their partition leaders or group "
            "coordinators.", labels=["result"])
        for result, count in sorted(self._markers.written.items()):
            written.add_metric([result], count)
        yield written
        yield _gauge("loglake_transaction_markers_pending",
                     "Markers of in-flight transaction completions not yet acknowledged.",
                     self._markers.pending)


def _states(counts: Mapping[str, int]) -> Iterable[str]:
    return list(TRANSACTION_STATES) + sorted(set(counts) - set(TRANSACTION_STATES))


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation)
    family.add_metric([], value)
    return family
