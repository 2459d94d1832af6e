"""Schema parsing (loglake/schemas/parse.py) and compatibility rules (compatibility.py):
in-process, fast. Encodes with the libraries' own writers (fastavro, protobuf, confluent-kafka's
registration form) and checks what the registry and decoders get back."""

from __future__ import annotations

import importlib
import io
import json
from collections.abc import Callable, Mapping
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loglake.errors import InvalidConfigError, InvalidSchemaError
from loglake.schemas.compatibility import LEVELS, check_compatibility, is_compatible
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


# -- compatibility --------------------------------------------------------------------------


def _avro(*fields: dict[str, object]) -> ParsedSchema:
    return parse("AVRO", json.dumps({"type": "record", "name": "R", "fields": list(fields)}))


V1 = _avro({"name": "a", "type": "int"})
V2_OPTIONAL = _avro({"name": "a", "type": "int"},
                    {"name": "b", "type": ["null", "string"], "default": None})
V2_REQUIRED = _avro({"name": "a", "type": "int"}, {"name": "b", "type": "string"})
V2_LONG = _avro({"name": "a", "type": "long"})
V2_STRING = _avro({"name": "a", "type": "string"})


@pytest.mark.parametrize(("new", "level", "ok"), [
    (V2_OPTIONAL, "BACKWARD", True), (V2_OPTIONAL, "FORWARD", True), (V2_OPTIONAL, "FULL", True),
    (V2_REQUIRED, "BACKWARD", False), (V2_REQUIRED, "FORWARD", True),
    (V2_REQUIRED, "FULL", False), (V2_REQUIRED, "NONE", True),
    (V2_LONG, "BACKWARD", True), (V2_LONG, "FORWARD", False),  # int → long promotes
    (V2_STRING, "BACKWARD", False), (V2_STRING, "FORWARD", False),
])
def test_avro_levels(new: ParsedSchema, level: str, ok: bool) -> None:
    assert is_compatible(new, [V1], level) is ok


def test_avro_messages_name_the_problem_like_confluent() -> None:
    messages = check_compatibility(V2_REQUIRED, [V1], "BACKWARD", versions=[1])
    assert messages[0].startswith("{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE'")
    assert "/fields/1" in messages[0] and "new schema" in messages[0]
    assert messages[-2:] == ["{oldSchemaVersion: 1}", "{compatibility: 'BACKWARD'}"]
    forward = check_compatibility(V2_STRING, [V1], "FORWARD")
    assert "TYPE_MISMATCH" in forward[0] and "old schema" in forward[0]


def test_transitive_levels_check_every_previous_version() -> None:
    """v1 {a}, v2 {a, b=default} , v3 {a, b} without default: v3 reads v2's data (b is
    there) but not v1's. BACKWARD checks v2 only; BACKWARD_TRANSITIVE finds v1."""
    v3 = _avro({"name": "a", "type": "int"}, {"name": "b", "type": ["null", "string"]})
    assert is_compatible(v3, [V1, V2_OPTIONAL], "BACKWARD")
    messages = check_compatibility(v3, [V1, V2_OPTIONAL], "BACKWARD_TRANSITIVE",
                                   versions=[1, 2])
    assert "{oldSchemaVersion: 1}" in messages and "{oldSchemaVersion: 2}" not in messages
    # FORWARD_TRANSITIVE: old readers of every version read the new data
    assert not is_compatible(V1, [V2_REQUIRED, V2_OPTIONAL], "FORWARD_TRANSITIVE")
    assert is_compatible(V1, [V2_REQUIRED, V2_OPTIONAL], "FORWARD")
    assert not is_compatible(v3, [V1, V2_OPTIONAL], "FULL_TRANSITIVE")


def test_avro_compatibility_with_named_type_references() -> None:
    def person(extra: list[dict[str, object]]) -> ParsedSchema:
        return parse("AVRO", json.dumps({"type": "record", "name": "Person", "fields": [
            {"name": "address", "type": "com.example.common.Address"}, *extra]}),
            {"com.example.common.Address": ADDRESS_AVRO})

    assert is_compatible(person([{"name": "n", "type": "int", "default": 0}]), [person([])],
                         "FULL")
    assert not is_compatible(person([{"name": "n", "type": "int"}]), [person([])], "BACKWARD")


