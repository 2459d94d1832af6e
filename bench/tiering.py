"""Tiering: sealed segment -> Delta throughput, seal-to-commit latency, fetches from the tier.

Run from the repository root with the project's virtualenv::

    python bench/tiering.py [--runs 3] [--records 1000000] [--fetch-records 1000000]

What it measures (records have null keys and ``--record-size`` (100) byte values that are all
distinct, text-like and compressible, so Parquet cannot collapse them into a dictionary):

1. **Tiering throughput** (no broker). A sealed segment of ``--records`` records in producer
   batches of ``--batch-records`` (500), once uncompressed and once lz4 (``--codecs``), is
   written to a file. Each run, per codec, times what the broker's tierer does for one segment:
   read the file, ``tier_rows.batches_to_rows``, ``TieredTable.write_file`` (Parquet, zstd) and
   ``TieredTable.commit`` (Delta commit with the app transaction) into a fresh table on local
   disk. The baseline, in the same run, is a plain ``pyarrow.parquet.write_table`` of the very
   same rows (``--baseline-compression``, zstd like the tier files), so the ratio is the cost
   of decoding the Kafka batches plus the Delta bookkeeping. Medians over ``--runs``.
2. **Seal-to-commit latency** on a 1-broker dev cluster (real ZooKeeper + broker process,
   tiering to the cluster's local storage folder). One topic with ``segment.bytes`` =
   ``--latency-segment-bytes`` gets ``--latency-rate`` records/s from a paced confluent-kafka
   producer (acks=1, linger.ms 5) for ``--latency-seconds``, so segments roll every fraction of
   a second. A poller lists the partition directory every ``--poll-ms`` and notes when each
   ``.log`` file first appears. For each sealed segment the latency runs from its seal to the
   timestamp of the Delta commit that tiered it (``DeltaTable.history()``, matched by the
   commit's ``loglake.last_offset``). The seal time is taken two ways: when the next segment's
   file appeared (the roll itself, to within the poll interval), and, more conservatively, the
   sealed file's mtime (its last write, a few ms before the roll). Segments sealed in the first
   ``--latency-warmup-seconds`` (table creation) do not count. The default 60 s (~4 rolls/s)
   spans two or three Delta checkpoints (every 100 commits), which dominate the tail.
3. **Fetch throughput, tier vs local**, on a fresh 1-broker dev cluster. Two topics get the
   same ``--fetch-records`` records: one tiered with ``local.retention.ms=0`` (the broker checks
   retention every second, so every sealed segment is deleted locally once tiered; the script
   waits for that), one with ``remote.storage.enable=false``. Each run, a confluent-kafka
   consumer reads each topic from offset 0 to the end (connection and metadata not timed);
   records/s and the ratio tier/local, medians over ``--runs``. Broker CPU (utime + stime from
   /proc) is measured around each read. The consumer prefetches up to a million messages
   (:data:`CONSUMER_PREFETCH`): with librdkafka's defaults it idles for a second whenever its
   100,000-message queue is full, which would measure the client, not the broker.

Results: tables on stdout (progress goes to stderr) and JSON in
``bench/results/tiering-<UTC timestamp>.json``. Every loop is bounded by a count and by
``--phase-timeout``; the harness stops exactly the processes it started.
"""

from __future__ import annotations

import argparse
import itertools
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from deltalake import DeltaTable
from measure import (
    BenchmarkError,
    Progress,
    cpu_seconds,
    format_table,
    log,
    percentile,
    report_targets,
    run_main,
    write_results,
)
from produce_consume import broker_pid, machine_info
from producing import ADMIN_TIMEOUT_S

from loglake.dev.harness import DevCluster
from loglake.segments import batch as batch_format
from loglake.segments.filenames import LOG_SUFFIX
from loglake.segments.records import Compression, Record, compress, encode_batch
from loglake.segments.storage import Storage
from loglake.segments.tier_rows import batches_to_rows
from loglake.segments.tiered_table import TieredTable

RESULTS_DIR = Path(__file__).resolve().parent / "results"
LATENCY_P99_TARGET_S = 1.0
"""Seal-to-commit p99 must be at most this."""
CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
          "lz4": Compression.LZ4, "zstd": Compression.ZSTD}
LATENCY_TOPIC = "bench-tier-latency"
TIER_TOPIC = "bench-fetch-tier"
LOCAL_TOPIC = "bench-fetch-local"
CONSUME_BATCH = 10_000
"""Messages per ``Consumer.consume`` call."""
PRODUCE_CHUNK = 10_000
CONSUMER_PREFETCH = {"queued.min.messages": 1_000_000, "fetch.queue.backoff.ms": 10}
"""librdkafka's defaults (prefetch 100,000 messages, then back off 1 s) stall a consumer that
reads batches of thousands of records: measured here, that capped a local read at ~170,000
records/s with an idle broker. These let the fetcher keep the broker busy."""


