"""Partition reassignment plans in kafka-reassign-partitions' JSON format, proposals, and the
throttles a reassignment sets (pure functions; :class:`loglake.client.Admin` sends requests).

Plan format (Kafka's, version 1)::

    {"version":1,"partitions":[
      {"topic":"orders","partition":0,"replicas":[1,2,4],"log_dirs":["any","any","any"]}]}

``log_dirs`` is optional; when present it must have one entry per replica and every entry must
be ``"any"`` (a broker has one log directory here: there is no AlterReplicaLogDirs). A
partition may appear once. :func:`format_plan` writes what Kafka's tool writes (compact JSON,
``log_dirs`` all ``"any"``), so plans go back and forth between the two tools.

Throttles (:func:`throttled_replicas`), as kafka-reassign-partitions' ``--throttle`` computes
them: for every partition whose replicas change, ``leader.replication.throttled.replicas`` of
its topic lists the current replicas (``partition:broker``: whichever of them leads throttles
what it sends to new replicas) and ``follower.replication.throttled.replicas`` the new ones
(what they fetch is throttled). :func:`throttled_brokers` are the brokers whose rates are set.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loglake.broker.topics import assign_replicas
from loglake.client.model import TopicPartitionKey

PLAN_VERSION = 1
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"

Assignment = dict[TopicPartitionKey, tuple[int, ...]]
"""(topic, partition) -> replica broker ids, in order."""


@dataclass(frozen=True)
class PartitionReassignment:
    """A reassignment in progress (ListPartitionReassignments): the full replica set while it
    moves, and the replicas being added and removed."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)


def parse_plan(text: str) -> Assignment:
    """A plan's partitions and their target replicas; ValueError saying what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the plan is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("partitions"), list):
        raise ValueError('a plan is {"version":1,"partitions":[{"topic":...,"partition":...,'
                         '"replicas":[...]}, ...]}')
    if data.get("version", PLAN_VERSION) != PLAN_VERSION:
        raise ValueError(f"unsupported plan version {data.get('version')!r} (expected 1)")
    plan: Assignment = {}
    for number, entry in enumerate(data["partitions"], start=1):
        where = f"partition entry {number}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} is not an object")
        topic, partition, replicas = (entry.get("topic"), entry.get("partition"),
                                      entry.get("replicas"))
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"{where} needs a topic name")
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise ValueError(f"{where} ({topic}) needs a partition number >= 0")
        where = f"{topic}-{partition}"
        if not isinstance(replicas, list) or not replicas or not all(
                _is_int(r) for r in replicas):
            raise ValueError(f"{where}: replicas must be a non-empty list of broker ids")
        if len(set(replicas)) != len(replicas):
            raise ValueError(f"{where}: duplicate broker ids in {replicas}")
        log_dirs = entry.get("log_dirs")
        if log_dirs is not None and (not isinstance(log_dirs, list)
                                     or len(log_dirs) != len(replicas)
                                     or any(d != "any" for d in log_dirs)):
            raise ValueError(f'{where}: log_dirs must list "any" once per replica (a broker '
                             "has one log directory here)")
        if (topic, partition) in plan:
            raise ValueError(f"{where} appears twice in the plan")
        plan[(topic, partition)] = tuple(replicas)
    if not plan:
        raise ValueError("the plan lists no partitions")
    return plan


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def format_plan(assignment: Mapping[TopicPartitionKey, Sequence[int]]) -> str:
    """Kafka's JSON for ``assignment`` (sorted by topic and partition)."""
    return json.dumps({"version": PLAN_VERSION, "partitions": [
        {"topic": topic, "partition": partition, "replicas": list(replicas),
         "log_dirs": ["any"] * len(replicas)}
        for (topic, partition), replicas in sorted(assignment.items())
    ]}, separators=(",", ":"))


def propose(current: Mapping[TopicPartitionKey, Sequence[int]],
            brokers: Mapping[int, str | None], *, seed: int | None = None) -> Assignment:
    """A new assignment of ``current``'s partitions over ``brokers`` (id -> rack), each topic
    keeping its partition count and replication factor: the round-robin (rack-alternating)
    spread topics are created with. ValueError when a topic's replication factor exceeds the
    number of brokers."""
    by_topic: dict[str, dict[int, Sequence[int]]] = {}
    for (topic, partition), replicas in current.items():
        by_topic.setdefault(topic, {})[partition] = replicas
    proposed: Assignment = {}
    for topic, partitions in sorted(by_topic.items()):
        factor = max(len(r) for r in partitions.values())
        if factor > len(brokers):
            raise ValueError(f"topic {topic} has replication factor {factor}, more than the "
                             f"{len(brokers)} broker(s) given")
        spread = assign_replicas(brokers, max(partitions) + 1, factor, seed=seed)
        for partition in partitions:
            proposed[(topic, partition)] = spread[partition]
    return proposed


def moving(current: Mapping[TopicPartitionKey, Sequence[int]],
           proposed: Mapping[TopicPartitionKey, Sequence[int]]) -> list[TopicPartitionKey]:
    """The partitions whose replica list changes (order included), sorted."""
    return sorted(key for key, replicas in proposed.items()
                  if tuple(current.get(key, ())) != tuple(replicas))


def throttled_replicas(current: Mapping[TopicPartitionKey, Sequence[int]],
                       proposed: Mapping[TopicPartitionKey, Sequence[int]],
                       ) -> dict[str, dict[str, str]]:
    """Per topic, the values of the two ``*.replication.throttled.replicas`` configs for
    moving ``current`` to ``proposed`` (see the module docstring)."""
    leader: dict[str, list[str]] = {}
    follower: dict[str, list[str]] = {}
    for topic, partition in moving(current, proposed):
        existing = tuple(current.get((topic, partition), ()))
        leader.setdefault(topic, []).extend(f"{partition}:{b}" for b in existing)
        follower.setdefault(topic, []).extend(
            f"{partition}:{b}" for b in proposed[(topic, partition)] if b not in existing)
    return {topic: {LEADER_THROTTLED_REPLICAS: ",".join(leader[topic]),
                    FOLLOWER_THROTTLED_REPLICAS: ",".join(follower.get(topic, []))}
            for topic in sorted(leader)}


def throttled_brokers(current: Mapping[TopicPartitionKey, Sequence[int]],
                      proposed: Mapping[TopicPartitionKey, Sequence[int]]) -> list[int]:
    """The brokers holding or receiving a replica of a moving partition."""
    found: set[int] = set()
    for key in moving(current, proposed):
        found.update(current.get(key, ()))
        found.update(proposed[key])
    return sorted(found)


def describe_ongoing(ongoing: Mapping[TopicPartitionKey, PartitionReassignment]
                     ) -> Iterable[str]:
    """Lines like Kafka's ``--list``: ``t-0: replicas: 4,2,3,1. adding: 4. removing: 1.``"""
    for (topic, partition), r in sorted(ongoing.items()):
        yield (f"{topic}-{partition}: replicas: {_ids(r.replicas)}. adding: {_ids(r.adding)}. "
               f"removing: {_ids(r.removing)}.")


def _ids(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in ids)
