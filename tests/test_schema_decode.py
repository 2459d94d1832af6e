"""Decoding framed keys/values into typed Arrow columns (loglake/schemas/: wire, arrow_types,
decode, encode, schema_set, typed_sides): in-process and fast.

Records are produced by the libraries' own writers (confluent-kafka's Avro/JSON/Protobuf
serializers against confluent-kafka's in-process mock registry, fastavro, protobuf) and decoded
with loglake's decoders; encode_rows output is read back by confluent-kafka's deserializers."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import pickle
import uuid
from collections.abc import Sequence
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loglake.config import TopicConfig
from loglake.errors import IncompatibleTypeError
from loglake.schemas import wire
from loglake.schemas.arrow_types import arrow_type, fit_error, merge_types, same_type, side_type
from loglake.schemas.decode import decode_column, typed_columns
from loglake.schemas.encode import SchemaEncodeError, encode_rows
from loglake.schemas.model import RegisteredSchema, SchemaReference, SubjectVersion
from loglake.schemas.schema_set import SchemaSet, resolve_references
from loglake.schemas.typed_sides import TypedSides, typed_sides

FAST = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
CTX = SerializationContext("clicks", MessageField.VALUE)

CLICK_V1 = {"type": "record", "name": "Click", "namespace": "ex", "fields": [
    {"name": "user_id", "type": "long"}, {"name": "url", "type": "string"},
    {"name": "count", "type": "int"}, {"name": "score", "type": "double"},
    {"name": "ok", "type": "boolean"}, {"name": "tags", "type": {"type": "array",
                                                                "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
    {"name": "ref", "type": ["null", "string"], "default": None},
    {"name": "raw", "type": "bytes"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}}]}
CLICK_V2 = {**CLICK_V1, "fields": [*CLICK_V1["fields"],
                                   {"name": "region", "type": ["null", "string"],
                                    "default": None}]}
CLICK_V1_RECORD = {"user_id": 1, "url": "u", "count": 1, "score": 1.0, "ok": True, "tags": [],
                   "attrs": {}, "ref": None, "raw": b"", "kind": "A"}


def _registry() -> Any:
    return SchemaRegistryClient.new_client({"url": f"mock://decode-{uuid.uuid4().hex}"})


def _snapshot(client: Any, subjects: tuple[str, ...] = ()) -> SchemaSet:
    """What the mock registry holds, as loglake's SchemaSet (ids, references, versions)."""
    out = SchemaSet()
    for subject in subjects or tuple(client.get_subjects()):
        versions = []
        for version in sorted(client.get_versions(subject)):
            registered = client.get_version(subject, version)
            versions.append(SubjectVersion(subject, version, registered.schema_id))
        out.subject_versions[subject] = versions
    for subject in tuple(client.get_subjects()):
        for version in client.get_versions(subject):
            registered = client.get_version(subject, version)
            schema = registered.schema
            reg = RegisteredSchema(
                registered.schema_id, schema.schema_type or "AVRO", schema.schema_str,
                tuple(SchemaReference(r.name, r.subject, r.version)
                      for r in schema.references or ()))
            out.by_id[reg.id] = reg
            out.by_reference[(subject, version)] = reg
    return out


def _binary(values: Sequence[bytes | None]) -> pa.Array:
    return pa.array(values, type=pa.binary())


# -- wire ------------------------------------------------------------------------------------

@FAST
@given(st.integers(-2**31, 2**31 - 1), st.binary(max_size=40))
def test_frame_unframe_round_trip(schema_id: int, payload: bytes) -> None:
    framed = wire.frame(schema_id, payload)
    assert wire.schema_id_of(framed) == schema_id
    assert wire.unframe(framed) == (schema_id, payload)


@FAST
@given(st.lists(st.one_of(st.none(), st.binary(max_size=9),
                          st.builds(wire.frame, st.integers(-2**31, 2**31 - 1),
                                    st.binary(max_size=5))), max_size=30),
       st.integers(0, 5), st.booleans())
