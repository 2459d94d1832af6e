"""``writeStream.format("loglake").option("deliveryGuarantee", "exactly-once")`` across a replayed
micro-batch (streaming/exactly_once.py).

A streaming query copies a topic, stops, and its checkpoint loses the commit-log entry of the
last batch: exactly what a driver crash after the tasks wrote but before Spark logged the batch
leaves behind. The restarted query replays that batch, while more input has arrived. With
exactly-once the output topic (read_committed) holds each input row once; at-least-once (the
default) writes the replayed batch twice, which shows the check would fail without the feature.
Batch ``write`` with exactly-once writes every row once as well.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from loglake.client.consumer import Consumer
from loglake.dev.harness import DevCluster
from tests.admin_util import create_topic
from tests.spark_session import produce_numbered


def _values(bootstrap: str, topic: str, expected: int) -> Counter[int]:
    with Consumer(bootstrap, isolation_level="read_committed") as consumer:
        consumer.assign(topic, start="earliest")
        return Counter(int(r.value or b"") for r in consumer.consume(expected + 1, timeout=4.0))


def _copy(spark: SparkSession, cluster: DevCluster, source: str, target: str,
          checkpoint: Path, delivery: str) -> None:
    query = (spark.readStream.format("loglake").option("zookeeper", cluster.zookeeper_connect)
             .option("subscribe", source).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "100").load()
             .select("key", "value")
             .writeStream.format("loglake").option("zookeeper", cluster.zookeeper_connect)
             .option("topic", target).option("deliveryGuarantee", delivery)
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180)
    assert query.exception() is None


def _forget_last_commit(checkpoint: Path) -> int:
    """Delete the newest commit-log entry (and its checksum): Spark replays that batch."""
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_replayed_batch_is_written_once(spark: SparkSession, cluster: DevCluster,
                                        topic_name: str, tmp_path: Path, delivery: str) -> None:
    bootstrap = cluster.bootstrap_servers
    source, target = f"eos-in.{topic_name}", f"eos-out.{topic_name}"
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, target, 2)
    checkpoint = tmp_path / "checkpoint"
    produce_numbered(bootstrap, source, 0, 300, partitions=2)
    _copy(spark, cluster, source, target, checkpoint, delivery)
    assert _values(bootstrap, target, 300) == Counter(range(300))

    replayed = _forget_last_commit(checkpoint)
    assert replayed >= 1  # several micro-batches ran (100 offsets per trigger)
    produce_numbered(bootstrap, source, 300, 100, partitions=2)  # input keeps arriving
    _copy(spark, cluster, source, target, checkpoint, delivery)

    counts = _values(bootstrap, target, 800)
    assert set(counts) == set(range(400))
    twice = sorted(v for v, n in counts.items() if n > 1)
    if delivery == "exactly-once":
        assert twice == [], f"rows written more than once: {twice[:10]}"
    else:
        assert twice, "at-least-once should have rewritten the replayed batch"
        assert all(n == 2 for n in counts.values() if n > 1)


def test_batch_write_exactly_once(spark: SparkSession, cluster: DevCluster,
                                  topic_name: str) -> None:
    bootstrap = cluster.bootstrap_servers
    target = f"eos-batch.{topic_name}"
    create_topic(bootstrap, target, 3)
    frame = spark.range(500).repartition(4).select(
        F.col("id").cast("string").alias("value"), F.lit(target).alias("topic"))
    (frame.write.format("loglake").option("kafka.bootstrap.servers", bootstrap)
     .option("deliveryGuarantee", "exactly-once").mode("append").save())
    assert _values(bootstrap, target, 500) == Counter(range(500))