@dataclass(frozen=True)
class TieringBenchConfig:
    """What one invocation measures; every field is a command-line option of the same name."""

    runs: int = 3
    records: int = 1_000_000
    record_size: int = 100
    batch_records: int = 500
    codecs: tuple[str, ...] = ("none", "lz4")
    baseline_compression: str = "zstd"
    latency_seconds: float = 60.0
    latency_warmup_seconds: float = 3.0
    latency_rate: float = 20_000.0
    latency_segment_bytes: int = 500_000
    poll_ms: float = 10.0
    fetch_records: int = 1_000_000
    fetch_segment_bytes: int = 4_000_000
    phases: tuple[str, ...] = ("throughput", "latency", "fetch")
    phase_timeout: float = 300.0
    work_dir: Path | None = None
    keep_data: bool = False
    results_dir: Path = RESULTS_DIR

    def __post_init__(self) -> None:
        if min(self.runs, self.records, self.batch_records, self.fetch_records) < 1:
            raise ValueError("--runs, --records, --batch-records, --fetch-records must be >= 1")
        if self.record_size < 16:
            raise ValueError("--record-size must be at least 16 (values carry a sequence)")
        if not set(self.codecs) <= set(CODECS) or not self.codecs:
            raise ValueError(f"--codecs must name some of {sorted(CODECS)}")
        if not set(self.phases) <= {"throughput", "latency", "fetch"} or not self.phases:
            raise ValueError("--phases must name some of throughput, latency, fetch")
        if self.latency_seconds <= self.latency_warmup_seconds or self.latency_rate <= 0:
            raise ValueError("--latency-seconds must exceed --latency-warmup-seconds; "
                             "--latency-rate must be > 0")
        if self.poll_ms <= 0 or self.phase_timeout <= 0:
            raise ValueError("--poll-ms and --phase-timeout must be > 0")


# -- records --------------------------------------------------------------------------------------

_WORDS = [b"login", b"logout", b"click", b"view", b"purchase", b"refund", b"search", b"share"]


class Values:
    """Distinct, text-like record values: a 10-digit sequence number, then one of 4096
    pseudo-random JSON-ish bodies (so values compress like logs but never repeat)."""

    def __init__(self, size: int, seed: int = 7) -> None:
        rng = random.Random(seed)
        self.size = size
        self.bodies = [
            (b'|{"user":"u%05d","event":"%s","amount":%d,"region":"r%02d","note":"'
             % (rng.randrange(100_000), rng.choice(_WORDS), rng.randrange(1_000_000),
                rng.randrange(40))
             + bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz ") for _ in range(size)))[:size]
            for _ in range(4096)
        ]

    def __call__(self, seq: int) -> bytes:
        return (b"%010d" % seq + self.bodies[seq & 4095])[: self.size]


def build_segment(config: TieringBenchConfig, values: Values) -> list[bytes]:
    """The uncompressed batches of the throughput segment (records.encode_batch, as a
    producer would send them), offsets from 0, 1 ms of timestamps per batch."""
    batches = []
    progress = Progress("encoding the segment", config.records, interval=2.0)
    timestamp = int(time.time() * 1000) - 3_600_000
    for base in range(0, config.records, config.batch_records):
        count = min(config.batch_records, config.records - base)
        batches.append(encode_batch([Record(base + i, timestamp + i // 100, None,
                                            values(base + i)) for i in range(count)]))
        timestamp += 1
        progress.update(base + count)
    progress.update(config.records, force=True)
    return batches


def recompressed(batches: Sequence[bytes], codec: int) -> bytes:
    """The same batches with their records section compressed with ``codec``."""
    if codec == Compression.NONE:
        return b"".join(batches)
    out = []
    for data in batches:
        header = batch_format.read_header(data)
        payload = compress(codec, data[batch_format.HEADER_SIZE :])
        size = batch_format.HEADER_SIZE + len(payload)
        new = bytearray(size)
        batch_format.HEADER.pack_into(
            new, 0, header.base_offset, size - batch_format.LOG_OVERHEAD,
            header.partition_leader_epoch, 2, 0, header.attributes | codec,
            header.last_offset_delta, header.base_timestamp, header.max_timestamp,
            header.producer_id, header.producer_epoch, header.base_sequence,
            header.record_count)
        new[batch_format.HEADER_SIZE :] = payload
        crc = batch_format.compute_crc(new, 0, size)
        new[batch_format.CRC_OFFSET : batch_format.CRC_OFFSET + 4] = crc.to_bytes(4, "big")
        out.append(bytes(new))
    return b"".join(out)


# -- 1. tiering throughput -----------------------------------------------------------------------


@dataclass(frozen=True)
class ThroughputRun:
    """One run of one codec: our path (read + decode + Parquet + commit) and the baseline."""

    codec: str
    records: int
    segment_bytes: int
    read_s: float
    decode_s: float
    write_s: float
    commit_s: float
    baseline_s: float
    parquet_bytes: int
    baseline_bytes: int

    @property
    def tier_s(self) -> float:
        return self.read_s + self.decode_s + self.write_s + self.commit_s

    @property
    def tier_records_per_s(self) -> float:
        return self.records / self.tier_s

    @property
    def baseline_records_per_s(self) -> float:
        return self.records / self.baseline_s

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "tier_s": self.tier_s,
                "tier_records_per_s": self.tier_records_per_s,
                "baseline_records_per_s": self.baseline_records_per_s}


