"""Typed configuration: topic configs (Kafka's names and defaults) and the broker's settings.

Topic configs are stored in ZooKeeper as string overrides (``/config/topics/<topic>``) exactly as
Kafka does; :class:`TopicConfig` is the validated, frozen view of defaults plus overrides. Every
key is declared once in :data:`TOPIC_CONFIG_KEYS` with its type, default, bounds and
documentation; unknown names and out-of-range values raise :class:`InvalidConfigError`, which the
broker answers with INVALID_CONFIG and the message.

Broker settings come from a Kafka-style ``server.properties`` file (``key=value`` lines, ``#``
comments) and/or command-line flags; :class:`BrokerConfig` is their frozen, validated form.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from loglake.errors import InvalidConfigError

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647

ConfigType = Literal["long", "int", "string", "list", "boolean", "double"]


@dataclass(frozen=True)
class ConfigKey:
    """One topic config: Kafka name, type, default (as Kafka documents it) and valid range."""

    name: str
    type: ConfigType
    default: Any
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    check: Callable[[Any], str | None] | None = None

    @property
    def attribute(self) -> str:
        return self.name.replace(".", "_")

    def parse(self, raw: str) -> Any:
        """Parse and validate a string value; raise InvalidConfigError with a clear message."""
        text = str(raw).strip()
        try:
            value: Any
            if self.type in ("long", "int"):
                value = int(text)
            elif self.type == "double":
                value = float(text)
            elif self.type == "boolean":
                if text.lower() not in ("true", "false"):
                    raise ValueError(text)
                value = text.lower() == "true"
            elif self.type == "list":
                value = tuple(part.strip() for part in text.split(",") if part.strip())
            else:
                value = text
        except ValueError:
            raise InvalidConfigError(
                f"Invalid value {raw!r} for configuration {self.name}: expected a {self.type}"
            ) from None
        self._validate(value, raw)
        return value

    def _validate(self, value: Any, raw: str) -> None:
        problem: str | None = None
        if self.minimum is not None and value < self.minimum:
            problem = f"Value must be at least {_number(self.minimum)}"
        elif self.maximum is not None and value > self.maximum:
            problem = f"Value must be no more than {_number(self.maximum)}"
        elif self.choices is not None:
            items = value if isinstance(value, tuple) else (value,)
            bad = [item for item in items if item not in self.choices]
            if bad or not items:
                problem = f"String must be one of: {', '.join(self.choices)}"
        elif self.check is not None:
            problem = self.check(value)
        if problem:
            raise InvalidConfigError(
                f"Invalid value {raw} for configuration {self.name}: {problem}"
            )


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _throttled_replicas_problem(value: tuple[str, ...]) -> str | None:
    """Kafka's ThrottledReplicaListValidator: ``*`` alone, or ``partition:broker`` items."""
    if value == ("*",) or all(
            len(parts := item.split(":")) == 2 and all(p.strip().isdigit() for p in parts)
            for item in value):
        return None
    return ("must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


TOPIC_CONFIG_KEYS: dict[str, ConfigKey] = {
    key.name: key
    for key in (
        ConfigKey("retention.ms", "long", 604800000, "Delete data older than this (-1: never).",
                  minimum=-1),
        ConfigKey("retention.bytes", "long", -1,
                  "Delete oldest data when a partition exceeds this size (-1: no limit).",
                  minimum=-1),
        ConfigKey("segment.bytes", "int", 1073741824, "Roll a new segment at this size.",
                  minimum=14, maximum=INT_MAX),
        ConfigKey("segment.ms", "long", 604800000,
                  "Roll a new segment after this long even if not full.", minimum=1),
        ConfigKey("segment.index.bytes", "int", 10485760, "Maximum size of an offset index.",
                  minimum=4, maximum=INT_MAX),
        ConfigKey("index.interval.bytes", "int", 4096,
                  "Bytes of log between two offset/time index entries.", minimum=0,
                  maximum=INT_MAX),
        ConfigKey("cleanup.policy", "list", ("delete",), "delete, compact, or both.",
                  choices=("delete", "compact")),
        ConfigKey("max.message.bytes", "int", 1048588,
                  "Largest record batch the broker accepts.", minimum=0, maximum=INT_MAX),
        ConfigKey("min.insync.replicas", "int", 1,
                  "Replicas that must acknowledge an acks=all write.", minimum=1,
                  maximum=INT_MAX),
        ConfigKey("message.timestamp.type", "string", "CreateTime",
                  "Use the producer's timestamp or the broker's append time.",
                  choices=("CreateTime", "LogAppendTime")),
        ConfigKey("flush.messages", "long", LONG_MAX,
                  "fsync after this many messages (default: leave it to the OS).", minimum=1),
        ConfigKey("flush.ms", "long", LONG_MAX,
                  "fsync after this long (default: leave it to the OS).", minimum=0),
        ConfigKey("delete.retention.ms", "long", 86400000,
                  "How long tombstones stay in a compacted topic.", minimum=0),
        ConfigKey("min.compaction.lag.ms", "long", 0,
                  "Records younger than this are never compacted.", minimum=0),
        ConfigKey("max.compaction.lag.ms", "long", LONG_MAX,
                  "A record is compacted at the latest after this long.", minimum=1),
        ConfigKey("min.cleanable.dirty.ratio", "double", 0.5,
                  "Dirty share of a log that makes it eligible for compaction.", minimum=0,
                  maximum=1),
        ConfigKey("unclean.leader.election.enable", "boolean", False,
                  "Allow an out-of-sync replica to become leader (may lose data)."),
        ConfigKey("remote.storage.enable", "boolean", True,
                  "Tier sealed segments to the Delta table of the topic."),
        ConfigKey("local.retention.ms", "long", -2,
                  "Keep tiered segments locally this long (-2: use retention.ms).", minimum=-2),
        ConfigKey("local.retention.bytes", "long", -2,
                  "Keep this many bytes of tiered segments locally (-2: use retention.bytes).",
                  minimum=-2),
        ConfigKey("message.timestamp.before.max.ms", "long", LONG_MAX,
                  "Reject records whose timestamp is this far in the past (CreateTime).",
                  minimum=0),
        ConfigKey("message.timestamp.after.max.ms", "long", LONG_MAX,
                  "Reject records whose timestamp is this far in the future (CreateTime).",
                  minimum=0),
        ConfigKey("message.timestamp.difference.max.ms", "long", LONG_MAX,
                  "Deprecated (KIP-937): the before/after limit where those are not set.",
                  minimum=0),
        ConfigKey("file.delete.delay.ms", "long", 60000,
                  "Delay before a deleted segment's files are removed.", minimum=0),
        ConfigKey("leader.replication.throttled.replicas", "list", (),
                  "Replicas ('partition:broker', or '*' for all) whose replication is "
                  "throttled on the leader side (leader.replication.throttled.rate) while "
                  "the fetching follower is not in the ISR.",
                  check=_throttled_replicas_problem),
        ConfigKey("follower.replication.throttled.replicas", "list", (),
                  "Replicas ('partition:broker', or '*' for all) whose replication is "
                  "throttled on the follower side (follower.replication.throttled.rate) while "
                  "they are not in the ISR.",
                  check=_throttled_replicas_problem),
    )
}


DYNAMIC_BROKER_CONFIG_KEYS: dict[str, ConfigKey] = {
    key.name: key
    for key in (
        ConfigKey("leader.replication.throttled.rate", "long", LONG_MAX,
                  "Bytes per second a leader sends to followers of throttled replicas "
                  "(leader.replication.throttled.replicas) that are not in the ISR.",
                  minimum=0),
        ConfigKey("follower.replication.throttled.rate", "long", LONG_MAX,
                  "Bytes per second a follower fetches for throttled replicas "
                  "(follower.replication.throttled.replicas) while not in the ISR.",
                  minimum=0),
    )
}
"""Broker configs that may change while the broker runs (Kafka's dynamic broker configs):
set per broker (``/config/brokers/<id>``) or for all brokers (``/config/brokers/<default>``)
with IncrementalAlterConfigs on a BROKER resource; a per-broker value wins over the cluster
default, which wins over ``server.properties``."""


@dataclass(frozen=True)
class TopicConfig:
    """Defaults plus a topic's overrides, validated. Attribute names are Kafka names with ``_``."""

    retention_ms: int = 604800000
    retention_bytes: int = -1
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    cleanup_policy: tuple[str, ...] = ("delete",)
    max_message_bytes: int = 1048588
    min_insync_replicas: int = 1
    message_timestamp_type: str = "CreateTime"
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    unclean_leader_election_enable: bool = False
    remote_storage_enable: bool = True
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    leader_replication_throttled_replicas: tuple[str, ...] = ()
    follower_replication_throttled_replicas: tuple[str, ...] = ()
    overrides: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, str] | None = None) -> TopicConfig:
        """Validate ``overrides`` (Kafka names, string values) over the defaults.

        Raises InvalidConfigError naming the first unknown key or bad value.
        """
        values: dict[str, Any] = {}
        clean: dict[str, str] = {}
        for name, raw in (overrides or {}).items():
            key = TOPIC_CONFIG_KEYS.get(name)
            if key is None:
                raise InvalidConfigError(f"Unknown topic config name: {name}")
            if raw is None:
                continue
            values[key.attribute] = key.parse(raw)
            clean[name] = str(raw).strip()
        return cls(**values, overrides=clean)

    @property
    def timestamp_before_max_ms(self) -> int:
        """The effective message.timestamp.before.max.ms: Kafka's LogConfig falls back to the
        deprecated message.timestamp.difference.max.ms while the new key is at its default."""
        if self.message_timestamp_before_max_ms != LONG_MAX:
            return self.message_timestamp_before_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def timestamp_after_max_ms(self) -> int:
        """The effective message.timestamp.after.max.ms (same fallback as before.max.ms)."""
        if self.message_timestamp_after_max_ms != LONG_MAX:
            return self.message_timestamp_after_max_ms
        return self.message_timestamp_difference_max_ms

    def value_string(self, name: str) -> str:
        """The effective value of a Kafka config name as Kafka prints it."""
        value = getattr(self, TOPIC_CONFIG_KEYS[name].attribute)
        if isinstance(value, tuple):
            return ",".join(value)
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    def is_default(self, name: str) -> bool:
        return name not in self.overrides


