"""What a request handler may use: the narrow bundle of broker parts (``BrokerServices``).

Handlers (broker/handlers/) receive a :class:`BrokerServices`, never the ``Broker``: they
decode a request, call the part that owns the answer, and encode the response. The parts:

========================  ==================================================================
``config``                the broker's static configuration
``zk``                    the ZooKeeper session: ``zk.call`` for blocking catalog calls,
                          ``zk.catalog`` for what to call (broker/zk_session.py)
``metadata``              the metadata cache: topics, states, brokers (metadata_cache.py)
``replicas``              the replica manager: hosted partitions, produce/fetch rules
``groups``                the group coordinator
``controller``            the controller (ElectLeaders, reassignments)
``tierer``                the tiered storage of hosted partitions
``replication_quotas``    replication throttles (replication_quota.py)
``producer_ids``          producer id blocks (producer_ids.py)
``transactions``          the transaction coordinator (transactions/coordinator.py)
``topic_admin``           applying topic changes a handler just wrote (:class:`TopicAdmin`;
                          the topic sync, topic_sync.py)
``broker_configs``        dynamic broker configs (:class:`DynamicBrokerConfigs`;
                          dynamic_config.py)
``authorizer``            may a request's session do an operation on a resource
                          (security/authorizer.py; allow-all without ``authorizer.class.name``)
``quotas``                client quotas (quotas/manager.py; never enabled by default)
========================  ==================================================================

Built once by the broker at construction; every field is the long-lived part itself, so a
handler sees the same objects for the broker's whole life. Event loop only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from loglake.broker.quotas.manager import ClientQuotas, disabled_quotas
from loglake.broker.security.authorizer import AllowAllAuthorizer, Authorizer

if TYPE_CHECKING:
    from loglake.broker.controller import Controller
    from loglake.broker.groups.coordinator import GroupCoordinator
    from loglake.broker.metadata_cache import MetadataCache
    from loglake.broker.producer_ids import ProducerIds
    from loglake.broker.replica_manager import ReplicaManager
    from loglake.broker.replication_quota import ReplicationQuotas
    from loglake.broker.tiering import Tierer
    from loglake.broker.transactions.coordinator import TransactionCoordinator
    from loglake.broker.zk_session import ZkSession
    from loglake.config import BrokerConfig


class TopicAdmin(Protocol):
    """Applying topic changes that a handler has just written to ZooKeeper."""

    async def reconcile_after_change(self) -> None:
        """Make local replicas and metadata match ZooKeeper's topics now. A failed pass is
        logged and retried later; it never raises (the write itself succeeded)."""
        ...

    def apply_topic_config(self, name: str, overrides: Mapping[str, str]) -> None:
        """Use ``overrides`` as ``name``'s topic config from now on (metadata and hosted
        partitions)."""
        ...


class DynamicBrokerConfigs(Protocol):
    """Dynamic broker configs (``/config/brokers/<id>`` and ``<default>``) as last seen."""

    @property
    def dynamic_configs(self) -> Mapping[str, Mapping[str, str]]: ...

    def apply_broker_configs(self, entity: str | None = None,
                             configs: dict[str, str] | None = None) -> None: ...


@dataclass(frozen=True)
class BrokerServices:
    """The parts a request handler may use (see the module docstring)."""

    config: BrokerConfig
    zk: ZkSession
    metadata: MetadataCache
    replicas: ReplicaManager
    groups: GroupCoordinator
    controller: Controller
    tierer: Tierer
    replication_quotas: ReplicationQuotas
    producer_ids: ProducerIds
    topic_admin: TopicAdmin
    broker_configs: DynamicBrokerConfigs
    transactions: TransactionCoordinator
    clock: Callable[[], float] = field(default=time.time)
    authorizer: Authorizer = field(default_factory=AllowAllAuthorizer)
    quotas: ClientQuotas = field(default_factory=disabled_quotas)
