"""The options of ``format("loglake")``, parsed once into a frozen :class:`SourceOptions`.

Names and meanings follow Spark's Kafka source and sink (option names are case-insensitive):

=============================  =================================================================
``kafka.bootstrap.servers``    brokers (``host:port,...``); or/and
``zookeeper``                  ``host:port[/chroot]`` of the cluster's ZooKeeper: brokers are
                               looked up there, and the tier (the topic's Delta table) is read
                               directly. With only bootstrap servers everything is read through
                               the brokers (which serve tiered offsets from the table).
``subscribe``                  ``t1,t2``; exactly one of subscribe / subscribePattern / assign
``subscribePattern``           a Python regular expression matched against whole topic names
``assign``                     JSON ``{"t1": [0, 1]}``
``startingOffsets``            ``earliest`` | ``latest`` | JSON ``{"t": {"0": 23, "1": -2}}``
                               (-2 earliest, -1 latest); default latest (stream), earliest (batch)
``endingOffsets``              batch only: ``latest`` (default) | JSON (-1 latest)
``startingTimestamp``          ms since the epoch for every partition (wins over the next two)
``startingOffsetsByTimestamp`` JSON ``{"t": {"0": ms}}`` (wins over startingOffsets)
``startingOffsetsByTimestampStrategy``  ``error`` (default) | ``latest``: what to do when no
                               record is at or after the timestamp
``endingTimestamp``, ``endingOffsetsByTimestamp``  batch only, as above (no match: latest)
``failOnDataLoss``             ``true`` (default): fail when needed offsets were deleted
``loglake.asOfOffsets``        batch only: JSON ``{"0": 1200}`` / ``{"t": {"0": 1200}}``: the
                               records below these offsets as the table held them when they
                               were tiered (time travel by offset; streaming/offset_versions.py)
``includeHeaders``             ``false`` (default): add the ``headers`` column
``maxOffsetsPerTrigger``       stream: at most this many offsets per micro-batch
``minOffsetsPerTrigger``       stream: wait for this many offsets ... unless ``maxTriggerDelay``
``maxTriggerDelay``            ... has passed since the last batch (default ``15m``)
``minPartitions``              split offset ranges so a batch has at least this many tasks
``kafkaConsumer.pollTimeoutMs`` how long a task waits for the brokers without progress (120000)
``kafka.isolation.level``      ``read_committed`` (default) | ``read_uncommitted``: which
                               records of the brokers' hot tail a read sees (below)
``kafka.security.protocol``    ``PLAINTEXT`` (default) | ``SSL`` | ``SASL_PLAINTEXT`` | ``SASL_SSL``
``kafka.sasl.mechanism``       ``PLAIN`` | ``SCRAM-SHA-256`` | ``SCRAM-SHA-512``
``kafka.sasl.jaas.config``     Java's ``...ScramLoginModule required username="u"
                               password="p";`` (or loglake's simpler ``kafka.sasl.username`` +
                               ``kafka.sasl.password``)
``kafka.ssl.*``                ``kafka.ssl.truststore.location`` (PEM, PKCS12 or JKS, with
                               ``kafka.ssl.truststore.type`` and ``.password``; the type is
                               read from the file when not set) or ``kafka.ssl.ca.location``;
                               ``kafka.ssl.keystore.location`` (PEM key + chain, PKCS12 or JKS,
                               with ``kafka.ssl.keystore.password`` / ``kafka.ssl.key.password``)
                               for client certificates;
                               ``kafka.ssl.endpoint.identification.algorithm`` (all names of
                               loglake/client/security.py), translated once for every Kafka
                               client of the query (range consumers, producers, admin)
``kafka.<librdkafka key>``     passed to the librdkafka consumer/producer unchanged
``tier.<storage option>``      object-store options for reading the tier (delta-rs names, e.g.
                               ``tier.aws_access_key_id``), over those the brokers published in
                               ZooKeeper (which never include secrets; without them, credentials
                               come from the ``AWS_*`` environment of the Spark workers)
``topic``                      sink: the topic of every row (wins over the ``topic`` column)
``deliveryGuarantee``          sink: ``at-least-once`` (default, as Spark's Kafka sink) |
                               ``exactly-once`` (transactional writes; see streaming/sink.py)
``valueFormat``, ``keyFormat`` reads: ``binary`` (default: Spark's Kafka schema) | ``registry``:
                               decode the side by each record's Confluent schema id into a
                               typed ``value`` (``key``) column, plus ``value_bytes``,
                               ``value_schema_id``, ``value_error`` (streaming/typed_read.py);
                               needs ``zookeeper`` (the schemas are read from the cluster's
                               schema store)
``valueSchema.subject``,       reads with ``registry``: the subject whose versions define the
``keySchema.subject``          column type (default: the topic's ``value.schema.subject`` /
                               ``<topic>-value``); sink: serialize the ``value`` (``key``)
                               column, a struct or a primitive, with this subject's schema
                               into Confluent framing (streaming/typed_write.py); needs
                               ``zookeeper``
``valueSchema.version``,       sink: the subject version to serialize with (default: latest)
``keySchema.version``
=============================  =================================================================

Isolation: reads see committed data only by default. The tier (the topic's Delta table) holds
committed records only whatever the option says (the brokers tier below the last stable offset
and leave out aborted records and transaction markers). The hot tail is read through Kafka
fetches with ``isolation.level`` = this option, and ``latest`` (the end of a batch read, of a
micro-batch, of a SQL view) is the last stable offset (LSO: the first offset of the oldest open
transaction, at most the high watermark) for ``read_committed``, so a read never waits on an
open transaction and never returns aborted records; ``read_uncommitted`` reads up to the high
watermark and also returns the records of aborted (and still open) transactions that are not
tiered yet. Offsets of committed records may have gaps either way (markers, aborted records).
Spark's own Kafka source defaults to ``read_uncommitted`` (the Java consumer's default);
loglake's default is ``read_committed`` (librdkafka's), so tables and streams agree.

Object-store credentials (``tier.*``) never leave the process that reads them: the brokers
publish the storage location in ZooKeeper without secrets, and nothing here writes any.

Pure parsing: no I/O, thread-safe; :class:`SourceOptions` is immutable and picklable (Spark
ships it to Python workers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from loglake.client.security import SecurityConfig, SecurityConfigError, from_spark_options
from loglake.streaming.errors import SourceOptionError

EARLIEST = -2
"""Offset placeholder for a partition's first offset (Spark's JSON convention)."""
LATEST = -1
"""Offset placeholder for a partition's end: the last stable offset (read_committed, the
default) or the high watermark (read_uncommitted)."""

DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
DEFAULT_POLL_TIMEOUT_MS = 120_000

FORBIDDEN_KAFKA_KEYS = {
    "kafka.group.id": "the source tracks offsets itself and joins no group",
    "kafka.auto.offset.reset": "use startingOffsets instead",
    "kafka.key.deserializer": "keys are always binary",
    "kafka.value.deserializer": "values are always binary",
    "kafka.key.serializer": "the key column must be string or binary",
    "kafka.value.serializer": "the value column must be string or binary",
    "kafka.enable.auto.commit": "the source commits nothing to the cluster",
    "kafka.interceptor.classes": "not supported",
}
"""``kafka.*`` options Spark's Kafka source refuses, with the reason (we refuse them too)."""

