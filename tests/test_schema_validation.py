"""Broker-side schema validation (broker/schema_validation.py; Confluent's
``confluent.value.schema.validation`` / ``confluent.key.schema.validation``).

In-process: the framing rule, the subject rule and the id cache (stale-while-revalidate,
unknown ids re-read at a bounded rate, ZooKeeper away). Live: a real broker with schemas
registered in the cluster's ZooKeeper store (and, once, through ``loglake registry`` by
confluent-kafka's own AvroSerializer); confluent-kafka producers (raw and framed bytes), raw
Produce v9 for the exact code, message and
``record_errors``; other topics unaffected; the config toggled with AlterConfigs at run time.
"""

from __future__ import annotations

import asyncio
import functools
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from loglake.broker.schema_validation import (
    MAX_RECORD_ERRORS,
    RETRY_UNKNOWN_S,
    SchemaValidation,
    framing_problem,
    validated_sides,
)
from loglake.catalog.schemas import SchemaStore
from loglake.catalog.zookeeper import ZooKeeperUnavailableError
from loglake.config import TopicConfig
from loglake.dev.harness import DevCluster, wait_until
from loglake.errors import InvalidRecordError
from loglake.schemas.typed_sides import configured_subject
from loglake.segments.records import Record, encode_batch
from tests.admin_util import create_topic
from tests.wire import WireClient

INVALID = KafkaError.INVALID_RECORD
VALUE_ON = TopicConfig(confluent_value_schema_validation=True)
AVRO_CLICK = ('{"type":"record","name":"Click","namespace":"test.validation","fields":['
              '{"name":"user_id","type":"long"},{"name":"page","type":"string"}]}')


def framed(schema_id: int, payload: bytes = b"\x02\x02x") -> bytes:
    return b"\x00" + struct.pack(">i", schema_id) + payload


def batch(pairs: list[tuple[bytes | None, bytes | None]]) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([Record(offset=i, timestamp=now, key=k, value=v)
                         for i, (k, v) in enumerate(pairs)])


# ------------------------------------------------------------------------- in-process rules


def test_framing_problem_names_what_is_wrong() -> None:
    ids = frozenset({7})
    assert framing_problem(framed(7), ids, "value", "t-value") is None
    assert framing_problem(None, ids, "value", "t-value") is None  # tombstone
    assert "magic byte 0x7b" in str(framing_problem(b'{"a":1}', ids, "value", "t-value"))
    assert "too short" in str(framing_problem(b"\x00\x00", ids, "key", "t-key"))
    assert "too short" in str(framing_problem(b"", ids, "value", "t-value"))
    unknown = framing_problem(framed(8), ids, "value", "t-value")
    assert unknown == "value schema id 8 is not registered under subject 't-value'"


def test_subject_and_sides_from_the_topic_config() -> None:
    assert validated_sides(TopicConfig()) == ()
    assert not SchemaValidation.enabled(TopicConfig())
    both = TopicConfig(confluent_value_schema_validation=True,
                       confluent_key_schema_validation=True, key_schema_subject=" keys ")
    assert validated_sides(both) == ("key", "value")
    assert configured_subject("clicks", both, "value") == "clicks-value"
    assert configured_subject("clicks", both, "key") == "keys"
    shared = TopicConfig(value_schema_subject="shared")
    assert configured_subject("clicks", shared, "value") == "shared"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Subjects:
    """A stand-in for the ZooKeeper reads that counts them (the store itself is exercised
    by the live tests below)."""

    def __init__(self) -> None:
        self.ids: dict[str, set[int]] = {}
        self.reads = 0
        self.fail = False

    async def read(self, subject: str) -> frozenset[int]:
        self.reads += 1
        await asyncio.sleep(0)
        if self.fail:
            raise ZooKeeperUnavailableError("reading subject: ZooKeeper connection lost")
        return frozenset(self.ids.get(subject, ()))


