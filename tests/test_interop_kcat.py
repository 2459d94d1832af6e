"""Interop with kcat (librdkafka's command-line client): produce, consume, metadata."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.admin_util import create_topic

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
# kcat comes from the setup script (Debian package); its absence is a set-up failure, not a skip


def _kcat(*args: str, stdin: str | None = None) -> str:
    assert KCAT is not None
    done = subprocess.run([KCAT, *args], input=stdin, capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produce_consume(cluster, topic_name, codec):
    create_topic(cluster.bootstrap_servers, topic_name, partitions=2)
    lines = [f"key{i}:value {i}" for i in range(200)]
    _kcat("-b", cluster.bootstrap_servers, "-P", "-t", topic_name, "-K", ":", "-z", codec,
          "-H", "origin=kcat", stdin="\n".join(lines) + "\n")
    out = _kcat("-b", cluster.bootstrap_servers, "-C", "-t", topic_name, "-o", "beginning",
                "-e", "-J")
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert sorted((r["key"], r["payload"]) for r in records) == sorted(
        (f"key{i}", f"value {i}") for i in range(200)
    )
    assert all(r["headers"] == ["origin", "kcat"] for r in records)
    for partition in (0, 1):
        offsets = [r["offset"] for r in records if r["partition"] == partition]
        assert offsets == list(range(len(offsets)))


def test_kcat_metadata_lists_topic(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name, partitions=3)
    meta = json.loads(_kcat("-b", cluster.bootstrap_servers, "-L", "-J", "-t", topic_name))
    topic = next(t for t in meta["topics"] if t["topic"] == topic_name)
    assert len(topic["partitions"]) == 3
    assert all(p["leader"] == 1 for p in topic["partitions"])
