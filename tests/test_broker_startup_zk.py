"""Broker start-up survives ZooKeeper flaps (real ZooKeeper and broker processes).

A restarted broker first waits for its previous run's ephemeral ``/brokers/ids/<id>`` to expire.
These tests break ZooKeeper or the broker during that wait, or before it -- ZooKeeper stopped
for longer than the session timeout, the broker paused (SIGSTOP) past it, ZooKeeper down when
the broker starts -- and check that the broker process stays alive and comes up: registered,
serving produce and fetch of the partition it hosts, with no acknowledged record lost, and
without traceback spam in its log. One more checks that a session expiry after start-up ends
in a new registration. Every wait is bounded; the harness stops exactly what it started.

At the end, in-process: the pure registration-wait policy (``RegistrationWait``), and the
catalog's session handling against a real ZooKeeper (session expiry -> new session ->
registration, owner checks, ``retrying``).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kazoo.client import KazooClient
from kazoo.protocol.states import ZnodeStat

from loglake.catalog.zookeeper import (
    BrokerInfo,
    CatalogClosedError,
    ClusterCatalog,
    Registration,
    RegistrationHeldError,
    RegistrationWait,
    SessionEvent,
    ZooKeeperUnavailableError,
)
from loglake.dev import net
from loglake.dev.harness import DevCluster, wait_until, zookeeper
from tests.admin_util import create_topic
from tests.replication_checks import (
    ZooKeeperView,
    assert_no_loss_no_duplicates,
    broker_logs_on_failure,
    drain,
    place_of,
)

SESSION_TIMEOUT_S = 6.0
"""The brokers' zookeeper.session.timeout.ms (the harness default; ZooKeeper's default tick of
2 s allows 4 s at least, and 6 s leaves a restarted broker time to reach its registration wait
before the killed run's session expires)."""
OVERRIDES = {"zookeeper.session.timeout.ms": str(int(SESSION_TIMEOUT_S * 1000))}
TOPIC = "flap"
WAITING = "waiting for it to expire"
"""What the broker logs while the previous run's registration is still there."""
READY_TIMEOUT_S = 45.0
RECORDS = 200
INFO = BrokerInfo(7, "127.0.0.1", 9092)


def _values(prefix: str, count: int) -> list[bytes]:
    return [b"%s-%05d" % (prefix.encode(), i) for i in range(count)]


def _produce(bootstrap: str, values: list[bytes], *, timeout: float = 30.0
             ) -> dict[bytes, tuple[int, int]]:
    """Send ``values`` to partition 0 with acks=all (idempotent); every one must be
    acknowledged within ``timeout``. Returns value -> acknowledged (partition, offset)."""
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[str] = []

    def report(err: object, msg: object) -> None:
        if err is None:
            acked[msg.value()] = place_of(msg)  # type: ignore[attr-defined, arg-type]
        else:
            errors.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": int(timeout * 1000),
                         "reconnect.backoff.max.ms": 1000})
    for value in values:
        producer.produce(TOPIC, value, partition=0, on_delivery=report)
    left = producer.flush(timeout + 5)
    assert left == 0 and not errors and len(acked) == len(values), (
        f"{len(acked)} of {len(values)} acknowledged, {left} pending, errors {errors[:3]}")
    return acked


def _prepare(dev: DevCluster) -> dict[bytes, tuple[int, int]]:
    """A topic on broker 1 with RECORDS acknowledged records."""
    create_topic(dev.bootstrap_servers, TOPIC, partitions=1)
    return _produce(dev.bootstrap_servers, _values("before", RECORDS))


def _wait_log(dev: DevCluster, since: int, text: str, *, timeout: float) -> None:
    """Wait until broker 1's log, from character ``since`` on, contains ``text``."""

    def logged() -> bool:
        assert dev.broker_alive(1), "broker 1 exited"
        return text in dev.broker_log(1)[since:]

    wait_until(logged, timeout, f"broker 1 to log {text!r}", interval=0.05)


