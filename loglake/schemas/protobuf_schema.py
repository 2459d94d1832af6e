"""Protobuf schemas: .proto text and serialized FileDescriptorProtos, both ways.

Two forms reach a registry: Confluent stores and serves ``.proto`` text; confluent-kafka's Python
``ProtobufSerializer`` registers a base64 serialized ``FileDescriptorProto`` and its deserializer
fetches ``?format=serialized``. :func:`parse` accepts either and yields a
``FileDescriptorSet`` (dependencies first, the schema's file last); :func:`to_text` renders a file
as ``.proto`` text (what is stored and served by default), :func:`to_serialized` gives the
base64 form.

Text is compiled by protoc itself, run in-process from grpcio-tools (the reference compiler:
full semantic checks, every syntax feature, errors with line and column) rather than by a
hand-written or third-party grammar. protoc reads files, so the text and its references are
written to a private temporary directory for the call (the only I/O in loglake.schemas); calls
are serialized by a lock (protoc's in-process entry point is not documented as thread-safe).

Imports are resolved through references: a reference's name is the import path (Confluent's
convention). The well-known types (``google/protobuf/*.proto``) resolve without references.
A reference's own imports must be in the same mapping (see parse.resolve_references).

Rendering (:func:`to_text`) writes type names fully qualified (``.pkg.Msg``), maps as
``map<K, V>``, proto3 ``optional`` from synthetic oneofs, reserved ranges and names, enum
aliases, services, proto2 defaults and extension ranges, and the standard file/message/field/enum
options whose values are scalars or enums (repeated ones too); message-valued and custom
(extension) options are dropped. Groups and editions are refused (InvalidSchemaError). The
rendering is deterministic, so it is also the canonical text.
"""

from __future__ import annotations

import ast
import base64
import binascii
import importlib
import os
import tempfile
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FileDescriptor
from google.protobuf.message import DecodeError, Message

from loglake.errors import InvalidSchemaError
from loglake.schemas.avro_schema import ordered_references
from loglake.schemas.model import RegisteredSchema

MAIN_FILE = "schema.proto"
"""The file name a schema given as text gets (another when a reference uses this name)."""
WELL_KNOWN_PREFIX = "google/protobuf/"
_PROTOC_LOCK = threading.Lock()
FDP = descriptor_pb2.FieldDescriptorProto


def parse(text: str, name_refs: Mapping[str, RegisteredSchema],
          roots: tuple[str, ...]) -> tuple[descriptor_pb2.FileDescriptorSet, bool]:
    """(the files, dependencies first and the schema's last; True when given serialized)."""
    serialized = _from_base64(text)
    if serialized is not None:
        return _from_serialized(serialized, name_refs, roots), True
    return _compile(text, name_refs, roots), False


def _from_base64(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    stripped = text.strip()
    if not stripped or any(c in stripped for c in " ;{}\n\t\""):
        return None
    try:
        raw = base64.b64decode(stripped, validate=True)
        file = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError, DecodeError):
        return None
    return file if (file.message_type or file.enum_type or file.name) else None


def _reference_files(name_refs: Mapping[str, RegisteredSchema], roots: tuple[str, ...]
                     ) -> list[descriptor_pb2.FileDescriptorProto]:
    """The referenced files (transitively, dependencies first), each named by its reference."""
    out: list[descriptor_pb2.FileDescriptorProto] = []
    for reg in ordered_references(name_refs, roots):
        if reg.schema_type != "PROTOBUF":
            raise InvalidSchemaError(f"Invalid schema: a PROTOBUF schema imports a "
                                     f"{reg.schema_type} schema (id {reg.id})")
        name = next(n for n, r in name_refs.items() if r is reg)
        files, _ = parse(reg.schema, name_refs, tuple(ref.name for ref in reg.references))
        main = descriptor_pb2.FileDescriptorProto()
        main.CopyFrom(files.file[-1])
        main.name = name
        out.append(main)
    return out


