"""Per-topic configuration, named and serialised the way Kafka names topic configs."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from storage._errors import InvalidConfig
from storage._records import TimestampType

__all__ = ["REPLICATION_ONLY_CONFIGS", "TopicConfig"]

log = logging.getLogger(__name__)

MiB = 1024 * 1024
_DAY_MS = 24 * 60 * 60 * 1000
_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1


def _int_in(low: int, high: int = _INT64_MAX, *, optional: bool = False):
    """Validator: an int (not bool) in [low, high]; raises InvalidConfig, the storage error,
    naming the setting as Kafka does (``retention.ms``: the one name its tools know)."""

    def check(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is None and optional:
            return
        name = _NAMES.get(attribute.name, attribute.name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidConfig(f"{name} must be an integer, got {value!r}")
        if not low <= value <= high:
            raise InvalidConfig(f"{name} must be in [{low}, {high}], got {value}")

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


_POLICIES = frozenset({"delete", "compact"})
_CODECS = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")

#: Kafka topic configs about replicas, leaders or tiered storage: a single-copy log has nothing
#: for them to change, so they are accepted (logged, kept, reported) rather than refused, and
#: tools that always send them (min.insync.replicas=1 is common) keep working.
REPLICATION_ONLY_CONFIGS = frozenset(
    {
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
        "message.downconversion.enable",
        "preallocate",
        "remote.storage.enable",
        "local.retention.ms",
        "local.retention.bytes",
        "file.delete.delay.ms",
    }
)


#: the replication-only settings of a type Kafka checks: their kind and least value (a bool
#: is "true" or "false", either case); the throttled-replica lists are taken as given
_NOTED_KINDS: dict[str, tuple[str, int]] = {
    "min.insync.replicas": ("int", 1),
    "unclean.leader.election.enable": ("bool", 0),
    "message.downconversion.enable": ("bool", 0),
    "preallocate": ("bool", 0),
    "remote.storage.enable": ("bool", 0),
    "local.retention.ms": ("int", -2),
    "local.retention.bytes": ("int", -2),
    "file.delete.delay.ms": ("int", 0),
}
#: a whole number as Java's Long.parseLong reads it (Kafka trims it first): Python's int()
#: also took "1_000"
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _whole(key: str, raw: str | int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise InvalidConfig(f"{key} must be an integer, got {raw!r}")
    if isinstance(raw, str):
        if not _INTEGER.fullmatch(raw.strip()):
            raise InvalidConfig(f"{key} must be an integer, got {raw!r}")
        return int(raw.strip())
    return raw


def _cleanup_policy(value: Any) -> str:
    """'delete', 'compact' or both ('compact,delete' in any order, as Kafka accepts)."""
    if isinstance(value, str):
        parts = {p.strip() for p in value.split(",")}
        if parts and parts <= _POLICIES:
            return ",".join(sorted(parts))
    raise InvalidConfig(f"cleanup.policy must be delete, compact or compact,delete, got {value!r}")


def _compression_type(value: Any) -> str:
    if isinstance(value, str) and value in _CODECS:
        return value
    raise InvalidConfig(f"compression.type must be one of {', '.join(_CODECS)}, got {value!r}")


def _ratio(value: Any) -> float:
    try:
        ratio = float(value)
    except (TypeError, ValueError):
        raise InvalidConfig(f"min.cleanable.dirty.ratio must be a number, got {value!r}") from None
    if isinstance(value, bool) or not 0.0 <= ratio <= 1.0:
        raise InvalidConfig(f"min.cleanable.dirty.ratio must be in [0, 1], got {value!r}")
    return ratio


def _names(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


def _noted(value: Any) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in dict(value).items()))


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
    #: "delete" (retention removes old segments), "compact" (the cleaner keeps the latest
    #: record per key), or both
    cleanup_policy: str = attrs.field(default="delete", converter=_cleanup_policy)
    #: "producer" stores batches as sent; a codec (or "uncompressed") re-encodes on append
    compression_type: str = attrs.field(default="producer", converter=_compression_type)
    min_compaction_lag_ms: int = attrs.field(default=0, validator=_int_in(0))
    max_compaction_lag_ms: int = attrs.field(default=_INT64_MAX, validator=_int_in(1))
    delete_retention_ms: int = attrs.field(default=_DAY_MS, validator=_int_in(0))
    min_cleanable_dirty_ratio: float = attrs.field(default=0.5, converter=_ratio)
    segment_index_bytes: int = attrs.field(default=10 * MiB, validator=_int_in(8, _INT32_MAX))
    segment_jitter_ms: int = attrs.field(default=0, validator=_int_in(0))
    #: replication-only settings, kept as given (see REPLICATION_ONLY_CONFIGS)
    noted: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_noted)
    #: the Kafka names of the settings given (when the topic was made, or altered since),
    #: a default value included: Kafka describes them as the topic's own
    #: (DYNAMIC_TOPIC_CONFIG), not as defaults. Always holds every setting whose value is not
    #: the default; left out, it is just those (a config built from attributes). Not part of
    #: equality: two configs are equal when every setting has the same value
    explicit: frozenset[str] = attrs.field(default=frozenset(), converter=_names, eq=False)

    def __attrs_post_init__(self) -> None:
        unknown = sorted(
            (n for n in self.explicit if not isinstance(n, str) or n not in _KNOWN), key=repr
        )
        if unknown:
            raise InvalidConfig(f"unknown topic config {unknown[0]!r} named as set")
        object.__setattr__(self, "explicit", self.explicit | _not_default(self))

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    def to_dict(self) -> dict[str, str]:
        """Kafka-named string values; unset flush settings are left out."""
        out = {}
        for attr_name, kafka_name in _NAMES.items():
            value = getattr(self, attr_name)
            if value is None:
                continue
            out[kafka_name] = _TS_TO_NAME[value] if attr_name == "timestamp_type" else str(value)
        out.update(self.noted)
        return out

    def described(self) -> dict[str, str]:
        """Every setting as Kafka's DescribeConfigs shows it: :meth:`to_dict` with an unset
        flush setting as Kafka's default for it, Long.MAX_VALUE (never by count or by time;
        left out, ``kafka-configs --describe --all`` lacked two of Kafka's settings)."""
        return {"flush.messages": _NEVER, "flush.ms": _NEVER} | self.to_dict()

    @classmethod
    def from_dict(cls, d: Mapping[str, str | int]) -> TopicConfig:
        """Parse Kafka-named settings; unknown keys and bad values raise InvalidConfig."""
        kwargs: dict[str, Any] = {}
        noted: dict[str, str] = {}
        for key, raw in d.items():
            if raw is None:  # (a replication-only one was kept as the text "None")
                raise InvalidConfig(f"null value not supported for topic config {key!r}")
            attr_name = _BY_KAFKA_NAME.get(key)
            if attr_name is None:
                if key in REPLICATION_ONLY_CONFIGS:
                    noted[key] = str(raw)
                    continue
                raise InvalidConfig(f"unknown topic config {key!r}")
            if attr_name in _STRING_VALUED:
                kwargs[attr_name] = raw
                continue
            kwargs[attr_name] = _whole(key, raw)
        if noted:
            kwargs["noted"] = noted
        return cls(**kwargs, explicit=frozenset(d))

    def with_changes(self, changes: Mapping[str, str | int | None]) -> TopicConfig:
        """A copy with Kafka-named settings set (a value) or reset to the default (None),
        validated as a whole; what AlterConfigs and IncrementalAlterConfigs apply."""
        current: dict[str, str | int] = dict(self.to_dict())
        explicit = set(self.explicit)
        for key, value in changes.items():
            if key not in _KNOWN:
                raise InvalidConfig(f"unknown topic config {key!r}")
            if value is None:
                current.pop(key, None)
                explicit.discard(key)
            else:
                current[key] = value
                explicit.add(key)
        return attrs.evolve(TopicConfig.from_dict(current), explicit=explicit)

    def check_settable(self) -> None:
        """InvalidConfig for what Kafka refuses when a topic is made or altered, and this
        class takes (a topic stored with it before still opens): a compaction lag whose
        least is above its most, a replication-only setting of the wrong type (``min.insync.
        replicas=abc`` was stored and described back)."""
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfig(
                f"conflicting topic config: max.compaction.lag.ms ({self.max_compaction_lag_ms})"
                f" is below min.compaction.lag.ms ({self.min_compaction_lag_ms})"
            )
        for key, value in self.noted:
            kind, least = _NOTED_KINDS.get(key, ("", 0))
            if kind == "bool" and value.strip().lower() not in ("true", "false"):
                raise InvalidConfig(f"{key} must be true or false, got {value!r}")
            if kind == "int" and _whole(key, value) < least:
                raise InvalidConfig(f"{key} must be at least {least}, got {value!r}")

    def log_notes(self, topic: str) -> None:
        """One line per replication-only setting: accepted, but it changes nothing here."""
        for key, value in self.noted:
            log.info(
                "topic %s: %s=%s accepted; it has no effect on a single-copy log", topic, key, value
            )