def _restart_into_registration_wait(dev: DevCluster) -> int:
    """SIGKILL broker 1 and start it again; return once it waits for the killed run's
    registration to expire. Returns where the new run's log starts."""
    dev.kill_broker(1)
    since = len(dev.broker_log(1))
    dev.start_broker(1, wait=False)
    _wait_log(dev, since, WAITING, timeout=SESSION_TIMEOUT_S)
    return since


def _assert_came_up(dev: DevCluster, acked: dict[bytes, tuple[int, int]], since: int) -> None:
    """Broker 1 answers, is registered, takes and serves new records, lost none of ``acked``,
    and logged no traceback since ``since``."""
    dev.wait_broker_ready(1, timeout=READY_TIMEOUT_S)
    with ZooKeeperView(dev.zookeeper_connect) as zk:
        assert zk.registered(1), "/brokers/ids/1 is missing"
    more = _produce(dev.bootstrap_servers, _values("after", RECORDS))
    drained = drain(dev.bootstrap_servers, TOPIC, [0], timeout=30)
    assert_no_loss_no_duplicates({**acked, **more}, drained, min_acked=2 * RECORDS - 1)
    log = dev.broker_log(1)[since:]
    assert "Traceback" not in log, "the broker logged a traceback while ZooKeeper flapped"
    assert dev.broker_alive(1)


@pytest.mark.timeout(180)
def test_zookeeper_down_past_session_timeout_during_registration_wait(tmp_path: Path) -> None:
    """(a) While the restarted broker waits for its old registration to expire, ZooKeeper is
    stopped for longer than the session timeout and started again: the broker stays alive and
    comes up."""
    with DevCluster(tmp_path / "dev", broker_overrides=OVERRIDES) as dev, \
            broker_logs_on_failure(dev, (1,)):
        acked = _prepare(dev)
        since = _restart_into_registration_wait(dev)
        dev.stop_zookeeper()
        time.sleep(SESSION_TIMEOUT_S + 2)
        assert dev.broker_alive(1), "the broker exited while ZooKeeper was down"
        dev.start_zookeeper()
        _assert_came_up(dev, acked, since)


@pytest.mark.timeout(180)
def test_broker_paused_past_session_timeout_during_registration_wait(tmp_path: Path) -> None:
    """(b) The restarted broker is paused (SIGSTOP) past the session timeout while it waits
    for its old registration to expire: its own session expires meanwhile; after SIGCONT it
    goes on with a new session and comes up."""
    with DevCluster(tmp_path / "dev", broker_overrides=OVERRIDES) as dev, \
            broker_logs_on_failure(dev, (1,)):
        acked = _prepare(dev)
        since = _restart_into_registration_wait(dev)
        dev.pause_broker(1)
        time.sleep(SESSION_TIMEOUT_S + 3)  # ZooKeeper expires sessions up to a tick late
        dev.resume_broker(1)
        _assert_came_up(dev, acked, since)
        assert "ZooKeeper session: lost" in dev.broker_log(1)[since:], (
            "the pause did not expire the broker's session: the test proved nothing")


@pytest.mark.timeout(180)
def test_zookeeper_down_when_broker_starts(tmp_path: Path) -> None:
    """(c) ZooKeeper is down when the broker starts and comes up 10 s later: the broker waits
    (alive, not yet listening) and then comes up."""
    with DevCluster(tmp_path / "dev", broker_overrides=OVERRIDES) as dev, \
            broker_logs_on_failure(dev, (1,)):
        acked = _prepare(dev)
        dev.stop_broker(1)
        dev.stop_zookeeper()
        since = len(dev.broker_log(1))
        dev.start_broker(1, wait=False)
        time.sleep(10)
        assert dev.broker_alive(1), "the broker exited while ZooKeeper was down"
        assert not net.kafka_api_versions_ok(dev.broker_port(1)), "listening before registered"
        dev.start_zookeeper()
        _assert_came_up(dev, acked, since)


