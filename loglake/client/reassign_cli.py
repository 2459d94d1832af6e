"""``loglake partitions reassign``: move partition replicas between brokers, like Kafka's
``kafka-reassign-partitions`` (same JSON plan format, same throttles, similar output).

One action per run::

    loglake partitions reassign --generate --brokers 1,2,4 [--topics a,b] [--execute]
                                [--throttle BYTES_PER_S]
    loglake partitions reassign --plan FILE --execute [--throttle BYTES_PER_S]
    loglake partitions reassign --plan FILE --verify [--preserve-throttles]
    loglake partitions reassign --plan FILE --cancel [--preserve-throttles]
    loglake partitions reassign --list

* ``--generate`` prints the current assignment of the topics (default: every topic) and a
  proposed one spreading them over ``--brokers`` (each topic keeps its partition count and
  replication factor); with ``--execute`` it also starts the proposal. ``--plan -`` reads
  the plan from stdin.
* ``--execute`` first prints the current assignment of the plan's partitions (save it to roll
  back), sets the throttle when asked, then starts the reassignment and returns; the cluster
  moves the data in the background. ``--throttle`` (bytes per second) sets
  ``leader/follower.replication.throttled.rate`` on every broker that holds or receives a
  moving replica and ``leader/follower.replication.throttled.replicas`` on the moving topics,
  as Kafka's tool does; only replicas outside the ISR are held back.
* ``--verify`` reports each partition (completed, still in progress, or neither: the replica
  set differs from the plan) and, once none is in progress, removes the throttles (the two
  rates on every broker, the two replica lists on the plan's topics) unless
  ``--preserve-throttles``. Run it until it says so, as with Kafka.
* ``--cancel`` cancels the plan's partitions that are still moving (back to their original
  replicas) and removes the throttles likewise.
* ``--list`` prints the reassignments in progress.

Exit status 1 when the cluster refused a partition (its reason on stderr), else 0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from loglake.client.admin import Admin
from loglake.client.reassignment import (
    FOLLOWER_THROTTLED_RATE,
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_RATE,
    LEADER_THROTTLED_REPLICAS,
    Assignment,
    describe_ongoing,
    format_plan,
    parse_plan,
    propose,
    throttled_brokers,
    throttled_replicas,
)
from loglake.errors import LoglakeError


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser],
             common: argparse.ArgumentParser,
             admin_of: Callable[[argparse.Namespace], Admin]) -> None:
    """Add ``reassign`` under ``loglake partitions``."""
    reassign = commands.add_parser(
        "reassign", parents=[common],
        help="move replicas between brokers (like kafka-reassign-partitions)")
    actions = reassign.add_mutually_exclusive_group()
    actions.add_argument("--generate", action="store_true",
                         help="print the current and a proposed assignment over --brokers")
    actions.add_argument("--verify", action="store_true",
                         help="report the plan's progress; remove throttles once complete")
    actions.add_argument("--cancel", action="store_true",
                         help="cancel the plan's reassignments still in progress")
    actions.add_argument("--list", action="store_true",
                         help="list the reassignments in progress")
    reassign.add_argument("--execute", action="store_true",
                          help="start the plan (--plan) or the proposal (--generate)")
    reassign.add_argument("--plan", metavar="FILE",
                          help="a plan in Kafka's JSON format ('-': standard input)")
    reassign.add_argument("--brokers", type=_broker_ids, metavar="1,2,4",
                          help="brokers to spread the topics over (--generate)")
    reassign.add_argument("--topics", type=_names, action="extend", metavar="A,B",
                          help="topics to move (--generate; default: every topic)")
    reassign.add_argument("--throttle", type=_rate, metavar="BYTES_PER_S",
                          help="replication throttle while the replicas move (--execute)")
    reassign.add_argument("--preserve-throttles", action="store_true",
                          help="keep the throttles (--verify, --cancel)")
    reassign.set_defaults(handler=lambda args: reassign_command(args, admin_of(args)))


def reassign_command(args: argparse.Namespace, admin: Admin) -> int:
    """Dispatch to the action (see the module docstring)."""
    if not (args.generate or args.verify or args.cancel or args.list or args.execute):
        raise ValueError("one of --generate, --execute, --verify, --cancel or --list is needed")
    if args.execute and (args.verify or args.cancel or args.list):
        raise ValueError("--execute goes with --plan or --generate only")
    with admin:
        if args.list:
            return _list(admin)
        if args.generate:
            if args.plan is not None:
                raise ValueError("--generate takes --brokers and --topics, not --plan")
            proposal = _generate(admin, args)
            return _execute(admin, proposal, args.throttle) if args.execute else 0
        if args.plan is None:
            raise ValueError("--execute, --verify and --cancel need --plan FILE")
        plan = parse_plan(sys.stdin.read() if args.plan == "-" else
                          Path(args.plan).read_text())
        if args.verify:
            return _verify(admin, plan, preserve=args.preserve_throttles)
        if args.cancel:
            return _cancel(admin, plan, preserve=args.preserve_throttles)
        return _execute(admin, plan, args.throttle)


def _current(admin: Admin, topics: list[str] | None = None) -> Assignment:
    found = admin.list_topics()
    if topics is not None:
        missing = sorted(set(topics) - set(found))
        if missing:
            raise ValueError(f"no such topic(s): {', '.join(missing)}")
    return {(name, p.partition): tuple(p.replicas) for name, info in found.items()
            if topics is None or name in topics for p in info.partitions}


def _generate(admin: Admin, args: argparse.Namespace) -> Assignment:
    if not args.brokers:
        raise ValueError("--generate needs --brokers 1,2,...")
    live = admin.brokers()
    unknown = sorted(set(args.brokers) - set(live))
    if unknown:
        raise ValueError(f"broker(s) {', '.join(map(str, unknown))} are not live (live: "
                         f"{', '.join(map(str, live))})")
    current = _current(admin, args.topics)
    if not current:
        raise ValueError("no topic to move")
    proposal = propose(current, {b: live[b] for b in args.brokers})
    print("Current partition replica assignment")
    print(format_plan(current))
    print()
    print("Proposed partition reassignment configuration")
    print(format_plan(proposal))
    return proposal


def _execute(admin: Admin, plan: Assignment, throttle: int | None) -> int:
    current = _current(admin, sorted({topic for topic, _ in plan}))
    missing = sorted(set(plan) - set(current))
    if missing:
        raise ValueError("no such partition(s): " + ", ".join(f"{t}-{p}" for t, p in missing))
    print("Current partition replica assignment\n")
    print(format_plan({key: current[key] for key in plan}))
    print("\nSave this to use as the --plan option during rollback")
    if throttle is not None:
        for topic, configs in throttled_replicas(current, plan).items():
            admin.alter_config(topic, set=configs)
        for broker in throttled_brokers(current, plan):
            admin.alter_broker_config(broker, set={LEADER_THROTTLED_RATE: str(throttle),
                                                   FOLLOWER_THROTTLED_RATE: str(throttle)})
        print("Warning: You must run --verify periodically, until the reassignment completes, "
              "to ensure the throttle is removed.")
        print(f"The inter-broker throttle limit was set to {throttle} B/s")
    results = admin.alter_partition_reassignments(dict(plan))
    return _report(results, "Successfully started partition reassignments for")


def _verify(admin: Admin, plan: Assignment, *, preserve: bool) -> int:
    ongoing = admin.list_partition_reassignments(sorted(plan))
    current = _current(admin, sorted({topic for topic, _ in plan}))
    print("Status of partition reassignment:")
    for topic, partition in sorted(plan):
        name = f"{topic}-{partition}"
        replicas = current.get((topic, partition))
        if (topic, partition) in ongoing:
            print(f"Reassignment of partition {name} is still in progress.")
        elif replicas == plan[(topic, partition)]:
            print(f"Reassignment of partition {name} is completed.")
        else:
            shown = "none (no such partition)" if replicas is None else list(replicas)
            print(f"There is no active reassignment of partition {name}, but replica set is "
                  f"{shown} rather than {list(plan[(topic, partition)])}.")
    if not ongoing and not preserve:
        _clear_throttles(admin, plan)
    return 0


def _cancel(admin: Admin, plan: Assignment, *, preserve: bool) -> int:
    ongoing = admin.list_partition_reassignments(sorted(plan))
    status = 0
    if ongoing:
        results = admin.alter_partition_reassignments(dict.fromkeys(ongoing))
        status = _report(results, "Successfully cancelled partition reassignments for:")
    else:
        print("None of the specified partition reassignments are active.")
    if not preserve:
        _clear_throttles(admin, plan)
    return status


def _list(admin: Admin) -> int:
    ongoing = admin.list_partition_reassignments()
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for line in describe_ongoing(ongoing):
        print(line)
    return 0


def _clear_throttles(admin: Admin, plan: Assignment) -> None:
    brokers = sorted(admin.brokers())
    print()
    print(f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}")
    for broker in brokers:
        admin.alter_broker_config(broker, delete=[LEADER_THROTTLED_RATE, FOLLOWER_THROTTLED_RATE])
    topics = sorted({topic for topic, _ in plan})
    print(f"Clearing topic-level throttles on topic{'s' if len(topics) > 1 else ''} "
          f"{','.join(topics)}")
    for topic in topics:
        admin.alter_config(topic, delete=[LEADER_THROTTLED_REPLICAS, FOLLOWER_THROTTLED_REPLICAS])


def _report(results: Mapping[tuple[str, int], LoglakeError | None], success: str) -> int:
    done = [f"{t}-{p}" for (t, p), error in results.items() if error is None]
    failed = {f"{t}-{p}": error for (t, p), error in results.items() if error is not None}
    if done:
        print(f"{success} {','.join(done)}")
    for name, error in failed.items():
        print(f"Error reassigning partition {name}: {error}", file=sys.stderr)
    return 1 if failed else 0


def _broker_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected broker ids like 1,2,4, got {text!r}") from None
    if not ids or len(set(ids)) != len(ids) or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"expected distinct broker ids like 1,2,4, got {text!r}")
    return ids


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _rate(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected bytes per second > 0, got {text!r}")
    return value

