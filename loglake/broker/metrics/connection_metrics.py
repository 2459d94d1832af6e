"""Connection and authentication metrics per listener: Kafka's ``socket-server-metrics``.

Kafka's MBeans ``kafka.server:type=socket-server-metrics,listener=<l>,networkProcessor=<n>``
become, under Strimzi's JMX-exporter rules (``kafka_server_$type_$attribute``, lower case,
``-`` -> ``_``; attributes ending in ``-total`` are counters):

==========================================================  ==================================
``kafka_server_socket_server_metrics_connection_count``     connections open now (gauge)
``..._connection_creation_total``                           connections accepted and served
``..._connection_close_total``                              connections closed
``..._successful_authentication_total``                     first authentications that
                                                            succeeded (PLAINTEXT: every
                                                            connection; SSL: a completed
                                                            handshake; SASL: a login)
``..._failed_authentication_total``                         failed ones (TLS handshake, no
                                                            principal rule, SASL refusal)
``..._successful_reauthentication_total``                   KIP-368 re-authentications
``..._failed_reauthentication_total``                       refused re-authentications
==========================================================  ==================================

All with labels ``listener`` and ``networkProcessor`` (always ``"0"``: one event loop serves
every connection), as Strimzi's dashboards group them. loglake's own (Kafka has them as
``kafka.network:type=Acceptor`` meters and per-listener throttle sensors, not under one
Strimzi rule):

* ``loglake_connections_rejected_total{listener,reason}``: connections closed by a connection
  limit before being served, ``reason`` ``max_connections_per_ip`` or ``ip_connection_rate``;
* ``loglake_acceptor_blocked_seconds_total{listener}``: time a listener's acceptor waited for
  a slot (``max.connections``) or a creation-rate throttle (Kafka's AcceptorBlockedPercent).

Event loop only: the recorders and ``collect()`` run on the broker's loop thread.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

PREFIX = "kafka_server_socket_server_metrics_"
NETWORK_PROCESSOR = "0"
LABELS = ("listener", "networkProcessor")

COUNTERS = {
    "connection_creation": "Connections accepted and served, per listener.",
    "connection_close": "Connections closed, per listener.",
    "successful_authentication": "Connections whose first authentication succeeded.",
    "failed_authentication": "Connections whose authentication failed.",
    "successful_reauthentication": "Successful re-authentications (KIP-368).",
    "failed_reauthentication": "Failed re-authentications (KIP-368).",
}


class ConnectionMetrics:
    """Recorders and the scrape-time collector (see the module docstring)."""

    def __init__(self) -> None:
        self.counts: dict[str, Counter[str]] = {name: Counter() for name in COUNTERS}
        self.rejected: Counter[tuple[str, str]] = Counter()
        self.blocked_seconds: dict[str, float] = {}

    # ---- recorders
    def created(self, listener: str) -> None:
        self.counts["connection_creation"][listener] += 1

    def closed(self, listener: str) -> None:
        self.counts["connection_close"][listener] += 1

    def authentication(self, listener: str, *, success: bool, reauthentication: bool = False
                       ) -> None:
        name = ("successful_" if success else "failed_") + (
            "reauthentication" if reauthentication else "authentication")
        self.counts[name][listener] += 1

    def reject(self, listener: str, reason: str) -> None:
        self.rejected[(listener, reason)] += 1

    def acceptor_blocked(self, listener: str, seconds: float) -> None:
        if seconds > 0:
            self.blocked_seconds[listener] = self.blocked_seconds.get(listener, 0.0) + seconds

    def open_connections(self, listener: str) -> int:
        return (self.counts["connection_creation"][listener]
                - self.counts["connection_close"][listener])

    # ---- collector
    def collect(self) -> Iterator[Metric]:
        listeners = sorted(set(self.counts["connection_creation"]) | set(
            key for counter in self.counts.values() for key in counter))
        gauge = GaugeMetricFamily(PREFIX + "connection_count",
                                  "Connections open now, per listener.", labels=LABELS)
        for listener in listeners:
            gauge.add_metric([listener, NETWORK_PROCESSOR], self.open_connections(listener))
        yield gauge
        for name, documentation in COUNTERS.items():
            family = CounterMetricFamily(PREFIX + name, documentation, labels=LABELS)
            for listener in listeners:
                family.add_metric([listener, NETWORK_PROCESSOR], self.counts[name][listener])
            yield family
        rejected = CounterMetricFamily(
            "loglake_connections_rejected", "Connections closed by a connection limit before "
            "being served.", labels=("listener", "reason"))
        for (listener, reason), value in sorted(self.rejected.items()):
            rejected.add_metric([listener, reason], value)
        yield rejected
        blocked = CounterMetricFamily(
            "loglake_acceptor_blocked_seconds", "Seconds a listener's acceptor waited for a "
            "connection slot or a creation-rate throttle.", labels=("listener",))
        for listener, seconds in sorted(self.blocked_seconds.items()):
            blocked.add_metric([listener], seconds)
        yield blocked
