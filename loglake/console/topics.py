"""Topics list: ``GET /topics`` (page), ``GET /fragments/topics`` (its table, polled every 2 s),
``POST /topics`` (create), ``POST /topics/{name}/delete`` (delete; the form repeats the name).

Forms are posted by htmx (``HX-Request``: the answer is a fragment for the form's result
box) or plainly (success: ``303`` to the page concerned; failure: an error page). Input is
checked before any call: a topic name as Kafka allows it, partitions 1..:data:`MAX_PARTITIONS`,
replication factor 1..:data:`MAX_REPLICATION_FACTOR`, configs as ``key=value`` lines; the
cluster's own refusals (topic exists, invalid config, not enough brokers) come back as 4xx
with the broker's message.
"""

from __future__ import annotations

import html

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from loglake.console.cluster_data import topic_rows, valid_topic_name
from loglake.console.context import (
    SDK_TIMEOUT_S,
    bad_request,
    blocking,
    console,
    error_response,
    form_value,
    int_param,
    is_fragment,
    render,
)
from loglake.errors import LoglakeError

MAX_PARTITIONS = 10_000
MAX_REPLICATION_FACTOR = 16
MAX_CONFIG_LINES = 100


def parse_config_lines(text: str) -> dict[str, str]:
    """``key=value`` lines (blank lines and ``#`` comments skipped) -> a dict; ValueError
    naming the bad line."""
    configs: dict[str, str] = {}
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    if len(lines) > MAX_CONFIG_LINES:
        raise ValueError(f"at most {MAX_CONFIG_LINES} config lines, got {len(lines)}")
    for line in lines:
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key or any(c.isspace() for c in key):
            raise ValueError(f"config line {line[:80]!r} is not key=value")
        configs[key] = value.strip()
    return configs


async def page(request: Request) -> Response:
    rows = await blocking(topic_rows, console(request))
    return render(request, "topics.html", rows=rows)


async def live(request: Request) -> Response:
    rows = await blocking(topic_rows, console(request))
    return render(request, "topics_table.html", rows=rows)


def done(request: Request, message: str, location: str) -> Response:
    """A success: a notice fragment for htmx, else a redirect to ``location``."""
    if is_fragment(request):
        return HTMLResponse(f'<div class="notice" role="status">{html.escape(message)}</div>')
    return RedirectResponse(location, status_code=303)


async def create(request: Request) -> Response:
    ctx = console(request)
    try:
        form = await request.form(max_files=0, max_fields=20, max_part_size=256 * 1024)
        name = form_value(form, "name", max_length=300)
        if not valid_topic_name(name):
            return bad_request(
                f"invalid topic name {name[:80]!r}: use 1-249 letters, digits, '.', '_' or "
                "'-'", request)
        partitions = int_param(form_value(form, "partitions"), "partitions", default=1,
                               minimum=1, maximum=MAX_PARTITIONS)
        replication = int_param(form_value(form, "replication_factor"), "replication factor",
                                default=1, minimum=1, maximum=MAX_REPLICATION_FACTOR)
        configs = parse_config_lines(form_value(form, "configs"))
    except ValueError as exc:
        return bad_request(str(exc), request)
    assert partitions is not None and replication is not None

    def call() -> None:
        ctx.admin().create_topic(name, partitions=partitions, replication_factor=replication,
                                 config=configs, timeout=SDK_TIMEOUT_S)

    try:
        await blocking(call)
    except (LoglakeError, ValueError) as exc:
        return error_response(exc, request, doing=f"create topic {name!r}")
    return done(request, f"Created topic {name} ({partitions} partitions, replication "
                f"factor {replication}).", f"/topics/{name}")


async def delete(request: Request) -> Response:
    ctx = console(request)
    name = request.path_params["name"]
    try:
        form = await request.form(max_files=0, max_fields=5, max_part_size=4096)
        confirm = form_value(form, "confirm", max_length=300)
    except ValueError as exc:
        return bad_request(str(exc), request)
    if not valid_topic_name(name):
        return bad_request(f"invalid topic name {name[:80]!r}", request)
    if confirm != name:
        return bad_request(f"type the topic's name ({name}) to confirm its deletion", request)
    try:
        await blocking(lambda: ctx.admin().delete_topic(name, timeout=SDK_TIMEOUT_S))
    except (LoglakeError, ValueError) as exc:
        return error_response(exc, request, doing=f"delete topic {name!r}")
    return done(request, f"Deleted topic {name}.", "/topics")


ROUTES: list[BaseRoute] = [
    Route("/topics", page, methods=["GET"]),
    Route("/topics", create, methods=["POST"]),
    Route("/fragments/topics", live, methods=["GET"]),
    Route("/topics/{name}/delete", delete, methods=["POST"]),
]
