"""The retention and vacuum jobs on a real cluster: old tiered files vanish from Spark views and
consumers, the earliest offset moves, a consumer below it resets, dry runs change nothing, and
vacuum deletes removed files only."""

from __future__ import annotations

import io

from loglake.compaction.cli import main as jobs_main
from loglake.compaction.common import Cluster, Progress
from loglake.compaction.retention import expired_prefix, run_retention
from loglake.compaction.vacuum import run_vacuum
from loglake.config import TopicConfig
from loglake.segments.tiered_table import TieredTable, TierFile
from tests.admin_util import create_topic
from tests.compaction_util import (
    EXPIRING_CONFIG,
    Spec,
    consume_all,
    job_commits,
    old_then_new,
    produce_specs,
    quiet,
    spark_records,
    table_version,
    wait_earliest,
)
from tests.tiering_util import wait_local_start, wait_tiered


def _file(first: int, last: int, max_ts: int, size: int = 100) -> TierFile:
    return TierFile(f"f{first}", size, last - first + 1, first, last, 0, max_ts)


def test_expired_prefix_follows_kafka_rules():
    files = [_file(0, 9, 100), _file(10, 19, 300), _file(20, 29, 150), _file(30, 39, 900)]
    by_time = TopicConfig.from_overrides({"retention.ms": "500"})
    assert expired_prefix(files, by_time, now_ms=1000) == files[:3]  # prefix only
    assert expired_prefix(files, by_time, now_ms=800) == files[:1]
    never = TopicConfig.from_overrides({"retention.ms": "-1"})
    assert expired_prefix(files, never, now_ms=10**12) == []
    by_size = TopicConfig.from_overrides({"retention.ms": "-1", "retention.bytes": "250"})
    assert expired_prefix(files, by_size, now_ms=0) == files[:1]  # 300 bytes left >= 250


def test_retention_moves_earliest_offset_and_consumers_reset(cluster, topic_name, spark):
    create_topic(cluster.bootstrap_servers, topic_name, config=EXPIRING_CONFIG)
    acked = produce_specs(cluster.bootstrap_servers, topic_name, old_then_new())
    wait_tiered(cluster.storage_url, topic_name, (0,), at_least=4000)
    wait_local_start(cluster.zookeeper_connect, topic_name, (0,), above=3500)

    with Cluster(cluster.zookeeper_connect) as jobs:
        version = table_version(jobs, topic_name)
        out = io.StringIO()
        [dry] = run_retention(jobs, topic=topic_name, dry_run=True, progress=Progress(out))
        assert "would remove" in out.getvalue() and dry.removed[0]
        assert not job_commits(jobs, topic_name, version), "a dry run must not commit"

        [result] = run_retention(jobs, topic=topic_name, progress=quiet())
        assert result.committed
        earliest = result.earliest[0]
        assert earliest is not None and 0 < earliest <= 3000
        removed = result.removed[0]
        assert all(f.max_offset < 3000 for f in removed), "a file with live records went"
        files = TieredTable(jobs.storage, topic_name).files(0, refresh=True)
        assert files[0].min_offset == earliest
        # idempotent: nothing more to remove
        [again] = run_retention(jobs, topic=topic_name, progress=quiet())
        assert not again.removed and not again.committed

        # earliest offset moves for clients; a consumer below it resets to it
        wait_earliest(cluster.bootstrap_servers, topic_name, 0, earliest)
        high = max(o for _, o, _, _ in acked) + 1
        got = consume_all(cluster.bootstrap_servers, topic_name, [0], until={0: high},
                          start=0, reset="earliest")
        assert got and got[0][1] == earliest
        assert [r[1] for r in got] == list(range(earliest, high))
        # Spark sees the same: nothing older than the earliest offset
        rows = spark_records(spark, cluster.zookeeper_connect, topic_name)
        assert min(r[1] for r in rows) == earliest and len(rows) == high - earliest

        # vacuum deletes exactly the removed files (grace 0: file.delete.delay.ms=0)
        fs = jobs.storage.pyarrow_filesystem()
        [dry_vacuum] = run_vacuum(jobs, topic=topic_name, grace=0, dry_run=True,
                                  progress=quiet())
        assert {p.rsplit("/", 1)[-1] for p in dry_vacuum.deleted} == {
            f.uri.rsplit("/", 1)[-1] for f in removed}
        assert all(fs.get_file_info(jobs.storage.path_in_fs(f.uri)).size for f in removed)
        [vacuumed] = run_vacuum(jobs, topic=topic_name, grace=0, progress=quiet())
        assert len(vacuumed.deleted) == len(removed)
        for f in removed:
            assert fs.get_file_info(jobs.storage.path_in_fs(f.uri)).type.name == "NotFound"
        for f in files:
            assert fs.get_file_info(jobs.storage.path_in_fs(f.uri)).size
        again_got = consume_all(cluster.bootstrap_servers, topic_name, [0], until={0: high})
        assert [r[1] for r in again_got] == list(range(earliest, high))


def test_retention_cli_dry_run_prints_and_changes_nothing(cluster, topic_name, capsys):
    create_topic(cluster.bootstrap_servers, topic_name, config={
        "segment.bytes": "40000", "retention.bytes": "1"})
    produce_specs(cluster.bootstrap_servers, topic_name,
                  [Spec(0, None, b"v-%06d-" % i + bytes(40)) for i in range(3000)])
    wait_tiered(cluster.storage_url, topic_name, (0,), at_least=1000)
    with Cluster(cluster.zookeeper_connect) as jobs:
        version = table_version(jobs, topic_name)
        assert jobs_main(["retention", "--zookeeper", cluster.zookeeper_connect, "--topic",
                          topic_name, "--dry-run"]) == 0
        assert jobs_main(["vacuum", "--zookeeper", cluster.zookeeper_connect, "--topic",
                          topic_name, "--dry-run"]) == 0
        assert jobs_main(["optimize", "--zookeeper", cluster.zookeeper_connect, "--topic",
                          topic_name, "--dry-run"]) == 0
        assert jobs_main(["jobs", "run", "--zookeeper", cluster.zookeeper_connect, "--topic",
                          topic_name, "--dry-run", "--every", "1s", "--max-runs", "2"]) == 0
        assert not job_commits(jobs, topic_name, version)
    printed = capsys.readouterr().out
    assert f"retention {topic_name}-0: would remove" in printed
    assert f"vacuum {topic_name}: would delete" in printed
    assert f"optimize {topic_name}-0: would pack" in printed
    assert printed.count("jobs: run ") == 2
