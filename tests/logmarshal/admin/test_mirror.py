"""group mirror-offsets: positions from __marshal, as Kafka committed offsets."""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
import time
from pathlib import Path

import pytest

from logmarshal import connect
from logmarshal._broker_groups import MarshalGroupView
from logmarshal.admin import read_coordination
from logmarshal.admin.mirror import KafkaOffsetSink, MirrorError, changed_positions, positions
from logmarshal.marshaler import COORDINATION_TOPIC
from rationalizer import ClaimingPartition, Heartbeat, coordination_partition, encode
from storage import DataDir, NewRecord, TopicConfig, encode_batch
from storage.broker import BrokerConfig, BrokerThread

N_COORD = 2
ROOT = str(Path(__file__).resolve().parents[3])


def _write_group(data: Path) -> None:
    with DataDir(data) as d:
        d.create_topic(COORDINATION_TOPIC, N_COORD, TopicConfig(timestamp_type="LogAppendTime"))
        d.create_topic("t", 2)
        for p, last in ((0, 6), (1, None)):
            common = dict(client_id="c", instance_id="i", group_id="g", topic="t", partition=p)
            msgs = [ClaimingPartition(heartbeat_interval_ms=60_000, **common)]
            if last is not None:
                msgs.append(Heartbeat(last_offset=last, heartbeat_interval_ms=60_000, **common))
            for m in msgs:
                key, value = encode(m)
                d.partition(COORDINATION_TOPIC, coordination_partition("t", p, N_COORD)).append(
                    encode_batch([NewRecord(value, key=key, timestamp=int(time.time() * 1000))])
                )


def test_positions_and_changes(tmp_path):
    _write_group(tmp_path / "d")
    cluster = connect(tmp_path / "d")
    try:
        state = read_coordination(cluster)
    finally:
        cluster.close()
    current = positions(state, "g")
    assert current == {("t", 0): 7}  # partition 1 was only claimed: no position
    assert changed_positions(current, {}) == current
    assert changed_positions(current, {("t", 0): 7}) == {}
    assert changed_positions({("t", 0): 3}, {("t", 0): 7}) == {("t", 0): 3}  # a reset back


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "logmarshal", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin"},
    )


def test_mirror_against_logmarshal_broker_is_refused_with_the_reason(tmp_path):
    _write_group(tmp_path / "d")
    config = BrokerConfig(data_dir=tmp_path / "d", port=0, group_view=MarshalGroupView)
    with BrokerThread(config) as broker:
        result = _cli("--bootstrap", broker.bootstrap, "group", "mirror-offsets", "g")
        assert result.returncode == 1
        assert "refuses OffsetCommit" in result.stderr, result.stderr
        unknown = _cli("--bootstrap", broker.bootstrap, "group", "mirror-offsets", "nope")
        assert unknown.returncode == 1 and "unknown group 'nope'" in unknown.stderr
    embedded = _cli("--data-dir", str(tmp_path / "d"), "group", "mirror-offsets", "g")
    assert embedded.returncode == 1 and "use --bootstrap" in embedded.stderr


def test_a_kafka_group_description_that_never_comes_is_a_mirror_error():
    """``KafkaOffsetSink.live`` raised the builtin TimeoutError of ``Future.result`` when
    the brokers did not answer, which a Consumer's start did not expect (it expects
    MirrorError, and mirrors anyway with a warning)."""

    class _Silent:
        def describe_consumer_groups(self, groups):
            return {g: concurrent.futures.Future() for g in groups}

    sink = KafkaOffsetSink("127.0.0.1:1", {"log_level": 0}, timeout=0.05)
    try:
        sink._admin = _Silent()
        with pytest.raises(MirrorError, match=r"no answer within 0\.05 s"):
            sink.live("g")
    finally:
        sink.close()
