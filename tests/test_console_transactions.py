"""The console's Transactions page against the session's real one-broker cluster: Starlette's
TestClient drives ``create_app``; transactions come from real clients.

Checked: an ongoing transaction of a real confluent-kafka transactional producer is listed with
its producer id, epoch, state, timeout and partitions, then CompleteCommit after its commit; a
hanging transaction (a transactional batch written an hour ago — by its timestamp — by a
producer id no coordinator knows: Kafka's find-hanging case) is shown as hanging on its
partition, holds back read_committed consumers, is aborted through the page's form (an ABORT
marker: the consumers then get the records after it) and is gone from the table; with a max
transaction timeout above its age it is open but not hanging; bad input is a 4xx with a
message. The pure rules (overdue, hanging) are checked in process.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from starlette.testclient import TestClient

from loglake.client import Admin
from loglake.client import hanging_transactions as txns
from loglake.client.errors import BrokerError
from loglake.client.model import TransactionDescription, TransactionListing
from loglake.console import transactions as page
from loglake.console.app import create_app
from loglake.dev.harness import DevCluster, wait_until
from tests.hanging_txn_util import HOUR_MS, committed_values, open_transaction, write_hanging

HX = {"HX-Request": "true"}


@pytest.fixture(scope="module")
def client(cluster: DevCluster) -> Iterator[TestClient]:
    app = create_app(cluster.zookeeper_connect, bootstrap=cluster.bootstrap_servers)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def _topic(cluster: DevCluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=1)
    return name


def _row(html: str, marker: str) -> str:
    """The table row carrying ``marker`` (a data attribute), or ''."""
    start = html.find(marker)
    if start < 0:
        return ""
    return html[html.rfind("<tr", 0, start):html.find("</tr>", start)]


def test_ongoing_then_committed_transaction_is_listed(cluster: DevCluster,
                                                       client: TestClient) -> None:
    topic = _topic(cluster, "txn-page")
    transactional_id = f"page-{uuid.uuid4().hex[:8]}"
    producer = open_transaction(cluster, topic, transactional_id)
    marker = f'data-transactional-id="{transactional_id}"'

    def ongoing() -> str:
        row = _row(client.get("/fragments/transactions", headers=HX).text, marker)
        return row if 'data-state="Ongoing"' in row and f"{topic}-0" in row else ""

    row = wait_until(ongoing, 30, "the ongoing transaction on the page")
    assert "1.0 min" in row  # its timeout
    full = client.get("/transactions")
    assert full.status_code == 200 and transactional_id in full.text
    assert 'href="/transactions"' in full.text  # in the navigation
    open_row = _row(full.text, f'data-partition="{topic}-0"')
    assert open_row and "hanging" not in open_row.replace("data-", "")  # open, not hanging

    producer.commit_transaction(30)
    wait_until(lambda: 'data-state="CompleteCommit"' in _row(
        client.get("/fragments/transactions", headers=HX).text, marker), 30,
        "the committed transaction")
    assert f'data-partition="{topic}-0"' not in client.get(
        "/fragments/transactions", headers=HX).text


def test_hanging_transaction_is_found_and_aborted(cluster: DevCluster,
                                                  client: TestClient) -> None:
    topic = _topic(cluster, "txn-hang")
    producer_id = 900_000_000 + uuid.uuid4().int % 1_000_000
    write_hanging(cluster, topic, producer_id)
    plain = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    plain.produce(topic, b"after", partition=0)
    assert plain.flush(30) == 0
    # read_committed consumers are held back at the hanging transaction's first offset
    assert b"after" not in committed_values(cluster, topic, wait_s=2)

    marker = f'data-producer-id="{producer_id}"'
    text = client.get("/transactions").text
    row = _row(text, marker)
    assert 'class="hanging"' in row and "unknown to every coordinator" in row
    assert 'action="/transactions/abort"' in row
    with Admin(cluster.bootstrap_servers) as admin:  # the SDK's find-hanging agrees
        found = txns.find_hanging(admin, [(topic, 0)])
        assert [(t.topic, t.partition, t.producer.producer_id) for t in found] == [
            (topic, 0, producer_id)]
        assert found[0].producer.txn_start_offset == 0
        assert txns.find_hanging(admin, [(topic, 0)],
                                 max_transaction_timeout_ms=2 * HOUR_MS) == []
    # a longer max timeout than its age: open, not hanging, no abort button
    relaxed = _row(client.get("/fragments/transactions?max_transaction_timeout=120",
                              headers=HX).text, marker)
    assert relaxed and 'class="hanging"' not in relaxed and "/transactions/abort" not in relaxed

    answer = client.post("/transactions/abort", headers=HX, data={
        "topic": topic, "partition": "0", "producer_id": str(producer_id),
        "producer_epoch": "0", "coordinator_epoch": "0"})
    assert answer.status_code == 200, answer.text
    assert "Aborted the transaction" in answer.text
    assert marker not in client.get("/fragments/transactions", headers=HX).text
    values = committed_values(cluster, topic, wait_s=3)
    assert values == [b"after"]  # the aborted records are skipped, the rest delivered


def test_abort_refusals_and_bad_input(cluster: DevCluster, client: TestClient) -> None:
    topic = _topic(cluster, "txn-bad")
    cases = [
        ({}, 400, "topic"),
        ({"topic": topic, "partition": "x", "producer_id": "1", "producer_epoch": "0"}, 400,
         "partition must be an integer"),
        ({"topic": topic, "partition": "0", "producer_id": "-5", "producer_epoch": "0"}, 400,
         "producer_id must be at least 0"),
        ({"topic": topic, "partition": "0", "producer_epoch": "0"}, 400, "producer_id"),
        ({"topic": topic, "partition": "0", "producer_id": "1", "producer_epoch": "99999"},
         400, "producer_epoch must be at most"),
        ({"topic": "no-such-topic-" + uuid.uuid4().hex[:6], "partition": "0",
          "producer_id": "1", "producer_epoch": "0"}, 404, "UNKNOWN_TOPIC_OR_PARTITION"),
    ]
    for data, status, text in cases:
        answer = client.post("/transactions/abort", headers=HX, data=data)
        assert answer.status_code == status, (data, answer.text)
        assert text in answer.text and "Traceback" not in answer.text
    for query in ("abc", "-1", "999999999", "1e3"):
        answer = client.get(f"/transactions?max_transaction_timeout={query}")
        assert answer.status_code == 400 and "max_transaction_timeout" in answer.text
    assert client.get("/transactions/abort").status_code == 405
    assert client.get("/transactions").status_code == 200  # still serving


def test_overdue_and_hanging_rules() -> None:
    now = 10 * HOUR_MS
    listing = TransactionListing("t", 7, "Ongoing", 1)

    def described(state: str, start: int | None, parts: tuple[tuple[str, int], ...] = ()
                  ) -> TransactionDescription:
        return TransactionDescription("t", state, 7, 0, 60_000, start, parts, 1)

    assert page.transaction_row(listing, described("Ongoing", now - 61_000), now).overdue
    assert not page.transaction_row(listing, described("Ongoing", now - 59_000), now).overdue
    assert not page.transaction_row(listing, described("PrepareCommit", now - HOUR_MS),
                                    now).overdue
    assert not page.transaction_row(listing, None, now).overdue

    def open_txn(pid: int, idle_ms: int) -> txns.OpenTransaction:
        return txns.OpenTransaction("a", 0, txns.ProducerState(pid, 0, 2, now - idle_ms, 0, 5))

    old_unknown, old_named, old_other, young = (open_txn(1, HOUR_MS), open_txn(7, HOUR_MS),
                                                open_txn(8, HOUR_MS), open_txn(9, 1000))
    rows = page.open_rows(
        [old_unknown, old_named, old_other, young], {7: "t", 8: "u", 9: "v"},
        {"t": described("Ongoing", now - HOUR_MS, (("a", 0),)),
         "u": described("Ongoing", now - HOUR_MS, (("b", 0),)), "v": None},
        now_ms=now, max_timeout_ms=15 * 60_000)
    assert [r.hanging for r in rows] == [True, False, True, False]
    assert rows[0].transactional_id is None and rows[1].transactional_id == "t"


def test_describe_producers_collects_refused_partitions(cluster: DevCluster) -> None:
    """A partition its leader refuses (here: one that does not exist) raises, or, with
    ``refused``, is reported there while the others are answered (the console lists what it
    may see: a logged-in user without READ on some topics)."""
    topic = _topic(cluster, "txn-refused")
    with Admin(cluster.bootstrap_servers) as admin:
        keys = [(topic, 0), (topic, 7)]
        broker = admin.describe_topic(topic).partitions[0].leader  # asked for both
        with pytest.raises(BrokerError) as raised:
            txns.describe_producers(admin, keys, broker_id=broker, timeout=10)
        assert raised.value.code == ErrorCode.unknown_topic_or_partition
        refused: dict[tuple[str, int], BrokerError] = {}
        found = txns.describe_producers(admin, keys, broker_id=broker, timeout=10,
                                        refused=refused)
        assert found == {(topic, 0): []}
        assert list(refused) == [(topic, 7)]
        assert "UNKNOWN_TOPIC_OR_PARTITION" in str(refused[(topic, 7)])
