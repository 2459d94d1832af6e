"""``df.write`` / ``writeStream`` ``.format("loglake")`` (streaming/sink.py).

Rows written by Spark are read back with the SDK consumer (a real Kafka client), so the test
checks what any consumer sees: partition, key, value, headers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from loglake.client.consumer import Consumer
from loglake.client.model import Record
from loglake.dev.harness import DevCluster
from tests.admin_util import create_topic
from tests.spark_session import produce_numbered


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[Record]:
    with Consumer(bootstrap) as consumer:
        consumer.assign(topic, start="earliest")
        records = list(consumer.consume(expected + 1, timeout=3.0))
    return sorted(records, key=lambda r: (r.partition, r.offset))


def test_batch_write_with_every_column(spark: SparkSession, cluster: DevCluster,
                                       topic_name: str) -> None:
    topic = f"sink.{topic_name}"
    create_topic(cluster.bootstrap_servers, topic, 3)
    frame = spark.range(300).select(
        F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
        F.col("id").cast("string").cast("binary").alias("value"),
        F.lit(topic).alias("topic"),
        (F.col("id") % 3).cast("int").alias("partition"),
        F.array(F.struct(F.lit("n").alias("key"),
                         F.col("id").cast("string").cast("binary").alias("value"))
                ).alias("headers"),
        F.lit("ignored").alias("extra"),
    )
    frame.write.format("loglake").option("zookeeper", cluster.zookeeper_connect).mode(
        "append").save()
    records = _consume_all(cluster.bootstrap_servers, topic, 300)
    assert len(records) == 300
    for record in records:
        assert record.value is not None
        number = int(record.value)
        assert record.partition == number % 3
        assert record.key == f"k{number}".encode()
        assert record.headers == [("n", str(number).encode())]
    assert sorted(int(r.value or b"") for r in records) == list(range(300))


def test_batch_write_topic_option_and_string_values(spark: SparkSession, cluster: DevCluster,
                                                    topic_name: str) -> None:
    topic = f"sink.{topic_name}"
    create_topic(cluster.bootstrap_servers, topic, 2)
    frame = spark.createDataFrame([("a", "1"), (None, "2"), ("c", None)], "key string, value "
                                  "string")
    (frame.withColumn("topic", F.lit("not-this-one")).write.format("loglake")
     .option("kafka.bootstrap.servers", cluster.bootstrap_servers).option("topic", topic)
     .mode("append").save())
    records = _consume_all(cluster.bootstrap_servers, topic, 3)
    assert sorted(((r.key, r.value) for r in records), key=repr) == sorted(
        [(b"a", b"1"), (None, b"2"), (b"c", None)], key=repr)


@pytest.mark.parametrize(("columns", "options", "mode", "message"), [
    ("key string", {"topic": "t"}, "append", "needs a 'value' column"),
    ("value int", {"topic": "t"}, "append", "column 'value' must be string or binary"),
    ("value string", {}, "append", "needs a 'topic' column or the 'topic' option"),
    ("value string, partition string", {"topic": "t"}, "append",
     "column 'partition' must be int"),
    ("value string", {"topic": "t"}, "overwrite", "save mode overwrite is not supported"),
    ("value string", {"topic": "no-such-topic"}, "append",
     "topic 'no-such-topic' does not exist"),
])
def test_bad_writes_say_what_is_wrong(spark: SparkSession, cluster: DevCluster, columns: str,
                                      options: dict[str, str], mode: str,
                                      message: str) -> None:
    frame = spark.createDataFrame([], columns)
    writer = frame.write.format("loglake").option("zookeeper", cluster.zookeeper_connect)
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception, match=message):
        writer.mode(mode).save()


def test_stream_copy_topic_to_topic(spark: SparkSession, cluster: DevCluster, topic_name: str,
                                    tmp_path: Path) -> None:
    """readStream(loglake) -> writeStream(loglake): the copy holds every record once."""
    source, target = f"copy-from.{topic_name}", f"copy-to.{topic_name}"
    create_topic(cluster.bootstrap_servers, source, 2)
    create_topic(cluster.bootstrap_servers, target, 2)
    produce_numbered(cluster.bootstrap_servers, source, 0, 500, partitions=2, headers=True)
    query = (spark.readStream.format("loglake").option("zookeeper", cluster.zookeeper_connect)
             .option("subscribe", source).option("startingOffsets", "earliest")
             .option("includeHeaders", "true").option("maxOffsetsPerTrigger", "200").load()
             .select("key", "value", "partition", "headers")
             .writeStream.format("loglake").option("zookeeper", cluster.zookeeper_connect)
             .option("topic", target)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    records = _consume_all(cluster.bootstrap_servers, target, 500)
    assert sorted(int(r.value or b"") for r in records) == list(range(500))
    assert all(r.partition == int(r.value or b"") % 2 and r.key == b"k" + (r.value or b"")
               and r.headers == [("n", r.value)] for r in records)
