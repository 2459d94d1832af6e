"""Decoding throughput of loglake.schemas.decode.decode_column: framed Avro records with ten
fields (long, string, int, double, boolean, array, map, nullable string, bytes, enum) decoded
into a typed Arrow column, against the raw cost of framing ids alone (wire.schema_ids).

In-process, single-threaded, no I/O: what the tierer's worker spends per record on typed
columns. Prints records/s (median of ``--runs`` runs of ``--records`` records each).

    .venv/bin/python bench/schema_decode.py [--records 100000] [--runs 5]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import time

import fastavro
import pyarrow as pa
from click_schema import CLICK

from loglake.schemas import wire
from loglake.schemas.arrow_types import arrow_type
from loglake.schemas.decode import decode_column
from loglake.schemas.model import RegisteredSchema
from loglake.schemas.schema_set import SchemaSet


def records(count: int) -> pa.Array:
    parsed = fastavro.parse_schema(CLICK)
    out = []
    for i in range(count):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {
            "user_id": i, "url": f"https://example.com/p/{i % 1000}", "count": i % 77,
            "score": i / 3, "ok": i % 2 == 0, "tags": ["a", "b"], "attrs": {"x": i},
            "ref": None if i % 3 else "r", "raw": b"\x01\x02\x03", "kind": "AB"[i % 2]})
        out.append(wire.frame(1, buf.getvalue()))
    return pa.array(out, type=pa.binary())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    source = SchemaSet({1: RegisteredSchema(1, "AVRO", json.dumps(CLICK))})
    target = arrow_type(source.by_id[1], source)
    values = records(args.records)
    decode_rates, id_rates = [], []
    for run in range(args.runs):
        start = time.perf_counter()
        decoded = decode_column(values, target, source)
        decode_rates.append(args.records / (time.perf_counter() - start))
        if decoded.errors.null_count != args.records:
            raise SystemExit(f"run {run}: {args.records - decoded.errors.null_count} errors")
        start = time.perf_counter()
        wire.schema_ids(values)
        id_rates.append(args.records / (time.perf_counter() - start))
        print(f"run {run + 1}/{args.runs}: decode {decode_rates[-1]:,.0f} records/s, "
              f"schema ids {id_rates[-1]:,.0f} records/s", flush=True)
    print(f"median: decode_column {statistics.median(decode_rates):,.0f} records/s "
          f"(10-field Avro record, {args.records} records); wire.schema_ids "
          f"{statistics.median(id_rates):,.0f} records/s")


if __name__ == "__main__":
    main()