def throughput_run(config: TieringBenchConfig, segment: Path, codec: str,
                   lake: Path) -> ThroughputRun:
    storage = Storage.from_url(str(lake))
    table = TieredTable(storage, "bench")
    table.ensure_created()  # once per topic in the broker: not timed
    started = time.perf_counter()
    data = segment.read_bytes()
    read = time.perf_counter()
    rows = batches_to_rows(data, start_offset=0, end_offset=config.records)
    decoded = time.perf_counter()
    pending = table.write_file(0, rows)
    written = time.perf_counter()
    if not table.commit(0, [pending], config.records - 1, expected_end=None):
        raise BenchmarkError(f"the commit into the fresh table {lake} was refused")
    committed = time.perf_counter()
    if rows.num_rows != config.records or table.tiered_end(0) != config.records:
        raise BenchmarkError(f"tiered {rows.num_rows} rows up to {table.tiered_end(0)}, "
                             f"expected {config.records}")
    baseline_path = lake / "baseline.parquet"
    begin = time.perf_counter()
    pq.write_table(rows, baseline_path, compression=config.baseline_compression)
    baseline = time.perf_counter() - begin
    return ThroughputRun(codec, rows.num_rows, len(data), read - started, decoded - read,
                         written - decoded, committed - written, baseline, pending.size,
                         baseline_path.stat().st_size)


def throughput_phase(config: TieringBenchConfig, work: Path,
                     values: Values) -> list[ThroughputRun]:
    log(f"1. tiering throughput: {config.records:,} records of {config.record_size} B in "
        f"batches of {config.batch_records}, codecs {list(config.codecs)}")
    batches = build_segment(config, values)
    segments = {}
    for codec in config.codecs:
        path = work / f"segment-{codec}{LOG_SUFFIX}"
        path.write_bytes(recompressed(batches, CODECS[codec]))
        segments[codec] = path
        log(f"  {codec} segment: {path.stat().st_size:,} B")
    del batches
    results = []
    for index in range(1, config.runs + 1):
        for codec, path in segments.items():
            lake = work / f"lake-{codec}-{index}"
            result = throughput_run(config, path, codec, lake)
            log(f"  run {index}/{config.runs} {codec}: tier {result.tier_records_per_s:,.0f} "
                f"rec/s (read {result.read_s:.3f} s, decode {result.decode_s:.3f} s, parquet "
                f"{result.write_s:.3f} s, commit {result.commit_s:.3f} s); baseline "
                f"write_table {result.baseline_records_per_s:,.0f} rec/s")
            results.append(result)
            shutil.rmtree(lake, ignore_errors=True)
    return results


# -- 2. seal-to-commit latency -------------------------------------------------------------------


class DirectoryPoller:
    """Notes when each ``.log`` file first appears in a directory (wall clock), every
    ``interval`` seconds, on a daemon thread, until :meth:`stop` or ``timeout``."""

    def __init__(self, directory: Path, interval: float, timeout: float) -> None:
        self.directory = directory
        self.interval = interval
        self.timeout = timeout
        self.first_seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="segment-poller", daemon=True)

    def start(self) -> DirectoryPoller:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while not self._stop.is_set() and time.monotonic() < deadline:
            now = time.time()
            try:
                names = [p.name for p in self.directory.iterdir() if p.suffix == LOG_SUFFIX]
            except OSError:  # the directory does not exist yet
                names = []
            for name in names:
                self.first_seen.setdefault(name, now)
            self._stop.wait(self.interval)


@dataclass(frozen=True)
class SegmentLatency:
    base_offset: int
    last_offset: int
    records: int
    sealed_s: float  # the next segment file appeared (wall clock)
    mtime_s: float  # the sealed file's last write
    committed_s: float  # Delta commit timestamp

    @property
    def from_roll_s(self) -> float:
        return self.committed_s - self.sealed_s

    @property
    def from_mtime_s(self) -> float:
        return self.committed_s - self.mtime_s