Mode = Literal["batch", "stream", "write"]
IsolationLevel = Literal["read_committed", "read_uncommitted"]
ISOLATION_OPTION = "kafka.isolation.level"
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Subscription:
    """Which topics (and partitions) a query reads."""

    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is read (for assign: whether any of its partitions is)."""
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            assert self.pattern is not None
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assignment)


@dataclass(frozen=True)
class OffsetSpec:
    """Where a query starts or ends: a position for every partition.

    ``kind`` ``earliest`` / ``latest``; ``offsets``: ``per_partition`` holds offsets (or
    EARLIEST / LATEST); ``timestamp``: one ``timestamp_ms`` for all partitions;
    ``timestamps``: ``per_partition`` holds timestamps in ms.
    """

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    per_partition: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp_ms: int | None = None
    option: str = ""
    """The option this came from, for error messages."""


@dataclass(frozen=True)
class SideSchemaOption:
    """The schema options of one side (``key`` or ``value``) of a read or write."""

    side: Literal["key", "value"]
    registry: bool = False
    """reads: ``<side>Format=registry`` (decode into typed columns)."""
    subject: str | None = None
    """``<side>Schema.subject``: reads, the subject defining the column type (None: the
    topic's own); writes, the subject whose schema serializes the column."""
    version: int | None = None
    """writes: ``<side>Schema.version`` (None: the subject's latest version)."""
    write: bool = False


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of one ``format("loglake")`` read or write."""

    bootstrap_servers: str | None
    zookeeper: str | None
    subscription: Subscription | None
    starting: OffsetSpec
    ending: OffsetSpec
    timestamp_strategy: Literal["error", "latest"] = "error"
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    min_partitions: int | None = None
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    tier_read: Literal["auto", "brokers"] = "auto"
    """``auto``: read below the tier's end from the Delta table when the storage is known
    (``zookeeper`` given); ``brokers``: read everything through the brokers."""
    sink_topic: str | None = None
    delivery_guarantee: Literal["at-least-once", "exactly-once"] = "at-least-once"
    isolation_level: IsolationLevel = "read_committed"
    """``kafka.isolation.level``: ``read_committed`` reads the hot tail up to the last stable
    offset, committed records only; ``read_uncommitted`` up to the high watermark."""
    kafka: Mapping[str, str] = field(default_factory=dict, repr=False)  # may hold passwords
    """``kafka.*`` options without the prefix (bootstrap servers, isolation level and the
    security options excluded), for librdkafka unchanged."""
    security: SecurityConfig = field(default_factory=SecurityConfig)
    """The ``kafka.security.protocol`` / ``kafka.sasl.*`` / ``kafka.ssl.*`` options, translated
    (``security.librdkafka()`` for librdkafka clients; its repr leaves out passwords)."""
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)  # secrets
    """``tier.*`` options without the prefix: object-store options for the tier."""
    as_of_offsets: Mapping[TopicPartition, int] | None = None
    """batch: ``loglake.asOfOffsets``, the records below these offsets as the table held them
    when they were tiered (streaming/offset_versions.py)."""
    value_schema: SideSchemaOption = field(default_factory=lambda: SideSchemaOption("value"))
    """``valueFormat`` / ``valueSchema.*``: how values are decoded (reads) or encoded (writes)."""
    key_schema: SideSchemaOption = field(default_factory=lambda: SideSchemaOption("key"))
    """``keyFormat`` / ``keySchema.*`` likewise for keys."""

    def schema_sides(self) -> tuple[SideSchemaOption, ...]:
        """The sides read typed (``registry``) or written with a schema, key first."""
        return tuple(side for side in (self.key_schema, self.value_schema)
                     if side.registry or (side.subject is not None and side.write))


def parse_options(options: Mapping[str, str], mode: Mode) -> SourceOptions:
    """Validate ``options`` (any key case) for a batch read, a stream read or a write.

    Raises :class:`SourceOptionError` naming the offending option."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    kafka = {k[len("kafka."):]: v for k, v in opts.items()
             if k.startswith("kafka.") and k not in ("kafka.bootstrap.servers",
                                                      ISOLATION_OPTION)}
    storage_options = {k[len("tier."):]: v for k, v in opts.items() if k.startswith("tier.")}
    for key, reason in FORBIDDEN_KAFKA_KEYS.items():
        if key in opts:
            raise SourceOptionError(f"option {key!r} is not supported: {reason}")
    try:
        security = from_spark_options(kafka)
    except SecurityConfigError as exc:
        raise SourceOptionError(f"kafka.* security options: {exc.message}",
                                hint=exc.hint) from None
    kafka = dict(security.other)
    security = security.without_other()
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip() or None
    zookeeper = opts.get("zookeeper", "").strip() or None
    if bootstrap is None and zookeeper is None:
        raise SourceOptionError(
            "option 'kafka.bootstrap.servers' or 'zookeeper' is required",
            hint="e.g. .option('zookeeper', 'localhost:2181/loglake')",
        )
    subscription = None if mode == "write" else _subscription(opts)
    reading = mode != "write"
    if mode == "stream":
        for name in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if name in opts:
                raise SourceOptionError(
                    f"option {_spelled(name)!r} is only for batch queries; a stream has no end")
    if mode == "batch":
        for name in ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"):
            if name in opts:
                raise SourceOptionError(
                    f"option {_spelled(name)!r} is only for streaming queries")
    default_start: Literal["earliest", "latest"] = "earliest" if mode == "batch" else "latest"
    starting = _offset_spec(opts, "starting", default_start, subscription) if reading else (
        OffsetSpec("earliest"))
    ending = _offset_spec(opts, "ending", "latest", subscription) if mode == "batch" else (
        OffsetSpec("latest"))
    if mode == "batch":
        _check_batch_bounds(starting, ending)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise SourceOptionError(
            f"option 'startingOffsetsByTimestampStrategy' must be error or latest, "
            f"got {strategy!r}")
    max_per_trigger = _positive(opts, "maxoffsetspertrigger")
    min_per_trigger = _positive(opts, "minoffsetspertrigger")
    if max_per_trigger is not None and min_per_trigger is not None and (
            min_per_trigger > max_per_trigger):
        raise SourceOptionError(
            f"option 'minOffsetsPerTrigger' ({min_per_trigger}) must not exceed "
            f"'maxOffsetsPerTrigger' ({max_per_trigger})")
    tier_read = opts.get("tierread", "auto").strip().lower()
    if tier_read not in ("auto", "brokers"):
        raise SourceOptionError(f"option 'tierRead' must be auto or brokers, got {tier_read!r}")
    sink_topic = opts.get("topic", "").strip() or None
    isolation = opts.get(ISOLATION_OPTION, "").strip().lower() or "read_committed"
    if isolation not in ("read_committed", "read_uncommitted"):
        raise SourceOptionError(
            f"option {ISOLATION_OPTION!r} must be read_committed or read_uncommitted, "
            f"got {isolation!r}")
    as_of = None
    if "loglake.asofoffsets" in opts:
        from loglake.streaming.offset_versions import parse_as_of

        if mode != "batch" or any(k in opts for k in (
                "endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")):
            raise SourceOptionError("option 'loglake.asOfOffsets' is only for batch reads, "
                                    "without endingOffsets/endingTimestamp")
        as_of = parse_as_of(opts["loglake.asofoffsets"], subscription)
    guarantee = opts.get("deliveryguarantee", "at-least-once").strip().lower()
    if guarantee not in ("at-least-once", "exactly-once") or (
            reading and "deliveryguarantee" in opts):
        raise SourceOptionError(
            f"option 'deliveryGuarantee' must be at-least-once or exactly-once, and is only "
            f"for writes, got {opts['deliveryguarantee']!r}")
    value_schema = _side_schema(opts, "value", mode, zookeeper)
    key_schema = _side_schema(opts, "key", mode, zookeeper)
    return SourceOptions(
        bootstrap_servers=bootstrap,
        zookeeper=zookeeper,
        subscription=subscription,
        starting=starting,
        ending=ending,
        timestamp_strategy="latest" if strategy == "latest" else "error",
        fail_on_data_loss=_boolean(opts, "failondataloss", True),
        include_headers=_boolean(opts, "includeheaders", False),
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=_duration_ms(opts.get("maxtriggerdelay"),
                                          DEFAULT_MAX_TRIGGER_DELAY_MS),
        min_partitions=_positive(opts, "minpartitions"),
        poll_timeout_ms=_positive(opts, "kafkaconsumer.polltimeoutms") or DEFAULT_POLL_TIMEOUT_MS,
        tier_read="brokers" if tier_read == "brokers" else "auto",
        sink_topic=sink_topic,
        delivery_guarantee="exactly-once" if guarantee == "exactly-once" else "at-least-once",
        isolation_level="read_uncommitted" if isolation == "read_uncommitted" else (
            "read_committed"),
        kafka=kafka,
        security=security,
        storage_options=storage_options,
        as_of_offsets=as_of,
        value_schema=value_schema,
        key_schema=key_schema,
    )


