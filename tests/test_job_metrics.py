"""Clean-up job metrics and run history (compaction/metrics.py, catalog/job_runs.py): stats per
job, the recorder's counters on success and failure, the textfile and Pushgateway exports, and
on a real cluster: a retention run and a failing run recorded in ZooKeeper and the textfile,
``jobs run --every`` serving /metrics and recording when each job is due."""

from __future__ import annotations

import http.server
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loglake.catalog.zookeeper import ClusterCatalog
from loglake.compaction.cli import JOB_NAMES
from loglake.compaction.cli import main as jobs_main
from loglake.compaction.common import Cluster
from loglake.compaction.compact import CompactionResult, PartitionPlan
from loglake.compaction.metrics import (
    PUSHGATEWAY_JOB,
    JobMetrics,
    JobRecorder,
    MetricsExport,
    stats_of,
)
from loglake.compaction.optimize import OptimizeResult
from loglake.compaction.retention import RetentionResult
from loglake.compaction.vacuum import VacuumResult
from loglake.dev.harness import DevCluster, wait_until
from loglake.segments.tiered_table import TieredTable, TierFile
from tests.admin_util import create_topic
from tests.compaction_util import EXPIRING_CONFIG, old_then_new, produce_specs
from tests.tiering_util import wait_tiered

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of a Prometheus text exposition: (name, sorted labels) -> value."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


def _file(uri: str, size: int, records: int) -> TierFile:
    return TierFile(uri, size, records, 0, records - 1, 0, 0)


def test_stats_of_each_job() -> None:
    a, b, c = _file("a", 100, 10), _file("b", 200, 20), _file("c", 50, 5)
    retention = [RetentionResult("t", removed={0: [a], 1: [b]}, committed=True),
                 RetentionResult("u", removed={0: [c]}, committed=False)]
    assert stats_of("retention", retention) == {
        "rows_rewritten": 0, "bytes_reclaimed": 300, "files_added": 0, "files_removed": 2,
        "topics_changed": 1}
    plan = PartitionPlan(0, (a, b), 0, 30, 1.0, True, "dirty")
    compact = [CompactionResult("t", 0, plan, committed=True, rows_in=30, rows_out=12,
                                files_out=1, bytes_out=120),
               CompactionResult("t", 1, plan, committed=False)]
    assert stats_of("compact", compact) == {
        "rows_rewritten": 12, "bytes_reclaimed": 180, "files_added": 1, "files_removed": 2,
        "topics_changed": 1}
    optimize = [OptimizeResult("t", 0, files_in=3, files_out=1, committed=True, rows_in=35,
                               bytes_in=350, bytes_out=400)]
    assert stats_of("optimize", optimize) == {
        "rows_rewritten": 35, "bytes_reclaimed": 0, "files_added": 1, "files_removed": 3,
        "topics_changed": 1}
    vacuum = [VacuumResult("t", ["x", "y"], 1, True), VacuumResult("u", [], 1, True)]
    assert stats_of("vacuum", vacuum) == {
        "rows_rewritten": 0, "bytes_reclaimed": 0, "files_added": 0, "files_removed": 2,
        "topics_changed": 1}
    assert stats_of("retention", retention, dry_run=True)["dry_run"] == 1
    assert stats_of("retention", retention, dry_run=True)["bytes_reclaimed"] == 0


def test_recorder_counts_success_and_failure(tmp_path: Path) -> None:
    metrics = JobMetrics()
    textfile = tmp_path / "jobs.prom"
    recorder = JobRecorder(metrics, None, export=MetricsExport(textfile=textfile),
                           clock=lambda: 1_700_000_000.0)
    result = [RetentionResult("t", removed={0: [_file("a", 100, 10)]}, committed=True)]
    assert recorder.run("retention", lambda: result) is result
    with pytest.raises(RuntimeError, match="disk on fire"):
        recorder.run("vacuum", _raise)
    recorder.run("retention", lambda: result, dry_run=True)
    recorder.export()
    found = samples(textfile.read_text())
    assert value(found, "loglake_job_runs_total", cleanup_job="retention", outcome="success") == 2
    assert value(found, "loglake_job_runs_total", cleanup_job="vacuum", outcome="failed") == 1
    assert value(found, "loglake_job_bytes_reclaimed_total", cleanup_job="retention") == 100
    assert value(found, "loglake_job_files_removed_total", cleanup_job="retention") == 1
    assert value(found, "loglake_job_duration_seconds_count", cleanup_job="retention") == 2
    assert value(found, "loglake_job_last_success_timestamp_seconds",
                 cleanup_job="retention") == 1_700_000_000.0
    assert value(found, "loglake_job_last_success_timestamp_seconds", cleanup_job="vacuum") is None
    assert value(found, "loglake_job_running", cleanup_job="vacuum") == 0


def _raise() -> list[object]:
    raise RuntimeError("disk on fire")


