"""Protobuf compatibility, by hand (Confluent's rules; no maintained library decides them).

Compares the schema files' descriptors (the file the schema defines; imports are their own
subjects' business): "can a reader with schema R read what a writer with schema W wrote".
Messages are matched by name relative to the file's package (a package rename alone is
compatible, as Confluent's PACKAGE_CHANGED), fields by number. Incompatible (Confluent's names):

- MESSAGE_REMOVED: a message (nested ones too; map entries aside) of W that R lacks (the
  serializers name messages by their index in the file).
- FIELD_KIND_CHANGED: a field changed between scalar, enum, message and map.
- FIELD_SCALAR_KIND_CHANGED: a scalar field moved out of its wire-compatible group. The groups
  (protobuf's "updating a message type" rules): {int32, uint32, int64, uint64, bool},
  {sint32, sint64}, {fixed32, sfixed32}, {fixed64, sfixed64}, {string, bytes}, {float},
  {double}.
- FIELD_NAMED_TYPE_CHANGED: a message or enum field now names another type (maps: their key
  or value).
- FIELD_NUMERIC_LABEL_CHANGED: a numeric, bool or enum field changed between singular and
  repeated (packed repeated data does not parse as a singular field). String, bytes and
  message fields may change (protobuf keeps the last or merges).
- REQUIRED_FIELD_ADDED / REQUIRED_FIELD_REMOVED (proto2 ``required``, added/removed or a field
  changed to or from it).
- ONEOF_FIELD_REMOVED: a field of a oneof of W that R lacks.
- FIELD_MOVED_TO_EXISTING_ONEOF: a field outside any oneof in W is in a oneof W already had.
- MULTIPLE_FIELDS_MOVED_TO_ONEOF: several fields outside any oneof in W share a new oneof in R.

Compatible (not reported): fields added or removed (protobuf skips unknown fields; reserve the
number), field renames, messages and enums added, enum constants added, removed or renumbered
(proto3 keeps unknown enum values, as Confluent treats ENUM_CONST_* changes), options, a single
field moved into a new oneof, proto3 ``optional`` (a synthetic oneof, not a real one).
Pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf import descriptor_pb2

from loglake.schemas.parse import ParsedSchema

FDP = descriptor_pb2.FieldDescriptorProto
_GROUPS: dict[int, str] = {}
for _name, _members in {
    "varint": (FDP.TYPE_INT32, FDP.TYPE_UINT32, FDP.TYPE_INT64, FDP.TYPE_UINT64, FDP.TYPE_BOOL),
    "zigzag": (FDP.TYPE_SINT32, FDP.TYPE_SINT64),
    "fixed32": (FDP.TYPE_FIXED32, FDP.TYPE_SFIXED32),
    "fixed64": (FDP.TYPE_FIXED64, FDP.TYPE_SFIXED64),
    "length-delimited": (FDP.TYPE_STRING, FDP.TYPE_BYTES),
    "float": (FDP.TYPE_FLOAT,),
    "double": (FDP.TYPE_DOUBLE,),
}.items():
    for _member in _members:
        _GROUPS[_member] = _name
_NUMERIC = frozenset(t for t, g in _GROUPS.items() if g != "length-delimited") | {FDP.TYPE_ENUM}
Report = Callable[[str, str, str], None]
"""(error type, path, description with {reader}/{writer} placeholders)."""
_TYPE_NAMES = {v: k.removeprefix("TYPE_").lower() for k, v in FDP.Type.items()}


@dataclass(frozen=True)
class _Field:
    field: descriptor_pb2.FieldDescriptorProto
    kind: str  # scalar, enum, message, map
    oneof: str | None  # a real oneof's name
    map_types: tuple[str, str] = ("", "")  # key, value (scalar group or relative type name)


class _File:
    def __init__(self, file: descriptor_pb2.FileDescriptorProto) -> None:
        self.package = file.package
        self.messages: dict[str, descriptor_pb2.DescriptorProto] = {}
        self.map_entries: dict[str, descriptor_pb2.DescriptorProto] = {}
        prefix = f".{file.package}" if file.package else ""
        for message in file.message_type:
            self._collect(message, "", prefix)

    def _collect(self, message: descriptor_pb2.DescriptorProto, scope: str,
                 full_scope: str) -> None:
        name = f"{scope}{message.name}"
        full = f"{full_scope}.{message.name}"
        if message.options.map_entry:
            self.map_entries[full] = message
            return
        self.messages[name] = message
        for nested in message.nested_type:
            self._collect(nested, f"{name}.", full)

    def relative(self, type_name: str) -> str:
        prefix = f".{self.package}." if self.package else "."
        return type_name[len(prefix):] if type_name.startswith(prefix) else type_name

    def fields(self, message: descriptor_pb2.DescriptorProto) -> dict[int, _Field]:
        out = {}
        for field in message.field:
            oneof = None
            if field.HasField("oneof_index") and not field.proto3_optional:
                oneof = message.oneof_decl[field.oneof_index].name
            entry = self.map_entries.get(field.type_name)
            if entry is not None and field.label == FDP.LABEL_REPEATED:
                key, value = entry.field[0], entry.field[1]
                out[field.number] = _Field(field, "map", oneof,
                                           (self.describe(key), self.describe(value)))
            elif field.type == FDP.TYPE_MESSAGE:
                out[field.number] = _Field(field, "message", oneof)
            elif field.type == FDP.TYPE_ENUM:
                out[field.number] = _Field(field, "enum", oneof)
            else:
                out[field.number] = _Field(field, "scalar", oneof)
        return out

    def describe(self, field: descriptor_pb2.FieldDescriptorProto) -> str:
        if field.type in (FDP.TYPE_MESSAGE, FDP.TYPE_ENUM):
            return self.relative(field.type_name)
        return _GROUPS.get(field.type, _TYPE_NAMES.get(field.type, "?"))


def protobuf_problems(reader: ParsedSchema, writer: ParsedSchema,
                      names: tuple[str, str]) -> list[str]:
    """Problems of a reader with schema ``reader`` reading what ``writer`` wrote; ``names``:
    how the messages call the reader's and the writer's schema (``("new", "old")``)."""
    r_file, w_file = _File(reader.payload.file[-1]), _File(writer.payload.file[-1])
    out: list[str] = []

    def report(error_type: str, path: str, description: str) -> None:
        text = description.format(reader=names[0], writer=names[1])
        out.append(f"{{errorType:'{error_type}', description:'{text}', "
                   f"additionalInfo:'{path}'}}")

    for name, w_message in w_file.messages.items():
        r_message = r_file.messages.get(name)
        if r_message is None:
            report("MESSAGE_REMOVED", name, f"The {{reader}} schema is missing the message "
                   f"'{name}' of the {{writer}} schema")
            continue
        _compare_message(name, r_file, r_message, w_file, w_message, report)
    return out


def _compare_message(name: str, r_file: _File, r_message: descriptor_pb2.DescriptorProto,
                     w_file: _File, w_message: descriptor_pb2.DescriptorProto,
                     report: Report) -> None:
    r_fields, w_fields = r_file.fields(r_message), w_file.fields(w_message)
    w_oneofs = {d.name for d in w_message.oneof_decl
                if any(f.oneof == d.name for f in w_fields.values())}
    moved_into_new: dict[str, list[int]] = {}
    for number, w in w_fields.items():
        path = f"{name}.{w.field.name}"
        r = r_fields.get(number)
        if r is None:
            if w.field.label == FDP.LABEL_REQUIRED:
                report("REQUIRED_FIELD_REMOVED", path, f"The {{reader}} schema is missing the "
                       f"required field #{number} '{path}' of the {{writer}} schema")
            elif w.oneof is not None:
                report("ONEOF_FIELD_REMOVED", path, f"The {{reader}} schema is missing field "
                       f"#{number} of oneof '{w.oneof}' of the {{writer}} schema")
            continue
        _compare_field(path, number, r, w, r_file, w_file, report)
        if w.oneof is None and r.oneof is not None:
            if r.oneof in w_oneofs:
                report("FIELD_MOVED_TO_EXISTING_ONEOF", path, f"Field #{number} moved into the "
                       f"existing oneof '{r.oneof}' in the {{reader}} schema")
            else:
                moved_into_new.setdefault(r.oneof, []).append(number)
    for oneof, numbers in moved_into_new.items():
        if len(numbers) > 1:
            report("MULTIPLE_FIELDS_MOVED_TO_ONEOF", f"{name}.{oneof}", f"Fields {numbers} "
                   f"moved into the new oneof '{oneof}' in the {{reader}} schema")
    for number, r in r_fields.items():
        if number not in w_fields and r.field.label == FDP.LABEL_REQUIRED:
            report("REQUIRED_FIELD_ADDED", f"{name}.{r.field.name}", f"The {{reader}} schema "
                   f"requires field #{number} '{r.field.name}' the {{writer}} schema lacks")


def _compare_field(path: str, number: int, r: _Field, w: _Field, r_file: _File,
                   w_file: _File, report: Report) -> None:
    if r.kind != w.kind:
        report("FIELD_KIND_CHANGED", path, f"Field #{number} is a {w.kind} in the {{writer}} "
               f"schema and a {r.kind} in the {{reader}} schema")
        return
    if r.kind == "map":
        if r.map_types != w.map_types:
            report("FIELD_NAMED_TYPE_CHANGED", path, f"Map field #{number} changed from "
                   f"map<{', '.join(w.map_types)}> to map<{', '.join(r.map_types)}>")
        return
    if r.kind == "scalar":
        if _GROUPS.get(r.field.type) != _GROUPS.get(w.field.type):
            report("FIELD_SCALAR_KIND_CHANGED", path, f"Field #{number} changed from "
                   f"{_TYPE_NAMES[w.field.type]} to {_TYPE_NAMES[r.field.type]}, which is not "
                   "wire-compatible")
    elif r_file.relative(r.field.type_name) != w_file.relative(w.field.type_name):
        report("FIELD_NAMED_TYPE_CHANGED", path, f"Field #{number} changed from type "
               f"'{w_file.relative(w.field.type_name)}' to "
               f"'{r_file.relative(r.field.type_name)}'")
    r_repeated = r.field.label == FDP.LABEL_REPEATED
    w_repeated = w.field.label == FDP.LABEL_REPEATED
    if r_repeated != w_repeated and (r.field.type in _NUMERIC or w.field.type in _NUMERIC):
        report("FIELD_NUMERIC_LABEL_CHANGED", path, f"Numeric field #{number} changed between "
               "singular and repeated")
    r_required = r.field.label == FDP.LABEL_REQUIRED
    w_required = w.field.label == FDP.LABEL_REQUIRED
    if r_required and not w_required:
        report("REQUIRED_FIELD_ADDED", path, f"Field #{number} is required in the {{reader}} "
               "schema and not in the {writer} schema")
    elif w_required and not r_required:
        report("REQUIRED_FIELD_REMOVED", path, f"Field #{number} is required in the {{writer}} "
               "schema and not in the {reader} schema")
