"""Run history of the clean-up jobs in ZooKeeper (catalog/job_runs.py), against the session's
real ZooKeeper: start/end records, bounded history, running vs abandoned, next-due times."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from loglake.catalog.job_runs import (
    RUNS,
    JobRunStore,
    check_job_name,
    parse_run_id,
)
from loglake.catalog.zookeeper import ClusterCatalog
from tests.zk_util import fresh_chroot


@pytest.fixture
def catalog(zookeeper_hosts: str) -> Iterator[ClusterCatalog]:
    cat = ClusterCatalog(fresh_chroot(zookeeper_hosts, "jobruns"))
    cat.start()
    try:
        yield cat
    finally:
        cat.stop()


def test_run_recorded_from_start_to_end(catalog: ClusterCatalog) -> None:
    store = catalog.job_runs()
    run_id = store.record_start("retention", ["orders"])
    assert parse_run_id(run_id)[0] == "retention"
    [running] = store.runs()
    assert (running.job, running.run_id, running.topics) == ("retention", run_id, ("orders",))
    assert running.outcome == "running" and running.ended_ms is None
    assert running.duration_ms is None
    store.record_end(run_id, "success", {"rows_rewritten": 0, "bytes_reclaimed": 123,
                                         "files_added": 0, "files_removed": 2})
    [done] = store.runs("retention")
    assert done.outcome == "success"
    assert done.ended_ms is not None and done.ended_ms >= done.started_ms
    assert done.stats == {"rows_rewritten": 0, "bytes_reclaimed": 123, "files_added": 0,
                          "files_removed": 2}


def test_runs_newest_first_across_jobs_and_limit(catalog: ClusterCatalog) -> None:
    store = catalog.job_runs()
    ids = []
    for job in ("retention", "compact", "optimize", "vacuum"):
        run_id = store.record_start(job, [])
        store.record_end(run_id, "failed" if job == "compact" else "success",
                         {"error": "boom"} if job == "compact" else {})
        ids.append(run_id)
    runs = store.runs()
    starts = [r.started_ms for r in runs]
    assert starts == sorted(starts, reverse=True)
    assert {r.run_id for r in runs} == set(ids)
    assert [r.run_id for r in store.runs(limit=2)] == [r.run_id for r in runs[:2]]
    [compact] = store.runs("compact")
    assert compact.outcome == "failed" and compact.stats == {"error": "boom"}
    assert store.runs("never-ran") == []


def test_history_bounded_per_job(catalog: ClusterCatalog) -> None:
    store = JobRunStore(catalog.zk, history=3)
    ids = [store.record_start("optimize", []) for _ in range(5)]
    for run_id in ids:
        store.record_end(run_id, "success", {})
    assert [r.run_id for r in store.runs("optimize")] == list(reversed(ids[-3:]))
    assert len(catalog.zk.get_children(f"{RUNS}/optimize")) == 3
    store.record_end(ids[0], "success", {})  # trimmed: not recreated
    assert len(catalog.zk.get_children(f"{RUNS}/optimize")) == 3


def test_run_of_a_dead_process_reads_abandoned(catalog: ClusterCatalog) -> None:
    other = ClusterCatalog(_connect_of(catalog))
    other.start()
    try:
        run_id = other.job_runs().record_start("vacuum", ["t"])
        [run] = catalog.job_runs().runs("vacuum")
        assert run.outcome == "running"
    finally:
        other.stop()  # the session ends: its ephemeral marker goes
    [run] = catalog.job_runs().runs("vacuum")
    assert run.run_id == run_id and run.outcome == "abandoned" and run.ended_ms is None


def test_next_due(catalog: ClusterCatalog) -> None:
    store = catalog.job_runs()
    assert store.next_due() == {}
    store.set_next_due("retention", 1_000)
    store.set_next_due("compact", 2_000)
    store.set_next_due("retention", 3_000)
    assert store.next_due() == {"retention": 3_000, "compact": 2_000}


def test_malformed_znodes_skipped_and_bad_names_refused(catalog: ClusterCatalog) -> None:
    store = catalog.job_runs()
    catalog.zk.create(f"{RUNS}/retention/run-0000009999", b"not json", makepath=True)
    catalog.zk.create(f"{RUNS}/retention/run-0000009998",
                      json.dumps({"outcome": "weird", "started_ms": 1}).encode())
    run_id = store.record_start("retention", [])
    assert [r.run_id for r in store.runs("retention")] == [run_id]
    for bad in ("", "Retention", "../x", "a/b", "x" * 65):
        with pytest.raises(ValueError):
            check_job_name(bad)
    for bad in ("retention", "retention/run-1", "../run-0000000001"):
        with pytest.raises(ValueError):
            parse_run_id(bad)
    with pytest.raises(ValueError):
        store.record_end(run_id, "running", {})  # type: ignore[arg-type]


def _connect_of(catalog: ClusterCatalog) -> str:
    return catalog._hosts + catalog._chroot
