"""Clean-up jobs SIGKILLed mid-way: the table stays consistent and a rerun completes the work.

Each job runs as its own ``python -m loglake <job>`` process (its Spark JVM included, in a new
process group that the test kills afterwards). Kills come two ways: at named crash points around
the one replace commit (``LOGLAKE_CRASH_AT=<operation>-before-commit|-after-commit``, see
loglake/faults.py), and from outside at spread-out moments while ``optimize`` runs. After every
kill the table (read directly and through Spark) holds exactly the records of a state Kafka's
rules allow: everything acknowledged (nothing committed yet) or the job's result for the
partitions it committed. Orphan files of a killed job are swept by ``vacuum``. Every wait is
bounded; processes are only those the test started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pytest

from loglake.compaction.common import Cluster
from loglake.compaction.vacuum import run_vacuum
from loglake.dev.harness import DevCluster
from loglake.faults import ENV as CRASH_ENV
from loglake.segments.tiered_table import TieredTable, cleaned_end
from tests.admin_util import create_topic
from tests.compaction_util import (
    Record,
    Spec,
    compacted_model,
    consume_all,
    job_commits,
    produce_specs,
    quiet,
    spark_records,
    table_version,
    wait_earliest,
)
from tests.tiering_util import wait_local_start, wait_tiered

KEYS = 200
KEYED = 6_000
FILLERS = 1_500
TABLE_CONFIG = {"segment.bytes": "30000", "local.retention.ms": "0", "file.delete.delay.ms": "0"}
JOB_TIMEOUT_S = 180.0
KILL_ROUNDS = 14


def run_job(cluster: DevCluster, logs: Path, args: list[str], *, crash_at: str | None = None,
            kill_after: float | None = None) -> int:
    """Run ``loglake <args> --zookeeper …`` to its end (or SIGKILL it after ``kill_after`` s);
    its exit status (negative: killed by that signal). Output goes to files: a pipe would stay
    open while a killed driver's Spark JVM lives."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    env.pop(CRASH_ENV, None)
    if crash_at is not None:
        env[CRASH_ENV] = crash_at
    logs.mkdir(parents=True, exist_ok=True)
    name = f"{args[0]}-{time.monotonic_ns()}"
    with open(logs / f"{name}.out", "wb") as out, open(logs / f"{name}.err", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loglake", *args, "--zookeeper", cluster.zookeeper_connect],
            env=env, stdout=out, stderr=err, start_new_session=True)
        try:
            if kill_after is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(kill_after)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
            return proc.wait(JOB_TIMEOUT_S)
        finally:
            with contextlib.suppress(ProcessLookupError):  # the job's Spark JVM, if any
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)


def tier_holds(cluster: DevCluster, topic: str, partitions: range,
               expected: Iterable[Record]) -> bool:
    """Whether the table's newest snapshot (read directly, no broker) holds exactly the
    ``expected`` records below its tiered ends (the tierer keeps appending newer ones)."""
    with Cluster(cluster.zookeeper_connect) as jobs:
        table = TieredTable(jobs.storage, topic)
        table.table(refresh=True)
        ends = {p: table.tiered_end(p, refresh=False) or 0 for p in partitions}
        rows: list[Record] = []
        for partition in partitions:
            for batch in table.read_rows(partition, 0, ends[partition],
                                         columns=["offset", "key", "value"]):
                columns = batch.to_pydict()
                rows += [(partition, o, k, v) for o, k, v in
                         zip(columns["offset"], columns["key"], columns["value"], strict=True)]
    wanted = Counter(r for r in expected if r[1] < ends[r[0]])
    return Counter(rows) == wanted and sum(wanted.values()) > 0


def parquet_files(cluster: DevCluster, topic: str) -> set[str]:
    with Cluster(cluster.zookeeper_connect) as jobs:
        fs = jobs.storage.filesystem()
        root = jobs.storage.path_in_fs(jobs.storage.table_uri(topic))
        return {path.rsplit("/", 1)[-1] for path in fs.find(root)
                if path.endswith(".parquet") and "/_delta_log/" not in path}


def live_files(cluster: DevCluster, topic: str, partitions: range) -> set[str]:
    with Cluster(cluster.zookeeper_connect) as jobs:
        table = TieredTable(jobs.storage, topic)
        return {f.uri.rsplit("/", 1)[-1] for p in partitions
                for f in table.files(p, refresh=True)}


def sweep(jobs: Cluster, topic: str) -> None:
    """Vacuum the removed files (grace 0), then age every data file by two hours (local
    storage: file times are what delta-rs reads) and vacuum the orphans (grace 1 h)."""
    run_vacuum(jobs, topic=topic, grace=0, progress=quiet())
    root = Path(jobs.storage.path_in_fs(jobs.storage.table_uri(topic)))
    past = time.time() - 2 * 3600
    for path in root.rglob("*.parquet"):
        os.utime(path, (past, past))
    [result] = run_vacuum(jobs, topic=topic, grace=1, progress=quiet())
    assert result.orphans_swept