def _side_schema(opts: Mapping[str, str], side: Literal["key", "value"], mode: Mode,
                 zookeeper: str | None) -> SideSchemaOption:
    """``<side>Format`` / ``<side>Schema.subject`` / ``<side>Schema.version``, validated."""
    format_key, subject_key, version_key = (f"{side}format", f"{side}schema.subject",
                                            f"{side}schema.version")
    fmt = opts.get(format_key, "").strip().lower()
    subject = opts.get(subject_key, "").strip() or None
    raw_version = opts.get(version_key, "").strip()
    spelled = {format_key: f"{side}Format", subject_key: f"{side}Schema.subject",
               version_key: f"{side}Schema.version"}
    if mode == "write":
        if fmt:
            raise SourceOptionError(
                f"option {spelled[format_key]!r} is only for reads; a write serializes with "
                f"{spelled[subject_key]!r}")
        version = None
        if raw_version:
            if subject is None:
                raise SourceOptionError(
                    f"option {spelled[version_key]!r} needs {spelled[subject_key]!r}")
            if raw_version.lower() != "latest":
                try:
                    version = int(raw_version)
                except ValueError:
                    version = 0
                if version <= 0:
                    raise SourceOptionError(
                        f"option {spelled[version_key]!r} must be a positive version number "
                        f"or latest, got {raw_version!r}")
        if subject is not None and zookeeper is None:
            raise SourceOptionError(
                f"option {spelled[subject_key]!r} needs the 'zookeeper' option (the schema "
                f"is read from the cluster's schema store)")
        return SideSchemaOption(side, subject=subject, version=version, write=True)
    if fmt not in ("", "binary", "registry"):
        raise SourceOptionError(
            f"option {spelled[format_key]!r} must be binary or registry, got "
            f"{opts[format_key]!r}")
    if raw_version:
        raise SourceOptionError(f"option {spelled[version_key]!r} is only for writes")
    registry = fmt == "registry"
    if subject is not None and not registry:
        raise SourceOptionError(
            f"option {spelled[subject_key]!r} needs {spelled[format_key]}=registry")
    if registry and zookeeper is None:
        raise SourceOptionError(
            f"option {spelled[format_key]}=registry needs the 'zookeeper' option (the "
            f"schemas are read from the cluster's schema store)",
            hint="e.g. .option('zookeeper', 'localhost:2181/loglake')")
    return SideSchemaOption(side, registry=registry, subject=subject)