def _check(validation: SchemaValidation, records: bytes,
           config: TopicConfig = VALUE_ON) -> InvalidRecordError | None:
    async def run() -> None:
        await validation.check("t", 0, config, records)
    try:
        asyncio.run(run())
    except InvalidRecordError as exc:
        return exc
    return None


def test_refusal_names_every_bad_record_and_tombstones_pass() -> None:
    subjects = Subjects()
    subjects.ids["t-value"] = {1}
    validation = SchemaValidation(subjects.read, clock=FakeClock())
    assert _check(validation, batch([(None, framed(1)), (b"k", None)])) is None
    refused = _check(validation, batch([(None, framed(1)), (None, b"raw"), (None, framed(2)),
                                        (None, None)]))
    assert refused is not None and refused.code == ErrorCode.invalid_record
    assert [index for index, _ in refused.record_errors] == [1, 2]
    assert "magic byte 0x72" in refused.record_errors[0][1]
    assert "schema id 2 is not registered under subject 't-value'" in refused.record_errors[1][1]
    assert "t-0" in refused.message and "2 record(s)" in refused.message
    many = _check(validation, batch([(None, b"x")] * (MAX_RECORD_ERRORS + 5)))
    assert many is not None and len(many.record_errors) == MAX_RECORD_ERRORS
    assert f"{MAX_RECORD_ERRORS + 5} record(s)" in many.message


def test_key_validation_uses_the_key_subject() -> None:
    subjects = Subjects()
    subjects.ids.update({"t-value": {1}, "keys": {5}})
    validation = SchemaValidation(subjects.read, clock=FakeClock())
    keyed = TopicConfig(confluent_key_schema_validation=True, key_schema_subject="keys")
    assert _check(validation, batch([(framed(5), b"anything"), (None, b"x")]), keyed) is None
    refused = _check(validation, batch([(framed(1), b"v")]), keyed)
    assert refused is not None
    assert "key schema id 1 is not registered under subject 'keys'" in refused.record_errors[0][1]


def test_ids_are_cached_refreshed_in_background_and_unknown_ids_reread_at_a_bounded_rate(
) -> None:
    subjects = Subjects()
    subjects.ids["t-value"] = {1}
    clock = FakeClock()
    validation = SchemaValidation(subjects.read, clock=clock)

    async def scenario() -> None:
        good, unknown = batch([(None, framed(1))]), batch([(None, framed(2))])
        await validation.check("t", 0, VALUE_ON, good)
        await validation.check("t", 0, VALUE_ON, good)
        assert subjects.reads == 1  # cached
        with pytest.raises(InvalidRecordError):
            await validation.check("t", 0, VALUE_ON, unknown)
        assert subjects.reads == 2  # an unknown id waits for one re-read
        for _ in range(5):
            with pytest.raises(InvalidRecordError):
                await validation.check("t", 0, VALUE_ON, unknown)
        assert subjects.reads == 2  # ... at most one every RETRY_UNKNOWN_S
        subjects.ids["t-value"].add(2)  # registered now
        clock.now += RETRY_UNKNOWN_S
        await validation.check("t", 0, VALUE_ON, unknown)  # accepted at once
        assert subjects.reads == 3
        clock.now += 10  # stale: used as is while a background read refreshes it
        subjects.ids["t-value"] = {3}
        await validation.check("t", 0, VALUE_ON, good)
        await asyncio.sleep(0.01)
        assert subjects.reads == 4
        clock.now += RETRY_UNKNOWN_S
        with pytest.raises(InvalidRecordError):  # the refreshed set no longer has id 1
            await validation.check("t", 0, VALUE_ON, good)

    asyncio.run(scenario())


def test_zookeeper_away_refuses_retriably_only_when_nothing_is_cached() -> None:
    subjects = Subjects()
    subjects.fail = True
    clock = FakeClock()
    validation = SchemaValidation(subjects.read, clock=clock)
    with pytest.raises(ZooKeeperUnavailableError) as caught:
        _check(validation, batch([(None, framed(1))]))
    assert caught.value.retriable
    subjects.fail = False
    subjects.ids["t-value"] = {1}
    assert _check(validation, batch([(None, framed(1))])) is None
    subjects.fail = True
    clock.now += 10
    assert _check(validation, batch([(None, framed(1))])) is None  # the cached ids serve


