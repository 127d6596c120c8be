"""librdkafka's errors as the exceptions the embedded cluster raises for the same failures,
so a caller handles one set whichever connection it has."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException

from storage import PolicyViolation

from ..errors import (
    CorruptRecordError,
    InvalidConfig,
    InvalidTopicName,
    NetworkError,
    RecordTooLarge,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)

__all__ = ["produce_error"]


def _map_error(error: KafkaError | None, topic: str = "", partition: int = -1) -> Exception:
    """A librdkafka error as the exception the embedded cluster raises for the same failure."""
    if error is None:
        return NetworkError("unknown error")
    code = error.code()
    text = error.str()
    if code == KafkaError.TOPIC_ALREADY_EXISTS:
        return TopicExists(topic)
    if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
        return UnknownTopic(topic) if partition < 0 else UnknownPartition(topic, partition)
    if code == KafkaError._UNKNOWN_PARTITION:
        return UnknownPartition(topic, partition)
    if code == KafkaError.TOPIC_EXCEPTION:
        return InvalidTopicName(text)
    if code in (
        KafkaError.INVALID_CONFIG,
        KafkaError.INVALID_PARTITIONS,
        KafkaError.INVALID_REPLICATION_FACTOR,
    ):
        return InvalidConfig(text)
    if code == KafkaError.POLICY_VIOLATION:
        return PolicyViolation(text)
    if code in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE):
        return RecordTooLarge(text)
    if code in (KafkaError.INVALID_MSG, KafkaError.INVALID_RECORD):  # Kafka: CORRUPT_MESSAGE
        return CorruptRecordError(text)
    where = f"topic {topic!r}, " + (
        f"partition {partition}" if partition >= 0 else "before a partition was chosen"
    )
    if code == KafkaError._MSG_TIMED_OUT:
        # librdkafka's "possibly persisted": the broker may have stored it (its answer was
        # not seen in time), so sending it again may store it twice
        return NetworkError(
            f"{text} ({where}): not known to be stored; the broker may have stored it all the "
            "same, so a retry may store it twice"
        )
    return NetworkError(f"{text} ({where})")


def _leader_moving(error: KafkaError | None) -> bool:
    """A partition between leaders (just created, or its leader failed): worth a retry."""
    return error is not None and error.code() in (
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError._WAIT_COORD,
    )


def _raise_from(exc: KafkaException, topic: str = "", partition: int = -1) -> Exception:
    return _map_error(exc.args[0] if exc.args else None, topic, partition)


def result_of(future: Any, timeout: float, topic: str = "", partition: int = -1) -> Any:
    """An AdminClient future's result within ``timeout`` seconds, its failure as the
    exception the embedded cluster raises. No answer in time is a :class:`NetworkError`:
    ``Future.result`` raises the builtin TimeoutError, which escaped every caller (it
    stopped a member's fetch loop while a Kafka node restarted, in CI on 2026-12-06)."""
    try:
        return future.result(timeout)
    except KafkaException as exc:
        raise _raise_from(exc, topic, partition) from None
    except TimeoutError:
        where = f"topic {topic!r}" + (f", partition {partition}" if partition >= 0 else "")
        raise NetworkError(f"no answer within {timeout:g} s ({where})") from None


def produce_error(error: BaseException | KafkaError, topic: str, partition: int) -> BaseException:
    """What :class:`~logmarshal.producer.Producer` raises for a librdkafka error of its own
    producer: a delivery report's KafkaError, or what ``produce()`` raised."""
    if isinstance(error, KafkaError):
        return _map_error(error, topic, partition)
    if isinstance(error, KafkaException):
        return _raise_from(error, topic, partition)
    return error
