"""The web console over HTTP (Starlette's TestClient) against a real one-broker cluster:
overview health, topics list and forms, the topic page (partitions, offsets, message browser,
produce form, configs), and bad input answered with a 4xx and a message, never a traceback.
Pure helpers (value rendering, parameter parsing) are tested in-process."""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from loglake.client import Producer
from loglake.console import topic_page
from loglake.console.app import create_app
from loglake.console.context import int_param
from loglake.console.topics import parse_config_lines
from loglake.dev.harness import DevCluster, wait_until

HTMX = {"HX-Request": "true"}


@pytest.fixture(scope="module")
def client(cluster: DevCluster) -> Iterator[TestClient]:
    app = create_app(cluster.zookeeper_connect)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def _no_traceback(text: str) -> None:
    assert "Traceback" not in text and 'File "' not in text


def _alert(text: str) -> str:
    found = re.search(r'role="alert">(.*?)</div>', text, re.S)
    assert found, text[:500]
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip()


# -- pure helpers ------------------------------------------------------------------------------


def test_show_bytes_formats() -> None:
    assert topic_page.show_bytes(None, "auto").kind == "null"
    shown = topic_page.show_bytes(b'{"a": [1, 2]}', "auto")
    assert shown.kind == "json" and json.loads(shown.text) == {"a": [1, 2]}
    assert topic_page.show_bytes(b"plain words", "auto") == topic_page.Shown(
        "text", "plain words", 11)
    assert topic_page.show_bytes(b"\xff\x00\x10", "auto").text == "ff 00 10"
    assert topic_page.show_bytes(b"abc", "hex").text == "61 62 63"
    assert topic_page.show_bytes(b"42", "auto").kind == "text"  # a bare number stays text
    assert topic_page.show_bytes(b"42", "json").kind == "json"
    big = topic_page.show_bytes(b"x" * (topic_page.MAX_SHOWN_BYTES + 5), "auto")
    assert big.cut and big.length == topic_page.MAX_SHOWN_BYTES + 5


def test_parameter_parsing() -> None:
    assert int_param("12", "offset", minimum=0) == 12
    assert int_param("", "offset", default=3) == 3
    for bad in ("-1", "1e9", "abc", "9" * 30):
        with pytest.raises(ValueError, match="offset"):
            int_param(bad, "offset", minimum=0)
    assert topic_page.parse_timestamp("1700000000000") == 1_700_000_000_000
    assert topic_page.parse_timestamp("2023-11-14T22:13:20Z") == 1_700_000_000_000
    with pytest.raises(ValueError, match="ISO 8601"):
        topic_page.parse_timestamp("yesterday")
    assert parse_config_lines("# c\nretention.ms = 5\n\ncleanup.policy=compact") == {
        "retention.ms": "5", "cleanup.policy": "compact"}
    with pytest.raises(ValueError, match="key=value"):
        parse_config_lines("retention.ms")
    assert topic_page.parse_headers("a: 1\nb=2") == [("a", "1"), ("b", "2")]
    with pytest.raises(ValueError, match="name: value"):
        topic_page.parse_headers("nonsense")


# -- against the cluster -----------------------------------------------------------------------


