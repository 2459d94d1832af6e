"""Ephemeral ownership claims: one live ZooKeeper session at a time holds a znode.

Used for the group coordinator's ``/consumers/<group>/owner`` and the transaction
coordinator's ``/loglake/transactions/<p>/owner``. The claim is the ephemeral znode itself:
it vanishes with the session that made it, so a crashed owner's claim ends with its session.
Blocking (kazoo); call from worker threads only.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

ATTEMPTS = 3


def claim_ephemeral(zk: KazooClient, path: str, owner: bytes) -> bool:
    """Create the ephemeral ``path`` holding ``owner`` unless another live session holds it.

    True if this session holds it (created now, or already held by this session); False while
    another session does. If the holder's znode vanishes between our create and our read, the
    create is tried again (at most :data:`ATTEMPTS` times). The parent must exist.
    """
    for _ in range(ATTEMPTS):
        try:
            zk.create(path, owner, ephemeral=True)
            return True
        except NodeExistsError:
            try:
                _, stat = zk.get(path)
            except NoNodeError:
                continue
            return bool(stat.ephemeralOwner == zk.client_id[0])
    return False
