"""Cluster metadata in ZooKeeper: Kafka's classic layout under a chroot, with typed accessors.

Layout (JSON values, as Kafka writes them)::

    /brokers/ids/<id>                                ephemeral {"host","port","rack","version"}
    /brokers/topics/<topic>                          {"version":3,"topic_id",
                                                      "partitions":{"0":[1,2]}}
    /brokers/topics/<topic>/partitions/<p>/state     {"leader","leader_epoch","isr",
                                                      "controller_epoch","version"}
    /config/topics/<topic>                           {"version":1,"config":{name: value}}
    /admin/delete_topics/<topic>                     marker while a deletion runs
    /controller (ephemeral), /controller_epoch
    /consumers/<group>/offsets/<topic>/<p>           committed offsets (groups issue)
    /loglake/storage                                 {"url", "options"}: where the Delta tables
                                                      live (options without secrets)
    /loglake/tiering/<topic>/<p>                     {"tiered_end","tier_start","lag_offsets",
                                                      "lag_seconds","leader","updated_ms"}
    /loglake/table_changes/<topic>                   {"version","operation","updated_ms"}: set
                                                      by clean-up jobs after a commit that
                                                      removed files; brokers watch it and drop
                                                      their cached view of the table

Invariants: a topic exists once its assignment znode exists; creation writes assignment, config
and every partition state in one multi-op transaction, so readers never see a partial topic.
Partition-state writes are conditioned on the znode version (``set_partition_state``).

Thread-safety: kazoo clients are thread-safe; this class holds no other mutable state. Watches
fire on kazoo's event thread: callers must hop to their own loop.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from loglake.errors import LoglakeError, TopicExistsError, UnknownTopicError


class ControllerMovedError(LoglakeError):
    """``/controller_epoch`` changed: another broker is controller now; stop writing."""


class StaleStateError(LoglakeError):
    """The partition-state znode changed since it was read; re-read and decide again."""

BROKER_IDS = "/brokers/ids"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
TOPICS = "/brokers/topics"
TOPIC_CONFIGS = "/config/topics"
DELETE_TOPICS = "/admin/delete_topics"
STORAGE = "/loglake/storage"
TIERING = "/loglake/tiering"
TABLE_CHANGES = "/loglake/table_changes"
_SECRET_MARKERS = ("secret", "password", "token", "access_key", "credential")


def split_connect(connect: str) -> tuple[str, str]:
    """``host:port[,host:port][/chroot]`` -> (hosts, chroot) ("" when there is none)."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, (slash + chroot).rstrip("/") if slash else ""


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    registration: int = 0  # czxid of /brokers/ids/<id>: changes when the broker re-registers


@dataclass(frozen=True)
class PartitionState:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int = 0
    zk_version: int = -1

    def to_json(self) -> bytes:
        return _dump(
            {
                "controller_epoch": self.controller_epoch,
                "leader": self.leader,
                "version": 1,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
            }
        )


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    assignment: dict[int, tuple[int, ...]]  # partition -> replica broker ids
    configs: dict[str, str]


def _dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


