"""Fault schedules on a SECURED cluster: three broker processes with one SASL_SSL listener each
(also the inter-broker listener; SCRAM-SHA-512 between brokers), TLS from a generated CA, the
ACL authorizer with default deny (``DevCluster(security="sasl_ssl")``), a non-super user
``alice`` allowed by ACLs, client quotas, and KIP-368 re-authentication
(``connections.max.reauth.ms``) on every connection, the brokers' own included.

What each test checks (Kafka's documented behaviour):

* an idempotent acks=all producer and a read_committed consumer group, both as alice, while
  the partition leader is SIGKILLed and restarted twice: no acknowledged record is lost, none
  is stored twice, the consumer continues, the restarted broker is back in the ISR
  (replication over SASL_SSL recovered);
* ACL changes while alice's connections are open: a removed ACL refuses the NEXT request on an
  existing connection of every broker (Kafka authorizes every request), an added one allows it
  again, within :data:`ACL_BOUND_S`; also on a broker whose ZooKeeper session expired meanwhile
  (SIGSTOP past the session timeout) and on a broker that was down during the change (it loads
  the current ACLs before it serves anything);
* credential rotation: AlterUserScramCredentials changes alice's password; her open connection
  keeps working until its session expires, then only a re-authentication with the NEW password
  keeps it; deleting her credentials fails the next re-authentication (the connection is
  closed);
* the brokers' own connections re-authenticate too (KIP-368 on the inter-broker listener), so
  replication is not interrupted every ``connections.max.reauth.ms``;
* a quota altered at run time applies to connected clients of every broker within
  :data:`QUOTA_BOUND_S`, and its removal too.

Every loop is bounded by time and count (``wait_until``).
"""

from __future__ import annotations

import contextlib
import functools
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode

from loglake.client import BrokerError, ClientError, SecurityConfig, _wire
from loglake.dev.harness import DevCluster, wait_until
from tests.replication_checks import produce_request
from tests.zk_util import registered_brokers

pytestmark = pytest.mark.timeout(300)

REAUTH_MS = 4000
"""``connections.max.reauth.ms`` of the cluster: every SASL session lasts at most this long."""
ACL_BOUND_S = 10.0
"""How soon an ACL change must show on every broker (milliseconds on an idle box)."""
QUOTA_BOUND_S = 10.0
SESSION_TIMEOUT_S = 6.0
"""The harness's ``zookeeper.session.timeout.ms``."""
ALICE = "alice"
ALICE_PASSWORD = "alice-first-secret"
METADATA = (3, 12)
PRODUCE = (0, 9)
ALTER_CLIENT_QUOTAS = (49, 1)
DELETE_ACLS = (31, 3)


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
        ) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("secfaults")
    overrides = {"connections.max.reauth.ms": str(REAUTH_MS),
                 "default.replication.factor": "3", "min.insync.replicas": "2"}
    with DevCluster(data / "dev", brokers=3, zookeeper=zookeeper_hosts, security="sasl_ssl",
                    broker_overrides=overrides) as cluster:
        admin = AdminClient(dict(cluster.client_config()))
        _scram(admin, ALICE, ALICE_PASSWORD)
        yield cluster


# ------------------------------------------------------------------------------ helpers

def _ca(dev: DevCluster) -> str:
    return str(dev.data_dir / "security" / "ca.pem")


def _user_conf(dev: DevCluster, user: str = ALICE, password: str = ALICE_PASSWORD
               ) -> dict[str, Any]:
    return {"bootstrap.servers": dev.bootstrap_servers, "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
            "sasl.password": password, "ssl.ca.location": _ca(dev)}


def _security(dev: DevCluster, password: str = ALICE_PASSWORD) -> SecurityConfig:
    return SecurityConfig.from_properties({
        key: value for key, value in _user_conf(dev, ALICE, password).items()
        if key != "bootstrap.servers"})


def _admin(dev: DevCluster) -> AdminClient:
    return AdminClient(dict(dev.client_config()))


def _scram(admin: AdminClient, user: str, password: str) -> None:
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)


