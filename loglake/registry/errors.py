"""The registry's errors: each carries the HTTP status and Confluent's ``error_code``.

The REST layer (:mod:`loglake.registry.app`) answers ``{"error_code": code, "message": ...}``
with the status; the codes are Confluent Schema Registry's (clients such as confluent-kafka's
``SchemaRegistryClient`` branch on them).
"""

from __future__ import annotations

from loglake.errors import LoglakeError

SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
VERSION_SOFT_DELETED = 40406
VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_MODE_NOT_CONFIGURED = 40409
INCOMPATIBLE_SCHEMA = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
REFERENCE_EXISTS = 42206
ID_DOES_NOT_MATCH = 42207
INVALID_SUBJECT = 42208
STORE_ERROR = 50001
OPERATION_TIMEOUT = 50002
UNAUTHORIZED = 401
TOO_MANY_REQUESTS = 429
BAD_REQUEST = 400


class RegistryError(LoglakeError):
    """A request the registry refuses or cannot serve: ``status`` (HTTP) and ``error_code``
    (Confluent's) go on the wire with the message."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code


def not_found(code: int, message: str) -> RegistryError:
    return RegistryError(404, code, message)


def unprocessable(code: int, message: str) -> RegistryError:
    return RegistryError(422, code, message)
