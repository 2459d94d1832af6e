"""The registry's REST API (Confluent's) over HTTP against a real ``loglake registry`` process on
its own cluster's ZooKeeper (global config and mode changes here touch no other test): ids,
subjects and versions, lookups, normalize, compatibility per level, soft and hard deletes,
references, config and mode (READONLY, IMPORT with given ids), Confluent's error codes and
bodies, and HTTPS with HTTP Basic auth against the cluster's SCRAM users."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from loglake.dev.harness import DevCluster
from tests.registry_process import (
    RegistryProcess,
    module_registry,
    own_cluster,
    registry_process,
)

MEDIA = "application/vnd.schemaregistry.v1+json"


def avro(name: str, *fields: dict[str, Any]) -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields)})


INT_A = {"name": "a", "type": "int"}
OPT_B = {"name": "b", "type": ["null", "string"], "default": None}
REQ_C = {"name": "c", "type": "string"}


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
        ) -> Iterator[DevCluster]:
    yield from own_cluster(tmp_path_factory, zookeeper_hosts, "registry-api")


@pytest.fixture(scope="module")
def registry(dev: DevCluster, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[RegistryProcess]:
    yield from module_registry(tmp_path_factory, dev.zookeeper_connect, "registry-api-log")


@pytest.fixture
def api(registry: RegistryProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=registry.url, timeout=30,
                      headers={"Content-Type": MEDIA}) as client:
        yield client


@pytest.fixture
def subject() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


def register(api: httpx.Client, subject: str, schema: str, *, expect: int = 200,
             **extra: Any) -> dict[str, Any]:
    params = extra.pop("params", None)
    got = api.post(f"/subjects/{subject}/versions", json={"schema": schema, **extra},
                   params=params)
    assert got.status_code == expect, got.text
    body: dict[str, Any] = got.json()
    return body


def error_of(response: httpx.Response) -> tuple[int, int]:
    body = response.json()
    assert isinstance(body["message"], str) and body["message"], body
    assert "Traceback" not in body["message"]
    return response.status_code, body["error_code"]


def test_root_types_and_content_type(api: httpx.Client) -> None:
    root = api.get("/")
    assert root.status_code == 200 and root.json() == {}
    assert root.headers["content-type"].startswith(MEDIA)
    assert sorted(api.get("/schemas/types").json()) == ["AVRO", "JSON", "PROTOBUF"]


def test_register_versions_ids_and_lookup(api: httpx.Client, subject: str) -> None:
    v1 = avro("R", INT_A)
    first = register(api, subject, v1)
    again = register(api, subject, v1)  # already registered: same id, no new version
    assert again["id"] == first["id"]
    other = register(api, subject + "-other", v1)  # same content elsewhere: same id
    assert other["id"] == first["id"]
    v2 = register(api, subject, avro("R", INT_A, OPT_B))
    assert v2["id"] != first["id"]
    assert api.get(f"/subjects/{subject}/versions").json() == [1, 2]
    latest = api.get(f"/subjects/{subject}/versions/latest").json()
    assert (latest["subject"], latest["version"], latest["id"]) == (subject, 2, v2["id"])
    assert "schemaType" not in latest  # AVRO is implied, as Confluent answers
    assert api.get(f"/subjects/{subject}/versions/-1").json() == latest
    assert json.loads(api.get(f"/subjects/{subject}/versions/1/schema").text) == json.loads(v1)
    assert json.loads(api.get(f"/schemas/ids/{first['id']}").json()["schema"]) == json.loads(v1)
    assert json.loads(api.get(f"/schemas/ids/{first['id']}/schema").text) == json.loads(v1)
    # ?subject= picks a context (Confluent): the id is served whichever subject is named, as a
    # deserializer asking with '<topic>-value' for an id registered under another subject needs
    by_other = api.get(f"/schemas/ids/{v2['id']}", params={"subject": subject + "-other"})
    assert by_other.status_code == 200 and "schema" in by_other.json()
    assert api.get(f"/schemas/ids/{first['id']}/subjects").json() == sorted(
        [subject, subject + "-other"])
    assert {(v["subject"], v["version"]) for v in api.get(
        f"/schemas/ids/{first['id']}/versions").json()} == {(subject, 1), (subject + "-other", 1)}
    assert subject in api.get("/subjects").json()
    assert api.get("/subjects", params={"subjectPrefix": subject + "-o"}).json() == [
        subject + "-other"]
    found = api.post(f"/subjects/{subject}", json={"schema": v1}).json()
    assert (found["version"], found["id"]) == (1, first["id"])
    listed = api.get("/schemas", params={"subjectPrefix": subject, "latestOnly": "true"}).json()
    assert {(s["subject"], s["version"]) for s in listed} == {(subject, 2),
                                                             (subject + "-other", 1)}


def test_normalize_gives_whitespace_variants_one_id(api: httpx.Client, subject: str) -> None:
    compact = avro("N", INT_A)
    spaced = json.dumps(json.loads(compact), indent=4)
    first = register(api, subject, compact, params={"normalize": "true"})
    second = register(api, subject + "-2", spaced, params={"normalize": "true"})
    assert second["id"] == first["id"]
    plain = register(api, subject + "-3", spaced + "\n")  # not normalized: its own text
    assert plain["id"] != first["id"]
    # a lookup finds the version whatever the whitespace
    found = api.post(f"/subjects/{subject}", json={"schema": spaced},
                     params={"normalize": "true"})
    assert found.status_code == 200 and found.json()["id"] == first["id"]


def test_errors_are_confluent_codes(api: httpx.Client, subject: str) -> None:
    assert error_of(api.get(f"/subjects/{subject}/versions")) == (404, 40401)
    assert error_of(api.get(f"/subjects/{subject}/versions/1")) == (404, 40401)
    register(api, subject, avro("E", INT_A))
    assert error_of(api.get(f"/subjects/{subject}/versions/7")) == (404, 40402)
    assert error_of(api.get(f"/subjects/{subject}/versions/zero")) == (422, 42202)
    assert error_of(api.get(f"/subjects/{subject}/versions/0")) == (422, 42202)
    assert error_of(api.get("/schemas/ids/987654")) == (404, 40403)
    assert error_of(api.post(f"/subjects/{subject}", json={"schema": avro("Other", INT_A)})
                    ) == (404, 40403)
    bad = api.post(f"/subjects/{subject}/versions", json={"schema": "{\"type\": \"recrd\"}"})
    assert error_of(bad) == (422, 42201)
    assert bad.json()["message"].count("Invalid schema") == 1  # one prefix, not the parser's too
    assert error_of(api.post(f"/subjects/{subject}/versions",
                             json={"schema": "{}", "schemaType": "XML"})) == (422, 42201)
    assert error_of(api.post(f"/subjects/{subject}/versions", json={"nothing": 1})
                    ) == (422, 42201)
    malformed = api.post(f"/subjects/{subject}/versions", content=b"{not json")
    assert error_of(malformed)[0] == 400
    assert error_of(api.get("/no/such/path"))[0] == 404
    assert error_of(api.put("/schemas/types"))[0] == 405
    assert error_of(api.put("/config", json={"compatibility": "SIDEWAYS"})) == (422, 42203)
    assert error_of(api.put("/mode", json={"mode": "FAST"})) == (422, 42204)
    reference = {"name": "x", "subject": subject + "-missing", "version": 1}
    assert error_of(api.post(f"/subjects/{subject}/versions",
                             json={"schema": avro("E", INT_A), "references": [reference]})
                    ) == (422, 42201)
    # plain application/json is accepted like Confluent's media type
    plain = api.get(f"/subjects/{subject}/versions", headers={"Accept": "application/json"})
    assert plain.status_code == 200


def test_compatibility_levels(api: httpx.Client, subject: str) -> None:
    """BACKWARD (the default) refuses a new required field; FORWARD refuses removing a
    field without default; FULL both; NONE anything; transitive levels check every version."""
    register(api, subject, avro("C", INT_A))
    assert api.get(f"/config/{subject}", params={"defaultToGlobal": "true"}).json() == {
        "compatibilityLevel": "BACKWARD"}
    refused = api.post(f"/subjects/{subject}/versions",
                       json={"schema": avro("C", INT_A, REQ_C)})
    assert error_of(refused) == (409, 409)
    check = api.post(f"/compatibility/subjects/{subject}/versions/latest",
                     json={"schema": avro("C", INT_A, REQ_C)}, params={"verbose": "true"})
    assert check.json()["is_compatible"] is False and check.json()["messages"]
    assert api.post(f"/compatibility/subjects/{subject}/versions",
                    json={"schema": avro("C", INT_A, OPT_B)}).json() == {"is_compatible": True}
    register(api, subject, avro("C", INT_A, OPT_B))  # compatible: v2

    assert api.put(f"/config/{subject}", json={"compatibility": "FORWARD"}).json() == {
        "compatibility": "FORWARD"}
    removes_a = avro("C", OPT_B)  # old readers need "a", which has no default
    assert error_of(api.post(f"/subjects/{subject}/versions", json={"schema": removes_a})
                    ) == (409, 409)
    register(api, subject, avro("C", INT_A, OPT_B, REQ_C))  # new field: old readers ignore it

    api.put(f"/config/{subject}", json={"compatibility": "FULL"})
    new_required = avro("C", INT_A, OPT_B, REQ_C, {"name": "d", "type": "string"})
    assert error_of(api.post(f"/subjects/{subject}/versions", json={"schema": new_required})
                    ) == (409, 409)  # backward fails: v3's data has no "d"
    api.put(f"/config/{subject}", json={"compatibility": "NONE"})
    register(api, subject, avro("C", {"name": "z", "type": "long"}))
    assert api.get(f"/subjects/{subject}/versions").json() == [1, 2, 3, 4]


def test_transitive_checks_every_version(api: httpx.Client, subject: str) -> None:
    """v1 {a: int}, v2 {} (dropping a: BACKWARD), v3 {a: string, default ""}: v3 reads v2's
    data (a takes its default) but not v1's (an int is not a string): BACKWARD accepts v3,
    BACKWARD_TRANSITIVE refuses it."""
    api.put(f"/config/{subject}", json={"compatibility": "BACKWARD"})
    register(api, subject, avro("T", INT_A))
    register(api, subject, avro("T"))
    v3 = avro("T", {"name": "a", "type": "string", "default": ""})
    assert api.post(f"/compatibility/subjects/{subject}/versions/latest",
                    json={"schema": v3}).json()["is_compatible"] is True
    api.put(f"/config/{subject}", json={"compatibility": "BACKWARD_TRANSITIVE"})
    assert error_of(api.post(f"/subjects/{subject}/versions", json={"schema": v3})
                    ) == (409, 409)
    api.put(f"/config/{subject}", json={"compatibility": "BACKWARD"})
    assert register(api, subject, v3)["version"] == 3


def test_soft_and_hard_deletes(api: httpx.Client, subject: str) -> None:
    first = register(api, subject, avro("D", INT_A))
    register(api, subject, avro("D", INT_A, OPT_B))
    # hard delete before a soft one: refused (40407 for a version, 40405 for the subject)
    assert error_of(api.delete(f"/subjects/{subject}/versions/1",
                               params={"permanent": "true"})) == (404, 40407)
    assert error_of(api.delete(f"/subjects/{subject}", params={"permanent": "true"})
                    ) == (404, 40405)
    assert api.delete(f"/subjects/{subject}/versions/1").json() == 1
    assert error_of(api.delete(f"/subjects/{subject}/versions/1")) == (404, 40406)
    assert api.get(f"/subjects/{subject}/versions").json() == [2]
    assert api.get(f"/subjects/{subject}/versions", params={"deleted": "true"}).json() == [1, 2]
    assert error_of(api.get(f"/subjects/{subject}/versions/1")) == (404, 40402)
    assert api.get(f"/subjects/{subject}/versions/1", params={"deleted": "true"}).json()[
        "id"] == first["id"]
    assert api.delete(f"/subjects/{subject}").json() == [2]
    assert subject not in api.get("/subjects").json()
    assert subject in api.get("/subjects", params={"deleted": "true"}).json()
    assert error_of(api.delete(f"/subjects/{subject}")) == (404, 40404)
    assert error_of(api.get(f"/subjects/{subject}/versions")) == (404, 40401)
    # registering again continues the numbering after soft-deleted versions
    assert register(api, subject, avro("D", INT_A))["version"] == 3
    api.delete(f"/subjects/{subject}")
    assert api.delete(f"/subjects/{subject}", params={"permanent": "true"}).json() == [1, 2, 3]
    assert subject not in api.get("/subjects", params={"deleted": "true"}).json()
    # ids stay readable after every version using them is gone
    assert api.get(f"/schemas/ids/{first['id']}").status_code == 200
    assert register(api, subject, avro("D", INT_A))["version"] == 1


def test_references_and_referenced_by(api: httpx.Client, subject: str) -> None:
    """An Avro named type from another subject; a referenced version cannot be deleted."""
    address = json.dumps({"type": "record", "name": "Address", "namespace": "com.example",
                          "fields": [{"name": "city", "type": "string"}]})
    person = json.dumps({"type": "record", "name": "Person", "namespace": "com.example",
                         "fields": [{"name": "home", "type": "com.example.Address"}]})
    base = register(api, subject + "-address", address)
    ref = {"name": "com.example.Address", "subject": subject + "-address", "version": 1}
    without = api.post(f"/subjects/{subject}/versions", json={"schema": person})
    assert error_of(without) == (422, 42201)  # the named type is unknown without it
    made = register(api, subject, person, references=[ref])
    got = api.get(f"/schemas/ids/{made['id']}").json()
    assert got["references"] == [ref]
    assert api.get(f"/subjects/{subject}-address/versions/1/referencedby").json() == [
        made["id"]]
    assert error_of(api.delete(f"/subjects/{subject}-address/versions/1")) == (422, 42206)
    assert error_of(api.delete(f"/subjects/{subject}-address")) == (422, 42206)
    api.delete(f"/subjects/{subject}")
    assert api.get(f"/subjects/{subject}-address/versions/1/referencedby").json() == []
    assert api.delete(f"/subjects/{subject}-address/versions/1").json() == 1
    assert base["id"] > 0


def test_config_endpoints(api: httpx.Client, subject: str) -> None:
    assert api.get("/config").json() == {"compatibilityLevel": "BACKWARD"}
    assert error_of(api.get(f"/config/{subject}")) == (404, 40408)
    api.put(f"/config/{subject}", json={"compatibility": "full_transitive"})
    assert api.get(f"/config/{subject}").json() == {"compatibilityLevel": "FULL_TRANSITIVE"}
    assert api.delete(f"/config/{subject}").json() == {"compatibilityLevel": "FULL_TRANSITIVE"}
    assert api.get(f"/config/{subject}", params={"defaultToGlobal": "true"}).json() == {
        "compatibilityLevel": "BACKWARD"}
    try:
        assert api.put("/config", json={"compatibility": "NONE"}).json() == {
            "compatibility": "NONE"}
        assert api.get(f"/config/{subject}", params={"defaultToGlobal": "true"}).json() == {
            "compatibilityLevel": "NONE"}
    finally:
        assert api.delete("/config").json() == {"compatibilityLevel": "NONE"}
    assert api.get("/config").json() == {"compatibilityLevel": "BACKWARD"}


def test_modes_readonly_and_import(api: httpx.Client, subject: str) -> None:
    register(api, subject, avro("M", INT_A))
    assert api.get("/mode").json() == {"mode": "READWRITE"}
    assert error_of(api.get(f"/mode/{subject}")) == (404, 40409)
    assert api.put(f"/mode/{subject}", json={"mode": "READONLY"}).json() == {"mode": "READONLY"}
    assert error_of(api.post(f"/subjects/{subject}/versions",
                             json={"schema": avro("M", INT_A, OPT_B)})) == (422, 42205)
    assert error_of(api.delete(f"/subjects/{subject}")) == (422, 42205)
    assert api.get(f"/subjects/{subject}/versions").json() == [1]  # reads still work
    assert api.delete(f"/mode/{subject}").json() == {"mode": "READONLY"}
    register(api, subject, avro("M", INT_A, OPT_B))

    # IMPORT: a non-empty subject needs force; ids and versions are kept as given
    imported = subject + "-import"
    register(api, imported, avro("Seed", INT_A))
    assert error_of(api.put(f"/mode/{imported}", json={"mode": "IMPORT"})) == (422, 42205)
    api.delete(f"/subjects/{imported}")
    api.delete(f"/subjects/{imported}", params={"permanent": "true"})
    assert api.put(f"/mode/{imported}", json={"mode": "IMPORT"}).json() == {"mode": "IMPORT"}
    high_id = 50_000 + uuid.uuid4().int % 10_000
    got = register(api, imported, avro("Imp", REQ_C), id=high_id, version=5)
    assert got == {"id": high_id, "version": 5}
    # no compatibility check in IMPORT mode, and the id is taken now
    register(api, imported, avro("Imp", {"name": "c", "type": "int"}), id=high_id + 1,
             version=6)
    clash = api.post(f"/subjects/{imported}/versions",
                     json={"schema": avro("Other", INT_A), "id": high_id, "version": 7})
    assert error_of(clash) == (422, 42205)
    assert api.get(f"/subjects/{imported}/versions").json() == [5, 6]
    assert json.loads(api.get(f"/schemas/ids/{high_id}/schema").text)["name"] == "Imp"
    api.delete(f"/mode/{imported}")
    # an id given outside IMPORT mode is refused unless it is the schema's own
    assert error_of(api.post(f"/subjects/{subject}/versions",
                             json={"schema": avro("M", INT_A, REQ_C), "id": 99_999})
                    ) == (422, 42205)


def test_basic_auth_and_https(dev: DevCluster, tmp_path: Path) -> None:
    """--certfile serves HTTPS; --basic-auth accepts exactly the SCRAM users' passwords."""
    from kazoo.client import KazooClient

    from loglake.broker.security.scram_credentials import store_user_credential
    from loglake.catalog.entity_configs import EntityConfigStore
    from loglake.dev.certs import ensure_dev_certificates

    certificates = ensure_dev_certificates(tmp_path / "certs")
    zk = KazooClient(hosts=dev.zookeeper_connect)
    zk.start(timeout=30)
    try:
        store_user_credential(EntityConfigStore(zk), "alice", "SCRAM-SHA-256", "alice-secret")
    finally:
        zk.stop()
        zk.close()
    with registry_process(tmp_path / "secure.log", dev.zookeeper_connect,
                          extra=["--certfile", str(certificates.broker), "--basic-auth"],
                          ca=str(certificates.ca)) as secured:
        assert secured.url.startswith("https://")
        verify = secured.verify()
        anonymous = httpx.get(secured.url + "/subjects", verify=verify, timeout=30)
        assert error_of(anonymous) == (401, 401)
        assert anonymous.headers["www-authenticate"].startswith("Basic")
        wrong = httpx.get(secured.url + "/subjects", auth=("alice", "nope"), verify=verify,
                          timeout=30)
        assert wrong.status_code == 401
        unknown = httpx.get(secured.url + "/subjects", auth=("mallory", "alice-secret"),
                            verify=verify, timeout=30)
        assert unknown.status_code == 401
        for _ in range(2):  # the second one from the cache
            ok = httpx.get(secured.url + "/subjects", auth=("alice", "alice-secret"),
                           verify=verify, timeout=30)
            assert ok.status_code == 200, ok.text
        # failed logins are limited per address (10 within a minute, the two above count):
        # then 429 with Retry-After before any check; alice's accepted login still passes
        statuses = [httpx.get(secured.url + "/subjects", auth=("alice", f"guess-{i}"),
                              verify=verify, timeout=30) for i in range(9)]
        assert [r.status_code for r in statuses[:8]] == [401] * 8
        assert error_of(statuses[8]) == (429, 429)
        assert int(statuses[8].headers["retry-after"]) >= 1
        ok = httpx.get(secured.url + "/subjects", auth=("alice", "alice-secret"),
                       verify=verify, timeout=30)
        assert ok.status_code == 200, ok.text
        with pytest.raises(httpx.HTTPError):  # the server's certificate is not trusted
            httpx.get(secured.url + "/", timeout=10)


