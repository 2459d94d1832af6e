"""Schemas: the Schema Registry's subjects, their versions, schema text and compatibility
levels, read-only, straight from the schema store in ZooKeeper (:mod:`loglake.catalog.schemas`,
the state every registry instance shares; no registry needs to run).

Routes:

* ``GET /schemas`` (page) and ``GET /fragments/schemas`` (its table, polled every 5 s): every
  subject (at most ``MAX_SUBJECTS``) with its live and soft-deleted version counts, latest
  version, its schema id and type, and the compatibility level in force (the subject's own,
  else the registry-wide one, else the registry's default BACKWARD) with where it comes from.
* ``GET /schemas/subjects/{subject}`` (``?version=N``; default the latest): one subject's
  versions (id, type, soft-deleted), the chosen version's schema text (JSON pretty-printed),
  its references and the subjects/versions that use the same id.

A logged-in user (``--basic-auth``) is not shown the subjects of topics their Metadata hides:
a subject named by Confluent's default TopicNameStrategy (``<topic>-key``, ``<topic>-value``)
whose topic exists but is not among :meth:`ConsoleContext.visible_topics` is left out of the
table and of a schema's "same id" list, and its page is a 403 TOPIC_AUTHORIZATION_FAILED, as
the topic's own page is. Other subjects (record-name strategies, subjects of topics that do not
exist) name no topic the user may not see and are shown.

Bad input: an unknown subject or version is a 404, a malformed version or an over-long subject
a 400, each with a message. Schema text is escaped by the templates (a schema is shown as text,
never markup).

Threads: :func:`overview` and :func:`subject_view` block (ZooKeeper reads) and run in a worker
thread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from loglake.catalog.schemas import SchemaStore
from loglake.console.context import (
    ConsoleContext,
    blocking,
    console,
    int_param,
    not_found,
    render,
)
from loglake.schemas.model import RegisteredSchema, SubjectVersion

MAX_SUBJECTS = 500
"""Subjects listed (sorted by name)."""
MAX_SUBJECT_LENGTH = 1000
TOPIC_SUBJECT_SUFFIXES = ("-key", "-value")
"""How Confluent's TopicNameStrategy names a topic's subjects."""
DEFAULT_COMPATIBILITY = "BACKWARD"
"""The registry's level while none is set (``loglake registry --default-compatibility``)."""


@dataclass(frozen=True)
class Compatibility:
    """The level in force for a subject and where it is set: ``subject``, ``global`` or
    ``default``."""

    level: str
    source: str


@dataclass(frozen=True)
class SubjectRow:
    subject: str
    live: int
    deleted: int
    latest: SubjectVersion | None
    schema_type: str | None
    compatibility: Compatibility


@dataclass(frozen=True)
class SchemasView:
    subjects: list[SubjectRow]
    left_out: int
    global_compatibility: Compatibility
    schema_ids: int


@dataclass(frozen=True)
class SubjectView:
    subject: str
    versions: list[SubjectVersion]
    chosen: SubjectVersion
    schema: RegisteredSchema | None
    text: str
    compatibility: Compatibility
    same_id: list[SubjectVersion]


def compatibility_in_force(subject_level: str | None,
                           global_level: str | None) -> Compatibility:
    """The level a registry applies to a subject (pure)."""
    if subject_level:
        return Compatibility(subject_level, "subject")
    if global_level:
        return Compatibility(global_level, "global")
    return Compatibility(DEFAULT_COMPATIBILITY, "default")


def pretty(schema: RegisteredSchema | None) -> str:
    """The schema text, JSON (Avro, JSON Schema) indented; other text as stored (pure)."""
    if schema is None:
        return ""
    try:
        return json.dumps(json.loads(schema.schema), indent=2, sort_keys=False)
    except ValueError:
        return schema.schema


def _store(ctx: ConsoleContext) -> SchemaStore:
    return SchemaStore(ctx.catalog().zk)


def subject_topic(subject: str) -> str | None:
    """The topic a TopicNameStrategy subject names (``orders-value`` -> ``orders``), else None
    (pure)."""
    for suffix in TOPIC_SUBJECT_SUFFIXES:
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return subject[:-len(suffix)]
    return None