class _Gateway(http.server.BaseHTTPRequestHandler):
    """A loopback stand-in for the Pushgateway: keeps what was pushed (method, path, body)."""

    pushed: list[tuple[str, str, bytes]] = []

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.pushed.append(("PUT", self.path, body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def gateway() -> Iterator[tuple[str, list[tuple[str, str, bytes]]]]:
    _Gateway.pushed = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Gateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", _Gateway.pushed
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_push_to_gateway(gateway: tuple[str, list[tuple[str, str, bytes]]]) -> None:
    url, pushed = gateway
    recorder = JobRecorder(JobMetrics(), None,
                           export=MetricsExport(pushgateway=url, instance="box-retention"))
    recorder.run("retention", list)
    recorder.export()
    [(method, path, body)] = pushed
    assert method == "PUT"
    assert path == f"/metrics/job/{PUSHGATEWAY_JOB}/instance/box-retention"
    found = samples(body.decode())
    assert value(found, "loglake_job_runs_total", cleanup_job="retention", outcome="success") == 1
    # the Pushgateway overwrites a pushed "job" label with the grouping key's: none is pushed
    assert not [key for key in found if "job" in dict(key[1])]


def test_unreachable_exports_warn_and_do_not_fail(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    recorder = JobRecorder(JobMetrics(), None, export=MetricsExport(
        textfile=tmp_path / "missing-dir" / "jobs.prom", pushgateway="http://127.0.0.1:9"))
    recorder.run("vacuum", list)
    recorder.export()
    err = capsys.readouterr().err
    assert "warning: writing the metrics file" in err
    assert "warning: pushing metrics to http://127.0.0.1:9" in err


def test_cli_runs_recorded_in_zookeeper_and_textfile(cluster: DevCluster, topic_name: str,
                                                     tmp_path: Path) -> None:
    create_topic(cluster.bootstrap_servers, topic_name, config=EXPIRING_CONFIG)
    produce_specs(cluster.bootstrap_servers, topic_name, old_then_new())
    wait_tiered(cluster.storage_url, topic_name, (0,), at_least=4000)
    textfile = tmp_path / "retention.prom"
    with Cluster(cluster.zookeeper_connect) as jobs:
        table = TieredTable(jobs.storage, topic_name)
        before = {f.uri: f for f in table.files(0, refresh=True)}
        assert jobs_main(["retention", "--zookeeper", cluster.zookeeper_connect, "--topic",
                          topic_name, "--metrics-textfile", str(textfile)]) == 0
        after = {f.uri for f in table.files(0, refresh=True)}
        gone = [f for uri, f in before.items() if uri not in after]
        assert gone, "retention removed nothing"
        runs = [r for r in jobs.catalog.job_runs().runs("retention")
                if r.topics == (topic_name,)]
        assert len(runs) == 1
        [run] = runs
        assert run.outcome == "success" and run.ended_ms is not None
        assert run.stats["files_removed"] == len(gone)
        assert run.stats["bytes_reclaimed"] == sum(f.size for f in gone)
        found = samples(textfile.read_text())
        assert value(found, "loglake_job_runs_total", cleanup_job="retention",
                     outcome="success") == 1
        assert value(found, "loglake_job_bytes_reclaimed_total",
                     cleanup_job="retention") == sum(f.size for f in gone)
        assert value(found, "loglake_job_files_removed_total", cleanup_job="retention") == len(gone)

        failing = tmp_path / "optimize.prom"
        assert jobs_main(["optimize", "--zookeeper", cluster.zookeeper_connect, "--topic",
                          f"{topic_name}-missing", "--metrics-textfile", str(failing)]) == 1
        [failed] = [r for r in jobs.catalog.job_runs().runs("optimize")
                    if r.topics == (f"{topic_name}-missing",)]
        assert failed.outcome == "failed" and "does not exist" in str(failed.stats["error"])
        found = samples(failing.read_text())
        assert value(found, "loglake_job_runs_total", cleanup_job="optimize", outcome="failed") == 1


def test_jobs_run_serves_metrics_and_records_next_due(cluster: DevCluster, topic_name: str) -> None:
    create_topic(cluster.bootstrap_servers, topic_name, config={"retention.ms": "-1"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "loglake.compaction.cli", "jobs", "run", "--zookeeper",
         cluster.zookeeper_connect, "--topic", topic_name, "--every", "1s",
         "--max-runs", "60", "--metrics-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        url = None
        for _ in range(200):
            line = proc.stdout.readline()
            if not line:
                break
            match = re.search(r"jobs: metrics at (http://127\.0\.0\.1:\d+/metrics)", line)
            if match:
                url = match.group(1)
                break
        assert url, "jobs run printed no metrics URL"
        stdout = proc.stdout
        threading.Thread(target=lambda: [None for _ in stdout], daemon=True).start()

        def scraped_twice() -> Samples | None:
            with urllib.request.urlopen(url, timeout=5) as response:
                found = samples(response.read().decode())
            done = [value(found, "loglake_job_runs_total", cleanup_job=job, outcome="success") or 0
                    for job in JOB_NAMES]
            return found if min(done) >= 2 else None

        found: Samples = wait_until(scraped_twice, 60, "every job ran twice",
                                    ignore=(OSError,))
        for job in JOB_NAMES:
            due = value(found, "loglake_job_next_run_timestamp_seconds", cleanup_job=job)
            assert due is not None and abs(due - time.time()) < 30
        catalog = ClusterCatalog(cluster.zookeeper_connect, mode="tool")
        catalog.start()
        try:
            due_ms = catalog.job_runs().next_due()
            assert set(JOB_NAMES) <= set(due_ms)
            assert all(abs(due_ms[job] / 1000 - time.time()) < 30 for job in JOB_NAMES)
            mine = [r for r in catalog.job_runs().runs(limit=200) if r.topics == (topic_name,)]
            assert {r.job for r in mine if r.outcome == "success"} == set(JOB_NAMES)
        finally:
            catalog.stop()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