@pytest.mark.timeout(120)
def test_sigterm_while_waiting_for_zookeeper_stops_cleanly(tmp_path: Path) -> None:
    """A broker waiting for ZooKeeper at start-up stops promptly and cleanly on SIGTERM."""
    with DevCluster(tmp_path / "dev", broker_overrides=OVERRIDES) as dev, \
            broker_logs_on_failure(dev, (1,)):
        dev.stop_broker(1)
        dev.stop_zookeeper()
        since = len(dev.broker_log(1))
        dev.start_broker(1, wait=False)
        _wait_log(dev, since, "waiting for ZooKeeper", timeout=15)
        started = time.monotonic()
        dev.stop_broker(1)
        took = time.monotonic() - started
        log = dev.broker_log(1)[since:]
        assert took < 5, f"SIGTERM took {took:.1f}s to stop the waiting broker"
        assert "stop requested during start-up" in log and "broker 1 stopped" in log
        assert "Traceback" not in log


@pytest.mark.timeout(180)
def test_session_expiry_after_startup_registers_again(tmp_path: Path) -> None:
    """A running broker paused past the session timeout loses its session and registration;
    after SIGCONT it registers again with its new session and serves."""
    with DevCluster(tmp_path / "dev", broker_overrides=OVERRIDES) as dev, \
            broker_logs_on_failure(dev, (1,)), ZooKeeperView(dev.zookeeper_connect) as zk:
        acked = _prepare(dev)
        before = zk.zk.exists("/brokers/ids/1")
        assert before is not None
        since = len(dev.broker_log(1))
        dev.pause_broker(1)
        wait_until(lambda: not zk.registered(1), 3 * SESSION_TIMEOUT_S,
                   "the paused broker's session to expire", interval=0.2)
        dev.resume_broker(1)

        def registered_again() -> ZnodeStat | None:
            assert dev.broker_alive(1), "the broker exited"
            return zk.zk.exists("/brokers/ids/1")

        after = wait_until(registered_again, READY_TIMEOUT_S, "the broker to register again",
                           interval=0.2)
        assert after.ephemeralOwner != before.ephemeralOwner
        _assert_came_up(dev, acked, since)


# ------------------------------------------------------------------------- RegistrationWait


def test_registration_wait_gives_up_only_after_the_limit() -> None:
    wait = RegistrationWait(limit_s=10.0, pause_gap_s=2.5)
    assert not wait.check(7, now=100.0, connected_at=50.0)
    for now in (101.0, 103.0, 105.0, 107.0, 109.0, 110.0):
        assert not wait.check(7, now=now, connected_at=50.0)
    assert wait.check(7, now=110.5, connected_at=50.0)
    assert wait.waited(110.5) == pytest.approx(10.5)


def test_registration_wait_restarts_on_reconnect_new_owner_and_pause() -> None:
    wait = RegistrationWait(limit_s=10.0, pause_gap_s=2.5)
    wait.check(7, now=100.0, connected_at=50.0)
    wait.check(7, now=102.0, connected_at=50.0)
    # ZooKeeper restarted: we reconnected at 104, so the old session got a fresh timeout too
    assert not wait.check(7, now=105.0, connected_at=104.0)
    assert wait.waited(105.0) == 0.0
    for now in (107.0, 109.0, 111.0, 113.0, 115.0):
        assert not wait.check(7, now=now, connected_at=104.0)
    # another session holds the node now
    assert not wait.check(8, now=116.0, connected_at=104.0)
    assert wait.waited(116.0) == 0.0
    # this process was paused for 20 s: the clock restarts instead of giving up at once
    assert not wait.check(8, now=136.0, connected_at=104.0)
    assert wait.waited(136.0) == 0.0
    assert not wait.check(8, now=138.0, connected_at=104.0)


# ------------------------------------------------- ClusterCatalog against a real ZooKeeper


