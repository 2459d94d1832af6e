"""Baselines measured on the same box in the same run: Redis Streams and a plain file append.

* Redis Streams: a ``redis-server`` we start ourselves on a free loopback port (append-only file,
  ``appendfsync everysec``, no RDB snapshots, data in a temporary directory). Produce = ``XADD``
  in non-transactional pipelines; consume = ``XRANGE`` in chunks with an exclusive start id.
  :class:`RedisServer` stops exactly the pid it started (SIGTERM, then SIGKILL), also on errors.
* File append: the same records encoded as Kafka RecordBatch v2 bytes in the batch sizes the
  producer really sent, written back to back with ``f.write`` (no fsync, like the broker's
  default ``flush.messages``); only the write loop and the final flush are timed.

Every loop is bounded by a record count and a deadline. Single-threaded.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import cast

import redis
from measure import BenchmarkError, PhaseResult, Progress, cpu_seconds, log

from loglake.dev.net import LOOPBACK, free_port_block
from loglake.segments.records import Record, encode_batch

REDIS_STREAM = "bench"
REDIS_FIELD = b"v"
REDIS_START_TIMEOUT_S = 10.0
REDIS_STOP_TIMEOUT_S = 10.0
XRANGE_CHUNK = 10_000
PROGRESS_EVERY = 10_000
"""Records between two checks of the clock (progress line and deadline)."""


class RedisServer:
    """A private ``redis-server`` for one run; a context manager that always stops it."""

    def __init__(self, directory: Path, *, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port_block(1)
        self.log_path = directory / "redis-server.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._process is None:
            raise BenchmarkError("redis-server is not running")
        return self._process.pid

    def command(self) -> list[str]:
        binary = shutil.which("redis-server")
        if binary is None:
            raise BenchmarkError("redis-server not found on PATH "
                                 "(install the Debian package redis-server; ./run setup does)")
        return [binary, "--bind", LOOPBACK, "--port", str(self.port),
                "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
                "--dir", str(self.directory), "--daemonize", "no", "--logfile", ""]

    def start(self, *, timeout: float = REDIS_START_TIMEOUT_S) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:
            self._process = subprocess.Popen(self.command(), stdout=log_file,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise BenchmarkError(f"redis-server exited with {self._process.returncode} "
                                     f"during startup; see {self.log_path}")
            try:
                if self.client().ping():
                    return self
            except redis.ConnectionError:
                pass
            if time.monotonic() >= deadline:
                raise BenchmarkError(f"redis-server did not answer PING on port {self.port} "
                                     f"within {timeout:g} s; see {self.log_path}")
            time.sleep(0.05)

    def client(self) -> redis.Redis:
        return redis.Redis(host=LOOPBACK, port=self.port, socket_timeout=60.0)

    def stop(self, *, timeout: float = REDIS_STOP_TIMEOUT_S) -> None:
        """SIGTERM the server we started, SIGKILL it after ``timeout`` s; wait until it is gone."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)

    def __enter__(self) -> RedisServer:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def redis_produce(server: RedisServer, *, records: int, payload: bytes, pipeline_size: int,
                  timeout: float) -> PhaseResult:
    """XADD ``records`` entries (one field, ``payload``) in pipelines of ``pipeline_size``."""
    client = server.client()
    pipe = client.pipeline(transaction=False)
    progress = Progress("redis XADD", records)
    fields = {REDIS_FIELD: payload}
    cpu_before = cpu_seconds(server.pid)
    started = time.perf_counter()
    deadline = started + timeout
    sent = 0
    while sent < records:
        size = min(pipeline_size, records - sent)
        for _ in range(size):
            pipe.xadd(REDIS_STREAM, fields)  # type: ignore[arg-type]
        pipe.execute()
        sent += size
        if sent % PROGRESS_EVERY < pipeline_size:
            progress.update(sent)
            if time.perf_counter() > deadline:
                raise BenchmarkError(f"redis XADD exceeded {timeout:g} s after {sent} records")
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds(server.pid) - cpu_before
    progress.update(sent, force=True)
    length = client.xlen(REDIS_STREAM)
    if length != records:
        raise BenchmarkError(f"redis stream holds {length} entries, expected {records}")
    client.close()
    return PhaseResult(records, records * len(payload), elapsed, cpu)


def redis_consume(server: RedisServer, *, records: int, record_size: int,
                  timeout: float) -> PhaseResult:
    """Read the whole stream back with XRANGE in chunks of :data:`XRANGE_CHUNK`; verify it."""
    client = server.client()
    progress = Progress("redis XRANGE", records)
    cpu_before = cpu_seconds(server.pid)
    started = time.perf_counter()
    deadline = started + timeout
    received = 0
    payload_bytes = 0
    start: bytes | str = "-"
    while received < records:
        entries = cast(list[tuple[bytes, dict[bytes, bytes]]], client.xrange(
            REDIS_STREAM, min=start, max="+", count=min(XRANGE_CHUNK, records - received)))
        if not entries:
            break
        for _entry_id, fields in entries:
            payload_bytes += len(fields[REDIS_FIELD])
        received += len(entries)
        start = b"(" + entries[-1][0]
        progress.update(received)
        if time.perf_counter() > deadline:
            raise BenchmarkError(f"redis XRANGE exceeded {timeout:g} s after {received} records")
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds(server.pid) - cpu_before
    progress.update(received, force=True)
    client.close()
    if received != records or payload_bytes != records * record_size:
        raise BenchmarkError(f"redis XRANGE returned {received} entries / {payload_bytes} B, "
                             f"expected {records} / {records * record_size} B")
    return PhaseResult(records, payload_bytes, elapsed, cpu)


def build_batches(batch_record_counts: Sequence[int], *, payload: bytes,
                  timestamp_ms: int) -> list[bytes]:
    """RecordBatch v2 bytes of consecutive records (null key, ``payload`` value), one batch per
    entry of ``batch_record_counts`` holding that many records; offsets count up from 0."""
    batches = []
    offset = 0
    progress = Progress("encoding batches", sum(batch_record_counts), interval=2.0)
    for count in batch_record_counts:
        records = [Record(offset + index, timestamp_ms, None, payload) for index in range(count)]
        batches.append(encode_batch(records))
        offset += count
        progress.update(offset)
    return batches


def file_append(path: Path, batches: Sequence[bytes], *, records: int,
                payload_size: int) -> PhaseResult:
    """Time ``f.write`` of every batch plus the final flush (open and close are not timed)."""
    with open(path, "ab") as file:
        write = file.write
        started = time.perf_counter()
        for batch in batches:
            write(batch)
        file.flush()
        elapsed = time.perf_counter() - started
    written = path.stat().st_size
    expected = sum(len(batch) for batch in batches)
    if written != expected:
        raise BenchmarkError(f"{path} holds {written} B, expected {expected} B")
    log(f"  file append: {records:,} records, {written:,} B in {elapsed:.3f} s")
    return PhaseResult(records, records * payload_size, elapsed)