def _from_serialized(file: descriptor_pb2.FileDescriptorProto,
                     name_refs: Mapping[str, RegisteredSchema],
                     roots: tuple[str, ...]) -> descriptor_pb2.FileDescriptorSet:
    deps = _reference_files(name_refs, roots)
    known = {f.name for f in deps}
    for dep in file.dependency:
        if dep not in known and not dep.startswith(WELL_KNOWN_PREFIX):
            raise InvalidSchemaError(f"Invalid schema: import {dep!r} names no reference")
    if not file.name:
        file.name = _main_name(known)
    out = descriptor_pb2.FileDescriptorSet()
    out.file.extend([*_well_known([*deps, file], known), *deps, file])
    _check_supported(file)
    try:
        build_pool(out)
    except (TypeError, ValueError, KeyError) as e:
        raise InvalidSchemaError(f"Invalid schema: {_one_line(str(e))}") from None
    return out


def _well_known(files: Sequence[descriptor_pb2.FileDescriptorProto], provided: set[str]
                ) -> list[descriptor_pb2.FileDescriptorProto]:
    """The well-known files ``files`` import, transitively and dependencies first, except
    those ``provided`` (given as references)."""
    out: list[descriptor_pb2.FileDescriptorProto] = []
    seen = set(provided)

    def add(name: str) -> None:
        if name in seen or not name.startswith(WELL_KNOWN_PREFIX):
            return
        seen.add(name)
        stem = name[len(WELL_KNOWN_PREFIX):].removesuffix(".proto")
        try:
            module = importlib.import_module(f"google.protobuf.{stem}_pb2")
            descriptor = module.DESCRIPTOR
        except (ImportError, AttributeError):
            raise InvalidSchemaError(f"Invalid schema: unknown import {name!r}") from None
        proto = descriptor_pb2.FileDescriptorProto()
        descriptor.CopyToProto(proto)
        for dep in proto.dependency:
            add(dep)
        out.append(proto)

    for file in files:
        for dep in file.dependency:
            add(dep)
    return out


def _main_name(taken: set[str]) -> str:
    name, n = MAIN_FILE, 0
    while name in taken:
        n += 1
        name = f"schema_{n}.proto"
    return name


def _compile(text: str, name_refs: Mapping[str, RegisteredSchema],
             roots: tuple[str, ...]) -> descriptor_pb2.FileDescriptorSet:
    from grpc_tools import _protoc_compiler

    deps = _reference_files(name_refs, roots)
    main_name = _main_name({f.name for f in deps})
    import grpc_tools

    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="loglake-proto-") as tmp:
        for dep in deps:
            _write(tmp, dep.name, to_text_file(dep))
        _write(tmp, main_name, text)
        with _PROTOC_LOCK, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                generated = _protoc_compiler.get_protos(main_name.encode(),
                                                        [tmp.encode(), include.encode()])
            except _protoc_compiler.ProtocErrors as e:
                raise InvalidSchemaError("Invalid schema: " + "; ".join(
                    _protoc_error(err, main_name) for err in e.errors())) from None
    out = descriptor_pb2.FileDescriptorSet()
    for _module, code in generated:
        out.file.append(descriptor_pb2.FileDescriptorProto.FromString(_serialized_of(code)))
    main = out.file[-1]
    if main.name != main_name:
        raise InvalidSchemaError("Invalid schema: protoc did not return the schema's file")
    _check_supported(main)
    return out


def _protoc_error(err: Any, main_name: str) -> str:
    name, message = _text(err.filename), _text(err.message).rstrip(".")
    where = "" if name == main_name else f"{name} "
    if err.line >= 0:
        where += f"line {err.line + 1}:{err.column + 1}"
    return f"{where.strip()}: {message}" if where.strip() else message


