"""Consumer groups: the list, a group's page with lag per partition and a lag-over-time chart,
and resetting the offsets of an EMPTY group.

Routes (a group id may contain ``/``, so the id is always the last part of the path):

* ``GET /groups`` (page) and ``GET /fragments/groups`` (its table, polled every 2 s): every
  group the coordinators know (ListGroups), its state, members (DescribeGroups, for the first
  :data:`MAX_DESCRIBED` groups) and total lag (the sampler's latest tick).
* ``GET /groups/{group}`` (page), ``GET /fragments/group/{group}`` (members and partitions,
  polled), ``GET /charts/group/{group}`` (the chart's data, JSON: Chart.js ``labels`` and
  ``datasets`` from the sampler; no cluster call without a login).

With a login the brokers' ACLs decide, as for ``kafka-consumer-groups`` run as the user: the
list is the user's ListGroups (groups they may describe), a group's page their DescribeGroups
and OffsetFetch (403 GROUP_AUTHORIZATION_FAILED for a group they may not describe), with
assignments, offsets and lag of topics their Metadata does not list left out. The sampler runs
as the console's own account, so the lag it gathered is filtered the same way before it is
shown: the list's totals and the chart count only visible topics, and the chart answers 403
(JSON ``{"error", "error_code"}``) for a group the user's DescribeGroups refuses.
* ``POST /actions/reset-offsets/{group}``: form fields ``topic``, ``partitions`` (optional,
  ``0,2,5``), ``to`` (``earliest`` | ``latest`` | ``offset`` | ``datetime``), ``offset``,
  ``datetime`` (ISO 8601; no zone means UTC) and ``action`` (``preview``: a dry run; ``apply``). As
  ``loglake groups reset-offsets``: refused (409, with the member count and state) while the
  group has members, since their next commit would overwrite the offsets; ``offset`` is
  clamped into each partition's ``[log start, log end]``; ``datetime`` picks the first offset
  at or after the instant (the log end when every record is older).

Lag of a partition: log end offset (high watermark) minus the committed offset, never below 0;
``-`` where the group committed nothing. A group that does not exist (Dead, no members, no
committed offsets) is a 404.

Sampling (the probe registered with :mod:`loglake.console.sampler`): per tick, ListGroups, then
for the first :data:`MAX_SAMPLED_GROUPS` groups their committed offsets, and the log end offsets
of each topic once per tick; series ``("group", group, topic, partition)`` -> lag.

Threads: the data functions block (SDK calls) and run in worker threads via ``blocking``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kio.schema.errors import ErrorCode
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from loglake.client import Admin, BrokerError, GroupDescription
from loglake.console.cluster_data import valid_topic_name
from loglake.console.context import (
    CHART_ANSWER_MAX_AGE_S,
    ConsoleContext,
    blocking,
    console,
    error_response,
    form_value,
    int_param,
    is_fragment,
    render,
    status_for,
)
from loglake.console.sampler import Key, chart, sampler_of
from loglake.errors import LoglakeError

MAX_GROUP_ID = 1000
"""Longest group id accepted in a URL (Kafka sets no limit; this bounds the work)."""
MAX_DESCRIBED = 50
LIST_TIMEOUT_S = 5.0
"""How long the groups page waits for each broker's ListGroups answer (a dead broker is
reported as missing after that, the others' groups are shown)."""
MAX_SAMPLED_GROUPS = 50
MAX_RESET_PARTITIONS = 10_000

ResetTo = Literal["earliest", "latest", "offset", "datetime"]
RESET_TARGETS: tuple[ResetTo, ...] = ("earliest", "latest", "offset", "datetime")


@dataclass(frozen=True)
class PartitionLag:
    """One row of a group's partition table."""

    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    member_id: str | None
    client_id: str | None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.log_end is None:
            return None
        return max(self.log_end - self.committed, 0)


@dataclass(frozen=True)
class GroupView:
    """What a group's page shows."""

    description: GroupDescription
    partitions: list[PartitionLag]
    missing_topics: list[str]

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)


@dataclass(frozen=True)
class GroupRow:
    """One row of the groups list."""

    group_id: str
    state: str
    members: int | None
    lag: float | None


@dataclass(frozen=True)
class ResetRequest:
    """A parsed reset form (see the module)."""

    topic: str
    partitions: tuple[int, ...] | None
    to: ResetTo
    offset: int | None = None
    timestamp_ms: int | None = None
    apply: bool = False


@dataclass(frozen=True)
class ResetRow:
    topic: str
    partition: int
    current: int | None
    new: int


# ---- input (pure) ----------------------------------------------------------------------------

