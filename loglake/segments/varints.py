"""Lookup tables for the zig-zag varints of RecordBatch v2 records (records.py documents the
format): the value of every one-byte varint, and of every two-byte varint, by index.

Shared by the produce validator (validation.py) and the tier decoder (tier_codec.py), whose
record walks read most lengths, deltas and sizes with one table lookup. Built once at import;
read-only afterwards, so thread-safe.
"""

from __future__ import annotations

import pyarrow as pa

ONE_BYTE_VARINTS = [(b >> 1) ^ -(b & 1) for b in range(0x80)]
"""Value of the one-byte varint ``b`` (b < 0x80)."""


def _short_varint_table() -> list[int]:
    table = [0] * (0x100 + (0x7F << 7))
    table[:0x80] = ONE_BYTE_VARINTS
    for first in range(0x80, 0x100):
        for second in range(0x80):
            raw = (first & 0x7F) | (second << 7)
            table[first + (second << 7)] = (raw >> 1) ^ -(raw & 1)
    return table


SHORT_VARINTS = _short_varint_table()
"""Values of the varints of one byte ``b`` (at index ``b``) and of two bytes ``b, c``
(b >= 0x80 > c, at index ``b + (c << 7)``); the two index ranges do not overlap."""
SHORT_VARINT_ARRAY = pa.array(SHORT_VARINTS, pa.int64())
"""SHORT_VARINTS as an Arrow int64 array, for vectorised ``take`` lookups."""

MIN_RECORD_LENGTH = 6
"""Smallest record body: attributes, timestampDelta, offsetDelta, key and value lengths,
header count (one byte each)."""

PAST_ANY_END = 1 << 62
"""A position beyond any batch: where a record walk lands after an impossible length."""

RECORD_STEPS = [
    (1 if index < 0x80 else 2) + value if value >= MIN_RECORD_LENGTH else PAST_ANY_END
    for index, value in enumerate(SHORT_VARINTS)
]
"""How far a record whose length prefix is the one- or two-byte varint at ``index`` (as in
SHORT_VARINTS) reaches: prefix + length; PAST_ANY_END for lengths below the minimum."""
