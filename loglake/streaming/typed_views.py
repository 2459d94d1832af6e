"""Typed SQL views: the tiered side read from the catalog table's typed columns.

A view of a topic with typed sides (streaming/typed_read.py) is the union of

* the table's rows below each partition's split (delta-spark), projected to the typed read's
  columns: ``value`` <- ``value_typed``, ``value_bytes`` <- ``value``, ``value_schema_id``,
  ``value_error`` (keys likewise); the table's ``value_typed`` struct is *conformed* to the
  view's type (:func:`conform`): the view's type is the merge of the table's type with every
  version of the subject (typed_read.resolve), so it may have fields the table has not seen
  yet, which read as null; nothing is ever dropped or retyped (merging never does that);
* the hot tail through ``format("loglake")`` with ``valueFormat=registry``, whose column type
  is that same merge.

Rows tiered before the side became typed have a null ``value_typed`` in the table (their
files lack the column) and so a null ``value`` in the view, until the backfill job re-types
the table. A table without the typed column at all (typed since its last tiering) is not used:
the view then reads the whole topic through the data source, which decodes the tier's raw
bytes (sql_views.py).

Driver-side; builds Spark column expressions only (no I/O).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType


def conform(column: Column, have: DataType, want: DataType) -> Column:
    """``column`` (of type ``have``) as type ``want``: struct fields matched by name, fields
    ``have`` lacks are null, through lists and map values; other types cast."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    if have.simpleString() == want.simpleString():
        return column
    if isinstance(have, StructType) and isinstance(want, StructType):
        present = {f.name: f.dataType for f in have.fields}
        fields = [(conform(column.getField(f.name), present[f.name], f.dataType)
                   if f.name in present else F.lit(None).cast(f.dataType)).alias(f.name)
                  for f in want.fields]
        return F.when(column.isNull(), F.lit(None).cast(want)).otherwise(F.struct(*fields))
    if isinstance(have, ArrayType) and isinstance(want, ArrayType):
        return F.transform(column, lambda item: conform(item, have.elementType,
                                                        want.elementType))
    if isinstance(have, MapType) and isinstance(want, MapType):
        return F.transform_values(column, lambda _key, item: conform(
            item, have.valueType, want.valueType))
    return column.cast(want)


def has_typed_columns(rows: DataFrame, sides: list[str]) -> bool:
    """Whether the table has the ``<side>_typed`` column of every typed side."""
    return all(f"{side}_typed" in rows.columns for side in sides)


def tier_columns(rows: DataFrame, topic: str, tail: DataFrame) -> DataFrame:
    """The catalog table's ``rows`` in the layout (names, order, types) of the typed read
    ``tail``: typed sides from ``<side>_typed`` conformed to the tail's types."""
    from pyspark.sql import functions as F

    table_types = {f.name: f.dataType for f in rows.schema.fields}
    wanted = {f.name: f.dataType for f in tail.schema.fields}
    typed_sides = [side for side in ("key", "value") if f"{side}_bytes" in wanted]
    columns: list[Column] = []
    for name in tail.columns:
        if name in typed_sides:
            have = table_types[f"{name}_typed"]
            column = conform(F.col(f"{name}_typed"), have, wanted[name])
        elif name.endswith("_bytes") and name[:-len("_bytes")] in typed_sides:
            column = F.col(name[:-len("_bytes")])
        elif name.endswith("_schema_id"):
            column = F.col(name).cast("int")
        elif name.endswith("_error") and name[:-len("_error")] in typed_sides:
            column = F.col(name)
        elif name == "topic":
            column = F.lit(topic)
        elif name == "partition":
            column = F.col("partition").cast("int")
        elif name == "timestampType":
            column = F.col("timestamp_type")
        elif name == "headers":
            column = F.when(F.size("headers") > 0, F.col("headers"))
        else:
            column = F.col(name)
        columns.append(column.alias(name))
    return rows.select(*columns)