def test_level_names_and_type_changes() -> None:
    assert set(LEVELS) == {"NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD",
                           "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"}
    with pytest.raises(InvalidConfigError, match="compatibility level"):
        check_compatibility(V1, [V1], "SIDEWAYS")
    assert check_compatibility(V1, [], "FULL_TRANSITIVE") == []
    assert is_compatible(V1, [V1], "backward")
    other = parse("JSON", '{"type": "integer"}')
    assert "SCHEMA_TYPE_CHANGED" in check_compatibility(other, [V1], "BACKWARD")[0]


def _json(schema: Mapping[str, object]) -> ParsedSchema:
    return parse("JSON", json.dumps(schema))


def _obj(props: dict[str, object], *, closed: bool | None = None,
         required: list[str] | None = None) -> ParsedSchema:
    schema: dict[str, object] = {"type": "object", "properties": props}
    if closed is not None:
        schema["additionalProperties"] = not closed
    if required:
        schema["required"] = required
    return _json(schema)


INT = {"type": "integer"}
NUM = {"type": "number"}
STR = {"type": "string"}


@pytest.mark.parametrize(("old", "new", "level", "error"), [
    # widening integer → number: backward yes, forward no
    (_obj({"a": INT}), _obj({"a": NUM}), "BACKWARD", None),
    (_obj({"a": INT}), _obj({"a": NUM}), "FORWARD", "TYPE_NARROWED"),
    (_obj({"a": INT}), _obj({"a": STR}), "BACKWARD", "TYPE_CHANGED"),
    # adding a property: fine when the old model was closed; not when it was open
    (_obj({"a": INT}, closed=True), _obj({"a": INT, "b": STR}, closed=True), "BACKWARD", None),
    (_obj({"a": INT}), _obj({"a": INT, "b": STR}), "BACKWARD",
     "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"),
    (_obj({"a": INT}), _obj({"a": INT, "b": {}}), "BACKWARD", None),
    # removing a property: fine when the new model is open; not when closed
    (_obj({"a": INT, "b": STR}), _obj({"a": INT}), "BACKWARD", None),
    (_obj({"a": INT, "b": STR}, closed=True), _obj({"a": INT}, closed=True), "BACKWARD",
     "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"),
    (_obj({"a": INT}), _obj({"a": INT}, closed=True), "BACKWARD",
     "ADDITIONAL_PROPERTIES_REMOVED"),
    (_obj({"a": INT}, closed=True), _obj({"a": INT}), "BACKWARD", None),
    # required
    (_obj({"a": INT}), _obj({"a": INT}, required=["a"]), "BACKWARD", "REQUIRED_ATTRIBUTE_ADDED"),
    (_obj({"a": INT}, required=["a"]), _obj({"a": INT}), "BACKWARD", None),
    (_obj({"a": INT}, required=["a"]), _obj({"a": INT}), "FORWARD", "REQUIRED_ATTRIBUTE_ADDED"),
    # enums
    (_json({"enum": ["A", "B"]}), _json({"enum": ["A", "B", "C"]}), "BACKWARD", None),
    (_json({"enum": ["A", "B"]}), _json({"enum": ["A"]}), "BACKWARD", "ENUM_ARRAY_NARROWED"),
    (_json({"enum": ["A", "B"]}), _json({"enum": ["A", "B", "C"]}), "FORWARD",
     "ENUM_ARRAY_NARROWED"),
    # arrays and nested objects
    (_json({"type": "array", "items": INT}), _json({"type": "array", "items": NUM}),
     "BACKWARD", None),
    (_json({"type": "array", "items": NUM}), _json({"type": "array", "items": INT}),
     "BACKWARD", "TYPE_NARROWED"),
    (_obj({"o": {"type": "object", "properties": {"x": INT}, "additionalProperties": False}}),
     _obj({"o": {"type": "object", "properties": {}, "additionalProperties": False}}),
     "BACKWARD", "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"),
    (_json({"type": "string"}), _json({"type": "string", "maxLength": 3}), "BACKWARD",
     "MAX_LENGTH_ADDED"),
    (_json({"type": ["string", "null"]}), _json({"type": "string"}), "BACKWARD",
     "TYPE_NARROWED"),
    (_json({"oneOf": [INT, STR]}), _json({"oneOf": [NUM, STR, {"type": "null"}]}), "BACKWARD",
     None),
    (_json({"oneOf": [INT, STR]}), _json({"oneOf": [INT]}), "BACKWARD",
     "COMBINED_TYPE_SUBSCHEMAS_CHANGED"),
])
def test_json_schema_rules(old: ParsedSchema, new: ParsedSchema, level: str,
                           error: str | None) -> None:
    messages = check_compatibility(new, [old], level)
    if error is None:
        assert messages == []
    else:
        assert messages and f"errorType:'{error}'" in messages[0], messages