def test_schema_ids_vectorised_agrees_with_per_value(values: list[bytes | None], cut: int,
                                                      large: bool) -> None:
    array = pa.array(values, type=pa.large_binary() if large else pa.binary())
    array = array.slice(min(cut, len(values)))
    expected = [wire.schema_id_of(v) for v in values[min(cut, len(values)):]]
    assert wire.schema_ids(array).to_pylist() == expected


@FAST
@given(st.lists(st.integers(0, 300), min_size=1, max_size=5), st.binary(max_size=10))
def test_protobuf_message_indexes_round_trip(indexes: list[int], payload: bytes) -> None:
    framed = wire.frame(3, payload, indexes)
    body = wire.unframe(framed).body
    assert wire.message_indexes(body) == (indexes, payload)
    if indexes == [0]:
        assert framed[5:6] == b"\x00"


def test_not_framed_reasons() -> None:
    assert wire.not_framed_reason(b"{}") == "not framed: magic byte 0x7b"
    assert wire.not_framed_reason(b"\x00\x01") == "not framed: only 2 bytes"
    assert wire.not_framed_reason(b"") == "not framed: empty"
    assert wire.schema_id_of(None) is None


# -- Avro ------------------------------------------------------------------------------------

_CLICKS = st.fixed_dictionaries({
    "user_id": st.integers(-2**63, 2**63 - 1), "url": st.text(max_size=20),
    "count": st.integers(-2**31, 2**31 - 1),
    "score": st.floats(allow_nan=False, width=64), "ok": st.booleans(),
    "tags": st.lists(st.text(max_size=5), max_size=3),
    "attrs": st.dictionaries(st.text(max_size=5), st.integers(-2**63, 2**63 - 1), max_size=3),
    "ref": st.one_of(st.none(), st.text(max_size=8)), "raw": st.binary(max_size=8),
    "kind": st.sampled_from(["A", "B"])})


@FAST
@given(st.lists(_CLICKS, min_size=1, max_size=20))
def test_avro_records_from_confluent_serializer_decode_to_columns(
        clicks: list[dict[str, Any]]) -> None:
    client = _registry()
    serializer = AvroSerializer(client, json.dumps(CLICK_V1))
    values = [serializer(c, CTX) for c in clicks]
    source = _snapshot(client)
    schema = source.schema(wire.schema_id_of(values[0]) or 0)
    assert schema is not None
    target = arrow_type(schema, source)
    decoded = decode_column(_binary(values), target, source)
    assert decoded.errors.null_count == len(clicks)
    assert decoded.schema_ids.to_pylist() == [schema.id] * len(clicks)
    rows = decoded.typed.to_pylist()
    for row, click in zip(rows, clicks, strict=True):
        assert {**row, "attrs": dict(row["attrs"])} == click
    # and back: encode_rows -> confluent's deserializer gives the same records
    deserializer = AvroDeserializer(client)
    for framed, click in zip(encode_rows(decoded.typed, schema, source), clicks, strict=True):
        assert deserializer(framed, CTX) == click


def test_avro_type_mapping() -> None:
    schema = {"type": "record", "name": "T", "fields": [
        {"name": "i", "type": "int"}, {"name": "f", "type": "float"},
        {"name": "u", "type": ["int", "string", {"type": "record", "name": "R",
                                                  "fields": [{"name": "x", "type": "int"}]}]},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "d", "type": {"type": "int", "logicalType": "date"}},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                                 "scale": 2}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "fx", "type": {"type": "fixed", "name": "F4", "size": 4}},
        {"name": "next", "type": ["null", "T"], "default": None}]}
    source = SchemaSet({1: RegisteredSchema(1, "AVRO", json.dumps(schema))})
    target = arrow_type(source.by_id[1], source)
    assert target == pa.struct([
        ("i", pa.int64()), ("f", pa.float64()),
        ("u", pa.struct([("int", pa.int64()), ("string", pa.string()),
                         ("R", pa.struct([("x", pa.int64())]))])),
        ("ts", pa.timestamp("us", tz="UTC")), ("d", pa.date32()),
        ("dec", pa.decimal128(9, 2)), ("id", pa.string()), ("fx", pa.binary()),
        ("next", pa.string())])  # the recursion holds the inner record as JSON text
    parsed = fastavro.parse_schema(schema)
    when = datetime.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=datetime.UTC)
    ident = uuid.uuid4()
    rows = [{"i": 1, "f": 0.5, "u": "s", "ts": when, "d": datetime.date(2024, 1, 2),
             "dec": decimal.Decimal("12.34"), "id": str(ident), "fx": b"abcd",
             "next": {"i": 2, "f": 1.0, "u": {"x": 7}, "ts": when, "d": datetime.date(2024, 1, 3),
                      "dec": decimal.Decimal("0.01"), "id": str(ident), "fx": b"wxyz",
                      "next": None}}]
    values = []
    for row in rows:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, row)
        values.append(wire.frame(1, out.getvalue()))
    decoded = decode_column(_binary(values), target, source)
    assert decoded.errors.to_pylist() == [None]
    got = decoded.typed.to_pylist()[0]
    assert got["u"] == {"int": None, "string": "s", "R": None}
    assert got["ts"] == when and got["dec"] == decimal.Decimal("12.34")
    assert got["id"] == str(ident)
    assert json.loads(got["next"])["u"] == {"x": 7}


