"""The console's login (``loglake console --basic-auth`` over HTTPS) against a secured dev
cluster (two real broker processes on SASL_SSL with the ACL authorizer, the admin a super
user): a real console process, real HTTP. Without credentials or with a wrong password: 401;
alice (a SCRAM user with ACLs on the ``alice-`` prefix) sees only her topics, her delete of
another topic is refused with TOPIC_AUTHORIZATION_FAILED (403) while the admin's succeeds;
ACL and quota changes go through the brokers' APIs as the user (alice: 403
CLUSTER_AUTHORIZATION_FAILED; the admin: applied); the quota form sets and removes a quota.

What the console gathers as its own account is filtered for alice as her ACLs would: the groups
list and a group's page (her ListGroups/DescribeGroups/OffsetFetch; another topic in her
group's assignment left out), the lag charts (403 GROUP_AUTHORIZATION_FAILED for a group she
may not describe, no line of a topic she may not describe), the overview's counts, the jobs'
runs and the tiering chart.

Also the groups page after a broker is SIGKILLed (plain cluster, no login): the groups of the
brokers that answer are listed, with a line saying a broker did not answer, instead of a
502 for the whole page.
"""

from __future__ import annotations

import dataclasses
import json
import re
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kazoo.client import KazooClient

from loglake.broker.security.scram_credentials import store_user_credential
from loglake.catalog.acls import AclStore
from loglake.catalog.entity_configs import EntityConfigStore
from loglake.catalog.job_runs import JobRun, JobRunStore
from loglake.catalog.schemas import SchemaStore
from loglake.client import Admin, Consumer, GroupDescription, GroupMember, SecurityConfig
from loglake.client.security import read_properties
from loglake.console.admin_requests import describe_quotas
from loglake.console.groups import hide_topics, visible_lag_key
from loglake.console.jobs import visible_runs
from loglake.console.schemas import subject_topic
from loglake.dev import secure
from loglake.dev.harness import DevCluster, wait_until
from tests.browser_util import ConsoleProcess

pytestmark = pytest.mark.timeout(300)

ALICE, ALICE_PASSWORD = "alice", "alice-secret"


class Console:
    """A console process plus HTTP clients logged in as the admin and as alice."""

    def __init__(self, dev: DevCluster, process: ConsoleProcess, ca: str) -> None:
        props = read_properties(str(dev.client_properties))
        self.dev = dev
        self.url = process.url
        self.ca = ssl.create_default_context(cafile=ca)
        self.admin_login = (props["sasl.username"], props["sasl.password"])
        self.security = SecurityConfig.load(str(dev.client_properties))

    def client(self, auth: tuple[str, str] | None) -> httpx.Client:
        return httpx.Client(base_url=self.url, auth=auth, verify=self.ca, timeout=30.0)

    def admin(self) -> httpx.Client:
        return self.client(self.admin_login)

    def alice(self) -> httpx.Client:
        return self.client((ALICE, ALICE_PASSWORD))


def _zk(dev: DevCluster) -> KazooClient:
    zk = KazooClient(hosts=dev.zookeeper_connect, timeout=10)
    zk.start(timeout=10)
    return zk


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
            ) -> Iterator[Console]:
    data = tmp_path_factory.mktemp("console-auth")
    with DevCluster(data / "dev", brokers=2, zookeeper=zookeeper_hosts,
                    security="sasl_ssl") as dev:
        zk = _zk(dev)
        try:
            store_user_credential(EntityConfigStore(zk), ALICE, "SCRAM-SHA-256",
                                  ALICE_PASSWORD)
            acls = AclStore(zk)
            for operation in ("Describe", "Read", "Write", "Create", "Delete", "Alter",
                              "DescribeConfigs", "AlterConfigs"):
                acls.add("Topic", "alice-", principal=f"User:{ALICE}", operation=operation,
                         pattern_type="PREFIXED")
        finally:
            zk.stop()
            zk.close()
        tls = secure.prepare(dev.data_dir)
        process = ConsoleProcess(
            dev.zookeeper_connect, data / "console",
            extra_args=("--basic-auth", "--command-config", str(dev.client_properties),
                        "--certfile", str(tls.certificates.broker)),
            verify=ssl.create_default_context(cafile=str(tls.ca)))
        with process:
            assert process.url.startswith("https://")
            yield Console(dev, process, str(tls.ca))


