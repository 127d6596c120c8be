"""What an idle member costs (docs/architecture.md, "Consumer core": a member's cost grows with the
records it handles, never with the partitions it holds idle): its heartbeats go out in
passes, one write per coordination partition, and a Tick with nothing due does nothing."""

from __future__ import annotations

import time
from typing import Any

from logmarshal import EmbeddedCluster, Marshaler
from logmarshal._coordlog import COORDINATION_TOPIC
from logmarshal.consumer import Consumer
from rationalizer import Heartbeat, MemberHeartbeat, decode

from ..consumer_world import wait_until


class _CountingWrites:
    """The cluster, counting what each coordination write carries: a record counts one, a
    MemberHeartbeat (version 7) its entries; ``beats`` and ``entries`` count the heartbeat
    records and the partitions they carried."""

    def __init__(self, inner: EmbeddedCluster) -> None:
        self._inner = inner
        self.writes: list[int] = []
        self.beats: list[int] = []
        self.entries: list[int] = []

    def produce(self, topic: str, partition: int, records: Any, **kw: Any) -> Any:
        if topic == COORDINATION_TOPIC:
            msgs = [decode(r.key, r.value) for r in records]
            beats = [m for m in msgs if isinstance(m, Heartbeat | MemberHeartbeat)]
            carried = sum(len(getattr(m, "entries", (m,))) for m in beats)
            self.writes.append(len(msgs) - len(beats) + carried)
            self.beats.append(len(beats))
            self.entries.append(carried)
        return self._inner.produce(topic, partition, records, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_heartbeats_go_out_in_passes(tmp_path) -> None:
    with EmbeddedCluster(tmp_path / "data") as inner:
        inner.create_topic("t", 32)
        cluster = _CountingWrites(inner)
        marshaler = Marshaler(cluster, "m", "g", 0.4)  # type: ignore[arg-type]
        consumer = Consumer(marshaler, "t", rebalance="none", greedy=True)
        try:
            wait_until(lambda: len(consumer.claims()) == 32, timeout=10, what="32 claims")
            time.sleep(1.0)  # passes in step
            cluster.writes.clear()
            time.sleep(2.0)
            writes = list(cluster.writes)
        finally:
            consumer.close()
            marshaler.close()
    # 32 heartbeats every 0.26 s over 8 coordination partitions (and an announcement every
    # HB/3): one record a write would be ~135 writes; passes put ~4 in each
    assert writes and sum(writes) / len(writes) >= 2, writes
    # version 7: a pass's heartbeats of a coordination partition are one MemberHeartbeat
    # (4 partitions each here; a Heartbeat each would be 1)
    assert sum(cluster.entries) >= 3 * sum(cluster.beats) > 0, (cluster.entries, cluster.beats)
