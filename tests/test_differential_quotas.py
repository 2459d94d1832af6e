"""Differential tests of the quota APIs' bad input: the same raw requests to a loglake broker and
to an Apache Kafka 3.9 broker (ZooKeeper mode, the peer of loglake.dev.kafka_peer), comparing
the error codes (never messages, which differ in wording).

- AlterClientQuotas with malformed, oversized, duplicate and mixed entities and keys
  (``ip`` entities that are host names or garbage, keys an entity type does not take,
  fractional/huge/zero/negative/NaN/infinite values, repeated entities), ``validate_only``
  and not; DescribeClientQuotas with bad filters.
- CreateTopics / CreatePartitions / DeleteTopics at every version both serve with a
  ``controller_mutation_rate`` quota on the client id: the strict versions (CreateTopics v6+,
  CreatePartitions v3+, DeleteTopics v5+) answer THROTTLING_QUOTA_EXCEEDED once the bucket is
  empty, the older ones accept and throttle; duplicate names, empty names and bad counts in the
  same request are answered as Kafka does.

Both brokers are single-broker clusters with ``controller.quota.window.num=1`` and
``controller.quota.window.size.seconds=1`` so a KIP-599 burst is the rate itself; the rate is
0.2 partitions/s, so the 3 partitions of a step's first create leave the bucket ~14 s below
zero: its second create meets the empty bucket even on a loaded box (with 2/s the debt lasted
0.5 s and a slow topic creation let it refill). Each step uses a fresh connection (a throttled
connection is muted for its throttle time) and its own client id, so no step waits for another's
bucket. A difference fails the test unless listed
in :data:`KNOWN_DIFFERENCES` with the reason.

Needs the ``kafka`` jar set (``python -m loglake.jvm fetch kafka``): skipped, saying so, only
when it is absent.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from loglake.dev.harness import DevCluster, wait_until
from loglake.dev.kafka_peer import KafkaPeer
from tests.differential_util import Target
from tests.kafka_peer_plugin import require_kafka_jars
from tests.wire import WireClient

ALTER_QUOTAS, DESCRIBE_QUOTAS = 49, 48
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
MUTATION_RATE = 0.2
WINDOW = {"controller.quota.window.num": "1", "controller.quota.window.size.seconds": "1"}

ZK_MODE = ("Kafka 3.9 in ZooKeeper mode validates with ZkAdminManager.alterClientQuotas; "
           "loglake follows Kafka 4.0's ClientQuotaControlManager (broker/quotas/alteration.py), "
           "which is stricter: ")
_ALTER_DIFFERENCES = {
    "ip host name": "Kafka 3.9 resolves a host name and stores the quota under it; loglake "
                    "refuses names that are not IP literals (brokers do not resolve names)",
    "ip v6 ok": "Kafka 3.9 refuses an IPv6 literal containing ':' in an ip entity; loglake "
                "accepts IPv6 addresses (connections from IPv6 clients need them)",
    "ip v6 long form ok": "as ip v6 ok",
    "ip zero": "Kafka 3.9 stores a zero connection_creation_rate; 4.0 refuses values <= 0",
    "ip twice": "Kafka 3.9 keeps the last of repeated entity types (a map); 4.0 refuses",
    "user twice in entity": "as ip twice",
    "user mutation rate nan": "Kafka 3.9 stores NaN; 4.0 refuses values that are not > 0",
    "user duplicate key": "Kafka 3.9 applies the last of repeated keys; 4.0 refuses the entry",
}
KNOWN_DIFFERENCES: dict[tuple[str, str], str] = {
    **{("alter_quotas_bad_input", f"{case} (validate_only={flag})"): ZK_MODE + why
       for case, why in _ALTER_DIFFERENCES.items() for flag in (True, False)},
    ("alter_quotas_bad_input", "all in one v0"): ZK_MODE + "the cases above in one request",
    **{("describe_quotas_bad_filters", f"{case} strict={strict}"): why
       for case, why in {
           "unknown match type": "Kafka 3.9 (ZooKeeper mode) fails with UNKNOWN_SERVER_ERROR; "
                                 "loglake answers INVALID_REQUEST as Kafka 4.0 does",
           "exact without name": "as unknown match type",
           "default with name": "Kafka 3.9 ignores the stray match string; loglake refuses it "
                                "with INVALID_REQUEST as Kafka 4.0 does",
           "specified with name": "as default with name",
       }.items() for strict in (False, True)},
    ("alter_quotas_bad_input", "entity twice"):
        ZK_MODE + "an entity repeated in one request: Kafka 3.9 applies both and answers once "
        "without error; 4.0 applies the first and answers INVALID_REQUEST 'Ignoring duplicate "
        "entity'",
    ("delete_topics_by_name_and_id", "v6 neither"):
        "an entry with neither a name nor an id: Kafka 3.9 (ZooKeeper mode) authorizes the "
        "null name and answers TOPIC_AUTHORIZATION_FAILED; loglake answers INVALID_REQUEST "
        "'Neither topic name nor id were specified.' as Kafka 4.0's ControllerApis does",
}
"""(scenario, observation) -> why loglake answers differently from Kafka 3.9 (all of them:
loglake validates AlterClientQuotas as Kafka 4.0 does; docs/KAFKA_DIFFERENCES.md)."""


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory,
            zookeeper_hosts: str) -> Iterator[tuple[Target, Target]]:
    require_kafka_jars()
    data = tmp_path_factory.mktemp("differential-quotas")
    with DevCluster(data / "loglake", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=WINDOW) as dev, \
            KafkaPeer(data / "kafka", zookeeper=zookeeper_hosts, brokers=1,
                      overrides=WINDOW) as peer:
        yield Target("loglake", dev), Target("kafka", peer)


def _wire(target: Target, client_id: str = "wire-test") -> WireClient:
    wire = WireClient.connect(target.bootstrap_servers, timeout=30)
    wire.client_id = client_id
    return wire


def _compare(scenario: Callable[[Target], dict[str, Any]],
             targets: tuple[Target, Target]) -> dict[str, Any]:
    loglake, kafka = (scenario(target) for target in targets)
    name = scenario.__name__
    differing = {key: {"loglake": loglake.get(key), "kafka": value}
                 for key, value in kafka.items()
                 if (name, key) not in KNOWN_DIFFERENCES and loglake.get(key) != value}
    print(f"{name} (both): {_short(loglake)}")
    assert not differing, f"{name}: loglake and Kafka differ:\n" + "\n".join(
        f"  {key}: loglake {_short(v['loglake'])} kafka {_short(v['kafka'])}"
        for key, v in differing.items())
    return loglake


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 300 else text[:300] + "..."


# ------------------------------------------------------------------ AlterClientQuotas

def _entry(entity: list[tuple[str, str | None]], ops: list[tuple[str, float, bool]]
           ) -> dict[str, Any]:
    return {"entity": [{"entity_type": kind, "entity_name": name} for kind, name in entity],
            "ops": [{"key": key, "value": value, "remove": remove}
                    for key, value, remove in ops]}


IP_RATE = "connection_creation_rate"
BAD_ALTERS: dict[str, dict[str, Any]] = {
    "ip host name": _entry([("ip", "localhost")], [(IP_RATE, 5, False)]),
    "ip garbage": _entry([("ip", "1.2.3.4.5")], [(IP_RATE, 5, False)]),
    "ip with port": _entry([("ip", "127.0.0.1:9092")], [(IP_RATE, 5, False)]),
    "ip cidr": _entry([("ip", "10.0.0.0/8")], [(IP_RATE, 5, False)]),
    "ip 10 kB": _entry([("ip", "1" * 10_000)], [(IP_RATE, 5, False)]),
    "ip nul byte": _entry([("ip", "127.0.0.1\x00")], [(IP_RATE, 5, False)]),
    "ip empty": _entry([("ip", "")], [(IP_RATE, 5, False)]),
    "ip v6 ok": _entry([("ip", "::1")], [(IP_RATE, 5, False)]),
    "ip v6 long form ok": _entry([("ip", "0:0:0:0:0:0:0:2")], [(IP_RATE, 5, False)]),
    "ip default ok": _entry([("ip", None)], [(IP_RATE, 7, False)]),
    "ip byte rate key": _entry([("ip", "127.0.0.9")], [("producer_byte_rate", 5, False)]),
    "ip fractional": _entry([("ip", "127.0.0.9")], [(IP_RATE, 1.5, False)]),
    "ip over INT": _entry([("ip", "127.0.0.9")], [(IP_RATE, 2.0 ** 31, False)]),
    "ip at INT max": _entry([("ip", "127.0.0.9")], [(IP_RATE, 2.0 ** 31 - 1, False)]),
    "ip zero": _entry([("ip", "127.0.0.9")], [(IP_RATE, 0, False)]),
    "ip negative": _entry([("ip", "127.0.0.9")], [(IP_RATE, -3, False)]),
    "ip with user": _entry([("ip", "127.0.0.9"), ("user", "u")], [(IP_RATE, 5, False)]),
    "ip twice": _entry([("ip", "127.0.0.9"), ("ip", "127.0.0.8")], [(IP_RATE, 5, False)]),
    "ip remove unknown key": _entry([("ip", "127.0.0.9")], [("no.such.key", 0, True)]),
    "ip no ops": _entry([("ip", "127.0.0.10")], []),
    "user ip key": _entry([("user", "u-hostile")], [(IP_RATE, 5, False)]),
    "user unknown key": _entry([("user", "u-hostile")], [("no.such.key", 5, False)]),
    "user byte rate fractional": _entry([("user", "u-hostile")],
                                        [("producer_byte_rate", 10.5, False)]),
    "user byte rate huge": _entry([("user", "u-hostile")],
                                  [("producer_byte_rate", 1e30, False)]),
    "user mutation rate ok": _entry([("user", "u-hostile")],
                                    [("controller_mutation_rate", 0.5, False)]),
    "user mutation rate nan": _entry([("user", "u-hostile")],
                                     [("controller_mutation_rate", math.nan, False)]),
    "user request pct huge": _entry([("user", "u-hostile")],
                                    [("request_percentage", 1e300, False)]),
    "user duplicate key": _entry([("user", "u-dup")], [("producer_byte_rate", 5, False),
                                                       ("producer_byte_rate", 6, False)]),
    "user twice in entity": _entry([("user", "a"), ("user", "b")],
                                   [("producer_byte_rate", 5, False)]),
    "unknown entity type": _entry([("group", "g")], [("producer_byte_rate", 5, False)]),
    "empty entity": _entry([], [("producer_byte_rate", 5, False)]),
    "empty user name": _entry([("user", "")], [("producer_byte_rate", 5, False)]),
    "client-id 10 kB ok": _entry([("client-id", "c" * 10_000)],
                                 [("producer_byte_rate", 5, False)]),
}


def alter_quotas_bad_input(target: Target) -> dict[str, Any]:
    """Each bad entry alone (validate_only and not), then all of them in one request."""
    out: dict[str, Any] = {}
    with _wire(target) as wire:
        for validate_only in (True, False):
            for name, entry in BAD_ALTERS.items():
                response = wire.request(ALTER_QUOTAS, 1, {"entries": [entry],
                                                          "validate_only": validate_only})
                out[f"{name} (validate_only={validate_only})"] = [
                    e.error_code for e in response.entries]
        together = wire.request(ALTER_QUOTAS, 0, {"entries": list(BAD_ALTERS.values()),
                                                  "validate_only": True})
        out["all in one v0"] = sorted((str([(x.entity_type, (x.entity_name or "")[:40])
                                            for x in e.entity]), int(e.error_code))
                                      for e in together.entries)
        # the same entity twice in one request
        twice = _entry([("user", "u-twice")], [("producer_byte_rate", 5, False)])
        response = wire.request(ALTER_QUOTAS, 1, {"entries": [twice, twice],
                                                  "validate_only": False})
        out["entity twice: entries"] = len(response.entries)
        out["entity twice"] = sorted(e.error_code for e in response.entries)
        out["described after"] = _described(wire, "user", "u-twice")
    return out


def _described(wire: WireClient, kind: str, name: str) -> Any:
    response = wire.request(DESCRIBE_QUOTAS, 1, {"components": [
        {"entity_type": kind, "match_type": 0, "match": name}], "strict": False})
    if response.error_code != ErrorCode.none:
        return response.error_code
    return sorted((v.key, v.value) for e in response.entries for v in e.values)


BAD_FILTERS: dict[str, list[dict[str, Any]]] = {
    "unknown match type": [{"entity_type": "user", "match_type": 7, "match": None}],
    "exact without name": [{"entity_type": "user", "match_type": 0, "match": None}],
    "default with name": [{"entity_type": "user", "match_type": 1, "match": "x"}],
    "specified with name": [{"entity_type": "ip", "match_type": 2, "match": "x"}],
    "type twice": [{"entity_type": "user", "match_type": 2, "match": None}] * 2,
    "unknown type": [{"entity_type": "group", "match_type": 2, "match": None}],
    "empty type": [{"entity_type": "", "match_type": 2, "match": None}],
    "ip with user": [{"entity_type": "ip", "match_type": 2, "match": None},
                     {"entity_type": "user", "match_type": 2, "match": None}],
    "ip host name": [{"entity_type": "ip", "match_type": 0, "match": "localhost"}],
    "ip 10 kB": [{"entity_type": "ip", "match_type": 0, "match": "9" * 10_000}],
    "no components": [],
}


def describe_quotas_bad_filters(target: Target) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with _wire(target) as wire:
        for name, components in BAD_FILTERS.items():
            for strict in (False, True):
                response = wire.request(DESCRIBE_QUOTAS, 1, {"components": components,
                                                             "strict": strict})
                out[f"{name} strict={strict}"] = response.error_code
    return out


def test_alter_client_quotas_bad_input(targets: tuple[Target, Target]) -> None:
    loglake = _compare(alter_quotas_bad_input, targets)
    assert loglake["ip host name (validate_only=True)"] == [ErrorCode.invalid_request]
    assert loglake["ip default ok (validate_only=False)"] == [ErrorCode.none]


def test_describe_client_quotas_bad_filters(targets: tuple[Target, Target]) -> None:
    loglake = _compare(describe_quotas_bad_filters, targets)
    assert loglake["unknown match type strict=False"] == ErrorCode.invalid_request


# ----------------------------------------------- topic mutations under a mutation quota

def _set_mutation_rate(target: Target, client_id: str) -> None:
    with _wire(target) as wire:
        response = wire.request(ALTER_QUOTAS, 1, {"entries": [_entry(
            [("client-id", client_id)], [("controller_mutation_rate", MUTATION_RATE, False)])],
            "validate_only": False})
        assert [e.error_code for e in response.entries] == [ErrorCode.none]

    def seen() -> bool:
        with _wire(target) as wire:
            return _described(wire, "client-id", client_id) == [
                ("controller_mutation_rate", MUTATION_RATE)]

    wait_until(seen, 30, f"{target.name}: the mutation quota of {client_id}")


def _create_body(version: int, topics: list[tuple[str, int]]) -> dict[str, Any]:
    return {"topics": [{"name": name, "num_partitions": count, "replication_factor": 1,
                        "assignments": [], "configs": []} for name, count in topics],
            "timeout_ms": 30_000, "validate_only": False}


class Throttles:
    """The longest throttle time a step's answers carried."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def saw(self, response: Any) -> bool:
        throttle = getattr(response, "throttle_time", None)
        seconds = throttle.total_seconds() if throttle is not None else 0.0
        self.seconds = max(self.seconds, seconds)
        return seconds > 0


