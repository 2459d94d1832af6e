"""One broker's metrics: the Prometheus registry and the recorders the hot paths write to.

:class:`BrokerMetrics` is built once per broker process, also when ``metrics.listener`` is
unset (nothing is served then, but recording code needs no ``if``). What it holds:

=======================  ===================================================================
``registry``             the ``CollectorRegistry`` the ``/metrics`` endpoint (http.py) serves
``topics``               :class:`BrokerTopicMetrics`: messages/bytes in and out, produce and
                         fetch requests and failures per topic (replica_manager.py records)
``requests``             :class:`RequestMetrics`: per-API counts, errors, phase latencies
                         (server.py records)
``event_loop``           :class:`EventLoopLag`: the loop-lag timer (the broker runs its task)
``zookeeper``            :class:`ZooKeeperMetrics`: session state, call latency (zk_session)
``connections``          :class:`ConnectionMetrics`: connections and authentications per
                         listener (server.py and the acceptors record)
process collector        prometheus_client's ``ProcessCollector``: CPU seconds, RSS, open
                         file descriptors, start time (``process_*``)
=======================  ===================================================================

Other parts add custom collectors with :meth:`BrokerMetrics.register_collector`; their
``collect()`` runs **on the broker's event loop thread** during a scrape (the endpoint is
served there), so it may read broker state directly but must not block or await. A collector
that raises is logged and skipped for that scrape; the other families are still served.

Parts receive the one recorder they write to (``metrics.topics``, ...), never the Broker or
the whole ``BrokerMetrics`` unless they register collectors. Every metric is exported without a
broker-id label (Prometheus adds ``instance``).

Thread-safety: every recorder and every collector runs on the event loop thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.process_collector import ProcessCollector

from loglake.broker.metrics.connection_metrics import ConnectionMetrics
from loglake.broker.metrics.request_metrics import RequestMetrics
from loglake.broker.metrics.runtime_metrics import EventLoopLag, ZooKeeperMetrics
from loglake.broker.metrics.topic_metrics import BrokerTopicMetrics

log = logging.getLogger(__name__)


class Collector(Protocol):
    """What prometheus_client calls at scrape time."""

    def collect(self) -> Iterable[Metric]: ...


class _Guarded:
    """A collector whose failure costs its own families only, not the scrape."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def collect(self) -> Iterator[Metric]:
        try:
            families = list(self.collector.collect())
        except Exception:
            log.exception("metrics collector %s failed; its metrics are left out of this "
                          "scrape", type(self.collector).__name__)
            return iter(())
        return iter(families)


class BrokerMetrics:
    """The registry and recorders of one broker process (see the module docstring)."""

    def __init__(self, *, process_metrics: bool = True) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.topics = BrokerTopicMetrics()
        self.requests = RequestMetrics()
        self.event_loop = EventLoopLag()
        self.zookeeper = ZooKeeperMetrics()
        self.connections = ConnectionMetrics()
        for collector in (self.topics, self.requests, self.event_loop, self.zookeeper,
                          self.connections):
            self.register_collector(collector)
        if process_metrics:
            ProcessCollector(registry=self.registry)

    def register_collector(self, collector: Collector) -> None:
        """Add ``collector`` to the scrape; its ``collect()`` runs on the broker's event loop
        and must not block (see the module docstring)."""
        self.registry.register(_Guarded(collector))
