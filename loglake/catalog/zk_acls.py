"""A kazoo client that gives every znode it creates the ACL of its path (Kafka's
``zookeeper.set.acl`` policy, :func:`loglake.catalog.zk_auth.acl_for`).

kazoo's ``default_acl`` is one list for every path, but Kafka's policy depends on the path
(``/config/users`` and ``/config/brokers`` get no world READ). :class:`PathAclKazooClient`
decides per path wherever a create passes no explicit ACL:

- ``create`` / ``create_async``: the node's own ACL; with ``makepath``, the missing parents are
  created first through ``ensure_path_async`` (each with *its* ACL; kazoo would give them the
  child's), then the node.
- ``ensure_path`` / ``ensure_path_async``: each missing component with its own ACL.
- ``transaction().create``: the node's ACL.

Paths are chroot-relative (what callers pass), so the policy sees Kafka's layout whatever the
chroot. ``default_acl`` stays unset (kazoo's synchronous ``create`` would otherwise fill it in
before the policy sees the call). An explicit ``acl=`` always wins. Without a policy
(``ZkAuth.set_acl`` false) this is plain kazoo: open ACLs, exactly as before.

Thread-safety: as kazoo's client (thread-safe); the completions run on kazoo's threads and
never block.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError
from kazoo.security import ACL, Permissions

log = logging.getLogger(__name__)

AclPolicy = Callable[[str], list[ACL]]
SECURE_ATTEMPTS = 5


def world_writable(acls: list[ACL]) -> bool:
    """Whether ``world:anyone`` may do more than READ on a znode with these ACLs."""
    return any(acl.id.scheme == "world" and acl.id.id == "anyone"
               and acl.perms & ~Permissions.READ for acl in acls)


def secure_if_open(client: KazooClient, path: str, acl: list[ACL]) -> bool:
    """Give ``path`` the ACL ``acl`` if the world may write it (e.g. a chroot a dev tool
    created before security was on); True if it changed it. Blocking (kazoo).

    Kafka creates its chroot with its secure ACL; a broker with ``zookeeper.set.acl`` does the
    same for a chroot someone created open, as it may (the open ACL lets anyone change ACLs).
    """
    for _attempt in range(SECURE_ATTEMPTS):
        acls, stat = client.get_acls(path)
        if not world_writable(acls):
            return False
        try:
            client.set_acls(path, acl, version=stat.aversion)
        except BadVersionError:  # changed meanwhile (another broker secured it): look again
            continue
        log.info("ZooKeeper: %s was open to the world; gave it the secure ACL", path)
        return True
    raise RuntimeError(f"the ACL of {path} kept changing while we tried to secure it")


class PathAclKazooClient(KazooClient):  # kazoo is untyped
    """kazoo's client with a per-path ACL policy for creations (see the module docstring)."""

    def __init__(self, *args: Any, acl_policy: AclPolicy | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.acl_policy = acl_policy

    def create_async(self, path: str, value: bytes = b"", acl: Any = None,
                     ephemeral: bool = False, sequence: bool = False, makepath: bool = False,
                     include_data: bool = False) -> Any:
        if acl is not None or self.acl_policy is None or not isinstance(path, str):
            return super().create_async(path, value, acl, ephemeral, sequence, makepath,
                                        include_data)
        own = self.acl_policy(path)
        if not makepath:
            return super().create_async(path, value, own, ephemeral, sequence, False,
                                        include_data)
        parent = path.rstrip("/") if sequence and path.endswith("/") else posixpath.dirname(path)
        result = self.handler.async_result()
        create = super().create_async

        def node_created(attempt: Any) -> None:
            try:
                result.set(attempt.get())
            except Exception as exc:
                result.set_exception(exc)

        def parents_ready(ensured: Any) -> None:
            try:
                ensured.get()
                create(path, value, own, ephemeral, sequence, False,
                       include_data).rawlink(node_created)
            except Exception as exc:
                result.set_exception(exc)

        self.ensure_path_async(parent).rawlink(parents_ready)
        return result

    def ensure_path_async(self, path: str, acl: Any = None) -> Any:
        if acl is not None or self.acl_policy is None:
            return super().ensure_path_async(path, acl)
        result = self.handler.async_result()
        path = path.rstrip("/") or "/"
        if path == "/":
            result.set(True)
            return result
        policy = self.acl_policy
        create = super().create_async

        def created(attempt: Any) -> None:
            try:
                attempt.get()
            except NodeExistsError:
                pass
            except Exception as exc:
                result.set_exception(exc)
                return
            result.set(True)

        def create_node() -> None:
            create(path, b"", policy(path)).rawlink(created)

        def parent_ready(ensured: Any) -> None:
            try:
                ensured.get()
                create_node()
            except Exception as exc:
                result.set_exception(exc)

        def looked_up(exists: Any) -> None:
            try:
                if exists.get() is not None:
                    result.set(True)
                    return
                self.ensure_path_async(posixpath.dirname(path)).rawlink(parent_ready)
            except Exception as exc:
                result.set_exception(exc)

        self.exists_async(path).rawlink(looked_up)
        return result

    def transaction(self) -> TransactionRequest:
        return _PathAclTransaction(self) if self.acl_policy is not None else super().transaction()


class _PathAclTransaction(TransactionRequest):  # kazoo is untyped
    """A transaction whose creates without an explicit ACL get their path's."""

    client: PathAclKazooClient

    def create(self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False,
               sequence: bool = False) -> None:
        if acl is None and self.client.acl_policy is not None and isinstance(path, str):
            acl = self.client.acl_policy(path)
        super().create(path, value, acl, ephemeral, sequence)
