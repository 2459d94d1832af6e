"""The broker's view of cluster metadata, fed by ZooKeeper watches (Kafka's ``MetadataCache``).

What it holds (the same on every broker, up to watch delays):

* ``topics``: name -> :class:`TopicMetadata` (assignment, configs overrides, znode version,
  partitions being reassigned), for the topics the last reconcile pass applied;
* ``topic_configs``: name -> effective :class:`TopicConfig` (broker defaults + overrides);
* ``topic_ids``: name -> topic id (the zero UUID when the topic znode carries none);
* ``live_brokers``: id -> :class:`BrokerInfo` from ``/brokers/ids`` (each with its advertised
  endpoints per listener: :meth:`MetadataCache.listener_brokers`);
* ``partition_states``: (topic, partition) -> :class:`PartitionState` from the state znodes;
* ``offline_replicas``: (topic, partition) -> ids of brokers whose replica is offline;
* ``controller_id`` (-1: none known) and ``cluster_id``.

Writers: the event loop only: the topic sync (topic_sync.py: watch callbacks, which hop onto the
loop, reconcile passes, the ISR manager's writes through it) and start-up (cluster id). Readers:
request handlers (Metadata, leader hints, DescribeCluster, admin requests), the controller, the
group coordinator, the replica manager and the replica fetchers, all on the event loop. No locks:
nothing here is touched from another thread. The values (TopicMetadata, PartitionState, BrokerInfo,
TopicConfig) are immutable: an update replaces an entry, so a reader holding a value keeps a
consistent snapshot of it across an ``await`` (the dicts themselves change).
"""

from __future__ import annotations

import uuid

from loglake.catalog.zookeeper import BrokerEndpoint, BrokerInfo, PartitionState, TopicMetadata
from loglake.config import TopicConfig

TopicPartition = tuple[str, int]


class MetadataCache:
    """See the module docstring."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicMetadata] = {}
        self.topic_configs: dict[str, TopicConfig] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.live_brokers: dict[int, BrokerInfo] = {}
        self.partition_states: dict[TopicPartition, PartitionState] = {}
        self.offline_replicas: dict[TopicPartition, frozenset[int]] = {}
        self.controller_id = -1
        self.cluster_id = ""

    def endpoint(self, broker_id: int, listener: str) -> BrokerEndpoint | None:
        """Live broker ``broker_id``'s endpoint on ``listener`` (None: not live, or it has no
        such listener)."""
        info = self.live_brokers.get(broker_id)
        return None if info is None else info.endpoint(listener)

    def listener_brokers(self, listener: str) -> list[tuple[BrokerInfo, BrokerEndpoint]]:
        """The live brokers with an endpoint on ``listener``, by id, with that endpoint: what a
        client connected on ``listener`` is told (brokers without it are left out, as Kafka's
        ``MetadataCache.getAliveBrokerNodes(listenerName)`` does)."""
        return [(info, endpoint) for _, info in sorted(self.live_brokers.items())
                if (endpoint := info.endpoint(listener)) is not None]

    def on_state(self, topic: str, index: int, state: PartitionState | None) -> bool:
        """A partition state read from ZooKeeper (None: the znode is gone). Returns whether it
        was stored: a state older (lower znode version) than the one known is ignored, so a
        late notification never overtakes a newer read."""
        key = (topic, index)
        if state is None:
            self.partition_states.pop(key, None)
            return False
        known = self.partition_states.get(key)
        if known is not None and state.zk_version < known.zk_version:
            return False
        self.partition_states[key] = state
        return True

    def drop_topic(self, name: str) -> None:
        """Forget a deleted topic and its partitions' states."""
        self.topics.pop(name, None)
        self.topic_configs.pop(name, None)
        self.topic_ids.pop(name, None)
        for key in [k for k in self.partition_states if k[0] == name]:
            del self.partition_states[key]

    def unclean_election(self, topic: str) -> bool:
        """Whether ``unclean.leader.election.enable`` holds for ``topic``."""
        config = self.topic_configs.get(topic)
        return bool(config and config.unclean_leader_election_enable)