def _create(console: Console, name: str) -> None:
    with console.admin() as http:
        got = http.post("/topics", data={"name": name, "partitions": "1",
                                         "replication_factor": "2"},
                        headers={"HX-Request": "true"})
    assert got.status_code == 200, got.text


def test_login_is_required(console: Console) -> None:
    with console.client(None) as http:
        assert http.get("/healthz").text == "ok"  # the liveness probe stays open
        for path in ("/", "/topics", "/security", "/fragments/topics", "/static/app.css"):
            got = http.get(path)
            assert got.status_code == 401, path
            assert got.headers["www-authenticate"].startswith('Basic realm="loglake console"')
        got = http.get("/topics", headers={"Authorization": "Basic not-base64!"})
        assert got.status_code == 401
    with console.client((ALICE, "wrong-password")) as http:
        assert http.get("/topics").status_code == 401
    with console.client(("nobody", ALICE_PASSWORD)) as http:
        assert http.get("/topics").status_code == 401
    with console.alice() as http:
        assert http.get("/topics").status_code == 200
    with httpx.Client(base_url=console.url, timeout=10.0) as untrusted, \
            pytest.raises(httpx.ConnectError):  # HTTPS with the dev CA, not a public one
        untrusted.get("/healthz")


def test_alice_sees_only_her_topics(console: Console) -> None:
    mine, other = f"alice-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
    _create(console, mine)
    _create(console, other)
    with console.admin() as http:
        page = http.get("/fragments/topics").text
        assert mine in page and other in page
    with console.alice() as http:
        for path in ("/topics", "/fragments/topics", "/tiering"):
            got = http.get(path)
            assert got.status_code == 200, (path, got.text)
            assert mine in got.text and other not in got.text, path
        assert http.get(f"/topics/{mine}").status_code == 200
        hidden = http.get(f"/topics/{other}")
        assert hidden.status_code == 403
        assert "TOPIC_AUTHORIZATION_FAILED" in hidden.text
        assert "TOPIC_AUTHORIZATION_FAILED" in http.get(f"/fragments/topics/{other}/messages").text


def test_delete_of_another_topic_is_refused_the_admin_may(console: Console) -> None:
    other = f"other-{uuid.uuid4().hex[:8]}"
    _create(console, other)
    with console.alice() as http:
        got = http.post(f"/topics/{other}/delete", data={"confirm": other},
                        headers={"HX-Request": "true"})
        assert got.status_code == 403, got.text
        assert "TOPIC_AUTHORIZATION_FAILED" in got.text
    with Admin(console.dev.bootstrap_servers, security=console.security, timeout=20) as admin:
        assert other in admin.list_topics()
    with console.admin() as http:
        got = http.post(f"/topics/{other}/delete", data={"confirm": other},
                        headers={"HX-Request": "true"})
        assert got.status_code == 200, got.text
    with Admin(console.dev.bootstrap_servers, security=console.security, timeout=20) as admin:
        wait_until(lambda: other not in admin.list_topics(), 30, "the topic was not deleted")


def test_alice_produces_to_her_topic_only(console: Console) -> None:
    mine, other = f"alice-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
    _create(console, mine)
    _create(console, other)
    with console.alice() as http:
        got = http.post(f"/topics/{mine}/produce", data={"key": "k", "value": "v"},
                        headers={"HX-Request": "true"})
        assert got.status_code == 200, got.text
        got = http.post(f"/topics/{other}/produce", data={"key": "k", "value": "v"},
                        headers={"HX-Request": "true"})
        assert got.status_code == 403, got.text


