"""Shared helpers of the authorization tests (tests/test_authz_*.py): ACL grants written to
ZooKeeper at Kafka's paths (catalog/acls.py, as ``kafka-acls --zookeeper`` does), bounded
waits for a decision to show on a broker, and raw probes that show whether a broker already
applies an ACL.

ACL changes reach a broker through ZooKeeper's change notifications, so a test never sleeps a
fixed time after a grant or a revocation: it retries an observable (the operation itself or
:func:`wait_allowed`'s probe) until the broker shows the change, bounded by time
(:data:`WAIT_S`, generous for CI under load) and by count.
"""

from __future__ import annotations

import contextlib
import functools
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from loglake.catalog.acls import AclStore
from tests.wire import WireClient

ANONYMOUS = "User:ANONYMOUS"
CLUSTER = "kafka-cluster"
AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
WAIT_S = 30.0
"""Upper bound of every wait for an ACL change to show (milliseconds on an idle box)."""
POLL_S = 0.1
MAX_ATTEMPTS = 2000
"""Upper bound of the attempts of one wait (besides :data:`WAIT_S`)."""
AUTHORIZATION_CODES = frozenset({
    ErrorCode.topic_authorization_failed, ErrorCode.group_authorization_failed,
    ErrorCode.cluster_authorization_failed, ErrorCode.transactional_id_authorization_failed})
T = TypeVar("T")


def eventually(action: Callable[[], T], holds: Callable[[T], bool], what: str,
               timeout: float = WAIT_S) -> T:
    """Run ``action`` until ``holds`` its result, at most ``timeout`` seconds and
    :data:`MAX_ATTEMPTS` times; AssertionError naming the last result otherwise."""
    deadline = time.monotonic() + timeout
    for _ in range(MAX_ATTEMPTS):
        result = action()
        if holds(result):
            return result
        if time.monotonic() > deadline:
            break
        time.sleep(POLL_S)
    raise AssertionError(f"{what}: last answer {result!r}")


class Grants:
    """ACLs a test adds (any principal and host); removed with :meth:`revoke` or
    :meth:`remove_all` (the fixtures call it at the test's end)."""

    def __init__(self, store: AclStore, principal: str = ANONYMOUS) -> None:
        self.store = store
        self.principal = principal
        self.added: list[dict[str, Any]] = []

    def add(self, resource_type: str, name: str, operation: str, *,
            principal: str | None = None, permission: str = "Allow", host: str = "*",
            pattern_type: str = "LITERAL") -> None:
        """One ACL (``permission`` "Allow" or "Deny")."""
        self._add(self._acl(resource_type, name, operation, permission, pattern_type,
                            principal, host))

    def allow(self, resource_type: str, name: str, operation: str, *,
              pattern_type: str = "LITERAL", principal: str | None = None,
              host: str = "*") -> None:
        self._add(self._acl(resource_type, name, operation, "Allow", pattern_type, principal,
                            host))

    def deny(self, resource_type: str, name: str, operation: str, *,
             pattern_type: str = "LITERAL", principal: str | None = None,
             host: str = "*") -> None:
        self._add(self._acl(resource_type, name, operation, "Deny", pattern_type, principal,
                            host))

    def revoke(self, resource_type: str, name: str, operation: str, *,
               permission: str = "Allow", pattern_type: str = "LITERAL",
               principal: str | None = None, host: str = "*") -> None:
        acl = self._acl(resource_type, name, operation, permission, pattern_type, principal,
                        host)
        self.store.remove(**acl)
        self.added.remove(acl)

    def remove_all(self) -> None:
        for acl in reversed(self.added):
            self.store.remove(**acl)
        self.added.clear()

    def _acl(self, resource_type: str, name: str, operation: str, permission: str,
             pattern_type: str, principal: str | None, host: str) -> dict[str, Any]:
        return {"resource_type": resource_type, "name": name,
                "principal": principal or self.principal, "operation": operation,
                "permission": permission, "host": host, "pattern_type": pattern_type}

    def _add(self, acl: dict[str, Any]) -> None:
        self.store.add(**acl)
        self.added.append(acl)


# ---- probes: does a broker already apply an ACL? (raw requests, one connection each)


