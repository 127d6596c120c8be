"""A coordination topic that Kafka's brokers do not all know yet.

Right after ``CreateTopics`` each broker of a Kafka cluster learns the new topic's metadata
on its own: for a moment a broker asked for a partition's offsets answers "unknown topic or
partition". On a 3-node Kafka a member started beside another one died of it
(``UnknownPartition("topic '__marshal' has no partition 0")`` from the describe that
validates ``__marshal``), and a consumer whose first look at the log's end failed kept its
driver thread stopped for good. Here an embedded cluster answers the same way for the first
few offset and describe calls of each coordination topic's partition.
"""

from __future__ import annotations

import threading
from collections import Counter

from logmarshal import EmbeddedCluster
from logmarshal._coordlog import COORDINATION_TOPIC, SNAPSHOT_TOPIC, ensure_coordination_topic
from logmarshal.consumer import Consumer
from logmarshal.marshaler import Marshaler
from storage._errors import UnknownPartition

from .consumer_world import TOPIC, drain, produce

#: how many times each call on each coordination partition fails before it answers
FAILURES = 3


class JustCreated:
    """``cluster``, but the offsets and descriptions of the coordination topics are unknown
    for the first ``FAILURES`` calls of each (operation, topic, partition)."""

    _LAGGING = ("describe_topic", "earliest_offset", "latest_offset", "log_bounds")

    def __init__(self, cluster: EmbeddedCluster) -> None:
        self._cluster = cluster
        self._lock = threading.Lock()
        self.failed: Counter[tuple[str, str, int]] = Counter()

    def __getattr__(self, name: str):
        inner = getattr(self._cluster, name)
        if name not in self._LAGGING:
            return inner

        def call(topic: str, *args, **kwargs):
            if topic in (COORDINATION_TOPIC, SNAPSHOT_TOPIC):
                partition = args[0] if args else 0
                key = (name, topic, partition)
                with self._lock:
                    if self.failed[key] < FAILURES:
                        self.failed[key] += 1
                        raise UnknownPartition(topic, partition)
            return inner(topic, *args, **kwargs)

        return call


def test_members_start_while_the_coordination_topic_is_unknown_to_some_brokers(tmp_path):
    with EmbeddedCluster(tmp_path / "c") as embedded:
        embedded.create_topic(TOPIC, 2)
        produce(embedded, 0, 5)
        produce(embedded, 1, 5)
        ensure_coordination_topic(embedded, 8)  # another member created it a moment ago
        cluster = JustCreated(embedded)
        marshaler = Marshaler(cluster, "m", "g", 0.2)  # the describe that validates __marshal
        try:
            with Consumer(marshaler, TOPIC, auto_offset_reset="earliest") as consumer:
                got = drain(consumer, 10, timeout=15)
            assert sorted((m.partition, m.offset) for m in got) == [
                (p, o) for p in (0, 1) for o in range(5)
            ]
        finally:
            marshaler.close()
    # the faults were met where they hurt: validating __marshal, and the consumer's first
    # look at the coordination log's end
    assert cluster.failed[("describe_topic", COORDINATION_TOPIC, 0)] == FAILURES
    assert any(op == "latest_offset" and t == COORDINATION_TOPIC for op, t, _ in cluster.failed)
