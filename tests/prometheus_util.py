"""A real Prometheus (and its ``promtool``) for tests: Debian's ``prometheus`` package, which
``./run test`` installs when it can (tests skip with a reason when the binaries are absent).

* :func:`promtool` / :func:`prometheus_binary` — the executables (``LOGLAKE_PROMTOOL`` /
  ``LOGLAKE_PROMETHEUS`` override ``PATH``), None when absent.
* :func:`lint_metrics` — ``promtool check metrics`` over one exposition text: the problems it
  reports as ``(metric name, problem)`` pairs (empty when clean).
* :class:`PrometheusServer` — one Prometheus process on loopback (its own free port, its own
  temporary storage), scraping the targets it is given, with the rule files given; the HTTP API
  helpers :meth:`query` / :meth:`query_range` return the ``data`` of a successful answer and
  raise :class:`PromQLError` with Prometheus's error text otherwise. The process is stopped
  (terminate, then kill after 10 s) by :meth:`stop` / leaving the ``with`` block.

Bounded: every wait has a timeout; one process per instance; nothing here is thread-safe.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from loglake.dev.harness import wait_until
from loglake.dev.net import LOOPBACK, free_port_block

PROMTOOL_TIMEOUT_S = 60.0
START_TIMEOUT_S = 60.0


def promtool() -> str | None:
    return os.environ.get("LOGLAKE_PROMTOOL") or shutil.which("promtool")


def prometheus_binary() -> str | None:
    return os.environ.get("LOGLAKE_PROMETHEUS") or shutil.which("prometheus")


def run_promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    tool = promtool()
    assert tool is not None, "no promtool"
    return subprocess.run([tool, *args], input=stdin, capture_output=True, text=True,
                          timeout=PROMTOOL_TIMEOUT_S, check=False)


_LINT_LINE = re.compile(r"^\s*(\S+)\s+(.+?)\s*$")


def lint_metrics(text: str) -> set[tuple[str, str]]:
    """``promtool check metrics`` problems of an exposition text (exit 3 = lint problems;
    any other failure — e.g. a text it cannot parse — raises)."""
    result = run_promtool("check", "metrics", stdin=text)
    if result.returncode == 0:
        return set()
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 3, f"promtool check metrics failed ({result.returncode}): {output}"
    problems = set()
    for line in output.splitlines():
        match = _LINT_LINE.match(line)
        assert match, f"unexpected promtool line {line!r}"
        problems.add((match.group(1), match.group(2)))
    return problems


class PromQLError(Exception):
    """Prometheus answered an API call with ``status: error``."""


class PrometheusServer:
    """A Prometheus process: ``scrape_configs`` (job name -> ``host:port`` targets) scraped every
    ``interval_s``, rules from ``rule_files`` evaluated as often."""

    def __init__(self, work_dir: Path, targets: dict[str, list[str]], *,
                 rule_files: list[Path] | None = None, interval_s: int = 1) -> None:
        binary = prometheus_binary()
        assert binary is not None, "no prometheus"
        self.work_dir = work_dir
        work_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port_block(1)
        self.url = f"http://{LOOPBACK}:{self.port}"
        config = {
            "global": {"scrape_interval": f"{interval_s}s", "evaluation_interval": f"{interval_s}s",
                       "scrape_timeout": f"{interval_s}s"},
            "rule_files": [str(path) for path in rule_files or []],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": hosts}]}
                               for job, hosts in targets.items()],
        }
        self.config_path = work_dir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log_path = work_dir / "prometheus.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [binary, f"--config.file={self.config_path}",
             f"--storage.tsdb.path={work_dir / 'data'}",
             f"--web.listen-address={LOOPBACK}:{self.port}",
             "--storage.tsdb.retention.time=1d", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=work_dir)
        self._client = httpx.Client(base_url=self.url, timeout=30)
        try:
            wait_until(self._ready, START_TIMEOUT_S, lambda: f"prometheus ready: {self.log()}")
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        assert self.process.poll() is None, f"prometheus exited: {self.log()}"
        try:
            return self._client.get("/-/ready").status_code == 200
        except httpx.HTTPError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._client.close()
        self._log.close()

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def api(self, path: str, **params: Any) -> Any:
        """``GET /api/v1/<path>``: the answer's ``data``; :class:`PromQLError` on an error."""
        response = self._client.get(f"/api/v1/{path}", params=params)
        body = response.json()
        if body.get("status") != "success":
            raise PromQLError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result (vector samples: ``metric`` labels, ``value``)."""
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"] if data["resultType"] in (
            "vector", "matrix") else [{"metric": {}, "value": data["result"]}]
        return result

    def query_range(self, expr: str, *, seconds: float = 120.0, step: str = "5s"
                    ) -> list[dict[str, Any]]:
        """A range query over the last ``seconds`` (what a Grafana time-series panel sends)."""
        end = time.time()
        data = self.api("query_range", query=expr, start=f"{end - seconds:.3f}",
                        end=f"{end:.3f}", step=step)
        result: list[dict[str, Any]] = data["result"]
        return result

    def targets_up(self) -> dict[str, str]:
        """``scrapeUrl`` -> health of every active target."""
        return {t["scrapeUrl"]: t["health"] for t in self.api("targets")["activeTargets"]}

    def alerts(self) -> dict[str, list[dict[str, Any]]]:
        """Alert name -> its active (pending or firing) alerts."""
        found: dict[str, list[dict[str, Any]]] = {}
        for alert in self.api("alerts")["alerts"]:
            found.setdefault(alert["labels"]["alertname"], []).append(alert)
        return found