def test_json_schema_refs_are_followed_and_recursion_terminates() -> None:
    node = {"type": "object", "properties": {"v": INT, "next": {"$ref": "#"}}}
    assert is_compatible(_json(node), [_json(node)], "FULL")
    narrowed = {"type": "object", "properties": {"v": INT, "next": {"$ref": "#"}},
                "additionalProperties": False}
    assert not is_compatible(_json(narrowed), [_json(node)], "BACKWARD")
    ref = {"b.json": RegisteredSchema(3, "JSON", '{"type": "integer"}')}
    wide = {"b.json": RegisteredSchema(4, "JSON", '{"type": "number"}')}
    old = parse("JSON", '{"type": "object", "properties": {"b": {"$ref": "b.json"}}}', ref)
    new = parse("JSON", '{"type": "object", "properties": {"b": {"$ref": "b.json"}}}', wide)
    assert is_compatible(new, [old], "BACKWARD") and not is_compatible(new, [old], "FORWARD")


def _proto(body: str, syntax: str = "proto3", package: str = "p") -> ParsedSchema:
    return parse("PROTOBUF", f'syntax = "{syntax}";\npackage {package};\n{body}\n')


P1 = _proto("message M { int32 a = 1; string s = 2; oneof o { int32 x = 3; string y = 4; } "
            "N n = 5; message N { int32 q = 1; } map<string, int32> m = 6; }")


@pytest.mark.parametrize(("body", "error"), [
    # compatible changes
    ("message M { int32 a = 1; string s = 2; oneof o { int32 x = 3; string y = 4; } N n = 5; "
     "message N { int32 q = 1; } map<string, int32> m = 6; int64 added = 7; }", None),
    ("message M { int64 renamed = 1; bytes s = 2; oneof o { int32 x = 3; string y = 4; } "
     "N n = 5; message N { int32 q = 1; } map<string, int32> m = 6; reserved 7; }", None),
    ("message M { int32 a = 1; oneof o { int32 x = 3; string y = 4; } N n = 5; "
     "message N { int32 q = 1; } map<string, int32> m = 6; reserved 2; }", None),
    # incompatible changes
    ("message M { string a = 1; string s = 2; oneof o { int32 x = 3; string y = 4; } N n = 5; "
     "message N { int32 q = 1; } map<string, int32> m = 6; }", "FIELD_SCALAR_KIND_CHANGED"),
    ("message M { sint32 a = 1; string s = 2; oneof o { int32 x = 3; string y = 4; } N n = 5; "
     "message N { int32 q = 1; } map<string, int32> m = 6; }", "FIELD_SCALAR_KIND_CHANGED"),
    ("message M { N a = 1; string s = 2; oneof o { int32 x = 3; string y = 4; } N n = 5; "
     "message N { int32 q = 1; } map<string, int32> m = 6; }", "FIELD_KIND_CHANGED"),
    ("message M { int32 a = 1; string s = 2; oneof o { int32 x = 3; string y = 4; } K n = 5; "
     "message N { int32 q = 1; } message K { int32 q = 1; } map<string, int32> m = 6; }",
     "FIELD_NAMED_TYPE_CHANGED"),
    ("message M { int32 a = 1; string s = 2; oneof o { int32 x = 3; string y = 4; } N n = 5; "
     "map<string, int32> m = 6; } message N { int32 q = 1; }", "MESSAGE_REMOVED"),
    ("message M { int32 a = 1; string s = 2; oneof o { int32 x = 3; } N n = 5; "
     "message N { int32 q = 1; } map<string, int32> m = 6; }", "ONEOF_FIELD_REMOVED"),
    ("message M { string s = 2; oneof o { int32 x = 3; string y = 4; int32 a = 1; } N n = 5; "
     "message N { int32 q = 1; } map<string, int32> m = 6; }", "FIELD_MOVED_TO_EXISTING_ONEOF"),
    ("message M { oneof z { int32 a = 1; string s = 2; } oneof o { int32 x = 3; string y = 4; } "
     "N n = 5; message N { int32 q = 1; } map<string, int32> m = 6; }",
     "MULTIPLE_FIELDS_MOVED_TO_ONEOF"),
    ("message M { repeated int32 a = 1; string s = 2; oneof o { int32 x = 3; string y = 4; } "
     "N n = 5; message N { int32 q = 1; } map<string, int32> m = 6; }",
     "FIELD_NUMERIC_LABEL_CHANGED"),
    ("message M { int32 a = 1; string s = 2; oneof o { int32 x = 3; string y = 4; } N n = 5; "
     "message N { int32 q = 1; } map<string, string> m = 6; }", "FIELD_NAMED_TYPE_CHANGED"),
])
def test_protobuf_rules(body: str, error: str | None) -> None:
    messages = check_compatibility(_proto(body), [P1], "FULL")
    if error is None:
        assert messages == []
    else:
        assert any(f"errorType:'{error}'" in m for m in messages), messages