def check_group_id(group_id: str) -> str:
    """A group id from a URL: non-empty, at most :data:`MAX_GROUP_ID` characters."""
    if not group_id.strip():
        raise ValueError("the group id is empty")
    if len(group_id) > MAX_GROUP_ID:
        raise ValueError(f"a group id of {len(group_id)} characters is longer than "
                         f"{MAX_GROUP_ID}")
    return group_id


def parse_datetime_ms(text: str) -> int:
    """ISO 8601 (``2024-05-01T12:00:00Z``, ``2024-05-01T12:00``; no zone: UTC) -> epoch ms."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"expected a time such as 2024-05-01T12:00:00Z, got "
                         f"{text[:60]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return max(int(moment.timestamp() * 1000), 0)


def parse_partitions(text: str) -> tuple[int, ...] | None:
    """``"0, 2,5"`` -> (0, 2, 5); empty -> None (every partition)."""
    if not text.strip():
        return None
    out = set()
    for part in text.replace(" ", "").split(","):
        number = int_param(part, "partition", minimum=0, maximum=MAX_RESET_PARTITIONS)
        if number is None:
            raise ValueError(f"partitions look like 0,1,2, got {text[:60]!r}")
        out.add(number)
    return tuple(sorted(out))


def parse_reset(form: Mapping[str, Any]) -> ResetRequest:
    """The reset form (ValueError with a clear message for anything wrong)."""
    topic = form_value(form, "topic", max_length=300)
    if not topic:
        raise ValueError("name the topic whose offsets to reset")
    if not valid_topic_name(topic):
        raise ValueError(f"invalid topic name {topic[:80]!r}: use 1-249 letters, digits, '.', "
                         "'_' or '-'")
    to = form_value(form, "to", max_length=20)
    if to not in RESET_TARGETS:
        raise ValueError(f"reset to one of {', '.join(RESET_TARGETS)}, got {to[:20]!r}")
    action = form_value(form, "action", default="preview", max_length=20) or "preview"
    if action not in ("preview", "apply"):
        raise ValueError(f"action is preview or apply, got {action[:20]!r}")
    partitions = parse_partitions(form_value(form, "partitions", max_length=10_000))
    offset = timestamp = None
    if to == "offset":
        offset = int_param(form_value(form, "offset", max_length=40), "offset", minimum=0)
        if offset is None:
            raise ValueError("give the offset to reset to")
    elif to == "datetime":
        text = form_value(form, "datetime", max_length=60)
        if not text:
            raise ValueError("give the time to reset to (ISO 8601, e.g. 2024-05-01T12:00:00Z)")
        timestamp = parse_datetime_ms(text)
    return ResetRequest(topic=topic, partitions=partitions, to=to,
                        offset=offset, timestamp_ms=timestamp, apply=action == "apply")


# ---- cluster reads and writes (blocking) -----------------------------------------------------

def _group_missing(group_id: str) -> LoglakeError:
    return BrokerError(f"consumer group {group_id!r} does not exist",
                       code=ErrorCode.group_id_not_found)


def group_view(ctx: ConsoleContext, group_id: str) -> GroupView:
    """The group's description, committed offsets, log end offsets and lag (blocking)."""
    admin = ctx.admin()
    group = admin.describe_group(group_id)
    committed = admin.group_offsets(group_id)
    if group.state == "Dead" and not group.members and not committed:
        raise _group_missing(group_id)
    visible = ctx.visible_topics()
    if visible is not None:  # a logged-in user: nothing of topics they may not describe
        group = hide_topics(group, visible)
        committed = {tp: o for tp, o in committed.items() if tp[0] in visible}
    owners = {tp: m for m in group.members for tp in m.assignment}
    topics = sorted({t for t, _ in committed} | {t for t, _ in owners})
    rows: list[PartitionLag] = []
    missing: list[str] = []
    for topic in topics:
        try:
            ends = admin.list_offsets(topic, "latest")
        except LoglakeError as exc:
            if exc.code != ErrorCode.unknown_topic_or_partition:
                raise
            missing.append(topic)
            ends = {p: -1 for t, p in (*committed, *owners) if t == topic}
        for partition, end in sorted(ends.items()):
            member = owners.get((topic, partition))
            rows.append(PartitionLag(
                topic, partition, committed.get((topic, partition)),
                None if end < 0 else end,
                member.member_id if member else None, member.client_id if member else None))
    return GroupView(group, rows, missing)


def hide_topics(group: GroupDescription, visible: set[str]) -> GroupDescription:
    """``group`` with its members' assignments limited to ``visible`` topics (pure)."""
    members = tuple(dataclasses.replace(
        m, assignment=tuple(tp for tp in m.assignment if tp[0] in visible))
        for m in group.members)
    return dataclasses.replace(group, members=members)