def _write(root: str, name: str, text: str) -> None:
    path = os.path.normpath(os.path.join(root, name))
    if not path.startswith(os.path.normpath(root) + os.sep):
        raise InvalidSchemaError(f"Invalid schema: import path {name!r} leaves its root")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _serialized_of(code: bytes) -> bytes:
    """The serialized FileDescriptorProto protoc embedded in generated Python code
    (``AddSerializedFile(b'...')``)."""
    for node in ast.walk(ast.parse(code)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "AddSerializedFile" and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, bytes)):
            return node.args[0].value
    raise InvalidSchemaError("Invalid schema: protoc produced no descriptor")


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _check_supported(file: descriptor_pb2.FileDescriptorProto) -> None:
    if file.syntax == "editions":
        raise InvalidSchemaError("Invalid schema: protobuf editions are not supported "
                                 "(use syntax proto2 or proto3)")

    def check(message: descriptor_pb2.DescriptorProto) -> None:
        for field in message.field:
            if field.type == FDP.TYPE_GROUP:
                raise InvalidSchemaError(f"Invalid schema: group {message.name}.{field.name} "
                                         f"is not supported (use a nested message)")
        for nested in message.nested_type:
            check(nested)

    for message in file.message_type:
        check(message)


# -- descriptors and message classes (for decoders) -----------------------------------------


def build_pool(files: descriptor_pb2.FileDescriptorSet) -> descriptor_pool.DescriptorPool:
    """A fresh pool holding ``files`` (dependencies first)."""
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return pool


def file_descriptor(files: descriptor_pb2.FileDescriptorSet) -> FileDescriptor:
    """The schema's file (the set's last) as a descriptor in its own pool."""
    return build_pool(files).FindFileByName(files.file[-1].name)


def message_descriptor(pool: descriptor_pool.DescriptorPool,
                       file: descriptor_pb2.FileDescriptorProto,
                       indexes: Sequence[int]) -> Descriptor:
    """The message Confluent's message-index path names in ``file`` (``[0]``: the file's
    first message; ``[1, 0]``: the second message's first nested message; ``[]`` means
    ``[0]``), from ``pool`` (which holds ``file``)."""
    path = list(indexes) or [0]
    try:
        message = _nth(list(file.message_type), path[0])
        name = f"{file.package}.{message.name}" if file.package else message.name
        for index in path[1:]:
            message = _nth(list(message.nested_type), index)
            name = f"{name}.{message.name}"
    except IndexError:
        raise InvalidSchemaError(f"message index {path} names no message of "
                                 f"{file.name}") from None
    return pool.FindMessageTypeByName(name)


def _nth(items: list[Any], index: int) -> Any:
    if index < 0 or index >= len(items):
        raise IndexError(index)
    return items[index]


def message_indexes(descriptor: Descriptor) -> list[int]:
    """Confluent's message-index path of ``descriptor`` within its file."""
    path: list[int] = []
    current: Descriptor | None = descriptor
    while current is not None:
        parent = current.containing_type
        siblings = (list(parent.nested_types) if parent is not None
                    else list(current.file.message_types_by_name.values()))
        path.append(siblings.index(current))
        current = parent
    return path[::-1]


def message_class(descriptor: Descriptor) -> type[Message]:
    return message_factory.GetMessageClass(descriptor)


# -- forms --------------------------------------------------------------------------------


def to_serialized_file(file: descriptor_pb2.FileDescriptorProto) -> str:
    return base64.b64encode(file.SerializeToString(deterministic=True)).decode("ascii")


def to_text_file(file: descriptor_pb2.FileDescriptorProto) -> str:
    """``file`` rendered as .proto text (see the module docstring for what is kept)."""
    _check_supported(file)
    out: list[str] = []
    syntax = file.syntax or "proto2"
    out.append(f'syntax = "{syntax}";')
    if file.package:
        out.append(f"package {file.package};")
    public = set(file.public_dependency)
    weak = set(file.weak_dependency)
    for i, dep in enumerate(file.dependency):
        kind = "public " if i in public else "weak " if i in weak else ""
        out.append(f'import {kind}"{dep}";')
    out.extend(_options(file.options, ""))
    scope = f".{file.package}" if file.package else ""
    for message in file.message_type:
        out.extend(_message(message, scope, syntax))
    for enum in file.enum_type:
        out.extend(_enum(enum, ""))
    out.extend(_extensions(file.extension, "", syntax))
    for service in file.service:
        out.append(f"service {service.name} {{")
        out.extend(_options(service.options, "  "))
        for method in service.method:
            cs = "stream " if method.client_streaming else ""
            ss = "stream " if method.server_streaming else ""
            out.append(f"  rpc {method.name}({cs}{method.input_type}) "
                       f"returns ({ss}{method.output_type});")
        out.append("}")
    return "\n".join(out) + "\n"


