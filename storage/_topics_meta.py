"""``topics.json``, the data directory's metadata, and the topic names it holds: what a
file must be to be read (checked whole before any partition directory is touched), and
Kafka's rules for a topic's name."""

from __future__ import annotations

import re
from pathlib import Path

import attrs

from storage._config import TopicConfig
from storage._errors import InvalidConfig, InvalidTopicName, StorageError
from storage._files import read_json

__all__ = [
    "MAX_META_BYTES",
    "MAX_TOPIC_NAME_LENGTH",
    "META_VERSION",
    "check_partition_count",
    "read_meta",
    "validate_topic_name",
]

_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")  # fullmatch: "$" lets a final "\n" in
MAX_TOPIC_NAME_LENGTH = 249
META_VERSION = 1
_MAX_PARTITIONS = 100_000
#: topics.json is refused above this, and a change that would write more is refused: 100,000
#: topics of 249-character names with every setting given (and named in ``explicit``) are
#: about 195 MiB (tests/storage/test_topics_meta_size.py); 64 MiB held about 61,000 such
#: short-named topics, and a broker wrote a file its next start refused
MAX_META_BYTES = 256 << 20


def validate_topic_name(name: object) -> str:
    """Kafka's rules: 1..249 of [a-zA-Z0-9._-], and not '.' or '..'."""
    if not isinstance(name, str):
        raise InvalidTopicName(f"topic name must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidTopicName("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicName(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicName(f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_NAME.fullmatch(name):
        raise InvalidTopicName(f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")
    return name


def read_meta(path: Path) -> tuple[list[tuple[str, TopicConfig, int]], dict[str, int]]:
    """The topics ``topics.json`` names, each checked before any of its directories is
    touched: a damaged or hand-edited file is refused whole, with one clear error, and
    nothing outside the data directory is opened (a topic named ``../x`` is refused). And
    the topics deleted whose directories may be left (``deleting``: name -> partitions)."""
    try:
        meta = read_json(path, MAX_META_BYTES)
    except ValueError as exc:  # not a regular file, too big, not JSON (UnicodeDecodeError too)
        why = str(exc)[:200]
        raise StorageError(
            f"{why if why.startswith(str(path)) else f'{path} is unreadable: {why}'}{_ADOPT_HINT}"
        ) from exc
    topics = meta.get("topics") if isinstance(meta, dict) else None
    if not isinstance(meta, dict) or not isinstance(topics, dict):
        raise StorageError(f'{path} is unreadable: no "topics" object{_ADOPT_HINT}')
    version = meta.get("version", META_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version > META_VERSION:
        raise StorageError(
            f"{path} is of format version {version!r}; this logmarshal reads {META_VERSION}"
            " (a newer logmarshal wrote it)"
        )
    found: list[tuple[str, TopicConfig, int]] = []
    for name, entry in sorted(topics.items()):
        try:
            validate_topic_name(name)
            if not isinstance(entry, dict) or not isinstance(entry.get("config"), dict):
                raise InvalidConfig('the entry is not {"partitions": N, "config": {...}}')
            count = check_partition_count(entry.get("partitions"))
            config = TopicConfig.from_dict(entry["config"])
            # which settings were given (stored since 2026-12; a file from before names
            # none: those that are not the default are read as given, as it described them)
            given = entry.get("explicit", [])
            if not isinstance(given, list) or not all(isinstance(n, str) for n in given):
                raise InvalidConfig('"explicit" is not a list of setting names')
            found.append((name, attrs.evolve(config, explicit=given), count))
        except StorageError as exc:
            raise StorageError(f"{path} is unreadable: topic {name!r}: {exc}{_ADOPT_HINT}") from exc
    deleting: dict[str, int] = {}
    pending = meta.get("deleting") or {}
    if not isinstance(pending, dict):
        raise StorageError(f'{path} is unreadable: "deleting" is not an object')
    for name, count in pending.items():
        try:
            validate_topic_name(name)
            deleting[name] = check_partition_count(count)
        except StorageError as exc:
            raise StorageError(f"{path} is unreadable: deleting {name!r}: {exc}") from exc
    return found, deleting


#: what an error about an unreadable topics.json tells the operator to do
_ADOPT_HINT = (
    " (to go on without it: move it aside, then put each topic back with its records: "
    "logmarshal topic adopt NAME; docs/broker.md)"
)


def check_partition_count(n: object) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= _MAX_PARTITIONS:
        raise InvalidConfig(
            f"partition count must be an integer in [1, {_MAX_PARTITIONS}], got {n!r}"
        )
    return n