def visible_lag_key(key: Key, visible: set[str] | None) -> bool:
    """Whether a sampler key ``("group", group, topic, partition)`` may be shown to a user
    seeing ``visible`` topics (None: everything)."""
    return visible is None or (len(key) == 4 and str(key[2]) in visible)


def group_rows(ctx: ConsoleContext) -> list[GroupRow]:
    """Every group with its state, member count and sampled total lag (blocking)."""
    return group_list(ctx)[0]


def group_list(ctx: ConsoleContext) -> tuple[list[GroupRow], list[str]]:
    """The groups of the brokers that answered ListGroups within :data:`LIST_TIMEOUT_S`
    (as :func:`group_rows`) and one message per broker that did not (blocking): a killed
    broker costs its groups, not the page. A logged-in user's ListGroups lists only the
    groups they may describe (the brokers filter it)."""
    admin = ctx.admin()
    listed, failures = admin.list_groups_partial(timeout=LIST_TIMEOUT_S)
    errors = [str(error) for error in failures]
    rows = []
    for index, group in enumerate(listed):
        members: int | None = None
        if index < MAX_DESCRIBED:
            try:
                members = len(admin.describe_group(group.group_id).members)
            except LoglakeError:
                members = None
        rows.append(GroupRow(group.group_id, group.state, members, None))
    return rows, errors


def sample_lags(ctx: ConsoleContext) -> dict[Key, float]:
    """The sampler's probe: lag of every partition of the first groups (blocking)."""
    admin = ctx.admin()
    ends: dict[str, dict[int, int] | None] = {}
    values: dict[Key, float] = {}
    for group in admin.list_groups()[:MAX_SAMPLED_GROUPS]:
        try:
            committed = admin.group_offsets(group.group_id)
        except LoglakeError:
            continue
        for (topic, partition), offset in committed.items():
            if topic not in ends:
                try:
                    ends[topic] = admin.list_offsets(topic, "latest")
                except LoglakeError:
                    ends[topic] = None
            end = (ends[topic] or {}).get(partition)
            if end is not None and end >= 0:
                values[("group", group.group_id, topic, partition)] = float(
                    max(end - offset, 0))
    return values


def plan_reset(admin: Admin, group_id: str, request: ResetRequest) -> list[ResetRow]:
    """The new offsets of a reset, applied when ``request.apply`` (blocking). Raises
    ``non_empty_group`` while the group has members, ``unknown_topic_or_partition`` for a
    topic or partition that does not exist."""
    group = admin.describe_group(group_id)
    if group.members:
        raise BrokerError(
            f"cannot reset the offsets of group {group_id!r}: it has {len(group.members)} "
            f"active member(s) (state {group.state}); stop its consumers first, as their next "
            f"commit would overwrite the offsets", code=ErrorCode.non_empty_group)
    topic = admin.describe_topic(request.topic)
    existing = [p.partition for p in topic.partitions]
    chosen = existing if request.partitions is None else list(request.partitions)
    missing = [p for p in chosen if p not in existing]
    if missing:
        raise BrokerError(
            f"topic {request.topic!r} has no partition {', '.join(map(str, missing[:10]))} "
            f"(partitions: 0..{len(existing) - 1})", code=ErrorCode.unknown_topic_or_partition)
    name = request.topic
    if request.to == "earliest":
        found = admin.list_offsets(name, "earliest", partitions=chosen)
    elif request.to == "latest":
        found = admin.list_offsets(name, "latest", partitions=chosen)
    elif request.to == "datetime":
        assert request.timestamp_ms is not None
        found = admin.list_offsets(name, request.timestamp_ms, partitions=chosen)
    else:
        assert request.offset is not None
        starts = admin.list_offsets(name, "earliest", partitions=chosen)
        ends = admin.list_offsets(name, "latest", partitions=chosen)
        found = {p: min(max(request.offset, starts[p]), ends[p]) for p in chosen}
    committed = admin.group_offsets(group_id)
    rows = [ResetRow(name, p, committed.get((name, p)), o) for p, o in sorted(found.items())]
    if request.apply:
        try:
            admin.alter_group_offsets(group_id, {(r.topic, r.partition): r.new for r in rows})
        except BrokerError as exc:
            if exc.code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation,
                            ErrorCode.rebalance_in_progress):
                raise BrokerError(f"cannot reset the offsets of group {group_id!r}: a "
                                  f"consumer joined it meanwhile ({exc.code.name})",
                                  code=ErrorCode.non_empty_group) from None
            raise
    return rows


# ---- handlers --------------------------------------------------------------------------------

