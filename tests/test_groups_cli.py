"""``loglake groups ...`` and ``loglake consume --group`` as subprocesses on a real cluster."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

import pytest

from loglake.client import Consumer
from loglake.dev.harness import DevCluster
from tests.clients import poll_until_assigned, read_records, topic_with_records

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 3
RECORDS = 30


@pytest.fixture(scope="module")
def dev(group_dev: DevCluster) -> DevCluster:
    return group_dev  # one broker, no initial rebalance delay (tests/conftest.py)


@pytest.fixture
def topic(dev: DevCluster) -> str:
    return topic_with_records(dev.bootstrap_servers, "cli", partitions=PARTITIONS,
                              records=RECORDS, value=b"line-%d")


@pytest.fixture
def group() -> str:
    return f"cli-group-{uuid.uuid4().hex[:8]}"


def loglake(dev: DevCluster, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loglake", *args, "--bootstrap-server", dev.bootstrap_servers],
        capture_output=True, text=True, timeout=timeout, check=False)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("loglake: error: ")
    return lines[0]


def describe(dev: DevCluster, group: str) -> dict[str, Any]:
    return dict(json.loads(ok(loglake(dev, "groups", "describe", group, "--format", "json"))))


def committed(dev: DevCluster, group: str) -> dict[int, int | None]:
    return {row["partition"]: row["committed_offset"]
            for row in describe(dev, group)["partitions"]}


def test_consume_with_group_commits_what_it_printed(
    dev: DevCluster, topic: str, group: str
) -> None:
    first = ok(loglake(dev, "consume", topic, "--group", group, "--from-beginning",
                       "--max-messages", "12"))
    printed = first.splitlines()
    assert len(printed) == 12
    state = describe(dev, group)
    assert state["state"] == "Empty" and state["members"] == []
    rows = {row["partition"]: row for row in state["partitions"]}
    assert sum(row["committed_offset"] or 0 for row in rows.values()) == 12
    for row in rows.values():
        assert row["log_end_offset"] == RECORDS // PARTITIONS
        assert row["lag"] == (None if row["committed_offset"] is None
                              else row["log_end_offset"] - row["committed_offset"])
    # the next run continues where the first stopped: no record twice, none missing
    second = ok(loglake(dev, "consume", topic, "--group", group, "--from-beginning",
                        "--timeout-ms", "3000")).splitlines()
    assert sorted(printed + second) == sorted(f"line-{i}" for i in range(RECORDS))
    assert committed(dev, group) == dict.fromkeys(range(PARTITIONS), RECORDS // PARTITIONS)
    assert group in ok(loglake(dev, "groups", "list")).split()
    listing = ok(loglake(dev, "groups", "list", "--state")).splitlines()
    assert f"{group}\tEmpty" in listing


def test_describe_shows_members_assignment_and_lag(
    dev: DevCluster, topic: str, group: str
) -> None:
    with Consumer(dev.bootstrap_servers, group_id=group, client_id="describe-me",
                  session_timeout_ms=6000, heartbeat_interval_ms=1000) as consumer:
        consumer.subscribe([topic])
        read_records(consumer, 4, timeout=60)
        consumer.commit()
        text = ok(loglake(dev, "groups", "describe", group))
        state = describe(dev, group)
    assert state["state"] == "Stable"
    [member] = state["members"]
    assert member["client_id"] == "describe-me"
    assert "127.0.0.1" in member["host"]
    assert sorted(p["partition"] for p in member["assignment"]) == list(range(PARTITIONS))
    for row in state["partitions"]:
        assert row["member_id"] == member["member_id"]
        if row["committed_offset"] is not None:
            assert row["lag"] == row["log_end_offset"] - row["committed_offset"]
    assert sum(r["committed_offset"] or 0 for r in state["partitions"]) == 4
    assert "State: Stable" in text and "describe-me" in text
    assert "CURRENT-OFFSET" in text and "LOG-END-OFFSET" in text and "LAG" in text


def test_reset_offsets_refused_while_group_has_members(
    dev: DevCluster, topic: str, group: str
) -> None:
    with Consumer(dev.bootstrap_servers, group_id=group, session_timeout_ms=6000,
                  heartbeat_interval_ms=1000) as consumer:
        consumer.subscribe([topic])
        poll_until_assigned(consumer, 1, timeout=60, poll=0.2)
        consumer.commit(offsets={(topic, 0): 3})
        refused = loglake(dev, "groups", "reset-offsets", group, "--topic", topic,
                          "--to-earliest")
        line = one_error_line(refused)
        assert "active member" in line and group in line
        deleted = loglake(dev, "groups", "delete", group)
        assert "NON_EMPTY_GROUP" in one_error_line(deleted)
        consumer.poll(0.1)
    assert committed(dev, group)[0] == 3


def test_reset_offsets_of_empty_group(dev: DevCluster, topic: str, group: str) -> None:
    ok(loglake(dev, "consume", topic, "--group", group, "--from-beginning", "--timeout-ms",
               "2000"))
    end = RECORDS // PARTITIONS
    assert committed(dev, group) == dict.fromkeys(range(PARTITIONS), end)

    dry = ok(loglake(dev, "groups", "reset-offsets", group, "--topic", topic, "--to-earliest",
                     "--dry-run"))
    assert "NEW-OFFSET" in dry and len(dry.splitlines()) == 1 + PARTITIONS
    assert committed(dev, group) == dict.fromkeys(range(PARTITIONS), end)

    ok(loglake(dev, "groups", "reset-offsets", group, "--topic", topic, "--to-earliest"))
    assert committed(dev, group) == dict.fromkeys(range(PARTITIONS), 0)

    ok(loglake(dev, "groups", "reset-offsets", group, "--topic", topic, "--partition", "1",
               "--to-offset", "4"))
    assert committed(dev, group) == {0: 0, 1: 4, 2: 0}
    ok(loglake(dev, "groups", "reset-offsets", group, "--topic", topic, "--partition", "2",
               "--to-offset", "999"))  # clamped to the log end
    assert committed(dev, group) == {0: 0, 1: 4, 2: end}

    ok(loglake(dev, "groups", "reset-offsets", group, "--topic", topic, "--to-latest"))
    assert committed(dev, group) == dict.fromkeys(range(PARTITIONS), end)
    ok(loglake(dev, "groups", "reset-offsets", group, "--topic", topic, "--to-datetime",
               "2001-01-01T00:00:00Z"))  # every record is newer: the first offset
    assert committed(dev, group) == dict.fromkeys(range(PARTITIONS), 0)

    # after the reset a consumer of the group reads the partition again from there
    again = ok(loglake(dev, "consume", topic, "--group", group, "--timeout-ms", "2000"))
    assert sorted(again.splitlines()) == sorted(f"line-{i}" for i in range(RECORDS))

    ok(loglake(dev, "groups", "delete", group))
    assert group not in ok(loglake(dev, "groups", "list")).split()


def test_group_command_errors_are_one_line(dev: DevCluster, topic: str, group: str) -> None:
    assert "does not exist" in one_error_line(loglake(dev, "groups", "describe", group))
    assert "GROUP_ID_NOT_FOUND" in one_error_line(loglake(dev, "groups", "delete", group))
    missing_topic = loglake(dev, "groups", "reset-offsets", group, "--topic", "no-such-topic",
                            "--to-earliest")
    assert "no-such-topic" in one_error_line(missing_topic)
    bad_partition = loglake(dev, "groups", "reset-offsets", group, "--topic", topic,
                            "--partition", "7", "--to-earliest")
    assert "no partition 7" in one_error_line(bad_partition)
    mixed = loglake(dev, "consume", topic, "--group", group, "--offset", "3")
    assert "--group" in one_error_line(mixed)