def test_acl_changes_go_through_the_brokers_as_the_user(console: Console) -> None:
    topic = f"shared-{uuid.uuid4().hex[:8]}"
    _create(console, topic)
    acl = {"resource_type": "Topic", "name": topic, "pattern_type": "LITERAL",
           "principal": f"User:{ALICE}", "host": "*", "operation": "Describe",
           "permission": "Allow"}
    with console.alice() as http:
        got = http.post("/actions/acls/add", data=acl, headers={"HX-Request": "true"})
        assert got.status_code == 403, got.text
        assert "CLUSTER_AUTHORIZATION_FAILED" in got.text
        refused = http.get("/fragments/security").text  # DescribeAcls needs cluster DESCRIBE
        assert "CLUSTER_AUTHORIZATION_FAILED" in refused
        assert topic not in http.get("/fragments/topics").text
    with console.admin() as http:
        got = http.post("/actions/acls/add", data=acl, headers={"HX-Request": "true"})
        assert got.status_code == 200 and "Added" in got.text, got.text
        assert topic in http.get("/fragments/security").text
    with console.alice() as http:  # the brokers apply it: alice's Metadata lists the topic
        wait_until(lambda: topic in http.get("/fragments/topics").text, 30,
                   "alice does not see the topic after the ACL")
    with console.admin() as http:
        got = http.post("/actions/acls/remove", data=acl, headers={"HX-Request": "true"})
        assert got.status_code == 200 and "Removed" in got.text, got.text
    with console.alice() as http:
        wait_until(lambda: topic not in http.get("/fragments/topics").text, 30,
                   "alice still sees the topic after the ACL was removed")


def test_quota_form(console: Console) -> None:
    client_id = f"app-{uuid.uuid4().hex[:6]}"
    form = {"user": ALICE, "client_id": client_id, "key": "producer_byte_rate",
            "value": "1048576"}

    def quotas() -> dict[str, float]:
        with Admin(console.dev.bootstrap_servers, security=console.security,
                   timeout=20) as admin:
            return next((values for user, client, values in describe_quotas(admin)
                         if user == ALICE and client == client_id), {})

    with console.alice() as http:
        got = http.post("/actions/quotas/alter", data=form, headers={"HX-Request": "true"})
        assert got.status_code == 403 and "CLUSTER_AUTHORIZATION_FAILED" in got.text, got.text
    assert quotas() == {}
    with console.admin() as http:
        got = http.post("/actions/quotas/alter", data=form, headers={"HX-Request": "true"})
        assert got.status_code == 200, got.text
        assert quotas() == {"producer_byte_rate": 1048576.0}
        assert client_id in http.get("/fragments/security").text
        for bad in ({**form, "value": "-1"}, {**form, "value": "lots"},
                    {**form, "key": "nonsense"}, {**form, "user": "", "client_id": ""}):
            got = http.post("/actions/quotas/alter", data=bad, headers={"HX-Request": "true"})
            assert got.status_code == 400, (bad, got.text)
        got = http.post("/actions/quotas/alter", data={**form, "remove": "1"},
                        headers={"HX-Request": "true"})
        assert got.status_code == 200, got.text
        assert quotas() == {}


# ---- data gathered as the console's own account, shown to alice ------------------------------

def _alice_may_describe_groups(console: Console, prefix: str) -> None:
    zk = _zk(console.dev)
    try:
        for operation in ("Describe", "Read"):
            AclStore(zk).add("Group", prefix, principal=f"User:{ALICE}", operation=operation,
                             pattern_type="PREFIXED")
    finally:
        zk.stop()
        zk.close()


def _labels(http: httpx.Client, path: str) -> set[str]:
    got = http.get(path)
    assert got.status_code == 200, (path, got.text)
    return {dataset["label"] for dataset in got.json()["datasets"]}