def mutations_under_quota(target: Target) -> dict[str, Any]:
    """Per CreateTopics version: a create over the burst (accepted: the bucket was not empty),
    then one with a new topic, a name twice, an empty name and bad partition counts while the
    bucket is below zero; per CreatePartitions version a topic named twice and an unknown one.
    (DeleteTopics under the quota is left out: Kafka 3.9 deletes in a hash set's order, so
    which topic of a request meets the empty bucket differs.)"""
    out: dict[str, Any] = {}
    run = uuid.uuid4().hex[:6]
    throttles = Throttles()
    for version in range(2, 8):
        client = f"hostile-create-{run}-v{version}"
        _set_mutation_rate(target, client)
        first, second, dup = (f"mq-{run}-{version}-{i}" for i in range(3))
        with _wire(target, client) as wire:
            response = wire.request(CREATE_TOPICS, version, _create_body(version, [(first, 3)]))
            out[f"create v{version} over burst"] = [t.error_code for t in response.topics]
            throttles.saw(response)
        with _wire(target, client) as wire:
            response = wire.request(CREATE_TOPICS, version, _create_body(
                version, [(second, 1), (dup, 1), (dup, 1), ("", 1), (f"{second}-z", 0),
                          (f"{second}-n", -7)]))
            out[f"create v{version} bucket empty"] = sorted(
                (t.name.replace(run, "RUN"), int(t.error_code)) for t in response.topics)
            out[f"create v{version} throttled"] = throttles.saw(response)
    client = f"hostile-partitions-{run}"
    _set_mutation_rate(target, client)
    for version in range(0, 4):
        # a request naming one topic twice and an unknown one: Kafka answers the repeated
        # topic once (INVALID_REQUEST), the unknown one UNKNOWN_TOPIC_OR_PARTITION
        with _wire(target, client) as wire:
            topic = f"mq-{run}-{max(version, 2)}-0"
            response = wire.request(CREATE_PARTITIONS, version, {"topics": [
                {"name": topic, "count": 9, "assignments": None},
                {"name": topic, "count": 10, "assignments": None},
                {"name": f"mq-{run}-none", "count": 2, "assignments": None}],
                "timeout_ms": 30_000, "validate_only": False})
            out[f"partitions v{version} duplicate and unknown"] = sorted(
                (r.name.replace(run, "RUN"), int(r.error_code)) for r in response.results)
    return out