def _produce_keyed(cluster: DevCluster, topic: str, *, fillers: int = FILLERS
                   ) -> tuple[list[Record], dict[int, int]]:
    """Keyed records (updates, some tombstones) then unique fillers, so every keyed record
    is tiered; returns the acknowledged records and the end offset per partition."""
    specs = [Spec(i % 2, b"key-%d" % (i % KEYS),
                  None if i % 41 == 7 else b"v-%d-%d" % (i % KEYS, i)) for i in range(KEYED)]
    specs += [Spec(i % 2, b"filler-%d" % i, b"f" * 80) for i in range(fillers)]
    acked = produce_specs(cluster.bootstrap_servers, topic, specs)
    keyed_end = max(o for _, o, k, _ in acked if k and k.startswith(b"key-")) + 1
    wait_tiered(cluster.storage_url, topic, (0, 1), at_least=keyed_end, timeout=90)
    wait_local_start(cluster.zookeeper_connect, topic, (0, 1), above=keyed_end)
    return acked, {p: max(o for q, o, _, _ in acked if q == p) + 1 for p in (0, 1)}


def test_compaction_killed_before_and_after_its_commit_then_rerun(cluster, topic_name, spark,
                                                                    tmp_path):
    create_topic(cluster.bootstrap_servers, topic_name, partitions=2,
                 config={**TABLE_CONFIG, "cleanup.policy": "compact"})
    acked, ends = _produce_keyed(cluster, topic_name)
    partitions = range(2)
    with Cluster(cluster.zookeeper_connect) as jobs:
        version = table_version(jobs, topic_name)
    files_before = parquet_files(cluster, topic_name)

    # killed after writing its output, before committing: nothing changed, orphans left
    status = run_job(cluster, tmp_path, ["compact", "--topic", topic_name],
                     crash_at="compact-before-commit")
    assert status == -signal.SIGKILL
    with Cluster(cluster.zookeeper_connect) as jobs:
        assert not job_commits(jobs, topic_name, version)
    assert tier_holds(cluster, topic_name, partitions, acked)
    orphans = parquet_files(cluster, topic_name) - live_files(cluster, topic_name, partitions)
    assert orphans and not orphans & files_before, "the killed job wrote no file"
    assert Counter(consume_all(cluster.bootstrap_servers, topic_name, partitions,
                               until=ends)) == Counter(acked)

    # killed right after its first partition's commit: that partition compacted, the other not
    status = run_job(cluster, tmp_path, ["compact", "--topic", topic_name],
                     crash_at="compact-after-commit")
    assert status == -signal.SIGKILL
    with Cluster(cluster.zookeeper_connect) as jobs:
        assert [c.get("loglake.operation") for c in job_commits(jobs, topic_name, version)] \
            == ["compact"]
        table = TieredTable(jobs.storage, topic_name)
        table.table(refresh=True)
        cleaned = {p: cleaned_end(table, p) or 0 for p in partitions}
    assert sorted(bool(end) for end in cleaned.values()) == [False, True], cleaned
    halfway = compacted_model(acked, cleaned)
    assert tier_holds(cluster, topic_name, partitions, halfway)

    # the rerun completes the work; a further rerun is a no-op
    assert run_job(cluster, tmp_path, ["compact", "--topic", topic_name]) == 0
    with Cluster(cluster.zookeeper_connect) as jobs:
        table = TieredTable(jobs.storage, topic_name)
        table.table(refresh=True)
        cleaned = {p: cleaned_end(table, p) or 0 for p in partitions}
        assert all(cleaned.values()), cleaned
        done_version = table_version(jobs, topic_name)
    expected = compacted_model(acked, cleaned)
    assert len(expected) < len(acked) // 2
    assert tier_holds(cluster, topic_name, partitions, expected)
    assert Counter(spark_records(spark, cluster.zookeeper_connect, topic_name)) == \
        Counter(expected)
    assert Counter(consume_all(cluster.bootstrap_servers, topic_name, partitions,
                               until=ends)) == Counter(expected)
    assert run_job(cluster, tmp_path, ["compact", "--topic", topic_name]) == 0
    with Cluster(cluster.zookeeper_connect) as jobs:
        assert not job_commits(jobs, topic_name, done_version)

        # vacuum deletes the replaced files, and the killed job's orphans once they are older
        # than an hour (younger ones could be writes in flight); reads are unchanged
        sweep(jobs, topic_name)
    assert parquet_files(cluster, topic_name) == live_files(cluster, topic_name, partitions)
    assert Counter(consume_all(cluster.bootstrap_servers, topic_name, partitions,
                               until=ends)) == Counter(expected)