def read_properties(path: Path) -> dict[str, str]:
    """Read a Kafka-style properties file: ``key=value`` (or ``key: value``), ``#`` comments."""
    result: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith(("#", "!")):
            continue
        sep = min((i for i in (text.find("="), text.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise InvalidConfigError(f"{path}:{number}: expected key=value, got {line!r}")
        result[text[:sep].strip()] = text[sep + 1 :].strip()
    return result


@dataclass(frozen=True)
class BrokerConfig:
    """Settings of one broker process (Kafka's ``server.properties`` names in brackets).

    ``log_dirs`` holds one directory per partition (``<topic>-<partition>``) as Kafka does.
    """

    broker_id: int  # broker.id
    host: str  # from listeners=PLAINTEXT://host:port
    port: int
    log_dir: Path  # log.dirs (one directory)
    zookeeper_connect: str  # zookeeper.connect (host:port[,host:port][/chroot])
    rack: str | None = None  # broker.rack
    auto_create_topics_enable: bool = False  # auto.create.topics.enable
    num_partitions: int = 1  # num.partitions
    default_replication_factor: int = 1  # default.replication.factor
    socket_request_max_bytes: int = 104857600  # socket.request.max.bytes
    # request bytes all connections together may hold (frames being received or handled);
    # Kafka's default -1 is unbounded (-1 accepted); ours is 2 x socket.request.max.bytes: one
    # largest request plus ordinary traffic fits, and memory no longer grows with connections
    queued_max_request_bytes: int = 209715200  # queued.max.request.bytes
    # queued.max.request.bytes.per.connection: bytes one connection may read ahead of the
    # request being handled (its pipelined requests); 1 MiB, Kafka's default max.request.size,
    # so one default-size pipelined produce request waits in memory, the rest in the socket
    queued_max_request_bytes_per_connection: int = 1048576
    zookeeper_session_timeout_ms: int = 18000  # zookeeper.session.timeout.ms
    log_flush_scheduler_interval_ms: int = 1000  # log.flush.scheduler.interval.ms
    replica_lag_time_max_ms: int = 30000  # replica.lag.time.max.ms
    auto_leader_rebalance_enable: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_check_interval_seconds: int = 300  # leader.imbalance.check.interval.seconds
    group_initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    offsets_retention_minutes: int = 10080  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600000  # offsets.retention.check.interval.ms
    # where sealed segments are tiered: an fsspec-style URL (None: no tiering on this broker)
    remote_log_storage_url: str | None = None  # remote.log.storage.url
    # object-store options (delta-rs names), from remote.log.storage.option.<name>=<value>
    remote_log_storage_options: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # how often the tierer looks for sealed segments besides being woken by a roll
    # (Kafka's default is 30 s; checking is cheap here and it bounds seal-to-commit latency)
    remote_log_manager_task_interval_ms: int = 500  # remote.log.manager.task.interval.ms
    log_retention_check_interval_ms: int = 300000  # log.retention.check.interval.ms
    # replication throttles (dynamic: DYNAMIC_BROKER_CONFIG_KEYS; these are the static values)
    leader_replication_throttled_rate: int = LONG_MAX  # leader.replication.throttled.rate
    follower_replication_throttled_rate: int = LONG_MAX  # follower.replication.throttled.rate
    topic_defaults: Mapping[str, str] = dataclasses.field(default_factory=dict)  # log.* overrides

    # broker property -> topic config it provides the default for
    _TOPIC_DEFAULT_PROPERTIES = {
        "log.retention.ms": "retention.ms",
        "log.retention.bytes": "retention.bytes",
        "log.segment.bytes": "segment.bytes",
        "log.roll.ms": "segment.ms",
        "log.cleanup.policy": "cleanup.policy",
        "message.max.bytes": "max.message.bytes",
        "min.insync.replicas": "min.insync.replicas",
        "log.message.timestamp.type": "message.timestamp.type",
        "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
        "log.message.timestamp.difference.max.ms": "message.timestamp.difference.max.ms",
        "log.flush.interval.messages": "flush.messages",
        "log.flush.interval.ms": "flush.ms",
        "log.index.interval.bytes": "index.interval.bytes",
        "unclean.leader.election.enable": "unclean.leader.election.enable",
        "log.local.retention.ms": "local.retention.ms",
        "log.local.retention.bytes": "local.retention.bytes",
    }
    STORAGE_OPTION_PREFIX = "remote.log.storage.option."

    def __post_init__(self) -> None:
        if self.queued_max_request_bytes != -1 and (
            self.queued_max_request_bytes < self.socket_request_max_bytes
        ):
            raise InvalidConfigError(
                f"queued.max.request.bytes ({self.queued_max_request_bytes}) must be -1 "
                f"(unbounded) or at least socket.request.max.bytes "
                f"({self.socket_request_max_bytes}): a largest request must fit")
        if self.queued_max_request_bytes_per_connection < 1:
            raise InvalidConfigError("queued.max.request.bytes.per.connection must be positive")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BrokerConfig:
        """Build from ``server.properties`` keys; unknown keys are rejected with their name."""
        known = {
            "broker.id", "listeners", "log.dirs", "log.dir", "zookeeper.connect", "broker.rack",
            "auto.create.topics.enable", "num.partitions", "default.replication.factor",
            "socket.request.max.bytes", "zookeeper.session.timeout.ms",
            "queued.max.request.bytes", "queued.max.request.bytes.per.connection",
            "log.flush.scheduler.interval.ms", "replica.lag.time.max.ms",
            "auto.leader.rebalance.enable", "leader.imbalance.check.interval.seconds",
            "group.initial.rebalance.delay.ms", "offsets.retention.minutes",
            "offsets.retention.check.interval.ms", "remote.log.storage.url",
            "remote.log.manager.task.interval.ms", "log.retention.check.interval.ms",
            *DYNAMIC_BROKER_CONFIG_KEYS, *cls._TOPIC_DEFAULT_PROPERTIES,
        }
        prefix = cls.STORAGE_OPTION_PREFIX
        storage_options = {k[len(prefix):]: v for k, v in props.items() if k.startswith(prefix)}
        unknown = sorted(k for k in set(props) - known if not k.startswith(prefix))
        if unknown:
            raise InvalidConfigError(f"Unknown broker setting(s): {', '.join(unknown)}")
        for required in ("broker.id", "zookeeper.connect"):
            if required not in props:
                raise InvalidConfigError(f"Missing required broker setting {required}")
        listener = props.get("listeners", "PLAINTEXT://127.0.0.1:9092")
        scheme, _, address = listener.partition("://")
        if scheme != "PLAINTEXT" or ":" not in address:
            raise InvalidConfigError(
                f"listeners must look like PLAINTEXT://host:port, got {listener!r}"
            )
        host, _, port = address.rpartition(":")
        topic_defaults = {
            topic_key: props[prop]
            for prop, topic_key in cls._TOPIC_DEFAULT_PROPERTIES.items()
            if prop in props
        }
        TopicConfig.from_overrides(topic_defaults)  # validate early
        rates = {name: key.parse(props[name]) if name in props else key.default
                 for name, key in DYNAMIC_BROKER_CONFIG_KEYS.items()}
        try:
            return cls(
                broker_id=int(props["broker.id"]),
                host=host or "127.0.0.1",
                port=int(port),
                log_dir=Path(props.get("log.dirs", props.get("log.dir", "/tmp/loglake-logs"))),
                zookeeper_connect=props["zookeeper.connect"],
                rack=props.get("broker.rack") or None,
                auto_create_topics_enable=props.get("auto.create.topics.enable", "false").lower()
                == "true",
                num_partitions=int(props.get("num.partitions", "1")),
                default_replication_factor=int(props.get("default.replication.factor", "1")),
                socket_request_max_bytes=int(props.get("socket.request.max.bytes", "104857600")),
                queued_max_request_bytes=int(props.get("queued.max.request.bytes", "209715200")),
                queued_max_request_bytes_per_connection=int(
                    props.get("queued.max.request.bytes.per.connection", "1048576")
                ),
                zookeeper_session_timeout_ms=int(
                    props.get("zookeeper.session.timeout.ms", "18000")
                ),
                log_flush_scheduler_interval_ms=int(
                    props.get("log.flush.scheduler.interval.ms", "1000")
                ),
                replica_lag_time_max_ms=int(props.get("replica.lag.time.max.ms", "30000")),
                auto_leader_rebalance_enable=props.get(
                    "auto.leader.rebalance.enable", "true").lower() == "true",
                leader_imbalance_check_interval_seconds=int(
                    props.get("leader.imbalance.check.interval.seconds", "300")
                ),
                group_initial_rebalance_delay_ms=int(
                    props.get("group.initial.rebalance.delay.ms", "3000")
                ),
                offsets_retention_minutes=int(props.get("offsets.retention.minutes", "10080")),
                offsets_retention_check_interval_ms=int(
                    props.get("offsets.retention.check.interval.ms", "600000")
                ),
                remote_log_storage_url=props.get("remote.log.storage.url") or None,
                remote_log_storage_options=storage_options,
                remote_log_manager_task_interval_ms=int(
                    props.get("remote.log.manager.task.interval.ms", "500")
                ),
                log_retention_check_interval_ms=int(
                    props.get("log.retention.check.interval.ms", "300000")
                ),
                leader_replication_throttled_rate=rates["leader.replication.throttled.rate"],
                follower_replication_throttled_rate=rates[
                    "follower.replication.throttled.rate"],
                topic_defaults=topic_defaults,
            )
        except ValueError as exc:
            raise InvalidConfigError(f"Invalid broker setting: {exc}") from None

    def topic_config(self, overrides: Mapping[str, str] | None = None) -> TopicConfig:
        """Broker-level defaults, then the topic's own overrides."""
        merged = dict(self.topic_defaults)
        merged.update(overrides or {})
        config = TopicConfig.from_overrides(merged)
        return dataclasses.replace(config, overrides=dict(overrides or {}))
