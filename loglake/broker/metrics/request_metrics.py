"""Kafka's ``RequestMetrics`` per API: request and error counts and latency histograms.

Names are Strimzi's for Kafka's MBeans (``kafka.network:type=RequestMetrics,
name=RequestsPerSec,request=Produce,version=9`` ->
``kafka_network_requestmetrics_requests_total{request="Produce",version="9"}``;
``ErrorsPerSec,request=R,error=E`` -> ``kafka_network_requestmetrics_errors_total``); the
latency metrics are Prometheus histograms (``_bucket``/``_sum``/``_count``) in milliseconds,
as their names say, label ``request``.

The phases of one request, measured by broker/server.py (loglake has no request queue or
handler threads: the connection's task reads a frame and runs its handler on the event loop):

==========================  =================================================================
``requestqueuetimems``      from the frame's last byte read to the handler's first step: header
                            and body decoding, the SASL gate, and the wait for the event loop
                            (Kafka: waiting in the request channel for a handler thread)
``localtimems``             the handler's own time on the event loop: the sum of its steps
                            between awaits (Kafka: the handler thread's time)
``remotetimems``            the handler's waits: acks=all replication, a fetch's long poll,
                            ZooKeeper calls, worker threads (Kafka: time in purgatory)
``responsesendtimems``      from the handler's end to the response written and drained to the
                            socket: encoding, write, TCP back-pressure
``totaltimems``             the sum: frame read to response sent
==========================  =================================================================

Errors: each response counts its top-level error code (or, for Produce and Fetch, each
partition's) under ``error`` by Kafka's name in upper case (``NONE`` included, as Kafka); a
handler that failed counts ``UNKNOWN_SERVER_ERROR``. A request closed without an answer (bad
frame) counts no request.

Event loop only, no locks (loop_histogram.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kio.schema.errors import ErrorCode
from prometheus_client.core import CounterMetricFamily, Metric

from loglake.broker.metrics.loop_histogram import (
    LATENCY_MS_BUCKETS,
    HistogramCells,
    LabelledHistogram,
)

PREFIX = "kafka_network_requestmetrics_"
PHASES: tuple[tuple[str, str], ...] = (
    ("totaltimems", "Time from the request's last byte read to its response sent (ms)."),
    ("requestqueuetimems", "Time from the frame read to the handler's start: decoding, "
                           "SASL gate, waiting for the event loop (ms)."),
    ("localtimems", "Handler time on the event loop, its steps between awaits (ms)."),
    ("remotetimems", "Handler time waiting: replication, long polls, ZooKeeper (ms)."),
    ("responsesendtimems", "Time to encode, write and drain the response (ms)."),
)
PRODUCE_KEY = 0
FETCH_KEY = 1


class _ApiCells:
    """The five phase histograms of one API (resolved once, then observed without lookups)."""

    __slots__ = ("local", "queue", "remote", "send", "total")

    def __init__(self, histograms: list[LabelledHistogram], request: str) -> None:
        key = (request,)
        self.total, self.queue, self.local, self.remote, self.send = (
            histogram.cell(key) for histogram in histograms)


class RequestMetrics:
    """Per-API request counts, error counts and phase latencies (see the module)."""

    def __init__(self) -> None:
        self._histograms = [LabelledHistogram(PREFIX + name, doc, ["request"],
                                              LATENCY_MS_BUCKETS) for name, doc in PHASES]
        self._cells: dict[str, _ApiCells] = {}
        self._requests: dict[tuple[str, int], int] = {}
        self._errors: dict[tuple[str, str], int] = {}

    def record(self, request: str, version: int, errors: list[str],
               queue_s: float, local_s: float, remote_s: float, send_s: float) -> None:
        """One answered request of API ``request`` (Kafka's name, e.g. ``Produce``)."""
        key = (request, version)
        self._requests[key] = self._requests.get(key, 0) + 1
        for error in errors:
            error_key = (request, error)
            self._errors[error_key] = self._errors.get(error_key, 0) + 1
        cells = self._cells.get(request)
        if cells is None:
            cells = self._cells[request] = _ApiCells(self._histograms, request)
        _observe_ms(cells.queue, queue_s)
        _observe_ms(cells.local, local_s)
        _observe_ms(cells.remote, remote_s)
        _observe_ms(cells.send, send_s)
        _observe_ms(cells.total, queue_s + local_s + remote_s + send_s)

    def requests(self, request: str) -> int:
        """Requests of one API over all versions (tests, benchmarks)."""
        return sum(n for (name, _), n in self._requests.items() if name == request)

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(PREFIX + "requests", "Requests answered, per API "
                                       "and version.", labels=["request", "version"])
        for (name, version), count in list(self._requests.items()):
            requests.add_metric([name, str(version)], count)
        yield requests
        errors = CounterMetricFamily(PREFIX + "errors", "Error codes answered, per API "
                                     "(NONE included, as Kafka).", labels=["request", "error"])
        for (name, error), count in list(self._errors.items()):
            errors.add_metric([name, error], count)
        yield errors
        for histogram in self._histograms:
            yield from histogram.families()


def _observe_ms(cells: HistogramCells, seconds: float) -> None:
    cells.observe(seconds * 1000.0 if seconds > 0 else 0.0)


def response_errors(api_key: int, body: Any) -> list[str]:
    """The error names a response carries (see the module docstring); [] when it has no
    error field."""
    if api_key == PRODUCE_KEY:
        return [_error_name(p.error_code) for topic in body.responses
                for p in topic.partition_responses]
    if api_key == FETCH_KEY:
        names = [_error_name(p.error_code) for topic in body.responses
                 for p in topic.partitions]
        top = getattr(body, "error_code", None)
        if top is not None and (top != 0 or not names):
            names.append(_error_name(top))
        return names
    top = getattr(body, "error_code", None)
    return [] if top is None else [_error_name(top)]


_NAMES: dict[int, str] = {}


def _error_name(code: Any) -> str:
    value = int(code)
    name = _NAMES.get(value)
    if name is None:
        try:
            name = ErrorCode(value).name.upper()
        except ValueError:
            name = f"UNKNOWN_{value}"
        _NAMES[value] = name
    return name
