"""The broker: ZooKeeper registration, hosted partitions, topic/config reconciliation, lifecycle.

State machine of a broker process::

    STARTING --(ZK session, cluster id, registered, partitions opened, listening)--> RUNNING
    RUNNING  --(SIGTERM/SIGINT)--> STOPPING --(server closed, logs closed, ZK closed)--> STOPPED

Partitions are reconciled from ZooKeeper: a ChildrenWatch on ``/brokers/topics`` and a DataWatch
per topic config (both fire on kazoo's thread) schedule :meth:`Broker.reconcile` on the event
loop, which opens logs of partitions assigned here, applies config changes, and deletes the
local logs of topics that no longer exist.

Thread-safety: all mutable state (``partitions``, ``topic_configs``) is touched only on the
event loop thread. Blocking ZooKeeper calls from request handlers go through
:meth:`Broker.zk_call` (a worker thread) so the loop keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from loglake.broker.partition import Partition
from loglake.catalog.zookeeper import BrokerInfo, ClusterCatalog, TopicMetadata
from loglake.config import BrokerConfig, TopicConfig
from loglake.errors import LoglakeError, NotLeaderError, UnknownTopicError

log = logging.getLogger(__name__)

T = TypeVar("T")
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
PRODUCER_ID_BLOCK_SIZE = 1000


class Broker:
    def __init__(self, config: BrokerConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.catalog = ClusterCatalog(
            config.zookeeper_connect,
            session_timeout=config.zookeeper_session_timeout_ms / 1000,
        )
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self.topic_configs: dict[str, TopicConfig] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.cluster_id = ""
        self.controller_id = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reconcile_pending = False
        self._producer_ids: list[int] = []
        self._tasks: list[asyncio.Task[Any]] = []

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.config.log_dir.mkdir(parents=True, exist_ok=True)
        await self.zk_call(self.catalog.start)
        self.catalog.add_state_listener(self._on_zk_state)
        self.cluster_id = await self.zk_call(self._ensure_cluster_id)
        await self.zk_call(self._register)
        await self.zk_call(self._elect_controller)
        self.reconcile()
        self.catalog.watch_topics(lambda _children: self._schedule_reconcile())
        self._tasks.append(asyncio.create_task(self._flush_loop()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for partition in self.partitions.values():
            try:
                partition.close()
            except Exception:
                log.exception("closing %s-%d failed", partition.topic, partition.index)
        self.partitions.clear()
        await self.zk_call(self.catalog.stop)

    async def zk_call(self, func: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(func, *args)

    def _on_zk_state(self, state: KazooState) -> None:
        log.warning("ZooKeeper session state: %s", state)
        if state == KazooState.CONNECTED and self._loop is not None:
            self._loop.call_soon_threadsafe(self._after_reconnect)

    def _after_reconnect(self) -> None:
        async def again() -> None:
            with contextlib.suppress(Exception):
                await self.zk_call(self._register)
                await self.zk_call(self._elect_controller)
            self.reconcile()

        self._tasks.append(asyncio.ensure_future(again()))

    def _ensure_cluster_id(self) -> str:
        zk = self.catalog.zk
        candidate = json.dumps({"version": "1", "id": uuid.uuid4().hex[:22]}).encode()
        with contextlib.suppress(NodeExistsError):
            zk.create("/cluster/id", candidate, makepath=True)
        raw, _ = zk.get("/cluster/id")
        return str(json.loads(raw)["id"])

    def _register(self) -> None:
        info = BrokerInfo(self.config.broker_id, self.config.host, self.config.port,
                          self.config.rack)
        deadline = time.monotonic() + self.config.zookeeper_session_timeout_ms / 1000 + 5
        while True:
            try:
                self.catalog.register_broker(info)
                return
            except NodeExistsError:
                # the previous incarnation's ephemeral node lives until its session expires
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _elect_controller(self) -> None:
        """Minimal controller election: first broker to create ``/controller`` wins."""
        zk = self.catalog.zk
        value = json.dumps({"version": 1, "brokerid": self.config.broker_id,
                            "timestamp": str(int(time.time() * 1000))}).encode()
        with contextlib.suppress(NodeExistsError):
            zk.create("/controller", value, ephemeral=True)

        def on_change(data: bytes | None, _stat: Any) -> None:
            if data is None:
                with contextlib.suppress(NodeExistsError):
                    zk.create("/controller", value, ephemeral=True)
                return
            self.controller_id = int(json.loads(data)["brokerid"])

        zk.DataWatch("/controller")(on_change)

    # ------------------------------------------------------------------ partitions
    def _schedule_reconcile(self) -> None:
        if self._loop is None or self._reconcile_pending:
            return
        self._reconcile_pending = True
        self._loop.call_soon_threadsafe(self.reconcile)

    def reconcile(self) -> None:
        """Make local partitions match ZooKeeper (runs on the event loop)."""
        self._reconcile_pending = False
        names = set(self.catalog.topic_names())
        for name in names:
            meta = self.catalog.topic(name)
            if meta is None:
                continue
            first_time = name not in self.topics
            self.topics[name] = meta
            if first_time:
                self.topic_ids[name] = self._topic_id(name)
                self.catalog.watch_topic_config(name, self._config_watcher(name))
            self._apply_config(name, meta.configs)
            for index, replicas in meta.assignment.items():
                if self.config.broker_id in replicas and (name, index) not in self.partitions:
                    self._open_partition(name, index)
        for name in set(self.topics) - names:
            self._drop_topic(name)

    def _topic_id(self, name: str) -> uuid.UUID:
        try:
            raw, _ = self.catalog.zk.get(f"/brokers/topics/{name}")
            topic_id = json.loads(raw).get("topic_id")
            return uuid.UUID(topic_id) if topic_id else uuid.UUID(int=0)
        except (NoNodeError, ValueError, TypeError):
            return uuid.UUID(int=0)

    def _config_watcher(self, topic: str) -> Callable[[dict[str, str]], None]:
        return lambda _config: self._schedule_config(topic)

    def _schedule_config(self, topic: str) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._reload_config, topic)

    def _reload_config(self, topic: str) -> None:
        if topic in self.topics:
            self._apply_config(topic, self.catalog.topic_config(topic))

    def _apply_config(self, name: str, overrides: dict[str, str]) -> None:
        try:
            config = self.config.topic_config(overrides)
        except LoglakeError:
            log.exception("topic %s has an invalid config in ZooKeeper; keeping defaults", name)
            config = self.config.topic_config({})
        if self.topic_configs.get(name) == config:
            return
        self.topic_configs[name] = config
        for (topic, _), partition in self.partitions.items():
            if topic == name:
                partition.update_config(config)

    def _open_partition(self, topic: str, index: int) -> None:
        state = self.catalog.partition_state(topic, index)
        partition = Partition(
            topic, index, self.partition_dir(topic, index), self.topic_configs[topic],
            leader_epoch=state.leader_epoch if state else 0, clock=self.clock,
        )
        self.partitions[(topic, index)] = partition
        log.info("opened %s-%d at offsets [%d, %d)", topic, index,
                 partition.log_start_offset, partition.high_watermark)

    def _drop_topic(self, name: str) -> None:
        self.topics.pop(name, None)
        self.topic_configs.pop(name, None)
        self.topic_ids.pop(name, None)
        for key in [k for k in self.partitions if k[0] == name]:
            partition = self.partitions.pop(key)
            partition.close()
            shutil.rmtree(self.partition_dir(*key), ignore_errors=True)
        log.info("deleted topic %s", name)

    def partition_dir(self, topic: str, index: int) -> Path:
        return self.config.log_dir / f"{topic}-{index}"

    def leader_partition(self, topic: str, index: int) -> Partition:
        """The partition if this broker leads it; UnknownTopicError / NotLeaderError else."""
        partition = self.partitions.get((topic, index))
        if partition is not None:
            return partition
        meta = self.topics.get(topic)
        if meta is None or index not in meta.assignment:
            raise UnknownTopicError(f"This server does not host {topic}-{index}.")
        raise NotLeaderError(f"Broker {self.config.broker_id} does not lead {topic}-{index}.")

    async def _flush_loop(self) -> None:
        interval = self.config.log_flush_scheduler_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            for partition in list(self.partitions.values()):
                try:
                    partition.log.flush_if_due()
                except Exception:
                    log.exception("flush of %s-%d failed", partition.topic, partition.index)

    # ------------------------------------------------------------------ producer ids
    async def allocate_producer_id(self) -> int:
        if not self._producer_ids:
            start = await self.zk_call(self._claim_producer_id_block)
            self._producer_ids = list(range(start + PRODUCER_ID_BLOCK_SIZE - 1, start - 1, -1))
        return self._producer_ids.pop()

    def _claim_producer_id_block(self) -> int:
        """Claim the next block of producer ids with a version-checked write (Kafka's scheme)."""
        zk = self.catalog.zk
        for _ in range(100):
            try:
                raw, stat = zk.get(PRODUCER_ID_BLOCK_PATH)
            except NoNodeError:
                block = {"version": 1, "broker": self.config.broker_id, "block_start": "0",
                         "block_end": str(PRODUCER_ID_BLOCK_SIZE - 1)}
                try:
                    zk.create(PRODUCER_ID_BLOCK_PATH, json.dumps(block).encode())
                    return 0
                except NodeExistsError:
                    continue
            start = int(json.loads(raw)["block_end"]) + 1
            block = {"version": 1, "broker": self.config.broker_id, "block_start": str(start),
                     "block_end": str(start + PRODUCER_ID_BLOCK_SIZE - 1)}
            try:
                zk.set(PRODUCER_ID_BLOCK_PATH, json.dumps(block).encode(), version=stat.version)
                return start
            except BadVersionError:
                continue
        raise LoglakeError("could not claim a producer id block: too much contention")
