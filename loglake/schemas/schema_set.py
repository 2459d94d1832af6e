"""Where decoders find schemas: the :class:`SchemaSource` protocol and the :class:`SchemaSet`
snapshot.

A source answers ``schema(id)`` (the schema registered under an id, None when unknown) and
``referenced(ref)`` (the schema a reference names: a subject version). The ZooKeeper store
(catalog/schemas.py ``SchemaStore``) is one; :class:`SchemaSet` is a plain dict-backed
snapshot of some of them, picklable, for the tierer's worker process and Spark executors
(they have no ZooKeeper session): :meth:`SchemaSet.collect` copies the given ids, the given
subjects' versions and every schema they reference, transitively.

:func:`resolve_references` turns a schema's references into the ``{reference name: schema}``
mapping parse.py takes (transitively: a reference's own references are in it too).

Thread-safety: a SchemaSet is not changed after it is built (``add`` is for building);
reading it from several threads is safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from loglake.errors import SchemaDecodeError
from loglake.schemas.model import RegisteredSchema, SchemaReference, SubjectVersion

MAX_REFERENCE_DEPTH = 32


@runtime_checkable
class SchemaSource(Protocol):
    """What decoders need: schemas by id, and the schemas references name."""

    def schema(self, schema_id: int) -> RegisteredSchema | None: ...

    def referenced(self, reference: SchemaReference) -> RegisteredSchema | None: ...


@runtime_checkable
class SubjectSource(SchemaSource, Protocol):
    """A source that also lists subject versions (the store; a SchemaSet)."""

    def versions(self, subject: str) -> list[SubjectVersion]: ...


@dataclass
class SchemaSet:
    """A picklable snapshot of schemas: by id, by reference and subject versions."""

    by_id: dict[int, RegisteredSchema] = field(default_factory=dict)
    by_reference: dict[tuple[str, int], RegisteredSchema] = field(default_factory=dict)
    subject_versions: dict[str, list[SubjectVersion]] = field(default_factory=dict)

    def schema(self, schema_id: int) -> RegisteredSchema | None:
        return self.by_id.get(int(schema_id))

    def referenced(self, reference: SchemaReference) -> RegisteredSchema | None:
        return self.by_reference.get((reference.subject, int(reference.version)))

    def versions(self, subject: str) -> list[SubjectVersion]:
        return list(self.subject_versions.get(subject, ()))

    def ids(self) -> list[int]:
        return sorted(self.by_id)

    def add(self, schema: RegisteredSchema, source: SchemaSource | None = None) -> None:
        """Add ``schema`` and (from ``source``) what it references, transitively."""
        self.by_id[schema.id] = schema
        if source is not None:
            self._add_references(schema, source, 0)

    def _add_references(self, schema: RegisteredSchema, source: SchemaSource,
                        depth: int) -> None:
        if depth > MAX_REFERENCE_DEPTH:
            return
        for ref in schema.references:
            key = (ref.subject, int(ref.version))
            if key in self.by_reference:
                continue
            found = source.referenced(ref)
            if found is None:
                continue
            self.by_reference[key] = found
            self.by_id.setdefault(found.id, found)
            self._add_references(found, source, depth + 1)

    def merged(self, other: SchemaSet) -> SchemaSet:
        """A new set holding this one's schemas and ``other``'s (``other`` wins on subjects)."""
        return SchemaSet({**self.by_id, **other.by_id},
                         {**self.by_reference, **other.by_reference},
                         {**self.subject_versions, **other.subject_versions})

    @classmethod
    def collect(cls, source: SchemaSource, ids: Iterable[int] = (), *,
                subjects: Iterable[str] = ()) -> SchemaSet:
        """The schemas ``ids`` name (unknown ids are left out), the versions of ``subjects``
        (soft-deleted ones too) with their schemas, and everything these reference.
        ``subjects`` needs a source with ``versions`` (the store, a SchemaSet)."""
        out = cls()
        wanted = {int(i) for i in ids}
        for subject in subjects:
            if not isinstance(source, SubjectSource):
                raise TypeError("collecting subjects needs a source with versions()")
            versions = source.versions(subject)
            out.subject_versions[subject] = list(versions)
            wanted.update(v.id for v in versions)
        for schema_id in sorted(wanted):
            found = source.schema(schema_id)
            if found is not None:
                out.add(found, source)
        return out


def resolve_references(schema: RegisteredSchema, source: SchemaSource
                       ) -> dict[str, RegisteredSchema]:
    """``{reference name: referenced schema}`` for ``schema``'s references and theirs,
    transitively (SchemaDecodeError: a reference the source does not know)."""
    out: dict[str, RegisteredSchema] = {}

    def visit(refs: Iterable[SchemaReference], depth: int) -> None:
        if depth > MAX_REFERENCE_DEPTH:
            raise SchemaDecodeError(f"references nest deeper than {MAX_REFERENCE_DEPTH}")
        for ref in refs:
            if ref.name in out:
                continue
            found = source.referenced(ref)
            if found is None:
                raise SchemaDecodeError(f"reference {ref.name!r} ({ref.subject} version "
                                        f"{ref.version}) not found")
            out[ref.name] = found
            visit(found.references, depth + 1)

    visit(schema.references, 0)
    return out


def reference_key(schema: RegisteredSchema, refs: Mapping[str, RegisteredSchema]
                  ) -> tuple[object, ...]:
    """A hashable key of a schema with its resolved references (codec caches)."""
    return (schema, tuple(sorted((name, ref) for name, ref in refs.items())))
