"""confluent-kafka's ``SchemaRegistryClient`` and its Avro, JSON Schema and Protobuf serializers
and deserializers, unchanged, against ``loglake registry`` (a real process started here) and a
real loglake broker (the session's ``cluster``): records round-trip producer -> broker ->
consumer; schemas evolve; refusals per compatibility level; references (Protobuf imports, Avro
named types); soft and hard deletes; ``?normalize=true``; ``format=serialized``.

Subjects are unique per test (the session cluster's ZooKeeper is shared with other modules); no
test here changes the global compatibility level or mode.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import (
    Schema,
    SchemaReference,
    SchemaRegistryClient,
    SchemaRegistryError,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from loglake.dev.harness import DevCluster
from tests.clients import consume_messages
from tests.registry_process import RegistryProcess, module_registry


@pytest.fixture(scope="module")
def registry(cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[RegistryProcess]:
    yield from module_registry(tmp_path_factory, cluster.zookeeper_connect, "registry-clients")


@pytest.fixture
def client(registry: RegistryProcess) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry.url})


def round_trip(cluster: DevCluster, topic: str, values: list[Any],
               serialize: Callable[[Any, SerializationContext], bytes | None],
               deserialize: Callable[[bytes | None, SerializationContext], Any]) -> list[Any]:
    """Produce ``values`` serialized to ``topic`` (created here); consume them back from the
    broker and deserialize each."""
    cluster.create_topic(topic)
    ctx = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for value in values:
        producer.produce(topic, value=serialize(value, ctx))
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        messages = consume_messages(consumer, len(values), timeout=60)
    finally:
        consumer.close()
    return [deserialize(m.value(), ctx) for m in messages]


def avro_record(name: str, *fields: dict[str, Any]) -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "com.example",
                       "fields": list(fields)})


def test_avro_round_trip_and_evolution(cluster: DevCluster, client: SchemaRegistryClient,
                                       topic_name: str) -> None:
    v1 = avro_record("Click", {"name": "user_id", "type": "long"},
                     {"name": "page", "type": "string"})
    v2 = avro_record("Click", {"name": "user_id", "type": "long"},
                     {"name": "page", "type": "string"},
                     {"name": "referrer", "type": ["null", "string"], "default": None})
    first = AvroSerializer(client, v1, conf={"auto.register.schemas": True})
    second = AvroSerializer(client, v2, conf={"auto.register.schemas": True})
    values = [{"user_id": i, "page": f"/p{i}"} for i in range(5)]
    values += [{"user_id": 100 + i, "page": "/new", "referrer": f"r{i}"} for i in range(5)]

    def serialize(value: dict[str, Any], ctx: SerializationContext) -> bytes | None:
        return (second if "referrer" in value else first)(value, ctx)

    got = round_trip(cluster, topic_name, values, serialize, AvroDeserializer(client))
    assert got == values  # each record read with the schema it was written with
    subject = f"{topic_name}-value"
    assert client.get_versions(subject) == [1, 2]
    latest = client.get_latest_version(subject)
    assert latest.version == 2 and json.loads(latest.schema.schema_str)["fields"][2][
        "name"] == "referrer"
    # a reader with the latest schema reads the old records too (BACKWARD evolution)
    reader = AvroDeserializer(client, schema_str=v2)
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    assert reader(first(values[0], ctx), ctx) == {**values[0], "referrer": None}


def test_compatibility_refusals_per_level(client: SchemaRegistryClient) -> None:
    subject = f"levels-{uuid.uuid4().hex[:8]}"
    base = avro_record("L", {"name": "a", "type": "int"})
    added_required = avro_record("L", {"name": "a", "type": "int"},
                                 {"name": "b", "type": "string"})
    dropped = avro_record("L")
    client.register_schema(subject, Schema(base, "AVRO"))
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(added_required, "AVRO"))
    assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)
    assert not client.test_compatibility(subject, Schema(added_required, "AVRO"))
    assert client.test_compatibility(subject, Schema(dropped, "AVRO"))
    client.set_compatibility(subject, "FORWARD")
    assert client.get_compatibility(subject) == "FORWARD"
    assert client.test_compatibility(subject, Schema(added_required, "AVRO"))
    with pytest.raises(SchemaRegistryError) as forward:
        client.register_schema(subject, Schema(dropped, "AVRO"))
    assert forward.value.error_code == 409
    client.set_compatibility(subject, "NONE")
    assert client.register_schema(subject, Schema(dropped, "AVRO")) > 0
    assert client.get_versions(subject) == [1, 2]
    with pytest.raises(SchemaRegistryError) as invalid:
        client.set_compatibility(subject, "SOMETIMES")
    assert invalid.value.error_code == 42203


ORDER_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order", "type": "object",
    "properties": {"id": {"type": "string"}, "amount": {"type": "number"},
                   "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["id", "amount"],
}


def test_json_schema_round_trip(cluster: DevCluster, client: SchemaRegistryClient,
                                topic_name: str) -> None:
    text = json.dumps(ORDER_SCHEMA)
    serializer = JSONSerializer(text, client, conf={"auto.register.schemas": True})
    values = [{"id": f"o{i}", "amount": i * 1.5, "tags": ["a"] * i} for i in range(6)]
    got = round_trip(cluster, topic_name, values, serializer,
                     JSONDeserializer(None, schema_registry_client=client))
    assert got == values
    registered = client.get_latest_version(f"{topic_name}-value")
    assert registered.schema.schema_type == "JSON"
    with pytest.raises(Exception, match="amount"):  # the serializer validates, as usual
        serializer({"id": "x"}, SerializationContext(topic_name, MessageField.VALUE))


def _protobuf_classes() -> tuple[type[Any], type[Any]]:
    """``shop.Order`` (in shop/order.proto) importing ``shop.Money`` (shop/money.proto)."""
    pool = descriptor_pool.DescriptorPool()
    field = descriptor_pb2.FieldDescriptorProto
    money = descriptor_pb2.FileDescriptorProto(name="shop/money.proto", package="shop",
                                               syntax="proto3")
    message = money.message_type.add(name="Money")
    message.field.add(name="currency", number=1, type=field.TYPE_STRING,
                      label=field.LABEL_OPTIONAL)
    message.field.add(name="cents", number=2, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    order = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop",
                                               syntax="proto3", dependency=["shop/money.proto"])
    message = order.message_type.add(name="Order")
    message.field.add(name="id", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    message.field.add(name="total", number=2, type=field.TYPE_MESSAGE, type_name=".shop.Money",
                      label=field.LABEL_OPTIONAL)
    message.field.add(name="items", number=3, type=field.TYPE_STRING,
                      label=field.LABEL_REPEATED)
    pool.Add(money)
    pool.Add(order)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Money")))


def test_protobuf_round_trip_with_imports(cluster: DevCluster, client: SchemaRegistryClient,
                                          registry: RegistryProcess, topic_name: str) -> None:
    """The serializer registers shop/money.proto under its import path and the order schema
    with a reference to it (both as base64 FileDescriptorProtos); the deserializer fetches them
    with ``format=serialized``."""
    order_class, money_class = _protobuf_classes()
    serializer = ProtobufSerializer(order_class, client, conf={"use.deprecated.format": False})
    values = [order_class(id=f"o{i}", total=money_class(currency="EUR", cents=100 * i),
                          items=[f"i{j}" for j in range(i)]) for i in range(5)]
    got = round_trip(cluster, topic_name, values, serializer,
                     ProtobufDeserializer(order_class, {"use.deprecated.format": False}))
    assert got == values
    subject = f"{topic_name}-value"
    latest = client.get_latest_version(subject)
    assert [(r.name, r.subject, r.version) for r in latest.schema.references] == [
        ("shop/money.proto", "shop/money.proto", 1)]
    assert "message Order" in latest.schema.schema_str  # stored as .proto text
    assert "import \"shop/money.proto\"" in latest.schema.schema_str
    serialized = httpx.get(f"{registry.url}/schemas/ids/{latest.schema_id}",
                           params={"format": "serialized"}, timeout=30).json()
    proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized["schema"]))
    assert [m.name for m in proto.message_type] == ["Order"]
    assert list(proto.dependency) == ["shop/money.proto"]
    assert serialized["schemaType"] == "PROTOBUF"
    assert httpx.get(f"{registry.url}/subjects/shop%2Fmoney.proto/versions/1/referencedby",
                     timeout=30).json() == [latest.schema_id]


def test_avro_named_type_references(cluster: DevCluster, client: SchemaRegistryClient,
                                    topic_name: str) -> None:
    address_subject = f"address-{uuid.uuid4().hex[:8]}"
    address = avro_record("Address", {"name": "city", "type": "string"})
    person = avro_record("Person", {"name": "name", "type": "string"},
                         {"name": "home", "type": "com.example.Address"})
    client.register_schema(address_subject, Schema(address, "AVRO"))
    reference = SchemaReference("com.example.Address", address_subject, 1)
    subject = f"{topic_name}-value"
    client.register_schema(subject, Schema(person, "AVRO", [reference]))
    serializer = AvroSerializer(client, conf={"auto.register.schemas": False,
                                              "use.latest.version": True})
    values = [{"name": f"n{i}", "home": {"city": f"c{i}"}} for i in range(4)]
    got = round_trip(cluster, topic_name, values, serializer, AvroDeserializer(client))
    assert got == values
    with pytest.raises(SchemaRegistryError) as referenced:
        client.delete_version(address_subject, 1)
    assert referenced.value.error_code == 42206


def test_deletes_and_normalize(client: SchemaRegistryClient) -> None:
    subject = f"deletes-{uuid.uuid4().hex[:8]}"
    text = avro_record("D", {"name": "a", "type": "int"})
    schema_id = client.register_schema(subject, Schema(text, "AVRO"), normalize_schemas=True)
    spaced = json.dumps(json.loads(text), indent=2)
    assert client.register_schema(subject + "-n", Schema(spaced, "AVRO"),
                                  normalize_schemas=True) == schema_id
    with pytest.raises(SchemaRegistryError) as hard_first:
        client.delete_subject(subject, permanent=True)
    assert hard_first.value.error_code == 40405
    assert client.delete_subject(subject) == [1]
    assert subject not in client.get_subjects()
    assert client.lookup_schema(subject, Schema(text, "AVRO"), deleted=True).version == 1
    assert client.delete_subject(subject, permanent=True) == [1]
    with pytest.raises(SchemaRegistryError) as gone:
        client.get_versions(subject)
    assert gone.value.error_code == 40401
    fresh = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})  # no cache
    stored = json.loads(fresh.get_schema(schema_id).schema_str)  # the normalized form
    assert stored["name"] == "com.example.D" and stored["fields"] == [{"name": "a",
                                                                       "type": "int"}]


def test_modes_through_the_client(client: SchemaRegistryClient, tmp_path: Path) -> None:
    subject = f"mode-{uuid.uuid4().hex[:8]}"
    client.register_schema(subject, Schema(avro_record("M", {"name": "a", "type": "int"}),
                                           "AVRO"))
    assert client.update_mode(subject, "READONLY") == "READONLY"
    assert client.get_mode(subject) == "READONLY"
    with pytest.raises(SchemaRegistryError) as readonly:
        client.register_schema(subject, Schema(avro_record("M"), "AVRO"))
    assert readonly.value.error_code == 42205
    assert client.delete_mode(subject) == "READONLY"
    imported = f"import-{uuid.uuid4().hex[:8]}"
    assert client.update_mode(imported, "IMPORT") == "IMPORT"
    schema_id = 70_000 + uuid.uuid4().int % 10_000
    got = client._rest_client.post(f"subjects/{imported}/versions",
                                   body={"schema": avro_record("I"), "id": schema_id,
                                         "version": 3})
    assert got == {"id": schema_id, "version": 3}
    assert client.get_version(imported, 3).schema_id == schema_id
    client.delete_mode(imported)
