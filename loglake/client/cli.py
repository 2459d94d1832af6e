"""Client commands of ``loglake``: ``topics ...``, ``partitions elect``, ``groups ...`` (in
``groups_cli``), ``transactions list|describe`` (in ``transactions_cli``), ``produce``,
``consume`` (like Kafka's tools).

Growing and repairing topics, like ``kafka-topics --alter``, ``kafka-delete-records`` and
``kafka-leader-election``::

    loglake topics alter TOPIC --partitions N [--replica-assignment 1:2,2:3]
    loglake topics delete-records TOPIC --offset O [--partition P ...]
    loglake partitions elect --type preferred|unclean [--topic T [--partition P ...]]
    loglake partitions reassign (--generate --brokers 1,2,4 | --plan FILE) [--execute]
                                [--throttle BYTES_PER_S]   (also --verify, --cancel, --list)

``delete-records`` takes the offset on the command line instead of Kafka's JSON file: every
named partition (default: all of the topic's) loses its records below ``O`` (``-1``: below the
high watermark, i.e. all records so far); it prints each partition's new low watermark.
``partitions elect`` without ``--topic`` considers every partition of the cluster (as
``--all-topic-partitions`` does) and exits 1 when an election failed for a reason other than
"not needed".

Every command takes ``--bootstrap-server HOST:PORT`` (optional: ``$LOGLAKE_BOOTSTRAP_SERVERS``,
else the cluster of the last ``loglake dev up``, else an error saying so; see
:mod:`loglake.addresses`), ``--command-config FILE`` (client properties as for Kafka's tools:
``security.protocol``, ``sasl.*``, ``ssl.*``; default ``$LOGLAKE_COMMAND_CONFIG``, else the
file of a secured ``loglake dev up`` when the brokers come from its profile; see
:mod:`loglake.client.security`) and ``--request-timeout-ms`` (default 10000), which bounds each
request to the cluster, so an unreachable cluster yields one ``loglake: error: ...`` line and
exit status 1 instead of a hang.
Handlers return an exit status; errors are raised as :class:`loglake.errors.LoglakeError` (or
``ValueError`` for bad arguments) and printed by ``loglake.cli.main``.

Output: data goes to stdout (topic names, descriptions, consumed records), summaries and
diagnostics to stderr, so ``loglake consume ... > file`` captures only records.

``consume --format json`` writes one object per record::

    {"topic": "t", "partition": 0, "offset": 5, "timestamp": 1700000000000,
     "key": "k", "value": "v", "headers": [{"key": "h", "value": "x"}]}

``key``, ``value`` and header values are UTF-8 text when they decode, otherwise base64 with a
sibling flag set (``"key_base64": true``, ``"value_base64": true``, per header
``"value_base64": true``); ``null`` stays ``null``.

``consume --group G`` joins group G instead of assigning partitions: it continues at the group's
committed offsets (new partitions start at the log end, or the log start with
``--from-beginning``) and commits what it printed: after flushing stdout, at most once a second
and once more on exit (also on Ctrl-C), so a record is committed only once it was written out.
The idle ``--timeout-ms`` counts from the moment the group assigned partitions.

``consume --isolation-level read_committed|read_uncommitted`` (default ``read_committed``, as
librdkafka and kafka-console-consumer): print only records of committed transactions (stopping
at an open transaction's first record until it ends), or every record, aborted ones included.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from kio.schema.errors import ErrorCode

from loglake import addresses
from loglake.client import (
    acls_cli,
    groups_cli,
    quotas_cli,
    reassign_cli,
    security,
    transactions_cli,
)
from loglake.client.admin import Admin
from loglake.client.consumer import Consumer
from loglake.client.errors import BrokerError, ClientError
from loglake.client.model import (
    ACKS_VALUES,
    COMPRESSION_VALUES,
    ISOLATION_LEVELS,
    Record,
    RecordMetadata,
    TopicInfo,
)
from loglake.client.producer import Producer
from loglake.errors import LoglakeError

DEFAULT_REQUEST_TIMEOUT_MS = 10_000
DEFAULT_IDLE_TIMEOUT_MS = 5_000
DEFAULT_DELIVERY_TIMEOUT_MS = 30_000
GROUP_COMMIT_INTERVAL_S = 1.0
GROUP_SESSION_TIMEOUT_MS = 10_000
MAX_REPORTED_FAILURES = 5


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``topics``, ``partitions``, ``groups``, ``transactions``, ``produce`` and
    ``consume`` to the ``loglake`` command."""
    common = argparse.ArgumentParser(add_help=False)
    addresses.add_bootstrap_option(common)
    security.add_command_config_option(common)
    common.add_argument(
        "--request-timeout-ms", type=_positive_int, default=DEFAULT_REQUEST_TIMEOUT_MS,
        metavar="MS", help="give up on a request to the cluster after this long "
        f"(default {DEFAULT_REQUEST_TIMEOUT_MS})",
    )
    _register_topics(subparsers, common)
    _register_partitions(subparsers, common)
    groups_cli.register(subparsers, common)
    transactions_cli.register(subparsers, common)
    acls_cli.register(subparsers, common)
    quotas_cli.register(subparsers, common)
    _register_produce(subparsers, common)
    _register_consume(subparsers, common)


