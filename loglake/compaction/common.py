"""What every clean-up job shares: the cluster's topics and configs, and the replace commit.

A job reads the topics, their configs (``/config/topics/<topic>`` over Kafka's defaults through
:meth:`TopicConfig.from_overrides`; broker-level ``log.*`` defaults live in the brokers'
``server.properties`` and are not visible here) and the tier storage the brokers published in
ZooKeeper.

Commits: every job changes a table only through :func:`commit_replace`: ONE Delta commit
(deltalake ``create_write_transaction``, ``mode="append"``) of remove actions for files the job
read and add actions for files it wrote. delta-rs rejects the commit with ``CommitFailedError``
when a concurrent commit removed data (another job, or a job racing this one); the job then
reloads the snapshot and plans again. Concurrent tier appends (new files, offsets above every
file the job read) never conflict with a replace and are never lost: the replace commit names
files, it never overwrites a partition. Crash points: after writing new files and before the
commit they are orphans that no snapshot references (``vacuum`` sweeps them); after the commit
the old files stay on storage until ``vacuum`` deletes them after the grace period, so readers
of older snapshots (Spark views keep the snapshot they were registered with) keep working.
After each table's commits the job announces the change in ZooKeeper (:meth:`Cluster.announce`)
and brokers drop their cached snapshot, so consumers see the result at once (without the
announcement, within ~5 s).

Driver-side; not thread-safe (one ZooKeeper session per :class:`Cluster`).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from deltalake import CommitProperties, PostCommitHookProperties, Transaction
from deltalake._internal import RemoveAction
from deltalake.transaction import AddAction

from loglake.catalog.zookeeper import ClusterCatalog, NoClusterError
from loglake.config import TopicConfig
from loglake.errors import LoglakeError, UnknownTopicError
from loglake.faults import crash_point
from loglake.segments.storage import Storage
from loglake.segments.tier_rows import PARTITION_COLUMN, TABLE_SCHEMA
from loglake.segments.tiered_table import PendingFile, TieredTable, TierFile

COMMIT_ATTEMPTS = 5
"""Plans per table or partition before a job gives up on it until its next run."""


class CleanupError(LoglakeError):
    """A clean-up job could not finish on a table (retriable: run the job again)."""


@dataclass(frozen=True)
class TopicTarget:
    topic: str
    config: TopicConfig


class Cluster:
    """The topics, configs and tier storage of one cluster (a ZooKeeper session)."""

    def __init__(self, zookeeper: str, *, storage_options: Mapping[str, str] | None = None):
        self.zookeeper = zookeeper
        self.catalog = ClusterCatalog(zookeeper, timeout=10.0, mode="tool")  # creates nothing
        try:
            self.catalog.start()
        except NoClusterError:
            self.catalog.stop()
            raise
        except Exception as exc:
            self.catalog.stop()
            raise LoglakeError(f"cannot reach ZooKeeper at {zookeeper}: {exc}",
                               hint="pass --zookeeper HOST:PORT/CHROOT") from None
        published = self.catalog.storage()
        if published is None:
            self.catalog.stop()
            raise LoglakeError("no broker published a tier storage in ZooKeeper",
                               hint="set remote.log.storage.url on the brokers")
        url, options = published
        self.storage = Storage.from_url(url, {**options, **(storage_options or {})})

    def close(self) -> None:
        self.catalog.stop()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def targets(self, topic: str | None = None) -> list[TopicTarget]:
        """``topic`` (UnknownTopicError if missing) or every topic, with its config."""
        names = sorted(self.catalog.topic_names())
        if topic is not None:
            if topic not in names:
                raise UnknownTopicError(f"Topic '{topic}' does not exist.")
            names = [topic]
        return [TopicTarget(name, TopicConfig.from_overrides(self.catalog.topic_config(name)))
                for name in names]

    def announce(self, table: TieredTable, operation: str) -> None:
        """Tell the brokers that a job replaced or removed files of ``table`` (they drop
        their cached snapshot at once instead of within a few seconds); best effort."""
        try:
            version = table.table(refresh=True).version()
            self.catalog.announce_table_change(table.topic, version, operation)
        except Exception as exc:  # brokers still reload within READER_REFRESH_S
            print(f"warning: could not announce the change of {table.topic} to the brokers: "
                  f"{exc}", file=sys.stderr)

    def partitions(self, topic: str) -> list[int]:
        meta = self.catalog.topic(topic)
        return sorted(meta.assignment) if meta is not None else []


def relative_path(table: TieredTable, tier_file: TierFile) -> str:
    """A live file's path relative to the table root (as add/remove actions name it)."""
    prefix = table.uri + "/"
    if not tier_file.uri.startswith(prefix):
        raise CleanupError(f"{tier_file.uri} is not under table {table.uri}")
    return tier_file.uri[len(prefix):]


