"""Replication fault tests beyond the matrix (issue 3, "How it is checked").

Every test runs 3 brokers and real ZooKeeper on 127.0.0.1 through the dev harness, with
``replica.lag.time.max.ms=5000`` and ``zookeeper.session.timeout.ms=6000`` unless it says
otherwise, topics with RF=3 and min.insync.replicas=2. Every loop is bounded by count and time;
the harness stops exactly the processes it started.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from loglake.dev.harness import DevCluster, wait_until
from tests.replication_checks import (
    NOT_ENOUGH_REPLICAS,
    NOT_LEADER_OR_FOLLOWER,
    REPLICATION_OVERRIDES,
    ConcurrentConsumer,
    ProducerLoop,
    ZooKeeperView,
    assert_no_loss_no_duplicates,
    assert_replicas_converged,
    broker_client,
    broker_logs_on_failure,
    create_replicated_topic,
    drain,
    high_watermark,
    log_end_offset,
    produce_request,
    produce_until_ok,
    raw_produce,
    read_replica,
    replica_dir,
    wait_for_full_isr,
)

BROKERS = (1, 2, 3)
NO_REBALANCE = {**REPLICATION_OVERRIDES, "auto.leader.rebalance.enable": "false"}
"""Tests that steer leadership themselves keep the preferred-leader rebalancer out of the way."""
LONG_POLL_DRAIN_S = 1.2
"""Longer than a follower's Fetch long poll (the broker's replica fetch max wait, 500 ms)."""


def _values(prefix: str, count: int) -> list[bytes]:
    return [b"%s-%06d" % (prefix.encode(), i) for i in range(count)]


def _restart_when_unregistered(dev: DevCluster, zk: ZooKeeperView, down: dict[int, float]) -> bool:
    """Start every killed broker whose ``/brokers/ids/<id>`` znode has disappeared; whether
    none is left down."""
    for broker in list(down):
        if not zk.registered(broker):
            dev.start_broker(broker)
            del down[broker]
    return not down


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_leader_kill_storm(tmp_path: Path, zookeeper_hosts: str) -> None:
    """SIGKILL the leader of partition 0 every 5 s for 60 s, restarting each killed broker once
    its znode has gone. Invariants: > 5,000 acknowledged; every acknowledged value consumed
    exactly once at its acknowledged place; a consumer running through the storm sees strictly
    increasing offsets per partition and only records that stay (the same value at the same
    offset after healing: it never reads above the high watermark); replicas converge."""
    topic = "storm"
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts,
                    brokers=3, broker_overrides=REPLICATION_OVERRIDES) as dev, \
            broker_logs_on_failure(dev), ZooKeeperView(dev.zookeeper_connect) as zk:
        create_replicated_topic(dev.bootstrap_servers, topic, partitions=3)
        producer = ProducerLoop(dev.bootstrap_servers, topic, partitions=3, rate=1000)
        consumer = ConcurrentConsumer(dev.bootstrap_servers, topic, range(3), max_seconds=240)
        killed: list[int] = []
        down: dict[int, float] = {}
        with producer, consumer:
            producer.wait_acked(1000, timeout=30)
            start = time.monotonic()
            next_kill = start
            while time.monotonic() - start < 60:
                _restart_when_unregistered(dev, zk, down)
                if time.monotonic() >= next_kill:
                    next_kill += 5
                    state = zk.partition_state(topic, 0)
                    leader = -1 if state is None else int(state["leader"])
                    if leader >= 0 and leader not in down:
                        dev.kill_broker(leader)
                        down[leader] = time.monotonic()
                        killed.append(leader)
                time.sleep(0.1)
            wait_until(lambda: _restart_when_unregistered(dev, zk, down), 30,
                       lambda: f"znodes of killed brokers {sorted(down)} to disappear")
            try:
                producer.wait_each_partition_progress(200, timeout=60)
                producer.wait_acked(5001, timeout=60)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\nkilled {killed}") from None
            wait_for_full_isr(dev.bootstrap_servers, topic, range(3), 3, timeout=60)
            time.sleep(2)  # let the concurrent consumer reach the end
        stats = producer.stats
        assert stats.fatal is None, f"producer fatal error: {stats.fatal}"
        assert len(killed) >= 5, f"only {len(killed)} kills happened: {killed}"
        drained = drain(dev.bootstrap_servers, topic, range(3), timeout=60)
        assert_no_loss_no_duplicates(stats.acked, drained)
        assert not consumer.violations, f"offsets went backwards: {consumer.violations}"
        final = drained.by_place()
        unstable = [(place, value, final.get(place)) for place, value in consumer.seen.items()
                    if final.get(place) != value]
        assert not unstable, (
            f"{len(unstable)} records the concurrent consumer read are not in the final log, "
            f"e.g. {unstable[:5]} (place, read, final): it saw data above the high watermark")
        assert_replicas_converged(dev.data_dir, topic, range(3), BROKERS, drained=drained)
        print(f"storm: killed {killed}; {producer.summary()}; consumer saw "
              f"{len(consumer.seen)} records, errors {dict(consumer.errors)}")


@pytest.mark.timeout(240)
def test_paused_leader_is_fenced_and_truncates(tmp_path: Path, zookeeper_hosts: str) -> None:
    """SIGSTOP the leader for longer than the ZooKeeper session timeout, then SIGCONT.

    Invariants: another replica is elected leader with a higher leader epoch while it is paused;
    the resumed broker never acknowledges a write as leader -- a raw acks=1 Produce that waits in
    its socket while it is stopped (so it is served the moment it resumes) and one sent after it
    settled both get NOT_LEADER_OR_FOLLOWER; it rejoins the ISR and its log converges to the new
    leader's; the idempotent acks=all producer running throughout loses and duplicates nothing.
    """
    topic = "paused"
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts,
                    brokers=3, broker_overrides=NO_REBALANCE) as dev, \
            broker_logs_on_failure(dev), ZooKeeperView(dev.zookeeper_connect) as zk:
        create_replicated_topic(dev.bootstrap_servers, topic, partitions=1)
        before = zk.wait_state(topic, 0, lambda s: s["leader"] >= 0, what="a leader")
        old_leader, old_epoch = int(before["leader"]), int(before["leader_epoch"])
        producer = ProducerLoop(dev.bootstrap_servers, topic, partitions=1, rate=500)
        with producer:
            producer.wait_acked(500, timeout=30)
            dev.pause_broker(old_leader)
            paused_at = time.monotonic()
            try:
                after = zk.wait_state(
                    topic, 0, lambda s: s["leader"] not in (-1, old_leader), timeout=30,
                    what=f"a leader other than the paused broker {old_leader}")
                new_leader = int(after["leader"])
                assert int(after["leader_epoch"]) > old_epoch, f"epoch not bumped: {after}"
                assert old_leader not in after["isr"], f"paused broker still in ISR: {after}"
                producer.wait_progress(500, timeout=60)  # the new leader takes writes
                # a Produce waiting in the paused broker's socket, served right on SIGCONT
                while time.monotonic() - paused_at < 10:  # well past the 6 s session timeout
                    time.sleep(0.2)
                stale = broker_client(dev, old_leader)
                stale.send_raw(stale.encode(0, 9, produce_request(
                    topic, 0, [b"zombie-write-1"], acks=1)))
            finally:
                dev.resume_broker(old_leader)
            resumed_at = time.monotonic()
            first = stale.decode_response(0, 9, stale.recv_frame())
            stale.close()
            answered_in = time.monotonic() - resumed_at
            first_code = int(first.responses[0].partition_responses[0].error_code)
            time.sleep(5)
            with broker_client(dev, old_leader) as client:
                second_code, _ = raw_produce(client, topic, 0, [b"zombie-write-2"], acks=1)
            assert second_code == NOT_LEADER_OR_FOLLOWER, (
                f"resumed ex-leader {old_leader} answered error {second_code} to an acks=1 "
                f"produce 5 s after SIGCONT (leader is {new_leader})")
            assert first_code == NOT_LEADER_OR_FOLLOWER, (
                f"resumed ex-leader {old_leader} answered error {first_code} to an acks=1 "
                f"produce served right after SIGCONT: it acted as leader on a lost session")
            wait_for_full_isr(dev.bootstrap_servers, topic, [0], 3, timeout=60)
            rejoined_in = time.monotonic() - resumed_at
            producer.wait_acked(2001, timeout=60)
        stats = producer.stats
        print(f"paused: leader {old_leader} -> {new_leader}; first produce answered "
              f"{answered_in:.1f}s after SIGCONT; ISR full {rejoined_in:.1f}s after SIGCONT; "
              f"{producer.summary()}")
        assert stats.fatal is None, f"producer fatal error: {stats.fatal}"
        drained = drain(dev.bootstrap_servers, topic, [0])
        assert_no_loss_no_duplicates(stats.acked, drained, min_acked=2000)
        assert not {b"zombie-write-1", b"zombie-write-2"} & set(drained.values())
        assert_replicas_converged(dev.data_dir, topic, [0], BROKERS, drained=drained)


@pytest.mark.timeout(240)
def test_min_insync_replicas_and_isr_reexpansion(tmp_path: Path, zookeeper_hosts: str) -> None:
    """Stop two of three replicas (SIGTERM): acks=all gets NOT_ENOUGH_REPLICAS (19) once the ISR
    is the leader alone, acks=1 is acknowledged. Restart them: each rejoins the ISR only after
    its log holds everything the leader has (checked on disk every time ZooKeeper's ISR lists
    it), acks=all works again, and replicas converge."""
    topic = "min-isr"
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts,
                    brokers=3, broker_overrides=NO_REBALANCE) as dev, \
            broker_logs_on_failure(dev), ZooKeeperView(dev.zookeeper_connect) as zk:
        create_replicated_topic(dev.bootstrap_servers, topic, partitions=1,
                                config={"segment.bytes": "1048576"})
        leader = int(zk.wait_state(topic, 0, lambda s: s["leader"] >= 0)["leader"])
        followers = [b for b in BROKERS if b != leader]
        acked = produce_until_ok(dev, zk, topic, 0, _values("committed", 100), acks=-1)
        for follower in followers:
            dev.stop_broker(follower)
        zk.wait_state(topic, 0, lambda s: s["isr"] == [leader], timeout=30,
                      what=f"ISR shrunk to [{leader}]")
        with broker_client(dev, leader) as client:
            error, _ = raw_produce(client, topic, 0, [b"refused"], acks=-1)
            assert error == NOT_ENOUGH_REPLICAS, (
                f"acks=all with ISR [{leader}] < min.insync.replicas=2 answered {error}")
            # enough data that catching up takes a while: 40 batches x 500 x ~1 KiB
            for batch in range(40):
                values = [b"acks1-%02d-%04d-" % (batch, i) + b"x" * 1000 for i in range(500)]
                error, base = raw_produce(client, topic, 0, values, acks=1)
                assert error == 0, f"acks=1 with the leader alone answered {error}"
                acked.update({v: (0, base + i) for i, v in enumerate(values)})
        leader_end = log_end_offset(replica_dir(dev.data_dir, leader, topic, 0))
        assert leader_end == len(acked), f"leader log ends at {leader_end}, acked {len(acked)}"
        for follower in followers:
            dev.start_broker(follower)
        joined: dict[int, int] = {}

        def both_joined() -> bool:
            state = zk.partition_state(topic, 0)
            for follower in followers:
                if state is not None and follower in state["isr"] and follower not in joined:
                    end = log_end_offset(replica_dir(dev.data_dir, follower, topic, 0))
                    assert end >= leader_end, (
                        f"broker {follower} joined the ISR ({state}) while its log ended at "
                        f"{end} < leader's {leader_end}: ISR expanded before catching up")
                    joined[follower] = end
            return len(joined) == 2

        wait_until(both_joined, 90,
                   lambda: f"ISR to re-expand: {zk.partition_state(topic, 0)}", interval=0.02)
        acked.update(produce_until_ok(dev, zk, topic, 0, _values("after", 100), acks=-1,
                                      timeout=30))
        wait_for_full_isr(dev.bootstrap_servers, topic, [0], 3, timeout=30)
        drained = drain(dev.bootstrap_servers, topic, [0])
        assert b"refused" not in drained.values()
        assert_no_loss_no_duplicates(acked, drained, min_acked=20_000)
        assert_replicas_converged(dev.data_dir, topic, [0], BROKERS, drained=drained)


def _zookeeper_mode(port: int) -> str:
    """``leader``/``follower``/``standalone`` from the ``srvr`` four-letter command."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"srvr")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