# -- topics ----------------------------------------------------------------------------------


def _register_topics(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
) -> None:
    topics = subparsers.add_parser("topics", help="create, list, describe, alter, delete topics")
    commands = topics.add_subparsers(dest="topics_command", required=True)

    create = commands.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("topic")
    create.add_argument("--partitions", type=_positive_int, default=1)
    create.add_argument("--replication-factor", type=_positive_int, default=1)
    create.add_argument("--config", type=_key_value, action="extend", nargs="+", default=[],
                        metavar="KEY=VALUE", help="topic configuration override")
    create.add_argument("--if-not-exists", action="store_true",
                        help="succeed if the topic already exists")
    create.set_defaults(handler=topics_create)

    listing = commands.add_parser("list", parents=[common], help="list topic names")
    listing.set_defaults(handler=topics_list)

    describe = commands.add_parser(
        "describe", parents=[common],
        help="partitions (leader, replicas, isr) and non-default configs",
    )
    describe.add_argument("topic", nargs="?", help="one topic (default: all)")
    describe.set_defaults(handler=topics_describe)

    delete = commands.add_parser("delete", parents=[common], help="delete a topic")
    delete.add_argument("topic")
    delete.add_argument("--if-exists", action="store_true",
                        help="succeed if the topic does not exist")
    delete.set_defaults(handler=topics_delete)

    alter = commands.add_parser("alter-config", parents=[common],
                                help="set or delete topic configuration keys")
    alter.add_argument("topic")
    alter.add_argument("--set", type=_key_value, action="extend", nargs="+", default=[],
                       metavar="KEY=VALUE", dest="set_configs")
    alter.add_argument("--delete", action="extend", nargs="+", default=[], metavar="KEY",
                       dest="delete_configs", help="revert a key to its default")
    alter.set_defaults(handler=topics_alter_config)

    grow = commands.add_parser("alter", parents=[common],
                               help="add partitions to a topic (never removes any)")
    grow.add_argument("topic")
    grow.add_argument("--partitions", type=_positive_int, required=True, metavar="N",
                      help="the new total number of partitions")
    grow.add_argument("--replica-assignment", type=_replica_assignment, metavar="ASSIGNMENT",
                      help="broker ids of the NEW partitions: ':' between replicas, ',' "
                      "between partitions (e.g. 1:2,2:3); default: spread like at creation")
    grow.add_argument("--validate-only", action="store_true",
                      help="check the request without changing the topic")
    grow.set_defaults(handler=topics_alter)

    deletion = commands.add_parser(
        "delete-records", parents=[common],
        help="delete the records below an offset (they are gone for consumers and SQL)")
    deletion.add_argument("topic")
    deletion.add_argument("--offset", type=_delete_offset, required=True, metavar="O",
                          help="delete records below O; -1: below the high watermark "
                          "(everything so far)")
    deletion.add_argument("--partition", type=_non_negative_int, action="append",
                          metavar="P", help="only partition P (repeatable; default all)")
    deletion.set_defaults(handler=topics_delete_records)


def _register_partitions(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
) -> None:
    partitions = subparsers.add_parser("partitions",
                                       help="leader elections, replica reassignment")
    commands = partitions.add_subparsers(dest="partitions_command", required=True)
    elect = commands.add_parser(
        "elect", parents=[common],
        help="elect preferred leaders, or (unclean) any live replica of leaderless partitions")
    elect.add_argument("--type", choices=("preferred", "unclean"), required=True,
                       dest="election_type")
    elect.add_argument("--topic", help="only this topic (default: every partition)")
    elect.add_argument("--partition", type=_non_negative_int, action="append", metavar="P",
                       help="only partition P of --topic (repeatable; default all)")
    elect.set_defaults(handler=partitions_elect)
    reassign_cli.register(commands, common, _admin)


