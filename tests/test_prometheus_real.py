"""ops/ against a REAL Prometheus (Debian's ``prometheus`` 2.42 package with ``promtool``;
``./run test`` installs it when it can, the tests skip with a reason when it is absent):

1. ``promtool check rules`` / ``promtool check config`` accept ops/prometheus/*.yml, and
   ``promtool test rules`` passes ops/prometheus/loglake-alerts.test.yml (the key alerts with
   the shipped thresholds and ``for:`` over synthetic series);
2. ``promtool check metrics`` finds no naming problem in any exposition loglake serves — both
   brokers of a secured 2-broker cluster (SASL_SSL listeners, ACL authorizer, client quotas, a
   transaction, a tiered topic read back from its table, a consumer group, refused connections,
   a failed login: every metric family present) and the clean-up jobs' outputs (node-exporter
   textfile, the body pushed to a Pushgateway, ``jobs run --metrics-port``) — except the
   warnings listed in :data:`KEPT_LINT` (Strimzi's names for Kafka's MBeans, kept on purpose);
3. a Prometheus process on loopback scrapes that cluster and a running ``jobs run``, evaluates
   the alert rules (a copy with short ``for:``) and answers EVERY alert expression and EVERY
   Grafana panel query and template variable of ops/grafana/loglake-dashboard.json (variables
   substituted as Grafana would) without error; the key ones return the driven workload's
   series (two brokers, one controller, a stopped group's lag equal to the records produced
   since it stopped, tier lag and table version of the tiered topic, authentications, quota
   throttling, transactions), and after a follower is SIGKILLed the UnderReplicatedPartitions
   and BrokerDown alerts go pending, then firing, and resolve once it is back.
"""

from __future__ import annotations

import gc
import json
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from loglake.catalog.zookeeper import ClusterCatalog
from loglake.cli import main as loglake_main
from loglake.compaction.cli import main as jobs_main
from loglake.dev.harness import DevCluster, wait_until
from tests.prometheus_util import (
    PrometheusServer,
    PromQLError,
    lint_metrics,
    prometheus_binary,
    promtool,
    run_promtool,
)
from tests.test_ops_dashboards import (
    ALERTS,
    DASHBOARD,
    SCRAPE_CONFIG,
    alert_rules,
    dashboard_panels,
)
from tests.tiering_util import produce, wait_local_start, wait_tiered

ALERT_TESTS = ALERTS.with_name("loglake-alerts.test.yml")
needs_promtool = pytest.mark.skipif(
    promtool() is None, reason="no promtool on this machine (install Debian's prometheus "
    "package — ./run test does — or set LOGLAKE_PROMTOOL)")
needs_prometheus = pytest.mark.skipif(
    prometheus_binary() is None or promtool() is None,
    reason="no prometheus/promtool on this machine (install Debian's prometheus package — "
    "./run test does — or set LOGLAKE_PROMETHEUS and LOGLAKE_PROMTOOL)")

KEPT_LINT: dict[str, set[str]] = {
    # Kafka's socket-server-metrics tags (listener, networkProcessor) as Strimzi's rules keep
    # them; Kafka's MBean attribute connection-count ends in "count" (Strimzi:
    # kafka_server_socket_server_metrics_connection_count).
    r"kafka_server_socket_server_metrics_\w+": {
        "label names should be written in 'snake_case' not 'camelCase'",
        'non-histogram and non-summary metrics should not have "_count" suffix'},
    # Kafka's quota sensors are tagged user/client-id; Strimzi's quota rules write clientId.
    r"kafka_server_quota_\w+": {"label names should be written in 'snake_case' not 'camelCase'"},
}
"""promtool warnings kept because the name is Strimzi's for a Kafka MBean (regex of the metric
name -> problems). Everything else promtool reports is a naming bug."""


def unexpected_lint(problems: set[tuple[str, str]]) -> list[tuple[str, str]]:
    return sorted((name, problem) for name, problem in problems
                  if not any(re.fullmatch(pattern, name) and problem in kept
                             for pattern, kept in KEPT_LINT.items()))


# -- the rules and config files ------------------------------------------------------------------


@needs_promtool
def test_promtool_checks_rules_and_config() -> None:
    rules = run_promtool("check", "rules", str(ALERTS))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert re.search(rf"SUCCESS: {len(alert_rules())} rules found", rules.stdout), rules.stdout
    config = run_promtool("check", "config", str(SCRAPE_CONFIG))
    assert config.returncode == 0, config.stdout + config.stderr
    assert "SUCCESS" in config.stdout