#: Kafka's flush.messages and flush.ms defaults (Long.MAX_VALUE): flushing left to the OS
_NEVER = str(_INT64_MAX)

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
    "cleanup_policy": "cleanup.policy",
    "compression_type": "compression.type",
    "min_compaction_lag_ms": "min.compaction.lag.ms",
    "max_compaction_lag_ms": "max.compaction.lag.ms",
    "delete_retention_ms": "delete.retention.ms",
    "min_cleanable_dirty_ratio": "min.cleanable.dirty.ratio",
    "segment_index_bytes": "segment.index.bytes",
    "segment_jitter_ms": "segment.jitter.ms",
}
_STRING_VALUED = frozenset(
    {"timestamp_type", "cleanup_policy", "compression_type", "min_cleanable_dirty_ratio"}
)
_BY_KAFKA_NAME = {v: k for k, v in _NAMES.items()}
_KNOWN = frozenset(_BY_KAFKA_NAME) | REPLICATION_ONLY_CONFIGS


def _not_default(config: TopicConfig) -> frozenset[str]:
    """The Kafka names of ``config``'s settings whose value is not the default (a
    replication-only setting is only there when given)."""
    out = {key for key, _ in config.noted}
    for field in attrs.fields(TopicConfig):
        if field.name in _NAMES and getattr(config, field.name) != field.default:
            out.add(_NAMES[field.name])
    return frozenset(out)
