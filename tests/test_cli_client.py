"""``loglake topics|produce|consume`` run as subprocesses against the real session ``cluster``."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

from loglake.client import Admin, Producer, Record
from loglake.client.cli import format_record

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def bootstrap(cluster: Any) -> str:
    return str(cluster.bootstrap_servers)


def loglake(
    *args: str, bootstrap: str, stdin: bytes | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m loglake ARGS --bootstrap-server BOOTSTRAP``."""
    return subprocess.run(
        [sys.executable, "-m", "loglake", *args, "--bootstrap-server", bootstrap],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def one_error_line(result: subprocess.CompletedProcess[bytes]) -> str:
    """The single ``loglake: error: ...`` line of a failed command."""
    assert result.returncode != 0
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("loglake: error: ")
    return lines[0]


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- topics -----------------------------------------------------------------------------------


def test_topics_commands(bootstrap: str, topic_name: str) -> None:
    out = ok(loglake("topics", "create", topic_name, "--partitions", "2",
                     "--config", "retention.ms=3600000", "segment.bytes=1048576",
                     bootstrap=bootstrap))
    assert out == f"Created topic {topic_name}.\n"
    assert topic_name in ok(loglake("topics", "list", bootstrap=bootstrap)).splitlines()

    described = ok(loglake("topics", "describe", topic_name, bootstrap=bootstrap)).splitlines()
    assert described[0] == (
        f"Topic: {topic_name}\tPartitionCount: 2\tReplicationFactor: 1\t"
        "Configs: retention.ms=3600000,segment.bytes=1048576"
    )
    assert len(described) == 3
    for partition, line in enumerate(described[1:]):
        fields = dict(f.split(": ", 1) for f in line.strip().split("\t"))
        assert fields["Topic"] == topic_name
        assert fields["Partition"] == str(partition)
        assert fields["Leader"].isdigit()
        assert fields["Replicas"] == fields["Leader"]
        assert fields["Isr"] == fields["Leader"]

    ok(loglake("topics", "alter-config", topic_name, "--set", "cleanup.policy=compact",
               "--delete", "retention.ms", bootstrap=bootstrap))
    altered = ok(loglake("topics", "describe", topic_name, bootstrap=bootstrap))
    assert "Configs: cleanup.policy=compact,segment.bytes=1048576\n" in altered

    everything = ok(loglake("topics", "describe", bootstrap=bootstrap))
    assert f"Topic: {topic_name}\tPartitionCount: 2" in everything

    assert ok(loglake("topics", "delete", topic_name, bootstrap=bootstrap)) == (
        f"Deleted topic {topic_name}.\n"
    )
    assert topic_name not in ok(loglake("topics", "list", bootstrap=bootstrap)).splitlines()
    error = one_error_line(loglake("topics", "describe", topic_name, bootstrap=bootstrap))
    assert "does not exist" in error
    ok(loglake("topics", "delete", topic_name, "--if-exists", bootstrap=bootstrap))


def test_create_existing_topic(bootstrap: str, topic_name: str) -> None:
    ok(loglake("topics", "create", topic_name, bootstrap=bootstrap))
    error = one_error_line(loglake("topics", "create", topic_name, bootstrap=bootstrap))
    assert "already exists" in error and "TOPIC_ALREADY_EXISTS" in error
    ok(loglake("topics", "create", topic_name, "--if-not-exists", bootstrap=bootstrap))


def test_create_invalid_config(bootstrap: str, topic_name: str) -> None:
    result = loglake("topics", "create", topic_name, "--config", "retention.ms=soon",
                     bootstrap=bootstrap)
    error = one_error_line(result)
    assert result.returncode == 1
    assert "INVALID_CONFIG" in error
    assert "retention.ms" in error and "soon" in error  # the broker's own message
    assert topic_name not in ok(loglake("topics", "list", bootstrap=bootstrap))


def test_alter_config_invalid_and_bad_arguments(bootstrap: str, topic_name: str) -> None:
    ok(loglake("topics", "create", topic_name, bootstrap=bootstrap))
    error = one_error_line(loglake("topics", "alter-config", topic_name, "--set",
                                   "cleanup.policy=sometimes", bootstrap=bootstrap))
    assert "INVALID_CONFIG" in error
    error = one_error_line(loglake("topics", "alter-config", topic_name, bootstrap=bootstrap))
    assert "--set" in error
    usage = loglake("topics", "create", topic_name, "--config", "novalue", bootstrap=bootstrap)
    assert usage.returncode == 2 and b"KEY=VALUE" in usage.stderr


# -- produce / consume ------------------------------------------------------------------------


def test_produce_keys_headers_then_consume_json(bootstrap: str, topic_name: str) -> None:
    ok(loglake("topics", "create", topic_name, bootstrap=bootstrap))
    lines = "alpha:1\nbeta:two:parts\n:empty-key\ngamma:\u00fcnicode\r\n"
    result = loglake("produce", topic_name, "--key-separator", ":", "--header", "source=cli",
                     "--header", "run=1", "--compression", "lz4",
                     bootstrap=bootstrap, stdin=lines.encode())
    assert ok(result) == ""
    assert result.stderr.decode() == f"loglake: produced 4 records to {topic_name}, 0 errors\n"

    before = int(time.time() * 1000) - 60_000
    out = ok(loglake("consume", topic_name, "--from-beginning", "--format", "json",
                     "--max-messages", "4", bootstrap=bootstrap))
    records = [json.loads(line) for line in out.splitlines()]
    for record in records:
        assert before < record.pop("timestamp") < before + 120_000
    headers = [{"key": "source", "value": "cli"}, {"key": "run", "value": "1"}]
    assert records == [
        {"topic": topic_name, "partition": 0, "offset": 0, "key": "alpha", "value": "1",
         "headers": headers},
        {"topic": topic_name, "partition": 0, "offset": 1, "key": "beta", "value": "two:parts",
         "headers": headers},
        {"topic": topic_name, "partition": 0, "offset": 2, "key": "", "value": "empty-key",
         "headers": headers},
        {"topic": topic_name, "partition": 0, "offset": 3, "key": "gamma",
         "value": "\u00fcnicode", "headers": headers},
    ]


def test_consume_text_positions_and_partitions(bootstrap: str, topic_name: str) -> None:
    ok(loglake("topics", "create", topic_name, "--partitions", "2", bootstrap=bootstrap))
    ok(loglake("produce", topic_name, "--partition", "1", "--acks", "1",
               bootstrap=bootstrap, stdin=b"a\nb\nc\nd\n"))
    ok(loglake("produce", topic_name, "--partition", "0", "--key-separator", "=",
               bootstrap=bootstrap, stdin=b"k=v\n"))

    out = ok(loglake("consume", topic_name, "--partition", "1", "--offset", "2",
                     "--timeout-ms", "1500", bootstrap=bootstrap))
    assert out == "c\nd\n"
    out = ok(loglake("consume", topic_name, "--partition", "0", "--from-beginning",
                     "--print-key", "--max-messages", "1", bootstrap=bootstrap))
    assert out == "k\tv\n"
    everything = ok(loglake("consume", topic_name, "--from-beginning", "--timeout-ms", "1500",
                            bootstrap=bootstrap))
    assert sorted(everything.splitlines()) == ["a", "b", "c", "d", "v"]
    # default start is "latest": nothing old is printed
    latest = loglake("consume", topic_name, "--timeout-ms", "1000", bootstrap=bootstrap)
    assert ok(latest) == ""
    assert latest.stderr.decode() == "loglake: consumed 0 records\n"


def test_consume_binary_and_null_as_json(bootstrap: str, topic_name: str) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topic(topic_name)
    with Producer(bootstrap) as producer:
        producer.send(topic_name, b"\xff\x00", key=b"\xfe", headers=[("h", b"\x80"), ("n", None)])
        producer.send(topic_name, None, key=b"tomb")
    out = ok(loglake("consume", topic_name, "--from-beginning", "--format", "json",
                     "--max-messages", "2", bootstrap=bootstrap))
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["key"] == "/g==" and first["key_base64"] is True
    assert first["value"] == "/wA=" and first["value_base64"] is True
    assert first["headers"] == [{"key": "h", "value": "gA==", "value_base64": True},
                                {"key": "n", "value": None}]
    assert second["key"] == "tomb" and second["value"] is None and "value_base64" not in second
    text = loglake("consume", topic_name, "--from-beginning", "--max-messages", "2",
                   "--print-key", bootstrap=bootstrap)
    assert text.returncode == 0
    assert text.stdout == b"\xfe\t\xff\x00\ntomb\tnull\n"  # text format writes raw bytes


def test_produce_missing_separator_counts_errors(bootstrap: str, topic_name: str) -> None:
    ok(loglake("topics", "create", topic_name, bootstrap=bootstrap))
    result = loglake("produce", topic_name, "--key-separator", "|",
                     bootstrap=bootstrap, stdin=b"a|1\nno separator\nb|2\n")
    assert result.returncode == 1
    stderr = result.stderr.decode().splitlines()
    assert stderr == [
        "loglake: error: line 2: no key separator '|'",
        f"loglake: produced 2 records to {topic_name}, 1 errors",
    ]


# -- errors -----------------------------------------------------------------------------------


def test_consume_unknown_topic(bootstrap: str, topic_name: str) -> None:
    error = one_error_line(loglake("consume", topic_name, "--from-beginning",
                                   bootstrap=bootstrap))
    assert f"topic {topic_name!r} does not exist" in error


def test_produce_unknown_topic_and_partition(bootstrap: str, topic_name: str) -> None:
    error = one_error_line(loglake("produce", topic_name, bootstrap=bootstrap, stdin=b"x\n"))
    assert "does not exist" in error
    ok(loglake("topics", "create", topic_name, bootstrap=bootstrap))
    error = one_error_line(loglake("produce", topic_name, "--partition", "3",
                                   bootstrap=bootstrap, stdin=b"x\n"))
    assert "no partition 3" in error


UNREACHABLE_COMMANDS = [
    ["topics", "list"],
    ["topics", "create", "t"],
    ["topics", "describe", "t"],
    ["topics", "delete", "t"],
    ["topics", "alter-config", "t", "--set", "retention.ms=1"],
    ["produce", "t"],
    ["consume", "t", "--from-beginning"],
]


def test_unreachable_bootstrap_server() -> None:
    """Every command gives up within the default request timeout (10 s) with one error line."""
    bootstrap = f"127.0.0.1:{unused_port()}"
    started = time.monotonic()
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "loglake", *command, "--bootstrap-server", bootstrap],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        for command in UNREACHABLE_COMMANDS
    ]
    for command, process in zip(UNREACHABLE_COMMANDS, processes, strict=True):
        stdout, stderr = process.communicate(b"x\n", timeout=30)
        elapsed = time.monotonic() - started
        result = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
        error = one_error_line(result)
        assert elapsed < 20, (command, elapsed)
        assert bootstrap in error, command
        assert stdout == b"", command


# -- formatting (no cluster) ------------------------------------------------------------------


def test_format_record_text_and_json() -> None:
    record = Record("t", 1, 7, 123, b"k", b"v\xc3\xa9", [("a", b"b")])
    assert format_record(record, "text") == b"v\xc3\xa9\n"
    assert format_record(record, "text", print_key=True) == b"k\tv\xc3\xa9\n"
    assert json.loads(format_record(record, "json")) == {
        "topic": "t", "partition": 1, "offset": 7, "timestamp": 123, "key": "k",
        "value": "v\u00e9", "headers": [{"key": "a", "value": "b"}],
    }
