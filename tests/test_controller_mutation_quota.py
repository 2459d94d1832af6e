"""KIP-599 controller mutation quotas (``controller_mutation_rate``).

Pure: Kafka's token bucket (burst = window.num x window.size x rate, starts full, refills
continuously, may go below zero), strict quotas refuse once the bucket is below zero (the topic
that empties it still passes), permissive ones only throttle, the throttle time decays, and the
8-level precedence picks the rate.

Live (a broker process, ``controller.quota.window.num=2``: burst = 2 s of the rate): a quota set
with AlterClientQuotas makes CreateTopics v7 / CreatePartitions v3 / DeleteTopics v6 answer
THROTTLING_QUOTA_EXCEEDED (89) with Kafka's message for the topics past the burst, with
``throttle_time_ms``; the refused topics are not created; after the throttle time they pass.
Old versions (CreateTopics v5) are accepted and throttled. confluent-kafka's AdminClient
(librdkafka sends CreateTopics v4, a permissive version) creates every topic and sees its next
request held back by the mute; a client without the quota is never refused. Java's AdminClient
(kafka-clients 3.9, CreateTopics v7) with ``retryOnQuotaViolation(false)`` gets
ThrottlingQuotaExceededException with the throttle time for the topics past the burst, and with
the default options retries them by itself until they are created (KIP-599).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from loglake.broker.quotas.controller_mutation import (
    THROTTLING_QUOTA_MESSAGE,
    TokenBucket,
)
from loglake.broker.quotas.entities import DEFAULT, QuotaEntity
from loglake.broker.quotas.manager import ClientQuotas
from loglake.dev.harness import DevCluster, wait_until
from loglake.errors import ThrottlingQuotaExceededError
from tests.java_interop import interop_jar, run_scenario
from tests.test_broker_metrics import broker_metrics_url, scrape, value
from tests.wire import WireClient

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, ALTER_QUOTAS = 19, 20, 37, 49
__all__ = ["interop_jar"]  # the fixture, imported for pytest


# ---- pure
class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def _quotas(clock: Clock, rate: float, *, samples: int = 11) -> ClientQuotas:
    quotas = ClientQuotas(controller_samples=samples, controller_window_s=1, clock_ms=clock)
    quotas.apply(QuotaEntity(client_id="c"), {"controller_mutation_rate": str(rate)})
    return quotas


def test_token_bucket_is_kafkas() -> None:
    bucket = TokenBucket()
    assert bucket.measure(2.0, 22.0, 5_000) == 22.0  # starts full: samples x window x rate
    bucket.record(30.0, 2.0, 22.0, 5_000)
    assert bucket.tokens == -8.0  # a recording may take it below zero
    assert bucket.measure(2.0, 22.0, 6_500) == -5.0  # refills at the rate, continuously
    assert bucket.measure(2.0, 22.0, 60_000) == 22.0  # never above the burst


def test_strict_refuses_once_below_zero_and_throttle_decays() -> None:
    clock = Clock()
    quotas = _quotas(clock, 2.0, samples=2)  # burst 4
    manager = quotas.controller_mutation
    quota = manager.quota_for("ANONYMOUS", "c", CREATE_TOPICS, 7)
    assert quota.strict
    quota.record(3)  # 4 -> 1
    quota.record(3)  # 1 -> -2: still done, Kafka checks before recording
    with pytest.raises(ThrottlingQuotaExceededError) as info:
        quota.record(1)
    assert info.value.code == ErrorCode.throttling_quota_exceeded
    assert info.value.message == THROTTLING_QUOTA_MESSAGE
    assert quota.throttle_ms() == 1000  # -(-2) / 2 per s
    clock.now += 400
    assert quota.throttle_ms() == 600
    clock.now += 600
    manager.quota_for("ANONYMOUS", "c", CREATE_TOPICS, 7).record(1)  # back at zero: allowed
    assert manager.tokens(("", "c")) == -1.0
    assert manager.throttled == 1


def test_permissive_versions_record_and_throttle_without_refusing() -> None:
    clock = Clock()
    quotas = _quotas(clock, 1.0, samples=2)  # burst 2
    manager = quotas.controller_mutation
    for api_key, version in ((CREATE_TOPICS, 5), (DELETE_TOPICS, 4), (CREATE_PARTITIONS, 2)):
        assert not manager.quota_for("u", "c", api_key, version).strict
    for api_key, version in ((CREATE_TOPICS, 6), (DELETE_TOPICS, 5), (CREATE_PARTITIONS, 3)):
        assert manager.quota_for("u", "c", api_key, version).strict
    quota = manager.quota_for("u", "c", CREATE_TOPICS, 5)
    for _ in range(5):
        quota.record(1)
    assert manager.tokens(("", "c")) == -3.0
    assert quota.throttle_ms() == 3000


def test_idle_buckets_expire_after_an_hour() -> None:
    clock = Clock()
    quotas = _quotas(clock, 1.0)
    manager = quotas.controller_mutation
    manager.quota_for("u", "c", CREATE_TOPICS, 7).record(1)
    clock.now += 3_600_000
    manager.quota_for("u", "other", CREATE_TOPICS, 7)  # a new bucket triggers the sweep
    assert set(manager.buckets) == {("", "other")}
    assert ("", "c") not in manager.mutation_rates


def test_no_quota_is_unbounded_and_precedence_applies() -> None:
    clock = Clock()
    quotas = ClientQuotas(clock_ms=clock)
    quota = quotas.controller_mutation.quota_for("u", "c", CREATE_TOPICS, 7)
    for _ in range(1000):
        quota.record(1000)
    assert quota.throttle_ms() == 0 and not quotas.controller_mutation.buckets
    quotas.apply(QuotaEntity(DEFAULT), {"controller_mutation_rate": "1"})
    quotas.apply(QuotaEntity("alice"), {"controller_mutation_rate": "100.5"})
    assert not quotas.enabled  # the request path is untouched by this quota
    manager = quotas.controller_mutation
    assert manager.overrides.quota_for("alice", "x") == 100.5
    assert manager.overrides.quota_for("bob", "x") == 1.0
    quotas.apply(QuotaEntity("alice"), {})
    assert manager.overrides.quota_for("alice", "x") == 1.0


# ---- live
@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[DevCluster]:
    data: Path = tmp_path_factory.mktemp("mutation-quota")
    overrides = {"controller.quota.window.num": "2", "controller.quota.window.size.seconds": "1",
                 "metrics.listener": "http://127.0.0.1:0"}
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as cluster:
        yield cluster


def _set_rate(wire: WireClient, client_id: str, rate: float | None) -> None:
    body = {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": client_id}],
                         "ops": [{"key": "controller_mutation_rate", "value": rate or 0.0,
                                  "remove": rate is None}]}], "validate_only": False}
    response = wire.request(ALTER_QUOTAS, 1, body)
    assert [e.error_code for e in response.entries] == [ErrorCode.none], response


def _create(wire: WireClient, names: list[str], partitions: int, version: int = 7) -> Any:
    body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                        "assignments": [], "configs": []} for name in names],
            "timeout_ms": 10_000, "validate_only": False}
    return wire.request(CREATE_TOPICS, version, body)


def _ms(response: Any) -> int:
    return int(response.throttle_time.total_seconds() * 1000)


def _topics(wire: WireClient) -> set[str]:
    response = wire.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False})
    return {t.name for t in response.topics}


def test_strict_create_delete_partitions_over_the_wire(dev: DevCluster) -> None:
    prefix = f"mq-{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-{i}" for i in range(4)]
    with WireClient.connect(dev.bootstrap_servers, timeout=30) as wire:
        _set_rate(wire, "wire-test", 2.0)  # burst 2 windows x 1 s x 2 = 4 partitions
        try:
            response = _create(wire, names, 3)
            codes = [t.error_code for t in response.topics]
            assert codes == [ErrorCode.none, ErrorCode.none,
                             ErrorCode.throttling_quota_exceeded,
                             ErrorCode.throttling_quota_exceeded], response
            assert response.topics[2].error_message == THROTTLING_QUOTA_MESSAGE
            assert 0 < _ms(response) <= 1000  # bucket at -2, refilled at 2/s
            assert not _topics(wire) & set(names[2:])  # refused ones were not created
            # after the throttle time the bucket is back at zero: the next topic passes
            retried = wait_until(
                lambda: (r := _create(wire, names[2:3], 1)).topics[0].error_code
                == ErrorCode.none and r, timeout=15, interval=0.3,
                message="a refused topic is created after the throttle time")
            assert retried.topics[0].error_code == ErrorCode.none
            # an old version (no THROTTLING_QUOTA_EXCEEDED known) is accepted and throttled
            old = _create(wire, [f"{prefix}-old-{i}" for i in range(3)], 4, version=5)
            assert [t.error_code for t in old.topics] == [ErrorCode.none] * 3, old
            assert _ms(old) > 0
            # CreatePartitions v3 and DeleteTopics v6 are strict too
            time.sleep(_ms(old) / 1000 + 0.1)  # refilled to zero at least: first passes
            grow = wire.request(CREATE_PARTITIONS, 3, {
                "topics": [{"name": names[0], "count": 13, "assignments": None},
                           {"name": names[1], "count": 13, "assignments": None}],
                "timeout_ms": 10_000, "validate_only": False})
            assert [r.error_code for r in grow.results] == [
                ErrorCode.none, ErrorCode.throttling_quota_exceeded], grow
            assert _ms(grow) > 0
            time.sleep(_ms(grow) / 1000 + 0.1)
            delete = wire.request(DELETE_TOPICS, 6, {
                "topics": [{"name": n, "topic_id": uuid.UUID(int=0)}
                           for n in (names[0], names[1])], "timeout_ms": 10_000})
            assert [r.error_code for r in delete.responses] == [
                ErrorCode.none, ErrorCode.throttling_quota_exceeded], delete
        finally:
            _set_rate(wire, "wire-test", None)


def test_confluent_admin_is_throttled_not_refused_and_others_unaffected(
        dev: DevCluster) -> None:
    prefix = f"mqc-{uuid.uuid4().hex[:6]}"
    with WireClient.connect(dev.bootstrap_servers, timeout=30) as wire:
        _set_rate(wire, "limited-admin", 1.0)  # burst 2 partitions
        try:
            limited = AdminClient({"bootstrap.servers": dev.bootstrap_servers,
                                   "client.id": "limited-admin"})
            free = AdminClient({"bootstrap.servers": dev.bootstrap_servers,
                                "client.id": "free-admin"})
            wanted = [NewTopic(f"{prefix}-l{i}", 2, 1) for i in range(4)]
            futures = limited.create_topics(wanted, request_timeout=30)
            for future in futures.values():
                future.result(timeout=30)  # permissive (v4): all created, 8 partitions
            started = time.monotonic()
            free_futures = free.create_topics([NewTopic(f"{prefix}-f{i}", 4, 1)
                                               for i in range(4)], request_timeout=30)
            for future in free_futures.values():
                future.result(timeout=30)  # not limited: never refused nor held back
            free_s = time.monotonic() - started
            # the limited client's connection is muted ~6 s (bucket at -6, 1/s): its next
            # request waits for the mute
            started = time.monotonic()
            futures = limited.create_topics([NewTopic(f"{prefix}-l9", 1, 1)],
                                            request_timeout=30)
            for future in futures.values():
                future.result(timeout=30)
            limited_s = time.monotonic() - started
            assert limited_s > 3.0 and limited_s > free_s, (limited_s, free_s)
            assert {f"{prefix}-l{i}" for i in (0, 1, 2, 3, 9)} <= _topics(wire)
        finally:
            _set_rate(wire, "limited-admin", None)


def test_quota_metrics_are_exported(dev: DevCluster) -> None:
    """Strimzi's quota rule names: a throttled producer's byte rate and throttle time, a
    mutation-limited client's mutation rate, tokens and throttle time, refused topics."""
    url = broker_metrics_url(dev)
    prefix = f"mqm-{uuid.uuid4().hex[:6]}"
    with WireClient.connect(dev.bootstrap_servers, timeout=30) as wire:
        assert _create(wire, [f"{prefix}-t"], 1).topics[0].error_code == ErrorCode.none
        produce_quota: dict[str, Any] = {"entries": [{
            "entity": [{"entity_type": "client-id", "entity_name": "metered-producer"}],
            "ops": [{"key": "producer_byte_rate", "value": 20_000.0, "remove": False}]}],
            "validate_only": False}
        assert wire.request(ALTER_QUOTAS, 1, produce_quota).entries[0].error_code == 0
        try:
            throttled: list[int] = []
            producer = Producer({"bootstrap.servers": dev.bootstrap_servers,
                                 "client.id": "metered-producer", "linger.ms": 5,
                                 "throttle_cb": lambda event: throttled.append(
                                     int(event.throttle_time * 1000))})
            deadline = time.monotonic() + 30
            while not throttled and time.monotonic() < deadline:
                for _ in range(20):
                    producer.produce(f"{prefix}-t", b"m" * 5_000)
                producer.flush(10)
                producer.poll(0.1)
            assert throttled, "the producer was never throttled"
            _set_rate(wire, "wire-test", 1.0)  # burst 2
            # the bucket may still be below zero from the tests before: wait for one create
            wait_until(lambda: _create(wire, [f"{prefix}-m"], 1).topics[0].error_code
                       == ErrorCode.none, 20, "a create within the mutation quota",
                       interval=0.3)
            refused = _create(wire, [f"{prefix}-{i}" for i in range(3)], 1)  # <= 1 token left
            refused_count = sum(t.error_code == ErrorCode.throttling_quota_exceeded
                                for t in refused.topics)
            assert refused_count >= 1, refused
            samples = scrape(url)
            produce = {"resource": "Produce", "user": "", "clientId": "metered-producer"}
            assert value(samples, "kafka_server_quota_byte_rate", **produce) > 0
            assert value(samples, "kafka_server_quota_throttle_time", **produce) > 0
            mutation = {"resource": "ControllerMutation", "user": "", "clientId": "wire-test"}
            assert value(samples, "kafka_server_quota_mutation_rate", **mutation) > 0
            assert value(samples, "kafka_server_quota_tokens", **mutation) < 1.0
            assert value(samples, "kafka_server_quota_throttle_time", **mutation) > 0
            assert value(samples, "loglake_quota_controller_mutation_refused_topics_total"
                         ) >= refused_count
        finally:
            _set_rate(wire, "wire-test", None)
            produce_quota["entries"][0]["ops"][0].update(remove=True, value=0.0)
            wire.request(ALTER_QUOTAS, 1, produce_quota)


def test_java_admin_sees_throttling_quota_exceeded(dev: DevCluster, interop_jar: Path) -> None:
    with WireClient.connect(dev.bootstrap_servers, timeout=30) as wire:
        _set_rate(wire, "java-admin", 1.0)  # burst 2 windows x 1 s x 1 = 2 partitions
        try:
            result = run_scenario(interop_jar, "mutation-quota", dev.bootstrap_servers,
                                  timeout=240, prefix=f"mqj-{uuid.uuid4().hex[:6]}",
                                  client_id="java-admin", strict_count=4, retry_count=3,
                                  partitions=1, timeout_s=60)
        finally:
            _set_rate(wire, "java-admin", None)
    outcomes = sorted(result["strict"].values())
    # the bucket starts full (2): two topics take it to 0, the third below zero, the fourth
    # (in the order the client sends them) is refused (KIP-599 strict: checked before recording)
    assert outcomes == ["ThrottlingQuotaExceededException"] + ["created"] * 3, result
    assert all(0 < ms <= 1000 for ms in result["throttle_time_ms"]), result
    # default options: the client waits out the throttle and retries until all are created
    assert result["retried"] == "created", result
    assert result["retried_ms"] >= 500, result