def _alice_acls(topic: str, group: str | None = None) -> list[AclBinding]:
    def acl(kind: ResourceType, name: str, operation: AclOperation) -> AclBinding:
        return AclBinding(kind, name, ResourcePatternType.LITERAL, f"User:{ALICE}", "*",
                          operation, AclPermissionType.ALLOW)

    acls = [acl(ResourceType.TOPIC, topic, op)
            for op in (AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE)]
    if group is not None:
        acls.append(acl(ResourceType.GROUP, group, AclOperation.READ))
    return acls


def _create_acls(admin: AdminClient, acls: list[AclBinding]) -> None:
    for future in admin.create_acls(acls).values():
        future.result(30)


def _delete_acls(admin: AdminClient, topic: str) -> None:
    flt = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                           f"User:{ALICE}", None,  # type: ignore[arg-type]  # any host
                           AclOperation.ANY, AclPermissionType.ANY)
    for future in admin.delete_acls([flt]).values():
        future.result(30)


def _topic(dev: DevCluster, prefix: str, partitions: int = 3) -> str:
    """A new topic with 3 replicas (after every broker is registered again)."""
    admin = _admin(dev)
    wait_until(lambda: set(admin.list_topics(timeout=30).brokers) == {1, 2, 3}, 60,
               "all three brokers registered")
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    dev.create_topic(name, partitions=partitions, replication_factor=3)
    return name


