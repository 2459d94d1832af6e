"""State metrics of a broker, computed at scrape time (issue 16): custom prometheus_client
collectors that read the broker's in-memory state when ``/metrics`` is scraped, so nothing is
recorded between scrapes.

Three collectors, each given only what it reads (narrow callables, never the Broker):

:class:`ReplicationCollector` (Kafka's ``ReplicaManager``, ``KafkaController`` and ``Log`` gauges)
    * ``kafka_server_replicamanager_partitioncount``: replicas hosted here (open);
    * ``kafka_server_replicamanager_leadercount``: of those, the ones this broker leads;
    * ``kafka_server_replicamanager_underreplicatedpartitions``: led partitions whose ISR is
      smaller than their replica set (Kafka's ``Partition.isUnderReplicated``);
    * ``kafka_server_replicamanager_underminisrpartitioncount``: led partitions whose ISR is
      smaller than the topic's ``min.insync.replicas``;
    * ``kafka_controller_kafkacontroller_activecontrollercount``: 1 on the active controller;
    * ``kafka_controller_kafkacontroller_offlinepartitionscount``: on the active controller
      only (0 elsewhere, as Kafka), partitions whose state names no leader or a leader that is
      not a live broker;
    * ``kafka_log_log_size`` / ``_numlogsegments`` / ``_logstartoffset`` / ``_logendoffset``
      ``{topic, partition}`` per hosted replica: local bytes and segments, the log start
      consumers see (the table's first offset when the tier holds older records, from what the
      tierer cached: no table read), the log end offset.

:class:`ConsumerLagCollector` (kafka-exporter's names, as Strimzi's Kafka Exporter serves them)
    * ``kafka_consumergroup_current_offset{consumergroup, topic, partition}``: the committed
      offset;
    * ``kafka_consumergroup_lag{...}``: high watermark minus committed offset (never below 0).
    Only on the group's coordinator, for the groups it has loaded (a group is loaded at its first
    request after this broker became its coordinator), and only for partitions with a replica
    here (the high watermark is known without a request: exact on the leader, the leader's as
    last fetched on a follower). A partition without a replica here has no lag sample on this
    broker.

:class:`TierCollector` (loglake's own), for partitions of tiered topics this broker leads (the
leader tiers) once the tierer knows its tiered end:
    * ``loglake_tier_lag_records{topic, partition}``: offsets of sealed segments the table does
      not hold yet: ``active segment base - max(tiered_end, log_start)``, never below 0. The
      active segment is not pending: nothing tiers it before it rolls (``segment.bytes``,
      ``segment.ms`` bound that part of the table's delay), and counting it would make every
      quiet topic look behind. Sealed segments waiting for the last stable offset (an open
      transaction, followers behind) are pending. Same rule as the tiering status in ZooKeeper
      (tier_writer.py), so the console, ``loglake tiering status`` and the metrics agree;
    * ``loglake_tier_lag_seconds{topic, partition}``: the age of the oldest pending record: now
      minus the timestamp of the first pending batch (its first record's timestamp, or the
      append time under ``LogAppendTime``); 0 when nothing is pending. The timestamp is read
      once per pending start (one batch header from the local log, then cached until tiering
      moves past it), so a scrape reads no disk in the steady state;
    * ``loglake_tier_table_version{topic}`` / ``_files`` / ``_bytes``: the Delta table's version,
      live data files and their bytes as of this broker's last tier commit of the topic (the
      tierer records them after each commit; no table read at scrape time), for topics with a
      partition led here. Changes by clean-up jobs show at the next tier commit; with leaders
      of one topic on several brokers, the newest is ``max by (topic)``.

Counters recorded where things change (ISR shrinks/expands, tier commits and their latency,
tier fetches) are in state_counters.py.

Thread-safety: ``collect()`` runs on the broker's event loop (the ``/metrics`` endpoint is served
there), so it reads the loop-owned state without locks and must not block: it does no I/O except
the one cached batch-header read per pending tier start described above.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric

from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.partition import Partition, Role
from loglake.broker.tier_state import TierState

Key = tuple[str, int]
LOG_APPEND_TIME = 1
"""Timestamp type of a batch whose timestamps the broker set (attributes bit 3)."""


class _Committed(Protocol):
    """A committed offset as the group coordinator holds it (catalog.groups.CommittedOffset)."""

    @property
    def offset(self) -> int: ...


def _gauge(name: str, documentation: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=labels)


class ReplicationCollector:
    """Replica, controller and log gauges (see the module)."""

    def __init__(self, *, hosted: Callable[[], Mapping[Key, Partition]], metadata: MetadataCache,
                 controller_active: Callable[[], bool],
                 log_start: Callable[[Partition], int]) -> None:
        """``hosted``: the open replicas (the replica manager's ``partitions``);
        ``controller_active``: whether this broker is the active controller; ``log_start``:
        the log start consumers see, from cached state only (``Tierer.known_log_start``)."""
        self._hosted = hosted
        self._metadata = metadata
        self._controller_active = controller_active
        self._log_start = log_start

    def _families(self) -> dict[str, GaugeMetricFamily]:
        tp = ["topic", "partition"]
        return {
            "partitions": _gauge("kafka_server_replicamanager_partitioncount",
                                 "Partition replicas hosted by this broker"),
            "leaders": _gauge("kafka_server_replicamanager_leadercount",
                              "Partitions this broker leads"),
            "urp": _gauge("kafka_server_replicamanager_underreplicatedpartitions",
                          "Led partitions whose ISR is smaller than their replica set"),
            "min_isr": _gauge("kafka_server_replicamanager_underminisrpartitioncount",
                              "Led partitions whose ISR is below min.insync.replicas"),
            "controller": _gauge("kafka_controller_kafkacontroller_activecontrollercount",
                                 "1 if this broker is the active controller"),
            "offline": _gauge("kafka_controller_kafkacontroller_offlinepartitionscount",
                              "Partitions without a live leader (active controller only)"),
            "size": _gauge("kafka_log_log_size", "Bytes of the local log", tp),
            "segments": _gauge("kafka_log_log_numlogsegments", "Segments of the local log", tp),
            "start": _gauge("kafka_log_log_logstartoffset",
                            "First offset consumers can read (table or local log)", tp),
            "end": _gauge("kafka_log_log_logendoffset", "Log end offset", tp),
        }

    def describe(self) -> Iterator[Metric]:
        yield from self._families().values()

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        hosted = [p for p in list(self._hosted().values()) if not p.closed]
        leaders = under_replicated = under_min_isr = 0
        for partition in hosted:
            labels = [partition.topic, str(partition.index)]
            log = partition.log
            families["size"].add_metric(labels, log.size_bytes)
            families["segments"].add_metric(labels, len(log.segments))
            families["start"].add_metric(labels, self._log_start(partition))
            families["end"].add_metric(labels, log.log_end_offset)
            if partition.role is not Role.LEADER or partition.state is None:
                continue
            leaders += 1
            isr = len(partition.isr)
            if isr < len(partition.replicas):
                under_replicated += 1
            if isr < partition.config.min_insync_replicas:
                under_min_isr += 1
        families["partitions"].add_metric([], len(hosted))
        families["leaders"].add_metric([], leaders)
        families["urp"].add_metric([], under_replicated)
        families["min_isr"].add_metric([], under_min_isr)
        active = self._controller_active()
        families["controller"].add_metric([], 1 if active else 0)
        families["offline"].add_metric([], offline_partitions(self._metadata) if active else 0)
        yield from families.values()


def offline_partitions(metadata: MetadataCache) -> int:
    """Partitions of known topics whose state names no leader or a leader that is not live."""
    live = metadata.live_brokers
    return sum(1 for (topic, _index), state in list(metadata.partition_states.items())
               if topic in metadata.topics and (state.leader < 0 or state.leader not in live))


class ConsumerLagCollector:
    """Consumer-group offsets and lag on the group's coordinator (see the module)."""

    def __init__(self, *, committed: Callable[[], Mapping[str, Mapping[Key, _Committed]]],
                 hosted: Callable[[], Mapping[Key, Partition]]) -> None:
        """``committed``: group -> partition -> committed offset, for the groups this broker
        coordinates (``GroupCoordinator.committed_offsets``); ``hosted``: the open replicas."""
        self._committed = committed
        self._hosted = hosted

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        labels = ["consumergroup", "topic", "partition"]
        return (_gauge("kafka_consumergroup_current_offset",
                       "Committed offset of a consumer group in a partition", labels),
                _gauge("kafka_consumergroup_lag",
                       "High watermark minus the committed offset of a consumer group", labels))

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        current, lag = self._families()
        hosted = self._hosted()
        for group, offsets in sorted(self._committed().items()):
            for (topic, index), committed in sorted(offsets.items()):
                if committed.offset < 0:
                    continue
                labels = [group, topic, str(index)]
                current.add_metric(labels, committed.offset)
                partition = hosted.get((topic, index))
                if partition is not None and not partition.closed:
                    lag.add_metric(labels, max(0, partition.high_watermark - committed.offset))
        yield current
        yield lag


class TierCollector:
    """Tiering lag and table statistics (see the module)."""

    def __init__(self, *, state: TierState, hosted: Callable[[], Mapping[Key, Partition]],
                 tiered: Callable[[str], bool], clock: Callable[[], float] = time.time) -> None:
        """``state``: the tierer's :class:`TierState`; ``tiered(topic)``: whether this broker
        tiers the topic; ``clock``: wall-clock seconds (record timestamps are wall-clock)."""
        self._state = state
        self._hosted = hosted
        self._tiered = tiered
        self._clock = clock
        self._first_pending: dict[Key, tuple[int, int | None]] = {}
        """(topic, partition) -> (pending start offset, its batch's timestamp in ms or None)."""

    @staticmethod
    def _families() -> dict[str, GaugeMetricFamily]:
        tp = ["topic", "partition"]
        return {
            "records": _gauge("loglake_tier_lag_records",
                              "Offsets of sealed segments not yet in the Delta table", tp),
            "seconds": _gauge("loglake_tier_lag_seconds",
                              "Age of the oldest record of a sealed segment not yet in the "
                              "Delta table (0: none pending)", tp),
            "version": _gauge("loglake_tier_table_version",
                              "Delta table version after this broker's last tier commit",
                              ["topic"]),
            "files": _gauge("loglake_tier_table_files", "Live data files of the Delta table",
                            ["topic"]),
            "bytes": _gauge("loglake_tier_table_bytes", "Bytes of the Delta table's live files",
                            ["topic"]),
        }

    def describe(self) -> Iterator[Metric]:
        yield from self._families().values()

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        now_ms = int(self._clock() * 1000)
        led_topics: set[str] = set()
        seen: set[Key] = set()
        for key, partition in list(self._hosted().items()):
            if (partition.closed or partition.role is not Role.LEADER
                    or not self._tiered(partition.topic)):
                continue
            led_topics.add(partition.topic)
            progress = self._state.progress(key)
            if progress is None or progress.leader_epoch != partition.leader_epoch:
                continue  # the tierer has not read the tiered end yet
            seen.add(key)
            pending = max(progress.tiered_end or 0, partition.log_start_offset)
            records = max(0, partition.log.segments[-1] - pending)  # up to the active base
            labels = [partition.topic, str(partition.index)]
            families["records"].add_metric(labels, records)
            if records == 0:
                families["seconds"].add_metric(labels, 0.0)
                continue
            timestamp = self._pending_timestamp(key, partition, pending)
            if timestamp is not None:
                families["seconds"].add_metric(labels, max(0.0, (now_ms - timestamp) / 1000))
        for key in [key for key in self._first_pending if key not in seen]:
            del self._first_pending[key]
        for topic in sorted(led_topics):
            tier = self._state.topics.get(topic)
            if tier is None or tier.table_version is None:
                continue
            families["version"].add_metric([topic], tier.table_version)
            families["files"].add_metric([topic], tier.table_files)
            families["bytes"].add_metric([topic], tier.table_bytes)
        yield from families.values()

    def _pending_timestamp(self, key: Key, partition: Partition, pending: int) -> int | None:
        """The timestamp (ms) of the batch holding offset ``pending`` (the first one after it
        when ``pending`` falls in a gap); None when unknown. Read once per pending start."""
        cached = self._first_pending.get(key)
        if cached is not None and cached[0] == pending:
            return cached[1]
        timestamp: int | None = None
        with contextlib.suppress(Exception):  # closed or truncated meanwhile: unknown
            header = next(partition.log.batch_headers(pending), None)
            if header is not None:
                stamp = (header.max_timestamp if header.timestamp_type == LOG_APPEND_TIME
                         else header.base_timestamp)
                timestamp = stamp if stamp >= 0 else None
        self._first_pending[key] = (pending, timestamp)
        return timestamp
