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

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
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


# -- broker failure (last: it kills and restarts a broker) -------------------------------------


def test_killed_broker_turns_unhealthy_and_recovers_without_reload(
        ui: BrowserPage, env: ConsoleEnv) -> None:
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
    finally:
        env.dev.start_broker(victim)
    expect(row).to_have_attribute("data-health", "healthy", timeout=BROKER_CHANGE_BOUND_MS)
    expect(page.locator("#brokers-healthy")).to_have_text("2 / 2")
    assert_not_reloaded(ui)
    screenshot(page, "overview-broker-recovered")
    wait_until(lambda: env.dev.broker_alive(victim), 10, "the restarted broker runs")
