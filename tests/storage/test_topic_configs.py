"""Kafka's standard topic configs: accepted, validated, honoured (docs/broker.md)."""

from __future__ import annotations

import logging

import pytest

from storage import Compression, DataDir, NewRecord, PartitionLog, TopicConfig, encode_batch
from storage._errors import InvalidConfig, PolicyViolation
from storage._records import decode_records, iter_batches


@pytest.mark.parametrize(
    "settings",
    [
        {"cleanup.policy": "delete"},
        {"cleanup.policy": "compact"},
        {"cleanup.policy": "compact,delete"},
        {"cleanup.policy": "delete,compact"},
        {"compression.type": "producer"},
        {"compression.type": "zstd"},
        {"max.message.bytes": "2000000"},
        {"message.timestamp.type": "LogAppendTime"},
        {"min.compaction.lag.ms": "1000", "delete.retention.ms": "0", "max.compaction.lag.ms": "9"},
        {"min.cleanable.dirty.ratio": "0.1"},
        {
            "segment.bytes": "100000",
            "segment.ms": "1000",
            "segment.index.bytes": "4096",
            "segment.jitter.ms": "10",
        },
        {"retention.ms": "-1", "retention.bytes": "1000"},
        {"flush.messages": "1", "flush.ms": "0"},
    ],
)
def test_standard_configs_are_accepted_and_round_trip(settings) -> None:
    config = TopicConfig.from_dict(settings)
    assert TopicConfig.from_dict(config.to_dict()) == config
    for key, value in settings.items():
        if key != "cleanup.policy":
            assert config.to_dict()[key] == value


def test_replication_only_configs_are_accepted_with_a_note(tmp_path, caplog) -> None:
    config = TopicConfig.from_dict(
        {"min.insync.replicas": "1", "unclean.leader.election.enable": "false"}
    )
    assert config.to_dict()["min.insync.replicas"] == "1"
    with caplog.at_level(logging.INFO), DataDir(tmp_path / "d") as d:
        d.create_topic("t", 1, config)
    assert "min.insync.replicas=1 accepted; it has no effect" in caplog.text


@pytest.mark.parametrize(
    "settings",
    [
        {"no.such.config": "1"},
        {"cleanup.policy": "archive"},
        {"cleanup.policy": ""},
        {"compression.type": "brotli"},
        {"min.cleanable.dirty.ratio": "2"},
        {"delete.retention.ms": "-5"},
        {"segment.index.bytes": "x"},
    ],
)
def test_unknown_or_invalid_configs_are_refused(settings) -> None:
    with pytest.raises(InvalidConfig):
        TopicConfig.from_dict(settings)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("retention.ms", "-5"),
        ("segment.bytes", "13"),
        ("max.message.bytes", str(1 << 31)),
        ("flush.messages", "0"),
        ("max.compaction.lag.ms", "0"),
    ],
)
def test_a_value_out_of_range_is_named_by_its_kafka_name(key, value) -> None:
    """The range error named the attribute (retention_ms), which no Kafka tool knows."""
    attribute = key.replace(".", "_")
    with pytest.raises(InvalidConfig, match=rf"^{key} must be in \[") as refused:
        TopicConfig.from_dict({key: value})
    assert attribute not in str(refused.value)
    with pytest.raises(InvalidConfig, match=rf"^{key} must be an integer"):
        TopicConfig.from_dict({key: "1.5"})
    with pytest.raises(InvalidConfig, match=rf"^{key} must be in \["):  # (the same, built)
        TopicConfig(**{attribute: int(value)})


def test_compression_type_reencodes_on_append(tmp_path, clock) -> None:
    plog = PartitionLog(tmp_path / "p", TopicConfig(compression_type="zstd"), clock)
    records = [NewRecord(b"v%d" % i * 20, key=b"k", timestamp=5 + i) for i in range(30)]
    plog.append(encode_batch(records) + encode_batch(records, compression=Compression.GZIP))
    data = plog.read(0).data
    assert {h.compression for h, _ in iter_batches(data)} == {Compression.ZSTD}
    got = decode_records(data)
    assert [r.offset for r in got] == list(range(60))
    assert [r.value for r in got] == [r.value for r in records] * 2
    plog.close()


def test_compact_only_topics_are_not_trimmed_by_retention(tmp_path, clock) -> None:
    for policy, survives in (("compact", True), ("delete", False)):
        cfg = TopicConfig(cleanup_policy=policy, retention_ms=10, segment_bytes=200)
        plog = PartitionLog(tmp_path / policy, cfg, clock)
        for _ in range(5):
            plog.append(encode_batch([NewRecord(b"x" * 100, key=b"k", timestamp=clock())]))
        clock.advance(1000)
        plog.append(encode_batch([NewRecord(b"y", key=b"k", timestamp=clock())]))
        plog.enforce_retention()
        assert (plog.log_start_offset == 0) is survives
        plog.close()


def test_segment_index_bytes_rolls_a_segment(tmp_path, clock) -> None:
    cfg = TopicConfig(segment_index_bytes=16, index_interval_bytes=0)
    plog = PartitionLog(tmp_path / "p", cfg, clock)
    for _ in range(10):
        plog.append(encode_batch([NewRecord(b"x", timestamp=clock())]))
    assert plog.segment_count > 1
    plog.close()


def test_alter_config_is_durable_and_in_force(tmp_path, clock) -> None:
    with DataDir(tmp_path / "d", clock=clock) as d:
        d.create_topic("t", 2)
        d.create_topic("__internal", 1, TopicConfig(timestamp_type="LogAppendTime"))
        new = d.describe("t").config.with_changes(
            {"retention.ms": "1234", "cleanup.policy": "compact"}
        )
        d.alter_config("t", new)
        assert d.partition("t", 1).config.retention_ms == 1234
        with pytest.raises(PolicyViolation):
            d.alter_config("__internal", TopicConfig())  # would reset it to CreateTime
        d.alter_config("__internal", TopicConfig(timestamp_type="LogAppendTime", retention_ms=5))
    with DataDir(tmp_path / "d", clock=clock) as d:
        assert d.describe("t").config.retention_ms == 1234
        assert d.describe("t").config.compact
        assert d.describe("__internal").config.retention_ms == 5


def test_explicit_names_of_mixed_types_are_an_invalid_config() -> None:
    """A name that is no string among them raised TypeError (sorting mixed types)."""
    with pytest.raises(InvalidConfig, match="unknown topic config"):
        TopicConfig(explicit=[1, "no.such"])  # type: ignore[list-item]  # the wrong type tested
