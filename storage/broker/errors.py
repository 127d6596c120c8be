"""Kafka error codes the broker answers with, and the mapping from storage errors.

One place maps the storage layer's exceptions to wire codes, so every handler reports the
same failure the same way (and the way a Kafka client expects to read it).
"""

from __future__ import annotations

import enum

from storage._errors import (
    BatchLargerThanSegment,
    CorruptRecordError,
    InvalidConfig,
    InvalidRecord,
    InvalidTopicName,
    OffsetOutOfRange,
    PolicyViolation,
    RecordTooLarge,
    StorageError,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
    UnsupportedCompression,
)
from storage._producers import InvalidProducerEpoch, OutOfOrderSequence

__all__ = ["ErrorCode", "ProtocolError", "error_code_for"]


class ErrorCode(enum.IntEnum):
    """The subset of Kafka's error codes (``org.apache.kafka.common.protocol.Errors``) used."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    MESSAGE_TOO_LARGE = 10
    RECORD_LIST_TOO_LARGE = 18
    INVALID_TOPIC_EXCEPTION = 17
    INVALID_REQUIRED_ACKS = 21
    GROUP_AUTHORIZATION_FAILED = 30
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    KAFKA_STORAGE_ERROR = 56
    UNSUPPORTED_COMPRESSION_TYPE = 76
    INVALID_RECORD = 87


class ProtocolError(Exception):
    """A request that cannot be answered at all; the connection is closed (as Kafka does)."""


def error_code_for(exc: BaseException) -> ErrorCode:
    """The Kafka code a client should see for a storage failure."""
    if isinstance(exc, UnknownTopic | UnknownPartition):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, OffsetOutOfRange):
        return ErrorCode.OFFSET_OUT_OF_RANGE
    if isinstance(exc, InvalidRecord):
        return ErrorCode.INVALID_RECORD
    if isinstance(exc, CorruptRecordError):
        return ErrorCode.CORRUPT_MESSAGE
    if isinstance(exc, BatchLargerThanSegment):
        return ErrorCode.RECORD_LIST_TOO_LARGE
    if isinstance(exc, RecordTooLarge):
        return ErrorCode.MESSAGE_TOO_LARGE
    if isinstance(exc, UnsupportedCompression):
        return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    if isinstance(exc, TopicExists):
        return ErrorCode.TOPIC_ALREADY_EXISTS
    if isinstance(exc, InvalidTopicName):
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if isinstance(exc, PolicyViolation):
        return ErrorCode.POLICY_VIOLATION
    if isinstance(exc, OutOfOrderSequence):
        return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    if isinstance(exc, InvalidProducerEpoch):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if isinstance(exc, InvalidConfig):
        return ErrorCode.INVALID_CONFIG
    if isinstance(exc, StorageError | OSError):  # (the disk's: full, refused, a long name)
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.UNKNOWN_SERVER_ERROR
