"""Offset planning on the driver: which partitions a query reads and from where to where.

:class:`ClusterView` answers the questions a planner asks the cluster:

* the partitions of the subscribed topics (metadata request to the brokers);
* earliest / latest / by-timestamp offsets (ListOffsets through confluent-kafka, at the query's
  ``kafka.isolation.level``). The brokers' earliest is the tier's first offset (tiered records
  stay readable through the brokers); latest is the last stable offset for read_committed (the
  default: below it every transaction is decided, so a read_committed consumer reaches it
  without waiting) and the high watermark for read_uncommitted, so everything below latest is
  replicated and readable at that isolation level;
* where the tier lives (the ``/loglake/storage`` znode, when ``zookeeper`` is given) and a
  :class:`TierSnapshot` of a topic's Delta table: each partition's tiered end (the app
  transaction ``<topic>-<p>``) and live files, all from ONE table version, so a range split at
  the tiered end reads every offset exactly once however the tierer moves on meanwhile.

Offsets are Spark-Kafka-style JSON dicts ``{"topic": {"0": 23}}`` (:func:`to_json_offsets`);
the resolving functions here turn option specs into concrete ``{(topic, p): offset}``.

Not thread-safe; holds network clients (create one per planning step, :meth:`ClusterView.close`
after). Never pickled: executors receive only plain data (:class:`TierSnapshot`, offsets).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loglake.client.security import SecurityConfig
from loglake.streaming.errors import DataLossError, SourceOptionError
from loglake.streaming.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    SourceOptions,
    Subscription,
    TopicPartition,
)

if TYPE_CHECKING:
    from loglake.catalog.zookeeper import ClusterCatalog
    from loglake.client.admin import Admin
    from loglake.segments.storage import Storage
    from loglake.segments.tiered_table import TieredTable, TierFile

PartitionOffsets = dict[TopicPartition, int]
DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class TierSnapshot:
    """One version of a topic's Delta table: per partition the tiered end and the live files."""

    topic: str
    uri: str
    version: int
    ends: Mapping[int, int]
    """partition -> one past the last tiered offset (absent: nothing tiered)."""
    files: Mapping[int, tuple[TierFile, ...]]
    """partition -> live data files ordered by first offset."""


