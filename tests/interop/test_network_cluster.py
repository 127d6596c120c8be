"""logmarshal itself over the network: NetworkCluster, Producer, Marshaler, CLI --bootstrap."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from logmarshal import Marshaler, Producer, connect, direct
from logmarshal.errors import (
    InvalidTopicName,
    OffsetOutOfRange,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)
from logmarshal.marshaler import COORDINATION_TOPIC, CoordinationTopicError
from storage import NewRecord


@pytest.fixture
def cluster(broker):
    with connect(bootstrap=broker.bootstrap) as opened:
        yield opened


def test_cluster_interface(cluster):
    created = cluster.create_topic("events", 2, {"retention.ms": "60000"})
    assert created.partitions == 2 and created.config["retention.ms"] == "60000"
    assert "events" in cluster.topics()
    with pytest.raises(TopicExists):
        cluster.create_topic("events", 1)
    with pytest.raises(InvalidTopicName):
        cluster.create_topic("no/slash")
    records = [NewRecord(b"v%d" % i, key=b"k", headers=[("h", b"x")], timestamp=1000 + i) for i in range(5)]
    result = cluster.produce("events", 1, records, durable=True)
    assert (result.base_offset, result.last_offset, result.log_append_time) == (0, 4, -1)
    messages = cluster.fetch("events", 1, 2)  # max_wait=0 still returns stored records
    assert [(m.offset, m.value, m.timestamp, m.headers) for m in messages] == [
        (i, b"v%d" % i, 1000 + i, (("h", b"x"),)) for i in range(2, 5)
    ]
    assert cluster.fetch("events", 1, 5, max_wait=0.2) == []
    with pytest.raises(OffsetOutOfRange):
        cluster.fetch("events", 1, 99)
    assert (cluster.earliest_offset("events", 1), cluster.latest_offset("events", 1)) == (0, 5)
    assert cluster.offset_for_time("events", 1, 1003) == 3
    assert cluster.offset_for_time("events", 1, 9999) is None
    with pytest.raises(UnknownTopic):
        cluster.partitions("missing")
    with pytest.raises((UnknownPartition, UnknownTopic)):
        cluster.produce("events", 7, records)
    grown = cluster.add_partitions("events", 3)
    assert grown.partitions == 3
    cluster.delete_topic("events")
    assert "events" not in cluster.topics()


def test_producer_over_network(cluster):
    cluster.create_topic("p", 3)
    with Producer(cluster) as producer:
        futures = [producer.send("p", b"%d" % i, key=b"user-%d" % (i % 7)) for i in range(2000)]
        metas = [f.result(30) for f in futures]
    seen = {}
    for p in range(3):
        offset = 0
        while offset < cluster.latest_offset("p", p):
            batch = cluster.fetch("p", p, offset)
            for m in batch:
                seen[(p, m.offset)] = m.value
            offset = batch[-1].offset + 1
    assert len(seen) == 2000
    assert all(seen[(m.partition, m.offset)] == b"%d" % i for i, m in enumerate(metas))


def test_marshaler_over_network(cluster):
    cluster.create_topic("work", 2)
    with Marshaler(cluster, "client-a", "group", heartbeat_interval=5.0, coordination_partitions=4) as marshaler:
        description = cluster.describe_topic(COORDINATION_TOPIC)
        assert description.config["message.timestamp.type"] == "LogAppendTime"
        written = direct.claim_partition(marshaler, "work", 0)
        verdict = direct.wait_verdict(marshaler, written, timeout=10)
        assert verdict is not None and verdict.accepted
        assert marshaler.holder("work", 0) == marshaler.identity


def test_marshaler_refuses_create_time_topic(cluster):
    cluster.create_topic(COORDINATION_TOPIC, 2)  # CreateTime: wrong
    with pytest.raises(CoordinationTopicError):
        Marshaler(cluster, "c", "g", heartbeat_interval=5.0)


def _cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "logmarshal", *args], input=stdin, capture_output=True, text=True,
        timeout=60,
    )


def test_cli_with_bootstrap(broker, tmp_path):
    bootstrap = ["--bootstrap", broker.bootstrap]
    assert _cli(*bootstrap, "topic", "create", "cli", "-p", "2").returncode == 0
    produced = _cli(*bootstrap, "produce", "cli", "--partition", "1", "--key-separator", ":",
                    stdin="a:1\nb:2\n")
    assert produced.returncode == 0, produced.stderr
    read = _cli(*bootstrap, "--json", "read", "cli", "-p", "1")
    assert [json.loads(line)["value"] for line in read.stdout.splitlines()] == ["1", "2"]
    both = _cli(*bootstrap, "--data-dir", str(tmp_path), "topic", "list")
    assert both.returncode == 1 and "exclude each other" in both.stderr
    missing = _cli(*bootstrap, "topic", "describe", "nope")
    assert missing.returncode == 1 and "unknown topic" in missing.stderr