class ClusterCatalog:
    """Typed access to the ZooKeeper layout above.

    ``connect`` is Kafka's ``zookeeper.connect`` string (may end in a chroot, which is created).
    """

    def __init__(self, connect: str, *, timeout: float = 10.0, session_timeout: float = 18.0):
        hosts, chroot = split_connect(connect)
        if chroot:
            bootstrap = KazooClient(hosts=hosts, timeout=timeout)
            bootstrap.start(timeout=timeout)
            try:
                bootstrap.ensure_path(chroot)
            finally:
                bootstrap.stop()
                bootstrap.close()
        self.zk = KazooClient(hosts=hosts + chroot, timeout=session_timeout)
        self._start_timeout = timeout

    def start(self) -> None:
        self.zk.start(timeout=self._start_timeout)
        for path in (BROKER_IDS, TOPICS, TOPIC_CONFIGS, DELETE_TOPICS):
            self.zk.ensure_path(path)

    def stop(self) -> None:
        self.zk.stop()
        self.zk.close()

    def add_state_listener(self, listener: Callable[[KazooState], Any]) -> None:
        self.zk.add_listener(listener)

    # ---- brokers
    def register_broker(self, info: BrokerInfo) -> None:
        """Create the ephemeral ``/brokers/ids/<id>``; waits out a previous session's node."""
        data = _dump(
            {"host": info.host, "port": info.port, "rack": info.rack, "version": 5,
             "endpoints": [f"PLAINTEXT://{info.host}:{info.port}"]}
        )
        path = f"{BROKER_IDS}/{info.broker_id}"
        try:
            self.zk.create(path, data, ephemeral=True)
        except NodeExistsError:
            try:
                _, stat = self.zk.get(path)
            except NoNodeError:  # the old session's node expired in between: try again
                self.zk.create(path, data, ephemeral=True)
                return
            if stat.ephemeralOwner == self.zk.client_id[0]:
                return
            raise

    def brokers(self) -> dict[int, BrokerInfo]:
        result = {}
        for child in self.zk.get_children(BROKER_IDS):
            try:
                raw, stat = self.zk.get(f"{BROKER_IDS}/{child}")
            except NoNodeError:
                continue
            data = json.loads(raw)
            result[int(child)] = BrokerInfo(int(child), data["host"], int(data["port"]),
                                            data.get("rack"), stat.czxid)
        return result

    # ---- topics
    def topic_names(self) -> list[str]:
        return sorted(self.zk.get_children(TOPICS))

    def watch_topics(self, callback: Callable[[list[str]], Any]) -> None:
        self.zk.ChildrenWatch(TOPICS)(callback)

    def topic(self, name: str) -> TopicMetadata | None:
        try:
            raw, _ = self.zk.get(f"{TOPICS}/{name}")
        except NoNodeError:
            return None
        partitions = json.loads(raw)["partitions"]
        assignment = {int(p): tuple(replicas) for p, replicas in partitions.items()}
        return TopicMetadata(name, dict(sorted(assignment.items())), self.topic_config(name))

    def create_topic(
        self,
        name: str,
        assignment: Mapping[int, tuple[int, ...]],
        configs: Mapping[str, str],
        *,
        topic_id: str,
        controller_epoch: int = 0,
    ) -> None:
        """Write assignment, config and initial partition states atomically.

        The first replica of each partition starts as leader with epoch 0 and the full
        replica set as ISR. Raises TopicExistsError if the topic (or its deletion) exists.
        """
        if self.zk.exists(f"{DELETE_TOPICS}/{name}"):
            raise TopicExistsError(f"Topic '{name}' is marked for deletion.")
        tx = self.zk.transaction()
        tx.create(f"{TOPICS}/{name}", _dump(
            {"version": 3, "topic_id": topic_id,
             "partitions": {str(p): list(r) for p, r in assignment.items()}}
        ))
        config_path = f"{TOPIC_CONFIGS}/{name}"
        config_value = _dump({"version": 1, "config": dict(configs)})
        if self.zk.exists(config_path):
            tx.set_data(config_path, config_value)
        else:
            tx.create(config_path, config_value)
        tx.create(f"{TOPICS}/{name}/partitions")
        for partition, replicas in assignment.items():
            tx.create(f"{TOPICS}/{name}/partitions/{partition}")
            state = PartitionState(replicas[0], 0, tuple(replicas), controller_epoch)
            tx.create(f"{TOPICS}/{name}/partitions/{partition}/state", state.to_json())
        results = tx.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            if any(isinstance(r, NodeExistsError) for r in failures) and self.zk.exists(
                f"{TOPICS}/{name}"
            ):
                raise TopicExistsError(f"Topic '{name}' already exists.")
            raise failures[0]

    def delete_topic(self, name: str) -> None:
        """Remove a topic's znodes (assignment, states, config) behind a delete marker."""
        if not self.zk.exists(f"{TOPICS}/{name}"):
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        self.zk.ensure_path(f"{DELETE_TOPICS}/{name}")
        self.zk.delete(f"{TOPICS}/{name}", recursive=True)
        with contextlib.suppress(NoNodeError):
            self.zk.delete(f"{TOPIC_CONFIGS}/{name}")
        for path in (f"{TIERING}/{name}", f"{TABLE_CHANGES}/{name}"):
            with contextlib.suppress(NoNodeError):
                self.zk.delete(path, recursive=True)
        self.zk.delete(f"{DELETE_TOPICS}/{name}")

    # ---- configs
    def topic_config(self, name: str) -> dict[str, str]:
        try:
            raw, _ = self.zk.get(f"{TOPIC_CONFIGS}/{name}")
        except NoNodeError:
            return {}
        return {str(k): str(v) for k, v in json.loads(raw).get("config", {}).items()}

    def set_topic_config(self, name: str, configs: Mapping[str, str]) -> None:
        path = f"{TOPIC_CONFIGS}/{name}"
        self._put(path, _dump({"version": 1, "config": dict(configs)}))

    def _put(self, path: str, value: bytes) -> None:
        """Write ``value`` at ``path`` whether or not the znode (or its parents) exist yet; a
        concurrent creator does not make the write fail."""
        try:
            self.zk.set(path, value)
        except NoNodeError:
            try:
                self.zk.create(path, value, makepath=True)
            except NodeExistsError:
                self.zk.set(path, value)

    def watch_topic_config(self, name: str, callback: Callable[[dict[str, str]], Any]) -> None:
        def on_change(data: bytes | None, _stat: Any) -> bool | None:
            if data is None:
                return False  # znode gone: stop watching
            callback({str(k): str(v) for k, v in json.loads(data).get("config", {}).items()})
            return None

        self.zk.DataWatch(f"{TOPIC_CONFIGS}/{name}")(on_change)

    # ---- partition state
    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        try:
            raw, stat = self.zk.get(f"{TOPICS}/{topic}/partitions/{partition}/state")
        except NoNodeError:
            return None
        return _parse_state(raw, stat.version)

    def set_partition_state(self, topic: str, partition: int, state: PartitionState) -> int:
        """Write ``state`` only if the znode is still at ``state.zk_version``; new version back.

        Raises kazoo's BadVersionError when someone else wrote in between.
        """
        stat = self.zk.set(f"{TOPICS}/{topic}/partitions/{partition}/state", state.to_json(),
                           version=state.zk_version)
        return int(stat.version)

    def watch_brokers(self, callback: Callable[[list[str]], Any]) -> None:
        self.zk.ChildrenWatch(BROKER_IDS)(callback)

    def watch_partition_state(
        self, topic: str, partition: int, callback: Callable[[PartitionState | None], Any]
    ) -> None:
        """Call ``callback`` with the state now and after every change; stops when deleted."""

        def on_change(data: bytes | None, stat: Any) -> bool | None:
            if data is None:
                callback(None)
                return False
            callback(_parse_state(data, stat.version))
            return None

        self.zk.DataWatch(f"{TOPICS}/{topic}/partitions/{partition}/state")(on_change)

    def update_partition_state(self, topic: str, partition: int, state: PartitionState) -> int:
        """A leader's ISR change: write iff the znode is still at ``state.zk_version``.

        Raises StaleStateError when someone (controller, new leader) wrote in between.
        """
        try:
            return self.set_partition_state(topic, partition, state)
        except BadVersionError:
            raise StaleStateError(f"state of {topic}-{partition} changed concurrently") from None

    # ---- controller
    def try_become_controller(self, broker_id: int) -> tuple[int, int] | None:
        """Create the ephemeral ``/controller``; if it is ours, bump ``/controller_epoch``.

        Returns (epoch, epoch znode version) for conditioning later writes, or None if another
        broker holds ``/controller``. The epoch bump is version-checked, so two brokers racing
        through a controller change can never both hold the same epoch.
        """
        value = _dump({"version": 1, "brokerid": broker_id})
        try:
            self.zk.create(CONTROLLER, value, ephemeral=True)
        except NodeExistsError:
            raw, stat = self.zk.get(CONTROLLER)
            if stat.ephemeralOwner != self.zk.client_id[0]:
                return None
        while True:
            try:
                raw, stat = self.zk.get(CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self.zk.create(CONTROLLER_EPOCH, b"1")
                    _, stat = self.zk.get(CONTROLLER_EPOCH)
                    return 1, stat.version
                except NodeExistsError:
                    continue
            epoch = int(raw) + 1
            try:
                new = self.zk.set(CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
                return epoch, new.version
            except BadVersionError:
                continue

    def controller_id(self) -> int:
        try:
            raw, _ = self.zk.get(CONTROLLER)
        except NoNodeError:
            return -1
        return int(json.loads(raw)["brokerid"])

    def controller_write(self, topic: str, partition: int, state: PartitionState,
                         epoch_version: int) -> None:
        """Apply a controller decision (KAFKA-6082): one transaction that checks the
        ``/controller_epoch`` version we set and the state znode version we read."""
        tx = self.zk.transaction()
        tx.check(CONTROLLER_EPOCH, epoch_version)
        tx.set_data(f"{TOPICS}/{topic}/partitions/{partition}/state", state.to_json(),
                    version=state.zk_version)
        results = tx.commit()
        if isinstance(results[0], Exception):
            raise ControllerMovedError("controller epoch changed: no longer controller")
        if isinstance(results[1], Exception):
            raise StaleStateError(f"state of {topic}-{partition} changed concurrently")

    # ---- tiered storage
    def publish_storage(self, url: str, options: Mapping[str, str]) -> None:
        """Record where the Delta tables live, for tools and Spark (secrets are left out:
        readers take credentials from their own environment)."""
        public = {k: v for k, v in options.items()
                  if not any(marker in k.lower() for marker in _SECRET_MARKERS)}
        self._put(STORAGE, _dump({"url": url, "options": public}))

    def storage(self) -> tuple[str, dict[str, str]] | None:
        """``(url, options)`` published by the brokers; None if no broker tiers."""
        try:
            raw, _ = self.zk.get(STORAGE)
        except NoNodeError:
            return None
        data = json.loads(raw)
        return str(data["url"]), {str(k): str(v) for k, v in data.get("options", {}).items()}

    def set_tiering_status(self, topic: str, partition: int, status: Mapping[str, Any]) -> None:
        self._put(f"{TIERING}/{topic}/{partition}", _dump(dict(status)))

    def announce_table_change(self, topic: str, version: int, operation: str) -> None:
        """Tell every broker that ``topic``'s table lost files at ``version`` (a clean-up job
        committed): they drop cached file lists and row groups (see watch_table_changes)."""
        self._put(f"{TABLE_CHANGES}/{topic}", _dump({
            "version": version, "operation": operation, "updated_ms": int(time.time() * 1000)}))

    def watch_table_changes(self, topic: str, callback: Callable[[], Any],
                            alive: Callable[[], bool]) -> None:
        """Call ``callback`` now and after every :meth:`announce_table_change` of ``topic``
        (on kazoo's thread), until ``alive()`` turns false."""

        def on_change(_data: bytes | None, _stat: Any) -> bool | None:
            if not alive():
                return False
            callback()
            return None

        self.zk.DataWatch(f"{TABLE_CHANGES}/{topic}")(on_change)

    def tiering_status(self, topic: str) -> dict[int, dict[str, Any]]:
        """Partition -> the status its leader last reported (see the layout above)."""
        try:
            children = self.zk.get_children(f"{TIERING}/{topic}")
        except NoNodeError:
            return {}
        result = {}
        for child in children:
            with contextlib.suppress(NoNodeError, ValueError):
                raw, _ = self.zk.get(f"{TIERING}/{topic}/{child}")
                result[int(child)] = dict(json.loads(raw))
        return result

    def all_partition_states(self) -> dict[tuple[str, int], tuple[tuple[int, ...],
                                                                   PartitionState]]:
        """(topic, partition) -> (replicas, state) for every partition with a state znode."""
        result = {}
        for name in self.topic_names():
            meta = self.topic(name)
            if meta is None:
                continue
            for partition, replicas in meta.assignment.items():
                state = self.partition_state(name, partition)
                if state is not None:
                    result[(name, partition)] = (replicas, state)
        return result


def _parse_state(raw: bytes, version: int) -> PartitionState:
    data = json.loads(raw)
    return PartitionState(int(data["leader"]), int(data["leader_epoch"]), tuple(data["isr"]),
                          int(data.get("controller_epoch", 0)), version)