def test_protobuf_package_rename_and_message_added_and_required_fields() -> None:
    renamed = _proto(P1.text.split("package p;\n", 1)[1], package="q")
    assert is_compatible(renamed, [P1], "FULL")
    added = parse("PROTOBUF", P1.text + "message Extra { int32 e = 1; }\n")
    assert is_compatible(added, [P1], "BACKWARD")
    assert not is_compatible(added, [P1], "FORWARD")  # old readers lack Extra (as Confluent)
    old2 = _proto("message M { optional int32 a = 1; }", syntax="proto2")
    req = _proto("message M { required int32 a = 1; required int32 b = 2; }", syntax="proto2")
    messages = check_compatibility(req, [old2], "BACKWARD")
    assert sum("REQUIRED_FIELD_ADDED" in m for m in messages) == 2
    assert "REQUIRED_FIELD_REMOVED" in check_compatibility(old2, [req], "BACKWARD")[0]


def test_protobuf_serialized_and_text_forms_compare_equal() -> None:
    from confluent_kafka.schema_registry.protobuf import _schema_to_str
    from google.protobuf import struct_pb2

    serialized = parse("PROTOBUF", _schema_to_str(struct_pb2.DESCRIPTOR))
    text = parse("PROTOBUF", to_text(serialized))
    assert check_compatibility(serialized, [text], "FULL_TRANSITIVE") == []


# -- round trips and properties -------------------------------------------------------------

WELL_KNOWN = ["any", "api", "duration", "empty", "field_mask", "source_context", "struct",
              "timestamp", "type", "wrappers", "descriptor"]


def _without_json_names(file: Any) -> Any:
    from google.protobuf import descriptor_pb2

    copy = descriptor_pb2.FileDescriptorProto()
    copy.CopyFrom(file)

    def strip(message: descriptor_pb2.DescriptorProto) -> None:
        for field in [*message.field, *message.extension]:
            field.ClearField("json_name")
        for nested in message.nested_type:
            strip(nested)

    for message in copy.message_type:
        strip(message)
    copy.name = "x.proto"
    return copy


@pytest.mark.parametrize("stem", WELL_KNOWN)
def test_protobuf_rendering_round_trips_through_protoc(stem: str) -> None:
    """Serialized (as confluent-kafka registers) → .proto text → protoc gives the same file
    (descriptor.proto aside: its message-valued options are not rendered) and the same text."""
    from confluent_kafka.schema_registry.protobuf import _schema_to_str

    from loglake.schemas.parse import file_descriptor_set

    module = importlib.import_module(f"google.protobuf.{stem}_pb2")
    serialized = parse("PROTOBUF", _schema_to_str(module.DESCRIPTOR))
    compiled = parse("PROTOBUF", to_text(serialized))
    assert compiled.canonical == serialized.canonical
    if stem != "descriptor":
        assert (_without_json_names(file_descriptor_set(compiled).file[-1])
                == _without_json_names(file_descriptor_set(serialized).file[-1]))


_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
_AVRO_LEAF = st.sampled_from(["int", "long", "float", "double", "boolean", "string", "bytes"])


