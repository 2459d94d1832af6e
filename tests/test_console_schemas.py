"""The console's Schemas page against the session's real cluster and a real ``loglake registry``
process: schemas registered through the registry's REST API (Confluent's) appear with their
versions, ids, types, text and compatibility levels; soft-deleted versions are marked; markup
in a schema is shown as text; bad input is a 4xx with a message. Starlette's TestClient drives
``create_app``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest
from starlette.testclient import TestClient

from loglake.console import schemas as page
from loglake.console.app import create_app
from loglake.dev.harness import DevCluster
from tests.registry_process import RegistryProcess, module_registry

MEDIA = "application/vnd.schemaregistry.v1+json"
HX = {"HX-Request": "true"}


@pytest.fixture(scope="module")
def registry(cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[RegistryProcess]:
    yield from module_registry(tmp_path_factory, cluster.zookeeper_connect,
                               "console-schemas-registry")


@pytest.fixture(scope="module")
def api(registry: RegistryProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=registry.url, timeout=30,
                      headers={"Content-Type": MEDIA}) as client:
        yield client


@pytest.fixture(scope="module")
def client(cluster: DevCluster) -> Iterator[TestClient]:
    app = create_app(cluster.zookeeper_connect, bootstrap=cluster.bootstrap_servers)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def _avro(fields: list[dict[str, object]], doc: str = "") -> str:
    return json.dumps({"type": "record", "name": "Order", "doc": doc, "fields": fields})


def _register(api: httpx.Client, subject: str, schema: str, schema_type: str = "AVRO") -> int:
    body: dict[str, object] = {"schema": schema}
    if schema_type != "AVRO":
        body["schemaType"] = schema_type
    answer = api.post(f"/subjects/{subject}/versions", json=body)
    assert answer.status_code == 200, answer.text
    return int(answer.json()["id"])


def _row(html: str, marker: str) -> str:
    start = html.find(marker)
    assert start >= 0, marker
    return html[html.rfind("<tr", 0, start):html.find("</tr>", start)]


def test_subjects_versions_text_and_compatibility(api: httpx.Client,
                                                  client: TestClient) -> None:
    subject = f"orders-{uuid.uuid4().hex[:8]}-value"
    first = _register(api, subject, _avro([{"name": "id", "type": "long"}],
                                          doc="<b>bold</b> & co"))
    second = _register(api, subject, _avro([{"name": "id", "type": "long"},
                                            {"name": "note", "type": "string",
                                             "default": ""}]))
    json_subject = f"events-{uuid.uuid4().hex[:8]}"
    _register(api, json_subject, json.dumps({"type": "object"}), "JSON")
    assert api.put(f"/config/{json_subject}",
                   json={"compatibility": "FULL"}).status_code == 200

    listing = client.get("/schemas")
    assert listing.status_code == 200
    assert 'href="/schemas"' in listing.text  # in the navigation
    row = _row(listing.text, f'data-subject="{subject}"')
    assert f">{second}<" in row and ">2<" in row and "AVRO" in row
    assert "BACKWARD" in row
    json_row = _row(client.get("/fragments/schemas", headers=HX).text,
                    f'data-subject="{json_subject}"')
    assert "JSON" in json_row and "FULL" in json_row and "(subject)" in json_row

    detail = client.get(f"/schemas/subjects/{subject}")
    assert detail.status_code == 200
    assert "&#34;note&#34;" in detail.text and f"id {second}" in detail.text
    old = client.get(f"/schemas/subjects/{subject}?version=1")
    assert old.status_code == 200 and f"id {first}" in old.text
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; co" in old.text and "<b>bold</b>" not in old.text

    assert api.delete(f"/subjects/{subject}/versions/1").status_code == 200  # soft delete
    row = _row(client.get("/fragments/schemas", headers=HX).text, f'data-subject="{subject}"')
    cells = [cell.split(">", 1)[1] for cell in row.split("</td>")[:3]]
    assert cells[1:] == ["1", "1"]  # one live, one soft-deleted
    versions = client.get(f"/schemas/subjects/{subject}").text
    assert "soft-deleted" in _row(versions, 'data-version="1"')


def test_bad_input_is_a_4xx_with_a_message(client: TestClient) -> None:
    missing = client.get(f"/schemas/subjects/nope-{uuid.uuid4().hex[:6]}")
    assert missing.status_code == 404 and "no subject" in missing.text
    for query, status in (("version=abc", 400), ("version=0", 400), ("version=-3", 400),
                          ("version=99999999999", 400)):
        answer = client.get(f"/schemas/subjects/x?{query}")
        assert answer.status_code == status, query
        assert "version" in answer.text and "Traceback" not in answer.text
    assert client.get("/schemas/subjects/" + "s" * 1200).status_code == 400
    assert client.post("/schemas").status_code == 405
    assert client.get("/schemas").status_code == 200


def test_compatibility_in_force_and_pretty_text() -> None:
    assert page.compatibility_in_force("FULL", "NONE") == page.Compatibility("FULL", "subject")
    assert page.compatibility_in_force(None, "NONE") == page.Compatibility("NONE", "global")
    assert page.compatibility_in_force(None, None) == page.Compatibility("BACKWARD", "default")
    assert page.pretty(None) == ""