_SPELLING = {
    "endingoffsets": "endingOffsets", "endingtimestamp": "endingTimestamp",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
    "startingoffsets": "startingOffsets", "startingtimestamp": "startingTimestamp",
    "startingoffsetsbytimestamp": "startingOffsetsByTimestamp",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger", "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay", "minpartitions": "minPartitions",
    "failondataloss": "failOnDataLoss", "includeheaders": "includeHeaders",
    "deliveryguarantee": "deliveryGuarantee",
    "subscribepattern": "subscribePattern", "kafkaconsumer.polltimeoutms":
    "kafkaConsumer.pollTimeoutMs",
}


def _spelled(key: str) -> str:
    return _SPELLING.get(key, key)


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k, "").strip()]
    if len(given) != 1:
        raise SourceOptionError(
            "exactly one of the options 'subscribe', 'subscribePattern', 'assign' is required"
            + (f", got {', '.join(_spelled(k) for k in given)}" if given else ""))
    kind = given[0]
    value = opts[kind].strip()
    if kind == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise SourceOptionError("option 'subscribe' names no topic")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(value)
        except re.error as exc:
            raise SourceOptionError(
                f"option 'subscribePattern' is not a valid regular expression: {exc}") from None
        return Subscription("subscribePattern", pattern=value)
    data = _json(value, "assign")
    if not isinstance(data, dict) or not data:
        raise SourceOptionError(
            'option \'assign\' must be a JSON object like {"topic": [0, 1]}, got ' + repr(value))
    pairs: list[TopicPartition] = []
    for topic, partitions in data.items():
        if not isinstance(partitions, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions):
            raise SourceOptionError(
                f"option 'assign': topic {topic!r} needs a list of partition numbers, "
                f"got {partitions!r}")
        pairs.extend((str(topic), p) for p in partitions)
    return Subscription("assign", assignment=tuple(dict.fromkeys(pairs)))


