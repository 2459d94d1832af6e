"""Errors of the Spark data source ``loglake`` (options, data loss, reads), all LoglakeErrors.

Raised on the driver while Spark plans a query (bad options, unknown topics, offsets that no
longer exist) or inside a task (a range that cannot be read completely). Spark wraps them; the
message here is the line an operator reads, so it names the option, topic and partition.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from loglake.errors import InvalidConfigError, LoglakeError, OffsetOutOfRangeError


class SourceOptionError(InvalidConfigError):
    """A ``format("loglake")`` option is missing, malformed, or conflicts with another."""


class DataLossError(OffsetOutOfRangeError):
    """Offsets a query needs are gone (retention, a deleted topic or partition) and
    ``failOnDataLoss`` is true (the default)."""


class RangeReadError(LoglakeError):
    """A task could not read its whole offset range from the brokers in time."""

    code = ErrorCode.request_timed_out