def bootstrap(args: argparse.Namespace) -> str:
    """The brokers to contact: ``--bootstrap-server``, else the environment or profile."""
    return addresses.bootstrap_servers(args.bootstrap_server)


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(bootstrap(args), timeout=args.request_timeout_ms / 1000,
                 security=security.from_args(args))


def topics_create(args: argparse.Namespace) -> int:
    """``loglake topics create TOPIC``."""
    with _admin(args) as admin:
        try:
            admin.create_topic(
                args.topic,
                partitions=args.partitions,
                replication_factor=args.replication_factor,
                config=dict(args.config),
            )
        except BrokerError as exc:
            if not (args.if_not_exists and exc.code == ErrorCode.topic_already_exists):
                raise
            return 0
    print(f"Created topic {args.topic}.")
    return 0


def topics_list(args: argparse.Namespace) -> int:
    """``loglake topics list``: one topic name per line, sorted."""
    with _admin(args) as admin:
        for name in admin.list_topics():
            print(name)
    return 0


def topics_describe(args: argparse.Namespace) -> int:
    """``loglake topics describe [TOPIC]`` in the layout of ``kafka-topics --describe``."""
    with _admin(args) as admin:
        if args.topic is not None:
            topics = [admin.describe_topic(args.topic)]
        else:
            topics = list(admin.list_topics().values())
        for topic in topics:
            configs = admin.describe_config(topic.name)
            overrides = {
                name: entry.value
                for name, entry in configs.items()
                if entry.source == "dynamic_topic_config" and not entry.is_default
            }
            print(describe_lines(topic, overrides))
    return 0


def describe_lines(topic: TopicInfo, overrides: dict[str, str | None]) -> str:
    """The text block ``topics describe`` prints for one topic."""
    configs = ",".join(f"{k}={'' if v is None else v}" for k, v in sorted(overrides.items()))
    lines = [
        f"Topic: {topic.name}\tPartitionCount: {len(topic.partitions)}\t"
        f"ReplicationFactor: {topic.replication_factor}\tConfigs: {configs}"
    ]
    for partition in topic.partitions:
        leader = str(partition.leader) if partition.leader >= 0 else "none"
        lines.append(
            f"\tTopic: {topic.name}\tPartition: {partition.partition}\tLeader: {leader}\t"
            f"Replicas: {_ids(partition.replicas)}\tIsr: {_ids(partition.isr)}"
        )
    return "\n".join(lines)


def topics_delete(args: argparse.Namespace) -> int:
    """``loglake topics delete TOPIC``."""
    with _admin(args) as admin:
        try:
            admin.delete_topic(args.topic)
        except BrokerError as exc:
            if not (args.if_exists and exc.code == ErrorCode.unknown_topic_or_partition):
                raise
            return 0
    print(f"Deleted topic {args.topic}.")
    return 0


def topics_alter_config(args: argparse.Namespace) -> int:
    """``loglake topics alter-config TOPIC --set k=v ... --delete k ...``."""
    if not args.set_configs and not args.delete_configs:
        raise ValueError("alter-config needs --set KEY=VALUE and/or --delete KEY")
    with _admin(args) as admin:
        admin.alter_config(
            args.topic, set=dict(args.set_configs), delete=list(args.delete_configs)
        )
    print(f"Altered configs of topic {args.topic}.")
    return 0


def topics_alter(args: argparse.Namespace) -> int:
    """``loglake topics alter TOPIC --partitions N``."""
    with _admin(args) as admin:
        admin.create_partitions(args.topic, args.partitions,
                                assignments=args.replica_assignment,
                                validate_only=args.validate_only)
    if args.validate_only:
        print(f"Topic {args.topic} can have {args.partitions} partitions (validated only).")
    else:
        print(f"Topic {args.topic} has {args.partitions} partitions now.")
    return 0


def topics_delete_records(args: argparse.Namespace) -> int:
    """``loglake topics delete-records TOPIC --offset O [--partition P ...]``."""
    with _admin(args) as admin:
        partitions = args.partition or [
            p.partition for p in admin.describe_topic(args.topic).partitions]
        low = admin.delete_records(args.topic, dict.fromkeys(partitions, args.offset))
    for partition, watermark in low.items():
        print(f"Topic: {args.topic}\tPartition: {partition}\tLow watermark: {watermark}")
    return 0