# ------------------------------------------------------------------------- live broker


@pytest.fixture
def store(cluster: Any) -> Iterator[SchemaStore]:
    client = KazooClient(hosts=cluster.zookeeper_connect)
    client.start(timeout=30)
    try:
        yield SchemaStore(client)
    finally:
        client.stop()
        client.close()


def register(store: SchemaStore, subject: str, schema: str = AVRO_CLICK) -> int:
    schema_id = store.ensure_id("AVRO", schema)
    versions = store.versions(subject)
    store.create_version(subject, len(versions) + 1, schema_id)
    return schema_id


def produce(bootstrap: str, topic: str, values: list[bytes | None]) -> list[int | None]:
    """Produce with confluent-kafka, one batch per record (one bad record refuses its whole
    batch); each record's delivery error code (None: delivered). Codes, not KafkaError
    objects: comparing a KafkaError with None leaves a pending TypeError in confluent-kafka
    2.16."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "message.timeout.ms": 20_000, "retries": 0})
    outcomes: dict[int, int | None] = {}

    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=0,
                         on_delivery=functools.partial(_delivered, outcomes, i))
        assert producer.flush(30) == 0
    return [outcomes[i] for i in range(len(values))]


def _delivered(outcomes: dict[int, int | None], index: int, error: KafkaError | None,
               _message: Any) -> None:
    outcomes[index] = None if error is None else error.code()


def produce_raw(bootstrap: str, topic: str, records: bytes) -> Any:
    with WireClient.connect(bootstrap) as client:
        response = client.request(0, 9, {"acks": 1, "timeout": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return response.responses[0].partition_responses[0]


def end_offset(bootstrap: str, topic: str) -> int:
    with WireClient.connect(bootstrap) as client:
        response = client.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                            "timestamp": -1}]}]})
    return int(response.topics[0].partitions[0].offset)


def set_config(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        for key, value in configs.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=15)


def test_unframed_values_get_invalid_record_and_registered_ones_pass(cluster: Any,
                                                                     store: SchemaStore,
                                                                     topic_name: str) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, topic_name, config={"confluent.value.schema.validation": "true"})
    schema_id = register(store, f"{topic_name}-value")
    errors = produce(bootstrap, topic_name, [b'{"user_id": 1}', framed(schema_id), None])
    assert errors[0] == KafkaError.INVALID_RECORD
    assert errors[1] is None and errors[2] is None  # framed with the subject's id; tombstone
    result = produce_raw(bootstrap, topic_name,
                         batch([(None, framed(schema_id)), (None, b"plain"),
                                (None, framed(schema_id + 1000))]))
    assert result.error_code == ErrorCode.invalid_record and result.base_offset == -1
    assert f"{topic_name}-0" in result.error_message
    assert [e.batch_index for e in result.record_errors] == [1, 2]
    assert "magic byte 0x70" in result.record_errors[0].batch_index_error_message
    assert (f"schema id {schema_id + 1000} is not registered under subject "
            f"'{topic_name}-value'") in result.record_errors[1].batch_index_error_message
    assert end_offset(bootstrap, topic_name) == 2  # only the two accepted records


def test_a_version_registered_now_is_accepted_soon_and_soft_deleted_ones_refused(
        cluster: Any, store: SchemaStore, topic_name: str) -> None:
    bootstrap = cluster.bootstrap_servers
    subject = f"custom-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic_name, config={"confluent.value.schema.validation": "true",
                                                "value.schema.subject": subject})
    first = register(store, subject)
    assert produce(bootstrap, topic_name, [framed(first)]) == [None]
    evolved = AVRO_CLICK.replace(
        ']}', ',{"name":"referrer","type":["null","string"],"default":null}]}')
    new_id = store.ensure_id("AVRO", evolved)
    refused = produce(bootstrap, topic_name, [framed(new_id)])  # an id, not the subject's
    assert refused[0] == KafkaError.INVALID_RECORD
    assert produce(bootstrap, f"{topic_name}", [framed(first)]) == [None]
    store.create_version(subject, 2, new_id)
    started = time.monotonic()
    wait_until(lambda: produce(bootstrap, topic_name, [framed(new_id)]) == [None], 10,
               "a version registered just now accepted")
    assert time.monotonic() - started < 5
    store.set_deleted(subject, 1)  # a soft-deleted version's id no longer counts
    wait_until(lambda: produce(bootstrap, topic_name, [framed(first)]) == [INVALID], 10,
               "a soft-deleted version's id refused")


def test_other_topics_unaffected_and_toggled_at_run_time(cluster: Any, store: SchemaStore,
                                                         topic_name: str) -> None:
    bootstrap = cluster.bootstrap_servers
    other = f"{topic_name}-other"
    create_topic(bootstrap, topic_name)
    create_topic(bootstrap, other, config={"confluent.value.schema.validation": "false"})
    register(store, f"{topic_name}-value")
    assert produce(bootstrap, topic_name, [b"raw"]) == [None]  # off by default
    set_config(bootstrap, topic_name, {"confluent.value.schema.validation": "true"})
    wait_until(lambda: produce(bootstrap, topic_name, [b"raw"]) == [INVALID], 15,
               "validation turned on by AlterConfigs")
    assert produce(bootstrap, other, [b"raw", b"raw2"]) == [None, None]
    set_config(bootstrap, topic_name, {"confluent.value.schema.validation": "false"})
    wait_until(lambda: produce(bootstrap, topic_name, [b"raw"]) == [None], 15,
               "validation turned off again")


def test_key_validation_on_a_live_broker(cluster: Any, store: SchemaStore,
                                         topic_name: str) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, topic_name, config={"confluent.key.schema.validation": "true"})
    key_id = register(store, f"{topic_name}-key", '"string"')
    ok = produce_raw(bootstrap, topic_name, batch([(framed(key_id, b"\x02a"), b"raw value"),
                                                   (None, b"no key")]))
    assert ok.error_code == ErrorCode.none
    refused = produce_raw(bootstrap, topic_name, batch([(b"plain-key", b"v")]))
    assert refused.error_code == ErrorCode.invalid_record
    assert "key is not framed" in refused.record_errors[0].batch_index_error_message


def test_confluent_serializer_accepted_and_plain_producer_refused(
        tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> None:
    """confluent-kafka's own AvroSerializer (registering through ``loglake registry``) passes
    validation; the same producer without the serializer gets INVALID_RECORD."""
    from confluent_kafka import SerializingProducer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer

    data = tmp_path_factory.mktemp("validation-registry")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts, registry=True) as dev:
        topic = f"validated-{uuid.uuid4().hex[:8]}"
        create_topic(dev.bootstrap_servers, topic,
                     config={"confluent.value.schema.validation": "true"})
        serializer = AvroSerializer(SchemaRegistryClient(dev.registry_config()), AVRO_CLICK)
        producer = SerializingProducer({"bootstrap.servers": dev.bootstrap_servers,
                                        "value.serializer": serializer, "linger.ms": 0})
        outcomes: dict[int, int | None] = {}
        for i in range(3):
            producer.produce(topic, value={"user_id": i, "page": "/"}, partition=0,
                             on_delivery=functools.partial(_delivered, outcomes, i))
        assert producer.flush(30) == 0
        assert outcomes == {0: None, 1: None, 2: None}
        assert produce(dev.bootstrap_servers, topic, [b'{"user_id": 3, "page": "/"}']) == [
            INVALID]
        assert end_offset(dev.bootstrap_servers, topic) == 3