_SCALARS = {
    FDP.TYPE_DOUBLE: "double", FDP.TYPE_FLOAT: "float", FDP.TYPE_INT64: "int64",
    FDP.TYPE_UINT64: "uint64", FDP.TYPE_INT32: "int32", FDP.TYPE_FIXED64: "fixed64",
    FDP.TYPE_FIXED32: "fixed32", FDP.TYPE_BOOL: "bool", FDP.TYPE_STRING: "string",
    FDP.TYPE_BYTES: "bytes", FDP.TYPE_UINT32: "uint32", FDP.TYPE_SFIXED32: "sfixed32",
    FDP.TYPE_SFIXED64: "sfixed64", FDP.TYPE_SINT32: "sint32", FDP.TYPE_SINT64: "sint64",
}


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bytes):
        return '"' + "".join(f"\\{b:03o}" for b in value) + '"'
    return repr(value)


def _option_pairs(options: Any) -> list[tuple[str, str]]:
    pairs = []
    for field, value in options.ListFields():
        if field.is_extension or field.type == field.TYPE_MESSAGE or field.name == "map_entry":
            continue
        for item in value if _is_repeated(field) else [value]:
            if field.enum_type is not None:
                pairs.append((field.name, field.enum_type.values_by_number[item].name))
            else:
                pairs.append((field.name, _literal(item)))
    return pairs


def _is_repeated(field: Any) -> bool:
    if hasattr(field, "is_repeated"):  # protobuf >= 5.28 (``label`` is gone in 7)
        return bool(field.is_repeated)
    return bool(field.label == field.LABEL_REPEATED)


def _options(options: Any, indent: str) -> list[str]:
    return [f"{indent}option {name} = {value};" for name, value in _option_pairs(options)]


def _type_name(field: descriptor_pb2.FieldDescriptorProto) -> str:
    return _SCALARS.get(field.type) or field.type_name


def _field_suffix(field: descriptor_pb2.FieldDescriptorProto, syntax: str) -> str:
    opts = []
    if field.HasField("default_value"):
        value = field.default_value
        if field.type in (FDP.TYPE_STRING,):
            value = _literal(value)
        elif field.type == FDP.TYPE_BYTES:
            value = '"' + value + '"'  # protoc stores bytes defaults C-escaped already
        opts.append(f"default = {value}")
    if field.HasField("json_name") and field.json_name != _default_json_name(field.name):
        opts.append(f"json_name = {_literal(field.json_name)}")
    opts.extend(f"{name} = {value}" for name, value in _option_pairs(field.options))
    return f" [{', '.join(opts)}]" if opts else ""


def _default_json_name(name: str) -> str:
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def _field(field: descriptor_pb2.FieldDescriptorProto, maps: Mapping[str, Any],
           indent: str, syntax: str, in_oneof: bool) -> str:
    entry = maps.get(field.type_name) if field.label == FDP.LABEL_REPEATED else None
    if entry is not None:
        key, value = entry.field[0], entry.field[1]
        kind = f"map<{_type_name(key)}, {_type_name(value)}>"
        label = ""
    else:
        kind = _type_name(field)
        if in_oneof:
            label = ""
        elif field.label == FDP.LABEL_REPEATED:
            label = "repeated "
        elif field.label == FDP.LABEL_REQUIRED:
            label = "required "
        elif syntax == "proto2" or field.proto3_optional:
            label = "optional "
        else:
            label = ""
    return f"{indent}{label}{kind} {field.name} = {field.number}{_field_suffix(field, syntax)};"