def test_optimize_killed_at_any_moment_then_rerun(cluster, topic_name, tmp_path):
    """Crash points first; then rounds of: produce more (new small files, so every run has
    work), SIGKILL optimize at a moment stepping through its run (start-up, planning,
    writing, committing), check the table; until 3 kills, one of them after writing began.
    Bounded by KILL_ROUNDS."""
    create_topic(cluster.bootstrap_servers, topic_name, partitions=2,
                 config={**TABLE_CONFIG, "segment.bytes": "17000"})
    acked, ends = _produce_keyed(cluster, topic_name, fillers=4 * FILLERS)
    partitions = range(2)
    assert len(live_files(cluster, topic_name, partitions)) >= 25
    args = ["optimize", "--topic", topic_name, "--small-bytes", "1000000",
            "--target-bytes", "200000"]

    for point in ("optimize-before-commit", "optimize-after-commit"):
        assert run_job(cluster, tmp_path, args, crash_at=point) == -signal.SIGKILL
        assert tier_holds(cluster, topic_name, partitions, acked), point

    started = time.monotonic()
    assert run_job(cluster, tmp_path, [*args, "--dry-run"]) == 0
    startup = time.monotonic() - started  # interpreter, imports, ZooKeeper, planning
    killed = mid_work = 0
    for step in range(KILL_ROUNDS):
        more = [Spec(i % 2, b"more-%d-%d" % (step, i), b"m" * 80) for i in range(600)]
        acked += produce_specs(cluster.bootstrap_servers, topic_name, more)
        ends = {p: max(o for q, o, _, _ in acked if q == p) + 1 for p in partitions}
        wait_tiered(cluster.storage_url, topic_name, partitions,
                    at_least=min(ends.values()) - 300, timeout=60)
        moment = startup * (0.5 + step / KILL_ROUNDS)  # 0.5x .. 1.5x the dry run's time
        status = run_job(cluster, tmp_path, args, kill_after=moment)
        assert tier_holds(cluster, topic_name, partitions, acked), step
        if status == -signal.SIGKILL:
            killed += 1
            orphans = (parquet_files(cluster, topic_name)
                       - live_files(cluster, topic_name, partitions))
            mid_work += bool(orphans)
        if killed >= 3 and mid_work:
            break
    # (kills during start-up count too; the crash points above cut the writes for certain)
    print(f"{step + 1} rounds, {killed} kills, {mid_work} after writing began")
    assert killed >= 2, f"only {killed} kills landed before the job finished"

    # the last round's run may have finished and packed everything: tier new small files first
    # so the rerun below has work to do whichever way the rounds ended
    more = [Spec(i % 2, b"last-%d" % i, b"m" * 80) for i in range(600)]
    acked += produce_specs(cluster.bootstrap_servers, topic_name, more)
    ends = {p: max(o for q, o, _, _ in acked if q == p) + 1 for p in partitions}
    wait_tiered(cluster.storage_url, topic_name, partitions,
                at_least=min(ends.values()) - 300, timeout=60)
    small_files = len(live_files(cluster, topic_name, partitions))
    assert small_files > len(partitions), small_files
    assert run_job(cluster, tmp_path, args) == 0
    packed = live_files(cluster, topic_name, partitions)
    assert len(packed) < small_files, (len(packed), small_files)
    assert tier_holds(cluster, topic_name, partitions, acked)
    with Cluster(cluster.zookeeper_connect) as jobs:
        sweep(jobs, topic_name)
    assert parquet_files(cluster, topic_name) == live_files(cluster, topic_name, partitions)
    assert Counter(consume_all(cluster.bootstrap_servers, topic_name, partitions,
                               until=ends)) == Counter(acked)


def test_retention_killed_after_commit_brokers_still_follow(cluster, topic_name, tmp_path):
    """No announcement reaches the brokers (killed right after the commit): they still move
    the earliest offset, from their periodic snapshot reload."""
    hour_ms = 3_600_000
    create_topic(cluster.bootstrap_servers, topic_name, config={
        **TABLE_CONFIG, "retention.ms": str(2 * hour_ms)})
    now = int(time.time() * 1000)
    old = [Spec(0, None, b"old-%05d" % i, now - 3 * hour_ms + i) for i in range(2000)]
    acked = produce_specs(cluster.bootstrap_servers, topic_name,
                          old + [Spec(0, None, b"new-%05d" % i) for i in range(2000)])
    wait_tiered(cluster.storage_url, topic_name, (0,), at_least=2000)
    wait_local_start(cluster.zookeeper_connect, topic_name, (0,), above=1500)
    # a consumer first, so the broker caches the table's start
    high = max(o for _, o, _, _ in acked) + 1
    assert len(consume_all(cluster.bootstrap_servers, topic_name, [0], until={0: high})) == high

    status = run_job(cluster, tmp_path, ["retention", "--topic", topic_name],
                     crash_at="retention-after-commit")
    assert status == -signal.SIGKILL
    with Cluster(cluster.zookeeper_connect) as jobs:
        files = TieredTable(jobs.storage, topic_name).files(0, refresh=True)
    earliest = files[0].min_offset
    assert 0 < earliest <= 2000
    wait_earliest(cluster.bootstrap_servers, topic_name, 0, earliest, timeout=30)
    got = consume_all(cluster.bootstrap_servers, topic_name, [0], until={0: high})
    assert [r[1] for r in got] == list(range(earliest, high))


@pytest.fixture(autouse=True)
def _no_crash_env(monkeypatch):
    monkeypatch.delenv(CRASH_ENV, raising=False)
