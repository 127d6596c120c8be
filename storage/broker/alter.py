"""The config a topic gets from an AlterConfigs or IncrementalAlterConfigs resource (pure).

AlterConfigs replaces the whole set: settings it does not name go back to their defaults
(replication-only ones included), as Kafka does. IncrementalAlterConfigs applies operations
per setting: SET, DELETE (back to the default), and APPEND / SUBTRACT for the one list-valued
setting the log honours, ``cleanup.policy``. Anything unknown or invalid raises InvalidConfig.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from storage._config import TopicConfig
from storage._errors import InvalidConfig

__all__ = ["NullConfigValue", "alter_topic_config"]

_SET, _DELETE, _APPEND, _SUBTRACT = 0, 1, 2, 3


class NullConfigValue(InvalidConfig):
    """A whole-set AlterConfigs names a setting with no value: Kafka answers INVALID_REQUEST."""


_LIST_VALUED = frozenset({"cleanup.policy"})


def alter_topic_config(
    current: TopicConfig, configs: Iterable[Any], *, incremental: bool
) -> TopicConfig:
    """``configs`` are the request's entries (name, value, and config_operation if incremental)."""
    entries = list(configs)
    names = [c.name for c in entries]
    if len(set(names)) != len(names):
        raise InvalidConfig("a setting is named more than once in one resource")
    if not incremental:
        # a null value was dropped and the whole set replaced without it: every other
        # setting of the topic went back to its default (a compact topic became delete).
        # Kafka refuses the request (INVALID_REQUEST, "Null value not supported")
        nulls = [c.name for c in entries if c.value is None]
        if nulls:
            raise NullConfigValue(f"null value not supported for topic config {nulls[0]!r}")
        return TopicConfig.from_dict({c.name: c.value for c in entries})
    changes: dict[str, str | None] = {}
    values = current.to_dict()
    for c in entries:
        op = c.config_operation
        if op == _SET:
            if c.value is None:
                raise InvalidConfig(f"SET {c.name} needs a value")
            changes[c.name] = c.value
        elif op == _DELETE:
            changes[c.name] = None
        elif op in (_APPEND, _SUBTRACT):
            if c.name not in _LIST_VALUED:
                raise InvalidConfig(f"{c.name} is not a list: APPEND and SUBTRACT do not apply")
            have = [p for p in values.get(c.name, "").split(",") if p]
            items = [p.strip() for p in (c.value or "").split(",") if p.strip()]
            if op == _APPEND:
                merged = have + [p for p in items if p not in have]
            else:
                merged = [p for p in have if p not in items]
            if not merged:
                raise InvalidConfig(f"{c.name} cannot become empty")
            changes[c.name] = ",".join(merged)
        else:
            raise InvalidConfig(f"unknown config operation {op} for {c.name}")
    return current.with_changes(changes)