@dataclass(frozen=True)
class LatencySummary:
    segments: int
    records_per_segment: float
    achieved_rate: float
    from_roll_p50_s: float
    from_roll_p99_s: float
    from_roll_max_s: float
    from_mtime_p50_s: float
    from_mtime_p99_s: float
    from_mtime_max_s: float
    broker_cpu_share: float  # broker CPU seconds per second of the phase (1.0 = one core)

    @classmethod
    def of(cls, latencies: Sequence[SegmentLatency], rate: float,
           cpu_share: float) -> LatencySummary:
        roll = sorted(s.from_roll_s for s in latencies)
        mtime = sorted(s.from_mtime_s for s in latencies)
        return cls(len(latencies), statistics.mean(s.records for s in latencies), rate,
                   percentile(roll, 0.5), percentile(roll, 0.99), roll[-1],
                   percentile(mtime, 0.5), percentile(mtime, 0.99), mtime[-1], cpu_share)


def create_topic(bootstrap_servers: str, topic: str, config: dict[str, str]) -> None:
    """One partition, replication factor 1; wait until it has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1,
                                            config=config)],
                                  operation_timeout=ADMIN_TIMEOUT_S)
    futures[topic].result(timeout=ADMIN_TIMEOUT_S)
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while True:
        metadata = admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics.get(topic)
        if metadata is not None and metadata.error is None and metadata.partitions \
                and metadata.partitions[0].leader >= 0:
            return
        if time.monotonic() >= deadline:
            raise BenchmarkError(f"topic {topic} has no leader {ADMIN_TIMEOUT_S:g} s after "
                                 "creation")
        time.sleep(0.1)


def producer_settings(bootstrap_servers: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap_servers, "acks": "1", "compression.type": "none",
            "enable.idempotence": False, "linger.ms": 5, "batch.num.messages": 10_000,
            "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000}


def paced_produce(bootstrap_servers: str, topic: str, values: Values, *, rate: float,
                  seconds: float, timeout: float) -> int:
    """Send ``rate`` records/s for ``seconds`` on a fixed schedule; returns the records sent.
    Raises BenchmarkError on a delivery error or an unfinished flush."""
    errors: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            errors.append(error)

    producer = Producer({**producer_settings(bootstrap_servers), "on_delivery": on_delivery})
    producer.list_topics(topic, timeout=ADMIN_TIMEOUT_S)
    total = int(rate * seconds)
    progress = Progress(f"producing at {rate:,.0f} rec/s", total, interval=5.0)
    produce, poll = producer.produce, producer.poll
    sent = 0
    start = time.perf_counter()
    while sent < total and not errors:
        due = min(total, int((time.perf_counter() - start) * rate) + 1)
        while sent < due:
            produce(topic, values(sent), partition=0)
            sent += 1
        poll(0)
        progress.update(sent)
        wait = start + sent / rate - time.perf_counter()
        if wait > 0:
            time.sleep(min(wait, 0.002))
    deadline = time.perf_counter() + timeout
    while producer.flush(1.0) > 0 and not errors:
        if time.perf_counter() > deadline:
            raise BenchmarkError(f"flush of {topic} unfinished after {timeout:g} s")
    progress.update(sent, force=True)
    if errors:
        raise BenchmarkError(f"{len(errors)} delivery errors, first: {errors[0]}")
    return sent


def partition_dir(cluster: DevCluster, topic: str) -> Path:
    return cluster.data_dir / "broker-1" / "data" / f"{topic}-0"


def log_files(directory: Path) -> list[tuple[int, Path]]:
    """(base offset, path) of the partition's segment files, oldest first."""
    return sorted((int(p.name.removesuffix(LOG_SUFFIX)), p)
                  for p in directory.glob(f"*{LOG_SUFFIX}"))


def tier_commits(storage_url: str, topic: str) -> dict[int, float]:
    """Last tiered offset -> commit time (s, wall clock) of every tier commit of ``topic``."""
    storage = Storage.from_url(storage_url)
    table = DeltaTable(storage.table_uri(topic), storage_options=storage.delta_options())
    return {int(entry["loglake.last_offset"]): entry["timestamp"] / 1000
            for entry in table.history() if "loglake.last_offset" in entry}