def test_overview_shows_the_broker_healthy(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200, page.text
    assert 'href="/groups"' in page.text and 'href="/security"' in page.text  # the full nav
    assert 'hx-trigger="every 2s"' in page.text
    live = client.get("/overview/live", headers=HTMX)
    assert live.status_code == 200
    assert 'id="broker-1" data-health="healthy"' in live.text
    assert "<html" not in live.text  # a fragment


def test_static_files_and_their_licences(client: TestClient) -> None:
    for path in ("/static/vendor/htmx/htmx.min.js", "/static/vendor/htmx/LICENSE",
                 "/static/vendor/chartjs/chart.umd.min.js", "/static/vendor/chartjs/LICENSE.md",
                 "/static/console.css"):
        assert client.get(path).status_code == 200, path
    for path in ("/static/../context.py", "/static/%2e%2e/context.py",
                 "/static/vendor/../../app.py"):
        answer = client.get(path)
        assert answer.status_code == 404, path
        _no_traceback(answer.text)


def test_create_browse_produce_alter_delete(client: TestClient, cluster: DevCluster,
                                            topic_name: str) -> None:
    created = client.post("/topics", data={"name": topic_name, "partitions": "2",
                                           "replication_factor": "1",
                                           "configs": "retention.ms=3600000"}, headers=HTMX)
    assert created.status_code == 200, created.text
    assert f"Created topic {topic_name}" in created.text
    again = client.post("/topics", data={"name": topic_name}, headers=HTMX)
    assert again.status_code == 409 and "already exists" in _alert(again.text).lower()
    cluster.wait_topic_ready(topic_name, partitions=2)

    listed = client.get("/fragments/topics", headers=HTMX)
    assert f'id="topic-{topic_name}"' in listed.text and "3600000" in listed.text

    with Producer(cluster.bootstrap_servers) as producer:
        for i in range(30):
            producer.send(topic_name, json.dumps({"n": i}), key=f"k{i}", partition=0,
                          headers={"trace": f"t{i}"}, timestamp_ms=1_700_000_000_000 + i)
        producer.send(topic_name, b"\xff\xfe\x00", key="bin", partition=0,
                      timestamp_ms=1_700_000_000_100)
        producer.flush(10)

    page = client.get(f"/topics/{topic_name}")
    assert page.status_code == 200, page.text
    assert 'id="partition-0"' in page.text and 'id="partition-1"' in page.text
    parts = client.get(f"/fragments/topics/{topic_name}/partitions", headers=HTMX)
    assert re.search(r'id="partition-0">.*?class="num high-watermark">31<', parts.text, re.S)

    first = client.get(f"/fragments/topics/{topic_name}/messages",
                       params={"partition": "0", "offset": "0", "limit": "10"}, headers=HTMX)
    assert first.status_code == 200, first.text
    offsets = [int(o) for o in re.findall(r'data-offset="(\d+)"', first.text)]
    assert offsets == list(range(10))
    assert 'data-kind="json"' in first.text and "&#34;n&#34;: 0" in first.text
    assert "trace</span>: <code" in first.text and "t0" in first.text
    assert "2023-11-14 22:13:20.000 UTC" in first.text
    assert "offset=10" in first.text  # next page link

    by_time = client.get(f"/fragments/topics/{topic_name}/messages",
                         params={"partition": "0", "timestamp": "1700000000025", "limit": "3"},
                         headers=HTMX)
    assert [int(o) for o in re.findall(r'data-offset="(\d+)"', by_time.text)] == [25, 26, 27]
    as_hex = client.get(f"/fragments/topics/{topic_name}/messages",
                        params={"partition": "0", "offset": "30", "format": "hex"}, headers=HTMX)
    assert "ff fe 00" in as_hex.text

    produced = client.post(f"/topics/{topic_name}/produce",
                           data={"key": "form-key", "value": '{"from": "form"}',
                                 "headers": "origin: console", "partition": "1"}, headers=HTMX)
    assert produced.status_code == 200, produced.text
    assert 'data-partition="1" data-offset="0"' in produced.text
    shown = client.get(f"/fragments/topics/{topic_name}/messages",
                       params={"partition": "1", "offset": "0"}, headers=HTMX)
    assert "form-key" in shown.text and "console" in shown.text

    altered = client.post(f"/topics/{topic_name}/config",
                          data={"set": "retention.ms=7200000", "delete": ""}, headers=HTMX)
    assert altered.status_code == 200, altered.text
    wait_until(lambda: "7200000" in client.get(f"/topics/{topic_name}").text, 15,
               "altered config shown")

    refused = client.post(f"/topics/{topic_name}/delete", data={"confirm": "nope"},
                          headers=HTMX)
    assert refused.status_code == 400
    deleted = client.post(f"/topics/{topic_name}/delete", data={"confirm": topic_name},
                          headers=HTMX)
    assert deleted.status_code == 200, deleted.text
    wait_until(lambda: client.get(f"/topics/{topic_name}").status_code == 404, 30,
               "deleted topic answers 404")


def test_bad_input_is_a_4xx_with_a_message(client: TestClient, cluster: DevCluster,
                                           topic_name: str) -> None:
    cluster.create_topic(topic_name, partitions=1)
    cluster.wait_topic_ready(topic_name, partitions=1)
    base = f"/fragments/topics/{topic_name}/messages"
    cases: list[tuple[str, str, dict[str, str], dict[str, str], int, str]] = [
        ("GET", "/topics/no-such-topic", {}, {}, 404, "does not exist"),
        ("GET", "/fragments/topics/no-such-topic/partitions", {}, HTMX, 404, "does not exist"),
        ("GET", "/topics/bad%20name%21", {}, {}, 400, "invalid topic name"),
        ("GET", base, {"offset": "-5"}, HTMX, 400, "offset must be at least 0"),
        ("GET", base, {"offset": "99999999999999999999"}, HTMX, 400, "offset"),
        ("GET", base, {"offset": "1000000"}, HTMX, 400, "past the end"),
        ("GET", base, {"offset": "abc"}, HTMX, 400, "must be an integer"),
        ("GET", base, {"partition": "7"}, HTMX, 400, "no partition 7"),
        ("GET", base, {"limit": "100000"}, HTMX, 400, "limit must be at most"),
        ("GET", base, {"format": "xml"}, HTMX, 400, "format must be one of"),
        ("GET", base, {"timestamp": "soon"}, HTMX, 400, "ISO 8601"),
        ("GET", base, {"offset": "1", "timestamp": "5"}, HTMX, 400, "not both"),
        ("GET", f"/topics/{topic_name}", {"offset": "-1"}, {}, 400, "at least 0"),
        ("GET", "/nowhere", {}, {}, 404, "no page"),
    ]
    for method, path, params, headers, status, text in cases:
        answer = client.request(method, path, params=params, headers=headers)
        assert answer.status_code == status, (path, params, answer.text[:300])
        assert text in _alert(answer.text), (path, params)
        _no_traceback(answer.text)
    posts: list[tuple[str, dict[str, str], int, str]] = [
        ("/topics", {"name": "bad name"}, 400, "invalid topic name"),
        ("/topics", {"name": "x" * 400}, 400, "longer than"),
        ("/topics", {"name": "ok-name", "partitions": "0"}, 400, "at least 1"),
        ("/topics", {"name": "ok-name", "partitions": "lots"}, 400, "must be an integer"),
        ("/topics", {"name": "ok-name", "configs": "novalue"}, 400, "key=value"),
        ("/topics", {"name": "ok-name", "configs": "retention.ms=soon"}, 400, "retention.ms"),
        (f"/topics/{topic_name}/produce", {"value": "v", "partition": "9"}, 400,
         "no partition 9"),
        (f"/topics/{topic_name}/produce", {"value": "x" * (topic_page.MAX_VALUE_CHARS + 1)},
         400, "maximum size"),
        (f"/topics/{topic_name}/produce", {"value": "v", "headers": "junk"}, 400,
         "name: value"),
        ("/topics/no-such-topic/produce", {"value": "v"}, 404, "does not exist"),
        (f"/topics/{topic_name}/config", {"set": "", "delete": ""}, 400, "at least one"),
        (f"/topics/{topic_name}/config", {"set": "no.such.config=1"}, 400, "no.such.config"),
    ]
    for path, data, status, text in posts:
        answer = client.post(path, data=data, headers=HTMX)
        assert answer.status_code == status, (path, answer.text[:300])
        assert text in _alert(answer.text), (path, _alert(answer.text))
        _no_traceback(answer.text)
    assert client.get("/topics").status_code == 200  # still up
    assert client.put("/topics").status_code == 405


def test_overview_lists_a_stopped_broker_as_unhealthy(tmp_path, zookeeper_hosts: str) -> None:
    """A killed broker turns unhealthy at once (not answering), stays listed after its
    registration expires, and recovers after a restart."""
    with DevCluster(tmp_path / "dev", brokers=2, zookeeper=zookeeper_hosts) as dev, \
            TestClient(create_app(dev.zookeeper_connect),
                       raise_server_exceptions=False) as client:
        def health(broker: int) -> str:
            text = client.get("/overview/live", headers=HTMX).text
            found = re.search(rf'id="broker-{broker}" data-health="(\w+)"', text)
            return found.group(1) if found else "missing"

        wait_until(lambda: health(2) == "healthy", 30, "broker 2 healthy")
        started = time.monotonic()
        dev.kill_broker(2)
        wait_until(lambda: health(2) == "unhealthy", 30, "broker 2 unhealthy")
        assert time.monotonic() - started < 30
        assert health(1) == "healthy"
        dev.start_broker(2)
        wait_until(lambda: health(2) == "healthy", 60, "broker 2 healthy again")