def probe_code(port: int, resource_type: str, name: str, operation: str) -> int:
    """The error code a request needing ``operation`` (or one it implies: DESCRIBE for READ,
    WRITE, ...) on the resource gets from the broker at ``port``; an *_AUTHORIZATION_FAILED
    code while the broker does not allow it. Side-effect free.

    * Topic (any operation implying DESCRIBE): Metadata v9 for the topic, no auto-creation.
    * Group / TransactionalId (READ/WRITE/DESCRIBE): FindCoordinator v4 (DESCRIBE).
    * Cluster CLUSTER_ACTION: WriteTxnMarkers for a topic that does not exist.
    * Cluster DESCRIBE (or ALTER/ALL): DescribeAcls for nothing.
    """
    kind, op = resource_type.lower().replace("_", ""), operation.lower().replace("_", "")
    with WireClient("127.0.0.1", port, timeout=15) as wire:
        if kind == "topic":
            response = wire.request(3, 9, {"topics": [{"name": name}],
                                           "allow_auto_topic_creation": False})
            return int(response.topics[0].error_code)
        if kind in ("group", "transactionalid"):
            response = wire.request(10, 4, {"key_type": 0 if kind == "group" else 1,
                                            "coordinator_keys": [name]})
            return int(response.coordinators[0].error_code)
        if kind == "cluster" and op == "clusteraction":
            response = wire.request(27, 1, {"markers": [{
                "producer_id": 1, "producer_epoch": 0, "transaction_result": False,
                "coordinator_epoch": 0,
                "topics": [{"name": "authz-probe-no-such-topic", "partition_indexes": [0]}]}]})
            return int(response.markers[0].topics[0].partitions[0].error_code)
        if kind == "cluster" and op in ("describe", "alter", "all"):
            response = wire.request(29, 3, {
                "resource_type_filter": 2, "resource_name_filter": "no-such-topic",
                "pattern_type_filter": 3, "principal_filter": None, "host_filter": None,
                "operation": 1, "permission_type": 1})
            return int(response.error_code)
    raise ValueError(f"no probe for {operation} on {resource_type}")


def wait_allowed(ports: Iterable[int], resource_type: str, name: str, operation: str,
                 *, allowed: bool = True, timeout: float = WAIT_S) -> None:
    """Wait until every broker at ``ports`` allows (or, with ``allowed=False``, refuses) the
    probe of :func:`probe_code` for ``operation`` on the resource."""
    for port in ports:
        eventually(functools.partial(probe_code, port, resource_type, name, operation),
                   lambda code: (code not in AUTHORIZATION_CODES) == allowed,
                   f"broker at port {port}: {operation} on {resource_type}:{name} "
                   f"{'allowed' if allowed else 'refused'}", timeout)


def barrier(store: AclStore, ports: Iterable[int], *, principal: str = ANONYMOUS) -> None:
    """Wait until every broker at ``ports`` has applied every ACL change written so far (e.g.
    the previous test's revocations, which a refusal cannot show when something else
    refuses too): a sentinel grant on each change path (LITERAL and PREFIXED) is written and
    awaited, as a broker applies each path's notifications in order. The probes connect as
    ``principal`` (PLAINTEXT: ``User:ANONYMOUS``, not a super user)."""
    name = f"authz-barrier-{uuid.uuid4().hex[:10]}"
    ports = list(ports)
    for pattern_type, probe in (("LITERAL", name), ("PREFIXED", name + "-x")):
        acl = {"resource_type": "Topic", "name": name, "principal": principal,
               "operation": "Describe", "pattern_type": pattern_type}
        store.add(**acl)
        try:
            wait_allowed(ports, "Topic", probe, "Describe")
        finally:
            store.remove(**acl)


PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
"""The SASL PLAIN users of :func:`plain_sasl_overrides` (admin is a super user)."""


def plain_sasl_overrides() -> dict[str, str]:
    """Broker settings of a test cluster with the ACL authorizer: a PLAINTEXT listener on the
    base port (brokers and ANONYMOUS setup are super users) and a SASL_PLAINTEXT listener with
    PLAIN users :data:`PLAIN_USERS` on port + 100."""
    users = " ".join(f'user_{name}="{password}"' for name, password in PLAIN_USERS.items())
    return {
        "listeners": "PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{port:1}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
    }


@contextlib.contextmanager
def acl_store(zookeeper_connect: str) -> Iterator[AclStore]:
    """An :class:`AclStore` on its own ZooKeeper client, closed at the end."""
    client = KazooClient(hosts=zookeeper_connect, timeout=10)
    client.start(timeout=20)
    try:
        yield AclStore(client)
    finally:
        client.stop()
        client.close()


@contextlib.contextmanager
def granted(store: AclStore) -> Iterator[Callable[..., None]]:
    """``add(resource_type, name, operation, principal=..., permission=..., ...)``: ACLs
    removed at the end."""
    grants = Grants(store)
    try:
        yield grants.add
    finally:
        grants.remove_all()
