"""Registered schemas in ZooKeeper: the durable state every Schema Registry instance shares.

Layout under the cluster chroot (JSON values)::

    /loglake/schemas/id_seq/id-<seq>          persistent sequential, empty: one per id ever
                                              handed out; ZooKeeper's parent counter makes
                                              ``<seq>`` unique and increasing, so an id is
                                              never handed out twice, even after deletes
    /loglake/schemas/ids/<id>                 {"schemaType","schema","references"}: written
                                              once, never changed (``references``: a list of
                                              {"name","subject","version"})
    /loglake/schemas/fingerprints/<sha256>    {"id"}: the id of a (type, schema, references)
                                              content, so the same schema registered under any
                                              subject gets the same id (as Confluent's)
    /loglake/schemas/subjects/<subject>/<v>   {"id","deleted"}: version ``v`` (decimal) of a
                                              subject; ``deleted`` true after a soft delete;
                                              hard delete removes the znode
    /loglake/schemas/config/<subject>         {"compatibilityLevel"}; ``<subject>`` ``__GLOBAL``
                                              for the registry-wide level
    /loglake/schemas/mode/<subject>           {"mode"}; ``__GLOBAL`` likewise

``<subject>`` is percent-encoded (:func:`subject_node`) so any subject name is one znode name.

Invariants: an id's znode is created in the same ZooKeeper transaction as its fingerprint, so
two registrars racing on the same content agree on one id (the loser's sequence number becomes
an unused gap: ids may skip, never repeat). A version is created with ``create``, so two
registrars racing on the same subject cannot both take a version number; the loser sees
:class:`VersionTakenError` and retries (re-checking compatibility). Schema ids stay readable
after every version using them is hard-deleted (Confluent keeps serving ids too), so records
framed with an id always stay decodable.

Imported ids (the registry's IMPORT mode, :meth:`SchemaStore.import_id`) are created directly
under ``ids/``; :meth:`SchemaStore.ensure_id` then skips a sequence number whose id is taken.

Errors: kazoo's connection errors become ZooKeeperUnavailableError. Thread-safety: stateless
beyond kazoo (thread-safe); blocking: call it off any event loop.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import urllib.parse
from collections.abc import Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from loglake.catalog.zookeeper import _typed_errors
from loglake.errors import LoglakeError
from loglake.schemas.model import (
    RegisteredSchema,
    SchemaReference,
    SchemaType,
    SubjectVersion,
)

ROOT = "/loglake/schemas"
ID_SEQ = f"{ROOT}/id_seq"
IDS = f"{ROOT}/ids"
FINGERPRINTS = f"{ROOT}/fingerprints"
SUBJECTS = f"{ROOT}/subjects"
CONFIG = f"{ROOT}/config"
MODE = f"{ROOT}/mode"
GLOBAL = "__GLOBAL"
"""The ``config``/``mode`` node name of the registry-wide setting."""

ID_ATTEMPTS = 1000
"""How many sequence numbers :meth:`SchemaStore.ensure_id` draws before giving up (each one
already taken by an imported id costs one)."""


class VersionTakenError(LoglakeError):
    """Another registrar created this subject version first: re-read and retry."""


class IdTakenError(LoglakeError):
    """An import names a schema id that holds other content."""


def subject_node(subject: str) -> str:
    """The znode name of a subject (percent-encoded; ``.`` and ``..`` escaped)."""
    node = urllib.parse.quote(subject, safe="-_.")
    return node.replace(".", "%2E") if node in (".", "..") else node


def subject_of_node(node: str) -> str:
    return urllib.parse.unquote(node)


def fingerprint(schema_type: SchemaType, schema: str,
                references: Sequence[SchemaReference] = ()) -> str:
    """What makes two registrations the same schema: type, text and references (the caller
    passes the text in its canonical form, so equal schemas written differently match)."""
    content = json.dumps([schema_type, schema, [r.to_json() for r in references]],
                         sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(content.encode()).hexdigest()


def _load(raw: bytes) -> dict[str, Any]:
    value = json.loads(raw.decode() or "{}")
    return value if isinstance(value, dict) else {}


class SchemaStore:
    """Schemas, ids and subject versions in ZooKeeper (see the module docstring)."""

    def __init__(self, zk: KazooClient) -> None:
        self._zk = zk

    # ------------------------------------------------------------------ ids
    def schema(self, schema_id: int) -> RegisteredSchema | None:
        """The schema registered under ``schema_id`` (None: no such id)."""
        with _typed_errors(f"reading schema id {schema_id}"):
            try:
                raw, _ = self._zk.get(f"{IDS}/{int(schema_id)}")
            except NoNodeError:
                return None
        value = _load(raw)
        return RegisteredSchema(
            int(schema_id), str(value.get("schemaType", "AVRO")), str(value["schema"]),
            tuple(SchemaReference(str(r["name"]), str(r["subject"]), int(r["version"]))
                  for r in value.get("references") or ()))

    def ids(self) -> list[int]:
        """Every schema id, ascending."""
        with _typed_errors("listing schema ids"):
            children = self._children(IDS)
        return sorted(int(c) for c in children if c.isdigit())

    def id_for(self, schema_type: SchemaType, schema: str,
               references: Sequence[SchemaReference] = ()) -> int | None:
        """The id of this exact content, if it was ever registered."""
        with _typed_errors("looking up a schema"):
            try:
                raw, _ = self._zk.get(
                    f"{FINGERPRINTS}/{fingerprint(schema_type, schema, references)}")
            except NoNodeError:
                return None
        return int(_load(raw)["id"])

    def ensure_id(self, schema_type: SchemaType, schema: str,
                  references: Sequence[SchemaReference] = ()) -> int:
        """The id of this content, handing out a new one if it has none (race-safe: see the
        module docstring)."""
        found = self.id_for(schema_type, schema, references)
        if found is not None:
            return found
        print_path = f"{FINGERPRINTS}/{fingerprint(schema_type, schema, references)}"
        body = json.dumps({"schemaType": schema_type, "schema": schema,
                           "references": [r.to_json() for r in references]}).encode()
        with _typed_errors("registering a schema id"):
            for path in (ID_SEQ, IDS, FINGERPRINTS):
                self._zk.ensure_path(path)
        for _attempt in range(ID_ATTEMPTS):
            with _typed_errors("registering a schema id"):
                seq_path = self._zk.create(f"{ID_SEQ}/id-", b"", sequence=True)
                new_id = int(seq_path.rsplit("-", 1)[1]) + 1
                txn = self._zk.transaction()
                txn.create(f"{IDS}/{new_id}", body)
                txn.create(print_path, json.dumps({"id": new_id}).encode())
                results = txn.commit()
            if not any(isinstance(r, Exception) for r in results):
                return new_id
            found = self.id_for(schema_type, schema, references)
            if found is not None:
                return found
            # the id was taken by an import (import_id): draw the next sequence number
        raise LoglakeError(f"could not register a schema id: {ID_ATTEMPTS} ids in a row were "
                           "taken by imports")

    def import_id(self, schema_id: int, schema_type: SchemaType, schema: str,
                  references: Sequence[SchemaReference] = ()) -> int:
        """Store this content under the given id (the registry's IMPORT mode). An id handed
        out later by :meth:`ensure_id` skips it. Raises :class:`IdTakenError` if the id holds
        other content. The fingerprint keeps pointing at an earlier id of the same content."""
        existing = self.schema(schema_id)
        if existing is not None:
            if (existing.schema_type, existing.schema, existing.references) == (
                    schema_type, schema, tuple(references)):
                return schema_id
            raise IdTakenError(f"schema id {schema_id} holds another schema")
        body = json.dumps({"schemaType": schema_type, "schema": schema,
                           "references": [r.to_json() for r in references]}).encode()
        print_path = f"{FINGERPRINTS}/{fingerprint(schema_type, schema, references)}"
        with _typed_errors(f"importing schema id {schema_id}"):
            for path in (ID_SEQ, IDS, FINGERPRINTS):
                self._zk.ensure_path(path)
            try:
                self._zk.create(f"{IDS}/{int(schema_id)}", body)
            except NodeExistsError:
                return self.import_id(schema_id, schema_type, schema, references)
            with contextlib.suppress(NodeExistsError):
                self._zk.create(print_path, json.dumps({"id": int(schema_id)}).encode())
        return int(schema_id)

    # ------------------------------------------------------------------ subjects
    def subjects(self) -> list[str]:
        """Every subject with at least one version znode (soft-deleted ones included)."""
        with _typed_errors("listing subjects"):
            names = [subject_of_node(node) for node in self._children(SUBJECTS)
                     if self._children(f"{SUBJECTS}/{node}")]
        return sorted(names)

    def versions(self, subject: str) -> list[SubjectVersion]:
        """Versions of ``subject`` ascending, soft-deleted ones included ([]: none)."""
        base = f"{SUBJECTS}/{subject_node(subject)}"
        result = []
        with _typed_errors(f"reading subject {subject}"):
            for child in sorted((c for c in self._children(base) if c.isdigit()), key=int):
                try:
                    raw, _ = self._zk.get(f"{base}/{child}")
                except NoNodeError:
                    continue
                value = _load(raw)
                result.append(SubjectVersion(subject, int(child), int(value["id"]),
                                             bool(value.get("deleted", False))))
        return result

    def version(self, subject: str, version: int) -> SubjectVersion | None:
        """One version of ``subject`` (soft-deleted included; None: no such version)."""
        path = f"{SUBJECTS}/{subject_node(subject)}/{int(version)}"
        with _typed_errors(f"reading {subject} version {version}"):
            try:
                raw, _ = self._zk.get(path)
            except NoNodeError:
                return None
        value = _load(raw)
        return SubjectVersion(subject, int(version), int(value["id"]),
                              bool(value.get("deleted", False)))

    def referenced(self, reference: SchemaReference) -> RegisteredSchema | None:
        """The schema a reference names (its subject version's id; None: gone)."""
        found = self.version(reference.subject, reference.version)
        return None if found is None else self.schema(found.id)

    def create_version(self, subject: str, version: int, schema_id: int) -> SubjectVersion:
        """Create version ``version`` of ``subject`` (VersionTakenError if it exists)."""
        base = f"{SUBJECTS}/{subject_node(subject)}"
        with _typed_errors(f"registering {subject} version {version}"):
            self._zk.ensure_path(base)
            try:
                self._zk.create(f"{base}/{int(version)}",
                                json.dumps({"id": schema_id, "deleted": False}).encode())
            except NodeExistsError:
                raise VersionTakenError(f"{subject} version {version} exists") from None
        return SubjectVersion(subject, int(version), schema_id)

    def set_deleted(self, subject: str, version: int, deleted: bool = True) -> None:
        """Soft-delete (or undelete) one version."""
        path = f"{SUBJECTS}/{subject_node(subject)}/{int(version)}"
        with _typed_errors(f"soft-deleting {subject} version {version}"):
            raw, stat = self._zk.get(path)
            value = _load(raw)
            value["deleted"] = deleted
            self._zk.set(path, json.dumps(value).encode(), version=stat.version)

    def remove_version(self, subject: str, version: int) -> None:
        """Hard-delete one version (its schema id stays readable)."""
        with _typed_errors(f"deleting {subject} version {version}"), contextlib.suppress(
                NoNodeError):
            self._zk.delete(f"{SUBJECTS}/{subject_node(subject)}/{int(version)}")

    def subjects_of_id(self, schema_id: int) -> list[SubjectVersion]:
        """Every live (not soft-deleted) subject version using ``schema_id``."""
        return [v for subject in self.subjects() for v in self.versions(subject)
                if v.id == schema_id and not v.deleted]

    # ------------------------------------------------------------------ config and mode
    def _children(self, path: str) -> list[str]:
        """The children of ``path`` ([]: no such znode)."""
        try:
            return list(self._zk.get_children(path))
        except NoNodeError:
            return []

    def _setting(self, base: str, subject: str | None, key: str) -> str | None:
        node = GLOBAL if subject is None else subject_node(subject)
        with _typed_errors("reading a registry setting"):
            try:
                raw, _ = self._zk.get(f"{base}/{node}")
            except NoNodeError:
                return None
        value = _load(raw).get(key)
        return None if value is None else str(value)

    def _set_setting(self, base: str, subject: str | None, key: str, value: str | None) -> None:
        path = f"{base}/{GLOBAL if subject is None else subject_node(subject)}"
        with _typed_errors("writing a registry setting"):
            if value is None:
                with contextlib.suppress(NoNodeError):
                    self._zk.delete(path)
                return
            body = json.dumps({key: value}).encode()
            try:
                self._zk.set(path, body)
            except NoNodeError:
                self._zk.create(path, body, makepath=True)

    def compatibility(self, subject: str | None = None) -> str | None:
        """The compatibility level set for ``subject`` (None: the registry-wide one) or None
        when none is set there."""
        return self._setting(CONFIG, subject, "compatibilityLevel")

    def set_compatibility(self, subject: str | None, level: str | None) -> None:
        self._set_setting(CONFIG, subject, "compatibilityLevel", level)

    def mode(self, subject: str | None = None) -> str | None:
        return self._setting(MODE, subject, "mode")

    def set_mode(self, subject: str | None, mode: str | None) -> None:
        self._set_setting(MODE, subject, "mode", mode)
