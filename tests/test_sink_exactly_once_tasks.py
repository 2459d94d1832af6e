"""One exactly-once write task (streaming/exactly_once.py ``write_exactly_once``) against the
real session ``cluster``, without Spark: a batch commits its rows and marker together, a second
attempt of the same batch writes nothing, the next batch writes again, and a zombie attempt's
open transaction is fenced and never becomes visible."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pytest

from loglake.client import Admin, Consumer, Producer
from loglake.client.errors import FatalTransactionError
from loglake.dev.harness import DevCluster
from loglake.streaming.exactly_once import TaskIdentity, write_exactly_once
from loglake.streaming.options import parse_options
from loglake.streaming.sink import send_rows, sink_layout
from tests.admin_util import create_topic

pytestmark = pytest.mark.timeout(180)


def _batches(start: int, count: int) -> Iterator[pa.RecordBatch]:
    yield pa.RecordBatch.from_pydict({"value": [str(i) for i in range(start, start + count)]})


def _values(bootstrap: str, topic: str, expected: int) -> Counter[int]:
    with Consumer(bootstrap, isolation_level="read_committed") as consumer:
        consumer.assign(topic, start="earliest")
        return Counter(int(r.value or b"") for r in consumer.consume(expected + 1, timeout=3.0))


def test_task_commits_once_and_fences_its_zombie(cluster: DevCluster, topic_name: str) -> None:
    from pyspark.sql.types import StringType, StructField, StructType

    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, topic_name, 2)
    options = parse_options({"kafka.bootstrap.servers": bootstrap, "topic": topic_name,
                             "deliveryGuarantee": "exactly-once"}, "write")
    layout = sink_layout(options, StructType([StructField("value", StringType())]))

    def write(identity: TaskIdentity, start: int, count: int) -> int | None:
        def send(producer: Producer, batches: Iterator[pa.RecordBatch]) -> int:
            return send_rows(producer, batches, options=options, layout=layout, failures=[])

        return write_exactly_once(_batches(start, count), bootstrap=bootstrap, options=options,
                                  identity=identity, marker_topic=topic_name, send_rows=send)

    sink_id = uuid.uuid4().hex[:16]
    assert write(TaskIdentity(sink_id, 0, 0), 0, 50) == 50
    assert write(TaskIdentity(sink_id, 0, 0), 0, 50) is None  # a retry of batch 0: skipped
    with Admin(bootstrap) as admin:
        assert admin.group_offsets(f"loglake-sink-{sink_id}-0") == {(topic_name, 0): 1}

    # a zombie attempt of batch 1 writes but never commits; the next attempt fences it
    zombie = Producer(bootstrap, transactional_id=TaskIdentity(sink_id, 0, 1).transactional_id)
    zombie.begin_transaction()
    for i in range(1000, 1010):
        zombie.send(topic_name, str(i))
    zombie.flush()
    assert write(TaskIdentity(sink_id, 0, 1), 50, 50) == 50
    with pytest.raises(FatalTransactionError):
        zombie.commit_transaction(timeout=10)

    assert _values(bootstrap, topic_name, 110) == Counter(range(100))