@pytest.mark.timeout(240)
def test_zookeeper_node_loss_keeps_cluster_serving(tmp_path: Path) -> None:
    """Kill the leader of a 3-node ZooKeeper ensemble while the producer runs: the brokers
    keep acknowledging acks=all writes, a new topic can be created and used, and the usual
    criteria hold (no acknowledged value lost or duplicated, replicas converge)."""
    topic = "zk-loss"
    with DevCluster(tmp_path / "dev", brokers=3, zookeepers=3,
                    broker_overrides=REPLICATION_OVERRIDES) as dev, broker_logs_on_failure(dev):
        create_replicated_topic(dev.bootstrap_servers, topic, partitions=3)
        ports = dev.info.zookeeper_ports
        modes = {n: _zookeeper_mode(port) for n, port in enumerate(ports, start=1)}
        victim = next((n for n, mode in modes.items() if mode == "leader"), 1)
        producer = ProducerLoop(dev.bootstrap_servers, topic, partitions=3, rate=1000)
        with producer:
            producer.wait_acked(1000, timeout=30)
            dev.kill_zookeeper(victim)
            try:
                producer.wait_each_partition_progress(500, timeout=60)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\nZooKeeper modes before: {modes}") from None
            create_replicated_topic(dev.bootstrap_servers, "after-zk-loss", partitions=1)
            with ZooKeeperView(dev.zookeeper_connect) as zk:
                extra = produce_until_ok(dev, zk, "after-zk-loss", 0, _values("new", 50),
                                         acks=-1, timeout=30)
            producer.wait_acked(5001, timeout=60)
        stats = producer.stats
        assert stats.fatal is None, f"producer fatal error: {stats.fatal}"
        wait_for_full_isr(dev.bootstrap_servers, topic, range(3), 3, timeout=60)
        drained = drain(dev.bootstrap_servers, topic, range(3))
        assert_no_loss_no_duplicates(stats.acked, drained)
        assert_replicas_converged(dev.data_dir, topic, range(3), BROKERS, drained=drained)
        new_topic = drain(dev.bootstrap_servers, "after-zk-loss", [0])
        assert_no_loss_no_duplicates(extra, new_topic, min_acked=0)