def commit_replace(
    table: TieredTable,
    removes: Mapping[int, Sequence[TierFile]],
    adds: Mapping[int, Sequence[PendingFile]],
    *,
    operation: str,
    metadata: Mapping[str, str] | None = None,
    app_transactions: Sequence[tuple[str, int]] = (),
) -> None:
    """One Delta commit removing ``removes`` and adding ``adds`` (partition -> files) on the
    snapshot ``table`` last loaded. Raises CommitFailedError when a concurrent commit
    conflicts (the caller re-plans)."""
    now_ms = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = []
    for partition, files in removes.items():
        actions += [RemoveAction(relative_path(table, f), True, now_ms, f.size,
                                 {PARTITION_COLUMN: str(partition)}) for f in files]
    for partition, pending in adds.items():
        actions += [AddAction(f.path, f.size, {PARTITION_COLUMN: str(partition)}, now_ms,
                              True, f.stats) for f in pending]
    properties = CommitProperties(
        app_transactions=[Transaction(app, version) for app, version in app_transactions],
        custom_metadata={"loglake.operation": operation, **(metadata or {}),
                         "userMetadata": f"loglake {operation}"},  # DESCRIBE HISTORY shows it
    )
    crash_point(f"{operation}-before-commit")  # new files written, none referenced yet
    table.table().create_write_transaction(
        actions, "append", TABLE_SCHEMA, partition_by=[PARTITION_COLUMN],
        commit_properties=properties,
        post_commithook_properties=PostCommitHookProperties(
            create_checkpoint=False, cleanup_expired_logs=False),
    )
    crash_point(f"{operation}-after-commit")  # committed; brokers not told yet


def keep_first_offset(written: Sequence[PendingFile], first_offset: int) -> list[PendingFile]:
    """The files a rewrite (compaction, optimize) wrote, the first one's ``minValues.offset``
    statistic lowered to the first offset of the files it replaces (a looser bound is still a
    valid Delta statistic). Brokers take a partition's earliest offset from that statistic:
    like Kafka's log start offset, it must not move because a rewrite dropped the first records
    or repacked files (a consumer at the old start would get OFFSET_OUT_OF_RANGE and, with
    auto.offset.reset=latest, skip everything); a fetch there gets the next surviving batch."""
    if not written:
        return []
    first = written[0]
    stats = json.loads(first.stats)
    stats["minValues"]["offset"] = min(first_offset, int(stats["minValues"]["offset"]))
    return [dataclasses.replace(first, stats=json.dumps(stats)), *written[1:]]


def backoff(attempt: int) -> None:
    time.sleep(min(0.1 * (attempt + 1), 1.0))


class Progress:
    """Prints one line per partition (``out``, default stdout; each after ``prefix``) and
    keeps them for tests."""

    def __init__(self, out: TextIO | None = None, *, prefix: str = "") -> None:
        self.out = out
        self.prefix = prefix
        self.lines: list[str] = []

    def line(self, text: str) -> None:
        self.lines.append(text)
        print(self.prefix + text, file=self.out or sys.stdout, flush=True)


def offsets_text(files: Sequence[TierFile]) -> str:
    if not files:
        return "none"
    return f"[{files[0].min_offset}, {files[-1].max_offset}]"
