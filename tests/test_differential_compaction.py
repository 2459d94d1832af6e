"""Differential compaction: loglake's compaction job against Apache Kafka's log cleaner on the
same produced records, compared as a consumer reads them from offset 0.

The topic (1 partition, ``cleanup.policy=compact``, small segments, a low dirty ratio) gets
keyed updates over 100 keys, tombstones -- some the last record of their key, some followed by
a newer value -- and then fillers with unique keys so the keyed part lies in sealed segments:
Kafka's cleaner never cleans the active segment, loglake's job compacts tiered (sealed)
segments only. Kafka cleans on its own (``log.cleaner.backoff.ms``, 15 s); on loglake the test
waits for the keyed part to be tiered and runs the compaction job (Spark, the session's
SparkSession). Both must converge, within bounds, to the same records: the last value per key
with offsets unchanged, a tombstone kept while ``delete.retention.ms`` (a day) has not passed,
a superseded tombstone gone, every filler kept.

Uses the session's one-broker loglake cluster and the session's Kafka peer (``kafka_peer``,
skipped, saying why, only when the ``kafka`` jar set is not fetched).
"""

from __future__ import annotations

import time

from loglake.compaction.common import Cluster
from loglake.compaction.compact import run_compaction
from tests.compaction_util import Record, Spec, produce_specs, quiet
from tests.tiering_util import wait_tiered

COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "40000",
             "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"}
KEYS = 100
UPDATES = 1500
FILLERS = 1500
CONVERGE_S = 180.0
"""Bound for a cluster's reads to show a compacted keyed part (Kafka's cleaner wakes every
15 s; loglake's replicas drop superseded local copies within seconds of the job)."""


def _specs() -> list[Spec]:
    updates = [Spec(0, b"key-%d" % (i % KEYS), b"v-%d-" % i + b"x" * 40) for i in range(UPDATES)]
    last_tombstones = [Spec(0, b"key-%d" % k, None) for k in range(10)]
    superseded = [Spec(0, b"key-%d" % k, None) for k in range(10, 20)]
    revived = [Spec(0, b"key-%d" % k, b"revived-%d" % k) for k in range(10, 20)]
    fillers = [Spec(0, b"filler-%d" % i, b"f" * 60) for i in range(FILLERS)]
    return updates + last_tombstones + superseded + revived + fillers


def _model(acked: list[Record]) -> list[Record]:
    """Kafka's rule over the whole partition (fillers are unique, so the uncleaned tail
    changes nothing): the last record of each key, tombstones included."""
    last = {key: offset for _, offset, key, _ in sorted(acked, key=lambda r: r[1])}
    return sorted((r for r in acked if last[r[2]] == r[1]), key=lambda r: r[1])


def _read(bootstrap: str, topic: str, end: int) -> list[Record]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"diff-{time.time()}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[Record] = []
    deadline = time.monotonic() + 60
    try:
        while (not got or got[-1][1] < end - 1) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is None:
                    got.append((0, msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    assert got and got[-1][1] == end - 1, f"{topic}: read stopped at {got[-1:] or 'nothing'}"
    return got


def _converged(bootstrap: str, topic: str, end: int, model: list[Record]) -> list[Record]:
    """What a consumer reads once it equals ``model``, or the last read after CONVERGE_S."""
    deadline = time.monotonic() + CONVERGE_S
    while True:
        seen = _read(bootstrap, topic, end)
        if seen == model or time.monotonic() >= deadline:
            return seen
        time.sleep(2)


def test_compaction_job_matches_kafkas_log_cleaner(cluster, kafka_peer, topic_name, spark):
    specs = _specs()
    kafka_peer.create_topic(topic_name, configs=COMPACTED)
    cluster.create_topic(topic_name, configs=COMPACTED)
    kafka_acked = produce_specs(kafka_peer.bootstrap_servers, topic_name, specs)
    loglake_acked = produce_specs(cluster.bootstrap_servers, topic_name, specs)
    assert [r[1] for r in loglake_acked] == [r[1] for r in kafka_acked] == list(range(len(specs)))
    model = _model(loglake_acked)
    keyed_end = UPDATES + 30
    assert len(model) == KEYS + FILLERS

    wait_tiered(cluster.storage_url, topic_name, (0,), at_least=keyed_end, timeout=120)
    with Cluster(cluster.zookeeper_connect) as jobs:
        results = run_compaction(jobs, spark=lambda: spark, topic=topic_name, progress=quiet())
    assert results and all(r.committed for r in results), results

    end = len(specs)
    loglake = _converged(cluster.bootstrap_servers, topic_name, end, model)
    kafka = _converged(kafka_peer.bootstrap_servers, topic_name, end, model)
    different = sorted(set(loglake) ^ set(kafka), key=lambda r: r[1])
    assert loglake == kafka, (f"loglake and Kafka differ in {len(different)} records, first: "
                              f"{different[:5]}")
    assert kafka == model
    tombstones = [r for r in kafka if r[3] is None]
    assert [r[2] for r in tombstones] == [b"key-%d" % k for k in range(10)]
