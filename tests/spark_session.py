"""pytest plugin: ONE local SparkSession for the whole test session, with ``loglake`` registered.

Spark takes ~10 s to start and a JVM cannot host a second SparkContext, so every Spark test
shares this fixture. ``local[2]`` (the CI box has 2 cores), 2 shuffle partitions, no UI, no
console progress bar, log level ERROR, UTC session time zone. The Python workers use the test
interpreter (conftest.py sets ``PYSPARK_PYTHON``) so they import loglake and its dependencies.
Stopped at the end of the session.

Also helpers for the Spark tests: :func:`produce_numbered` (value ``i`` at partition
``i % partitions``), :func:`storage_of` (the tier storage the brokers published) and
:func:`wait_tiered` (poll the Delta app transactions until the tier reaches given offsets; it
does not care who tiers). Topics created with :data:`SMALL_SEGMENTS` roll, and so tier, often.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from loglake.segments.storage import Storage


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from loglake.streaming import register
    from loglake.streaming.session import spark_configs

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("loglake-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config(map=spark_configs("local[2]"))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


# -- helpers shared by the Spark tests (test_spark_*.py) ----------------------------------------

SMALL_SEGMENTS = {"segment.bytes": "8000"}
"""Topic config that makes brokers roll (and so tier) a segment every ~8 kB (~400 records)."""


def produce_numbered(bootstrap: str, topic: str, start: int, count: int, *,
                     partitions: int = 1, headers: bool = False) -> None:
    """Produce values ``str(i)`` for i in ``[start, start + count)``, key ``k<i>``, round-robin
    over ``partitions`` (partition ``i % partitions``); raise if any delivery failed."""
    from confluent_kafka import Producer

    failures: list[object] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failures.append(error)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 4000,
                         "enable.idempotence": True, "on_delivery": delivered})
    for i in range(start, start + count):
        while True:
            try:
                producer.produce(topic, value=str(i).encode(), key=f"k{i}".encode(),
                                 partition=i % partitions,
                                 headers=[("n", str(i).encode())] if headers else None)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0, "records still undelivered"
    assert not failures, failures[:3]


def storage_of(zookeeper: str, secrets: dict[str, str] | None = None) -> Storage:
    """The cluster's tier storage, as the brokers published it in ZooKeeper (plus ``secrets``,
    which they never publish)."""
    from loglake.catalog.zookeeper import ClusterCatalog
    from loglake.segments.storage import Storage

    catalog = ClusterCatalog(zookeeper)
    catalog.start()
    try:
        published = catalog.storage()
    finally:
        catalog.stop()
    assert published is not None, "no broker published a tier storage"
    url, options = published
    return Storage.from_url(url, {**options, **(secrets or {})})


def wait_tiered(zookeeper: str, topic: str, targets: dict[int, int], *,
                timeout: float = 60.0) -> dict[int, int]:
    """Wait until every partition's tiered end reaches its target; return the tiered ends."""
    from loglake.dev.harness import wait_until
    from loglake.segments.tiered_table import TieredTable

    table = TieredTable(storage_of(zookeeper), topic)

    def reached() -> tuple[dict[int, int]] | None:
        ends = {p: table.tiered_end(p) or 0 for p in targets}
        return (ends,) if all(ends[p] >= target for p, target in targets.items()) else None

    [ends] = wait_until(reached, timeout, f"{topic}: tiered ends to reach {targets}",
                        interval=0.25)
    return ends