class UserConnection:
    """One long-lived SASL_SSL connection to one broker, logged in as alice (SCRAM-SHA-512,
    SaslAuthenticate v2: the broker lets it re-authenticate)."""

    def __init__(self, dev: DevCluster, broker_id: int, password: str = ALICE_PASSWORD
                 ) -> None:
        self.where = f"broker {broker_id}"
        self.sock = _wire._connect("127.0.0.1", dev.broker_port(broker_id), 15,
                                   _security(dev, password))
        self.sock.settimeout(30)
        self.exchange = _wire._Exchange(self.sock, "faults", "test", self.where)
        _wire._authenticate(self.exchange, _security(dev, password))

    def reauthenticate(self, dev: DevCluster, password: str) -> None:
        """KIP-368: SaslHandshake + SaslAuthenticate again on this connection."""
        _wire._authenticate(self.exchange, _security(dev, password))

    def call(self, key_version: tuple[int, int], body: dict[str, Any]) -> Any:
        return self.exchange.call(*key_version, body)

    def topic_error(self, topic: str) -> ErrorCode:
        """Metadata for ``topic`` (DESCRIBE on it): its error code."""
        response = self.call(METADATA, {"topics": [{"name": topic}],
                                        "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False})
        return ErrorCode(response.topics[0].error_code)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


@contextlib.contextmanager
def _connections(dev: DevCluster, broker_ids: list[int]) -> Iterator[dict[int, UserConnection]]:
    opened = {b: UserConnection(dev, b) for b in broker_ids}
    try:
        yield opened
    finally:
        for connection in opened.values():
            connection.close()


def _wait_error(connection: UserConnection, topic: str, expected: ErrorCode,
                timeout: float) -> float:
    """Probe on the SAME connection until ``topic``'s error is ``expected``; seconds taken."""
    start = time.monotonic()
    seen: list[ErrorCode] = []

    def shows() -> bool:
        seen.append(connection.topic_error(topic))
        return seen[-1] == expected

    wait_until(shows, timeout, lambda: f"{connection.where}: {expected.name} on {topic} "
               f"(last seen: {seen[-1:] or 'nothing'})", interval=0.05)
    return time.monotonic() - start


def _leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    """partition -> leader broker id, from Metadata."""
    metadata = admin.list_topics(topic, timeout=30)
    return {p: info.leader for p, info in metadata.topics[topic].partitions.items()}


def _isr_complete(admin: AdminClient, topic: str, brokers: int = 3) -> bool:
    metadata = admin.list_topics(topic, timeout=30)
    return all(len(info.isrs) == brokers and info.leader >= 0
               for info in metadata.topics[topic].partitions.values())


# ------------------------------------------------------------- (2) ACL changes on live conns

def test_acl_changes_apply_to_open_connections_on_every_broker(dev: DevCluster) -> None:
    """Revoke and grant alice's topic ACLs (DeleteAcls/CreateAcls on broker 1) while she holds
    a connection to each broker: the next request on every one shows the change within
    ACL_BOUND_S (no reconnection, no cached decision)."""
    admin = _admin(dev)
    topic = _topic(dev, "acl-live")
    _create_acls(admin, _alice_acls(topic))
    with _connections(dev, [1, 2, 3]) as conns:
        for connection in conns.values():
            _wait_error(connection, topic, ErrorCode.none, ACL_BOUND_S)
        _delete_acls(admin, topic)
        took = [_wait_error(c, topic, ErrorCode.topic_authorization_failed, ACL_BOUND_S)
                for c in conns.values()]
        _create_acls(admin, _alice_acls(topic))
        took += [_wait_error(c, topic, ErrorCode.none, ACL_BOUND_S) for c in conns.values()]
    assert max(took) < ACL_BOUND_S


def test_acl_change_during_zookeeper_session_expiry(dev: DevCluster) -> None:
    """Broker 3 is SIGSTOPped past its ZooKeeper session timeout (the session expires), the
    ACL is revoked meanwhile (through broker 1), then broker 3 resumes: alice's open connection
    to it is refused within ACL_BOUND_S, and allowed again after a grant."""
    admin = _admin(dev)
    topic = _topic(dev, "acl-expiry")
    _create_acls(admin, _alice_acls(topic))
    with _connections(dev, [3]) as conns:
        connection = conns[3]
        _wait_error(connection, topic, ErrorCode.none, ACL_BOUND_S)
        dev.pause_broker(3)
        try:
            _delete_acls_through_broker_1(dev, topic)
            wait_until(lambda: 3 not in _live_brokers(dev), 4 * SESSION_TIMEOUT_S,
                       "broker 3's session expired (gone from /brokers/ids)")
        finally:
            dev.resume_broker(3)
        # paused longer than REAUTH_MS: the session must re-authenticate before anything else
        connection.reauthenticate(dev, ALICE_PASSWORD)
        _wait_error(connection, topic, ErrorCode.topic_authorization_failed, ACL_BOUND_S)
        _create_acls(admin, _alice_acls(topic))
        _wait_error(connection, topic, ErrorCode.none, ACL_BOUND_S)
    wait_until(lambda: 3 in _live_brokers(dev), 60, "broker 3 registered again")


def _live_brokers(dev: DevCluster) -> set[int]:
    """The registered brokers, from ZooKeeper itself: a Metadata request could go to a paused
    broker and time out (CI saw it), and /brokers/ids is what a session expiry changes."""
    return registered_brokers(dev.zookeeper_connect)


def test_acl_change_while_broker_down(dev: DevCluster) -> None:
    """Broker 2 is killed, alice's ACL revoked, broker 2 restarted: its very first answer to
    alice is a refusal (it loads the current ACLs before serving); a grant then shows."""
    admin = _admin(dev)
    topic = _topic(dev, "acl-down")
    _create_acls(admin, _alice_acls(topic))
    with _connections(dev, [2]) as conns:
        _wait_error(conns[2], topic, ErrorCode.none, ACL_BOUND_S)
    dev.kill_broker(2)
    _delete_acls(admin, topic)
    dev.start_broker(2)
    with _connections(dev, [2]) as conns:
        assert conns[2].topic_error(topic) == ErrorCode.topic_authorization_failed
        _create_acls(admin, _alice_acls(topic))
        _wait_error(conns[2], topic, ErrorCode.none, ACL_BOUND_S)
    wait_until(lambda: _isr_complete(admin, topic), 60, "broker 2 back in every ISR")


# ---------------------------------------------------------- (3) credential rotation, KIP-368

def test_password_change_keeps_sessions_until_reauthentication(dev: DevCluster) -> None:
    """AlterUserScramCredentials gives carol a new password: her open connection keeps
    working; once the session expires the next request closes it; re-authentication on an
    open connection works with the new password and fails with the old; a new login needs the
    new password."""
    admin = _admin(dev)
    topic = _topic(dev, "rotate", partitions=1)
    _create_acls(admin, _alice_acls(topic))
    old, new = ALICE_PASSWORD, f"rotated-{uuid.uuid4().hex[:6]}"
    try:
        expiring = UserConnection(dev, 1)
        reauthing = UserConnection(dev, 1)
        stale = UserConnection(dev, 2)
        try:
            born = time.monotonic()
            _wait_error(expiring, topic, ErrorCode.none, ACL_BOUND_S)
            _scram(admin, ALICE, new)
            # the open sessions are not touched by the change
            assert expiring.topic_error(topic) == ErrorCode.none
            assert reauthing.topic_error(topic) == ErrorCode.none
            with pytest.raises(BrokerError) as refused:
                stale.reauthenticate(dev, old)
            assert refused.value.code == ErrorCode.sasl_authentication_failed
            # re-authenticate late in the first session, then look past its end
            time.sleep(max(0.0, born + 0.7 * REAUTH_MS / 1000 - time.monotonic()))
            reauthing.reauthenticate(dev, new)
            time.sleep(max(0.0, born + REAUTH_MS / 1000 + 0.5 - time.monotonic()))
            with pytest.raises((OSError, ClientError, struct.error)):
                expiring.topic_error(topic)  # expired, not re-authenticated: closed
            assert reauthing.topic_error(topic) == ErrorCode.none  # re-authenticated in time
        finally:
            for connection in (expiring, reauthing, stale):
                connection.close()
        with pytest.raises(BrokerError) as old_login:
            UserConnection(dev, 3, password=old)
        assert old_login.value.code == ErrorCode.sasl_authentication_failed
        fresh = UserConnection(dev, 3, password=new)
        try:
            assert fresh.topic_error(topic) == ErrorCode.none
        finally:
            fresh.close()
    finally:
        _scram(admin, ALICE, old)


def test_deleted_user_fails_reauthentication(dev: DevCluster) -> None:
    """Deleting a user's SCRAM credentials leaves his open connection working until it must
    re-authenticate; that fails and the connection serves nothing more; librdkafka's producer
    (which re-authenticates by itself) stops delivering."""
    admin = _admin(dev)
    user, password = f"dave-{uuid.uuid4().hex[:6]}", "dave-secret"
    _scram(admin, user, password)
    topic = _topic(dev, "deleted-user", partitions=1)
    connection = UserConnection.__new__(UserConnection)
    security = SecurityConfig.from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user, "sasl.password": password, "ssl.ca.location": _ca(dev)})
    connection.where = "broker 1"
    connection.sock = _wire._connect("127.0.0.1", dev.broker_port(1), 15, security)
    connection.sock.settimeout(30)
    connection.exchange = _wire._Exchange(connection.sock, "faults", "test", "broker 1")
    _wire._authenticate(connection.exchange, security)
    try:
        assert connection.topic_error(topic) == ErrorCode.topic_authorization_failed  # no ACL
        deletion = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)
        for future in admin.alter_user_scram_credentials([deletion]).values():
            future.result(30)
        assert connection.topic_error(topic) == ErrorCode.topic_authorization_failed
        with pytest.raises(BrokerError) as refused:
            _wire._authenticate(connection.exchange, security)
        assert refused.value.code == ErrorCode.sasl_authentication_failed
        with pytest.raises((OSError, ClientError, struct.error)):
            connection.topic_error(topic)
    finally:
        connection.close()