def test_secured_dev_cluster_runs_an_https_registry_with_basic_auth(
        tmp_path: Path, zookeeper_hosts: str) -> None:
    """DevCluster(security="sasl_ssl", registry=True) (what ``loglake dev up --security``
    does): the registry speaks HTTPS with the cluster's CA, wants the admin's basic auth, and
    the Java-form client properties carry its URL and user info; confluent-kafka's serializer
    and deserializer work through it against the secured broker."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from loglake.client.security import read_properties
    from tests.clients import consume_messages

    with DevCluster(tmp_path / "secure", zookeeper=zookeeper_hosts, security="sasl_ssl",
                    registry=True) as secured:
        config = secured.registry_config()
        assert secured.registry_url.startswith("https://127.0.0.1:")
        assert f"schema.registry.url={secured.registry_url}" in secured.info.summary_lines()
        java = read_properties(secured.info.java_client_properties or "")
        assert java["schema.registry.url"] == secured.registry_url
        assert java["basic.auth.user.info"] == config["basic.auth.user.info"]
        anonymous = httpx.get(secured.registry_url + "/subjects",
                              verify=ssl_context(config["ssl.ca.location"]), timeout=30)
        assert anonymous.status_code == 401

        client = SchemaRegistryClient(config)
        topic = "secured-avro"
        secured.create_topic(topic)
        serializer = AvroSerializer(client, avro("S", INT_A))
        ctx = SerializationContext(topic, MessageField.VALUE)
        producer = Producer(secured.client_config())
        for index in range(3):
            producer.produce(topic, value=serializer({"a": index}, ctx))
        assert producer.flush(30) == 0
        consumer = Consumer({**secured.client_config(), "group.id": "secured-registry",
                             "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe([topic])
            got = consume_messages(consumer, 3, timeout=60)
        finally:
            consumer.close()
        deserializer = AvroDeserializer(client)
        assert [deserializer(m.value(), ctx) for m in got] == [{"a": i} for i in range(3)]
        assert client.get_subjects() == [f"{topic}-value"]


def ssl_context(ca: str) -> Any:
    import ssl

    return ssl.create_default_context(cafile=ca)


def test_keep_alive_requests_are_not_delayed(api: httpx.Client) -> None:
    """Responses on a kept-alive connection go out at once (TCP_NODELAY on the accepted
    sockets): without it every request of a client such as confluent-kafka's waits for the
    client's delayed ACK, about 40 ms."""
    import statistics
    import time

    api.get("/schemas/types")
    timings = []
    for _ in range(21):
        started = time.perf_counter()
        assert api.get("/schemas/types").status_code == 200
        timings.append(time.perf_counter() - started)
    assert statistics.median(timings) < 0.025, timings
