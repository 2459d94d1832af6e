"""Transaction coordinator state in ZooKeeper: per state partition an owner, a coordinator
epoch and one znode per transactional id.

Layout under the cluster chroot (``<p>``: the state partition, 0-49, broker/transactions/
ownership.py)::

    /loglake/transactions/<p>/owner          ephemeral: the id of the coordinating broker
    /loglake/transactions/<p>/epoch          {"coordinator_epoch": n, "broker": id}: n grows by
                                             one at every takeover of the partition
    /loglake/transactions/<p>/ids/<id>       {"producer_id", "last_producer_id",
                                              "producer_epoch", "last_producer_epoch",
                                              "timeout_ms", "state", "partitions": [[topic, p]],
                                              "groups": [group], "txn_start_ms",
                                              "last_update_ms"}  (state.py's TransactionMetadata)

``<id>`` is the transactional id itself when ZooKeeper accepts it as a node name, else
percent-encoded (the same escaping as group ids, catalog/groups.py's ``group_node``).

Invariants:

* A broker coordinates partition ``p`` only while it holds ``owner`` (ephemeral: it goes with
  the broker's session) and after it bumped ``epoch`` (:meth:`TransactionStore.take_over`,
  one transaction conditioned on the owner znode it holds).
* Every write of an id (:meth:`TransactionStore.write`, :meth:`TransactionStore.delete`) is one
  ZooKeeper transaction: *check* that ``epoch`` is still at the version the writer's takeover
  produced, then create/set/delete the id's znode at the version the writer last saw. A deposed
  coordinator (its successor bumped the epoch) or a writer with a stale copy of the id gets
  :class:`StaleTransactionStateError` and writes nothing.
* The coordinator epoch is the ``coordinator_epoch`` of WriteTxnMarkers: partitions refuse
  markers from an older coordinator of the same producer (TRANSACTION_COORDINATOR_FENCED).

Errors: kazoo's connection errors become :class:`ZooKeeperUnavailableError` (retriable); a lost
condition is :class:`StaleTransactionStateError`. Thread-safety: kazoo is thread-safe and this
class keeps no other state; call it from worker threads (``ZkSession.call``), never from the
event loop.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from loglake.catalog.claims import claim_ephemeral
from loglake.catalog.groups import group_id_of, group_node
from loglake.catalog.zookeeper import ZooKeeperUnavailableError, zookeeper_unavailable
from loglake.errors import LoglakeError

log = logging.getLogger(__name__)

TRANSACTIONS = "/loglake/transactions"

P = ParamSpec("P")
T = TypeVar("T")


class StaleTransactionStateError(LoglakeError):
    """A conditioned write lost: the partition's coordinator epoch moved (another broker took
    over) or the id's znode changed since it was read."""


def _partition(partition: int) -> str:
    return f"{TRANSACTIONS}/{partition}"


def id_path(partition: int, transactional_id: str) -> str:
    """The znode of ``transactional_id`` in state partition ``partition``."""
    return f"{_partition(partition)}/ids/{group_node(transactional_id)}"


@contextlib.contextmanager
def _typed() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        if zookeeper_unavailable(exc) and not isinstance(exc, ZooKeeperUnavailableError):
            raise ZooKeeperUnavailableError(f"transaction state: {exc!r}") from exc
        raise


def _zookeeper_op(func: Callable[P, T]) -> Callable[P, T]:
    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        with _typed():
            return func(*args, **kwargs)
    return wrapper