@pytest.mark.timeout(300)
def test_kip101_divergent_follower_becomes_leader(tmp_path: Path, zookeeper_hosts: str) -> None:
    """KIP-101 divergence after a double failover; replicas [A, B, C] (A the first leader).

    1. ``c`` (100 values) acks=all: committed on A, B, C (leader epoch e0).
    2. SIGSTOP C (it stays in the ISR: replica.lag.time.max.ms is 30 s here). ``u1`` (10 values)
       acks=1 to A; B fetches it. The high watermark cannot pass C's end, so B now holds records
       above the high watermark (checked: consumers' ListOffsets on A still says 100).
    3. SIGSTOP B. ``u2`` (10 values) acks=1 to A: only A holds it.
    4. SIGKILL A, SIGCONT B and C. First failover: B or C becomes leader (epoch e1 > e0; Kafka
       picks B, the first live ISR replica in assignment order, so the follower holding records
       above the high watermark leads and keeps them). If C leads instead, B must truncate u1.
    5. ``w1`` acks=all to the new leader X; wait for ISR {B, C}.
    6. SIGKILL X. Second failover: the other one, Y, leads (epoch e2); ISR {Y}.
    7. Restart A: its log (c, u1, u2 at e0) diverges from Y's at the end of epoch e0 on Y; it
       must truncate by leader epoch (not to its high watermark) and catch up, then rejoin the
       ISR. ``w2`` acks=all. Restart X. Wait for a full ISR.

    Pauses last about 3 s, well inside the 10 s ZooKeeper session used here, so B and C stay
    registered and in the ISR. After each SIGSTOP the test waits ``LONG_POLL_DRAIN_S``: a
    follower's long-poll Fetch already parked at A would otherwise carry the next records into
    the stopped follower's socket buffer, and it would append them on SIGCONT.

    Invariants: every acks=all value (c, w1, w2) is consumed exactly once at its acknowledged
    offset; u2 exists nowhere (no leader ever had it); if B led after step 4, u1 survives; all
    three replicas hold one identical history.
    """
    topic = "kip101"
    overrides = {**NO_REBALANCE, "replica.lag.time.max.ms": "30000",
                 "zookeeper.session.timeout.ms": "10000"}
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts,
                    brokers=3, broker_overrides=overrides) as dev, \
            broker_logs_on_failure(dev), ZooKeeperView(dev.zookeeper_connect) as zk:
        create_replicated_topic(dev.bootstrap_servers, topic, assignment=[[1, 2, 3]])
        state0 = zk.wait_state(topic, 0, lambda s: s["leader"] >= 0)
        a = int(state0["leader"])
        b, c = (r for r in (1, 2, 3) if r != a)
        epoch0 = int(state0["leader_epoch"])
        acked = produce_until_ok(dev, zk, topic, 0, _values("c", 100), acks=-1)
        u1, u2 = _values("u1", 10), _values("u2", 10)
        steps: list[str] = [f"A={a} B={b} C={c} {state0}"]
        try:
            dev.pause_broker(c)
            time.sleep(LONG_POLL_DRAIN_S)
            with broker_client(dev, a) as client:
                error, base = raw_produce(client, topic, 0, u1, acks=1)
                assert (error, base) == (0, 100), f"u1 acks=1 answered {(error, base)}"
                wait_until(lambda: log_end_offset(replica_dir(dev.data_dir, b, topic, 0)) >= 110,
                           10, "B to fetch u1", interval=0.02)
                hw_error, hw = high_watermark(client, topic, 0)
                assert (hw_error, hw) == (0, 100), (
                    f"high watermark {hw} (error {hw_error}) with C paused in the ISR: "
                    "it must stay at 100 until every ISR member has u1")
                dev.pause_broker(b)
                time.sleep(LONG_POLL_DRAIN_S)
                error, base = raw_produce(client, topic, 0, u2, acks=1)
                assert (error, base) == (0, 110), f"u2 acks=1 answered {(error, base)}"
            dev.kill_broker(a)
        finally:
            dev.resume_broker(b)
            dev.resume_broker(c)
        state1 = zk.wait_state(topic, 0, lambda s: s["leader"] in (b, c)
                               and s["leader_epoch"] > epoch0, timeout=30,
                               what="first failover to B or C")
        x = int(state1["leader"])
        y = c if x == b else b
        steps.append(f"first failover: {state1}")
        acked.update(produce_until_ok(dev, zk, topic, 0, _values("w1", 20), acks=-1))
        zk.wait_state(topic, 0, lambda s: sorted(s["isr"]) == sorted([b, c]), timeout=30,
                      what="ISR {B, C}")
        dev.kill_broker(x)
        state2 = zk.wait_state(topic, 0, lambda s: s["leader"] == y
                               and s["leader_epoch"] > state1["leader_epoch"], timeout=30,
                               what=f"second failover to {y}")
        steps.append(f"second failover: {state2}")
        zk.wait_unregistered(a, timeout=30)
        dev.start_broker(a)
        try:
            acked.update(produce_until_ok(dev, zk, topic, 0, _values("w2", 20), acks=-1,
                                          timeout=60))
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nsteps: {steps}") from None
        zk.wait_unregistered(x, timeout=30)
        dev.start_broker(x)
        wait_for_full_isr(dev.bootstrap_servers, topic, [0], 3, timeout=60)
        drained = drain(dev.bootstrap_servers, topic, [0])
        assert_no_loss_no_duplicates(acked, drained, min_acked=0)
        replicas = assert_replicas_converged(dev.data_dir, topic, [0], BROKERS, drained=drained,
                                             timeout=30)[0]
        for broker, log in replicas.items():
            assert not set(u2) & set(log.values()), (
                f"broker {broker} still holds u2, which no later leader had; steps {steps}")
        if x == b:
            assert set(u1) <= set(drained.values()), (
                f"B led after the first failover holding u1, yet u1 is gone; steps {steps}")
        on_a = read_replica(replica_dir(dev.data_dir, a, topic, 0))
        assert [on_a[o] for o in range(110, 120)] == [drained.by_place()[(0, o)]
                                                      for o in range(110, 120)]
        print(f"kip101: {steps}")


