"""Typed tiering: sealed segment -> Delta throughput with typed columns vs raw, same run.

Run from the repository root with the project's virtualenv::

    python bench/typed_tiering.py [--runs 5] [--records 200000]

A sealed segment of ``--records`` Avro records (a 10-field record: longs, strings, a double, a
boolean, an optional string, an array; framed with Confluent's wire format, ~120 B each) in
producer batches of ``--batch-records`` (500) is written to a file once. Each run times, for the
same segment, what the broker's tierer does for it, into a fresh table on local disk:

* **raw**: ``tiered_table.write_segment_file`` (read, decode batches, Parquet) without typing,
  then ``TieredTable.commit``;
* **typed**: the same with the topic's typing (segments/tier_typing.py: schema ids, side type,
  ``decode_column`` into ``value_typed``/``value_schema_id``/``value_error``), then the commit
  (with the table's first schema evolution: one metadata commit, as the first typed segment
  of a topic pays).

The two alternate within a run (raw first on odd runs, typed first on even ones) so drift on a
shared box hits both. Medians over ``--runs``; the ratio typed/raw is what typing costs.
Progress on stderr, a table on stdout, JSON in ``bench/results/typed_tiering-<UTC>.json``.
Every loop is bounded by a count; no process is started.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
from measure import BenchmarkError, Progress, format_table, log, run_main, write_results
from produce_consume import machine_info

from loglake.schemas.model import RegisteredSchema, SubjectVersion
from loglake.schemas.schema_set import SchemaSet
from loglake.schemas.wire import frame
from loglake.segments.filenames import LOG_SUFFIX
from loglake.segments.records import Record, encode_batch
from loglake.segments.storage import Storage
from loglake.segments.tier_typing import TierTyping
from loglake.segments.tiered_table import TieredTable, write_segment_file

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SCHEMA_ID = 1
SUBJECT = "bench-value"
SCHEMA = {
    "type": "record", "name": "Click", "namespace": "bench",
    "fields": [
        {"name": "user_id", "type": "long"},
        {"name": "session_id", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "referrer", "type": ["null", "string"], "default": None},
        {"name": "ts", "type": "long"},
        {"name": "duration_ms", "type": "long"},
        {"name": "score", "type": "double"},
        {"name": "logged_in", "type": "boolean"},
        {"name": "country", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}


@dataclass(frozen=True)
class Config:
    runs: int = 5
    records: int = 200_000
    batch_records: int = 500


@dataclass(frozen=True)
class Run:
    mode: str
    records: int
    write_s: float
    commit_s: float
    parquet_bytes: int

    @property
    def records_per_s(self) -> float:
        return self.records / (self.write_s + self.commit_s)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "records_per_s": self.records_per_s}


def click(i: int) -> dict[str, Any]:
    return {"user_id": i % 10_007, "session_id": f"s-{i // 20:08x}", "page": f"/p/{i % 211}",
            "referrer": None if i % 3 else f"https://r{i % 17}.example/x",
            "ts": 1_700_000_000_000 + i, "duration_ms": (i * 37) % 60_000,
            "score": (i % 1000) / 7, "logged_in": i % 2 == 0, "country": ("de", "fr", "us")[i % 3],
            "tags": [f"t{i % 5}", f"u{i % 7}"][: i % 3]}


def build_segment(config: Config, path: Path) -> int:
    """Write the segment file; returns its size."""
    parsed = fastavro.parse_schema(SCHEMA)
    progress = Progress("encoding the segment", config.records, interval=2.0)
    timestamp = int(time.time() * 1000) - 3_600_000
    with path.open("wb") as out:
        for base in range(0, config.records, config.batch_records):
            count = min(config.batch_records, config.records - base)
            records = []
            for i in range(base, base + count):
                buf = io.BytesIO()
                fastavro.schemaless_writer(buf, parsed, click(i))
                records.append(Record(i, timestamp, None, frame(SCHEMA_ID, buf.getvalue())))
            out.write(encode_batch(records))
            timestamp += 1
            progress.update(base + count)
    progress.update(config.records, force=True)
    return path.stat().st_size


def typing() -> TierTyping:
    schema = RegisteredSchema(SCHEMA_ID, "AVRO", json.dumps(SCHEMA))
    return TierTyping(subjects={"value": SUBJECT},
                      schemas=SchemaSet({SCHEMA_ID: schema}, {},
                                        {SUBJECT: [SubjectVersion(SUBJECT, 1, SCHEMA_ID)]}))


def one_run(config: Config, segment: Path, lake: Path, mode: str) -> Run:
    storage = Storage.from_url(str(lake))
    table = TieredTable(storage, "bench")
    table.ensure_created()  # once per topic in the broker: not timed
    started = time.perf_counter()
    written = write_segment_file(storage, "bench", 0, segment, 0, config.records, (),
                                 typing() if mode == "typed" else None)
    wrote = time.perf_counter()
    if written.pending is None or written.pending.num_records != config.records:
        raise BenchmarkError(f"{mode}: wrote {written.pending}, expected {config.records} rows")
    if mode == "typed" and (written.typed is None or written.typed_errors):
        raise BenchmarkError(f"typed: {written.typed_errors} values did not decode")
    if not table.commit(0, [written.pending], config.records - 1, expected_end=None,
                        typed=written.typed):
        raise BenchmarkError(f"the commit into the fresh table {lake} was refused")
    committed = time.perf_counter()
    return Run(mode, config.records, wrote - started, committed - wrote, written.pending.size)


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=Config.runs)
    parser.add_argument("--records", type=int, default=Config.records)
    parser.add_argument("--batch-records", type=int, default=Config.batch_records)
    args = parser.parse_args(argv)
    if args.runs < 1 or args.records < 1 or args.batch_records < 1:
        parser.error("--runs, --records and --batch-records must be positive")
    return Config(args.runs, args.records, args.batch_records)


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    started = datetime.now(UTC)
    work = Path(tempfile.mkdtemp(prefix="loglake-bench-typed-tiering-"))
    runs: list[Run] = []
    try:
        segment = work / f"{0:020d}{LOG_SUFFIX}"
        size = build_segment(config, segment)
        log(f"typed tiering: {config.records:,} Avro records, segment {size:,} B, "
            f"{config.runs} runs")
        for index in range(1, config.runs + 1):
            order = ("raw", "typed") if index % 2 else ("typed", "raw")
            for mode in order:
                lake = work / f"lake-{mode}-{index}"
                run = one_run(config, segment, lake, mode)
                runs.append(run)
                log(f"  run {index}/{config.runs} {mode:5}: {run.records_per_s:>10,.0f} rec/s "
                    f"(write {run.write_s:.3f} s, commit {run.commit_s:.3f} s, "
                    f"parquet {run.parquet_bytes:,} B)")
                shutil.rmtree(lake, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {mode: statistics.median(r.records_per_s for r in runs if r.mode == mode)
               for mode in ("raw", "typed")}
    ratio = medians["typed"] / medians["raw"]
    print(format_table(["mode", "records/s (median)", "runs"], [
        [mode, f"{medians[mode]:,.0f}", str(sum(1 for r in runs if r.mode == mode))]
        for mode in ("raw", "typed")]))
    print(f"typed / raw: {ratio:.2f}")
    write_results(RESULTS_DIR, f"typed_tiering-{started:%Y%m%dT%H%M%SZ}", {
        "benchmark": "typed_tiering", "started": started.isoformat(), "config": asdict(config),
        "machine": machine_info(), "runs": [r.to_json() for r in runs],
        "median_records_per_s": medians, "typed_over_raw": ratio})
    return 0


if __name__ == "__main__":
    run_main(main)
