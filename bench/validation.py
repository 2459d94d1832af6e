"""Cost of the produce-path record validator alone (loglake/segments/validation.py).

Run from the repository root with the project's virtualenv::

    python bench/validation.py [--repeats 7] [--sizes 1,100,1000,6700] [--codecs none,lz4,zstd]

For each codec and batch size it encodes one producer batch (``records.encode_batch``: null
keys, ``--record-size`` (100) byte distinct, text-like values, timestamps 1 ms apart, the shape
``bench/produce_consume.py`` sends) and times ``validation.validate_batch`` on it: what the
leader runs per produced batch, decompression included. Each measurement is the mean over a
loop of at least ``--min-seconds`` (0.2 s); the table shows the median of ``--repeats`` such
measurements in µs per record and per batch, for the path the validator picks (per-record loop
below ``VECTOR_MIN_RECORDS`` records, pyarrow kernels from there) and for both paths forced.
No process is started; nothing is written but the JSON results.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from measure import format_table, log, run_main, write_results

from loglake.config import TopicConfig
from loglake.segments import validation
from loglake.segments.batch import parse_batches
from loglake.segments.records import Compression, Record, encode_batch

BASE_TIMESTAMP = 1_700_000_000_000


def _batch(records: int, record_size: int, codec: Compression) -> bytes:
    values = [(b"%08d " % i + b"payload-%d-" % (i * 7919) * 8)[:record_size]
              for i in range(records)]
    return encode_batch([Record(offset=i, timestamp=BASE_TIMESTAMP + i, key=None, value=v)
                         for i, v in enumerate(values)], compression=codec)


def _time_per_call(call: Callable[[], object], min_seconds: float) -> float:
    call()
    loops, start = 0, time.perf_counter()
    while True:
        call()
        loops += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return elapsed / loops


def _measure(batch: bytes, threshold: int | None, repeats: int, min_seconds: float) -> float:
    header = parse_batches(batch)[0]
    rules = validation.RecordRules.for_topic(TopicConfig(), BASE_TIMESTAMP + 10_000, "bench-0")
    saved = validation.VECTOR_MIN_RECORDS
    if threshold is not None:
        validation.VECTOR_MIN_RECORDS = threshold
    try:
        samples = [_time_per_call(lambda: validation.validate_batch(batch, header, rules),
                                  min_seconds) for _ in range(repeats)]
    finally:
        validation.VECTOR_MIN_RECORDS = saved
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--min-seconds", type=float, default=0.2)
    parser.add_argument("--sizes", default="1,100,1000,6700")
    parser.add_argument("--codecs", default="none,lz4,zstd")
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--results-dir", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    codecs = [Compression[name.upper()] for name in args.codecs.split(",")]
    rows, results = [], []
    for codec in codecs:
        for size in sizes:
            batch = _batch(size, args.record_size, codec)
            chosen = _measure(batch, None, args.repeats, args.min_seconds)
            loop = _measure(batch, 1 << 40, args.repeats, args.min_seconds)
            vector = _measure(batch, 0, args.repeats, args.min_seconds)
            log(f"  {codec.name.lower()} {size}: {chosen / size * 1e6:.3f} µs/record")
            results.append({"codec": codec.name.lower(), "records": size,
                            "batch_bytes": len(batch), "seconds_per_batch": chosen,
                            "loop_seconds_per_batch": loop,
                            "vector_seconds_per_batch": vector})
            rows.append([codec.name.lower(), f"{size:,}", f"{len(batch):,}",
                         f"{chosen / size * 1e6:.3f}", f"{chosen * 1e6:,.0f}",
                         f"{loop / size * 1e6:.3f}", f"{vector / size * 1e6:.3f}"])
    print(f"validate_batch, {args.record_size}-byte values, median of {args.repeats} "
          f"(VECTOR_MIN_RECORDS = {validation.VECTOR_MIN_RECORDS})\n")
    print(format_table(["codec", "records", "batch bytes", "µs/record", "µs/batch",
                        "loop µs/record", "vector µs/record"], rows))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    write_results(args.results_dir, f"validation-{stamp}", {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "vector_min_records": validation.VECTOR_MIN_RECORDS, "results": results})
    return 0


if __name__ == "__main__":
    run_main(main)
