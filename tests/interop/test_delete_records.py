"""DeleteRecords (Kafka API key 21) against our broker, with confluent-kafka's and
kafka-python's admin clients and with NetworkCluster (which the Marshaler truncates with)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from logmarshal import Marshaler, connect
from logmarshal import _direct as direct
from logmarshal._coordlog import COORDINATION_TOPIC, SNAPSHOT_TOPIC
from logmarshal.errors import OffsetOutOfRange
from storage import NewRecord

SMALL = {"segment.bytes": "2048", "retention.ms": "-1"}


@pytest.fixture
def cluster(broker):
    with connect(bootstrap=broker.bootstrap) as opened:
        yield opened


@pytest.fixture
def filled(cluster, broker):
    """The network cluster, and a way to fill a topic and see its segments on disk."""

    def fill(topic: str, n: int) -> list[int]:
        """``n`` records in partition 1 (of 2), one batch each; the segment bases on disk."""
        cluster.create_topic(topic, 2, SMALL)
        for i in range(n):
            cluster.produce(topic, 1, [NewRecord(b"v%03d" % i, key=b"k", timestamp=1000 + i)])
        where = Path(broker.config.data_dir) / f"{topic}-1"
        return sorted(int(p.stem) for p in where.glob("*.log"))

    return cluster, fill


def test_confluent_admin_client_delete_records(filled, broker) -> None:
    filled, fill = filled
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    bases = fill("events", 200)
    assert len(bases) >= 3
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    target = bases[2] + 1
    futures = admin.delete_records([TopicPartition("events", 1, target)], request_timeout=10)
    (result,) = [f.result(10) for f in futures.values()]
    assert result.low_watermark == target  # exactly what was asked, as in Kafka
    assert filled.earliest_offset("events", 1) == target
    assert [m.offset for m in filled.fetch("events", 1, target)][:1] == [target]
    with pytest.raises(OffsetOutOfRange):  # inside a segment still on disk: gone all the same
        filled.fetch("events", 1, target - 1)
    where = Path(broker.config.data_dir) / "events-1"
    assert sorted(int(p.stem) for p in where.glob("*.log"))[0] == bases[2]
    assert filled.latest_offset("events", 1) == 200  # nothing after it was touched
    # asking for less moves nothing back
    (future,) = admin.delete_records([TopicPartition("events", 1, 3)], request_timeout=10).values()
    assert future.result(10).low_watermark == target
    # beyond the high watermark, and an unknown partition: errors, nothing deleted
    for tp in (TopicPartition("events", 1, 500), TopicPartition("events", 9, 1)):
        (future,) = admin.delete_records([tp], request_timeout=10).values()
        with pytest.raises(Exception):  # noqa: B017 - librdkafka's KafkaException
            future.result(10)
    assert filled.earliest_offset("events", 1) == target
    # OFFSET_END (-1): everything, the active segment's records too (the file stays)
    (future,) = admin.delete_records([TopicPartition("events", 1, -1)], request_timeout=10).values()
    assert future.result(10).low_watermark == 200
    assert filled.earliest_offset("events", 1) == 200
    assert sorted(int(p.stem) for p in where.glob("*.log"))[0] == bases[-1]


def test_a_compacted_topic_refuses_delete_records_with_policy_violation(filled, broker) -> None:
    """As Kafka: POLICY_VIOLATION unless the topic's cleanup.policy includes delete; the
    connection and the records stay."""
    filled, _fill = filled
    from confluent_kafka import KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    filled.create_topic("compacted", 1, {"cleanup.policy": "compact"})
    for i in range(5):
        filled.produce("compacted", 0, [NewRecord(b"v%d" % i, key=b"k%d" % i, timestamp=1000)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # the policy is checked before the offset, as Kafka's leader does (-5 was
    # OFFSET_OUT_OF_RANGE here until 2026-12-04)
    for offset in (3, -1, -5):
        (future,) = admin.delete_records(
            [TopicPartition("compacted", 0, offset)], request_timeout=10
        ).values()
        with pytest.raises(KafkaException) as exc:
            future.result(10)
        assert exc.value.args[0].code() == KafkaError.POLICY_VIOLATION, offset
    assert filled.earliest_offset("compacted", 0) == 0
    assert [m.offset for m in filled.fetch("compacted", 0, 0)] == [0, 1, 2, 3, 4]


def test_kafka_python_admin_client_delete_records(filled, broker) -> None:
    filled, fill = filled
    from kafka import KafkaAdminClient, TopicPartition

    bases = fill("events", 200)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        result = admin.delete_records({TopicPartition("events", 1): bases[1] + 5})
        (meta,) = result.values()
        low = meta["low_watermark"] if isinstance(meta, dict) else meta.low_watermark
        assert low == bases[1] + 5
        assert filled.earliest_offset("events", 1) == bases[1] + 5
        assert filled.earliest_offset("events", 0) == 0
    finally:
        admin.close()


def test_network_cluster_delete_records_and_a_marshaler_restores_over_the_network(
    filled,
) -> None:
    filled, fill = filled
    bases = fill("events", 120)
    assert filled.delete_records("events", {1: bases[1]}) == {1: bases[1]}
    # a coordination log truncated behind snapshots, over the wire, end to end
    filled.create_topic(COORDINATION_TOPIC, 1, {**SMALL, "message.timestamp.type": "LogAppendTime"})
    filled.create_topic(SNAPSHOT_TOPIC, 1, SMALL)
    kw = {"coordination_partitions": 1, "fetch_wait": 0.05, "snapshot_interval": None}
    first = Marshaler(filled, "a", "g", 1.0, snapshot_records=15, **kw)
    late = None
    try:
        assert direct.wait_verdict(first, direct.claim_partition(first, "orders", 0), 10).accepted
        for i in range(60):
            assert direct.wait_verdict(first, direct.heartbeat(first, "orders", 0, i), 10).accepted
        assert first.wait_caught_up(10)
        deadline = time.monotonic() + 10
        while filled.earliest_offset(COORDINATION_TOPIC, 0) == 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        late = Marshaler(filled, "b", "g", 1.0, snapshot_records=None, **kw)
        assert late.wait_caught_up(10)
        assert late.resume_offset("orders", 0) == 60
        assert late.holder("orders", 0) == first.identity
        assert late.partitions() == first.partitions()
    finally:
        first.close()
        if late is not None:
            late.close()
