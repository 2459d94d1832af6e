"""The registry's logic (Confluent Schema Registry semantics) over :class:`SchemaStore`.

Every method answers one REST call with plain JSON-able values, or raises
:class:`~loglake.registry.errors.RegistryError` (HTTP status + Confluent error code). All state is
in ZooKeeper: any number of instances on the same ZooKeeper agree, and a restarted instance
serves every id and version it (or another) handed out. The only local state is a cache of
schemas by id, which is safe because an id's content never changes once written.

Semantics (as Confluent's):

* Versions are numbered per subject from 1; a new version is the highest existing number
  (soft-deleted included) + 1. "latest" / -1 is the highest live (not soft-deleted) version.
* Registering a schema already live in the subject returns its id and adds no version; any
  other registration is checked against the subject's live versions at the subject's
  compatibility level (else the global one, else BACKWARD) and refused with 409 if not
  compatible. Ids come from :meth:`SchemaStore.ensure_id`: the same content gets the same id
  under every subject; two registrars racing for one version number: the loser re-reads and
  retries (:class:`VersionTakenError`), bounded by :data:`REGISTER_ATTEMPTS`.
* Deletes: a soft delete marks a version deleted (it keeps its number and id, hidden unless
  ``deleted=true``); a hard (``permanent``) delete removes a version that was soft-deleted first
  (40405/40407 otherwise). A version that another live schema references cannot be deleted
  (42206). Schema ids stay readable after every version using them is gone.
* Modes: READWRITE (default), READONLY / READONLY_OVERRIDE (writes 42205), IMPORT (registration
  with the given ``id`` and ``version``, no compatibility check). Switching to IMPORT needs an
  empty subject (resp. registry) unless ``force``.

Thread-safety: methods are called from the web server's worker threads concurrently; the store
(kazoo) is thread-safe and the cache is guarded by a lock. Blocking: ZooKeeper round trips.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from loglake.catalog.schemas import IdTakenError, SchemaStore, VersionTakenError
from loglake.registry import formats
from loglake.registry.errors import (
    ID_DOES_NOT_MATCH,
    INCOMPATIBLE_SCHEMA,
    INVALID_COMPATIBILITY_LEVEL,
    INVALID_MODE,
    INVALID_SCHEMA,
    INVALID_SUBJECT,
    INVALID_VERSION,
    OPERATION_NOT_PERMITTED,
    REFERENCE_EXISTS,
    SCHEMA_NOT_FOUND,
    STORE_ERROR,
    SUBJECT_COMPATIBILITY_NOT_CONFIGURED,
    SUBJECT_MODE_NOT_CONFIGURED,
    SUBJECT_NOT_FOUND,
    SUBJECT_NOT_SOFT_DELETED,
    SUBJECT_SOFT_DELETED,
    VERSION_NOT_FOUND,
    VERSION_NOT_SOFT_DELETED,
    VERSION_SOFT_DELETED,
    RegistryError,
    not_found,
    unprocessable,
)
from loglake.schemas.model import SCHEMA_TYPES, RegisteredSchema, SchemaReference, SubjectVersion

COMPATIBILITY_LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
                        "FULL", "FULL_TRANSITIVE", "NONE")
DEFAULT_COMPATIBILITY = "BACKWARD"
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
DEFAULT_MODE = "READWRITE"
REGISTER_ATTEMPTS = 20
"""How often a registration retries after losing a version number to another registrar."""
SCHEMA_CACHE_SIZE = 10_000
MAX_REFERENCE_DEPTH = 32


def parse_version(text: str | int) -> int | None:
    """A version path element: a positive number, or ``latest`` / ``-1`` (None: the latest);
    42202 otherwise."""
    value = str(text).strip()
    if value.lower() == "latest" or value == "-1":
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1 or number > 2**31 - 1:
        raise unprocessable(INVALID_VERSION, f"The specified version '{text}' is not a valid "
                            "version id. Allowed values are between [1, 2^31-1] and the string "
                            "\"latest\"")
    return number


def _check_subject(subject: str) -> str:
    if not subject or subject.strip() != subject or any(ord(c) < 32 for c in subject):
        raise unprocessable(INVALID_SUBJECT, f"The specified subject {subject!r} is not valid")
    return subject


class RegistryService:
    """Confluent's Schema Registry operations over one :class:`SchemaStore`."""

    def __init__(self, store: SchemaStore, *, default_compatibility: str = DEFAULT_COMPATIBILITY
                 ) -> None:
        self.store = store
        self.default_compatibility = default_compatibility
        self._cache: OrderedDict[int, RegisteredSchema] = OrderedDict()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ helpers
    def _schema(self, schema_id: int) -> RegisteredSchema | None:
        with self._lock:
            found = self._cache.get(schema_id)
            if found is not None:
                self._cache.move_to_end(schema_id)
                return found
        found = self.store.schema(schema_id)
        if found is not None:
            with self._lock:
                self._cache[schema_id] = found
                while len(self._cache) > SCHEMA_CACHE_SIZE:
                    self._cache.popitem(last=False)
        return found

    def _require_schema(self, schema_id: int) -> RegisteredSchema:
        found = self._schema(schema_id)
        if found is None:
            raise not_found(SCHEMA_NOT_FOUND, f"Schema {schema_id} not found")
        return found

    def _resolve(self, references: Sequence[SchemaReference], depth: int = 0
                 ) -> dict[str, RegisteredSchema]:
        """Reference name -> referenced schema, transitively (42201 when one is missing)."""
        if depth > MAX_REFERENCE_DEPTH:
            raise unprocessable(INVALID_SCHEMA, "Invalid schema: references nest deeper than "
                                f"{MAX_REFERENCE_DEPTH} levels (a cycle?)")
        resolved: dict[str, RegisteredSchema] = {}
        for ref in references:
            version = self.store.version(ref.subject, ref.version)
            if version is None:
                raise unprocessable(INVALID_SCHEMA, f"Invalid schema: reference {ref.name!r} "
                                    f"names {ref.subject} version {ref.version}, which does "
                                    "not exist")
            schema = self._require_schema(version.id)
            resolved.update(self._resolve(schema.references, depth + 1))
            resolved[ref.name] = schema
        return resolved

    def _prepare_stored(self, schema: RegisteredSchema) -> formats.Prepared:
        return formats.prepare(schema.schema_type, schema.schema,
                               self._resolve(schema.references))

    def _live(self, subject: str) -> list[SubjectVersion]:
        return [v for v in self.store.versions(subject) if not v.deleted]

    def _versions(self, subject: str, *, deleted: bool) -> list[SubjectVersion]:
        """The subject's versions (soft-deleted ones with ``deleted``); 40401 when none."""
        versions = self.store.versions(subject)
        shown = versions if deleted else [v for v in versions if not v.deleted]
        if not shown:
            raise not_found(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        return shown

    def _version(self, subject: str, version: str | int, *, deleted: bool = False
                 ) -> SubjectVersion:
        number = parse_version(version)
        versions = self.store.versions(subject)
        if not versions or (not deleted and all(v.deleted for v in versions)):
            raise not_found(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        if number is None:
            live = [v for v in versions if deleted or not v.deleted]
            return live[-1]
        for found in versions:
            if found.version == number and (deleted or not found.deleted):
                return found
        raise not_found(VERSION_NOT_FOUND, f"Version {number} not found.")

    def _schema_json(self, schema: RegisteredSchema, *, fmt: str | None = None
                     ) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if schema.schema_type != "AVRO":
            body["schemaType"] = schema.schema_type
        body["schema"] = formats.render(schema, fmt, self._resolve(schema.references)
                                        if fmt == "serialized" else {})
        if schema.references:
            body["references"] = [r.to_json() for r in schema.references]
        return body

    def _version_json(self, version: SubjectVersion, *, fmt: str | None = None
                      ) -> dict[str, Any]:
        schema = self._require_schema(version.id)
        return {"subject": version.subject, "version": version.version, "id": version.id,
                **self._schema_json(schema, fmt=fmt)}

    # ------------------------------------------------------------------ schemas by id
    def schema_types(self) -> list[str]:
        return list(SCHEMA_TYPES)

    def schema_by_id(self, schema_id: int, *, subject: str | None = None,
                     fmt: str | None = None) -> dict[str, Any]:
        # Confluent's ``subject`` only picks the context the id is looked up in (loglake has
        # the default context alone): the schema is served whatever subjects use it, so a
        # deserializer sending '<topic>-value' decodes ids registered under other subjects.
        del subject
        return self._schema_json(self._require_schema(schema_id), fmt=fmt)

    def schema_text_by_id(self, schema_id: int) -> str:
        return self._require_schema(schema_id).schema

    def subjects_of_id(self, schema_id: int, *, deleted: bool = False,
                       subject: str | None = None) -> list[str]:
        return sorted({v.subject for v in self.versions_of_id(schema_id, deleted=deleted,
                                                              subject=subject)})

    def versions_of_id(self, schema_id: int, *, deleted: bool = False,
                       subject: str | None = None) -> list[SubjectVersion]:
        self._require_schema(schema_id)
        subjects = [subject] if subject else self.store.subjects()
        return [v for s in subjects for v in self.store.versions(s)
                if v.id == schema_id and (deleted or not v.deleted)]

    def schemas(self, *, subject_prefix: str = "", deleted: bool = False,
                latest_only: bool = False) -> list[dict[str, Any]]:
        result = []
        for subject in self.store.subjects():
            if not subject.startswith(subject_prefix):
                continue
            versions = [v for v in self.store.versions(subject) if deleted or not v.deleted]
            for version in versions[-1:] if latest_only else versions:
                result.append(self._version_json(version))
        return result

    # ------------------------------------------------------------------ subjects
    def subjects(self, *, deleted: bool = False, prefix: str = "") -> list[str]:
        names = []
        for subject in self.store.subjects():
            if not subject.startswith(prefix):
                continue
            if deleted or any(not v.deleted for v in self.store.versions(subject)):
                names.append(subject)
        return names

    def versions(self, subject: str, *, deleted: bool = False) -> list[int]:
        return [v.version for v in self._versions(subject, deleted=deleted)]

    def get_version(self, subject: str, version: str | int, *, deleted: bool = False,
                    fmt: str | None = None) -> dict[str, Any]:
        return self._version_json(self._version(subject, version, deleted=deleted), fmt=fmt)

    def get_version_text(self, subject: str, version: str | int, *, deleted: bool = False
                         ) -> str:
        found = self._version(subject, version, deleted=deleted)
        return self._require_schema(found.id).schema

    def referenced_by(self, subject: str, version: str | int) -> list[int]:
        found = self._version(subject, version, deleted=True)
        return self._referencing_ids(subject, found.version)

    def _referencing_ids(self, subject: str, version: int) -> list[int]:
        """Ids of schemas with a live subject version that reference ``subject`` ``version``."""
        live_ids = {v.id for s in self.store.subjects() for v in self.store.versions(s)
                    if not v.deleted}
        result = []
        for schema_id in sorted(live_ids):
            schema = self._schema(schema_id)
            if schema is not None and any(r.subject == subject and r.version == version
                                          for r in schema.references):
                result.append(schema_id)
        return result

    # ------------------------------------------------------------------ register and lookup
    @staticmethod
    def _request_schema(body: Mapping[str, Any]) -> tuple[str, str, tuple[SchemaReference, ...]]:
        if not isinstance(body, Mapping):
            raise unprocessable(INVALID_SCHEMA, "The request body must be a JSON object")
        text = body.get("schema")
        if not isinstance(text, str) or not text.strip():
            raise unprocessable(INVALID_SCHEMA, "Invalid schema: the request has no \"schema\" "
                                "string")
        schema_type = body.get("schemaType") or "AVRO"
        if not isinstance(schema_type, str):
            raise unprocessable(INVALID_SCHEMA, "Invalid schema: schemaType must be a string")
        formats.check_type(schema_type.upper())
        refs = []
        for raw in body.get("references") or ():
            try:
                refs.append(SchemaReference(str(raw["name"]), str(raw["subject"]),
                                            int(raw["version"])))
            except (KeyError, TypeError, ValueError):
                raise unprocessable(INVALID_SCHEMA, "Invalid schema: each reference needs "
                                    "\"name\", \"subject\" and an integer \"version\""
                                    ) from None
        return schema_type.upper(), text, tuple(refs)

    def _matching(self, subject: str, prepared: formats.Prepared,
                  refs: tuple[SchemaReference, ...], *, deleted: bool
                  ) -> SubjectVersion | None:
        """The subject's latest version holding this schema (same stored text and references,
        or the same canonical form), soft-deleted ones with ``deleted``."""
        exact = {self.store.id_for(prepared.schema_type, prepared.stored, refs),
                 self.store.id_for(prepared.schema_type, prepared.canonical, refs)} - {None}
        versions = [v for v in self.store.versions(subject) if deleted or not v.deleted]
        for version in reversed(versions):
            if version.id in exact:
                return version
        for version in reversed(versions):
            schema = self._schema(version.id)
            if schema is None or schema.schema_type != prepared.schema_type \
                    or schema.references != refs:
                continue
            try:
                if self._prepare_stored(schema).canonical == prepared.canonical:
                    return version
            except RegistryError:
                continue
        return None

    def lookup(self, subject: str, body: Mapping[str, Any], *, normalize: bool = False,
               deleted: bool = False) -> dict[str, Any]:
        schema_type, text, refs = self._request_schema(body)
        if not any(deleted or not v.deleted for v in self.store.versions(subject)):
            raise not_found(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        prepared = formats.prepare(schema_type, text, self._resolve(refs), normalize=normalize)
        found = self._matching(subject, prepared, refs, deleted=deleted)
        if found is None:
            raise not_found(SCHEMA_NOT_FOUND, "Schema not found")
        return self._version_json(found)

    def mode_of(self, subject: str | None) -> str:
        """The effective mode: the subject's, else the global one, else READWRITE."""
        if subject is not None:
            mode = self.store.mode(subject)
            if mode is not None:
                return mode
        return self.store.mode(None) or DEFAULT_MODE

    def compatibility_of(self, subject: str | None) -> str:
        if subject is not None:
            level = self.store.compatibility(subject)
            if level is not None:
                return level
        return self.store.compatibility(None) or self.default_compatibility

    def _require_writable(self, subject: str) -> str:
        mode = self.mode_of(subject)
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise unprocessable(OPERATION_NOT_PERMITTED, f"Subject {subject} is in read-only "
                                "mode")
        return mode

    def register(self, subject: str, body: Mapping[str, Any], *, normalize: bool = False
                 ) -> dict[str, Any]:
        """Register a schema under ``subject``: ``{"id": id}`` (and the version). See the
        module docstring for the rules."""
        _check_subject(subject)
        schema_type, text, refs = self._request_schema(body)
        mode = self._require_writable(subject)
        wanted_id = _optional_int(body, "id")
        wanted_version = _optional_int(body, "version")
        if wanted_version is not None and wanted_version < 1:
            raise unprocessable(INVALID_VERSION, f"The specified version '{wanted_version}' "
                                "is not a valid version id")
        prepared = formats.prepare(schema_type, text, self._resolve(refs), normalize=normalize)
        if mode == "IMPORT":
            return self._import(subject, prepared, refs, wanted_id, wanted_version)
        for _attempt in range(REGISTER_ATTEMPTS):
            existing = self._matching(subject, prepared, refs, deleted=False)
            if existing is not None:
                if wanted_id is not None and wanted_id != existing.id:
                    raise unprocessable(ID_DOES_NOT_MATCH, f"Schema already registered with "
                                        f"id {existing.id} instead of input id {wanted_id}")
                return {"id": existing.id, "version": existing.version}
            if wanted_id is not None:
                raise unprocessable(OPERATION_NOT_PERMITTED, f"Subject {subject} is not in "
                                    "import mode: a schema id can only be given in IMPORT mode")
            versions = self.store.versions(subject)
            live = [v for v in versions if not v.deleted]
            level = self.compatibility_of(subject)
            messages = self._incompatibilities(prepared, live, level, all_versions=True)
            if messages:
                raise RegistryError(409, INCOMPATIBLE_SCHEMA, _incompatible_message(
                    level, messages))
            schema_id = self.store.ensure_id(schema_type, prepared.stored, refs)
            number = (versions[-1].version if versions else 0) + 1
            if wanted_version is not None and wanted_version != number:
                raise unprocessable(INVALID_VERSION, f"Version {wanted_version} is not the "
                                    f"next version ({number}) of subject {subject}")
            try:
                self.store.create_version(subject, number, schema_id)
            except VersionTakenError:
                continue  # another registrar took this number: re-read, re-check
            return {"id": schema_id, "version": number}
        raise RegistryError(500, STORE_ERROR, f"Could not register under {subject}: "
                            f"{REGISTER_ATTEMPTS} concurrent registrations won the version")

    def _import(self, subject: str, prepared: formats.Prepared,
                refs: tuple[SchemaReference, ...], wanted_id: int | None,
                wanted_version: int | None) -> dict[str, Any]:
        """IMPORT mode: keep the given id (and version); no compatibility check."""
        if wanted_id is None:
            existing = self._matching(subject, prepared, refs, deleted=False)
            if existing is not None:
                return {"id": existing.id, "version": existing.version}
            schema_id = self.store.ensure_id(prepared.schema_type, prepared.stored, refs)
        else:
            if wanted_id < 1:
                raise unprocessable(ID_DOES_NOT_MATCH, f"Invalid schema id {wanted_id}")
            taken = self._schema(wanted_id)
            if taken is not None and (taken.schema_type, taken.references) == (
                    prepared.schema_type, refs) and (
                    taken.schema in (prepared.stored, prepared.canonical)
                    or self._prepare_stored(taken).canonical == prepared.canonical):
                schema_id = wanted_id
            elif taken is not None:
                raise unprocessable(OPERATION_NOT_PERMITTED, f"Overwrite new schema with id "
                                    f"{wanted_id} is not permitted.")
            else:
                try:
                    schema_id = self.store.import_id(wanted_id, prepared.schema_type,
                                                     prepared.stored, refs)
                except IdTakenError:
                    raise unprocessable(OPERATION_NOT_PERMITTED, f"Overwrite new schema with "
                                        f"id {wanted_id} is not permitted.") from None
        versions = self.store.versions(subject)
        number = wanted_version or (versions[-1].version if versions else 0) + 1
        found = self.store.version(subject, number)
        if found is not None:
            if found.id == schema_id:
                return {"id": schema_id, "version": number}
            raise unprocessable(OPERATION_NOT_PERMITTED, f"Overwrite of {subject} version "
                                f"{number} (schema id {found.id}) is not permitted.")
        try:
            self.store.create_version(subject, number, schema_id)
        except VersionTakenError:
            raise unprocessable(OPERATION_NOT_PERMITTED, f"{subject} version {number} was "
                                "just imported by another request") from None
        return {"id": schema_id, "version": number}

    def _incompatibilities(self, prepared: formats.Prepared, against: Sequence[SubjectVersion],
                           level: str, *, all_versions: bool) -> list[str]:
        """Why ``prepared`` is not compatible with ``against`` (oldest first) at ``level``.
        Non-transitive levels check the latest only."""
        if level == "NONE" or not against:
            return []
        chosen = list(against) if level.endswith("_TRANSITIVE") and all_versions \
            else list(against)[-1:]
        previous = [self._prepare_stored(self._require_schema(v.id)) for v in chosen]
        previous = [p for p in previous if p.schema_type == prepared.schema_type] or previous
        if any(p.schema_type != prepared.schema_type for p in previous):
            return [f"Incompatible schema type: the subject holds {previous[-1].schema_type} "
                    f"schemas, the new one is {prepared.schema_type}"]
        return formats.check_compatibility(prepared, previous, level)

    def check(self, subject: str, version: str | int | None, body: Mapping[str, Any], *,
              normalize: bool = False, verbose: bool = False) -> dict[str, Any]:
        """``POST /compatibility/subjects/{s}/versions[/{v}]``: against one version (``v``),
        or against the versions the subject's level names (``version`` None)."""
        schema_type, text, refs = self._request_schema(body)
        prepared = formats.prepare(schema_type, text, self._resolve(refs), normalize=normalize)
        level = self.compatibility_of(subject)
        if version is None:
            against = self._live(subject)
            messages = self._incompatibilities(prepared, against, level, all_versions=True)
        else:
            try:
                one = self._version(subject, version)
            except RegistryError as exc:
                if exc.error_code == SUBJECT_NOT_FOUND and parse_version(version) is None:
                    return {"is_compatible": True, **({"messages": []} if verbose else {})}
                raise
            messages = self._incompatibilities(prepared, [one], level, all_versions=False)
        answer: dict[str, Any] = {"is_compatible": not messages}
        if verbose:
            answer["messages"] = messages
        return answer

    # ------------------------------------------------------------------ deletes
    def delete_version(self, subject: str, version: str | int, *, permanent: bool = False
                       ) -> int:
        self._require_writable(subject)
        found = self._version(subject, version, deleted=True)
        if parse_version(version) is None and not permanent:
            found = self._version(subject, version)
        referencing = self._referencing_ids(subject, found.version)
        if referencing:
            raise unprocessable(REFERENCE_EXISTS, f"One or more references exist to the schema "
                                f"{{subject={subject},version={found.version}}} (ids "
                                f"{', '.join(map(str, referencing))})")
        if permanent:
            if not found.deleted:
                raise not_found(VERSION_NOT_SOFT_DELETED, f"Subject '{subject}' Version "
                                f"{found.version} was not deleted first before being "
                                "permanently deleted")
            self.store.remove_version(subject, found.version)
        else:
            if found.deleted:
                raise not_found(VERSION_SOFT_DELETED, f"Subject '{subject}' Version "
                                f"{found.version} was soft deleted. Set permanent=true to "
                                "delete permanently")
            self.store.set_deleted(subject, found.version)
        return found.version

    def delete_subject(self, subject: str, *, permanent: bool = False) -> list[int]:
        self._require_writable(subject)
        versions = self.store.versions(subject)
        if not versions:
            raise not_found(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        live = [v for v in versions if not v.deleted]
        if permanent and live:
            raise not_found(SUBJECT_NOT_SOFT_DELETED, f"Subject '{subject}' was not deleted "
                            "first before being permanently deleted")
        if not permanent and not live:
            raise not_found(SUBJECT_SOFT_DELETED, f"Subject '{subject}' was soft deleted. Set "
                            "permanent=true to delete permanently")
        for version in versions:
            referencing = self._referencing_ids(subject, version.version)
            if referencing:
                raise unprocessable(REFERENCE_EXISTS, f"One or more references exist to the "
                                    f"schema {{subject={subject},version={version.version}}} "
                                    f"(ids {', '.join(map(str, referencing))})")
        if permanent:
            for version in versions:
                self.store.remove_version(subject, version.version)
            self.store.set_compatibility(subject, None)
            self.store.set_mode(subject, None)
            return [v.version for v in versions]
        for version in live:
            self.store.set_deleted(subject, version.version)
        return [v.version for v in live]

    # ------------------------------------------------------------------ config
    def get_config(self, subject: str | None, *, default_to_global: bool = False
                   ) -> dict[str, Any]:
        if subject is None:
            return {"compatibilityLevel": self.compatibility_of(None)}
        level = self.store.compatibility(subject)
        if level is None:
            if not default_to_global:
                raise not_found(SUBJECT_COMPATIBILITY_NOT_CONFIGURED, f"Subject '{subject}' "
                                "does not have subject-level compatibility configured")
            level = self.compatibility_of(None)
        return {"compatibilityLevel": level}

    def set_config(self, subject: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        level = body.get("compatibility") if isinstance(body, Mapping) else None
        if level is None and isinstance(body, Mapping):
            level = body.get("compatibilityLevel")
        if not isinstance(level, str) or level.upper() not in COMPATIBILITY_LEVELS:
            raise unprocessable(INVALID_COMPATIBILITY_LEVEL, f"Invalid compatibility level "
                                f"{level!r}: expected one of {', '.join(COMPATIBILITY_LEVELS)}")
        if subject is not None:
            _check_subject(subject)
            self._require_writable(subject)
        self.store.set_compatibility(subject, level.upper())
        return {"compatibility": level.upper()}

    def delete_config(self, subject: str | None) -> dict[str, Any]:
        previous = self.compatibility_of(subject) if subject is None else \
            self.store.compatibility(subject)
        if subject is not None and previous is None:
            raise not_found(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        self.store.set_compatibility(subject, None)
        return {"compatibilityLevel": previous}

    # ------------------------------------------------------------------ mode
    def get_mode(self, subject: str | None, *, default_to_global: bool = False
                 ) -> dict[str, Any]:
        if subject is None:
            return {"mode": self.mode_of(None)}
        mode = self.store.mode(subject)
        if mode is None:
            if not default_to_global:
                raise not_found(SUBJECT_MODE_NOT_CONFIGURED, f"Subject '{subject}' does not "
                                "have subject-level mode configured")
            mode = self.mode_of(None)
        return {"mode": mode}

    def set_mode(self, subject: str | None, body: Mapping[str, Any], *, force: bool = False
                 ) -> dict[str, Any]:
        mode = body.get("mode") if isinstance(body, Mapping) else None
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise unprocessable(INVALID_MODE, f"Invalid mode {mode!r}: expected one of "
                                f"{', '.join(MODES)}")
        mode = mode.upper()
        if subject is not None:
            _check_subject(subject)
        if mode == "IMPORT" and not force:
            holding = [subject] if subject is not None and self.store.versions(subject) else (
                self.store.subjects() if subject is None else [])
            if holding:
                raise unprocessable(OPERATION_NOT_PERMITTED, "Cannot import since found "
                                    f"existing subjects ({', '.join(holding[:5])}); use "
                                    "force=true to import anyway")
        self.store.set_mode(subject, mode)
        return {"mode": mode}

    def delete_mode(self, subject: str) -> dict[str, Any]:
        previous = self.store.mode(subject)
        if previous is None:
            raise not_found(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        self.store.set_mode(subject, None)
        return {"mode": previous}


def _optional_int(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise unprocessable(INVALID_SCHEMA, f"\"{key}\" must be an integer, got {value!r}")
    return value


def _incompatible_message(level: str, messages: Sequence[str]) -> str:
    shown = "; ".join(messages[:10])
    return (f"Schema being registered is incompatible with an earlier schema for subject "
            f"(compatibility level {level}): {shown}")
