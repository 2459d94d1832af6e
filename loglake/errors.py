"""The single root of loglake's exceptions and their mapping to Kafka wire error codes.

Every error that can reach a client carries a :class:`kio.schema.errors.ErrorCode`; the code is
what goes on the wire, the message is what an operator reads. One way to attach it: a subclass
declares ``code`` (one class per condition), or, where the code is only known at run time (a
code relayed from the wire, a group-protocol answer), the constructor takes ``code=``.
``retriable`` comes from Kafka's own registry (the code, not the class, decides it), and retry
decisions read it rather than keeping their own lists of codes.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class LoglakeError(Exception):
    """Base of all loglake errors: a wire error code plus a message and an optional hint."""

    code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str, *, hint: str | None = None,
                 code: ErrorCode | None = None) -> None:
        """``code`` overrides the class's code for this instance (see the module)."""
        super().__init__(message if hint is None else f"{message} (hint: {hint})")
        self.message = message
        self.hint = hint
        if code is not None:
            self.code = code

    @property
    def retriable(self) -> bool:
        """Kafka's flag for the code: the same request may succeed if sent again."""
        return bool(self.code.retriable)


class CorruptRecordError(LoglakeError):
    """A record batch failed its CRC or framing check."""

    code = ErrorCode.corrupt_message


class MessageTooLargeError(LoglakeError):
    """A batch exceeds max.message.bytes."""

    code = ErrorCode.message_too_large


class InvalidConfigError(LoglakeError):
    """A configuration value is not acceptable."""

    code = ErrorCode.invalid_config


class InvalidTopicError(LoglakeError):
    """A topic name is not legal."""

    code = ErrorCode.invalid_topic_exception


class TopicExistsError(LoglakeError):
    """The topic already exists."""

    code = ErrorCode.topic_already_exists


RecordError = tuple[int, str]
"""Kafka's RecordError: (index of the record in its batch, what is wrong with it)."""


class InvalidRecordError(LoglakeError):
    """A record batch is structurally invalid. ``record_errors`` names the offending records
    (index in the batch, message) for the Produce response (v8+, KIP-467)."""

    code = ErrorCode.invalid_record

    def __init__(self, message: str, *, hint: str | None = None,
                 record_errors: tuple[RecordError, ...] = ()) -> None:
        super().__init__(message, hint=hint)
        self.record_errors = record_errors


class InvalidTimestampError(LoglakeError):
    """A record timestamp is not acceptable; ``record_errors`` as for InvalidRecordError."""

    code = ErrorCode.invalid_timestamp

    def __init__(self, message: str, *, hint: str | None = None,
                 record_errors: tuple[RecordError, ...] = ()) -> None:
        super().__init__(message, hint=hint)
        self.record_errors = record_errors


class UnsupportedCompressionTypeError(LoglakeError):
    """A batch's compression codec is unknown, or zstd on a Produce request below v7."""

    code = ErrorCode.unsupported_compression_type


class RecordListTooLargeError(LoglakeError):
    """A produced batch is larger than the topic's segment.bytes (Kafka's
    RecordBatchTooLargeException)."""

    code = ErrorCode.record_list_too_large


class TransactionalIdAuthorizationError(LoglakeError):
    """A transactional write without an authorised transactional id (a transactional batch in
    a Produce request that names none)."""

    code = ErrorCode.transactional_id_authorization_failed


class InvalidPartitionsError(LoglakeError):
    """The partition count is not valid."""

    code = ErrorCode.invalid_partitions


class InvalidRequestError(LoglakeError):
    """The request is malformed."""

    code = ErrorCode.invalid_request


class KafkaStorageError(LoglakeError):
    """The replica's log on this broker cannot be opened or read (an offline replica)."""

    code = ErrorCode.kafka_storage_error


class NotLeaderError(LoglakeError):
    """This broker does not lead the partition; the client should refresh its metadata."""

    code = ErrorCode.not_leader_or_follower


class InvalidRequiredAcksError(LoglakeError):
    """acks must be 0, 1 or -1 (all)."""

    code = ErrorCode.invalid_required_acks


class UnknownTopicError(LoglakeError):
    """The topic or partition does not exist on this broker."""

    code = ErrorCode.unknown_topic_or_partition


class OffsetOutOfRangeError(LoglakeError):
    """The requested offset is outside the log's range."""

    code = ErrorCode.offset_out_of_range