def partitions_elect(args: argparse.Namespace) -> int:
    """``loglake partitions elect --type preferred|unclean [--topic T [--partition P ...]]``
    (output like ``kafka-leader-election``)."""
    if args.partition and args.topic is None:
        raise ValueError("--partition needs --topic")
    kind = args.election_type.upper()
    with _admin(args) as admin:
        wanted = None
        if args.topic is not None:
            numbers = args.partition or [
                p.partition for p in admin.describe_topic(args.topic).partitions]
            wanted = [(args.topic, p) for p in numbers]
        results = admin.elect_leaders(args.election_type, wanted)
    elected = [f"{t}-{p}" for (t, p), error in results.items() if error is None]
    not_needed = [f"{t}-{p}" for (t, p), error in results.items() if error is not None
                  and error.code == ErrorCode.election_not_needed]
    failed = {f"{t}-{p}": error for (t, p), error in results.items() if error is not None
              and error.code != ErrorCode.election_not_needed}
    if elected:
        print(f"Successfully completed leader election ({kind}) for partitions "
              f"{', '.join(elected)}")
    if not_needed:
        print(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    if not elected and not not_needed and not failed:
        print(f"No partition needed a leader election ({kind}).")
    for name, error in failed.items():
        print(f"Error completing leader election ({kind}) for partition: {name}: {error}",
              file=sys.stderr)
    return 1 if failed else 0


# -- produce ---------------------------------------------------------------------------------


def _register_produce(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
) -> None:
    produce = subparsers.add_parser(
        "produce", parents=[common],
        help="send stdin lines as records",
        description="Send each line of stdin as one record (the newline is not included).",
    )
    produce.add_argument("topic")
    produce.add_argument("--key-separator", metavar="SEP",
                         help="split each line into key and value at the first SEP")
    produce.add_argument("--acks", choices=ACKS_VALUES, default="all")
    produce.add_argument("--compression", choices=COMPRESSION_VALUES, default="none")
    produce.add_argument("--partition", type=_non_negative_int,
                         help="send every record to this partition (default: by key)")
    produce.add_argument("--header", type=_key_value, action="append", default=[],
                         metavar="KEY=VALUE", help="add this header to every record")
    produce.add_argument("--delivery-timeout-ms", type=_positive_int,
                         default=DEFAULT_DELIVERY_TIMEOUT_MS, metavar="MS",
                         help="fail a record not acknowledged within this long")
    produce.set_defaults(handler=produce_command)


def produce_command(args: argparse.Namespace) -> int:
    """``loglake produce TOPIC``: stdin lines → records; a one-line summary on stderr."""
    separator: bytes | None = (
        None if args.key_separator is None else args.key_separator.encode("utf-8")
    )
    if separator == b"":
        raise ValueError("--key-separator must not be empty")
    headers = [(key, value.encode("utf-8")) for key, value in args.header]
    producer = Producer(
        bootstrap(args),
        security=security.from_args(args),
        acks=args.acks,
        compression=args.compression,
        delivery_timeout_ms=args.delivery_timeout_ms,
    )
    # Fail fast (and without sending anything) on an unknown topic or unreachable cluster.
    partitions = producer.partitions_for(args.topic, timeout=args.request_timeout_ms / 1000)
    if args.partition is not None and args.partition not in partitions:
        raise BrokerError(
            f"topic {args.topic!r} has no partition {args.partition}"
            f" (partitions: 0..{len(partitions) - 1})",
            code=ErrorCode.unknown_topic_or_partition,
        )
    bad_lines: list[str] = []
    failed_deliveries: list[str] = []
    sent = 0

    def on_delivery(_: RecordMetadata | None, error: LoglakeError | None) -> None:
        if error is not None:
            failed_deliveries.append(str(error))

    for line in _read_lines(sys.stdin.buffer, separator):
        if line.value is None:
            bad_lines.append(f"line {line.number}: no key separator {args.key_separator!r}")
            continue
        producer.send(
            args.topic, line.value, key=line.key, headers=headers, partition=args.partition,
            on_delivery=on_delivery,
        )
        sent += 1
    producer.flush()
    failures = bad_lines + failed_deliveries
    for failure in failures[:MAX_REPORTED_FAILURES]:
        print(f"loglake: error: {failure}", file=sys.stderr)
    if len(failures) > MAX_REPORTED_FAILURES:
        print(f"loglake: error: ... and {len(failures) - MAX_REPORTED_FAILURES} more",
              file=sys.stderr)
    print(
        f"loglake: produced {sent - len(failed_deliveries)} records to {args.topic}, "
        f"{len(failures)} errors",
        file=sys.stderr,
    )
    return 1 if failures else 0


@dataclass(frozen=True)
class _InputLine:
    """One stdin line split into key and value; ``value`` is ``None`` if SEP was missing."""

    number: int
    key: bytes | None
    value: bytes | None


def _read_lines(stream: IO[bytes], separator: bytes | None) -> Iterator[_InputLine]:
    """Lines of ``stream`` without their line ending (LF or CRLF), split at ``separator``."""
    for number, raw in enumerate(stream, start=1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        if separator is None:
            yield _InputLine(number, None, line)
            continue
        key, found, value = line.partition(separator)
        yield _InputLine(number, key, value) if found else _InputLine(number, None, None)


# -- consume ---------------------------------------------------------------------------------


def _register_consume(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
) -> None:
    consume = subparsers.add_parser(
        "consume", parents=[common],
        help="print records of a topic",
        description="Print records of a topic, one per line. Without --from-beginning or "
        "--offset, only records produced from now on are printed (like kafka-console-consumer).",
    )
    consume.add_argument("topic")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest offset")
    start.add_argument("--offset", type=_non_negative_int, metavar="N",
                       help="start at offset N (of every selected partition)")
    consume.add_argument("--partition", type=_non_negative_int, action="append",
                         metavar="N", help="read only partition N (repeatable; default all)")
    consume.add_argument("--max-messages", type=_non_negative_int, metavar="N",
                         help="exit after N records")
    idle = consume.add_mutually_exclusive_group()
    idle.add_argument("--timeout-ms", type=_positive_int, default=DEFAULT_IDLE_TIMEOUT_MS,
                      metavar="MS", help="exit when no record arrived for this long "
                      f"(default {DEFAULT_IDLE_TIMEOUT_MS})")
    idle.add_argument("--follow", action="store_true",
                      help="never exit for lack of records (stop with Ctrl-C)")
    consume.add_argument("--format", choices=("text", "json"), default="text")
    consume.add_argument("--print-key", action="store_true",
                         help="text format: print KEY<TAB>VALUE")
    consume.add_argument("--group", metavar="GROUP",
                         help="consume as a member of consumer group GROUP, continuing at its "
                         "committed offsets and committing what was printed")
    consume.add_argument("--isolation-level", choices=ISOLATION_LEVELS,
                         default="read_committed",
                         help="read_committed (default): only records of committed "
                         "transactions; read_uncommitted: every record, aborted ones included")
    consume.set_defaults(handler=consume_command)


def consume_command(args: argparse.Namespace) -> int:
    """``loglake consume TOPIC``: records to stdout, a count to stderr."""
    if args.group is not None:
        return _consume_group(args)
    start: Any = "latest"
    if args.from_beginning:
        start = "earliest"
    elif args.offset is not None:
        start = args.offset
    out = sys.stdout.buffer
    count = 0
    with Consumer(
        bootstrap(args),
        security=security.from_args(args),
        request_timeout_s=args.request_timeout_ms / 1000,
        isolation_level=args.isolation_level,
        fetch_max_wait_ms=100,
    ) as consumer:
        consumer.assign(args.topic, args.partition, start=start)
        timeout = None if args.follow else args.timeout_ms / 1000
        try:
            for record in consumer.consume(args.max_messages, timeout=timeout):
                out.write(format_record(record, args.format, print_key=args.print_key))
                count += 1
                if args.follow:
                    out.flush()
            out.flush()
        except BrokenPipeError:
            _silence_stdout()
            return 0
    print(f"loglake: consumed {count} records", file=sys.stderr)
    if count == 0 and isinstance(consumer.last_error, ClientError):
        raise consumer.last_error  # e.g. the cluster went away after the assignment
    return 0


def _consume_group(args: argparse.Namespace) -> int:
    """``loglake consume TOPIC --group G``: subscribe, print, commit what was printed."""
    if args.offset is not None or args.partition:
        raise ValueError("--group cannot be combined with --offset or --partition "
                         "(the group assigns partitions; use 'loglake groups reset-offsets')")
    out = sys.stdout.buffer
    count = 0
    assigned_at: list[float] = []
    with Consumer(
        bootstrap(args),
        security=security.from_args(args),
        group_id=args.group,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        session_timeout_ms=GROUP_SESSION_TIMEOUT_MS,
        request_timeout_s=args.request_timeout_ms / 1000,
        isolation_level=args.isolation_level,
        fetch_max_wait_ms=100,
    ) as consumer:
        consumer.partitions_for(args.topic)  # fail fast: unknown topic or unreachable cluster

        def flush_and_commit(*, asynchronous: bool) -> None:
            out.flush()
            consumer.commit(asynchronous=asynchronous)

        def on_revoke(_: list[tuple[str, int]]) -> None:
            try:
                flush_and_commit(asynchronous=False)
            except LoglakeError as exc:  # the partitions move on; their next owner re-reads
                print(f"loglake: warning: {exc}", file=sys.stderr)

        consumer.subscribe(
            [args.topic], on_assign=lambda _: assigned_at.append(time.monotonic()),
            on_revoke=on_revoke,
        )
        idle_s = None if args.follow else args.timeout_ms / 1000
        join_wait_s = args.request_timeout_ms / 1000 + 10
        started = last_record = last_commit = time.monotonic()
        try:
            while args.max_messages is None or count < args.max_messages:
                now = time.monotonic()
                if not assigned_at:
                    if now - started > join_wait_s:
                        raise ClientError(
                            f"consume as group {args.group!r}: no partition of "
                            f"{args.topic!r} was assigned within {join_wait_s:g} s",
                            code=ErrorCode.request_timed_out,
                            hint="the group may have more members than the topic has "
                            "partitions, or no coordinator is reachable")
                elif idle_s is not None and now - max(last_record, assigned_at[0]) >= idle_s:
                    break
                record = consumer.poll(0.2)
                if record is not None:
                    out.write(format_record(record, args.format, print_key=args.print_key))
                    count += 1
                    last_record = time.monotonic()
                if time.monotonic() - last_commit >= GROUP_COMMIT_INTERVAL_S:
                    flush_and_commit(asynchronous=True)
                    last_commit = time.monotonic()
        except BrokenPipeError:
            _silence_stdout()  # the reader is gone: what is still buffered was not printed
            return 0
        except KeyboardInterrupt:
            flush_and_commit(asynchronous=False)
            raise
        flush_and_commit(asynchronous=False)
    print(f"loglake: consumed {count} records", file=sys.stderr)
    return 0


def format_record(record: Record, style: str, *, print_key: bool = False) -> bytes:
    """One output line (with newline) for ``record`` in ``text`` or ``json`` style."""
    if style == "json":
        obj: dict[str, Any] = {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp_ms,
        }
        _put_bytes(obj, "key", record.key)
        _put_bytes(obj, "value", record.value)
        headers = []
        for name, value in record.headers:
            header: dict[str, Any] = {"key": name}
            _put_bytes(header, "value", value)
            headers.append(header)
        obj["headers"] = headers
        return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"
    value = b"null" if record.value is None else record.value
    if print_key:
        key = b"null" if record.key is None else record.key
        return key + b"\t" + value + b"\n"
    return value + b"\n"


def _put_bytes(obj: dict[str, Any], field: str, data: bytes | None) -> None:
    if data is None:
        obj[field] = None
        return
    try:
        obj[field] = data.decode("utf-8")
    except UnicodeDecodeError:
        obj[field] = base64.b64encode(data).decode("ascii")
        obj[f"{field}_base64"] = True


def _silence_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so interpreter shutdown does not fail flushing."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


# -- argument types --------------------------------------------------------------------------


def _ids(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in ids)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _replica_assignment(text: str) -> list[list[int]]:
    """``1:2,2:3`` -> ``[[1, 2], [2, 3]]`` (kafka-topics' ``--replica-assignment`` form)."""
    try:
        result = [[int(b) for b in part.split(":")] for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected broker ids like 1:2,2:3 (':' between replicas, ',' between "
            f"partitions), got {text!r}") from None
    return result


def _delete_offset(text: str) -> int:
    number = int(text)
    if number < -1:
        raise argparse.ArgumentTypeError(f"expected an offset >= 0, or -1, got {text!r}")
    return number


def _positive_int(text: str) -> int:
    number = int(text)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return number


def _non_negative_int(text: str) -> int:
    number = int(text)
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return number
