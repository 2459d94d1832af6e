"""Producer id allocation for InitProducerId (Kafka's ``ProducerIdManager``, ZooKeeper mode).

Each broker claims blocks of ``PRODUCER_ID_BLOCK_SIZE`` consecutive ids from the cluster-wide
``/latest_producer_id_block`` znode (``ClusterCatalog.claim_producer_id_block``: a
version-checked write, so two brokers never claim the same block) and hands them out in
increasing order. Ids of a block not handed out when the broker stops are never used: ids are
unique across the cluster, not dense.

Thread-safety: event loop only. Concurrent :meth:`ProducerIds.allocate` calls share one claim
(a lock), so a burst of InitProducerId requests claims one block, not one each.
"""

from __future__ import annotations

import asyncio

from loglake.broker.zk_session import ZkSession

PRODUCER_ID_BLOCK_SIZE = 1000


class ProducerIds:
    """Hands out producer ids from claimed blocks (see the module docstring)."""

    def __init__(self, zk: ZkSession, broker_id: int, *,
                 block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.block_size = block_size
        self._free: list[int] = []  # descending: pop() gives the smallest
        self._claiming = asyncio.Lock()

    async def allocate(self) -> int:
        """The next unused producer id (claims a new block when this one is used up)."""
        async with self._claiming:
            if not self._free:
                start = await self.zk.call(self.zk.catalog.claim_producer_id_block,
                                           self.broker_id, self.block_size)
                self._free = list(range(start + self.block_size - 1, start - 1, -1))
            return self._free.pop()
