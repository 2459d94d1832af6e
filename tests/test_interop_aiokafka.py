"""Interop with aiokafka (asyncio client): produce, consume, codecs, offsets_for_times."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.admin_util import create_topic


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_round_trip(cluster, topic_name, codec):
    create_topic(cluster.bootstrap_servers, topic_name)

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                                    compression_type=codec, enable_idempotence=True)
        await producer.start()
        base = int(time.time() * 1000) - 10_000
        try:
            for i in range(20):
                await producer.send(topic_name, key=b"k%d" % i, value=b"v%d" % i, partition=0,
                                    headers=[("n", b"%d" % i)], timestamp_ms=base + i)
            await producer.send_and_wait(topic_name, key=b"last", value=None, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = TopicPartition(topic_name, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            while len(got) < 21:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
                for msgs in batch.values():
                    got.extend(msgs)
            times = await consumer.offsets_for_times({tp: base + 7})
        finally:
            await consumer.stop()
        return got, times[tp]

    got, found = asyncio.run(run())
    assert [m.value for m in got[:20]] == [b"v%d" % i for i in range(20)]
    assert got[20].key == b"last" and got[20].value is None
    assert list(got[5].headers) == [("n", b"5")]
    assert [m.offset for m in got] == list(range(21))
    assert found.offset == 7
