"""Partition directories (broker/log_manager.py): crash-safe delete and the start-up sweep.

In-process tests of :class:`LogManager` on a temporary directory, and one real broker process
that removes a ``.deleted`` directory a crash left behind before it opens its replicas.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from loglake.broker.log_manager import DAMAGED_SUFFIX, DELETED_SUFFIX, LogManager
from loglake.dev.harness import DevCluster
from tests.admin_util import create_topic


def _replica(logs: LogManager, topic: str, index: int) -> Path:
    directory = logs.create(topic, index)
    (directory / "00000000000000000000.log").write_bytes(b"x" * 100)
    return directory


def test_create_names_the_directory_topic_dash_partition(tmp_path: Path) -> None:
    logs = LogManager(tmp_path / "logs")
    directory = logs.create("orders", 3)
    assert directory == tmp_path / "logs" / "orders-3" == logs.partition_dir("orders", 3)
    assert directory.is_dir()
    assert logs.create("orders", 3) == directory  # idempotent


def test_delete_renames_at_once_then_removes_in_a_worker(tmp_path: Path) -> None:
    logs = LogManager(tmp_path)
    directory = _replica(logs, "orders", 0)

    async def delete() -> list[str]:
        # one worker thread, held busy until the listing below is taken: step 2 (the removal
        # in a worker) cannot finish before it, however fast the box (it did under CI load)
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        listed = threading.Event()
        held = loop.run_in_executor(None, listed.wait, 30.0)
        removal = logs.delete("orders", 0)
        # step 1 happened before delete() returned: the name is free for a new replica
        names = sorted(p.name for p in tmp_path.iterdir())
        listed.set()
        await held
        assert removal is not None
        await removal
        return names

    during = asyncio.run(delete())
    assert len(during) == 1 and during[0].startswith("orders-0.")
    assert during[0].endswith(DELETED_SUFFIX)
    assert not directory.exists()
    assert list(tmp_path.iterdir()) == []


def test_delete_of_a_missing_directory_does_nothing(tmp_path: Path) -> None:
    async def delete() -> object:
        return LogManager(tmp_path).delete("nothing", 0)

    assert asyncio.run(delete()) is None


def test_a_new_replica_created_right_after_a_delete_starts_empty(tmp_path: Path) -> None:
    logs = LogManager(tmp_path)
    _replica(logs, "orders", 0)

    async def delete_and_recreate() -> list[str]:
        removal = logs.delete("orders", 0)
        fresh = logs.create("orders", 0)
        contents = sorted(p.name for p in fresh.iterdir())
        assert removal is not None
        await removal
        return contents

    assert asyncio.run(delete_and_recreate()) == []
    assert [p.name for p in tmp_path.iterdir()] == ["orders-0"]


def test_sweep_removes_leftover_deleted_directories_only(tmp_path: Path) -> None:
    logs = LogManager(tmp_path)
    _replica(logs, "orders", 0)
    leftover = tmp_path / f"orders-1.1700000000000{DELETED_SUFFIX}"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"old")
    damaged = tmp_path / f"orders-2.1700000000000{DAMAGED_SUFFIX}"
    damaged.mkdir()
    stray_file = tmp_path / f"notes{DELETED_SUFFIX}"  # a file, not a directory: left alone
    stray_file.write_text("keep")
    assert logs.sweep() == [leftover]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["orders-0", damaged.name, stray_file.name])


def test_sweep_of_a_missing_log_dir_is_empty(tmp_path: Path) -> None:
    assert LogManager(tmp_path / "absent").sweep() == []


def test_move_aside_damaged_keeps_the_contents(tmp_path: Path) -> None:
    logs = LogManager(tmp_path)
    _replica(logs, "orders", 0)
    aside = logs.move_aside_damaged("orders", 0)
    assert aside is not None and aside.name.endswith(DAMAGED_SUFFIX)
    assert (aside / "00000000000000000000.log").read_bytes() == b"x" * 100
    assert not logs.partition_dir("orders", 0).exists()
    assert logs.move_aside_damaged("orders", 0) is None


def test_broker_sweeps_a_leftover_deleted_directory_at_start_up(
        tmp_path: Path, zookeeper_hosts: str) -> None:
    with DevCluster(tmp_path / "dev", zookeeper=zookeeper_hosts) as dev:
        create_topic(dev.bootstrap_servers, "kept", config={"remote.storage.enable": "false"})
        dev.stop_broker(1)
        log_dir = dev.data_dir / "broker-1" / "data"
        leftover = log_dir / f"gone-0.1700000000000{DELETED_SUFFIX}"  # a crash mid-deletion
        leftover.mkdir()
        (leftover / "00000000000000000000.log").write_bytes(b"\0" * 4096)
        dev.start_broker(1)  # returns once the broker answers: the sweep ran before that
        assert not leftover.exists()
        assert (log_dir / "kept-0").is_dir()
        assert f"removing {leftover.name}, left over from an interrupted deletion" in \
            dev.broker_log(1)