def test_avro_evolution_merges_and_old_records_read_null() -> None:
    client = _registry()
    v1 = AvroSerializer(client, json.dumps(CLICK_V1))
    old = v1(CLICK_V1_RECORD, CTX)
    new = AvroSerializer(client, json.dumps(CLICK_V2))({**CLICK_V1_RECORD, "region": "eu"}, CTX)
    source = _snapshot(client)
    versions = [v.id for v in source.versions("clicks-value")]
    assert len(versions) == 2
    target = side_type(None, versions, [], source)
    assert target is not None
    assert target.names[-1] == "region"
    # a table typed by v1 alone widens when v2 shows up in the records, v1's order kept
    first = side_type(None, versions[:1], [], source)
    assert first is not None and "region" not in first.names
    widened = side_type(first, [], [wire.schema_id_of(new) or 0], source)
    assert widened is not None and same_type(widened, target)
    decoded = decode_column(_binary([old, new]), target, source)
    assert decoded.errors.to_pylist() == [None, None]
    assert [r["region"] for r in decoded.typed.to_pylist()] == [None, "eu"]
    # v2 records do not fit the v1 column: they say so, v1 rows decode
    narrow = decode_column(_binary([old, new]), first, source)
    errors = narrow.errors.to_pylist()
    assert errors[0] is None
    assert errors[1] is not None and "does not fit the table column" in errors[1]


# -- JSON Schema -----------------------------------------------------------------------------

PERSON_JSON = {"type": "object", "properties": {
    "id": {"type": "integer"}, "name": {"type": "string"},
    "score": {"type": ["null", "number"]}, "tags": {"type": "array",
                                                    "items": {"type": "string"}},
    "address": {"$ref": "#/definitions/Address"},
    "extra": {"oneOf": [{"type": "string"}, {"type": "integer"}]}},
    "required": ["id"],
    "definitions": {"Address": {"type": "object", "properties": {
        "city": {"type": "string"}, "zip": {"type": "integer"}}}}}
_PEOPLE = st.fixed_dictionaries(
    {"id": st.integers(-2**63, 2**63 - 1)},
    optional={"name": st.text(max_size=10),
              "score": st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)),
              "tags": st.lists(st.text(max_size=4), max_size=3),
              "address": st.fixed_dictionaries({"city": st.text(max_size=5),
                                                "zip": st.integers(0, 99999)}),
              "extra": st.one_of(st.text(max_size=4), st.integers(0, 9))})


