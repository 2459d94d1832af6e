"""The ten-field Avro ``Click`` record of the schema benchmarks (``schema_decode.py``,
``typed_query.py``): a long ``user_id``, string, int, double, boolean, an array, a map, a
nullable string, bytes and an enum — every Avro shape the typed columns map, in one record.
"""

from __future__ import annotations

from typing import Any

CLICK: dict[str, Any] = {"type": "record", "name": "Click", "namespace": "bench", "fields": [
    {"name": "user_id", "type": "long"}, {"name": "url", "type": "string"},
    {"name": "count", "type": "int"}, {"name": "score", "type": "double"},
    {"name": "ok", "type": "boolean"},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
    {"name": "ref", "type": ["null", "string"], "default": None},
    {"name": "raw", "type": "bytes"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}}]}
