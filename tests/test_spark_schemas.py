"""Typed columns in Spark (streaming/typed_read.py, typed_views.py, typed_write.py).

A real cluster with a schema registry process (``DevCluster(registry=True)``), records produced
by confluent-kafka's own Avro / JSON Schema / Protobuf serializers, tiered by the brokers into
Delta tables with typed columns, read by real Spark through the SQL views, ``format("loglake")``
with ``valueFormat=registry`` (batch and stream) and the catalog tables; the sink serializes a
struct column with a registered schema and confluent-kafka's deserializer reads it back.

The Avro topic: 1500 records of v1 (``user_id`` ``u<i % 5>``, ``n`` = i), then 300 of v2 (adds an
optional ``country``, "de"), then 6 unframed / unknown-id / garbage records; v3 (adds an
optional ``ref``) is registered but never produced, so the views' type is wider than the table.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from loglake.dev.harness import DevCluster
from loglake.streaming.errors import SourceOptionError
from loglake.streaming.options import parse_options
from tests.admin_util import create_topic
from tests.spark_session import wait_tiered

V1 = {"type": "record", "name": "Click", "namespace": "loglake.test", "fields": [
    {"name": "user_id", "type": "string"},
    {"name": "page", "type": "string"},
    {"name": "n", "type": "long"},
]}
V2 = {**V1, "fields": [*V1["fields"],
                       {"name": "country", "type": ["null", "string"], "default": None}]}
V3 = {**V2, "fields": [*V2["fields"],
                       {"name": "ref", "type": ["null", "string"], "default": None}]}
V1_COUNT, V2_COUNT = 1500, 300
BAD_VALUES = [b"{not framed}", b"plain text", b"\x00\x00\x0f\x42\x40abc",  # id 1000000
              b"\x00\x00\x0f\x42\x40", b"\x01\x00\x00\x00\x01xx", b"x"]
USERS = 5
SMALL_SEGMENTS = {"segment.bytes": "4000"}
"""Small records: segments roll (and tier) every ~150 records."""

JSON_SCHEMA = {"type": "object", "title": "Visit", "properties": {
    "user_id": {"type": "string"}, "ms": {"type": "integer"}, "score": {"type": "number"},
}, "required": ["user_id"]}
JSON_COUNT = 300

PROTO_COUNT = 1000


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("schemas")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts, registry=True) as cluster:
        yield cluster


def _registry(dev: DevCluster) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": dev.registry_url})


def _produce(dev: DevCluster, topic: str, values: list[Any], serialize: Callable[..., bytes],
             *, partitions: int = 2) -> None:
    """Produce ``values`` (serialized by ``serialize(value, ctx)``) round-robin."""
    from confluent_kafka import Producer
    from confluent_kafka.serialization import MessageField, SerializationContext

    failures: list[object] = []
    producer = Producer({"bootstrap.servers": dev.bootstrap_servers, "linger.ms": 5,
                         "batch.size": 2000, "enable.idempotence": True,
                         "on_delivery": lambda e, _m: failures.append(e) if e else None})
    context = SerializationContext(topic, MessageField.VALUE)
    for i, value in enumerate(values):
        payload = serialize(value, context)
        while True:
            try:
                producer.produce(topic, value=payload, key=f"k{i}".encode(),
                                 partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not failures, failures[:3]


def _click(i: int, country: str | None = None) -> dict[str, Any]:
    value: dict[str, Any] = {"user_id": f"u{i % USERS}", "page": f"/p{i % 7}", "n": i}
    if country is not None:
        value["country"] = country
    return value


@pytest.fixture(scope="module")
def clicks(dev: DevCluster) -> str:
    """The Avro topic (module docstring), partly tiered."""
    from confluent_kafka.schema_registry.avro import AvroSerializer

    topic = f"clicks-{uuid.uuid4().hex[:6]}"
    create_topic(dev.bootstrap_servers, topic, 2, SMALL_SEGMENTS)
    registry = _registry(dev)
    v1 = AvroSerializer(registry, json.dumps(V1))
    _produce(dev, topic, [_click(i) for i in range(V1_COUNT)], v1)
    wait_tiered(dev.zookeeper_connect, topic, {0: 100, 1: 100}, timeout=120)
    v2 = AvroSerializer(registry, json.dumps(V2))
    _produce(dev, topic, [_click(i, "de") for i in range(V1_COUNT, V1_COUNT + V2_COUNT)], v2)
    _produce(dev, topic, BAD_VALUES, lambda value, _ctx: value)
    from confluent_kafka.schema_registry import Schema

    registry.register_schema(f"{topic}-value", Schema(json.dumps(V3), "AVRO"))
    return topic


def _expected_users() -> Counter[str | None]:
    counts: Counter[str | None] = Counter(f"u{i % USERS}" for i in range(V1_COUNT + V2_COUNT))
    counts[None] = len(BAD_VALUES)
    return counts


def _user_counts(spark: SparkSession, sql: str) -> Counter[str | None]:
    return Counter({row[0]: row[1] for row in spark.sql(sql).collect()})


def test_view_groups_by_a_typed_field_over_tier_and_hot_tail(
        spark: SparkSession, dev: DevCluster, clicks: str) -> None:
    from loglake.streaming.sql_views import quote_identifier, register_topics

    register_topics(spark, zookeeper=dev.zookeeper_connect, topics=[clicks])
    name = quote_identifier(clicks)
    frame = spark.table(name)
    assert frame.columns[:7] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                 "timestampType"]
    assert {"value_bytes", "value_schema_id", "value_error"} <= set(frame.columns)
    value_type = frame.schema["value"].dataType.simpleString()
    assert value_type == ("struct<user_id:string,page:string,n:bigint,country:string,"
                          "ref:string>"), value_type
    assert _user_counts(spark, f"SELECT value.user_id, count(*) FROM {name} GROUP BY 1") == (
        _expected_users())
    both = spark.sql(f"SELECT count(*) FILTER (WHERE value.country = 'de'), "
                     f"count(*) FILTER (WHERE value.n < {V1_COUNT} AND value.country IS NULL), "
                     f"count(*) FILTER (WHERE value.ref IS NOT NULL), "
                     f"count(DISTINCT value_schema_id) FROM {name}").collect()[0]
    assert tuple(both) == (V2_COUNT, V1_COUNT, 0, 3)  # v1, v2 and the unknown id 1000000
    errors = sorted(r[0] for r in spark.sql(
        f"SELECT value_error FROM {name} WHERE value_error IS NOT NULL").collect())
    assert len(errors) == len(BAD_VALUES)
    assert sum(e.startswith("not framed") for e in errors) == 4, errors
    assert sum("unknown schema id 1000000" in e for e in errors) == 2, errors
    raw = spark.sql(f"SELECT value_bytes FROM {name} WHERE value_error IS NOT NULL").collect()
    assert sorted(bytes(r[0]) for r in raw) == sorted(BAD_VALUES)


def test_view_tier_side_reads_the_tables_typed_columns(
        spark: SparkSession, dev: DevCluster, clicks: str) -> None:
    """The tiered rows come from the table's value_typed (not decoded again): the view's
    tier rows equal what the catalog table holds."""
    from loglake.streaming.spark_catalog import register_tables
    from loglake.streaming.sql_views import quote_identifier, register_topics

    tables = register_tables(spark, zookeeper=dev.zookeeper_connect, topics=[clicks])
    table = tables[clicks]
    schema = spark.table(table).schema
    assert schema["value"].dataType.simpleString() == "binary"
    assert schema["value_typed"].dataType.simpleString().startswith(
        "struct<user_id:string,page:string,n:bigint")
    tiered = {(r.partition, r.offset): r.u for r in spark.sql(
        f"SELECT partition, offset, value_typed.user_id AS u FROM {table} "
        f"WHERE NOT is_control").collect()}
    assert len(tiered) >= 200
    register_topics(spark, zookeeper=dev.zookeeper_connect, topics=[clicks])
    view = {(r.partition, r.offset): r.u for r in spark.sql(
        f"SELECT partition, offset, value.user_id AS u FROM {quote_identifier(clicks)}"
    ).collect()}
    assert all(view[key] == user for key, user in tiered.items())


def test_source_option_decodes_batch_and_stream(
        spark: SparkSession, dev: DevCluster, clicks: str, tmp_path: Path) -> None:
    reader = (spark.read.format("loglake").option("zookeeper", dev.zookeeper_connect)
              .option("subscribe", clicks).option("valueFormat", "registry"))
    frame = reader.load()
    assert frame.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                             "timestampType", "value_bytes", "value_schema_id", "value_error"]
    frame.createOrReplaceTempView("clicks_source")
    assert _user_counts(spark, "SELECT value.user_id, count(*) FROM clicks_source "
                               "GROUP BY 1") == _expected_users()
    rows = frame.where("value.n = 7").select("value.page", "value_schema_id").collect()
    assert [r.page for r in rows] == ["/p0"] and rows[0].value_schema_id is not None

    stream = (spark.readStream.format("loglake").option("zookeeper", dev.zookeeper_connect)
              .option("subscribe", clicks).option("startingOffsets", "earliest")
              .option("valueFormat", "registry").load())
    collected: list[Any] = []

    def keep(batch: Any, _batch_id: int) -> None:
        collected.extend(batch.select("value.user_id", "value_error").collect())

    query = (stream.writeStream.foreachBatch(keep).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    query.awaitTermination(180)
    assert query.exception() is None
    assert Counter(r.user_id for r in collected) == _expected_users()
    assert sum(r.value_error is not None for r in collected) == len(BAD_VALUES)


def test_untyped_reads_are_unchanged(spark: SparkSession, dev: DevCluster,
                                     clicks: str) -> None:
    from loglake.streaming.sql_views import topic_frame

    frame = (spark.read.format("loglake").option("zookeeper", dev.zookeeper_connect)
             .option("subscribe", clicks).load())
    assert frame.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                             "timestampType"]
    assert frame.schema["value"].dataType.simpleString() == "binary"
    plain = topic_frame(spark, clicks, zookeeper=dev.zookeeper_connect, schema_columns=False)
    assert plain.schema["value"].dataType.simpleString() == "binary"
    assert plain.count() == V1_COUNT + V2_COUNT + len(BAD_VALUES)


def _tiered_view(spark: SparkSession, dev: DevCluster, topic: str, values: list[Any],
                 serialize: Callable[..., bytes]) -> str:
    """Create ``topic`` (2 partitions), produce ``values`` (each with a ``user_id`` of
    ``u<i % USERS>``), wait until 50 records of each partition are tiered and register the
    topic's view; check ``GROUP BY value.user_id`` over it; the view's quoted name."""
    from loglake.streaming.sql_views import quote_identifier, register_topics

    create_topic(dev.bootstrap_servers, topic, 2, SMALL_SEGMENTS)
    _produce(dev, topic, values, serialize)
    wait_tiered(dev.zookeeper_connect, topic, {0: 50, 1: 50}, timeout=120)
    register_topics(spark, zookeeper=dev.zookeeper_connect, topics=[topic])
    name = quote_identifier(topic)
    counts = _user_counts(spark, f"SELECT value.user_id, count(*) FROM {name} GROUP BY 1")
    assert counts == Counter(f"u{i % USERS}" for i in range(len(values)))
    return name


def test_json_schema_topic(spark: SparkSession, dev: DevCluster) -> None:
    from confluent_kafka.schema_registry.json_schema import JSONSerializer

    serializer = JSONSerializer(json.dumps(JSON_SCHEMA), _registry(dev))
    name = _tiered_view(spark, dev, f"visits-{uuid.uuid4().hex[:6]}",
                        [{"user_id": f"u{i % USERS}", "ms": i, "score": i / 2}
                         for i in range(JSON_COUNT)], serializer)
    total = spark.sql(f"SELECT sum(value.ms), sum(value.score) FROM {name}").collect()[0]
    assert total[0] == sum(range(JSON_COUNT)) and total[1] == sum(range(JSON_COUNT)) / 2


def _click_message_class() -> Any:
    """A generated-style message class ``loglake.test.Click {string user_id = 1; int64 n = 2;
    repeated string tags = 3;}`` built at run time from a FileDescriptorProto."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(name=f"click_{uuid.uuid4().hex[:6]}.proto",
                                              package="loglake.test", syntax="proto3")
    message = file.message_type.add(name="Click")
    label = descriptor_pb2.FieldDescriptorProto
    message.field.add(name="user_id", number=1, type=label.TYPE_STRING,
                      label=label.LABEL_OPTIONAL)
    message.field.add(name="n", number=2, type=label.TYPE_INT64, label=label.LABEL_OPTIONAL)
    message.field.add(name="tags", number=3, type=label.TYPE_STRING,
                      label=label.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("loglake.test.Click"))


