"""The one Kafka error-code table, and the exceptions that carry those codes.

Every error that can reach the wire is a :class:`KafkaError` subclass with a fixed ``code``
and ``retriable`` flag. Layers raise them; the broker's dispatcher converts them to error
codes in one place, and the client converts codes back to exceptions with :func:`error_for`.
Nothing else in strom hard-codes an error number.
"""

from __future__ import annotations

from typing import ClassVar

# (code, NAME, retriable) — Apache Kafka's org.apache.kafka.common.protocol.Errors.
_TABLE: tuple[tuple[int, str, bool], ...] = (
    (-1, "UNKNOWN_SERVER_ERROR", False),
    (0, "NONE", False),
    (1, "OFFSET_OUT_OF_RANGE", False),
    (2, "CORRUPT_MESSAGE", True),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True),
    (4, "INVALID_FETCH_SIZE", False),
    (5, "LEADER_NOT_AVAILABLE", True),
    (6, "NOT_LEADER_OR_FOLLOWER", True),
    (7, "REQUEST_TIMED_OUT", True),
    (8, "BROKER_NOT_AVAILABLE", False),
    (9, "REPLICA_NOT_AVAILABLE", True),
    (10, "MESSAGE_TOO_LARGE", False),
    (11, "STALE_CONTROLLER_EPOCH", False),
    (12, "OFFSET_METADATA_TOO_LARGE", False),
    (13, "NETWORK_EXCEPTION", True),
    (14, "COORDINATOR_LOAD_IN_PROGRESS", True),
    (15, "COORDINATOR_NOT_AVAILABLE", True),
    (16, "NOT_COORDINATOR", True),
    (17, "INVALID_TOPIC_EXCEPTION", False),
    (18, "RECORD_LIST_TOO_LARGE", False),
    (19, "NOT_ENOUGH_REPLICAS", True),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True),
    (21, "INVALID_REQUIRED_ACKS", False),
    (22, "ILLEGAL_GENERATION", False),
    (23, "INCONSISTENT_GROUP_PROTOCOL", False),
    (24, "INVALID_GROUP_ID", False),
    (25, "UNKNOWN_MEMBER_ID", False),
    (26, "INVALID_SESSION_TIMEOUT", False),
    (27, "REBALANCE_IN_PROGRESS", False),
    (28, "INVALID_COMMIT_OFFSET_SIZE", False),
    (29, "TOPIC_AUTHORIZATION_FAILED", False),
    (30, "GROUP_AUTHORIZATION_FAILED", False),
    (31, "CLUSTER_AUTHORIZATION_FAILED", False),
    (32, "INVALID_TIMESTAMP", False),
    (33, "UNSUPPORTED_SASL_MECHANISM", False),
    (34, "ILLEGAL_SASL_STATE", False),
    (35, "UNSUPPORTED_VERSION", False),
    (36, "TOPIC_ALREADY_EXISTS", False),
    (37, "INVALID_PARTITIONS", False),
    (38, "INVALID_REPLICATION_FACTOR", False),
    (39, "INVALID_REPLICA_ASSIGNMENT", False),
    (40, "INVALID_CONFIG", False),
    (41, "NOT_CONTROLLER", True),
    (42, "INVALID_REQUEST", False),
    (43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", False),
    (44, "POLICY_VIOLATION", False),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False),
    (46, "DUPLICATE_SEQUENCE_NUMBER", False),
    (47, "INVALID_PRODUCER_EPOCH", False),
    (48, "INVALID_TXN_STATE", False),
    (49, "INVALID_PRODUCER_ID_MAPPING", False),
    (50, "INVALID_TRANSACTION_TIMEOUT", False),
    (51, "CONCURRENT_TRANSACTIONS", True),
    (52, "TRANSACTION_COORDINATOR_FENCED", False),
    (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False),
    (54, "SECURITY_DISABLED", False),
    (55, "OPERATION_NOT_ATTEMPTED", False),
    (56, "KAFKA_STORAGE_ERROR", True),
    (57, "LOG_DIR_NOT_FOUND", False),
    (58, "SASL_AUTHENTICATION_FAILED", False),
    (59, "UNKNOWN_PRODUCER_ID", False),
    (60, "REASSIGNMENT_IN_PROGRESS", False),
    (61, "DELEGATION_TOKEN_AUTH_DISABLED", False),
    (62, "DELEGATION_TOKEN_NOT_FOUND", False),
    (63, "DELEGATION_TOKEN_OWNER_MISMATCH", False),
    (64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", False),
    (65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED", False),
    (66, "DELEGATION_TOKEN_EXPIRED", False),
    (67, "INVALID_PRINCIPAL_TYPE", False),
    (68, "NON_EMPTY_GROUP", False),
    (69, "GROUP_ID_NOT_FOUND", False),
    (70, "FETCH_SESSION_ID_NOT_FOUND", True),
    (71, "INVALID_FETCH_SESSION_EPOCH", True),
    (72, "LISTENER_NOT_FOUND", True),
    (73, "TOPIC_DELETION_DISABLED", False),
    (74, "FENCED_LEADER_EPOCH", True),
    (75, "UNKNOWN_LEADER_EPOCH", True),
    (76, "UNSUPPORTED_COMPRESSION_TYPE", False),
    (77, "STALE_BROKER_EPOCH", False),
    (78, "OFFSET_NOT_AVAILABLE", True),
    (79, "MEMBER_ID_REQUIRED", False),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", True),
    (81, "GROUP_MAX_SIZE_REACHED", False),
    (82, "FENCED_INSTANCE_ID", False),
    (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True),
    (84, "ELECTION_NOT_NEEDED", True),
    (85, "NO_REASSIGNMENT_IN_PROGRESS", False),
    (86, "GROUP_SUBSCRIBED_TO_TOPIC", False),
    (87, "INVALID_RECORD", False),
    (88, "UNSTABLE_OFFSET_COMMIT", True),
    (89, "THROTTLING_QUOTA_EXCEEDED", True),
    (90, "PRODUCER_FENCED", False),
    (91, "RESOURCE_NOT_FOUND", False),
    (92, "DUPLICATE_RESOURCE", False),
    (93, "UNACCEPTABLE_CREDENTIAL", False),
    (94, "INCONSISTENT_VOTER_SET", False),
    (95, "INVALID_UPDATE_VERSION", False),
    (96, "FEATURE_UPDATE_FAILED", False),
    (97, "PRINCIPAL_DESERIALIZATION_FAILURE", False),
    (98, "SNAPSHOT_NOT_FOUND", False),
    (99, "POSITION_OUT_OF_RANGE", False),
    (100, "UNKNOWN_TOPIC_ID", True),
    (101, "DUPLICATE_BROKER_REGISTRATION", False),
    (102, "BROKER_ID_NOT_REGISTERED", False),
    (103, "INCONSISTENT_TOPIC_ID", True),
    (104, "INCONSISTENT_CLUSTER_ID", False),
    (105, "TRANSACTIONAL_ID_NOT_FOUND", False),
    (106, "FETCH_SESSION_TOPIC_ID_ERROR", True),
    (107, "INELIGIBLE_REPLICA", False),
    (108, "NEW_LEADER_ELECTED", False),
    (109, "OFFSET_MOVED_TO_TIERED_STORAGE", False),
    (110, "FENCED_MEMBER_EPOCH", False),
    (111, "UNRELEASED_INSTANCE_ID", False),
    (112, "UNSUPPORTED_ASSIGNOR", False),
    (113, "STALE_MEMBER_EPOCH", False),
    (114, "MISMATCHED_ENDPOINT_TYPE", False),
    (115, "UNSUPPORTED_ENDPOINT_TYPE", False),
    (116, "UNKNOWN_CONTROLLER_ID", False),
    (117, "UNKNOWN_SUBSCRIPTION_ID", False),
    (118, "TELEMETRY_TOO_LARGE", False),
    (119, "INVALID_REGISTRATION", False),
    (120, "TRANSACTION_ABORTABLE", False),
    # 121-136 as Kafka 4.4's Errors (retriable where its exception is a RetriableException).
    (121, "INVALID_RECORD_STATE", False),
    (122, "SHARE_SESSION_NOT_FOUND", True),
    (123, "INVALID_SHARE_SESSION_EPOCH", True),
    (124, "FENCED_STATE_EPOCH", False),
    (125, "INVALID_VOTER_KEY", False),
    (126, "DUPLICATE_VOTER", False),
    (127, "VOTER_NOT_FOUND", False),
    (128, "INVALID_REGULAR_EXPRESSION", False),
    (129, "REBOOTSTRAP_REQUIRED", False),
    (130, "STREAMS_INVALID_TOPOLOGY", False),
    (131, "STREAMS_INVALID_TOPOLOGY_EPOCH", False),
    (132, "STREAMS_TOPOLOGY_FENCED", False),
    (133, "SHARE_SESSION_LIMIT_REACHED", True),
    (134, "GROUP_DELETION_FAILED", False),
    (135, "STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED", False),
    (136, "CONTROLLER_ID_NOT_REGISTERED", False),
)


class StromError(Exception):
    """Base of every exception strom raises on purpose."""


#: One record a produce refused: (index of the record within its batch, why). Produce
#: responses v8+ carry them as ``record_errors`` (Kafka's RecordError, KIP-467).
RecordError = tuple[int, str | None]


class KafkaError(StromError):
    """An error with a Kafka error code. Subclasses exist for every code in the table.

    ``record_errors`` is non-empty only when a produce was refused because of single records
    (INVALID_RECORD / INVALID_TIMESTAMP): the whole batch fails, and these name the records at
    fault so a client fails exactly those (the rest with a "different record" error)."""

    code: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False

    def __init__(self, message: str = "", *, record_errors: list[RecordError] | None = None
                 ) -> None:
        super().__init__(message or self.name)
        self.message = message or self.name
        self.record_errors: list[RecordError] = record_errors or []

    def __str__(self) -> str:
        if self.message == self.name:
            return f"{self.name} ({self.code})"
        return f"{self.name} ({self.code}): {self.message}"


def _class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_")) + "Error"


_BY_CODE: dict[int, type[KafkaError]] = {}
_BY_NAME: dict[str, type[KafkaError]] = {}
for _code, _name, _retriable in _TABLE:
    _cls = type(
        _class_name(_name),
        (KafkaError,),
        {"code": _code, "name": _name, "retriable": _retriable, "__module__": __name__},
    )
    _BY_CODE[_code] = _cls
    _BY_NAME[_name] = _cls
    globals()[_cls.__name__] = _cls


def error_for(code: int, message: str | None = None) -> KafkaError:
    """The exception for a wire error code (unknown codes map to UNKNOWN_SERVER_ERROR)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return _BY_CODE[-1](message or f"unknown error code {code}")
    return cls(message or "")


def error_class(name: str) -> type[KafkaError]:
    """The exception class for an error name such as ``"UNKNOWN_TOPIC_OR_PARTITION"``."""
    return _BY_NAME[name]


def error_name(code: int) -> str:
    cls = _BY_CODE.get(code)
    return cls.name if cls is not None else f"UNKNOWN_ERROR_CODE_{code}"


class ErrorCode:
    """Named integer constants, for code that needs a number (encoders, tests)."""

    NONE = 0


for _code, _name, _retriable in _TABLE:
    setattr(ErrorCode, _name, _code)

# Statically visible aliases for the exceptions used across strom (mypy cannot see the
# dynamically created ones above).
UnknownServerError: type[KafkaError] = _BY_NAME["UNKNOWN_SERVER_ERROR"]
OffsetOutOfRangeError: type[KafkaError] = _BY_NAME["OFFSET_OUT_OF_RANGE"]
CorruptMessageError: type[KafkaError] = _BY_NAME["CORRUPT_MESSAGE"]
UnknownTopicOrPartitionError: type[KafkaError] = _BY_NAME["UNKNOWN_TOPIC_OR_PARTITION"]
MessageTooLargeError: type[KafkaError] = _BY_NAME["MESSAGE_TOO_LARGE"]
InvalidTopicError: type[KafkaError] = _BY_NAME["INVALID_TOPIC_EXCEPTION"]
RecordListTooLargeError: type[KafkaError] = _BY_NAME["RECORD_LIST_TOO_LARGE"]
InvalidRequiredAcksError: type[KafkaError] = _BY_NAME["INVALID_REQUIRED_ACKS"]
InvalidTimestampError: type[KafkaError] = _BY_NAME["INVALID_TIMESTAMP"]
UnsupportedVersionError: type[KafkaError] = _BY_NAME["UNSUPPORTED_VERSION"]
TopicAlreadyExistsError: type[KafkaError] = _BY_NAME["TOPIC_ALREADY_EXISTS"]
InvalidPartitionsError: type[KafkaError] = _BY_NAME["INVALID_PARTITIONS"]
InvalidReplicationFactorError: type[KafkaError] = _BY_NAME["INVALID_REPLICATION_FACTOR"]
InvalidReplicaAssignmentError: type[KafkaError] = _BY_NAME["INVALID_REPLICA_ASSIGNMENT"]
InvalidConfigError: type[KafkaError] = _BY_NAME["INVALID_CONFIG"]
InvalidRequestError: type[KafkaError] = _BY_NAME["INVALID_REQUEST"]
UnsupportedForMessageFormatError: type[KafkaError] = _BY_NAME["UNSUPPORTED_FOR_MESSAGE_FORMAT"]
OutOfOrderSequenceNumberError: type[KafkaError] = _BY_NAME["OUT_OF_ORDER_SEQUENCE_NUMBER"]
DuplicateSequenceNumberError: type[KafkaError] = _BY_NAME["DUPLICATE_SEQUENCE_NUMBER"]
InvalidProducerEpochError: type[KafkaError] = _BY_NAME["INVALID_PRODUCER_EPOCH"]
InvalidTxnStateError: type[KafkaError] = _BY_NAME["INVALID_TXN_STATE"]
TransactionCoordinatorFencedError: type[KafkaError] = _BY_NAME["TRANSACTION_COORDINATOR_FENCED"]
InvalidProducerIdMappingError: type[KafkaError] = _BY_NAME["INVALID_PRODUCER_ID_MAPPING"]
KafkaStorageError: type[KafkaError] = _BY_NAME["KAFKA_STORAGE_ERROR"]
UnknownProducerIdError: type[KafkaError] = _BY_NAME["UNKNOWN_PRODUCER_ID"]
PolicyViolationError: type[KafkaError] = _BY_NAME["POLICY_VIOLATION"]
UnsupportedCompressionTypeError: type[KafkaError] = _BY_NAME["UNSUPPORTED_COMPRESSION_TYPE"]
InvalidRecordError: type[KafkaError] = _BY_NAME["INVALID_RECORD"]
ProducerFencedError: type[KafkaError] = _BY_NAME["PRODUCER_FENCED"]
UnknownTopicIdError: type[KafkaError] = _BY_NAME["UNKNOWN_TOPIC_ID"]
InconsistentTopicIdError: type[KafkaError] = _BY_NAME["INCONSISTENT_TOPIC_ID"]
NotLeaderOrFollowerError: type[KafkaError] = _BY_NAME["NOT_LEADER_OR_FOLLOWER"]
FencedLeaderEpochError: type[KafkaError] = _BY_NAME["FENCED_LEADER_EPOCH"]
UnknownLeaderEpochError: type[KafkaError] = _BY_NAME["UNKNOWN_LEADER_EPOCH"]
LeaderNotAvailableError: type[KafkaError] = _BY_NAME["LEADER_NOT_AVAILABLE"]
RequestTimedOutError: type[KafkaError] = _BY_NAME["REQUEST_TIMED_OUT"]
NotEnoughReplicasError: type[KafkaError] = _BY_NAME["NOT_ENOUGH_REPLICAS"]
NotEnoughReplicasAfterAppendError: type[KafkaError] = _BY_NAME["NOT_ENOUGH_REPLICAS_AFTER_APPEND"]
TopicDeletionDisabledError: type[KafkaError] = _BY_NAME["TOPIC_DELETION_DISABLED"]
LogDirNotFoundError: type[KafkaError] = _BY_NAME["LOG_DIR_NOT_FOUND"]
InvalidFetchSizeError: type[KafkaError] = _BY_NAME["INVALID_FETCH_SIZE"]
ClusterAuthorizationFailedError: type[KafkaError] = _BY_NAME["CLUSTER_AUTHORIZATION_FAILED"]
TransactionalIdAuthorizationFailedError: type[KafkaError] = _BY_NAME[
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
]
NetworkError: type[KafkaError] = _BY_NAME["NETWORK_EXCEPTION"]
FetchSessionIdNotFoundError: type[KafkaError] = _BY_NAME["FETCH_SESSION_ID_NOT_FOUND"]
OffsetNotAvailableError: type[KafkaError] = _BY_NAME["OFFSET_NOT_AVAILABLE"]
ResourceNotFoundError: type[KafkaError] = _BY_NAME["RESOURCE_NOT_FOUND"]