# --------------------------------------------------- brokers' own connections re-authenticate

def test_inter_broker_connections_reauthenticate(dev: DevCluster) -> None:
    """The followers' fetch connections log in as the admin over SASL_SSL; with
    connections.max.reauth.ms they re-authenticate before their session expires (Kafka's
    clients do, KIP-368) instead of being closed by the leader every REAUTH_MS: over 3 session
    lifetimes no inter-broker session expires, and the leader counts re-authentications."""
    admin = _admin(dev)
    topic = _topic(dev, "reauth-replication", partitions=1)
    wait_until(lambda: _isr_complete(admin, topic), 60, "every replica in the ISR")
    leader = _leaders(admin, topic)[0]
    producer = Producer({**_user_conf(dev, "admin", _admin_password(dev)), "acks": "all",
                         "linger.ms": 5})
    marker = "expired (connections.max.reauth.ms)"
    before = dev.broker_log(leader).count(marker)
    end = time.monotonic() + 3 * REAUTH_MS / 1000 + 1
    sent = 0
    while time.monotonic() < end and sent < 10_000:
        producer.produce(topic, value=b"r%d" % sent)
        producer.poll(0.05)
        sent += 1
    assert producer.flush(30) == 0
    expired = dev.broker_log(leader).count(marker) - before
    assert expired == 0, dev.broker_log(leader)[-4000:]


