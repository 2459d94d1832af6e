"""``loglake transactions describe`` / ``Admin.describe_transaction`` on an id that has no
transaction since its InitProducerId (state ``Empty``).

The coordinator answers DescribeTransactions with ``transaction_start_time`` -1 there, as Kafka
does; kio refuses to decode a negative timestamp, so the client reads the field as an int
(client/_wire.py). The SDK reports ``start_time_ms=None``; the command prints ``None`` for
the start time and the duration (as Kafka's ``kafka-transactions``) and JSON ``null``.
Real session ``cluster``, the CLI as a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from loglake.client import Admin, Producer
from loglake.dev.harness import DevCluster

pytestmark = pytest.mark.timeout(120)


def _loglake(*args: str, bootstrap: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "loglake", *args, "--bootstrap-server",
                           bootstrap], capture_output=True, timeout=90, check=False)


def test_describe_an_id_without_a_transaction(cluster: DevCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    transactional_id = f"empty-{uuid.uuid4().hex[:8]}"
    producer = Producer(bootstrap, transactional_id=transactional_id)
    try:
        producer.init_transactions()  # InitProducerId only: state Empty, no start time

        with Admin(bootstrap) as admin:
            found = admin.describe_transaction(transactional_id)
        assert (found.state, found.start_time_ms, found.partitions) == ("Empty", None, ())
        assert found.producer_id >= 0 and found.producer_epoch == 0

        described = _loglake("transactions", "describe", transactional_id, bootstrap=bootstrap)
        assert described.returncode == 0, described.stderr.decode()
        header, row = described.stdout.decode().splitlines()
        fields = dict(zip(header.split("\t"), row.split("\t"), strict=True))
        assert fields["TransactionState"] == "Empty"
        assert fields["ProducerId"] == str(found.producer_id)
        assert fields["CurrentTransactionStartTimeMs"] == "None"
        assert fields["TransactionDurationMs"] == "None"
        assert fields["TopicPartitions"] == ""

        as_json = _loglake("transactions", "describe", transactional_id, "--format", "json",
                           bootstrap=bootstrap)
        assert as_json.returncode == 0, as_json.stderr.decode()
        document = json.loads(as_json.stdout)
        assert document["start_time_ms"] is None and document["duration_ms"] is None
        assert document["state"] == "Empty"
    finally:
        producer.close()
