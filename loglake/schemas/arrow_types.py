"""The Arrow type of a schema, merging types, and the table type of a typed side.

- :func:`arrow_type`: the column type of a registered schema (per format: avro_columns.py,
  json_columns.py, protobuf_columns.py; docs/SCHEMAS.md "Arrow types").
- :func:`merge_types`: the type that holds both: struct fields are matched by name, the old
  type's fields keep their order and new fields are appended; lists and maps merge their
  element types; ``null`` merges into anything. A field whose type would change raises
  :class:`IncompatibleTypeError` naming the field path. Merging never drops a field.
- :func:`fit_error`: why values of a schema's type cannot be written into a column of a given
  type (None when they can: every field it has exists there with the same type).
- :func:`side_type`: the table type of a side = merge(the table's current type, the types of
  the subject's versions, the types of the ids the records carry), skipping the schemas
  whose type does not merge (their records get ``*_error``). The same function computes it
  for the tier and for the hot tail, so Spark can union them.

Types are compared structurally: list/map element field names, nullability and
string/large_string/string_view (binary likewise, list/large_list) do not matter, so a type
read back from a Delta table compares equal to the one written.

Pure; thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from loglake.errors import IncompatibleTypeError, SchemaDecodeError
from loglake.schemas.codecs import codec_for
from loglake.schemas.model import RegisteredSchema
from loglake.schemas.schema_set import SchemaSource


def arrow_type(schema: RegisteredSchema, source: SchemaSource) -> pa.DataType:
    """The column type of ``schema`` (references resolved through ``source``; Protobuf: the
    file's first message). Raises SchemaDecodeError for a schema that does not parse."""
    return codec_for(schema, source).arrow_type


def _kind(t: pa.DataType) -> str:
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t)
            or pa.types.is_fixed_size_list(t)):
        return "list"
    if pa.types.is_map(t):
        return "map"
    if pa.types.is_struct(t):
        return "struct"
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_timestamp(t):
        tz = t.tz
        return f"timestamp[{t.unit},{'UTC' if tz in ('UTC', '+00:00', 'Etc/UTC') else tz}]"
    return str(t)


def _describe(t: pa.DataType) -> str:
    return str(t)


def _path(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def merge_types(old: pa.DataType | None, new: pa.DataType, *, path: str = "") -> pa.DataType:
    """The type holding values of ``old`` and of ``new`` (see the module docstring);
    ``path``: the field path to name in errors. Raises IncompatibleTypeError."""
    if old is None:
        return new
    k_old, k_new = _kind(old), _kind(new)
    if k_new == "null":
        return old
    if k_old == "null":
        return new
    if k_old != k_new:
        where = f"field {path}: " if path else ""
        raise IncompatibleTypeError(f"{where}{_describe(old)} cannot hold {_describe(new)}")
    if k_old == "struct":
        new_fields = {new.field(i).name: new.field(i) for i in range(new.num_fields)}
        fields: list[pa.Field] = []
        changed = False
        for i in range(old.num_fields):
            field = old.field(i)
            other = new_fields.pop(field.name, None)
            if other is None:
                fields.append(field)
                continue
            merged = merge_types(field.type, other.type, path=_path(path, field.name))
            changed |= merged is not field.type
            fields.append(field if merged is field.type else field.with_type(merged))
        for name, field in new_fields.items():
            fields.append(pa.field(name, field.type, nullable=True))
            changed = True
        return pa.struct(fields) if changed else old
    if k_old == "list":
        item = merge_types(old.value_type, new.value_type, path=f"{path}[]")
        return old if item is old.value_type else pa.list_(old.value_field.with_type(item))
    if k_old == "map":
        merge_types(old.key_type, new.key_type, path=f"{path}{{key}}")
        if _kind(old.key_type) != _kind(new.key_type):
            raise IncompatibleTypeError(f"field {path} keys: {old.key_type} cannot hold "
                                        f"{new.key_type}")
        item = merge_types(old.item_type, new.item_type, path=f"{path}{{}}")
        return old if item is old.item_type else pa.map_(old.key_field, old.item_field
                                                         .with_type(item))
    return old


def fit_error(target: pa.DataType, written: pa.DataType) -> str | None:
    """Why values of type ``written`` do not fit a column of type ``target`` (None: they do:
    merging adds nothing and changes nothing)."""
    try:
        merged = merge_types(target, written)
    except IncompatibleTypeError as e:
        return e.message
    if merged is target or _same(merged, target):
        return None
    return f"{_describe(written)} has fields the column lacks (column: {_describe(target)})"


def _same(a: pa.DataType, b: pa.DataType) -> bool:
    k = _kind(a)
    if k != _kind(b):
        return False
    if k == "struct":
        return a.num_fields == b.num_fields and all(
            a.field(i).name == b.field(i).name and _same(a.field(i).type, b.field(i).type)
            for i in range(a.num_fields))
    if k == "list":
        return _same(a.value_type, b.value_type)
    if k == "map":
        return _same(a.key_type, b.key_type) and _same(a.item_type, b.item_type)
    return True


def same_type(a: pa.DataType, b: pa.DataType) -> bool:
    """Structural equality (see the module docstring)."""
    return _same(a, b)


def storable(t: pa.DataType) -> pa.DataType:
    """``t`` with the ``null`` types Delta cannot store (a schema of type null, a field that
    only ever held null) replaced by string (always null)."""
    k = _kind(t)
    if k == "null":
        return pa.string()
    if k == "struct":
        fields = [t.field(i) for i in range(t.num_fields)]
        new = [f.with_type(storable(f.type)) for f in fields]
        return t if all(a.type is b.type for a, b in zip(fields, new, strict=True)) \
            else pa.struct(new)
    if k == "list":
        item = storable(t.value_type)
        return t if item is t.value_type else pa.list_(t.value_field.with_type(item))
    if k == "map":
        item = storable(t.item_type)
        return t if item is t.item_type else pa.map_(t.key_field, t.item_field.with_type(item))
    return t


def side_type(current: pa.DataType | None,
              subject_schemas: Iterable[RegisteredSchema | int],
              seen_schemas: Iterable[RegisteredSchema | int],
              source: SchemaSource) -> pa.DataType | None:
    """The table type of a side (the module docstring): ``current`` (the table's
    ``<side>_typed`` type, None when the table has no such column yet), then the subject's
    versions oldest first (soft-deleted ones too), then the schemas the records carry. Ids
    the source does not know and schemas that do not parse or merge are skipped (their
    records get ``*_error``). None when there is no type at all (no schema known yet)."""
    result = current
    for item in (*subject_schemas, *seen_schemas):
        schema = source.schema(item) if isinstance(item, int) else item
        if schema is None:
            continue
        try:
            result = merge_types(result, arrow_type(schema, source))
        except (IncompatibleTypeError, SchemaDecodeError):
            continue
    return None if result is None else storable(result)
