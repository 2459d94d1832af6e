"""The SDK producer once fenced: typed errors, and closing it (a ``with`` block's exit) does not
raise the fatal error a second time."""

from __future__ import annotations

import uuid

import pytest

from loglake.client import Producer
from loglake.client.errors import FatalTransactionError
from tests.admin_util import create_topic


def test_fenced_producer_raises_typed_errors_and_closes_quietly(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name)
    txn_id = f"fenced-{uuid.uuid4().hex[:6]}"
    with Producer(cluster.bootstrap_servers, transactional_id=txn_id) as zombie:
        zombie.begin_transaction()
        zombie.send(topic_name, b"zombie", partition=0)
        zombie.flush(10)
        with Producer(cluster.bootstrap_servers, transactional_id=txn_id) as successor:
            successor.init_transactions(30)
        with pytest.raises(FatalTransactionError):
            zombie.commit_transaction(10)
        with pytest.raises(FatalTransactionError):
            zombie.flush(5)
    # leaving the with-block closed the fenced producer without raising
