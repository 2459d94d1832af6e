"""broker/handlers/authz.py: the helpers every handler authorizes through (in-process, with a
table authorizer standing in for the ACL authorizer's decisions)."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest

from loglake.broker.codec import RequestFrame
from loglake.broker.handlers import authz
from loglake.broker.security.acl_model import AclOperation, ResourceType
from loglake.broker.security.authorizer import AllowAllAuthorizer
from loglake.broker.security.principal import KafkaPrincipal
from loglake.broker.security.session import Session

Op = AclOperation
RT = ResourceType


class TableAuthorizer:
    """Allows exactly the (operation, type, name) triples it holds; records each question."""

    enabled = True

    def __init__(self, grants: set[tuple[AclOperation, ResourceType, str]]) -> None:
        self.grants = grants
        self.asked: list[tuple[AclOperation, ResourceType, str]] = []

    def authorize(self, session: Session, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        self.asked.append((operation, resource_type, name))
        return (operation, resource_type, name) in self.grants

    def authorize_by_resource_type(self, session: Session, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        return any(op == operation and rt == resource_type for op, rt, _ in self.grants)


def _services(authorizer: Any) -> Any:
    return SimpleNamespace(authorizer=authorizer)


def _frame() -> RequestFrame:
    session = Session(client_host="127.0.0.1", principal=KafkaPrincipal("User", "alice"))
    body = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)
    return RequestFrame(api_key=3, api_version=12, correlation_id=1, client_id="c", body=body,
                        session=session)


def test_allow_all_allows_everything_and_reports_every_supported_operation() -> None:
    services, frame = _services(AllowAllAuthorizer()), _frame()
    assert authz.allowed(services, frame, Op.WRITE, RT.TOPIC, "t")
    assert authz.cluster_allowed(services, frame, Op.CLUSTER_ACTION)
    assert authz.allowed_by_resource_type(services, frame, Op.WRITE, RT.TOPIC)
    assert authz.filter_authorized(services, frame, Op.DESCRIBE, RT.TOPIC, ["a", "b", "a"]) \
        == {"a", "b"}
    # Kafka's topic bitfield with every supported operation: READ..ALTER_CONFIGS, no ALL/ANY.
    bits = authz.authorized_operations(services, frame, RT.TOPIC, "t")
    assert bits == sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
    assert bits == 3576
    assert authz.authorized_operations(services, frame, RT.GROUP, "g") == \
        sum(1 << op for op in (3, 6, 8, 10, 11))
    assert authz.authorized_operations(services, frame, RT.CLUSTER, "kafka-cluster") == \
        sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))


def test_allowed_asks_the_authorizer_for_the_literal_resource() -> None:
    table = TableAuthorizer({(Op.WRITE, RT.TOPIC, "t")})
    services, frame = _services(table), _frame()
    assert authz.allowed(services, frame, Op.WRITE, RT.TOPIC, "t")
    assert not authz.allowed(services, frame, Op.WRITE, RT.TOPIC, "u")
    assert not authz.allowed(services, frame, Op.READ, RT.TOPIC, "t")
    assert not authz.cluster_allowed(services, frame, Op.IDEMPOTENT_WRITE)
    assert table.asked[-1] == (Op.IDEMPOTENT_WRITE, RT.CLUSTER, "kafka-cluster")
    assert authz.allowed_by_resource_type(services, frame, Op.WRITE, RT.TOPIC)
    assert not authz.allowed_by_resource_type(services, frame, Op.READ, RT.TOPIC)


def test_filter_and_partition_decide_each_name_once_and_keep_order() -> None:
    table = TableAuthorizer({(Op.DESCRIBE, RT.TOPIC, "a"), (Op.DESCRIBE, RT.TOPIC, "c")})
    services, frame = _services(table), _frame()
    assert authz.filter_authorized(services, frame, Op.DESCRIBE, RT.TOPIC,
                                   ["a", "b", "a", "c"]) == {"a", "c"}
    assert len(table.asked) == 3
    yes, no = authz.partition_authorized(services, frame, Op.DESCRIBE, RT.TOPIC,
                                         [("c", 1), ("b", 2), ("a", 3), ("b", 4)],
                                         lambda item: item[0])
    assert yes == [("c", 1), ("a", 3)]
    assert no == [("b", 2), ("b", 4)]


def test_authorized_operations_bitfield_holds_only_granted_operations() -> None:
    table = TableAuthorizer({(Op.READ, RT.TOPIC, "t"), (Op.DESCRIBE, RT.TOPIC, "t"),
                             (Op.ALL, RT.TOPIC, "t")})
    services, frame = _services(table), _frame()
    # ALL is not a supported operation of its own (the authorizer expands it): not reported.
    assert authz.authorized_operations(services, frame, RT.TOPIC, "t") == (1 << 3) | (1 << 8)
    assert authz.authorized_operations(services, frame, RT.TOPIC, "other") == 0
    assert authz.AUTHORIZED_OPERATIONS_OMITTED == -2147483648


def test_authorization_errors_are_kafkas_codes() -> None:
    assert authz.authorization_error(RT.TOPIC) == ErrorCode.topic_authorization_failed == 29
    assert authz.authorization_error(RT.GROUP) == 30
    assert authz.authorization_error(RT.CLUSTER) == 31
    assert authz.authorization_error(RT.TRANSACTIONAL_ID) == 53
    with pytest.raises(ValueError):
        authz.authorization_error(RT.ANY)


def test_audit_lines_denied_at_info_allowed_at_debug_and_silenced_on_request(
        caplog: pytest.LogCaptureFixture) -> None:
    table = TableAuthorizer({(Op.READ, RT.TOPIC, "ok")})
    services, frame = _services(table), _frame()
    with caplog.at_level(logging.DEBUG, logger="loglake.authorizer"):
        authz.allowed(services, frame, Op.READ, RT.TOPIC, "ok")
        authz.allowed(services, frame, Op.READ, RT.TOPIC, "no")
        authz.allowed(services, frame, Op.READ, RT.TOPIC, "quiet", log_if_denied=False)
        authz.authorized_operations(services, frame, RT.TOPIC, "probe")
    lines = [(r.levelno, r.getMessage()) for r in caplog.records
             if r.name == "loglake.authorizer"]
    assert lines == [
        (logging.DEBUG, "Principal = User:alice is Allowed operation = Read from host = "
                        "127.0.0.1 on resource = Topic:LITERAL:ok for request = Metadata with "
                        "resourceRefCount = 1"),
        (logging.INFO, "Principal = User:alice is Denied operation = Read from host = "
                       "127.0.0.1 on resource = Topic:LITERAL:no for request = Metadata with "
                       "resourceRefCount = 1"),
    ]


def test_without_authorizer_nothing_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    services, frame = _services(AllowAllAuthorizer()), _frame()
    with caplog.at_level(logging.DEBUG, logger="loglake.authorizer"):
        assert authz.allowed(services, frame, Op.DELETE, RT.GROUP, "g")
    assert not [r for r in caplog.records if r.name == "loglake.authorizer"]
