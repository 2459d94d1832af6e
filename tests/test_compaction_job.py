"""Key compaction (Spark) and optimize on a real cluster: a Spark query and a Kafka consumer from
offset 0 see one record per key with its last value, offsets unchanged, tombstones kept until
delete.retention.ms; reruns are no-ops; dry runs change nothing; compaction, optimize and
retention running under a live producer lose or duplicate no record."""

from __future__ import annotations

import io
import time
from collections import Counter

from loglake.client.admin import Admin
from loglake.compaction.common import Cluster, Progress
from loglake.compaction.compact import plan_partition, run_compaction
from loglake.compaction.optimize import run_optimize
from loglake.compaction.retention import run_retention
from loglake.config import TopicConfig
from loglake.segments.tiered_table import TieredTable, TierFile, cleaned_end
from tests.admin_util import create_topic
from tests.compaction_util import (
    BackgroundProducer,
    Spec,
    compacted_model,
    consume_all,
    job_commits,
    produce_specs,
    quiet,
    spark_records,
    table_version,
    watermarks,
)
from tests.tiering_util import wait_local_start, wait_tiered

KEYS = 500
RECORDS = 20_000
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "40000", "local.retention.ms": "0",
             "file.delete.delay.ms": "0"}


def _main_spec(i: int) -> Spec:
    key = i % KEYS  # every record keyed: a compacted topic refuses records without a key
    value = None if key % 10 == 0 and i >= RECORDS - KEYS else b"v-%d-%d" % (key, i)
    return Spec(key % 2, b"key-%d" % key, value)


def _fillers(start: int, count: int) -> list[Spec]:
    return [Spec(i % 2, b"filler-%d" % i, b"f" * 60) for i in range(start, start + count)]


def test_plan_partition_rules():
    files = [TierFile("a", 1, 10, 0, 9, 0, 100), TierFile("b", 1, 10, 10, 19, 100, 900)]
    config = TopicConfig.from_overrides({"cleanup.policy": "compact",
                                         "min.compaction.lag.ms": "500"})
    plan = plan_partition(0, files, config, cleaned=0, now_ms=1000)
    assert plan.eligible and plan.cleanable_end == 10 and plan.files == (files[0],)
    done = plan_partition(0, files, config, cleaned=10, now_ms=1000)
    assert not done.eligible and done.reason == "nothing dirty"
    lazy = TopicConfig.from_overrides({"cleanup.policy": "compact",
                                       "min.cleanable.dirty.ratio": "0.9"})
    half = plan_partition(0, files, lazy, cleaned=10, now_ms=1000)
    assert not half.eligible and half.dirty_ratio == 0.5
    overdue = TopicConfig.from_overrides({"cleanup.policy": "compact",
                                          "min.cleanable.dirty.ratio": "0.9",
                                          "max.compaction.lag.ms": "500"})
    assert plan_partition(0, files, overdue, cleaned=10, now_ms=1000).eligible


