"""``topics.json`` against the size a data directory opens with (``MAX_META_BYTES``): the
largest metadata the limits allow fits, and a change that would write more is refused with
nothing changed, on disk or in memory. A broker wrote, at 64 MiB and about 61,000 topics
naming every setting, a file its next start refused."""

from __future__ import annotations

import itertools
import json

import pytest

import storage._datadir as datadir_module
from storage import DataDir, TopicConfig
from storage._config import REPLICATION_ONLY_CONFIGS
from storage._errors import InvalidConfig, LimitExceeded
from storage._topics_meta import _MAX_PARTITIONS, MAX_META_BYTES, MAX_TOPIC_NAME_LENGTH

#: values tried for each setting: the longest one it takes is kept
_WIDE = ("-9223372036854775808", "9223372036854775807", "2147483647", "false", "*", "1")


def _every_setting_given() -> TopicConfig:
    """Every setting named, each at the widest of ``_WIDE`` it takes (else its default)."""
    values = dict(TopicConfig().to_dict())
    for name in sorted(REPLICATION_ONLY_CONFIGS | set(values)):
        for wide in sorted(_WIDE, key=len, reverse=True):
            try:
                TopicConfig.from_dict({**values, name: wide}).check_settable()
            except InvalidConfig:
                continue
            if len(wide) > len(values.get(name, "")):
                values[name] = wide
            break
    return TopicConfig.from_dict(values)


def test_the_most_topics_the_limits_allow_fit(tmp_path) -> None:
    """Each topic holds a partition at least, so at most ``_MAX_PARTITIONS`` topics: at
    249-character names with every setting given, their file stays under the limit."""
    config = _every_setting_given()
    sizes = []
    with DataDir(tmp_path / "d") as d:
        for i in range(3):
            d.create_topic(f"{i}" + "x" * (MAX_TOPIC_NAME_LENGTH - 1), 1, config)
            sizes.append((tmp_path / "d" / "topics.json").stat().st_size)
    per_topic = max(b - a for a, b in itertools.pairwise(sizes))
    assert per_topic > 1500  # (the measure is of a topic with every setting)
    assert sizes[0] + per_topic * _MAX_PARTITIONS <= MAX_META_BYTES, per_topic


def test_a_change_past_the_limit_is_refused_and_nothing_changes(tmp_path, monkeypatch) -> None:
    path = tmp_path / "d"
    config = _every_setting_given()
    with DataDir(path) as d:
        d.create_topic("a", 1)
        size = (path / "topics.json").stat().st_size
        room = 2 * size + 50  # for one more topic like "a"
        monkeypatch.setattr(datadir_module, "MAX_META_BYTES", room)
        with pytest.raises(LimitExceeded, match=r"over the \d+ a data directory opens with"):
            d.create_topic("b", 2, config)
        assert d.topics() == ["a"]
        assert not (path / "b-0").exists() and not (path / "b-1").exists()
        with pytest.raises(LimitExceeded):
            d.alter_config("a", config)
        assert d.describe("a").config == TopicConfig()
        d.create_topic("c", 1)  # what fits still does
    with DataDir(path) as d:  # and the file opens with everything it said
        assert sorted(d.topics()) == ["a", "c"]
        assert d.describe("a").config == TopicConfig()
    meta = json.loads((path / "topics.json").read_text())
    assert set(meta["topics"]) == {"a", "c"}
