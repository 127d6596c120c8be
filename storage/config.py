"""Per-topic configuration, named and serialised the way Kafka names topic configs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from storage.errors import InvalidConfig
from storage.records import TimestampType

__all__ = ["TopicConfig"]

MiB = 1024 * 1024
_DAY_MS = 24 * 60 * 60 * 1000
_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1


def _int_in(low: int, high: int = _INT64_MAX, *, optional: bool = False):
    """Validator: an int (not bool) in [low, high]; raises InvalidConfig, the storage error."""

    def check(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is None and optional:
            return
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidConfig(f"{attribute.name} must be an integer, got {value!r}")
        if not low <= value <= high:
            raise InvalidConfig(f"{attribute.name} must be in [{low}, {high}], got {value}")

    return check


def _timestamp_type(value: Any) -> TimestampType:
    if isinstance(value, TimestampType):
        return value
    if isinstance(value, str):
        try:
            return _TS_NAMES[value]
        except KeyError:
            raise InvalidConfig(
                f"message.timestamp.type must be CreateTime or LogAppendTime, got {value!r}"
            ) from None
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return TimestampType(value)
        except ValueError:
            pass
    raise InvalidConfig(f"invalid timestamp type {value!r}")


_TS_NAMES = {
    "CreateTime": TimestampType.CREATE_TIME,
    "LogAppendTime": TimestampType.LOG_APPEND_TIME,
}
_TS_TO_NAME = {v: k for k, v in _TS_NAMES.items()}


@attrs.frozen
class TopicConfig:
    """How a topic's partitions roll, expire, flush and stamp time.

    Defaults follow Kafka's broker defaults; ``flush_messages``/``flush_ms`` of None
    leave flushing to the OS (Kafka's default), except on roll and close.
    """

    segment_bytes: int = attrs.field(default=64 * MiB, validator=_int_in(14, _INT32_MAX))
    segment_ms: int = attrs.field(default=7 * _DAY_MS, validator=_int_in(1))
    retention_ms: int = attrs.field(default=7 * _DAY_MS, validator=_int_in(-1))
    retention_bytes: int = attrs.field(default=-1, validator=_int_in(-1))
    flush_messages: int | None = attrs.field(default=None, validator=_int_in(1, optional=True))
    flush_ms: int | None = attrs.field(default=None, validator=_int_in(0, optional=True))
    timestamp_type: TimestampType = attrs.field(
        default=TimestampType.CREATE_TIME, converter=_timestamp_type
    )
    max_message_bytes: int = attrs.field(default=MiB + 12, validator=_int_in(0, _INT32_MAX))
    index_interval_bytes: int = attrs.field(default=4096, validator=_int_in(0, _INT32_MAX))

    def to_dict(self) -> dict[str, str]:
        """Kafka-named string values; unset flush settings are left out."""
        out = {}
        for attr_name, kafka_name in _NAMES.items():
            value = getattr(self, attr_name)
            if value is None:
                continue
            out[kafka_name] = _TS_TO_NAME[value] if attr_name == "timestamp_type" else str(value)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, str | int]) -> TopicConfig:
        """Parse Kafka-named settings; unknown keys and bad values raise InvalidConfig."""
        kwargs: dict[str, Any] = {}
        for key, raw in d.items():
            attr_name = _BY_KAFKA_NAME.get(key)
            if attr_name is None:
                raise InvalidConfig(f"unknown topic config {key!r}")
            if attr_name == "timestamp_type":
                kwargs[attr_name] = _timestamp_type(raw)
                continue
            if isinstance(raw, bool) or not isinstance(raw, int | str):
                raise InvalidConfig(f"{key} must be an integer, got {raw!r}")
            try:
                kwargs[attr_name] = int(raw)
            except ValueError:
                raise InvalidConfig(f"{key} must be an integer, got {raw!r}") from None
        return cls(**kwargs)


_NAMES = {
    "segment_bytes": "segment.bytes",
    "segment_ms": "segment.ms",
    "retention_ms": "retention.ms",
    "retention_bytes": "retention.bytes",
    "flush_messages": "flush.messages",
    "flush_ms": "flush.ms",
    "timestamp_type": "message.timestamp.type",
    "max_message_bytes": "max.message.bytes",
    "index_interval_bytes": "index.interval.bytes",
}
_BY_KAFKA_NAME = {v: k for k, v in _NAMES.items()}
