"""The console survives bad input: a real ``loglake console`` process (tests/browser_util.py)
against the shared one-broker cluster, spoken to over real HTTP (httpx, and raw sockets where
httpx would clean the request up: ``..`` in paths, bytes that are not UTF-8).

Every bad request gets a 4xx with a message and no traceback (neither in the answer nor in
the console's output), static paths never leave the static folder, oversized and malformed
forms are refused before anything is done, and the console answers normally afterwards.
(Parameter-by-parameter refusals of the pages are tested in-process in tests/test_console.py;
here the same through the real server, plus what only a real server sees.)
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loglake.dev.harness import DevCluster, wait_until
from tests.browser_util import ConsoleProcess

HTMX = {"HX-Request": "true"}
SOURCE_MARKERS = ("def create_app", "import ", "[tool.", "root:x:0:0")
"""Text that would mean a file outside the static folder was served."""


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory, cluster: DevCluster
            ) -> Iterator[ConsoleProcess]:
    log_dir: Path = tmp_path_factory.mktemp("console-bad-input")
    with ConsoleProcess(cluster.zookeeper_connect, log_dir) as process:
        yield process


@pytest.fixture(scope="module")
def http(console: ConsoleProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=console.url, timeout=30.0) as client:
        yield client


@pytest.fixture(scope="module")
def topic(cluster: DevCluster) -> str:
    name = "console-bad-input"
    cluster.create_topic(name, partitions=1)
    cluster.wait_topic_ready(name, partitions=1)
    return name


def alert_text(body: str) -> str:
    """The text of the error box (tags stripped)."""
    found = re.search(r'class="error"[^>]*>(.*?)</div>', body, re.S)
    return re.sub(r"<[^>]+>", "", found.group(1)).strip() if found else ""


def assert_refused(answer: httpx.Response, status: int | tuple[int, ...], text: str = "") -> None:
    statuses = (status,) if isinstance(status, int) else status
    what = f"{answer.request.method} {str(answer.request.url)[:120]}"
    assert answer.status_code in statuses, (what, answer.status_code, answer.text[:300])
    assert "Traceback" not in answer.text and 'File "' not in answer.text, (what, answer.text)
    if text:
        assert text in alert_text(answer.text), (what, answer.text[:500])


def raw_get(console: ConsoleProcess, target: bytes) -> tuple[int, bytes]:
    """GET ``target`` exactly as given (no client-side normalization); (status, body)."""
    host, port = console.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: " + host.encode()
                     + b"\r\nConnection: close\r\n\r\n")
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    data = b"".join(chunks)
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, body


def assert_still_up(console: ConsoleProcess, http: httpx.Client) -> None:
    assert console.alive(), console.log()
    assert http.get("/healthz").text == "ok"
    assert http.get("/topics").status_code == 200
    log = console.log()
    assert "Traceback" not in log, log


def test_static_paths_stay_inside_the_static_folder(console: ConsoleProcess,
                                                    http: httpx.Client) -> None:
    # the vendored files are served
    assert http.get("/static/vendor/htmx/htmx.min.js").status_code == 200
    targets = [
        b"/static/../app.py", b"/static/../../../pyproject.toml",
        b"/static/vendor/../../app.py", b"/static/%2e%2e/app.py", b"/static/%2e%2e%2fapp.py",
        b"/static/..%2f..%2fcontext.py", b"/static/%252e%252e/app.py",
        b"/static//etc/passwd", b"/static/..\\app.py", b"/static/%00", b"/static/a%00.js",
        b"/static/../templates/base.html", b"/static/vendor/htmx/../../../console.py",
        b"/static/" + b"a/" * 2000,
    ]
    for target in targets:
        status, body = raw_get(console, target)
        assert 400 <= status < 500, (target[:80], status, body[:200])
        text = body.decode("utf-8", "replace")
        assert not any(marker in text for marker in SOURCE_MARKERS), (target[:80], text[:300])
        assert "Traceback" not in text, (target[:80], text)
    assert_still_up(console, http)


def test_unknown_and_malformed_names_and_parameters(console: ConsoleProcess,
                                                    http: httpx.Client, topic: str) -> None:
    base = f"/fragments/topics/{topic}/messages"
    cases: list[tuple[str, dict[str, str], dict[str, str], int | tuple[int, ...], str]] = [
        ("/topics/no-such-topic", {}, {}, 404, "does not exist"),
        ("/fragments/topics/no-such-topic/messages", {}, HTMX, 404, "does not exist"),
        ("/topics/" + "x" * 300, {}, {}, 400, "invalid topic name"),
        ("/topics/%3Cscript%3E", {}, {}, 400, "invalid topic name"),
        (base, {"offset": "-1"}, HTMX, 400, "offset"),
        (base, {"offset": "9" * 19}, HTMX, 400, "offset"),
        (base, {"offset": "9" * 400}, HTMX, 400, "offset"),
        (base, {"offset": "1e3"}, HTMX, 400, "integer"),
        (base, {"partition": "-1"}, HTMX, 400, "partition"),
        (base, {"partition": "2147483648"}, HTMX, 400, "partition"),
        (base, {"limit": "0"}, HTMX, 400, "limit"),
        (base, {"timestamp": "9" * 30}, HTMX, 400, "timestamp"),
        (base, {"timestamp": "2026-13-45T99:99"}, HTMX, 400, ""),
        (base, {"format": "<b>"}, HTMX, 400, "format"),
        ("/no/such/page", {}, {}, 404, "no page"),
        ("/fragments/nothing", {}, HTMX, 404, "no page"),
    ]
    for path, params, headers, status, text in cases:
        assert_refused(http.get(path, params=params, headers=headers), status, text)
    # a message is HTML-escaped, never markup the browser runs
    answer = http.get("/topics/%3Cscript%3Ealert(1)%3C%2Fscript%3E")
    assert "<script>alert(1)" not in answer.text
    # bytes that are not UTF-8 in the path and the query string
    for target in (f"{base}?offset=%ff%fe".encode(), b"/topics/%ff%fe", b"/topics/..",
                   b"/topics/../topics/%2e%2e", b"/fragments/topics/../../etc/passwd",
                   f"{base}?partition=\xff".encode("latin-1")):
        status, body = raw_get(console, target)
        assert 400 <= status < 500, (target, status, body[:300])
        assert b"Traceback" not in body
    # a URL far longer than any page needs
    status, _ = raw_get(console, f"{base}?offset={'1' * 60_000}".encode())
    assert 400 <= status < 500, status
    assert_still_up(console, http)


def test_oversized_and_malformed_forms(console: ConsoleProcess, http: httpx.Client,
                                       topic: str) -> None:
    produce = f"/topics/{topic}/produce"
    # a form far bigger than any field allows
    big = http.post("/topics", data={"name": "x", "configs": "a=" + "b" * (4 << 20)},
                    headers=HTMX)
    assert_refused(big, (400, 413))
    assert_refused(http.post(produce, data={"value": "v" * (2 << 20)}, headers=HTMX),
                   (400, 413))
    # too many fields, a file where text is expected, a broken multipart body
    many = "&".join(f"f{i}=1" for i in range(5000))
    assert_refused(http.post("/topics", content=many, headers={
        **HTMX, "Content-Type": "application/x-www-form-urlencoded"}), (400, 413))
    assert_refused(http.post("/topics", files={"name": ("n.txt", b"topic")}, headers=HTMX),
                   (400, 413))
    assert_refused(http.post(produce, content=b"--x\r\nnot a part", headers={
        **HTMX, "Content-Type": "multipart/form-data; boundary=x"}), (400, 413))
    assert_refused(http.post(produce, content=b"garbage", headers={
        **HTMX, "Content-Type": "multipart/form-data"}), (400, 413))
    assert_refused(http.post("/topics", content=b"name=\xff\xfe&partitions=\xff", headers={
        **HTMX, "Content-Type": "application/x-www-form-urlencoded"}), 400, "topic name")
    # bad values in well-formed forms
    assert_refused(http.post("/topics", data={"name": "ok", "partitions": "-3"}, headers=HTMX),
                   400, "at least 1")
    assert_refused(http.post("/topics", data={"name": "ok", "partitions": "9" * 40},
                             headers=HTMX), 400, "integer")
    assert_refused(http.post("/topics", data={"name": "ok", "replication_factor": "99"},
                             headers=HTMX), 400, "at most")
    assert_refused(http.post(produce, data={"value": "v", "partition": "-1"}, headers=HTMX),
                   400, "partition")
    assert_refused(http.post("/topics/no-such-topic/delete", data={"confirm": "nope"},
                             headers=HTMX), 400, "confirm")
    # wrong methods
    assert_refused(http.delete("/topics"), 405)
    assert_refused(http.put(f"/topics/{topic}"), 405)
    assert_still_up(console, http)


def test_operations_pages_refuse_bad_input(console: ConsoleProcess, http: httpx.Client,
                                           topic: str) -> None:
    """Groups, jobs, security: unknown and malformed names and forms over real HTTP."""
    missing = "no-such-group-" + "q" * 8
    for path in (f"/groups/{missing}", f"/fragments/group/{missing}"):
        assert_refused(http.get(path, headers=HTMX if "fragments" in path else {}), 404,
                       "does not exist")
    assert_refused(http.get("/groups/" + "g" * 5000), 400, "longer than")
    assert_refused(http.get(f"/charts/group/{'g' * 5000}"), 400)
    for target in (b"/groups/%ff%fe", b"/fragments/group/%00"):
        status, body = raw_get(console, target)
        assert 400 <= status < 500, (target, status, body[:300])
        assert b"Traceback" not in body
    reset = f"/actions/reset-offsets/{missing}"
    # (a group without offsets may get its first ones, as Kafka's tool allows; not so for an
    # unknown topic)
    assert_refused(http.post(reset, data={"topic": "no-such-topic", "to": "earliest",
                                          "action": "apply"}, headers=HTMX), 404)
    assert_refused(http.post(reset, data={"topic": "x" * 300, "to": "earliest"},
                             headers=HTMX), 400)
    assert_refused(http.post(reset, data={"topic": topic, "to": "offset",
                                          "offset": "9" * 100}, headers=HTMX), 400)
    assert_refused(http.post(reset, data={"topic": topic, "to": "earliest",
                                          "partitions": ",".join(["1"] * 10_000)},
                             headers=HTMX), 400)
    assert_refused(http.post(reset, data={"topic": "t" + "x" * (1 << 20)}, headers=HTMX),
                   (400, 413))
    assert_refused(http.get("/jobs", params={"job": "../../etc/passwd"}), 400)
    assert_refused(http.get("/jobs", params={"job": "x" * 10_000}), 400)
    acl = {"resource_type": "Topic", "name": topic, "pattern_type": "LITERAL",
           "principal": "User:alice", "host": "*", "operation": "Read", "permission": "Allow"}
    for bad in ({"resource_type": "Planet"}, {"pattern_type": "MATCH"},
                {"principal": "alice"}, {"principal": ""}, {"permission": "Maybe"},
                {"name": "x" * 10_000}):
        assert_refused(http.post("/actions/acls/add", data={**acl, **bad}, headers=HTMX),
                       (400, 413))
    assert_refused(http.post("/actions/acls/remove", data={**acl, "operation": "Fly"},
                             headers=HTMX), 400)
    assert_refused(http.post("/actions/acls/add", files={"name": ("a", b"b")}, headers=HTMX),
                   (400, 413))
    for page in ("/groups", "/tiering", "/jobs", "/security"):
        assert http.get(page).status_code == 200, page
    assert_still_up(console, http)


ZK_OUTAGE_PAGE_BOUND_S = 30.0
"""Bound for a page to answer while ZooKeeper is down (the catalog's calls are bounded)."""


def test_console_survives_a_zookeeper_outage(tmp_path: Path) -> None:
    """ZooKeeper stopped: pages answer within a bound with a 5xx naming the problem, never
    an internal error; ZooKeeper back: the console recovers by itself (its own ZooKeeper, so
    stopping it faults no other test)."""
    with DevCluster(tmp_path / "dev", brokers=1) as dev, \
            ConsoleProcess(dev.zookeeper_connect, tmp_path / "console") as console, \
            httpx.Client(base_url=console.url, timeout=ZK_OUTAGE_PAGE_BOUND_S * 2) as http:
        assert http.get("/").status_code == 200
        assert http.get("/topics").status_code == 200
        dev.stop_zookeeper()
        try:
            for path in ("/", "/topics", "/overview/live", "/groups", "/jobs", "/security",
                         "/tiering"):
                started = time.monotonic()
                answer = http.get(path, headers=HTMX if "live" in path else {})
                took = time.monotonic() - started
                assert took < ZK_OUTAGE_PAGE_BOUND_S, (path, took)
                assert "Traceback" not in answer.text, path
                assert answer.status_code != 500, (path, alert_text(answer.text))
                if answer.status_code >= 400:
                    assert alert_text(answer.text), (path, answer.text[:300])
            assert console.alive(), console.log()
        finally:
            dev.start_zookeeper()
        wait_until(lambda: 'data-health="healthy"' in http.get("/overview/live").text, 90,
                   lambda: f"the console did not recover after ZooKeeper came back:\n"
                   f"{console.log()[-3000:]}", ignore=(httpx.HTTPError,))
        assert http.get("/topics").status_code == 200
        assert_still_up(console, http)
