"""The web console end to end: a real dev cluster (2 brokers with their metrics endpoints on),
a real ``loglake console`` process, headless Chromium (tests/browser_util.py).

Each test opens pages by URL or through the navigation, acts through the forms as a user
would, and checks what the page shows, waiting with bounds for htmx's refreshes (every 2 s)
instead of reloading; what a form changed is also checked on the cluster itself with a real
client. A screenshot of each page is saved (tests/.artifacts/screenshots/<run>/ or
``$LOGLAKE_SCREENSHOT_DIR``). The broker kill/restart test runs last in the module (it leaves
the cluster as it found it).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from playwright.sync_api import expect

from loglake.dev.harness import DevCluster, wait_until
from tests.browser_util import (  # noqa: F401  (fixtures: browser, page)
    BrowserPage,
    ConsoleProcess,
    _browser_fixture,
    _page_fixture,
    screenshot,
)

REFRESH_BOUND_MS = 30_000
"""Bound for a live part of a page to show a change (htmx polls every 2 s; a loaded box)."""
BROKER_CHANGE_BOUND_MS = 45_000
"""Bound for a killed broker to show unhealthy / a restarted one healthy again."""
PAGE_WITH_DEAD_BROKER_S = 20.0
"""Bound for any page to answer while a broker is dead (each probe of it is bounded)."""


@dataclass
class ConsoleEnv:
    dev: DevCluster
    console: ConsoleProcess

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.dev.bootstrap_servers})


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[ConsoleEnv]:
    data: Path = tmp_path_factory.mktemp("console-browser")
    with DevCluster(data / "dev", brokers=2, zookeeper=zookeeper_hosts,
                    broker_overrides={"metrics.listener": "http://127.0.0.1:0"}) as dev, \
            ConsoleProcess(dev.zookeeper_connect, data / "console") as console:
        yield ConsoleEnv(dev, console)
        assert console.alive(), f"the console died during the tests:\n{console.log()}"
        assert "Traceback" not in console.log(), console.log()


@pytest.fixture
def ui(page: BrowserPage, env: ConsoleEnv) -> BrowserPage:
    page.base_url = env.console.url
    return page


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def mark_page(ui: BrowserPage) -> None:
    """Tag the loaded document: :func:`assert_not_reloaded` fails if the page was reloaded
    or navigated away since (what changed came from htmx's fragment refreshes)."""
    ui.page.evaluate("window.__loglakeMark = 'kept'")


def assert_not_reloaded(ui: BrowserPage) -> None:
    assert ui.page.evaluate("window.__loglakeMark") == "kept", "the page was reloaded"


# -- overview ----------------------------------------------------------------------------------


def test_overview_shows_brokers_controller_and_health(ui: BrowserPage, env: ConsoleEnv) -> None:
    response = ui.goto("/")
    assert response is not None and response.status == 200
    page = ui.page
    for broker_id in (1, 2):
        row = page.locator(f"#broker-{broker_id}")
        expect(row).to_have_attribute("data-health", "healthy", timeout=REFRESH_BOUND_MS)
        expect(row).to_contain_text(str(env.dev.broker_port(broker_id)))
        expect(row).to_contain_text("127.0.0.1")
        # the brokers' metrics endpoints are on: the console reached each one
        expect(row.locator("a.ok", has_text="reachable")).to_be_visible()
    expect(page.locator("#brokers-healthy")).to_have_text("2 / 2")
    controller = page.locator("#controller").inner_text().strip()
    assert controller in ("1", "2"), controller
    expect(page.locator(f"#broker-{controller}")).to_contain_text("controller")
    # the navigation names every part of the console
    nav = page.locator("nav.main")
    for label in ("Overview", "Topics", "Consumer groups", "Tiering", "Jobs", "Security"):
        expect(nav.get_by_role("link", name=label)).to_be_visible()
    expect(nav.get_by_role("link", name="Overview")).to_have_attribute("aria-current", "page")
    screenshot(page, "overview")


# -- topics ------------------------------------------------------------------------------------


def test_topics_page_lists_a_topic_with_partitions_and_rf(ui: BrowserPage,
                                                          env: ConsoleEnv) -> None:
    name = unique("listed")
    env.dev.create_topic(name, partitions=2, replication_factor=2)
    ui.goto("/")
    ui.page.locator("nav.main").get_by_role("link", name="Topics").click()
    ui.page.wait_for_url("**/topics")
    row = ui.page.locator(f"#topic-{name}")
    expect(row).to_be_visible(timeout=REFRESH_BOUND_MS)
    cells = row.locator("td")
    expect(cells.nth(1)).to_have_text("2")
    expect(cells.nth(2)).to_have_text("2")
    screenshot(ui.page, "topics")


def test_create_topic_through_the_form(ui: BrowserPage, env: ConsoleEnv) -> None:
    name = unique("created")
    ui.goto("/topics")
    mark_page(ui)
    form = ui.page.locator("#create-topic")
    form.locator("input[name=name]").fill(name)
    form.locator("input[name=partitions]").fill("3")
    form.locator("input[name=replication_factor]").fill("2")
    form.locator("textarea[name=configs]").fill("retention.ms=3600000\ncleanup.policy=delete")
    form.get_by_role("button", name="Create").click()
    expect(ui.page.locator("#create-result")).to_contain_text(f"Created topic {name}")
    # the table shows it on its next refresh, without a reload
    row = ui.page.locator(f"#topic-{name}")
    expect(row).to_be_visible(timeout=REFRESH_BOUND_MS)
    expect(row.locator("td").nth(1)).to_have_text("3")
    expect(row.locator("td").nth(2)).to_have_text("2")
    expect(row).to_contain_text("3600000")
    assert_not_reloaded(ui)
    screenshot(ui.page, "topics-created")
    # and the cluster has it as asked
    metadata = env.admin().list_topics(topic=name, timeout=10)
    topic = metadata.topics[name]
    assert topic.error is None, topic.error
    assert len(topic.partitions) == 3
    assert {len(p.replicas) for p in topic.partitions.values()} == {2}


def test_create_topic_refusals_show_the_message(ui: BrowserPage, env: ConsoleEnv) -> None:
    name = unique("twice")
    env.dev.create_topic(name, partitions=1, replication_factor=1)
    ui.goto("/topics")
    form = ui.page.locator("#create-topic")
    result = ui.page.locator("#create-result")
    # the cluster refuses: the topic exists
    form.locator("input[name=name]").fill(name)
    form.get_by_role("button", name="Create").click()
    expect(result).to_contain_text("already exists")
    # the console refuses: a malformed config line
    form.locator("input[name=name]").fill(unique("badconfig"))
    form.locator("textarea[name=configs]").fill("this is not a config")
    form.get_by_role("button", name="Create").click()
    expect(result).to_contain_text("is not key=value")
    # more replicas than brokers
    form.locator("textarea[name=configs]").fill("")
    form.locator("input[name=replication_factor]").fill("3")
    form.get_by_role("button", name="Create").click()
    expect(result.locator(".error")).to_be_visible()
    screenshot(ui.page, "topics-refused")
    assert "Traceback" not in ui.page.content()


# -- topic page: partitions, message browser, produce form -----------------------------------


BASE_TS_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
RECORDS = 30


def produce_records(env: ConsoleEnv, topic: str, partition: int) -> None:
    """``RECORDS`` records to ``partition``: record i has key ``k<i>``, timestamp
    ``BASE_TS_MS + i s``, a header ``seq: <i>``, and a value that is JSON (i % 3 == 0),
    text (1) or bytes that are not UTF-8 (2)."""
    producer = Producer({"bootstrap.servers": env.dev.bootstrap_servers, "linger.ms": 5})
    errors: list[str] = []
    for i in range(RECORDS):
        value = (json.dumps({"n": i, "name": f"rec{i}"}).encode() if i % 3 == 0
                 else f"plain text {i}".encode() if i % 3 == 1
                 else bytes([0x00, 0xFF, 0x10, i]))
        producer.produce(topic, value=value, key=f"k{i}".encode(), partition=partition,
                         timestamp=BASE_TS_MS + i * 1000, headers=[("seq", str(i).encode())],
                         on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)
    assert producer.flush(30) == 0, "records not delivered"
    assert not errors, errors


def record_row(ui: BrowserPage, offset: int) -> Any:
    return ui.page.locator(f"#records #record-{offset}")


def test_topic_page_partitions_and_message_browser(ui: BrowserPage, env: ConsoleEnv) -> None:
    name = unique("browsed")
    env.dev.create_topic(name, partitions=2, replication_factor=2)
    env.dev.wait_topic_ready(name, partitions=2)
    produce_records(env, name, partition=0)
    # reached from the topics list
    ui.goto("/topics")
    ui.page.locator(f"#topic-{name} a").click()
    ui.page.wait_for_url(f"**/topics/{name}")
    page = ui.page
    expect(page.locator("#topic-name")).to_have_text(name)
    p0 = page.locator("#partitions #partition-0")
    expect(p0.locator(".high-watermark")).to_have_text(str(RECORDS), timeout=REFRESH_BOUND_MS)
    expect(p0.locator(".log-start")).to_have_text("0")
    replicas = p0.locator("td").nth(2).inner_text()
    assert sorted(replicas.replace(" ", "").split(",")) == ["1", "2"], replicas
    expect(page.locator("#partitions #partition-1 .high-watermark")).to_have_text("0")
    screenshot(page, "topic")

    # from offset 0, 10 a page, values shown as they are (auto)
    browse = page.locator("#browse")
    browse.locator("select[name=partition]").select_option("0")
    browse.locator("input[name=offset]").fill("0")
    browse.locator("input[name=limit]").fill("10")
    browse.get_by_role("button", name="Browse").click()
    expect(record_row(ui, 0)).to_be_visible()
    expect(page.locator("#records tbody tr")).to_have_count(10)
    first = record_row(ui, 0)
    expect(first.locator("td.key pre")).to_have_text("k0")
    expect(first.locator("td.value pre")).to_have_attribute("data-kind", "json")
    assert json.loads(first.locator("td.value pre").inner_text()) == {"n": 0, "name": "rec0"}
    expect(first.locator("td.headers")).to_contain_text("seq")
    expect(first.locator("td.headers code")).to_have_text("0")
    expect(first.locator("td[data-ms]")).to_have_attribute("data-ms", str(BASE_TS_MS))
    expect(first.locator("td[data-ms]")).to_contain_text("2026-01-01")
    expect(record_row(ui, 1).locator("td.value pre")).to_have_text("plain text 1")
    expect(record_row(ui, 2).locator("td.value pre")).to_have_attribute("data-kind", "hex")
    expect(record_row(ui, 2).locator("td.value pre")).to_have_text("00 ff 10 02")
    screenshot(page, "topic-browse-offset")

    # paging: next, next (the last 10), previous
    page.locator("#page-next").click()
    expect(record_row(ui, 10)).to_be_visible()
    expect(record_row(ui, 0)).to_have_count(0)
    page.locator("#page-next").click()
    expect(record_row(ui, 29)).to_be_visible()
    expect(page.locator("#records tbody tr")).to_have_count(10)
    page.locator("#page-previous").click()
    expect(record_row(ui, 10)).to_be_visible()
    expect(record_row(ui, 29)).to_have_count(0)

    # from a time: the first record at or after it
    browse.locator("input[name=offset]").fill("")
    browse.locator("input[name=timestamp]").fill(str(BASE_TS_MS + 14_500))
    browse.get_by_role("button", name="Browse").click()
    expect(page.locator("#records tbody tr").first).to_have_attribute("data-offset", "15")
    browse.locator("input[name=timestamp]").fill("2026-01-01T00:00:20Z")
    browse.get_by_role("button", name="Browse").click()
    expect(page.locator("#records tbody tr").first).to_have_attribute("data-offset", "20")
    screenshot(page, "topic-browse-timestamp")

    # the same records as hex, then JSON
    browse.locator("input[name=timestamp]").fill("")
    browse.locator("input[name=offset]").fill("0")
    browse.locator("select[name=format]").select_option("hex")
    browse.get_by_role("button", name="Browse").click()
    expect(record_row(ui, 1).locator("td.value pre")).to_have_attribute("data-kind", "hex")
    expect(record_row(ui, 1).locator("td.value pre")).to_have_text(
        b"plain text 1".hex(" "))
    expect(record_row(ui, 0).locator("td.key pre")).to_have_text(b"k0".hex(" "))
    screenshot(page, "topic-browse-hex")
    browse.locator("select[name=format]").select_option("json")
    browse.get_by_role("button", name="Browse").click()
    expect(record_row(ui, 3).locator("td.value pre")).to_have_attribute("data-kind", "json")
    expect(record_row(ui, 3).locator("td.value pre")).to_contain_text('"name": "rec3"')

    # a bad value in the browse form: the message, no records
    browse.locator("input[name=timestamp]").fill("not a time")
    browse.get_by_role("button", name="Browse").click()
    expect(page.locator("#messages .error")).to_contain_text("timestamp")

    # any offset by URL: the page opens on it
    ui.goto(f"/topics/{name}?partition=0&offset=25&limit=10")
    expect(record_row(ui, 25)).to_be_visible()
    expect(page.locator("#records tbody tr")).to_have_count(RECORDS - 25)
    expect(page.locator("#page-next")).to_have_count(0)


def test_produce_form_then_see_the_message(ui: BrowserPage, env: ConsoleEnv) -> None:
    name = unique("produced")
    env.dev.create_topic(name, partitions=2, replication_factor=2)
    env.dev.wait_topic_ready(name, partitions=2)
    ui.goto(f"/topics/{name}")
    mark_page(ui)
    page = ui.page
    form = page.locator("#produce")
    form.locator("input[name=key]").fill("user-42")
    form.locator("textarea[name=value]").fill('{"event": "signup", "ok": true}')
    form.locator("textarea[name=headers]").fill("trace: abc123\nsource: browser")
    form.locator("input[name=partition]").fill("1")
    form.get_by_role("button", name="Produce").click()
    result = page.locator("#produce-result .notice")
    expect(result).to_contain_text(f"Produced to {name} partition 1 at offset 0")
    # the partitions table counts it on its next refresh, without a reload
    expect(page.locator("#partitions #partition-1 .high-watermark")).to_have_text(
        "1", timeout=REFRESH_BOUND_MS)
    assert_not_reloaded(ui)
    screenshot(page, "topic-produced")
    result.get_by_role("link", name="Show it").click()
    page.wait_for_url("**offset=0**")
    row = record_row(ui, 0)
    expect(row.locator("td.key pre")).to_have_text("user-42")
    expect(row.locator("td.value pre")).to_have_attribute("data-kind", "json")
    assert json.loads(row.locator("td.value pre").inner_text()) == {"event": "signup",
                                                                    "ok": True}
    expect(row.locator("td.headers")).to_contain_text("trace")
    expect(row.locator("td.headers")).to_contain_text("abc123")
    expect(row.locator("td.headers")).to_contain_text("browser")
    screenshot(page, "topic-produced-shown")
    # the record is on the cluster as produced
    consumer = Consumer({"bootstrap.servers": env.dev.bootstrap_servers,
                         "group.id": unique("check"), "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(name, 1, 0)])
        message = wait_until(lambda: _good(consumer.poll(1.0)), 30, "the produced record")
    finally:
        consumer.close()
    assert message.key() == b"user-42"
    assert json.loads(message.value()) == {"event": "signup", "ok": True}
    assert message.headers() == [("trace", b"abc123"), ("source", b"browser")]


def _good(message: Any) -> Any:
    return message if message is not None and message.error() is None else None


def test_alter_config_and_delete_topic_through_the_forms(ui: BrowserPage,
                                                          env: ConsoleEnv) -> None:
    name = unique("altered")
    env.dev.create_topic(name, partitions=1, replication_factor=1)
    env.dev.wait_topic_ready(name, partitions=1)
    ui.goto(f"/topics/{name}")
    page = ui.page
    form = page.locator("#alter-config")
    form.locator("textarea[name=set]").fill("retention.ms=7200000\nsegment.bytes=2097152")
    form.get_by_role("button", name="Alter configs").click()
    expect(page.locator("#config-result .notice")).to_contain_text("retention.ms")
    resource = ConfigResource("topic", name)
    admin = env.admin()

    def configs() -> Any:
        return admin.describe_configs([resource])[resource].result(timeout=10)

    wait_until(lambda: configs()["retention.ms"].value == "7200000", 30,
               "retention.ms altered on the cluster")
    assert configs()["segment.bytes"].value == "2097152"
    # refused: an unknown config, with the broker's reason
    form.locator("textarea[name=set]").fill("no.such.config=1")
    form.get_by_role("button", name="Alter configs").click()
    expect(page.locator("#config-result .error")).to_contain_text("no.such.config")
    # reset to the default
    form.locator("textarea[name=set]").fill("")
    form.locator("input[name=delete]").fill("retention.ms")
    form.get_by_role("button", name="Alter configs").click()
    expect(page.locator("#config-result .notice")).to_be_visible()
    wait_until(lambda: configs()["retention.ms"].is_default, 30,
               "retention.ms back to its default")
    ui.goto(f"/topics/{name}")
    expect(page.locator("#configs")).to_contain_text("2097152")
    screenshot(page, "topic-configs")
    # delete: the name must be typed
    delete = page.locator("#delete-topic")
    delete.locator("input[name=confirm]").fill("wrong")
    delete.get_by_role("button", name="Delete topic").click()
    expect(page.locator("#delete-result .error")).to_contain_text("confirm")
    delete.locator("input[name=confirm]").fill(name)
    delete.get_by_role("button", name="Delete topic").click()
    expect(page.locator("#delete-result .notice")).to_contain_text(f"Deleted topic {name}")
    wait_until(lambda: name not in admin.list_topics(timeout=10).topics, 30,
               "the topic is gone from the cluster")
    ui.goto("/topics")
    expect(page.locator(f"#topic-{name}")).to_have_count(0, timeout=REFRESH_BOUND_MS)
    response = ui.goto(f"/topics/{name}")
    assert response is not None and response.status == 404
    expect(page.locator(".error")).to_contain_text("does not exist")


def test_record_contents_are_shown_as_text_never_run(ui: BrowserPage, env: ConsoleEnv) -> None:
    """Keys, values and headers holding markup are escaped: nothing a producer wrote runs in
    the console's page."""
    name = unique("markup")
    env.dev.create_topic(name, partitions=1, replication_factor=1)
    env.dev.wait_topic_ready(name, partitions=1)
    payload = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'
    producer = Producer({"bootstrap.servers": env.dev.bootstrap_servers})
    producer.produce(name, value=payload.encode(), key=payload.encode(), partition=0,
                     headers=[(payload, payload.encode())])
    producer.produce(name, value=json.dumps({"html": payload}).encode(), partition=0)
    assert producer.flush(30) == 0
    ui.goto(f"/topics/{name}?partition=0&offset=0")
    page = ui.page
    expect(record_row(ui, 1)).to_be_visible()
    expect(record_row(ui, 0).locator("td.value pre")).to_have_text(payload)
    expect(record_row(ui, 0).locator("td.key pre")).to_have_text(payload)
    expect(record_row(ui, 0).locator("td.headers")).to_contain_text(payload)
    expect(record_row(ui, 1).locator("td.value pre")).to_contain_text("onerror")
    # the same through the form's htmx fragment
    page.locator("#browse input[name=offset]").fill("0")
    page.locator("#browse").get_by_role("button", name="Browse").click()
    expect(record_row(ui, 0).locator("td.value pre")).to_have_text(payload)
    assert page.evaluate("window.__xss") is None
    assert page.locator("#records img, #records script").count() == 0


# -- consumer groups: list, group page with lag chart, reset offsets ---------------------------


def consume_and_commit(env: ConsoleEnv, group: str, topic: str, count: int) -> None:
    """Read ``count`` records of ``topic`` as ``group``, commit, leave the group (Empty)."""
    consumer = Consumer({"bootstrap.servers": env.dev.bootstrap_servers, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        seen: list[Any] = []
        deadline = time.monotonic() + 60
        while len(seen) < count and time.monotonic() < deadline:
            message = _good(consumer.poll(0.5))
            if message is not None:
                seen.append(message)
        assert len(seen) >= count, f"read {len(seen)} of {count} records"
        last = seen[count - 1]
        consumer.commit(offsets=[TopicPartition(topic, last.partition(), last.offset() + 1)],
                        asynchronous=False)
    finally:
        consumer.close()


def committed_offset(env: ConsoleEnv, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": env.dev.bootstrap_servers, "group.id": group,
                         "enable.auto.commit": False})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return int(tp.offset)
    finally:
        consumer.close()


def test_groups_page_group_lag_chart_and_reset_offsets(ui: BrowserPage,
                                                       env: ConsoleEnv) -> None:
    topic, group = unique("grouped"), unique("group")
    env.dev.create_topic(topic, partitions=1, replication_factor=2)
    env.dev.wait_topic_ready(topic, partitions=1)
    produce_records(env, topic, partition=0)
    consume_and_commit(env, group, topic, 10)
    page = ui.page
    # the list shows the group, Empty, 20 behind
    ui.goto("/groups")
    row = page.locator(f'#groups tr[data-group="{group}"]')
    expect(row).to_be_visible(timeout=REFRESH_BOUND_MS)
    expect(row.locator(".state")).to_have_text("Empty")
    expect(row.locator(".lag")).to_have_text(str(RECORDS - 10), timeout=REFRESH_BOUND_MS)
    screenshot(page, "groups")
    row.get_by_role("link", name=group).click()
    page.wait_for_url(f"**/groups/{group}")
    mark_page(ui)
    expect(page.locator("#group-id")).to_have_text(group)
    expect(page.locator("#group-state")).to_have_text("Empty")
    partition = page.locator(f'#group-partitions tr[data-partition="{topic}:0"]')
    expect(partition.locator(".committed")).to_have_text("10")
    expect(partition.locator(".lag")).to_have_text(str(RECORDS - 10))
    # the lag chart (Chart.js) draws the sampled lag
    chart = page.locator("#lag-chart")
    expect(chart).to_have_attribute("data-series", re.compile(r"^[1-9]"),
                                    timeout=REFRESH_BOUND_MS)
    expect(chart).to_have_attribute("data-points", re.compile(r"^[1-9]"))
    assert page.evaluate("() => Chart.getChart(document.getElementById('lag-chart')) !== "
                         "undefined")
    screenshot(page, "group")

    # a dry run shows the new offset and changes nothing
    form = page.locator("#reset-offsets")
    form.locator("input[name=topic]").fill(topic)
    form.locator("select[name=to]").select_option("offset")
    form.locator("input[name=offset]").fill("5")
    form.get_by_role("button", name="Preview (dry run)").click()
    expect(page.locator("#reset-preview")).to_be_visible()
    preview = page.locator(f'#reset-rows tr[data-partition="{topic}:0"]')
    expect(preview.locator(".new")).to_have_text("5")
    assert committed_offset(env, group, topic) == 10
    screenshot(page, "group-reset-preview")
    # the reset: the table follows on its next refresh, without a reload
    form.get_by_role("button", name="Reset").click()
    expect(page.locator("#reset-done")).to_be_visible()
    expect(partition.locator(".committed")).to_have_text("5", timeout=REFRESH_BOUND_MS)
    expect(partition.locator(".lag")).to_have_text(str(RECORDS - 5))
    assert committed_offset(env, group, topic) == 5
    # to the earliest offset
    form.locator("select[name=to]").select_option("earliest")
    form.get_by_role("button", name="Reset").click()
    expect(partition.locator(".committed")).to_have_text("0", timeout=REFRESH_BOUND_MS)
    assert committed_offset(env, group, topic) == 0
    assert_not_reloaded(ui)
    screenshot(page, "group-reset-done")

    # a group with a member is refused, with the reason
    member = Consumer({"bootstrap.servers": env.dev.bootstrap_servers, "group.id": group,
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        member.subscribe([topic])
        wait_until(lambda: member.poll(0.2) is not None or bool(member.assignment()), 60,
                   "the consumer joined the group")
        expect(page.locator("#group-members")).to_have_text("1", timeout=REFRESH_BOUND_MS)
        form.locator("select[name=to]").select_option("latest")
        form.get_by_role("button", name="Reset").click()
        expect(page.locator("#reset-result .error")).to_contain_text("member")
        screenshot(page, "group-reset-refused")
    finally:
        member.close()
    assert committed_offset(env, group, topic) == 0


# -- tiering, jobs, security -------------------------------------------------------------------


def test_tiering_page_shows_topics_and_partitions(ui: BrowserPage, env: ConsoleEnv) -> None:
    topic = unique("tiered")
    env.dev.create_topic(topic, partitions=2, replication_factor=2)
    env.dev.wait_topic_ready(topic, partitions=2)
    ui.goto("/")
    ui.page.locator("nav.main").get_by_role("link", name="Tiering").click()
    ui.page.wait_for_url("**/tiering")
    page = ui.page
    expect(page.locator(f'#tier-topics tr[data-topic="{topic}"]')).to_be_visible(
        timeout=REFRESH_BOUND_MS)
    for partition in (0, 1):
        expect(page.locator(f'#tier-partitions tr[data-partition="{topic}:{partition}"]')
               ).to_be_visible()
    expect(page.locator("#tier-storage")).not_to_be_empty()
    screenshot(page, "tiering")


def test_jobs_page_shows_a_job_run(ui: BrowserPage, env: ConsoleEnv) -> None:
    topic = unique("jobbed")
    env.dev.create_topic(topic, partitions=1, replication_factor=1)
    env.dev.wait_topic_ready(topic, partitions=1)
    done = subprocess.run(
        [sys.executable, "-m", "loglake", "retention", "--zookeeper", env.dev.zookeeper_connect,
         "--topic", topic], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    ui.goto("/jobs")
    page = ui.page
    job = page.locator('#jobs tr[data-job="retention"]')
    expect(job).to_be_visible(timeout=REFRESH_BOUND_MS)
    expect(job.locator(".outcome")).to_contain_text("success")
    expect(page.locator("#job-runs")).to_contain_text(topic)
    screenshot(page, "jobs")


def test_security_page_adds_and_removes_an_acl(ui: BrowserPage, env: ConsoleEnv) -> None:
    topic, user = unique("guarded"), unique("User:alice")
    ui.goto("/security")
    page = ui.page
    mark_page(ui)
    form = page.locator("#add-acl")
    form.locator("select[name=resource_type]").select_option("Topic")
    form.locator("input[name=name]").fill(topic)
    form.locator("input[name=principal]").fill(user)
    form.locator("select[name=operation]").select_option("Read")
    form.locator("select[name=permission]").select_option("Allow")
    form.get_by_role("button", name="Add").click()
    acl = page.locator(f'#acls tr[data-acl="Topic:{topic}:{user}:Read:Allow"]')
    expect(acl).to_be_visible(timeout=REFRESH_BOUND_MS)
    screenshot(page, "security")
    # a malformed principal is refused with the reason
    form.locator("input[name=principal]").fill("alice-without-type")
    form.get_by_role("button", name="Add").click()
    expect(page.locator("#acl-result .error")).to_be_visible()
    acl.get_by_role("button", name="Remove").click()
    expect(acl).to_have_count(0, timeout=REFRESH_BOUND_MS)
    assert_not_reloaded(ui)


# -- broker failure (last: it kills and restarts a broker) -------------------------------------


def test_killed_broker_turns_unhealthy_and_recovers_without_reload(
        ui: BrowserPage, env: ConsoleEnv) -> None:
    topic = unique("survivor")
    env.dev.create_topic(topic, partitions=2, replication_factor=2)
    env.dev.wait_topic_ready(topic, partitions=2)
    ui.goto("/")
    mark_page(ui)
    page = ui.page
    victim = 2
    row = page.locator(f"#broker-{victim}")
    expect(row).to_have_attribute("data-health", "healthy", timeout=REFRESH_BOUND_MS)
    env.dev.kill_broker(victim)
    try:
        expect(row).to_have_attribute("data-health", "unhealthy",
                                      timeout=BROKER_CHANGE_BOUND_MS)
        expect(page.locator("#brokers-healthy")).to_have_text("1 / 2")
        expect(page.locator("#broker-1")).to_have_attribute("data-health", "healthy")
        screenshot(page, "overview-broker-killed")
        # every page still answers while a broker is down (no hang, no 500)
        degraded: list[str] = []
        for path in ("/topics", f"/topics/{topic}", f"/topics/{topic}?partition=0&offset=0",
                     "/groups", "/tiering", "/jobs", "/security"):
            started = time.monotonic()
            answer = httpx.get(env.console.url + path, timeout=PAGE_WITH_DEAD_BROKER_S * 2)
            took = time.monotonic() - started
            alerts = re.findall(r'role="alert">(.*?)</div>', answer.text, re.S)
            # a page whose cluster call failed says which and why (e.g. ListGroups fans out
            # to every registered broker, the dead one too, until its session expires)
            assert answer.status_code < 500 or (answer.status_code in (502, 503) and alerts), (
                path, answer.status_code, alerts)
            if answer.status_code >= 500:
                degraded.append(f"{path}: {answer.status_code} {alerts}")
            assert "Traceback" not in answer.text, path
            assert took < PAGE_WITH_DEAD_BROKER_S, (path, took)
        print("pages failing while a broker is dead:", degraded or "none")
    finally:
        env.dev.start_broker(victim)
    expect(row).to_have_attribute("data-health", "healthy", timeout=BROKER_CHANGE_BOUND_MS)
    expect(page.locator("#brokers-healthy")).to_have_text("2 / 2")
    assert_not_reloaded(ui)
    screenshot(page, "overview-broker-recovered")
    wait_until(lambda: env.dev.broker_alive(victim), 10, "the restarted broker runs")


def test_login_flow_in_the_browser(browser: Any, tmp_path: Path, zookeeper_hosts: str) -> None:
    """``--basic-auth`` against a secured cluster (SASL_SSL brokers, ACL authorizer): a browser
    without credentials gets the 401 page; logged in as alice (HTTP credentials of her SCRAM
    user) it shows her topic and not another, and the other topic's page is a 403 naming
    TOPIC_AUTHORIZATION_FAILED. Screenshots: ``login-*.png``."""
    from kazoo.client import KazooClient

    from loglake.broker.security.scram_credentials import store_user_credential
    from loglake.catalog.acls import AclStore
    from loglake.catalog.entity_configs import EntityConfigStore
    from loglake.client import Admin, SecurityConfig

    with DevCluster(tmp_path / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    security="sasl_ssl") as dev:
        zk = KazooClient(hosts=dev.zookeeper_connect, timeout=10)
        zk.start(timeout=10)
        try:
            store_user_credential(EntityConfigStore(zk), "alice", "SCRAM-SHA-512", "alice-pw")
            AclStore(zk).add("Topic", "alice-", principal="User:alice", operation="All",
                             pattern_type="PREFIXED")
        finally:
            zk.stop()
            zk.close()
        with Admin(dev.bootstrap_servers, timeout=30,
                   security=SecurityConfig.load(str(dev.client_properties))) as admin:
            admin.create_topic("alice-orders", partitions=1, replication_factor=1)
            admin.create_topic("payroll", partitions=1, replication_factor=1)
        with ConsoleProcess(dev.zookeeper_connect, tmp_path / "console", extra_args=(
                "--basic-auth", "--command-config", str(dev.client_properties))) as process:
            from playwright.sync_api import Error as PlaywrightError

            for credentials in (None, {"username": "alice", "password": "wrong"}):
                refused = browser.new_context(http_credentials=credentials)
                try:  # a 401: Chromium shows it, or gives up the navigation without creds
                    try:
                        response = refused.new_page().goto(f"{process.url}/topics")
                        assert response is not None and response.status == 401
                    except PlaywrightError as exc:
                        assert "ERR_INVALID_AUTH_CREDENTIALS" in str(exc), exc
                finally:
                    refused.close()
            context = browser.new_context(
                viewport={"width": 1400, "height": 900},
                http_credentials={"username": "alice", "password": "alice-pw"})
            context.set_default_timeout(15_000)
            try:
                page = context.new_page()
                assert page.goto(f"{process.url}/topics").status == 200
                expect(page.locator("#topics-table, table").first).to_contain_text(
                    "alice-orders", timeout=REFRESH_BOUND_MS)
                assert "payroll" not in page.content()
                screenshot(page, "login-topics")
                assert page.goto(f"{process.url}/topics/payroll").status == 403
                expect(page.locator("body")).to_contain_text("TOPIC_AUTHORIZATION_FAILED")
                screenshot(page, "login-forbidden")
            finally:
                context.close()