def test_compaction_keeps_last_value_per_key(cluster, topic_name, spark):
    bootstrap, zookeeper = cluster.bootstrap_servers, cluster.zookeeper_connect
    create_topic(bootstrap, topic_name, partitions=2, config=COMPACTED)
    acked = produce_specs(bootstrap, topic_name, [_main_spec(i) for i in range(RECORDS)])
    acked += produce_specs(bootstrap, topic_name, _fillers(0, 3000))
    main_end = {p: max(o for q, o, k, _ in acked if q == p and not (k or b"").startswith(
        b"filler")) + 1 for p in (0, 1)}
    wait_tiered(cluster.storage_url, topic_name, (0, 1), at_least=max(main_end.values()),
                timeout=90)
    wait_local_start(zookeeper, topic_name, (0, 1), above=max(main_end.values()))
    ends = {p: max(o for q, o, _, _ in acked if q == p) + 1 for p in (0, 1)}

    with Cluster(zookeeper) as jobs:
        version = table_version(jobs, topic_name)
        out = io.StringIO()
        dry = run_compaction(jobs, spark=lambda: spark, topic=topic_name, dry_run=True,
                             progress=Progress(out))
        assert all(r.plan.eligible and not r.committed for r in dry)
        assert f"compact {topic_name}-0: would compact" in out.getvalue()
        assert not job_commits(jobs, topic_name, version)
        # a consumer reads everything before the job: the brokers now hold a snapshot and row
        # groups of the uncompacted table, which the job's announcement must invalidate
        before = consume_all(bootstrap, topic_name, (0, 1), until=ends)
        assert Counter(before) == Counter(acked)

        started = time.monotonic()
        results = run_compaction(jobs, spark=lambda: spark, topic=topic_name, progress=quiet())
        elapsed = time.monotonic() - started
        assert all(r.committed for r in results), results
        table = TieredTable(jobs.storage, topic_name)
        table.table(refresh=True)
        cleaned = {p: cleaned_end(table, p) for p in (0, 1)}
        assert all(cleaned[p] >= main_end[p] for p in (0, 1)), (cleaned, main_end)
        expected = compacted_model(acked, cleaned)
        assert sum(r.rows_out for r in results) < RECORDS // 5, (results, elapsed)

        live = {(k, v) for p, o, k, v in expected if k and k.startswith(b"key-")}
        last = {k: v for _, _, k, v in sorted(acked, key=lambda r: r[1])
                if k and k.startswith(b"key-")}
        assert live == set(last.items())  # one record per key; tombstones (None) still there
        assert sum(1 for v in last.values() if v is None) >= KEYS // 10 - 5

        rows = spark_records(spark, zookeeper, topic_name)
        assert Counter(rows) == Counter(expected), "Spark view differs from Kafka's rule"
        got = consume_all(bootstrap, topic_name, (0, 1), until=ends)
        assert Counter(got) == Counter(expected), "consumer differs from Kafka's rule"

        # idempotent: a rerun finds nothing dirty and commits nothing
        version = table_version(jobs, topic_name)
        again = run_compaction(jobs, spark=lambda: spark, topic=topic_name, progress=quiet())
        assert not any(r.committed for r in again)
        assert not job_commits(jobs, topic_name, version)

        # tombstones go once delete.retention.ms passed (and the partition is dirty again)
        with Admin(bootstrap) as admin:
            admin.alter_config(topic_name, set={"delete.retention.ms": "0",
                                                "min.cleanable.dirty.ratio": "0"})
        acked += produce_specs(bootstrap, topic_name, _fillers(3000, 1500))
        wait_tiered(cluster.storage_url, topic_name, (0, 1),
                    at_least=max(ends.values()) + 200, timeout=90)
        results = run_compaction(jobs, spark=lambda: spark, topic=topic_name, progress=quiet())
        assert any(r.committed for r in results)
        table.table(refresh=True)
        cleaned = {p: cleaned_end(table, p) for p in (0, 1)}
        expected = compacted_model(acked, cleaned, tombstones_expired=True)
        rows = spark_records(spark, zookeeper, topic_name)
        assert Counter(rows) == Counter(expected)
        assert not any(v is None and k and k.startswith(b"key-") for _, _, k, v in rows)
        ends = {p: max(o for q, o, _, _ in acked if q == p) + 1 for p in (0, 1)}
        got = consume_all(bootstrap, topic_name, (0, 1), until=ends)
        assert Counter(got) == Counter(expected), "consumer still sees tombstones"


