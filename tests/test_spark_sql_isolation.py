"""``loglake sql --isolation-level`` (streaming/sql_cli.py): committed records only by default.

A topic holds a committed transaction, an aborted one and, last, an open one (a transactional
producer that has sent but not committed). ``loglake sql`` counts only the committed records by
default (and with ``--isolation-level read_committed``); ``read_uncommitted`` counts all three.
Real ZooKeeper + broker (the shared ``cluster``), real Spark (the shared ``spark``).
"""

from __future__ import annotations

import argparse

import pytest
from pyspark.sql import SparkSession

from loglake.client.producer import Producer
from loglake.dev.harness import DevCluster
from loglake.streaming import sql_cli
from tests.admin_util import create_topic


def _parse(zookeeper: str, query: str, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="loglake")
    sql_cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["sql", query, "--zookeeper", zookeeper, *extra])


def test_isolation_level_flag_parses() -> None:
    assert _parse("127.0.0.1:1", "SELECT 1").isolation_level == "read_committed"
    args = _parse("127.0.0.1:1", "SELECT 1", "--isolation-level", "read_uncommitted")
    assert args.isolation_level == "read_uncommitted"
    with pytest.raises(SystemExit):
        _parse("127.0.0.1:1", "SELECT 1", "--isolation-level", "serializable")


def _count(cluster: DevCluster, topic: str, capsys: pytest.CaptureFixture[str],
           *extra: str) -> int:
    args = _parse(cluster.zookeeper_connect, f"SELECT count(*) AS n FROM `{topic}`",
                  "--format", "csv", *extra)
    assert args.handler(args) == 0
    return int(capsys.readouterr().out.splitlines()[1])


def test_sql_reads_committed_records_unless_asked(
        spark: SparkSession, cluster: DevCluster, topic_name: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = cluster.bootstrap_servers
    topic = f"sqliso.{topic_name}"
    create_topic(bootstrap, topic, 1)
    committer = Producer(bootstrap, transactional_id=f"{topic_name}-a")
    with committer.transaction():
        for i in range(30):
            committer.send(topic, f"committed-{i}")
    committer.begin_transaction()
    for i in range(20):
        committer.send(topic, f"aborted-{i}")
    committer.flush(30)
    committer.abort_transaction()
    committer.close()
    opened = Producer(bootstrap, transactional_id=f"{topic_name}-b")
    try:
        opened.begin_transaction()
        for i in range(10):
            opened.send(topic, f"open-{i}")
        assert opened.flush(30) == 0

        assert _count(cluster, topic, capsys) == 30
        assert _count(cluster, topic, capsys, "--isolation-level", "read_committed") == 30
        assert _count(cluster, topic, capsys, "--isolation-level", "read_uncommitted") == 60
    finally:
        opened.abort_transaction()
        opened.close()
