"""DescribeUserScramCredentials (v0) and AlterUserScramCredentials (v0), as Kafka's
``ZkAdminManager`` answers them.

The client salts: an upsertion carries (mechanism, iterations, salt, SaltedPassword), never
the password, and the broker stores the derived StoredKey/ServerKey in ``/config/users/<user>``
(security/scram_credentials.py). Authorization: DESCRIBE (describe) / ALTER (alter) on the
cluster (handlers/authz.py). Per-user errors:

* describe: a user named twice: DUPLICATE_RESOURCE; a named user without credentials:
  RESOURCE_NOT_FOUND; no names: every user that has a credential;
* alter: an unknown mechanism: UNSUPPORTED_SASL_MECHANISM; an empty user name, iterations
  outside [4096, 16384] or an empty salt/salted password: UNACCEPTABLE_CREDENTIAL; the same
  (user, mechanism) twice: DUPLICATE_RESOURCE; deleting a credential that does not exist:
  RESOURCE_NOT_FOUND. A user with any such error has none of its changes applied.

ZooKeeper reads and writes run on the ZooKeeper executor.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build, response_class
from loglake.broker.handlers import authz
from loglake.broker.security.acl_model import AclOperation
from loglake.broker.security.scram_credentials import (
    MAX_ITERATIONS,
    MECHANISM_BY_CODE,
    MECHANISM_CODES,
    MIN_ITERATIONS,
    credential_from_salted_password,
    credentials_of,
)
from loglake.catalog.entity_configs import USERS, desanitize, entity_path

if TYPE_CHECKING:
    from loglake.broker.services import BrokerServices

DESCRIBE_KEY = 50
ALTER_KEY = 51


async def describe_user_scram_credentials(services: BrokerServices, frame: RequestFrame
                                          ) -> Any:
    cls = response_class(DESCRIBE_KEY, frame.api_version)
    if not authz.cluster_allowed(services, frame, AclOperation.DESCRIBE):
        return build(cls, {"throttle_time": 0,
                           "error_code": ErrorCode.cluster_authorization_failed,
                           "error_message": None, "results": []})
    names = [user.name for user in frame.body.users or ()]
    store = services.zk.catalog.entity_configs()

    def read() -> dict[str, dict[str, Any]]:
        users = names or [desanitize(path.split("/", 1)[1]) for path in store.entities(USERS)]
        return {user: credentials_of(store.get(entity_path(user=user))) for user in set(users)}

    found = await services.zk.call(read)
    counts = Counter(names)
    results = []
    for user in (names if names else sorted(found)):
        credentials = found.get(user, {})
        if counts[user] > 1:
            results.append(_describe_error(user, ErrorCode.duplicate_resource,
                                           "Cannot describe SCRAM credentials for the same user "
                                           f"twice in a single request: {user}"))
        elif not credentials:
            if names:
                results.append(_describe_error(
                    user, ErrorCode.resource_not_found,
                    f"Attempt to describe a user credential that does not exist: {user}"))
        else:
            results.append({"user": user, "error_code": ErrorCode.none, "error_message": None,
                            "credential_infos": [
                                {"mechanism": MECHANISM_CODES[m], "iterations": c.iterations}
                                for m, c in sorted(credentials.items())]})
    if names:  # one result per named user, in request order, duplicates answered once
        first: dict[str, dict[str, Any]] = {}
        for result in results:
            first.setdefault(result["user"], result)
        results = list(first.values())
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none,
                       "error_message": None, "results": results})


def _describe_error(user: str, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": []}


async def alter_user_scram_credentials(services: BrokerServices, frame: RequestFrame) -> Any:
    cls = response_class(ALTER_KEY, frame.api_version)
    body = frame.body
    users = list(dict.fromkeys([d.name for d in body.deletions]
                               + [u.name for u in body.upsertions]))
    if not authz.cluster_allowed(services, frame, AclOperation.ALTER):
        return build(cls, {"throttle_time": 0, "results": [
            {"user": user, "error_code": ErrorCode.cluster_authorization_failed,
             "error_message": None} for user in users]})
    errors: dict[str, tuple[ErrorCode, str]] = {}
    pairs = Counter([(d.name, d.mechanism) for d in body.deletions]
                    + [(u.name, u.mechanism) for u in body.upsertions])
    updates: dict[str, dict[str, str | None]] = {user: {} for user in users}
    for user, code in pairs:
        if pairs[(user, code)] > 1:
            errors.setdefault(user, (ErrorCode.duplicate_resource,
                                     "A user credential cannot be altered twice in the same "
                                     "request"))
    for deletion in body.deletions:
        problem = _user_problem(deletion.name, deletion.mechanism)
        if problem is not None:
            errors.setdefault(deletion.name, problem)
        else:
            updates[deletion.name][MECHANISM_BY_CODE[deletion.mechanism]] = None
    for upsertion in body.upsertions:
        problem = _user_problem(upsertion.name, upsertion.mechanism) or _upsert_problem(
            upsertion)
        if problem is not None:
            errors.setdefault(upsertion.name, problem)
            continue
        mechanism = MECHANISM_BY_CODE[upsertion.mechanism]
        credential = credential_from_salted_password(
            mechanism, bytes(upsertion.salt), bytes(upsertion.salted_password),
            upsertion.iterations)
        updates[upsertion.name][mechanism] = credential.to_string()
    store = services.zk.catalog.entity_configs()
    deleted = {d.name: MECHANISM_BY_CODE.get(d.mechanism) for d in body.deletions}

    def apply() -> dict[str, tuple[ErrorCode, str]]:
        failed: dict[str, tuple[ErrorCode, str]] = {}
        for user, changes in updates.items():
            if user in errors or not changes:
                continue
            path = entity_path(user=user)
            current = store.get(path)
            missing = [m for m, value in changes.items() if value is None and m not in current]
            if missing and user in deleted:
                failed[user] = (ErrorCode.resource_not_found,
                                "Attempt to delete a user credential that does not exist")
                continue
            store.alter(path, changes)
        return failed

    errors.update(await services.zk.call(apply))
    return build(cls, {"throttle_time": 0, "results": [
        {"user": user, "error_code": errors.get(user, (ErrorCode.none, None))[0],
         "error_message": errors.get(user, (ErrorCode.none, None))[1]} for user in users]})


def _user_problem(user: str, mechanism_code: int) -> tuple[ErrorCode, str] | None:
    if not user:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism_code not in MECHANISM_BY_CODE:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


def _upsert_problem(upsertion: Any) -> tuple[ErrorCode, str] | None:
    if upsertion.iterations < MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too few iterations"
    if upsertion.iterations > MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too many iterations"
    if not upsertion.salt or not upsertion.salted_password:
        return ErrorCode.unacceptable_credential, "Salt and salted password must not be empty"
    return None