class TransactionStore:
    """The layout above on one kazoo client (see the module docstring)."""

    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk

    # ---- ownership
    @_zookeeper_op
    def claim(self, partition: int, broker_id: int) -> bool:
        """Hold ``owner`` of ``partition`` unless another live session holds it."""
        self.zk.ensure_path(f"{_partition(partition)}/ids")
        return claim_ephemeral(self.zk, f"{_partition(partition)}/owner",
                               str(broker_id).encode())

    @_zookeeper_op
    def release(self, partition: int) -> None:
        """Give ``owner`` up if our session holds it."""
        path = f"{_partition(partition)}/owner"
        with contextlib.suppress(NoNodeError, BadVersionError):
            _, stat = self.zk.get(path)
            if stat.ephemeralOwner == self.zk.client_id[0]:
                self.zk.delete(path, version=stat.version)

    @_zookeeper_op
    def take_over(self, partition: int, broker_id: int) -> tuple[int, int]:
        """Bump the coordinator epoch of ``partition`` while we hold its owner znode; returns
        (coordinator epoch, version of the epoch znode), the condition of every later write.
        StaleTransactionStateError if our session does not hold the owner znode."""
        owner = f"{_partition(partition)}/owner"
        path = f"{_partition(partition)}/epoch"
        for _ in range(5):
            try:
                _, owner_stat = self.zk.get(owner)
            except NoNodeError:
                raise StaleTransactionStateError(
                    f"transaction state partition {partition}: not claimed") from None
            if owner_stat.ephemeralOwner != self.zk.client_id[0]:
                raise StaleTransactionStateError(
                    f"transaction state partition {partition} is owned by another broker")
            try:
                raw, stat = self.zk.get(path)
                epoch = int(json.loads(raw)["coordinator_epoch"]) + 1
                version = stat.version
            except NoNodeError:
                epoch, version = 0, -1
            value = json.dumps({"coordinator_epoch": epoch, "broker": broker_id}).encode()
            tx = self.zk.transaction()
            tx.check(owner, owner_stat.version)
            if version < 0:
                tx.create(path, value)
            else:
                tx.set_data(path, value, version=version)
            results = tx.commit()
            if not any(isinstance(r, Exception) for r in results):
                return epoch, 0 if version < 0 else version + 1
        raise StaleTransactionStateError(
            f"transaction state partition {partition}: the coordinator epoch kept changing")

    # ---- ids
    @_zookeeper_op
    def load(self, partition: int) -> dict[str, tuple[bytes, int]]:
        """Every id of ``partition``: id -> (stored JSON, znode version). Reads pipelined."""
        base = f"{_partition(partition)}/ids"
        try:
            nodes = self.zk.get_children(base)
        except NoNodeError:
            return {}
        reads = {node: self.zk.get_async(f"{base}/{node}") for node in nodes}
        result = {}
        for node, read in reads.items():
            try:
                raw, stat = read.get()
            except NoNodeError:
                continue
            result[group_id_of(node)] = (bytes(raw), int(stat.version))
        return result

    @_zookeeper_op
    def write(self, partition: int, transactional_id: str, value: bytes, version: int,
              epoch_version: int) -> int:
        """Create (``version`` -1) or replace (at ``version``) the id's znode, if the
        partition's epoch znode is still at ``epoch_version``; returns the new znode version."""
        path = id_path(partition, transactional_id)
        tx = self.zk.transaction()
        tx.check(f"{_partition(partition)}/epoch", epoch_version)
        if version < 0:
            tx.create(path, value)
        else:
            tx.set_data(path, value, version=version)
        self._commit(tx, partition, transactional_id)
        return 0 if version < 0 else version + 1

    @_zookeeper_op
    def delete(self, partition: int, transactional_id: str, version: int,
               epoch_version: int) -> None:
        """Remove the id's znode (an expired id), under the same conditions as :meth:`write`."""
        tx = self.zk.transaction()
        tx.check(f"{_partition(partition)}/epoch", epoch_version)
        tx.delete(id_path(partition, transactional_id), version=version)
        self._commit(tx, partition, transactional_id)

    @staticmethod
    def _commit(tx: Any, partition: int, transactional_id: str) -> None:
        results = tx.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            raise StaleTransactionStateError(
                f"transactional id {transactional_id} (state partition {partition}): "
                f"{type(failures[0]).__name__}; another coordinator took over or the id "
                f"changed")
