"""Client quota metrics, named as Strimzi's JMX-exporter quota rules name Kafka's per-client
quota sensors (``kafka.server<type=(.+), user=(.+), client-id=(.+)><>([a-z-]+)`` ->
``kafka_server_quota_$4`` with labels ``resource``, ``user``, ``clientId``; attribute dashes
become underscores):

* ``kafka_server_quota_byte_rate{resource="Produce"|"Fetch"}`` — bytes per second of the
  rate, as the quota measures it (Kafka's ``byte-rate``);
* ``kafka_server_quota_request_time{resource="Request"}`` — request-handling time in percent
  of one thread (Kafka's ``request-time``);
* ``kafka_server_quota_throttle_time{resource="Produce"|"Fetch"|"Request"|
  "ControllerMutation"}`` — the mean throttle time (ms) of the throttled requests in the last
  quota windows, NaN when none was throttled (Kafka's ``throttle-time`` Avg);
* ``kafka_server_quota_mutation_rate{resource="ControllerMutation"}`` — partitions created
  or deleted per second (KIP-599's ``mutation-rate``);
* ``kafka_server_quota_tokens{resource="ControllerMutation"}`` — tokens left in the bucket
  (KIP-599's ``tokens``; negative while throttled).

loglake's own: ``loglake_quota_controller_mutation_refused_topics_total`` — topics answered
THROTTLING_QUOTA_EXCEEDED.

Labels ``user``/``clientId`` are Kafka's quota metric tags: the one part a rate is not shared
by is empty (a user-level quota: ``clientId=""``). A series exists for each rate the broker
keeps (rates appear once a quota of that kind exists and a client records into it, and go with
Kafka's one-hour idle expiry). Collected on the broker's event loop at scrape time; nothing is
recorded for metrics alone.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from loglake.broker.quotas.manager import ClientQuotaManager, ClientQuotas

LABELS = ("resource", "user", "clientId")
PREFIX = "kafka_server_quota_"


class QuotaCollector:
    """Scrape-time view of a broker's :class:`ClientQuotas` (see the module docstring)."""

    def __init__(self, quotas: ClientQuotas) -> None:
        self.quotas = quotas

    def collect(self) -> Iterator[Metric]:
        quotas = self.quotas
        now = quotas.clock_ms()
        byte_rate = GaugeMetricFamily(PREFIX + "byte_rate", "Bytes per second of a client "
                                      "quota rate (Kafka's byte-rate).", labels=LABELS)
        request_time = GaugeMetricFamily(PREFIX + "request_time", "Request-handling time in "
                                         "percent of one thread (Kafka's request-time).",
                                         labels=LABELS)
        throttle = GaugeMetricFamily(PREFIX + "throttle_time", "Mean throttle time in ms of "
                                     "the throttled requests in the quota windows (Kafka's "
                                     "throttle-time).", labels=LABELS)
        mutation_rate = GaugeMetricFamily(PREFIX + "mutation_rate", "Partitions created or "
                                          "deleted per second (KIP-599 mutation-rate).",
                                          labels=LABELS)
        tokens = GaugeMetricFamily(PREFIX + "tokens", "Tokens left in the controller mutation "
                                   "bucket (KIP-599; negative while throttled).", labels=LABELS)
        for resource, manager, family in (("Produce", quotas.produce, byte_rate),
                                          ("Fetch", quotas.fetch, byte_rate),
                                          ("Request", quotas.request, request_time)):
            _manager_samples(resource, manager, family, throttle, now)
        mutation = quotas.controller_mutation
        for tags, rate in mutation.mutation_rates.items():
            mutation_rate.add_metric(("ControllerMutation", *tags), rate.measure(now))
        for tags in mutation.buckets:
            left = mutation.tokens(tags)
            if left is not None:
                tokens.add_metric(("ControllerMutation", *tags), left)
        for tags, avg in mutation.throttle_times.items():
            throttle.add_metric(("ControllerMutation", *tags), avg.measure(now))
        refused = CounterMetricFamily(
            "loglake_quota_controller_mutation_refused_topics",
            "Topics answered THROTTLING_QUOTA_EXCEEDED (KIP-599 strict quotas).")
        refused.add_metric((), mutation.throttled)
        yield from (byte_rate, request_time, throttle, mutation_rate, tokens, refused)


def _manager_samples(resource: str, manager: ClientQuotaManager, family: GaugeMetricFamily,
                     throttle: GaugeMetricFamily, now_ms: int) -> None:
    for tags, rate in manager.rates().items():
        family.add_metric((resource, *tags), rate.measure(now_ms))
    for tags, avg in manager.throttle_times.items():
        throttle.add_metric((resource, *tags), avg.measure(now_ms))
