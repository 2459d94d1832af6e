"""``kafka.isolation.level`` of ``format("loglake")`` (streaming/options.py, ranges.py): parsed
once, read_committed by default, handed to the range consumers (and not to producers through
the ``kafka.*`` pass-through). In-process; the live reads are in test_tier_transactions.py."""

from __future__ import annotations

import pytest

from loglake.streaming.errors import SourceOptionError
from loglake.streaming.options import parse_options
from loglake.streaming.ranges import ReadContext, consumer_config

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def test_reads_are_read_committed_by_default() -> None:
    options = parse_options(BASE, "batch")
    assert options.isolation_level == "read_committed"
    config = consumer_config(ReadContext("127.0.0.1:9092", None, options))
    assert config["isolation.level"] == "read_committed"


@pytest.mark.parametrize("value", ["read_uncommitted", "READ_UNCOMMITTED", " read_uncommitted "])
def test_read_uncommitted_is_an_option(value: str) -> None:
    options = parse_options({**BASE, "KAFKA.ISOLATION.LEVEL": value}, "stream")
    assert options.isolation_level == "read_uncommitted"
    assert "isolation.level" not in options.kafka  # one source of truth, never to producers
    config = consumer_config(ReadContext("127.0.0.1:9092", None, options))
    assert config["isolation.level"] == "read_uncommitted"


def test_other_isolation_levels_are_refused() -> None:
    with pytest.raises(SourceOptionError, match=r"kafka\.isolation\.level"):
        parse_options({**BASE, "kafka.isolation.level": "serializable"}, "batch")
