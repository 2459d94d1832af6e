"""``loglake schemas backfill``: re-typing a table tiered before its topic had a subject.

Real ZooKeeper, broker and ``loglake registry`` (``DevCluster(registry=True)``); the backfill
runs as the real CLI (``python -m loglake schemas backfill``) in a child process, once cut by a
crash point after its first commit (SIGKILL) to show it resumes; deltalake reads the table and
a confluent-kafka consumer reads the old offsets back through the broker's tier fetch.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from deltalake import DeltaTable

from loglake.catalog.zookeeper import ClusterCatalog
from loglake.dev.harness import DevCluster
from loglake.schemas.wire import frame
from loglake.segments.storage import Storage
from loglake.segments.tiered_table import TieredTable
from tests.admin_util import create_topic
from tests.tiering_util import SMALL_SEGMENTS, consume, wait_local_start, wait_tiered

EVENT = {"type": "record", "name": "Event", "namespace": "loglake.test",
         "fields": [{"name": "user_id", "type": "long"}, {"name": "kind", "type": "string"},
                    {"name": "amount", "type": "double"}]}


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("schema_backfill")
    with DevCluster(data / "dev", zookeeper=zookeeper_hosts, registry=True,
                    broker_overrides={"remote.log.manager.task.interval.ms": "200"}) as cluster:
        yield cluster


def _event(i: int) -> dict[str, Any]:
    return {"user_id": i % 41, "kind": ("view", "buy", "like")[i % 3], "amount": i / 2}


def _encoded(i: int) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(EVENT), _event(i))
    return buf.getvalue()


def _produce(dev: DevCluster, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": dev.bootstrap_servers, "acks": "all",
                         "linger.ms": 5, "batch.size": 16000, "enable.idempotence": True})
    for value in values:
        while True:
            try:
                producer.produce(topic, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


def _backfill(dev: DevCluster, topic: str, *extra: str,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loglake", "schemas", "backfill", "--zookeeper",
         dev.zookeeper_connect, "--topic", topic, *extra],
        capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})


def _rows(dev: DevCluster, topic: str) -> pa.Table:
    dt = DeltaTable(Storage.from_url(dev.storage_url).table_uri(topic))
    return pa.table(dt.to_pyarrow_dataset().to_table()).sort_by("offset")


def test_backfill_types_files_tiered_raw_resumes_and_keeps_records(
        dev: DevCluster, topic_name: str) -> None:
    topic = f"events-{topic_name}"
    create_topic(dev.bootstrap_servers, topic, 1, {**SMALL_SEGMENTS, "local.retention.ms": "0"})
    registry = SchemaRegistryClient(dev.registry_config())
    # the schema exists (under another subject), the topic's own subject not yet: raw tiering
    schema_id = registry.register_schema(f"staging-{topic}", Schema(json.dumps(EVENT), "AVRO"))
    values = [frame(schema_id, _encoded(i)) for i in range(4000)]
    values[1234] = b"plain text, not framed"
    _produce(dev, topic, values)
    raw_end = wait_tiered(dev.storage_url, topic, (0,), at_least=3000, timeout=120)[0]
    table = TieredTable(Storage.from_url(dev.storage_url), topic)
    assert len(table.files(0, refresh=True)) >= 3
    assert "value_typed" not in _rows(dev, topic).column_names

    # no subject yet: a one-line error, nothing changed
    failed = _backfill(dev, topic)
    assert failed.returncode == 1, failed
    assert f"{topic}-value" in failed.stderr and "Traceback" not in failed.stderr

    assert registry.register_schema(f"{topic}-value", Schema(json.dumps(EVENT), "AVRO")) \
        == schema_id
    version_before = table.table(refresh=True).version()
    dry = _backfill(dev, topic, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would re-type" in dry.stdout
    assert table.table(refresh=True).version() == version_before

    # cut after the first file's commit (SIGKILL), then run again: it continues
    cut = _backfill(dev, topic, env={"LOGLAKE_CRASH_AT": "backfill-after-commit"})
    assert cut.returncode == -9, (cut.returncode, cut.stdout, cut.stderr)
    partly = _rows(dev, topic)
    typed_files = [f for f in table.files(0, refresh=True)
                   if "value_typed" in _file_columns(table, f.uri)]
    assert len(typed_files) >= 1
    done = _backfill(dev, topic)
    assert done.returncode == 0, done.stderr
    assert "file(s) re-typed" in done.stdout and "backfill " in done.stdout

    rows = _rows(dev, topic)
    assert rows.num_rows == partly.num_rows >= raw_end
    assert rows.column("offset").to_pylist() == list(range(rows.num_rows))
    assert rows.column("value").to_pylist() == values[:rows.num_rows]  # raw bytes kept
    typed = rows.column("value_typed").to_pylist()
    errors = rows.column("value_error").to_pylist()
    for offset in range(rows.num_rows):
        if offset == 1234:
            assert typed[offset] is None and errors[offset] == "not framed: magic byte 0x70"
        else:
            assert errors[offset] is None and typed[offset] == _event(offset), offset
    assert set(rows.column("value_schema_id").drop_null().to_pylist()) == {schema_id}
    assert all("value_typed" in _file_columns(table, f.uri)
               for f in table.files(0, refresh=True))

    again = _backfill(dev, topic)  # resumable: nothing left
    assert again.returncode == 0 and "nothing to re-type" in again.stdout

    catalog = ClusterCatalog(dev.zookeeper_connect, mode="tool")
    catalog.start()
    try:
        runs = catalog.job_runs().runs("backfill")
    finally:
        catalog.stop()
    assert any(r.outcome == "success" and r.stats.get("files_added", 0) >= 1 for r in runs), runs

    # consumers reading the old offsets from the tier get the records byte for byte
    wait_local_start(dev.zookeeper_connect, topic, (0,), above=raw_end - 1)
    got = consume(dev.bootstrap_servers, topic, (0,), expected=raw_end)
    assert [r.value for r in got[:raw_end]] == values[:raw_end]


def _file_columns(table: TieredTable, uri: str) -> list[str]:
    import pyarrow.parquet as pq

    storage = table.storage
    with storage.pyarrow_filesystem().open_input_file(storage.path_in_fs(uri)) as source:
        return pq.ParquetFile(source).schema_arrow.names
