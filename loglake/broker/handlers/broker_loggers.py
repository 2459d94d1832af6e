"""Broker loggers: Kafka's BROKER_LOGGER config resource (``kafka-configs --entity-type
broker-loggers``), this broker process's Python loggers and their levels, described and changed
at run time as Kafka's ``Log4jController`` / ``RuntimeLoggerManager`` do.

* The resource name must be this broker's id: empty answers INVALID_REQUEST "Broker id must not
  be empty", another id or a non-number INVALID_REQUEST (Kafka's texts).
* DescribeConfigs lists ``root`` (Python's root logger) and every logger the process has created
  (``logging.Logger.manager.loggerDict``, placeholders left out), each with its effective level
  as a log4j level name, source DYNAMIC_BROKER_LOGGER_CONFIG (6), not read-only, no synonyms.
* IncrementalAlterConfigs (CLUSTER ALTER_CONFIGS, checked by the caller; everything checked
  before anything changes): SET a logger that exists to one of Kafka's levels (FATAL, ERROR,
  WARN, INFO, DEBUG, TRACE; else INVALID_CONFIG), DELETE unsets its own level so it inherits
  again (the root's cannot be removed: INVALID_REQUEST); an unknown logger is INVALID_CONFIG
  "Logger X does not exist!", APPEND/SUBTRACT INVALID_REQUEST. The change lasts until the
  process restarts, as Kafka's.

Levels map onto Python's: FATAL = CRITICAL, WARN = WARNING, TRACE = 5 (below DEBUG); described
levels map back (CRITICAL and above FATAL, below DEBUG TRACE). ``logging``'s own lock makes the
calls safe from the event loop's thread; nothing here blocks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from loglake.errors import InvalidConfigError, InvalidRequestError

ROOT = "root"
SOURCE_DYNAMIC_BROKER_LOGGER = 6
CONFIG_TYPE_STRING = 2
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
TRACE = 5
LEVELS = {"FATAL": logging.CRITICAL, "ERROR": logging.ERROR, "WARN": logging.WARNING,
          "INFO": logging.INFO, "DEBUG": logging.DEBUG, "TRACE": TRACE}
"""Kafka's valid log levels (``LogLevelConfig.VALID_LOG_LEVELS``) as Python levels."""
_OP_NAMES = {OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}


def check_broker_id(resource_name: str, broker_id: int) -> None:
    """Kafka's check of a BROKER_LOGGER resource name; InvalidRequestError if it is not this
    broker's id."""
    if not resource_name:
        raise InvalidRequestError("Broker id must not be empty")
    try:
        requested = int(resource_name)
    except ValueError:
        raise InvalidRequestError(
            f"Node id must be an integer, but it is: {resource_name}") from None
    if requested != broker_id:
        raise InvalidRequestError(
            f"Unexpected broker id, expected {broker_id} but received {resource_name}")


def level_name(level: int) -> str:
    """The log4j name of a Python level."""
    if level >= logging.CRITICAL:
        return "FATAL"
    for name in ("ERROR", "WARN", "INFO", "DEBUG"):
        if level >= LEVELS[name]:
            return name
    return "TRACE"


def _existing(name: str) -> logging.Logger | None:
    if name == ROOT:
        return logging.getLogger()
    found = logging.Logger.manager.loggerDict.get(name)
    return found if isinstance(found, logging.Logger) else None


def describe(keys: Iterable[str] | None) -> list[dict[str, Any]]:
    """DescribeConfigs entries of the loggers (all, or those named in ``keys``)."""
    names = [ROOT, *sorted(name for name, logger in
                           list(logging.Logger.manager.loggerDict.items())
                           if isinstance(logger, logging.Logger))]
    wanted = set(keys) if keys else None
    entries = []
    for name in names:
        logger = _existing(name)
        if logger is None or (wanted is not None and name not in wanted):
            continue
        entries.append({"name": name, "value": level_name(logger.getEffectiveLevel()),
                        "read_only": False, "config_source": SOURCE_DYNAMIC_BROKER_LOGGER,
                        "is_sensitive": False, "is_default": False,
                        "config_type": CONFIG_TYPE_STRING, "synonyms": [],
                        "documentation": None})
    return entries


def validate(operations: Iterable[Any]) -> None:
    """Kafka's checks of every operation (see the module docstring); raises InvalidRequestError
    or InvalidConfigError."""
    for op in operations:
        kind = op.config_operation
        if kind in _OP_NAMES:
            raise InvalidRequestError(
                f"{_OP_NAMES[kind]} operation is not allowed for the BROKER_LOGGER resource")
        if kind not in (OP_SET, OP_DELETE):
            raise InvalidRequestError(f"Unknown operation type {kind} is not allowed for the "
                                      "BROKER_LOGGER resource")
        if _existing(op.name) is None:
            raise InvalidConfigError(f"Logger {op.name} does not exist!")
        if kind == OP_SET and op.value not in LEVELS:
            raise InvalidConfigError(
                f"Cannot set the log level of {op.name} to {op.value} as it is not a supported "
                f"log level. Valid log levels are {', '.join(LEVELS)}")
        if kind == OP_DELETE and op.name == ROOT:
            raise InvalidRequestError(
                f"Removing the log level of the {ROOT} logger is not allowed")


def apply(operations: Iterable[Any]) -> None:
    """Apply operations :func:`validate` accepted."""
    for op in operations:
        logger = _existing(op.name)
        if logger is None:
            continue
        logger.setLevel(LEVELS[op.value] if op.config_operation == OP_SET else logging.NOTSET)