def test_groups_and_lag_charts_show_alice_only_what_she_may_describe(
        console: Console) -> None:
    tag = uuid.uuid4().hex[:8]
    mine, other = f"alice-{tag}", f"other-{tag}"
    shared_group, other_group = f"alice-g-{tag}", f"other-g-{tag}"
    _create(console, mine)
    _create(console, other)
    _alice_may_describe_groups(console, f"alice-g-{tag}")
    with Admin(console.dev.bootstrap_servers, security=console.security, timeout=20) as admin:
        admin.alter_group_offsets(other_group, {(other, 0): 0})
    # a member of alice's group (the admin's consumer) reading both topics
    member = Consumer(console.dev.bootstrap_servers, group_id=shared_group,
                      security=console.security, session_timeout_ms=30000)
    try:
        member.subscribe([mine, other])
        wait_until(lambda: member.poll(0.5) is None and len(member.assignment()) == 2, 60,
                   "the member was not assigned both topics")
        member.commit(offsets={(mine, 0): 0, (other, 0): 0})
        with console.admin() as http:  # the sampler (the console's account) saw both
            wait_until(lambda: _labels(http, f"/charts/group/{shared_group}")
                       >= {f"{mine}[0]", f"{other}[0]"}, 60, "no lag sampled")
            wait_until(lambda: _labels(http, f"/charts/group/{other_group}"), 60,
                       "no lag sampled for the other group")
            assert other in http.get(f"/fragments/group/{shared_group}").text
        with console.alice() as http:
            wait_until(lambda: shared_group in http.get("/fragments/groups").text, 30,
                       "alice's ListGroups does not list her group after the ACL")
            for path in ("/groups", "/fragments/groups"):
                listing = http.get(path)
                assert listing.status_code == 200 and other_group not in listing.text, path
            assert _labels(http, f"/charts/group/{shared_group}") == {f"{mine}[0]"}
            refused = http.get(f"/charts/group/{other_group}")
            assert refused.status_code == 403, refused.text
            assert refused.json()["error_code"] == "GROUP_AUTHORIZATION_FAILED"
            for path in (f"/groups/{shared_group}", f"/fragments/group/{shared_group}"):
                page = http.get(path)
                assert page.status_code == 200, (path, page.text)
                assert mine in page.text and other not in page.text, path
            hidden = http.get(f"/groups/{other_group}")
            assert hidden.status_code == 403 and "GROUP_AUTHORIZATION_FAILED" in hidden.text
    finally:
        member.close()


def _topics_card(text: str) -> int:
    found = re.search(r'Topics</div><div class="value">(\d+)<', text)
    assert found, text
    return int(found.group(1))


def test_overview_jobs_and_tiering_chart_show_alice_only_her_topics(console: Console) -> None:
    tag = uuid.uuid4().hex[:8]
    mine, other = f"alice-{tag}", f"other-{tag}"
    _create(console, mine)
    _create(console, other)
    zk = _zk(console.dev)
    try:  # runs as the clean-up jobs record them
        store = JobRunStore(zk)
        ours = {}
        for key, job, topics in (("mine", "retention", [mine]), ("other", "retention", [other]),
                                 ("all", "optimize", [])):
            ours[key] = store.record_start(job, topics)
            store.record_end(ours[key], "success", {"rows_rewritten": 1})
    finally:
        zk.stop()
        zk.close()
    alice_security = SecurityConfig.load(str(console.dev.client_properties))
    alice_security = dataclasses.replace(alice_security, sasl_mechanism="SCRAM-SHA-256",
                                         sasl_username=ALICE, sasl_password=ALICE_PASSWORD)
    with Admin(console.dev.bootstrap_servers, security=alice_security, timeout=20) as admin:
        alice_topics = len(admin.list_topics())
    with Admin(console.dev.bootstrap_servers, security=console.security, timeout=20) as admin:
        all_topics = len(admin.list_topics())
    assert alice_topics < all_topics
    with console.admin() as http:
        jobs = http.get("/fragments/jobs").text
        assert all(f'data-run="{run}"' in jobs for run in ours.values()), jobs
        assert _topics_card(http.get("/overview/live").text) >= all_topics
    with console.alice() as http:
        jobs = http.get("/fragments/jobs").text
        assert f'data-run="{ours["mine"]}"' in jobs
        assert f'data-run="{ours["other"]}"' not in jobs  # a run over her topics only
        assert f'data-run="{ours["all"]}"' not in jobs  # its numbers cover every topic
        assert _topics_card(http.get("/overview/live").text) == alice_topics
        assert other not in http.get("/tiering").text
        assert not any(label.startswith("other-") for label in _labels(http, "/charts/tiering"))
    with console.admin() as http:  # the sampler has tier lines (the admin sees them all)
        wait_until(lambda: other in _labels(http, "/charts/tiering"), 60,
                   "no tier lag sampled for the other topic")
    with console.alice() as http:
        labels = _labels(http, "/charts/tiering")
        assert mine in labels and other not in labels, labels


