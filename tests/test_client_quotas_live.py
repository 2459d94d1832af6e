"""Client quotas against a broker process with real clients (confluent-kafka).

* A producer limited to N bytes/s (by client id, set with AlterClientQuotas) delivers within
  +-20 % of N over 20 s (after a 3 s warm-up) and is told of throttling (librdkafka's
  ``throttle_cb``, fed by ``throttle_time_ms``), while an unlimited producer on the same broker
  at the same time is never throttled and runs far above N.
* A consumer limited to N bytes/s likewise; an unlimited consumer is not held back.
* By user: a SCRAM user's quota (``/config/users/<user>``) throttles that user over
  SASL_PLAINTEXT; another user is unaffected.
* DescribeClientQuotas / AlterClientQuotas over the wire: validation errors, validate_only,
  removal; the quotas reach ZooKeeper in Kafka's layout.

N = 1 MB/s: small next to what the broker serves on a shared 2-core machine, so the limited
client's rate is set by the quota, not by load. The broker measures with
``quota.window.num=3`` (1 s windows): with Kafka's default 11 windows a greedy client may send
10 windows' worth at once every ~11 s (Kafka does the same), which makes a 20-s average depend
on where the window falls (0.6-1.2 N; see test_client_quotas_unit's simulation); with 3
windows the burst is 2 s' worth and a 20-s average stays within a few percent of N.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from loglake.catalog.entity_configs import EntityConfigStore
from loglake.dev.harness import DevCluster, wait_until
from tests.wire import WireClient
from tests.zk_util import store_scram_users

RATE = 1_000_000
"""N: bytes per second of the limited clients."""
WARMUP_S = 3.0
MEASURE_S = 20.0
TOLERANCE = 0.2
VALUE = b"q" * 10_000
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
DESCRIBE, ALTER = 48, 49


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[DevCluster]:
    data: Path = tmp_path_factory.mktemp("quotas")
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{port:1}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "quota.window.num": "3",
        "quota.window.size.seconds": "1",
    }
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts,
                    broker_overrides=overrides) as cluster:
        store_scram_users(cluster.zookeeper_connect, USERS)
        yield cluster


def _alter(dev: DevCluster, entity: list[tuple[str, str | None]],
           ops: list[tuple[str, float | None]], *, validate_only: bool = False) -> Any:
    body = {"entries": [{
        "entity": [{"entity_type": kind, "entity_name": name} for kind, name in entity],
        "ops": [{"key": key, "value": value or 0.0, "remove": value is None}
                for key, value in ops]}], "validate_only": validate_only}
    with WireClient.connect(dev.bootstrap_servers) as wire:
        return wire.request(ALTER, 1, body)


def _describe(dev: DevCluster, components: list[tuple[str, int, str | None]],
              strict: bool = False) -> Any:
    body = {"components": [{"entity_type": kind, "match_type": match_type, "match": match}
                           for kind, match_type, match in components], "strict": strict}
    with WireClient.connect(dev.bootstrap_servers) as wire:
        return wire.request(DESCRIBE, 1, body)


def _set_quota(dev: DevCluster, entity: list[tuple[str, str | None]], key: str,
               value: float | None) -> None:
    response = _alter(dev, entity, [(key, value)])
    assert [e.error_code for e in response.entries] == [ErrorCode.none], response


def _topic(dev: DevCluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    dev.create_topic(name, partitions=1)
    return name


class Delivered:
    """Bytes delivered over time and throttle events of one client (thread-safe enough: each
    list is appended by one thread)."""

    def __init__(self) -> None:
        self.events: list[tuple[float, int]] = []
        self.throttles: list[float] = []

    def rate(self, start: float, end: float) -> float:
        return sum(size for at, size in self.events if start <= at < end) / (end - start)

    def on_throttle(self, event: Any) -> None:
        self.throttles.append(event.throttle_time)


def _producer(bootstrap: str, client_id: str, out: Delivered, **extra: Any) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "client.id": client_id,
                     "linger.ms": 5, "batch.size": 65536, "compression.type": "none",
                     "queue.buffering.max.kbytes": 1024, "throttle_cb": out.on_throttle,
                     **extra})


def _produce_until(producer: Producer, topic: str, out: Delivered, *, until: float,
                   max_bytes: int | None = None) -> None:
    """Produce VALUE records as fast as the producer takes them until ``until`` (monotonic)
    or ``max_bytes`` were delivered; deliveries are recorded with their time."""
    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            out.events.append((time.monotonic(), len(msg.value())))

    sent = 0
    while time.monotonic() < until and (max_bytes is None or sent < max_bytes):
        try:
            producer.produce(topic, value=VALUE, on_delivery=delivered)
            sent += len(VALUE)
        except BufferError:
            producer.poll(0.02)
        producer.poll(0)
    producer.flush(30)


def _within(rate: float) -> bool:
    return abs(rate - RATE) <= TOLERANCE * RATE


def test_producer_byte_rate_by_client_id(dev: DevCluster) -> None:
    topic = _topic(dev, "pq")
    _set_quota(dev, [("client-id", "limited-producer")], "producer_byte_rate", RATE)
    limited, unlimited = Delivered(), Delivered()
    started = time.monotonic()
    end = started + WARMUP_S + MEASURE_S
    unlimited_times: list[float] = []

    def run_unlimited() -> None:  # the same broker, meanwhile, no quota
        time.sleep(6.0)
        producer = _producer(dev.bootstrap_servers, "unlimited-producer", unlimited)
        begin = time.monotonic()
        _produce_until(producer, topic, unlimited, until=end, max_bytes=20_000_000)
        unlimited_times.append(time.monotonic() - begin)

    other = threading.Thread(target=run_unlimited)
    other.start()
    try:
        producer = _producer(dev.bootstrap_servers, "limited-producer", limited)
        _produce_until(producer, topic, limited, until=end)
    finally:
        other.join(60)
    rate = limited.rate(started + WARMUP_S, started + WARMUP_S + MEASURE_S)
    print(f"limited producer {rate:.0f} B/s (quota {RATE}), {len(limited.throttles)} "
          f"throttled responses; unlimited {sum(s for _, s in unlimited.events)} B in "
          f"{unlimited_times[0] if unlimited_times else -1:.2f} s")
    assert _within(rate), f"limited producer: {rate:.0f} B/s, quota {RATE}"
    assert limited.throttles and max(limited.throttles) > 0
    total = sum(size for _, size in unlimited.events)
    assert total >= 20_000_000 and unlimited_times, "the unlimited producer did not finish"
    assert total / unlimited_times[0] > 3 * RATE, (total, unlimited_times)
    assert unlimited.throttles == []


def test_consumer_byte_rate_by_client_id(dev: DevCluster) -> None:
    topic = _topic(dev, "cq")
    volume = int(RATE * (WARMUP_S + MEASURE_S + 3))
    filler = Delivered()
    _produce_until(_producer(dev.bootstrap_servers, "filler", filler), topic, filler,
                   until=time.monotonic() + 120, max_bytes=volume)
    assert sum(size for _, size in filler.events) >= volume
    _set_quota(dev, [("client-id", "limited-consumer")], "consumer_byte_rate", RATE)

    def consumer(client_id: str, out: Delivered) -> Consumer:
        c = Consumer({"bootstrap.servers": dev.bootstrap_servers, "client.id": client_id,
                      "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                      "fetch.max.bytes": 262144, "message.max.bytes": 131072,
                      "max.partition.fetch.bytes": 131072,
                      "queued.max.messages.kbytes": 256, "throttle_cb": out.on_throttle})
        c.assign([TopicPartition(topic, 0, 0)])
        return c

    def read(c: Consumer, out: Delivered, *, until: float, max_bytes: int) -> float:
        begin = time.monotonic()
        got = 0
        try:
            while time.monotonic() < until and got < max_bytes:
                for message in c.consume(100, 0.2):
                    if message.error() is None:
                        size = len(message.value() or b"")
                        got += size
                        out.events.append((time.monotonic(), size))
        finally:
            c.close()
        return time.monotonic() - begin

    fast = Delivered()
    fast_s = read(consumer("unlimited-consumer", fast), fast, until=time.monotonic() + 60,
                  max_bytes=15_000_000)
    assert sum(size for _, size in fast.events) >= 15_000_000
    assert 15_000_000 / fast_s > 3 * RATE and fast.throttles == []
    slow = Delivered()
    started = time.monotonic()
    read(consumer("limited-consumer", slow), slow, until=started + WARMUP_S + MEASURE_S,
         max_bytes=volume)
    rate = slow.rate(started + WARMUP_S, started + WARMUP_S + MEASURE_S)
    print(f"limited consumer {rate:.0f} B/s (quota {RATE}), {len(slow.throttles)} throttled "
          f"responses; unlimited consumer {15_000_000 / fast_s:.0f} B/s")
    assert _within(rate), f"limited consumer: {rate:.0f} B/s, quota {RATE}"
    assert slow.throttles and max(slow.throttles) > 0


def test_producer_byte_rate_by_user_over_sasl(dev: DevCluster) -> None:
    topic = _topic(dev, "uq")
    _set_quota(dev, [("user", "alice")], "producer_byte_rate", RATE)
    sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256"}
    bootstrap = f"127.0.0.1:{dev.broker_port(1) + 100}"
    alice, bob = Delivered(), Delivered()
    measure_s = 10.0
    started = time.monotonic()
    end = started + WARMUP_S + measure_s
    bob_times: list[float] = []

    def run_bob() -> None:
        producer = _producer(bootstrap, "same-client", bob, **sasl, **{
            "sasl.username": "bob", "sasl.password": USERS["bob"]})
        begin = time.monotonic()
        _produce_until(producer, topic, bob, until=end, max_bytes=15_000_000)
        bob_times.append(time.monotonic() - begin)

    other = threading.Thread(target=run_bob)
    other.start()
    try:
        producer = _producer(bootstrap, "same-client", alice, **sasl, **{
            "sasl.username": "alice", "sasl.password": USERS["alice"]})
        _produce_until(producer, topic, alice, until=end)
    finally:
        other.join(60)
    rate = alice.rate(started + WARMUP_S, end)
    print(f"alice {rate:.0f} B/s (quota {RATE}), {len(alice.throttles)} throttled responses; "
          f"bob {sum(s for _, s in bob.events) / bob_times[0] if bob_times else -1:.0f} B/s")
    assert _within(rate), f"alice: {rate:.0f} B/s, quota {RATE}"
    assert alice.throttles
    assert bob_times and sum(size for _, size in bob.events) / bob_times[0] > 3 * RATE
    assert bob.throttles == []


def test_client_quota_apis(dev: DevCluster) -> None:
    entity = [("user", "carol"), ("client-id", None)]
    response = _alter(dev, entity, [("producer_byte_rate", 2048.0),
                                    ("request_percentage", 12.5)], validate_only=True)
    assert response.entries[0].error_code == ErrorCode.none
    described = _describe(dev, [("user", 0, "carol")])
    assert described.error_code == ErrorCode.none and described.entries == ()
    _alter(dev, entity, [("producer_byte_rate", 2048.0), ("request_percentage", 12.5)])
    described = _describe(dev, [("user", 0, "carol"), ("client-id", 1, None)], strict=True)
    assert [(e.entity_type, e.entity_name) for e in described.entries[0].entity] == entity
    assert {v.key: v.value for v in described.entries[0].values} == {
        "producer_byte_rate": 2048.0, "request_percentage": 12.5}
    # Kafka's layout in ZooKeeper, beside nothing else
    zk = KazooClient(hosts=dev.zookeeper_connect, timeout=10)
    zk.start(timeout=10)
    try:
        stored = EntityConfigStore(zk).get("users/carol/clients/<default>")
    finally:
        zk.stop()
        zk.close()
    assert stored == {"producer_byte_rate": "2048", "request_percentage": "12.5"}
    # validation as Kafka
    bad = _alter(dev, [("user", "carol")], [("producer_byte_rate", 1.5)])
    assert bad.entries[0].error_code == ErrorCode.invalid_request
    assert bad.entries[0].error_message == "producer_byte_rate cannot be a fractional value."
    bad = _alter(dev, [("user", "carol")], [("bogus", 1.0)])
    assert bad.entries[0].error_message == "Invalid configuration key bogus"
    bad = _describe(dev, [("group", 2, None)])
    assert bad.error_code == ErrorCode.unsupported_version and bad.entries is None
    # written straight into ZooKeeper (as kafka-configs --zookeeper): the broker follows the
    # change notification
    zk = KazooClient(hosts=dev.zookeeper_connect, timeout=10)
    zk.start(timeout=10)
    try:
        EntityConfigStore(zk).alter("clients/zk-written", {"consumer_byte_rate": "777"})
    finally:
        zk.stop()
        zk.close()
    seen = wait_until(lambda: _describe(dev, [("client-id", 0, "zk-written")]).entries,
                      timeout=10, message="the broker sees a quota written to ZooKeeper")
    assert {v.key: v.value for v in seen[0].values} == {"consumer_byte_rate": 777.0}
    # removal
    _alter(dev, entity, [("producer_byte_rate", None), ("request_percentage", None)])
    wait_until(lambda: _describe(dev, [("user", 0, "carol")]).entries == (), timeout=10,
               message="quota removed")


def test_quotas_cli(dev: DevCluster, capsys: pytest.CaptureFixture[str]) -> None:
    from loglake.cli import main

    server = ["--bootstrap-server", dev.bootstrap_servers]
    assert main(["quotas", "alter", *server, "--user", "dave", "--client-id", "etl",
                 "--add-config", "consumer_byte_rate=4096,request_percentage=25"]) == 0
    assert "Completed updating quota configs for user-principal 'dave', client-id 'etl'" in (
        capsys.readouterr().out)
    assert main(["quotas", "describe", *server, "--user", "dave", "--client-id", "etl"]) == 0
    assert capsys.readouterr().out.strip() == (
        "Quota configs for user-principal 'dave', client-id 'etl' are "
        "consumer_byte_rate=4096.0, request_percentage=25.0")
    assert main(["quotas", "alter", *server, "--client-default",
                 "--add-config", "producer_byte_rate=1.5"]) == 1
    assert "cannot be a fractional value" in capsys.readouterr().err
    assert main(["quotas", "alter", *server, "--user", "dave", "--client-id", "etl",
                 "--delete-config", "consumer_byte_rate,request_percentage"]) == 0
    capsys.readouterr()
    assert main(["quotas", "describe", *server, "--user", "dave", "--client-id", "etl",
                 "--format", "json"]) == 0
    assert capsys.readouterr().out.strip() == "[]"


def test_ip_connection_rate_quota_apis(dev: DevCluster) -> None:
    """KIP-612 IP entities: AlterClientQuotas stores ``connection_creation_rate`` at Kafka's
    ``/config/ips/<ip>`` (with a change notification), DescribeClientQuotas lists them, and a
    host name or a byte-rate key on an IP is refused as Kafka does."""
    ok = _alter(dev, [("ip", "127.0.0.9")], [("connection_creation_rate", 5.0)])
    assert ok.entries[0].error_code == ErrorCode.none, ok
    ok = _alter(dev, [("ip", None)], [("connection_creation_rate", 100.0)])
    assert ok.entries[0].error_code == ErrorCode.none, ok
    ok = _alter(dev, [("ip", "::1")], [("connection_creation_rate", 3.0)])
    assert ok.entries[0].error_code == ErrorCode.none, ok
    zk = KazooClient(hosts=dev.zookeeper_connect, timeout=10)
    zk.start(timeout=10)
    try:
        store = EntityConfigStore(zk)
        assert store.get("ips/127.0.0.9") == {"connection_creation_rate": "5"}
        assert store.get("ips/<default>") == {"connection_creation_rate": "100"}
        assert store.get("ips/%3A%3A1") == {"connection_creation_rate": "3"}
        assert sorted(zk.get_children("/config/ips")) == ["%3A%3A1", "127.0.0.9", "<default>"]
    finally:
        zk.stop()
        zk.close()
    described = _describe(dev, [("ip", 2, None)], strict=True)
    assert described.error_code == ErrorCode.none
    assert {tuple((e.entity_type, e.entity_name) for e in entry.entity):
            {v.key: v.value for v in entry.values} for entry in described.entries} == {
        (("ip", "127.0.0.9"),): {"connection_creation_rate": 5.0},
        (("ip", "::1"),): {"connection_creation_rate": 3.0},
        (("ip", None),): {"connection_creation_rate": 100.0}}
    exact = _describe(dev, [("ip", 0, "127.0.0.9")], strict=True)
    assert [[(e.entity_type, e.entity_name) for e in entry.entity]
            for entry in exact.entries] == [[("ip", "127.0.0.9")]]
    # a user filter never shows IP entities
    assert all(all(e.entity_type != "ip" for e in entry.entity)
               for entry in _describe(dev, [("user", 2, None)]).entries)
    bad = _alter(dev, [("ip", "localhost")], [("connection_creation_rate", 5.0)])
    assert (bad.entries[0].error_code, bad.entries[0].error_message) == (
        ErrorCode.invalid_request, "localhost is not a valid IP or resolvable host.")
    bad = _alter(dev, [("ip", "127.0.0.9")], [("producer_byte_rate", 5.0)])
    assert bad.entries[0].error_message == "Invalid configuration key producer_byte_rate"
    bad = _alter(dev, [("ip", "127.0.0.9"), ("user", "x")], [("connection_creation_rate", 1.0)])
    assert bad.entries[0].error_code == ErrorCode.invalid_request
    for ip in ("127.0.0.9", None, "::1"):
        _alter(dev, [("ip", ip)], [("connection_creation_rate", None)])
    wait_until(lambda: _describe(dev, [("ip", 2, None)]).entries == (), timeout=10,
               message="IP quotas removed")


def test_quotas_cli_ip_and_mutation_rate(dev: DevCluster,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """``loglake quotas`` takes IP entities (kafka-configs --entity-type ips) and
    ``controller_mutation_rate``; a host name or a combination is one error line."""
    from loglake.cli import main

    server = ["--bootstrap-server", dev.bootstrap_servers]
    assert main(["quotas", "alter", *server, "--ip", "127.0.0.42",
                 "--add-config", "connection_creation_rate=12"]) == 0
    assert "Completed updating quota configs for ip '127.0.0.42'" in capsys.readouterr().out
    assert main(["quotas", "alter", *server, "--ip-default",
                 "--add-config", "connection_creation_rate=50"]) == 0
    capsys.readouterr()
    assert main(["quotas", "describe", *server, "--ip", "127.0.0.42"]) == 0
    assert capsys.readouterr().out.strip() == (
        "Quota configs for ip '127.0.0.42' are connection_creation_rate=12.0")
    assert main(["quotas", "describe", *server, "--ip-default"]) == 0
    assert capsys.readouterr().out.strip() == (
        "Quota configs for the default ip are connection_creation_rate=50.0")
    assert main(["quotas", "alter", *server, "--ip", "db.example",
                 "--add-config", "connection_creation_rate=1"]) == 1
    assert "db.example is not a valid IP or resolvable host." in capsys.readouterr().err
    assert main(["quotas", "alter", *server, "--ip", "127.0.0.42", "--user", "x",
                 "--add-config", "connection_creation_rate=1"]) == 1
    assert "cannot be combined" in capsys.readouterr().err
    assert main(["quotas", "alter", *server, "--user", "ops",
                 "--add-config", "controller_mutation_rate=2.5"]) == 0
    capsys.readouterr()
    assert main(["quotas", "describe", *server, "--user", "ops"]) == 0
    assert capsys.readouterr().out.strip() == (
        "Quota configs for user-principal 'ops' are controller_mutation_rate=2.5")
    for entity in (["--ip", "127.0.0.42"], ["--ip-default"]):
        assert main(["quotas", "alter", *server, *entity,
                     "--delete-config", "connection_creation_rate"]) == 0
    assert main(["quotas", "alter", *server, "--user", "ops",
                 "--delete-config", "controller_mutation_rate"]) == 0