def _offset_spec(opts: Mapping[str, str], side: Literal["starting", "ending"],
                 default: Literal["earliest", "latest"],
                 subscription: Subscription | None) -> OffsetSpec:
    """Precedence as in Spark: ...Timestamp > ...OffsetsByTimestamp > ...Offsets."""
    timestamp_key = f"{side}timestamp"
    if opts.get(timestamp_key, "").strip():
        raw = opts[timestamp_key].strip()
        try:
            ms = int(raw)
        except ValueError:
            raise SourceOptionError(
                f"option {_spelled(timestamp_key)!r} must be milliseconds since the epoch, "
                f"got {raw!r}") from None
        if ms < 0:
            raise SourceOptionError(f"option {_spelled(timestamp_key)!r} must be >= 0, got {ms}")
        return OffsetSpec("timestamp", timestamp_ms=ms, option=_spelled(timestamp_key))
    by_time_key = f"{side}offsetsbytimestamp"
    if opts.get(by_time_key, "").strip():
        table = _partition_table(opts[by_time_key], _spelled(by_time_key), minimum=0)
        _check_covers(table, subscription, _spelled(by_time_key))
        return OffsetSpec("timestamps", per_partition=table, option=_spelled(by_time_key))
    key = f"{side}offsets"
    raw = opts.get(key, "").strip()
    name = _spelled(key)
    if not raw:
        return OffsetSpec(default, option=name)
    if raw.lower() in ("earliest", "latest"):
        return OffsetSpec("earliest" if raw.lower() == "earliest" else "latest", option=name)
    table = _partition_table(raw, name, minimum=EARLIEST)
    _check_covers(table, subscription, name)
    return OffsetSpec("offsets", per_partition=table, option=name)


