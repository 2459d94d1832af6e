"""Kafka's ``BrokerTopicMetrics``: records and bytes in and out, produce and fetch requests and
their failures, per topic and for all topics.

Names are what Strimzi's JMX-exporter rules make of Kafka's MBeans
(``kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec[,topic=T]`` ->
``kafka_server_brokertopicmetrics_messagesin_total{topic="T"}``; the all-topics MBean has no
``topic`` label, so the all-topics sample of each family is the one without labels).

What is counted where (as Kafka's ``ReplicaManager``):

* ``messagesin`` / ``bytesin``: records and batch bytes appended by a leader for a produce
  (not replication, not transaction markers), counted at the append (an acks=all produce that
  then times out was still appended);
* ``totalproducerequests`` / ``failedproducerequests``: one per partition of a produce request,
  failed when the append was refused (any error);
* ``bytesout``: record bytes a fetch response carries (consumers and followers, as Kafka);
* ``totalfetchrequests`` / ``failedfetchrequests``: one per partition of a fetch, failed on an
  error answer.

Cost: a dict lookup and a few list additions per partition of a request; no locks. Every write
and the scrape (``collect``) run on the broker's event loop thread. Per-topic counts are
dropped when the topic goes (:meth:`forget_topic`); the all-topics counts never go down.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.samples import Sample

PREFIX = "kafka_server_brokertopicmetrics_"
MESSAGES_IN, BYTES_IN, BYTES_OUT, PRODUCE, FETCH, FAILED_PRODUCE, FAILED_FETCH = range(7)
FAMILIES: tuple[tuple[int, str, str], ...] = (
    (MESSAGES_IN, "messagesin", "Records appended by produce requests."),
    (BYTES_IN, "bytesin", "Bytes of record batches appended by produce requests."),
    (BYTES_OUT, "bytesout", "Record bytes sent in fetch responses."),
    (PRODUCE, "totalproducerequests", "Partitions of produce requests."),
    (FETCH, "totalfetchrequests", "Partitions of fetch requests."),
    (FAILED_PRODUCE, "failedproducerequests", "Partitions of produce requests refused."),
    (FAILED_FETCH, "failedfetchrequests", "Partitions of fetch requests answered an error."),
)


class BrokerTopicMetrics:
    """Per-topic and all-topics counters (see the module docstring); a prometheus_client
    collector (``collect``)."""

    def __init__(self) -> None:
        self._topics: dict[str, list[int]] = {}
        self._all = [0] * len(FAMILIES)

    def _counts(self, topic: str) -> list[int]:
        counts = self._topics.get(topic)
        if counts is None:
            counts = self._topics[topic] = [0] * len(FAMILIES)
        return counts

    def appended(self, topic: str, records: int, size: int) -> None:
        """A leader appended ``records`` records in ``size`` bytes for a produce."""
        counts = self._counts(topic)
        counts[MESSAGES_IN] += records
        counts[BYTES_IN] += size
        total = self._all
        total[MESSAGES_IN] += records
        total[BYTES_IN] += size

    def produce_answered(self, topic: str, failed: bool) -> None:
        """One partition of a produce request was answered (``failed``: with an error)."""
        counts = self._counts(topic)
        counts[PRODUCE] += 1
        self._all[PRODUCE] += 1
        if failed:
            counts[FAILED_PRODUCE] += 1
            self._all[FAILED_PRODUCE] += 1

    def fetch_answered(self, topic: str, size: int, failed: bool) -> None:
        """One partition of a fetch was answered with ``size`` record bytes (``failed``: an
        error)."""
        counts = self._counts(topic)
        counts[FETCH] += 1
        counts[BYTES_OUT] += size
        total = self._all
        total[FETCH] += 1
        total[BYTES_OUT] += size
        if failed:
            counts[FAILED_FETCH] += 1
            total[FAILED_FETCH] += 1

    def forget_topic(self, topic: str) -> None:
        """The topic was deleted: drop its per-topic samples (Kafka removes its MBeans)."""
        self._topics.pop(topic, None)

    def count(self, what: int, topic: str | None = None) -> int:
        """One counter's value (``topic`` None: all topics); for tests and benchmarks."""
        if topic is None:
            return self._all[what]
        counts = self._topics.get(topic)
        return counts[what] if counts is not None else 0

    def collect(self) -> Iterator[Metric]:
        topics = list(self._topics.items())
        for index, name, documentation in FAMILIES:
            family = CounterMetricFamily(PREFIX + name, documentation, labels=None)
            family.add_metric([], self._all[index])
            sample_name = PREFIX + name + "_total"
            family.samples.extend(Sample(sample_name, {"topic": topic}, counts[index])
                                  for topic, counts in topics)
            yield family
