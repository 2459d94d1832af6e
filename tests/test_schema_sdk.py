"""The SDK's schema helpers (loglake/client/schema_serde.py) against a real broker and a real
``loglake registry`` process (``DevCluster(registry=True)``): Avro, JSON Schema and Protobuf
values (and keys) round-trip through SchemaProducer and SchemaConsumer, the bytes are what
confluent-kafka's own deserializers read, refusals of the registry surface as typed errors,
and undecodable records either raise or come back with their bytes and the reason.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from loglake.client import Consumer, Producer
from loglake.client.schema_registry import (
    RegistrySettings,
    SchemaRegistryConfigError,
    SchemaRegistryRequestError,
)
from loglake.client.schema_serde import (
    SchemaConsumer,
    SchemaProducer,
    SchemaSerdeError,
    registry_settings,
    schema_id_of,
)
from loglake.dev.harness import DevCluster
from loglake.schemas.parse import message_class, parse
from tests.admin_util import create_topic

CLICK_V1 = json.dumps({"type": "record", "name": "Click", "namespace": "test.sdk", "fields": [
    {"name": "user_id", "type": "long"}, {"name": "page", "type": "string"}]})
CLICK_V2 = json.dumps({"type": "record", "name": "Click", "namespace": "test.sdk", "fields": [
    {"name": "user_id", "type": "long"}, {"name": "page", "type": "string"},
    {"name": "referrer", "type": ["null", "string"], "default": None}]})
CLICK_BREAKING = json.dumps({"type": "record", "name": "Click", "namespace": "test.sdk",
                             "fields": [{"name": "user_id", "type": "long"},
                                        {"name": "page", "type": "string"},
                                        {"name": "country", "type": "string"}]})
ORDER_JSON = json.dumps({"type": "object", "properties": {
    "id": {"type": "integer"}, "amount": {"type": "number"}}, "required": ["id"]})
PROTO = """syntax = "proto3";
package test.sdk;
message Reading { string sensor = 1; double celsius = 2; repeated int64 samples = 3; }
"""
COMMON_PROTO = 'syntax = "proto3";\npackage test.common;\nmessage Money { int64 cents = 1; }\n'
ORDER_PROTO = ('syntax = "proto3";\npackage test.sdk;\nimport "common.proto";\n'
               'message Order { string id = 1; }\n'
               'message Line { string sku = 1; test.common.Money price = 2; }\n')


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("schema-sdk")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts, registry=True) as cluster:
        yield cluster


@pytest.fixture
def topic(dev: DevCluster) -> str:
    name = f"sdk-{uuid.uuid4().hex[:10]}"
    create_topic(dev.bootstrap_servers, name)
    return name


def consume_all(dev: DevCluster, topic: str, count: int, **options: Any) -> list[Any]:
    with SchemaConsumer(dev.bootstrap_servers, registry=dev.registry_url, **options) as consumer:
        consumer.assign(topic, start="earliest")
        records = list(consumer.consume(count, timeout=20))
    assert len(records) == count
    return records


def test_avro_round_trip_and_confluent_deserializer_reads_the_bytes(dev: DevCluster,
                                                                   topic: str) -> None:
    values = [{"user_id": i, "page": f"/p/{i}"} for i in range(5)]
    with SchemaProducer(dev.bootstrap_servers, registry=dev.registry_url,
                        value_schema=CLICK_V1, key_schema='"string"') as producer:
        for value in values:
            producer.send(topic, value, key=f"user-{value['user_id']}")
        producer.flush()
    records = consume_all(dev, topic, 5, key_format="registry")
    assert [r.value for r in records] == values
    assert [r.key for r in records] == [f"user-{i}" for i in range(5)]
    client = SchemaRegistryClient({"url": dev.registry_url})
    registered = client.get_latest_version(f"{topic}-value")
    assert {r.value_schema_id for r in records} == {registered.schema_id}
    assert records[0].key_schema_id == client.get_latest_version(f"{topic}-key").schema_id
    assert records[0].error is None and records[0].value_bytes is not None
    plain = AvroDeserializer(client)(records[0].value_bytes,
                                     SerializationContext(topic, MessageField.VALUE))
    assert plain == values[0]


def test_evolution_compatible_accepted_breaking_refused_with_409(dev: DevCluster,
                                                                topic: str) -> None:
    with SchemaProducer(dev.bootstrap_servers, registry=dev.registry_url,
                        value_schema=CLICK_V1) as first:
        first.send_and_wait(topic, {"user_id": 1, "page": "/"}, timeout=20)
    with SchemaProducer(dev.bootstrap_servers, registry=dev.registry_url,
                        value_schema=CLICK_V2) as second:
        second.send_and_wait(topic, {"user_id": 2, "page": "/b", "referrer": "x"}, timeout=20)
    with SchemaProducer(dev.bootstrap_servers, registry=dev.registry_url,
                        value_schema=CLICK_BREAKING) as breaking, \
            pytest.raises(SchemaRegistryRequestError) as refused:
        breaking.send(topic, {"user_id": 3, "page": "/c", "country": "NL"})
    assert refused.value.error_code == 409 and refused.value.status == 409
    records = consume_all(dev, topic, 2)
    assert records[0].value == {"user_id": 1, "page": "/"}
    assert records[1].value == {"user_id": 2, "page": "/b", "referrer": "x"}
    assert records[0].value_schema_id != records[1].value_schema_id


def test_subject_latest_version_and_no_auto_register(dev: DevCluster, topic: str) -> None:
    subject = f"shared-{uuid.uuid4().hex[:6]}"
    with pytest.raises(SchemaRegistryRequestError) as missing, \
            SchemaProducer(dev.bootstrap_servers, registry=dev.registry_url,
                           value_schema=CLICK_V1, value_subject=subject,
                           auto_register=False) as unregistered:
        unregistered.send(topic, {"user_id": 1, "page": "/"})
    assert missing.value.error_code in (40401, 40403)
    client = SchemaRegistryClient({"url": dev.registry_url})
    from confluent_kafka.schema_registry import Schema

    schema_id = client.register_schema(subject, Schema(CLICK_V2, "AVRO"))
    with SchemaProducer(dev.bootstrap_servers, registry=dev.registry_url,
                        value_subject=subject) as latest:
        latest.send_and_wait(topic, {"user_id": 9, "page": "/z", "referrer": None}, timeout=20)
    record = consume_all(dev, topic, 1)[0]
    assert record.value_schema_id == schema_id
    assert record.value == {"user_id": 9, "page": "/z", "referrer": None}


def test_json_schema_values(dev: DevCluster, topic: str) -> None:
    with SchemaProducer(dev.bootstrap_servers, registry=dev.registry_url,
                        value_schema=ORDER_JSON, schema_type="JSON") as producer:
        producer.send(topic, {"id": 1, "amount": 9.5})
        producer.send(topic, {"id": 2})
        with pytest.raises(SchemaSerdeError, match="cannot serialize a value"):
            producer.send(topic, {"amount": 1.0})  # "id" is required: the schema refuses it
        producer.flush()
    records = consume_all(dev, topic, 2)
    assert [r.value for r in records] == [{"id": 1, "amount": 9.5}, {"id": 2}]


def test_protobuf_values(dev: DevCluster, topic: str) -> None:
    reading = message_class(parse("PROTOBUF", PROTO, {}), [0])
    with SchemaProducer(dev.bootstrap_servers, registry=dev.registry_url,
                        value_schema=reading) as producer:
        producer.send(topic, reading(sensor="s1", celsius=21.5, samples=[1, 2, 3]))
        producer.flush()
    record = consume_all(dev, topic, 1, value_protobuf=reading)[0]
    assert isinstance(record.value, reading)
    assert (record.value.sensor, record.value.celsius, list(record.value.samples)) == (
        "s1", 21.5, [1, 2, 3])
    dynamic = consume_all(dev, topic, 1)[0].value  # a class built from the registered .proto
    assert type(dynamic).DESCRIPTOR.full_name == "test.sdk.Reading"
    assert (dynamic.sensor, dynamic.celsius, list(dynamic.samples)) == ("s1", 21.5, [1, 2, 3])


def test_protobuf_import_and_second_message_decoded_without_a_class(dev: DevCluster,
                                                                    topic: str) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaReference

    client = SchemaRegistryClient({"url": dev.registry_url})
    common = f"{topic}-common"
    client.register_schema(common, Schema(COMMON_PROTO, "PROTOBUF"))
    order_schema = Schema(ORDER_PROTO, "PROTOBUF", [SchemaReference("common.proto", common, 1)])
    parsed = parse("PROTOBUF", ORDER_PROTO, {"common.proto": _registered(COMMON_PROTO)})
    line = message_class(parsed, [1])  # the second message of the file: indexes [1]
    schema_id = client.register_schema(f"{topic}-value", order_schema)
    from loglake.schemas.wire import frame

    message = line(sku="a-1", price={"cents": 250})
    with Producer(dev.bootstrap_servers) as plain:  # framed as Confluent's serializer does
        plain.send(topic, frame(schema_id, message.SerializeToString(), [1]))
    decoded = consume_all(dev, topic, 1)[0]
    assert decoded.value_schema_id == schema_id
    assert type(decoded.value).DESCRIPTOR.full_name == "test.sdk.Line"
    assert (decoded.value.sku, decoded.value.price.cents) == ("a-1", 250)


def _registered(text: str) -> Any:
    from loglake.schemas.model import RegisteredSchema

    return RegisteredSchema(0, "PROTOBUF", text, ())


def test_undecodable_records_raise_or_are_kept_with_the_reason(dev: DevCluster,
                                                              topic: str) -> None:
    with Producer(dev.bootstrap_servers) as plain:
        plain.send(topic, b'{"not": "framed"}')
        plain.send(topic, b"\x00\x00\x0f\x42\x40garbage")  # framed, id 1000000: unknown
        plain.send(topic, None)
    with pytest.raises(SchemaSerdeError, match=r"@0 is not framed with a schema id"):
        consume_all(dev, topic, 3)
    kept = consume_all(dev, topic, 3, on_error="keep")
    assert kept[0].value is None and kept[0].value_bytes == b'{"not": "framed"}'
    assert "magic byte 0x7b" in (kept[0].error or "")
    assert kept[1].value_schema_id == 1_000_000 and "schema id 1000000" in (kept[1].error or "")
    assert kept[2].value is None and kept[2].error is None  # a tombstone decodes to None
    raw = consume_all(dev, topic, 3, value_format="raw")
    assert raw[0].value == b'{"not": "framed"}' and raw[0].value_schema_id is None


def test_plain_clients_unchanged_and_registry_settings(dev: DevCluster, topic: str,
                                                       tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    with SchemaProducer(dev.bootstrap_servers, registry=dev.registry_url,
                        value_schema=CLICK_V1) as producer:
        key_bytes, value_bytes = producer.serialize(topic, {"user_id": 4, "page": "/"},
                                                    key=b"raw-key")
        assert key_bytes == b"raw-key" and schema_id_of(value_bytes) is not None
        with pytest.raises(SchemaSerdeError, match="no key schema"):
            producer.send(topic, {"user_id": 4, "page": "/"}, key={"not": "bytes"})
        producer.send_and_wait(topic, {"user_id": 4, "page": "/"}, key="k", timeout=20)
    with Consumer(dev.bootstrap_servers) as consumer:  # the plain consumer sees the bytes
        consumer.assign(topic, start="earliest")
        record = next(consumer.consume(1, timeout=20))
    assert record.key == b"k" and record.value == value_bytes
    # where the registry comes from
    monkeypatch.delenv("LOGLAKE_SCHEMA_REGISTRY_URL", raising=False)
    with pytest.raises(SchemaRegistryConfigError, match="no schema registry"):
        registry_settings(None)
    monkeypatch.setenv("LOGLAKE_SCHEMA_REGISTRY_URL", dev.registry_url)
    assert registry_settings(None).url == dev.registry_url
    props = {"schema.registry.url": "https://h:1/", "basic.auth.user.info": "u:p",
             "ssl.ca.location": "ca.pem", "security.protocol": "SSL"}
    settings = registry_settings(None, props)
    assert (settings.url, settings.user_info, settings.ca_location) == (
        "https://h:1", "u:p", "ca.pem")
    assert "u:p" not in repr(settings)
    assert settings.client_conf() == {"url": "https://h:1", "basic.auth.user.info": "u:p",
                                      "ssl.ca.location": "ca.pem"}
    java_form = {"schema.registry.url": "https://h:1", "basic.auth.credentials.source":
                 "USER_INFO", "basic.auth.user.info": "admin:pw",
                 "schema.registry.ssl.truststore.type": "PEM",
                 "schema.registry.ssl.truststore.location": "ca.pem"}
    assert registry_settings(java_form).client_conf() == {
        "url": "https://h:1", "basic.auth.user.info": "admin:pw", "ssl.ca.location": "ca.pem"}
    with pytest.raises(SchemaRegistryConfigError, match="USER:PASSWORD"):
        RegistrySettings.from_properties({"schema.registry.url": "http://h",
                                          "basic.auth.user.info": "nocolon"})
    from loglake.client.security import SecurityConfig

    assert "schema.registry.url" not in SecurityConfig.from_properties(props).other
