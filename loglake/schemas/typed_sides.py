"""Which sides (key, value) of a topic are typed, and by which subject.

A side is typed when the topic's ``schema.columns.enable`` is true AND either its subject
config is set (``value.schema.subject`` / ``key.schema.subject``) or the TopicNameStrategy
subject (``<topic>-value`` / ``<topic>-key``) exists in the registry. Records are decoded by
their own schema id (any id in the store), not only the subject's: the subject decides THAT a
side is typed and contributes its versions' types to the table type (arrow_types.side_type).

Pure: the caller passes ``subject_exists`` (a ZooKeeper read in the broker: run it off the
event loop and cache it). Thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol


class SchemaTopicConfig(Protocol):
    """The topic config fields this reads (config.TopicConfig has them)."""

    @property
    def value_schema_subject(self) -> str: ...

    @property
    def key_schema_subject(self) -> str: ...

    @property
    def schema_columns_enable(self) -> bool: ...


class TypedSides(NamedTuple):
    """The subject typing each side, None for an untyped side."""

    key_subject: str | None
    value_subject: str | None

    @property
    def any(self) -> bool:
        return self.key_subject is not None or self.value_subject is not None

    def by_side(self) -> dict[str, str]:
        """``{"key": subject, "value": subject}`` with the typed sides only."""
        return {side: subject for side, subject in
                (("key", self.key_subject), ("value", self.value_subject))
                if subject is not None}

    def subject(self, side: str) -> str | None:
        """The subject of ``"key"`` or ``"value"``."""
        return self.key_subject if side == "key" else self.value_subject


UNTYPED = TypedSides(None, None)


def default_subject(topic: str, side: str) -> str:
    """Confluent's TopicNameStrategy subject of a side: ``<topic>-key`` / ``<topic>-value``."""
    return f"{topic}-{side}"


def configured_subject(topic: str, topic_config: SchemaTopicConfig, side: str) -> str:
    """The subject a side of ``topic`` names: its ``value.schema.subject`` /
    ``key.schema.subject`` when set, else :func:`default_subject` (whether or not it exists)."""
    configured = (topic_config.value_schema_subject if side == "value"
                  else topic_config.key_schema_subject)
    return configured.strip() or default_subject(topic, side)


def typed_sides(topic: str, topic_config: SchemaTopicConfig,
                subject_exists: Callable[[str], bool]) -> TypedSides:
    """The typed sides of ``topic`` (module docstring). ``subject_exists(subject)``: whether
    the registry has the subject (called only for sides without a configured subject)."""
    if not topic_config.schema_columns_enable:
        return UNTYPED

    def side(configured: str, name: str) -> str | None:
        if configured:
            return configured
        subject = default_subject(topic, name)
        return subject if subject_exists(subject) else None

    return TypedSides(side(topic_config.key_schema_subject, "key"),
                      side(topic_config.value_schema_subject, "value"))