@needs_promtool
def test_promtool_alert_unit_tests() -> None:
    """ops/prometheus/loglake-alerts.test.yml: the shipped thresholds and ``for:`` of the key
    alerts (broker down, under-replicated, no controller, consumer lag growing, tier lag)."""
    result = run_promtool("test", "rules", str(ALERT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
def test_lint_reports_naming_problems() -> None:
    """The lint check itself: a counter without ``_total``, a non-base unit and no help text are
    reported; a well-named family is not."""
    text = ("# HELP x_requests A counter.\n# TYPE x_requests counter\nx_requests 1\n"
            "# HELP x_latency_milliseconds Latency.\n# TYPE x_latency_milliseconds gauge\n"
            "x_latency_milliseconds 1\n# TYPE x_undocumented_bytes gauge\nx_undocumented_bytes 1\n"
            "# HELP x_good_bytes Good.\n# TYPE x_good_bytes gauge\nx_good_bytes 1\n")
    names = {name for name, _ in lint_metrics(text)}
    assert names == {"x_requests", "x_latency_milliseconds", "x_undocumented_bytes"}
    camel = "label names should be written in 'snake_case' not 'camelCase'"
    assert unexpected_lint({("kafka_server_quota_throttle_time", camel)}) == []
    assert unexpected_lint({("loglake_x_count", 'non-histogram and non-summary metrics should '
                             'not have "_count" suffix')})


# -- a secured cluster with every metric family -------------------------------------------------

TIERED = "prom-tiered"
REPLICATED = "prom-replicated"
STOPPED_GROUP = "prom-stopped"
QUOTA_CLIENT = "prom-quota-client"
METRICS_OFFSET = 7
"""metrics.listener on the broker port + 700 (``{port:7}``): fixed, so a restarted broker comes
back on the address Prometheus scrapes."""


class _PushReceiver(BaseHTTPRequestHandler):
    """Takes what a job pushes (the Pushgateway's PUT/POST /metrics/job/...) and keeps it."""

    bodies: list[tuple[str, bytes]] = []

    def _take(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.bodies.append((self.path, self.rfile.read(length)))
        self.send_response(202)
        self.end_headers()

    do_PUT = _take
    do_POST = _take

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Workload:
    dev: DevCluster
    metrics_urls: dict[int, str]
    job_texts: dict[str, str]
    jobs_url: str
    stopped_lag: int = 0
    """Records produced to REPLICATED since STOPPED_GROUP committed (its lag)."""
    tmp: Path = field(default_factory=Path)


def _client(dev: DevCluster, **extra: Any) -> dict[str, Any]:
    return {**dev.client_config(), **extra}


def _drive(dev: DevCluster) -> int:
    """Every family: a tiered topic read back from its table, a replicated topic with a
    stopped group, quotas and throttled traffic, a transaction, a failed login, a refused
    connection. Returns the stopped group's lag."""
    dev.create_topic(TIERED, configs={"segment.bytes": "20000", "local.retention.ms": "0",
                                      "retention.ms": "-1"})
    produce(dev.bootstrap_servers, TIERED, 2000, config=dev.client_config())
    wait_tiered(dev.storage_url, TIERED, (0,), at_least=500)
    wait_local_start(dev.zookeeper_connect, TIERED, (0,), above=0)
    dev.create_topic(REPLICATED, replication_factor=2, configs={"min.insync.replicas": "1"})
    produce(dev.bootstrap_servers, REPLICATED, 200, config=dev.client_config())
    consumer = Consumer(_client(dev, **{"group.id": STOPPED_GROUP, "enable.auto.commit": False,
                                        "enable.partition.eof": False}))
    try:
        for topic in (TIERED, REPLICATED):
            consumer.assign([TopicPartition(topic, 0, 0)])
            read = 0
            for _ in range(200):
                read += len([m for m in consumer.consume(500, timeout=0.5) if not m.error()])
                if read >= 200:
                    break
            assert read >= 200, f"{topic}: read {read}"
        consumer.commit(offsets=[TopicPartition(REPLICATED, 0, 200),
                                 TopicPartition(TIERED, 0, 200)], asynchronous=False)
    finally:
        consumer.close()
    produce(dev.bootstrap_servers, REPLICATED, 50, start=200, config=dev.client_config())

    props = str(dev.client_properties)
    assert loglake_main(["quotas", "alter", "--bootstrap-server", dev.bootstrap_servers,
                         "--command-config", props, "--client-id", QUOTA_CLIENT, "--add-config",
                         "producer_byte_rate=1000,request_percentage=500,"
                         "controller_mutation_rate=100"]) == 0
    producer = Producer(_client(dev, **{"transactional.id": f"prom-{uuid.uuid4().hex[:6]}"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TIERED, b"in a transaction")
    producer.commit_transaction(30)
    _quota_traffic(dev)

    _failed_login(dev)
    host, port = dev.bootstrap_servers.split(",")[0].rsplit(":", 1)
    first = socket.create_connection((host, int(port)), timeout=10,
                                     source_address=("127.0.0.2", 0))
    with first, socket.create_connection((host, int(port)), timeout=10,
                                         source_address=("127.0.0.2", 0)) as second:
        assert second.recv(1) == b""  # max.connections.per.ip.overrides=127.0.0.2:1
    return 50 + QUOTA_RECORDS  # since the commit: 50 records, then the quota client's


QUOTA_RECORDS = 15


def _failed_login(dev: DevCluster) -> None:
    """A client with a wrong password: failed authentications on the brokers (the client is
    dropped afterwards, so it stops retrying)."""
    wrong = AdminClient(_client(dev, **{"sasl.password": "not-the-password"}))
    try:
        wrong.list_topics(timeout=3)
    except KafkaException:
        pass
    else:
        raise AssertionError("a wrong password was accepted")
    finally:
        del wrong
        gc.collect()


def _quota_traffic(dev: DevCluster) -> None:
    producer = Producer(_client(dev, **{"client.id": QUOTA_CLIENT, "linger.ms": 0}))
    for i in range(QUOTA_RECORDS):
        producer.produce(REPLICATED, b"%d" % i + b"q" * 1000, partition=0)
    assert producer.flush(60) == 0
    admin = AdminClient(_client(dev, **{"client.id": QUOTA_CLIENT}))
    name = f"prom-mutation-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def _job_outputs(dev: DevCluster, tmp: Path) -> dict[str, str]:
    """What the clean-up jobs write: textfiles (a success of each kind, a failure) and the
    body they push to a Pushgateway."""
    texts = {}
    for command, topic, code in (("retention", TIERED, 0), ("optimize", TIERED, 0),
                                 ("vacuum", TIERED, 0), ("retention", "prom-missing", 1)):
        path = tmp / f"{command}-{topic}.prom"
        assert jobs_main([command, "--zookeeper", dev.zookeeper_connect, "--topic", topic,
                          "--metrics-textfile", str(path)]) == code
        texts[path.name] = path.read_text()
    _PushReceiver.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _PushReceiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert jobs_main(["retention", "--zookeeper", dev.zookeeper_connect, "--topic", TIERED,
                          "--pushgateway", f"http://127.0.0.1:{server.server_address[1]}"]) == 0
    finally:
        server.shutdown()
        server.server_close()
    assert _PushReceiver.bodies, "nothing pushed"
    for pushed_to, body in _PushReceiver.bodies:
        texts[f"pushed {pushed_to}"] = body.decode()
    return texts


def _broker_metrics_urls(dev: DevCluster) -> dict[int, str]:
    catalog = ClusterCatalog(dev.zookeeper_connect, mode="tool")
    catalog.start()
    try:
        def both() -> dict[int, str]:
            urls = catalog.metrics_urls()
            return urls if len(urls) == 2 else {}

        return wait_until(both, 60, "both brokers' metrics URLs in ZooKeeper")
    finally:
        catalog.stop()


@pytest.fixture(scope="module")
def jobs_process(secured: DevCluster, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``loglake jobs run --every 5s --metrics-port 0`` over the tiered topic (its URL)."""
    log = tmp_path_factory.mktemp("jobs") / "jobs.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "loglake", "jobs", "run", "--zookeeper", secured.zookeeper_connect,
         "--topic", TIERED, "--every", "5s", "--metrics-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        url = ""
        deadline = time.monotonic() + 120
        lines = []
        while not url and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            match = re.search(r"jobs: metrics at (\S+)", line)
            url = match.group(1) if match else ""
        assert url, f"jobs run printed no metrics URL: {''.join(lines)}"
        threading.Thread(target=_drain, args=(process, log), daemon=True).start()
        yield process, url
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _drain(process: subprocess.Popen[str], log: Path) -> None:
    assert process.stdout is not None
    with log.open("w") as out:
        for line in process.stdout:
            out.write(line)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
            ) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("prometheus-real")
    with DevCluster(data / "dev", brokers=2, zookeeper=zookeeper_hosts, security="sasl_ssl",
                    broker_overrides={
                        "metrics.listener": f"http://127.0.0.1:{{port:{METRICS_OFFSET}}}",
                        "max.connections.per.ip.overrides": "127.0.0.2:1",
                        "replica.lag.time.max.ms": "4000"}) as dev:
        yield dev


@pytest.fixture(scope="module")
def workload(secured: DevCluster, jobs_process: tuple[subprocess.Popen[str], str],
             tmp_path_factory: pytest.TempPathFactory) -> Workload:
    tmp = tmp_path_factory.mktemp("prometheus-jobs")
    lag = _drive(secured)
    return Workload(secured, _broker_metrics_urls(secured), _job_outputs(secured, tmp),
                    jobs_process[1], stopped_lag=lag, tmp=tmp)


FAMILIES = ("kafka_server_brokertopicmetrics_messagesin_total", "kafka_network_requestmetrics_",
            "kafka_server_replicamanager_", "kafka_controller_kafkacontroller_", "kafka_log_log_",
            "kafka_consumergroup_lag", "loglake_tier_lag_seconds", "loglake_tier_fetches_total",
            "loglake_tier_table_version", "loglake_zookeeper_", "loglake_event_loop_",
            "process_cpu_seconds_total", "kafka_server_socket_server_metrics_",
            "loglake_connections_rejected_total", "kafka_server_quota_throttle_time",
            "kafka_server_quota_mutation_rate", "loglake_transaction_markers_written_total",
            "kafka_server_transactioncoordinatormetrics_")


@needs_promtool
def test_promtool_check_metrics_brokers(workload: Workload) -> None:
    texts: dict[int, str] = {}

    def all_families() -> bool:
        texts.clear()
        for broker, url in workload.metrics_urls.items():
            response = httpx.get(url, timeout=10)
            assert response.status_code == 200
            texts[broker] = response.text
        joined = "\n".join(texts.values())
        return all(f"\n{family}" in joined for family in FAMILIES)

    wait_until(all_families, 60, lambda: "families missing from the scrapes: " + str(
        [f for f in FAMILIES if f"\n{f}" not in "\n".join(texts.values())]))
    problems = {broker: unexpected_lint(lint_metrics(text)) for broker, text in texts.items()}
    assert not any(problems.values()), f"promtool check metrics: {problems}"


@needs_promtool
def test_promtool_check_metrics_jobs(workload: Workload) -> None:
    served = httpx.get(workload.jobs_url, timeout=10)
    assert served.status_code == 200
    texts = {**workload.job_texts, "jobs run --metrics-port": served.text}
    assert any("loglake_job_runs_total" in text for text in texts.values())
    problems = {name: unexpected_lint(lint_metrics(text)) for name, text in texts.items()}
    assert not any(problems.values()), f"promtool check metrics: {problems}"


# -- a real Prometheus -------------------------------------------------------------------------

FOR_OVERRIDE = "6s"
RATE_INTERVAL = "30s"


def _short_rules(path: Path) -> Path:
    """A copy of the alert rules with every ``for:`` shortened (so alerts fire in a test)."""
    loaded = yaml.safe_load(ALERTS.read_text())
    for group in loaded["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = FOR_OVERRIDE
    path.write_text(yaml.safe_dump(loaded, sort_keys=False))
    return path


def _host_port(url: str) -> str:
    return re.sub(r"^https?://([^/]+).*$", r"\1", url)


@pytest.fixture(scope="module")
def prometheus(workload: Workload, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[PrometheusServer]:
    work = tmp_path_factory.mktemp("prometheus")
    rules = _short_rules(work / "loglake-alerts.yml")
    targets = {"loglake-brokers": [_host_port(u) for u in workload.metrics_urls.values()],
               "loglake-jobs": [_host_port(workload.jobs_url)]}
    with PrometheusServer(work, targets, rule_files=[rules]) as server:
        wait_until(lambda: (lambda t: len(t) == 3 and set(t.values()) == {"up"})(
            server.targets_up()), 60, lambda: f"targets up: {server.targets_up()}")
        yield server


def substitute(expr: str, *, topic: str = ".*", instance: str = ".*") -> str:
    """Grafana's variables in a panel query: ``$topic``/``$instance`` as the regex Grafana
    sends for the chosen values (``.*`` = the variable's allValue), ``$__rate_interval``
    as Grafana computes it for a 1 s scrape (at least 4 scrape intervals)."""
    values = {"topic": topic, "instance": instance, "__rate_interval": RATE_INTERVAL,
              "__interval": "5s", "__range": "5m"}

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        assert name in values, f"unknown dashboard variable {match.group(0)} in {expr}"
        return values[name]

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]", one, expr)


def test_substitute() -> None:
    assert substitute('rate(m{topic=~"$topic",instance=~"${instance}"}[$__rate_interval])',
                      topic="t1") == f'rate(m{{topic=~"t1",instance=~".*"}}[{RATE_INTERVAL}])'


def _panel_targets() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(f"{panel['title']} [{target['refId']}]", target["expr"])
            for panel in dashboard_panels(dashboard["panels"])
            for target in panel.get("targets", []) if target.get("expr")]


@needs_prometheus
def test_prometheus_evaluates_every_rule_and_panel(prometheus: PrometheusServer,
                                                   workload: Workload) -> None:
    dev = workload.dev
    # traffic while Prometheus scrapes: rates become non-zero, the stopped group falls behind
    produce(dev.bootstrap_servers, REPLICATED, 300, start=1000, config=dev.client_config())
    _quota_traffic(dev)
    lag = workload.stopped_lag + 300 + QUOTA_RECORDS

    def stopped_lag() -> float | None:
        found = prometheus.query(f'sum(kafka_consumergroup_lag{{consumergroup="{STOPPED_GROUP}",'
                                 f'topic="{REPLICATED}"}})')
        return float(found[0]["value"][1]) if found else None

    wait_until(lambda: stopped_lag() == lag, 60,
               lambda: f"lag of {STOPPED_GROUP} in Prometheus: {stopped_lag()} (want {lag})")
    time.sleep(2)  # a couple of scrapes after the traffic, so rate() windows hold it

    # template variables: label_values(metric, label) through the label values API
    dashboard = json.loads(DASHBOARD.read_text())
    variables: dict[str, list[str]] = {}
    for variable in dashboard["templating"]["list"]:
        if variable.get("type") != "query":
            continue
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else \
            variable["query"]
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
        assert match, f"variable {variable['name']}: {query}"
        variables[variable["name"]] = prometheus.api(f"label/{match.group(2)}/values",
                                                     **{"match[]": match.group(1)})
    assert len(variables["instance"]) == 2, variables
    assert {TIERED, REPLICATED} <= set(variables["topic"]), variables

    # every panel query, with all values and with one chosen value, instant and over a range
    errors: dict[str, str] = {}
    empty: list[str] = []
    results: dict[str, list[dict[str, Any]]] = {}
    for title, expr in _panel_targets():
        for topic, instance in ((".*", ".*"), (REPLICATED, variables["instance"][0])):
            query = substitute(expr, topic=topic, instance=instance)
            try:
                prometheus.query(query)
                series = prometheus.query_range(query)
            except PromQLError as exc:
                errors[f"{title}: {query}"] = str(exc)
                continue
            if (topic, instance) == (".*", ".*"):
                results[title] = series
                if not series:
                    empty.append(f"{title}: {query}")
    assert not errors, f"dashboard queries Prometheus refused: {errors}"
    assert not empty, f"dashboard panels without any series for the workload: {empty}"

    # every alert expression runs, and Prometheus evaluates every rule without error
    for rule in alert_rules():
        try:
            prometheus.query(str(rule["expr"]))
        except PromQLError as exc:
            errors[rule["alert"]] = str(exc)
    assert not errors, f"alert expressions Prometheus refused: {errors}"
    def evaluated() -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = prometheus.api("rules")["groups"]
        done = all(not r.get("lastEvaluation", "0001").startswith("0001")
                   for group in groups for r in group["rules"])
        return groups if done else []

    groups = wait_until(evaluated, 30, "every rule evaluated once")
    unhealthy = {r["name"]: r.get("lastError") for g in groups for r in g["rules"]
                 if r["health"] != "ok"}
    assert not unhealthy, unhealthy
    assert sum(len(g["rules"]) for g in groups) == len(alert_rules())

    # Prometheus dropped no sample of ours (duplicate series, out of order, out of bounds)
    own = {s.name: s.value for f in text_string_to_metric_families(
        httpx.get(f"{prometheus.url}/metrics", timeout=10).text) for s in f.samples}
    dropped = {name: own.get(name) for name in (
        "prometheus_target_scrapes_sample_duplicate_timestamp_total",
        "prometheus_target_scrapes_sample_out_of_order_total",
        "prometheus_target_scrapes_sample_out_of_bounds_total")}
    assert dropped and all(value == 0 for value in dropped.values()), dropped

    # the key series
    def scalar(expr: str) -> float:
        found = prometheus.query(expr)
        assert len(found) == 1, f"{expr}: {found}"
        return float(found[0]["value"][1])

    assert scalar("count(kafka_server_replicamanager_partitioncount)") == 2
    assert scalar("sum(kafka_controller_kafkacontroller_activecontrollercount)") == 1
    assert scalar("sum(kafka_controller_kafkacontroller_offlinepartitionscount)") == 0
    assert scalar("sum(kafka_server_replicamanager_underreplicatedpartitions)") == 0
    assert scalar(f'max(loglake_tier_table_version{{topic="{TIERED}"}})') >= 1
    assert prometheus.query(f'loglake_tier_lag_seconds{{topic="{TIERED}"}}')
    assert scalar(f'sum(rate(kafka_server_brokertopicmetrics_messagesin_total{{topic='
                  f'"{REPLICATED}"}}[{RATE_INTERVAL}]))') > 0
    assert scalar('sum(kafka_server_socket_server_metrics_successful_authentication_total)') > 0
    assert scalar('sum(kafka_server_socket_server_metrics_failed_authentication_total)') >= 1
    assert scalar('sum(loglake_connections_rejected_total)') >= 1
    assert scalar(f'max(kafka_server_quota_throttle_time{{clientId="{QUOTA_CLIENT}"}})') >= 0
    assert scalar('sum(loglake_transaction_markers_written_total)') >= 1
    assert scalar('sum(loglake_job_runs_total{job="loglake-jobs"})') >= 1
    by_group = {s["metric"].get("consumergroup") for s in results["Lag per group and topic [A]"]}
    assert STOPPED_GROUP in by_group, by_group
    # nothing fires on a healthy cluster (the thresholds are not reached)
    firing = {name for name, alerts in prometheus.alerts().items()
              if any(a["state"] == "firing" for a in alerts)}
    assert not firing & {"LoglakeBrokerDown", "LoglakeUnderReplicatedPartitions",
                         "LoglakeOfflinePartitions", "LoglakeNoActiveController"}, firing


def _leader(dev: DevCluster, topic: str) -> int:
    metadata = AdminClient(dev.client_config()).list_topics(topic, timeout=10)
    return int(metadata.topics[topic].partitions[0].leader)


@needs_prometheus
def test_killed_follower_fires_under_replicated_alert(prometheus: PrometheusServer,
                                                      workload: Workload) -> None:
    dev = workload.dev
    leader = _leader(dev, REPLICATED)
    follower = 3 - leader
    leader_target = _host_port(workload.metrics_urls[leader])
    follower_target = _host_port(workload.metrics_urls[follower])
    dev.kill_broker(follower)
    seen: dict[str, set[str]] = {}

    def states() -> dict[str, set[str]]:
        for name, alerts in prometheus.alerts().items():
            for alert in alerts:
                seen.setdefault(name, set()).add(
                    f"{alert['state']}@{alert['labels'].get('instance')}")
        return seen

    def fired() -> bool:
        states()
        return (f"firing@{leader_target}" in seen.get("LoglakeUnderReplicatedPartitions", set())
                and f"firing@{follower_target}" in seen.get("LoglakeBrokerDown", set()))

    wait_until(fired, 90, lambda: f"alerts seen: {seen}", interval=0.5)
    assert f"pending@{leader_target}" in seen["LoglakeUnderReplicatedPartitions"], seen
    assert f"pending@{follower_target}" in seen["LoglakeBrokerDown"], seen
    assert prometheus.query(f'kafka_server_replicamanager_underreplicatedpartitions{{instance='
                            f'"{leader_target}"}} == 1')

    dev.start_broker(follower)

    def resolved() -> bool:
        active = prometheus.alerts()
        return not active.get("LoglakeUnderReplicatedPartitions") and not active.get(
            "LoglakeBrokerDown")

    wait_until(resolved, 90, lambda: f"alerts still active: {prometheus.alerts()}", interval=1)