def wait_until(condition: Callable[[], bool], timeout: float, what: str,
               interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise BenchmarkError(f"{what} did not happen within {timeout:g} s")
        time.sleep(interval)


def latency_phase(config: TieringBenchConfig, work: Path,
                  values: Values) -> tuple[LatencySummary, list[SegmentLatency]]:
    log(f"2. seal-to-commit latency: {config.latency_rate:,.0f} rec/s for "
        f"{config.latency_seconds:g} s, segment.bytes {config.latency_segment_bytes:,}")
    with DevCluster(work / "latency-cluster", brokers=1) as cluster:
        pid = broker_pid(cluster)
        bootstrap = cluster.bootstrap_servers
        log(f"  broker pid {pid} at {bootstrap}, tiering to {cluster.storage_url}")
        create_topic(bootstrap, LATENCY_TOPIC,
                     {"segment.bytes": str(config.latency_segment_bytes)})
        directory = partition_dir(cluster, LATENCY_TOPIC)
        poller = DirectoryPoller(directory, config.poll_ms / 1000,
                                 config.latency_seconds + config.phase_timeout).start()
        try:
            cpu_before = cpu_seconds(pid)
            started = time.time()
            sent = paced_produce(bootstrap, LATENCY_TOPIC, values, rate=config.latency_rate,
                                 seconds=config.latency_seconds, timeout=config.phase_timeout)
            elapsed = time.time() - started
            sealed = log_files(directory)[:-1]  # the last one is still active
            if len(sealed) < 3:
                raise BenchmarkError(f"only {len(sealed)} segments rolled; lower "
                                     "--latency-segment-bytes or raise --latency-rate")
            last_sealed = log_files(directory)[-1][0] - 1
            log(f"  {sent:,} records sent in {elapsed:.1f} s, {len(sealed)} segments sealed; "
                "waiting for the last commits")
            wait_until(lambda: max(tier_commits(cluster.storage_url, LATENCY_TOPIC),
                                   default=-1) >= last_sealed,
                       config.phase_timeout, f"tiering of {LATENCY_TOPIC} up to {last_sealed}")
            cpu = cpu_seconds(pid) - cpu_before
            phase_s = time.time() - started
        finally:
            poller.stop()
        files = log_files(directory)
        commits = tier_commits(cluster.storage_url, LATENCY_TOPIC)
    latencies = []
    for (base, path), (next_base, next_path) in itertools.pairwise(files):
        roll = poller.first_seen.get(next_path.name)
        committed = commits.get(next_base - 1)
        if roll is None or committed is None:
            raise BenchmarkError(f"segment {path.name}: roll seen {roll}, commit {committed}")
        latencies.append(SegmentLatency(base, next_base - 1, next_base - base, roll,
                                        path.stat().st_mtime, committed))
    counted = [s for s in latencies if s.sealed_s >= started + config.latency_warmup_seconds]
    if not counted:
        raise BenchmarkError("no segment was sealed after the warm-up")
    summary = LatencySummary.of(counted, sent / elapsed, cpu / phase_s)
    log(f"  {summary.segments} segments of ~{summary.records_per_segment:,.0f} records: "
        f"seal -> commit p50 {summary.from_roll_p50_s * 1000:.0f} ms, p99 "
        f"{summary.from_roll_p99_s * 1000:.0f} ms (from the sealed file's mtime: p50 "
        f"{summary.from_mtime_p50_s * 1000:.0f} ms, p99 {summary.from_mtime_p99_s * 1000:.0f} "
        "ms)")
    return summary, latencies


# -- 3. fetch throughput, tier vs local ----------------------------------------------------------


@dataclass(frozen=True)
class FetchRun:
    source: str  # "tier" or "local"
    records: int
    payload_bytes: int
    seconds: float
    broker_cpu_s: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "records_per_s": self.records_per_s}


