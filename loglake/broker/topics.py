"""Topic names and replica assignment (pure functions)."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

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
    brokers: Sequence[int], partitions: int, replication_factor: int, *, seed: int | None = None
) -> dict[int, tuple[int, ...]]:
    """Spread leaders round-robin from a random start; replicas follow on the next brokers."""
    ordered = sorted(brokers)
    if replication_factor < 1 or replication_factor > len(ordered):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(ordered)}."
        )
    start = random.Random(seed).randrange(len(ordered))
    count = len(ordered)
    return {
        p: tuple(ordered[(start + p + r) % count] for r in range(replication_factor))
        for p in range(partitions)
    }