def test_cleanup_jobs_under_a_live_producer_lose_nothing(cluster, topic_name, spark):
    """Compaction, optimize and retention (nothing expired) commit while a producer writes and
    the tierer commits: every acknowledged record outside the rules is there exactly once."""
    bootstrap, zookeeper = cluster.bootstrap_servers, cluster.zookeeper_connect
    create_topic(bootstrap, topic_name, partitions=2, config={
        **COMPACTED, "cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0"})

    def make(i: int) -> Spec:  # unique keys, plus a few keys updated over and over
        key = b"hot-%d" % (i // 10 % 5) if i % 10 == 0 else b"u-%d" % i
        return Spec(i % 2, key, b"v-%d" % i + bytes(30))

    rounds = 0
    with Cluster(zookeeper) as jobs, BackgroundProducer(bootstrap, topic_name, make,
                                                        limit=12_000) as producer:
        deadline = time.monotonic() + 60
        while rounds < 6 and producer.running and time.monotonic() < deadline:
            time.sleep(1)
            run_compaction(jobs, spark=lambda: spark, topic=topic_name, progress=quiet())
            run_optimize(jobs, topic=topic_name, small_bytes=1 << 20, target_bytes=1 << 22,
                         progress=quiet())
            run_retention(jobs, topic=topic_name, progress=quiet())
            rounds += 1
        producer.wait(60)
        run_compaction(jobs, spark=lambda: spark, topic=topic_name, progress=quiet())
    acked = producer.acked
    assert len(acked) == 12_000 and rounds >= 2
    ends = {p: max(o for q, o, _, _ in acked if q == p) + 1 for p in (0, 1)}
    got = consume_all(bootstrap, topic_name, (0, 1), until=ends, reset="latest")
    offsets = Counter((p, o) for p, o, _, _ in got)
    assert all(n == 1 for n in offsets.values()), "a record was duplicated"
    present = set(got)
    missing = [r for r in acked if r[2] is not None and r[2].startswith(b"u-")
               and r not in present]
    assert not missing, f"{len(missing)} acknowledged unique-key records lost: {missing[:3]}"
    for key in (b"hot-%d" % k for k in range(5)):
        last = max((r for r in acked if r[2] == key), key=lambda r: r[1])
        assert last in present, f"latest value of {key!r} lost"


def test_compaction_supersedes_the_brokers_local_copies(cluster, topic_name, spark):
    """Local segments are kept (default local retention: a week), yet once the table is
    compacted the brokers drop the local copies below the cleaned offset (they would serve the
    uncompacted records), and a consumer from offset 0 reads the compacted log."""
    bootstrap, zookeeper = cluster.bootstrap_servers, cluster.zookeeper_connect
    create_topic(bootstrap, topic_name, partitions=2, config={
        "cleanup.policy": "compact", "segment.bytes": "40000", "file.delete.delay.ms": "0"})
    specs = [Spec(i % 2, b"key-%d" % (i % 300), b"v-%d" % i) for i in range(6000)]
    acked = produce_specs(bootstrap, topic_name, specs + _fillers(0, 1500))
    ends = {p: max(o for q, o, _, _ in acked if q == p) + 1 for p in (0, 1)}
    keyed_end = max(o for _, o, k, _ in acked if k and k.startswith(b"key-")) + 1
    wait_tiered(cluster.storage_url, topic_name, (0, 1), at_least=keyed_end, timeout=90)
    time.sleep(1.5)  # a few local retention checks: the local copies stay (nothing expired)
    assert watermarks_low(bootstrap, topic_name) == {0: 0, 1: 0}
    assert Counter(consume_all(bootstrap, topic_name, (0, 1), until=ends)) == Counter(acked)

    with Cluster(zookeeper) as jobs:
        assert all(r.committed for r in run_compaction(jobs, spark=lambda: spark,
                                                       topic=topic_name, progress=quiet()))
        table = TieredTable(jobs.storage, topic_name)
        table.table(refresh=True)
        cleaned = {p: cleaned_end(table, p) for p in (0, 1)}
    assert all(end >= keyed_end for end in cleaned.values()), cleaned
    starts = wait_local_start(zookeeper, topic_name, (0, 1), above=min(cleaned.values()) - 1,
                              timeout=30)
    assert all(starts[p] == cleaned[p] for p in (0, 1)), (starts, cleaned)
    expected = compacted_model(acked, cleaned)
    assert len(expected) < len(acked) // 2
    assert Counter(consume_all(bootstrap, topic_name, (0, 1), until=ends)) == Counter(expected)
    assert watermarks_low(bootstrap, topic_name) == {0: 0, 1: 0}  # the earliest offset stays


def watermarks_low(bootstrap: str, topic: str) -> dict[int, int]:
    return {p: watermarks(bootstrap, topic, p)[0] for p in (0, 1)}