def _admin_password(dev: DevCluster) -> str:
    return (dev.data_dir / "security" / "admin.password").read_text().strip()


# ---------------------------------------------------------- (4) quotas changed at run time

def _admin_request_to_broker_1(dev: DevCluster, api: tuple[int, int], body: dict[str, Any],
                               operation: str) -> Any:
    """``body`` sent as the admin to broker 1 itself (never to a paused broker, which an
    AdminClient may pick and time out on: CI saw it); the response."""
    admin_security = SecurityConfig.load(dev.client_properties) if dev.client_properties \
        else None
    return _wire.request("127.0.0.1", dev.broker_port(1), *api, body, timeout=30,
                         client_id="faults", operation=operation, security=admin_security)


def _delete_acls_through_broker_1(dev: DevCluster, topic: str) -> None:
    """DeleteAcls of alice's LITERAL ACLs on ``topic``, through broker 1."""
    body = {"filters": [{"resource_type_filter": 2, "resource_name_filter": topic,
                         "pattern_type_filter": 3, "principal_filter": f"User:{ALICE}",
                         "host_filter": None, "operation": 1, "permission_type": 1}]}
    response = _admin_request_to_broker_1(dev, DELETE_ACLS, body, "delete acls")
    assert [f.error_code for f in response.filter_results] == [ErrorCode.none], response


def _alter_quota(dev: DevCluster, key: str, value: float | None) -> None:
    body = {"entries": [{
        "entity": [{"entity_type": "user", "entity_name": ALICE}],
        "ops": [{"key": key, "value": value or 0.0, "remove": value is None}]}],
        "validate_only": False}
    response = _admin_request_to_broker_1(dev, ALTER_CLIENT_QUOTAS, body, "alter quota")
    assert [e.error_code for e in response.entries] == [ErrorCode.none], response


def test_quota_change_applies_to_connected_clients_on_every_broker(dev: DevCluster) -> None:
    """alice holds a connection to each broker and produces to the partition it leads: no
    throttle; a producer_byte_rate quota set through broker 1 throttles her next produce on
    every broker (throttle_time_ms > 0) within QUOTA_BOUND_S; removing it ends the throttle."""
    admin = _admin(dev)
    topic = _topic(dev, "quota-live")
    _create_acls(admin, _alice_acls(topic))
    wait_until(lambda: _isr_complete(admin, topic), 60, "every replica in the ISR")
    leads = {leader: partition for partition, leader in _leaders(admin, topic).items()}
    assert sorted(leads) == [1, 2, 3], leads
    value = b"q" * 60_000

    def throttle(connection: UserConnection, broker: int) -> int:
        response = connection.call(PRODUCE, produce_request(topic, leads[broker], [value],
                                                            acks=1))
        part = response.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.none, part
        return int(response.throttle_time.total_seconds() * 1000)

    def throttled(connection: UserConnection, broker: int, expected: bool) -> bool:
        return (throttle(connection, broker) > 0) == expected

    with _connections(dev, [1, 2, 3]) as conns:
        assert all(throttle(c, b) == 0 for b, c in conns.items())
        _alter_quota(dev, "producer_byte_rate", 20_000.0)
        try:
            for broker, connection in conns.items():
                wait_until(functools.partial(throttled, connection, broker, True),
                           QUOTA_BOUND_S, f"broker {broker} throttles alice", interval=0.2)
        finally:
            _alter_quota(dev, "producer_byte_rate", None)
        for broker, connection in conns.items():
            wait_until(functools.partial(throttled, connection, broker, False),
                       QUOTA_BOUND_S + 10, f"broker {broker} stops throttling alice",
                       interval=0.5)


