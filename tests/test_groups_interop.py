"""kafka-python and aiokafka group consumers against the same coordinator: one mixed group
splits the partitions between the libraries, and offsets committed by one library are where the
other (and librdkafka) continues."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from kafka import KafkaConsumer as KafkaPythonConsumer
from kafka.errors import CommitFailedError

from loglake.client import Admin, Consumer
from loglake.dev.harness import DevCluster, wait_until, wait_until_async
from tests.clients import topic_with_records

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 4
RECORDS = 400
WAIT_S = 60.0


@pytest.fixture(scope="module")
def dev(group_dev: DevCluster) -> DevCluster:
    return group_dev  # one broker, no initial rebalance delay (tests/conftest.py)


def _topic(dev: DevCluster) -> str:
    return topic_with_records(dev.bootstrap_servers, "interop", partitions=PARTITIONS,
                              records=RECORDS)


def _kafka_python(dev: DevCluster, group: str, **extra: Any) -> KafkaPythonConsumer:
    return KafkaPythonConsumer(
        bootstrap_servers=dev.bootstrap_servers.split(","), group_id=group,
        auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=10000,
        heartbeat_interval_ms=1000, request_timeout_ms=30000, **extra)


def _aiokafka(dev: DevCluster, group: str, topic: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        topic, bootstrap_servers=dev.bootstrap_servers, group_id=group,
        auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=10000,
        heartbeat_interval_ms=1000)


def test_mixed_kafka_python_and_aiokafka_group(dev: DevCluster) -> None:
    topic = _topic(dev)
    group = f"mixed-{uuid.uuid4().hex[:8]}"
    stop = threading.Event()
    python_values: set[bytes] = set()
    python_owned: list[set[int]] = []
    errors: list[BaseException] = []

    def run_kafka_python() -> None:
        consumer = _kafka_python(dev, group)
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + WAIT_S + 30
            while not stop.is_set() and time.monotonic() < deadline:
                for batch in consumer.poll(timeout_ms=200).values():
                    python_values.update(m.value for m in batch)
                owned = {tp.partition for tp in consumer.assignment()}
                if not python_owned or python_owned[-1] != owned:
                    python_owned.append(owned)
                if owned:
                    # a rebalance started: the next commit after rejoining counts
                    with contextlib.suppress(CommitFailedError):
                        consumer.commit()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            consumer.close()

    async def run_aiokafka() -> tuple[set[bytes], set[int]]:
        consumer = _aiokafka(dev, group, topic)
        await consumer.start()
        values: set[bytes] = set()

        async def shared() -> set[int] | None:
            batches = await consumer.getmany(timeout_ms=200)
            for batch in batches.values():
                values.update(m.value for m in batch)
            if batches:
                await consumer.commit()
            owned = {tp.partition for tp in consumer.assignment()}
            theirs = python_owned[-1] if python_owned else set()
            # each library's own view, sampled at different moments: wait until they agree
            agree = (owned and theirs and not owned & theirs
                     and owned | theirs == set(range(PARTITIONS))
                     and len(values | python_values) == RECORDS)
            return owned if agree else None

        try:
            owned = await wait_until_async(
                shared, WAIT_S, lambda: f"mixed group did not share the topic: aiokafka "
                                        f"{consumer.assignment()}, kafka-python {python_owned}",
                interval=0)
            await asyncio.sleep(1.5)  # let kafka-python commit its last poll
            return values, owned
        finally:
            await consumer.stop()

    thread = threading.Thread(target=run_kafka_python, daemon=True)
    thread.start()
    try:
        aio_values, aio_owned = asyncio.run(run_aiokafka())
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not errors, errors
    assert aio_values | python_values == {b"v%d" % i for i in range(RECORDS)}
    assert aio_owned and python_owned[-1]
    with Admin(dev.bootstrap_servers) as admin:
        committed = admin.group_offsets(group)
    assert committed == {(topic, p): RECORDS // PARTITIONS for p in range(PARTITIONS)}


def test_offsets_committed_by_one_library_are_read_by_the_others(dev: DevCluster) -> None:
    topic = _topic(dev)
    group = f"handover-{uuid.uuid4().hex[:8]}"
    # 1. kafka-python reads 100 records of the group and commits them
    first = _kafka_python(dev, group, max_poll_records=25)
    first.subscribe([topic])
    consumed: list[bytes] = []

    def first_hundred() -> bool:
        for batch in first.poll(timeout_ms=200, max_records=100 - len(consumed)).values():
            consumed.extend(m.value for m in batch)
        return len(consumed) >= 100

    wait_until(first_hundred, WAIT_S, lambda: f"kafka-python read {len(consumed)} of 100",
               interval=0)
    assert len(consumed) == 100
    positions = {tp.partition: first.position(tp) for tp in first.assignment()}
    first.commit()
    first.close()
    after_python = {p: o for p, o in positions.items() if o}

    # 2. aiokafka sees exactly those offsets, continues, commits the rest
    async def continue_with_aiokafka() -> dict[int, int | None]:
        consumer = _aiokafka(dev, group, topic)
        await consumer.start()
        try:
            from aiokafka import TopicPartition

            seen = {p: await consumer.committed(TopicPartition(topic, p))
                    for p in range(PARTITIONS)}
            total = 0

            async def the_rest() -> bool:
                nonlocal total
                for batch in (await consumer.getmany(timeout_ms=200)).values():
                    total += len(batch)
                return total >= RECORDS - 100

            await wait_until_async(the_rest, WAIT_S,
                                   lambda: f"aiokafka read {total} of {RECORDS - 100}", interval=0)
            assert total == RECORDS - 100  # no record of the first 100 again
            await consumer.commit()
            return seen
        finally:
            await consumer.stop()

    seen_by_aiokafka = asyncio.run(continue_with_aiokafka())
    assert {p: o for p, o in seen_by_aiokafka.items() if o} == after_python

    # 3. librdkafka (the SDK) reads aiokafka's commits: the end of every partition
    with Consumer(dev.bootstrap_servers, group_id=group) as sdk:
        assert sdk.committed(topic) == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}