def to_json_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): o}`` -> ``{"t": {"p": o}}`` (Spark's Kafka offset JSON; sorted)."""
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = int(offset)
    return result


def from_json_offsets(data: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    """Inverse of :func:`to_json_offsets`."""
    return {(str(t), int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}


class ClusterView:
    """The cluster as seen from a query planner (see the module docstring)."""

    def __init__(self, options: SourceOptions, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.options = options
        self.timeout = timeout
        self._catalog: ClusterCatalog | None = None
        self._admin: Admin | None = None
        self._bootstrap: str | None = options.bootstrap_servers
        self._storage: Storage | None = None
        self._storage_known = False
        self._tables: dict[str, TieredTable] = {}

    @classmethod
    def for_cluster(cls, *, zookeeper: str | None, bootstrap_servers: str | None = None,
                    storage_options: Mapping[str, str] | None = None,
                    timeout: float = DEFAULT_TIMEOUT_S,
                    security: SecurityConfig | None = None) -> ClusterView:
        """A view of a cluster without query options (catalogs, tools); ``security``: how to
        connect to its brokers (default PLAINTEXT)."""
        if not zookeeper and not bootstrap_servers:
            raise SourceOptionError("a ZooKeeper or bootstrap servers address is required")
        options = SourceOptions(bootstrap_servers=bootstrap_servers or None,
                                zookeeper=zookeeper or None, subscription=None,
                                starting=OffsetSpec("earliest"), ending=OffsetSpec("latest"),
                                storage_options=dict(storage_options or {}),
                                security=security or SecurityConfig())
        return cls(options, timeout=timeout)

    # -- connections ---------------------------------------------------------------------------

    def catalog(self) -> ClusterCatalog | None:
        """The ZooKeeper catalog (None without the ``zookeeper`` option)."""
        if self.options.zookeeper is None:
            return None
        if self._catalog is None:
            from loglake.catalog.zookeeper import ClusterCatalog

            catalog: ClusterCatalog | None = None
            try:
                catalog = ClusterCatalog(self.options.zookeeper, timeout=self.timeout,
                                         mode="tool")  # reads only: creates no znode
                catalog.start()
            except Exception as exc:
                from loglake.catalog.zookeeper import NoClusterError

                if catalog is not None:
                    with contextlib.suppress(Exception):
                        catalog.stop()
                if isinstance(exc, NoClusterError):  # names the chroot to try: as it is
                    raise
                raise SourceOptionError(
                    f"cannot reach ZooKeeper at {self.options.zookeeper!r}: {exc}",
                    hint="check the ZooKeeper address (host:port[/chroot])",
                ) from exc
            self._catalog = catalog
        return self._catalog

    def bootstrap_servers(self) -> str:
        """``kafka.bootstrap.servers``, or the live brokers registered in ZooKeeper: each one's
        first endpoint whose security protocol is the query's (``kafka.security.protocol``,
        PLAINTEXT by default)."""
        if self._bootstrap is None:
            catalog = self.catalog()
            assert catalog is not None  # options demand one of the two
            brokers = catalog.brokers()
            if not brokers:
                raise SourceOptionError(
                    f"no broker is registered in ZooKeeper at {self.options.zookeeper!r}",
                    hint="start the brokers, or check the chroot in the 'zookeeper' option",
                )
            protocol = self.options.security.protocol
            addresses = []
            for _, broker in sorted(brokers.items()):
                endpoint = next((e for e in broker.all_endpoints
                                 if e.security_protocol == protocol), None)
                if endpoint is not None:
                    addresses.append(f"{endpoint.host}:{endpoint.port}")
            if not addresses:
                offered = sorted({e.security_protocol for b in brokers.values()
                                  for e in b.all_endpoints})
                raise SourceOptionError(
                    f"no broker registered in ZooKeeper at {self.options.zookeeper!r} has a "
                    f"{protocol} listener (they offer {', '.join(offered)})",
                    hint="set kafka.security.protocol (and the sasl/ssl options) to one of "
                    "those, or give kafka.bootstrap.servers")
            self._bootstrap = ",".join(addresses)
        return self._bootstrap

    def admin(self) -> Admin:
        if self._admin is None:
            from loglake.client.admin import Admin

            self._admin = Admin(self.bootstrap_servers(), timeout=self.timeout,
                                client_id="loglake-spark", security=self.options.security,
                                extra=_admin_extra(self.options))
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        if self._catalog is not None:
            self._catalog.stop()
            self._catalog = None

    # -- metadata ------------------------------------------------------------------------------

    def topic_partitions(self, subscription: Subscription) -> list[TopicPartition]:
        """Existing partitions the subscription covers, sorted. Subscribed topics that do not
        exist (yet) contribute nothing; an assigned partition that does not exist is an
        error."""
        topics = self.admin().list_topics()
        if subscription.kind == "assign":
            missing = [(t, p) for t, p in subscription.assignment
                       if t not in topics or p not in {i.partition for i in topics[t].partitions}]
            if missing:
                listed = ", ".join(f"{t}-{p}" for t, p in missing)
                raise SourceOptionError(f"option 'assign' names partitions that do not exist: "
                                        f"{listed}")
            return sorted(subscription.assignment)
        result: list[TopicPartition] = []
        for name, info in topics.items():
            if subscription.kind == "subscribePattern" and name.startswith("__"):
                continue  # internal topics, as Kafka's consumer excludes them
            if subscription.matches(name):
                result.extend((name, p.partition) for p in info.partitions)
        return sorted(result)

    def list_offsets(self, partitions: Iterable[TopicPartition],
                     query: str | int) -> PartitionOffsets:
        """``earliest`` / ``latest`` / first offset with timestamp >= ``query`` ms (latest when
        no record is that recent), per partition; latest is the last stable offset at
        ``read_committed`` (the options' isolation level), else the high watermark."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        result: PartitionOffsets = {}
        for topic, numbers in sorted(by_topic.items()):
            found = self.admin().list_offsets(topic, query,  # type: ignore[arg-type]
                                              partitions=sorted(numbers),
                                              isolation_level=self.options.isolation_level)
            result.update(((topic, p), o) for p, o in found.items())
        return result

    def resolve(self, spec: OffsetSpec, partitions: list[TopicPartition], *,
                latest: PartitionOffsets | None = None) -> PartitionOffsets:
        """Concrete offsets of ``spec`` for ``partitions``; EARLIEST/LATEST placeholders and
        timestamps are asked from the brokers."""
        if not partitions:
            return {}
        if spec.kind == "earliest":
            return self.list_offsets(partitions, "earliest")
        if spec.kind == "latest":
            return dict(latest) if latest is not None else self.list_offsets(partitions, "latest")
        if spec.kind == "offsets":
            missing = sorted(set(partitions) - set(spec.per_partition))
            if missing:
                listed = ", ".join(f"{t}-{p}" for t, p in missing)
                raise SourceOptionError(
                    f"option {spec.option!r} must give every partition read; missing {listed}",
                    hint="use -2 for earliest and -1 for latest",
                )
            wanted = {tp: spec.per_partition[tp] for tp in partitions}
            result = {tp: o for tp, o in wanted.items() if o >= 0}
            earliest = [tp for tp, o in wanted.items() if o == EARLIEST]
            newest = [tp for tp, o in wanted.items() if o == LATEST]
            if earliest:
                result.update(self.list_offsets(earliest, "earliest"))
            if newest:
                result.update(self.list_offsets(newest, "latest"))
            return result
        # timestamps
        if spec.kind == "timestamp":
            assert spec.timestamp_ms is not None
            stamps = {tp: spec.timestamp_ms for tp in partitions}
        else:
            missing = sorted(set(partitions) - set(spec.per_partition))
            if missing:
                listed = ", ".join(f"{t}-{p}" for t, p in missing)
                raise SourceOptionError(
                    f"option {spec.option!r} must give every partition read; missing {listed}")
            stamps = {tp: spec.per_partition[tp] for tp in partitions}
        by_stamp: dict[int, list[TopicPartition]] = {}
        for tp, stamp in stamps.items():
            by_stamp.setdefault(stamp, []).append(tp)
        result = {}
        for stamp, tps in by_stamp.items():
            result.update(self.list_offsets(tps, stamp))
        return result

    def resolve_start(self, spec: OffsetSpec, partitions: list[TopicPartition]
                      ) -> PartitionOffsets:
        """Like :meth:`resolve` for a starting position: applies
        ``startingOffsetsByTimestampStrategy`` (``error``: no record at or after the timestamp
        is an error)."""
        offsets = self.resolve(spec, partitions)
        if spec.kind in ("timestamp", "timestamps") and self.options.timestamp_strategy == (
                "error"):
            latest = self.list_offsets(offsets, "latest")
            unmatched = sorted(tp for tp, o in offsets.items() if o >= latest[tp])
            if unmatched:
                listed = ", ".join(f"{t}-{p}" for t, p in unmatched)
                raise SourceOptionError(
                    f"option {spec.option!r}: no record at or after the timestamp in {listed}",
                    hint="set startingOffsetsByTimestampStrategy=latest to start at the end",
                )
        return offsets

    # -- tier ----------------------------------------------------------------------------------

    def storage(self) -> Storage | None:
        """The tier's storage, when ``zookeeper`` is given, a broker published it and
        ``tierRead`` is ``auto``; ``tier.*`` options win over the published options."""
        if not self._storage_known:
            self._storage_known = True
            catalog = self.catalog()
            if catalog is not None and self.options.tier_read == "auto":
                published = catalog.storage()
                if published is not None:
                    from loglake.segments.storage import Storage

                    url, public = published
                    self._storage = Storage.from_url(
                        url, {**public, **self.options.storage_options})
        return self._storage

    def tier_snapshot(self, topic: str, partitions: Iterable[int]) -> TierSnapshot | None:
        """The current version of ``topic``'s Delta table (None: no storage or no table).
        Tables stay open between calls (a stream plans every micro-batch), brought up to date
        incrementally."""
        storage = self.storage()
        if storage is None:
            return None
        table = self._tables.get(topic)
        if table is None:
            from loglake.segments.tiered_table import TieredTable

            table = self._tables[topic] = TieredTable(storage, topic)
        return tier_snapshot(table, partitions)


def tier_snapshot(table: TieredTable, partitions: Iterable[int]) -> TierSnapshot | None:
    """Tiered ends and live files of ``partitions`` of ``table``'s topic, all from one table
    version, the newest (None when nothing was ever tiered for the topic)."""
    from deltalake.exceptions import TableNotFoundError

    try:
        delta = table.table(refresh=True)
    except TableNotFoundError:
        return None
    ends: dict[int, int] = {}
    files: dict[int, tuple[TierFile, ...]] = {}
    for partition in sorted(set(partitions)):
        end = table.tiered_end(partition, refresh=False)
        if end is not None:
            ends[partition] = end
        files[partition] = tuple(table.files(partition, refresh=False))
    return TierSnapshot(table.topic, table.uri, delta.version(), ends, files)


def rate_limit(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
               limit: int) -> PartitionOffsets:
    """Cut ``end`` so at most about ``limit`` offsets are read in total, shared in proportion
    to each partition's backlog (Spark's Kafka source rule: a partition with any backlog moves
    at least one offset)."""
    sizes = {tp: max(o - start.get(tp, o), 0) for tp, o in end.items()}
    total = sum(sizes.values())
    if total <= limit:
        return dict(end)
    result = {}
    for tp, until in end.items():
        begin = start.get(tp, until)
        size = sizes[tp]
        if size == 0:
            result[tp] = until
            continue
        share = limit * (size / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        result[tp] = min(until, begin + step)
    return result


def check_data_loss(starts: PartitionOffsets, earliest: PartitionOffsets, *,
                    fail: bool, what: str) -> PartitionOffsets:
    """Starts below the partition's earliest offset (deleted by retention): raise
    :class:`DataLossError` when ``fail``, else move them up to the earliest offset."""
    lost = {tp: (o, earliest[tp]) for tp, o in starts.items()
            if tp in earliest and o < earliest[tp]}
    if lost and fail:
        listed = ", ".join(f"{t}-{p} (wanted {o}, earliest {e})"
                           for (t, p), (o, e) in sorted(lost.items()))
        raise DataLossError(
            f"{what}: offsets no longer exist in {listed}",
            hint="they were deleted by retention; set failOnDataLoss=false to skip them",
        )
    return {tp: max(o, earliest.get(tp, o)) for tp, o in starts.items()}


def _admin_extra(options: SourceOptions) -> dict[str, str]:
    """``kafka.*`` options that also make sense for the admin client (socket settings, address
    lookups; the security options travel as ``options.security``)."""
    prefixes = ("sasl.", "ssl.", "socket.", "client.dns", "broker.address")
    return {k: v for k, v in options.kafka.items() if k.startswith(prefixes)}
