"""Broker and topic settings are declared once; parsing, defaults and docs derive from that."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from loglake.config import (
    TOPIC_CONFIG_KEYS,
    BrokerConfig,
    TopicConfig,
    broker_settings,
    broker_settings_doc,
)
from loglake.errors import InvalidConfigError

REQUIRED = {"broker.id": "7", "zookeeper.connect": "127.0.0.1:2181/x"}


def test_every_setting_is_documented_and_in_the_doc() -> None:
    doc = broker_settings_doc()
    for setting in broker_settings().values():
        assert setting.doc
        assert setting.names[0] in doc


def test_absent_properties_take_the_declared_defaults() -> None:
    config = BrokerConfig.from_properties(REQUIRED)
    fields = {f.name: f for f in dataclasses.fields(BrokerConfig)}
    for attribute, setting in broker_settings().items():
        default = fields[attribute].default
        if setting.absent is None and default is not dataclasses.MISSING:
            assert getattr(config, attribute) == default, attribute
    assert (config.host, config.port, config.log_dir) == ("127.0.0.1", 9092,
                                                          Path("/tmp/loglake-logs"))


def test_each_property_reaches_its_attribute() -> None:
    config = BrokerConfig.from_properties({
        **REQUIRED, "listeners": "PLAINTEXT://127.0.0.2:9999", "log.dir": "/data",
        "auto.leader.rebalance.enable": "false", "replica.lag.time.max.ms": "1234",
        "remote.log.storage.option.region": "x", "log.retention.ms": "10"})
    assert (config.broker_id, config.host, config.port) == (7, "127.0.0.2", 9999)
    assert config.log_dir == Path("/data")
    assert config.auto_leader_rebalance_enable is False
    assert config.replica_lag_time_max_ms == 1234
    assert config.remote_log_storage_options == {"region": "x"}
    assert config.topic_config().retention_ms == 10


@pytest.mark.parametrize(("props", "message"), [
    ({**REQUIRED, "no.such.setting": "1"}, "Unknown broker setting(s): no.such.setting"),
    ({"broker.id": "1"}, "Missing required broker setting zookeeper.connect"),
    ({**REQUIRED, "num.partitions": "many"}, "Invalid broker setting"),
    ({**REQUIRED, "listeners": "PLAINTEXT//h:1"}, "listeners must look like NAME://host:port"),
    ({**REQUIRED, "listeners": "SSL://h:1"}, "inter.broker.listener.name must be a listener"),
])
def test_refusals_name_the_setting(props: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        BrokerConfig.from_properties(props)


def test_topic_config_defaults_are_the_declared_ones() -> None:
    config = TopicConfig()
    for name, key in TOPIC_CONFIG_KEYS.items():
        assert getattr(config, key.attribute) == key.default, name