class OutOfOrderSequenceError(LoglakeError):
    """An idempotent producer skipped a sequence number."""

    code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(LoglakeError):
    """An idempotent producer used a fenced (older) epoch."""

    code = ErrorCode.invalid_producer_epoch


class InvalidTxnStateError(LoglakeError):
    """A producer's write does not fit its transaction's state (e.g. a non-transactional batch
    while its transaction is open)."""

    code = ErrorCode.invalid_txn_state


class TransactionCoordinatorFencedError(LoglakeError):
    """A transaction marker came from a coordinator older than the last one seen for the
    producer (a zombie coordinator)."""

    code = ErrorCode.transaction_coordinator_fenced


class UnknownProducerIdError(LoglakeError):
    """The broker holds no state for this producer id."""

    code = ErrorCode.unknown_producer_id


class InvalidReplicationFactorError(LoglakeError):
    """The replication factor is larger than the number of live brokers or not positive."""

    code = ErrorCode.invalid_replication_factor


class NotEnoughReplicasError(LoglakeError):
    """acks=all refused: the ISR is smaller than min.insync.replicas."""

    code = ErrorCode.not_enough_replicas


class NotEnoughReplicasAfterAppendError(LoglakeError):
    """acks=all: written, but the ISR shrank below min.insync.replicas before it committed."""

    code = ErrorCode.not_enough_replicas_after_append


class RequestTimedOutError(LoglakeError):
    """The request did not complete within its timeout."""

    code = ErrorCode.request_timed_out


class InvalidReplicaAssignmentError(LoglakeError):
    """A manual replica assignment names unknown or duplicate brokers, or does not fit."""

    code = ErrorCode.invalid_replica_assignment


class PolicyViolationError(LoglakeError):
    """The request contradicts the topic's configuration (DeleteRecords on a compacted topic)."""

    code = ErrorCode.policy_violation


class ElectionNotNeededError(LoglakeError):
    """ElectLeaders: the partition already has the leader the election would choose."""

    code = ErrorCode.election_not_needed


class PreferredLeaderNotAvailableError(LoglakeError):
    """ElectLeaders (preferred): the first assigned replica is not alive or not in the ISR."""

    code = ErrorCode.preferred_leader_not_available


class EligibleLeadersNotAvailableError(LoglakeError):
    """ElectLeaders (unclean): no live replica can lead the partition."""

    code = ErrorCode.eligible_leaders_not_available


class NoReassignmentInProgressError(LoglakeError):
    """AlterPartitionReassignments: a cancellation (null replicas) of a partition that has no
    reassignment in progress."""

    code = ErrorCode.no_reassignment_in_progress


class FencedLeaderEpochError(LoglakeError):
    """A request names a leader epoch older than the partition's current one (KIP-320): the
    client's metadata is stale."""

    code = ErrorCode.fenced_leader_epoch


class UnknownLeaderEpochError(LoglakeError):
    """A request names a leader epoch newer than the partition's current one (KIP-320): this
    replica has not caught up with the new leadership yet."""

    code = ErrorCode.unknown_leader_epoch


class ThrottlingQuotaExceededError(LoglakeError):
    """KIP-599: the user/client id's ``controller_mutation_rate`` quota is used up; the topic
    was not created/deleted (strict quota versions)."""

    code = ErrorCode.throttling_quota_exceeded


class SaslAuthenticationError(LoglakeError):
    """SASL authentication to a broker failed (bad credentials, a mechanism the listener does
    not enable, or an exchange out of order)."""

    code = ErrorCode.sasl_authentication_failed


class InvalidSchemaError(LoglakeError):
    """A schema text does not parse, or names a reference it was not given (the registry
    answers Confluent's 42201 with the one-line message)."""

    code = ErrorCode.invalid_request


class SchemaDecodeError(LoglakeError):
    """A framed key or value does not decode: not framed, an unknown schema id, a payload its
    schema does not read (loglake/schemas/; the tierer turns it into a row's ``*_error``)."""

    code = ErrorCode.invalid_record


class IncompatibleTypeError(LoglakeError):
    """A schema's column type cannot merge into a table column's type (a field whose type
    would change): records of that schema get ``*_error`` instead of typed columns."""

    code = ErrorCode.invalid_record
