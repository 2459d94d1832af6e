"""SCRAM logins while ZooKeeper cannot be read, as Kafka's in-memory credential cache serves
them: a broker loads every user's credentials when it starts and follows their changes
(``CredentialCacheFeed`` fed by the quota config sync), so with its ZooKeeper stopped it still
logs in a user who never logged in to it before, with that user's current password, and
refuses a user deleted before the outage. Real ZooKeeper (this test's own, so it can be
stopped), a real broker process, confluent-kafka clients.

Also in-process: the feed replaces what a full load no longer holds and forgets a user whose
re-read config has no SCRAM keys.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from loglake.broker.handlers import sasl
from loglake.broker.quotas.config_sync import _user_of
from loglake.broker.quotas.entities import QuotaEntity
from loglake.broker.security.scram_credentials import (
    delete_user_credential,
    make_credential,
    store_user_credential,
)
from loglake.catalog.entity_configs import EntityConfigStore
from loglake.dev.harness import DevCluster, free_port_block
from loglake.dev.zookeeper import ZooKeeperServer
from tests.zk_util import kazoo_client

pytestmark = pytest.mark.timeout(300)

MECHANISM = "SCRAM-SHA-256"


def _overrides() -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{port:1}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "connection.failed.authentication.delay.ms": "100",
    }


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path / "zk", client_port=free_port_block(1))
    server.start(timeout=60)
    try:
        yield server
    finally:
        server.kill()


def _logs_in(bootstrap: str, user: str, password: str) -> bool:
    """True when a SCRAM login as ``user`` succeeds (Metadata answered after it), False when
    the broker refuses it (an authentication error)."""
    errors: list[KafkaError] = []
    admin = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": MECHANISM, "sasl.username": user,
                         "sasl.password": password, "error_cb": errors.append})
    try:
        admin.list_topics(timeout=10)
        return True
    except KafkaException as exc:
        admin.poll(1.0)  # serves error_cb
        refused = [e for e in [exc.args[0], *errors]
                   if isinstance(e, KafkaError) and e.code() == KafkaError._AUTHENTICATION]
        assert refused, (exc, errors)
        return False


def test_logins_while_zookeeper_is_down_use_every_users_credentials(
        tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    tag = uuid.uuid4().hex[:6]
    bob, carol, dave = f"bob{tag}", f"carol{tag}", f"dave{tag}"
    with DevCluster(tmp_path / "dev", brokers=1, zookeeper=zookeeper.hosts,
                    broker_overrides=_overrides()) as dev:
        bootstrap = f"127.0.0.1:{dev.broker_port(1) + 100}"
        zk = kazoo_client(dev.zookeeper_connect)
        try:
            store = EntityConfigStore(zk)
            for user in (bob, carol, dave):
                store_user_credential(store, user, MECHANISM, f"{user}-old")
            dev.stop_broker(1)
            # changed while the broker is down: it must not matter what it read before
            delete_user_credential(store, carol)
            store_user_credential(store, dave, MECHANISM, f"{dave}-new")
            dev.start_broker(1)
        finally:
            zk.stop()
            zk.close()
        assert _logs_in(bootstrap, dave, f"{dave}-new")  # with ZooKeeper up: read there
        zookeeper.stop(grace=10)
        # nobody but dave logged in to this broker; ZooKeeper cannot be read now
        assert _logs_in(bootstrap, bob, f"{bob}-old"), "a user never seen before"
        assert not _logs_in(bootstrap, bob, "wrong")
        assert not _logs_in(bootstrap, carol, f"{carol}-old"), "deleted before the outage"
        assert not _logs_in(bootstrap, dave, f"{dave}-old"), "the password before the change"
        assert _logs_in(bootstrap, dave, f"{dave}-new")
        zookeeper.start(timeout=60)  # so the cluster stops cleanly


def test_the_feed_replaces_and_forgets() -> None:
    owner = object()
    feed = sasl.CredentialCacheFeed(owner)
    alice = make_credential(MECHANISM, "a")  # the stored string form
    feed.load_all({"alice": {MECHANISM: alice}, "bob": {"producer_byte_rate": "9"}})
    fallback = sasl._FALLBACK
    assert set(fallback.recall(owner, "alice") or {}) == {MECHANISM}
    assert fallback.recall(owner, "bob") is None  # a quota, no credentials
    feed.update("carol", {MECHANISM: make_credential(MECHANISM, "c")})
    assert fallback.recall(owner, "carol") is not None
    feed.update("carol", {})  # deleted
    assert fallback.recall(owner, "carol") is None
    feed.update("dave", {MECHANISM: make_credential(MECHANISM, "d")})
    feed.load_all({"alice": {MECHANISM: alice}})  # a full reload without dave
    assert fallback.recall(owner, "dave") is None
    assert fallback.recall(owner, "alice") is not None
    other = object()
    assert fallback.recall(other, "alice") is None  # per broker (catalog)
    assert _user_of(QuotaEntity(user="u")) == "u"
    assert _user_of(QuotaEntity(user="<default>")) is None
    assert _user_of(QuotaEntity(user="u", client_id="c")) is None
    assert _user_of(QuotaEntity(client_id="c")) is None