def test_schemas_of_topics_alice_may_not_describe_are_hidden(console: Console) -> None:
    tag = uuid.uuid4().hex[:8]
    mine, other, absent = f"alice-{tag}", f"other-{tag}", f"nowhere-{tag}"
    _create(console, mine)
    _create(console, other)
    record = f"com.example.Rec{tag}"  # a record-name subject: names no topic
    zk = _zk(console.dev)
    try:  # as a registry stores them; one schema under all four subjects
        store = SchemaStore(zk)
        schema_id = store.ensure_id(
            "AVRO", json.dumps({"type": "record", "name": f"R{tag}", "fields": []}))
        for subject in (f"{mine}-value", f"{other}-value", f"{absent}-key", record):
            store.create_version(subject, 1, schema_id)
    finally:
        zk.stop()
        zk.close()
    with console.admin() as http:
        table = http.get("/fragments/schemas").text
        assert all(s in table for s in (f"{mine}-value", f"{other}-value", f"{absent}-key",
                                        record)), table
        assert f"{other}-value" in http.get(f"/schemas/subjects/{mine}-value").text
    with console.alice() as http:
        for path in ("/schemas", "/fragments/schemas"):
            table = http.get(path).text
            assert f"{mine}-value" in table and record in table, path
            assert f"{absent}-key" in table, path  # no such topic: hides nothing
            assert f"{other}-value" not in table, path
        same_id = http.get(f"/schemas/subjects/{mine}-value")
        assert same_id.status_code == 200 and record in same_id.text
        assert f"{other}-value" not in same_id.text
        hidden = http.get(f"/schemas/subjects/{other}-value")
        assert hidden.status_code == 403 and "TOPIC_AUTHORIZATION_FAILED" in hidden.text
    assert subject_topic("orders-value") == "orders" and subject_topic("a-b-key") == "a-b"
    assert subject_topic("com.example.Order") is None and subject_topic("-value") is None


# ---- the groups page while a broker is dead -------------------------------------------------

@pytest.fixture
def two_brokers(tmp_path: Path, zookeeper_hosts: str) -> Iterator[DevCluster]:
    with DevCluster(tmp_path / "dev", brokers=2, zookeeper=zookeeper_hosts) as dev:
        yield dev


def test_groups_page_lists_what_live_brokers_answer(two_brokers: DevCluster,
                                                    tmp_path: Path) -> None:
    dev = two_brokers
    topic = "orders"
    with Admin(dev.bootstrap_servers, timeout=30) as admin:
        admin.create_topic(topic, partitions=1, replication_factor=2)
        groups = [f"g{i}" for i in range(12)]
        for group in groups:
            admin.alter_group_offsets(group, {(topic, 0): 0})
        wait_until(lambda: {g.group_id for g in admin.list_groups()} >= set(groups), 30,
                   "the groups were not listed")
    with ConsoleProcess(dev.zookeeper_connect, tmp_path / "console") as process, \
            httpx.Client(base_url=process.url, timeout=60.0) as http:
        assert all(g in http.get("/fragments/groups").text for g in groups)
        dev.kill_broker(2)

        def partial() -> str:
            got = http.get("/fragments/groups")
            assert got.status_code == 200, got.text  # never a 502 for the whole list
            return got.text if "groups-partial" in got.text else ""

        text = wait_until(partial, 60, "the groups page did not report the dead broker")
        shown = [g for g in groups if f'data-group="{g}"' in text]
        assert 0 < len(shown) < len(groups), text  # broker 1's groups, not broker 2's


# ---- the filters alone (pure) ----------------------------------------------------------------

def test_filters_of_what_a_user_may_see() -> None:
    def run(topics: tuple[str, ...]) -> JobRun:
        return JobRun(job="retention", run_id=f"retention/run-{len(topics)}", topics=topics,
                      started_ms=0, ended_ms=1, outcome="success")

    runs = [run(("a",)), run(("a", "b")), run(())]
    assert visible_runs(runs, None, {"a", "b"}) == runs
    assert visible_runs(runs, {"a"}, {"a", "b"}) == [runs[0]]
    assert visible_runs(runs, {"a", "b"}, {"a", "b"}) == runs
    member = GroupMember("m", "c", "h", None, (("a", 0), ("b", 1)))
    group = GroupDescription("g", "Stable", "range", 1, (member,))
    assert hide_topics(group, {"a"}).members[0].assignment == (("a", 0),)
    assert visible_lag_key(("group", "g", "a", 0), {"a"})
    assert not visible_lag_key(("group", "g", "b", 0), {"a"})
    assert visible_lag_key(("group", "g", "b", 0), None)
