"""Dynamic broker configs (Kafka's ``DynamicBrokerConfig``): ``/config/brokers/<id>`` and
``/config/brokers/<default>``, as last seen, and what they change.

The only dynamic broker configs are the replication throttle rates
(``config.DYNAMIC_BROKER_CONFIG_KEYS``); for each, a value for this broker wins over the cluster
default, which wins over ``server.properties`` (replication_quota.effective_rates). Every change
recomputes the rates and hands them to the :class:`ReplicationQuotas`.

Where changes come from: a DataWatch on each of the two znodes (:meth:`DynamicBrokerConfig.watch`,
registered on the ZooKeeper executor at start-up; the data a watch read is applied on the loop,
nothing is read on the loop), and IncrementalAlterConfigs/AlterConfigs on this broker, which
applies its own write at once (handlers/broker_configs.py) without waiting for the watch.

Invariant: ``dynamic_configs`` holds, per entity, the complete set last seen (a znode that does
not exist is ``{}``); the quotas' rates are always ``effective_rates`` of it. Thread-safety:
event loop only; the watch callbacks hop onto it with ``ZkSession.run_soon``.
"""

from __future__ import annotations

from collections.abc import Callable

from loglake.broker.replication_quota import DEFAULT_ENTITY, ReplicationQuotas, effective_rates
from loglake.broker.zk_session import ZkSession
from loglake.config import BrokerConfig


class DynamicBrokerConfig:
    """The dynamic broker configs of this broker (see the module docstring)."""

    def __init__(self, config: BrokerConfig, quotas: ReplicationQuotas) -> None:
        """Rates start from ``config`` (server.properties) and go to ``quotas``; the static
        rates apply at once, before any watch fires."""
        self.config = config
        self.quotas = quotas
        self.dynamic_configs: dict[str, dict[str, str]] = {}  # entity -> /config/brokers/..
        self.apply_broker_configs()

    def apply_broker_configs(self, entity: str | None = None,
                             configs: dict[str, str] | None = None) -> None:
        """Dynamic broker configs of ``entity`` changed (or, without arguments, start-up):
        recompute the replication throttle rates (see replication_quota.effective_rates)."""
        if entity is not None:
            self.dynamic_configs[entity] = dict(configs or {})
        static = {"leader.replication.throttled.rate":
                  self.config.leader_replication_throttled_rate,
                  "follower.replication.throttled.rate":
                  self.config.follower_replication_throttled_rate}
        self.quotas.apply(effective_rates(
            static, self.dynamic_configs.get(DEFAULT_ENTITY, {}),
            self.dynamic_configs.get(str(self.config.broker_id), {})))

    async def watch(self, zk: ZkSession) -> None:
        """Watch ``<default>`` and this broker's znode (each step waits out ZooKeeper outages,
        ``ZkSession.step``); every change is applied on the loop."""
        for entity in (DEFAULT_ENTITY, str(self.config.broker_id)):
            await zk.step("watching dynamic broker configs", zk.catalog.watch_broker_config,
                          entity, self._watcher(zk, entity))

    def _watcher(self, zk: ZkSession, entity: str) -> Callable[[dict[str, str]], None]:
        return lambda configs: zk.run_soon(lambda: self.apply_broker_configs(entity, configs))
