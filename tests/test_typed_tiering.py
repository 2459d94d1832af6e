"""Typed tiering: schema'd topics tiered into Delta tables with typed columns.

Real ZooKeeper, a real broker and a real ``loglake registry`` process (``DevCluster(registry=
True)``, one per module), confluent-kafka's own serializers producing (Avro, JSON Schema,
Protobuf) through its ``SchemaRegistryClient``, deltalake and Spark (delta-spark) reading the
tables. Checks: typed columns readable by name for the three formats; a compatible evolution
mid-stream is one table with both generations (Delta schema evolution; VERSION AS OF before
and after); 1 % deliberately bad records land in ``value_error`` while tiering goes on; counts
equal what was produced; consumers reading old offsets from the tier get the records byte for
byte; a schema registered after a first failed lookup is found by a later segment; clean-up
rewrites keep the typed columns.
"""

from __future__ import annotations

import io
import json
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from deltalake import DeltaTable

from loglake import jvm
from loglake.compaction.common import Cluster
from loglake.compaction.optimize import run_optimize
from loglake.dev.harness import DevCluster, wait_until
from loglake.schemas.wire import frame
from loglake.segments.storage import Storage
from loglake.segments.tiered_table import TieredTable
from tests.admin_util import create_topic
from tests.compaction_util import quiet
from tests.tiering_util import (
    SMALL_SEGMENTS,
    consume,
    wait_local_start,
    wait_tiered,
)