@pytest.mark.timeout(120)
def test_sdk_admin_keeps_describing_after_the_controller_dies(tmp_path: Path,
                                                              zookeeper_hosts: str) -> None:
    """An Admin that last saw broker C as controller still describes topics (from a live
    broker, within seconds) after C is SIGKILLed, before and after the new controller takes
    over (librdkafka's DescribeTopics would wait for the dead controller)."""
    import json

    from loglake.client import Admin

    topic = "admin-after-controller"
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts,
                    brokers=3, broker_overrides=NO_REBALANCE) as dev, \
            broker_logs_on_failure(dev), ZooKeeperView(dev.zookeeper_connect) as zk, \
            Admin(dev.bootstrap_servers, timeout=20) as admin:
        create_replicated_topic(dev.bootstrap_servers, topic, partitions=3)
        assert len(admin.describe_topic(topic).partitions) == 3
        controller = int(json.loads(zk.zk.get("/controller")[0])["brokerid"])
        dev.kill_broker(controller)
        started = time.monotonic()
        info = admin.describe_topic(topic)
        assert len(info.partitions) == 3 and time.monotonic() - started < 10
        # the session timeout (6 s), then the election
        wait_until(lambda: all(p.leader not in (-1, controller)
                               for p in admin.describe_topic(topic).partitions), 40,
                   lambda: f"leaders other than {controller}: {admin.describe_topic(topic)}",
                   interval=0.5)
