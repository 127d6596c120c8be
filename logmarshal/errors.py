"""The errors logmarshal raises. Every one derives from :class:`LogmarshalError`, the one
root (defined in :mod:`storage._errors`, the lowest layer, so the log's errors share it).

The log's own errors come from :mod:`storage` and keep their types whichever connection is
used, so callers catch one set of exceptions on the embedded cluster and over the network.
"""

from __future__ import annotations

from storage._errors import (
    CorruptRecordError,
    DataDirLocked,
    InvalidConfig,
    InvalidTopicName,
    LogmarshalError,
    OffsetOutOfRange,
    RecordTooLarge,
    StorageError,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)

__all__ = [
    "RETRIABLE",
    "ClosedError",
    "ConsumerFailed",
    "CorruptRecordError",
    "DataDirLocked",
    "InvalidConfig",
    "InvalidTopicName",
    "LogTruncated",
    "LogmarshalError",
    "NetworkError",
    "NoPosition",
    "OffsetOutOfRange",
    "RecordTooLarge",
    "RetriableError",
    "StorageError",
    "TopicExists",
    "UnknownPartition",
    "UnknownTopic",
]


class ClosedError(LogmarshalError):
    """The object was used after ``close()``."""


class ConsumerFailed(LogmarshalError):
    """The consumer stopped on an error of its own (a bug in logmarshal, logged with its
    traceback and chained here), as a crash would: its claims go stale and the group takes
    them over. Start a new one; a restart of its client_id takes them back at once."""


class RetriableError(LogmarshalError):
    """The log could not be reached or did not answer for now: the same call may succeed
    later (a broker restarting, a dropped connection)."""


class NetworkError(RetriableError):
    """The brokers could not be reached, or answered with an error logmarshal cannot map."""


#: What a background loop (replay, coordination, fetch) retries with a backoff rather than
#: stop on: our transient errors, the log's own errors, and the operating system's.
RETRIABLE: tuple[type[BaseException], ...] = (RetriableError, StorageError, OSError)


class LogTruncated(OffsetOutOfRange):
    """A data partition's log was cut below a reader's position and written on (an unclean
    leader election, KIP-320's "log truncation"): the records from ``divergence`` on are not
    the ones read before, though the log may hold the reader's offset again."""

    def __init__(self, offset: int, start: int, end: int, divergence: int) -> None:
        super().__init__(offset, start, end)
        self.divergence = divergence
        self.args = (
            f"the log was cut at {divergence}, below offset {offset}, and written on "
            f"(an unclean leader election?); it spans {start}..{end} now",
        )

    def __reduce__(self) -> tuple[type, tuple[int, int, int, int]]:
        return (
            type(self),
            (self.offset, self.log_start_offset, self.log_end_offset, self.divergence),
        )


class NoPosition(OffsetOutOfRange):
    """``auto_offset_reset="error"`` and the group has no usable position for a partition."""

    def __init__(self, topic: str, partition: int, offset: int, start: int, end: int) -> None:
        super().__init__(offset, start, end)
        self.topic = topic
        self.partition = partition
        self.args = (
            f"{topic}/{partition}: "
            + (
                "the group has no position"
                if offset < 0
                else f"position {offset} is outside the log ({start}..{end})"
            )
            + ' and auto_offset_reset="error"; seek() it or set the position with the admin',
        )
