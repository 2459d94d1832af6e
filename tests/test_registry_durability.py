"""The registry keeps nothing of its own: a ``loglake registry`` process SIGKILLed and started
again serves every id, version, deletion mark, config and mode it handed out; two instances on
the same ZooKeeper agree, and concurrent registrations on both give one id per schema content
and one version number per registration (never two registrations with the same version, never a
reused id)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from loglake.dev.harness import DevCluster
from tests.registry_process import own_cluster, registry_process

SUBJECTS = 5
VERSIONS = 6


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
        ) -> Iterator[DevCluster]:
    yield from own_cluster(tmp_path_factory, zookeeper_hosts, "registry-durability")


def schema(name: str, fields: int) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [
        {"name": f"f{i}", "type": ["null", "long"], "default": None} for i in range(fields)]})


def state(url: str) -> dict[str, Any]:
    """Everything a client can read: subjects (deleted ones too) with every version's id and
    deletion mark, every id's schema, configs and modes."""
    with httpx.Client(base_url=url, timeout=30) as api:
        subjects = api.get("/subjects", params={"deleted": "true"}).json()
        live = set(api.get("/subjects").json())
        result: dict[str, Any] = {"subjects": subjects, "live": sorted(live), "versions": {},
                                  "schemas": {}, "config": {}, "mode": {}}
        for subject in subjects:
            numbers = api.get(f"/subjects/{subject}/versions", params={"deleted": "true"}).json()
            shown = set(api.get(f"/subjects/{subject}/versions").json()) if subject in live \
                else set()
            result["versions"][subject] = [
                (n, api.get(f"/subjects/{subject}/versions/{n}",
                            params={"deleted": "true"}).json()["id"], n not in shown)
                for n in numbers]
            for _n, schema_id, _deleted in result["versions"][subject]:
                result["schemas"][schema_id] = api.get(f"/schemas/ids/{schema_id}").json()
            result["config"][subject] = api.get(f"/config/{subject}",
                                                params={"defaultToGlobal": "true"}).json()
            result["mode"][subject] = api.get(f"/mode/{subject}",
                                              params={"defaultToGlobal": "true"}).json()
        result["global"] = (api.get("/config").json(), api.get("/mode").json())
    return result


def test_sigkill_and_restart_keep_every_id_and_version(dev: DevCluster, tmp_path: Path
                                                       ) -> None:
    with registry_process(tmp_path / "registry.log", dev.zookeeper_connect) as registry:
        api = httpx.Client(base_url=registry.url, timeout=30)
        ids = set()
        for s in range(SUBJECTS):
            for v in range(VERSIONS):
                got = api.post(f"/subjects/kill-{s}/versions",
                               json={"schema": schema(f"K{s}", v)}).json()
                assert got["version"] == v + 1, got
                ids.add(got["id"])
        api.delete("/subjects/kill-0/versions/2")
        api.delete("/subjects/kill-1")
        api.put("/config/kill-2", json={"compatibility": "FULL"})
        api.put("/mode/kill-3", json={"mode": "READONLY"})
        before = state(registry.url)
        assert len(ids) == SUBJECTS * VERSIONS

        registry.kill()
        assert not registry.alive()
        registry.start()
        assert state(registry.url) == before

        # ids are never handed out twice, not even after a hard delete of their subject
        api.delete("/subjects/kill-1", params={"permanent": "true"})
        fresh = api.post("/subjects/kill-4/versions",
                         json={"schema": schema("K4", VERSIONS + 1)}).json()
        assert fresh["id"] > max(ids) and fresh["version"] == VERSIONS + 1
        api.close()


def _register_all(url: str, subject: str, text: str, barrier: threading.Barrier
                  ) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=60) as api:
        barrier.wait(timeout=60)
        got = api.post(f"/subjects/{subject}/versions", json={"schema": text})
        assert got.status_code == 200, got.text
        body: dict[str, Any] = got.json()
        return body


def test_two_instances_agree_under_concurrent_registrations(dev: DevCluster,
                                                            tmp_path: Path) -> None:
    with registry_process(tmp_path / "a.log", dev.zookeeper_connect) as first, \
            registry_process(tmp_path / "b.log", dev.zookeeper_connect) as second:
        urls = [first.url, second.url]
        # the same new schema registered 8 times at once on both instances: one id, one version
        same = schema("Same", 3)
        barrier = threading.Barrier(8)
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: _register_all(urls[i % 2], "same", same, barrier),
                                    range(8)))
        assert len({a["id"] for a in answers}) == 1, answers
        assert {a["version"] for a in answers} == {1}
        for url in urls:
            assert httpx.get(f"{url}/subjects/same/versions", timeout=30).json() == [1]

        # different schemas on one subject from both: every one gets its own version
        httpx.put(f"{first.url}/config/many", json={"compatibility": "NONE"}, timeout=30)
        texts = [schema(f"Many{i}", i % 3) for i in range(10)]
        barrier = threading.Barrier(10)
        with ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(
                lambda i: _register_all(urls[i % 2], "many", texts[i], barrier), range(10)))
        assert sorted(a["version"] for a in answers) == list(range(1, 11))
        assert len({a["id"] for a in answers}) == 10
        # same content under another subject (registered on the other instance): same id
        again = _register_all(second.url, "many-copy", texts[0], threading.Barrier(1))
        assert again["id"] == answers[0]["id"]
        assert state(first.url) == state(second.url)


def test_instance_started_later_serves_earlier_ids(dev: DevCluster, tmp_path: Path) -> None:
    with registry_process(tmp_path / "early.log", dev.zookeeper_connect) as early:
        made = httpx.post(f"{early.url}/subjects/early/versions",
                          json={"schema": schema("Early", 2)}, timeout=30).json()
    with registry_process(tmp_path / "late.log", dev.zookeeper_connect) as late:
        got = httpx.get(f"{late.url}/schemas/ids/{made['id']}", timeout=30).json()
        assert json.loads(got["schema"])["name"] == "Early"
        again = httpx.post(f"{late.url}/subjects/early/versions",
                           json={"schema": schema("Early", 2)}, timeout=30).json()
        assert again == made