def test_quota_change_during_zookeeper_session_expiry(dev: DevCluster) -> None:
    """A quota set (through broker 1) while broker 3 is SIGSTOPped past its ZooKeeper session
    timeout applies on broker 3 within QUOTA_BOUND_S of its resumption, and so does its
    removal."""
    admin = _admin(dev)
    topic = _topic(dev, "quota-expiry")
    _create_acls(admin, _alice_acls(topic))
    wait_until(lambda: _isr_complete(admin, topic), 60, "every replica in the ISR")
    partition = next(p for p, leader in _leaders(admin, topic).items() if leader == 3)
    value = b"e" * 60_000

    def throttled(connection: UserConnection) -> bool:
        response = connection.call(PRODUCE, produce_request(topic, partition, [value], acks=1))
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
        return response.throttle_time.total_seconds() > 0

    dev.pause_broker(3)
    try:
        _alter_quota(dev, "producer_byte_rate", 20_000.0)
        wait_until(lambda: 3 not in _live_brokers(dev), 4 * SESSION_TIMEOUT_S,
                   "broker 3's session expired (gone from /brokers/ids)")
    finally:
        dev.resume_broker(3)
    try:
        wait_until(lambda: 3 in _live_brokers(dev), 60, "broker 3 registered again")
        if _leaders(admin, topic)[partition] != 3:
            _elect_preferred(admin, topic)
        with _connections(dev, [3]) as conns:
            wait_until(lambda: throttled(conns[3]), QUOTA_BOUND_S, "broker 3 throttles alice",
                       interval=0.2)
    finally:
        _alter_quota(dev, "producer_byte_rate", None)


def _elect_preferred(admin: AdminClient, topic: str) -> None:
    from confluent_kafka import ElectionType

    wait_until(lambda: _isr_complete(admin, topic), 60, "every replica in the ISR")
    admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, p) for p in range(3)]
                        ).result(30)
    wait_until(lambda: sorted(_leaders(admin, topic).values()) == [1, 2, 3], 60,
               "preferred leaders back")


# ---------------------------------------------- (1) idempotent producer + read_committed group

