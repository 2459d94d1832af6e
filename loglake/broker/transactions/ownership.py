"""Which broker coordinates a transactional id (Kafka's ``partitionFor`` plus our choice of a
broker per state partition).

1. **State partition.** A transactional id belongs to state partition
   ``abs(javaStringHashCode(id)) % STATE_PARTITIONS`` -- Kafka's formula for
   ``__transaction_state`` with its default ``transaction.state.log.num.partitions`` of 50, so
   an id lands in the same partition number as on Kafka.
2. **Broker.** The coordinator of state partition ``p`` is the rendezvous (highest random
   weight) choice over the live brokers: the live broker with the highest
   ``md5("__transaction_state-<p>:<broker>")``. When a broker dies only its partitions move;
   when it returns they move back.
3. **Exclusivity.** Every broker computes (2) from its own view of ``/brokers/ids``; two views
   may briefly differ. The coordinator therefore also holds the ephemeral owner znode of the
   partition and bumps its coordinator epoch when it takes over, and every write of a
   transaction's state is conditioned on that epoch (catalog/transactions.py): a deposed
   coordinator can neither claim the partition nor overwrite its successor.

Pure functions; no state.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable

from loglake.broker.groups.txn_offsets import java_string_hash, kafka_abs

STATE_PARTITIONS = 50
"""Kafka's default ``transaction.state.log.num.partitions``."""
STATE_TOPIC = "__transaction_state"


def state_partition_for(transactional_id: str) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % 50``."""
    return kafka_abs(java_string_hash(transactional_id)) % STATE_PARTITIONS


def coordinator_for_partition(partition: int, live: Iterable[int]) -> int:
    """The live broker that coordinates state partition ``partition``; -1 if none is live.

    Memoised per (partition, set of live brokers): the coordinator's ownership pass asks for
    all 50 partitions four times a second and the live set rarely changes."""
    return _rendezvous(partition, frozenset(live))


@functools.lru_cache(maxsize=4096)
def _rendezvous(partition: int, brokers: frozenset[int]) -> int:
    def score(broker: int) -> bytes:
        return hashlib.md5(f"{STATE_TOPIC}-{partition}:{broker}".encode(),
                           usedforsecurity=False).digest()

    return max(brokers, key=score) if brokers else -1
