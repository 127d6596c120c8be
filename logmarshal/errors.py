"""The errors logmarshal raises.

The log's own errors come from :mod:`storage` and keep their types whichever connection is
used, so callers catch one set of exceptions on the embedded cluster and over the network.
"""

from __future__ import annotations

from storage.errors import (
    CorruptRecordError,
    DataDirLocked,
    InvalidConfig,
    InvalidTopicName,
    OffsetOutOfRange,
    RecordTooLarge,
    StorageError,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)

__all__ = [
    "ClosedError",
    "CorruptRecordError",
    "DataDirLocked",
    "InvalidConfig",
    "InvalidTopicName",
    "LogmarshalError",
    "NetworkError",
    "OffsetOutOfRange",
    "RecordTooLarge",
    "StorageError",
    "TopicExists",
    "UnknownPartition",
    "UnknownTopic",
]


class LogmarshalError(Exception):
    """Base of the errors raised by the logmarshal layer itself."""


class ClosedError(LogmarshalError):
    """The object was used after ``close()``."""


class NetworkError(LogmarshalError):
    """The brokers could not be reached, or answered with an error logmarshal cannot map."""