def subject_hidden(subject: str, hidden_topics: set[str] | None) -> bool:
    """True when ``subject`` names one of ``hidden_topics`` (None: nothing is hidden; pure)."""
    if not hidden_topics:
        return False
    topic = subject_topic(subject)
    return topic is not None and topic in hidden_topics


def hidden_topics(ctx: ConsoleContext) -> set[str] | None:
    """The existing topics the logged-in user may not describe; None without a login
    (blocking)."""
    visible = ctx.visible_topics()
    if visible is None:
        return None
    return set(ctx.catalog().topic_names()) - visible


def overview(ctx: ConsoleContext) -> SchemasView:
    """The subjects table (blocking)."""
    store = _store(ctx)
    global_level = store.compatibility(None)
    hidden = hidden_topics(ctx)
    names = [name for name in store.subjects() if not subject_hidden(name, hidden)]
    rows = []
    types: dict[int, str | None] = {}
    for subject in names[:MAX_SUBJECTS]:
        versions = store.versions(subject)
        live = [v for v in versions if not v.deleted]
        latest = live[-1] if live else (versions[-1] if versions else None)
        schema_type = None
        if latest is not None:
            if latest.id not in types:
                found = store.schema(latest.id)
                types[latest.id] = None if found is None else found.schema_type
            schema_type = types[latest.id]
        rows.append(SubjectRow(subject, len(live), len(versions) - len(live), latest,
                               schema_type,
                               compatibility_in_force(store.compatibility(subject),
                                                      global_level)))
    return SchemasView(rows, max(0, len(names) - MAX_SUBJECTS),
                       compatibility_in_force(None, global_level), len(store.ids()))


def subject_view(ctx: ConsoleContext, subject: str, version: int | None) -> SubjectView | None:
    """One subject (blocking; None: no such subject or version; TOPIC_AUTHORIZATION_FAILED
    for the subject of a topic the logged-in user may not describe)."""
    store = _store(ctx)
    versions = store.versions(subject)
    if not versions:
        return None
    hidden = hidden_topics(ctx)
    if subject_hidden(subject, hidden):
        ctx.check_topic_visible(subject_topic(subject) or subject)
    if version is None:
        live = [v for v in versions if not v.deleted]
        chosen = live[-1] if live else versions[-1]
    else:
        match = [v for v in versions if v.version == version]
        if not match:
            return None
        chosen = match[0]
    schema = store.schema(chosen.id)
    same = [v for v in store.subjects_of_id(chosen.id)
            if (v.subject, v.version) != (chosen.subject, chosen.version)
            and not subject_hidden(v.subject, hidden)]
    return SubjectView(subject, versions, chosen, schema, pretty(schema),
                       compatibility_in_force(store.compatibility(subject),
                                              store.compatibility(None)), same)


async def page(request: Request) -> Response:
    view = await blocking(overview, console(request))
    return render(request, "schemas.html", view=view)


async def live(request: Request) -> Response:
    view = await blocking(overview, console(request))
    return render(request, "schemas_live.html", view=view)


async def subject_page(request: Request) -> Response:
    subject = request.path_params["subject"]
    if not subject or len(subject) > MAX_SUBJECT_LENGTH:
        raise ValueError(f"a subject name is 1 to {MAX_SUBJECT_LENGTH} characters")
    version = int_param(request.query_params.get("version"), "version", minimum=1,
                        maximum=2**31 - 1)
    view = await blocking(subject_view, console(request), subject, version)
    if view is None:
        what = f"subject {subject!r}" if version is None else \
            f"version {version} of subject {subject!r}"
        return not_found(f"no {what} is registered", request)
    return render(request, "schema_subject.html", view=view)


ROUTES: list[BaseRoute] = [
    Route("/schemas", page, methods=["GET"]),
    Route("/fragments/schemas", live, methods=["GET"]),
    Route("/schemas/subjects/{subject:path}", subject_page, methods=["GET"]),
]