CLICK_V1 = {
    "type": "record", "name": "Click", "namespace": "loglake.test",
    "fields": [
        {"name": "user_id", "type": "long"},
        {"name": "page", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "score", "type": "double"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
CLICK_V2 = {**CLICK_V1, "fields": [*CLICK_V1["fields"],
                                  {"name": "referrer", "type": ["null", "string"],
                                   "default": None}]}
JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "properties": {"order_id": {"type": "integer"}, "item": {"type": "string"},
                   "price": {"type": "number"}, "paid": {"type": "boolean"}},
    "required": ["order_id", "item"],
}
PRODUCER = {"acks": "all", "linger.ms": 5, "batch.size": 16000, "enable.idempotence": True}


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("typed_tiering")
    with DevCluster(data / "dev", zookeeper=zookeeper_hosts, registry=True,
                    broker_overrides={"remote.log.manager.task.interval.ms": "200"}) as cluster:
        yield cluster


def _registry(dev: DevCluster) -> SchemaRegistryClient:
    return SchemaRegistryClient(dev.registry_config())


def _produce(dev: DevCluster, topic: str, values: list[bytes | None],
             keys: list[bytes | None] | None = None) -> list[int]:
    """Produce ``values`` in order to partition 0; the acked offsets."""
    producer = Producer({"bootstrap.servers": dev.bootstrap_servers, **PRODUCER})
    offsets: list[int] = []
    errors: list[Any] = []

    def report(error: Any, msg: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            offsets.append(msg.offset())

    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value=value, key=None if keys is None else keys[i],
                                 partition=0, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors[:3]
    assert len(offsets) == len(values)
    return sorted(offsets)


def _serializer(kind: str, registry: SchemaRegistryClient, schema: Any,
                **conf: Any) -> Callable[[Any, SerializationContext], bytes]:
    if kind == "avro":
        return AvroSerializer(registry, json.dumps(schema), conf=conf or None)
    if kind == "json":
        return JSONSerializer(json.dumps(schema), registry, conf=conf or None)
    return ProtobufSerializer(schema, registry, conf={"use.deprecated.format": False, **conf})


def _click(i: int, *, v2: bool = False) -> dict[str, Any]:
    click = {"user_id": i % 97, "page": f"/p/{i % 13}", "ts": 1_700_000_000_000 + i,
             "score": i / 4, "tags": [f"t{i % 3}"] * (i % 3)}
    if v2:
        click["referrer"] = None if i % 2 else f"ref-{i}"
    return click


def _table(dev: DevCluster, topic: str) -> pa.Table:
    dt = DeltaTable(Storage.from_url(dev.storage_url).table_uri(topic))
    return pa.table(dt.to_pyarrow_dataset().to_table()).sort_by("offset")


def _produce_clicks(dev: DevCluster, topic: str, numbers: range, *, v2: bool = False
                    ) -> list[int]:
    """``_click(i)`` for each ``i`` of ``numbers`` through AvroSerializer (CLICK_V1, or CLICK_V2
    with ``v2``: registered under ``<topic>-value`` on first use); the acked offsets."""
    serialize = _serializer("avro", _registry(dev), CLICK_V2 if v2 else CLICK_V1)
    ctx = SerializationContext(topic, MessageField.VALUE)
    return _produce(dev, topic, [serialize(_click(i, v2=v2), ctx) for i in numbers])


def _bad_value(i: int, good_id: int) -> bytes | None:
    """The deliberately bad values: 1 % of records, three kinds (no framing, an id nobody
    registered, a payload that does not decode)."""
    if i % 300 == 7:
        return b'{"user_id": 1}'
    if i % 300 == 107:
        return frame(987_654, b"\x02\x04ab")
    if i % 300 == 207:
        return frame(good_id, b"\x02")  # truncated: user_id, then the end
    return None


def test_avro_topic_tiers_typed_columns_evolves_and_keeps_bad_records(
        dev: DevCluster, topic_name: str) -> None:
    topic = f"clicks-{topic_name}"
    create_topic(dev.bootstrap_servers, topic, 1, {**SMALL_SEGMENTS, "local.retention.ms": "0"})
    registry = _registry(dev)
    v1 = _serializer("avro", registry, CLICK_V1)
    ctx = SerializationContext(topic, MessageField.VALUE)
    first = v1(_click(0), ctx)  # registers <topic>-value version 1
    v1_id = int.from_bytes(first[1:5], "big")

    values: list[bytes | None] = []
    expected: list[dict[str, Any] | None] = []
    for i in range(3000):
        bad = _bad_value(i, v1_id)
        if bad is not None:
            values.append(bad)
            expected.append(None)
        elif i % 500 == 250:
            values.append(None)  # a tombstone: no value, no error
            expected.append(None)
        else:
            values.append(v1(_click(i), ctx))
            expected.append({**_click(i), "referrer": None})
    offsets = _produce(dev, topic, values)
    tiered_v1 = wait_tiered(dev.storage_url, topic, (0,), at_least=1500, timeout=120)[0]
    version_v1 = DeltaTable(Storage.from_url(dev.storage_url).table_uri(topic)).version()

    v2 = _serializer("avro", registry, CLICK_V2)  # a compatible evolution: optional field
    more = [v2(_click(i, v2=True), ctx) for i in range(3000, 6000)]
    expected += [_click(i, v2=True) for i in range(3000, 6000)]
    offsets += _produce(dev, topic, list(more))
    ends = wait_tiered(dev.storage_url, topic, (0,), at_least=5000, timeout=180)
    assert offsets == list(range(6000))

    rows = _table(dev, topic)
    end = rows.num_rows  # tiering may have gone on since the wait: at least what it saw
    assert end >= ends[0]
    assert rows.column("offset").to_pylist() == list(range(end))  # counts = produced
    typed = rows.column("value_typed").to_pylist()
    ids = rows.column("value_schema_id").to_pylist()
    errors = rows.column("value_error").to_pylist()
    v2_id = int.from_bytes(more[0][1:5], "big")
    bad_count = 0
    every = values + more
    for offset in range(end):
        value, want = every[offset], expected[offset]
        assert rows.column("value")[offset].as_py() == value  # raw bytes kept
        if value is None:
            assert typed[offset] is None and errors[offset] is None and ids[offset] is None
        elif want is None:
            bad_count += 1
            assert typed[offset] is None and errors[offset], offset
        else:
            assert errors[offset] is None, (offset, errors[offset])
            assert typed[offset] == want, offset
            assert ids[offset] == (v1_id if offset < 3000 else v2_id)
    assert bad_count == sum(1 for i in range(min(end, 3000)) if _bad_value(i, v1_id))
    assert bad_count >= 20  # 1 % of the records
    texts = {errors[i] for i in range(end) if errors[i]}
    assert "not framed: magic byte 0x7b" in texts
    assert "unknown schema id 987654" in texts
    assert any(t.startswith(f"schema id {v1_id} (AVRO):") for t in texts), texts

    # the evolution is Delta schema evolution: v1 snapshot without the field, newest with it
    uri = Storage.from_url(dev.storage_url).table_uri(topic)
    old = DeltaTable(uri, version=version_v1).schema().to_arrow()
    new = DeltaTable(uri).schema().to_arrow()
    old_fields = pa.schema(old).field("value_typed").type
    new_fields = pa.schema(new).field("value_typed").type
    assert [old_fields.field(i).name for i in range(old_fields.num_fields)] == [
        "user_id", "page", "ts", "score", "tags"]
    assert [new_fields.field(i).name for i in range(new_fields.num_fields)] == [
        "user_id", "page", "ts", "score", "tags", "referrer"]
    assert tiered_v1 >= 1500

    # consumers reading old offsets from the tier get the records byte for byte
    wait_local_start(dev.zookeeper_connect, topic, (0,), above=1000)
    got = consume(dev.bootstrap_servers, topic, (0,), expected=end)
    assert [(r.offset, r.value) for r in got[:end]] == [(o, every[o]) for o in range(end)]


def _purchase_class() -> Any:
    """A Protobuf message class built from a descriptor (what protoc would generate)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(
        name="loglake_test_purchase.proto", package="loglake.test", syntax="proto3")
    message = proto.message_type.add(name="Purchase")
    kinds = descriptor_pb2.FieldDescriptorProto
    for number, (name, kind) in enumerate((("id", kinds.TYPE_INT64),
                                           ("sku", kinds.TYPE_STRING),
                                           ("quantity", kinds.TYPE_INT32),
                                           ("amount", kinds.TYPE_DOUBLE)), start=1):
        message.field.add(name=name, number=number, type=kind, label=kinds.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("loglake.test.Purchase"))


def test_json_and_protobuf_topics_tier_typed_columns(dev: DevCluster, topic_name: str) -> None:
    purchase = _purchase_class()
    registry = _registry(dev)
    json_topic, proto_topic = f"orders-{topic_name}", f"purchases-{topic_name}"
    for topic in (json_topic, proto_topic):
        create_topic(dev.bootstrap_servers, topic, 1, SMALL_SEGMENTS)
    to_json = _serializer("json", registry, JSON_SCHEMA)
    json_ctx = SerializationContext(json_topic, MessageField.VALUE)
    orders = [{"order_id": i, "item": f"item-{i % 7}", "price": i * 1.5, "paid": i % 2 == 0}
              for i in range(2500)]
    key_of = _serializer("avro", registry, "string")  # <topic>-key: a primitive Avro schema
    key_ctx = SerializationContext(json_topic, MessageField.KEY)
    keys = [f"customer-{i % 13}" for i in range(2500)]
    _produce(dev, json_topic, [to_json(o, json_ctx) for o in orders],
             [key_of(k, key_ctx) for k in keys])
    to_proto = _serializer("protobuf", registry, purchase)
    proto_ctx = SerializationContext(proto_topic, MessageField.VALUE)
    purchases = [purchase(id=i, sku=f"sku-{i % 11}", quantity=i % 5, amount=i / 8)
                 for i in range(2500)]
    _produce(dev, proto_topic, [to_proto(p, proto_ctx) for p in purchases])

    tiered = wait_tiered(dev.storage_url, json_topic, (0,), at_least=1500, timeout=180)[0]
    rows = _table(dev, json_topic)
    # tiering goes on meanwhile: the table read is at least what was waited for, and every
    # offset below its own end is there exactly once
    json_end = rows.num_rows
    assert json_end >= tiered
    assert rows.column("offset").to_pylist() == list(range(json_end))
    assert rows.column("value_error").null_count == json_end
    got = rows.column("value_typed").to_pylist()
    assert got == orders[:json_end]
    assert pc.sum(pc.struct_field(rows.column("value_typed"), "order_id")).as_py() == sum(
        range(json_end))
    assert rows.schema.field("key_typed").type == pa.string()  # the key side is typed too
    assert rows.column("key_typed").to_pylist() == keys[:json_end]
    assert rows.column("key_error").null_count == json_end

    tiered = wait_tiered(dev.storage_url, proto_topic, (0,), at_least=1500, timeout=180)[0]
    rows = _table(dev, proto_topic)
    proto_end = rows.num_rows
    assert proto_end >= tiered
    assert rows.column("offset").to_pylist() == list(range(proto_end))
    assert rows.column("value_error").null_count == proto_end
    for offset, value in enumerate(rows.column("value_typed").to_pylist()):
        want = purchases[offset]
        assert (value["id"], value["sku"], value["quantity"], value["amount"]) == (
            want.id, want.sku, want.quantity, want.amount), offset


def test_id_registered_after_a_failed_lookup_is_found_by_a_later_segment(
        dev: DevCluster, topic_name: str) -> None:
    """Records framed with an id nobody registered yet tier with ``unknown schema id`` (no
    stall); once that id exists, later segments carrying it decode."""
    topic = f"late-{topic_name}"
    create_topic(dev.bootstrap_servers, topic, 1, SMALL_SEGMENTS)
    registry = _registry(dev)
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1 = _serializer("avro", registry, CLICK_V1)
    v1_id = int.from_bytes(v1(_click(0), ctx)[1:5], "big")
    other = {**CLICK_V1, "name": "Other"}

    def payload(i: int) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, fastavro.parse_schema(other), _click(i))
        return buf.getvalue()

    future_id = v1_id + 1000  # nobody registered it yet
    _produce(dev, topic, [frame(future_id, payload(i)) for i in range(1200)])
    first_end = wait_tiered(dev.storage_url, topic, (0,), at_least=600, timeout=120)[0]
    rows = _table(dev, topic)
    assert set(rows.column("value_error").to_pylist()) == {f"unknown schema id {future_id}"}

    # register it under that very id (the registry's IMPORT mode), then more records
    subject = f"{topic}-other"
    _rest(dev, "PUT", f"/mode/{subject}", {"mode": "IMPORT"})
    answer = _rest(dev, "POST", f"/subjects/{subject}/versions",
                   {"schema": json.dumps(other), "schemaType": "AVRO", "id": future_id,
                    "version": 1})
    assert answer["id"] == future_id
    _produce(dev, topic, [frame(future_id, payload(i)) for i in range(1200, 3600)])
    wait_tiered(dev.storage_url, topic, (0,), at_least=2400, timeout=120)
    rows = _table(dev, topic)
    assert rows.column("offset").to_pylist() == list(range(rows.num_rows))
    early = rows.filter(pc.less(rows.column("offset"), first_end))
    assert set(early.column("value_error").to_pylist()) == {f"unknown schema id {future_id}"}
    later = rows.filter(pc.greater_equal(rows.column("offset"), 1200))
    assert later.num_rows >= 600
    assert later.column("value_error").null_count == later.num_rows
    assert later.column("value_schema_id").to_pylist() == [future_id] * later.num_rows
    assert later.column("value_typed").to_pylist()[:3] == [_click(i) for i in range(1200, 1203)]


def _rest(dev: DevCluster, method: str, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        dev.registry_url.rstrip("/") + path, method=method, data=json.dumps(body).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_optimize_keeps_the_typed_columns(dev: DevCluster, topic_name: str) -> None:
    topic = f"opt-{topic_name}"
    create_topic(dev.bootstrap_servers, topic, 1, SMALL_SEGMENTS)
    _produce_clicks(dev, topic, range(1500))
    end = wait_tiered(dev.storage_url, topic, (0,), at_least=800, timeout=120)[0]
    _produce_clicks(dev, topic, range(1500, 3000), v2=True)
    end = wait_tiered(dev.storage_url, topic, (0,), at_least=2000, timeout=120)[0]
    before = _table(dev, topic)
    table = TieredTable(Storage.from_url(dev.storage_url), topic)
    files_before = len(table.files(0, refresh=True))
    assert files_before > 2
    with Cluster(dev.zookeeper_connect) as jobs:
        results = run_optimize(jobs, topic=topic, progress=quiet(), small_bytes=1 << 30,
                               target_bytes=1 << 30)
    assert any(r.committed for r in results), results
    after = _table(dev, topic)
    assert len(table.files(0, refresh=True)) < files_before
    window = pc.less(after.column("offset"), end)
    assert after.filter(window).select(["offset", "value", "value_typed", "value_schema_id",
                                        "value_error"]).to_pylist() == before.filter(
        pc.less(before.column("offset"), end)).select(
        ["offset", "value", "value_typed", "value_schema_id", "value_error"]).to_pylist()


def test_delete_records_keeps_the_typed_columns(dev: DevCluster, topic_name: str) -> None:
    """DeleteRecords rewrites the table file holding the new log start (tier_delete.py): the
    rows it keeps keep their typed columns."""
    topic = f"del-{topic_name}"
    create_topic(dev.bootstrap_servers, topic, 1, SMALL_SEGMENTS)
    _produce_clicks(dev, topic, range(2000))
    end = wait_tiered(dev.storage_url, topic, (0,), at_least=1500, timeout=120)[0]
    cut = 400  # inside the first file
    admin = AdminClient({"bootstrap.servers": dev.bootstrap_servers})
    futures = admin.delete_records([TopicPartition(topic, 0, cut)], request_timeout=30)
    next(iter(futures.values())).result(timeout=30)
    rows = wait_until(lambda: (lambda t: t if t.column("offset")[0].as_py() == cut else None)(
        _table(dev, topic)), 60, "DeleteRecords did not reach the table")
    window = rows.filter(pc.less(rows.column("offset"), end))
    assert window.column("offset").to_pylist() == list(range(cut, end))
    assert window.column("value_typed").to_pylist() == [
        _click(i) for i in range(cut, end)]
    assert window.column("value_error").null_count == window.num_rows


needs_delta = pytest.mark.skipif(
    not jvm.available("spark"),
    reason="delta-spark jars not fetched (python -m loglake.jvm fetch spark; ./run test does)")


@needs_delta
def test_spark_sql_reads_typed_columns_of_the_catalog_table_across_an_evolution(
        spark: Any, dev: DevCluster, topic_name: str) -> None:
    from loglake.streaming.spark_catalog import register_tables

    topic = f"sparkclicks-{topic_name}"
    create_topic(dev.bootstrap_servers, topic, 1, SMALL_SEGMENTS)
    _produce_clicks(dev, topic, range(1500))
    wait_tiered(dev.storage_url, topic, (0,), at_least=800, timeout=120)
    version_v1 = DeltaTable(Storage.from_url(dev.storage_url).table_uri(topic)).version()
    _produce_clicks(dev, topic, range(1500, 3000), v2=True)
    end = wait_tiered(dev.storage_url, topic, (0,), at_least=2000, timeout=120)[0]

    qualified = register_tables(spark, zookeeper=dev.zookeeper_connect, topics=[topic])[topic]
    counts = {r["user_id"]: r["n"] for r in spark.sql(
        f"SELECT value_typed.user_id AS user_id, count(*) AS n FROM {qualified} "
        "GROUP BY 1").collect()}
    assert sum(counts.values()) == end
    assert counts[5] == sum(1 for i in range(end) if i % 97 == 5)
    referrers = spark.sql(f"SELECT count(value_typed.referrer) AS n FROM {qualified}").first()
    assert referrers.n == sum(1 for i in range(1500, end) if i % 2 == 0)
    old = spark.sql(f"SELECT * FROM {qualified} VERSION AS OF {version_v1}")
    assert "referrer" not in old.schema["value_typed"].dataType.names
    assert old.count() >= 800
    assert spark.sql(f"SELECT count(*) AS n FROM {qualified} WHERE value_error IS NULL"
                     ).first().n == end
