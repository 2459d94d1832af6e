"""What a Schema Registry stores: schemas, their references and subject versions.

Plain frozen dataclasses (picklable: the tierer hands schemas to its worker process; no I/O,
thread-safe). The ZooKeeper store is catalog/schemas.py; the REST service loglake/registry/.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SchemaType = str
"""``AVRO``, ``JSON`` or ``PROTOBUF`` (Confluent's names; AVRO when a request omits it)."""
SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")


@dataclass(frozen=True)
class SchemaReference:
    """A named reference of a schema to a version of another subject (Confluent's
    ``{"name","subject","version"}``: an Avro named type, a JSON ``$ref`` URL, a Protobuf
    import path)."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as stored under its id (picklable: the tierer hands these to its worker)."""

    id: int
    schema_type: SchemaType
    schema: str
    references: tuple[SchemaReference, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class SubjectVersion:
    """Version ``version`` of ``subject``: schema ``id`` (``deleted``: soft-deleted)."""

    subject: str
    version: int
    id: int
    deleted: bool = False
