"""``logmarshal --bootstrap HOST:PORT demo`` and ``... streams demo`` on Apache Kafka, run as
the user runs them (subprocesses of the CLI), their reported tallies checked, and what they
wrote checked with Kafka's own client (librdkafka, not logmarshal) where it says where."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from logmarshal.localkafka import KafkaCluster

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]


def _cli(bootstrap: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "logmarshal", "--bootstrap", bootstrap, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _records_in(bootstrap: str, topic: str, partitions: int) -> int:
    """How many records Kafka itself says ``topic`` holds (high minus low watermarks)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "test-demos-watermarks", "log_level": 2}
    )
    try:
        total = 0
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high - low
        return total
    finally:
        consumer.close()


def test_demo_on_kafka_loses_nothing_across_a_kill_and_a_join(kafka: KafkaCluster) -> None:
    done = _cli(
        kafka.bootstrap, "--json", "demo", "--records", "3000", "--heartbeat", "0.5",
        "--seed", "3",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    tally = json.loads(done.stdout)
    assert tally["produced"] == tally["acknowledged"] == 3000, tally
    assert tally["handled"] == 3000 and tally["lost"] == 0, tally
    assert tally["misplaced"] == 0, tally
    states = sorted(m["state"] for m in tally["members"])
    assert states == ["alive", "alive", "alive", "killed"], tally["members"]
    # the killed member's partitions were taken over and the joiner got its share
    joined = next(m for m in tally["members"] if m["member"] == tally["joined"])
    assert joined["partitions_at_end"] >= 1, tally["members"]
    # Kafka itself holds what the demo says it wrote, in the topic the tally names
    assert tally["topic"].startswith("demo-events-")
    assert _records_in(kafka.bootstrap, tally["topic"], 6) == 3000


def test_streams_demo_on_kafka_counts_exactly_across_a_crash(kafka: KafkaCluster) -> None:
    done = _cli(kafka.bootstrap, "streams", "demo", "--lines", "1000")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = done.stdout
    assert "member-1 processed 333 lines and crashed" in out
    assert "exactly the true counts in the store: yes" in out
    # every word's count equals the truth the demo computed from what it produced
    rows = re.findall(r"^(\w+)\s+(\d+)\s+(\d+)$", out, re.MULTILINE)
    assert len(rows) == 18 and all(count == true for _, count, true in rows), rows
    assert dict((w, int(c)) for w, c, _ in rows)["the"] == 1000 // 5 * 6  # 6 per 5 lines
    # the windowed count of its 8 clicks (ann at 1, 20, 59, 61, 130 s; bob at 5, 65, 66 s)
    windows = re.findall(r"^\s+(ann|bob)\s+minute \+(\d): (\d+)$", out, re.MULTILINE)
    assert sorted(windows) == [
        ("ann", "0", "3"), ("ann", "1", "1"), ("ann", "2", "1"), ("bob", "0", "1"),
        ("bob", "1", "2"),
    ], out[-1500:]  # fmt: skip
    tag = re.search(r"topics and application ids end in (-\S+)", out)
    assert tag is not None, out[:500]
    assert _records_in(kafka.bootstrap, f"lines{tag[1]}", 2) == 1000