def delete_topics_by_name_and_id(target: Target) -> dict[str, Any]:
    """DeleteTopics v6 entries naming a topic by name and id at once, by neither, by an
    unknown id; v1-v5 an empty and a 300-character name."""
    out: dict[str, Any] = {}
    run = uuid.uuid4().hex[:6]
    zero = uuid.UUID(int=0)
    with _wire(target) as wire:
        for version in range(1, 6):
            response = wire.request(DELETE_TOPICS, version, {
                "topic_names": ["", "x" * 300, f"nope-{run}"], "timeout_ms": 10_000})
            out[f"v{version} bad names"] = sorted(
                (len(r.name or ""), int(r.error_code)) for r in response.responses)
        for case, entry in {
            "name and id": {"name": f"nope-{run}", "topic_id": uuid.uuid4()},
            "neither": {"name": None, "topic_id": zero},
            "unknown id": {"name": None, "topic_id": uuid.uuid4()},
        }.items():
            response = wire.request(DELETE_TOPICS, 6, {"topics": [entry], "timeout_ms": 10_000})
            out[f"v6 {case}"] = [int(r.error_code) for r in response.responses]
    return out


def test_topic_mutations_under_quota(targets: tuple[Target, Target]) -> None:
    loglake = _compare(mutations_under_quota, targets)
    assert loglake["create v6 throttled"]
    assert dict(loglake["create v6 bucket empty"])["mq-RUN-6-1"] == (
        ErrorCode.throttling_quota_exceeded)
    assert dict(loglake["create v5 bucket empty"])["mq-RUN-5-1"] == ErrorCode.none
    assert loglake["partitions v3 duplicate and unknown"] == [
        ("mq-RUN-3-0", ErrorCode.invalid_request),
        ("mq-RUN-none", ErrorCode.unknown_topic_or_partition)]


def test_delete_topics_by_name_and_id(targets: tuple[Target, Target]) -> None:
    loglake = _compare(delete_topics_by_name_and_id, targets)
    assert loglake["v6 name and id"] == [ErrorCode.invalid_request]
    assert loglake["v6 neither"] == [ErrorCode.invalid_request]
