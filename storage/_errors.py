"""Exceptions raised by the storage layer.

Every error derives from :class:`StorageError` so callers (the broker, the embedded
connection) can map the whole family to Kafka error codes in one place.
"""

from __future__ import annotations

import os


class LogmarshalError(Exception):
    """The root of every error logmarshal raises on purpose, in every layer (storage, the
    library, the CLI, streams, the audit): ``except LogmarshalError`` catches them all. It
    lives here, in the lowest layer, so that storage's errors can derive from it too; the
    library re-exports it as :class:`logmarshal.errors.LogmarshalError`."""


class StorageError(LogmarshalError):
    """Base class of every error the storage layer raises on purpose."""


class CorruptRecordError(StorageError):
    """A record batch is malformed: bad length, magic, CRC, varint or record layout."""


class CorruptBatch(CorruptRecordError):
    """A stored batch cannot be decoded. ``offset`` is its first offset; ``next_offset`` the
    offset after it (None if even its header is unreadable), where a reader may resume to
    skip it."""

    def __init__(self, reason: str, offset: int, next_offset: int | None) -> None:
        where = (
            f"offsets {offset}..{next_offset - 1}"
            if next_offset is not None
            else f"offset {offset}"
        )
        super().__init__(f"stored batch at {where} is corrupt: {reason}")
        self.reason = reason
        self.offset = offset
        self.next_offset = next_offset

    def __reduce__(self):
        return (type(self), (self.reason, self.offset, self.next_offset))


class InvalidRecord(CorruptRecordError):
    """Records that parse but break a rule (offset deltas, timestamps, transactional or control
    batches from a plain producer): Kafka's INVALID_RECORD rather than CORRUPT_MESSAGE."""


class UnsupportedCompression(StorageError):
    """A batch uses a compression codec this process cannot (de)compress."""


class RecordTooLarge(StorageError):
    """A batch is larger than the topic's ``max.message.bytes`` (or its segment size)."""


class BatchLargerThanSegment(RecordTooLarge):
    """A batch is larger than the topic's ``segment.bytes``: Kafka's
    ``RecordBatchTooLargeException``, RECORD_LIST_TOO_LARGE on the wire (not
    MESSAGE_TOO_LARGE: the records may each be within ``max.message.bytes``)."""


class OffsetOutOfRange(StorageError):
    """A fetch asked for an offset outside ``[log_start_offset, log_end_offset]``."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is out of range; valid offsets are "
            f"{log_start_offset}..{log_end_offset} (log end)"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset

    def __reduce__(self):  # keep pickling (e.g. across processes) working
        return (type(self), (self.offset, self.log_start_offset, self.log_end_offset))


class UnknownTopic(StorageError):
    """The topic does not exist."""

    def __init__(self, topic: str) -> None:
        super().__init__(f"unknown topic {topic!r}")
        self.topic = topic

    def __reduce__(self):
        return (type(self), (self.topic,))


class UnknownPartition(StorageError):
    """The topic exists but has no such partition."""

    def __init__(self, topic: str, partition: int) -> None:
        super().__init__(f"topic {topic!r} has no partition {partition}")
        self.topic = topic
        self.partition = partition

    def __reduce__(self):
        return (type(self), (self.topic, self.partition))


class TopicExists(StorageError):
    """A topic of that name already exists."""

    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} already exists")
        self.topic = topic

    def __reduce__(self):
        return (type(self), (self.topic,))


class InvalidTopicName(StorageError):
    """The name breaks Kafka's topic naming rules."""


class InvalidConfig(StorageError):
    """A topic configuration value (or a partition count) is not acceptable."""


class PolicyViolation(StorageError):
    """A valid request the data directory's rules do not allow (Kafka's POLICY_VIOLATION)."""


class LimitExceeded(PolicyViolation):
    """A request would take the data directory past a resource budget (partitions, files)."""


class DataDirLocked(StorageError):
    """Another process (or another DataDir in this one) already owns the data directory."""

    def __init__(self, path: str | os.PathLike[str], detail: str = "") -> None:
        msg = f"data directory {os.fspath(path)!s} is locked by another owner"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)
        self.path = os.fspath(path)

    def __reduce__(self):
        return (type(self), (self.path,))
