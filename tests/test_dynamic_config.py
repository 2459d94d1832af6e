"""In-process tests of the dynamic broker configs (broker/dynamic_config.py): this broker's
value wins over the cluster default, which wins over server.properties; every change reaches
the replication quotas at once; each entity keeps the complete set last seen."""

from __future__ import annotations

from pathlib import Path

from loglake.broker.dynamic_config import DynamicBrokerConfig
from loglake.broker.replication_quota import (
    DEFAULT_ENTITY,
    FOLLOWER_RATE,
    LEADER_RATE,
    UNLIMITED,
    ReplicationQuotas,
)
from loglake.config import BrokerConfig


def _config(tmp_path: Path, **properties: str) -> BrokerConfig:
    return BrokerConfig.from_properties({
        "broker.id": "3", "zookeeper.connect": "127.0.0.1:2181", "log.dir": str(tmp_path),
        **properties})


def test_static_rates_apply_at_construction(tmp_path: Path) -> None:
    quotas = ReplicationQuotas(3)
    DynamicBrokerConfig(_config(tmp_path, **{LEADER_RATE: "1000"}), quotas)
    assert (quotas.leader.rate, quotas.follower.rate) == (1000, UNLIMITED)


def test_broker_value_wins_over_cluster_default_over_static(tmp_path: Path) -> None:
    quotas = ReplicationQuotas(3)
    configs = DynamicBrokerConfig(_config(tmp_path, **{LEADER_RATE: "1000"}), quotas)
    configs.apply_broker_configs(DEFAULT_ENTITY, {LEADER_RATE: "2000", FOLLOWER_RATE: "500"})
    assert (quotas.leader.rate, quotas.follower.rate) == (2000, 500)
    configs.apply_broker_configs("3", {LEADER_RATE: "3000"})
    assert (quotas.leader.rate, quotas.follower.rate) == (3000, 500)
    configs.apply_broker_configs("4", {LEADER_RATE: "9"})  # another broker's: no effect
    assert quotas.leader.rate == 3000
    configs.apply_broker_configs("3", {})  # the broker's znode emptied: the default again
    assert (quotas.leader.rate, quotas.follower.rate) == (2000, 500)
    configs.apply_broker_configs(DEFAULT_ENTITY, {})
    assert (quotas.leader.rate, quotas.follower.rate) == (1000, UNLIMITED)
    assert configs.dynamic_configs == {DEFAULT_ENTITY: {}, "3": {}, "4": {LEADER_RATE: "9"}}
