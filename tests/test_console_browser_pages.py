"""The console's Transactions and Schemas pages end to end in headless Chromium: a real
``loglake console`` process on the session's cluster, a real ``loglake registry`` process, real
transactional producers (tests/browser_util.py for the browser and the console process).

Checked: an ongoing transaction of a real producer appears on the Transactions page without a
reload and turns CompleteCommit after its commit; a hanging transaction (an open transaction no
coordinator knows, written an hour ago) is highlighted, aborted with its button (the confirm
dialog accepted) and leaves the table, all without a reload; the Schemas page lists a subject
registered through the registry, opens it, shows its schema text and versions and an older
version. Screenshots of both pages are saved.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from loglake.dev.harness import DevCluster
from tests.browser_util import (  # noqa: F401  (fixtures: browser, page)
    BrowserPage,
    ConsoleProcess,
    _browser_fixture,
    _page_fixture,
    screenshot,
)
from tests.hanging_txn_util import open_transaction, write_hanging
from tests.registry_process import RegistryProcess, module_registry

REFRESH_BOUND_MS = 30_000
"""Bound for a live table to show a change (htmx polls every 2-5 s; a loaded box)."""
MEDIA = "application/vnd.schemaregistry.v1+json"


@pytest.fixture(scope="module")
def console(cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[ConsoleProcess]:
    data: Path = tmp_path_factory.mktemp("console-browser-pages")
    with ConsoleProcess(cluster.zookeeper_connect, data,
                        bootstrap=cluster.bootstrap_servers) as process:
        yield process
        assert process.alive(), f"the console died during the tests:\n{process.log()}"
        assert "Traceback" not in process.log(), process.log()


@pytest.fixture(scope="module")
def registry(cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[RegistryProcess]:
    yield from module_registry(tmp_path_factory, cluster.zookeeper_connect,
                               "console-browser-registry")


@pytest.fixture
def ui(page: BrowserPage, console: ConsoleProcess) -> BrowserPage:
    page.base_url = console.url
    return page


def _mark(ui: BrowserPage) -> None:
    ui.page.evaluate("window.__loglakeMark = 'kept'")


def _not_reloaded(ui: BrowserPage) -> None:
    assert ui.page.evaluate("window.__loglakeMark") == "kept", "the page was reloaded"


def test_transactions_page_live_and_abort(ui: BrowserPage, cluster: DevCluster) -> None:
    topic = f"browser-txn-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1)
    ui.goto("/transactions")
    expect(ui.page.locator("nav.main a.active")).to_have_text("Transactions")
    _mark(ui)

    transactional_id = f"browser-{uuid.uuid4().hex[:8]}"
    producer = open_transaction(cluster, topic, transactional_id, b"open")
    row = ui.page.locator(f'#transactions tr[data-transactional-id="{transactional_id}"]')
    expect(row).to_have_attribute("data-state", "Ongoing", timeout=REFRESH_BOUND_MS)
    expect(row).to_contain_text(f"{topic}-0")

    producer_id = 910_000_000 + uuid.uuid4().int % 1_000_000
    write_hanging(cluster, topic, producer_id)
    hanging = ui.page.locator(f'#open-transactions tr[data-producer-id="{producer_id}"]')
    expect(hanging).to_have_class("hanging", timeout=REFRESH_BOUND_MS)
    expect(hanging.locator(".status")).to_have_text("hanging")
    screenshot(ui.page, "transactions-hanging")

    producer.commit_transaction(30)
    expect(row).to_have_attribute("data-state", "CompleteCommit", timeout=REFRESH_BOUND_MS)

    ui.page.once("dialog", lambda dialog: dialog.accept())
    hanging.get_by_role("button", name="Abort").click()
    expect(ui.page.locator("#abort-result")).to_contain_text("Aborted the transaction")
    expect(hanging).to_have_count(0, timeout=REFRESH_BOUND_MS)
    _not_reloaded(ui)
    screenshot(ui.page, "transactions-aborted")


def test_schemas_page_lists_and_opens_a_subject(ui: BrowserPage,
                                                registry: RegistryProcess) -> None:
    subject = f"browser-{uuid.uuid4().hex[:8]}-value"
    with httpx.Client(base_url=registry.url, timeout=30,
                      headers={"Content-Type": MEDIA}) as api:
        for fields in ([{"name": "id", "type": "long"}],
                       [{"name": "id", "type": "long"},
                        {"name": "note", "type": "string", "default": ""}]):
            schema = json.dumps({"type": "record", "name": "Order", "fields": fields})
            answer = api.post(f"/subjects/{subject}/versions", json={"schema": schema})
            assert answer.status_code == 200, answer.text
    ui.goto("/schemas")
    expect(ui.page.locator("nav.main a.active")).to_have_text("Schemas")
    row = ui.page.locator(f'#subjects tr[data-subject="{subject}"]')
    expect(row).to_contain_text("AVRO")
    expect(row.locator(".compatibility")).to_contain_text("BACKWARD")
    screenshot(ui.page, "schemas")
    row.get_by_role("link", name=subject).click()
    expect(ui.page.locator("#schema-text")).to_contain_text('"note"')
    expect(ui.page.locator("#versions tr[data-version]")).to_have_count(2)
    ui.page.locator('#versions tr[data-version="1"] a').click()
    expect(ui.page.locator("#schema-text")).not_to_contain_text('"note"')
    expect(ui.page.locator("#schema-text")).to_contain_text('"id"')
    screenshot(ui.page, "schema-subject")
