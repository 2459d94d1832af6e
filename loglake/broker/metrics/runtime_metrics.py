"""The broker process's own health: event-loop lag and the ZooKeeper session.

* **Event-loop lag** (``loglake_event_loop_lag_seconds``, a gauge of the last measurement, and
  ``loglake_event_loop_delay_seconds``): :meth:`EventLoopLag.run` sleeps
  ``interval_s`` on the loop and measures how much later than asked it woke up; a handler
  that holds the loop for 300 ms shows as ~0.3 s.
* **ZooKeeper session state** (``loglake_zookeeper_session_state{state}``: 1 for the current
  state, 0 for the others; states ``connected``, ``suspended``, ``lost``, ``not_started``),
  set from ``ZkSession``'s session events, and **request latency**
  (``loglake_zookeeper_request_seconds``, a histogram of ``ZkSession.call``: executor wait
  plus the ZooKeeper round trips of the call).

Event loop only (the ZooKeeper session events reach us through ``ZkSession.add_listener``,
which calls back on the loop), no locks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from loglake.broker.metrics.loop_histogram import SECONDS_BUCKETS, LabelledHistogram

LOOP_LAG_INTERVAL_S = 0.25
"""How often the loop-lag timer measures."""
ZK_STATES = ("connected", "suspended", "lost", "not_started")


class EventLoopLag:
    """The loop-lag timer and its gauge/histogram (a prometheus_client collector)."""

    def __init__(self, interval_s: float = LOOP_LAG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.last_s = 0.0
        self._histogram = LabelledHistogram(
            "loglake_event_loop_delay_seconds",
            "How late the event loop ran each timer (s).", [], SECONDS_BUCKETS)
        self._cells = self._histogram.cell(())

    async def run(self) -> None:
        """Measure until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.interval_s
            await asyncio.sleep(self.interval_s)
            self.observe(max(loop.time() - due, 0.0))

    def observe(self, lag_s: float) -> None:
        self.last_s = lag_s
        self._cells.observe(lag_s)

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("loglake_event_loop_lag_seconds",
                                "How late the event loop ran its last timer (s).",
                                value=self.last_s)
        yield from self._histogram.families()


class ZooKeeperMetrics:
    """Session state and request latency (a prometheus_client collector)."""

    def __init__(self) -> None:
        self.state = "not_started"
        self._latency = LabelledHistogram(
            "loglake_zookeeper_request_seconds",
            "ZooKeeper calls of the broker: executor wait plus round trips (s).", [],
            SECONDS_BUCKETS)
        self._cells = self._latency.cell(())

    def set_state(self, state: str) -> None:
        """``state``: one of ``ZK_STATES`` (kazoo's session states, lower case)."""
        self.state = state

    def on_session_event(self, event: object) -> None:
        """A ``ZkSession`` listener: ``SessionEvent`` -> the state exported."""
        value = getattr(event, "value", str(event))
        self.state = value if value in ("suspended", "lost") else "connected"

    def observe_call(self, seconds: float) -> None:
        self._cells.observe(seconds)

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("loglake_zookeeper_session_state",
                                   "1 for the broker's current ZooKeeper session state.",
                                   labels=["state"])
        for state in ZK_STATES:
            family.add_metric([state], 1.0 if state == self.state else 0.0)
        yield family
        yield from self._latency.families()
