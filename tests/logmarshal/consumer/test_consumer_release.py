"""A release whose answer is lost is not written a second time once it has landed.

The audit of the in-process failover scenario showed a ReleasingPartition from an instance
that no longer held the partition (``release_without_claim``): the fault wrapper wrote a
member's release on close and lost the answer, the consumer looked at its replay before the
replay had reached the record, still saw itself holding the partition, and wrote the release
again (rejected NOT_HOLDER).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal.consumer import Consumer
from logmarshal.marshaler import COORDINATION_TOPIC, Marshaler
from rationalizer import Reason, ReleasingPartition, WorldState, decode

TOPIC = "events"


class LosesReleaseAnswers:
    """The embedded cluster, except that once armed a ReleasingPartition is written and then
    its answer lost, and the replay lags a little behind (as over a network)."""

    def __init__(self, cluster: EmbeddedCluster) -> None:
        self._cluster = cluster
        self.armed = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)

    def produce(self, topic: str, partition: int, records: Any, **kw: Any) -> Any:
        result = self._cluster.produce(topic, partition, records, **kw)
        if (
            self.armed.is_set()
            and topic == COORDINATION_TOPIC
            and isinstance(decode(records[0].key, records[0].value), ReleasingPartition)
        ):
            raise ConnectionError("the answer to a release was lost")
        return result

    def fetch(self, topic: str, partition: int, offset: int, **kw: Any) -> Any:
        if self.armed.is_set() and topic == COORDINATION_TOPIC:
            time.sleep(0.05)
        return self._cluster.fetch(topic, partition, offset, **kw)


def test_a_release_whose_answer_was_lost_is_written_once(tmp_path) -> None:
    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as cluster:
        cluster.create_topic(TOPIC, 1)
        cluster.produce(TOPIC, 0, [NewRecord(value=b"x", timestamp=0)] * 5)
        lossy = LosesReleaseAnswers(cluster)
        marshaler = Marshaler(lossy, "c1", "g", 0.5, fetch_wait=0.05)  # type: ignore[arg-type]
        consumer = Consumer(marshaler, TOPIC, fetch_wait=0.05)
        try:
            deadline = time.monotonic() + 5
            while not consumer.claims():
                assert time.monotonic() < deadline, "the consumer never claimed the partition"
                time.sleep(0.01)
            lossy.armed.set()
            consumer.close()
        finally:
            marshaler.close()

        records = cluster.fetch(COORDINATION_TOPIC, marshaler.coordination_partition(TOPIC, 0), 0)
        world = WorldState()
        releases = []
        for r in records:
            verdict = world.apply(r.offset, r.timestamp, r.key, r.value)
            if isinstance(decode(r.key, r.value), ReleasingPartition):
                releases.append(verdict)
        assert len(releases) == 1, releases
        assert releases[0].accepted
        assert not any(v.reason is Reason.NOT_HOLDER for v in releases)
        assert world.holder("g", TOPIC, 0) is None