def _partition_table(raw: str, name: str, *, minimum: int) -> dict[TopicPartition, int]:
    data = _json(raw, name)
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise SourceOptionError(
            f'option {name!r} must be earliest, latest or JSON like {{"topic": {{"0": 23}}}}, '
            f"got {raw!r}")
    table: dict[TopicPartition, int] = {}
    for topic, partitions in data.items():
        for partition, value in partitions.items():
            try:
                number = int(partition)
            except ValueError:
                number = -1
            if number < 0 or not isinstance(value, int) or isinstance(value, bool) or (
                    value < minimum):
                raise SourceOptionError(
                    f"option {name!r}: bad entry {topic!r}: {{{partition!r}: {value!r}}} "
                    f"(partition numbers >= 0, values >= {minimum})")
            table[(str(topic), number)] = value
    return table


def _check_covers(table: Mapping[TopicPartition, int], subscription: Subscription | None,
                  name: str) -> None:
    """Spark refuses per-partition JSON that names topics outside the subscription."""
    if subscription is None:
        return
    if subscription.kind == "assign":
        outside = sorted(set(table) - set(subscription.assignment))
    else:
        outside = sorted(tp for tp in table if not subscription.matches(tp[0]))
    if outside:
        listed = ", ".join(f"{t}-{p}" for t, p in outside)
        raise SourceOptionError(f"option {name!r} names partitions not subscribed: {listed}")


def _check_batch_bounds(starting: OffsetSpec, ending: OffsetSpec) -> None:
    if starting.kind == "latest" or (LATEST in starting.per_partition.values() and (
            starting.kind == "offsets")):
        raise SourceOptionError(
            "option 'startingOffsets' cannot be latest (-1) for a batch query: it would read "
            "nothing")
    if ending.kind == "earliest" or (EARLIEST in ending.per_partition.values() and (
            ending.kind == "offsets")):
        raise SourceOptionError(
            "option 'endingOffsets' cannot be earliest (-2) for a batch query")


def _json(raw: str, name: str) -> object:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SourceOptionError(f"option {name!r} is not valid JSON ({exc.msg}): {raw!r}") from None


def _boolean(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None or not raw.strip():
        return default
    lowered = raw.strip().lower()
    if lowered not in ("true", "false"):
        raise SourceOptionError(f"option {_spelled(key)!r} must be true or false, got {raw!r}")
    return lowered == "true"


def _positive(opts: Mapping[str, str], key: str) -> int | None:
    raw = opts.get(key)
    if raw is None or not raw.strip():
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise SourceOptionError(f"option {_spelled(key)!r} must be a positive integer, "
                                f"got {raw!r}")
    return value


_DURATION = re.compile(r"\s*(\d+)\s*(ms|s|m|min|h|d)?\s*", re.IGNORECASE)
_UNIT_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
            "d": 86_400_000}


def _duration_ms(raw: str | None, default: int) -> int:
    """``15m``, ``30s``, ``500ms``, ``2h`` or plain milliseconds."""
    if raw is None or not raw.strip():
        return default
    match = _DURATION.fullmatch(raw)
    if match is None:
        raise SourceOptionError(
            f"option 'maxTriggerDelay' must be a duration such as 30s, 15m or 500ms, "
            f"got {raw!r}")
    unit = match.group(2).lower() if match.group(2) else None
    return int(match.group(1)) * _UNIT_MS[unit]