def _group_id(request: Request) -> str:
    return check_group_id(str(request.path_params["group"]))


def _list_with_visibility(ctx: ConsoleContext
                          ) -> tuple[list[GroupRow], list[str], set[str] | None]:
    rows, errors = group_list(ctx)
    return rows, errors, ctx.visible_topics()


async def list_page(request: Request) -> Response:
    rows, errors, visible = await blocking(_list_with_visibility, console(request))
    return render(request, "groups_list.html", rows=_with_lag(request, rows, visible),
                  errors=errors)


async def list_live(request: Request) -> Response:
    rows, errors, visible = await blocking(_list_with_visibility, console(request))
    return render(request, "groups_list_live.html", rows=_with_lag(request, rows, visible),
                  errors=errors)


def _with_lag(request: Request, rows: list[GroupRow],
              visible: set[str] | None) -> list[GroupRow]:
    """``rows`` with the sampler's latest total lag per group, summed over the ``visible``
    topics only (the sampler runs as the console's own account)."""
    tick = sampler_of(console(request)).store.latest_tick()
    if tick is None:
        return rows
    totals: dict[str, float] = {}
    for key, value in tick.values.items():
        if key[0] == "group" and visible_lag_key(key, visible):
            totals[str(key[1])] = totals.get(str(key[1]), 0.0) + value
    return [GroupRow(r.group_id, r.state, r.members, totals.get(r.group_id)) for r in rows]


async def group_page(request: Request) -> Response:
    group_id = _group_id(request)
    view = await blocking(group_view, console(request), group_id)
    return render(request, "groups_group.html", group_id=group_id, view=view)


async def group_live(request: Request) -> Response:
    group_id = _group_id(request)
    view = await blocking(group_view, console(request), group_id)
    return render(request, "groups_group_live.html", group_id=group_id, view=view)


def _partition_label(group_id: str, visible: set[str] | None = None) -> Any:
    def label(key: Key) -> str | None:
        if len(key) == 4 and key[0] == "group" and key[1] == group_id \
                and visible_lag_key(key, visible):
            return f"{key[2]}[{key[3]}]"
        return None
    return label


def chart_visibility(ctx: ConsoleContext, group_id: str) -> set[str] | None:
    """For a logged-in user: the topics whose lag the chart may show, after their
    DescribeGroups allowed the group (else GROUP_AUTHORIZATION_FAILED); None without a login.
    Reuses the user's answers of the last seconds (the chart is polled). Blocking."""
    ctx.check_group_visible(group_id, max_age_s=CHART_ANSWER_MAX_AGE_S)
    return ctx.visible_topics(max_age_s=CHART_ANSWER_MAX_AGE_S)


async def lag_json(request: Request) -> Response:
    """The chart's data: the sampler (the console's own account) gathered it, so a logged-in
    user gets it only for a group they may describe, only for topics they may describe."""
    ctx = console(request)
    group_id = _group_id(request)
    visible = None
    if ctx.login() is not None:
        try:
            visible = await blocking(chart_visibility, ctx, group_id)
        except LoglakeError as exc:
            return JSONResponse({"error": str(exc), "error_code": exc.code.name.upper()},
                                status_code=status_for(exc))
    data = chart(sampler_of(ctx).store, _partition_label(group_id, visible))
    return JSONResponse(data.to_json())


async def reset(request: Request) -> Response:
    ctx = console(request)
    group_id = _group_id(request)
    form = await request.form(max_files=0, max_fields=20, max_part_size=64 * 1024)
    parsed = parse_reset(form)
    try:
        rows = await blocking(lambda: plan_reset(ctx.admin(), group_id, parsed))
    except LoglakeError as exc:
        return error_response(exc, request, doing="reset offsets")
    if parsed.apply:
        sampler_of(ctx).poke()
    if not is_fragment(request):
        return render(request, "groups_reset_page.html", group_id=group_id, rows=rows,
                      request_=parsed)
    return render(request, "groups_reset_result.html", group_id=group_id, rows=rows,
                  request_=parsed)


async def start(ctx: ConsoleContext) -> None:
    """Lifespan hook: register the lag probe with the sampler."""
    sampler_of(ctx).add_probe("groups", lambda: sample_lags(ctx))


ROUTES: list[BaseRoute] = [
    Route("/groups", list_page, methods=["GET"]),
    Route("/fragments/groups", list_live, methods=["GET"]),
    Route("/groups/{group:path}", group_page, methods=["GET"]),
    Route("/fragments/group/{group:path}", group_live, methods=["GET"]),
    Route("/charts/group/{group:path}", lag_json, methods=["GET"]),
    Route("/actions/reset-offsets/{group:path}", reset, methods=["POST"]),
]
