"""Compaction supersedes the local copies on EVERY replica within seconds, whatever the retention
check interval and the machine's uptime, on brokers that never read the table, and also when
the job's announcement never reaches the brokers.

Three brokers, replication factor 3, ``log.retention.check.interval.ms`` far longer than any
uptime, so only a start-up pass and the reactions under test can delete segments: the periodic
pass never comes. (The demo timed out on a freshly booted machine because "run the pass now"
was written as "last pass at monotonic time 0", which is "now" only once the machine has been up
longer than the check interval; the followers, which never read the table, did not watch its
announcements at all.) Each replica's local log start is read from its segment files on disk.
Spark runs the compaction (the session-wide fixture)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loglake.broker.tiering import READER_REFRESH_S
from loglake.compaction.common import Cluster
from loglake.compaction.compact import compact_topic, run_compaction
from loglake.config import TopicConfig
from loglake.dev.harness import DevCluster
from loglake.segments.filenames import LOG_SUFFIX, parse_segment_name
from loglake.segments.tiered_table import TieredTable, cleaned_end
from tests.compaction_util import Spec, produce_specs, quiet
from tests.replication_checks import create_replicated_topic, replica_dir
from tests.tiering_util import wait_tiered

BROKERS = (1, 2, 3)
NEVER_MS = str(10**12)
"""log.retention.check.interval.ms of ~31 years: no periodic local retention pass after the
one at start-up, however long the machine has been up."""
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "40000", "file.delete.delay.ms": "0"}
PROMPT_S = 15.0
"""How soon every replica must drop its stale copies after an announced compaction (the
reaction takes about a second; the slack is for a loaded test machine)."""
MISSED_S = READER_REFRESH_S + 15.0
"""The same without an announcement: the brokers check compacted tables every
READER_REFRESH_S."""
SETTLE_S = 3.0
"""Time for the brokers' start-up retention pass (their tierer's first turn, after 0.5 s) to
be over before the tests create topics: a topic created during that pass would be noticed by
it, which hides whether a replica reacts to a topic it has never read."""


@pytest.fixture(scope="module")
def replicated(tmp_path_factory: pytest.TempPathFactory,
               zookeeper_hosts: str) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("local-copies")
    with DevCluster(data / "dev", zookeeper=zookeeper_hosts, brokers=len(BROKERS),
                    broker_overrides={"log.retention.check.interval.ms": NEVER_MS}) as dev:
        time.sleep(SETTLE_S)
        yield dev


def _local_start(directory: Path) -> int:
    """The base offset of a replica's oldest segment file (-1: no segment)."""
    bases = [parsed[0] for path in directory.glob("*" + LOG_SUFFIX)
             if (parsed := parse_segment_name(path.name)) is not None]
    return min(bases, default=-1)


def _tiered_compacted_topic(dev: DevCluster, topic: str) -> int:
    """Create ``topic`` (1 partition, RF 3), fill it with keyed updates and sealing fillers,
    wait until the keyed part is tiered; returns one past the last keyed offset."""
    create_replicated_topic(dev.bootstrap_servers, topic, partitions=1, config=COMPACTED)
    specs = [Spec(0, b"key-%d" % (i % 200), b"v-%d-" % i + b"x" * 40) for i in range(4000)]
    fillers = [Spec(0, b"filler-%d" % i, b"f" * 60) for i in range(1500)]
    acked = produce_specs(dev.bootstrap_servers, topic, specs + fillers)
    keyed_end = max(o for _, o, k, _ in acked if k and k.startswith(b"key-")) + 1
    wait_tiered(dev.storage_url, topic, (0,), at_least=keyed_end, timeout=90)
    starts = {b: _local_start(replica_dir(dev.data_dir, b, topic, 0)) for b in BROKERS}
    assert starts == {b: 0 for b in BROKERS}, f"local copies deleted before compaction: {starts}"
    return keyed_end


def _cleaned(jobs: Cluster, topic: str) -> int:
    table = TieredTable(jobs.storage, topic)
    table.table(refresh=True)
    return cleaned_end(table, 0)


def _wait_replicas_past(dev: DevCluster, topic: str, offset: int, *, timeout: float) -> float:
    """Seconds until every replica's local start is >= ``offset``; AssertionError after
    ``timeout`` with each replica's start."""
    started = time.monotonic()
    starts: dict[int, int] = {}
    while time.monotonic() - started < timeout:
        starts = {b: _local_start(replica_dir(dev.data_dir, b, topic, 0)) for b in BROKERS}
        if all(start >= offset for start in starts.values()):
            return time.monotonic() - started
        time.sleep(0.2)
    raise AssertionError(f"{topic}: replicas kept local copies below the cleaned offset "
                         f"{offset} for {timeout:g} s: local starts {starts}")


def test_announced_compaction_reaches_replicas_that_never_read_the_table(replicated, spark):
    """The followers only ever replicated the topic (never read or tiered its table); the
    leader's periodic retention pass never comes. The job's announcement alone makes all three
    drop the local segments below the cleaned offset, within seconds."""
    topic = "copies-announced"
    keyed_end = _tiered_compacted_topic(replicated, topic)
    with Cluster(replicated.zookeeper_connect) as jobs:
        results = run_compaction(jobs, spark=lambda: spark, topic=topic, progress=quiet())
        assert results and all(r.committed for r in results), results
        cleaned = _cleaned(jobs, topic)
    assert cleaned >= keyed_end
    elapsed = _wait_replicas_past(replicated, topic, cleaned, timeout=PROMPT_S)
    print(f"every replica dropped its local copies {elapsed:.1f} s after the job returned")


def test_compaction_without_announcement_still_reaches_every_replica(replicated, spark):
    """The job commits but its announcement never comes (ZooKeeper away when it announced, a
    watch not yet set): the brokers still drop the stale copies within READER_REFRESH_S plus
    slack, not after log.retention.check.interval.ms."""
    topic = "copies-missed"
    keyed_end = _tiered_compacted_topic(replicated, topic)
    with Cluster(replicated.zookeeper_connect) as jobs:
        config = TopicConfig.from_overrides(jobs.catalog.topic_config(topic))
        # compact_topic is run_compaction without the announcement to the brokers
        results = compact_topic(TieredTable(jobs.storage, topic), config, [0],
                                spark=lambda: spark, progress=quiet())
        assert results and all(r.committed for r in results), results
        cleaned = _cleaned(jobs, topic)
    assert cleaned >= keyed_end
    elapsed = _wait_replicas_past(replicated, topic, cleaned, timeout=MISSED_S)
    print(f"every replica dropped its local copies {elapsed:.1f} s after the unannounced job")