def _ranges(ranges: Any, exclusive_end: bool) -> str:
    parts = []
    for r in ranges:
        end = r.end - 1 if exclusive_end else r.end
        parts.append(str(r.start) if end == r.start else
                     f"{r.start} to {'max' if end >= 536870911 else end}")
    return ", ".join(parts)


def _message(message: descriptor_pb2.DescriptorProto, scope: str, syntax: str,
             indent: str = "") -> list[str]:
    full = f"{scope}.{message.name}"  # scope: ".<package>" for top-level messages
    maps = {f"{full}.{n.name}": n for n in message.nested_type if n.options.map_entry}
    out = [f"{indent}message {message.name} {{"]
    inner = indent + "  "
    out.extend(_options(message.options, inner))
    real_oneofs: dict[int, list[descriptor_pb2.FieldDescriptorProto]] = {}
    synthetic = {f.oneof_index for f in message.field
                 if f.proto3_optional and f.HasField("oneof_index")}
    emitted: set[int] = set()
    for field in message.field:
        if field.HasField("oneof_index") and field.oneof_index not in synthetic:
            real_oneofs.setdefault(field.oneof_index, []).append(field)
    for field in message.field:
        if field.HasField("oneof_index") and field.oneof_index not in synthetic:
            index = field.oneof_index
            if index in emitted:
                continue
            emitted.add(index)
            out.append(f"{inner}oneof {message.oneof_decl[index].name} {{")
            out.extend(_options(message.oneof_decl[index].options, inner + "  "))
            for member in real_oneofs[index]:
                out.append(_field(member, maps, inner + "  ", syntax, True))
            out.append(f"{inner}}}")
        else:
            out.append(_field(field, maps, inner, syntax, False))
    for nested in message.nested_type:
        if not nested.options.map_entry:
            out.extend(_message(nested, full, syntax, inner))
    for enum in message.enum_type:
        out.extend(_enum(enum, inner))
    if message.extension_range:
        out.append(f"{inner}extensions {_ranges(message.extension_range, True)};")
    out.extend(_extensions(message.extension, inner, syntax))
    out.extend(_reserved(message.reserved_range, message.reserved_name, inner, True))
    out.append(f"{indent}}}")
    return out


def _extensions(fields: Any, indent: str, syntax: str) -> list[str]:
    out: list[str] = []
    by_extendee: dict[str, list[descriptor_pb2.FieldDescriptorProto]] = {}
    for field in fields:
        by_extendee.setdefault(field.extendee, []).append(field)
    for extendee, members in by_extendee.items():
        out.append(f"{indent}extend {extendee} {{")
        out.extend(_field(f, {}, indent + "  ", syntax, False) for f in members)
        out.append(f"{indent}}}")
    return out


def _enum(enum: descriptor_pb2.EnumDescriptorProto, indent: str) -> list[str]:
    inner = indent + "  "
    out = [f"{indent}enum {enum.name} {{"]
    out.extend(_options(enum.options, inner))
    for value in enum.value:
        opts = _option_pairs(value.options)
        suffix = f" [{', '.join(f'{n} = {v}' for n, v in opts)}]" if opts else ""
        out.append(f"{inner}{value.name} = {value.number}{suffix};")
    out.extend(_reserved(enum.reserved_range, enum.reserved_name, inner, False))
    out.append(f"{indent}}}")
    return out


def _reserved(ranges: Any, names: Any, indent: str, exclusive_end: bool) -> list[str]:
    """The ``reserved`` lines of a message or enum: its numbers, then its names."""
    out = []
    if ranges:
        out.append(f"{indent}reserved {_ranges(ranges, exclusive_end)};")
    if names:
        out.append(f"{indent}reserved {', '.join(_literal(n) for n in names)};")
    return out