@FAST
@given(st.lists(_PEOPLE, min_size=1, max_size=15))
def test_json_records_from_confluent_serializer_decode_to_columns(
        people: list[dict[str, Any]]) -> None:
    client = _registry()
    serializer = JSONSerializer(json.dumps(PERSON_JSON), client)
    values = [serializer(p, CTX) for p in people]
    source = _snapshot(client)
    schema = source.schema(wire.schema_id_of(values[0]) or 0)
    assert schema is not None
    target = arrow_type(schema, source)
    assert target.field("address").type == pa.struct([("city", pa.string()),
                                                      ("zip", pa.int64())])
    assert target.field("extra").type == pa.string()  # alternatives of different types
    decoded = decode_column(_binary(values), target, source)
    assert decoded.errors.null_count == len(people)
    for row, person in zip(decoded.typed.to_pylist(), people, strict=True):
        for key in ("id", "name", "score", "tags", "address"):
            assert row[key] == person.get(key)
        assert row["extra"] == (None if "extra" not in person else json.dumps(person["extra"]))
    deserializer = JSONDeserializer(json.dumps(PERSON_JSON), schema_registry_client=client)
    for framed, row in zip(encode_rows(decoded.typed, schema, source), decoded.typed.to_pylist(),
                           strict=True):
        back = deserializer(framed, CTX)
        assert back["id"] == row["id"] and back.get("address") == row["address"]


def test_json_values_that_do_not_fit_their_column_are_row_errors() -> None:
    source = SchemaSet({4: RegisteredSchema(4, "JSON", json.dumps(PERSON_JSON))})
    target = arrow_type(source.by_id[4], source)
    values = [wire.frame(4, json.dumps(v).encode()) for v in
              ({"id": 1}, {"id": "x"}, {"id": 2, "address": {"zip": "n"}}, {"id": 1.5})]
    values.append(wire.frame(4, b"{not json"))
    errors = decode_column(_binary(values), target, source).errors.to_pylist()
    assert errors[0] is None
    assert errors[1] == "schema id 4 (JSON): id: expected integer, got string"
    assert errors[2] == "schema id 4 (JSON): address: zip: expected integer, got string"
    assert errors[3] == "schema id 4 (JSON): id: expected integer, got number"
    assert errors[4] is not None and errors[4].startswith("schema id 4 (JSON): ")
    with pytest.raises(SchemaEncodeError, match="row 0"):
        encode_rows([{"id": "nope"}], source.by_id[4], source)


def test_json_reference_by_name() -> None:
    address = RegisteredSchema(10, "JSON", json.dumps(
        PERSON_JSON["definitions"]["Address"]))  # type: ignore[index]
    person = RegisteredSchema(11, "JSON", json.dumps({
        "type": "object", "properties": {"home": {"$ref": "address.json"}}}),
        (SchemaReference("address.json", "address", 1),))
    source = SchemaSet({10: address, 11: person}, {("address", 1): address})
    assert resolve_references(person, source) == {"address.json": address}
    target = arrow_type(person, source)
    assert target == pa.struct([("home", pa.struct([("city", pa.string()),
                                                     ("zip", pa.int64())]))])


# -- Protobuf --------------------------------------------------------------------------------

