"""Schema parsing (loglake/schemas/parse.py) and compatibility rules (compatibility.py):
in-process, fast. Encodes with the libraries' own writers (fastavro, protobuf, confluent-kafka's
registration form) and checks what the registry and decoders get back."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from loglake.errors import InvalidSchemaError
from loglake.schemas.model import RegisteredSchema, SchemaReference
from loglake.schemas.parse import (
    ParsedSchema,
    fastavro_schema,
    file_descriptor,
    json_validator,
    message_class,
    message_descriptor,
    parse,
    parse_registered,
    resolve_references,
    to_serialized,
    to_text,
)

# -- parsing --------------------------------------------------------------------------------

USER_AVRO = json.dumps({
    "type": "record", "name": "User", "namespace": "com.example",
    "fields": [{"name": "id", "type": "long"},
               {"name": "name", "type": "string"},
               {"name": "home", "type": {"type": "record", "name": "Place",
                                         "fields": [{"name": "city", "type": "string"}]}},
               {"name": "work", "type": ["null", "Place"], "default": None}]})

ADDRESS_AVRO = RegisteredSchema(7, "AVRO", json.dumps({
    "type": "record", "name": "Address", "namespace": "com.example.common",
    "fields": [{"name": "street", "type": "string"}]}))

B_PROTO = RegisteredSchema(11, "PROTOBUF",
                           'syntax = "proto3";\npackage other;\nmessage B { string x = 1; }\n')

A_PROTO = '''syntax = "proto3";
package test;
import "other/b.proto";
import "google/protobuf/timestamp.proto";
// a comment protoc drops
message A {
  int32 id = 1;
  other.B b = 2;
  google.protobuf.Timestamp ts = 3;
  map<string, int64> counts = 4;
  oneof choice { string s = 5; int32 i = 6; }
  optional int32 maybe = 7;
  message Inner { enum E { Z = 0; ONE = 1; } E e = 1; repeated Inner kids = 2; }
  reserved 10 to 12, 20;
  reserved "old";
}
enum Color { RED = 0; GREEN = 1; }
'''


def test_avro_parses_and_round_trips_with_fastavro() -> None:
    parsed = parse("AVRO", USER_AVRO)
    assert parsed.schema_type == "AVRO" and parsed.text == USER_AVRO
    record = {"id": 1, "name": "ann", "home": {"city": "x"}, "work": None}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro_schema(parsed), record)
    buf.seek(0)
    assert fastavro.schemaless_reader(buf, fastavro_schema(parsed)) == record


def test_avro_named_type_reference() -> None:
    text = json.dumps({"type": "record", "name": "Person", "fields": [
        {"name": "address", "type": "com.example.common.Address"}]})
    with pytest.raises(InvalidSchemaError, match=r"com\.example\.common\.Address"):
        parse("AVRO", text)
    parsed = parse("AVRO", text, {"com.example.common.Address": ADDRESS_AVRO})
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro_schema(parsed), {"address": {"street": "s"}})
    buf.seek(0)
    assert fastavro.schemaless_reader(buf, fastavro_schema(parsed)) == {
        "address": {"street": "s"}}


def test_avro_canonical_ignores_whitespace_key_order_and_namespace_spelling() -> None:
    a = parse("AVRO", USER_AVRO)
    doc = json.loads(USER_AVRO)
    reordered = {"fields": doc["fields"], "name": "com.example.User", "type": "record"}
    b = parse("AVRO", json.dumps(reordered, indent=2))
    assert a.text != b.text and a.canonical == b.canonical
    different = parse("AVRO", USER_AVRO.replace('"name": "name"', '"name": "label"'))
    assert different.canonical != a.canonical
    assert parse("AVRO", '{"type": "string"}').canonical == parse("AVRO", '"string"').canonical


@pytest.mark.parametrize(("text", "message"), [
    ("not json", "not JSON"),
    ('{"type": "nope"}', "Invalid schema"),
    ('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "Missing"}]}',
     "Missing"),
    ('{"type": "enum", "name": "E", "symbols": ["A", "A"]}', "Invalid schema"),
])
def test_avro_invalid_schemas_have_one_line_messages(text: str, message: str) -> None:
    with pytest.raises(InvalidSchemaError, match=message) as info:
        parse("AVRO", text)
    assert "\n" not in str(info.value)


def test_json_schema_meta_check_refs_and_canonical() -> None:
    text = '{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"$ref": "b.json"}}}'
    with pytest.raises(InvalidSchemaError, match=r"b\.json"):
        parse("JSON", text)
    parsed = parse("JSON", text, {"b.json": RegisteredSchema(3, "JSON", '{"type": "string"}')})
    validator = json_validator(parsed)
    assert validator.is_valid({"a": 1, "b": "x"}) and not validator.is_valid({"a": 1, "b": 2})
    same = parse("JSON", json.dumps(json.loads(text), indent=4, sort_keys=True),
                 parsed.reference_map)
    assert same.canonical == parsed.canonical
    with pytest.raises(InvalidSchemaError, match="at type"):
        parse("JSON", '{"type": "integr"}')
    with pytest.raises(InvalidSchemaError, match="object or a boolean"):
        parse("JSON", "[1, 2]")
    assert parse("JSON", '{"$ref": "#/definitions/x", "definitions": {"x": {}}}')


def test_protobuf_text_compiles_with_imports_and_well_known_types() -> None:
    parsed = parse("PROTOBUF", A_PROTO, {"other/b.proto": B_PROTO})
    assert parsed.text == A_PROTO
    descriptor = message_descriptor(parsed, [0])
    assert descriptor.full_name == "test.A"
    assert descriptor.fields_by_name["b"].message_type.full_name == "other.B"
    assert descriptor.fields_by_name["ts"].message_type.full_name == "google.protobuf.Timestamp"
    cls = message_class(parsed)
    msg = cls(id=5, s="x")
    msg.b.x = "q"
    msg.counts["k"] = 3
    assert cls.FromString(msg.SerializeToString()) == msg
    assert message_descriptor(parsed, [0, 1]).full_name == "test.A.Inner"  # [0, 0]: the map
    assert file_descriptor(parsed).package == "test"
    with pytest.raises(InvalidSchemaError, match=r"other/b\.proto"):
        parse("PROTOBUF", A_PROTO)


def test_protobuf_message_indexes_follow_confluent() -> None:
    text = 'syntax = "proto3";\nmessage X { message Y {} message Z {} }\nmessage W {}\n'
    parsed = parse("PROTOBUF", text)
    assert message_descriptor(parsed, []).full_name == "X"
    assert message_descriptor(parsed, [0, 1]).full_name == "X.Z"
    assert message_descriptor(parsed, [1]).full_name == "W"
    with pytest.raises(InvalidSchemaError, match="message index"):
        message_descriptor(parsed, [2])


def test_protobuf_serialized_form_as_confluent_python_registers_it() -> None:
    """confluent-kafka's ProtobufSerializer registers base64(FileDescriptorProto) of a
    generated module; the registry stores .proto text and serves both forms."""
    from confluent_kafka.schema_registry.protobuf import _schema_to_str
    from google.protobuf import timestamp_pb2

    parsed = parse("PROTOBUF", _schema_to_str(timestamp_pb2.DESCRIPTOR))
    assert "message Timestamp" in to_text(parsed) and "int64 seconds = 1;" in to_text(parsed)
    again = parse("PROTOBUF", to_text(parsed))
    assert again.canonical == parsed.canonical
    assert parse("PROTOBUF", to_serialized(again)).canonical == parsed.canonical

    text_form = parse("PROTOBUF", A_PROTO, {"other/b.proto": B_PROTO})
    serialized = parse("PROTOBUF", to_serialized(text_form), {"other/b.proto": B_PROTO})
    assert serialized.text == text_form.canonical == serialized.canonical


def test_protobuf_canonical_ignores_comments_and_whitespace() -> None:
    a = parse("PROTOBUF", 'syntax = "proto3";\nmessage M { int32 a = 1; }\n')
    b = parse("PROTOBUF", 'syntax="proto3";  // hi\nmessage M {\n\n  int32 a = 1;\n}')
    assert a.text != b.text and a.canonical == b.canonical


@pytest.mark.parametrize(("text", "message"), [
    ('syntax = "proto3"; message A { Foo b = 1; }', '"Foo" is not defined'),
    ("message {", "Expected message name"),
    ('syntax = "proto3"; import "nope.proto"; message A {}', "nope.proto"),
    ('syntax = "proto2"; message A { optional group G = 1 { optional int32 x = 2; } }',
     "group"),
])
def test_protobuf_invalid_schemas_have_one_line_messages(text: str, message: str) -> None:
    with pytest.raises(InvalidSchemaError, match=message) as info:
        parse("PROTOBUF", text)
    assert "\n" not in str(info.value)


def test_unknown_type_and_empty_text() -> None:
    with pytest.raises(InvalidSchemaError, match="schema type"):
        parse("XML", "<a/>")
    with pytest.raises(InvalidSchemaError, match="empty"):
        parse("AVRO", "  ")


def test_resolve_references_is_transitive_and_reports_missing() -> None:
    top = RegisteredSchema(20, "PROTOBUF", 'syntax = "proto3";\nimport "other/b.proto";\n'
                           "message T { other.B b = 1; }\n",
                           (SchemaReference("other/b.proto", "b", 1),))
    store = {("t", 1): top, ("b", 1): B_PROTO}

    def lookup(ref: SchemaReference) -> RegisteredSchema | None:
        return store.get((ref.subject, ref.version))

    refs = resolve_references([SchemaReference("t.proto", "t", 1)], lookup)
    assert set(refs) == {"t.proto", "other/b.proto"}
    main = parse("PROTOBUF", 'syntax = "proto3";\nimport "t.proto";\nmessage M { T t = 1; }\n',
                 refs)
    assert message_descriptor(main).fields_by_name["t"].message_type.full_name == "T"
    assert parse_registered(top, lookup).schema_type == "PROTOBUF"
    with pytest.raises(InvalidSchemaError, match="does not exist"):
        resolve_references([SchemaReference("x", "missing", 3)], lookup)


def test_parsed_schema_pickles() -> None:
    import pickle

    for parsed in (parse("AVRO", USER_AVRO), parse("JSON", '{"type": "string"}'),
                   parse("PROTOBUF", A_PROTO, {"other/b.proto": B_PROTO})):
        copy = pickle.loads(pickle.dumps(parsed))
        assert isinstance(copy, ParsedSchema) and copy == parsed
