"""Topic names and replica assignment (pure functions)."""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence

from loglake.errors import InvalidReplicationFactorError, InvalidTopicError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> None:
    """Kafka's rules: 1-249 chars of [a-zA-Z0-9._-], not '.' or '..'."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty.")
    if name in (".", ".."):
        raise InvalidTopicError("Topic name cannot be \".\" or \"..\".")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, "
            f"topic name: {name[:40]}..."
        )
    if not _LEGAL.match(name):
        raise InvalidTopicError(
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII "
            "alphanumerics, '.', '_' and '-'."
        )


def assign_replicas(
    brokers: Sequence[int] | Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    *,
    seed: int | None = None,
    first_partition: int = 0,
    partition0_leader: int | None = None,
) -> dict[int, tuple[int, ...]]:
    """Spread leaders round-robin from a random start; replicas follow on the next brokers.

    ``brokers`` may map broker id -> rack (``broker.rack``). With racks, brokers are first
    ordered by alternating racks (a1, b1, c1, a2, ...), so consecutive brokers, and therefore
    the replicas of one partition, sit on different racks whenever ``replication_factor`` is at
    most the number of racks (Kafka's rack-aware assignment idea).

    Growing a topic (CreatePartitions): partitions ``first_partition`` .. ``first_partition +
    partitions - 1`` continue the round-robin that put partition 0's leader on
    ``partition0_leader`` (Kafka's ``fixedStartIndex`` / ``startPartitionId``), so leaders stay
    spread evenly; a random start when that broker is gone.
    """
    racks: Mapping[int, str | None] = (
        brokers if isinstance(brokers, Mapping) else dict.fromkeys(brokers)
    )
    ordered = _rack_alternating(racks)
    if replication_factor < 1 or replication_factor > len(ordered):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(ordered)}."
        )
    if partition0_leader in ordered:
        start = ordered.index(partition0_leader)
    else:
        start = random.Random(seed).randrange(len(ordered))
    count = len(ordered)
    return {
        p: tuple(ordered[(start + p + r) % count] for r in range(replication_factor))
        for p in range(first_partition, first_partition + partitions)
    }


def _rack_alternating(racks: Mapping[int, str | None]) -> list[int]:
    if all(rack is None for rack in racks.values()):
        return sorted(racks)
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker] or "", []).append(broker)
    ordered: list[int] = []
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    for i in range(max(len(c) for c in columns)):
        ordered.extend(column[i] for column in columns if i < len(column))
    return ordered