@st.composite
def _avro_records(draw: st.DrawFn, depth: int = 0, path: str = "") -> dict[str, object]:
    """A random record schema; nested record types are named by their field path (``N_a_b``),
    so two nested records never share a full name (Avro refuses a redefined named type)."""
    names = draw(st.lists(_NAMES, min_size=1, max_size=5, unique=True))
    fields: list[dict[str, object]] = []
    for name in names:
        kind = draw(st.sampled_from(["leaf", "array", "nullable"] + (["record"] if depth < 2
                                                                     else [])))
        leaf = draw(_AVRO_LEAF)
        if kind == "leaf":
            fields.append({"name": name, "type": leaf})
        elif kind == "array":
            fields.append({"name": name, "type": {"type": "array", "items": leaf}})
        elif kind == "nullable":
            fields.append({"name": name, "type": ["null", leaf], "default": None})
        else:
            nested = draw(_avro_records(depth + 1, f"{path}_{name}"))
            fields.append({"name": name, "type": {**nested, "name": f"N{path}_{name}"}})
    return {"type": "record", "name": f"R{depth}", "namespace": "ns", "fields": fields}


def _shuffled_dump(node: object, rnd: Callable[[Any], Any]) -> object:
    if isinstance(node, dict):
        keys = rnd(st.permutations(list(node)))
        return {k: _shuffled_dump(node[k], rnd) for k in keys}
    if isinstance(node, list):
        return [_shuffled_dump(v, rnd) for v in node]
    return node


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=_avro_records(), data=st.data(), indent=st.sampled_from([None, 1, 4]))
def test_avro_property_canonical_and_evolution(record: dict[str, object], data: st.DataObject,
                                               indent: int | None) -> None:
    text = json.dumps(record)
    parsed = parse("AVRO", text)
    respelled = parse("AVRO", json.dumps(_shuffled_dump(record, data.draw), indent=indent))
    assert respelled.canonical == parsed.canonical
    assert check_compatibility(parsed, [respelled], "FULL_TRANSITIVE") == []
    fields = list(record["fields"])  # type: ignore[call-overload]
    with_default = {**record, "fields": [*fields, {"name": "zz_new", "type": "long",
                                                   "default": 0}]}
    without_default = {**record, "fields": [*fields, {"name": "zz_new", "type": "long"}]}
    assert check_compatibility(parse("AVRO", json.dumps(with_default)), [parsed], "FULL") == []
    assert not is_compatible(parse("AVRO", json.dumps(without_default)), [parsed], "BACKWARD")
    assert is_compatible(parse("AVRO", json.dumps(without_default)), [parsed], "FORWARD")


_PROTO_SCALARS = st.sampled_from(["int32", "int64", "uint32", "uint64", "sint32", "sint64",
                                  "fixed32", "fixed64", "sfixed32", "sfixed64", "bool",
                                  "string", "bytes", "float", "double"])


def _proto_json_name(name: str) -> str:
    """protoc's default JSON name of a field (``a_b`` -> ``aB``, ``a_`` -> ``a``): two fields
    of a message may not share one, so generated names must differ in it."""
    out: list[str] = []
    upper = False
    for char in name:
        if char == "_":
            upper = True
            continue
        out.append(char.upper() if upper else char)
        upper = False
    return "".join(out)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=st.lists(st.tuples(_NAMES.filter(lambda n: _proto_json_name(n) != "zzMap"),
                                 _PROTO_SCALARS,
                                 st.sampled_from(["", "repeated ", "optional "])),
                       min_size=1, max_size=8, unique_by=lambda f: _proto_json_name(f[0])),
       map_value=_PROTO_SCALARS)
def test_protobuf_property_text_and_serialized_forms_agree(
        fields: list[tuple[str, str, str]], map_value: str) -> None:
    body = "\n".join(f"  {label}{kind} {name} = {i + 1};"
                     for i, (name, kind, label) in enumerate(fields))
    text = (f'syntax = "proto3";\npackage gen;\nmessage M {{\n{body}\n'
            f"  map<string, {map_value}> zz_map = 100;\n  message Sub {{ M back = 1; }}\n}}\n")
    parsed = parse("PROTOBUF", text)
    serialized = parse("PROTOBUF", to_serialized(parsed))
    assert serialized.canonical == parsed.canonical
    assert parse("PROTOBUF", parsed.canonical).canonical == parsed.canonical
    assert check_compatibility(serialized, [parsed], "FULL_TRANSITIVE") == []
    cls = message_class(parsed)
    assert [f.name for f in cls.DESCRIPTOR.fields][:len(fields)] == [f[0] for f in fields]
