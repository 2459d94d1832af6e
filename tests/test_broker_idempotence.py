"""Idempotent producers: duplicates of the last 5 batches get their original offsets, gaps get
OUT_OF_ORDER_SEQUENCE_NUMBER, fenced epochs INVALID_PRODUCER_EPOCH, an unknown producer starts
at any sequence (Kafka since KIP-360); state survives a restart."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from loglake.dev.harness import DevCluster
from loglake.segments.records import Record, encode_batch
from tests.admin_util import create_topic
from tests.wire import WireClient


def _batch(pid: int, epoch: int, seq: int, n: int = 2) -> bytes:
    records = [Record(offset=i, timestamp=1_700_000_000_000, key=None, value=b"s%d" % (seq + i))
               for i in range(n)]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def _produce(client: WireClient, topic: str, records: bytes):
    response = client.request(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return response.responses[0].partition_responses[0]


def _init_producer(client: WireClient) -> tuple[int, int]:
    response = client.request(22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                      "producer_id": -1, "producer_epoch": -1})
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch


def test_duplicates_gaps_and_fencing(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name)
    with WireClient.connect(cluster.bootstrap_servers) as client:
        pid, epoch = _init_producer(client)
        other_pid, _ = _init_producer(client)
        assert other_pid != pid
        offsets = [_produce(client, topic_name, _batch(pid, epoch, seq)).base_offset
                   for seq in range(0, 14, 2)]
        assert offsets == list(range(0, 14, 2))
        # retries of any of the last 5 batches: original offsets, nothing appended
        for seq, offset in zip(range(4, 14, 2), offsets[2:], strict=True):
            again = _produce(client, topic_name, _batch(pid, epoch, seq))
            assert (again.error_code, again.base_offset) == (ErrorCode.none, offset)
        gap = _produce(client, topic_name, _batch(pid, epoch, 20))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        # a producer the partition holds no state for may start at any sequence (KIP-360)
        first_of_new_producer = _produce(client, topic_name, _batch(other_pid, 0, 3))
        assert (first_of_new_producer.error_code, first_of_new_producer.base_offset) == (
            ErrorCode.none, 14)
        bumped = _produce(client, topic_name, _batch(pid, epoch + 1, 0))
        assert bumped.error_code == ErrorCode.none and bumped.base_offset == 16
        fenced = _produce(client, topic_name, _batch(pid, epoch, 14))
        assert fenced.error_code == ErrorCode.invalid_producer_epoch
        end = client.request(2, 7, {"replica_id": -1, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0, "timestamp": -1,
                                                 "current_leader_epoch": -1}]}]})
        assert end.topics[0].partitions[0].offset == 18


def test_producer_state_rebuilt_after_restart(tmp_path, zookeeper_hosts: str):
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts) as dev:
        create_topic(dev.bootstrap_servers, "idem")
        with WireClient.connect(dev.bootstrap_servers) as client:
            pid, epoch = _init_producer(client)
            for seq in range(0, 6, 2):
                _produce(client, "idem", _batch(pid, epoch, seq))
        dev.kill_broker(1)
        dev.restart_broker(1)
        with WireClient.connect(dev.bootstrap_servers) as client:
            again = _produce(client, "idem", _batch(pid, epoch, 4))
            assert (again.error_code, again.base_offset) == (ErrorCode.none, 4)
            gap = _produce(client, "idem", _batch(pid, epoch, 8))
            assert gap.error_code == ErrorCode.out_of_order_sequence_number
            nxt = _produce(client, "idem", _batch(pid, epoch, 6))
            assert (nxt.error_code, nxt.base_offset) == (ErrorCode.none, 6)
            # a new producer id after restart does not reuse an old one
            new_pid, _ = _init_producer(client)
            assert new_pid != pid
