"""The console's operations pages (groups, tiering, jobs, security) over HTTP against a real
one-broker cluster with metrics on: Starlette's TestClient drives ``create_app`` (its lifespan
runs the lag sampler, with a short interval here).

What is checked: a group's lag per partition and over time (the sampler's chart data) equal
the records produced since it committed; resetting an EMPTY group's offsets previews without
changing anything and then applies, and is refused (409) while a member is connected; the
tiering page shows the table the broker tiered into (version and tiered end from the broker's
metrics) and charts the topic's lag in seconds; the jobs page shows a run as running while its
process holds the ZooKeeper marker and its result after; ACLs added and removed through the
forms reach ZooKeeper; SCRAM users and quotas are listed; bad input is a 4xx with a message.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from loglake.catalog.zookeeper import ClusterCatalog
from loglake.client import Admin, Consumer, Producer
from loglake.console.app import create_app
from loglake.dev.harness import DevCluster, wait_until
from tests.clients import poll_until_assigned, read_records

HX = {"HX-Request": "true"}


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("console-ops")
    with DevCluster(data / "dev", zookeeper=zookeeper_hosts, brokers=1,
                    broker_overrides={"group.initial.rebalance.delay.ms": "0",
                                      "metrics.listener": "http://127.0.0.1:0"}) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def client(dev: DevCluster) -> Iterator[TestClient]:
    app = create_app(dev.zookeeper_connect, bootstrap=dev.bootstrap_servers)
    app.state.console.extras["sampler.interval_s"] = 0.3
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def catalog(dev: DevCluster) -> Iterator[ClusterCatalog]:
    cat = ClusterCatalog(dev.zookeeper_connect, timeout=10.0, mode="tool")
    cat.start()
    yield cat
    cat.stop()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _produce(bootstrap: str, topic: str, count: int, *, size: int = 10) -> None:
    with Producer(bootstrap) as producer:
        for i in range(count):
            producer.send(topic, (b"%08d" % i).ljust(size, b"x"), partition=0)


def _chart_last(client: TestClient, url: str, label: str) -> float | None:
    data = client.get(url).json()
    for dataset in data["datasets"]:
        if dataset["label"] == label:
            values = [v for v in dataset["data"] if v is not None]
            return values[-1] if values else None
    return None


def test_group_lag_chart_and_reset(dev: DevCluster, client: TestClient) -> None:
    bootstrap = dev.bootstrap_servers
    topic, group = _name("lag"), _name("app")
    dev.create_topic(topic, partitions=1)
    _produce(bootstrap, topic, 10)
    with Consumer(bootstrap, group_id=group) as consumer:
        consumer.subscribe([topic])
        read_records(consumer, 10, timeout=30)
        consumer.commit()
    _produce(bootstrap, topic, 5)

    listing = client.get("/groups")
    assert listing.status_code == 200 and group in listing.text
    page = client.get(f"/groups/{group}")
    assert page.status_code == 200
    assert f'data-partition="{topic}:0"' in page.text
    live = client.get(f"/fragments/group/{group}", headers=HX)
    assert live.status_code == 200 and 'id="group-lag">5<' in live.text
    wait_until(lambda: _chart_last(client, f"/charts/group/{group}", f"{topic}[0]") == 5.0,
               20, "the sampled lag of the group reaches 5")

    # dry run: the new offsets, nothing changed
    preview = client.post(f"/actions/reset-offsets/{group}", headers=HX,
                          data={"topic": topic, "to": "earliest", "action": "preview"})
    assert preview.status_code == 200, preview.text
    assert "Dry run" in preview.text and '<td class="num new">0</td>' in preview.text
    with Admin(bootstrap) as admin:
        assert admin.group_offsets(group) == {(topic, 0): 10}
        # clamped into [log start, log end]
        clamped = client.post(f"/actions/reset-offsets/{group}", headers=HX,
                              data={"topic": topic, "to": "offset", "offset": "999999",
                                    "action": "apply"})
        assert clamped.status_code == 200, clamped.text
        assert admin.group_offsets(group) == {(topic, 0): 15}
        applied = client.post(f"/actions/reset-offsets/{group}", headers=HX,
                              data={"topic": topic, "to": "earliest", "action": "apply"})
        assert applied.status_code == 200 and "reset on 1 partition" in applied.text
        assert admin.group_offsets(group) == {(topic, 0): 0}
    wait_until(lambda: _chart_last(client, f"/charts/group/{group}", f"{topic}[0]") == 15.0,
               20, "the sampled lag after the reset")

    # a group with a member is refused, the offsets stay
    with Consumer(bootstrap, group_id=group) as member:
        member.subscribe([topic])
        poll_until_assigned(member, 1, timeout=30)
        refused = client.post(f"/actions/reset-offsets/{group}", headers=HX,
                              data={"topic": topic, "to": "latest", "action": "apply"})
        assert refused.status_code == 409, refused.text
        assert "active member" in refused.text and "Traceback" not in refused.text
        with Admin(bootstrap) as admin:
            assert admin.group_offsets(group)[(topic, 0)] == 0


@pytest.mark.parametrize("form, status, words", [
    ({"topic": "", "to": "earliest"}, 400, "name the topic"),
    ({"topic": "t", "to": "sideways"}, 400, "reset to one of"),
    ({"topic": "t", "to": "offset", "offset": "-5"}, 400, "at least 0"),
    ({"topic": "t", "to": "offset", "offset": "12abc"}, 400, "must be an integer"),
    ({"topic": "t", "to": "datetime", "datetime": "yesterday"}, 400, "expected a time"),
    ({"topic": "t", "to": "earliest", "partitions": "0,x"}, 400, "must be an integer"),
    ({"topic": "t", "to": "earliest", "action": "explode"}, 400, "preview or apply"),
])
def test_reset_form_refuses_bad_values(client: TestClient, form: dict[str, str], status: int,
                                       words: str) -> None:
    answer = client.post("/actions/reset-offsets/some-group", headers=HX, data=form)
    assert answer.status_code == status, answer.text
    assert words in answer.text and "Traceback" not in answer.text


def test_unknown_group_and_topic_are_404(dev: DevCluster, client: TestClient) -> None:
    missing = client.get(f"/groups/{_name('nobody')}")
    assert missing.status_code == 404 and "does not exist" in missing.text
    topic, group = _name("reset"), _name("empty")
    dev.create_topic(topic, partitions=1)
    with Admin(dev.bootstrap_servers) as admin:
        admin.alter_group_offsets(group, {(topic, 0): 0})
    unknown = client.post(f"/actions/reset-offsets/{group}", headers=HX,
                          data={"topic": _name("no-topic"), "to": "earliest"})
    assert unknown.status_code == 404, unknown.text
    no_partition = client.post(f"/actions/reset-offsets/{group}", headers=HX,
                               data={"topic": topic, "to": "earliest", "partitions": "7"})
    assert no_partition.status_code == 404 and "no partition 7" in no_partition.text
    huge = client.get("/groups/" + "g" * 5000)
    assert huge.status_code == 400 and "longer than" in huge.text


def _tier_cells(client: TestClient, topic: str) -> list[str]:
    """The text of partition 0's cells in the tiering page's partition table."""
    text = client.get("/fragments/tiering", headers=HX).text
    start = text.find(f'data-partition="{topic}:0"')
    if start < 0:
        return []
    row = text[start:text.find("</tr>", start)]
    return [re.sub(r"<[^>]*>", "", cell).strip() for cell in row.split("</td>")[:-1]]


def test_tiering_page_shows_the_table_and_charts_the_lag(dev: DevCluster,
                                                         client: TestClient) -> None:
    topic = _name("tiered")
    dev.create_topic(topic, partitions=1, configs={"segment.bytes": "40000"})
    for _ in range(8):  # separate batches: the log rolls past segment.bytes between them
        _produce(dev.bootstrap_servers, topic, 60, size=200)
    page = client.get("/tiering")
    assert page.status_code == 200 and "Lag in seconds over time" in page.text

    def tiered() -> bool:
        cells = _tier_cells(client, topic)  # ..., tiered end (4), ..., source (10)
        return len(cells) > 10 and cells[10] == "metrics" and cells[4] not in ("-", "0")
    wait_until(tiered, 60, lambda: f"tiering of {topic}: {_tier_cells(client, topic)}")
    def topic_cells() -> list[str]:
        text = client.get("/fragments/tiering", headers=HX).text
        start = text.find(f'<tr data-topic="{topic}">')
        row = text[start:text.find("</tr>", start)] if start >= 0 else ""
        return [re.sub(r"<[^>]*>", "", cell).strip() for cell in row.split("</td>")[:-1]]

    # table version (3) and files (4) from the broker's metrics; status (8): not failing
    wait_until(lambda: (lambda c: len(c) == 9 and c[3] not in ("-", "0") and c[4] != "-"
                        and c[8] == "tiering")(topic_cells()), 30,
               lambda: f"table statistics of {topic}: {topic_cells()}")
    wait_until(lambda: _chart_last(client, "/charts/tiering", topic) is not None, 20,
               "the tier lag of the topic is sampled")


def test_jobs_page_shows_running_then_finished_runs(catalog: ClusterCatalog,
                                                    client: TestClient) -> None:
    store = catalog.job_runs()
    empty = client.get("/jobs")
    assert empty.status_code == 200
    run_id = store.record_start("compact", ["orders"])
    store.set_next_due("compact", 4_102_444_800_000)  # 2100-01-01
    live = client.get("/fragments/jobs", headers=HX).text
    assert f'data-run="{run_id}" data-outcome="running"' in live
    assert "so far" in live and "2100-01-01" in live
    store.record_end(run_id, "success", {"rows_rewritten": 123, "bytes_reclaimed": 4096,
                                         "files_added": 1, "files_removed": 3})
    live = client.get("/fragments/jobs?job=compact", headers=HX).text
    assert f'data-run="{run_id}" data-outcome="success"' in live
    assert "123" in live and "4.0 KiB" in live
    bad = client.get("/jobs?job=../etc")
    assert bad.status_code == 400 and "not a job name" in bad.text


def test_acls_add_remove_and_users_quotas(catalog: ClusterCatalog, client: TestClient) -> None:
    topic = _name("secured")
    form: dict[str, Any] = {"resource_type": "Topic", "name": topic, "pattern_type": "LITERAL",
                            "principal": "User:alice", "host": "", "operation": "Read",
                            "permission": "Allow"}
    added = client.post("/actions/acls/add", headers=HX, data=form)
    assert added.status_code == 200 and "Added" in added.text
    stored = [(res.name, entry.principal, entry.operation)
              for res, entry in catalog.acls().bindings()]
    assert (topic, "User:alice", "Read") in stored
    assert f'data-acl="Topic:{topic}:User:alice:Read:Allow"' in client.get("/security").text
    removed = client.post("/actions/acls/remove", headers=HX, data={**form, "host": "*"})
    assert removed.status_code == 200 and "Removed" in removed.text
    assert all(res.name != topic for res, _ in catalog.acls().bindings())

    for bad, words in (({"operation": "Dance"}, "unknown ACL operation"),
                       ({"principal": "alice"}, "a principal looks like User:"),
                       ({"resource_type": "Planet"}, "resource type is one of"),
                       ({"resource_type": "Cluster", "name": "mine"}, "kafka-cluster"),
                       ({"name": "a/b"}, "invalid ACL resource name")):
        answer = client.post("/actions/acls/add", headers=HX, data={**form, **bad})
        assert answer.status_code == 400, (bad, answer.text)
        assert words in answer.text and "Traceback" not in answer.text

    user = _name("bob")
    configs = catalog.entity_configs()
    configs.alter(f"users/{user}", {
        "SCRAM-SHA-256": "salt=c2FsdA==,stored_key=a2V5,server_key=a2V5,iterations=8192",
        "producer_byte_rate": "1048576"})
    live = client.get("/fragments/security", headers=HX).text
    assert f'data-user="{user}"' in live and "SCRAM-SHA-256 (8192)" in live
    assert "producer_byte_rate=1048576" in live and "stored_key" not in live
    # KIP-612 IP entities and KIP-599 mutation quotas are listed too
    configs.alter("ips/127.0.0.77", {"connection_creation_rate": "15"})
    configs.alter(f"clients/{user}-admin", {"controller_mutation_rate": "2.5"})
    live = client.get("/fragments/security", headers=HX).text
    assert "<td class=\"mono\">127.0.0.77</td>" in live
    assert "connection_creation_rate=15" in live and "controller_mutation_rate=2.5" in live
    configs.alter("ips/127.0.0.77", {"connection_creation_rate": None})


def test_static_chart_script_is_served(client: TestClient) -> None:
    script = client.get("/static/lag_chart.js")
    assert script.status_code == 200 and "data-lag-chart" in script.text