def test_protobuf_topic(spark: SparkSession, dev: DevCluster) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    click = _click_message_class()
    serializer = ProtobufSerializer(click, _registry(dev), {"use.deprecated.format": False})
    name = _tiered_view(spark, dev, f"pclicks-{uuid.uuid4().hex[:6]}",
                        [click(user_id=f"u{i % USERS}", n=i, tags=["a"] * (i % 3))
                         for i in range(PROTO_COUNT)], serializer)
    row = spark.sql(f"SELECT sum(value.n), sum(size(value.tags)) FROM {name}").collect()[0]
    assert tuple(row) == (sum(range(PROTO_COUNT)), sum(i % 3 for i in range(PROTO_COUNT)))


def test_typed_key_with_a_primitive_schema_and_binary_value(
        spark: SparkSession, dev: DevCluster) -> None:
    """``<topic>-key`` holds the Avro schema "string": keys are typed (a string column), the
    untyped value side keeps Spark's binary column."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from loglake.streaming.sql_views import quote_identifier, register_topics

    topic = f"keyed-{uuid.uuid4().hex[:6]}"
    create_topic(dev.bootstrap_servers, topic, 1, SMALL_SEGMENTS)
    serializer = AvroSerializer(_registry(dev), json.dumps("string"))
    context = SerializationContext(topic, MessageField.KEY)
    failures: list[object] = []
    producer = Producer({"bootstrap.servers": dev.bootstrap_servers, "linger.ms": 5,
                         "batch.size": 2000,  # below segment.bytes
                         "on_delivery": lambda e, _m: failures.append(e) if e else None})
    for i in range(400):
        producer.produce(topic, key=serializer(f"user-{i % 3}", context), value=b"%d" % i)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not failures, failures[:3]
    wait_tiered(dev.zookeeper_connect, topic, {0: 50}, timeout=120)
    frame = (spark.read.format("loglake").option("zookeeper", dev.zookeeper_connect)
             .option("subscribe", topic).option("keyFormat", "registry").load())
    assert frame.columns[-3:] == ["key_bytes", "key_schema_id", "key_error"]
    assert frame.schema["key"].dataType.simpleString() == "string"
    assert frame.schema["value"].dataType.simpleString() == "binary"
    register_topics(spark, zookeeper=dev.zookeeper_connect, topics=[topic])
    name = quote_identifier(topic)
    for source in (name, "keyed_source"):
        frame.createOrReplaceTempView("keyed_source")
        counts = _user_counts(spark, f"SELECT key, count(*) FROM {source} GROUP BY 1")
        assert counts == Counter(f"user-{i % 3}" for i in range(400)), source
    assert spark.table(name).schema["value"].dataType.simpleString() == "binary"


def test_sink_serializes_a_struct_column_with_a_registered_schema(
        spark: SparkSession, dev: DevCluster, clicks: str) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    target = f"sunk-{uuid.uuid4().hex[:6]}"
    create_topic(dev.bootstrap_servers, target, 1)
    registry = _registry(dev)
    for version in (V1, V2, V3):
        registry.register_schema(f"{target}-value", Schema(json.dumps(version), "AVRO"))
    rows = [(f"k{i}", (f"u{i}", f"/s{i}", i, "fr" if i % 2 else None)) for i in range(50)]
    frame = spark.createDataFrame(
        rows, "key string, value struct<user_id: string, page: string, n: bigint, "
              "country: string>")
    (frame.write.format("loglake").option("zookeeper", dev.zookeeper_connect)
     .option("topic", target).option("valueSchema.subject", f"{target}-value")
     .option("valueSchema.version", "2").mode("append").save())

    deserializer = AvroDeserializer(_registry(dev))
    consumer = Consumer({"bootstrap.servers": dev.bootstrap_servers, "group.id": target,
                         "auto.offset.reset": "earliest", "enable.partition.eof": True})
    consumer.subscribe([target])
    got: list[dict[str, Any]] = []
    try:
        for _ in range(200):
            message = consumer.poll(1.0)
            if message is None or message.error():
                if len(got) >= len(rows):
                    break
                continue
            got.append(deserializer(message.value(),
                                    SerializationContext(target, MessageField.VALUE)))
    finally:
        consumer.close()
    assert sorted(got, key=lambda v: v["n"]) == [
        {"user_id": f"u{i}", "page": f"/s{i}", "n": i, "country": "fr" if i % 2 else None}
        for i in range(50)]


def test_sink_refuses_a_row_its_schema_cannot_serialize(
        spark: SparkSession, dev: DevCluster, clicks: str) -> None:
    target = f"sunk-{uuid.uuid4().hex[:6]}"
    create_topic(dev.bootstrap_servers, target, 1)
    frame = spark.createDataFrame([(("u1",),)], "value struct<user_id: string>")
    with pytest.raises(Exception, match="does not fit"):
        (frame.write.format("loglake").option("zookeeper", dev.zookeeper_connect)
         .option("topic", target).option("valueSchema.subject", f"{clicks}-value")
         .mode("append").save())
    with pytest.raises(Exception, match="no version"):
        (frame.write.format("loglake").option("zookeeper", dev.zookeeper_connect)
         .option("topic", target).option("valueSchema.subject", "no-such-subject")
         .mode("append").save())


def test_registry_read_of_a_topic_without_schema_is_refused(
        spark: SparkSession, dev: DevCluster) -> None:
    topic = f"plain-{uuid.uuid4().hex[:6]}"
    create_topic(dev.bootstrap_servers, topic, 1)
    with pytest.raises(Exception, match="has no value schema"):
        (spark.read.format("loglake").option("zookeeper", dev.zookeeper_connect)
         .option("subscribe", topic).option("valueFormat", "registry").load()).collect()


@pytest.mark.parametrize(("options", "mode", "message"), [
    ({"valueFormat": "avro"}, "batch", "must be binary or registry"),
    ({"valueFormat": "registry", "zookeeper": ""}, "batch", "needs the 'zookeeper' option"),
    ({"valueSchema.subject": "s"}, "batch", "needs valueFormat=registry"),
    ({"keyFormat": "registry", "keySchema.version": "1"}, "stream", "only for writes"),
    ({"valueFormat": "registry"}, "write", "only for reads"),
    ({"valueSchema.version": "2"}, "write", "needs 'valueSchema.subject'"),
    ({"valueSchema.subject": "s", "valueSchema.version": "0"}, "write", "positive version"),
])
def test_schema_options_are_validated(options: dict[str, str], mode: str,
                                      message: str) -> None:
    given = {"zookeeper": "localhost:2181", "kafka.bootstrap.servers": "localhost:9092",
             **options}
    if mode != "write":
        given["subscribe"] = "t"
    if given["zookeeper"] == "":
        del given["zookeeper"]
    with pytest.raises(SourceOptionError, match=message):
        parse_options(given, mode)  # type: ignore[arg-type]


def test_schema_options_parse() -> None:
    read = parse_options({"zookeeper": "zk:2181", "subscribe": "t", "VALUEFORMAT": "Registry",
                          "keyFormat": "registry", "keySchema.subject": "ks"}, "batch")
    assert read.value_schema.registry and read.value_schema.subject is None
    assert read.key_schema.registry and read.key_schema.subject == "ks"
    write = parse_options({"zookeeper": "zk:2181", "valueSchema.subject": "vs",
                           "valueSchema.version": "3"}, "write")
    assert (write.value_schema.subject, write.value_schema.version) == ("vs", 3)
    plain = parse_options({"zookeeper": "zk:2181", "subscribe": "t"}, "batch")
    assert not plain.value_schema.registry and not plain.schema_sides()
