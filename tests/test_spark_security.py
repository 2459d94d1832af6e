"""Spark over SASL_SSL: ``format("loglake")`` batch writes (at-least-once and exactly-once)
and reads, and SQL views, against a secured dev cluster (SCRAM-SHA-512 logins, TLS with a
generated CA, the ACL authorizer on) with Spark's Kafka option names (``kafka.security.
protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.*``).
Brokers are found in ZooKeeper and contacted on their SASL_SSL listener."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from loglake.client.security import read_properties
from loglake.dev.harness import DevCluster
from loglake.streaming.sql_views import quote_identifier, register_topics

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
            ) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("spark-secured")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    security="sasl_ssl") as dev:
        yield dev


def kafka_options(dev: DevCluster) -> dict[str, str]:
    """The admin's Java-form client properties as Spark options (``kafka.`` + key)."""
    assert dev.info.java_client_properties is not None
    properties = read_properties(dev.info.java_client_properties)
    assert properties["security.protocol"] == "SASL_SSL"
    assert "ScramLoginModule" in properties["sasl.jaas.config"]
    return {f"kafka.{key}": value for key, value in properties.items()}


def test_batch_write_and_read_over_sasl_ssl(spark: SparkSession, secured: DevCluster) -> None:
    topic = f"spark-sec-{uuid.uuid4().hex[:8]}"
    secured.create_topic(topic, partitions=2)
    options = kafka_options(secured)
    frame = spark.range(200).select(
        F.col("id").cast("string").alias("key"),
        F.concat(F.lit("v"), F.col("id").cast("string")).alias("value"),
        F.lit(topic).alias("topic"))
    frame.write.format("loglake").option("zookeeper", secured.zookeeper_connect).options(
        **options).mode("append").save()
    (frame.where("id < 50").withColumn("value", F.concat(F.lit("eos"), F.col("key")))
     .write.format("loglake").option("zookeeper", secured.zookeeper_connect).options(**options)
     .option("deliveryGuarantee", "exactly-once").mode("append").save())

    read = (spark.read.format("loglake").option("zookeeper", secured.zookeeper_connect)
            .options(**options).option("subscribe", topic).load()
            .selectExpr("CAST(value AS STRING) AS v"))
    values = sorted(row.v for row in read.collect())
    assert values == sorted([f"v{i}" for i in range(200)] + [f"eos{i}" for i in range(50)])

    register_topics(spark, zookeeper=secured.zookeeper_connect, topics=[topic],
                    kafka_options=read_properties(secured.info.java_client_properties or ""))
    row = spark.sql(f"SELECT count(*) AS n FROM {quote_identifier(topic)}").first()
    assert row is not None and row.n == 250


def test_read_without_security_options_names_the_listeners(spark: SparkSession,
                                                            secured: DevCluster) -> None:
    """Without kafka.security.protocol the query wants a PLAINTEXT listener, which the secured
    brokers do not have: the planner says so instead of hanging."""
    topic = f"spark-sec-{uuid.uuid4().hex[:8]}"
    secured.create_topic(topic, partitions=1)
    with pytest.raises(Exception, match=r"PLAINTEXT listener .*SASL_SSL"):
        (spark.read.format("loglake").option("zookeeper", secured.zookeeper_connect)
         .option("subscribe", topic).option("tierRead", "brokers").load().collect())


def test_sql_cli_with_command_config(spark: SparkSession, secured: DevCluster,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``loglake sql --command-config FILE`` reads the hot tail over SASL_SSL."""
    import argparse

    from loglake.client import Producer, SecurityConfig
    from loglake.streaming import sql_cli

    topic = f"spark-sql-{uuid.uuid4().hex[:8]}"
    secured.create_topic(topic, partitions=1)
    properties = str(secured.client_properties)
    producer = Producer(secured.bootstrap_servers, security=SecurityConfig.load(properties))
    for index in range(7):
        producer.send(topic, f"r{index}".encode())
    producer.flush()
    parser = argparse.ArgumentParser(prog="loglake")
    sql_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["sql", f"SELECT count(*) AS n FROM {quote_identifier(topic)}",
                              "--zookeeper", secured.zookeeper_connect, "--format", "json",
                              "--command-config", properties])
    assert args.handler(args) == 0
    assert capsys.readouterr().out.strip() == '{"n": 7}'
