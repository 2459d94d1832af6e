"""The ready-made Grafana dashboard and Prometheus rules (ops/) name only metrics that loglake
exports: every metric name in the dashboard's PromQL (panels and template variables) and in the
alert rules is found in a scrape of a real broker (a one-broker cluster with metrics on, a
tiered topic, a consumer group, fetches from the table) or in the metrics of real clean-up job
runs. Also the files' structure: valid JSON/YAML, the alerts the issue asks for, Grafana panel
basics. Metric names are parsed out of PromQL by :func:`metric_names` (strings, label matchers,
ranges, grouping clauses, functions and keywords removed), unit-tested below."""

from __future__ import annotations

import json
import re
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from loglake.catalog.zookeeper import ClusterCatalog
from loglake.cli import main as loglake_main
from loglake.compaction.cli import main as jobs_main
from loglake.dev.harness import DevCluster, wait_until
from tests.admin_util import create_topic
from tests.tiering_util import produce, wait_local_start, wait_tiered

OPS = Path(__file__).resolve().parent.parent / "ops"
DASHBOARD = OPS / "grafana" / "loglake-dashboard.json"
ALERTS = OPS / "prometheus" / "loglake-alerts.yml"
SCRAPE_CONFIG = OPS / "prometheus" / "prometheus.yml"
PROMETHEUS_SERIES = {"up"}
"""Series Prometheus writes itself for every target (not exported by anything of ours)."""

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
             "unless", "offset", "bool", "inf", "nan", "atan2", "start", "end"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+|\[\[\w+\]\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")
_NAME_MATCHER = re.compile(r'__name__\s*=\s*"([^"]+)"')


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (Grafana variables allowed)."""
    names = set(_NAME_MATCHER.findall(expr))
    text = _GRAFANA_VARIABLE.sub("", expr)
    text = _STRING.sub('""', text)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+)?(?:ms|s|m|h|d|w|y)?\b", " ", text)
    for name in _IDENTIFIER.findall(text):
        if name.lower() not in _KEYWORDS:
            names.add(name)
    return names


def label_values_metric(query: str) -> set[str]:
    """The metric of a Grafana ``label_values(metric, label)`` / ``query_result(expr)``."""
    match = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query, re.S)
    if match:
        return metric_names(match.group(1))
    match = re.fullmatch(r"\s*query_result\((.*)\)\s*", query, re.S)
    return metric_names(match.group(1)) if match else set()


def test_metric_names_parser() -> None:
    assert metric_names('sum by (topic) (rate(kafka_server_brokertopicmetrics_messagesin_total'
                        '{topic!="",topic=~"$topic"}[$__rate_interval]))') == {
        "kafka_server_brokertopicmetrics_messagesin_total"}
    assert metric_names('histogram_quantile(0.99, sum by (le, request) (rate('
                        'kafka_network_requestmetrics_totaltimems_bucket{request="Produce"}'
                        '[5m])))') == {"kafka_network_requestmetrics_totaltimems_bucket"}
    assert metric_names("sum by (consumergroup, topic) (delta(kafka_consumergroup_lag[15m]))"
                        " > 0 and sum by (consumergroup, topic) (kafka_consumergroup_lag) "
                        "> 1e3") == {"kafka_consumergroup_lag"}
    assert metric_names("time() - max by (cleanup_job) "
                        "(loglake_job_last_success_timestamp_seconds) > 86400") == {
        "loglake_job_last_success_timestamp_seconds"}
    assert metric_names("a_metric / on (instance) group_left(version) b_info offset 5m") == {
        "a_metric", "b_info"}
    assert metric_names('{__name__="x_total", job="y"} + up == bool 1') == {"x_total", "up"}
    assert metric_names("rate(m[5m:30s]) * -1.5 + vector(1)") == {"m"}
    assert label_values_metric("label_values(kafka_log_log_size, topic)") == {
        "kafka_log_log_size"}


def dashboard_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from dashboard_panels(panel.get("panels", []))


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard_panels(dashboard["panels"])
             for target in panel.get("targets", []) if target.get("expr")]
    return exprs


def dashboard_names() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    names = {name for expr in dashboard_expressions() for name in metric_names(expr)}
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            names |= label_values_metric(query["query"] if isinstance(query, dict) else query)
    return names


def alert_rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(ALERTS.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def alert_names() -> set[str]:
    return {name for rule in alert_rules() for name in metric_names(str(rule["expr"]))}


def test_dashboard_structure() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 30
    panels = list(dashboard_panels(dashboard["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
        if panel["type"] != "row":
            assert panel["targets"], f"panel {panel['title']!r} has no query"
            refs = [t["refId"] for t in panel["targets"]]
            assert len(refs) == len(set(refs)), panel["title"]
    text = " ".join(dashboard_expressions())
    for needed in ("messagesin", "totaltimems_bucket", "underreplicatedpartitions",
                   "isrshrinks", "kafka_consumergroup_lag", "loglake_tier_lag_seconds",
                   "loglake_tier_commits_total", "loglake_job_runs_total",
                   "socket_server_metrics_connection_count", "kafka_server_quota_throttle_time",
                   "loglake_transaction_markers_written_total"):
        assert needed in text, f"the dashboard shows nothing of {needed}"


def test_alert_rules_structure() -> None:
    rules = alert_rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        assert rule["expr"] and rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"]
        if "for" in rule:
            assert re.fullmatch(r"\d+[smhd]", rule["for"]), rule["alert"]
    by_metric = {name: [r["alert"] for r in rules if name in metric_names(str(r["expr"]))]
                 for name in ("kafka_server_replicamanager_underreplicatedpartitions",
                              "kafka_controller_kafkacontroller_offlinepartitionscount",
                              "kafka_consumergroup_lag", "loglake_tier_lag_seconds",
                              "kafka_controller_kafkacontroller_activecontrollercount",
                              "loglake_job_runs_total",
                              "kafka_server_socket_server_metrics_failed_authentication_total",
                              "loglake_connections_rejected_total",
                              "kafka_server_quota_throttle_time",
                              "loglake_transaction_coordinator_timed_out_aborts_total")}
    assert all(by_metric.values()), f"alerts missing for {by_metric}"
    config = yaml.safe_load(SCRAPE_CONFIG.read_text())
    for rule_file in config["rule_files"]:
        assert (SCRAPE_CONFIG.parent / rule_file).is_file()
    assert {job["job_name"] for job in config["scrape_configs"]} >= {"loglake-brokers",
                                                                     "loglake-jobs"}


def scrape_names(text: str) -> set[str]:
    return set(scrape_labels(text))


def scrape_labels(text: str) -> dict[str, set[str]]:
    """Metric (sample) name -> every label name its samples carry."""
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, set()).update(sample.labels)
    return found


TARGET_LABELS = {"instance", "job"}
"""Labels Prometheus attaches to every scraped series."""


def grouping_labels(expr: str) -> set[str]:
    """Label names of the ``by (...)`` / ``without (...)`` clauses of an expression."""
    return {label.strip() for clause in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr)
            for label in clause.split(",") if label.strip()}


def test_grouping_labels_parser() -> None:
    assert grouping_labels("histogram_quantile(0.9, sum by (le, request) (rate(x[5m]))) / "
                           "sum without(instance) (y)") == {"le", "request", "instance"}


@pytest.fixture(scope="module")
def metrics_dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
                ) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("ops-dashboards")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides={"metrics.listener": "http://127.0.0.1:0",
                                      # one connection from 127.0.0.2 (the tests' clients
                                      # use 127.0.0.1): a second one is refused and counted
                                      "max.connections.per.ip.overrides": "127.0.0.2:1"}) as dev:
        yield dev


def _workload(dev: DevCluster, topic: str) -> None:
    """Tiered segments, local copies deleted, a group reading from the table and
    committing (so tier fetches, table stats and consumer lag are exported)."""
    create_topic(dev.bootstrap_servers, topic, config={
        "segment.bytes": "20000", "local.retention.ms": "0", "retention.ms": "-1"})
    produce(dev.bootstrap_servers, topic, 2000)
    wait_tiered(dev.storage_url, topic, (0,), at_least=500)
    wait_local_start(dev.zookeeper_connect, topic, (0,), above=0)
    consumer = Consumer({"bootstrap.servers": dev.bootstrap_servers, "group.id": f"{topic}-g",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        read = 0
        for _ in range(200):
            read += len([m for m in consumer.consume(500, timeout=0.5) if not m.error()])
            if read >= 100:
                break
        assert read >= 100, "nothing read back from the table"
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


QUOTA_CLIENT = "ops-quota-client"


def _set_quotas(dev: DevCluster) -> None:
    """Client quotas of every kind for one client id (``loglake quotas alter``), so the quota
    series exist once that client produces and creates topics."""
    assert loglake_main(["quotas", "alter", "--bootstrap-server", dev.bootstrap_servers,
                         "--client-id", QUOTA_CLIENT, "--add-config",
                         "producer_byte_rate=1000,request_percentage=500,"
                         "controller_mutation_rate=100"]) == 0


def _quota_traffic(dev: DevCluster) -> None:
    """The quota'd client produces over its byte rate (so it is throttled) and creates a topic
    (records into each quota's sensor)."""
    producer = Producer({"bootstrap.servers": dev.bootstrap_servers, "client.id": QUOTA_CLIENT,
                         "linger.ms": 0})
    for i in range(15):
        producer.produce("ops-dashboards", b"%d" % i + b"q" * 1000)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": dev.bootstrap_servers, "client.id": QUOTA_CLIENT})
    name = f"ops-mutation-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def _refused_connection(dev: DevCluster) -> None:
    """Two connections from 127.0.0.2 to a broker allowing one from there: the second is
    closed at once (``max.connections.per.ip.overrides``)."""
    host, port = dev.bootstrap_servers.split(",")[0].rsplit(":", 1)
    first = socket.create_connection((host, int(port)), timeout=10,
                                     source_address=("127.0.0.2", 0))
    try:
        second = socket.create_connection((host, int(port)), timeout=10,
                                          source_address=("127.0.0.2", 0))
        with second:
            assert second.recv(1) == b""  # closed by the broker
    finally:
        first.close()


def _transaction(dev: DevCluster) -> None:
    producer = Producer({"bootstrap.servers": dev.bootstrap_servers,
                         "transactional.id": f"ops-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("ops-dashboards", b"in a transaction")
    producer.commit_transaction(30)


def _metrics_url(dev: DevCluster) -> str:
    catalog = ClusterCatalog(dev.zookeeper_connect, mode="tool")
    catalog.start()
    try:
        urls: dict[int, str] = wait_until(catalog.metrics_urls, 30,
                                          "the broker's metrics URL in ZooKeeper")
        return urls[1]
    finally:
        catalog.stop()


def test_every_metric_named_is_exported(metrics_dev: DevCluster, tmp_path: Path) -> None:
    wanted = (dashboard_names() | alert_names()) - PROMETHEUS_SERIES
    assert len(wanted) > 30, sorted(wanted)
    topic = "ops-dashboards"
    _workload(metrics_dev, topic)
    _set_quotas(metrics_dev)
    _transaction(metrics_dev)
    _quota_traffic(metrics_dev)
    _refused_connection(metrics_dev)

    textfiles = []
    for command in ("retention", "optimize", "vacuum"):
        path = tmp_path / f"{command}.prom"
        assert jobs_main([command, "--zookeeper", metrics_dev.zookeeper_connect, "--topic",
                          topic, "--metrics-textfile", str(path)]) == 0
        textfiles.append(path)
    failing = tmp_path / "failing.prom"
    assert jobs_main(["retention", "--zookeeper", metrics_dev.zookeeper_connect, "--topic",
                      f"{topic}-missing", "--metrics-textfile", str(failing)]) == 1
    scheduled = tmp_path / "jobs-run.prom"
    assert jobs_main(["jobs", "run", "--zookeeper", metrics_dev.zookeeper_connect, "--topic",
                      topic, "--every", "1s", "--max-runs", "2", "--metrics-textfile",
                      str(scheduled)]) == 0
    job_names: set[str] = set()
    for path in [*textfiles, failing, scheduled]:
        job_names |= scrape_names(path.read_text())

    url = _metrics_url(metrics_dev)
    last: dict[str, set[str]] = {}

    def all_exported() -> bool:
        if any(name.startswith("kafka_server_quota_") for name in last.get("missing", ())):
            _quota_traffic(metrics_dev)  # until the broker applied the quotas
        response = httpx.get(url, timeout=10)
        assert response.status_code == 200
        names = scrape_names(response.text) | job_names
        last["missing"] = wanted - names
        return not last["missing"]

    wait_until(all_exported, 60, lambda: "named by the dashboard or alerts but not exported: "
               f"{sorted(last.get('missing', ()))}")

    # every label an expression groups by is carried by one of the metrics it names
    labels = scrape_labels(httpx.get(url, timeout=10).text)
    for path in [*textfiles, failing, scheduled]:
        for name, names in scrape_labels(path.read_text()).items():
            labels.setdefault(name, set()).update(names)
    exprs = dashboard_expressions() + [str(rule["expr"]) for rule in alert_rules()]
    unknown = {}
    for expr in exprs:
        carried = TARGET_LABELS.union(*(labels.get(n, set()) for n in metric_names(expr)))
        if grouping_labels(expr) - carried:
            unknown[expr] = sorted(grouping_labels(expr) - carried)
    assert not unknown, f"grouped by labels no named metric carries: {unknown}"