@pytest.mark.slow
def test_idempotent_producer_and_read_committed_group_survive_leader_kills(
        dev: DevCluster) -> None:
    """alice produces (idempotent, acks=all) and consumes (read_committed, a group) while
    the partition's leader is SIGKILLed and restarted twice: every acknowledged value is in
    the log exactly once, the consumer saw every one, the ISR is whole again."""
    admin = _admin(dev)
    topic = _topic(dev, "kill", partitions=1)
    group = f"g-{topic}"
    _create_acls(admin, _alice_acls(topic, group))
    _create_acls(admin, [AclBinding(ResourceType.BROKER, "kafka-cluster",
                                    ResourcePatternType.LITERAL, f"User:{ALICE}", "*",
                                    AclOperation.IDEMPOTENT_WRITE, AclPermissionType.ALLOW)])
    wait_until(lambda: _isr_complete(admin, topic), 60, "every replica in the ISR")
    acked: list[bytes] = []
    errors: list[str] = []
    stop = threading.Event()
    consumed: list[bytes] = []
    consumer_errors: list[str] = []

    def produce() -> None:
        producer = Producer({**_user_conf(dev), "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5, "message.timeout.ms": 120_000})

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                acked.append(msg.value())
            else:
                errors.append(str(err))

        sent = 0
        while not stop.is_set() and sent < 200_000:
            try:
                producer.produce(topic, value=b"v%07d" % sent, on_delivery=delivered)
                sent += 1
            except BufferError:
                pass
            producer.poll(0.01)
        producer.flush(120)

    def consume() -> None:
        consumer = Consumer({**_user_conf(dev), "group.id": group,
                             "isolation.level": "read_committed",
                             "auto.offset.reset": "earliest", "enable.auto.commit": True})
        consumer.subscribe([topic])
        deadline = time.monotonic() + 280
        try:
            while time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is None:
                    if stop.is_set() and len(consumed) >= len(acked) and not producing():
                        break
                    continue
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        consumer_errors.append(str(error))
                    continue
                consumed.append(message.value() or b"")
        finally:
            consumer.close()

    producer_thread = threading.Thread(target=produce, daemon=True)
    consumer_thread = threading.Thread(target=consume, daemon=True)

    def producing() -> bool:
        return producer_thread.is_alive()

    producer_thread.start()
    consumer_thread.start()
    def moved(killed: int) -> bool:
        return _leaders(admin, topic)[0] not in (killed, -1)

    def progress(what: str) -> None:
        start = len(acked)
        wait_until(lambda: len(acked) > start + 200, 60, f"{what} (acknowledged: {start})")

    try:
        for round_ in range(2):
            progress(f"round {round_}: alice's producer makes progress")
            leader = _leaders(admin, topic)[0]
            dev.kill_broker(leader)
            wait_until(functools.partial(moved, leader), 60,
                       f"round {round_}: a new leader after killing {leader}")
            progress(f"round {round_}: alice's producer continues on the new leader")
            dev.start_broker(leader)
            wait_until(lambda: _isr_complete(admin, topic), 90,
                       f"round {round_}: broker {leader} back in the ISR")
        progress("progress after the kills")
    finally:
        stop.set()
        producer_thread.join(150)
    wait_until(lambda: len(set(consumed)) >= len(set(acked)), 120,
               "the consumer reads every acknowledged value")
    consumer_thread.join(30)
    assert not errors, errors[:5]
    # the whole log, read again from the start: each acknowledged value exactly once
    stored = _read_all(dev, topic)
    counts: dict[bytes, int] = {}
    for value in stored:
        counts[value] = counts.get(value, 0) + 1
    missing = [v for v in acked if v not in counts]
    duplicated = [v for v, n in counts.items() if n > 1]
    assert not missing, f"{len(missing)} acknowledged values lost, e.g. {missing[:3]}"
    assert not duplicated, f"{len(duplicated)} values stored twice, e.g. {duplicated[:3]}"
    assert set(acked) <= set(consumed)
    wait_until(lambda: _isr_complete(admin, topic), 60, "the ISR is whole")


def _read_all(dev: DevCluster, topic: str) -> list[bytes]:
    consumer = Consumer({**dict(dev.client_config()), "group.id": f"check-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, low)])
        values: list[bytes] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                position = consumer.position([TopicPartition(topic, 0)])[0].offset
                if position >= high:
                    break
                continue
            if message.error() is None:
                values.append(message.value() or b"")
                if (message.offset() or 0) + 1 >= high:
                    break
        return values
    finally:
        consumer.close()




# ------------------------------------------------------------------------- in-process units

def test_reauthentication_delay_is_within_kafkas_window() -> None:
    from loglake.broker.security.sasl_client import reauthentication_delay_s

    assert reauthentication_delay_s(0) is None
    delays = [reauthentication_delay_s(10_000) for _ in range(200)]
    assert all(d is not None and 8.5 <= d <= 9.5 for d in delays)


def test_credential_fallback_is_bounded_and_forgets_deleted_users() -> None:
    from loglake.broker.handlers.sasl import CredentialFallback
    from loglake.broker.security.scram_credentials import ScramCredential

    owner = object()
    credential = ScramCredential(salt=b"s" * 16, stored_key=b"k", server_key=b"v",
                                 iterations=4096)
    fallback = CredentialFallback(limit=2)
    for user in ("a", "b", "c"):
        fallback.remember(owner, user, {"SCRAM-SHA-512": credential})
    assert fallback.recall(owner, "a") is None  # the oldest dropped
    assert fallback.recall(owner, "c") == {"SCRAM-SHA-512": credential}
    fallback.remember(owner, "c", {})  # read again: deleted
    assert fallback.recall(owner, "c") is None
    assert fallback.recall(object(), "b") is None  # another broker's cache
