"""``loglake groups ...``: list, describe, reset offsets of and delete consumer groups.

Like Kafka's ``kafka-consumer-groups``:

* ``groups list [--state]`` — one group id per line (with ``--state``: id and state).
* ``groups describe GROUP [--format text|json]`` — state, assignor, coordinator, members (member
  id, client id, host, static instance id, assigned partitions) and per partition the committed
  offset, log end offset and lag (``-`` where nothing is committed), for every partition of each
  topic the group has committed offsets for or has assigned.
* ``groups reset-offsets GROUP --topic T [--partition N ...] (--to-earliest | --to-latest |
  --to-offset N | --to-datetime ISO8601) [--dry-run]`` — only while the group has no members
  (anything else is refused with one error line, as the offsets would be overwritten by the
  members' next commit). ``--to-offset`` is clamped into ``[log start, log end]`` like Kafka does;
  ``--to-datetime`` picks the first offset with a timestamp at or after the instant (the log end
  when every record is older); a time without a zone is local time.
* ``groups delete GROUP`` — an empty group and its committed offsets.

Output goes to stdout; errors are one ``loglake: error: ...`` line and exit status 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from loglake import addresses
from loglake.client import security
from loglake.client.admin import Admin
from loglake.client.errors import BrokerError
from loglake.client.model import GroupDescription, TopicPartitionKey


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
) -> None:
    """Add ``groups`` with its sub-commands; ``common`` carries the connection options."""
    groups = subparsers.add_parser("groups", help="list, describe, reset offsets of, delete "
                                   "consumer groups")
    commands = groups.add_subparsers(dest="groups_command", required=True)

    listing = commands.add_parser("list", parents=[common], help="list consumer group ids")
    listing.add_argument("--state", action="store_true", help="also print each group's state")
    listing.set_defaults(handler=groups_list)

    describe = commands.add_parser(
        "describe", parents=[common],
        help="members, assignment, committed offsets, log end offsets and lag",
    )
    describe.add_argument("group")
    describe.add_argument("--format", choices=("text", "json"), default="text")
    describe.set_defaults(handler=groups_describe)

    reset = commands.add_parser(
        "reset-offsets", parents=[common],
        help="set the committed offsets of an empty group",
    )
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    reset.add_argument("--partition", type=_non_negative_int, action="append", metavar="N",
                       help="only partition N (repeatable; default all)")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the log end offset")
    target.add_argument("--to-offset", type=_non_negative_int, metavar="N",
                        help="offset N (clamped into the partition's range)")
    target.add_argument("--to-datetime", type=_timestamp_ms, metavar="ISO8601",
                        help="the first offset at or after this time, e.g. "
                        "2024-05-01T12:00:00Z (no zone: local time)")
    reset.add_argument("--dry-run", action="store_true",
                       help="print the new offsets without changing anything")
    reset.set_defaults(handler=groups_reset_offsets)

    delete = commands.add_parser("delete", parents=[common],
                                 help="delete an empty group and its offsets")
    delete.add_argument("group")
    delete.set_defaults(handler=groups_delete)


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(addresses.bootstrap_servers(args.bootstrap_server),
                 timeout=args.request_timeout_ms / 1000, security=security.from_args(args))


def groups_list(args: argparse.Namespace) -> int:
    """``loglake groups list``."""
    with _admin(args) as admin:
        for group in admin.list_groups():
            print(f"{group.group_id}\t{group.state}" if args.state else group.group_id)
    return 0


def groups_describe(args: argparse.Namespace) -> int:
    """``loglake groups describe GROUP``."""
    with _admin(args) as admin:
        group = admin.describe_group(args.group)
        committed = admin.group_offsets(args.group)
        if group.state == "Dead" and not group.members and not committed:
            raise BrokerError(f"consumer group {args.group!r} does not exist",
                              code=ErrorCode.group_id_not_found,
                              hint="list groups with 'loglake groups list'")
        owners = {tp: m.member_id for m in group.members for tp in m.assignment}
        topics = sorted({t for t, _ in committed} | {t for t, _ in owners})
        rows = []
        for topic in topics:
            ends = admin.list_offsets(topic, "latest")
            for partition, end in ends.items():
                key = (topic, partition)
                offset = committed.get(key)
                rows.append({
                    "topic": topic, "partition": partition, "committed_offset": offset,
                    "log_end_offset": end,
                    "lag": None if offset is None else max(end - offset, 0),
                    "member_id": owners.get(key),
                })
    if args.format == "json":
        print(json.dumps(_describe_json(group, rows), indent=2))
    else:
        print(describe_text(group, rows))
    return 0


def _describe_json(group: GroupDescription, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "group": group.group_id, "state": group.state, "assignor": group.assignor,
        "coordinator": group.coordinator,
        "members": [{
            "member_id": m.member_id, "client_id": m.client_id, "host": m.host,
            "group_instance_id": m.group_instance_id,
            "assignment": [{"topic": t, "partition": p} for t, p in m.assignment],
        } for m in group.members],
        "partitions": rows,
    }


def describe_text(group: GroupDescription, rows: list[dict[str, Any]]) -> str:
    """The text ``groups describe`` prints: a summary line, a member table, a partition table."""
    lines = [f"Group: {group.group_id}\tState: {group.state}\tAssignor: {group.assignor or '-'}"
             f"\tCoordinator: {group.coordinator}\tMembers: {len(group.members)}", ""]
    members = [["MEMBER-ID", "CLIENT-ID", "HOST", "INSTANCE-ID", "ASSIGNMENT"]]
    for m in group.members:
        members.append([m.member_id, m.client_id, m.host, m.group_instance_id or "-",
                        _assignment_text(m.assignment)])
    lines += _table(members) if group.members else ["(no active members)"]
    lines.append("")
    partitions = [["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER-ID"]]
    for row in rows:
        partitions.append([row["topic"], str(row["partition"]), _dash(row["committed_offset"]),
                           str(row["log_end_offset"]), _dash(row["lag"]),
                           row["member_id"] or "-"])
    lines += _table(partitions)
    return "\n".join(lines)


def groups_reset_offsets(args: argparse.Namespace) -> int:
    """``loglake groups reset-offsets GROUP --topic T ...``."""
    with _admin(args) as admin:
        group = admin.describe_group(args.group)
        if group.members:
            raise BrokerError(
                f"cannot reset offsets of group {args.group!r}: it has {len(group.members)} "
                f"active member(s) (state {group.state}); stop its consumers first",
                code=ErrorCode.non_empty_group,
            )
        topic = admin.describe_topic(args.topic)
        existing = [p.partition for p in topic.partitions]
        chosen = existing if args.partition is None else sorted(set(args.partition))
        missing = [p for p in chosen if p not in existing]
        if missing:
            raise BrokerError(
                f"topic {args.topic!r} has no partition {', '.join(map(str, missing))}"
                f" (partitions: 0..{len(existing) - 1})",
                code=ErrorCode.unknown_topic_or_partition,
            )
        new = _targets(admin, args, chosen)
        if not args.dry_run:
            admin.alter_group_offsets(args.group, new)
    table = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    table += [[args.group, t, str(p), str(o)] for (t, p), o in sorted(new.items())]
    print("\n".join(_table(table)))
    if args.dry_run:
        print("loglake: dry run, nothing changed", file=sys.stderr)
    return 0


def _targets(admin: Admin, args: argparse.Namespace,
             partitions: Sequence[int]) -> dict[TopicPartitionKey, int]:
    topic = args.topic
    if args.to_earliest:
        found = admin.list_offsets(topic, "earliest", partitions=partitions)
    elif args.to_latest:
        found = admin.list_offsets(topic, "latest", partitions=partitions)
    elif args.to_datetime is not None:
        found = admin.list_offsets(topic, args.to_datetime, partitions=partitions)
    else:
        starts = admin.list_offsets(topic, "earliest", partitions=partitions)
        ends = admin.list_offsets(topic, "latest", partitions=partitions)
        found = {p: min(max(args.to_offset, starts[p]), ends[p]) for p in partitions}
    return {(topic, p): o for p, o in found.items()}


def groups_delete(args: argparse.Namespace) -> int:
    """``loglake groups delete GROUP``."""
    with _admin(args) as admin:
        admin.delete_group(args.group)
    print(f"Deleted group {args.group}.")
    return 0


# -- formatting and argument types -------------------------------------------------------------


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows]


def _assignment_text(assignment: Sequence[TopicPartitionKey]) -> str:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(partition)
    return " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in sorted(by_topic.items())) or "-"


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _timestamp_ms(text: str) -> int:
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time such as 2024-05-01T12:00:00Z, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, like kafka-consumer-groups
    return max(int(moment.timestamp() * 1000), 0)


def _non_negative_int(text: str) -> int:
    number = int(text)
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return number