def _click_proto() -> Any:
    """A Click message class (nested message, map, enum, uint64, Timestamp, repeated,
    proto3 optional) and a second top-level message, built from a FileDescriptorProto."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="click.proto", package="ex", syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"])
    field = descriptor_pb2.FieldDescriptorProto
    click = fdp.message_type.add(name="Click")
    page = click.nested_type.add(name="Page")
    page.field.add(name="path", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    entry = click.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    enum = fdp.enum_type.add(name="Kind")
    enum.value.add(name="KIND_A", number=0)
    enum.value.add(name="KIND_B", number=1)
    for name, number, kind, extra in (
            ("user_id", 1, field.TYPE_INT64, {}), ("url", 2, field.TYPE_STRING, {}),
            ("big", 3, field.TYPE_UINT64, {}), ("score", 4, field.TYPE_DOUBLE, {}),
            ("kind", 5, field.TYPE_ENUM, {"type_name": ".ex.Kind"}),
            ("page", 6, field.TYPE_MESSAGE, {"type_name": ".ex.Click.Page"}),
            ("at", 7, field.TYPE_MESSAGE, {"type_name": ".google.protobuf.Timestamp"}),
            ("raw", 9, field.TYPE_BYTES, {})):
        click.field.add(name=name, number=number, type=kind, label=field.LABEL_OPTIONAL,
                        **extra)
    click.field.add(name="tags", number=8, type=field.TYPE_STRING, label=field.LABEL_REPEATED)
    click.field.add(name="attrs", number=10, type=field.TYPE_MESSAGE,
                    label=field.LABEL_REPEATED, type_name=".ex.Click.AttrsEntry")
    other = fdp.message_type.add(name="Other")
    other.field.add(name="note", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(
        timestamp_pb2.DESCRIPTOR.serialized_pb))
    pool.Add(fdp)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("ex.Click")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("ex.Other")))


_PROTO_CLICKS = st.fixed_dictionaries({
    "user_id": st.integers(-2**63, 2**63 - 1), "url": st.text(max_size=10),
    "big": st.integers(0, 2**64 - 1), "score": st.floats(allow_nan=False),
    "kind": st.sampled_from(["KIND_A", "KIND_B"]),
    "page": st.one_of(st.none(), st.builds(lambda p: {"path": p}, st.text(max_size=5))),
    "at": st.one_of(st.none(), st.datetimes(
        min_value=datetime.datetime(1970, 1, 1), max_value=datetime.datetime(2100, 1, 1),
        timezones=st.just(datetime.UTC))),
    "tags": st.lists(st.text(max_size=4), max_size=3),
    "raw": st.binary(max_size=6),
    "attrs": st.dictionaries(st.text(max_size=4), st.integers(-5, 5), max_size=3)})


@FAST
@given(st.lists(_PROTO_CLICKS, min_size=1, max_size=10))
def test_protobuf_records_from_confluent_serializer_decode_to_columns(
        clicks: list[dict[str, Any]]) -> None:
    click_cls, _ = _click_proto()
    client = _registry()
    serializer = ProtobufSerializer(click_cls, client, {"use.deprecated.format": False})
    messages = []
    for c in clicks:
        message = click_cls(user_id=c["user_id"], url=c["url"], big=c["big"],
                            score=c["score"], kind=c["kind"], tags=c["tags"], raw=c["raw"])
        message.attrs.update(c["attrs"])
        if c["page"] is not None:
            message.page.path = c["page"]["path"]
        if c["at"] is not None:
            message.at.FromDatetime(c["at"])
        messages.append(message)
    values = [serializer(m, CTX) for m in messages]
    source = _snapshot(client)
    schema = source.schema(wire.schema_id_of(values[0]) or 0)
    assert schema is not None
    target = arrow_type(schema, source)
    assert target.field("big").type == pa.int64()
    assert target.field("at").type == pa.timestamp("us", tz="UTC")
    decoded = decode_column(_binary(values), target, source)
    assert decoded.errors.null_count == len(clicks)
    for row, c in zip(decoded.typed.to_pylist(), clicks, strict=True):
        assert row["user_id"] == c["user_id"] and row["url"] == c["url"]
        assert row["big"] % 2**64 == c["big"]  # uint64 keeps its 64 bits in int64
        assert row["kind"] == c["kind"] and row["page"] == c["page"]
        assert row["tags"] == c["tags"] and dict(row["attrs"]) == c["attrs"]
        assert row["raw"] == c["raw"]
        if c["at"] is not None:
            assert row["at"] == c["at"].replace(microsecond=c["at"].microsecond)
    deserializer = ProtobufDeserializer(click_cls, {"use.deprecated.format": False})
    for framed, message in zip(encode_rows(decoded.typed, schema, source), messages,
                               strict=True):
        assert deserializer(framed, CTX) == message


def test_protobuf_second_message_and_imports_by_reference() -> None:
    _, other_cls = _click_proto()
    client = _registry()
    value = ProtobufSerializer(other_cls, client, {"use.deprecated.format": False})(
        other_cls(note="hi"), CTX)
    assert value[5:7] == b"\x02\x02"  # message indexes [1]
    source = _snapshot(client)
    schema = source.schema(wire.schema_id_of(value) or 0)
    assert schema is not None
    # the schema's column is its first message (Click); Other does not fit it
    decoded = decode_column(_binary([value]), arrow_type(schema, source), source)
    assert "does not fit the table column" in (decoded.errors[0].as_py() or "")
    note = pa.struct([("note", pa.string())])
    assert decode_column(_binary([value]), note, source).typed.to_pylist() == [{"note": "hi"}]
    # .proto text importing another subject's file (the reference name is the import path)
    common = RegisteredSchema(20, "PROTOBUF", 'syntax = "proto3"; package common;\n'
                              'message Money { int64 cents = 1; string currency = 2; }')
    order = RegisteredSchema(21, "PROTOBUF", 'syntax = "proto3"; package shop;\n'
                             'import "common/money.proto";\n'
                             'message Order { string id = 1; common.Money total = 2; }',
                             (SchemaReference("common/money.proto", "money", 1),))
    refs = SchemaSet({20: common, 21: order}, {("money", 1): common})
    assert arrow_type(order, refs) == pa.struct([
        ("id", pa.string()),
        ("total", pa.struct([("cents", pa.int64()), ("currency", pa.string())]))])
    framed = encode_rows([{"id": "o1", "total": {"cents": 250, "currency": "EUR"}}], order,
                         refs)
    back = decode_column(_binary(framed), arrow_type(order, refs), refs)
    assert back.typed.to_pylist() == [{"id": "o1", "total": {"cents": 250,
                                                             "currency": "EUR"}}]


# -- errors never raise ----------------------------------------------------------------------

def test_bad_records_get_row_errors_and_never_raise() -> None:
    client = _registry()
    good = AvroSerializer(client, json.dumps(CLICK_V1))
    ok = good(CLICK_V1_RECORD, CTX)
    schema_id = wire.schema_id_of(ok) or 0
    source = _snapshot(client)
    broken = RegisteredSchema(99, "AVRO", "{not a schema")
    source.by_id[99] = broken
    values = [ok, b"plain text", None, wire.frame(12345, b"x"), ok[:7],
              ok + b"\x01\x02", wire.frame(99, b"\x02"), b"\x00\x01"]
    target = arrow_type(source.by_id[schema_id], source)
    decoded = decode_column(_binary(values), target, source)
    errors = decoded.errors.to_pylist()
    assert errors[0] is None and errors[2] is None
    assert errors[1] == "not framed: magic byte 0x70"
    assert errors[3] == "unknown schema id 12345"
    assert errors[4] is not None and errors[4].startswith(f"schema id {schema_id} (AVRO): ")
    assert errors[5] == f"schema id {schema_id} (AVRO): 2 bytes after the Avro value"
    assert errors[6] is not None and errors[6].startswith("schema id 99 (AVRO): Invalid schema")
    assert errors[7] == "not framed: only 2 bytes"
    assert decoded.schema_ids.to_pylist() == [schema_id, None, None, 12345, schema_id,
                                              schema_id, 99, None]
    assert decoded.typed.is_valid().to_pylist() == [True] + [False] * 7
    # a schema whose field type changed does not fit: its rows say why
    changed = {**CLICK_V1, "fields": [{"name": "user_id", "type": "string"}]}
    source.by_id[50] = RegisteredSchema(50, "AVRO", json.dumps(changed))
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(changed), {"user_id": "x"})
    wrong = decode_column(_binary([wire.frame(50, out.getvalue())]), target, source)
    assert wrong.errors.to_pylist() == [
        "schema id 50 does not fit the table column: field user_id: int64 cannot hold string"]


def test_typed_columns_adds_the_contract_columns_and_skips_control_rows() -> None:
    source = SchemaSet({1: RegisteredSchema(1, "AVRO", '"string"'),
                        2: RegisteredSchema(2, "AVRO", '"long"')})
    text = encode_rows(["a", "b"], source.by_id[1], source)
    key = encode_rows([7, 8], source.by_id[2], source)
    rows = pa.table({"offset": [0, 1, 2], "key": pa.array([key[0], key[1], None], pa.binary()),
                     "value": pa.array([text[0], b"junk", text[1]], pa.binary()),
                     "is_control": [False, False, True]})
    out = typed_columns(rows, {"value": pa.string(), "key": pa.int64()}, source)
    assert out.column_names == ["offset", "key", "value", "is_control", "value_typed",
                                "value_schema_id", "value_error", "key_typed",
                                "key_schema_id", "key_error"]
    assert out.column("value_typed").to_pylist() == ["a", None, None]
    assert out.column("value_error").to_pylist() == [None, "not framed: magic byte 0x6a",
                                                     None]
    assert out.column("value_schema_id").to_pylist() == [1, None, None]
    assert out.column("key_typed").to_pylist() == [7, 8, None]
    assert typed_columns(rows, {"value": None}, source).column_names == rows.column_names


# -- types -----------------------------------------------------------------------------------

def test_merge_types_appends_fields_and_names_the_conflict() -> None:
    old = pa.struct([("a", pa.int64()), ("s", pa.struct([("x", pa.string())]))])
    new = pa.struct([("b", pa.string()), ("s", pa.struct([("y", pa.float64()),
                                                          ("x", pa.large_string())]))])
    merged = merge_types(old, new)
    assert merged == pa.struct([("a", pa.int64()),
                                ("s", pa.struct([("x", pa.string()), ("y", pa.float64())])),
                                ("b", pa.string())])
    assert merge_types(None, new) is new and merge_types(merged, pa.null()) is merged
    assert merge_types(pa.list_(pa.field("element", pa.int64())), pa.list_(pa.int64())) \
        == pa.list_(pa.field("element", pa.int64()))
    with pytest.raises(IncompatibleTypeError, match=r"field s\.x: string cannot hold int64"):
        merge_types(old, pa.struct([("s", pa.struct([("x", pa.int64())]))]))
    assert fit_error(merged, old) is None
    assert fit_error(old, merged) is not None


def test_side_type_merges_current_subject_and_seen_skipping_misfits() -> None:
    def avro(i: int, fields: list[tuple[str, str]]) -> RegisteredSchema:
        return RegisteredSchema(i, "AVRO", json.dumps({"type": "record", "name": "R", "fields": [
            {"name": n, "type": t} for n, t in fields]}))

    source = SchemaSet({1: avro(1, [("a", "long")]), 2: avro(2, [("a", "long"), ("b", "int")]),
                        3: avro(3, [("a", "string")]), 4: avro(4, [("c", "boolean")])})
    current = pa.struct([("z", pa.string())])
    assert side_type(current, [1, 2], [3, 4, 777], source) == pa.struct(
        [("z", pa.string()), ("a", pa.int64()), ("b", pa.int64()), ("c", pa.bool_())])
    assert side_type(None, [], [777], source) is None


# -- snapshots and sides ---------------------------------------------------------------------

def test_schema_set_collects_references_and_versions_and_pickles() -> None:
    common = RegisteredSchema(20, "AVRO", json.dumps({"type": "record", "name": "ex.Money",
                                                      "fields": [{"name": "c",
                                                                  "type": "long"}]}))
    order = RegisteredSchema(21, "AVRO", json.dumps({"type": "record", "name": "ex.Order",
                                                     "fields": [{"name": "t",
                                                                 "type": "ex.Money"}]}),
                             (SchemaReference("ex.Money", "money", 1),))
    store = SchemaSet({20: common, 21: order}, {("money", 1): common},
                      {"orders-value": [SubjectVersion("orders-value", 1, 21)]})
    snapshot = SchemaSet.collect(store, [], subjects=["orders-value"])
    assert snapshot.ids() == [20, 21]
    assert snapshot.versions("orders-value") == [SubjectVersion("orders-value", 1, 21)]
    copy = pickle.loads(pickle.dumps(snapshot))
    assert copy == snapshot
    assert arrow_type(order, copy) == pa.struct([("t", pa.struct([("c", pa.int64())]))])
    assert SchemaSet.collect(store, [21, 404]).ids() == [20, 21]


def test_typed_sides() -> None:
    existing = {"clicks-value"}.__contains__
    assert typed_sides("clicks", TopicConfig(), existing) == TypedSides(None, "clicks-value")
    assert typed_sides("clicks", TopicConfig(schema_columns_enable=False), existing) \
        == TypedSides(None, None)
    assert typed_sides("t", TopicConfig(value_schema_subject="s", key_schema_subject="k"),
                       existing) == TypedSides("k", "s")
    assert not typed_sides("other", TopicConfig(), existing).any