def test_catalog_reregisters_with_a_new_session_after_expiry(tmp_path: Path) -> None:
    """Our session expires (closed by another client holding its id, as kazoo's own test
    harness expires sessions): listeners hear LOST then NEW_SESSION, the ephemeral node went
    with the old session, and registering again makes the new session its owner."""
    with zookeeper(tmp_path / "zk", tick_time_ms=500) as server:
        catalog = ClusterCatalog(server.hosts + "/t", session_timeout=2.0)
        events: list[SessionEvent] = []
        catalog.add_session_listener(events.append)
        try:
            catalog.start(wait=True)
            assert events == [SessionEvent.NEW_SESSION]
            catalog.register_broker_waiting(INFO)
            assert catalog.registration(INFO.broker_id) is Registration.OURS
            old = catalog.zk.client_id
            killer = KazooClient(hosts=server.hosts + "/t", client_id=old, timeout=2.0)
            killer.start(timeout=10)
            killer.stop()
            killer.close()
            wait_until(lambda: events[-1:] == [SessionEvent.NEW_SESSION] and len(events) > 1,
                       20, "a new session", interval=0.05)
            assert SessionEvent.LOST in events
            assert catalog.zk.client_id[0] != old[0]
            assert catalog.registration(INFO.broker_id) is Registration.ABSENT
            catalog.register_broker_waiting(INFO)
            assert catalog.registration(INFO.broker_id) is Registration.OURS
        finally:
            catalog.stop()


def test_catalog_replaces_only_nodes_of_its_own_old_sessions(tmp_path: Path) -> None:
    """A node of a foreign session is waited for (RegistrationHeldError); a node of a session
    this catalog held before is ours to replace."""
    with zookeeper(tmp_path / "zk", tick_time_ms=500) as server:
        catalog = ClusterCatalog(server.hosts, session_timeout=2.0)
        other = KazooClient(hosts=server.hosts, timeout=2.0)
        try:
            catalog.start(wait=True)
            other.start(timeout=10)
            other.create(f"/brokers/ids/{INFO.broker_id}", b"{}", ephemeral=True)
            with pytest.raises(RegistrationHeldError) as held:
                catalog.register_broker(INFO)
            assert held.value.owner == other.client_id[0]
            assert catalog.registration(INFO.broker_id) is Registration.OTHER
            # as if that session had been ours before an expiry (the race where ZooKeeper has
            # not yet deleted the expired session's node when we come back)
            catalog._old_sessions.add(other.client_id[0])
            catalog.register_broker(INFO)
            assert catalog.registration(INFO.broker_id) is Registration.OURS
        finally:
            other.stop()
            other.close()
            catalog.stop()


def test_catalog_retrying_waits_for_zookeeper_and_ends_on_stop(tmp_path: Path) -> None:
    """``retrying`` returns once ZooKeeper is back; a stop while it waits ends it with
    CatalogClosedError; a tool's plain ``start`` fails fast with a typed error."""
    with zookeeper(tmp_path / "zk", tick_time_ms=500) as server:
        catalog = ClusterCatalog(server.hosts, session_timeout=4.0)
        try:
            catalog.start(wait=True)
            outcome: dict[str, object] = {}

            def read() -> None:
                try:
                    outcome["topics"] = catalog.retrying("reading topics", catalog.topic_names)
                except Exception as exc:
                    outcome["error"] = exc

            server.stop()
            reader = threading.Thread(target=read)
            reader.start()
            time.sleep(2)
            assert reader.is_alive() and not outcome
            server.start(timeout=30)
            reader.join(20)
            assert outcome == {"topics": []}

            server.stop()
            reader = threading.Thread(target=read)
            outcome.clear()
            reader.start()
            time.sleep(1)
            catalog.stop()
            reader.join(20)
            assert not reader.is_alive()
            assert isinstance(outcome.get("error"), CatalogClosedError), outcome

            tool = ClusterCatalog(server.hosts, timeout=1.0)
            started = time.monotonic()
            with pytest.raises(ZooKeeperUnavailableError):
                tool.start()
            assert time.monotonic() - started < 10
            tool.stop()
        finally:
            catalog.stop()