def fast_produce(bootstrap_servers: str, topic: str, values: Values, total: int,
                 timeout: float) -> None:
    errors: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            errors.append(error)

    producer = Producer({**producer_settings(bootstrap_servers),
                         "delivery.report.only.error": True, "on_delivery": on_delivery})
    producer.list_topics(topic, timeout=ADMIN_TIMEOUT_S)
    progress = Progress(f"producing {topic}", total)
    deadline = time.perf_counter() + timeout
    sent = 0
    while sent < total and not errors:
        for seq in range(sent, min(sent + PRODUCE_CHUNK, total)):
            while True:
                try:
                    producer.produce(topic, values(seq), partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
        sent = min(sent + PRODUCE_CHUNK, total)
        producer.poll(0)
        progress.update(sent - len(producer))
        if time.perf_counter() > deadline:
            raise BenchmarkError(f"producing {topic} exceeded {timeout:g} s")
    while producer.flush(1.0) > 0 and not errors:
        if time.perf_counter() > deadline:
            raise BenchmarkError(f"flush of {topic} unfinished after {timeout:g} s")
    progress.update(total, force=True)
    if errors:
        raise BenchmarkError(f"{len(errors)} delivery errors, first: {errors[0]}")


def timed_consume(bootstrap_servers: str, topic: str, source: str, total: int, pid: int,
                  timeout: float) -> FetchRun:
    """Read ``total`` records of partition 0 from offset 0; check the offsets are 0..total-1."""
    consumer = Consumer({"bootstrap.servers": bootstrap_servers,
                         "group.id": f"bench-tiering-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "error",
                         "enable.partition.eof": False, **CONSUMER_PREFETCH})
    try:
        consumer.list_topics(topic, timeout=ADMIN_TIMEOUT_S)  # connect + metadata, not timed
        progress = Progress(f"consuming {source} ({topic})", total)
        received = 0
        payload = 0
        expected = 0
        cpu_before = cpu_seconds(pid)
        started = time.perf_counter()
        deadline = started + timeout
        consumer.assign([TopicPartition(topic, 0, 0)])
        while received < total:
            for message in consumer.consume(CONSUME_BATCH, 1.0):
                error = message.error()
                if error is not None:
                    raise BenchmarkError(f"consuming {topic}: {error}")
                if message.offset() != expected:
                    raise BenchmarkError(f"{topic}: offset {message.offset()} after "
                                         f"{expected - 1}")
                expected += 1
                payload += len(message.value() or b"")
            received = expected
            progress.update(received)
            if time.perf_counter() > deadline:
                raise BenchmarkError(f"read {received} of {total} records of {topic} in "
                                     f"{timeout:g} s")
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(pid) - cpu_before
        progress.update(received, force=True)
    finally:
        consumer.close()
    return FetchRun(source, received, payload, elapsed, cpu)


def local_start(cluster: DevCluster, topic: str) -> int:
    files = log_files(partition_dir(cluster, topic))
    return files[0][0] if files else 0


def fetch_phase(config: TieringBenchConfig, work: Path,
                values: Values) -> tuple[list[FetchRun], dict[str, Any]]:
    log(f"3. fetch throughput: {config.fetch_records:,} records from the tier vs local, "
        f"segment.bytes {config.fetch_segment_bytes:,}")
    runs: list[FetchRun] = []
    with DevCluster(work / "fetch-cluster", brokers=1) as cluster:
        pid = broker_pid(cluster)
        bootstrap = cluster.bootstrap_servers
        log(f"  broker pid {pid} at {bootstrap}")
        segment = str(config.fetch_segment_bytes)
        create_topic(bootstrap, TIER_TOPIC, {"segment.bytes": segment,
                                             "local.retention.ms": "0"})
        create_topic(bootstrap, LOCAL_TOPIC, {"segment.bytes": segment,
                                              "remote.storage.enable": "false"})
        for topic in (TIER_TOPIC, LOCAL_TOPIC):
            fast_produce(bootstrap, topic, values, config.fetch_records, config.phase_timeout)
        # everything but the active segment: tiered, then deleted locally
        active = log_files(partition_dir(cluster, TIER_TOPIC))[-1][0]
        if active == 0:
            raise BenchmarkError(f"no segment of {TIER_TOPIC} rolled: lower "
                                 "--fetch-segment-bytes or raise --fetch-records")
        log(f"  waiting until {TIER_TOPIC} holds only offsets >= {active:,} locally")
        waited = time.monotonic()
        wait_until(lambda: local_start(cluster, TIER_TOPIC) >= active, config.phase_timeout,
                   f"local deletion of the tiered segments of {TIER_TOPIC}")
        log(f"  local log start {local_start(cluster, TIER_TOPIC):,} after "
            f"{time.monotonic() - waited:.1f} s: {active / config.fetch_records:.1%} of the "
            "records are read from the tier")
        setup = {"tier_local_start": active,
                 "tier_share": active / config.fetch_records,
                 "tier_files": sum(1 for _ in Path(cluster.storage_url).rglob("*.parquet"))}
        for index in range(1, config.runs + 1):
            order = (TIER_TOPIC, LOCAL_TOPIC) if index % 2 else (LOCAL_TOPIC, TIER_TOPIC)
            for topic in order:
                source = "tier" if topic == TIER_TOPIC else "local"
                result = timed_consume(bootstrap, topic, source, config.fetch_records, pid,
                                       config.phase_timeout)
                log(f"  run {index}/{config.runs} {source}: {result.records_per_s:,.0f} rec/s, "
                    f"broker CPU {result.broker_cpu_s:.2f} s")
                runs.append(result)
    return runs, setup


# -- reporting ------------------------------------------------------------------------------------


@dataclass
class Results:
    throughput: list[ThroughputRun] = field(default_factory=list)
    latency: LatencySummary | None = None
    segments: list[SegmentLatency] = field(default_factory=list)
    fetch: list[FetchRun] = field(default_factory=list)
    fetch_setup: dict[str, Any] = field(default_factory=dict)


def _portable(path: Path) -> str:
    """``path`` relative to the working directory when inside it (no machine paths in the
    results)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def report(config: TieringBenchConfig, results: Results, machine: dict[str, Any],
           started: datetime) -> dict[str, Any]:
    document: dict[str, Any] = {
        "started": started.isoformat(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "config": {key: _portable(value) if isinstance(value, Path) else value
                   for key, value in asdict(config).items()},
        "machine": machine,
    }
    print(f"\nloglake tiering, median of {config.runs} runs ({machine['cpus']} CPUs, "
          f"{machine['cpu_model']}); command: {document['command']}")
    targets: list[list[str]] = []
    if results.throughput:
        print(f"\n1. sealed segment -> Delta commit, {config.records:,} records of "
              f"{config.record_size} B in batches of {config.batch_records}; baseline: "
              f"pyarrow.parquet.write_table ({config.baseline_compression}) of the same rows\n")
        rows = []
        medians: dict[str, Any] = {}
        for codec in config.codecs:
            runs = [r for r in results.throughput if r.codec == codec]
            tier = _median([r.tier_records_per_s for r in runs])
            baseline = _median([r.baseline_records_per_s for r in runs])
            parts = {name: _median([getattr(r, f"{name}_s") for r in runs])
                     for name in ("read", "decode", "write", "commit")}
            medians[codec] = {"tier_records_per_s": tier, "baseline_records_per_s": baseline,
                              "ratio": tier / baseline,
                              **{f"{name}_s": value for name, value in parts.items()},
                              "decode_records_per_s": config.records / parts["decode"]}
            rows.append([codec, f"{tier:,.0f}", f"{baseline:,.0f}", f"{tier / baseline:.2f}x",
                         f"{config.records / parts['decode']:,.0f}",
                         " / ".join(f"{parts[n]:.3f}" for n in parts),
                         ", ".join(f"{r.tier_records_per_s:,.0f}" for r in runs)])
        print(format_table(["codec", "tier records/s", "baseline records/s", "ratio",
                            "decode alone records/s", "read / decode / parquet / commit s",
                            "each run (tier records/s)"], rows))
        document["throughput"] = {"medians": medians,
                                  "runs": [r.to_json() for r in results.throughput]}
    if results.latency is not None:
        s = results.latency
        print(f"\n2. seal -> Delta commit latency, 1 broker, {s.achieved_rate:,.0f} records/s, "
              f"segment.bytes {config.latency_segment_bytes:,} ({s.segments} segments of "
              f"~{s.records_per_segment:,.0f} records after a {config.latency_warmup_seconds:g}"
              " s warm-up)\n")
        print(format_table(
            ["sealed at", "p50 ms", "p99 ms", "max ms"],
            [["next segment file appeared (the roll)", f"{s.from_roll_p50_s * 1000:.0f}",
              f"{s.from_roll_p99_s * 1000:.0f}", f"{s.from_roll_max_s * 1000:.0f}"],
             ["sealed file's mtime (last write)", f"{s.from_mtime_p50_s * 1000:.0f}",
              f"{s.from_mtime_p99_s * 1000:.0f}", f"{s.from_mtime_max_s * 1000:.0f}"]]))
        print(f"\nbroker CPU while producing and tiering: {s.broker_cpu_share:.0%} of one core")
        worst = max(s.from_roll_p99_s, s.from_mtime_p99_s)
        targets.append(["seal -> commit p99 (conservative: from mtime)",
                        f"<= {LATENCY_P99_TARGET_S * 1000:.0f} ms",
                        f"{s.from_mtime_p99_s * 1000:.0f} ms",
                        "yes" if s.from_mtime_p99_s <= LATENCY_P99_TARGET_S else "NO"])
        document["latency"] = {**asdict(s), "worst_p99_s": worst,
                               "segments": [{**asdict(x), "from_roll_s": x.from_roll_s,
                                             "from_mtime_s": x.from_mtime_s}
                                            for x in results.segments]}
    if results.fetch:
        by_source = {source: [r for r in results.fetch if r.source == source]
                     for source in ("tier", "local")}
        rates = {source: _median([r.records_per_s for r in runs])
                 for source, runs in by_source.items()}
        cpu = {source: _median([r.broker_cpu_s / r.records * 1_000_000 for r in runs])
               for source, runs in by_source.items()}
        share = results.fetch_setup.get("tier_share", 0.0)
        print(f"\n3. consumer (confluent-kafka) reading {config.fetch_records:,} records from "
              f"offset 0; tier topic: {share:.1%} of them only in the tier\n")
        print(format_table(
            ["source", "records/s", "MB/s", "broker CPU s / M records", "each run (records/s)"],
            [[source, f"{rates[source]:,.0f}",
              f"{_median([r.payload_bytes / r.seconds for r in runs]) / 1e6:,.1f}",
              f"{cpu[source]:.2f}", ", ".join(f"{r.records_per_s:,.0f}" for r in runs)]
             for source, runs in by_source.items()]))
        print(f"\ntier / local: {rates['tier'] / rates['local']:.2f}x")
        document["fetch"] = {"medians": {"tier_records_per_s": rates["tier"],
                                         "local_records_per_s": rates["local"],
                                         "ratio": rates["tier"] / rates["local"],
                                         "broker_cpu_s_per_million": cpu},
                             "setup": results.fetch_setup,
                             "runs": [r.to_json() for r in results.fetch]}
    report_targets(document, targets)
    return document


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> TieringBenchConfig:
    d = TieringBenchConfig()
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=d.runs,
                        help="runs to take the median of (default: %(default)s)")
    parser.add_argument("--records", type=int, default=d.records,
                        help="records in the throughput segment (default: %(default)s)")
    parser.add_argument("--record-size", type=int, default=d.record_size,
                        help="value bytes per record, null key (default: %(default)s)")
    parser.add_argument("--batch-records", type=int, default=d.batch_records,
                        help="records per producer batch in the segment (default: "
                             "%(default)s)")
    parser.add_argument("--codecs", nargs="+", default=list(d.codecs), choices=sorted(CODECS),
                        help="segment codecs for the throughput phase (default: none lz4)")
    parser.add_argument("--baseline-compression", default=d.baseline_compression,
                        help="Parquet codec of the baseline write_table (default: "
                             "%(default)s, as the tier files)")
    parser.add_argument("--latency-seconds", type=float, default=d.latency_seconds,
                        help="seconds of steady producing (default: %(default)s)")
    parser.add_argument("--latency-warmup-seconds", type=float,
                        default=d.latency_warmup_seconds,
                        help="segments sealed this early do not count (default: %(default)s)")
    parser.add_argument("--latency-rate", type=float, default=d.latency_rate,
                        help="records/s of the steady producer (default: %(default)s)")
    parser.add_argument("--latency-segment-bytes", type=int, default=d.latency_segment_bytes,
                        help="segment.bytes of the latency topic (default: %(default)s)")
    parser.add_argument("--poll-ms", type=float, default=d.poll_ms,
                        help="how often the partition directory is listed (default: "
                             "%(default)s)")
    parser.add_argument("--fetch-records", type=int, default=d.fetch_records,
                        help="records per fetch topic (default: %(default)s)")
    parser.add_argument("--fetch-segment-bytes", type=int, default=d.fetch_segment_bytes,
                        help="segment.bytes of the fetch topics (default: %(default)s)")
    parser.add_argument("--phases", nargs="+", default=list(d.phases),
                        choices=["throughput", "latency", "fetch"],
                        help="what to measure (default: all three)")
    parser.add_argument("--phase-timeout", type=float, default=d.phase_timeout,
                        help="seconds any one wait or loop may take (default: %(default)s)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="parent of the temporary directory (default: the system's)")
    parser.add_argument("--keep-data", action="store_true",
                        help="keep the temporary directory (segments, clusters, tables)")
    parser.add_argument("--results-dir", type=Path, default=d.results_dir,
                        help="where the JSON results go (default: bench/results)")
    args = parser.parse_args(argv)
    return TieringBenchConfig(
        runs=args.runs, records=args.records, record_size=args.record_size,
        batch_records=args.batch_records, codecs=tuple(dict.fromkeys(args.codecs)),
        baseline_compression=args.baseline_compression,
        latency_seconds=args.latency_seconds,
        latency_warmup_seconds=args.latency_warmup_seconds, latency_rate=args.latency_rate,
        latency_segment_bytes=args.latency_segment_bytes, poll_ms=args.poll_ms,
        fetch_records=args.fetch_records, fetch_segment_bytes=args.fetch_segment_bytes,
        phases=tuple(dict.fromkeys(args.phases)), phase_timeout=args.phase_timeout,
        work_dir=args.work_dir, keep_data=args.keep_data, results_dir=args.results_dir)


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    started = datetime.now(UTC)
    machine = machine_info()
    values = Values(config.record_size)
    if config.work_dir is not None:
        config.work_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="loglake-bench-tiering-", dir=config.work_dir))
    log(f"loglake tiering bench: phases {list(config.phases)}, {config.runs} runs; working in "
        f"{work}")
    results = Results()
    began = time.monotonic()
    try:
        if "throughput" in config.phases:
            results.throughput = throughput_phase(config, work, values)
        if "latency" in config.phases:
            results.latency, results.segments = latency_phase(config, work, values)
        if "fetch" in config.phases:
            results.fetch, results.fetch_setup = fetch_phase(config, work, values)
    finally:
        if config.keep_data:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    log(f"done in {time.monotonic() - began:.0f} s")
    document = report(config, results, machine, started)
    write_results(config.results_dir, f"tiering-{started:%Y%m%dT%H%M%SZ}", document)
    return 0


if __name__ == "__main__":
    run_main(main)
