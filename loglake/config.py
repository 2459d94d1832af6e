"""Typed configuration: topic configs (Kafka's names and defaults) and the broker's settings.

Topic configs are stored in ZooKeeper as string overrides (``/config/topics/<topic>``) exactly as
Kafka does; :class:`TopicConfig` is the validated, frozen view of defaults plus overrides. Every
key is declared once in :data:`TOPIC_CONFIG_KEYS` with its type, default, bounds and
documentation; unknown names and out-of-range values raise :class:`InvalidConfigError`, which the
broker answers with INVALID_CONFIG and the message.

Broker settings come from a Kafka-style ``server.properties`` file (``key=value`` lines, ``#``
comments) and/or command-line flags; :class:`BrokerConfig` is their frozen, validated form. Each
setting is declared once, as a field of BrokerConfig with its property name, documentation,
parser and default (:class:`Setting`); parsing (:meth:`BrokerConfig.from_properties`), the
defaults and the documentation (:func:`broker_settings_doc`) are derived from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
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
        ConfigKey("value.schema.subject", "string", "",
                  "Schema Registry subject whose schemas type the value columns of the topic's "
                  "table and views (empty: '<topic>-value' when that subject exists)."),
        ConfigKey("key.schema.subject", "string", "",
                  "Schema Registry subject whose schemas type the key columns (empty: "
                  "'<topic>-key' when that subject exists)."),
        ConfigKey("schema.columns.enable", "boolean", True,
                  "Decode keys/values framed with a Schema Registry id into typed columns of "
                  "the topic's table and views (false: raw bytes only)."),
        ConfigKey("confluent.value.schema.validation", "boolean", False,
                  "Reject produce requests whose values do not carry a schema id registered "
                  "under the topic's value subject (INVALID_RECORD)."),
        ConfigKey("confluent.key.schema.validation", "boolean", False,
                  "Reject produce requests whose keys do not carry a schema id registered "
                  "under the topic's key subject (INVALID_RECORD)."),
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
    """Defaults plus a topic's overrides, validated. Attribute names are Kafka names with ``_``;
    each default is the one declared in TOPIC_CONFIG_KEYS."""

    retention_ms: int = TOPIC_CONFIG_KEYS["retention.ms"].default
    retention_bytes: int = TOPIC_CONFIG_KEYS["retention.bytes"].default
    segment_bytes: int = TOPIC_CONFIG_KEYS["segment.bytes"].default
    segment_ms: int = TOPIC_CONFIG_KEYS["segment.ms"].default
    segment_index_bytes: int = TOPIC_CONFIG_KEYS["segment.index.bytes"].default
    index_interval_bytes: int = TOPIC_CONFIG_KEYS["index.interval.bytes"].default
    cleanup_policy: tuple[str, ...] = TOPIC_CONFIG_KEYS["cleanup.policy"].default
    max_message_bytes: int = TOPIC_CONFIG_KEYS["max.message.bytes"].default
    min_insync_replicas: int = TOPIC_CONFIG_KEYS["min.insync.replicas"].default
    message_timestamp_type: str = TOPIC_CONFIG_KEYS["message.timestamp.type"].default
    flush_messages: int = TOPIC_CONFIG_KEYS["flush.messages"].default
    flush_ms: int = TOPIC_CONFIG_KEYS["flush.ms"].default
    delete_retention_ms: int = TOPIC_CONFIG_KEYS["delete.retention.ms"].default
    min_compaction_lag_ms: int = TOPIC_CONFIG_KEYS["min.compaction.lag.ms"].default
    max_compaction_lag_ms: int = TOPIC_CONFIG_KEYS["max.compaction.lag.ms"].default
    min_cleanable_dirty_ratio: float = TOPIC_CONFIG_KEYS["min.cleanable.dirty.ratio"].default
    unclean_leader_election_enable: bool = (
        TOPIC_CONFIG_KEYS["unclean.leader.election.enable"].default)
    remote_storage_enable: bool = TOPIC_CONFIG_KEYS["remote.storage.enable"].default
    local_retention_ms: int = TOPIC_CONFIG_KEYS["local.retention.ms"].default
    local_retention_bytes: int = TOPIC_CONFIG_KEYS["local.retention.bytes"].default
    message_timestamp_before_max_ms: int = (
        TOPIC_CONFIG_KEYS["message.timestamp.before.max.ms"].default)
    message_timestamp_after_max_ms: int = (
        TOPIC_CONFIG_KEYS["message.timestamp.after.max.ms"].default)
    message_timestamp_difference_max_ms: int = (
        TOPIC_CONFIG_KEYS["message.timestamp.difference.max.ms"].default)
    file_delete_delay_ms: int = TOPIC_CONFIG_KEYS["file.delete.delay.ms"].default
    leader_replication_throttled_replicas: tuple[str, ...] = (
        TOPIC_CONFIG_KEYS["leader.replication.throttled.replicas"].default)
    follower_replication_throttled_replicas: tuple[str, ...] = (
        TOPIC_CONFIG_KEYS["follower.replication.throttled.replicas"].default)
    value_schema_subject: str = TOPIC_CONFIG_KEYS["value.schema.subject"].default
    key_schema_subject: str = TOPIC_CONFIG_KEYS["key.schema.subject"].default
    schema_columns_enable: bool = TOPIC_CONFIG_KEYS["schema.columns.enable"].default
    confluent_value_schema_validation: bool = (
        TOPIC_CONFIG_KEYS["confluent.value.schema.validation"].default)
    confluent_key_schema_validation: bool = (
        TOPIC_CONFIG_KEYS["confluent.key.schema.validation"].default)
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


def _joined_lines(text: str) -> Iterator[tuple[int, str]]:
    """(number, line) with Java's continuation lines joined: a line ending in an odd number of
    backslashes goes on with the next line, its leading white space dropped (how multi-line
    values such as KIP-651's inline PEM ``ssl.keystore.key`` are written)."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        number, line = index + 1, lines[index]
        index += 1
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1 and not line.lstrip().startswith(
                ("#", "!")):
            line = line[:-1] + (lines[index].lstrip() if index < len(lines) else "")
            index += 1
        yield number, line


def read_properties(path: Path) -> dict[str, str]:
    """Read a Kafka-style properties file: ``key=value`` (or ``key: value``), ``#`` comments,
    a trailing backslash continues the value on the next line."""
    result: dict[str, str] = {}
    for number, line in _joined_lines(path.read_text()):
        text = line.strip()
        if not text or text.startswith(("#", "!")):
            continue
        sep = min((i for i in (text.find("="), text.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise InvalidConfigError(f"{path}:{number}: expected key=value, got {line!r}")
        result[text[:sep].strip()] = text[sep + 1 :].strip()
    return result


DEFAULT_LISTENER = "PLAINTEXT://127.0.0.1:9092"
STORAGE_OPTION_PREFIX = "remote.log.storage.option."

TOPIC_DEFAULT_PROPERTIES: dict[str, str] = {
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
"""Broker properties that give the cluster-wide default of a topic config (Kafka's names)."""


@dataclass(frozen=True)
class Setting:
    """How one :class:`BrokerConfig` field is read from ``server.properties``: the property
    names (the first present wins), its documentation, how a value is parsed (raises
    ValueError or InvalidConfigError), and the raw value assumed when the property is absent
    (None: the field's default; for a field without one, the property is required)."""

    names: tuple[str, ...]
    doc: str
    parse: Callable[[str], Any]
    absent: str | None = None


def _setting(names: str | tuple[str, ...], doc: str, parse: Callable[[str], Any],
             default: Any = dataclasses.MISSING, *, absent: str | None = None) -> Any:
    """A BrokerConfig field declared once: property name(s), doc, parser and default."""
    meta = {"setting": Setting(names if isinstance(names, tuple) else (names,), doc, parse,
                               absent)}
    return dataclasses.field(default=default, metadata=meta)


def _boolean(text: str) -> bool:
    return text.lower() == "true"  # (Kafka's parsing: anything else is false)


def _optional(text: str) -> str | None:
    return text or None


def _metrics_listener(text: str) -> tuple[str, int] | None:
    """``metrics.listener``: ``http://host:port`` (or ``host:port``) -> (host, port); empty:
    None (no metrics endpoint). Port 0 binds a free port (published in ZooKeeper)."""
    text = text.strip()
    if not text:
        return None
    rest = text[len("http://"):] if text.lower().startswith("http://") else text
    host, sep, port = rest.rstrip("/").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or "/" in rest.rstrip("/") or not port.isdigit() or int(port) > 65535:
        raise InvalidConfigError(
            f"metrics.listener {text!r}: expected http://host:port (e.g. http://127.0.0.1:9404)")
    return host, int(port)


@dataclass(frozen=True)
class ListenerAddress:
    """One entry of ``listeners`` / ``advertised.listeners``: ``NAME://host:port``. The name is
    upper-cased (Kafka's listener names are case-insensitive); an empty host means 127.0.0.1
    (loglake binds loopback unless told otherwise)."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


SECURITY_PROTOCOL_NAMES = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""Kafka's security protocols (the same names as broker/security/session.py's constants)."""

DEFAULT_PROTOCOL_MAP = "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"
LISTENER_PREFIX = "listener.name."
"""``listener.name.<listener, lower case>.<setting>=<value>``: a setting for one listener only
(Kafka's per-listener configs, e.g. ``listener.name.internal.ssl.keystore.location``); kept
raw in ``BrokerConfig.listener_settings``, applied by :meth:`BrokerConfig.for_listener`."""

PER_LISTENER_FORBIDDEN = frozenset({
    "broker_id", "host", "port", "listeners", "advertised_listeners",
    "listener_security_protocol_map", "inter_broker_listener_name",
    "security_inter_broker_protocol", "zookeeper_connect", "log_dir"})
"""Settings that describe the broker, not one listener: never taken from a listener prefix."""


def _listeners(text: str) -> tuple[ListenerAddress, ...]:
    result = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, address = item.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not name.replace("_", "").isalnum() or not port.isdigit():
            raise InvalidConfigError(
                f"listeners must look like NAME://host:port[,NAME://host:port...] (e.g. "
                f"PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093), got {text!r}")
        number = int(port)
        if number > 65535:
            raise InvalidConfigError(f"listener port out of range in {item!r}")
        result.append(ListenerAddress(name.upper(), host.strip("[]") or "127.0.0.1", number))
    if not result:
        raise InvalidConfigError(f"no listener in {text!r}")
    return tuple(result)


def _listener_host(text: str) -> str:
    return _listeners(text)[0].host


def _listener_port(text: str) -> int:
    return _listeners(text)[0].port


def _protocol(text: str) -> str:
    value = text.strip().upper()
    if value not in SECURITY_PROTOCOL_NAMES:
        raise InvalidConfigError(
            f"unknown security protocol {text!r}: one of {', '.join(SECURITY_PROTOCOL_NAMES)}")
    return value


def _protocol_map(text: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        if not sep or not name.strip():
            raise InvalidConfigError(
                f"listener.security.protocol.map must look like NAME:PROTOCOL[,NAME:PROTOCOL"
                f"...], got {text!r}")
        pairs.append((name.strip().upper(), _protocol(protocol)))
    return tuple(pairs)


def _choice(*choices: str, lower: bool = False) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower() if lower else text.strip()
        if value not in choices:
            raise InvalidConfigError(f"{text!r} is not one of: {', '.join(choices)}")
        return value
    return parse


STORE_TYPES = ("JKS", "PKCS12", "PEM", "JCEKS")


def _store_type(setting: str) -> Callable[[str], str | None]:
    """The parser of ``ssl.keystore.type`` / ``ssl.truststore.type``: any case; empty: not
    set; an unknown type is refused naming ``setting``."""
    def parse(text: str) -> str | None:
        value = text.strip().upper()
        if value and value not in STORE_TYPES:
            raise InvalidConfigError(
                f"{setting} {text!r} is not one of: {', '.join(STORE_TYPES[:3])}")
        return value or None
    return parse


TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")


def _tls_protocols(text: str) -> tuple[str, ...]:
    values = tuple(part.strip() for part in text.split(",") if part.strip())
    bad = [value for value in values if value not in TLS_PROTOCOLS]
    if bad or not values:
        raise InvalidConfigError(
            f"ssl.enabled.protocols {text!r}: only {' and '.join(TLS_PROTOCOLS)} are supported "
            "(TLS 1.0 and 1.1 are refused)")
    return values


SASL_MECHANISM_NAMES = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _sasl_mechanisms(text: str) -> tuple[str, ...]:
    values = tuple(part.strip().upper() for part in text.split(",") if part.strip())
    bad = [value for value in values if value not in SASL_MECHANISM_NAMES]
    if bad:
        raise InvalidConfigError(
            f"sasl.enabled.mechanisms {text!r}: loglake serves {', '.join(SASL_MECHANISM_NAMES)}"
            f" (not {', '.join(bad)})")
    return values


ACL_AUTHORIZER_CLASSES = ("kafka.security.authorizer.AclAuthorizer",
                          "kafka.security.auth.SimpleAclAuthorizer",
                          "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
"""``authorizer.class.name`` values that turn on the ACL authorizer
(broker/security/acl_authorizer.py: Kafka's AclAuthorizer semantics)."""


def _authorizer_class(text: str) -> str:
    value = text.strip()
    if value and value not in ACL_AUTHORIZER_CLASSES:
        raise InvalidConfigError(
            f"authorizer.class.name {text!r}: loglake provides "
            f"{' or '.join(ACL_AUTHORIZER_CLASSES)} (or empty: no authorizer)")
    return value


def _super_users(text: str) -> str:
    for part in (p.strip() for p in text.split(";")):
        kind, sep, name = part.partition(":")
        if part and not (sep and kind and name):
            raise InvalidConfigError(
                f"super.users {text!r}: principals like User:admin, separated by ';'")
    return text.strip()


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(f"{value} is below the minimum 1")
    return value


def _at_least_zero(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"{value} is below the minimum 0")
    return value


def _ip_overrides(text: str) -> tuple[tuple[str, int], ...]:
    """``max.connections.per.ip.overrides``: ``host:count,host:count`` (Kafka's form; a host is
    an IP address or a name resolved when the broker starts)."""
    pairs: list[tuple[str, int]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise InvalidConfigError(
                f"max.connections.per.ip.overrides {text!r}: expected host:count pairs "
                "separated by ',' (e.g. 127.0.0.1:200,10.0.0.7:5)")
        pairs.append((host, int(count)))
    return tuple(pairs)


def _dynamic(name: str) -> Callable[[str], Any]:
    return DYNAMIC_BROKER_CONFIG_KEYS[name].parse


@dataclass(frozen=True)
class BrokerConfig:
    """Settings of one broker process, each declared once below: Kafka's ``server.properties``
    name, documentation, parser and default (:func:`_setting`). :meth:`from_properties` and
    :func:`broker_settings_doc` are derived from these declarations.

    ``log_dir`` holds one directory per partition (``<topic>-<partition>``) as Kafka does.
    Besides the declared settings, ``remote.log.storage.option.<name>=<value>`` lines become
    ``remote_log_storage_options`` and the ``log.*`` properties of TOPIC_DEFAULT_PROPERTIES
    become ``topic_defaults`` (cluster-wide topic config defaults).
    """

    broker_id: int = _setting("broker.id", "This broker's id (required).", int)
    host: str = _setting(
        "listeners", "Where to listen: NAME://host:port[,NAME://host:port...]; each name's "
        "security protocol comes from listener.security.protocol.map (the first listener's "
        "address is also host/port).", _listener_host, absent=DEFAULT_LISTENER)
    port: int = _setting("listeners", "The port of listeners.", _listener_port,
                         absent=DEFAULT_LISTENER)
    log_dir: Path = _setting(  # noqa: RUF009 (a dataclasses.field, not a default value)
        ("log.dirs", "log.dir"), "The directory of partition directories (one directory).",
        Path, absent="/tmp/loglake-logs")
    zookeeper_connect: str = _setting(
        "zookeeper.connect", "ZooKeeper: host:port[,host:port][/chroot] (required).", str)
    listeners: tuple[ListenerAddress, ...] = _setting(
        "listeners", "Every listener (empty: one PLAINTEXT listener on host:port).", _listeners,
        (), absent=DEFAULT_LISTENER)
    advertised_listeners: tuple[ListenerAddress, ...] = _setting(
        "advertised.listeners", "The addresses published in ZooKeeper and answered in Metadata, "
        "NAME://host:port per listener (none: the listeners' own addresses).", _listeners, ())
    listener_security_protocol_map: tuple[tuple[str, str], ...] = _setting(
        "listener.security.protocol.map", "Listener name -> security protocol "
        "(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), NAME:PROTOCOL,...", _protocol_map,
        absent=DEFAULT_PROTOCOL_MAP, default=_protocol_map(DEFAULT_PROTOCOL_MAP))
    inter_broker_listener_name: str | None = _setting(
        "inter.broker.listener.name", "The listener brokers use to reach each other "
        "(replication, transaction markers); not together with security.inter.broker.protocol.",
        lambda text: text.strip().upper() or None, None)
    security_inter_broker_protocol: str | None = _setting(
        "security.inter.broker.protocol", "The inter-broker listener given by its security "
        "protocol (the listener of that name), when inter.broker.listener.name is not set "
        "(neither: PLAINTEXT).", _protocol, None)
    ssl_keystore_location: str | None = _setting(
        "ssl.keystore.location", "The location of the key store file: the private key and the "
        "certificate chain (leaf first) of TLS listeners and of the broker's own inter-broker "
        "connections (PEM, PKCS12 or JKS: see ssl.keystore.type).", _optional, None)
    ssl_keystore_type: str | None = _setting(
        "ssl.keystore.type", "The file format of the key store file: JKS, PKCS12 or PEM "
        "(Kafka's values; JCEKS is read too). Not set: decided by the file's content (Kafka "
        "would assume JKS).", _store_type("ssl.keystore.type"), None)
    ssl_keystore_password: str | None = _setting(
        "ssl.keystore.password", "The store password for the key store file; needed for JKS "
        "and PKCS12 keystores, not used for PEM.", _optional, None)
    ssl_key_password: str | None = _setting(
        "ssl.key.password", "The password of the private key in the key store file or the PEM "
        "key specified in ssl.keystore.key (JKS: not set means the store password; none: not "
        "encrypted).", _optional, None)
    ssl_keystore_key: str | None = _setting(
        "ssl.keystore.key", "Private key in PEM format (PKCS#8; encrypted: set "
        "ssl.key.password), with ssl.keystore.certificate.chain, instead of "
        "ssl.keystore.location (KIP-651).", _optional, None)
    ssl_keystore_certificate_chain: str | None = _setting(
        "ssl.keystore.certificate.chain", "Certificate chain in PEM format (X.509 "
        "certificates, leaf first) for ssl.keystore.key.", _optional, None)
    ssl_truststore_location: str | None = _setting(
        "ssl.truststore.location", "The location of the trust store file: the CA certificates "
        "trusted for client certificates (and, inter-broker, for other brokers' certificates; "
        "none: the system's CAs).", _optional, None)
    ssl_truststore_type: str | None = _setting(
        "ssl.truststore.type", "The file format of the trust store file: JKS, PKCS12 or PEM. "
        "Not set: decided by the file's content (Kafka would assume JKS).",
        _store_type("ssl.truststore.type"), None)
    ssl_truststore_password: str | None = _setting(
        "ssl.truststore.password", "The password for the trust store file. If a password is "
        "not set, a JKS trust store is still used, but integrity checking is disabled; not "
        "used for PEM.", _optional, None)
    ssl_truststore_certificates: str | None = _setting(
        "ssl.truststore.certificates", "Trusted certificates in PEM format, instead of "
        "ssl.truststore.location (KIP-651).", _optional, None)
    ssl_client_auth: str = _setting(
        "ssl.client.auth", "Client certificates on TLS listeners: none, requested (verified if "
        "sent) or required.", _choice("none", "requested", "required", lower=True), "none")
    ssl_principal_mapping_rules: str = _setting(
        "ssl.principal.mapping.rules", "How a client certificate's subject becomes a user name: "
        "DEFAULT (the whole distinguished name) and RULE:pattern/replacement/[LU], first match "
        "wins.", str, "DEFAULT")
    ssl_enabled_protocols: tuple[str, ...] = _setting(
        "ssl.enabled.protocols", "TLS versions accepted: TLSv1.2 and/or TLSv1.3 (older ones "
        "are refused).", _tls_protocols, TLS_PROTOCOLS)
    ssl_protocol: str = _setting(
        "ssl.protocol", "Kafka's SSLContext protocol name; TLSv1.2 or TLSv1.3 (the versions "
        "are set by ssl.enabled.protocols).", _choice("TLS", "TLSv1.2", "TLSv1.3"), "TLSv1.3")
    ssl_endpoint_identification_algorithm: str = _setting(
        "ssl.endpoint.identification.algorithm", "https: inter-broker TLS connections check "
        "that the other broker's certificate names its host; empty: no host name check.",
        _choice("https", "", lower=True), "https")
    rack: str | None = _setting("broker.rack", "This broker's rack (none: empty).", _optional,
                                None)
    auto_create_topics_enable: bool = _setting(
        "auto.create.topics.enable", "Create a topic a client asks metadata for.", _boolean,
        False)
    num_partitions: int = _setting("num.partitions", "Partitions of auto-created topics.", int, 1)
    default_replication_factor: int = _setting(
        "default.replication.factor", "Replication factor of auto-created topics.", int, 1)
    socket_request_max_bytes: int = _setting(
        "socket.request.max.bytes", "Largest request frame accepted.", int, 104857600)
    queued_max_request_bytes: int = _setting(
        "queued.max.request.bytes",
        "Request bytes all connections together may hold (frames being received or handled). "
        "Kafka's default -1 is unbounded (-1 accepted); ours is 2 x socket.request.max.bytes: "
        "one largest request plus ordinary traffic fits, and memory no longer grows with "
        "connections.", int, 209715200)
    queued_max_request_bytes_per_connection: int = _setting(
        "queued.max.request.bytes.per.connection",
        "Bytes one connection may read ahead of the request being handled (its pipelined "
        "requests); 1 MiB, Kafka's default max.request.size, so one default-size pipelined "
        "produce request waits in memory, the rest in the socket.", int, 1048576)
    # ---- connection limits (broker/connection_quotas.py; Kafka's SocketServer ConnectionQuotas)
    max_connections: int = _setting(
        "max.connections", "Connections the broker accepts at once over all listeners; at the "
        "limit the listener stops accepting until one closes (the inter-broker listener is "
        "exempt and closes another listener's least recently active connection instead). "
        "listener.name.<l>.max.connections limits one listener.", _at_least_zero, INT_MAX)
    max_connections_per_ip: int = _setting(
        "max.connections.per.ip", "Connections one IP address may hold; a new connection over "
        "it is closed at once.", _at_least_zero, INT_MAX)
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...] = _setting(
        "max.connections.per.ip.overrides", "Per-IP (or host name) exceptions to "
        "max.connections.per.ip: host:count,host:count.", _ip_overrides, ())
    max_connection_creation_rate: int = _setting(
        "max.connection.creation.rate", "KIP-612: new connections per second the broker "
        "accepts (the inter-broker listener exempt); over it accepts are delayed. "
        "listener.name.<l>.max.connection.creation.rate limits one listener.",
        _at_least_zero, INT_MAX)
    zookeeper_session_timeout_ms: int = _setting(
        "zookeeper.session.timeout.ms", "ZooKeeper session timeout.", int, 18000)
    zookeeper_set_acl: bool = _setting(
        "zookeeper.set.acl", "Znodes this broker creates get Kafka's secure ACLs (creator ALL + "
        "world READ; no world access under /config/users and /config/brokers). Needs ZooKeeper "
        "credentials (catalog/zk_auth.py).", _boolean, False)
    zookeeper_sasl_username: str | None = _setting(
        "zookeeper.sasl.username", "ZooKeeper SASL (DIGEST-MD5) user of this broker (none: "
        "zookeeper.sasl.jaas.file, else the Client section of sasl.jaas.file, else "
        "anonymous).", _optional, None)
    zookeeper_sasl_password: str | None = _setting(
        "zookeeper.sasl.password", "Password of zookeeper.sasl.username.", _optional, None)
    zookeeper_sasl_jaas_file: str | None = _setting(
        "zookeeper.sasl.jaas.file", "A JAAS file whose client section (DigestLoginModule "
        'username="..." password="...") holds the ZooKeeper login.', _optional, None)
    zookeeper_sasl_clientconfig: str = _setting(
        "zookeeper.sasl.clientconfig", "The JAAS section with the ZooKeeper login "
        "(ZooKeeper's name for it).", str, "Client")
    # ---- TLS to ZooKeeper (KIP-515; catalog/zk_tls.py checks and reads them at start)
    zookeeper_ssl_client_enable: bool = _setting(
        "zookeeper.ssl.client.enable", "Set client to use TLS when connecting to ZooKeeper.",
        _boolean, False)
    zookeeper_client_cnxn_socket: str | None = _setting(
        "zookeeper.clientCnxnSocket", "Kafka needs org.apache.zookeeper.ClientCnxnSocketNetty "
        "with TLS; accepted (loglake's ZooKeeper client speaks TLS itself; NIO with TLS is "
        "refused).", _optional, None)
    zookeeper_ssl_keystore_location: str | None = _setting(
        "zookeeper.ssl.keystore.location", "Keystore location when using a client-side "
        "certificate with TLS connectivity to ZooKeeper.", _optional, None)
    zookeeper_ssl_keystore_password: str | None = _setting(
        "zookeeper.ssl.keystore.password", "Keystore password (it also decrypts the key: "
        "ZooKeeper has no separate key password).", _optional, None)
    zookeeper_ssl_keystore_type: str | None = _setting(
        "zookeeper.ssl.keystore.type", "Keystore type: PEM, PKCS12 or JKS (none: from the "
        "file name's extension, else its content).", _optional, None)
    zookeeper_ssl_truststore_location: str | None = _setting(
        "zookeeper.ssl.truststore.location", "Truststore location when using TLS connectivity "
        "to ZooKeeper (none: the system's CAs).", _optional, None)
    zookeeper_ssl_truststore_password: str | None = _setting(
        "zookeeper.ssl.truststore.password", "Truststore password when using TLS connectivity "
        "to ZooKeeper.", _optional, None)
    zookeeper_ssl_truststore_type: str | None = _setting(
        "zookeeper.ssl.truststore.type", "Truststore type: PEM, PKCS12 or JKS (none: from the "
        "file name's extension, else its content).", _optional, None)
    zookeeper_ssl_protocol: str = _setting(
        "zookeeper.ssl.protocol", "The protocol of ZooKeeper TLS negotiation: TLSv1.2, "
        "TLSv1.3 or TLS.", str, "TLSv1.2")
    zookeeper_ssl_enabled_protocols: str | None = _setting(
        "zookeeper.ssl.enabled.protocols", "The enabled protocol(s) in ZooKeeper TLS "
        "negotiation (csv; none: zookeeper.ssl.protocol).", _optional, None)
    zookeeper_ssl_cipher_suites: str | None = _setting(
        "zookeeper.ssl.cipher.suites", "The enabled cipher suites (csv, IANA names; none: "
        "OpenSSL's defaults).", _optional, None)
    zookeeper_ssl_endpoint_identification_algorithm: str = _setting(
        "zookeeper.ssl.endpoint.identification.algorithm", "HTTPS (case-insensitive): verify "
        "ZooKeeper's host name against its certificate; empty: do not.", str, "HTTPS")
    zookeeper_ssl_crl_enable: bool = _setting(
        "zookeeper.ssl.crl.enable", "Certificate revocation lists: false only (true is "
        "refused: Python's ssl cannot fetch them).", _boolean, False)
    zookeeper_ssl_ocsp_enable: bool = _setting(
        "zookeeper.ssl.ocsp.enable", "OCSP: false only (true is refused).", _boolean, False)
    log_flush_scheduler_interval_ms: int = _setting(
        "log.flush.scheduler.interval.ms", "How often logs are checked for a due flush.", int,
        1000)
    replica_lag_time_max_ms: int = _setting(
        "replica.lag.time.max.ms", "A follower not caught up for this long leaves the ISR.",
        int, 30000)
    auto_leader_rebalance_enable: bool = _setting(
        "auto.leader.rebalance.enable", "The controller moves leadership back to preferred "
        "replicas.", _boolean, True)
    leader_imbalance_check_interval_seconds: int = _setting(
        "leader.imbalance.check.interval.seconds", "How often the controller checks leader "
        "balance.", int, 300)
    group_initial_rebalance_delay_ms: int = _setting(
        "group.initial.rebalance.delay.ms", "Wait for more members before a new group's first "
        "rebalance.", int, 3000)
    offsets_retention_minutes: int = _setting(
        "offsets.retention.minutes", "Committed offsets of empty groups are kept this long.", int,
        10080)
    offsets_retention_check_interval_ms: int = _setting(
        "offsets.retention.check.interval.ms", "How often expired offsets are removed.", int,
        600000)
    remote_log_storage_url: str | None = _setting(
        "remote.log.storage.url", "Where sealed segments are tiered: an fsspec-style URL (none: "
        "no tiering on this broker).", _optional, None)
    remote_log_storage_options: Mapping[str, str] = dataclasses.field(default_factory=dict)
    remote_log_manager_task_interval_ms: int = _setting(
        "remote.log.manager.task.interval.ms", "How often the tierer looks for sealed segments "
        "besides being woken by a roll (Kafka's default is 30 s; checking is cheap here and it "
        "bounds seal-to-commit latency).", int, 500)
    log_retention_check_interval_ms: int = _setting(
        "log.retention.check.interval.ms", "How often local retention runs.", int, 300000)
    leader_replication_throttled_rate: int = _setting(
        "leader.replication.throttled.rate",
        DYNAMIC_BROKER_CONFIG_KEYS["leader.replication.throttled.rate"].doc
        + " (Static value; dynamic per broker or cluster.)",
        _dynamic("leader.replication.throttled.rate"), LONG_MAX)
    follower_replication_throttled_rate: int = _setting(
        "follower.replication.throttled.rate",
        DYNAMIC_BROKER_CONFIG_KEYS["follower.replication.throttled.rate"].doc
        + " (Static value; dynamic per broker or cluster.)",
        _dynamic("follower.replication.throttled.rate"), LONG_MAX)
    transaction_max_timeout_ms: int = _setting(
        "transaction.max.timeout.ms", "Largest transaction.timeout.ms a producer may ask for "
        "(InitProducerId answers INVALID_TRANSACTION_TIMEOUT above it).", int, 900000)
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = _setting(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms", "How often the "
        "transaction coordinator aborts transactions open longer than their timeout.", int,
        10000)
    transactional_id_expiration_ms: int = _setting(
        "transactional.id.expiration.ms", "A transactional id without a transaction for this "
        "long is forgotten.", int, 604800000)
    transactional_id_expiration_check_interval_ms: int = _setting(
        "transactional.id.expiration.check.interval.ms", "How often expired transactional ids "
        "are removed.", int, 3600000)
    producer_id_expiration_ms: int = _setting(
        "producer.id.expiration.ms", "A partition forgets a producer id without an open "
        "transaction whose last write is this old (its next batch may start at any sequence).",
        int, 86400000)
    producer_id_expiration_check_interval_ms: int = _setting(
        "producer.id.expiration.check.interval.ms", "How often partitions remove expired "
        "producer ids.", int, 600000)
    authorizer_class_name: str = _setting(
        "authorizer.class.name", "The authorizer: empty (none, every request is allowed) or "
        "kafka.security.authorizer.AclAuthorizer (Kafka's ACLs in ZooKeeper; "
        "kafka.security.auth.SimpleAclAuthorizer is accepted too).", _authorizer_class, "")
    super_users: str = _setting(
        "super.users", "Principals allowed everything by the authorizer, semicolon-separated "
        "(User:admin;User:broker).", _super_users, "")
    allow_everyone_if_no_acl_found: bool = _setting(
        "allow.everyone.if.no.acl.found", "With an authorizer, allow a resource that has no ACL "
        "at all to everyone (default: deny).", _boolean, False)
    # ---- SASL (SASL_PLAINTEXT / SASL_SSL listeners; each may be set per listener with
    # listener.name.<listener>.<key>; see broker/security/sasl_settings.py)
    sasl_enabled_mechanisms: tuple[str, ...] = _setting(
        "sasl.enabled.mechanisms", "SASL mechanisms SASL listeners accept: PLAIN, "
        "SCRAM-SHA-256, SCRAM-SHA-512 (Kafka's default GSSAPI is not served).", _sasl_mechanisms,
        ("SCRAM-SHA-256", "SCRAM-SHA-512"))
    sasl_mechanism_inter_broker_protocol: str = _setting(
        "sasl.mechanism.inter.broker.protocol", "SASL mechanism of the broker's own "
        "connections to other brokers on a SASL inter-broker listener (PLAIN, SCRAM-SHA-256 or "
        "SCRAM-SHA-512; Kafka's default GSSAPI is not served).", str, "GSSAPI")
    sasl_jaas_config: str | None = _setting(
        "sasl.jaas.config", "A JAAS entry for every SASL listener (Kafka takes it per listener "
        "and mechanism: listener.name.<l>.<mechanism>.sasl.jaas.config). PLAIN users: "
        'user_<name>="<password>" options; the broker\'s own login: username/password.',
        _optional, None)
    sasl_jaas_file: str | None = _setting(
        ("sasl.jaas.file", "java.security.auth.login.config"), "A JAAS file whose "
        "'<listener>.KafkaServer' or 'KafkaServer' section holds the PLAIN users "
        "(user_<name>=\"<password>\") when no sasl.jaas.config applies (Kafka: the JVM's "
        "java.security.auth.login.config).", _optional, None)
    sasl_server_max_receive_size: int = _setting(
        "sasl.server.max.receive.size", "Largest frame accepted before a SASL connection has "
        "authenticated (larger: connection closed).", int, 524288)
    sasl_server_authentication_timeout_ms: int = _setting(
        "sasl.server.authentication.timeout.ms", "A connection to a SASL listener that has not "
        "authenticated within this time is closed (loglake's; Kafka relies on "
        "connections.max.idle.ms).", int, 10000)
    connection_failed_authentication_delay_ms: int = _setting(
        "connection.failed.authentication.delay.ms", "A failed authentication is answered "
        "after this delay and the connection then serves nothing else (Kafka's).", int, 100)
    connections_max_reauth_ms: int = _setting(
        "connections.max.reauth.ms", "KIP-368: when positive, SASL sessions last at most this "
        "long; clients re-authenticate on the connection before (0: sessions never expire).",
        int, 0)
    # ---- client quotas (broker/quotas/): the quotas themselves are entity configs
    # (/config/users, /config/clients), these shape how rates are measured
    quota_window_num: int = _setting(
        "quota.window.num", "Samples a client quota rate keeps (Kafka's default 11: the "
        "rate is measured over the last 10-11 windows).", _at_least_one, 11)
    quota_window_size_seconds: int = _setting(
        "quota.window.size.seconds", "Seconds one client quota sample spans; also the "
        "longest request-percentage throttle.", _at_least_one, 1)
    controller_quota_window_num: int = _setting(
        "controller.quota.window.num", "KIP-599: with quota.window.size.seconds' controller "
        "twin, the burst of controller_mutation_rate quotas (window.num x window.size x rate "
        "partitions).", _at_least_one, 11)
    controller_quota_window_size_seconds: int = _setting(
        "controller.quota.window.size.seconds", "Seconds one controller mutation quota window "
        "spans (see controller.quota.window.num).", _at_least_one, 1)
    # ---- metrics (broker/metrics/)
    metrics_listener: tuple[str, int] | None = _setting(
        "metrics.listener", "Where the Prometheus /metrics endpoint listens, http://host:port "
        "(port 0: any free port; the URL is published at /loglake/metrics/<id>); empty: no "
        "metrics endpoint (the default).", _metrics_listener, None)
    topic_defaults: Mapping[str, str] = dataclasses.field(default_factory=dict)
    listener_settings: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Every ``listener.name.<listener>.<key>`` property, raw (see LISTENER_PREFIX)."""

    def __post_init__(self) -> None:
        self._check_listeners()
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
        settings = broker_settings()
        known = {name for setting in settings.values() for name in setting.names}
        known |= set(TOPIC_DEFAULT_PROPERTIES)
        storage_options = {k[len(STORAGE_OPTION_PREFIX):]: v for k, v in props.items()
                           if k.startswith(STORAGE_OPTION_PREFIX)}
        listener_settings = {k: v for k, v in props.items() if k.startswith(LISTENER_PREFIX)}
        unknown = sorted(k for k in set(props) - known
                         if not k.startswith((STORAGE_OPTION_PREFIX, LISTENER_PREFIX)))
        if unknown:
            raise InvalidConfigError(f"Unknown broker setting(s): {', '.join(unknown)}")
        for attribute, setting in settings.items():
            required = (setting.absent is None
                        and cls.__dataclass_fields__[attribute].default is dataclasses.MISSING)
            if required and not any(name in props for name in setting.names):
                raise InvalidConfigError(f"Missing required broker setting {setting.names[0]}")
        topic_defaults = {topic_key: props[prop]
                          for prop, topic_key in TOPIC_DEFAULT_PROPERTIES.items() if prop in props}
        TopicConfig.from_overrides(topic_defaults)  # validate early
        values: dict[str, Any] = {}
        try:
            for attribute, setting in settings.items():
                raw = next((props[name] for name in setting.names if name in props),
                           setting.absent)
                if raw is not None:
                    values[attribute] = setting.parse(raw)
            config = cls(**values, remote_log_storage_options=storage_options,
                         topic_defaults=topic_defaults, listener_settings=listener_settings)
            for listener in config.effective_listeners:
                config.for_listener(listener.name)  # validate the per-listener values now
            return config
        except ValueError as exc:
            raise InvalidConfigError(f"Invalid broker setting: {exc}") from None

    # ---- listeners
    @property
    def effective_listeners(self) -> tuple[ListenerAddress, ...]:
        """``listeners``, or one PLAINTEXT listener on host:port when none is given."""
        return self.listeners or (ListenerAddress("PLAINTEXT", self.host, self.port),)

    @property
    def effective_advertised_listeners(self) -> tuple[ListenerAddress, ...]:
        """``advertised.listeners``, each listener not named there at its own address (Kafka
        takes the listeners' addresses when advertised.listeners is not set)."""
        named = {address.name: address for address in self.advertised_listeners}
        return tuple(named.get(address.name, address) for address in self.effective_listeners)

    @property
    def security_protocol_map(self) -> dict[str, str]:
        return dict(self.listener_security_protocol_map)

    def security_protocol(self, listener: str) -> str:
        """The security protocol of listener ``listener`` (checked to exist at load)."""
        return self.security_protocol_map[listener.upper()]

    @property
    def inter_broker_listener(self) -> str:
        """The listener name brokers use between themselves."""
        return (self.inter_broker_listener_name or self.security_inter_broker_protocol
                or "PLAINTEXT")

    def listener_setting(self, listener: str, key: str) -> str | None:
        """The raw ``listener.name.<listener>.<key>`` value, or None."""
        return self.listener_settings.get(f"{LISTENER_PREFIX}{listener.lower()}.{key}")

    def for_listener(self, listener: str) -> BrokerConfig:
        """This config with the ``listener.name.<listener>.`` settings applied over the
        broker-wide ones (keys that name a declared setting; others, such as
        ``<mechanism>.sasl.jaas.config``, stay raw in ``listener_settings``)."""
        prefix = f"{LISTENER_PREFIX}{listener.lower()}."
        settings = broker_settings()
        by_name = {name: attribute for attribute, setting in settings.items()
                   for name in setting.names if attribute not in PER_LISTENER_FORBIDDEN}
        values: dict[str, Any] = {}
        for key, raw in self.listener_settings.items():
            if key.startswith(prefix) and (attribute := by_name.get(key[len(prefix):])):
                try:
                    values[attribute] = settings[attribute].parse(raw)
                except (ValueError, InvalidConfigError) as exc:
                    raise InvalidConfigError(f"Invalid value for {key}: {exc}") from None
        return dataclasses.replace(self, **values) if values else self

    def _check_listeners(self) -> None:
        """Kafka's cross-checks of the listener settings (KafkaConfig.validateValues)."""
        listeners = self.effective_listeners
        names = [address.name for address in listeners]
        if len(set(names)) != len(names):
            raise InvalidConfigError(f"listeners: each listener name must appear once: {names}")
        ports = [address.port for address in listeners if address.port != 0]
        if len(set(ports)) != len(ports):
            raise InvalidConfigError(f"listeners: each listener needs its own port: {ports}")
        protocols = self.security_protocol_map
        for name in names:
            if name not in protocols:
                raise InvalidConfigError(
                    f"No security protocol defined for listener {name}: add it to "
                    "listener.security.protocol.map (NAME:PROTOCOL)")
        for address in self.advertised_listeners:
            if address.name not in names:
                raise InvalidConfigError(
                    f"advertised.listeners names listener {address.name}, which is not in "
                    f"listeners ({', '.join(names)})")
        for address in self.effective_advertised_listeners:
            if address.host in ("0.0.0.0", "::"):
                raise InvalidConfigError(
                    f"advertised.listeners cannot use the nonroutable meta-address "
                    f"{address.host} (listener {address.name}): set advertised.listeners to a "
                    "routable address")
        if self.inter_broker_listener_name and self.security_inter_broker_protocol:
            raise InvalidConfigError("Only one of inter.broker.listener.name and "
                                     "security.inter.broker.protocol should be set.")
        if self.inter_broker_listener not in names:
            raise InvalidConfigError(
                f"inter.broker.listener.name must be a listener name defined in "
                f"advertised.listeners: {self.inter_broker_listener} is not one of "
                f"{', '.join(names)} (set inter.broker.listener.name)")

    def topic_config(self, overrides: Mapping[str, str] | None = None) -> TopicConfig:
        """Broker-level defaults, then the topic's own overrides."""
        merged = dict(self.topic_defaults)
        merged.update(overrides or {})
        config = TopicConfig.from_overrides(merged)
        return dataclasses.replace(config, overrides=dict(overrides or {}))


def broker_settings() -> dict[str, Setting]:
    """Every declared broker setting: BrokerConfig attribute -> how it is read."""
    return {f.name: f.metadata["setting"] for f in dataclasses.fields(BrokerConfig)
            if "setting" in f.metadata}


def broker_settings_doc() -> str:
    """One line per ``server.properties`` setting: name, default, documentation."""
    lines: list[str] = []
    fields = {f.name: f for f in dataclasses.fields(BrokerConfig)}
    seen: set[tuple[str, ...]] = set()
    for attribute, setting in broker_settings().items():
        if setting.names in seen:  # (host and port both come from listeners)
            continue
        seen.add(setting.names)
        default = fields[attribute].default
        if setting.absent is not None:
            shown = setting.absent
        elif default is dataclasses.MISSING:
            shown = "(required)"
        else:
            shown = "" if default is None else str(default).lower() if isinstance(
                default, bool) else str(default)
        lines.append(f"{' | '.join(setting.names)} = {shown}  # {setting.doc}")
    return "\n".join(lines)
